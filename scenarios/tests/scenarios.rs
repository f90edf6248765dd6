//! Every scenario of the registry that the golden test's full run (`lab/tests/golden.rs`)
//! does not cover — those that need something beyond the embedded PostgreSQL: libfaketime,
//! MariaDB, a Docker engine — run end to end against their own servers here, one test each (so
//! that the test runner spreads them over its groups instead of one test running them one after
//! the other: the longest test of the suite, 260–410 s). Each must pass every check and make
//! exactly the number of checks it declares (a scenario that silently stopped checking something
//! would otherwise still "pass"); one that needs what this machine or build lacks must say
//! `skip`, never pass — and the test then says `skip` with the scenario's reason, or fails when
//! `LAB_REQUIRE` names the need (`harness::require`). The fence-dependent ones pass against every
//! fenced mode, and every deliberately broken variant fails at the check that guards against it.
//! The golden run makes the same checks for the rest (the lab counts each scenario's checks, and
//! runs the fence-dependent ones once per fenced mode): running them again here would double the
//! test command's time and prove nothing more.
//!
//! The tests sit in one module per need (`in_containers`, `on_mariadb`, `with_faketime`,
//! `embedded`: the test runner's groups go by those names), and the lists come from
//! `scenarios::ALL` and `scenarios::broken::all()`: a guard test fails when a scenario with needs,
//! a fenced mode of a fence-dependent one or a broken variant has no test here, or one sits in
//! the wrong module.

use std::time::Duration;

use harness::evidence::{render_text, Event, Recorder};
use harness::require::{self, Dependency};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::{Needs, Params, Scenario, Testbed};

/// The preflight's checks, made before every selection.
const PREFLIGHT_CHECKS: usize = 3;

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

/// The lab's image (PostgreSQL 15's one, with every package the containers use) built before
/// any scenario's 300 s start: on a machine's first run one test process builds it while the
/// others wait (`harness::containers` takes a machine-wide lock), and a debootstrap is not spent
/// from an experiment's deadline (measured on a fresh machine: 279 s under the suite's load; F15,
/// F16 and F17 ran out of time). Without an engine, or when the build fails, the scenarios say
/// why themselves.
async fn images_ready() {
    #[cfg(feature = "containers")]
    if harness::containers::engine().await.is_ok() {
        if let Err(e) = harness::containers::LabImage::Postgres(15).image().await {
            eprintln!("the lab's image could not be built (the scenarios will say why): {e}");
        }
    }
}

/// Runs `scenario` alone on its own lab; its recorder (the preflight first).
async fn run_alone(scenario: &'static dyn Scenario, params: Params) -> anyhow::Result<Recorder> {
    let bins = tokio::task::spawn_blocking(|| PgBinaries::locate(None)).await??;
    let cluster = ClusterConfig {
        max_connections: params.max_connections(),
        ..ClusterConfig::new(bins)
    };
    let holder = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let mut bed = Testbed::start(cluster, params, holder).await?;
    let mut rec = Recorder::new(Vec::new());
    scenarios::run_all(&mut bed, &mut rec, &[scenario]).await;
    bed.shutdown().await;
    Ok(rec)
}

/// Runs `scenario` alone on its own lab; `Err` with the run's text when it did not pass.
async fn run_with(scenario: &'static dyn Scenario, params: Params) -> anyhow::Result<()> {
    let id = scenario.spec().id;
    let store = params.case.store;
    let rec = run_alone(scenario, params).await?;
    let text = rec
        .events()
        .iter()
        .filter_map(render_text)
        .collect::<Vec<_>>()
        .join("\n");
    let s = rec.summary();
    let skipped_as_it_may = scenario.spec().needs != Needs::Nothing
        && (s.passed, s.failed, s.skipped) == (PREFLIGHT_CHECKS, 0, 1);
    // A check the run could not judge (U1's probe of a lease's last millisecond that never
    // landed in it) is waived — counted apart, never passed — as the runner counts it.
    let declared = scenario.spec().checks_in(store, false);
    let passed_in_full =
        (s.passed + rec.waived(), s.failed, s.skipped) == (PREFLIGHT_CHECKS + declared, 0, 0);
    anyhow::ensure!(
        skipped_as_it_may || passed_in_full,
        "{id}: expected {} passed checks and no failure (or, for a scenario with needs, a skip); \
         got {s}:\n{text}",
        PREFLIGHT_CHECKS + declared
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
    let Some(dep) = dependency(scenario.spec().needs) else {
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
    require::skip(dep, scenario.spec().id, why)?;
    Ok(())
}

/// Each run's deadline: the slowest (F17, the R- and RL-series) take 30–120 s under the suite's
/// load.
const DEADLINE: Duration = Duration::from_secs(300);

/// The scenario `id` of [`scenarios::ALL`], whose needs are `needs` (the module its test sits
/// in says so: a test in the wrong module fails).
fn scenario(id: &str, needs: Needs) -> &'static dyn Scenario {
    let found = *scenarios::ALL
        .iter()
        .find(|s| s.spec().id == id)
        .unwrap_or_else(|| panic!("no scenario {id} in scenarios::ALL"));
    assert_eq!(
        found.spec().needs,
        needs,
        "{id}'s test sits in the wrong module"
    );
    found
}

/// The parameters of a run with the fenced mode `mode` ("fenced-scope": the default).
fn with_fence(mode: &str) -> Params {
    let profile = fencing::resource::fenced_mode_profile(mode)
        .unwrap_or_else(|| panic!("{mode} is not a fenced mode"));
    let params = Params {
        case: scenarios::Case {
            sut: std::sync::Arc::new(profile.clone()),
            ..scenarios::Case::default()
        },
        ..Params::default()
    };
    assert_eq!(params.case.fence_label(), mode);
    params
}

/// Scenario `id` (whose needs are `needs`) passes alone with the number of checks it declares,
/// with the fenced mode `mode`, within [`DEADLINE`] — or says `skip` for want of its need.
async fn passes_alone(id: &str, needs: Needs, mode: &str) -> anyhow::Result<()> {
    remove_containers_when_stopped();
    let scenario = scenario(id, needs);
    if mode != "fenced-scope" {
        assert!(
            scenario.spec().fence_dependent,
            "{id} does not depend on the fence: one fenced mode shows it"
        );
    }
    if needs == Needs::Containers {
        images_ready().await;
    }
    tokio::time::timeout(DEADLINE, run_with(scenario, with_fence(mode)))
        .await
        .map_err(|_| anyhow::anyhow!("{id} did not finish within {DEADLINE:?}"))?
}

/// A reviewer's "break it and see it fail", kept: the broken variant of `id`
/// (`scenarios::broken`) fails at the check that guards against it — or, where its need is not
/// met here, says `skip`.
async fn broken_fails(id: &str, needs: Needs) -> anyhow::Result<()> {
    remove_containers_when_stopped();
    let (scenario, guard) = scenarios::broken::all()
        .into_iter()
        .find(|(s, _)| s.spec().id == id)
        .unwrap_or_else(|| panic!("no broken variant of {id}"));
    assert_eq!(
        scenario.spec().needs,
        needs,
        "broken {id}'s test sits in the wrong module"
    );
    if needs == Needs::Containers {
        images_ready().await;
    }
    let rec = run_alone(scenario, Params::default()).await?;
    let s = rec.summary();
    let text: Vec<String> = rec.events().iter().filter_map(render_text).collect();
    if s.skipped == 1 && s.failed == 0 && needs != Needs::Nothing {
        return said_skipped(scenario, &rec);
    }
    assert!(
        text.iter()
            .any(|l| l.trim_start().starts_with("FAIL") && l.contains(guard)),
        "broken {id}: no failed check says {guard:?}:\n{}",
        text.join("\n")
    );
    Ok(())
}

/// One test per run, in a module per need. `alone`: the scenario passes alone
/// ([`passes_alone`], fenced-scope); `fenced`: with another fenced mode; `broken`: its broken
/// variant fails ([`broken_fails`]). [`OWN_TESTS`] lists them all for the guard test.
macro_rules! one_test_each {
    ($($module:ident ($needs:ident) {
        $($test:ident: $kind:ident $id:literal $($mode:literal)?),* $(,)?
    })*) => {
        $(mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() -> anyhow::Result<()> {
                    one_test_each!(@run $kind $id $needs $($mode)?)
                }
            )*
        })*
        /// Every test above: its kind, scenario id, need and fenced mode.
        const OWN_TESTS: &[(&str, &str, Needs, &str)] = &[
            $($((stringify!($kind), $id, Needs::$needs, one_test_each!(@mode $($mode)?)),)*)*
        ];
    };
    (@run alone $id:literal $needs:ident) => {
        passes_alone($id, Needs::$needs, "fenced-scope").await
    };
    (@run fenced $id:literal $needs:ident $mode:literal) => {
        passes_alone($id, Needs::$needs, $mode).await
    };
    (@run broken $id:literal $needs:ident) => { broken_fails($id, Needs::$needs).await };
    (@mode) => { "fenced-scope" };
    (@mode $mode:literal) => { $mode };
}

one_test_each! {
    in_containers (Containers) {
        f15: alone "F15",
        f15_fenced_single: fenced "F15" "fenced-single",
        f15_fenced_shared: fenced "F15" "fenced-shared",
        f15_broken_fails: broken "F15",
        f16: alone "F16",
        f16_fenced_single: fenced "F16" "fenced-single",
        f16_fenced_shared: fenced "F16" "fenced-shared",
        f16_broken_fails: broken "F16",
        f17: alone "F17",
        f17_broken_fails: broken "F17",
        r1: alone "R1",
        r2: alone "R2",
        r3: alone "R3",
        rl1: alone "RL1",
        rl2: alone "RL2",
        rl3: alone "RL3",
        rl4: alone "RL4",
        s5: alone "S5",
        s6: alone "S6",
    }
    on_mariadb (MariaDb) {
        u1: alone "U1",
        u2: alone "U2",
        u3: alone "U3",
        u4: alone "U4",
        u5: alone "U5",
    }
    with_faketime (Faketime) {
        f13: alone "F13",
        f13_broken_fails: broken "F13",
    }
    embedded (Nothing) {
        f14_broken_fails: broken "F14",
    }
}

/// The guard: every scenario with needs has a test of its own above, and each fence-dependent
/// one a test per other fenced mode; every broken variant has one. Adding an experiment with
/// needs (or a broken variant) without its test here fails.
#[test]
fn every_scenario_with_needs_every_fenced_mode_and_every_broken_variant_has_its_own_test() {
    let has = |kind: &str, id: &str, mode: &str| {
        OWN_TESTS
            .iter()
            .any(|&(k, i, _, m)| k == kind && i == id && m == mode)
    };
    let mut missing = Vec::new();
    for s in scenarios::ALL
        .iter()
        .map(|s| s.spec())
        .filter(|s| s.needs != Needs::Nothing)
    {
        if !has("alone", s.id, "fenced-scope") {
            missing.push(format!("{} alone", s.id));
        }
        if s.fence_dependent {
            for (mode, _) in &fencing::resource::FENCED_MODES[1..] {
                if !has("fenced", s.id, mode) {
                    missing.push(format!("{} with {mode}", s.id));
                }
            }
        }
    }
    for (s, _) in scenarios::broken::all() {
        if !has("broken", s.spec().id, "fenced-scope") {
            missing.push(format!("broken {}", s.spec().id));
        }
    }
    assert!(missing.is_empty(), "no test of its own: {missing:?}");
    let runs: std::collections::HashSet<_> =
        OWN_TESTS.iter().map(|&(k, i, _, m)| (k, i, m)).collect();
    assert_eq!(OWN_TESTS.len(), runs.len(), "a run tested twice");
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
    let mut bed = Testbed::start(cluster, params, holder).await?;
    let mut rec = Recorder::new(Vec::new());
    let selected: Vec<_> = scenarios::ALL
        .iter()
        .copied()
        .filter(|s| s.spec().needs == Needs::MariaDb)
        .collect();
    scenarios::run_all(&mut bed, &mut rec, &selected).await;
    bed.shutdown().await;
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
