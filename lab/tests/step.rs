//! `lab run --step`: the lab stops at each phase of an experiment's timeline and goes on only at
//! Enter; the command each block prints (psql, or mariadb in the U-series) shows the state at the
//! pause; Ctrl-C at a pause exits 130 and leaves nothing behind.

mod common;

use common::{poll, stderr, Sandbox};
#[cfg(feature = "mariadb")]
use harness::require::{self, Dependency};

use std::path::Path;
use std::process::Command;

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
