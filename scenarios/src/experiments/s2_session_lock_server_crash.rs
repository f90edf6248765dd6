//! S2 — the server crashes under a lock its session keeps. The fault: holder A holds the
//! database's own lock (fenced form: the lock row's counter as its token) and stands frozen at
//! its write point; the lock's server is crashed (PostgreSQL: an immediate stop; MariaDB:
//! SIGKILL) and started again. Property: the lock does not survive the crash — it lived in the
//! crashed server's memory with A's session — so after the restart nobody holds it and B takes
//! it at once, while A, frozen, knows nothing; the counter is a committed row and does: B's token
//! is greater than A's. Thawed, A sends the write it prepared: the fenced resource rejects it by
//! B's token, the unfenced one (the negative control) accepts it beside B's — two holders' writes
//! under one lock. A learns that its lock is gone only at its next request.
//!
//! On a run whose lease store is not one of these locks, S2 runs on `pg-advisory-fenced`, on the
//! lab's own server (`session_locks.rs`); with the embedded cluster the resource's database,
//! on the same server, goes through the crash too (its committed rows survive it).

use anyhow::bail;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};
use harness::holder::{Holder, EVENT_TIMEOUT};
use holder_protocol::{Event, LOST_PREFIX};

use crate::kit::paused_holder::{
    freeze_and_show, go_and_thaw, lab_client_takes_over, lab_step, step, A_CONTENT, B_CONTENT,
};
use crate::kit::session_locks;
use crate::testbed::{lease_state, shown, HOLDER_A, LEASE, SUMMARY};
use crate::{About, Applies, Checks, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed};

const SPEC: Spec = Spec {
    id: "S2",
    title: "the server crashes under a lock its session keeps: the lock vanishes with the crash, B takes it at once while A still believes it holds it — fenced rejects A's write, unfenced accepts it",
    about: About {
        fault: "the lock's server crashes and restarts while holder A, frozen, holds a database lock",
        shows: "a database lock does not survive its server's crash; a committed counter does and fences A",
        paragraph: "A holds the database's own lock (the fenced form: a counter of the lock's \
                    row, bumped and committed by the locking session, is the token) and is \
                    frozen at its write point. The lab crashes the lock's server — \
                    PostgreSQL's immediate stop, MariaDB's SIGKILL — and starts it again. The \
                    lock lived in the crashed server's memory, tied to A's session: after the \
                    restart the server shows nobody holding it, and B takes it at once, long \
                    before any timeout could have ended A's session, with a token above A's \
                    (the counter is a committed row and survived). Thawed, A sends the write \
                    it prepared while it held the lock: the fenced resource rejects it by B's \
                    token; the unfenced one, the negative control, accepts it after B's. A \
                    learns that its lock is gone only at its next request on its session.",
    },
    checks: Checks::fixed(14),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: session_locks::LOCK_SERVICES,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: true,
    holder_points: Err("it runs the lab's holder on the database's own lock (--store pg-advisory-fenced or mariadb-getlock-fenced), which a holder of yours is not asked to speak"),
    fault_moments: &["/proc shows state T", "nobody holds the lock"],
    lanes: StoreLanes::Default,
};

pub struct S2;

impl Scenario for S2 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(session_locks::on_a_session_lock(
            bed,
            rec,
            true,
            |bed, rec| {
                Box::pin(async move {
                    round(bed, rec, WriteMode::Fenced).await?;
                    bed.reset().await?;
                    round(bed, rec, WriteMode::Unfenced).await
                })
            },
        ))
    }
}

/// One round of the timeline, both holders writing in `mode`.
async fn round(bed: &mut Testbed, rec: &mut Recorder, mode: WriteMode) -> anyhow::Result<()> {
    let label = bed.case().mode_label(mode);
    rec.note(format!("resource mode={label}"));
    let mut a = Holder::spawn(&bed.holder_spec(HOLDER_A, A_CONTENT, mode, false)).await?;
    let (at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire", &acquired).await;
    let Event::Acquired { token } = acquired else {
        bail!(a.unexpected("ACQUIRED token=…", &acquired));
    };
    let a_token = token.value().unwrap_or(0);
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &ready).await;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(a.unexpected("AT_WRITE_POINT", &ready));
    }
    // A's renewer connects on a thread of its own after the grant: frozen before it did, it
    // would finish connecting only after the crash. Its first renewal says it is running.
    let mut renewals = Vec::new();
    harness::wait::until("A's renewer renewed once", EVENT_TIMEOUT, || {
        renewals.extend_from_slice(a.drain_renewals());
        let renewed = renewals.iter().any(|(_, ok)| *ok);
        async move { Ok::<bool, std::io::Error>(renewed) }
    })
    .await?;
    freeze_and_show(
        bed,
        rec,
        &mut a,
        &format!(" ({label}; A holds the lock with token {a_token})"),
        "A's renewer thread is frozen with it",
    )
    .await?;

    let down_from = std::time::Instant::now();
    crash_and_restart(bed).await?;
    lab_step(
        bed,
        rec,
        Mark::Restart,
        "lab",
        "crash, restart",
        format!(
            "the lock's server back after {} ms",
            down_from.elapsed().as_millis()
        ),
    )
    .await;
    let row = bed.lease.inspect(LEASE).await?;
    rec.check_that(
        format!(
            "{label}: after the restart nobody holds the lock — it lived with A's session in the \
             crashed server — while A, frozen, still believes it holds it"
        ),
        row.as_ref().is_some_and(|r| r.expired && !r.released),
        format_args!(
            "{} (the lab's record of the grant, a committed row: {})",
            shown(row.as_ref().map(lease_state)),
            shown(row.as_ref().map(|r| r.expires_at.as_str()))
        ),
    );
    let (b, b_wrote) = lab_client_takes_over(bed, rec, SUMMARY, B_CONTENT, mode).await?;
    let b_token = b.as_ref().map(|g| g.token);
    rec.check_that(
        format!(
            "{label}: B acquires the lock at once, {} ms after the crash, with a token above A's \
             (the counter, a committed row, survived the crash)",
            down_from.elapsed().as_millis()
        ),
        b_token.is_some_and(|t| t > a_token),
        format_args!(
            "{} after A's {a_token}",
            crate::testbed::acquired(b.as_ref())
        ),
    );
    rec.check_that(
        format!("{label}: B's write is accepted"),
        b_wrote == Some(true),
        shown(b_wrote.map(|ok| format!("accepted={ok}"))),
    );
    a_resumes(bed, rec, &mut a, mode, label).await?;
    if let Some(b) = b {
        bed.lease.release(&b).await?;
    }
    Ok(())
}

/// A, thawed, sends its write; its verdict in `mode`, and what A's client learns afterwards.
async fn a_resumes(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    mode: WriteMode,
    label: &str,
) -> anyhow::Result<()> {
    go_and_thaw(bed, rec, a).await?;
    let (at, wrote) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(
        bed,
        rec,
        at,
        "A",
        "write (prepared before the crash)",
        &wrote,
    )
    .await;
    let accepted = matches!(wrote, Event::Write { accepted: true, .. });
    let _ = match mode {
        WriteMode::Unfenced => rec.check_that(
            format!(
                "negative control exposes: {label}: A's write, under the lock the crash took from \
                 it, is accepted after B's"
            ),
            accepted,
            &wrote,
        ),
        _ => rec.check_that(
            format!("{label}: the fenced resource rejects A's write by B's greater token"),
            matches!(
                wrote,
                Event::Write {
                    accepted: false,
                    ..
                }
            ),
            &wrote,
        ),
    };
    let (at, renewed) = a.next("A's renewal after its write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "renew after the write", &renewed).await;
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    let heard = a
        .stderr()
        .lines()
        .find_map(|l| l.strip_prefix(LOST_PREFIX).map(str::to_owned));
    rec.check_that(
        format!("{label}: A learns that its lock is gone only at its next request on its session"),
        matches!(renewed, Event::RenewAfterWrite { ok: false }),
        format_args!(
            "{renewed}; its client said: {}; {}",
            shown(heard),
            harness::holder::describe(Some(code))
        ),
    );
    Ok(())
}

/// Crashes the lock's server and starts it again, then opens the store anew on it: PostgreSQL,
/// the lab's own cluster (the lease database's pools reopened), or the named locks' MariaDB.
async fn crash_and_restart(bed: &mut Testbed) -> anyhow::Result<()> {
    let store = bed.case().store;
    match bed.service.as_mut() {
        Some(service) => service.crash_and_restart().await?,
        None => {
            bed.crash_and_restart().await?;
            bed.reopen().await?;
        }
    }
    bed.use_store(store).await
}
