//! U3 — whose clock decides, on MariaDB. The fault: a client whose clock really lags — a separate
//! process whose clock libfaketime sets 3 s behind (nothing else on the machine is skewed). A
//! lease judged expired by `CURRENT_TIMESTAMP(3)` cannot be renewed; the same renew judged by
//! that client's clock is fooled and revives the expired lease — the negative control. Nor can the
//! expired holding complete its run, though nobody took the lease over: the completion judges
//! expiry by `CURRENT_TIMESTAMP(3)` in the statement that writes. Needs
//! MariaDB and libfaketime; without either it says `skip` with the install hint.

use crate::kit::u_common;
use crate::{About, Spec};

const SPEC: Spec = Spec {
    id: "U3",
    title: "database time (MariaDB): an expired lease cannot be renewed; a renew judged by a client's lagging clock (libfaketime) can",
    about: About {
        fault: "a client whose clock lags 3 s (libfaketime)",
        shows: "expiry judged by the database clock holds; a renew judged by the client's clock revives a lease",
        paragraph: "Whose clock decides when a lease has expired? On MariaDB, A takes a short job \
                    lease, starts a run and lets the lease expire. Though nobody took it over, A \
                    can no longer complete its run, because the statement that writes judges \
                    expiry by the database's CURRENT_TIMESTAMP(3). A separate process under \
                    libfaketime, its clock set 3 seconds behind, plays a client with a lagging \
                    clock, and the lag is measured. A renew judged by the database clock is \
                    refused, but the same renew judged by the client's clock is fooled and revives \
                    the expired lease, the negative control. Expiry must be judged by the one \
                    clock that decides.",
    },
    checks: crate::Checks::fixed(4),
    ..u_common::SERIES
};

crate::kit::u_common::u_scenario!(U3);

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::Context as _;
    use harness::evidence::Recorder;
    use harness::faketime::Faketime;
    use harness::process::Spawn;

    use crate::kit::u_common::{owner_token, JOB_LEASE};
    use crate::Testbed;

    /// How far the client's clock lags, in libfaketime's notation and in seconds.
    const LAG: (&str, f64) = ("-3", 3.0);
    /// How far the measured lag may stray from [`LAG`]: the client's start-up and the two clock
    /// reads are not at one instant.
    const TOLERANCE: f64 = 0.5;

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
        let (short, timeout) = (bed.params().short_ttl, bed.params().wait_timeout);
        let faketime = match Faketime::locate() {
            Ok(f) => f,
            Err(reason) => {
                rec.skip(reason);
                return Ok(());
            }
        };
        let Some(env) = bed.maria_or_skip(rec).await? else {
            return Ok(());
        };
        let jobs = &env.jobs;
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire")?;
        jobs.start_run("run-a", &a).await?;
        env.until_expired(timeout).await?;
        let completed = jobs.complete_run("run-a", &a).await?;
        rec.check(
            "an expired holding nobody took over cannot complete its run (expiry judged in the completion)",
            "completed=false status=running",
            &format!(
                "completed={completed} status={}",
                jobs.run_status("run-a").await?.unwrap_or_default()
            ),
        );

        // The client's notion of now: read from a separate process whose clock lags.
        let client = faketime
            .apply(
                Spawn::new("A's clock (date under libfaketime)", "date"),
                LAG.0,
            )
            .arg("+%s.%3N")
            .output(Duration::from_secs(10))
            .await?;
        let client_now = String::from_utf8_lossy(&client.stdout).trim().to_owned();
        let db_now = jobs.db_epoch().await?;
        let lag = db_now - client_now.parse::<f64>().unwrap_or(f64::NAN);
        rec.check_that(
            format!(
                "the client's clock lags the database's by {} s (± {TOLERANCE} s): libfaketime in a separate process",
                LAG.1
            ),
            (lag - LAG.1).abs() <= TOLERANCE,
            format_args!("client {client_now}, database {db_now:.3}: lag {lag:.3} s"),
        );
        rec.check(
            "a lease judged expired by CURRENT_TIMESTAMP(3) cannot be renewed",
            "RENEW ok=false",
            &format!("RENEW ok={}", jobs.renew(&a).await?),
        );
        let fooled = jobs.renew_by_client_clock(&a, &client_now).await?;
        // What the renew wrote: the client's now plus the TTL — a lease moved by a clock that
        // does not decide.
        let until = jobs.leased_until(JOB_LEASE).await?.unwrap_or(f64::NAN);
        let wanted = client_now.parse::<f64>().unwrap_or(f64::NAN) + short.as_secs_f64();
        rec.expose(
            "a renew judged by the client's lagging clock revives the expired lease",
            fooled && (until - wanted).abs() < 0.002,
            format_args!(
                "RENEW ok={fooled} with the client's now = {client_now}; leased_until = {until:.3} (the client's now + TTL = {wanted:.3})"
            ),
        );
        Ok(())
    }
}
