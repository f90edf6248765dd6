//! U3 — whose clock decides, on MariaDB. The fault: the client's notion of "now" is stale (here:
//! the database time it read when it acquired, kept and reused — a frozen or lagging clock). A
//! lease judged expired by `CURRENT_TIMESTAMP(3)` cannot be renewed; the same renew judged by the
//! client's stale time is fooled and revives the expired lease — the negative control.

crate::u_common::u_scenario!(U3, "U3", 2, "database time (MariaDB): an expired lease cannot be renewed; a renew by a stale client clock can");

#[cfg(feature = "mariadb")]
mod imp {
    use anyhow::Context as _;
    use harness::evidence::Recorder;

    use crate::u_common::{owner_token, JOB_LEASE};
    use crate::Lab;

    pub async fn run(lab: &mut Lab, rec: &mut Recorder) -> anyhow::Result<()> {
        let (short, timeout) = (lab.params.short_ttl, lab.params.wait_timeout);
        let env = match lab.maria().await? {
            Ok(env) => env,
            Err(reason) => {
                rec.skip(reason);
                return Ok(());
            }
        };
        let jobs = &env.jobs;
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire")?;
        // The client's notion of now: read once, at acquire time, and never refreshed.
        let client_now = jobs.db_clock().await?;
        env.until_expired(timeout).await?;
        let db_now = jobs.db_clock().await?;
        rec.note(format!(
            "the client believes it is {client_now}; the database says {db_now}"
        ));
        rec.check(
            "a lease judged expired by CURRENT_TIMESTAMP(3) cannot be renewed",
            "RENEW ok=false",
            &format!("RENEW ok={}", jobs.renew(&a).await?),
        );
        let fooled = jobs.renew_by_client_clock(&a, &client_now).await?;
        rec.expose(
            "a renew judged by the client's stale clock revives the expired lease",
            fooled,
            format_args!("RENEW ok={fooled} with the client's now = {client_now}"),
        );
        Ok(())
    }
}
