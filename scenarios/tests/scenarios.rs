//! Every scenario of the registry that the golden test's full run (`lab/cli/tests/golden.rs`)
//! does not cover — those that need something beyond the embedded PostgreSQL: libfaketime,
//! MariaDB, a Docker engine — run end to end against their own servers here. Each must pass every
//! check and make exactly the number of checks it declares (a scenario that silently stopped
//! checking something would otherwise still "pass"); one that needs what this machine or build
//! lacks must say `skip`, never pass — and the test then says `skip` with the scenario's reason,
//! or fails when `LAB_REQUIRE` names the need (`harness::require`). The fence-dependent ones pass
//! against every fenced mode. The golden run makes the same checks for the rest (the lab counts each scenario's checks, and
//! runs the fence-dependent ones once per fenced mode): running them again here would double the
//! test command's time and prove nothing more. The lists come from `scenarios::ALL`: adding an
//! experiment adds it here or there.

use std::time::Duration;

use harness::evidence::{render_text, Event, Recorder};
use harness::require::{self, Dependency};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::{Lab, Needs, Params, Scenario};

/// The preflight's checks, made before every selection.
const PREFLIGHT_CHECKS: usize = 3;

/// The scenarios running at once in this test binary, whichever test started them: its tests run
/// side by side, and an uncapped sum (the broken variants beside every scenario beside the
/// fenced-single run) loaded a 2-core CI machine until F3's contenders no longer overlapped.
static RUNNING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(AT_ONCE);

/// The scenarios that start containers run one at a time in this test binary: with several at
/// once (each starting PostgreSQL containers of its own) beside the other tests, a 2-core machine
/// once left one unable to connect to its container within its pool's 30 s (measured).
static CONTAINERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// For as long as a test runs: a signal that stops this process (nextest's SIGTERM at a test's
/// timeout, Ctrl-C's SIGINT) first removes the containers, networks and network holds its labs
/// made — they do not die with the process, as the embedded clusters do (parent-death signal),
/// and would wait for the next lab's sweep. Then the process exits as the signal would have it.
fn remove_containers_when_stopped() {
    #[cfg(feature = "containers")]
    tokio::spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        let code = tokio::select! {
            _ = term.recv() => 143,
            _ = int.recv() => 130,
        };
        let removed = harness::containers::remove_this_process().await;
        eprintln!("stopped by a signal: removed {removed} container(s) of this process's labs");
        std::process::exit(code);
    });
}

/// Runs `scenario` alone on its own lab; its recorder (the preflight first).
async fn run_alone(scenario: &'static dyn Scenario, params: Params) -> anyhow::Result<Recorder> {
    let _one_with_containers = match scenario.needs() {
        Needs::Containers => Some(CONTAINERS.acquire().await?),
        _ => None,
    };
    let _running = RUNNING.acquire().await?;
    let bins = tokio::task::spawn_blocking(|| PgBinaries::locate(None)).await??;
    let cluster = ClusterConfig {
        max_connections: params.max_connections(),
        ..ClusterConfig::new(bins)
    };
    let holder = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let mut lab = Lab::start(cluster, params, holder).await?;
    let mut rec = Recorder::new(Vec::new());
    scenarios::run_all(&mut lab, &mut rec, &[scenario]).await;
    lab.shutdown().await;
    Ok(rec)
}

/// Runs `scenario` alone on its own lab; `Err` with the run's text when it did not pass.
async fn run_with(scenario: &'static dyn Scenario, params: Params) -> anyhow::Result<()> {
    let id = scenario.id();
    let rec = run_alone(scenario, params).await?;
    let text = rec
        .events()
        .iter()
        .filter_map(render_text)
        .collect::<Vec<_>>()
        .join("\n");
    let s = rec.summary();
    let skipped_as_it_may = scenario.needs() != Needs::Nothing
        && (s.passed, s.failed, s.skipped) == (PREFLIGHT_CHECKS, 0, 1);
    // A check the run could not judge (U1's probe of a lease's last millisecond that never
    // landed in it) is waived — counted apart, never passed — as the runner counts it.
    let passed_in_full = (s.passed + rec.waived(), s.failed, s.skipped)
        == (PREFLIGHT_CHECKS + scenario.checks(), 0, 0);
    anyhow::ensure!(
        skipped_as_it_may || passed_in_full,
        "{id}: expected {} passed checks and no failure (or, for a scenario with needs, a skip); \
         got {s}:\n{text}",
        PREFLIGHT_CHECKS + scenario.checks()
    );
    if skipped_as_it_may {
        said_skipped(scenario, &rec)?;
    }
    Ok(())
}

/// The dependency a scenario's needs name, in `LAB_REQUIRE`'s words.
fn dependency(needs: Needs) -> Option<Dependency> {
    match needs {
        Needs::Nothing => None,
        Needs::MariaDb => Some(Dependency::MariaDb),
        Needs::Faketime => Some(Dependency::Faketime),
        Needs::Containers => Some(Dependency::Docker),
    }
}

/// `scenario` said `skip` for want of what it needs: the test says so too, with the scenario's
/// reason, where the test run shows it — or fails, when `LAB_REQUIRE` names the need
/// (`harness::require`).
fn said_skipped(scenario: &dyn Scenario, rec: &Recorder) -> anyhow::Result<()> {
    let Some(dep) = dependency(scenario.needs()) else {
        return Ok(());
    };
    let why = rec
        .events()
        .iter()
        .find_map(|e| match e {
            Event::Skipped { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .unwrap_or("it said skip");
    require::skip(dep, scenario.id(), why)?;
    Ok(())
}

/// How many scenarios run at once, each with its own servers: enough to overlap their waits,
/// few enough that timing-sensitive ones (F3's held lease, F4's renewals) keep their margins on
/// a loaded 2-core machine.
const AT_ONCE: usize = 4;

/// Runs each of `scenarios` on its own lab, [`AT_ONCE`] at a time, and reports every one that
/// failed.
async fn run_each(scenarios: Vec<&'static dyn Scenario>, params: Params) -> anyhow::Result<()> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut runs = tokio::task::JoinSet::new();
    for scenario in scenarios {
        let params = params.clone();
        let slots = slots.clone();
        runs.spawn(async move {
            let _slot = slots.acquire_owned().await?;
            tokio::time::timeout(Duration::from_secs(300), run_with(scenario, params))
                .await
                .map_err(|_| anyhow::anyhow!("{} did not finish within 300 s", scenario.id()))?
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = runs.join_next().await {
        if let Err(e) = joined? {
            failures.push(format!("{e:#}"));
        }
    }
    anyhow::ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_with_needs_passes_alone_with_the_number_of_checks_it_declares(
) -> anyhow::Result<()> {
    remove_containers_when_stopped();
    run_each(with_needs(), Params::default()).await
}

/// The scenarios the golden run leaves out: those that need more than the embedded PostgreSQL.
fn with_needs() -> Vec<&'static dyn Scenario> {
    scenarios::ALL
        .iter()
        .copied()
        .filter(|s| s.needs() != Needs::Nothing)
        .collect()
}

/// A reviewer's "break it and see it fail", kept: each deliberately broken variant
/// (`scenarios::broken`) fails, at the check that guards against it — or, where its need is not
/// met here, says `skip`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_broken_variant_fails_at_the_check_that_guards_it() -> anyhow::Result<()> {
    remove_containers_when_stopped();
    for (scenario, guard) in scenarios::broken::all() {
        let rec = run_alone(scenario, Params::default()).await?;
        let s = rec.summary();
        let text: Vec<String> = rec.events().iter().filter_map(render_text).collect();
        if s.skipped == 1 && s.failed == 0 && scenario.needs() != Needs::Nothing {
            said_skipped(scenario, &rec)?;
            continue;
        }
        assert!(
            text.iter()
                .any(|l| l.trim_start().starts_with("FAIL") && l.contains(guard)),
            "broken {}: no failed check says {guard:?}:\n{}",
            scenario.id(),
            text.join("\n")
        );
    }
    Ok(())
}

/// The other fences keep the guarantee: every fence-dependent scenario with needs passes with
/// each of them (the golden run covers the ones without needs, once per fenced mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fence_dependent_scenario_with_needs_passes_with_every_other_fence(
) -> anyhow::Result<()> {
    remove_containers_when_stopped();
    let dependent: Vec<_> = with_needs()
        .into_iter()
        .filter(|s| s.fence_dependent())
        .collect();
    assert!(!dependent.is_empty(), "F15 and F16 depend on the fence");
    for (mode, _) in &fencing::resource::FENCED_MODES[1..] {
        let profile = fencing::resource::fenced_mode_profile(mode).expect("built in");
        let params = Params {
            sut: std::sync::Arc::new(profile.clone()),
            ..Params::default()
        };
        assert_eq!(params.fence_label(), *mode);
        run_each(dependent.clone(), params).await?;
    }
    Ok(())
}

/// Without MariaDB support built in, the U-series says `skip` with the install hint.
#[cfg(not(feature = "mariadb"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u_scenarios_without_mariadb_support_are_skipped_with_the_hint_never_passed(
) -> anyhow::Result<()> {
    let params = Params::default();
    let cluster = ClusterConfig {
        max_connections: params.max_connections(),
        ..ClusterConfig::new(PgBinaries::locate(None)?)
    };
    let holder = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let mut lab = Lab::start(cluster, params, holder).await?;
    let mut rec = Recorder::new(Vec::new());
    let selected: Vec<_> = scenarios::ALL
        .iter()
        .copied()
        .filter(|s| s.needs() == Needs::MariaDb)
        .collect();
    scenarios::run_all(&mut lab, &mut rec, &selected).await;
    lab.shutdown().await;
    let s = rec.summary();
    assert_eq!(
        (s.passed, s.failed, s.skipped),
        (PREFLIGHT_CHECKS, 0, selected.len())
    );
    let text: Vec<String> = rec.events().iter().filter_map(render_text).collect();
    assert!(
        text.iter()
            .any(|l| l.contains("skip") && l.contains("mariadb-server")),
        "{text:?}"
    );
    Ok(())
}

/// The embedded MariaDB's fault verb: SIGKILL (no shutdown at all) and restart; a committed row
/// survives through InnoDB's recovery; and nothing is left once the server is stopped and dropped.
#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restart_immediate_keeps_committed_rows_and_drop_removes_everything(
) -> anyhow::Result<()> {
    use harness::server::mariadb::{MariaBinaries, MariaServer};
    use harness::server::Server;
    use sqlx::{ConnectOptions, Connection, Executor};
    let mut server = MariaServer::create(MariaBinaries::locate()?).await?;
    let root = server.root().to_path_buf();
    let opts = server.connect_options(None, "root");
    let mut conn = opts.connect().await?;
    conn.execute("CREATE DATABASE t").await?;
    conn.execute("CREATE TABLE t.kept (id INT PRIMARY KEY) ENGINE = InnoDB")
        .await?;
    conn.execute("INSERT INTO t.kept VALUES (42)").await?;
    drop(conn);
    server.restart_immediate().await?;
    let mut conn = opts.connect().await?;
    let id: i32 = sqlx::query_scalar("SELECT id FROM t.kept")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(id, 42, "the committed row survived the SIGKILL");
    conn.close().await?;
    server.stop().await;
    drop(server);
    assert!(!root.exists(), "the server's directory is removed on drop");
    Ok(())
}
