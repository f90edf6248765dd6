//! The fencing lab's commands, as a library; the `lab` binary (`main.rs`) is glue, as in ripgrep
//! and nextest: it parses the arguments ([`args`]), calls one command here and maps how it
//! [`Ended`] to the exit status. Two phases for `lab run`, like ripgrep's low/high args:
//! [`config::resolve`] checks and finds everything (scenario ids, durations, server binaries, a
//! writable evidence directory) before any side effect; only then does [`run::run`] start a
//! cluster. Each command says how it ended as a value, never as a process exit: none of them
//! calls `std::process::exit`.
//!
//! One module a command (`run`, `grade`, `chaos`, `bench`, `profile`, `exercise`, `clean`), with
//! the run's reporters beside them (`step`, `matrix`). The dependencies go one way: `args` is
//! clap's shapes and needs no other module; `config` reads `args`; the commands read both.

pub mod args;
pub mod bench;
pub mod chaos;
pub mod clean;
pub mod config;
pub mod exercise;
pub mod grade;
pub mod holder_check;
pub mod library;
pub mod list;
pub mod matrix;
pub mod profile;
pub mod run;
pub mod step;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// How a command ended; the binary maps it to the documented exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every check passed, or a command without checks did its work: exit 0.
    Passed,
    /// A check failed (or, for `lab grade`, a design did not come out as expected): exit 1.
    Failed,
    /// The lab could not run: bad arguments, no PostgreSQL, an unwritable evidence directory, a
    /// cluster that would not start: exit 2.
    CouldNotRun,
    /// Interrupted: exit 130 (SIGINT) or 143 (SIGTERM); the servers were stopped on the way out.
    Interrupted(Interruption),
}

/// The signal that interrupted a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    Sigint,
    Sigterm,
}

impl Interruption {
    /// The signal's name, as the evidence records it (`INTERRUPTED by SIGINT`).
    pub fn name(self) -> &'static str {
        match self {
            Interruption::Sigint => "SIGINT",
            Interruption::Sigterm => "SIGTERM",
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment they are installed: a command selects on
/// [`Signals::recv`] beside its work, and an interruption drops the work (every child process
/// and server with it) instead of killing the lab outright.
pub(crate) struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// Returns once either signal arrives: which one.
    pub(crate) async fn recv(&mut self) -> Interruption {
        tokio::select! {
            _ = self.int.recv() => Interruption::Sigint,
            _ = self.term.recv() => Interruption::Sigterm,
        }
    }
}

/// The lab's async runtime: two workers (the machines it runs on have two cores); its
/// children are spawned from the thread that calls `block_on` on it.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The command that removes what a run kept, as the user ran the lab: `./run.sh clean` when
/// `./run.sh` started it (it says so in `LAB_INVOKED_AS`), else `lab clean`.
pub(crate) fn clean_command() -> String {
    match std::env::var("LAB_INVOKED_AS") {
        Ok(how) if !how.is_empty() => format!("{how} clean"),
        _ => "lab clean".to_owned(),
    }
}

/// How many earlier runs' kept directories a run that keeps its own leaves in place
/// (`LAB_KEEP_RUNS` sets another): what failing runs keep stays within a bound.
const KEEP_EARLIER_RUNS: usize = 2;

/// Removes the directories — and, built with the feature `containers`, the stopped containers —
/// kept by runs older than the [`KEEP_EARLIER_RUNS`] newest (labs no longer running; this run's
/// are never touched), saying which went, and how much that freed.
pub(crate) async fn prune_kept() {
    let keep = std::env::var("LAB_KEEP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KEEP_EARLIER_RUNS);
    // No engine answering: no containers of the lab's to bound here.
    #[cfg(feature = "containers")]
    if harness::containers::engine().await.is_ok() {
        prune_kept_containers(keep).await;
    }
    let tmp = std::env::temp_dir();
    let before: u64 = kept_dirs_size(&tmp);
    let removed = harness::server::prune_kept(&tmp, keep);
    if removed.is_empty() {
        return;
    }
    let freed = before.saturating_sub(kept_dirs_size(&tmp));
    eprintln!(
        "lab: removed {} director{} kept by failing runs before the last {keep} ({} MB), {}: a run \
         keeps its own and the last {keep} runs' (LAB_KEEP_RUNS={keep})",
        removed.len(),
        if removed.len() == 1 { "y" } else { "ies" },
        freed.div_ceil(1 << 20),
        removed
            .iter()
            .map(|r| r.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The containers part of [`prune_kept`]: what failing runs kept beyond the last `keep`.
#[cfg(feature = "containers")]
async fn prune_kept_containers(keep: usize) {
    match harness::containers::prune_kept_runs(keep).await {
        Ok(runs) if !runs.is_empty() => eprintln!(
            "lab: removed {} container(s) kept by {} failing run(s) before the last {keep} (runs {}): a run keeps its own and the last {keep} runs' (LAB_KEEP_RUNS={keep})",
            runs.iter().map(|(_, n)| n).sum::<usize>(),
            runs.len(),
            runs.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>().join(", ")
        ),
        Ok(_) => {}
        Err(e) => eprintln!("lab: could not bound the containers failing runs kept: {e}"),
    }
}

/// The bytes of every lab server directory in `tmp`.
fn kept_dirs_size(tmp: &std::path::Path) -> u64 {
    std::fs::read_dir(tmp)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("fencing-lab-"))
        .map(|e| dir_size(&e.path()))
        .sum()
}

/// Above this many megabytes of kept clusters in the temp dir, a run warns (`LAB_KEPT_WARN_MB`
/// sets another).
const KEPT_WARN_MB: u64 = 1024;

/// The closing line of a run that kept servers — once older runs' kept directories beyond the
/// bound are removed ([`prune_kept`]): how many directories, their size, and what removes them — and a warning when every lab's kept clusters in the temp dir pass
/// `LAB_KEPT_WARN_MB` (default 1024). `kept` are the lines [`scenarios::Testbed::keep`] said, each
/// naming a directory under the temp dir; `whose` says why they were kept.
pub(crate) async fn kept_size_line(kept: &[String], whose: &str, clean: &str) -> String {
    prune_kept().await;
    let tmp = std::env::temp_dir();
    let mut dirs: Vec<std::path::PathBuf> = kept
        .iter()
        .flat_map(|line| line.split_whitespace())
        .map(std::path::Path::new)
        .filter(|p| p.parent() == Some(tmp.as_path()) && p.is_dir())
        .map(std::path::Path::to_path_buf)
        .collect();
    dirs.sort();
    dirs.dedup();
    let mb = |bytes: u64| bytes.div_ceil(1 << 20);
    let size: u64 = dirs.iter().map(|d| dir_size(d)).sum();
    let mut line = format!(
        "lab: kept {} director{} {whose} ({} MB) for a look inside; `{clean}` removes them",
        dirs.len(),
        if dirs.len() == 1 { "y" } else { "ies" },
        mb(size)
    );
    let all: u64 = kept_dirs_size(&tmp);
    line.push_str(&format!(
        "\nlab: the labs' server directories in {} take {} MB in all",
        tmp.display(),
        mb(all)
    ));
    let limit = std::env::var("LAB_KEPT_WARN_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KEPT_WARN_MB);
    if mb(all) > limit {
        line.push_str(&format!(
            "\nlab: warning: the labs' kept clusters in {} take {} MB in all, over {limit} MB (LAB_KEPT_WARN_MB): `{clean}` removes every one no lab is running on",
            tmp.display(),
            mb(all)
        ));
    }
    line
}

/// The bytes of the files under `dir` (symbolic links not followed; unreadable parts count 0).
fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Writes `text` to stdout. A reader that went away (`lab list | head -1`) is no error: the text
/// is simply not read, `Ok(())` (`println!` would panic on the broken pipe). Other write errors are
/// returned.
pub(crate) fn print_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The whole output of a command that only prints (`lab list`, `lab clean`): passed once written
/// (or once its reader went away), could not run when stdout could not be written (a full disk
/// behind a redirect).
pub(crate) fn print_or_fail(text: &str) -> Ended {
    match print_stdout(text) {
        Ok(()) => Ended::Passed,
        Err(e) => {
            eprintln!("lab: failed to write to stdout: {e}");
            Ended::CouldNotRun
        }
    }
}
