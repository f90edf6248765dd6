//! U4 — seed 000's own case: the owner token identifies the *instance* (the source's protocol
//! calls it "the unique runner identity"), so it is the same when that instance acquires again.
//! The fault: instance A's old execution (fence n) is still going when its lease expires; A
//! acquires again (fence n+1, same owner token) and starts a new run; then the old execution
//! tries to finish — and to renew, ask is_held, release. Property: only the fence token tells the
//! two holdings apart: the fenced completion (run and lease agree on fence and owner) affects 0
//! rows — also when the old execution is handed the new holding (the run's own fence is joined
//! to the lease's) — and the old holding's renew, is_held and release all fail, while the new holding's
//! completion succeeds (positive control). Negative controls: a completion checking only
//! `lease_name` (+ expiry) and one checking only `owner_token` (+ expiry) each let the old
//! execution finish — an owner check cannot tell a generation.

use crate::kit::u_common;
use crate::{About, Spec};

const SPEC: Spec = Spec {
    id: "U4",
    title: "the same instance acquires again (fence n → n+1) while its old run is still going: only the fence rejects the old run's completion",
    about: About {
        fault: "an instance re-acquires while its old run is still going",
        shows: "with one owner token per instance, only the fence tells its old holding from its new one",
        paragraph: "Seed 000's own case: the owner token names the instance, so it stays the same \
                    when that instance acquires again. Instance A's old execution is still running \
                    when its lease expires; A acquires again with fence 2 and starts a new run; \
                    then the old execution tries to finish, renew, ask is_held and release. With \
                    the fenced statements all of it fails, and even the old run completed under \
                    the new holding changes nothing, since the run's own fence is joined to the \
                    lease's, while the new execution's completion succeeds. Completions that check \
                    only the lease name or only the owner token let the old execution finish: an \
                    owner check cannot tell one generation from the next.",
    },
    checks: crate::Checks::fixed(11),
    ..u_common::SERIES
};

crate::kit::u_common::u_scenario!(U4);

#[cfg(feature = "mariadb")]
mod imp {
    use anyhow::Context as _;
    use fencing::fenced_job::{JobLease, JobLeaseStore, NaiveCompletion};
    use harness::evidence::{Mark, Recorder};

    use crate::kit::u_common::{instance_token, on_lane, JOB_LEASE};
    use crate::Testbed;

    /// The old execution completes each of its runs: the fenced completion affects nothing, a
    /// completion checking the lease's name or the owner token alone lets it finish.
    async fn old_execution_completes(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        old: &JobLease,
        forms: &[(&str, Option<NaiveCompletion>)],
    ) -> anyhow::Result<()> {
        for &(run, form) in forms {
            let completed = match form {
                None => jobs.complete_run(run, old).await?,
                Some(how) => jobs.complete_run_naive(run, old, how).await?,
            };
            let status = jobs.run_status(run).await?.unwrap_or_default();
            rec.step(
                Mark::Write {
                    accepted: completed,
                },
                "A",
                &format!("old execution completes {run}"),
                Some(old.fence_token),
                status.clone(),
                None,
            );
            match form {
                None => {
                    rec.check(
                        "the old execution's fenced completion affects 0 rows",
                        &false,
                        &completed,
                    );
                    rec.check("its run stays running", "running", &status);
                }
                Some(how) => {
                    rec.expose(
                        format!(
                            "a completion checking {} lets the old execution finish its run",
                            how.as_str()
                        ),
                        completed && status == "completed",
                        format_args!(
                            "{run}: rows changed={}, status={status}",
                            u8::from(completed)
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// An instance that hands its current holding to every execution: the old run completed
    /// with the new fence affects nothing, the new run completes, the old release fails.
    async fn new_execution_completes(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        old: &JobLease,
        new: &JobLease,
    ) -> anyhow::Result<()> {
        // An instance that hands its *current* holding to every execution: the old run's
        // completion now carries the new fence. The run was started under fence 1.
        let with_new = jobs.complete_run("run-old-fenced", new).await?;
        rec.check(
        "the old run completed with the new holding's fence affects 0 rows: the run's own fence is joined to the lease's",
        "completed=false status=running",
        &format!(
            "completed={with_new} status={}",
            jobs.run_status("run-old-fenced").await?.unwrap_or_default()
        ),
    );
        let completed = jobs.complete_run("run-new", new).await?;
        rec.step(
            Mark::Write {
                accepted: completed,
            },
            "A",
            "new execution completes run-new",
            Some(new.fence_token),
            "",
            None,
        );
        rec.check(
        "the new execution's fenced completion changes its run (the join is no blanket refusal)",
        &true,
        &completed,
    );
        let released = jobs.release(old).await?;
        rec.check(
            "the old holding's release fails and leaves the new holding alone",
            "release=false, new holding held=true",
            &format!(
                "release={released}, new holding held={}",
                jobs.is_held(new).await?
            ),
        );
        Ok(())
    }

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
        let (short, long, timeout) = (
            bed.params().short_ttl,
            bed.case().ttl,
            bed.params().wait_timeout,
        );
        let Some(env) = bed.maria_or_skip(rec).await? else {
            return Ok(());
        };
        let jobs = &env.jobs;
        // One instance, one owner token, for both of its holdings.
        let owner = instance_token("A");
        let old = jobs
            .acquire(JOB_LEASE, &owner, short)
            .await?
            .context("instance A could not acquire a free job lease")?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire (old execution)",
            old.fence_token,
        );
        // The first grant, judged by order as every token is (gaps allowed): `token=1` names
        // the first, whatever the design numbers it.
        rec.check_token(
            "instance A acquires the job lease, fence_token=1",
            1,
            Some(old.fence_token),
        );
        // The old execution's runs: one per completion form, all started under fence 1.
        let forms = [
            ("run-old-fenced", None),
            ("run-old-by-name", Some(NaiveCompletion::LeaseNameOnly)),
            ("run-old-by-owner", Some(NaiveCompletion::OwnerTokenOnly)),
        ];
        for (run, _) in forms {
            jobs.start_run(run, &old).await?;
        }

        // The old execution stalls past its lease; nobody else is waiting for the lease.
        env.until_expired(timeout).await?;
        on_lane(
            rec,
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            old.fence_token,
        );
        let new = jobs
            .acquire(JOB_LEASE, &owner, long)
            .await?
            .context("instance A could not acquire its expired job lease again")?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire again (new execution, same owner token)",
            new.fence_token,
        );
        rec.check(
            "instance A acquires again with the same owner token and fence+1",
            &format!("owner={owner} fence_token=2"),
            &format!("owner={} fence_token={}", new.owner_token, new.fence_token),
        );
        jobs.start_run("run-new", &new).await?;

        // The old execution comes back. Its owner token still matches the lease row; only its
        // fence token does not.
        rec.check(
            "the old holding's is_held is false (same owner, older fence)",
            &false,
            &jobs.is_held(&old).await?,
        );
        rec.check(
            "the old holding's renew fails (same owner, older fence)",
            &false,
            &jobs.renew(&old).await?,
        );
        old_execution_completes(jobs, rec, &old, &forms).await?;

        new_execution_completes(jobs, rec, &old, &new).await?;

        Ok(())
    }
}
