//! S4 — the lock in the write's own transaction: the design that fences by construction. The
//! fault: A takes PostgreSQL's advisory lock inside a transaction on the resource's own database
//! (`pg_try_advisory_xact_lock`), means to write in it, and stands still past the transaction's
//! idle timeout (`idle_in_transaction_session_timeout`, the TTL) — as a frozen or stalled holder
//! would. Property: the server ends A's transaction and the lock with it; B takes the lock in a
//! transaction of its own and writes; A's write in its own transaction is refused by the server —
//! nothing of a transaction that no longer holds the lock can commit. The negative control: A's
//! write through another connection, outside the lock's transaction (a holder that reconnects and
//! retries), is accepted after B's: the lock guards only the writes made in its transaction.
//!
//! A and B are the lab's own clients: the subject is where the lock is taken, not a holder
//! process.

use std::time::Instant;

use fencing::lease::pg_advisory::{self, XactLock};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};

use crate::kit::paused_holder::{A_CONTENT, B_CONTENT};
use crate::kit::session_locks;
use crate::testbed::{shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed, NO_HOLDER,
};

const SPEC: Spec = Spec {
    id: "S4",
    title: "the lock in the write's own transaction (pg_try_advisory_xact_lock): A stands still past its transaction's idle timeout, the server ends it, B takes the lock — A's write in its transaction is refused, through another connection accepted",
    about: About {
        fault: "A stands still inside the transaction that holds the lock, past its idle timeout",
        shows: "a lock taken in the write's own transaction fences it by construction; a write outside it is unguarded",
        paragraph: "The form of the database's lock that needs no token: A takes the advisory \
                    lock inside a transaction on the resource's own database \
                    (pg_try_advisory_xact_lock) and means to write in that same transaction. \
                    A stands still past the transaction's idle timeout; the server ends the \
                    transaction, and the lock with it. B takes the lock in a transaction of \
                    its own and writes. A's write, sent in its own transaction, is refused by \
                    the server: no write of a transaction that lost the lock can commit. The \
                    negative control: A's write through another connection, outside the lock's \
                    transaction, is accepted after B's — the lock guards only what is written \
                    inside it.",
    },
    checks: Checks::fixed(5),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: session_locks::LOCK_SERVICES,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    // While A's transaction stands idle holding the lock, before the server ends it: the line
    // the server's ending prints comes a few statements before the end of the run, and an
    // interruption sent on it once arrived after the run was done (CI: exit 0, not 130).
    fault_moments: &["B's transaction cannot take it"],
    lanes: StoreLanes::Default,
};

pub struct S4;

impl Scenario for S4 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(timeline(bed, rec))
    }
}

fn write<'w>(writer: &'w str, content: &'w str) -> Write<'w> {
    Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer,
        token: 0,
    }
}

async fn timeline(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    let pool = bed.resource.pool().clone();
    let profile = bed.resource.profile().clone();
    let Some(a) = XactLock::begin(&pool, LEASE, c.ttl).await? else {
        anyhow::bail!("A could not take the free lock in its transaction");
    };
    rec.step(
        Mark::Acquired,
        "A",
        "takes the lock in its transaction",
        None,
        format!("held by backend {}", a.pid()),
        None,
    );
    let refused = XactLock::begin(&pool, LEASE, c.ttl).await?;
    rec.check_that(
        "while A's transaction holds the lock, B's transaction cannot take it",
        refused.is_none(),
        if refused.is_none() {
            "refused"
        } else {
            "granted"
        },
    );
    drop(refused);

    // A stands still in its transaction: the server ends it once it is idle for the TTL.
    let still_from = Instant::now();
    let a_pid = a.pid();
    harness::wait::until(
        "the server ended A's transaction",
        p.wait_timeout,
        || async { Ok::<bool, fencing::Error>(!pg_advisory::backend_alive(&pool, a_pid).await?) },
    )
    .await?;
    let ended_after = still_from.elapsed();
    rec.check_that(
        format!(
            "the server ended A's transaction, and the lock with it, once it stood idle for its \
             idle_in_transaction_session_timeout ({} ms, the TTL)",
            c.ttl.as_millis()
        ),
        ended_after >= c.ttl.saturating_sub(std::time::Duration::from_millis(100)),
        format_args!(
            "backend {a_pid} gone {} ms after A stood still",
            ended_after.as_millis()
        ),
    );

    let b = XactLock::begin(&pool, LEASE, c.ttl).await?;
    let b_wrote = match b {
        Some(mut b) => {
            let ok = fencing::resource::write_on(
                b.conn(),
                &profile,
                &write(HOLDER_B, B_CONTENT),
                WriteMode::Unfenced,
                async {},
            )
            .await?;
            b.commit().await?;
            Some(ok)
        }
        None => None,
    };
    rec.check_that(
        "B takes the lock in a transaction of its own, writes in it and commits",
        b_wrote == Some(true),
        shown(b_wrote.map(|ok| wrote(ok, 0))),
    );

    a_writes_after_losing_it(bed, rec, a).await
}

/// A, its transaction ended, writes in it (refused) and through another connection (accepted:
/// the negative control).
async fn a_writes_after_losing_it(
    bed: &Testbed,
    rec: &mut Recorder,
    mut a: XactLock,
) -> anyhow::Result<()> {
    let profile = bed.resource.profile().clone();
    let own = fencing::resource::write_on(
        a.conn(),
        &profile,
        &write(HOLDER_A, A_CONTENT),
        WriteMode::Unfenced,
        async {},
    )
    .await
    .map_err(anyhow::Error::from);
    rec.check_that(
        "A's write in its own transaction is refused by the server: the transaction that held the \
         lock is gone, and nothing of it can commit",
        own.is_err(),
        match &own {
            Ok(ok) => format!("{} (the transaction still ran)", wrote(*ok, 0)),
            Err(e) => format!("refused: {e:#}"),
        },
    );
    drop(a);
    let elsewhere = bed
        .resource
        .write(&write(HOLDER_A, A_CONTENT), WriteMode::Unfenced)
        .await?;
    rec.check_that(
        "negative control exposes: A's write through another connection, outside the lock's \
         transaction, is accepted after B's — the lock guards only what is written inside it",
        elsewhere,
        wrote(elsewhere, 0),
    );
    Ok(())
}
