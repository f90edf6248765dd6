//! F8 — database crash and recovery. The fault: the cluster is stopped immediately (SIGQUIT to
//! the postmaster: no checkpoint, as on a crash) and started again, so it must replay its WAL.
//! Property (I2 across a crash): the lease row and the floor survive; the next grant after expiry
//! gets the next token, never a reused one; and the old holding is still fenced off afterwards.
//! The lab owns its cluster, so it can crash it; against a server it does not own, F8 could not
//! run and would be reported as skipped, never as passed.

use anyhow::{ensure, Context as _};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::server::Server;

use crate::lab::{acquired, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{Lab, Outcome, Scenario};

pub struct F8;

/// Server-log lines that show crash recovery, and the one that would show a clean shutdown.
const RECOVERY_MARKERS: &[&str] = &[
    "was interrupted",
    "not properly shut down",
    "automatic recovery in progress",
    "redo starts at",
    "redo done at",
];
const CLEAN_SHUTDOWN_MARKER: &str = "database system was shut down at";

/// How the restart's server log classifies the restart, and the lines that say so.
fn classify(log: &str) -> (&'static str, Vec<String>) {
    let pick = |markers: &[&str]| -> Vec<String> {
        log.lines()
            .filter(|l| markers.iter().any(|m| l.contains(m)))
            .map(|l| l.trim().to_owned())
            .collect()
    };
    let recovery = pick(RECOVERY_MARKERS);
    if log.contains("automatic recovery in progress") {
        ("crash recovery", recovery)
    } else if log.contains(CLEAN_SHUTDOWN_MARKER) {
        ("clean shutdown", pick(&[CLEAN_SHUTDOWN_MARKER]))
    } else {
        ("no recovery in the log", recovery)
    }
}

impl Scenario for F8 {
    fn id(&self) -> &'static str {
        "F8"
    }

    fn title(&self) -> &'static str {
        "database crash: immediate stop and WAL recovery; the lease row and the floor survive, tokens are not reused"
    }

    fn checks(&self) -> usize {
        6
    }

    fn fault_moments(&self) -> &'static [&'static str] {
        &["holder-a holds the lease with token 2"]
    }

    fn run<'a>(&'a self, lab: &'a mut Lab, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let p = lab.params.clone();
            // Two grants to holder-a: the second holding has token 2.
            let first = lab
                .lease
                .acquire(LEASE, HOLDER_A, p.ttl)
                .await?
                .context("holder-a could not acquire")?;
            ensure!(
                lab.lease.release(&first).await?,
                "holder-a could not release its first holding"
            );
            let a = lab
                .lease
                .acquire(LEASE, HOLDER_A, p.ttl)
                .await?
                .context("holder-a could not re-acquire")?;
            ensure!(
                a.token == 2,
                "holder-a's second grant has token {}",
                a.token
            );
            let w = |writer, content, token| Write {
                scope: SCOPE,
                part: SUMMARY,
                content,
                writer,
                token,
            };
            let ok = lab
                .resource
                .write(&w(HOLDER_A, "rows=300(A)", a.token), WriteMode::FencedScope)
                .await?;
            ensure!(
                ok,
                "holder-a's write with token 2 was rejected before the crash"
            );
            rec.step(
                Mark::Acquired,
                "A",
                "acquire (second grant)",
                Some(2),
                "ACQUIRED token=2",
                None,
            );
            rec.step(
                Mark::Write { accepted: ok },
                "A",
                "write",
                Some(2),
                wrote(ok, 2),
                None,
            );
            rec.note("holder-a holds the lease with token 2 (its second grant) and wrote with it: fence_floor=2");

            let offset = lab.cluster.log_len();
            let old_pid = lab.cluster.postmaster_pid();
            lab.cluster.restart_immediate().await?;
            lab.reopen().await?;
            rec.step(
                Mark::Restart,
                "lab",
                "restart-immediate",
                None,
                "server back, pools reopened",
                lab.lease.db_clock().await.ok(),
            );
            let log = lab.cluster.log_since(offset)?;
            let (kind, lines) = classify(&log);
            rec.check(
                "the restart went through crash recovery (server log)",
                "crash recovery",
                kind,
            );
            rec.note(format!(
                "postmaster {} → {}; server log: {}",
                shown(old_pid),
                shown(lab.cluster.postmaster_pid()),
                lines.join(" | ")
            ));

            let row = lab.lease.inspect(LEASE).await?;
            rec.check(
                "the lease row survived: holder-a still holds token 2 (a lease does not end with the database connection)",
                "holder-a/2",
                &shown(row.map(|r| format!("{}/{}", r.holder, r.token))),
            );
            rec.check(
                "fence_floor survived",
                "2",
                &shown(lab.resource.floor(SCOPE).await?),
            );

            lab.until_lease_expired("holder-a's lease").await?;
            rec.step(
                Mark::LeaseExpired,
                "A",
                "lease expired (database clock)",
                Some(2),
                "",
                None,
            );
            let b = lab.lease.acquire(LEASE, HOLDER_B, p.ttl).await?;
            if let Some(g) = &b {
                rec.step(
                    Mark::Acquired,
                    "B",
                    "acquire",
                    Some(g.token),
                    acquired(b.as_ref()),
                    None,
                );
            }
            rec.check(
                "the next acquire after expiry gets token 3, never a reused one",
                "ACQUIRED token=3",
                &acquired(b.as_ref()),
            );
            let b = b.context("holder-b could not acquire the expired lease")?;
            let b_ok = lab
                .resource
                .write(&w(HOLDER_B, "rows=301(B)", b.token), WriteMode::FencedScope)
                .await?;
            rec.step(
                Mark::Write { accepted: b_ok },
                "B",
                "write",
                Some(b.token),
                wrote(b_ok, b.token),
                None,
            );
            rec.check(
                "holder-b's write with token 3 is accepted",
                &wrote(true, 3),
                &wrote(b_ok, b.token),
            );
            let a_ok = lab
                .resource
                .write(&w(HOLDER_A, "rows=300(A)", a.token), WriteMode::FencedScope)
                .await?;
            rec.step(
                Mark::Write { accepted: a_ok },
                "A",
                "write",
                Some(a.token),
                wrote(a_ok, a.token),
                None,
            );
            rec.check(
                "holder-a's write with token 2 is rejected",
                &wrote(false, 2),
                &wrote(a_ok, a.token),
            );
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn a_clean_restart_is_not_mistaken_for_crash_recovery() {
        let clean = "LOG:  database system was shut down at 2026-11-29 23:40:00 UTC\nLOG:  database system is ready";
        assert_eq!(classify(clean).0, "clean shutdown");
        let crash = "LOG:  database system was interrupted; last known up at …\n\
                     LOG:  database system was not properly shut down; automatic recovery in progress\n\
                     LOG:  redo starts at 0/1A2B3C4";
        let (kind, lines) = classify(crash);
        assert_eq!((kind, lines.len()), ("crash recovery", 3));
        assert_eq!(
            classify("LOG:  database system is ready").0,
            "no recovery in the log"
        );
    }
}
