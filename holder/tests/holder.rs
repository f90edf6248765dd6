//! The holder binary on its own, driven by the harness against a real cluster: the handshake,
//! the normal path, and the ways it refuses to hang or to write when it should not.

use fencing::resource::{Resource, WriteMode};
use fencing::schema::{self, Database};
use harness::holder::{describe, Holder, HolderSpec, EVENT_TIMEOUT};
use harness::server::{Cluster, ClusterConfig, PgBinaries};
use holder_protocol::{exit, Event, HolderFlags, Request, Token};
use sqlx::postgres::PgPoolOptions;

struct Env {
    cluster: Cluster,
    resource: Resource,
}

async fn env() -> anyhow::Result<Env> {
    let cluster = Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?;
    schema::provision(&mut cluster.admin().await?).await?;
    let mut res = None;
    for db in [Database::Lease, Database::Resource] {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(cluster.connect_options(db.name(), db.role()))
            .await?;
        schema::migrate(db, &pool).await?;
        res = Some(pool);
    }
    let resource = Resource::new(res.expect("resource pool"));
    resource.setup_scope("s").await?;
    Ok(Env { cluster, resource })
}

fn flags(socket_dir: std::path::PathBuf, port: u16, holder: &str, release: bool) -> HolderFlags {
    HolderFlags {
        store: "postgres".into(),
        socket_dir,
        port,
        lease: "job".into(),
        holder: holder.into(),
        ttl_ms: 1500,
        renew_ms: 400,
        margin_ms: 300,
        scope: "s".into(),
        part: "summary".into(),
        content: format!("by {holder}"),
        mode: WriteMode::Fenced.as_str().into(),
        sut: None,
        run_id: None,
        release,
        wait_before_check: false,
        wait_before_commit: false,
        wait_after_write: false,
        resource_host: None,
        resource_port: None,
        lease_host: None,
        lease_port: None,
        store_endpoint: None,
        loop_seed: None,
        loop_parts: 3,
        control_scope: None,
    }
}

fn spec(env: &Env, holder: &str, release: bool) -> HolderSpec {
    HolderSpec {
        prefix: Vec::new(),
        bin: env!("CARGO_BIN_EXE_holder").into(),
        flags: flags(
            env.cluster.socket_dir(),
            env.cluster.port(),
            holder,
            release,
        ),
        env: Vec::new(),
        run_as: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_acquires_waits_for_the_go_line_writes_renews_and_releases() -> anyhow::Result<()>
{
    let env = env().await?;
    let mut h = Holder::spawn(&spec(&env, "holder-a", true)).await?;
    assert_eq!(
        h.next("acquire", EVENT_TIMEOUT).await?.1,
        Event::Acquired {
            token: Token::Value(1)
        }
    );
    assert!(matches!(
        h.next("write point", EVENT_TIMEOUT).await?.1,
        Event::AtWritePoint {
            token: Token::Value(1),
            ..
        }
    ));
    assert!(
        env.resource.part("s", "summary").await?.is_none(),
        "nothing written before the go-line"
    );
    h.send(Request::Go).await?;
    assert_eq!(
        h.next("write", EVENT_TIMEOUT).await?.1,
        Event::Write {
            accepted: true,
            token: Token::Value(1)
        }
    );
    assert_eq!(
        h.next("renew", EVENT_TIMEOUT).await?.1,
        Event::RenewAfterWrite { ok: true }
    );
    assert_eq!(
        h.next("release", EVENT_TIMEOUT).await?.1,
        Event::Released { ok: true }
    );
    assert_eq!(
        describe(Some(h.exit_code(EVENT_TIMEOUT).await?)),
        describe(Some(exit::WROTE))
    );
    assert_eq!(
        env.resource.part("s", "summary").await?.map(|p| p.content),
        Some("by holder-a".into())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_told_to_wait_before_its_check_checks_only_after_the_go_line() -> anyhow::Result<()>
{
    let env = env().await?;
    let mut spec = spec(&env, "holder-a", false);
    spec.flags.wait_before_check = true;
    let mut h = Holder::spawn(&spec).await?;
    assert_eq!(
        h.next("acquire", EVENT_TIMEOUT).await?.1,
        Event::Acquired {
            token: Token::Value(1)
        }
    );
    let (_, before) = h.next("before the check", EVENT_TIMEOUT).await?;
    assert!(
        matches!(before, Event::BeforeCheck { token: Token::Value(1), deadline_left_ms } if deadline_left_ms > 0),
        "{before}"
    );
    // Its renewer keeps the deadline ahead while it waits: the check passes.
    h.send(Request::Go).await?;
    let (_, ready) = h.next("write point", EVENT_TIMEOUT).await?;
    assert!(
        matches!(
            ready,
            Event::AtWritePoint {
                token: Token::Value(1),
                ..
            }
        ),
        "{ready}"
    );
    h.send(Request::Go).await?;
    assert_eq!(
        h.next("write", EVENT_TIMEOUT).await?.1,
        Event::Write {
            accepted: true,
            token: Token::Value(1)
        }
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_deadline_passed_before_its_check_gives_up_without_writing(
) -> anyhow::Result<()> {
    let env = env().await?;
    let mut spec = spec(&env, "holder-a", false);
    spec.flags.wait_before_check = true;
    // Renewals far apart: nothing moves the deadline (ttl - margin = 200 ms) while it waits.
    spec.flags.ttl_ms = 300;
    spec.flags.margin_ms = 100;
    spec.flags.renew_ms = 60_000;
    let mut h = Holder::spawn(&spec).await?;
    assert_eq!(
        h.next("acquire", EVENT_TIMEOUT).await?.1,
        Event::Acquired {
            token: Token::Value(1)
        }
    );
    h.next("before the check", EVENT_TIMEOUT).await?;
    // The local deadline comes before the expiry by the database clock: it is counted
    // from before the acquire was sent, with the margin taken off the TTL.
    let lease = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(
            env.cluster
                .connect_options(Database::Lease.name(), Database::Lease.role()),
        )
        .await?;
    let lease = fencing::lease::SqlLeaseStore::new(lease, std::time::Duration::from_millis(100));
    harness::wait::until(
        "the lease is expired by the database clock",
        EVENT_TIMEOUT,
        || lease.is_free("job"),
    )
    .await?;
    h.send(Request::Go).await?;
    let (_, gave_up) = h.next("the check", EVENT_TIMEOUT).await?;
    assert!(
        matches!(gave_up, Event::DeadlinePassed { token: Token::Value(1), overdue_ms } if overdue_ms > 0),
        "{gave_up}"
    );
    assert_eq!(
        describe(Some(h.exit_code(EVENT_TIMEOUT).await?)),
        describe(Some(exit::DEADLINE_PASSED))
    );
    assert!(
        env.resource.attempts("s").await?.is_empty(),
        "no write was attempted"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_orchestrator_goes_away_exits_without_writing() -> anyhow::Result<()> {
    let env = env().await?;
    let mut h = Holder::spawn(&spec(&env, "holder-a", false)).await?;
    h.next("acquire", EVENT_TIMEOUT).await?;
    h.next("write point", EVENT_TIMEOUT).await?;
    // exit_code closes stdin first: the orchestrator is gone.
    assert_eq!(
        describe(Some(h.exit_code(EVENT_TIMEOUT).await?)),
        describe(Some(exit::ORPHANED))
    );
    assert!(
        env.resource.attempts("s").await?.is_empty(),
        "no write was attempted"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_refused_the_lease_exits_not_acquired() -> anyhow::Result<()> {
    let env = env().await?;
    let mut a = Holder::spawn(&spec(&env, "holder-a", false)).await?;
    a.next("acquire", EVENT_TIMEOUT).await?;
    let mut b = Holder::spawn(&spec(&env, "holder-b", false)).await?;
    assert_eq!(b.next("acquire", EVENT_TIMEOUT).await?.1, Event::Refused);
    assert_eq!(
        describe(Some(b.exit_code(EVENT_TIMEOUT).await?)),
        describe(Some(exit::NOT_ACQUIRED))
    );
    Ok(())
}

#[test]
fn a_holder_speaking_another_protocol_version_refuses_to_go_on() -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_holder"))
        .args(flags("/nonexistent".into(), 1, "h", false).to_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"HELLO version=999\n")?;
    let out = child.wait_with_output()?;
    assert_eq!(out.status.code(), Some(exit::PROTOCOL));
    let line = String::from_utf8(out.stdout)?;
    assert!(
        matches!(Event::decode(&line)?, Event::Error { .. }),
        "{line}"
    );
    Ok(())
}

#[test]
fn a_holder_given_an_unknown_write_mode_answers_with_one_usage_line() -> anyhow::Result<()> {
    let mut bad = flags("/nonexistent".into(), 1, "h", false);
    bad.mode = "fenced-maybe".into();
    // No stdin: a holder that got past its arguments would exit orphaned (6), not 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holder"))
        .args(bad.to_args())
        .stdin(std::process::Stdio::null())
        .output()?;
    assert_eq!(out.status.code(), Some(exit::USAGE));
    let stderr = String::from_utf8(out.stderr)?;
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--mode") && stderr.contains("fenced-maybe"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no protocol line before the handshake"
    );
    Ok(())
}

#[test]
fn the_holder_documents_its_exit_statuses_and_version() -> anyhow::Result<()> {
    let run = |flag: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_holder"))
            .arg(flag)
            .output()
    };
    let help = run("--help")?;
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8(help.stdout)?;
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("--release"), "{help}");
    assert!(help.contains("--wait-before-check"), "{help}");
    let version = run("--version")?;
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(version.stdout)?.trim(),
        format!("holder {}", env!("CARGO_PKG_VERSION"))
    );
    Ok(())
}
