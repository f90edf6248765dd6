//! `lab run` as a user meets it: bad input gets one clear line and exit status 2 and leaves
//! nothing behind; a run writes its evidence and leaves no cluster, process or temp dir behind —
//! a kept cluster stays on disk, stopped; a failing run keeps only its failing experiments'
//! servers; a killed lab's leftovers are removed by the next run; a reader that goes away ends
//! the terminal copy, not the run; a profile of one's own (`--sut`) is run and judged.
//!
//! Each test runs the lab in a [`Sandbox`] of its own (`common/mod.rs`), so "nothing left behind"
//! is checked by the lab's own markers, never by process name.

mod common;

use common::{poll, processes_mentioning, stderr, Sandbox};
#[cfg(feature = "mariadb")]
use harness::require::{self, Dependency};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Server binaries too old to support, in a directory of `sb`'s: a postgres that says it is
/// 14.9.
fn too_old_postgres(sb: &Sandbox) -> anyhow::Result<std::path::PathBuf> {
    let old_bindir = sb.path("pg14");
    fs::create_dir(&old_bindir)?;
    fs::write(old_bindir.join("initdb"), "#!/bin/sh\nexit 1\n")?;
    fs::write(
        old_bindir.join("postgres"),
        "#!/bin/sh\necho 'postgres (PostgreSQL) 14.9'\n",
    )?;
    for bin in ["initdb", "postgres"] {
        fs::set_permissions(old_bindir.join(bin), fs::Permissions::from_mode(0o755))?;
    }
    Ok(old_bindir)
}

#[test]
fn a_missing_holder_binary_is_one_clear_line_exit_2() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    // The holder binary missing (pointed elsewhere), with otherwise good arguments.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--evidence-dir", ev.to_str().unwrap()])
        .env("TMPDIR", sb.path("tmp"))
        .env("LAB_HOLDER_BIN", sb.path("no-such-holder"))
        .output()?;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("LAB_HOLDER_BIN"), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).lines().count(),
        1,
        "one line: {}",
        stderr(&out)
    );
    assert!(!ev.exists(), "the evidence dir was made");
    sb.assert_nothing_left()
}

#[test]
fn bad_input_is_one_clear_line_exit_2_and_leaves_nothing() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let ev = ev.to_str().unwrap();
    let a_file = sb.path("a-file");
    fs::write(&a_file, "")?;
    // A port in use, for --tcp.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let busy_port = listener.local_addr()?.port().to_string();
    let old_bindir = too_old_postgres(&sb)?;
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--only", "F99"], "unknown scenario id \"F99\""),
        (&["run", "--only", ""], "at least one scenario id"),
        (&["run", "--only", "F1,F1"], "appears twice"),
        (
            &["run", "--margin-ms", "1500"],
            "--margin-ms 1500 must be smaller than --ttl-ms 1500",
        ),
        (&["run", "--ttl-ms", "0"], "must be greater than 0"),
        (&["run", "--renew-ms", "-5"], "--renew-ms"),
        (&["run", "--port", "0"], "--port"),
        (&["run", "--port", "65536"], "--port"),
        (
            &["run", "--tcp", "--port", busy_port.as_str()],
            "cannot listen on 127.0.0.1",
        ),
        (
            &["run", "--pg-bindir", old_bindir.to_str().unwrap()],
            "PostgreSQL 14.9",
        ),
        (
            &["run", "--contenders", "1"],
            "--contenders 1 is out of range",
        ),
        (
            &["run", "--renew-ms", "1400"],
            "--renew-ms 1400 must be smaller",
        ),
        (
            &["run", "--pg-bindir", "/nonexistent"],
            "no initdb and postgres executables there",
        ),
        (
            &["run", "--evidence-dir", a_file.to_str().unwrap()],
            "is not a directory",
        ),
        (
            &["run", "--evidence-dir", "/proc/no-such/ev"],
            "cannot be made",
        ),
        (
            &["run", "--fenced-mode", "sut"],
            "--fenced-mode sut: name the profile with --sut",
        ),
        (
            &["run", "--sut", "no-such-profile"],
            "--sut no-such-profile: file: no such file, and no built-in profile of that name",
        ),
        (
            &["run", "--step", "--backend", "containers"],
            "--step runs on the embedded cluster",
        ),
    ];
    for (args, expect) in cases {
        let mut args = args.to_vec();
        if !args.contains(&"--evidence-dir") {
            args.extend(["--evidence-dir", ev]);
        }
        let out = sb.lab(&args)?;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(expect),
            "{args:?}: expected {expect:?} in:\n{err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, not:\n{err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
        assert!(
            !Path::new(ev).exists(),
            "{args:?}: the evidence dir was made"
        );
    }
    sb.assert_nothing_left()
}

/// The summary line of a passing `lab run --only F1` on the lab's own lease table: P0's checks and
/// F1's, as their specs declare them (never a number written here, which F1's next check would
/// make wrong).
fn only_f1_passes() -> String {
    use scenarios::Scenario as _;
    let p0 = scenarios::P0 {
        separate_hosts: false,
    };
    let f1 = scenarios::ALL
        .iter()
        .find(|s| s.spec().id == "F1")
        .expect("F1 is in the registry");
    let declared =
        [p0.spec(), f1.spec()].map(|spec| spec.checks_in(fencing::lease::StoreId::Postgres, false));
    format!(
        "SUMMARY passed={} failed=0\n",
        declared.iter().sum::<usize>()
    )
}

#[test]
fn a_passing_run_writes_the_evidence_and_removes_its_cluster() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = sb.lab(&[
        "run",
        "--only",
        "F1",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = fs::read_to_string(ev.join("output.txt"))?;
    assert_eq!(
        text,
        String::from_utf8_lossy(&out.stdout),
        "output.txt is what the terminal showed"
    );
    assert!(text.lines().any(|l| l.starts_with("CASE F1 ::")), "{text}");
    assert!(text.ends_with(&only_f1_passes()), "{text}");
    let events = fs::read_to_string(ev.join("events.jsonl"))?;
    assert!(
        events.lines().count() > 11 && events.contains("\"event\":\"step\""),
        "{events}"
    );
    sb.assert_nothing_left()
}

#[test]
fn a_kept_cluster_stays_on_disk_stopped_and_named() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = sb.lab(&[
        "run",
        "--only",
        "F1",
        "--keep",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let kept: Vec<_> = fs::read_dir(sb.path("tmp"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        stderr(&out).contains(&format!("kept the cluster at {}", kept[0].display())),
        "{}",
        stderr(&out)
    );
    assert!(kept[0].join("server.log").is_file() && kept[0].join("data/PG_VERSION").is_file());
    assert_eq!(
        processes_mentioning(&sb.path("tmp")),
        Vec::<String>::new(),
        "the kept cluster is stopped"
    );
    fs::remove_dir_all(&kept[0])?;
    Ok(())
}

/// A failing run keeps only the servers of the experiments that failed: with two jobs, F3 (which
/// passes: it judges the lease alone) and F4 (which fails with the floor check planted away), one
/// directory stays — its size and `lab clean` said in the closing line.
#[test]
fn a_failing_run_keeps_only_the_failing_experiments_servers() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let file = sb.path("stale-write.toml");
    let out = sb.lab(&["exercise", "stale-write", "--out", file.to_str().unwrap()])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = sb.path("ev");
    let out = sb.lab(&[
        "run",
        "--only",
        "F3,F4",
        "--jobs",
        "2",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let kept: Vec<_> = fs::read_dir(sb.path("tmp"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}\n{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kept 1 directory of the failing experiments' servers (")
            && err.contains("MB) for a look inside; `lab clean` removes them"),
        "{err}"
    );
    fs::remove_dir_all(&kept[0])?;
    Ok(())
}

/// What failing runs keep stays within a bound: a failing run keeps its own servers and the
/// directories of the last two runs before it; older runs' kept directories go, named, the
/// space they took said. Four earlier runs' kept directories (their labs gone) are planted, one
/// hour apart; the two oldest are removed, the two newest stay.
#[test]
fn a_failing_run_removes_what_runs_before_the_last_two_kept() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let file = sb.path("stale-write.toml");
    let out = sb.lab(&["exercise", "stale-write", "--out", file.to_str().unwrap()])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tmp = sb.path("tmp");
    fs::create_dir_all(&tmp)?;
    let now = std::time::SystemTime::now();
    for run in 1..=4u64 {
        let dir = tmp.join(format!("fencing-lab-earlier{run}"));
        fs::create_dir_all(&dir)?;
        // A pid no process has (above pid_max's ceiling): that lab is gone.
        fs::write(dir.join("lab.owner"), format!("{} 1", 4_194_304 + run))?;
        fs::write(dir.join("blob"), vec![0u8; 1 << 20])?;
        let kept = fs::File::create(dir.join("KEPT"))?;
        kept.set_modified(now - std::time::Duration::from_secs(3600 * (5 - run)))?;
    }
    let ev = sb.path("ev");
    let out = sb.lab(&[
        "run",
        "--only",
        "F4",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let left: Vec<String> = fs::read_dir(&tmp)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fencing-lab-earlier"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        left,
        ["fencing-lab-earlier3", "fencing-lab-earlier4"],
        "{err}"
    );
    assert!(
        err.contains("lab: removed 2 directories kept by failing runs before the last 2 (")
            && err.contains("fencing-lab-earlier1")
            && err.contains("(LAB_KEEP_RUNS=2)")
            && err.contains("take ")
            && err.contains(" MB in all"),
        "{err}"
    );
    Ok(())
}

/// A kept run keeps every server it started: the MariaDB directory of the U-series too, named,
/// with its data and log, its server stopped.
#[cfg(feature = "mariadb")]
#[test]
fn a_kept_run_keeps_the_mariadb_directory_too() -> anyhow::Result<()> {
    if let Err(why) = harness::server::mariadb::MariaBinaries::locate() {
        // U1 says `skip` without MariaDB (scenarios' own test checks that); nothing to keep.
        require::skip(Dependency::MariaDb, require::this_test(), why)?;
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = sb.lab(&[
        "run",
        "--only",
        "U1",
        "--keep",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let kept: Vec<_> = fs::read_dir(sb.path("tmp"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(
        kept.len(),
        2,
        "the cluster and the MariaDB directory: {kept:?}"
    );
    let maria = kept
        .iter()
        .find(|d| d.join("mariadbd.pid").exists() || d.join("data/mysql").is_dir())
        .expect("a MariaDB directory among the kept");
    assert!(
        stderr(&out).contains(&format!(
            "kept the MariaDB directory at {}",
            maria.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(maria.join("KEPT").is_file() && maria.join("server.log").is_file());
    assert_eq!(
        processes_mentioning(&sb.path("tmp")),
        Vec::<String>::new(),
        "both kept servers are stopped"
    );
    for dir in kept {
        fs::remove_dir_all(dir)?;
    }
    Ok(())
}

/// The pids of live processes whose command line mentions `path` and `marker`.
fn pids_mentioning(path: &Path, marker: &str) -> Vec<i32> {
    let needle = path.to_string_lossy().into_owned();
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = String::from_utf8_lossy(&fs::read(e.path().join("cmdline")).ok()?)
                .replace('\0', " ");
            (cmd.contains(&needle) && cmd.contains(marker)).then_some(pid)
        })
        .collect()
}

fn state_of(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn killing_the_lab_while_a_holder_is_frozen_leaves_no_process_behind() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let mut lab = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "run",
            "--only",
            "F4",
            "--evidence-dir",
            ev.to_str().unwrap(),
        ])
        .env("TMPDIR", sb.path("tmp"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let tmp = sb.path("tmp");
    let frozen = poll(std::time::Duration::from_secs(60), || {
        pids_mentioning(&tmp, "holder-a")
            .into_iter()
            .any(|pid| state_of(pid) == Some('T'))
    });
    assert!(frozen, "holder-a was never seen frozen");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(lab.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    lab.wait()?;
    // The holders die with the lab (parent-death SIGKILL) and the server stops by itself
    // (parent-death SIGQUIT): nothing runs on after the lab.
    let gone = poll(std::time::Duration::from_secs(10), || {
        processes_mentioning(&tmp).is_empty()
    });
    assert!(
        gone,
        "left behind after SIGKILL of the lab: {:?}",
        processes_mentioning(&tmp)
    );
    // The killed lab could not remove its cluster directory: the next run finds it and does.
    let left: Vec<_> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
    assert_eq!(
        left.len(),
        1,
        "the killed lab's cluster directory: {left:?}"
    );
    let next = sb.lab(&[
        "run",
        "--only",
        "F1",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    let said = format!(
        "removed the cluster directory {} (left by a lab that was killed outright)",
        left[0].display()
    );
    assert!(stderr(&next).contains(&said), "{}", stderr(&next));
    sb.assert_nothing_left()
}

#[test]
fn a_run_writes_nothing_outside_its_temp_dir_and_its_evidence_dir() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let cwd = sb.path("cwd");
    let home = cwd.join("home");
    fs::create_dir_all(&home)?;
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--only", "F4", "--evidence-dir", "ev"])
        .current_dir(&cwd)
        .env("HOME", &home)
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut written: Vec<_> = fs::read_dir(&cwd)?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    written.sort();
    assert_eq!(
        written,
        ["ev", "home"],
        "only the evidence dir appeared in the working dir"
    );
    assert_eq!(fs::read_dir(&home)?.count(), 0, "nothing in HOME");
    sb.assert_nothing_left()
}

#[test]
fn a_reader_that_goes_away_ends_the_terminal_copy_not_the_run() -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader};
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let mut lab = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "run",
            "--only",
            "F1",
            "--evidence-dir",
            ev.to_str().unwrap(),
        ])
        .env("TMPDIR", sb.path("tmp"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    // Like `lab run | head -1`: read one line, then close the pipe.
    let mut first = String::new();
    BufReader::new(lab.stdout.take().expect("piped")).read_line(&mut first)?;
    assert!(first.starts_with("# lab:"), "{first}");
    assert_eq!(lab.wait()?.code(), Some(0));
    let text = fs::read_to_string(ev.join("output.txt"))?;
    assert!(
        text.ends_with(&only_f1_passes()),
        "the file has every line: {text}"
    );
    sb.assert_nothing_left()
}

#[test]
fn a_closed_stdout_ends_the_junit_copy_not_the_run() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let mut lab = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "run",
            "--only",
            "F1",
            "--format",
            "junit",
            "--evidence-dir",
            ev.to_str().unwrap(),
        ])
        .env("TMPDIR", sb.path("tmp"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Like `lab run --format junit | head -1` where head is gone before the report comes: the
    // report is printed whole at the end, into a pipe nobody reads any more.
    drop(lab.stdout.take());
    let out = lab.wait_with_output()?;
    let stderr = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let xml = fs::read_to_string(ev.join("junit.xml"))?;
    assert!(
        xml.contains("<testsuites") && xml.contains("fencing-lab.F1"),
        "junit.xml is whole: {xml}"
    );
    sb.assert_nothing_left()
}

/// Bring your own fence: an exercise's profile (seed004 with its floor check planted away) fails
/// F4 at the stale write, and passes once the student restores the check; a profile the server
/// refuses stops the run before any cluster of its own starts (one line, exit 2); a built-in
/// form of seed004 is its fenced mode.
#[test]
fn a_profile_of_ones_own_is_run_and_judged_by_the_experiments() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let file = sb.path("stale-write.toml");
    let out = sb.lab(&["exercise", "stale-write", "--out", file.to_str().unwrap()])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let flawed = fs::read_to_string(&file)?;
    let run = |ev: &str| -> anyhow::Result<(Option<i32>, String)> {
        let out = sb.lab(&[
            "run",
            "--only",
            "F4",
            "--sut",
            file.to_str().unwrap(),
            "--evidence-dir",
            sb.path(ev).to_str().unwrap(),
        ])?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    let (code, text) = run("ev-flawed")?;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL A's stale write is rejected by the resource"),
        "{text}"
    );
    let _ = sb.clean()?;

    // The student's fix: the floor check back in place.
    fs::write(
        &file,
        flawed.replace(
            "UPDATE fence_floor SET max_token = :token WHERE scope = :scope\n",
            "UPDATE fence_floor SET max_token = :token WHERE scope = :scope AND max_token <= :token\n",
        ),
    )?;
    let (code, text) = run("ev-fixed")?;
    assert_eq!(code, Some(0), "{text}");
    let env = fs::read_to_string(sb.path("ev-fixed").join("environment.json"))?;
    assert!(
        env.contains("stale-write") && env.contains("fenced-scope"),
        "the system under test is on record: {env}"
    );
    sb.assert_nothing_left()?;

    // A statement the server refuses: one line naming it, exit 2, no run.
    fs::write(
        &file,
        flawed.replace("AND expires_at > now()", "AND expires_on > now()"),
    )?;
    let out = sb.lab(&[
        "run",
        "--only",
        "F4",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        sb.path("ev-bad").to_str().unwrap(),
    ])?;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("stale-write.toml: lease.renew: the server refused it"),
        "{err}"
    );
    assert!(!sb.path("ev-bad").join("output.txt").exists());
    sb.assert_nothing_left()?;

    // A built-in form of seed004 runs as its fenced mode.
    let out = sb.lab(&[
        "run",
        "--only",
        "F1",
        "--sut",
        "seed004-single",
        "--evidence-dir",
        sb.path("ev-single").to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = fs::read_to_string(sb.path("ev-single").join("output.txt"))?;
    assert!(text.contains("fenced_mode=fenced-single\n"), "{text}");
    Ok(())
}
