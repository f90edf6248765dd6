//! `lab chaos`: the seeded fault run (`scenarios::chaos`) on a throwaway cluster of its own,
//! with commit timestamps on (the checker orders writes by commit). The same reporters as
//! `lab run` write its evidence, plus the schedule, the history and the verdict.

use anyhow::{anyhow, Context as _};
use fencing::lease::StoreId;
use fencing::resource::WriteMode;
use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{EnvironmentReporter, JsonlReporter, Recorder, Reporter, TextReporter};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::chaos::{self, ChaosConfig};
use scenarios::{Backend, Params, Testbed};

use crate::args::{BackendArg, ChaosArgs};
use crate::{Ended, Signals};

/// Runs it on the lab's runtime: passed, failed (a check failed), could not run (the error's
/// chain on stderr) or interrupted.
pub fn run(args: ChaosArgs) -> Ended {
    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab chaos: failed to start the async runtime: {e}");
            return Ended::CouldNotRun;
        }
    };
    match runtime.block_on(run_inner(args)) {
        Ok(ended) => ended,
        Err(e) => {
            eprintln!("lab chaos: {e:#}");
            Ended::CouldNotRun
        }
    }
}

/// `lab check HISTORY`: the checker over a saved chaos run, its verdict on stdout as the run
/// printed it ([`chaos::recheck`]). Needs no server and no runtime.
pub fn check(history: &std::path::Path) -> Ended {
    let text = match std::fs::read_to_string(history) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("lab check: {}: {e}", history.display());
            return Ended::CouldNotRun;
        }
    };
    let mut rec = Recorder::new(vec![Box::new(TextReporter::new(true, None))]);
    rec.case(
        chaos::CASE,
        &format!("{} — re-checked from {}", chaos::TITLE, history.display()),
    );
    if let Err(e) = chaos::recheck(&mut rec, &text) {
        eprintln!("lab check: {}: {e:#}", history.display());
        return Ended::CouldNotRun;
    }
    match rec.finish() {
        Ok(summary) if summary.all_passed() => Ended::Passed,
        Ok(_) => Ended::Failed,
        Err(e) => {
            eprintln!("lab check: {e}");
            Ended::CouldNotRun
        }
    }
}

async fn run_inner(args: ChaosArgs) -> anyhow::Result<Ended> {
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
    if patroni.is_some() && args.backend == Some(BackendArg::Embedded) {
        anyhow::bail!("--lease-store patroni… runs on containers: drop --backend embedded");
    }
    let backend = match (args.backend.unwrap_or_default(), patroni) {
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
    // A lock service (not ZooKeeper, whose client reconnects at once on a new connection) is
    // a host of its own: its holders can be partitioned from it on the embedded backend too.
    let store = args.lease_store.store();
    let service_to_cut = store.service().is_some() && store != StoreId::Zookeeper;
    if let Some(kind) = args.faults.iter().flatten().find(|k| {
        k.needs_containers() && !containers && !(service_to_cut && **k == FaultKind::Partition)
    }) {
        if store == StoreId::Zookeeper && *kind == FaultKind::Partition {
            anyhow::bail!(
                "--faults partition on ZooKeeper: its client reconnects at once on a new \
                 connection and re-attaches its session, which holding the connections it has \
                 cannot stop (F16 holds its one holder by owner, a user of its own; chaos's \
                 holders share one); leave partition out"
            );
        }
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
        (None, Ok(f)) => (
            FaultKind::defaults_on(containers, patroni.is_some(), service_to_cut),
            Some(f),
        ),
        (None, Err(reason)) => {
            eprintln!("lab chaos: the drift fault is left out: {reason}");
            let faults = FaultKind::defaults_on(containers, patroni.is_some(), service_to_cut)
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
    let (mode, profile) = match &args.sut {
        None => {
            let (mode, profile) =
                fencing::resource::named_write(mode_name).context("a named write")?;
            (mode, profile.clone())
        }
        Some(arg) => match fencing::profile::Sut::load(arg).map_err(|e| anyhow!("--sut {e}"))? {
            fencing::profile::Sut::Pg(profile) => (WriteMode::Fenced, profile),
            fencing::profile::Sut::Job(_) => anyhow::bail!(
                "--sut {arg}: a MariaDB job-lease design; chaos runs PostgreSQL profiles (the U-series runs this one: lab run --sut {arg})"
            ),
        },
    };
    let mode_name = if args.sut.is_some() { "sut" } else { mode_name };
    let cfg = ChaosConfig {
        seed,
        time: args.time,
        holders: args.holders as usize,
        leases: args
            .leases
            .map_or(if args.holders >= 4 { 2 } else { 1 }, |k| k as usize),
        mode,
        mode_name,
        faults,
        faketime,
    };
    let mut signals = Signals::install()?;
    let bins = PgBinaries::locate(args.pg_bindir.as_deref())?;
    let (holder_bin, holder_prefix) =
        harness::holder::holder_for(args.holder_cmd.as_deref()).map_err(anyhow::Error::msg)?;
    // A profile of the user's is checked before anything runs with it, as `lab run --sut` does.
    if !profile.is_built_in() {
        let checked = tokio::select! {
            checked = crate::profile::prepare_with(&profile, bins.clone()) => checked,
            signal = signals.recv() => return Ok(Ended::Interrupted(signal)),
        };
        if let Err(e) = checked {
            eprintln!("lab chaos: --sut {e:#}");
            return Ok(Ended::CouldNotRun);
        }
    }
    let mut params = Params::default();
    params.case.sut = std::sync::Arc::new(profile);
    params.case.store = args.lease_store.store();
    let cluster = ClusterConfig {
        max_connections: params.max_connections() + 2 * args.holders as u32,
        track_commit_timestamp: true,
        // A holder of the user's may have no Unix-socket client (JDBC): TCP too, on a free port.
        listen_tcp: args.holder_cmd.is_some(),
        port: match args.holder_cmd {
            Some(_) => {
                crate::config::free_port().unwrap_or(harness::server::postgres::DEFAULT_PORT)
            }
            None => harness::server::postgres::DEFAULT_PORT,
        },
        ..ClusterConfig::new(bins)
    };
    let dir = args.evidence_dir.clone();
    let mut bed = tokio::select! {
        bed = Testbed::start_on(backend, Testbed::new_run_mark(), cluster, params, holder_bin) => bed?,
        signal = signals.recv() => return Ok(Ended::Interrupted(signal)),
    };
    bed.holder_prefix = holder_prefix;
    let outcome = match args.sweep {
        None => single(&mut bed, &cfg, &dir, &mut signals).await,
        Some(n) => sweep(&mut bed, &cfg, n, &dir, &mut signals).await,
    };
    let keep = matches!(&outcome, Ok(Ended::Failed));
    if keep {
        let kept = bed.keep();
        for line in &kept {
            eprintln!("lab chaos: {line}");
        }
        if !kept.is_empty() {
            let whose = "of the failing run's servers";
            let line = crate::kept_size_line(&kept, whose, &crate::clean_command()).await;
            eprintln!("{line}");
        }
    }
    bed.shutdown().await;
    let ended = outcome?;
    eprintln!(
        "lab chaos: seed {seed}; evidence in {} (schedule.txt, history.jsonl, verdict.md, report.html{})",
        dir.display(),
        if args.sweep.is_some() { "; sweep.md, one directory per seed" } else { "" }
    );
    Ok(ended)
}

/// One run with its evidence in `dir`, printed when `to_stdout`: how it ended (passed, failed or
/// interrupted), and what it found
/// (`None` when it could not complete or was interrupted).
async fn one(
    bed: &mut Testbed,
    cfg: &ChaosConfig,
    dir: &std::path::Path,
    to_stdout: bool,
    signals: &mut Signals,
) -> anyhow::Result<(Ended, Option<chaos::Found>)> {
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
        ("backend".into(), bed.describe_servers()),
        (
            "chaos".into(),
            format!(
                "time={}ms holders={} leases={} mode={} faults={} ttl={}ms",
                cfg.time.as_millis(),
                cfg.holders,
                cfg.leases,
                cfg.mode_name,
                cfg.fault_names(),
                bed.case().ttl.as_millis()
            ),
        ),
    ]);
    rec.case_with_lanes(chaos::CASE, chaos::TITLE, chaos::lanes(cfg.holders));
    let (found, interrupted) = tokio::select! {
        found = chaos::run(bed, &mut rec, cfg, dir) => match found {
            Ok(found) => (Some(found), None),
            Err(e) => {
                rec.abort(&format!("{e:#}"));
                (None, None)
            }
        },
        signal = signals.recv() => (None, Some(signal)),
    };
    if let Some(signal) = interrupted {
        rec.interrupted(signal.name());
    }
    let summary = rec
        .finish()
        .with_context(|| format!("failed to write the evidence into {}", dir.display()))?;
    let ended = match interrupted {
        Some(signal) => Ended::Interrupted(signal),
        None if summary.all_passed() => Ended::Passed,
        None => Ended::Failed,
    };
    Ok((ended, found))
}

async fn single(
    bed: &mut Testbed,
    cfg: &ChaosConfig,
    dir: &std::path::Path,
    signals: &mut Signals,
) -> anyhow::Result<Ended> {
    Ok(one(bed, cfg, dir, true, signals).await?.0)
}

/// `--sweep N`: N runs, seeds `seed` … `seed + N - 1`, each with its evidence in `seed-K/`; one
/// line per run, then the table of pause lengths (stdout and `sweep.md`). Fails when a run broke
/// an invariant at the scope under test; a run whose control showed nothing is counted, not
/// failed (its pauses still count in the table).
async fn sweep(
    bed: &mut Testbed,
    cfg: &ChaosConfig,
    n: u64,
    dir: &std::path::Path,
    signals: &mut Signals,
) -> anyhow::Result<Ended> {
    let mut runs = Vec::new();
    let mut broken = 0;
    let mut gentle = 0;
    for k in 0..n {
        let seed = cfg.seed + k;
        let run_cfg = ChaosConfig {
            seed,
            ..cfg.clone()
        };
        let (ended, found) = one(
            bed,
            &run_cfg,
            &dir.join(format!("seed-{seed}")),
            false,
            signals,
        )
        .await?;
        if let Ended::Interrupted(signal) = ended {
            return Ok(Ended::Interrupted(signal));
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
                bed.describe_lease_store()
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
        runs.push(chaos::sweep::Run::of(seed, &found, bed.case().ttl));
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
        bed.case().ttl.as_millis()
    );
    print!("{text}");
    std::fs::write(dir.join("sweep.md"), &text)
        .with_context(|| format!("failed to write {}", dir.join("sweep.md").display()))?;
    Ok(if broken == 0 {
        Ended::Passed
    } else {
        Ended::Failed
    })
}
