//! U5 — seed 000's Java check-then-set, `if (lease.isHeld()) run.setFinished(true)`, on MariaDB,
//! made exact with latches (no sleeps). The fault: A's client-side check passes (its lease is
//! held), and A pauses between that check and its write; its lease expires by database time; B
//! takes over with fence+1 and completes its own run; A resumes and writes. Property: a
//! completion that re-checks in the statement that writes (the fenced join) changes no row; the
//! unconditional write after the client's check lands — the stale completion goes through
//! (negative control): a check in the client is stale by the time it is acted on.
//!
//! What refuses A here is the join as a whole: B has an owner token of its own, so the owner
//! condition and the fence condition refuse A alike (U1 shows the fence alone, with one owner
//! holding twice).

use crate::kit::u_common;
use crate::{About, Spec};

const SPEC: Spec = Spec {
    id: "U5",
    title: "check-then-set (MariaDB): A checks is_held, pauses, B takes over; only a completion that re-checks as it writes stops A",
    about: About {
        fault: "A pauses between its is_held check and its write",
        shows: "a client-side check is stale when acted on; only a completion that re-checks as it writes holds",
        paragraph: "Seed 000's Java check-then-set, if (lease.isHeld()) run.setFinished(true), on \
                    MariaDB, made exact with latches rather than sleeps. A checks that it holds \
                    the lease, and the check passes; A then pauses before its write, its lease \
                    expires by database time, and B takes over with fence 2 and completes its own \
                    run. When A resumes, the checks confirm the lease really was A's at the pause. \
                    With an unconditional write after the client's check, A's run is marked \
                    completed after B took over, the negative control. With the fenced completion, \
                    which re-checks lease, owner and fence in the statement that writes, no row \
                    changes and A's run stays running.",
    },
    checks: crate::Checks::fixed(7),
    ..u_common::SERIES
};

crate::kit::u_common::u_scenario!(U5);

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::Context as _;
    use fencing::fenced_job::{CheckedWrite, JobLeaseStore};
    use harness::evidence::{Mark, Recorder};

    use crate::kit::latch::{finishes, latch, reached};
    use crate::kit::u_common::{on_lane, owner_token, JOB_LEASE};
    use crate::Testbed;

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
        for write in [CheckedWrite::Unconditional, CheckedWrite::Fenced] {
            let Some(()) = timeline(bed, rec, write).await? else {
                return Ok(());
            };
        }
        Ok(())
    }

    /// B takes the expired job lease over with fence+1 and completes its own run.
    async fn b_takes_over_and_completes(
        rec: &mut Recorder,
        jobs: &JobLeaseStore,
        long: Duration,
        label: &str,
    ) -> anyhow::Result<()> {
        let b = jobs
            .acquire(JOB_LEASE, &owner_token("B"), long)
            .await?
            .context("B could not take over the expired job lease")?;
        jobs.start_run("run-b", &b).await?;
        let b_done = jobs.complete_run("run-b", &b).await?;
        on_lane(rec, Mark::Acquired, "B", "acquire", b.fence_token);
        rec.step(
            Mark::Write { accepted: b_done },
            "B",
            "complete run-b (fenced)",
            Some(b.fence_token),
            "",
            None,
        );
        rec.check(
            format!("{label}: B took over with fence+1 and completed its run"),
            "fence_token=2 completed=true",
            &format!("fence_token={} completed={b_done}", b.fence_token),
        );
        Ok(())
    }

    /// One run of the timeline with A's completion written as `write`; `None` after a skip.
    async fn timeline(
        bed: &mut Testbed,
        rec: &mut Recorder,
        write: CheckedWrite,
    ) -> anyhow::Result<Option<()>> {
        let (short, long, timeout) = (
            bed.params().short_ttl,
            bed.case().ttl,
            bed.params().wait_timeout,
        );
        let Some(env) = bed.maria_or_skip(rec).await? else {
            return Ok(None);
        };
        let label = match write {
            CheckedWrite::Unconditional => "if (lease.isHeld()) UPDATE … WHERE run_id",
            CheckedWrite::Fenced => "if (lease.isHeld()) fenced completion",
        };
        rec.step(Mark::Info, "lab", label, None, "", None);
        let jobs = env.jobs.clone();
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire a free job lease")?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire, start run-a",
            a.fence_token,
        );
        jobs.start_run("run-a", &a).await?;

        let (gap, at_gap, release) = latch();
        let a_completion = tokio::spawn({
            let (jobs, a) = (jobs.clone(), a.clone());
            async move { jobs.complete_if_held("run-a", &a, write, gap).await }
        });
        reached("A's check-then-set", at_gap).await?;
        // Seen by the lab, apart from A's own check: the lease really was A's when A paused.
        let held_at_pause = jobs.is_held(&a).await?;
        on_lane(
            rec,
            Mark::Info,
            "A",
            "isHeld() = true, paused before its write",
            a.fence_token,
        );

        env.until_expired(timeout).await?;
        on_lane(
            rec,
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            a.fence_token,
        );
        b_takes_over_and_completes(rec, &jobs, long, label).await?;

        let _ = release.send(());
        let outcome = finishes("A's completion", a_completion).await???;
        let status = jobs.run_status("run-a").await?.unwrap_or_default();
        let changed = outcome == Some(true);
        rec.step(
            Mark::Write { accepted: changed },
            "A",
            "resumed, completes run-a",
            Some(a.fence_token),
            status.clone(),
            None,
        );
        rec.check(
            format!(
                "{label}: when A paused after its check, its lease was still held (database time)"
            ),
            &true,
            &held_at_pause,
        );
        anyhow::ensure!(
            outcome.is_some(),
            "A's check refused although the lease was held at its pause"
        );
        match write {
            CheckedWrite::Unconditional => {
                rec.expose(
                    "the check was stale when A wrote: A's run is marked completed after B took the lease over",
                    changed && status == "completed",
                    format_args!("run-a: rows changed={}, status={status}", u8::from(changed)),
                );
            }
            CheckedWrite::Fenced => {
                rec.check(
                    "the fenced completion, re-checking as it writes, changes 0 rows",
                    &false,
                    &changed,
                );
                rec.check("A's run stays running", "running", &status);
            }
        }
        Ok(Some(()))
    }
}
