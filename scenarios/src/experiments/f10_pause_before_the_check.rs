//! F10 — the pause before the check. The fault: holder A, a separate process renewing in the
//! background, is frozen with SIGSTOP (every thread) *before* its local-deadline check; its lease
//! expires by the database clock; B takes over with token 2 and writes; A is thawed.
//! Property: A's own check, judged by its monotonic clock, finds the local deadline passed, so A
//! gives up by itself (holder exit 8): the resource never sees it (no row of A in
//! `write_attempt`), and B's holding and write stay as they were. This is the placement the local
//! deadline covers (seed 004); F4 freezes A *after* the check, where only the fence helps.
//!
//! A is given the unfenced write mode on purpose: the resource would accept anything A sent, so
//! what keeps B's part is A's check alone, not the fence. B is the lab's own lease client (one
//! acquire and one write through the same `fencing` stores), not a second holder process: B is
//! not under test here (F4 runs B as a process), and a client in the lab keeps the takeover in
//! the lab's hands, with no second renewer whose timing varies on a loaded machine.

use std::convert::Infallible;

use anyhow::bail;
use fencing::resource::WriteMode;
use harness::evidence::Recorder;
use harness::holder::{describe, Holder};
use holder_protocol::{exit, Event};

use crate::kit::paused_holder::{
    exit_after_check, part_line, record_renewals, renewal_count, renewed_every_time,
    until_expired_while_frozen,
};
use crate::kit::steps::{Steps, Who, Wrote};
use crate::testbed::{lease_state, shown, HOLDER_A, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, FaultPoint, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes,
    Testbed,
};

const SPEC: Spec = Spec {
    id: "F10",
    title: "the pause before the check: A frozen before its local-deadline check, the lease expires, B takes over; A resumes and gives up by its monotonic clock",
    about: About {
        fault: "holder A frozen (SIGSTOP) before its local-deadline check",
        shows: "the holder's own monotonic deadline stops it: a pause before the check needs no fence",
        paragraph: "A holder checks a local deadline, counted on its own monotonic clock, just \
                    before it writes. Here A, a separate process renewing in the background, \
                    is frozen with SIGSTOP before that check, renewer thread included; its \
                    lease expires by the store's clock and B, the lab's own client, acquires \
                    token 2 and writes. Thawed, A finds its deadline passed and exits without \
                    writing. A is given the unfenced write mode on purpose, so only its own \
                    check keeps B's data: the resource logs no attempt by A, B's summary stays \
                    and the lease is still B's. Contrast F4, where A is frozen after the check \
                    and only the fence helps.",
    },
    checks: Checks::fixed(13),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::All,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Ok(&[FaultPoint::BeforeCheck]),
    fault_moments: &["/proc shows state T"],
    lanes: StoreLanes::Default,
};

pub struct F10;

impl Scenario for F10 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(timeline(Steps::new(bed, rec)))
    }
}

/// A stops before its check, renewing; frozen, its lease expires; B takes over and writes; A,
/// thawed, must give up by its own clock, and the resource must never hear of it.
async fn timeline(mut t: Steps<'_>) -> anyhow::Result<()> {
    let mut spec = t
        .bed
        .holder_spec(HOLDER_A, Who::A.content(), WriteMode::Unfenced, false);
    spec.flags.wait_before_check = true;
    let mut a = Holder::spawn(&spec).await?;
    let acquires = format!("A (pid {}) acquires the lease, token=1", a.pid());
    t.expect(&mut a, Who::A, "acquire", acquires, "ACQUIRED token=1")
        .await?;
    let (_, before) = t
        .heard(&mut a, Who::A, "stops before its local-deadline check")
        .await?;
    let Event::BeforeCheck {
        token,
        deadline_left_ms,
    } = before
    else {
        bail!(a.unexpected("BEFORE_CHECK token=1", &before));
    };
    if token != t.bed.token(t.rec, 1) {
        bail!(a.unexpected("BEFORE_CHECK token=1", &before));
    }
    let ahead = "A stops before its local-deadline check, its deadline still ahead";
    t.rec.check_that(ahead, deadline_left_ms > 0, &before);
    t.rec.note("A's write mode is unfenced: the resource would accept whatever A sent, so only A's own check can keep B's part");
    renewing_while_it_waits(&mut t, &mut a).await?;

    let frozen = "A's renewer thread is frozen with it: nothing moves A's local deadline";
    let frozen_at = t.freeze(&mut a, " before its check", frozen).await?;
    until_expired_while_frozen(t.bed, t.rec, frozen_at).await?;
    let b = t
        .must_acquire(
            Who::B,
            "B (the lab's lease client) acquires the lease, token=2",
            "ACQUIRED token=2",
        )
        .await?;
    let b_writes = format!(
        "B's write is accepted (mode={})",
        t.bed.case().fence_label()
    );
    t.write(Who::B, &b, WriteMode::Fenced, b_writes, Wrote::accepted(2))
        .await?;

    gives_up_by_its_own_clock(&mut t, &mut a, frozen_at).await?;
    the_resource_never_saw_a(&mut t).await
}

/// A, sent its go-line and thawed, finds its local deadline passed by its monotonic clock, and
/// exits with its deadline-passed status without writing.
async fn gives_up_by_its_own_clock(
    t: &mut Steps<'_>,
    a: &mut Holder,
    frozen_at: std::time::Instant,
) -> anyhow::Result<()> {
    t.thaw(a).await?;
    let frozen_for = frozen_at.elapsed();
    let (_, verdict) = t
        .heard(a, Who::A, "local-deadline check (after resuming)")
        .await?;
    let (seen, overdue) = match &verdict {
        Event::DeadlinePassed { token, overdue_ms } => {
            (format!("DEADLINE_PASSED token={token}"), Some(*overdue_ms))
        }
        other => (other.to_string(), None),
    };
    t.rec.check(
        "A, resumed, finds its local deadline passed by its monotonic clock and will not write",
        "DEADLINE_PASSED token=1",
        &seen,
    );
    if let Some(overdue_ms) = overdue {
        let ms = frozen_for.as_millis();
        t.rec.note(format!("A was frozen for {ms} ms; its check found the local deadline passed by {overdue_ms} ms"));
    }
    let code = exit_after_check(t.bed, t.rec, a, &verdict).await?;
    let exits = "A exits by itself with its deadline-passed status: nothing written";
    t.rec.check(
        exits,
        &describe(Some(exit::DEADLINE_PASSED)),
        &describe(Some(code)),
    );
    Ok(())
}

/// While A waits before its check, its renewer renews (polled: at least once), every time with
/// success, and the lease is A's and unexpired just before the freeze.
async fn renewing_while_it_waits(t: &mut Steps<'_>, a: &mut Holder) -> anyhow::Result<()> {
    harness::wait::until(
        "A's renewer has renewed",
        t.bed.params().wait_timeout,
        || {
            let seen = !a.drain_renewals().is_empty();
            async move { Ok::<bool, Infallible>(seen) }
        },
    )
    .await?;
    let renewals = record_renewals(t.rec, a, Who::A.name(), 1);
    t.rec.check_that(
        "A's background renewer renewed while A waited before its check, every time with success",
        renewed_every_time(&renewals),
        renewal_count(&renewals),
    );
    let row = t.bed.lease.inspect(LEASE).await?;
    t.rec.check(
        "just before the freeze the lease is A's and unexpired (database clock)",
        "holder-a token=1 unexpired",
        &shown(row.as_ref().map(lease_state)),
    );
    Ok(())
}

/// What A's giving up left: no attempt of A's at the resource, B's summary, B's lease.
async fn the_resource_never_saw_a(t: &mut Steps<'_>) -> anyhow::Result<()> {
    let attempts = t.bed.resource.attempts(SCOPE).await?;
    let listed: Vec<String> = attempts
        .iter()
        .map(|x| {
            format!(
                "{} token={} {} accepted={}",
                x.writer, x.token, x.mode, x.accepted
            )
        })
        .collect();
    t.rec.note(format!("write_attempt: {}", listed.join("; ")));
    let of_a = attempts.iter().filter(|x| x.writer == Who::A.id()).count();
    t.rec.check(
        "write_attempt has no row of A: the resource never saw it",
        &0,
        &of_a,
    );
    let summary = part_line(&t.bed.resource.part(SCOPE, SUMMARY).await?);
    let b_summary = format!("{} by holder-b token=2", Who::B.content());
    t.rec.check(
        "B's part stays: the final summary is B's",
        &b_summary,
        &summary,
    );
    // Shown, not judged: A writes unfenced, which never touches the floor.
    let floor = t.bed.floor_shown(t.bed.resource.floor(SCOPE).await?);
    t.rec.note(format!(
        "fence_floor: {floor} (B's token; A's unfenced write mode never touches it)"
    ));
    let row = t.bed.lease.inspect(LEASE).await?;
    t.rec.check(
        "the lease row is still B's holding: A, resumed, did not touch it",
        "holder-b token=2",
        &shown(row.map(|r| format!("{} token={}", r.holder, r.token))),
    );
    t.rec.note("A gave up by itself: a pause before the check is one the local deadline covers. F4 freezes A after its check, where no client-side check can help and only the resource's fence does");
    Ok(())
}
