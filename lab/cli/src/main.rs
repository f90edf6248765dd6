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
mod config;

use std::process::ExitCode;

use clap::Parser as _;

use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{EnvironmentReporter, JsonlReporter, Recorder, Reporter, TextReporter};
use scenarios::Lab;
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
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build();
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
        let (c, n) = containers::remove_labelled(None).await.map_err(|e| e.to_string())?;
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab: failed to start the async runtime: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    // The lab's own children (the postmaster, holders) are spawned from this thread, inside
    // block_on: the parent-death signal fires when the spawning thread exits, and this one lives
    // as long as the lab.
    let code = runtime.block_on(run_lab(&cfg));
    if code == ExitCode::from(EXIT_HARNESS) {
        cfg.remove_evidence_dir_if_made_and_empty();
    }
    code
}

async fn run_lab(cfg: &Config) -> ExitCode {
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("lab: failed to install the signal handlers: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    let started = std::time::Instant::now();
    // Containers, networks and network holds of a lab killed outright, like its cluster above.
    #[cfg(feature = "containers")]
    if harness::containers::engine().await.is_ok() {
        if let Ok((c, n)) = harness::containers::remove_labelled(None).await {
            let holds = harness::containers::remove_held_rules(None).await;
            if c + n + holds > 0 {
                eprintln!(
                    "lab: removed {c} container(s), {n} network(s) and {holds} network hold(s) left by a lab that was killed outright"
                );
            }
        }
    }
    let lab = tokio::select! {
        lab = Lab::start(cfg.cluster.clone(), cfg.params.clone(), cfg.holder_bin.clone()) => lab,
        _ = sigint.recv() => return ExitCode::from(130),
        _ = sigterm.recv() => return ExitCode::from(143),
    };
    let mut lab = match lab {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("lab: {e:#}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    let dir = &cfg.evidence_dir;
    let reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TextReporter::new(
            cfg.format == Format::Text,
            Some(dir.join("output.txt")),
        )),
        Box::new(JsonlReporter::new(
            Some(dir.join("events.jsonl")),
            cfg.format == Format::Json,
        )),
        Box::new(JunitReporter::new(
            Some(dir.join("junit.xml")),
            cfg.format == Format::Junit,
        )),
        Box::new(EnvironmentReporter::new(dir.join("environment.json"))),
        Box::new(TimelineReporter::new(dir.clone())),
    ];
    let mut rec = Recorder::new(reporters);
    rec.environment(cfg.environment(&lab).await);

    let interrupted = tokio::select! {
        () = scenarios::run_all(&mut lab, &mut rec, &cfg.scenarios) => None,
        _ = sigint.recv() => Some(("SIGINT", 130)),
        _ = sigterm.recv() => Some(("SIGTERM", 143)),
    };
    if let Some((name, _)) = interrupted {
        rec.interrupted(name);
    }
    let limits = evidence_limits(&cfg.evidence_dir);
    let summary = match rec.finish().and_then(|summary| limits.map(|()| summary)) {
        Ok(summary) => summary,
        Err(e) => {
            eprintln!(
                "lab: failed to write the evidence into {}: {e}",
                cfg.evidence_dir.display()
            );
            for line in lab.keep() {
                eprintln!("lab: {line}");
            }
            lab.shutdown().await;
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    // A failing run keeps its servers for inspection; an interrupted one was not a verdict.
    if (!summary.all_passed() && interrupted.is_none()) || cfg.keep {
        for line in lab.keep() {
            eprintln!("lab: {line}; `./run.sh clean` removes it");
        }
    }
    lab.shutdown().await;
    eprintln!(
        "lab: evidence in {}; {:.1} s",
        cfg.evidence_dir.display(),
        secs
    );
    match interrupted {
        Some((_, code)) => ExitCode::from(code),
        None if summary.all_passed() => ExitCode::SUCCESS,
        None => ExitCode::from(1),
    }
}
