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
//! Where the fence repeats, the owner token is what still refuses: C's completion of the run A
//! started under fence 1, and A's first holding's renew, release and completion of C's run. A
//! second reset gives A's owner fence 1 below a run of its fence 3: the run's fence must equal
//! the lease's, not merely reach it.
//!
//! Then one owner holds several leases beside another owner's: each statement reaches its own
//! lease's row (a renew or release of one leaves the other alone, a read-back names only the
//! lease asked for) and a completion only its own run under its own lease.
//!
//! Last, the instant a lease ends: `leased_until` is kept to the millisecond, so for a whole
//! millisecond the database's now equals it. Probes aimed at it show that millisecond is the next
//! holder's — the holder cannot renew, release or complete in it; another owner takes over.

use crate::kit::u_common;
use crate::{About, Spec};

const SPEC: Spec = Spec {
    id: "U1",
    title: "fenced job lease (MariaDB): after a takeover with fence+1, the old owner can neither renew nor release",
    about: About {
        fault: "A's job lease expires and B takes it over (MariaDB)",
        shows: "each call names lease, owner and fence: an old holding cannot renew, release or complete",
        paragraph: "The source's job-lease integration test, on MariaDB. A's lease expires by \
                    database time and B takes it over with fence 2: A's release, renew and is_held \
                    now fail while B's succeed, and B cannot complete the run A started. The same \
                    owner then takes the lease again, so only the fence tells its two holdings \
                    apart. Next the lease row is deleted by hand and the fence restarts at 1: \
                    where the fence repeats, the owner token still refuses the old holding. Then \
                    one owner holds several leases, and each statement reaches only its own lease \
                    and run. Last, probes aimed at the millisecond a lease ends find that it \
                    belongs to the next holder.",
    },
    checks: crate::Checks::fixed(35),
    ..u_common::SERIES
};

crate::kit::u_common::u_scenario!(U1);

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::Context as _;
    use fencing::fenced_job::{operator_mistake, JobLease, JobLeaseStore};
    use harness::evidence::{Mark, Recorder};

    use crate::kit::u_common::{on_lane, owner_token, JOB_LEASE};
    use crate::testbed::maria::MariaEnv;
    use crate::Testbed;

    /// The day's reconciliation run: its id names the job, not the holder.
    const RUN: &str = "run-of-the-day";
    /// The next day's, started by A's owner's second holding.
    const NEXT_RUN: &str = "run-of-the-next-day";
    /// A run C starts after the first reset.
    const C_RUN: &str = "run-of-C";
    /// Three more jobs' leases, in key order (a statement that reaches a neighbouring row by
    /// `>=` reaches the next one).
    const AUDIT: &str = "admin:audit";
    const LEDGER: &str = "admin:ledger";
    const LEDGER_WEEKLY: &str = "admin:ledger-weekly";
    /// A lease taken again and again, each time probed in the millisecond it ends.
    const EXPIRY: &str = "admin:expiry";
    /// The lease each probe of the expiry millisecond is taken for.
    const PROBE_TTL: std::time::Duration = std::time::Duration::from_millis(120);

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
        let a = a_holds_until_expired(env, rec, short, timeout).await?;

        b_takes_over(jobs, rec, &a, long).await?;

        the_same_owner_again(jobs, rec, &a, long).await?;

        the_row_lost(jobs, rec, &a, long).await?;

        the_row_lost_again(jobs, rec, &a, long).await?;

        several_leases(jobs, short, long, rec).await
    }

    /// A acquires (fence 1) and starts the day's run; B is refused while A holds; A's lease
    /// expires by database time, and its release then fails though nobody took over.
    async fn a_holds_until_expired(
        env: &MariaEnv,
        rec: &mut Recorder,
        short: Duration,
        timeout: Duration,
    ) -> anyhow::Result<JobLease> {
        let jobs = &env.jobs;
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire a free job lease")?;
        on_lane(rec, Mark::Acquired, "A", "acquire", a.fence_token);
        // The first grant, judged by order as every token is (gaps allowed): `token=1` names
        // the first, whatever the design numbers it.
        rec.check_token(
            "A acquires the job lease, fence_token=1",
            1,
            Some(a.fence_token),
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
        // Nobody has taken it yet: a release now would tell A it held the lease to the end.
        rec.check(
        "A's release once its lease expired by database time fails, though nobody took it over yet: the holding had ended",
        &false,
        &jobs.release(&a).await?,
    );
        Ok(a)
    }

    /// B takes the expired lease over with fence+1: A's release, renew and is_held fail, B's
    /// holding cannot complete the run A started, B renews and releases.
    async fn b_takes_over(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        a: &JobLease,
        long: Duration,
    ) -> anyhow::Result<()> {
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
        rec.check("A's release fails", &false, &jobs.release(a).await?);
        rec.check("A's renew fails", &false, &jobs.renew(a).await?);
        rec.check("A's is_held", &false, &jobs.is_held(a).await?);
        rec.check("B's renew still succeeds", &true, &jobs.renew(&b).await?);
        rec.check(
            "B's holding cannot complete the run A started (the run's fence is 1, B's is 2)",
            "completed=false status=running",
            &completion(jobs, RUN, &b).await?,
        );
        let released = jobs.release(&b).await?;
        on_lane(rec, Mark::Released, "B", "release", b.fence_token);
        rec.check("B's release still succeeds", &true, &released);
        Ok(())
    }

    /// The same owner again: only the fence tells its two holdings apart.
    async fn the_same_owner_again(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        a: &JobLease,
        long: Duration,
    ) -> anyhow::Result<()> {
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
            &jobs.renew(a).await?,
        );
        rec.check(
            "A's first holding's is_held is false (same owner, old fence)",
            &false,
            &jobs.is_held(a).await?,
        );
        rec.check(
            "A's first holding's release fails (same owner, old fence)",
            &false,
            &jobs.release(a).await?,
        );
        rec.check(
        "A's new holding (same owner, a new fence) cannot complete the run started under its first: the fence join refuses it",
        "completed=false status=running",
        &completion(jobs, RUN, &again).await?,
    );
        // And the other way: the first holding cannot complete a run the new one started — the
        // run's fence and the lease's agree, only the caller's own token is old.
        jobs.start_run(NEXT_RUN, &again).await?;
        rec.check(
        "A's first holding cannot complete the run its new holding started: the lease's fence must be the caller's",
        "completed=false status=running",
        &completion(jobs, NEXT_RUN, a).await?,
    );
        jobs.release(&again).await?;
        on_lane(rec, Mark::Released, "A", "release", again.fence_token);
        Ok(())
    }

    /// The row is lost: the fence restarts, and C's holding carries A's old fence again; only
    /// the owner token refuses A's first holding.
    async fn the_row_lost(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        a: &JobLease,
        long: Duration,
    ) -> anyhow::Result<()> {
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
            &a.fence_token,
            &c.fence_token,
        );
        rec.check(
        "C's holding cannot complete the run A started under the same fence: the owner join refuses it",
        "completed=false status=running",
        &completion(jobs, RUN, &c).await?,
    );
        // A's first holding carries C's fence now: only the owner token refuses it.
        rec.check(
        "A's first holding's renew fails though its fence is C's again: the owner token refuses it",
        &false,
        &jobs.renew(a).await?,
    );
        rec.check(
        "A's first holding's release fails though its fence is C's again: the owner token refuses it",
        &false,
        &jobs.release(a).await?,
    );
        jobs.start_run(C_RUN, &c).await?;
        rec.check(
        "A's first holding cannot complete the run C started under the same fence: the lease's owner must be the caller",
        "completed=false status=running",
        &completion(jobs, C_RUN, a).await?,
    );
        jobs.release(&c).await?;
        on_lane(rec, Mark::Released, "C", "release", c.fence_token);
        Ok(())
    }

    /// The row is lost again, and A's owner is first this time: its holding has fence 1, below
    /// its runs'.
    async fn the_row_lost_again(
        jobs: &JobLeaseStore,
        rec: &mut Recorder,
        a: &JobLease,
        long: Duration,
    ) -> anyhow::Result<()> {
        // The row is lost again, and A's owner is first this time: its holding has fence 1.
        operator_mistake::delete_the_job_lease(jobs.pool(), JOB_LEASE).await?;
        let reset = jobs
            .acquire(JOB_LEASE, &a.owner_token, long)
            .await?
            .context("A's owner could not acquire a job lease whose row was deleted")?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire after the row was deleted again, same owner token",
            reset.fence_token,
        );
        rec.check(
        "after a second reset, A's owner holds the lease with a fence below its run's: the run its fence-3 holding started stays running",
        "completed=false status=running",
        &completion(jobs, NEXT_RUN, &reset).await?,
    );
        rec.check(
        "after a second reset, A's owner (fence 1) cannot complete the run C started under fence 1: the run's owner must be the lease's",
        "completed=false status=running",
        &completion(jobs, C_RUN, &reset).await?,
    );
        jobs.release(&reset).await?;
        on_lane(rec, Mark::Released, "A", "release", reset.fence_token);
        Ok(())
    }

    /// One owner holding several leases at once, beside another owner's: each statement must
    /// reach its own lease's row — and a run its own lease's holding — and nothing else.
    async fn several_leases(
        jobs: &JobLeaseStore,
        short: std::time::Duration,
        long: std::time::Duration,
        rec: &mut Recorder,
    ) -> anyhow::Result<()> {
        // Names in key order: AUDIT < LEDGER < LEDGER_WEEKLY.
        let o = owner_token("O");
        let p = owner_token("P");
        let audit = jobs
            .acquire(AUDIT, &p, long)
            .await?
            .context("P could not acquire a free job lease")?;
        on_lane(rec, Mark::Acquired, "P", AUDIT, audit.fence_token);
        let ledger = jobs
            .acquire(LEDGER, &o, short)
            .await?
            .context("O could not acquire a free job lease")?;
        on_lane(rec, Mark::Acquired, "O", LEDGER, ledger.fence_token);
        let weekly = jobs
            .acquire(LEDGER_WEEKLY, &o, long)
            .await?
            .context("O could not acquire a second free job lease")?;
        on_lane(rec, Mark::Acquired, "O", LEDGER_WEEKLY, weekly.fence_token);
        let taken = jobs.acquire(AUDIT, &o, long).await?;
        rec.check(
            format!(
                "O, holding {LEDGER} and {LEDGER_WEEKLY}, asks for {AUDIT}, which P holds: refused"
            ),
            "refused",
            &taken.map_or_else(
                || "refused".to_owned(),
                |g| format!("granted fence_token={}", g.fence_token),
            ),
        );
        // Runs under each of O's leases; a holding of one lease cannot complete the other's.
        jobs.start_run("ledger-1", &ledger).await?;
        jobs.start_run("ledger-2", &ledger).await?;
        jobs.start_run("weekly-1", &weekly).await?;
        rec.check(
            format!("O's {LEDGER_WEEKLY} holding cannot complete a run O started under {LEDGER} (same owner, same fence)"),
            "completed=false status=running",
            &completion(jobs, "ledger-1", &weekly).await?,
        );
        rec.check(
            format!("O's {LEDGER} holding cannot complete a run O started under {LEDGER_WEEKLY} (same owner, same fence)"),
            "completed=false status=running",
            &completion(jobs, "weekly-1", &ledger).await?,
        );
        let one = completion(jobs, "ledger-1", &ledger).await?;
        let other = jobs.run_status("ledger-2").await?.unwrap_or_default();
        rec.check(
            "O's completion of ledger-1 completes that run and no other of the same holding",
            "ledger-1: completed=true status=completed; ledger-2: running",
            &format!("ledger-1: {one}; ledger-2: {other}"),
        );
        // A renew and a release of one lease leave the other alone.
        let until = |t: Option<f64>| t.map_or_else(|| "no row".to_owned(), |t| format!("{t:.3}"));
        let weekly_until = until(jobs.leased_until(LEDGER_WEEKLY).await?);
        rec.check(
            format!("O renews {LEDGER}"),
            &true,
            &jobs.renew(&ledger).await?,
        );
        rec.check(
            format!("the renew of {LEDGER} leaves {LEDGER_WEEKLY}'s leased_until where it was"),
            weekly_until.as_str(),
            until(jobs.leased_until(LEDGER_WEEKLY).await?).as_str(),
        );
        rec.check(
            format!("O releases {LEDGER}"),
            &true,
            &jobs.release(&ledger).await?,
        );
        on_lane(rec, Mark::Released, "O", LEDGER, ledger.fence_token);
        rec.check(
            format!("after O's release of {LEDGER}, the lab's inspect finds {LEDGER} free and {LEDGER_WEEKLY} still O's"),
            "ledger free: true; weekly held: true",
            &format!(
                "ledger free: {}; weekly held: {}",
                jobs.is_free(LEDGER).await?,
                jobs.is_held(&weekly).await?
            ),
        );
        jobs.release(&weekly).await?;
        jobs.release(&audit).await?;
        at_the_expiry_millisecond(jobs, &o, &p, rec).await
    }

    /// Attempts at each probe below before it is waived as not reached.
    const ATTEMPTS: usize = 40;

    /// The probe `k` of a holding at its lease's last millisecond — its holder renews it (0),
    /// completes `run` under it (1), releases it (2), or the owner `p` takes it over (3) —
    /// and its answer (`None`: refused); a takeover's holding, to release later.
    async fn at_the_last_millisecond(
        jobs: &JobLeaseStore,
        k: usize,
        held: &JobLease,
        run: &str,
        p: &str,
    ) -> anyhow::Result<(Option<String>, Option<JobLease>)> {
        Ok(match k {
            0 => (jobs.renew(held).await?.then(|| "renewed".to_owned()), None),
            1 => (
                jobs.complete_run(run, held)
                    .await?
                    .then(|| "completed".to_owned()),
                None,
            ),
            2 => (
                jobs.release(held).await?.then(|| "released".to_owned()),
                None,
            ),
            _ => {
                let taken = jobs.acquire(&held.lease_name, p, PROBE_TTL).await?;
                let answer = match &taken {
                    Some(n) if n.fence_token > held.fence_token => {
                        "granted with a greater fence".to_owned()
                    }
                    Some(n) => {
                        format!("granted fence {} after {}", n.fence_token, held.fence_token)
                    }
                    None => "refused".to_owned(),
                };
                (Some(answer), taken)
            }
        })
    }

    /// The instant a lease ends: `leased_until` is kept to the millisecond (`DATETIME(3)`), so
    /// for a whole millisecond the database's now equals it. Expiry is `<=` and holding `>`: that
    /// millisecond belongs to the next holder, never to the one whose lease ends there — a `>=` or
    /// a `<` in one place gives it to both or to neither. Each probe is aimed at it: a holding
    /// with a short TTL, the database's clock polled until it reads `leased_until`, the probe, and
    /// the clock read again; an attempt counts when both readings are that millisecond (the probe
    /// certainly ran in it) — or, for a probe that wrote, when what it wrote dates it there (a
    /// takeover's or renew's `leased_until` less the TTL, a release's `leased_until`, a
    /// completion's `finished_at`). A probe that never lands in [`ATTEMPTS`] is waived, never passed.
    async fn at_the_expiry_millisecond(
        jobs: &JobLeaseStore,
        o: &str,
        p: &str,
        rec: &mut Recorder,
    ) -> anyhow::Result<()> {
        let ms = |t: f64| (t * 1000.0).round() as i64;
        let probes = [
            ("renews it", "refused"),
            ("completes a run under it", "refused"),
            ("releases it", "refused"),
            (
                "another owner takes it over",
                "granted with a greater fence",
            ),
        ];
        for (k, (probe, expected)) in probes.iter().enumerate() {
            // A lease of its own for each probe: what one probe leaves held is no other's concern.
            let lease = format!("{EXPIRY}-{k}");
            let lease = lease.as_str();
            let mut landed = None;
            let mut release_later = None;
            for attempt in 1..=ATTEMPTS {
                let held = jobs
                    .acquire(lease, o, PROBE_TTL)
                    .await?
                    .with_context(|| format!("O could not take {lease} (attempt {attempt})"))?;
                let run = format!("expiry-{k}-{attempt}");
                jobs.start_run(&run, &held).await?;
                let end = ms(jobs
                    .leased_until(lease)
                    .await?
                    .context("the lease O holds has no row")?);
                // The TTL is the timeline's: sleep through most of it, then poll.
                let left = end - ms(jobs.db_epoch().await?);
                if left > 20 {
                    harness::wait::prescribed(std::time::Duration::from_millis((left - 15) as u64))
                        .await;
                }
                let mut now = ms(jobs.db_epoch().await?);
                while now < end {
                    now = ms(jobs.db_epoch().await?);
                }
                if now != end {
                    continue;
                }
                let (answer, taken) = at_the_last_millisecond(jobs, k, &held, &run, p).await?;
                if taken.is_some() {
                    release_later = taken;
                }
                // A statement that wrote is dated by what it wrote: a takeover's or a renew's
                // leased_until is its now + TTL, a release's its now, a completion's finished_at
                // its now. One that wrote nothing is bracketed by the clock, read again.
                // (The clock first: the bracket must close as soon as it can.)
                let now = ms(jobs.db_epoch().await?);
                let until = jobs.leased_until(lease).await?.map_or(0, ms);
                let ran_at = match (k, answer.is_some()) {
                    (3, _) | (0, true) => until - PROBE_TTL.as_millis() as i64,
                    (2, true) => until,
                    (1, true) => jobs.finished_at(&run).await?.map_or(0, ms),
                    _ => now,
                };
                // A grant that left leased_until where the old lease ended gave a holding that
                // ended before it began — wrong whenever it ran, so it counts wherever it landed.
                if k == 3 && release_later.is_some() && until == end {
                    landed = Some((
                        attempt,
                        "granted, but leased_until did not move: the new holding ended before it began"
                            .to_owned(),
                    ));
                    break;
                }
                if ran_at == end {
                    landed = Some((attempt, answer.unwrap_or_else(|| "refused".to_owned())));
                    break;
                }
                // Missed the millisecond: let the lease go for the next attempt.
                jobs.release(&held).await?;
                if let Some(n) = release_later.take() {
                    jobs.release(&n).await?;
                }
            }
            let description = format!(
                "in the millisecond {lease}'s lease ends (leased_until = the database's now), {} {probe}: {expected}",
                if k == 3 { "as the holder's lease ends," } else { "its holder" }
            );
            match landed {
                Some((attempt, answer)) => {
                    rec.note(format!("\"{probe}\" landed in the lease's last millisecond at attempt {attempt}"));
                    rec.check(description, *expected, answer.as_str());
                }
                None => rec.waive(
                    description,
                    format!("no attempt of {ATTEMPTS} landed in that millisecond by the database's clock"),
                ),
            }
        }
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
