//! S3 — the lock's server fails over to a streaming standby. The fault: PostgreSQL's advisory
//! lock (fenced form, `pg-advisory-fenced`) is taken by A on a primary with a streaming standby
//! (a second embedded cluster, as in F14), the standby replays everything A's grant wrote, the
//! primary's host is lost and the standby promoted. Property: a lock is not data — PostgreSQL
//! writes no WAL for an advisory lock, so no standby has it — and the promoted standby grants it
//! to B at once, while A, whose local deadline has not passed, still believes it holds it: two
//! holders by their own reckoning. The counter is a committed row, replicated like any: B's
//! token is above A's, and the fenced resource (on the lab's own cluster) rejects A's write after
//! B's; the unfenced one accepts it (the negative control).
//!
//! A and B are the lab's own clients of the store: the subject is the lock's server, not a
//! holder process. On a run whose store is MariaDB's named lock (`--lease-store
//! mariadb-getlock`), S3 fails over a MariaDB primary to its replica instead
//! (`s3_getlock_replica.rs`): a `GET_LOCK` is not replicated either.

use std::time::Instant;

use anyhow::Context as _;
use fencing::lease::pg_advisory::{self, AdvisoryLeaseStore};
use fencing::lease::{Grant, LeaseStore};
use fencing::schema::Database;
use harness::evidence::{Mark, Recorder};
use harness::server::standby::{self, Replicated, Standby};
use harness::server::Cluster;
use sqlx::PgPool;

use crate::kit::session_locks;
use crate::testbed::{acquired, lease_state, shown, HOLDER_A, HOLDER_B, LEASE};
use crate::{
    About, Applies, Checks, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed, NO_HOLDER,
};

const SPEC: Spec = Spec {
    id: "S3",
    title: "the lock's server fails over to its replica: the database lock is not carried, B takes it on the new primary while A still believes it holds it — the replicated counter fences A, unfenced accepts it",
    about: About {
        fault: "the primary holding a database lock lost, its standby promoted",
        shows: "a database lock is not replicated: the new primary grants it again; a replicated counter still fences",
        paragraph: "PostgreSQL's advisory lock (with the lock row's counter as its token) is \
                    taken by A on a primary with a streaming standby, which replays \
                    everything A's grant wrote. The primary's host is lost and the standby \
                    promoted. The standby has A's counter row but no lock — an advisory lock \
                    lives in the server's memory and writes no WAL — so the new primary \
                    grants the lock to B at once, while A's own deadline says it still holds \
                    it: two holders by their own reckoning. B's token is above A's (the \
                    counter replicated), so the fenced resource rejects A's write after \
                    B's; the unfenced one accepts it (the negative control). With \
                    --lease-store mariadb-getlock the same runs on a MariaDB primary and its \
                    replica (GTID replication): a GET_LOCK is not in the binary log either.",
    },
    checks: Checks::fixed(7),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: session_locks::LOCK_SERVICES,
    fence_dependent: false,
    again_on_stores: false,
    // It promotes a standby: two more clusters and their replication.
    runs_alone: true,
    holder_points: Err(NO_HOLDER),
    fault_moments: &["the standby is promoted"],
    lanes: StoreLanes::Default,
};

/// The standby's name at the primary.
const STANDBY: &str = "lab_lock_standby";

pub struct S3;

impl Scenario for S3 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            // MariaDB's named lock fails over on a replica of its own.
            #[cfg(feature = "mariadb")]
            if bed.case().store.service() == Some(fencing::lease::Service::Mariadb) {
                return crate::experiments::s3_getlock_replica::run(bed, rec).await;
            }
            let primary = Cluster::create(bed.cluster()?.config().clone())
                .await
                .context("failed to start the lock's primary")?;
            let made = async {
                let (lease_pool, resource_pool) =
                    Testbed::provision(&primary, &bed.case().sut).await?;
                resource_pool.close().await;
                let primary_admin = primary.admin_pool().await?;
                // The lock's record exists before the base backup: the standby starts with it.
                let store = AdvisoryLeaseStore::open(lease_pool, bed.params().margin, true).await?;
                let standby = Standby::create(&primary, &primary_admin, STANDBY)
                    .await
                    .context("failed to make the streaming standby")?;
                let standby_admin = standby.cluster().admin_pool().await?;
                anyhow::Ok((store, primary_admin, standby, standby_admin))
            };
            let (on_primary, primary_admin, standby, standby_admin) = match made.await {
                Ok(made) => made,
                Err(e) => {
                    bed.adopt(Box::new(primary)).await;
                    return Err(e);
                }
            };
            let mut hosts = Replicated::new(primary, standby);
            let outcome = timeline(
                bed,
                rec,
                &mut hosts,
                on_primary,
                &primary_admin,
                &standby_admin,
            )
            .await;
            primary_admin.close().await;
            standby_admin.close().await;
            bed.adopt(Box::new(hosts)).await;
            outcome
        })
    }
}

async fn timeline(
    bed: &Testbed,
    rec: &mut Recorder,
    hosts: &mut Replicated,
    on_primary: AdvisoryLeaseStore,
    primary_admin: &PgPool,
    standby_admin: &PgPool,
) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    rec.note(format!(
        "the lock: pg-advisory-fenced on a primary {} with a streaming standby {} (base backup, \
         streaming over the primary's Unix socket); the resource stays on the lab's cluster",
        hosts.primary.root().display(),
        hosts.standby.cluster().root().display()
    ));
    let a = on_primary
        .acquire(LEASE, HOLDER_A, c.ttl)
        .await?
        .context("A could not take the lock on the primary")?;
    rec.step(
        Mark::Acquired,
        "A",
        "acquire (on the primary)",
        Some(a.token),
        acquired(Some(&a)),
        None,
    );
    let flushed = standby::flush_lsn(primary_admin).await?;
    harness::wait::until("the standby replayed A's grant", p.wait_timeout, || async {
        Ok::<bool, sqlx::Error>(
            Standby::lsns(standby_admin)
                .await?
                .1
                .is_some_and(|r| r >= flushed),
        )
    })
    .await?;
    // Read on the standby itself (a hot standby answers reads), not through the hosts, whose
    // lease database is the primary's until the promotion.
    let on_standby = AdvisoryLeaseStore::open(
        Testbed::pool(hosts.standby.cluster(), Database::Lease).await?,
        p.margin,
        true,
    )
    .await?;
    let seen = on_standby.inspect(LEASE).await?;
    let held_on_primary = pg_advisory::locks_held(primary_admin).await?;
    let held_on_standby = pg_advisory::locks_held(standby_admin).await?;
    rec.check_that(
        "the standby has replayed A's grant — the lock's row, its token and holder — but not the \
         lock: the primary shows A's advisory lock held, the standby none (an advisory lock \
         writes no WAL)",
        seen.as_ref()
            .is_some_and(|r| r.holder == HOLDER_A && r.token == a.token)
            && held_on_primary == 1
            && held_on_standby == 0,
        format_args!(
            "primary flushed {flushed}; the lab's advisory locks held: {held_on_primary} on the \
             primary, {held_on_standby} on the standby; its row on the standby: {}",
            shown(seen.as_ref().map(lease_state))
        ),
    );

    let b = fail_over(bed, rec, hosts, standby_admin, &a).await?;
    session_locks::writes_after_failover(bed, rec, a.token, b.token).await
}

/// The primary's host lost, the standby promoted, B takes the lock on it: B's grant.
async fn fail_over(
    bed: &Testbed,
    rec: &mut Recorder,
    hosts: &mut Replicated,
    standby_admin: &PgPool,
    a: &Grant,
) -> anyhow::Result<Grant> {
    let (p, c) = (bed.params(), bed.case());
    let status = standby::lose_host(&mut hosts.primary).await;
    rec.step(
        Mark::Failover,
        "lab",
        "primary's host lost (SIGKILL to its process group)",
        None,
        status.clone(),
        None,
    );
    let refused = hosts.primary.admin().await.is_err();
    let promote_at = Instant::now();
    let promoted = hosts.standby.promote(standby_admin).await?;
    if promoted {
        hosts.promoted();
    }
    rec.check_that(
        "the primary's host is lost (it refuses a new connection) and the standby is promoted: it accepts writes",
        promoted && refused && !status.contains("not running"),
        format_args!(
            "primary: {status}, a new connection {}; promoted in {} ms",
            if refused { "refused" } else { "ACCEPTED" },
            promote_at.elapsed().as_millis()
        ),
    );
    let on_new_primary =
        AdvisoryLeaseStore::open(Testbed::pool(hosts, Database::Lease).await?, p.margin, true)
            .await?;
    let b = on_new_primary.acquire(LEASE, HOLDER_B, c.ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire (on the promoted standby)",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    session_locks::b_took_the_lock_after_failover(rec, b, a)
}
