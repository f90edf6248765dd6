//! S3 on MariaDB's named lock (`--lease-store mariadb-getlock`, feature `mariadb`): the same
//! failover as PostgreSQL's, on a MariaDB primary and its replica (`harness::server::
//! maria_replica`: two local servers, GTID replication over TCP on 127.0.0.1). A takes the lock
//! on the primary (`GET_LOCK`, the counter row of the fenced form bumped with it); the replica
//! applies the row — the binary log carries rows, and a `GET_LOCK` is no row — the primary's host
//! is lost (SIGKILL) and the replica promoted; B takes the lock there at once, with a greater
//! token, while A's own deadline says A still holds it. The fenced resource rejects A's write
//! after B's; the unfenced one accepts it (the negative control). The checks are S3's own seven.

use std::time::Instant;

use anyhow::Context as _;
use fencing::lease::mariadb_getlock::{connection_holding, GetLockStore};
use fencing::lease::{Grant, LeaseStore};
use harness::evidence::{Mark, Recorder};
use harness::server::maria_replica::{self, MariaPair};

use crate::testbed::{acquired, lease_state, shown, HOLDER_A, HOLDER_B, LEASE};
use crate::Testbed;

/// The lock's name at the server (the store's prefix).
fn server_name() -> String {
    format!("lab/{LEASE}")
}

/// Starts the pair, runs the timeline on it, stops it on every path.
pub(crate) async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    let mut pair = MariaPair::create()
        .await
        .context("failed to start MariaDB's primary and replica")?;
    let outcome = timeline(bed, rec, &mut pair).await;
    pair.stop().await;
    outcome
}

async fn timeline(bed: &Testbed, rec: &mut Recorder, pair: &mut MariaPair) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    let (primary_at, replica_at) = (
        pair.primary.socket_path().display().to_string(),
        pair.replica.socket_path().display().to_string(),
    );
    rec.note(format!(
        "the lock: mariadb-getlock-fenced on a MariaDB primary {} with a replica {} (GTID \
         replication over TCP on 127.0.0.1); the resource stays on the lab's cluster",
        pair.primary.root().display(),
        pair.replica.root().display()
    ));
    let on_primary = GetLockStore::open(&primary_at, p.margin, true).await?;
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
    let position = pair.wait_replayed().await?;
    let on_replica = GetLockStore::open(&replica_at, p.margin, true).await?;
    let seen = on_replica.inspect(LEASE).await?;
    let on_primary_holder = connection_holding(&primary_at, &server_name()).await?;
    let on_replica_holder = connection_holding(&replica_at, &server_name()).await?;
    rec.check_that(
        "the replica has applied A's grant — the lock's row, its token and holder — but not the \
         lock: the primary shows a connection holding A's named lock, the replica none (the \
         binary log carries rows; a GET_LOCK is none)",
        seen.as_ref()
            .is_some_and(|r| r.holder == HOLDER_A && r.token == a.token)
            && on_primary_holder.is_some()
            && on_replica_holder.is_none(),
        format_args!(
            "replica at GTID {position}; IS_USED_LOCK: connection {} on the primary, {} on the \
             replica; its row on the replica: {}",
            shown(on_primary_holder),
            shown(on_replica_holder),
            shown(seen.as_ref().map(lease_state))
        ),
    );
    let b = fail_over(bed, rec, pair, &on_replica, &a).await?;
    crate::kit::session_locks::writes_after_failover(bed, rec, a.token, b.token).await
}

/// The primary's host lost, the replica promoted, B takes the lock on it: B's grant.
async fn fail_over(
    bed: &Testbed,
    rec: &mut Recorder,
    pair: &mut MariaPair,
    on_replica: &GetLockStore,
    a: &Grant,
) -> anyhow::Result<Grant> {
    pair.lose_primary().await;
    rec.step(
        Mark::Failover,
        "lab",
        "primary's host lost (SIGKILL)",
        None,
        "",
        None,
    );
    let refused = maria_replica::root(&pair.primary).await.is_err();
    let promote_at = Instant::now();
    let promoted = pair.promote().await;
    rec.check_that(
        "the primary's host is lost (it refuses a new connection) and the replica is promoted: it accepts writes",
        promoted.is_ok() && refused,
        format_args!(
            "primary: a new connection {}; promoted in {} ms{}",
            if refused { "refused" } else { "ACCEPTED" },
            promote_at.elapsed().as_millis(),
            promoted.as_ref().err().map_or(String::new(), |e| format!(": {e:#}"))
        ),
    );
    let b = on_replica.acquire(LEASE, HOLDER_B, bed.case().ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire (on the promoted replica)",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    crate::kit::session_locks::b_took_the_lock_after_failover(rec, b, a)
}
