//! U2 — the source's reconciler, on MariaDB, with A a real holder process. The fault: holder A
//! (its own OS process, `holder --store mariadb`) acquires the job lease (fence n), starts its
//! run and renews on its own thread while the run goes on — as seed 000's reconciler does; just
//! before its completion it is frozen (SIGSTOP: every thread T, the renewer too); its lease
//! expires by database time; B takes over (n+1) and completes its own run; A is continued and
//! sends its "finished". Property: the completion that joins the lease in the same statement
//! affects 0 rows — a stale owner cannot finish; B's run stays completed; A learns it lost the
//! lease. Positive control: unfrozen, the same holder's fenced completion changes its run.
//! Negative control: the same timeline with a completion that checks only the run id lets A's
//! stale "finished" through.
//!
//! What refuses A here is the join as a whole: B has an owner token of its own, so the owner
//! condition and the fence condition refuse A alike (U1 shows the fence alone, with one owner
//! holding twice).

use crate::kit::u_common;
use crate::{About, Spec};

const SPEC: Spec = Spec {
    id: "U2",
    title: "stale completion (MariaDB): holder A renews while its run goes on, is frozen before completing, B takes over and finishes; A's completion is fenced by the lease join",
    about: About {
        fault: "holder A frozen (SIGSTOP) just before completing its run",
        shows: "a completion joined to the lease refuses a stale owner; a run-id-only completion lets it through",
        paragraph: "The source's reconciler, on MariaDB, with A a real holder process. A acquires \
                    the job lease, starts its run and renews on its own thread for longer than the \
                    TTL; just before it completes, the lab freezes it, renewer thread included. \
                    Its lease expires by database time, B takes over with a greater fence and \
                    completes its own run, then A is thawed and sends its \"finished\". The \
                    completion that joins the lease in the same statement affects 0 rows: A's run \
                    stays running, B's stays completed, and A's renew tells it the lease is lost. \
                    Unfrozen, the same completion succeeds; one that checks only the run id lets \
                    A's stale \"finished\" through.",
    },
    checks: crate::Checks::fixed(10),
    ..u_common::SERIES
};

crate::kit::u_common::u_scenario!(U2);

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::{bail, Context as _};
    use fencing::fenced_job::{JobLease, JobLeaseStore};
    use harness::evidence::{Mark, Recorder};
    use harness::holder::{describe, Holder, HolderSpec, EVENT_TIMEOUT};
    use holder_protocol::{exit, Event, HolderFlags, Request};

    use crate::kit::paused_holder::{record_renewals, renewal_count, renewed_every_time};
    use crate::kit::steps::{list, states};
    use crate::kit::u_common::{on_lane, owner_token, JOB_LEASE};
    use crate::testbed::maria::MariaEnv;
    use crate::Testbed;

    /// How A's completion checks its holding (the holder's `--mode` on `--store mariadb`).
    const FENCED: &str = "fenced-completion";
    const RUN_ID_ONLY: &str = "run-id-only";

    fn spec(bed: &Testbed, env: &MariaEnv, owner: &str, run_id: &str, mode: &str) -> HolderSpec {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        HolderSpec {
            bin: bed.holder_bin.clone(),
            prefix: bed.holder_prefix.clone(),
            flags: HolderFlags {
                store: "mariadb".into(),
                socket_dir: env.server.socket_dir(),
                port: 0,
                lease: JOB_LEASE.into(),
                holder: owner.into(),
                ttl_ms: ms(bed.case().ttl),
                renew_ms: ms(bed.params().renew),
                margin_ms: ms(bed.params().margin),
                scope: String::new(),
                part: String::new(),
                content: String::new(),
                mode: mode.into(),
                sut: bed.jobs_arg(),
                run_id: Some(run_id.into()),
                release: false,
                wait_before_check: false,
                wait_before_commit: false,
                wait_after_write: false,
                resource_host: None,
                resource_port: None,
                lease_host: None,
                lease_port: None,
                store_endpoint: None,
                loop_seed: None,
                loop_parts: 3,
                control_scope: None,
            },
            env: Vec::new(),
            run_as: None,
        }
    }

    /// Starts holder A and waits until it acquired (its token) and reached its write point.
    async fn start_a(
        bed: &Testbed,
        env: &MariaEnv,
        run_id: &str,
        mode: &str,
    ) -> anyhow::Result<(Holder, JobLease)> {
        let owner = owner_token("A");
        let mut a = Holder::spawn(&spec(bed, env, &owner, run_id, mode)).await?;
        let (_, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
        let token = a.acquired_token(&acquired)?;
        let (_, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
        if !matches!(ready, Event::AtWritePoint { .. }) {
            bail!(a.unexpected("AT_WRITE_POINT", &ready));
        }
        let lease = JobLease {
            lease_name: JOB_LEASE.into(),
            owner_token: owner,
            fence_token: token,
            ttl: bed.case().ttl,
        };
        Ok((a, lease))
    }

    /// Sends the go-line and reads A's completion, its renew after it, and its exit status.
    async fn finish(a: &mut Holder) -> anyhow::Result<(bool, bool, i32)> {
        a.send(Request::Go).await?;
        let (_, wrote) = a.next("A's completion", EVENT_TIMEOUT).await?;
        let Event::Write { accepted, .. } = wrote else {
            bail!(a.unexpected("WRITE", &wrote));
        };
        let (_, renewed) = a
            .next("A's renew after its completion", EVENT_TIMEOUT)
            .await?;
        let Event::RenewAfterWrite { ok } = renewed else {
            bail!(a.unexpected("RENEW_AFTER_WRITE", &renewed));
        };
        let code = a.exit_code(EVENT_TIMEOUT).await?;
        Ok((accepted, ok, code))
    }

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
        if bed.maria_or_skip(rec).await?.is_none() {
            return Ok(());
        }
        let env = bed.maria.env.as_ref().context("MariaDB is not running")?;
        // The positive control of the holder path: unfrozen, A's fenced completion changes its
        // run, and A still holds its lease after it.
        let (mut a, _) = start_a(bed, env, "run-valid", FENCED).await?;
        let (accepted, renewed, code) = finish(&mut a).await?;
        rec.check(
            "unfrozen, holder A's fenced completion changes its run and A keeps its lease",
            &format!(
                "WRITE accepted=true, RENEW ok=true, {}",
                describe(Some(exit::WROTE))
            ),
            &format!(
                "WRITE accepted={accepted}, RENEW ok={renewed}, {}",
                describe(Some(code))
            ),
        );

        bed.maria().await?.map_err(anyhow::Error::msg)?;
        let r = timeline(bed, rec, FENCED).await?;
        rec.check(
            "A's fenced completion affects 0 rows",
            "WRITE accepted=false",
            &format!("WRITE accepted={}", r.a_accepted),
        );
        rec.check("A's run is not marked completed", "running", &r.a_status);
        rec.check("B's run stays completed", "completed", &r.b_status);
        rec.check(
            "A learns it lost the lease: its renew fails and it exits with lease lost",
            &format!("RENEW ok=false, {}", describe(Some(exit::LEASE_LOST))),
            &format!("RENEW ok={}, {}", r.a_renewed, describe(Some(r.a_exit))),
        );

        bed.maria().await?.map_err(anyhow::Error::msg)?;
        let control = timeline(bed, rec, RUN_ID_ONLY).await?;
        rec.expose(
            "a completion that checks only run_id lets the stale owner's \"finished\" through",
            control.a_accepted && control.a_status == "completed",
            format_args!(
                "A's completion accepted={}; A's run is {}",
                control.a_accepted, control.a_status
            ),
        );
        Ok(())
    }

    struct Outcome {
        a_accepted: bool,
        a_renewed: bool,
        a_exit: i32,
        a_status: String,
        b_status: String,
    }

    /// B takes over (A frozen, its lease expired by database time) with a greater fence and
    /// completes its own run.
    async fn b_takes_over_and_completes(
        rec: &mut Recorder,
        jobs: &JobLeaseStore,
        a_lease: &JobLease,
        long: Duration,
        fenced: bool,
    ) -> anyhow::Result<()> {
        let b = jobs
            .acquire(JOB_LEASE, &owner_token("B"), long)
            .await?
            .context("B could not take over")?;
        on_lane(rec, Mark::Acquired, "B", "acquire", b.fence_token);
        jobs.start_run("run-b", &b).await?;
        let b_done = jobs.complete_run("run-b", &b).await?;
        rec.step(
            Mark::Write { accepted: b_done },
            "B",
            "complete run-b",
            Some(b.fence_token),
            "",
            None,
        );
        if fenced {
            rec.check_that(
                "B takes over with a greater fence and completes its own run",
                b.fence_token > a_lease.fence_token && b_done,
                format_args!(
                    "A's fence_token={}; B's fence_token={} completed={b_done}",
                    a_lease.fence_token, b.fence_token
                ),
            );
        }
        Ok(())
    }

    /// The run goes on for longer than the lease's TTL, A's renewer keeping the lease; then A
    /// is frozen (its renewer too) until the lease expired by database time.
    async fn a_renews_then_frozen_past_expiry(
        bed: &Testbed,
        rec: &mut Recorder,
        a: &mut Holder,
        a_lease: &JobLease,
        fenced: bool,
    ) -> anyhow::Result<()> {
        let env = bed.maria.env.as_ref().context("MariaDB is not running")?;
        let (jobs, timeout) = (&env.jobs, bed.params().wait_timeout);
        // The run goes on for longer than the lease's TTL: A's renewer keeps the lease.
        let hold = bed.case().ttl + bed.params().renew;
        harness::wait::prescribed(hold).await;
        let renewals = record_renewals(rec, a, "A", a_lease.fence_token);
        let still_held = jobs.is_held(a_lease).await?;
        if fenced {
            rec.check_that(
                format!(
                    "A's renewer kept the lease while the run went on ({} ms, TTL {} ms)",
                    hold.as_millis(),
                    bed.case().ttl.as_millis()
                ),
                still_held && renewed_every_time(&renewals),
                format_args!("is_held={still_held}; {}", renewal_count(&renewals)),
            );
        }

        a.freeze().await?;
        // Read again, apart from freeze()'s own post-condition.
        let frozen = a.threads()?;
        rec.step(Mark::Frozen, "A", "SIGSTOP", None, list(&frozen), None);
        if fenced {
            rec.check_that(
                "after SIGSTOP, /proc shows state T for A and every thread of A, its renewer too",
                states(&frozen) == "T" && frozen.iter().any(|t| t.name == "renewer"),
                format_args!("pid {}: {}", a.pid(), list(&frozen)),
            );
        }
        env.until_expired(timeout).await?;
        on_lane(
            rec,
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            a_lease.fence_token,
        );
        Ok(())
    }

    async fn timeline(
        bed: &mut Testbed,
        rec: &mut Recorder,
        mode: &str,
    ) -> anyhow::Result<Outcome> {
        let fenced = mode == FENCED;
        rec.step(Mark::Info, "lab", mode, None, "", None);
        let long = bed.case().ttl;
        let env = bed.maria.env.as_ref().context("MariaDB is not running")?;
        let jobs = &env.jobs;
        let (mut a, a_lease) = start_a(bed, env, "run-a", mode).await?;
        on_lane(
            rec,
            Mark::Acquired,
            "A",
            "acquire, start run-a",
            a_lease.fence_token,
        );
        if fenced {
            rec.check(
                format!(
                    "holder A (pid {}) acquires the job lease and starts its run, fence_token=1",
                    a.pid()
                ),
                &format!("fence_token=1 run-a={}", "running"),
                &format!(
                    "fence_token={} run-a={}",
                    a_lease.fence_token,
                    jobs.run_status("run-a").await?.unwrap_or_default()
                ),
            );
        }

        a_renews_then_frozen_past_expiry(bed, rec, &mut a, &a_lease, fenced).await?;

        b_takes_over_and_completes(rec, jobs, &a_lease, long, fenced).await?;

        a.thaw().await?;
        rec.step(Mark::Thawed, "A", "SIGCONT + go", None, "", None);
        let (a_accepted, a_renewed, a_exit) = finish(&mut a).await?;
        rec.step(
            Mark::Write {
                accepted: a_accepted,
            },
            "A",
            "complete run-a",
            Some(a_lease.fence_token),
            format!("accepted={a_accepted}"),
            None,
        );
        let a_status = jobs.run_status("run-a").await?.unwrap_or_default();
        let b_status = jobs.run_status("run-b").await?.unwrap_or_default();
        rec.note(format!(
            "{mode}: A's completion accepted={a_accepted}; run-a {a_status}, run-b {b_status}"
        ));
        Ok(Outcome {
            a_accepted,
            a_renewed,
            a_exit,
            a_status,
            b_status,
        })
    }
}
