//! F8 — database crash and recovery. The fault: the cluster is stopped immediately (SIGQUIT to
//! the postmaster: no checkpoint, as on a crash) and started again, so it must replay its WAL.
//! Property (I2 across a crash): the lease row and the floor survive; the next grant after expiry
//! gets the next token, never a reused one; and the old holding is still fenced off afterwards.
//! The lab owns its cluster, so it can crash it; against a server it does not own, F8 could not
//! run and would be reported as skipped, never as passed. On the container backend both hosts
//! crash: each container's postmaster gets SIGQUIT, and the container is started again on the
//! data its own layer kept.
//!
//! Also measured (seed 004, recovery; Chubby §2.9): the database's downtime counts against the
//! lease. `expires_at` is a point on the database clock, and nothing pauses it while the server
//! is down — unlike Chubby, whose new master extends every session across a failover. The lease's
//! remaining validity before the crash and after recovery (database clock) is compared with the
//! downtime (the lab's monotonic clock).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use fencing::lease::{Grant, Holding};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::hosts::Restarted;

use crate::testbed::{
    acquired, shown, summary_write, wrote, DETAIL, HOLDER_A, HOLDER_B, HOLDER_C, LEASE, SCOPE,
};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F8",
    title: "database crash: immediate stop and WAL recovery; the lease row and the floor survive, tokens are not reused",
    about: About {
        fault: "the database crashes (immediate stop, WAL recovery)",
        shows: "the lease row and the floor survive a crash; no token is reused; the old holder stays fenced",
        paragraph: "A holds the lease with token 2 (its first holding, token 1, wrote the \
                    detail) and has written with it when the lab \
                    crashes the database: an immediate stop with no checkpoint, so the restart \
                    must replay the write-ahead log, and the server log must say so. The \
                    checks then find the lease row exactly as it was, A still holding it and \
                    able to renew, and the resource's floor still at 2. Once A's lease \
                    expires, the next grant is token 3, never a reused one; that holder lets \
                    it go, and B, granted token 4 (tokens may have gaps), writes and is \
                    accepted, and A's token 2 is rejected. The lab also shows, without \
                    judging it, that the downtime counts against the lease: nothing pauses its expiry while the \
                    server is down.",
    },
    checks: Checks::fixed(10),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    // It crashes and restarts the lease store's server: on Patroni a lost leader is replaced, not
    // restarted (F17 shows that).
    on_patroni: false,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    // It crashes and restarts the server.
    runs_alone: true,
    holder_points: Err(NO_HOLDER),
    fault_moments: &["holder-a holds the lease with token 2"],
    lanes: StoreLanes::Default,
};

pub struct F8;

/// The TTL of holder-a's holding across the crash: the run's TTL, but at least 30 s. The restart
/// is slow — the server fsyncs its whole data directory before redo and checkpoints after it —
/// and was measured at 2–7 s on a 2-core machine under load (load average 8–12); 30 s leaves a
/// margin of over 20 s, so that "holder-a still holds it right after recovery" is true by the
/// database clock and not by luck. It costs no waiting: right after recovery holder-a renews for
/// the run's TTL, and that shorter holding is what expires before holder-b acquires.
fn holding_ttl(ttl: Duration) -> Duration {
    ttl.max(Duration::from_secs(30))
}

/// How far the two clocks may disagree when the lease's lost validity is compared with the
/// downtime: both are this machine's, so only their rates and microsecond rounding separate them.
const TOLERANCE_MS: f64 = 5.0;

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
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let c = bed.case().clone();
            // Two grants to holder-a: the second holding has token 2; the first writes too.
            let first = the_first_holding(bed, rec).await?;
            let hold_ttl = holding_ttl(c.ttl);
            let (mut a, grant_sent, granted) =
                a_holds_and_writes_again(bed, rec, &first, hold_ttl).await?;

            let before = validity_before_the_crash(bed, rec, hold_ttl, grant_sent, granted).await?;

            crash_and_recover(bed, rec, &a, &before).await?;

            a_renews_after_recovery(bed, rec, &mut a, c.ttl).await?;

            b_takes_over_and_a_is_rejected(bed, rec, &a).await
        })
    }
}

/// holder-a's second holding (a greater token, gaps allowed: the checks name it token 2) and
/// its write, which raises the floor to it: the grant, and when it was sent and answered.
async fn a_holds_and_writes_again(
    bed: &mut Testbed,
    rec: &mut Recorder,
    first: &Grant,
    hold_ttl: Duration,
) -> anyhow::Result<(Grant, Instant, Instant)> {
    let c = bed.case().clone();
    let grant_sent = Instant::now();
    let a = bed
        .lease
        .acquire(LEASE, HOLDER_A, hold_ttl)
        .await?
        .context("holder-a could not re-acquire")?;
    let granted = Instant::now();
    // A greater token, gaps allowed: the checks below name it token 2 (a design that
    // issues no token answers 0 each time: its checks are waived, not this one run).
    ensure!(
        !c.sut.claims.token_at_lease || a.token > first.token,
        "holder-a's second grant has token {}, not above its first, {}",
        a.token,
        first.token
    );
    let ok = bed
        .resource
        .write(
            &summary_write(HOLDER_A, "rows=300(A)", a.token),
            WriteMode::Fenced,
        )
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
    bed.check_floor(
        rec,
        "before the crash, fence_floor = 2: holder-a's write with token 2 advanced it",
        2,
    )
    .await?;
    Ok((a, grant_sent, granted))
}

/// The validity the database reports before the crash, against the lab's own clock: the lease
/// row as it stood.
async fn validity_before_the_crash(
    bed: &mut Testbed,
    rec: &mut Recorder,
    hold_ttl: Duration,
    grant_sent: Instant,
    granted: Instant,
) -> anyhow::Result<Holding> {
    let inspect_sent = Instant::now();
    let before = bed
        .lease
        .inspect(LEASE)
        .await?
        .context("the lease row is missing before the crash")?;
    let read = Instant::now();
    // The validity the database reports, against the lab's own clock: the grant's
    // statement ran between sending and answering, the read's likewise, so what is left
    // lies between TTL minus (read answered − grant sent) and TTL minus (read sent −
    // grant answered).
    let ttl_ms = ms(hold_ttl);
    let (low, high) = (
        ttl_ms - ms(read - grant_sent),
        ttl_ms - ms(inspect_sent - granted),
    );
    rec.check_that(
        format!(
            "before the crash, the validity left by the database clock is the TTL minus \
             the time since the grant by the lab's monotonic clock (±{TOLERANCE_MS} ms)"
        ),
        before.remaining_ms() >= low - TOLERANCE_MS && before.remaining_ms() <= high + TOLERANCE_MS,
        format_args!(
            "expected {low:.1} to {high:.1} ms, actual {:.1} ms",
            before.remaining_ms()
        ),
    );
    rec.note(format!(
        "holder-a holds the lease with token 2 (its second grant, TTL {} ms) and wrote with it; \
         {:.0} ms of validity left by the database clock as the database is crashed",
        hold_ttl.as_millis(),
        before.remaining_ms()
    ));
    Ok(before)
}

/// Every server of the lab crashed (one cluster, or a host per database): each must have gone
/// through crash recovery, by its log; what each said, as a note.
fn went_through_crash_recovery(rec: &mut Recorder, restarted: &[Restarted]) {
    // Every server of the lab crashed (one cluster, or a host per database): each must
    // have gone through crash recovery.
    let classified: Vec<_> = restarted.iter().map(|r| classify(&r.log)).collect();
    let kind = classified
        .iter()
        .map(|(kind, _)| *kind)
        .find(|kind| *kind != "crash recovery")
        .unwrap_or("crash recovery");
    rec.check(
        "the restart went through crash recovery (server log)",
        "crash recovery",
        kind,
    );
    let told: Vec<String> = restarted
        .iter()
        .zip(&classified)
        .map(|(r, (_, lines))| {
            let said = format!(
                "postmaster {} → {}; server log: {}",
                shown(r.old_pid),
                shown(r.new_pid),
                lines.join(" | ")
            );
            if restarted.len() == 1 {
                said
            } else {
                format!("{}: {said}", r.server)
            }
        })
        .collect();
    rec.note(told.join(" — "));
}

/// The database crashed (immediate stop) and restarted: crash recovery, the lease row as it
/// was, still unexpired, the downtime counted against it.
async fn crash_and_recover(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &Grant,
    before: &Holding,
) -> anyhow::Result<()> {
    let down_from = Instant::now();
    let restarted = bed.crash_and_restart().await?;
    bed.reopen().await?;
    // From before the crash until the server answered again: the downtime as the lease's
    // holder lives it (no statement, so no renewal, could have run in between).
    let downtime = down_from.elapsed();
    let after = bed.lease.inspect(LEASE).await?;
    rec.step(
        Mark::Restart,
        "lab",
        "restart-immediate",
        None,
        format!(
            "server back, pools reopened after {} ms",
            downtime.as_millis()
        ),
        after.as_ref().map(|r| r.db_now.clone()),
    );
    went_through_crash_recovery(rec, &restarted);
    rec.check(
        "the lease row survived as it was: holder-a, token 2, the same expires_at (a lease does not end with the database connection)",
        // The grant's own token, whatever the design numbers it (gaps allowed).
        &format!("holder-a/{} expires_at={}", a.token, before.expires_at),
        &shown(
            after
                .as_ref()
                .map(|r| format!("{}/{} expires_at={}", r.holder, r.token, r.expires_at)),
        ),
    );
    let after = after.context("the lease row is missing after recovery")?;
    rec.check_that(
        "holder-a still holds it: unexpired by the database clock right after recovery",
        !after.expired,
        format_args!(
            "{:.0} ms of validity left at {}",
            after.remaining_ms(),
            after.db_now
        ),
    );
    let lost = before.remaining_ms() - after.remaining_ms();
    let down_ms = downtime.as_secs_f64() * 1000.0;
    // Shown, not judged: with `expires_at` unchanged (checked above), the validity lost
    // is the database clock's time between the two reads, which bracket the downtime by
    // construction — no fault of the store could make it differ.
    rec.note(format!(
        "the downtime counted against the lease: validity {:.0} ms before the crash → \
         {:.0} ms after recovery: {lost:.0} ms lost by the database clock; downtime \
         {down_ms:.0} ms by the lab's monotonic clock (the lease's time runs on while \
         the database is down)",
        before.remaining_ms(),
        after.remaining_ms()
    ));
    Ok(())
}

/// As soon as the database is back, holder-a renews — from now on for the run's TTL.
async fn a_renews_after_recovery(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Grant,
    ttl: Duration,
) -> anyhow::Result<()> {
    // As soon as the database is back, holder-a renews — from now on for the run's TTL.
    a.ttl = ttl;
    let renewed = bed.lease.renew(a).await?;
    rec.step(
        if renewed {
            Mark::Renewed
        } else {
            Mark::Refused
        },
        "A",
        "renew after recovery",
        Some(a.token),
        format!("RENEW ok={renewed}"),
        None,
    );
    rec.check(
        format!(
            "holder-a's renew right after recovery succeeds (for {} ms): the database \
             clock still counts its holding as alive",
            ttl.as_millis()
        ),
        "RENEW ok=true token=2",
        &format!("RENEW ok={renewed} token={}", a.token),
    );
    bed.check_floor(rec, "fence_floor survived", 2).await?;
    Ok(())
}

/// holder-a's lease expires; B takes over and writes; A's write with token 2 is rejected.
async fn b_takes_over_and_a_is_rejected(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &Grant,
) -> anyhow::Result<()> {
    bed.until_lease_expired("holder-a's lease").await?;
    rec.step(
        Mark::LeaseExpired,
        "A",
        "lease expired (database clock)",
        Some(2),
        "",
        None,
    );
    let b = next_grant_then_b(bed, rec).await?;
    let b_ok = bed
        .resource
        .write(
            &summary_write(HOLDER_B, "rows=301(B)", b.token),
            WriteMode::Fenced,
        )
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
        format!("holder-b's write with token {} is accepted", b.token),
        &wrote(true, b.token),
        &wrote(b_ok, b.token),
    );
    let a_ok = bed
        .resource
        .write(
            &summary_write(HOLDER_A, "rows=300(A)", a.token),
            WriteMode::Fenced,
        )
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
}

/// Milliseconds, fractional.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// holder-a's first holding: granted, it writes the detail, so that the floor stands at its
/// token before the second holding's write (whose token is then the floor's successor, and B's
/// after the crash not: gaps allowed), and is released. Drawn on the timeline, so that the floor
/// the second holding's write meets is not a fresh one. The grant.
async fn the_first_holding(
    bed: &Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<fencing::lease::Grant> {
    let first = bed
        .lease
        .acquire(LEASE, HOLDER_A, bed.case().ttl)
        .await?
        .context("holder-a could not acquire")?;
    let token = first.token;
    let at = |what: &str| format!("{what} (first grant)");
    rec.step(
        Mark::Acquired,
        "A",
        &at("acquire"),
        Some(token),
        acquired(Some(&first)),
        None,
    );
    let detail = Write {
        scope: SCOPE,
        part: DETAIL,
        content: "rows=299(A)",
        writer: HOLDER_A,
        token,
    };
    let ok = bed.resource.write(&detail, WriteMode::Fenced).await?;
    rec.step(
        Mark::Write { accepted: ok },
        "A",
        &at("write the detail"),
        Some(token),
        wrote(ok, token),
        None,
    );
    ensure!(
        ok,
        "holder-a's first holding's write with token {token} was rejected"
    );
    let released = bed.lease.release(&first).await?;
    rec.step(
        Mark::Released,
        "A",
        &at("release"),
        Some(token),
        format!("ok={released}"),
        None,
    );
    ensure!(released, "holder-a could not release its first holding");
    Ok(first)
}

/// After the crash and A's expiry: the next grant (holder-c's) gets token 3, never a reused one,
/// and is let go; holder-b's grant then is greater than the floor by more than one, as tokens may
/// be (gaps allowed) — a fence that counted on the floor's successor refuses B. B's grant.
async fn next_grant_then_b(
    bed: &Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<fencing::lease::Grant> {
    let ttl = bed.case().ttl;
    let next = bed.lease.acquire(LEASE, HOLDER_C, ttl).await?;
    if let Some(g) = &next {
        rec.step(
            Mark::Acquired,
            "C",
            "acquire",
            Some(g.token),
            acquired(next.as_ref()),
            None,
        );
    }
    rec.check(
        "the next acquire after expiry gets token 3, never a reused one",
        "ACQUIRED token=3",
        &acquired(next.as_ref()),
    );
    let next = next.context("holder-c could not acquire the expired lease")?;
    bed.lease.release(&next).await?;
    let b = bed
        .lease
        .acquire(LEASE, HOLDER_B, ttl)
        .await?
        .context("holder-b could not acquire the released lease")?;
    rec.step(
        Mark::Acquired,
        "B",
        "acquire",
        Some(b.token),
        acquired(Some(&b)),
        None,
    );
    Ok(b)
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
