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
//! tasks — each acquire statement reports, by the database clock, when the server received it
//! (`statement_timestamp()`) and when its `INSERT … ON CONFLICT` was done, lock waits included
//! (`clock_timestamp()`, read after it in the same statement). Each round checks that at least
//! two of those executions were under way at one instant, and reports the peak and the spread of
//! the statements' starts. That check can fail, and does where the race does not happen: with
//! `--contenders 2` the server often runs the two statements one after the other (seen on a
//! 2-core machine), which a client-side measure — both requests in flight together — would have
//! hidden. With the default 16 the peak was 7–15 in every run seen; with 4 to 8, 2 or more.

use std::sync::Arc;
use std::time::Duration;

use fencing::lease::lab_only::ServerSpan;
use harness::evidence::{Mark, Recorder};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::lab::{shown, LEASE};
use crate::{Lab, Outcome, Scenario};

pub struct F3;

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
    fn id(&self) -> &'static str {
        "F3"
    }

    fn on_lock_service(&self, _: &str) -> Result<(), &'static str> {
        Ok(())
    }

    fn runs_alone(&self) -> bool {
        // The contenders must overlap on the server: the load of another experiment is noise.
        true
    }

    fn title(&self) -> &'static str {
        "concurrent acquisition: contenders released by a barrier race for the lease in three rounds"
    }

    fn checks(&self) -> usize {
        12
    }

    fn checks_on(&self, store: &str) -> usize {
        if fencing::lease::service_of(store).is_some() {
            // A lock service: no last-moments round.
            self.checks() - 1
        } else {
            self.checks()
        }
    }

    fn on_containers(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, lab: &'a mut Lab, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let n = lab.params.contenders;
            let ttl = lab.params.ttl;
            let on_service = lab.service.is_some();
            let mut clients = Vec::with_capacity(n);
            for _ in 0..n {
                clients.push(if on_service {
                    Contender::Service(lab.own_store_client().await?)
                } else {
                    Contender::Table(lab.own_lease_client().await?)
                });
            }
            rec.note(format!(
                "{n} contenders, each on its own connection, TTL {} ms",
                ttl.as_millis()
            ));

            let rounds = [
                ("round 1 (fresh lease)", 1usize, Some(1i64)),
                ("round 2 (lease still valid)", 0, None),
                ("round 3 (after expiry by the database clock)", 1, Some(2)),
            ];
            let mut total = 0;
            for (round, (label, want_winners, want_token)) in rounds.into_iter().enumerate() {
                if round == 1 {
                    let row = lab.lease.inspect(LEASE).await?;
                    rec.check_that(
                        "before round 2 the lease is still valid by the database clock",
                        row.as_ref().is_some_and(|r| !r.expired),
                        format_args!("expires_at = {}", shown(row.map(|r| r.expires_at))),
                    );
                }
                if round == 2 && !on_service {
                    last_moments(lab, rec, &clients, ttl).await?;
                }
                if round == 2 && on_service {
                    // A lock service's holding may be kept alive by its client on its own (a
                    // ZooKeeper session's heartbeats): every contender drops its client — its
                    // connection ends without a word, as a holder's that died — and opens a new
                    // one; the winner's holding ends when the service expires it.
                    clients.clear();
                    for _ in 0..n {
                        clients.push(Contender::Service(lab.own_store_client().await?));
                    }
                    rec.note("the contenders dropped their clients of rounds 1–2 (nothing released) and opened new ones");
                }
                if round == 2 {
                    let waited = lab.until_lease_expired("the lease").await?;
                    rec.note(format!(
                        "the lease expired by {} after a wait of {} ms",
                        lab.expiry_clock(),
                        waited.as_millis()
                    ));
                }
                let attempts = race(&clients, ttl).await?;
                total += attempts.len();
                let winners: Vec<i64> = attempts.iter().filter_map(|a| a.token).collect();
                rec.check(format!("{label}: winners"), &want_winners, &winners.len());
                if let Some(token) = want_token {
                    lab.check_token(
                        rec,
                        format!("{label}: the winner's token"),
                        token,
                        winners.first().copied(),
                    );
                }
                let spans: Vec<ServerSpan> = attempts.iter().map(|a| a.span).collect();
                let (peak, spread_us) = overlap(&spans);
                rec.check_that(
                    if on_service {
                        format!(
                            "{label}: at least 2 acquire requests were in flight at once (sent \
                             before another's answer came back, by this host's monotonic clock; a \
                             lock service tells no execution time)"
                        )
                    } else {
                        format!(
                            "{label}: at least 2 acquire statements were executing on the server at once \
                             (statement_timestamp() to the end of the INSERT, by the database clock)"
                        )
                    },
                    peak >= 2,
                    format_args!(
                        "peak {peak} of {n} executing at one instant; their starts spread over {spread_us} µs"
                    ),
                );
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
            let row = lab.lease.inspect(LEASE).await?;
            let holdings = usize::from(row.is_some());
            lab.check_token(rec, "the final token", 2, row.map(|r| r.token));
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
                    &lab.lease_table.row_count().await?,
                );
            }
            Ok(())
        })
    }
}

/// The last-moments round: once the lease has a quarter of its TTL or less left by the database
/// clock, every contender tries again; none judged before the expiry may win.
async fn last_moments(
    lab: &Lab,
    rec: &mut Recorder,
    clients: &[Contender],
    ttl: Duration,
) -> anyhow::Result<()> {
    let label = "round 2b (the lease's last moments, a quarter of its TTL or less left)";
    let within_ms = ttl.as_secs_f64() * 1e3 / 4.0;
    let lease = &lab.lease;
    harness::wait::until(
        &format!("the lease has {within_ms:.0} ms or less left by the database clock"),
        lab.params.wait_timeout,
        || async move {
            let row = lease.inspect(LEASE).await?;
            Ok::<_, fencing::Error>(row.is_none_or(|r| r.remaining_ms() <= within_ms))
        },
    )
    .await?;
    let row = lab
        .lease
        .inspect(LEASE)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the lease row vanished before its last moments"))?;
    let expires_us = row.expires_epoch * 1e6;
    let attempts = race(clients, ttl).await?;
    let judged_before: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| (a.span.judged_us as f64) < expires_us)
        .collect();
    let early_winners: Vec<i64> = judged_before.iter().filter_map(|a| a.token).collect();
    let late_winners = attempts.iter().filter(|a| a.token.is_some()).count() - early_winners.len();
    rec.check_that(
        format!("{label}: no contender judged before expires_at wins"),
        !judged_before.is_empty() && early_winners.is_empty(),
        format_args!(
            "{} of {} statements judged before expires_at {} ({:.0} ms left when the round began): \
             {} winner(s) among them{}",
            judged_before.len(),
            attempts.len(),
            row.expires_at,
            row.remaining_ms(),
            early_winners.len(),
            if late_winners > 0 {
                format!("; {late_winners} winner(s) judged after it (the machine was slow)")
            } else {
                String::new()
            }
        ),
    );
    rec.step(
        Mark::Info,
        "contenders",
        label,
        early_winners.first().copied(),
        format!("{} winner(s)", early_winners.len() + late_winners),
        None,
    );
    Ok(())
}

/// Releases every client at once through a barrier; each tries one acquire.
async fn race(clients: &[Contender], ttl: Duration) -> anyhow::Result<Vec<Attempt>> {
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
    let mut attempts = Vec::with_capacity(clients.len());
    while let Some(joined) = set.join_next().await {
        attempts.push(joined??);
    }
    Ok(attempts)
}

/// The peak number of statements executing at one instant on the server, and the spread of
/// their start times (µs).
fn overlap(spans: &[ServerSpan]) -> (usize, i64) {
    let mut edges: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|s| [(s.started_us, 1), (s.finished_us, -1)])
        .collect();
    // At equal instants, count ends before starts: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        peak = peak.max(now);
    }
    let first = spans.iter().map(|s| s.started_us).min();
    let last = spans.iter().map(|s| s.started_us).max();
    let spread = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => 0,
    };
    (peak as usize, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(from_us: i64, to_us: i64) -> ServerSpan {
        ServerSpan {
            started_us: 1_000_000 + from_us,
            finished_us: 1_000_000 + to_us,
            judged_us: 1_000_000 + from_us,
        }
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
