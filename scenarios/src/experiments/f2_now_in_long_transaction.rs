//! F2 — equal tokens, and `now()` inside a long transaction.
//!
//! Part one: one holding is one token, so two writes with the same token are both accepted and
//! the floor stays where it was.
//!
//! Part two (the fault: a lease statement run inside a transaction opened earlier): `now()` is
//! frozen at the transaction's start. In that transaction an acquire is *refused* after the lease
//! has expired by the clock (judged by the start time) while the same acquire in autocommit
//! succeeds; and, in the opposite direction that the source leaves untested, a renew *revives* a
//! lease that expired by the clock, while the same renew written with `clock_timestamp()` is
//! refused. Property: only an autocommit statement judges expiry at the moment it runs (I1).
//! That `clock_timestamp()` really runs on inside T is measured: `clock_timestamp() - now()` must
//! lie within T's age as the lab's monotonic clock brackets it.
//!
//! Part three: an autocommit acquire judges expiry at the instant its statement runs. A
//! contender polling from while the lease is still valid is refused until the database clock
//! reaches `expires_at`, and granted at or after it — never a few hundred milliseconds early.
//!
//! Also shown here, where the lease has just expired with nobody taking over (the source's state
//! diagram: expired → expired, renew refused): holder-a's renew in autocommit is refused and the
//! row stays as it was — an expired lease is re-acquired, with a new token, never revived.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencing::lease::{for_experiments, stmt, Grant, JudgedBy};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use sqlx::Connection;

use crate::testbed::{
    acquired, lease_state, shown, wrote, HOLDER_A, HOLDER_B, HOLDER_C, LEASE, SCOPE, SUMMARY,
};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F2",
    title: "equal tokens are accepted; now() inside a long transaction judges expiry by the transaction's start",
    about: About {
        fault: "lease statements run inside a long-open transaction",
        shows: "only an autocommit statement judges expiry as it runs; now() in a transaction stands still",
        paragraph: "PostgreSQL's now() stops at the moment a transaction began, so a lease \
                    statement run inside an old transaction judges expiry by a stale clock. A \
                    takes a short lease and a transaction T opens while it is valid; two \
                    writes with the same token are both accepted and the floor stays at 1. \
                    Once the lease has expired, A's renew in autocommit is refused and the row \
                    is left as it was. Inside T, B's acquire is still refused, while the same \
                    acquire in autocommit succeeds; in a second transaction, a renew judged by \
                    now() revives the expired lease, a flaw shown, where one written with \
                    clock_timestamp() is refused. Last, a contender polling the lease is \
                    granted at or after expires_at, never before.",
    },
    checks: Checks::fixed(16),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F2;

/// How far the database's `clock_timestamp() - now()` may stray from the lab's monotonic bracket
/// of T's age: both clocks are this machine's, so only their rates (NTP slewing, at most 0.05 %
/// of 0.5 s) and microsecond rounding separate them; 5 ms is a wide margin for that.
const TOLERANCE_MS: f64 = 5.0;

impl Scenario for F2 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let ttl = bed.params().short_ttl;
            let a = bed.lease.acquire(LEASE, HOLDER_A, ttl).await?;
            rec.check(
                format!(
                    "holder-a acquires the lease with a short TTL ({} ms), token=1",
                    ttl.as_millis()
                ),
                "ACQUIRED token=1",
                &acquired(a.as_ref()),
            );
            let mut a = a.context("holder-a could not acquire a fresh lease")?;

            // T opens while the lease is still valid; its now() stays at this moment. The lab's
            // monotonic clock brackets T's start: before BEGIN is sent, after the first read.
            let mut t_conn = bed.lease_table.pool().acquire().await?;
            let before_begin = Instant::now();
            let mut t = t_conn.begin().await?;
            let t_start = stmt::clocks(&mut *t).await?;
            let after_first_read = Instant::now();
            let valid_at_start =
                stmt::expired_by_now(&bed.lease_table, &mut *t, LEASE).await? == Some(false);
            rec.step(
                Mark::Info,
                "T",
                "begin",
                None,
                format!("now()={}", t_start.now),
                Some(t_start.clock_timestamp.clone()),
            );
            rec.check_that(
                "transaction T began while the lease was valid",
                valid_at_start,
                format_args!("T's now() = {}", t_start.now),
            );

            equal_tokens_are_accepted(bed, rec, &a).await?;

            renew_after_expiry_is_refused(bed, rec, &mut a).await?;

            let before_later_read = Instant::now();
            let t_later = stmt::clocks(&mut *t).await?;
            let bracket = (before_begin, after_first_read, before_later_read);
            t_has_not_moved(rec, &t_start, &t_later, bracket);
            let in_t = stmt::acquire(bed.lease_table.sql(), &mut *t, LEASE, HOLDER_B, ttl).await?;
            rec.check(
                "inside T the acquire is refused: judged by T's start, the lease is still held",
                "REFUSED",
                &in_t.map_or_else(
                    || "REFUSED".to_owned(),
                    |token| format!("ACQUIRED token={token}"),
                ),
            );
            t.rollback().await?;
            drop(t_conn);

            let b = b_acquires_in_autocommit(bed, rec, ttl).await?;

            renew_inside_an_older_transaction(bed, rec, &b).await?;

            acquire_is_judged_to_the_statement(bed, rec, ttl).await
        })
    }
}

/// Inside T, now() has not moved, and clock_timestamp() - now() is T's age by the lab's
/// monotonic clock: at least from the first read's reply to this read's request, at most from
/// before BEGIN to this read's reply.
fn t_has_not_moved(
    rec: &mut Recorder,
    t_start: &stmt::Clocks,
    t_later: &stmt::Clocks,
    (before_begin, after_first_read, before_later_read): (Instant, Instant, Instant),
) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // T's age by the monotonic clock: at least from the first read's reply to this
    // read's request, at most from before BEGIN to this read's reply.
    let (low, high) = (
        ms(before_later_read - after_first_read),
        ms(before_begin.elapsed()),
    );
    rec.check("inside T, now() has not moved", &t_start.now, &t_later.now);
    rec.check_that(
        format!(
            "inside T, clock_timestamp() - now() is the time that passed since T began by \
             the lab's monotonic clock (±{TOLERANCE_MS} ms)"
        ),
        t_later.clock_minus_now_ms >= low - TOLERANCE_MS
            && t_later.clock_minus_now_ms <= high + TOLERANCE_MS,
        format_args!(
            "expected {low:.1} to {high:.1} ms, actual {:.1} ms",
            t_later.clock_minus_now_ms
        ),
    );
}

/// Part one: two writes with the same token, while T is open: both accepted, the floor at 1.
async fn equal_tokens_are_accepted(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &Grant,
) -> anyhow::Result<()> {
    // Part one: two writes with the same token, while T is open.
    for n in 1..=2 {
        let w = Write {
            scope: SCOPE,
            part: SUMMARY,
            content: "rows=100(A)",
            writer: HOLDER_A,
            token: a.token,
        };
        let ok = bed.resource.write(&w, WriteMode::Fenced).await?;
        rec.check(
            format!("holder-a's write #{n} with token=1 is accepted (equal token, same holding)"),
            "WRITE accepted=true token=1",
            &wrote(ok, a.token),
        );
    }
    bed.check_floor(
        rec,
        "fence_floor stays at 1 after two writes with token 1",
        1,
    )
    .await?;
    Ok(())
}

/// The lease expires (by an autocommit statement) with nobody taking over: holder-a's renew in
/// autocommit is refused, and the row stays as it was.
async fn renew_after_expiry_is_refused(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Grant,
) -> anyhow::Result<()> {
    // Wait until an autocommit statement judges the lease expired.
    let waited = bed.until_lease_expired("the lease").await?;
    let clock = bed.lease_table.db_clock().await?;
    rec.step(
        Mark::LeaseExpired,
        "holder-a",
        "lease expired (autocommit)",
        Some(1),
        format!("after {} ms", waited.as_millis()),
        Some(clock),
    );
    rec.note(format!(
        "an autocommit connection sees the lease expired after {} ms",
        waited.as_millis()
    ));

    // Expired, and nobody took over: holder-a's renew in autocommit is refused, and the
    // row (holder, token, expires_at) stays as it was.
    let before = bed.lease.inspect(LEASE).await?;
    let renewed = bed.lease.renew(a).await?;
    let after = bed.lease.inspect(LEASE).await?;
    let row_line = |row: Option<fencing::lease::Holding>| {
        shown(row.map(|r| {
            let state = if r.expired { "expired" } else { "unexpired" };
            format!("{} token={} {state}", r.holder, r.token)
        }))
    };
    rec.check(
        "holder-a renews in autocommit after its lease expired with nobody taking over: refused",
        "lease holder-a token=1 expired; RENEW ok=false",
        &format!("lease {}; RENEW ok={renewed}", row_line(before.clone())),
    );
    rec.step(
        if renewed {
            Mark::Renewed
        } else {
            Mark::Refused
        },
        "holder-a",
        "renew after expiry (autocommit)",
        Some(a.token),
        format!("RENEW ok={renewed}"),
        None,
    );
    rec.check(
        "the refused renew left the row as it was: token not advanced, expires_at not moved",
        &format!(
            "holder-a token=1 expired expires_at={}",
            shown(before.map(|r| r.expires_at))
        ),
        &format!(
            "{} expires_at={}",
            row_line(after.clone()),
            shown(after.map(|r| r.expires_at))
        ),
    );
    Ok(())
}

/// The same acquire in autocommit succeeds, token 2.
async fn b_acquires_in_autocommit(
    bed: &mut Testbed,
    rec: &mut Recorder,
    ttl: Duration,
) -> anyhow::Result<Grant> {
    let b = bed.lease.acquire(LEASE, HOLDER_B, ttl).await?;
    rec.check(
        "the same acquire in autocommit succeeds, token=2",
        "ACQUIRED token=2",
        &acquired(b.as_ref()),
    );
    let Some(b) = b else {
        // Say what the lease is, not what it was expected to be (a design whose renew
        // revives an expired lease has an unexpired one here).
        let row = bed.lease.inspect(LEASE).await?;
        anyhow::bail!(
            "holder-b's acquire was refused: the lease is {}",
            shown(row.as_ref().map(lease_state))
        );
    };
    Ok(b)
}

/// The opposite direction: a renew inside a transaction opened before expiry — refused when
/// written with clock_timestamp(), and (the negative control) reviving the lease when judged by
/// now().
async fn renew_inside_an_older_transaction(
    bed: &mut Testbed,
    rec: &mut Recorder,
    b: &Grant,
) -> anyhow::Result<()> {
    // The opposite direction: a renew inside a transaction opened before expiry.
    let mut t2_conn = bed.lease_table.pool().acquire().await?;
    let mut t2 = t2_conn.begin().await?;
    let t2_start = stmt::clocks(&mut *t2).await?;
    let valid_at_t2 = stmt::expired_by_now(&bed.lease_table, &mut *t2, LEASE).await? == Some(false);
    rec.check_that(
        "transaction T2 began while holder-b's lease was valid",
        valid_at_t2,
        format_args!("T2's now() = {}", t2_start.now),
    );
    bed.until_lease_expired("holder-b's lease").await?;
    let by_clock =
        stmt::renew(bed.lease_table.sql(), &mut *t2, b, JudgedBy::ClockTimestamp).await?;
    rec.check(
        "inside T2 the renew written with clock_timestamp() is refused",
        "RENEW ok=false",
        &format!("RENEW ok={by_clock}"),
    );
    let by_now = stmt::renew(bed.lease_table.sql(), &mut *t2, b, JudgedBy::Now).await?;
    let revived = stmt::clocks(&mut *t2).await?;
    rec.expose(
        "a renew judged by now() inside T2 revives a lease that expired by the clock",
        by_now,
        format_args!(
            "RENEW ok={by_now} at clock_timestamp() {}",
            revived.clock_timestamp
        ),
    );
    t2.rollback().await?;
    Ok(())
}

/// Part three: an acquire judges expiry at the instant it runs, to the statement.
async fn acquire_is_judged_to_the_statement(
    bed: &mut Testbed,
    rec: &mut Recorder,
    ttl: Duration,
) -> anyhow::Result<()> {
    // Part three: an acquire judges expiry at the instant it runs, to the statement.
    // holder-b takes its expired lease again; from then on holder-c sends an acquire at
    // every poll. Each must be refused while the statement's now() is before holder-b's
    // expires_at, and the first grant must come at or after it — a takeover even a few
    // hundred milliseconds early is a lease store that breaks I1 by its own clock.
    let again = bed.lease.acquire(LEASE, HOLDER_B, ttl).await?;
    rec.check(
        "holder-b takes its expired lease again in autocommit, token=3",
        "ACQUIRED token=3",
        &acquired(again.as_ref()),
    );
    let row = bed
        .lease
        .inspect(LEASE)
        .await?
        .context("the lease row is missing")?;
    let expires_us = (row.expires_epoch * 1e6).round() as i64;
    let (refused, granted) = poll_acquire(bed, HOLDER_C, ttl).await?;
    // Judged by the statement's now(): what its WHERE compares expires_at with.
    let last_refused = refused.iter().map(|s| s.judged_us).max();
    rec.check_that(
        "holder-c's acquire, sent at every poll from then on, is refused while the \
         statement's now() is before holder-b's expires_at and granted only at or after it",
        last_refused.is_some_and(|t| t < expires_us) && granted.judged_us >= expires_us,
        format_args!(
            "{} refused, the last at expires_at {} ms; granted at expires_at {} ms",
            refused.len(),
            last_refused.map_or("-".into(), |t| us_as_ms(t - expires_us)),
            us_as_ms(granted.judged_us - expires_us),
        ),
    );
    Ok(())
}

/// Sends `holder`'s acquire at every poll until one is granted: the server spans of the refused
/// attempts, and of the granted one.
async fn poll_acquire(
    bed: &Testbed,
    holder: &str,
    ttl: Duration,
) -> anyhow::Result<(
    Vec<for_experiments::ServerSpan>,
    for_experiments::ServerSpan,
)> {
    let spans = std::sync::Mutex::new((Vec::new(), None));
    let spans_ref = &spans;
    harness::wait::until(
        &format!("{holder}'s acquire is granted"),
        bed.params().wait_timeout,
        || {
            let lease = bed.lease_table.clone();
            async move {
                let (grant, span) = lease.acquire_timed(LEASE, holder, ttl).await?;
                let mut spans = spans_ref.lock().expect("no panic while held");
                match grant {
                    Some(_) => spans.1 = Some(span),
                    None => spans.0.push(span),
                }
                Ok::<_, fencing::Error>(grant.is_some())
            }
        },
    )
    .await?;
    let (refused, granted) = spans.into_inner().expect("no panic while held");
    Ok((refused, granted.context("a grant ended the wait")?))
}

/// Microseconds as signed milliseconds with one decimal: `-3.2`, `+3.7`.
fn us_as_ms(us: i64) -> String {
    format!("{:+.1}", us as f64 / 1000.0)
}
