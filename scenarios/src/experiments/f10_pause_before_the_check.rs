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

use anyhow::{bail, Context as _};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::kit::paused_holder::{
    exit_after_check, freeze_and_show, lab_step, list, part_line, record_renewals, renewal_count,
    renewed_every_time, step, until_expired_while_frozen, A_CONTENT, B_CONTENT,
};
use crate::testbed::{
    acquire_mark, acquired, lease_state, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY,
};
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
        Box::pin(async move {
            let (p, c) = (bed.params().clone(), bed.case().clone());
            let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, WriteMode::Unfenced, false);
            spec.flags.wait_before_check = true;
            let mut a = Holder::spawn(&spec).await?;
            let (at, event) = a.next("A's acquire", EVENT_TIMEOUT).await?;
            step(bed, rec, at, "A", "acquire", &event).await;
            rec.check(
                format!("A (pid {}) acquires the lease, token=1", a.pid()),
                "ACQUIRED token=1",
                &event.to_string(),
            );
            let (at, before) = a.next("A before its check", EVENT_TIMEOUT).await?;
            step(
                bed,
                rec,
                at,
                "A",
                "stops before its local-deadline check",
                &before,
            )
            .await;
            let Event::BeforeCheck {
                token,
                deadline_left_ms,
            } = before
            else {
                bail!(a.unexpected("BEFORE_CHECK token=1", &before));
            };
            if token != bed.token(rec, 1) {
                bail!(a.unexpected("BEFORE_CHECK token=1", &before));
            }
            rec.check_that(
                "A stops before its local-deadline check, its deadline still ahead",
                deadline_left_ms > 0,
                &before,
            );
            rec.note(
                "A's write mode is unfenced: the resource would accept whatever A sent, so only \
                 A's own check can keep B's part",
            );

            // A state, polled: the renewer has reported at least once while A waits.
            harness::wait::until("A's renewer has renewed", p.wait_timeout, || {
                let seen = !a.drain_renewals().is_empty();
                async move { Ok::<bool, Infallible>(seen) }
            })
            .await?;
            let renewals = record_renewals(rec, &mut a, "A", 1);
            rec.check_that(
                "A's background renewer renewed while A waited before its check, every time with success",
                renewed_every_time(&renewals),
                renewal_count(&renewals),
            );
            let row = bed.lease.inspect(LEASE).await?;
            rec.check(
                "just before the freeze the lease is A's and unexpired (database clock)",
                "holder-a token=1 unexpired",
                &shown(row.as_ref().map(lease_state)),
            );

            let frozen_at = freeze_and_show(
                bed,
                rec,
                &mut a,
                " before its check",
                "A's renewer thread is frozen with it: nothing moves A's local deadline",
            )
            .await?;
            until_expired_while_frozen(bed, rec, frozen_at).await?;

            let b = bed.lease.acquire(LEASE, HOLDER_B, c.ttl).await?;
            let clock = bed.lease.clock().await.ok().flatten();
            rec.step(
                acquire_mark(b.as_ref()),
                "B",
                "acquire",
                b.as_ref().map(|g| g.token),
                acquired(b.as_ref()),
                clock,
            );
            rec.check(
                "B (the lab's lease client) acquires the lease, token=2",
                "ACQUIRED token=2",
                &acquired(b.as_ref()),
            );
            let b = b.context("B could not acquire the expired lease")?;
            let write = Write {
                scope: SCOPE,
                part: SUMMARY,
                content: B_CONTENT,
                writer: HOLDER_B,
                token: b.token,
            };
            let ok = bed.resource.write(&write, WriteMode::Fenced).await?;
            let clock = bed.lease.clock().await.ok().flatten();
            rec.step(
                Mark::Write { accepted: ok },
                "B",
                "write",
                Some(b.token),
                wrote(ok, b.token),
                clock,
            );
            rec.check(
                format!("B's write is accepted (mode={})", c.fence_label()),
                &wrote(true, 2),
                &wrote(ok, b.token),
            );

            // The go-line waits in the pipe; on SIGCONT, A goes straight on to its check.
            a.send(Request::Go).await?;
            let thawed = a.thaw().await?;
            let frozen_for = frozen_at.elapsed();
            lab_step(
                bed,
                rec,
                Mark::Thawed,
                "A",
                "go-line, SIGCONT",
                list(&thawed),
            )
            .await;
            let (at, verdict) = a.next("A's local-deadline check", EVENT_TIMEOUT).await?;
            step(
                bed,
                rec,
                at,
                "A",
                "local-deadline check (after resuming)",
                &verdict,
            )
            .await;
            // How far past is the holder's own measurement: in the note, not the verdict.
            let (seen, overdue) = match &verdict {
                Event::DeadlinePassed { token, overdue_ms } => {
                    (format!("DEADLINE_PASSED token={token}"), Some(*overdue_ms))
                }
                other => (other.to_string(), None),
            };
            rec.check(
                "A, resumed, finds its local deadline passed by its monotonic clock and will not write",
                "DEADLINE_PASSED token=1",
                &seen,
            );
            if let Some(overdue_ms) = overdue {
                rec.note(format!(
                    "A was frozen for {} ms; its check found the local deadline passed by {overdue_ms} ms",
                    frozen_for.as_millis()
                ));
            }
            let code = exit_after_check(bed, rec, &mut a, &verdict).await?;
            rec.check(
                "A exits by itself with its deadline-passed status: nothing written",
                &describe(Some(exit::DEADLINE_PASSED)),
                &describe(Some(code)),
            );

            let attempts = bed.resource.attempts(SCOPE).await?;
            rec.note(format!(
                "write_attempt: {}",
                attempts
                    .iter()
                    .map(|x| format!(
                        "{} token={} {} accepted={}",
                        x.writer, x.token, x.mode, x.accepted
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            rec.check(
                "write_attempt has no row of A: the resource never saw it",
                &0,
                &attempts.iter().filter(|x| x.writer == HOLDER_A).count(),
            );
            rec.check(
                "B's part stays: the final summary is B's",
                &format!("{B_CONTENT} by holder-b token=2"),
                &part_line(&bed.resource.part(SCOPE, SUMMARY).await?),
            );
            // Shown, not judged: A writes unfenced, which never touches the floor.
            rec.note(format!(
                "fence_floor: {} (B's token; A's unfenced write mode never touches it)",
                bed.floor_shown(bed.resource.floor(SCOPE).await?)
            ));
            let row = bed.lease.inspect(LEASE).await?;
            rec.check(
                "the lease row is still B's holding: A, resumed, did not touch it",
                "holder-b token=2",
                &shown(row.map(|r| format!("{} token={}", r.holder, r.token))),
            );
            rec.note(
                "A gave up by itself: a pause before the check is one the local deadline covers. \
                 F4 freezes A after its check, where no client-side check can help and only the \
                 resource's fence does",
            );
            Ok(())
        })
    }
}
