//! S5 — a partitioned holder of a lock its session keeps (F16's side): how long the server keeps
//! the session. The fault: the lock's server and the resource each live on a host of their own
//! (two PostgreSQL containers, as in F16); holder A takes PostgreSQL's advisory lock (fenced form)
//! on a session with no idle timeout — as these locks are used — stands past its check, and is
//! cut off from the lock's server (every packet of its connections there dropped) but not from
//! the resource. A is not frozen: it is running, and believes it holds the lock for as long as
//! its session lives, which it cannot see end.
//!
//! Property, once per setting of the server's TCP keepalives:
//! - (1) the system's (a first probe after 7200 s idle): the server keeps A's idle session, and
//!   its lock, through the partition — B, asking for three TTLs, is refused every time (liveness
//!   lost, bounded by the lab); healed, A writes on data nobody else touched.
//! - (2), (3) `tcp_keepalives_idle = 1`, `_interval = 1`, `_count = 2`, and `tcp_user_timeout =
//!   3000` ms: the server's probes, or its retransmissions, go unanswered and it ends A's session
//!   about 3 s into the partition, the lock with it (measured). Keepalives alone are not enough:
//!   they probe only a socket with nothing in flight, and here A's connections to the lock's
//!   server carried an answer A's kernel could no longer acknowledge (`ss` in the lock's
//!   container: `timer:(on,…,3)`, `unacked:1`) — with keepalives alone the server still held A's
//!   session 15 s into the partition, in 2 runs of 2 (2026-12-06). `tcp_user_timeout` bounds
//!   that case: the kernel gives up on data unacknowledged for that long.
//!   B takes the lock, with a greater token, and writes; A, never told, writes after it: the
//!   fenced resource rejects A's write; the unfenced one accepts it (the negative control).
//!
//! Needs the `containers` feature and a Docker engine (the image is F15's and F16's). MariaDB's
//! `GET_LOCK` is reached over a Unix socket, which no iptables rule holds: S5 shows PostgreSQL's.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::pg_advisory::AdvisoryLeaseStore;
use fencing::lease::{Grant, LeaseStore, StoreId};
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::{self, Database};
use harness::docker::{Holds, OwnServers, PG_PORT};
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use harness::observe::client_ports;
use holder_protocol::{Event, Request};
use sqlx::PgPool;

use crate::kit::paused_holder::{part_line, step, A_CONTENT, B_CONTENT};
use crate::kit::session_locks;
use crate::testbed::SUMMARY;
use crate::testbed::{acquired, lease_state, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "S5",
    title: "a partitioned holder of a lock its session keeps (containers): with the system's TCP keepalives the server keeps A's session and its lock — B waits; with keepalives of 1 s and tcp_user_timeout of 3 s it ends the session in about 3 s — B takes the lock, the fence rejects A's write, unfenced accepts it",
    about: About {
        fault: "a running holder of a database lock cut off from the lock's server, not from the resource",
        shows: "the server keeps a partitioned holder's lock until its TCP timeouts (keepalives, tcp_user_timeout) end the session; then only a fence stops A",
        paragraph: "The lock's server and the resource each live on a host of their own. A \
                    takes PostgreSQL's advisory lock on a session with no idle timeout, \
                    stands past its check, and is cut off from the lock's server by firewall \
                    rules, not from the resource. With the system's TCP keepalives (a first \
                    probe after two hours) the server keeps A's idle session and its lock: B \
                    is refused for three TTLs, liveness lost; healed, A writes on data nobody \
                    else touched. With keepalives of 1 s (two probes) and tcp_user_timeout of \
                    3 s the server ends A's session about 3 s into the partition and the lock with it: B takes the \
                    lock with a greater token and writes, and A, never told, writes after \
                    it — the fenced resource rejects A's write, the unfenced one accepts it \
                    (the negative control).",
    },
    checks: Checks::fixed(15),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::AllBut(&[
        (StoreId::Redis, NOT_ADVISORY),
        (StoreId::RedisPlain, NOT_ADVISORY),
        (StoreId::Etcd, NOT_ADVISORY),
        (StoreId::Zookeeper, NOT_ADVISORY),
        (StoreId::ZookeeperSuffix, NOT_ADVISORY),
        (StoreId::MariadbGetlock, GETLOCK_SOCKET),
        (StoreId::MariadbGetlockFenced, GETLOCK_SOCKET),
    ]),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("it reaches its holder's servers in containers over TCP (--resource-host, --lease-host), flags a holder of yours may ignore (docs/holder-protocol.md)"),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

const NOT_ADVISORY: &str = "it runs on PostgreSQL's advisory lock (pg-advisory, its own choice \
    in the default run, or the run's --lease-store pg-advisory, plain or -fenced)";

/// Why S5 does not run on MariaDB's named locks.
const GETLOCK_SOCKET: &str = "the named locks' MariaDB is a local server reached over its Unix \
    socket, which no iptables rule holds";

/// The idle timeout of A's session: none the run will see.
const NO_TIMEOUT: Duration = Duration::from_secs(3600);

/// The server's keepalives in rows (2) and (3): a first probe after 1 s idle, one a second
/// after, and the session ended when two go unanswered; `tcp_user_timeout` is their sum (an
/// answer unacknowledged for that long ends the session too).
const KEEPALIVES: Keepalives = (1, 1, 2);

/// How many TTLs of the other experiments B asks for the lock in row (1).
const BOUND_IN_TTLS: u32 = 3;

/// How often B asks.
const ASK_EVERY: Duration = Duration::from_millis(100);

/// The server's keepalives: idle seconds, seconds between probes, probes unanswered.
type Keepalives = (u32, u32, u32);

/// The rows: the server's keepalives (`None`: the system's) and the resource's mode.
const ROWS: [(Option<Keepalives>, WriteMode); 3] = [
    (None, WriteMode::Fenced),
    (Some(KEEPALIVES), WriteMode::Fenced),
    (Some(KEEPALIVES), WriteMode::Unfenced),
];

/// The lock's host and the resource's: servers 0 and 1 of S5's own.
const L: usize = 0;
const R: usize = 1;

pub struct S5;

impl Scenario for S5 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(session_locks::on_a_session_lock(
            bed,
            rec,
            true,
            |bed, rec| Box::pin(on_own_hosts(bed, rec)),
        ))
    }
}

/// The lock's host and the resource's, A's view of them, and the lab's pools there.
struct Hosts<'a> {
    hosts: &'a dyn OwnServers,
    /// The lock's server as its superuser: its settings, A's connections.
    l_admin: PgPool,
    lock: Arc<dyn LeaseStore>,
    resource: Resource,
}

/// Starts the two hosts, runs the rows on them, removes them.
async fn on_own_hosts(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    let Some(hosts) = bed.own_servers(rec, 2).await? else {
        return Ok(());
    };
    let outcome = rows(bed, rec, &*hosts).await;
    hosts.remove().await;
    outcome
}

async fn rows(bed: &Testbed, rec: &mut Recorder, hosts: &dyn OwnServers) -> anyhow::Result<()> {
    let c = bed.case().clone();
    let l_admin = hosts.pool(L, "postgres", "lab").await?;
    schema::provision(&mut *l_admin.acquire().await?).await?;
    let l_pool = hosts
        .pool(L, Database::Lease.name(), Database::Lease.role())
        .await?;
    let r_admin = hosts.pool(R, "postgres", "lab").await?;
    schema::provision(&mut *r_admin.acquire().await?).await?;
    let r_pool = hosts
        .pool(R, Database::Resource.name(), Database::Resource.role())
        .await?;
    schema::migrate_for(&c.sut, Database::Resource, &r_pool).await?;
    rec.check_that(
        "the lock's server and the resource each live on a host of their own (containers on the lab's private network)",
        hosts.ips()[L] != hosts.ips()[R],
        format_args!("lock at {}:{PG_PORT}, resource at {}:{PG_PORT}", hosts.ips()[L], hosts.ips()[R]),
    );
    let h = Hosts {
        hosts,
        l_admin: l_admin.clone(),
        lock: Arc::new(AdvisoryLeaseStore::open(l_pool.clone(), bed.params().margin, true).await?),
        resource: Resource::with_profile(r_pool.clone(), c.sut.clone()),
    };
    for (i, (keepalives, mode)) in ROWS.into_iter().enumerate() {
        h.lock.reset().await?;
        schema::reset(&r_pool).await?;
        h.resource.setup_scope(SCOPE).await?;
        rec.restart_tokens();
        harness::server::postgres::set_tcp_timeouts(
            &h.l_admin,
            keepalives
                .map(|(idle, every, count)| [idle, every, count, (idle + every * count) * 1000]),
        )
        .await?;
        let what = format!(
            "({}) the server's TCP timeouts {}, resource mode {}",
            i + 1,
            keepalives.map_or(
                "the system's (first probe after 7200 s idle)".to_owned(),
                |(idle, every, count)| format!(
                    "keepalives idle {idle} s, every {every} s, {count} unanswered; \
                     tcp_user_timeout {} ms",
                    (idle + every * count) * 1000
                )
            ),
            c.mode_label(mode)
        );
        rec.note(what.clone());
        rec.step(Mark::Info, "lab", &what, None, "", None);
        row(bed, rec, &h, keepalives.is_some(), mode).await?;
    }
    for pool in [l_pool, r_pool, r_admin, l_admin] {
        pool.close().await;
    }
    Ok(())
}

/// One row: A takes the lock and stands past its check; the partition; then, with keepalives,
/// the server ends A's session and B takes over — without them, B waits.
async fn row(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Hosts<'_>,
    keepalives: bool,
    mode: WriteMode,
) -> anyhow::Result<()> {
    let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, mode, false);
    spec.flags.ttl_ms = NO_TIMEOUT.as_millis() as u64;
    spec.flags.lease_host = Some(h.hosts.ips()[L].to_string());
    spec.flags.lease_port = Some(PG_PORT);
    spec.flags.resource_host = Some(h.hosts.ips()[R].to_string());
    spec.flags.resource_port = Some(PG_PORT);
    let mut a = Holder::spawn(&spec).await?;
    let (at, event) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire (lock's host)", &event).await;
    let a_token = a.acquired_token(&event)?;
    let (at, stands) = a.next("A past its check", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &stands).await;
    if !matches!(stands, Event::AtWritePoint { .. }) {
        bail!(a.unexpected("AT_WRITE_POINT", &stands));
    }
    let holds = partition(bed, rec, h, &mut a).await?;
    let partitioned_at = Instant::now();
    let b = if keepalives {
        server_ends_the_session(bed, rec, h, partitioned_at, a_token).await?
    } else {
        server_keeps_the_session(bed, rec, h, partitioned_at).await?;
        None
    };
    a.send(Request::Go).await?;
    let (at, write) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (resource reachable)", &write).await;
    // Lifted now, so that A's renew after its write is answered: refused, or (row 1) granted.
    holds.lift().await?;
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("A exits: {}", describe(Some(code))));
    let Event::Write { accepted, token } = write else {
        bail!(a.unexpected("WRITE … token=1", &write));
    };
    if token != a_token {
        bail!(a.unexpected(&format!("WRITE … token={a_token}"), &write));
    }
    judge_a(bed, rec, h, b, mode, accepted, a_token).await
}

/// Holds every connection A has to the lock's server (its locking session among them), and
/// checks that it did.
async fn partition(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Hosts<'_>,
    a: &mut Holder,
) -> anyhow::Result<Holds> {
    let p = bed.params().clone();
    // A state, polled: A's renewer has renewed once (its session is known to the server).
    harness::wait::until("A's renewer has renewed", p.wait_timeout, || {
        let seen = a.drain_renewals().iter().any(|(_, ok)| *ok);
        async move { Ok::<bool, Infallible>(seen) }
    })
    .await?;
    let ip = h.hosts.ips()[L];
    let ports = client_ports(&h.l_admin, HOLDER_A).await?;
    let holds = Holds::start(ip, &ports, &bed.run_mark).await?;
    let rules = holds.rules();
    rec.step(
        Mark::Info,
        "A",
        "partitioned from the lock's server",
        None,
        "",
        None,
    );
    let held = rec.check_that(
        "A is cut off from the lock's server (each of its connections there held), not from the resource",
        !ports.is_empty() && rules.len() == ports.len() && rules.iter().all(|r| r.contains("DROP")),
        format_args!("A's connections from ports {ports:?}; iptables OUTPUT: {}", rules.join(" | ")),
    );
    if !held {
        bail!("A was not partitioned from the lock's server");
    }
    Ok(holds)
}

/// Row (1): B asks for three TTLs and is refused every time; the server still shows A's
/// session holding the lock.
async fn server_keeps_the_session(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Hosts<'_>,
    partitioned_at: Instant,
) -> anyhow::Result<()> {
    let ttl = bed.case().ttl;
    let bound = ttl * BOUND_IN_TTLS;
    let asks = Mutex::new((0usize, 0usize, None::<Grant>));
    // The timeline prescribes the bound; the wait ends early only on a grant.
    let waited = harness::wait::until_every("B is granted A's lock", bound, ASK_EVERY, || async {
        let grant = h.lock.acquire(LEASE, HOLDER_B, ttl).await?;
        let mut asks = asks.lock().expect("B's asks");
        asks.1 += 1;
        let got = grant.is_some();
        if !got {
            asks.0 += 1;
        }
        asks.2 = asks.2.take().or(grant);
        Ok::<_, fencing::Error>(got)
    })
    .await;
    if let Err(e @ harness::wait::WaitError::Probe { .. }) = waited {
        bail!("B could not ask for the lock: {e}");
    }
    let (refused, asked, granted) = asks.into_inner().expect("B's asks");
    rec.step(
        Mark::Refused,
        "B",
        "acquire, again and again",
        None,
        format!("refused {refused} times"),
        None,
    );
    rec.check_that(
        format!(
            "with the system's keepalives the server keeps A's partitioned session: B, asking for \
             {} ms ({BOUND_IN_TTLS} × the TTL), is refused every time — liveness lost, the lab's \
             bound the only end to the wait",
            bound.as_millis()
        ),
        granted.is_none() && asked > 0,
        format_args!(
            "{asked} asks, {refused} refused, over {} ms of partition{}",
            partitioned_at.elapsed().as_millis(),
            granted
                .as_ref()
                .map_or(String::new(), |g| format!("; granted token={}", g.token))
        ),
    );
    if let Some(grant) = &granted {
        h.lock.release(grant).await?;
    }
    let row = h.lock.inspect(LEASE).await?;
    rec.check_that(
        "the server still shows A's session holding the lock",
        row.as_ref()
            .is_some_and(|r| r.holder == HOLDER_A && !r.expired),
        shown(row.as_ref().map(lease_state)),
    );
    Ok(())
}

/// Rows (2) and (3): the server ends A's session once its keepalives go unanswered (the time
/// measured from the partition); B takes the lock and writes.
async fn server_ends_the_session(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Hosts<'_>,
    partitioned_at: Instant,
    a_token: i64,
) -> anyhow::Result<Option<Grant>> {
    let (idle, every, count) = KEEPALIVES;
    let expected = Duration::from_secs(u64::from(idle + every * count));
    // Generous for a loaded machine, and far below the system's first probe (7200 s).
    let deadline = expected * 5;
    let lock = &h.lock;
    let freed = harness::wait::until("the server ends A's session", deadline, || {
        lock.is_free(LEASE)
    })
    .await;
    let after = partitioned_at.elapsed();
    rec.step(
        Mark::LeaseExpired,
        "A",
        "session ended by the server (keepalives unanswered)",
        None,
        "",
        None,
    );
    rec.check_that(
        format!(
            "with keepalives of {idle} s (every {every} s, {count} unanswered) and \
             tcp_user_timeout of {} ms the server ends A's partitioned session, and the lock \
             with it, within {} s",
            expected.as_millis(),
            deadline.as_secs()
        ),
        freed.is_ok(),
        format_args!(
            "{} after {} ms of partition (the timeouts alone: {} ms)",
            if freed.is_ok() {
                "the lock free"
            } else {
                "A still holds it"
            },
            after.as_millis(),
            expected.as_millis()
        ),
    );
    let b = h.lock.acquire(LEASE, HOLDER_B, bed.case().ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    let b = b.context("B could not take the lock the server freed")?;
    let w = Write {
        scope: SCOPE,
        part: SUMMARY,
        content: B_CONTENT,
        writer: HOLDER_B,
        token: b.token,
    };
    let b_ok = h.resource.write(&w, WriteMode::Fenced).await?;
    rec.step(
        Mark::Write { accepted: b_ok },
        "B",
        "write",
        Some(b.token),
        wrote(b_ok, b.token),
        None,
    );
    rec.check_that(
        "B takes the freed lock, with a token greater than A's, and writes",
        b.token > a_token && b_ok,
        format_args!(
            "A's token={a_token}; B: ACQUIRED token={}, {}",
            b.token,
            wrote(b_ok, b.token)
        ),
    );
    Ok(Some(b))
}

/// A's write, and what the resource kept.
async fn judge_a(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Hosts<'_>,
    b: Option<Grant>,
    mode: WriteMode,
    accepted: bool,
    a_token: i64,
) -> anyhow::Result<()> {
    let summary = part_line(&h.resource.part(SCOPE, SUMMARY).await?);
    let mode_label = bed.case().mode_label(mode);
    let Some(b) = b else {
        rec.check_that(
            "healed, A writes on data nobody else touched: accepted — no stale write, since nobody else held the lock",
            accepted && summary.starts_with(A_CONTENT),
            format_args!("{}; final summary = {summary}", wrote(accepted, a_token)),
        );
        return Ok(());
    };
    h.lock.release(&b).await?;
    if mode == WriteMode::Unfenced {
        rec.expose(
            "unfenced: A, never told its session ended, writes after B and is accepted",
            accepted,
            wrote(accepted, a_token),
        );
        rec.expose(
            "unfenced: A's stale content replaced B's",
            summary.starts_with(A_CONTENT),
            format_args!("final summary = {summary}"),
        );
    } else {
        rec.check(
            format!("{mode_label}: A, never told its session ended, writes after B: rejected at the resource"),
            &wrote(false, 1),
            &wrote(accepted, a_token),
        );
        rec.check(
            format!("{mode_label}: B's part stays"),
            &format!("{B_CONTENT} by holder-b token=2"),
            &summary,
        );
    }
    Ok(())
}
