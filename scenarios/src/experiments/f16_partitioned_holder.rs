//! F16 — a partitioned holder. The fault: the lease store and the resource each live on a host
//! of their own (two PostgreSQL containers on the lab's private network); holder A, renewing in
//! the background, is cut off from the lease store but not from the resource — every packet of
//! its lease connections is dropped (an iptables rule per connection), its resource connection
//! is untouched.
//!
//! Property: A's renewals fail (a renew not answered within the TTL counts as failed), the lease
//! expires by the lease store's clock and B takes over. (1) A, not yet at its check, finds its
//! local deadline passed and starts no new work. (2) A write already past the check when the
//! partition began reaches the resource after B's: the fenced resource rejects it; the unfenced
//! one accepts it (the negative control).
//!
//! Needs the `containers` feature and a Docker engine (the image is the one F15 builds). On a
//! lock service (`--lease-store redis|etcd|zookeeper`) the service's container is the lease
//! store's host and the lab's cluster the resource's; A runs as a user of its own and one rule
//! by owner holds every connection it has to the service or opens meanwhile — a ZooKeeper
//! client gives a silent connection up after 600 ms and reconnects at once on a new one (seen
//! here: with only its connections of the moment held, its session never expired).

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::{LeaseStore, SqlLeaseStore, StoreId};
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::{self, Database};
use harness::docker::{Holds, OwnServers, PG_PORT};
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use harness::observe::client_ports;
use holder_protocol::{Event, Request};
use sqlx::PgPool;

use crate::kit::paused_holder::{exit_after_check, part_line, step, A_CONTENT, B_CONTENT};
use crate::testbed::{acquired, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "F16",
    title: "a partitioned holder (containers): cut off from the lease store but not from the resource, A's renewals fail; before its check it stops by itself, past it its write is fenced",
    about: About {
        fault: "A partitioned from the lease store, not the resource",
        shows: "a partitioned holder stops by itself before its check; a write already past it meets the fence",
        paragraph: "The lease store and the resource each live on a host of their own. Holder \
                    A, renewing in the background, is cut off from the lease store by firewall \
                    rules that drop its lease connections, while its connection to the \
                    resource is untouched. The checks confirm that A's renewals fail, the \
                    lease expires by the store's clock, and B acquires token 2 and writes. In \
                    the first row A has not yet reached its check: it finds its local deadline \
                    passed and the resource never sees it. In the others A was already past \
                    its check: its write reaches the resource after B's, and the fenced \
                    resource rejects it while the unfenced one accepts it (the negative \
                    control).",
    },
    checks: Checks::fixed(16),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::AllBut(&[
        (StoreId::MariadbGetlock, GETLOCK_SOCKET),
        (StoreId::MariadbGetlockFenced, GETLOCK_SOCKET),
    ]),
    fence_dependent: true,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("it reaches its holder's servers in containers over TCP (--resource-host, --lease-host, --store-endpoint), flags a holder of yours may ignore (docs/holder-protocol.md)"),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

/// Why F16 does not run on the named locks' MariaDB.
const GETLOCK_SOCKET: &str = "the named locks' MariaDB is a local server reached over its Unix \
    socket, which no iptables rule holds";

/// F16 as `./run.sh` runs it. `cut: false` leaves A's lease connections alone: only a
/// deliberately broken variant ([`crate::registry::broken`]) does that.
pub struct F16 {
    pub cut: bool,
}

impl Scenario for F16 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(
        &'a self,
        bed: &'a mut Testbed,
        rec: &'a mut harness::evidence::Recorder,
    ) -> Outcome<'a> {
        Box::pin(async move { run(bed, rec, self.cut).await })
    }
}

/// Starts the two hosts (servers of F16's own), runs the rows on them, removes them. On a lock
/// service the lease store is already a host of its own: the rows run on it and on the lab's
/// resource.
async fn run(bed: &mut Testbed, rec: &mut Recorder, cut: bool) -> anyhow::Result<()> {
    if bed.service.is_some() {
        return on_lock_service(bed, rec, cut).await;
    }
    let Some(hosts) = bed.own_servers(rec, 2).await? else {
        return Ok(());
    };
    let outcome = partitioned(bed, rec, &*hosts, cut).await;
    hosts.remove().await;
    outcome
}

/// The lease store's host and the resource's: servers 0 and 1 of F16's own.
const L: usize = 0;
const R: usize = 1;

/// The lease store and the resource of the rows, and how A reaches them.
struct Stores<'a> {
    /// Where the lease store listens: the partition holds A's connections there.
    lease_at: (IpAddr, u16),
    /// F16's own servers (A reaches both over TCP); `None` on a lock service (A reaches it at
    /// the lab's `--store-endpoint`, the resource on the lab's cluster).
    hosts: Option<&'a dyn OwnServers>,
    /// The lease host's superuser pool, which names A's lease connections
    /// (`pg_stat_activity`); `None` on a lock service, whose connections `/proc` names.
    l_admin: Option<PgPool>,
    lease: Arc<dyn LeaseStore>,
    resource: Resource,
}

/// The rows (1)–(3) on `stores`; `reset` empties the lease store and the resource before each.
const ROWS: [(bool, WriteMode); 3] = [
    (false, WriteMode::Fenced),
    (true, WriteMode::Fenced),
    (true, WriteMode::Unfenced),
];

/// The row's header, as the evidence shows it.
fn row_header(bed: &Testbed, rec: &mut Recorder, i: usize, past_check: bool, mode: WriteMode) {
    let mode_label = bed.case().mode_label(mode);
    let what = if past_check {
        format!("({}) A past its check, resource mode {mode_label}", i + 1)
    } else {
        "(1) A before its check".to_owned()
    };
    rec.note(what.clone());
    rec.step(Mark::Info, "lab", &what, None, "", None);
}

/// The rows on a lock service: the lease store is the service's container, the resource the
/// lab's cluster (over its Unix socket: the partition cannot touch it).
async fn on_lock_service(bed: &mut Testbed, rec: &mut Recorder, cut: bool) -> anyhow::Result<()> {
    let service = bed.service.as_ref().context("a lock service")?;
    let (ip, port) = (service.ip(), service.port());
    rec.check_that(
        "the lease store and the resource each live on a host of their own (the lock service in a container on a private network, the resource on the lab's cluster)",
        !ip.is_loopback() && bed.servers.tcp_host(harness::hosts::Host::Resource).is_none(),
        format_args!("{} at {ip}:{port}; res26 on the lab's cluster, over its Unix socket", bed.case().store),
    );
    for (i, (past_check, mode)) in ROWS.into_iter().enumerate() {
        bed.reset().await?;
        rec.restart_tokens();
        row_header(bed, rec, i, past_check, mode);
        let stores = Stores {
            lease_at: (ip, port),
            hosts: None,
            l_admin: None,
            lease: bed.lease.clone(),
            resource: bed.resource.0.clone(),
        };
        row(bed, rec, &stores, past_check, mode, cut).await?;
    }
    Ok(())
}

async fn partitioned(
    bed: &mut Testbed,
    rec: &mut Recorder,
    hosts: &dyn OwnServers,
    cut: bool,
) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    let l_admin = hosts.pool(L, "postgres", "lab").await?;
    schema::provision(&mut *l_admin.acquire().await?).await?;
    let l_pool = hosts
        .pool(L, Database::Lease.name(), Database::Lease.role())
        .await?;
    schema::migrate_for(&c.sut, Database::Lease, &l_pool).await?;
    let r_admin = hosts.pool(R, "postgres", "lab").await?;
    schema::provision(&mut *r_admin.acquire().await?).await?;
    let r_pool = hosts
        .pool(R, Database::Resource.name(), Database::Resource.role())
        .await?;
    schema::migrate_for(&c.sut, Database::Resource, &r_pool).await?;
    rec.check_that(
        "the lease store and the resource each live on a host of their own (containers on the lab's private network)",
        hosts.ips()[L] != hosts.ips()[R],
        format_args!("lease26 at {}:{PG_PORT}, res26 at {}:{PG_PORT}", hosts.ips()[L], hosts.ips()[R]),
    );
    let stores = Stores {
        lease_at: (hosts.ips()[L], PG_PORT),
        hosts: Some(hosts),
        l_admin: Some(l_admin.clone()),
        // The run's lease store on the lease host: the lease table, or a lock its session
        // keeps there (pg-advisory: B must take the same lock A holds, not a lease row).
        lease: crate::testbed::open_store(
            c.store,
            &SqlLeaseStore::with_profile(l_pool.clone(), p.margin, c.sut.clone())
                .with_ttl_in_force(c.ttl),
            None,
        )
        .await?,
        resource: Resource::with_profile(r_pool.clone(), c.sut.clone()),
    };
    for (i, (past_check, mode)) in ROWS.into_iter().enumerate() {
        schema::reset(&l_pool).await?;
        stores.lease.reset().await?;
        schema::reset(&r_pool).await?;
        stores.resource.setup_scope(SCOPE).await?;
        rec.restart_tokens();
        row_header(bed, rec, i, past_check, mode);
        row(bed, rec, &stores, past_check, mode, cut).await?;
    }
    for pool in [l_pool, r_pool, r_admin, l_admin] {
        pool.close().await;
    }
    Ok(())
}

/// A's renewals fail during the partition: the first renew sent after it began leaves within
/// one renew interval and is given up one TTL later. Without it nothing later means anything:
/// `Err` then.
async fn renewals_fail_while_cut_off(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    seen_before: usize,
    partitioned_at: Instant,
) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    // Its renewals fail: the first renew sent after the partition began leaves within one
    // renew interval and is given up one TTL later, so a failure must come within their
    // sum (plus a second for a loaded machine); a renewal that still succeeds fails the check.
    let bound = p.renew + c.ttl + Duration::from_secs(1);
    let failed = harness::wait::until("A reports a failed renewal", bound, || {
        let failed = a.drain_renewals()[seen_before..].iter().any(|(_, ok)| !ok);
        async move { Ok::<bool, Infallible>(failed) }
    })
    .await;
    let after: Vec<bool> = a.renewals()[seen_before..]
        .iter()
        .map(|(_, ok)| *ok)
        .collect();
    // The renewer renews one at a time, so at most one renewal was in flight at the cut: sent
    // before the rules, it may be answered after them (they drop A's outgoing packets, not the
    // answers) — seen in CI under load as [true, false]. Every renewal after it must fail.
    let in_flight = usize::from(after.first() == Some(&true));
    let held = rec.check_that(
        "A's renewals fail during the partition (a renew not answered within the TTL is a failure; the one in flight at the cut may succeed)",
        failed.is_ok() && after.contains(&false) && !after[in_flight..].contains(&true),
        format_args!(
            "renewals after the partition began: {after:?}; {} ms after it (a failure expected within {} ms)",
            partitioned_at.elapsed().as_millis(),
            bound.as_millis()
        ),
    );
    if !held {
        // Nothing later in the timeline means anything without the partition (A is stopped
        // as it is dropped).
        bail!("A was not partitioned from the lease store");
    }
    Ok(())
}

/// A's lease expires by the lease store's clock; B acquires and writes.
async fn b_takes_over_and_writes(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Stores<'_>,
    mode: WriteMode,
) -> anyhow::Result<()> {
    let mode_label = bed.case().mode_label(mode);
    let (p, c) = (bed.params().clone(), bed.case().clone());
    let store = &h.lease;
    harness::wait::until(
        "A's lease expired on the lease store's host",
        p.wait_timeout,
        || store.is_free(LEASE),
    )
    .await?;
    rec.step(
        Mark::LeaseExpired,
        "A",
        "lease expired (lease store's clock)",
        None,
        "",
        None,
    );
    let b = h.lease.acquire(LEASE, HOLDER_B, c.ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    let b = b.context("B could not acquire the expired lease")?;
    let w = Write {
        scope: SCOPE,
        part: SUMMARY,
        content: B_CONTENT,
        writer: HOLDER_B,
        token: b.token,
    };
    let b_ok = h.resource.write(&w, mode).await?;
    rec.step(
        Mark::Write { accepted: b_ok },
        "B",
        "write",
        Some(b.token),
        wrote(b_ok, b.token),
        None,
    );
    rec.check(
        format!(
            "{mode_label}: the lease expires by the lease store's clock; B acquires and writes"
        ),
        "ACQUIRED token=2, WRITE accepted=true token=2",
        &format!("ACQUIRED token={}, {}", b.token, wrote(b_ok, b.token)),
    );
    Ok(())
}

/// A's write, past its check and cut off from the lease store only, judged: fenced at the
/// resource, or (unfenced, the negative control) accepted after B's.
async fn a_write_judged(
    rec: &mut Recorder,
    h: &Stores<'_>,
    mode: WriteMode,
    mode_label: &str,
    a_ok: bool,
    a_token: i64,
) -> anyhow::Result<()> {
    let summary = part_line(&h.resource.part(SCOPE, SUMMARY).await?);
    if mode == WriteMode::Unfenced {
        rec.expose(
            "unfenced: the partitioned holder's write, past its check, is accepted after B's",
            a_ok,
            wrote(a_ok, a_token),
        );
        rec.expose(
            "unfenced: A's stale content replaced B's",
            summary.starts_with(A_CONTENT),
            format_args!("final summary = {summary}"),
        );
    } else {
        rec.check(
            format!("{mode_label}: the partitioned holder's write, past its check, is fenced at the resource"),
            &wrote(false, 1),
            &wrote(a_ok, a_token),
        );
        rec.check(
            format!("{mode_label}: B's part stays"),
            &format!("{B_CONTENT} by holder-b token=2"),
            &summary,
        );
    }
    Ok(())
}

/// The partition: every lease connection of A held (by owner when A runs as a user of its
/// own), its resource connection not. The holds, how many renewals A had reported, and when.
async fn cut_off_from_the_lease_store(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Stores<'_>,
    a: &Holder,
    cut: bool,
    owner: Option<harness::process::RunAs>,
) -> anyhow::Result<(Holds, usize, Instant)> {
    // The partition: every lease connection of A, held; its resource connection is not.
    let (lease_ip, lease_port) = h.lease_at;
    let ports = match &h.l_admin {
        Some(admin) => client_ports(admin, HOLDER_A).await?,
        None => harness::process::tcp_ports_to(a.pid(), lease_ip, lease_port)?,
    };
    let holds = match (cut, owner) {
        (false, _) => Holds::default(),
        (true, Some(user)) => {
            Holds::start_for_owner(lease_ip, lease_port, user.uid, &bed.run_mark).await?
        }
        (true, None) => Holds::start(lease_ip, &ports, &bed.run_mark).await?,
    };
    let rules = holds.rules();
    let every_port_held = match owner {
        Some(user) => {
            rules.len() == 1 && rules[0].contains(&format!("owner UID match {}", user.uid))
        }
        None => rules.len() == ports.len(),
    };
    let partitioned_at = Instant::now();
    let seen_before = a.renewals().len();
    rec.step(
        Mark::Info,
        "A",
        "partitioned from the lease store",
        None,
        "",
        None,
    );
    rec.check_that(
        "A is cut off from the lease store (each of its lease connections held), not from the resource",
        ports.len() >= 2 && every_port_held && rules.iter().all(|r| r.contains("DROP")),
        format_args!("A's lease connections from ports {ports:?}; iptables OUTPUT: {}", rules.join(" | ")),
    );
    Ok((holds, seen_before, partitioned_at))
}

/// A (on a lock service: as a user of its own) acquires, stands before or past its check, and
/// its renewer renews once: A, its token, and the user it runs as.
async fn a_holds_and_renews(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Stores<'_>,
    past_check: bool,
    mode: WriteMode,
) -> anyhow::Result<(Holder, i64, Option<harness::process::RunAs>)> {
    let p = bed.params().clone();
    let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, mode, false);
    if let Some(hosts) = h.hosts {
        spec.flags.lease_host = Some(hosts.ips()[L].to_string());
        spec.flags.lease_port = Some(PG_PORT);
        spec.flags.resource_host = Some(hosts.ips()[R].to_string());
        spec.flags.resource_port = Some(PG_PORT);
    }
    spec.flags.wait_before_check = !past_check;
    // On a lock service A runs as a user of its own (the servers' user, which never talks to
    // the service), so that one rule by owner holds every connection A has or opens: a client
    // that reconnects at once (ZooKeeper's) stays cut off.
    let owner = if h.hosts.is_none() {
        harness::server::Server::dir(bed.cluster()?).run_as()
    } else {
        None
    };
    spec.run_as = owner;
    let mut a = Holder::spawn(&spec).await?;
    let (at, event) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire (lease store host)", &event).await;
    // The store's own number for A's grant (a lock service's does not start again per row).
    let a_token = a.acquired_token(&event)?;
    let (at, stands) = a.next("A before or past its check", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "stands", &stands).await;
    // A state, polled: A's renewer has connected and renewed once.
    harness::wait::until("A's renewer has renewed", p.wait_timeout, || {
        let seen = a.drain_renewals().iter().any(|(_, ok)| *ok);
        async move { Ok::<bool, Infallible>(seen) }
    })
    .await?;
    Ok((a, a_token, owner))
}

async fn row(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &Stores<'_>,
    past_check: bool,
    mode: WriteMode,
    cut: bool,
) -> anyhow::Result<()> {
    let mode_label = bed.case().mode_label(mode);
    let (mut a, a_token, owner) = a_holds_and_renews(bed, rec, h, past_check, mode).await?;

    let (holds, seen_before, partitioned_at) =
        cut_off_from_the_lease_store(bed, rec, h, &a, cut, owner).await?;

    renewals_fail_while_cut_off(bed, rec, &mut a, seen_before, partitioned_at).await?;

    b_takes_over_and_writes(bed, rec, h, mode).await?;

    a.send(Request::Go).await?;
    if !past_check {
        let (at, verdict) = a.next("A's local-deadline check", EVENT_TIMEOUT).await?;
        step(bed, rec, at, "A", "local-deadline check", &verdict).await;
        rec.check(
            "A, before its check, finds its local deadline passed and starts no new work",
            "DEADLINE_PASSED token=1",
            &match &verdict {
                Event::DeadlinePassed { token, .. } => format!("DEADLINE_PASSED token={token}"),
                other => other.to_string(),
            },
        );
        holds.lift().await?; // first: a holder that wrote anyway renews after, to be answered
        let code = exit_after_check(bed, rec, &mut a, &verdict).await?;
        rec.note(format!("A exits: {}", describe(Some(code))));
        let attempts = h.resource.attempts(SCOPE).await?;
        rec.check(
            "the resource never saw A: write_attempt has no row of A",
            &0,
            &attempts.iter().filter(|x| x.writer == HOLDER_A).count(),
        );
        return Ok(());
    }

    let (at, write) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (resource reachable)", &write).await;
    // Lifted now, so that A's renew after its write can be answered (and fail).
    holds.lift().await?;
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("A exits: {}", describe(Some(code))));
    let Event::Write {
        accepted: a_ok,
        token,
    } = write
    else {
        bail!(a.unexpected("WRITE … token=1", &write));
    };
    if token != a_token {
        bail!(a.unexpected(&format!("WRITE … token={a_token}"), &write));
    }
    a_write_judged(rec, h, mode, mode_label, a_ok, a_token).await?;

    Ok(())
}
