//! U1 — the source's lease integration test, on MariaDB. The fault: A's job lease expires by
//! database time and B takes it over. Property: B's takeover bumps the fence token; every
//! operation of A (release, renew, is_held) now fails, because each requires lease name + owner
//! token + fence token; B's still succeed.

crate::u_common::u_scenario!(U1, "U1", 8, "fenced job lease (MariaDB): after a takeover with fence+1, the old owner can neither renew nor release");

#[cfg(feature = "mariadb")]
mod imp {
    use anyhow::Context as _;
    use harness::evidence::{Mark, Recorder};

    use crate::u_common::{owner_token, JOB_LEASE};
    use crate::Lab;

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
        rec.step(
            Mark::Acquired,
            "A",
            "acquire",
            Some(a.fence_token),
            "",
            None,
        );
        rec.check(
            "A acquires the job lease, fence_token=1",
            &1,
            &a.fence_token,
        );
        rec.check("A's is_held", &true, &jobs.is_held(&a).await?);
        env.until_expired(timeout).await?;
        rec.step(
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            Some(a.fence_token),
            "",
            None,
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
        rec.step(
            Mark::Acquired,
            "B",
            "acquire",
            Some(b.fence_token),
            "",
            None,
        );
        rec.check("A's release fails", &false, &jobs.release(&a).await?);
        rec.check("A's renew fails", &false, &jobs.renew(&a).await?);
        rec.check("A's is_held", &false, &jobs.is_held(&a).await?);
        rec.check("B's renew still succeeds", &true, &jobs.renew(&b).await?);
        let released = jobs.release(&b).await?;
        rec.step(
            Mark::Released,
            "B",
            "release",
            Some(b.fence_token),
            "",
            None,
        );
        rec.check("B's release still succeeds", &true, &released);
        Ok(())
    }
}
