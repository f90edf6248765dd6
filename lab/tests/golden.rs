//! The golden test: a whole run's text output, with what changes from run to run masked (times,
//! pids, durations, paths), must equal the committed reference `tests/golden/output.txt`. A
//! changed check line — wording or value — fails here and becomes a reviewed change:
//!
//! ```sh
//! UPDATE_GOLDEN=1 cargo test -p lab --test golden   # then read `git diff` before committing
//! ```
//!
//! The same run's other evidence files are checked for shape: JUnit XML that parses with one
//! testcase per check, a JSON line per event, the environment record, the report and diagrams.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use regex::Regex;

/// What varies between two correct runs, and what it is replaced with.
const MASKS: &[(&str, &str)] = &[
    // The F8 note quotes server-log lines: timestamps, pids, WAL positions, CPU times.
    (r"server log: .*", "server log: <lines>"),
    (
        r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?(\+\d{2}(:\d{2})?)?",
        "<TIME>",
    ),
    (r"/tmp/fencing-lab-\w+", "<DIR>"),
    (r"pid[ =]\d+", "pid <PID>"),
    (r"\((\d+)\)=", "(<TID>)="),
    (r"backend[ =]+\d+", "backend <PID>"),
    (
        r"pg_blocking_pids\(\d+\) = \[[\d, ]*\]",
        "pg_blocking_pids(<PID>) = [<PIDS>]",
    ),
    (r"postmaster \d+ → \d+", "postmaster <PID> → <PID>"),
    (r"\(\d+ ms left\)", "(<N> ms left)"),
    (r"after a wait of \d+ ms", "after a wait of <N> ms"),
    (r"expired after \d+ ms", "expired after <N> ms"),
    (r"\d+ ms after A was frozen", "<N> ms after A was frozen"),
    (r"read \d+ ms later", "read <N> ms later"),
    // F10: the holder's own clock readings, and how long A stayed frozen.
    (r"deadline_left_ms=\d+", "deadline_left_ms=<N>"),
    (r"frozen for \d+ ms", "frozen for <N> ms"),
    (r"deadline passed by \d+ ms", "deadline passed by <N> ms"),
    (r"\d+ renewals, \d+ ok", "<N> renewals, <N> ok"),
    (r"peak \d+ of", "peak <N> of"),
    // F3: how soon every contender waited at the server, and what the server then ran at once.
    (
        r"waiting at once after \d+ ms",
        "waiting at once after <N> ms",
    ),
    (r"let go, \d+ transactions", "let go, <N> transactions"),
    (r"µs\), \d+ executing", "µs), <N> executing"),
    // F3's last-moments round: how much of the lease was left, and how many statements the
    // server judged before its expiry (all, unless the machine stalled; the verdict stays).
    (
        r"\d+ of (\d+) statements judged before",
        "<N> of $1 statements judged before",
    ),
    (
        r"\d+ ms left when the round began",
        "<N> ms left when the round began",
    ),
    (r"spread over \d+ µs", "spread over <N> µs"),
    // F2: T's age by the lab's monotonic clock and by the database (the verdict stays).
    (
        r"expected -?[\d.]+ to -?[\d.]+ ms, actual -?[\d.]+ ms",
        "expected <N> to <N> ms, actual <N> ms",
    ),
    // F2: how close holder-c's polled acquires came to expires_at on either side.
    (
        r"\d+ refused, the last at expires_at [-+][\d.]+ ms; granted at expires_at [-+][\d.]+ ms",
        "<N> refused, the last at expires_at <N> ms; granted at expires_at <N> ms",
    ),
    // F8: the lease's validity around the crash and the downtime, in ms.
    (r"-?\d+ ms of validity left", "<N> ms of validity left"),
    (
        r"validity -?\d+ ms before the crash → -?\d+ ms after recovery: -?\d+ ms lost",
        "validity <N> ms before the crash → <N> ms after recovery: <N> ms lost",
    ),
    (r"downtime \d+ ms by", "downtime <N> ms by"),
    // F12: the killed holder's process group, its backends, its transaction id, and how soon
    // the server noticed; when its lease expired.
    (r"pgid \d+", "pgid <PID>"),
    (r"\[\d+(, \d+)*\]", "[<PIDS>]"),
    (r"xid[ =]\d+", "xid <XID>"),
    (r"gone \d+ ms after the kill", "gone <N> ms after the kill"),
    (r"\d+ ms after A was killed", "<N> ms after A was killed"),
    // F14: the standby's directories, WAL positions, and how long promotion and the cut took.
    (r"\S*/fencing-lab-\w+", "<DIR>"),
    (r"\b[0-9A-F]{1,8}/[0-9A-F]{4,8}\b", "<LSN>"),
    (r"promoted in \d+ ms", "promoted in <N> ms"),
    (r"unanswered after \d+ ms", "unanswered after <N> ms"),
    (r"waited \d+ ms — the price", "waited <N> ms — the price"),
    // S1: how often B asked over the bound, A's session's idle times, how soon B got the lock.
    (
        r"\d+ asks, \d+ refused, over \d+ ms of A frozen",
        "<N> asks, <N> refused, over <N> ms of A frozen",
    ),
    (
        r"expires [\d.]+ \(idle since [\d.]+, \+ (\d+) ms\)",
        "expires <T> (idle since <T>, + $1 ms)",
    ),
    (
        r"\d+ ms after A's release was reported",
        "<N> ms after A's release was reported",
    ),
    // S2: how soon B got the lock after the crash; the session A's client quotes.
    (r"\d+ ms after the crash", "<N> ms after the crash"),
    (r"started=[\d.]+", "started=<T>"),
    // S4: when the server ended A's idle transaction.
    (
        r"gone \d+ ms after A stood still",
        "gone <N> ms after A stood still",
    ),
    // S4: the words A's refused write gets — the server's FATAL line, or a broken pipe when the
    // server closed the socket before the client read it (either is the refusal).
    (r"\(refused: .*\)$", "(refused: <the driver's words>)"),
    // S2: what A's client heard of its session ended by the crash — the server's last words or a
    // broken pipe, whichever reached it first.
    (
        r"its client said: .*; exit",
        "its client said: <the driver's words>; exit",
    ),
];

fn normalise(text: &str) -> String {
    let masks: Vec<(Regex, &str)> = MASKS
        .iter()
        .map(|(re, to)| (Regex::new(re).expect("mask regex"), *to))
        .collect();
    text.lines()
        .filter(|l| !l.starts_with("# "))
        .map(|line| {
            masks.iter().fold(line.to_owned(), |l, (re, to)| {
                re.replace_all(&l, *to).into_owned()
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn masks_hide_only_what_varies() {
    let line = "  ok   A (pid 8858) acquires the lease, token=1 (expected=ACQUIRED token=1, actual=ACQUIRED token=1)";
    assert_eq!(
        normalise(line),
        "  ok   A (pid <PID>) acquires the lease, token=1 (expected=ACQUIRED token=1, actual=ACQUIRED token=1)\n"
    );
    // Values that are checked stay: a change in them must show.
    assert_ne!(
        normalise("  ok   fence_floor (expected=2, actual=2)"),
        normalise("  ok   fence_floor (expected=2, actual=1)")
    );
    assert_ne!(
        normalise("(waited 3000 ms, TTL=1500 ms)"),
        normalise("(waited 3001 ms, TTL=1500 ms)")
    );
    // F10's clock readings are masked; its verdicts and tokens are not.
    assert_eq!(
        normalise(
            "  note A was frozen for 1534 ms; its check found the local deadline passed by 348 ms"
        ),
        "  note A was frozen for <N> ms; its check found the local deadline passed by <N> ms\n"
    );
    assert_ne!(
        normalise("  ok   A stops (BEFORE_CHECK token=1 deadline_left_ms=1194)"),
        normalise("  ok   A stops (BEFORE_CHECK token=2 deadline_left_ms=1194)")
    );
    // F14's WAL positions are masked, a token next to them is not.
    assert_eq!(
        normalise(
            "(ACQUIRED token=2; A's commit lies in the primary's WAL (0/3000200, 0/30002C0])"
        ),
        "(ACQUIRED token=2; A's commit lies in the primary's WAL (<LSN>, <LSN>])\n"
    );
    // A measured figure is masked; the verdict in front of it is not.
    let f8 = "  ok   holder-a still holds it (24828 ms of validity left at 2026-11-30 05:52:02.331001+00)";
    assert_eq!(
        normalise(f8),
        "  ok   holder-a still holds it (<N> ms of validity left at <TIME>)\n"
    );
    assert_ne!(normalise(f8), normalise(&f8.replacen("ok  ", "FAIL", 1)));
    assert_eq!(
        normalise("(expected 510.2 to 517.6 ms, actual 517.3 ms)"),
        "(expected <N> to <N> ms, actual <N> ms)\n"
    );
}

#[test]
fn a_full_run_says_what_the_reference_says() -> anyhow::Result<()> {
    let sandbox = tempfile::tempdir()?;
    fs::set_permissions(sandbox.path(), fs::Permissions::from_mode(0o755))?;
    let ev = sandbox.path().join("ev");
    // Every experiment that needs nothing beyond the embedded PostgreSQL (the U-series depends
    // on the build's features and on MariaDB being there), from the registry.
    let only: Vec<&str> = scenarios::ALL
        .iter()
        .map(|s| s.spec())
        .filter(|s| s.needs == scenarios::Needs::Nothing)
        .map(|s| s.id)
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        // The lock services' cases (F4-redis, …) depend on the build's features and a Docker
        // engine: the scenario tests run them.
        .args([
            "run",
            "--again-on",
            "none",
            "--only",
            &only.join(","),
            "--evidence-dir",
        ])
        .arg(&ev)
        .env("TMPDIR", sandbox.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("FAIL"))
        .collect();
    assert_eq!(
        out.status.code(),
        Some(0),
        "failed checks:\n{}\n{}",
        failed.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );

    let actual = normalise(&fs::read_to_string(ev.join("output.txt"))?);
    let golden_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/output.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(golden_path.parent().expect("parent"))?;
        fs::write(&golden_path, &actual)?;
    }
    let golden = fs::read_to_string(&golden_path)?;
    similar_asserts::assert_eq!(golden: golden, run: actual, "the text output changed; if on purpose, UPDATE_GOLDEN=1 and review the diff");

    check_evidence_files(&ev, &actual)
}

/// The other evidence files of the same run, checked for shape.
fn check_evidence_files(ev: &Path, text: &str) -> anyhow::Result<()> {
    let checks = text
        .lines()
        .filter(|l| l.starts_with("  ok ") || l.starts_with("  FAIL "))
        .count();

    // JUnit: parses, one <testcase> per check, no failure.
    let xml = fs::read_to_string(ev.join("junit.xml"))?;
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut testcases, mut failures, mut root) = (0, 0, None);
    loop {
        match reader.read_event()? {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec())?;
                root.get_or_insert_with(|| name.clone());
                testcases += usize::from(name == "testcase");
                failures += usize::from(name == "failure" || name == "error");
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(root.as_deref(), Some("testsuites"));
    assert_eq!((testcases, failures), (checks, 0));

    // The event log: every line is JSON; as many checks as the text shows; steps present.
    let mut json_checks = 0;
    let mut steps = 0;
    for line in fs::read_to_string(ev.join("events.jsonl"))?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        json_checks += usize::from(v["event"] == "check");
        steps += usize::from(v["event"] == "step");
    }
    assert_eq!(json_checks, checks);
    assert!(steps > 20, "{steps} timeline steps");

    let env: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ev.join("environment.json"))?)?;
    for key in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_level",
        "default_transaction_isolation",
        "parameters",
        "git_revision",
        "command_line",
        "kernel",
        "date",
    ] {
        assert!(env[key].is_string(), "environment.json lacks {key}: {env}");
    }

    // Every case whose timeline has two actors or more gets a picture and a diagram; which
    // cases those are is read from the event log, not listed here.
    let html = fs::read_to_string(ev.join("report.html"))?;
    let mut actors: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in fs::read_to_string(ev.join("events.jsonl"))?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["event"] == "step" && v["actor"] != "lab" {
            actors
                .entry(v["case"].as_str().unwrap_or_default().to_owned())
                .or_default()
                .insert(v["actor"].as_str().unwrap_or_default().to_owned());
        }
    }
    let pictured: Vec<&String> = actors
        .iter()
        .filter(|(_, a)| a.len() >= 2)
        .map(|(case, _)| case)
        .collect();
    assert!(pictured.len() >= 4, "multi-actor cases: {pictured:?}");
    for case in pictured {
        let at = html
            .find(&format!("<h2 id=\"{case}\""))
            .unwrap_or_else(|| panic!("no {case} in report.html"));
        let next = html[at..].find("<pre>").expect("lines after the picture") + at;
        assert!(
            html[at..next].contains("<svg"),
            "{case} has no timeline picture"
        );
        let mmd = fs::read_to_string(ev.join(format!("timeline-{case}.mmd")))?;
        assert!(mmd.contains("sequenceDiagram"), "{case}: {mmd}");
    }
    assert!(!html.contains("<script"), "report.html needs no script");
    assert!(fs::read_to_string(ev.join("LIMITS.md"))?.contains("do not prove"));
    Ok(())
}
