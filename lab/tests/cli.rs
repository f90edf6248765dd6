//! The `lab` binary as a user meets it: bad input gets one clear line and exit status 2 and leaves
//! nothing behind; a run writes its evidence and leaves no cluster, process or temp dir behind.
//!
//! Each test points the lab's temp dir (TMPDIR) at a directory of its own, so "nothing left
//! behind" is checked by the lab's own marker (the `fencing-lab-*` directory and the postmaster
//! started with `-D` inside it), never by process name.

mod common;

use common::{poll, processes_mentioning};
#[cfg(feature = "mariadb")]
use harness::require::{self, Dependency};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> anyhow::Result<Sandbox> {
        let dir = tempfile::tempdir()?;
        // The server may run as the unprivileged `postgres` user: it must be able to traverse.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        fs::create_dir(dir.path().join("tmp"))?;
        fs::set_permissions(dir.path().join("tmp"), fs::Permissions::from_mode(0o755))?;
        Ok(Sandbox { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lab clean` of this sandbox's leftovers: its clusters; no container (`NO_ENGINE`).
    fn clean(&self) -> anyhow::Result<Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg("clean")
            .env("TMPDIR", self.path("tmp"))
            .env(common::NO_ENGINE.0, common::NO_ENGINE.1)
            .output()?)
    }

    fn lab(&self, args: &[&str]) -> anyhow::Result<Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(args)
            .env("TMPDIR", self.path("tmp"))
            .output()?)
    }

    /// Asserts that no cluster directory and no process of this sandbox remains.
    fn assert_nothing_left(&self) -> anyhow::Result<()> {
        let tmp = self.path("tmp");
        let left: Vec<_> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "left behind in the temp dir: {left:?}");
        assert_eq!(
            processes_mentioning(&tmp),
            Vec::<String>::new(),
            "processes left behind"
        );
        Ok(())
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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
    // Server binaries too old to support: a postgres that says it is 14.9.
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
    // The holder binary missing (pointed elsewhere), with otherwise good arguments.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--evidence-dir", ev])
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
    assert!(text.ends_with("SUMMARY passed=19 failed=0\n"), "{text}");
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
        text.ends_with("SUMMARY passed=19 failed=0\n"),
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

/// A stdout whose reader is already gone: every write to it fails with a broken pipe (EPIPE),
/// like `lab list | head -1` once `head` has exited — deterministically, with no race against
/// the pipe's buffer.
fn closed_stdout() -> anyhow::Result<std::process::Stdio> {
    let (read, write) = nix::unistd::pipe()?;
    drop(read);
    Ok(std::process::Stdio::from(write))
}

#[test]
fn list_and_clean_end_quietly_when_their_reader_went_away() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    for command in ["list", "clean"] {
        let out = Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg(command)
            .env("TMPDIR", sb.path("tmp"))
            .env(common::NO_ENGINE.0, common::NO_ENGINE.1)
            .stdout(closed_stdout()?)
            .stderr(std::process::Stdio::piped())
            .output()?;
        assert!(
            !stderr(&out).contains("panicked"),
            "lab {command}: {}",
            stderr(&out)
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "lab {command}: {}",
            stderr(&out)
        );
    }
    sb.assert_nothing_left()
}

#[test]
fn bench_with_a_closed_stdout_still_writes_its_files_and_stops_its_cluster() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    // The smallest bench: 100 ms per cell, no warm-up, one contention round.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "bench",
            "--duration-ms",
            "100",
            "--warmup",
            "0",
            "--rounds",
            "1",
        ])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .stdout(closed_stdout()?)
        .stderr(std::process::Stdio::piped())
        .output()?;
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in ["bench.json", "bench.svg", "bench.html"] {
        assert!(
            fs::metadata(ev.join(file))?.len() > 0,
            "{file} written: {}",
            stderr(&out)
        );
    }
    sb.assert_nothing_left()
}

/// `lab bench --leases` (issue 34): every cell measured on the real lease table, and the knee
/// named where the store stops keeping up — 10 leases renewed every 150 ms by one holder are
/// easy; 3000 by the same one holder (20000 renewals/s from one connection, the leases taken
/// slower than their 450 ms TTL) cannot be, and the table and the knee line say so.
#[test]
fn lease_scaling_measures_each_cell_and_names_the_knee() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "bench",
            "--leases",
            "10,3000",
            "--holders",
            "1",
            "--renew-ms",
            "150",
            "--duration-ms",
            "1050",
        ])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", stderr(&out));
    let row = |leases: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| postgres | {leases} | 1 |")))
            .unwrap_or_else(|| panic!("no row for {leases} leases:\n{table}"))
            .to_owned()
    };
    assert!(row("10").ends_with("| yes |"), "{table}");
    assert!(row("3000").ends_with("| NO |"), "{table}");
    assert!(
        table.contains("knee: postgres with 1 holders renewing every 150 ms keeps up with 10 leases, not with 3000"),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ev.join("bench-leases.json"))?)?;
    let kept: Vec<bool> = json["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c["kept_up"].as_bool().expect("kept_up"))
        .collect();
    assert_eq!(kept, [true, false]);
    let first = &json["cells"][0];
    assert!(
        first["renewed_per_s"].as_f64().expect("a rate") >= 63.0,
        "10 leases every 150 ms: about 67 renewals/s: {first}"
    );
    assert!(fs::metadata(ev.join("bench-leases.svg"))?.len() > 0);
    let page = fs::read_to_string(ev.join("bench.html"))?;
    assert!(
        page.contains("<img src=\"bench-leases.svg\"") && page.contains("knee: postgres"),
        "the report page shows the chart and the table: {page}"
    );
    sb.assert_nothing_left()
}

/// `lab profile show` prints a built-in's file; `lab profile check`: a good profile passes against
/// a real server; a bad one — a TOML syntax
/// error, an unknown parameter, a missing statement, a statement the server refuses — gets one
/// line naming the file and the statement, exit 2, and leaves no cluster and no process.
#[test]
fn a_bad_profile_is_one_line_naming_the_file_and_the_statement_exit_2() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let good = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fencing/profiles/seed004.toml"),
    )?;
    // `lab profile show` prints the built-in's file as it is, comments and all.
    let shown = sb.lab(&["profile", "show", "seed004"])?;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert_eq!(String::from_utf8_lossy(&shown.stdout), good);
    let unknown = sb.lab(&["profile", "show", "no-such-design"])?;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("seed004, seed004-single"),
        "{}",
        stderr(&unknown)
    );
    let ok = sb.lab(&["profile", "check", "seed004"])?;
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("8 statements prepared"));
    sb.assert_nothing_left()?;

    // The renew statement cut out, whole.
    let start = good.find("renew = \"\"\"").expect("renew");
    let end = start + 12 + good[start + 12..].find("\"\"\"").expect("its end") + 3;
    let cases = [
        (
            "syntax.toml",
            good.replacen("[lease]", "[lease", 1),
            "syntax.toml: line ",
        ),
        (
            "param.toml",
            good.replacen(
                "WHERE name = :name AND holder",
                "WHERE name = :nmae AND holder",
                1,
            ),
            "param.toml: lease.renew: unknown parameter :nmae",
        ),
        (
            "missing.toml",
            format!("{}{}", &good[..start], &good[end..]),
            "missing field `renew`",
        ),
        (
            "server.toml",
            good.replacen("AND expires_at > now()", "AND expires_on > now()", 1),
            "server.toml: lease.renew: the server refused it: column \"expires_on\" does not exist",
        ),
    ];
    for (file, text, expected) in cases {
        let path = sb.path(file);
        fs::write(&path, text)?;
        let out = sb.lab(&["profile", "check", path.to_str().unwrap()])?;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert_eq!(err.lines().count(), 1, "{file}: one line: {err}");
        assert!(err.contains(file), "{file}: names the file: {err}");
        assert!(err.contains(expected), "{file}: {expected:?} not in {err}");
        sb.assert_nothing_left()?;
    }
    Ok(())
}

/// seed000 — seed 000's job lease, a MariaDB profile — graded beside the `stale-completion`
/// exercise (its completion without the fence conditions): the F-series is n/a for both, with
/// why; seed000 is safe in U1–U5; the exercise is UNSAFE in U4 with the failed check as its
/// evidence, and the grade fails (exit 1). A MariaDB profile the server refuses is one line
/// naming the file and the statement, exit 2, and leaves no server behind.
#[cfg(feature = "mariadb")]
#[test]
fn seed000_is_graded_on_the_u_series_and_a_planted_flaw_shows_in_u4() -> anyhow::Result<()> {
    if let Err(why) = harness::server::mariadb::MariaBinaries::locate() {
        // The U-series says `skip` without MariaDB (scenarios' own test checks that).
        require::skip(Dependency::MariaDb, require::this_test(), why)?;
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let file = sb.path("stale-completion.toml");
    let out = sb.lab(&[
        "exercise",
        "stale-completion",
        "--out",
        file.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        "seed000",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{card}\n{}", stderr(&out));
    let cells_of = |design: &str| -> Vec<String> {
        let row = card
            .lines()
            .find(|l| l.starts_with(&format!("| {design} |")))
            .unwrap_or_else(|| panic!("no row for {design}: {card}"));
        row.split('|').map(|c| c.trim().to_owned()).collect()
    };
    // "", design, expected, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, U1, …, U5, ""
    let seed000 = cells_of("seed000");
    assert_eq!(seed000[2], "safe");
    assert!(seed000[3..13].iter().all(|c| c == "n/a"), "F: {seed000:?}");
    assert!(
        seed000[13..18].iter().all(|c| c == "safe"),
        "U: {seed000:?}"
    );
    let flawed = cells_of("stale-completion");
    assert!(flawed[3..13].iter().all(|c| c == "n/a"), "F: {flawed:?}");
    assert_eq!(flawed[16], "**UNSAFE**", "U4: {flawed:?}");
    assert!(
        card.contains("- stale-completion × U4: the old execution's fenced completion affects 0 rows (expected=false, actual=true)"),
        "{card}"
    );
    assert!(
        card.contains("- seed000, stale-completion × F1, F2, F3, F4, F6, F7, F8, F10, F11, F12: a design on MariaDB; this experiment runs lease-and-report designs on PostgreSQL"),
        "{card}"
    );
    sb.assert_nothing_left()?;

    let bad = sb.path("bad.toml");
    fs::write(
        &bad,
        fs::read_to_string(&file)?.replace("WHERE run_id = :run", "WHERE run = :run"),
    )?;
    let out = sb.lab(&["profile", "check", bad.to_str().unwrap()])?;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("bad.toml: resource.run.status: the server refused it: Unknown column 'run'"),
        "{err}"
    );
    sb.assert_nothing_left()
}

/// A `--step` run of one experiment, driven by a scripted stdin: the blocks read so far, and
/// the means to go on.
struct Stepper {
    lab: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Stepper {
    fn start(sb: &Sandbox, ev: &Path) -> anyhow::Result<Stepper> {
        Stepper::start_on(sb, ev, "F4")
    }

    fn start_on(sb: &Sandbox, ev: &Path, id: &str) -> anyhow::Result<Stepper> {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let mut lab = Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(["run", "--only", id, "--step", "--evidence-dir"])
            .arg(ev)
            .env("TMPDIR", sb.path("tmp"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = lab.stdin.take().expect("piped");
        let stderr = lab.stderr.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Stepper { lab, stdin, lines })
    }

    /// The next block, up to and with its prompt; `None` once the lab closed stderr.
    fn next_block(&self) -> Option<Vec<String>> {
        let mut block = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(std::time::Duration::from_secs(60))
                .ok()?;
            let prompt = line.contains("Enter: go on");
            block.push(line);
            if prompt {
                return Some(block);
            }
        }
    }

    fn enter(&mut self) -> anyhow::Result<()> {
        use std::io::Write as _;
        self.stdin.write_all(b"\n")?;
        Ok(self.stdin.flush()?)
    }
}

/// Runs the lease store's psql command of a step block with `sql`, as pasted into a shell after
/// the block's `export` line; its one line of output.
fn psql(block: &[String], sql: &str) -> anyhow::Result<String> {
    let line = |what: &str| {
        block
            .iter()
            .find(|l| l.contains(what))
            .map(|l| l.trim_start().split("    #").next().unwrap_or(l).to_owned())
            .ok_or_else(|| anyhow::anyhow!("no {what:?} line in {block:?}"))
    };
    let export = line("export ")?;
    let lease = line("psql -d lease26")?;
    anyhow::ensure!(
        export.contains("PGHOST=") && export.contains("PGPORT="),
        "{export}"
    );
    // The block's own command, its SQL swapped for `sql` (passed apart: no quoting to get wrong).
    let command = lease.split(" -c ").next().expect("a command");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{export}; {command} -Atc \"$SQL\""))
        .env("SQL", sql)
        .output()?;
    anyhow::ensure!(out.status.success(), "psql: {}", stderr(&out));
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `--step`: the lab stops at each phase of F4's timeline and goes on only at Enter — with A
/// frozen and its lease long expired by the database clock, B has not taken it over while the
/// lab waits, as the printed psql command shows; the run then passes. Ctrl-C while A is frozen
/// at a pause exits 130 within 10 s and leaves nothing, A included.
#[test]
fn step_pauses_at_each_phase_until_enter_and_ctrl_c_there_leaves_nothing() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let mut run = Stepper::start(&sb, &sb.path("ev"))?;
    let mut headers = Vec::new();
    while let Some(block) = run.next_block() {
        let header = block
            .iter()
            .find(|l| l.starts_with("── F4 · step"))
            .cloned()
            .unwrap_or_default();
        if header.contains("SIGSTOP") {
            // Paused with A frozen: wait, by the database clock, until A's lease is a second past
            // its expiry — B would have taken it over long before, had the lab not stopped.
            let expired = poll(std::time::Duration::from_secs(30), || {
                psql(
                    &block,
                    "SELECT expires_at + interval '1 second' <= now() FROM lease",
                )
                .is_ok_and(|v| v == "t")
            });
            assert!(expired, "A's lease never ran out while paused");
            assert_eq!(
                psql(&block, "SELECT holder || ' ' || token FROM lease")?,
                "holder-a 1",
                "the lab went on without Enter"
            );
        }
        headers.push(header);
        run.enter()?;
    }
    let status = run.lab.wait()?;
    assert_eq!(status.code(), Some(0), "{headers:#?}");
    for phase in [
        "A acquire token=1",
        "A SIGSTOP",
        "A lease expired",
        "B acquire token=2",
        "B write token=2",
        "A go-line, SIGCONT",
        "A write (after resuming) token=1 → WRITE accepted=false",
    ] {
        assert!(
            headers.iter().any(|h| h.contains(phase)),
            "no pause at {phase:?}: {headers:#?}"
        );
    }
    assert!(
        !headers.iter().any(|h| h.contains("F4-fenced")),
        "--step steps through one fenced mode: {headers:#?}"
    );
    sb.assert_nothing_left()?;

    // Again, interrupted at the pause where A is frozen.
    let mut run = Stepper::start(&sb, &sb.path("ev2"))?;
    loop {
        let block = run.next_block().expect("the run reaches A's freeze");
        if block.iter().any(|l| l.contains("A SIGSTOP")) {
            break;
        }
        run.enter()?;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.lab.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    let exited = poll(std::time::Duration::from_secs(10), || {
        matches!(run.lab.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = run.lab.kill();
    }
    assert!(exited, "still running 10 s after SIGINT at a pause");
    assert_eq!(run.lab.wait()?.code(), Some(130));
    sb.assert_nothing_left()?;
    Ok(())
}

/// `--step` in the U-series: each block names the `mariadb` command that connects to the
/// U-series' MariaDB (not the PostgreSQL cluster), and that command shows the state at the
/// pause — A's job lease with fence 1 and its run, running, once A acquired; B's fence 2 and
/// its completed run once B completed. The run then passes and leaves nothing.
#[cfg(feature = "mariadb")]
#[test]
fn step_in_the_u_series_prints_the_mariadb_command_that_shows_the_state() -> anyhow::Result<()> {
    if let Err(why) = harness::server::mariadb::MariaBinaries::locate() {
        // U2 says `skip` without MariaDB (scenarios' own test checks that): no steps.
        require::skip(Dependency::MariaDb, require::this_test(), why)?;
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let mut run = Stepper::start_on(&sb, &sb.path("ev"), "U2")?;
    // Runs the block's mariadb command with `sql`; its rows, tab-separated.
    let query = |block: &[String], sql: &str| -> anyhow::Result<String> {
        let line = block
            .iter()
            .find(|l| l.contains(" --socket="))
            .ok_or_else(|| anyhow::anyhow!("no mariadb command in {block:?}"))?;
        assert!(!block.iter().any(|l| l.contains("psql")), "{block:?}");
        let words: Vec<&str> = line.split_whitespace().collect();
        let (bin, args) = (words[0], &words[1..4]);
        let out = Command::new(bin)
            .args(args)
            .args(["-N", "-e", sql])
            .output()?;
        anyhow::ensure!(out.status.success(), "mariadb: {}", stderr(&out));
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let mut seen = Vec::new();
    while let Some(block) = run.next_block() {
        let header = block
            .iter()
            .find(|l| l.starts_with("── U2 · step"))
            .cloned();
        let header = header.unwrap_or_default();
        if header.contains("A acquire, start run-a")
            && !seen.iter().any(|h: &String| h.contains("A acquire"))
        {
            let lease = query(&block, "SELECT fence_token FROM fenced_job_leases")?;
            let run_a = query(
                &block,
                "SELECT status FROM reconciliation_runs WHERE run_id = 'run-a'",
            )?;
            assert_eq!(
                (lease.as_str(), run_a.as_str()),
                ("1", "running"),
                "{header}"
            );
        }
        if header.contains("B complete run-b")
            && !seen.iter().any(|h: &String| h.contains("B complete"))
        {
            let lease = query(&block, "SELECT fence_token FROM fenced_job_leases")?;
            let run_b = query(
                &block,
                "SELECT status FROM reconciliation_runs WHERE run_id = 'run-b'",
            )?;
            assert_eq!(
                (lease.as_str(), run_b.as_str()),
                ("2", "completed"),
                "{header}"
            );
        }
        seen.push(header);
        run.enter()?;
    }
    assert_eq!(run.lab.wait()?.code(), Some(0), "{seen:#?}");
    for phase in ["A acquire, start run-a", "B complete run-b"] {
        assert!(
            seen.iter().any(|h| h.contains(phase)),
            "no pause at {phase:?}: {seen:#?}"
        );
    }
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

/// A design without a token (ShedLock-style, built in): graded on what it has. Its F4 is UNSAFE
/// with the stale write's evidence, its F1 with a stale handle renewing the holder's next holding, its token and floor checks are noted n/a in its run (never
/// passed), the experiments about a token check at the resource are n/a with why, and the grade
/// passes (exit 0): a modelled design is expected to be flawed.
#[test]
fn a_design_without_a_token_is_graded_on_what_it_has() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        "shedlock-style",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{card}\n{}", stderr(&out));
    let row = card
        .lines()
        .find(|l| l.starts_with("| shedlock-style |"))
        .unwrap_or_else(|| panic!("no row for the design: {card}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // "", design, expected, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, ""
    assert_eq!(cells[2], "flawed", "{row}");
    // F1: ShedLock names a holding by its holder alone, so a holder's stale handle reaches
    // its next holding.
    assert_eq!(cells[3], "**UNSAFE**", "F1: {row}");
    assert_eq!(&cells[4..6], ["safe", "safe"], "F2, F3: {row}");
    assert_eq!(cells[6], "**UNSAFE**", "F4: {row}");
    assert_eq!(&cells[7..9], ["n/a", "n/a"], "F6, F7: {row}");
    assert_eq!(cells[9], "**UNSAFE**", "F8: {row}");
    assert_eq!(&cells[11..13], ["n/a", "n/a"], "F11, F12: {row}");
    assert!(
        card.contains("- shedlock-style × F1: holder-b's first holding (token=–) cannot renew the new one (expected=RENEW ok=false, actual=RENEW ok=true)"),
        "{card}"
    );
    assert!(
        card.contains("- shedlock-style × F4: A's stale write is rejected by the resource (expected=WRITE accepted=false token=–, actual=WRITE accepted=true token=–)"),
        "{card}"
    );
    assert!(
        card.contains("- shedlock-style × F6: it interleaves two writers' token checks at the resource, and the design checks no token there"),
        "{card}"
    );
    let text = fs::read_to_string(ev.join("grade/shedlock-style/output.txt"))?;
    assert!(
        text.contains("  note n/a  the resource's fence_floor — the design keeps no floor"),
        "{text}"
    );
    assert!(
        text.contains(
            "  note n/a  round 1 (fresh lease): the winner's token — the design issues no token"
        ),
        "{text}"
    );
    assert!(
        !text.contains("token=1") && !text.contains("token=0"),
        "{text}"
    );
    sb.assert_nothing_left()?;
    Ok(())
}

/// `lab grade --sut`: a design with a planted flaw comes out UNSAFE in the experiments that catch
/// it, each cell with the failed check that shows it, and the grade fails (exit 1); the card is
/// in report-card.md and each design's evidence beside it.
#[test]
fn the_report_card_shows_a_flawed_design_unsafe_with_its_evidence() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let file = sb.path("stale-write.toml");
    let out = sb.lab(&["exercise", "stale-write", "--out", file.to_str().unwrap()])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{card}\n{}", stderr(&out));
    assert_eq!(fs::read_to_string(ev.join("report-card.md"))?, card);
    let row = card
        .lines()
        .find(|l| l.starts_with("| stale-write |"))
        .unwrap_or_else(|| panic!("no row for the design: {card}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // "", design, expected, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, ""
    assert_eq!(cells[6], "**UNSAFE**", "F4: {row}");
    assert_eq!(cells[8], "**UNSAFE**", "F7: {row}");
    assert_eq!(
        cells[3], "**UNSAFE**",
        "F1's stale write to the first scope is rejected only by the floor check: {row}"
    );
    assert!(
        card.contains("- stale-write × F4: A's stale write is rejected by the resource (expected=WRITE accepted=false token=1, actual=WRITE accepted=true token=1)"),
        "{card}"
    );
    assert!(ev.join("grade/stale-write/output.txt").is_file());
    let html = fs::read_to_string(ev.join("report-card.html"))?;
    assert!(
        html.contains("<td class=\"unsafe\" title=\"A's stale write is rejected by the resource"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"grade/stale-write/report.html\">UNSAFE</a></td>"),
        "{html}"
    );
    assert!(ev.join("grade/stale-write/report.html").is_file());
    sb.assert_nothing_left()?;
    Ok(())
}

/// `scripts/render-report.sh` renders a report taller than one page whole, in pages, and checks
/// it: the pages' heights add up to the report's and the last shows its end marker. Rendering one
/// page fewer than the report needs (`RENDER_MAX_PAGES`, the old cut at a fixed height) fails.
#[test]
fn a_rendered_report_is_whole_and_a_cut_one_fails() -> anyhow::Result<()> {
    use harness::require::{skip, this_test, Dependency::Chromium};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ev = tempfile::tempdir()?;
    fs::write(
        ev.path().join("report.html"),
        "<!doctype html><html><head><title>tall</title></head><body>\
         <h1>a report taller than a page</h1>\
         <div style=\"height:9000px;background:#eef\">F1 … F17</div>\
         <h2 id=\"U5\">U5 — the last case</h2><p>its table</p></body></html>",
    )?;
    let render = |max_pages: Option<&str>| {
        let mut cmd = Command::new(root.join("scripts/render-report.sh"));
        cmd.arg(ev.path());
        if let Some(n) = max_pages {
            cmd.env("RENDER_MAX_PAGES", n);
        }
        cmd.output()
    };
    let whole = render(None)?;
    let (out, err) = (
        String::from_utf8_lossy(&whole.stdout),
        String::from_utf8_lossy(&whole.stderr),
    );
    if whole.status.code() == Some(2) && err.contains("needs headless Chromium") {
        skip(Chromium, this_test(), err.trim())?;
        return Ok(());
    }
    assert!(whole.status.success(), "{out}{err}");
    assert!(
        out.contains("png-check: whole: 2 page(s)"),
        "two pages, the end on the last: {out}{err}"
    );
    for page in ["report-1.png", "report-2.png"] {
        assert!(ev.path().join(page).is_file(), "{page}: {out}");
    }
    let cut = render(Some("1"))?;
    let err = String::from_utf8_lossy(&cut.stderr);
    assert!(!cut.status.success(), "one page of two must fail: {err}");
    assert!(err.contains("the report is cut"), "{err}");
    Ok(())
}

/// `lab run --gate` runs what scripts/gate.py computes from the committed mutation map: a map
/// updated without the gate (or a gate edited by hand) fails here.
#[test]
fn the_gate_is_what_the_mutation_map_computes() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/gate.py"))
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let computed = String::from_utf8(out.stdout)?;
    let committed = fs::read_to_string(root.join("lab/src/gate.txt"))?;
    assert_eq!(
        committed.trim(),
        computed.trim(),
        "scripts/gate.py --write updates lab/src/gate.txt"
    );
    Ok(())
}

/// The example Java holder (issue 32), shaped like seed 004's client, conforms: `lab holder
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
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["chaos", "--seed", "4", "--time", "30s", "--holder-cmd"])
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
/// passes it (the protocol's plain paths, its fault points, F4, F10, F12), and `--holder-cmd`
/// runs F5 with it while F1, which starts no holder, says skip. Broken copies fail, each at the
/// line that shows its flaw: one that skips its local-deadline check (F10: A writes after the
/// pause), one that writes without its token's fence (F4: A's stale write accepted), one whose
/// handshake does not parse, one that outlives its stdin; one without `--wait-before-commit`
/// conforms, F12 saying skip with its refusal quoted.
#[test]
fn a_python_holder_passes_and_its_broken_copies_fail_at_the_check_that_shows_the_flaw(
) -> anyhow::Result<()> {
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
    // `lab holder check`: the protocol's plain paths, the fault points, F4, F10 and F12.
    let check = |cmd: &Path| -> anyhow::Result<(Option<i32>, String)> {
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
    };
    let (code, out) = check(&holder)?;
    assert_eq!(code, Some(0), "{out}");
    for line in [
        "ok   the handshake: HELLO version=4 pid=",
        "ok   the resource logged its write: one write_attempt, accepted, token=",
        "ok   its stdin closed at the write point: exit 6 (orphaned)",
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
        card.contains("| yours-holder.py | safe | n/a | n/a | n/a | safe | n/a | n/a | n/a | safe | n/a | safe | n/a |"),
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

    let text = fs::read_to_string(&holder)?;
    let broken_at = |name: &str, edits: &[(&str, &str)]| -> anyhow::Result<PathBuf> {
        let mut copy = text.clone();
        for (from, to) in edits {
            assert_eq!(copy.matches(from).count(), 1, "{from:?} once in holder.py");
            copy = copy.replace(from, to);
        }
        let path = sb.path(name);
        fs::write(&path, copy)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        Ok(path)
    };
    let broken = |name: &str, from: &str, to: &str| broken_at(name, &[(from, to)]);
    let no_check = broken(
        "skips-its-deadline.py",
        "    if now >= deadline[0]:",
        "    if False:",
    )?;
    let (code, out) = check(&no_check)?;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL F10: A, resumed, finds its local deadline passed by its monotonic clock and will not write"),
        "{out}"
    );
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
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok   BEFORE_COMMIT (--wait-before-commit) refused (no-commit-point.py: error: unrecognized arguments: --wait-before-commit)"),
        "{out}"
    );
    assert!(
        out.contains("ok   F12 skip: F12 stops its holder at BEFORE_COMMIT (--wait-before-commit), which your holder refused"),
        "{out}"
    );
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
        out.contains("FAIL the handshake: check-a sent a line that is not the protocol: not a protocol line (missing pid): \"HELLO version=4 process="),
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
