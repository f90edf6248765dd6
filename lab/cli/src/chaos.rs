//! `lab chaos`: the seeded fault run (`scenarios::chaos`) on a throwaway cluster of its own,
//! with commit timestamps on (the checker orders writes by commit). The same reporters as
//! `lab run` write its evidence, plus the schedule, the history and the verdict.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{EnvironmentReporter, JsonlReporter, Recorder, Reporter, TextReporter};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::chaos::{self, ChaosConfig};
use scenarios::{Backend, Lab, Params};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{BackendArg, ChaosArgs};

/// Parses a duration as `30s`, `2m`, `1500ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write 30s, 2m or 1500ms"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("{text:?}: the units are ms, s and m")),
    };
    if d < Duration::from_secs(5) {
        return Err(format!(
            "{text:?} is too short: a chaos run lasts at least 5s"
        ));
    }
    Ok(d)
}

/// Runs it; the exit status (0 every check passed, 1 a check failed, 2 could not run,
/// 130/143 interrupted).
pub async fn run(args: ChaosArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lab chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run_inner(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
    });
    eprintln!(
        "lab chaos: seed {seed}{}",
        if args.seed.is_none() {
            " (drawn now; pass --seed to replay this schedule)"
        } else {
            ""
        }
    );
    use chaos::schedule::FaultKind;
    let patroni = args.lease_store.replication();
    if patroni.is_some() && args.backend == BackendArg::Embedded && crate::config::backend_given() {
        anyhow::bail!("--lease-store patroni… runs on containers: drop --backend embedded");
    }
    let backend = match (args.backend, patroni) {
        (BackendArg::Embedded, None) => Backend::Embedded,
        _ if cfg!(feature = "containers") => Backend::Containers {
            pg_major: 15,
            patroni,
        },
        _ => anyhow::bail!(
            "--backend containers needs a lab built with the containers feature: start a Docker \
             engine and run ./run.sh chaos (it builds with --features lab/containers when one \
             answers), or cargo build --features lab/containers"
        ),
    };
    let containers = backend != Backend::Embedded;
    if let Some(kind) = args
        .faults
        .iter()
        .flatten()
        .find(|k| k.needs_patroni() && patroni.is_none())
    {
        anyhow::bail!(
            "--faults {kind}: it needs the lease store on Patroni: add --lease-store patroni \
             (or patroni-sync, patroni-strict), or leave {kind} out"
        );
    }
    if let Some(kind) = args
        .faults
        .iter()
        .flatten()
        .find(|k| k.needs_containers() && !containers)
    {
        anyhow::bail!(
            "--faults {kind}: it needs a network between the holders and the servers: add \
             --backend containers, or leave {kind} out"
        );
    }
    if patroni.is_some() && args.faults.iter().flatten().any(|k| *k == FaultKind::Crash) {
        anyhow::bail!(
            "--faults crash: on Patroni a lost leader is replaced, not restarted — that is the \
             failover fault; leave crash out"
        );
    }
    let located = harness::faketime::Faketime::locate();
    let (faults, faketime) = match (&args.faults, located) {
        (Some(faults), Ok(f)) => (faults.clone(), Some(f)),
        (Some(faults), Err(reason)) if faults.contains(&FaultKind::Drift) => {
            anyhow::bail!("--faults drift: {reason}; or leave drift out of --faults")
        }
        (Some(faults), Err(_)) => (faults.clone(), None),
        (None, Ok(f)) => (FaultKind::defaults(containers, patroni.is_some()), Some(f)),
        (None, Err(reason)) => {
            eprintln!("lab chaos: the drift fault is left out: {reason}");
            let faults = FaultKind::defaults(containers, patroni.is_some())
                .into_iter()
                .filter(|k| *k != FaultKind::Drift)
                .collect();
            (faults, None)
        }
    };
    // The write under test, resolved once: its mode and the profile whose fence it runs.
    let mode_name = fencing::resource::NAMED_WRITES
        .into_iter()
        .find(|n| *n == args.mode)
        .with_context(|| format!("--mode {}: not a write the lab names", args.mode))?;
    let (mode, profile) = fencing::resource::named_write(mode_name).context("a named write")?;
    let cfg = ChaosConfig {
        seed,
        time: args.time,
        holders: args.holders as usize,
        mode,
        mode_name,
        faults,
        faketime,
    };
    let (mut sigint, mut sigterm) = (
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
    );
    let bins = PgBinaries::locate(args.pg_bindir.as_deref())?;
    let holder_bin = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let params = Params {
        sut: std::sync::Arc::new(profile.clone()),
        ..Params::default()
    };
    let cluster = ClusterConfig {
        max_connections: params.max_connections() + 2 * args.holders as u32,
        track_commit_timestamp: true,
        ..ClusterConfig::new(bins)
    };
    let dir = args.evidence_dir.clone();
    let mut lab = tokio::select! {
        lab = Lab::start_on(backend, Lab::new_run_mark(), cluster, params, holder_bin) => lab?,
        _ = sigint.recv() => return Ok(ExitCode::from(130)),
        _ = sigterm.recv() => return Ok(ExitCode::from(143)),
    };
    let outcome = match args.sweep {
        None => single(&mut lab, &cfg, &dir, &mut sigint, &mut sigterm).await,
        Some(n) => sweep(&mut lab, &cfg, n, &dir, &mut sigint, &mut sigterm).await,
    };
    let keep = matches!(&outcome, Ok(Ran::Failed));
    if keep {
        for line in lab.keep() {
            eprintln!("lab chaos: {line}; `./run.sh clean` removes it");
        }
    }
    lab.shutdown().await;
    let ran = outcome?;
    eprintln!(
        "lab chaos: seed {seed}; evidence in {} (schedule.txt, history.jsonl, verdict.md, report.html{})",
        dir.display(),
        if args.sweep.is_some() { "; sweep.md, one directory per seed" } else { "" }
    );
    Ok(match ran {
        Ran::Interrupted(code) => ExitCode::from(code),
        Ran::Passed => ExitCode::SUCCESS,
        Ran::Failed => ExitCode::from(1),
    })
}

/// How a run (or a sweep) ended.
enum Ran {
    Passed,
    Failed,
    Interrupted(u8),
}

/// One run with its evidence in `dir`, printed when `to_stdout`: how it ended, and what it found
/// (`None` when it could not complete or was interrupted).
async fn one(
    lab: &mut Lab,
    cfg: &ChaosConfig,
    dir: &std::path::Path,
    to_stdout: bool,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<(Ran, Option<chaos::Found>)> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--evidence-dir {}: cannot be made", dir.display()))?;
    let reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TextReporter::new(to_stdout, Some(dir.join("output.txt")))),
        Box::new(JsonlReporter::new(Some(dir.join("events.jsonl")), false)),
        Box::new(JunitReporter::new(Some(dir.join("junit.xml")), false)),
        Box::new(EnvironmentReporter::new(dir.join("environment.json"))),
        Box::new(TimelineReporter::new(dir.to_path_buf())),
    ];
    let mut rec = Recorder::new(reporters);
    rec.environment(vec![
        (
            "lab".into(),
            format!("fencing lab {}", env!("CARGO_PKG_VERSION")),
        ),
        (
            "command_line".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        ("seed".into(), cfg.seed.to_string()),
        ("backend".into(), lab.describe_servers()),
        (
            "chaos".into(),
            format!(
                "time={}ms holders={} mode={} faults={} ttl={}ms",
                cfg.time.as_millis(),
                cfg.holders,
                cfg.mode_name,
                cfg.fault_names(),
                lab.params.ttl.as_millis()
            ),
        ),
    ]);
    rec.case_with_lanes(chaos::CASE, chaos::TITLE, chaos::lanes(cfg.holders));
    let (found, interrupted) = tokio::select! {
        found = chaos::run(lab, &mut rec, cfg, dir) => match found {
            Ok(found) => (Some(found), None),
            Err(e) => {
                rec.abort(&format!("{e:#}"));
                (None, None)
            }
        },
        _ = sigint.recv() => (None, Some(("SIGINT", 130))),
        _ = sigterm.recv() => (None, Some(("SIGTERM", 143))),
    };
    if let Some((name, _)) = interrupted {
        rec.interrupted(name);
    }
    let summary = rec
        .finish()
        .with_context(|| format!("failed to write the evidence into {}", dir.display()))?;
    let ran = match interrupted {
        Some((_, code)) => Ran::Interrupted(code),
        None if summary.all_passed() => Ran::Passed,
        None => Ran::Failed,
    };
    Ok((ran, found))
}

async fn single(
    lab: &mut Lab,
    cfg: &ChaosConfig,
    dir: &std::path::Path,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<Ran> {
    Ok(one(lab, cfg, dir, true, sigint, sigterm).await?.0)
}

/// `--sweep N`: N runs, seeds `seed` … `seed + N - 1`, each with its evidence in `seed-K/`; one
/// line per run, then the table of pause lengths (stdout and `sweep.md`). Fails when a run broke
/// an invariant at the scope under test; a run whose control showed nothing is counted, not
/// failed (its pauses still count in the table).
async fn sweep(
    lab: &mut Lab,
    cfg: &ChaosConfig,
    n: u64,
    dir: &std::path::Path,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<Ran> {
    let mut runs = Vec::new();
    let mut broken = 0;
    let mut gentle = 0;
    for k in 0..n {
        let seed = cfg.seed + k;
        let run_cfg = ChaosConfig {
            seed,
            ..cfg.clone()
        };
        let (ran, found) = one(
            lab,
            &run_cfg,
            &dir.join(format!("seed-{seed}")),
            false,
            sigint,
            sigterm,
        )
        .await?;
        if let Ran::Interrupted(code) = ran {
            return Ok(Ran::Interrupted(code));
        }
        let Some(found) = found else {
            println!("seed {seed}: could not complete (see seed-{seed}/output.txt)");
            broken += 1;
            continue;
        };
        let v = &found.verdict;
        let at = |scope: &str| v.i3.get(scope).map_or(0, Vec::len);
        let fenced_ok = at(chaos::SCOPE) == 0 && v.durability.is_empty();
        broken += usize::from(!fenced_ok || !v.i2.is_empty());
        gentle += usize::from(at(chaos::CONTROL_SCOPE) == 0);
        let injected = |kind| found.injected.iter().filter(|f| f.kind == kind).count();
        let pauses = injected(chaos::schedule::FaultKind::Pause);
        let failovers = if cfg.faults.contains(&chaos::schedule::FaultKind::Failover) {
            format!(
                "{} failovers (lease store: {}); ",
                injected(chaos::schedule::FaultKind::Failover),
                lab.describe_lease_store()
            )
        } else {
            String::new()
        };
        println!(
            "seed {seed}: {failovers}{pauses} pauses; I2 violations {}; I3 violations {} at {} ({}), {} at the unfenced control; {}",
            v.i2.len(),
            at(chaos::SCOPE),
            chaos::SCOPE,
            cfg.mode_name,
            at(chaos::CONTROL_SCOPE),
            match (fenced_ok, v.i2.is_empty()) {
                (true, true) => "fence held",
                (true, false) => "the lease store broke I2; the fence held",
                (false, _) => "FENCE BROKEN",
            }
        );
        runs.push(chaos::sweep::Run::of(seed, &found, lab.params.ttl));
    }
    let table = chaos::sweep::table(&runs, cfg.mode_name);
    let text = format!(
        "# Chaos sweep — seeds {}–{}, {} ms each, {} holders, faults {}, TTL {} ms\n\n\
         A pause is harmful when the checker blames an I3 violation on it: a write of the paused \
         holder, made with its old token, committed after a newer token's write at that scope.\n\n\
         {table}\n{n} runs: {broken} broke an invariant (I2 at the lease store, I3 or durability at the \
         scope under test); {gentle} showed no violation at the unfenced control.\n",
        cfg.seed,
        cfg.seed + n - 1,
        cfg.time.as_millis(),
        cfg.holders,
        cfg.fault_names(),
        lab.params.ttl.as_millis()
    );
    print!("{text}");
    std::fs::write(dir.join("sweep.md"), &text)
        .with_context(|| format!("failed to write {}", dir.join("sweep.md").display()))?;
    Ok(if broken == 0 {
        Ran::Passed
    } else {
        Ran::Failed
    })
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7500ms"), Ok(Duration::from_millis(7500)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert!(parse_duration("1s").unwrap_err().contains("too short"));
        assert!(parse_duration("3h").unwrap_err().contains("units"));
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("not a duration"));
    }
}
