//! F14 — the lease store fails over. The fault: the lease database lives on its own primary
//! with a streaming standby (a second embedded cluster, base-backed-up from it, replicating over
//! its Unix socket); the resource's database stays on the lab's cluster. The standby's link is
//! cut, holder A acquires on the primary, the primary's host is lost (SIGKILL to its whole
//! process group), the standby is promoted, and B acquires there.
//!
//! - (a) **asynchronous** replication: A's acquire is acknowledged at once although its WAL never
//!   left the primary; the promoted standby never saw it and grants B the same token — two
//!   holders with one token, I2 broken. At the resource the floor cannot tell them apart: A's
//!   stale write is accepted after B's (the negative control). The LSNs say why: A's commit lies
//!   beyond what the standby had received when it was promoted.
//! - (b) **synchronous** replication (`synchronous_standby_names`, `synchronous_commit = on`):
//!   the same cut holds A's acquire unacknowledged (its commit waits on `SyncRep`) until the link
//!   is back and the standby has it; then the primary is lost. After the failover every
//!   acknowledged token is still there: B's token is above A's, and A's stale write is rejected.
//!
//! A, Z (an earlier holding that shows replication working) and B are the lab's own lease clients:
//! the subject is the lease store, not a holder process.

use std::time::Instant;

use anyhow::Context as _;
use fencing::lease::{Grant, SqlLeaseStore};
use fencing::resource::{Write, WriteMode};
use fencing::schema::Database;
use harness::evidence::{Mark, Recorder};
use harness::server::standby::{self, Lsn, Replicated, Standby};
use harness::server::Cluster;
use sqlx::PgPool;

use crate::kit::paused_holder::{A_CONTENT, B_CONTENT};
use crate::testbed::{acquired, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F14",
    title: "the lease store fails over to a streaming standby: (a) asynchronous — an acknowledged token is granted again and A's stale write accepted; (b) synchronous — every acknowledged token survives, A is rejected",
    about: About {
        fault: "the lease store's primary lost, its standby promoted",
        shows: "asynchronous replication grants an acknowledged token twice; synchronous keeps every one",
        paragraph: "The lease database runs on a primary with a streaming standby; the \
                    resource stays elsewhere. The lab cuts the standby's replication link, A \
                    acquires on the primary, the primary's host is killed and the standby \
                    promoted, and B acquires there. (a) With asynchronous replication, A's \
                    acquire is acknowledged at once though it never reached the standby, so \
                    the promoted standby grants B the same token; the floor cannot tell them \
                    apart and A's stale write is accepted after B's, the negative control. (b) \
                    With synchronous replication, A's acquire waits unacknowledged until the \
                    link is back; after the failover B's token is greater and A's stale write \
                    is rejected.",
    },
    checks: Checks::fixed(16),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: true,
    again_on_stores: false,
    // It promotes standbys: two more clusters and their replication.
    runs_alone: true,
    holder_points: Err(NO_HOLDER),
    fault_moments: &["the standby is promoted"],
    lanes: StoreLanes::Default,
};

/// F14 as `./run.sh` runs it. `synchronous_names` false leaves `synchronous_standby_names` empty
/// in part (b): only a deliberately broken variant ([`crate::registry::broken`]) does that.
pub struct F14 {
    pub synchronous_names: bool,
}

/// Where the probe's old handle comes from, for its check: after the asynchronous failover, A's
/// token is B's too, and A's handle must not reach B's holding.
const BEFORE_FAILOVER: &str = "from before the failover";

/// The standby's name at the primary.
const STANDBY: &str = "lab_standby";
const HOLDER_Z: &str = "holder-z";

impl Scenario for F14 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            rec.note("(a) asynchronous replication");
            rec.step(Mark::Info, "lab", "(a) asynchronous", None, "", None);
            failover(bed, rec, Replication::Asynchronous).await?;
            bed.reset().await?;
            rec.note(if self.synchronous_names {
                "(b) synchronous replication: synchronous_standby_names names the standby, synchronous_commit = on"
            } else {
                "(b) synchronous replication — BROKEN VARIANT: synchronous_standby_names left empty"
            });
            rec.step(Mark::Info, "lab", "(b) synchronous", None, "", None);
            failover(
                bed,
                rec,
                Replication::Synchronous {
                    names: self.synchronous_names,
                },
            )
            .await
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replication {
    Asynchronous,
    /// `names`: whether `synchronous_standby_names` really names the standby.
    Synchronous {
        names: bool,
    },
}

/// The lease primary and its standby, with their pools; handed to the lab at the end, whatever
/// happened, so that a failing run keeps them.
struct Pair {
    hosts: Replicated,
    primary_admin: PgPool,
    standby_admin: PgPool,
}

async fn failover(bed: &mut Testbed, rec: &mut Recorder, mode: Replication) -> anyhow::Result<()> {
    let primary = Cluster::create(bed.cluster()?.config().clone())
        .await
        .context("failed to start the lease store's primary")?;
    let made = async {
        let (lease_pool, resource_pool) = Testbed::provision(&primary, &bed.case().sut).await?;
        resource_pool.close().await;
        let primary_admin = primary.admin_pool().await?;
        let standby = Standby::create(&primary, &primary_admin, STANDBY)
            .await
            .context("failed to make the streaming standby")?;
        let standby_admin = standby.cluster().admin_pool().await?;
        anyhow::Ok((lease_pool, primary_admin, standby, standby_admin))
    };
    let (lease_pool, primary_admin, standby, standby_admin) = match made.await {
        Ok(made) => made,
        Err(e) => {
            bed.adopt(Box::new(primary)).await;
            return Err(e);
        }
    };
    let mut pair = Pair {
        hosts: Replicated::new(primary, standby),
        primary_admin,
        standby_admin,
    };
    let outcome = timeline(bed, rec, mode, &mut pair, lease_pool).await;
    pair.primary_admin.close().await;
    pair.standby_admin.close().await;
    bed.adopt(Box::new(pair.hosts)).await;
    outcome
}

/// The primary's host lost, the standby promoted, both checked: the standby's LSNs (received,
/// replayed) at the promotion.
async fn lose_and_promote(
    rec: &mut Recorder,
    pair: &mut Pair,
) -> anyhow::Result<(Option<Lsn>, Option<Lsn>)> {
    let (received, replayed) = Standby::lsns(&pair.standby_admin).await?;
    let status = standby::lose_host(&mut pair.hosts.primary).await;
    rec.step(
        Mark::Failover,
        "lab",
        "primary's host lost (SIGKILL to its process group)",
        None,
        status.clone(),
        None,
    );
    // The loss itself, not only its verb: a postmaster the kill really ended, and a primary
    // that refuses a new connection.
    let refused = pair.hosts.primary.admin().await.is_err();
    let lost = refused && !status.contains("not running");
    let promote_at = Instant::now();
    let promoted = pair.hosts.standby.promote(&pair.standby_admin).await?;
    if promoted {
        pair.hosts.promoted();
    }
    rec.check_that(
        "the primary's host is lost (SIGKILL to its process group: it refuses a new connection) and the standby is promoted: it accepts writes",
        lost && promoted,
        format_args!(
            "primary: {status}, a new connection {}; standby at promotion: received {}, replayed {}; promoted in {} ms",
            if refused { "refused" } else { "ACCEPTED" },
            shown(received),
            shown(replayed),
            promote_at.elapsed().as_millis()
        ),
    );
    Ok((received, replayed))
}

async fn timeline(
    bed: &Testbed,
    rec: &mut Recorder,
    mode: Replication,
    pair: &mut Pair,
    lease_pool: PgPool,
) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    let on_primary =
        SqlLeaseStore::with_profile(lease_pool, p.margin, c.sut.clone()).with_ttl_in_force(c.ttl);
    if let Replication::Synchronous { names } = mode {
        make_synchronous(pair, names, p.wait_timeout).await?;
    }
    let senders = standby::senders(&pair.primary_admin).await?;
    rec.note(format!(
        "lease store: primary {} with standby {} (base backup, streaming over the primary's Unix socket); the resource stays on the lab's cluster; senders: {}",
        pair.hosts.primary.root().display(),
        pair.hosts.standby.cluster().root().display(),
        senders
            .iter()
            .map(|s| format!("{} {} {}", s.application_name, s.state, s.sync_state))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    let (z, received_at_cut) = replicated_then_cut(bed, rec, pair, &on_primary).await?;

    let (a, before_a) =
        a_acquires_on_the_primary(bed, rec, mode, pair, &on_primary, &z, received_at_cut).await?;

    drop(on_primary);
    let (received, replayed) = lose_and_promote(rec, pair).await?;
    rec.note(format!(
        "LSNs: A's commit in the primary's WAL ({before_a}, …]; the standby had received {} and replayed {} when it was promoted",
        shown(received),
        shown(replayed)
    ));

    let on_standby = SqlLeaseStore::with_profile(
        Testbed::pool(&pair.hosts, Database::Lease).await?,
        p.margin,
        c.sut.clone(),
    )
    .with_ttl_in_force(c.ttl);
    if mode != Replication::Asynchronous {
        // A's holding survived: B waits for it to expire by the new primary's clock.
        let store = &on_standby;
        harness::wait::until(
            "A's lease expired on the promoted standby",
            p.wait_timeout,
            || store.is_free(LEASE),
        )
        .await?;
    }
    let b = b_acquires_on_the_standby(rec, mode, &on_standby, &a, c.ttl).await?;

    writes_after_failover(bed, rec, mode, &a, &b).await?;

    on_standby.pool().close().await;
    Ok(())
}

/// An earlier holding (Z's), replicated and replayed — the link works — and then the standby's
/// link cut: Z's grant, and what the standby had received at the cut.
async fn replicated_then_cut(
    bed: &Testbed,
    rec: &mut Recorder,
    pair: &mut Pair,
    on_primary: &SqlLeaseStore,
) -> anyhow::Result<(Grant, Option<Lsn>)> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    // An earlier holding, replicated and replayed: the link works before the cut.
    let z = on_primary
        .acquire(LEASE, HOLDER_Z, c.ttl)
        .await?
        .context("Z could not acquire")?;
    on_primary.release(&z).await?;
    let flushed = standby::flush_lsn(&pair.primary_admin).await?;
    let admin = &pair.standby_admin;
    harness::wait::until(
        "the standby replayed Z's holding",
        p.wait_timeout,
        || async {
            Ok::<bool, sqlx::Error>(Standby::lsns(admin).await?.1.is_some_and(|r| r >= flushed))
        },
    )
    .await?;
    let (_, replayed) = Standby::lsns(admin).await?;
    rec.check_that(
        "before the cut the standby has replayed the primary's WAL (Z's holding, token 1, released)",
        replayed.is_some_and(|r| r >= flushed),
        format_args!(
            "primary flushed {flushed}, standby replayed {}",
            shown(replayed)
        ),
    );

    pair.hosts
        .standby
        .cut(&pair.standby_admin, &pair.primary_admin)
        .await?;
    let (received_at_cut, _) = Standby::lsns(&pair.standby_admin).await?;
    let senders = standby::senders(&pair.primary_admin).await?;
    rec.step(
        Mark::Info,
        "lab",
        "link cut",
        None,
        "the standby's WAL receiver stopped",
        None,
    );
    rec.check(
        "the standby's link is cut: no WAL receiver on it, no WAL sender for it on the primary",
        "0 senders",
        &format!("{} senders", senders.len()),
    );
    Ok((z, received_at_cut))
}

/// A acquires on the primary, the standby cut off (asynchronous: acknowledged although its WAL
/// never reached the standby; synchronous: see [`synchronous_acquire`]): A's grant, and the
/// primary's WAL position before it.
async fn a_acquires_on_the_primary(
    bed: &Testbed,
    rec: &mut Recorder,
    mode: Replication,
    pair: &mut Pair,
    on_primary: &SqlLeaseStore,
    z: &Grant,
    received_at_cut: Option<Lsn>,
) -> anyhow::Result<(Grant, Lsn)> {
    let c = bed.case().clone();
    let before_a = standby::flush_lsn(&pair.primary_admin).await?;
    let a = match mode {
        Replication::Asynchronous => {
            let a = on_primary.acquire(LEASE, HOLDER_A, c.ttl).await?;
            let after_a = standby::flush_lsn(&pair.primary_admin).await?;
            // Read after A's acknowledgement: what the standby has when A already holds.
            let (received_after_a, _) = Standby::lsns(&pair.standby_admin).await?;
            rec.step(
                crate::testbed::acquire_mark(a.as_ref()),
                "A",
                "acquire (on the primary)",
                a.as_ref().map(|g| g.token),
                acquired(a.as_ref()),
                None,
            );
            rec.check_that(
                "A's acquire is acknowledged with a token above Z's although its WAL never reached the standby",
                a.as_ref().is_some_and(|g| g.token > z.token)
                    && received_after_a.is_some_and(|r| r <= before_a),
                format_args!(
                    "{}; A's commit lies in the primary's WAL ({before_a}, {after_a}]; after A's \
                     acknowledgement the standby had received up to {} (at the cut: {})",
                    acquired(a.as_ref()),
                    shown(received_after_a),
                    shown(received_at_cut)
                ),
            );
            a
        }
        Replication::Synchronous { .. } => {
            synchronous_acquire(bed, rec, pair, on_primary, before_a, z.token).await?
        }
    };
    let a = a.context("A was not granted the lease")?;
    Ok((a, before_a))
}

/// B acquires on the promoted standby: token A's again (asynchronous, the negative control) or
/// above it.
async fn b_acquires_on_the_standby(
    rec: &mut Recorder,
    mode: Replication,
    on_standby: &SqlLeaseStore,
    a: &Grant,
    ttl: std::time::Duration,
) -> anyhow::Result<Grant> {
    let b = on_standby.acquire(LEASE, HOLDER_B, ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire (on the promoted standby)",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    match mode {
        Replication::Asynchronous => {
            rec.expose(
                "I2 broken: B is granted token 2 again — the token A was acknowledged before the failover",
                b.as_ref().is_some_and(|g| g.token == a.token),
                format_args!("A: token {}; B: {}", a.token, acquired(b.as_ref())),
            );
        }
        Replication::Synchronous { .. } => {
            rec.check_that(
                "every acknowledged token survived: B's token is above A's",
                b.as_ref().is_some_and(|g| g.token > a.token),
                format_args!("A: token {}; B: {}", a.token, acquired(b.as_ref())),
            );
        }
    }
    let b = b.context("B could not acquire on the promoted standby")?;
    if mode == Replication::Asynchronous {
        crate::kit::stale_handle::probe(rec, "A", on_standby, a.clone(), &b, BEFORE_FAILOVER)
            .await?;
    }
    Ok(b)
}

/// B writes, then A with its token from before the failover: rejected, or (asynchronous)
/// accepted — the floor cannot tell two holders of one token apart.
async fn writes_after_failover(
    bed: &Testbed,
    rec: &mut Recorder,
    mode: Replication,
    a: &Grant,
    b: &Grant,
) -> anyhow::Result<()> {
    let c = bed.case().clone();
    let b_ok = write(bed, rec, "B", HOLDER_B, B_CONTENT, b).await?;
    rec.check(
        format!("B's write is accepted (mode={})", c.fence_label()),
        &wrote(true, b.token),
        &wrote(b_ok, b.token),
    );
    let a_ok = write(bed, rec, "A", HOLDER_A, A_CONTENT, a).await?;
    match mode {
        Replication::Asynchronous => {
            rec.expose(
                format!(
                    "the floor cannot tell two holders of token {} apart: A's stale write is accepted after B's ({})",
                    a.token, c.fence_label()
                ),
                a_ok,
                wrote(a_ok, a.token),
            );
        }
        Replication::Synchronous { .. } => {
            rec.check(
                format!("A's stale write is rejected ({})", c.fence_label()),
                &wrote(false, a.token),
                &wrote(a_ok, a.token),
            );
        }
    }
    Ok(())
}

/// (b)'s set-up: `synchronous_standby_names` names the standby (or, `names` false, the broken
/// variant's, is left empty), and with a name, a wait until the primary reports it `sync`.
async fn make_synchronous(
    pair: &Pair,
    names: bool,
    wait_timeout: std::time::Duration,
) -> anyhow::Result<()> {
    standby::set_synchronous_standby(&pair.primary_admin, names.then_some(STANDBY)).await?;
    if names {
        let admin = &pair.primary_admin;
        harness::wait::until("the standby is synchronous", wait_timeout, || async {
            Ok::<bool, sqlx::Error>(
                standby::senders(admin)
                    .await?
                    .iter()
                    .any(|s| s.application_name == STANDBY && s.sync_state == "sync"),
            )
        })
        .await?;
    }
    Ok(())
}

/// (b): A's acquire during the cut waits for the standby; it is acknowledged only once the link
/// is back and the standby has A's commit.
async fn synchronous_acquire(
    bed: &Testbed,
    rec: &mut Recorder,
    pair: &Pair,
    on_primary: &SqlLeaseStore,
    before_a: Lsn,
    z_token: i64,
) -> anyhow::Result<Option<Grant>> {
    let (p, c) = (bed.params(), bed.case());
    let store = on_primary.clone();
    let ttl = c.ttl;
    let sent = Instant::now();
    let mut acquire = tokio::spawn(async move { store.acquire(LEASE, HOLDER_A, ttl).await });
    // A state, polled: A's commit waits on its synchronous standby — or was acknowledged.
    let admin = &pair.primary_admin;
    let mut waiting = Vec::new();
    harness::wait::until(
        "A's commit waits on SyncRep, or is acknowledged",
        p.wait_timeout,
        || {
            let finished = acquire.is_finished();
            async move {
                Ok::<bool, sqlx::Error>(
                    finished || !standby::waiting_on(admin, "SyncRep").await?.is_empty(),
                )
            }
        },
    )
    .await?;
    if !acquire.is_finished() {
        // The timeline prescribes how long the link stays cut: one TTL. A commit waiting for its
        // synchronous standby has no timeout of its own.
        harness::wait::prescribed(c.ttl).await;
        waiting = standby::waiting_on(admin, "SyncRep").await?;
    }
    // A's commit record is flushed on the primary before its backend waits on SyncRep: the
    // primary's flush position now lies at or beyond the end of A's commit.
    let commit_by = standby::flush_lsn(admin).await?;
    rec.check_that(
        format!(
            "while the standby is cut off (held for one TTL, {} ms), A's acquire is not acknowledged: its commit waits on SyncRep",
            c.ttl.as_millis()
        ),
        !acquire.is_finished() && !waiting.is_empty(),
        format_args!(
            "backends waiting on SyncRep: {waiting:?}; A's acquire {} after {} ms",
            if acquire.is_finished() {
                "already answered"
            } else {
                "still unanswered"
            },
            sent.elapsed().as_millis()
        ),
    );
    pair.hosts
        .standby
        .reconnect(&pair.standby_admin, &pair.primary_admin)
        .await?;
    let a = tokio::time::timeout(p.wait_timeout, &mut acquire)
        .await
        .context("A's acquire was not answered after the link came back")???;
    let blocked = sent.elapsed();
    let (received, _) = Standby::lsns(&pair.standby_admin).await?;
    rec.step(
        crate::testbed::acquire_mark(a.as_ref()),
        "A",
        "acquire (on the primary, acknowledged)",
        a.as_ref().map(|g| g.token),
        acquired(a.as_ref()),
        None,
    );
    rec.check_that(
        "A's acquire is acknowledged with a token above Z's only once the link is back and the standby has its commit",
        a.as_ref().is_some_and(|g| g.token > z_token) && received.is_some_and(|r| r >= commit_by),
        format_args!(
            "{}; the standby had received {} (A's commit lies in ({before_a}, {commit_by}]); the acquire waited {} ms — the price of the cut",
            acquired(a.as_ref()),
            shown(received),
            blocked.as_millis()
        ),
    );
    Ok(a)
}

/// `who` writes `content` to the summary with `grant`'s token, in the run's fenced mode.
async fn write(
    bed: &Testbed,
    rec: &mut Recorder,
    who: &str,
    writer: &str,
    content: &str,
    grant: &Grant,
) -> anyhow::Result<bool> {
    let write = Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer,
        token: grant.token,
    };
    let ok = bed.resource.write(&write, WriteMode::Fenced).await?;
    let clock = bed.lease.clock().await.ok().flatten();
    rec.step(
        Mark::Write { accepted: ok },
        who,
        "write",
        Some(grant.token),
        wrote(ok, grant.token),
        clock,
    );
    Ok(ok)
}
