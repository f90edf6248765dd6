//! `lab holder check` on the example holders of `examples/holders/` (Java, Python): each conforms,
//! and runs under the lab's other commands with `--holder-cmd` (`lab chaos`, `lab grade`,
//! `lab run`); the Python holder's broken copies fail, each at the check that shows its flaw.

mod common;

use common::Sandbox;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The example Java holder, shaped like seed 004's client, conforms: `lab holder
/// check` passes it whole — the protocol's plain paths, every fault point, F4, F10 and F12 —,
/// F4's freeze shows every thread of the JVM in state T, its renewer among them, and `lab chaos`
/// passes with its looping form, the control exposing a violation.
#[test]
fn the_java_holder_conforms_and_its_whole_jvm_freezes() -> anyhow::Result<()> {
    if !common::example_holder_ready(
        "java",
        harness::require::Dependency::Jdbc,
        "a JDK 17+ or Debian's libpostgresql-jdbc-java is missing (scripts/ensure-java-holder.sh)",
    )? {
        return Ok(());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sb = Sandbox::new()?;
    let ev = sb.path("ev-java");
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["holder", "check", "--cmd"])
        .arg(root.join("examples/holders/java/holder.sh"))
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("HOLDER CHECK conforms: 0 finding(s)"),
        "{text}"
    );
    for id in ["F4", "F10", "F12"] {
        assert!(text.contains(&format!("ok   {id}: ")), "{id}:\n{text}");
    }
    let run = fs::read_to_string(ev.join("output.txt"))?;
    let frozen = run
        .lines()
        .find(|l| l.contains("A's renewer thread is frozen with it"))
        .unwrap_or_else(|| panic!("F4's freeze line:\n{run}"));
    let threads = frozen.matches(")=T").count();
    assert!(
        threads >= 10
            && frozen.contains("renewer(")
            && !frozen.contains(")=S")
            && !frozen.contains(")=R"),
        "every JVM thread frozen, the renewer among them ({threads}): {frozen}"
    );
    // Its looping form under chaos: every check of the fenced scopes holds, the control exposes.
    // 60 s, as CI's own chaos run: at 30 s, in a CI run whose tests took twice their usual time
    // (2026-12-05), the JVM holders made 159 operations and no pause of seed 4's fell between a
    // holder's deadline check and its control write — the control showed nothing and failed.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["chaos", "--seed", "4", "--time", "60s", "--holder-cmd"])
        .arg(root.join("examples/holders/java/holder.sh"))
        .arg("--evidence-dir")
        .arg(sb.path("chaos-java"))
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for line in [
        "ok   I2: no token was granted twice",
        "ok   I3 (fenced-scope at scope chaos-0…chaos-1)",
        "ok   durability:",
        "ok   negative control exposes: the unfenced control scope",
    ] {
        assert!(text.contains(line), "missing {line:?}:\n{text}");
    }
    sb.assert_nothing_left()
}

/// A holder of the user's, in Python (examples/holders/python/holder.py): `lab holder check`
/// passes it (the protocol's plain paths, its fault points, F4, F10, F12), the report card
/// grades it safe, and `--holder-cmd` runs F5 with it while F1, which starts no holder, says
/// skip.
#[test]
fn the_python_holder_passes_the_check_the_card_and_its_runs() -> anyhow::Result<()> {
    if !common::python_holder_ready()? {
        return Ok(());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let holder = root.join("examples/holders/python/holder.py");
    let sb = Sandbox::new()?;
    let run = |cmd: &Path, only: &str| -> anyhow::Result<(Option<i32>, String)> {
        let out = Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(["run", "--fenced-mode", "fenced-scope", "--only", only])
            .arg("--holder-cmd")
            .arg(cmd)
            .arg("--evidence-dir")
            .arg(sb.path(&format!("ev-{only}-{}", cmd.display()).replace('/', "_")))
            .env("TMPDIR", sb.path("tmp"))
            .output()?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    let check = |cmd: &Path| holder_check(&sb, cmd);
    let (code, out) = check(&holder)?;
    assert_eq!(code, Some(0), "{out}");
    for line in [
        "ok   the handshake: HELLO version=5 pid=",
        "ok   the resource logged its write: one write_attempt, accepted, token=",
        "ok   its stdin closed at the write point: exit 6 (orphaned)",
        "ok   an acquire answered late (",
        "its local deadline had passed — ACQUIRED token=1; DEADLINE_PASSED token=1 overdue_ms=",
        "ok   BEFORE_COMMIT (--wait-before-commit): has it",
        "ok   F4: ",
        "ok   F10: ",
        "ok   F12: ",
        "HOLDER CHECK conforms: 0 finding(s)",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    // Its row on the report card: safe where an experiment starts a holder, n/a elsewhere.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["grade", "--holder-cmd"])
        .arg(&holder)
        .arg("--evidence-dir")
        .arg(sb.path("grade"))
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let card = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{card}");
    assert!(
        card.contains("| yours-holder.py | safe | its holder's own | n/a | n/a | n/a | safe | n/a | n/a | n/a | safe | n/a | safe | n/a |"),
        "{card}"
    );
    let (code, out) = run(&holder, "F1,F5")?;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("SUMMARY passed=") && out.contains(" failed=0"),
        "{out}"
    );
    assert!(
        out.contains(
            "  skip F1 does not judge your holder (--holder-cmd): it starts no holder process"
        ),
        "an experiment that starts no holder says so rather than pass on the lab's client:\n{out}"
    );
    sb.assert_nothing_left()
}

/// Broken copies of the Python holder fail, each at the line that shows its flaw: one that skips
/// its local-deadline check (F10: A writes after the pause), one that writes without its token's
/// fence (F4: A's stale write accepted), one whose handshake does not parse, one that outlives
/// its stdin; one without `--wait-before-commit` is not fully checked (F12 says skip, its
/// refusal quoted): exit 1.
#[test]
fn the_python_holders_broken_copies_fail_at_the_check_that_shows_the_flaw() -> anyhow::Result<()> {
    if !common::python_holder_ready()? {
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let check = |cmd: &Path| holder_check(&sb, cmd);
    let broken_at = |name: &str, edits: &[(&str, &str)]| broken_copy(&sb, name, edits);
    let broken = |name: &str, from: &str, to: &str| broken_at(name, &[(from, to)]);
    let no_check = broken(
        "skips-its-deadline.py",
        "    if now >= deadline[0]:",
        "    if False:",
    )?;
    let (code, out) = check(&no_check)?;
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "FAIL F10: A, resumed, finds its local deadline passed by its monotonic clock and will not write",
        "FAIL an acquire answered late (",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    let unfenced = broken(
        "writes-unfenced.py",
        "    if f.mode == \"unfenced\":\n        resource.execute(PART, w)",
        "    if True:\n        resource.execute(PART, w)",
    )?;
    let (code, out) = check(&unfenced)?;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL F4: A's stale write is rejected by the resource"),
        "{out}"
    );
    // A holder without a fault point refuses its flag: the experiment that needs it says skip,
    // naming the point and quoting the refusal.
    let no_commit_point = broken_at(
        "no-commit-point.py",
        &[
            (
                "    p.add_argument(\"--wait-before-commit\", action=\"store_true\")\n",
                "",
            ),
            ("if f.wait_before_commit:", "if False:"),
        ],
    )?;
    let (code, out) = check(&no_commit_point)?;
    // A skip is not a pass: what was not judged is named, and the holder does not conform.
    for line in [
        "ok   BEFORE_COMMIT (--wait-before-commit) refused (no-commit-point.py: error: unrecognized arguments: --wait-before-commit)",
        "skip F12 not checked: F12 stops its holder at BEFORE_COMMIT (--wait-before-commit), which your holder refused",
        "HOLDER CHECK not fully checked (not judged: F12;",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    assert_eq!(code, Some(1), "{out}");
    // The protocol's plain paths, one line each: a handshake that does not parse, and a holder
    // that outlives its stdin.
    let garbled = broken(
        "garbled.py",
        "say(f\"HELLO version={VERSION} pid={os.getpid()}\")",
        "say(f\"HELLO version={VERSION} process={os.getpid()}\")",
    )?;
    let (code, out) = check(&garbled)?;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL the handshake: check-a sent a line that is not the protocol: not a protocol line (missing pid): \"HELLO version=5 process="),
        "{out}"
    );
    let lingers = broken(
        "lingers.py",
        "    if not line:\n        sys.exit(ORPHANED)",
        "    if not line:\n        time.sleep(60)\n        sys.exit(ORPHANED)",
    )?;
    let (code, out) = check(&lingers)?;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL kept running 5 s after its stdin closed at the write point (killed)"),
        "{out}"
    );
    // The failing runs kept their clusters for a look inside.
    let _ = sb.clean()?;
    sb.assert_nothing_left()
}

/// A holder that never answers is refused at its handshake, and not asked again per fault point
/// (each ask would wait out a handshake of its own: 57 s in all before).
#[test]
fn a_holder_that_never_answers_is_refused_at_its_handshake_alone() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let silent = sb.path("silent.sh");
    std::fs::write(&silent, "#!/bin/sh\nexec sleep 120\n")?;
    std::fs::set_permissions(&silent, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["holder", "check", "--cmd"])
        .arg(&silent)
        .arg("--evidence-dir")
        .arg(sb.path("hc-silent"))
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL the handshake: "), "{text}");
    assert!(
        !text.contains("BEFORE_CHECK"),
        "asked about its fault points:\n{text}"
    );
    sb.assert_nothing_left()
}

/// `lab holder check --cmd CMD` in `sb`: its exit code and stdout.
fn holder_check(sb: &Sandbox, cmd: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["holder", "check", "--cmd"])
        .arg(cmd)
        .arg("--evidence-dir")
        .arg(sb.path(&format!("hc-{}", cmd.display()).replace('/', "_")))
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// A copy of the example Python holder named `name` in `sb`, each `(from, to)` of `edits`
/// made (each `from` found once).
fn broken_copy(sb: &Sandbox, name: &str, edits: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut copy = fs::read_to_string(root.join("examples/holders/python/holder.py"))?;
    for (from, to) in edits {
        assert_eq!(copy.matches(from).count(), 1, "{from:?} once in holder.py");
        copy = copy.replace(from, to);
    }
    let path = sb.path(name);
    fs::write(&path, copy)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// The local deadline judged without a fault point: `lab holder check`'s late
/// acquire — the lease table locked while the holder's acquire is sent, let go the TTL later —
/// judges a holder that refuses `--wait-before-check`, where F10 says skip. With its deadline
/// check it conforms, F10's skip named in the verdict; without it, it does not (it conformed
/// before, F10's skip an `ok`). A deadline read from the acquire's answer passes F10's freeze
/// past the TTL and fails the late acquire.
#[test]
fn a_holder_without_a_stop_before_its_check_is_judged_by_a_late_acquire() -> anyhow::Result<()> {
    if !common::python_holder_ready()? {
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let check = |cmd: &Path| holder_check(&sb, cmd);
    let broken_at = |name: &str, edits: &[(&str, &str)]| broken_copy(&sb, name, edits);
    let broken = |name: &str, from: &str, to: &str| broken_at(name, &[(from, to)]);
    // Without --wait-before-check, with its deadline check: conforms.
    let no_check_point = [
        (
            "    p.add_argument(\"--wait-before-check\", action=\"store_true\")\n",
            "",
        ),
        ("    if f.wait_before_check:", "    if False:"),
    ];
    let (code, out) = check(&broken_at("no-check-point.py", &no_check_point)?)?;
    for line in [
        "skip F10 not checked: F10 stops its holder at BEFORE_CHECK (--wait-before-check), which your holder refused",
        "ok   an acquire answered late (",
        "HOLDER CHECK conforms: 0 finding(s) of 20 line(s) (F10 said skip; what it judges, the local deadline, was judged by the late acquire above)",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    assert_eq!(code, Some(0), "{out}");
    let mut edits = no_check_point.to_vec();
    edits.push(("    if now >= deadline[0]:", "    if False:"));
    let (code, out) = check(&broken_at("no-check-point-nor-check.py", &edits)?)?;
    for line in [
        "skip F10 not checked:",
        "FAIL an acquire answered late (1",
        "it went on to its write point; it said ACQUIRED token=1; AT_WRITE_POINT token=1",
        "1 write_attempt row(s) of check-late",
        "HOLDER CHECK does not conform: 1 finding(s)",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    assert_eq!(code, Some(1), "{out}");
    // A local deadline read from the acquire's answer: F10's freeze past the TTL still stops it,
    // the late acquire does not.
    let (code, out) = check(&broken(
        "deadline-after-the-answer.py",
        "    deadline = [sent + span]",
        "    deadline = [time.monotonic() + span]",
    )?)?;
    for line in [
        "ok   F10: ",
        "FAIL an acquire answered late (",
        "HOLDER CHECK does not conform: 1 finding(s)",
    ] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    assert_eq!(code, Some(1), "{out}");
    // The failing runs kept their clusters for a look inside.
    let _ = sb.clean()?;
    sb.assert_nothing_left()
}
