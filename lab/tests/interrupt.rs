//! The leftover audit: the lab is interrupted at many points — while its cluster starts, and in
//! each experiment (with A frozen in F4 and F5, around the crash-restart in F8) — by SIGINT and by
//! SIGTERM. Each time it must exit 130 / 143 within 10 s, mark its evidence "interrupted", and
//! leave no holder process, no postgres process of its cluster, and no directory behind.
//! Leftovers are found by the lab's own markers (paths inside this test's private TMPDIR), never
//! by process name.

mod common;

use common::{poll, processes_mentioning};

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// Where in a run to interrupt it.
#[derive(Clone, Copy, Debug)]
enum Point {
    /// As soon as the cluster directory exists: the server is being made.
    ClusterStarting,
    /// At the first output line of scenario `id` that contains `text`.
    Line {
        id: &'static str,
        text: &'static str,
    },
}

fn spawn_lab(tmp: &Path, ev: &Path, only: &str) -> anyhow::Result<Child> {
    Ok(Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--only", only, "--evidence-dir"])
        .arg(ev)
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

/// A private directory (removed on drop) with the lab's TMPDIR and its evidence directory in it.
fn sandbox() -> anyhow::Result<(tempfile::TempDir, PathBuf, PathBuf)> {
    let sandbox = tempfile::tempdir()?;
    fs::set_permissions(sandbox.path(), fs::Permissions::from_mode(0o755))?;
    let tmp: PathBuf = sandbox.path().join("tmp");
    fs::create_dir(&tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    let ev = sandbox.path().join("ev");
    Ok((sandbox, tmp, ev))
}

/// Runs the lab, interrupts it at `point` with `signal`, and audits what is left.
fn interrupt_at(point: Point, signal: Signal) -> anyhow::Result<()> {
    let (_sandbox, tmp, ev) = sandbox()?;
    let only = match point {
        Point::ClusterStarting => "F1",
        Point::Line { id, .. } => id,
    };
    let mut lab = spawn_lab(&tmp, &ev, only)?;
    let stdout = lab.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let reached = match point {
        Point::ClusterStarting => poll(Duration::from_secs(30), || {
            fs::read_dir(&tmp).is_ok_and(|mut d| d.next().is_some())
        }),
        Point::Line { id, text } => {
            let mut in_case = false;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let Ok(line) =
                    lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                else {
                    break false;
                };
                in_case |= line.starts_with(&format!("CASE {id} ::"));
                if in_case && line.contains(text) {
                    break true;
                }
            }
        }
    };
    assert!(reached, "{point:?}: the run never got there");
    let signalled = Instant::now();
    kill(Pid::from_raw(lab.id() as i32), signal)?;
    let exited = poll(EXIT_WITHIN, || matches!(lab.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = lab.kill();
    }
    assert!(
        exited,
        "{point:?} {signal}: still running {EXIT_WITHIN:?} after the signal"
    );
    let code = lab.wait()?.code();
    let took = signalled.elapsed();
    let expected = if signal == Signal::SIGINT { 130 } else { 143 };
    assert_eq!(code, Some(expected), "{point:?} {signal}");
    if let Point::Line { .. } = point {
        let text = fs::read_to_string(ev.join("output.txt"))?;
        assert!(
            text.contains(&format!("INTERRUPTED by {signal}")),
            "{point:?}: {text}"
        );
        assert!(
            fs::read_to_string(ev.join("junit.xml"))?.contains("interrupted by"),
            "{point:?}"
        );
    }
    let left: Vec<_> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "{point:?} {signal}: left behind {left:?}");
    assert_eq!(
        processes_mentioning(&tmp),
        Vec::<String>::new(),
        "{point:?} {signal}: processes left behind"
    );
    eprintln!(
        "{point:?} {signal}: exit {expected} after {} ms, nothing left",
        took.as_millis()
    );
    Ok(())
}

#[test]
fn an_interrupted_lab_leaves_nothing_behind_wherever_it_is_stopped() -> anyhow::Result<()> {
    // From the registry: each experiment that runs everywhere, at the moments its fault is in
    // force (a holder frozen, a server just restarted), or else at its first check.
    let mut points = vec![Point::ClusterStarting];
    // F13 too where libfaketime is installed (the test command installs it when root); else the
    // test says it skips F13's points, or fails with `LAB_REQUIRE=faketime` (`harness::require`).
    let faketime = match harness::faketime::Faketime::locate() {
        Ok(_) => true,
        Err(why) => {
            harness::require::skip(
                harness::require::Dependency::Faketime,
                "F13's interrupt points",
                why,
            )?;
            false
        }
    };
    for s in scenarios::ALL
        .iter()
        .map(|s| s.spec())
        .filter(|s| match s.needs {
            scenarios::Needs::Nothing => true,
            scenarios::Needs::Faketime => faketime,
            scenarios::Needs::MariaDb | scenarios::Needs::Containers => false,
        })
    {
        match s.fault_moments {
            [] => points.push(Point::Line {
                id: s.id,
                text: "  ok ",
            }),
            moments => points.extend(moments.iter().map(|text| Point::Line { id: s.id, text })),
        }
    }
    let runs: Vec<(Point, Signal)> = points
        .iter()
        .flat_map(|p| [(*p, Signal::SIGINT), (*p, Signal::SIGTERM)])
        .collect();
    // Two at a time: each run has its own cluster and its own TMPDIR.
    let (left, right) = runs.split_at(runs.len() / 2);
    let other = std::thread::spawn({
        let right = right.to_vec();
        move || {
            right
                .into_iter()
                .try_for_each(|(p, s)| interrupt_at(p, s).map_err(|e| e.to_string()))
        }
    });
    for (p, s) in left {
        interrupt_at(*p, *s)?;
    }
    other
        .join()
        .expect("the other half panicked")
        .map_err(anyhow::Error::msg)?;
    Ok(())
}

/// `--jobs 2`: interrupted while both jobs' clusters run and a holder is alive, the lab exits
/// 130 within 10 s and leaves nothing of either job.
#[test]
fn an_interrupted_parallel_run_leaves_nothing_of_any_job() -> anyhow::Result<()> {
    let (_sandbox, tmp, ev) = sandbox()?;
    let mut lab = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--jobs", "2", "--only", "F1,F2,F4,F5,F6,F7"])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let busy = poll(Duration::from_secs(60), || {
        let running = processes_mentioning(&tmp);
        let postmasters = running.iter().filter(|c| c.contains(" -D ")).count();
        postmasters >= 2 && running.iter().any(|c| c.contains("holder"))
    });
    assert!(busy, "never saw two clusters and a holder at once");
    kill(Pid::from_raw(lab.id() as i32), Signal::SIGINT)?;
    let exited = poll(EXIT_WITHIN, || matches!(lab.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = lab.kill();
    }
    assert!(exited, "still running {EXIT_WITHIN:?} after SIGINT");
    assert_eq!(lab.wait()?.code(), Some(130));
    assert!(fs::read_to_string(ev.join("output.txt"))?.contains("INTERRUPTED by SIGINT"));
    let left: Vec<_> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left behind {left:?}");
    assert_eq!(processes_mentioning(&tmp), Vec::<String>::new());
    Ok(())
}
