//! `lab run`, the run loop: a resolved [`Config`] in, how the run [`Ended`] out, with the events
//! its recorder emitted (what `lab grade` and the `--pg-versions` matrix read their verdicts
//! off). One run starts its beds (one cluster per job), installs the reporters, runs the
//! experiments (`scenarios::run_all_on`), writes the evidence and stops every server; SIGINT and
//! SIGTERM interrupt it at any point, the servers stopped on the way out.
//!
//! It starts no process itself: servers and holders are started through `scenarios::Testbed` and
//! `harness`. It decides nothing from text: the verdicts are the recorder's typed events.

use std::path::Path;

use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{
    EnvironmentReporter, Event, JsonlReporter, Recorder, Reporter, TextReporter,
};
use scenarios::{Backend, Images, Testbed};

use crate::args::Format;
use crate::clean::report_removed;
use crate::config::Config;
use crate::{matrix, print_stdout, profile, step, Ended, Signals};

/// What the experiments do not prove, beside every run's evidence.
const LIMITS: &str = include_str!("../../evidence/LIMITS.md");

/// How one run on one backend went.
pub struct Run {
    pub ended: Ended,
    /// Every event its recorder emitted before the summary, in the order of the evidence
    /// (registry order); empty when the run did not get to record (it could not start, or its
    /// evidence could not be written).
    pub events: Vec<Event>,
}

impl Run {
    fn without_events(ended: Ended) -> Run {
        Run {
            ended,
            events: Vec::new(),
        }
    }
}

/// `lab run`: one run, or with `--pg-versions` one per version and the matrix. The evidence
/// directory the configuration made is removed again when the run could not start and left it
/// empty.
pub fn run(cfg: &Config) -> Ended {
    // A lab killed outright (SIGKILL) cannot remove its cluster; the next run does.
    for r in harness::server::remove_leftovers(&std::env::temp_dir(), false) {
        report_removed(&r);
    }
    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab: failed to start the async runtime: {e}");
            return Ended::CouldNotRun;
        }
    };
    // The lab's own children (the postmaster, holders) are spawned from this thread, inside
    // block_on: the parent-death signal fires when the spawning thread exits, and this one lives
    // as long as the lab.
    let ended = if let [backend] = cfg.backends[..] {
        runtime
            .block_on(run_lab(cfg, backend, &cfg.evidence_dir))
            .ended
    } else {
        runtime.block_on(run_matrix(cfg))
    };
    if ended == Ended::CouldNotRun {
        cfg.remove_evidence_dir_if_made_and_empty();
    }
    ended
}

/// `--pg-versions`: one container run per version, each with its evidence in `pgN/`, then the
/// matrix of version × experiment on stdout and in `matrix.md`. Stops at an interruption.
async fn run_matrix(cfg: &Config) -> Ended {
    let mut columns = Vec::new();
    let mut worst = Ended::Passed;
    for &backend in &cfg.backends {
        let Backend::Containers { pg_major, .. } = backend else {
            continue;
        };
        let dir = cfg.evidence_dir.join(format!("pg{pg_major}"));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("lab: cannot make {}: {e}", dir.display());
            return Ended::CouldNotRun;
        }
        eprintln!(
            "lab: PostgreSQL {pg_major} on containers; evidence in {}",
            dir.display()
        );
        let run = run_lab(cfg, backend, &dir).await;
        if let Ended::Interrupted(_) = run.ended {
            return run.ended;
        }
        if run.ended != Ended::Passed && worst == Ended::Passed || run.ended == Ended::CouldNotRun {
            worst = run.ended;
        }
        columns.push(matrix::Column {
            major: pg_major,
            could_not_run: run.ended == Ended::CouldNotRun,
            verdicts: matrix::verdicts(&run.events),
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
        return Ended::CouldNotRun;
    }
    eprintln!("lab: the matrix is in {}", path.display());
    worst
}

/// One run on `backend` with its evidence in `dir`: how it ended, and its recorder's events.
pub async fn run_lab(cfg: &Config, backend: Backend, dir: &Path) -> Run {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("lab: failed to install the signal handlers: {e}");
            return Run::without_events(Ended::CouldNotRun);
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
    if !cfg.params.case.sut.is_built_in() || !cfg.params.jobs.is_built_in() {
        let check = async {
            if !cfg.params.case.sut.is_built_in() {
                profile::prepare_with(&cfg.params.case.sut, cfg.cluster.bins.clone()).await?;
            }
            if !cfg.params.jobs.is_built_in() {
                profile::prepare_job(&cfg.params.jobs).await?;
            }
            anyhow::Ok(())
        };
        let checked = tokio::select! {
            checked = check => checked,
            signal = signals.recv() => return Run::without_events(Ended::Interrupted(signal)),
        };
        if let Err(e) = checked {
            eprintln!("lab: --sut {e:#}");
            return Run::without_events(Ended::CouldNotRun);
        }
    }
    let mark = Testbed::new_run_mark();
    let start = Testbed::start_on(
        backend,
        mark.clone(),
        cfg.cluster.clone(),
        cfg.params.clone(),
        cfg.holder_bin.clone(),
    );
    let bed = tokio::select! {
        bed = start => bed,
        signal = signals.recv() => return Run::without_events(interrupted_start(&mark, signal).await),
    };
    let bed = match bed {
        Ok(bed) => bed,
        Err(e) => {
            eprintln!("lab: {e:#}");
            return Run::without_events(Ended::CouldNotRun);
        }
    };
    // The other jobs' beds, each on a cluster of its own (an embedded cluster starts in about a
    // second; they start together).
    let mut bed = bed;
    bed.keep_all = cfg.keep;
    bed.holder_prefix = cfg.holder_prefix.clone();
    let mut beds = vec![bed];
    if cfg.jobs > 1 && cfg.scenarios.len() > 1 {
        let more = (1..cfg.jobs).map(|_| {
            Testbed::start_on(
                backend,
                Testbed::new_run_mark(),
                cfg.cluster.clone(),
                cfg.params.clone(),
                cfg.holder_bin.clone(),
            )
        });
        let started = tokio::select! {
            started = scenarios::join_all(more) => started,
            signal = signals.recv() => return Run::without_events(Ended::Interrupted(signal)),
        };
        for bed in started {
            match bed {
                Ok(mut bed) => {
                    bed.keep_all = cfg.keep;
                    bed.holder_prefix = cfg.holder_prefix.clone();
                    beds.push(bed)
                }
                Err(e) => {
                    eprintln!("lab: another job's cluster: {e:#}");
                    for bed in beds {
                        bed.shutdown().await;
                    }
                    return Run::without_events(Ended::CouldNotRun);
                }
            }
        }
    }
    // A holder of the user's: which fault points it has, asked once (a refused one makes the
    // experiments that stop a holder there say skip).
    if cfg.holder_cmd.is_some() {
        let refused = tokio::select! {
            refused = beds[0].refused_fault_points() => refused,
            signal = signals.recv() => {
                for bed in beds {
                    bed.shutdown().await;
                }
                return Run::without_events(Ended::Interrupted(signal));
            }
        };
        for (point, words) in &refused {
            eprintln!(
                "lab: your holder refused {} ({words}): the experiments that stop it there say skip",
                point.name()
            );
        }
        for bed in &mut beds {
            bed.user_holder = Some(scenarios::testbed::UserHolder {
                refused: refused.clone(),
            });
        }
    }
    let mut reporters: Vec<Box<dyn Reporter>> = vec![
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
        // tokens.md, when the R- or RL-series ran.
        Box::new(scenarios::tokens_table::TokensTable::new(
            dir.join("tokens.md"),
        )),
    ];
    if cfg.step {
        // First: a pause no action took is taken before the next line is printed.
        reporters.insert(0, Box::new(step::PauseGate));
        // Last: its block follows the step's line; the pause comes at the lab's next action,
        // once the step's checks are printed.
        match beds[0].cluster() {
            Ok(cluster) => reporters.push(Box::new(step::StepReporter::new(
                cluster,
                beds[0].maria.client.clone(),
                &cfg.params.jobs,
            ))),
            Err(e) => {
                eprintln!("lab: --step: {e:#}");
                for bed in beds {
                    bed.shutdown().await;
                }
                return Run::without_events(Ended::CouldNotRun);
            }
        }
    }
    let mut rec = Recorder::new(reporters);
    rec.environment(cfg.environment(&beds[0]).await);
    #[cfg(feature = "containers")]
    let images = build_images_early(cfg).await;
    #[cfg(feature = "containers")]
    let building = images.as_ref().map_or(Images::Ready, |_| Images::Building);
    #[cfg(not(feature = "containers"))]
    let building = Images::Ready;

    let interrupted = tokio::select! {
        () = scenarios::run_all_on(&mut beds, &mut rec, &cfg.scenarios, building) => None,
        signal = signals.recv() => Some(signal),
    };
    // A build still going (its experiments did not run, or the run was interrupted) is stopped:
    // its debootstrap is killed with the task.
    #[cfg(feature = "containers")]
    if let Some(images) = images {
        images.abort();
    }
    if let Some(signal) = interrupted {
        rec.interrupted(signal.name());
    }
    let events = rec.events().to_vec();
    let limits = evidence_limits(dir);
    let summary = match rec.finish().and_then(|summary| limits.map(|()| summary)) {
        Ok(summary) => summary,
        Err(e) => {
            eprintln!(
                "lab: failed to write the evidence into {}: {e}",
                dir.display()
            );
            for mut bed in beds {
                for line in bed.keep() {
                    eprintln!("lab: {line}");
                }
                bed.shutdown().await;
            }
            return Run::without_events(Ended::CouldNotRun);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    // A failing run keeps the servers of the experiments that failed for inspection (every
    // server with --keep); an interrupted one was not a verdict.
    let clean = crate::clean_command();
    let mut kept = Vec::new();
    for mut bed in beds {
        let failing = !summary.all_passed() && interrupted.is_none() && cfg.keep_failed;
        if (failing && bed.failed_here) || cfg.keep {
            for line in bed.keep() {
                eprintln!("lab: {line}");
                kept.push(line);
            }
        }
        bed.shutdown().await;
    }
    if !kept.is_empty() {
        let whose = if cfg.keep {
            "of this run's servers, as --keep asked"
        } else {
            "of the failing experiments' servers"
        };
        eprintln!("{}", crate::kept_size_line(&kept, whose, &clean).await);
    }
    eprintln!("lab: evidence in {}; {:.1} s", dir.display(), secs);
    let ended = match interrupted {
        Some(signal) => Ended::Interrupted(signal),
        None if summary.all_passed() && !strict_skips(cfg, summary.skipped) => Ended::Passed,
        None => Ended::Failed,
    };
    Run { ended, events }
}

/// With `--strict`, whether `skipped` cases fail the run (said on stderr): what was not judged
/// here is not a pass either.
fn strict_skips(cfg: &Config, skipped: usize) -> bool {
    let fails = cfg.strict && skipped > 0;
    if fails {
        eprintln!(
            "lab: --strict: {skipped} case(s) said skip (see output.txt): a skip is a failure with --strict"
        );
    }
    fails
}

/// The images this run's container experiments need and this machine lacks, built in the
/// background from the start — the lock services' (F4/F5 again on etcd, ZooKeeper and Redis; the
/// R- and RL-series), plain PostgreSQL's (F15, F16) and Patroni's (F17), in the order the run
/// reaches them — so that the experiments that need no image go on meanwhile (the runner runs
/// them first: [`scenarios::Images::Building`]) and those that need one find it made
/// (the first time, a minute or two each) instead of building it in the middle of the run. One
/// line when the builds end; an experiment that needs an image still building waits for it (one
/// build at a time, `harness::containers`). `None` without an engine, without such experiments,
/// or with every image there.
#[cfg(feature = "containers")]
async fn build_images_early(cfg: &Config) -> Option<tokio::task::JoinHandle<()>> {
    use harness::containers::LabImage;
    let ids: Vec<&str> = cfg.scenarios.iter().map(|s| s.spec().id).collect();
    // F4 and F5 again on the lock services, when they run; the R- and RL-series.
    let services = (!cfg.params.again_on.is_empty()
        && ids.iter().any(|id| ["F4", "F5"].contains(id)))
        || ids
            .iter()
            .any(|id| ["R1", "R2", "R3", "RL1", "RL2", "RL3"].contains(id));
    let postgres = ids.iter().any(|id| ["F15", "F16"].contains(id));
    let patroni = ids.contains(&"F17");
    let wanted = [
        (services, "lock services'", LabImage::Services),
        (postgres, "PostgreSQL", LabImage::Postgres(15)),
        (patroni, "Patroni", LabImage::Patroni(15)),
    ];
    if !(services || postgres || patroni) || harness::containers::engine().await.is_err() {
        return None;
    }
    let mut missing: Vec<(String, LabImage)> = Vec::new();
    for (wanted, name, recipe) in wanted {
        // An engine that cannot say: the experiment that needs the image says why.
        if !wanted || !matches!(recipe.is_built().await, Ok(false)) {
            continue;
        }
        // PostgreSQL 15's images are one: named once, built once.
        match missing.iter_mut().find(|(_, r)| r.is_same_as(recipe)) {
            Some((names, _)) => *names = format!("{names} and {name}"),
            None => missing.push((name.to_owned(), recipe)),
        }
    }
    if missing.is_empty() {
        return None;
    }
    eprintln!(
        "lab: building the {} image{} in the background (once per machine); the experiments that \
         need no image run first",
        missing
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if missing.len() > 1 { "s" } else { "" }
    );
    Some(tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut built = Vec::new();
        for (name, recipe) in missing {
            match recipe.image().await {
                Ok(image) => {
                    if let Some(took) = image.built_in {
                        built.push(format!("the {name} image in {:.0} s", took.as_secs_f64()));
                    }
                }
                // The experiment that needs it says why when it gets there.
                Err(_) => return,
            }
        }
        if !built.is_empty() {
            eprintln!(
                "lab: built {} in the background ({:.0} s in all)",
                built.join(", "),
                started.elapsed().as_secs_f64()
            );
        }
    }))
}

/// `LIMITS.md`, beside the run's evidence.
fn evidence_limits(dir: &Path) -> std::io::Result<()> {
    harness::evidence::write_atomically(&dir.join("LIMITS.md"), LIMITS.as_bytes())
}

/// An interruption while the servers were starting: whatever of this run's containers and
/// networks exist already goes (a cluster half-made removes itself on drop); how the run ended.
async fn interrupted_start(mark: &str, signal: crate::Interruption) -> Ended {
    #[cfg(feature = "containers")]
    {
        let _ = harness::containers::remove_labelled(Some(mark), false).await;
    }
    let _ = mark;
    Ended::Interrupted(signal)
}
