//! F3 — concurrent acquisition. The fault: N contenders, each on its own connection, released
//! together by a barrier, in four rounds: on a fresh lease, while it is held, in its last moments
//! (a quarter of the TTL or less left by the database clock), and after it expired by the
//! database clock. Property (I1, I2): exactly one winner on a free lease, none on a held one —
//! up to its expiry, which is what a store that hands the lease over early gets wrong and only
//! the last-moments round can see — and the token advances by one per winning round.
//!
//! The last-moments round runs on the lease table, whose acquire reports when the server judged
//! it (`now()`): its check counts the winners among the statements judged before `expires_at`,
//! so a statement the machine delayed past the expiry may win without failing it. A lock service
//! tells no such time; there the round is not run.
//!
//! To show that the race was real where it matters — on the server, not merely in the client's
//! tasks — the barrier on the lease table is at the server: the lab holds the table (`LOCK TABLE
//! … IN SHARE MODE`) until every contender's statement waits there (`pg_stat_activity`: for the
//! table, or behind a contender that does, as a design that locks a row first queues them), then
//! ends its transaction, and the lock manager lets them all go at once. Each acquire reports, by
//! the database clock, when its transaction began (`now()`: when the statement reached the
//! server, before that wait), when it executed (`statement_timestamp()`, after it) and when its
//! `INSERT … ON CONFLICT` was done, lock waits included (`clock_timestamp()`, read after it in
//! the same statement). Each round checks that every contender's statement was waiting at the
//! server at once (`pg_stat_activity`: as many sessions waiting on a lock as there are
//! contenders) before the gate opened — a count that falls short when a contender's statement
//! never reached the server in time, and is 0 with no gate (`fencing/tests/lease.rs`) — and
//! reports, as figures, how many of their transactions were then open at one instant, the spread
//! of their starts, and how many statements executed at once. The peak executing at once cannot
//! be the check, with the lab's tasks alone as the barrier: released by the tasks, the 16
//! statements reach the server over about 5 ms, and with the data directory on tmpfs (no commit
//! waiting on a disk) each runs in well under that — one after the other, peak 1, which a
//! client-side measure, every request in flight together, would hide. Executing at once
//! (`statement_timestamp()` on) stays a figure: after the wake-up, on two cores and a fast disk,
//! the server may still run them one after the other (seen: peak 1), and the race for the row is
//! no less real for it. A lock service has no such lock:
//! there the tasks' barrier releases the contenders, and the check is on the requests in flight.
//!
//! On a store that holds by session (ZooKeeper), one more contention: a create whose answer is
//! lost while another client holds the lock (`lost_create`) — the contender that looks for its
//! own node afterwards must find its own, never the holder's.

use std::sync::Arc;
use std::time::Duration;

use fencing::lease::for_experiments::ServerSpan;
use harness::evidence::{Mark, Recorder};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::testbed::{shown, LEASE};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Part, Scenario, Spec, StoreLanes,
    Testbed, NO_HOLDER,
};

const SPEC: Spec = Spec {
    id: "F3",
    title: "concurrent acquisition: contenders released by a barrier race for the lease in three rounds",
    about: About {
        fault: "contenders released together race for one lease",
        shows: "one winner on a free lease, none on a held one until its expiry, the token up by one per win",
        paragraph: "Sixteen contenders by default, each on its own connection, are released \
                    together to acquire one lease: on a fresh lease, while it is held, in its \
                    last moments (a quarter of the TTL or less left), and after it expired by \
                    the database clock. The checks count the winners of each round (one, none, \
                    none judged before the expiry, one), their tokens (1, then 2) and the \
                    single lease left at the end. To prove the race was real at the server, \
                    the lab locks the lease table until every contender's statement waits \
                    there, then lets them all go at once. A store that hands a lease over even \
                    slightly early fails the last-moments round.",
    },
    // The last-moments round only on the lease table.
    checks: Checks::with(
        11,
        &[
            (Part::OnTheTable, 1),
            (Part::OnSessions, crate::kit::lost_create::CHECKS),
        ],
    ),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::All,
    fence_dependent: false,
    again_on_stores: false,
    // The contenders must overlap on the server: the load of another experiment is noise.
    runs_alone: true,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F3;

/// How many last-moments rounds the lab runs before it judges one begun too late ([`last_moments`]).
const LAST_MOMENTS_ATTEMPTS: usize = 3;

/// One contender's attempt: the token it won, if any, and when the server executed it (on a
/// lock service, which tells no such time: when the request was in flight, by this host's
/// monotonic clock).
struct Attempt {
    token: Option<i64>,
    span: ServerSpan,
}

/// A contender's own client: of the lease table (its acquire reports the server's timings), or
/// of the lock service (its own connection or session).
#[derive(Clone)]
enum Contender {
    Table(fencing::lease::SqlLeaseStore),
    Service(Arc<dyn fencing::lease::LeaseStore>),
}

impl Scenario for F3 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let n = bed.params().contenders;
            let ttl = bed.case().ttl;
            // A lock service, or the advisory locks.
            let on_service = !bed.makes(Part::OnTheTable);
            // The gate's own connection to the lease table, made before any round's clock
            // starts: made inside a round, it took the last-moments round's few hundred ms
            // under load (a CI saw every contender judged after the expiry).
            let gate = if on_service {
                None
            } else {
                Some(bed.own_lease_client().await?)
            };
            let mut clients = Vec::with_capacity(n);
            for _ in 0..n {
                clients.push(if on_service {
                    Contender::Service(bed.own_store_client().await?)
                } else {
                    Contender::Table(bed.own_lease_client().await?)
                });
            }
            rec.note(format!(
                "{n} contenders, each on its own connection, TTL {} ms{}",
                ttl.as_millis(),
                if on_service {
                    ""
                } else {
                    "; in each round the lab holds the lease table (LOCK TABLE … IN SHARE MODE) \
                     until every contender's statement waits at the server (pg_stat_activity), \
                     then lets them go together"
                }
            ));

            let rounds = [
                ("round 1 (fresh lease)", 1usize, Some(1i64)),
                ("round 2 (lease still valid)", 0, None),
                ("round 3 (after expiry by the database clock)", 1, Some(2)),
            ];
            let (mut total, mut void_grants) = (0, 0); // void: see [`last_moments`]
            for (round, (label, want_winners, want_token)) in rounds.into_iter().enumerate() {
                if round == 1 {
                    let row = bed.lease.inspect(LEASE).await?;
                    rec.check_that(
                        "before round 2 the lease is still valid by the database clock",
                        row.as_ref().is_some_and(|r| !r.expired),
                        format_args!("expires_at = {}", shown(row.map(|r| r.expires_at))),
                    );
                }
                if round == 2 && !on_service {
                    void_grants = last_moments(bed, rec, gate.as_ref(), &clients, ttl).await?;
                }
                if round == 2 && on_service {
                    // A lock service's holding may be kept alive by its client on its own (a
                    // ZooKeeper session's heartbeats): every contender drops its client — its
                    // connection ends without a word, as a holder's that died — and opens a new
                    // one; the winner's holding ends when the service expires it.
                    clients.clear();
                    for _ in 0..n {
                        clients.push(Contender::Service(bed.own_store_client().await?));
                    }
                    rec.note("the contenders dropped their clients of rounds 1–2 (nothing released) and opened new ones");
                }
                if round == 2 {
                    let waited = bed.until_lease_expired("the lease").await?;
                    rec.note(format!(
                        "the lease expired by {} after a wait of {} ms",
                        bed.expiry_clock(),
                        waited.as_millis()
                    ));
                }
                let (attempts, seen) = race(bed, gate.as_ref(), &clients, ttl).await?;
                total += attempts.len();
                let winners: Vec<i64> = attempts.iter().filter_map(|a| a.token).collect();
                rec.check(format!("{label}: winners"), &want_winners, &winners.len());
                if let Some(token) = want_token {
                    bed.check_token(
                        rec,
                        format!("{label}: the winner's token"),
                        token + void_grants,
                        winners.first().copied(),
                    );
                }
                judge_the_race(rec, label, n, &attempts, seen);

                rec.step(
                    Mark::Info,
                    "contenders",
                    label,
                    winners.first().copied(),
                    format!("{} winner(s)", winners.len()),
                    None,
                );
            }
            rec.note(format!(
                "{total} attempts in rounds 1–3 (3 rounds × {n} contenders)"
            ));
            the_end(bed, rec, on_service, 2 + void_grants).await
        })
    }
}

/// Whether the round raced: on a lock service, at least two requests in flight at once; on
/// the lease table, every contender's statement waiting at the server at once, let go
/// together — with, as figures, how many transactions were then open and executing at once.
fn judge_the_race(
    rec: &mut Recorder,
    label: &str,
    n: usize,
    attempts: &[Attempt],
    seen: Option<GateSeen>,
) {
    // On a lock service: the requests in flight. On the lease table: every
    // contender's statement waiting at the server at once (`pg_stat_activity`), held there by
    // the lab; with, as figures, how many of their transactions were then open at one
    // instant (`now()`, before the wait in rounds 2 and 3; in round 1, each
    // connection's first, the statement is prepared first, and its transaction begins
    // after the gate opened) and how many executed at once (`statement_timestamp()` on).
    let open: Vec<(i64, i64)> = attempts
        .iter()
        .map(|a| (a.span.judged_us, a.span.finished_us))
        .collect();
    let (peak, spread_us) = overlap(&open);
    match seen {
        None => {
            rec.check_that(
                format!(
                    "{label}: at least 2 acquire requests were in flight at once \
                     (sent before another's answer came back, by this host's \
                     monotonic clock; a lock service tells no execution time)"
                ),
                peak >= 2,
                format_args!(
                    "peak {peak} of {n} in flight at one instant; their starts \
                     spread over {spread_us} µs"
                ),
            );
        }
        Some(seen) => {
            let executing: Vec<(i64, i64)> = attempts
                .iter()
                .map(|a| (a.span.started_us, a.span.finished_us))
                .collect();
            let (peak_executing, executing_spread_us) = overlap(&executing);
            rec.check_that(
                format!(
                    "{label}: all {n} acquire statements were at the server at once, \
                     waiting behind the lease table the lab held (pg_stat_activity), and were let \
                     go together"
                ),
                seen.waiting >= n,
                format_args!(
                    "{} of {n} waiting at once after {} ms; once let go, {peak} \
                     transactions open at one instant (now() to the end of the \
                     INSERT, by the database clock; their starts spread over \
                     {spread_us} µs), {peak_executing} executing \
                     (statement_timestamp() on; spread over {executing_spread_us} µs)",
                    seen.waiting,
                    seen.after.as_millis()
                ),
            );
        }
    }
}

/// After the rounds: the final token, and one holding (or row) of the lease; then, on a store
/// that holds by session, a create whose answer is lost ([`crate::kit::lost_create`]).
async fn the_end(
    bed: &Testbed,
    rec: &mut Recorder,
    on_service: bool,
    token: i64,
) -> anyhow::Result<()> {
    let row = bed.lease.inspect(LEASE).await?;
    let holdings = usize::from(row.is_some());
    bed.check_token(rec, "the final token", token, row.map(|r| r.token));
    if on_service {
        rec.check(
            "holdings of the lease on the lock service (the round-3 winner's)",
            &1,
            &holdings,
        );
    } else {
        rec.check(
            "rows in the lease table",
            &1,
            &bed.lease_table.row_count().await?,
        );
    }
    if bed.makes(Part::OnSessions) {
        crate::kit::lost_create::probe(bed, rec).await?;
    }
    Ok(())
}

/// The last-moments round: once the lease has a quarter of its TTL or less left by the database
/// clock, every contender tries again; none judged before the expiry may win.
///
/// A round that the machine began too late — every statement judged after the expiry, so there
/// is nothing to judge — is void, not failed: once, under CI's load, the wait saw 375 ms left
/// and the contenders' transactions began 228 ms after the expiry. One of them won the expired
/// lease, as it should, and holds it for a new TTL: the round is run again in that holding's last
/// moments, up to [`LAST_MOMENTS_ATTEMPTS`] times. Returns how many grants the void rounds made
/// (the tokens after them are that much greater).
async fn last_moments(
    bed: &Testbed,
    rec: &mut Recorder,
    gate: Option<&fencing::lease::SqlLeaseStore>,
    clients: &[Contender],
    ttl: Duration,
) -> anyhow::Result<i64> {
    let label = "round 2b (the lease's last moments, a quarter of its TTL or less left)";
    let within_ms = ttl.as_secs_f64() * 1e3 / 4.0;
    let lease = &bed.lease;
    let mut void_grants = 0;
    for attempt in 1..=LAST_MOMENTS_ATTEMPTS {
        harness::wait::until(
            &format!("the lease has {within_ms:.0} ms or less left by the database clock"),
            bed.params().wait_timeout,
            || async move {
                let row = lease.inspect(LEASE).await?;
                Ok::<_, fencing::Error>(row.is_none_or(|r| r.remaining_ms() <= within_ms))
            },
        )
        .await?;
        let row = bed
            .lease
            .inspect(LEASE)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the lease row vanished before its last moments"))?;
        let expires_us = row.expires_epoch * 1e6;
        let (attempts, _) = race(bed, gate, clients, ttl).await?;
        let judged_before: Vec<&Attempt> = attempts
            .iter()
            .filter(|a| (a.span.judged_us as f64) < expires_us)
            .collect();
        let early_winners: Vec<i64> = judged_before.iter().filter_map(|a| a.token).collect();
        let late_winners: Vec<i64> = attempts
            .iter()
            .filter(|a| (a.span.judged_us as f64) >= expires_us)
            .filter_map(|a| a.token)
            .collect();
        let figures = format!(
            "{} of {} statements judged before expires_at {} ({:.0} ms left when the round began): \
             {} winner(s) among them{}",
            judged_before.len(),
            attempts.len(),
            row.expires_at,
            row.remaining_ms(),
            early_winners.len(),
            if late_winners.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} winner(s) judged after it (the machine was slow)",
                    late_winners.len()
                )
            }
        );
        // Void only when there is nothing to judge and the expired lease went to one of them
        // (held again for a new TTL, so that the next round has last moments of its own).
        let void = judged_before.is_empty() && late_winners.len() == 1;
        if void && attempt < LAST_MOMENTS_ATTEMPTS {
            void_grants += 1;
            rec.note(format!(
                "{label}, attempt {attempt}: void, begun too late ({figures}); the winner, token {}, \
                 holds the lease for a new TTL, and the round runs again in its last moments",
                late_winners[0]
            ));
            continue;
        }
        rec.check_that(
            format!("{label}: no contender judged before expires_at wins"),
            !judged_before.is_empty() && early_winners.is_empty(),
            format_args!(
                "{figures}{}",
                if attempt > 1 {
                    format!("; attempt {attempt} of {LAST_MOMENTS_ATTEMPTS}, the earlier void")
                } else {
                    String::new()
                }
            ),
        );
        rec.step(
            Mark::Info,
            "contenders",
            label,
            early_winners.first().or(late_winners.first()).copied(),
            format!("{} winner(s)", early_winners.len() + late_winners.len()),
            None,
        );
        return Ok(void_grants + i64::try_from(late_winners.len()).unwrap_or(0));
    }
    unreachable!("the last attempt returns")
}

/// Releases every client at once; each tries one acquire. On the lease table the barrier is at
/// the server: the lab holds the table ([`fencing::lease::for_experiments::TableGate`]) until every
/// contender's statement waits there (`pg_stat_activity`), then lets them all go together —
/// released by the lab's tasks alone, 16 statements reached the server over about 5 ms, and
/// where each ran in well under that (a data directory on tmpfs) one ran after the other and
/// the overlap check failed (measured). A lock service has no such lock: its contenders are
/// released by the tasks' barrier alone (`gate` is `None`).
async fn race(
    bed: &Testbed,
    gate: Option<&fencing::lease::SqlLeaseStore>,
    clients: &[Contender],
    ttl: Duration,
) -> anyhow::Result<(Vec<Attempt>, Option<GateSeen>)> {
    let gate = match gate {
        Some(store) => Some(store.gate().await?),
        None => None,
    };
    let barrier = Arc::new(Barrier::new(clients.len()));
    let base = std::time::Instant::now();
    let us =
        move |at: std::time::Instant| i64::try_from((at - base).as_micros()).unwrap_or(i64::MAX);
    let mut set = JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, barrier) = (client.clone(), barrier.clone());
        set.spawn(async move {
            let holder = format!("contender-{:02}", i + 1);
            barrier.wait().await;
            let (grant, span) = match client {
                Contender::Table(table) => table.acquire_timed(LEASE, &holder, ttl).await?,
                Contender::Service(store) => {
                    let sent = std::time::Instant::now();
                    let grant = store.acquire(LEASE, &holder, ttl).await?;
                    let (started_us, finished_us) = (us(sent), us(std::time::Instant::now()));
                    let span = ServerSpan {
                        started_us,
                        finished_us,
                        judged_us: started_us,
                    };
                    (grant, span)
                }
            };
            anyhow::Ok(Attempt {
                token: grant.map(|g| g.token),
                span,
            })
        });
    }
    let seen = match gate {
        None => None,
        Some(gate) => {
            let n = clients.len();
            let (table, most) = (&bed.lease_table, &std::sync::atomic::AtomicUsize::new(0));
            let waited = harness::wait::until(
                &format!(
                    "all {n} contenders' statements wait at the server behind the held lease table"
                ),
                bed.params().wait_timeout,
                || async move {
                    let now = usize::try_from(table.waiting_for_the_table().await?).unwrap_or(0);
                    most.fetch_max(now, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, fencing::Error>(now >= n)
                },
            )
            .await;
            let after = match waited {
                Ok(after) => after,
                // Fewer waited than there are contenders: the check says how many.
                Err(harness::wait::WaitError::TimedOut { after, .. }) => after,
                Err(e) => return Err(e.into()),
            };
            gate.open().await?;
            Some(GateSeen {
                waiting: most.load(std::sync::atomic::Ordering::Relaxed),
                after,
            })
        }
    };
    let mut attempts = Vec::with_capacity(clients.len());
    while let Some(joined) = set.join_next().await {
        attempts.push(joined??);
    }
    Ok((attempts, seen))
}

/// What the lab saw of its gate on the lease table: the most statements waiting for it at once,
/// and how long after the contenders were started that many were seen (or the wait gave up).
struct GateSeen {
    waiting: usize,
    after: Duration,
}

/// The peak number of intervals (start, end, in µs) under way at one instant, and the spread of
/// their starts (µs).
fn overlap(spans: &[(i64, i64)]) -> (usize, i64) {
    let mut edges: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // At equal instants, count ends before starts: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        peak = peak.max(now);
    }
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.0).max();
    let spread = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => 0,
    };
    (peak as usize, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(from_us: i64, to_us: i64) -> (i64, i64) {
        (1_000_000 + from_us, 1_000_000 + to_us)
    }

    #[test]
    fn overlap_counts_statements_executing_together() {
        assert_eq!(overlap(&[at(0, 10), at(5, 15), at(6, 7)]).0, 3);
        assert_eq!(
            overlap(&[at(0, 10), at(10, 20)]).0,
            1,
            "touching is not overlapping"
        );
        assert_eq!(overlap(&[at(0, 10), at(20, 30)]), (1, 20));
    }
}
