//! Each scenario, run end to end against its own embedded cluster, must pass every check, and
//! make exactly the number of checks it is known to make (a scenario that silently stopped
//! checking something would otherwise still "pass").

use harness::cluster::{ClusterConfig, PgBinaries};
use harness::evidence::{render_text, Recorder};
use scenarios::{Lab, Params};

/// The preflight's checks, made before every selection.
const PREFLIGHT_CHECKS: usize = 3;

async fn run(id: &str, checks: usize) -> anyhow::Result<()> {
    run_with(id, checks, Params::default()).await
}

async fn run_with(id: &str, checks: usize, params: Params) -> anyhow::Result<()> {
    let cluster = ClusterConfig {
        max_connections: params.max_connections(),
        ..ClusterConfig::new(PgBinaries::locate(None)?)
    };
    let holder = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let mut lab = Lab::start(cluster, params, holder).await?;
    let mut rec = Recorder::new(Vec::new());
    let selected = scenarios::select(&[id.to_owned()]).map_err(anyhow::Error::msg)?;
    scenarios::run_all(&mut lab, &mut rec, &selected).await;
    let text: Vec<String> = rec.events().iter().filter_map(render_text).collect();
    let summary = rec.summary();
    assert_eq!(summary.failed, 0, "{id} failed:\n{}", text.join("\n"));
    assert_eq!(
        summary.passed,
        PREFLIGHT_CHECKS + checks,
        "{id} made another number of checks:\n{}",
        text.join("\n")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_normal_path_passes() -> anyhow::Result<()> {
    run("F1", 8).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_long_transaction_judges_by_its_start_and_equal_tokens_pass() -> anyhow::Result<()> {
    run("F2", 12).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_exactly_one_contender_wins_a_free_lease() -> anyhow::Result<()> {
    run("F3", 11).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_paused_holder_write_is_rejected_after_takeover() -> anyhow::Result<()> {
    run("F4", 17).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_unfenced_resource_accepts_the_paused_holders_stale_write() -> anyhow::Result<()> {
    run("F5", 15).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_blocked_writer_reevaluates_the_floor_while_check_then_write_regresses_it(
) -> anyhow::Result<()> {
    run("F6", 15).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_scope_fence_rejects_a_stale_write_to_an_untouched_part() -> anyhow::Result<()> {
    run("F7", 4).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_tokens_and_floor_survive_a_crash_of_the_database() -> anyhow::Result<()> {
    run("F8", 6).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_only_the_versioned_publish_keeps_the_newest_content() -> anyhow::Result<()> {
    run("F9", 4).await
}

#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u1_a_takeover_fences_off_the_old_owners_renew_and_release() -> anyhow::Result<()> {
    run("U1", 8).await
}

#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2_a_stale_completion_affects_no_row_under_the_lease_join() -> anyhow::Result<()> {
    run("U2", 7).await
}

#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u3_only_database_time_refuses_to_renew_an_expired_lease() -> anyhow::Result<()> {
    run("U3", 2).await
}

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
    let selected =
        scenarios::select(&["U1".into(), "U2".into(), "U3".into()]).map_err(anyhow::Error::msg)?;
    scenarios::run_all(&mut lab, &mut rec, &selected).await;
    let s = rec.summary();
    assert_eq!((s.passed, s.failed, s.skipped), (PREFLIGHT_CHECKS, 0, 3));
    let text: Vec<String> = rec.events().iter().filter_map(render_text).collect();
    assert!(
        text.iter()
            .any(|l| l.contains("skip") && l.contains("mariadb-server")),
        "{text:?}"
    );
    Ok(())
}

/// The embedded MariaDB's fault verb: SIGKILL (no shutdown at all) and restart; a committed row
/// survives through InnoDB's recovery; and nothing is left once the server is dropped.
#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restart_immediate_keeps_committed_rows_and_drop_removes_everything(
) -> anyhow::Result<()> {
    use harness::mariadb::{MariaBinaries, MariaServer};
    use sqlx::mysql::MySqlConnectOptions;
    use sqlx::{ConnectOptions, Connection, Executor};
    let mut server = MariaServer::create(MariaBinaries::locate()?).await?;
    let root = server.root().to_path_buf();
    let opts = MySqlConnectOptions::new()
        .socket(server.socket_path())
        .username("root");
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
    drop(server);
    assert!(!root.exists(), "the server's directory is removed on drop");
    Ok(())
}

/// The one-statement fence keeps the guarantee: F4, F6 and F7's fenced checks pass against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_statement_fence_passes_f4_f6_and_f7() -> anyhow::Result<()> {
    let single = || Params {
        fenced_mode: fencing::resource::WriteMode::FencedSingle,
        ..Params::default()
    };
    run_with("F4", 17, single()).await?;
    run_with("F6", 15, single()).await?;
    run_with("F7", 4, single()).await
}
