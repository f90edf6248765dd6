//! `lab`, the fencing lab's command line. Two phases, like ripgrep's low/high args: clap parses
//! ([`args`]), then [`config::resolve`] checks everything and finds everything (scenario ids,
//! durations, server binaries, a writable evidence directory) before any side effect. Only then
//! does a cluster start.
//!
//! Exit status: 0 every check passed; 1 a check failed; 2 the lab could not run (bad arguments,
//! no PostgreSQL, an unwritable evidence directory, a cluster that would not start); 130 / 143
//! interrupted by SIGINT / SIGTERM (the cluster is stopped on the way out).

mod args;
mod bench;
mod chaos;
mod config;
mod exercise;
mod grade;
mod matrix;
mod profile;
mod step;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser as _;

use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{EnvironmentReporter, JsonlReporter, Recorder, Reporter, TextReporter};
use scenarios::{Backend, Lab};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{Cli, Command, Format};
use crate::config::Config;

/// Exit status when the harness could not run.
const EXIT_HARNESS: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli.command {
        Command::List => {
            let list: String = scenarios::ALL
                .iter()
                .map(|s| format!("{}  {}\n", s.id(), s.title()))
                .collect();
            print_or_fail(&list)
        }
        Command::Bench(args) => {
            let runtime = runtime();
            let result = match runtime {
                Ok(rt) => rt.block_on(bench::run(args)),
                Err(e) => Err(e.into()),
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("lab bench: {e:#}");
                    ExitCode::from(EXIT_HARNESS)
                }
            }
        }
        Command::Clean(args) => {
            let removed = harness::server::remove_leftovers(&std::env::temp_dir(), true);
            for r in &removed {
                report_removed(r);
            }
            let mut text = format!(
                "lab clean: removed {} cluster director{}\n",
                removed.len(),
                if removed.len() == 1 { "y" } else { "ies" }
            );
            #[cfg(feature = "containers")]
            match clean_containers(args.images) {
                Ok(line) => text.push_str(&line),
                Err(e) => {
                    eprintln!("lab clean: {e}");
                    return ExitCode::from(EXIT_HARNESS);
                }
            }
            #[cfg(not(feature = "containers"))]
            if args.images {
                text.push_str(
                    "lab clean: built without the containers feature: no images to remove\n",
                );
            }
            print_or_fail(&text)
        }
        Command::Chaos(args) => {
            let runtime = runtime();
            match runtime {
                Ok(rt) => rt.block_on(chaos::run(args)),
                Err(e) => {
                    eprintln!("lab chaos: failed to start the async runtime: {e}");
                    ExitCode::from(EXIT_HARNESS)
                }
            }
        }
        Command::Profile(args) => profile::run(args.action),
        Command::Exercise { name, out } => exercise::run(name, out),
        Command::Grade { sut, evidence_dir } => grade::run(sut, evidence_dir),
        Command::Run(args) => match config::resolve(args) {
            Ok(cfg) => run(cfg),
            Err(e) => {
                eprintln!("lab: {e:#}");
                ExitCode::from(EXIT_HARNESS)
            }
        },
    }
}

/// `lab clean`'s container part: the containers, networks and network holds of labs that are not
/// running any more, and with `images` the images the lab built. One line saying what went.
#[cfg(feature = "containers")]
fn clean_containers(images: bool) -> Result<String, String> {
    use harness::containers;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        if containers::engine().await.is_err() {
            return Ok("lab clean: no Docker engine answers: no containers to remove\n".into());
        }
        let (c, n) = containers::remove_labelled(None, true).await.map_err(|e| e.to_string())?;
        let holds = containers::remove_held_rules(None).await;
        let mut line = format!(
            "lab clean: removed {c} container(s), {n} network(s) and {holds} network hold(s) left by labs no longer running\n"
        );
        if images {
            let i = containers::remove_images().await.map_err(|e| e.to_string())?;
            line.push_str(&format!("lab clean: removed {i} image(s)\n"));
        }
        Ok(line)
    })
}

/// The lab's async runtime: two workers (the machines it runs on have two cores); its
/// children are spawned from the thread that calls `block_on` on it.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
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

/// The whole output of `lab list` / `lab clean`: exit 0 once written (or once its reader went
/// away), 2 when stdout could not be written (a full disk behind a redirect).
fn print_or_fail(text: &str) -> ExitCode {
    match print_stdout(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab: failed to write to stdout: {e}");
            ExitCode::from(EXIT_HARNESS)
        }
    }
}

/// clap's help and version go out as clap prints them; a usage error becomes one line on stderr
/// (the problem and where to look for the fix) and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(EXIT_HARNESS);
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    let problem = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("lab: {problem}; see `lab --help` or `lab run --help`");
    ExitCode::from(EXIT_HARNESS)
}

/// What the experiments do not prove, beside every run's evidence.
const LIMITS: &str = include_str!("../../../evidence/LIMITS.md");

fn evidence_limits(dir: &std::path::Path) -> std::io::Result<()> {
    harness::evidence::write_atomically(&dir.join("LIMITS.md"), LIMITS.as_bytes())
}

fn report_removed(r: &harness::server::Removed) {
    let server = r.stopped_server.map_or_else(String::new, |pid| {
        format!(", after stopping its server (pid {pid})")
    });
    let why = if r.was_kept {
        "kept"
    } else {
        "left by a lab that was killed outright"
    };
    eprintln!(
        "lab: removed the cluster directory {} ({why}){server}",
        r.dir.display()
    );
}

fn run(cfg: Config) -> ExitCode {
    // A lab killed outright (SIGKILL) cannot remove its cluster; the next run does.
    for r in harness::server::remove_leftovers(&std::env::temp_dir(), false) {
        report_removed(&r);
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab: failed to start the async runtime: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    // The lab's own children (the postmaster, holders) are spawned from this thread, inside
    // block_on: the parent-death signal fires when the spawning thread exits, and this one lives
    // as long as the lab.
    let code = if let [backend] = cfg.backends[..] {
        runtime
            .block_on(run_lab(&cfg, backend, &cfg.evidence_dir))
            .0
    } else {
        runtime.block_on(run_matrix(&cfg))
    };
    if code == ExitCode::from(EXIT_HARNESS) {
        cfg.remove_evidence_dir_if_made_and_empty();
    }
    code
}

/// `--pg-versions`: one container run per version, each with its evidence in `pgN/`, then the
/// matrix of version × experiment on stdout and in `matrix.md`. Stops at an interruption.
async fn run_matrix(cfg: &Config) -> ExitCode {
    let mut columns = Vec::new();
    let mut worst = ExitCode::SUCCESS;
    for &backend in &cfg.backends {
        let Backend::Containers { pg_major, .. } = backend else {
            continue;
        };
        let dir = cfg.evidence_dir.join(format!("pg{pg_major}"));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("lab: cannot make {}: {e}", dir.display());
            return ExitCode::from(EXIT_HARNESS);
        }
        eprintln!(
            "lab: PostgreSQL {pg_major} on containers; evidence in {}",
            dir.display()
        );
        let (code, verdicts) = run_lab(cfg, backend, &dir).await;
        if code == ExitCode::from(130) || code == ExitCode::from(143) {
            return code;
        }
        if code != ExitCode::SUCCESS && worst == ExitCode::SUCCESS
            || code == ExitCode::from(EXIT_HARNESS)
        {
            worst = code;
        }
        columns.push(matrix::Column {
            major: pg_major,
            could_not_run: code == ExitCode::from(EXIT_HARNESS),
            verdicts,
        });
    }
    let table = matrix::render(&columns);
    if cfg.format == Format::Text {
        if let Err(e) = print_stdout(&table) {
            eprintln!("lab: failed to write the matrix to stdout: {e}");
        }
    }
    let path = cfg.evidence_dir.join("matrix.md");
    if let Err(e) = std::fs::write(&path, &table) {
        eprintln!("lab: failed to write {}: {e}", path.display());
        return ExitCode::from(EXIT_HARNESS);
    }
    eprintln!("lab: the matrix is in {}", path.display());
    worst
}

/// One run on `backend` with its evidence in `dir`: its exit status, and each case's verdict.
pub(crate) async fn run_lab(
    cfg: &Config,
    backend: Backend,
    dir: &Path,
) -> (ExitCode, Vec<(String, String)>) {
    let (code, verdicts) = run_lab_inner(cfg, backend, dir).await;
    (code, verdicts.unwrap_or_default())
}

async fn run_lab_inner(
    cfg: &Config,
    backend: Backend,
    dir: &Path,
) -> (ExitCode, Option<Vec<(String, String)>>) {
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("lab: failed to install the signal handlers: {e}");
            return (ExitCode::from(EXIT_HARNESS), None);
        }
    };
    let started = std::time::Instant::now();
    // Containers, networks and network holds of a lab killed outright, like its cluster above.
    #[cfg(feature = "containers")]
    if harness::containers::engine().await.is_ok() {
        if let Ok((c, n)) = harness::containers::remove_labelled(None, false).await {
            let holds = harness::containers::remove_held_rules(None).await;
            if c + n + holds > 0 {
                eprintln!(
                    "lab: removed {c} container(s), {n} network(s) and {holds} network hold(s) left by a lab that was killed outright"
                );
            }
        }
    }
    // A profile of the user's is checked before anything runs with it (the built-in ones are
    // checked by the tests).
    if !cfg.params.sut.is_built_in() || !cfg.params.jobs.is_built_in() {
        let check = async {
            if !cfg.params.sut.is_built_in() {
                profile::prepare_with(&cfg.params.sut, cfg.cluster.bins.clone()).await?;
            }
            if !cfg.params.jobs.is_built_in() {
                profile::prepare_job(&cfg.params.jobs).await?;
            }
            anyhow::Ok(())
        };
        let checked = tokio::select! {
            checked = check => checked,
            _ = sigint.recv() => return (ExitCode::from(130), None),
            _ = sigterm.recv() => return (ExitCode::from(143), None),
        };
        if let Err(e) = checked {
            eprintln!("lab: --sut {e:#}");
            return (ExitCode::from(EXIT_HARNESS), None);
        }
    }
    let mark = Lab::new_run_mark();
    let start = Lab::start_on(
        backend,
        mark.clone(),
        cfg.cluster.clone(),
        cfg.params.clone(),
        cfg.holder_bin.clone(),
    );
    let lab = tokio::select! {
        lab = start => lab,
        _ = sigint.recv() => return (interrupted_start(&mark, 130).await, None),
        _ = sigterm.recv() => return (interrupted_start(&mark, 143).await, None),
    };
    let lab = match lab {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("lab: {e:#}");
            return (ExitCode::from(EXIT_HARNESS), None);
        }
    };
    // The other jobs' labs, each on a cluster of its own (an embedded cluster starts in about a
    // second; they start together).
    let mut labs = vec![lab];
    if cfg.jobs > 1 && cfg.scenarios.len() > 1 {
        let more = (1..cfg.jobs).map(|_| {
            Lab::start_on(
                backend,
                Lab::new_run_mark(),
                cfg.cluster.clone(),
                cfg.params.clone(),
                cfg.holder_bin.clone(),
            )
        });
        let started = tokio::select! {
            started = scenarios::join_all(more) => started,
            _ = sigint.recv() => return (ExitCode::from(130), None),
            _ = sigterm.recv() => return (ExitCode::from(143), None),
        };
        for lab in started {
            match lab {
                Ok(lab) => labs.push(lab),
                Err(e) => {
                    eprintln!("lab: another job's cluster: {e:#}");
                    for lab in labs {
                        lab.shutdown().await;
                    }
                    return (ExitCode::from(EXIT_HARNESS), None);
                }
            }
        }
    }
    let reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TextReporter::new(
            cfg.format == Format::Text && !cfg.quiet,
            Some(dir.join("output.txt")),
        )),
        Box::new(JsonlReporter::new(
            Some(dir.join("events.jsonl")),
            cfg.format == Format::Json && !cfg.quiet,
        )),
        Box::new(JunitReporter::new(
            Some(dir.join("junit.xml")),
            cfg.format == Format::Junit && !cfg.quiet,
        )),
        Box::new(EnvironmentReporter::new(dir.join("environment.json"))),
        Box::new(TimelineReporter::new(dir.to_path_buf())),
    ];
    let mut reporters = reporters;
    if cfg.step {
        // Last: each phase's check lines are on the terminal before the pause.
        match labs[0].cluster() {
            Ok(cluster) => reporters.push(Box::new(step::StepReporter::new(
                cluster,
                labs[0].maria.client.clone(),
                &cfg.params.jobs,
            ))),
            Err(e) => {
                eprintln!("lab: --step: {e:#}");
                for lab in labs {
                    lab.shutdown().await;
                }
                return (ExitCode::from(EXIT_HARNESS), None);
            }
        }
    }
    let mut rec = Recorder::new(reporters);
    rec.environment(cfg.environment(&labs[0]).await);

    let interrupted = tokio::select! {
        () = scenarios::run_all_on(&mut labs, &mut rec, &cfg.scenarios) => None,
        _ = sigint.recv() => Some(("SIGINT", 130)),
        _ = sigterm.recv() => Some(("SIGTERM", 143)),
    };
    if let Some((name, _)) = interrupted {
        rec.interrupted(name);
    }
    let verdicts = matrix::verdicts(rec.events());
    let limits = evidence_limits(dir);
    let summary = match rec.finish().and_then(|summary| limits.map(|()| summary)) {
        Ok(summary) => summary,
        Err(e) => {
            eprintln!(
                "lab: failed to write the evidence into {}: {e}",
                dir.display()
            );
            for mut lab in labs {
                for line in lab.keep() {
                    eprintln!("lab: {line}");
                }
                lab.shutdown().await;
            }
            return (ExitCode::from(EXIT_HARNESS), None);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    // A failing run keeps its servers for inspection; an interrupted one was not a verdict.
    for mut lab in labs {
        if (!summary.all_passed() && interrupted.is_none() && cfg.keep_failed) || cfg.keep {
            for line in lab.keep() {
                eprintln!("lab: {line}; `./run.sh clean` removes it");
            }
        }
        lab.shutdown().await;
    }
    eprintln!("lab: evidence in {}; {:.1} s", dir.display(), secs);
    let code = match interrupted {
        Some((_, code)) => ExitCode::from(code),
        None if summary.all_passed() => ExitCode::SUCCESS,
        None => ExitCode::from(1),
    };
    (code, Some(verdicts))
}

/// An interruption while the servers were starting: whatever of this run's containers and
/// networks exist already goes (a cluster half-made removes itself on drop); the exit status.
async fn interrupted_start(mark: &str, code: u8) -> ExitCode {
    #[cfg(feature = "containers")]
    {
        let _ = harness::containers::remove_labelled(Some(mark), false).await;
    }
    let _ = mark;
    ExitCode::from(code)
}
