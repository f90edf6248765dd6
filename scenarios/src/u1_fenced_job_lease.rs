//! U1 — the source's lease integration test, on MariaDB. The fault: A's job lease expires by
//! database time and B takes it over. Property: B's takeover bumps the fence token; every
//! operation of A (release, renew, is_held) now fails, because each requires lease name + owner
//! token + fence token; B's still succeed. A run A started stays A's: B's holding cannot
//! complete it (the run's fence is A's).
//!
//! Then the same owner takes the lease again (a restarted instance keeps its identity): A's
//! first holding and its new one share the owner token and differ only in their fence, so here
//! only the fence token can refuse the first holding's renew, release and is_held, and the new
//! holding's completion of the run started under the first — where B's refusals above could
//! have come from the owner token alone.
//!
//! Then the job lease's row is deleted by hand (seed 000's tables, as F11 truncates the F-series'
//! lease table): the fence restarts, and C's new holding carries fence 1 again — A's old fence.
//! Where the fence repeats, the completion's owner join is what still refuses C's completion of
//! the run A started under fence 1.

crate::u_common::u_scenario!(U1, "U1", 16, "fenced job lease (MariaDB): after a takeover with fence+1, the old owner can neither renew nor release");

#[cfg(feature = "mariadb")]
mod imp {
    use anyhow::Context as _;
    use fencing::fenced_job::{operator_mistake, JobLease, JobLeaseStore};
    use harness::evidence::{Mark, Recorder};

    use crate::u_common::{on_lane, owner_token, JOB_LEASE};
    use crate::Lab;

    /// The day's reconciliation run: its id names the job, not the holder.
    const RUN: &str = "run-of-the-day";

    pub async fn run(lab: &mut Lab, rec: &mut Recorder) -> anyhow::Result<()> {
        let (short, long, timeout) = (
            lab.params.short_ttl,
            lab.params.ttl,
            lab.params.wait_timeout,
        );
        let Some(env) = lab.maria_or_skip(rec).await? else {
            return Ok(());
        };
        let jobs = &env.jobs;
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire a free job lease")?;
        on_lane(rec, Mark::Acquired, "A", "acquire", a.fence_token);
        rec.check(
            "A acquires the job lease, fence_token=1",
            &1,
            &a.fence_token,
        );
        // The day's run, started under A's holding.
        jobs.start_run(RUN, &a).await?;
        rec.check("A's is_held", &true, &jobs.is_held(&a).await?);
        // While A holds it, another owner is refused (its answer read as seed 000 reads it:
        // the row its own owner token names).
        let refused = jobs.acquire(JOB_LEASE, &owner_token("B"), short).await?;
        rec.check(
            "while A holds the job lease, B's acquire is refused",
            "refused",
            &refused.map_or_else(
                || "refused".to_owned(),
                |g| format!("granted fence_token={}", g.fence_token),
            ),
        );
        env.until_expired(timeout).await?;
        on_lane(
            rec,
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            a.fence_token,
        );
        let b = jobs.acquire(JOB_LEASE, &owner_token("B"), long).await?;
        rec.check(
            "B takes the expired lease over with fence+1",
            "fence_token=2",
            &b.as_ref().map_or("refused".into(), |b| {
                format!("fence_token={}", b.fence_token)
            }),
        );
        let b = b.context("B could not take over an expired lease")?;
        on_lane(rec, Mark::Acquired, "B", "acquire", b.fence_token);
        rec.check("A's release fails", &false, &jobs.release(&a).await?);
        rec.check("A's renew fails", &false, &jobs.renew(&a).await?);
        rec.check("A's is_held", &false, &jobs.is_held(&a).await?);
        rec.check("B's renew still succeeds", &true, &jobs.renew(&b).await?);
        rec.check(
            "B's holding cannot complete the run A started (the run's fence is 1, B's is 2)",
            "completed=false status=running",
            &completion(jobs, RUN, &b).await?,
        );
        let released = jobs.release(&b).await?;
        on_lane(rec, Mark::Released, "B", "release", b.fence_token);
        rec.check("B's release still succeeds", &true, &released);

        // The same owner again: only the fence tells its two holdings apart.
        let again = jobs
            .acquire(JOB_LEASE, &a.owner_token, long)
            .await?
            .context("A's owner could not take the released lease again")?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire again, same owner token",
            again.fence_token,
        );
        rec.check(
            "A's first holding's renew fails once the same owner holds again with a new fence",
            &false,
            &jobs.renew(&a).await?,
        );
        rec.check(
            "A's first holding's is_held is false (same owner, old fence)",
            &false,
            &jobs.is_held(&a).await?,
        );
        rec.check(
            "A's first holding's release fails (same owner, old fence)",
            &false,
            &jobs.release(&a).await?,
        );
        rec.check(
            "A's new holding (same owner, a new fence) cannot complete the run started under its first: the fence join refuses it",
            "completed=false status=running",
            &completion(jobs, RUN, &again).await?,
        );
        jobs.release(&again).await?;
        on_lane(rec, Mark::Released, "A", "release", again.fence_token);

        // The row is lost: the fence restarts, and C's holding carries A's old fence again.
        operator_mistake::delete_the_job_lease(jobs.pool(), JOB_LEASE).await?;
        let c = jobs
            .acquire(JOB_LEASE, &owner_token("C"), long)
            .await?
            .context("C could not acquire a job lease whose row was deleted")?;
        on_lane(
            rec,
            Mark::Acquired,
            "C",
            "acquire after the lease row was deleted by hand",
            c.fence_token,
        );
        rec.check(
            "after the row was deleted by hand C acquires with fence_token=1 again — A's old fence",
            &1,
            &c.fence_token,
        );
        rec.check(
            "C's holding cannot complete the run A started under the same fence: the owner join refuses it",
            "completed=false status=running",
            &completion(jobs, RUN, &c).await?,
        );
        Ok(())
    }

    /// The fenced completion of `run` under `lease`, and the run's status after it.
    async fn completion(
        jobs: &JobLeaseStore,
        run: &str,
        lease: &JobLease,
    ) -> anyhow::Result<String> {
        let completed = jobs.complete_run(run, lease).await?;
        let status = jobs.run_status(run).await?.unwrap_or_default();
        Ok(format!("completed={completed} status={status}"))
    }
}
