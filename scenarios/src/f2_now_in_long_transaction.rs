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

use anyhow::Context as _;
use fencing::lease::{stmt, JudgedBy};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use sqlx::Connection;

use crate::lab::{acquired, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{Lab, Outcome, Scenario};

pub struct F2;

impl Scenario for F2 {
    fn id(&self) -> &'static str {
        "F2"
    }

    fn title(&self) -> &'static str {
        "equal tokens are accepted; now() inside a long transaction judges expiry by the transaction's start"
    }

    fn checks(&self) -> usize {
        12
    }

    fn run<'a>(&'a self, lab: &'a mut Lab, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let ttl = lab.params.short_ttl;
            let a = lab.lease.acquire(LEASE, HOLDER_A, ttl).await?;
            rec.check(
                format!(
                    "holder-a acquires the lease with a short TTL ({} ms), token=1",
                    ttl.as_millis()
                ),
                "ACQUIRED token=1",
                &acquired(a.as_ref()),
            );
            let a = a.context("holder-a could not acquire a fresh lease")?;

            // T opens while the lease is still valid; its now() stays at this moment.
            let mut t_conn = lab.lease.pool().acquire().await?;
            let mut t = t_conn.begin().await?;
            let t_start = stmt::clocks(&mut *t).await?;
            let valid_at_start = stmt::expired_by_now(&mut *t, LEASE).await? == Some(false);
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

            // Part one: two writes with the same token, while T is open.
            for n in 1..=2 {
                let w = Write {
                    scope: SCOPE,
                    part: SUMMARY,
                    content: "rows=100(A)",
                    writer: HOLDER_A,
                    token: a.token,
                };
                let ok = lab.resource.write(&w, WriteMode::FencedScope).await?;
                rec.check(
                    format!("holder-a's write #{n} with token=1 is accepted (equal token, same holding)"),
                    "WRITE accepted=true token=1",
                    &wrote(ok, a.token),
                );
            }
            let floor = lab.resource.floor(SCOPE).await?;
            rec.check(
                "fence_floor stays at 1 after two writes with token 1",
                "1",
                &shown(floor),
            );

            // Wait until an autocommit statement judges the lease expired.
            let waited = lab.until_lease_expired("the lease").await?;
            let clock = lab.lease.db_clock().await?;
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

            let t_later = stmt::clocks(&mut *t).await?;
            rec.check("inside T, now() has not moved", &t_start.now, &t_later.now);
            rec.check_that(
                "inside T, clock_timestamp() has passed now()",
                t_later.clock_passed_now,
                format_args!("clock_timestamp() = {}", t_later.clock_timestamp),
            );
            let in_t = stmt::acquire(&mut *t, LEASE, HOLDER_B, ttl).await?;
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

            let b = lab.lease.acquire(LEASE, HOLDER_B, ttl).await?;
            rec.check(
                "the same acquire in autocommit succeeds, token=2",
                "ACQUIRED token=2",
                &acquired(b.as_ref()),
            );
            let b = b.context("holder-b could not acquire an expired lease")?;

            // The opposite direction: a renew inside a transaction opened before expiry.
            let mut t2_conn = lab.lease.pool().acquire().await?;
            let mut t2 = t2_conn.begin().await?;
            let t2_start = stmt::clocks(&mut *t2).await?;
            let valid_at_t2 = stmt::expired_by_now(&mut *t2, LEASE).await? == Some(false);
            rec.check_that(
                "transaction T2 began while holder-b's lease was valid",
                valid_at_t2,
                format_args!("T2's now() = {}", t2_start.now),
            );
            lab.until_lease_expired("holder-b's lease").await?;
            let by_clock = stmt::renew(&mut *t2, &b, JudgedBy::ClockTimestamp).await?;
            rec.check(
                "inside T2 the renew written with clock_timestamp() is refused",
                "RENEW ok=false",
                &format!("RENEW ok={by_clock}"),
            );
            let by_now = stmt::renew(&mut *t2, &b, JudgedBy::Now).await?;
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
        })
    }
}
