//! F3 — concurrent acquisition. The fault: N contenders, each on its own connection, released
//! together by a barrier, in three rounds: on a fresh lease, while it is held, and after it
//! expired by the database clock. Property (I1, I2): exactly one winner on a free lease, none on a
//! held one, and the token advances by one per winning round.
//!
//! To show that the race was real, each attempt's send and reply are timed on the monotonic
//! clock, and the peak number of attempts in flight at one instant is reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::evidence::{Mark, Recorder};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::lab::{shown, LEASE};
use crate::{Lab, Outcome, Scenario};

pub struct F3;

/// One contender's attempt: the token it won, if any, and when it was in flight.
struct Attempt {
    token: Option<i64>,
    sent: Instant,
    answered: Instant,
}

impl Scenario for F3 {
    fn id(&self) -> &'static str {
        "F3"
    }

    fn title(&self) -> &'static str {
        "concurrent acquisition: contenders released by a barrier race for the lease in three rounds"
    }

    fn checks(&self) -> usize {
        11
    }

    fn run<'a>(&'a self, lab: &'a mut Lab, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let n = lab.params.contenders;
            let ttl = lab.params.ttl;
            let mut clients = Vec::with_capacity(n);
            for _ in 0..n {
                clients.push(lab.own_lease_client().await?);
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
                if round == 2 {
                    let waited = lab.until_lease_expired("the lease").await?;
                    rec.note(format!(
                        "the lease expired by the database clock after a wait of {} ms",
                        waited.as_millis()
                    ));
                }
                let attempts = race(&clients, ttl).await?;
                total += attempts.len();
                let winners: Vec<i64> = attempts.iter().filter_map(|a| a.token).collect();
                rec.check(format!("{label}: winners"), &want_winners, &winners.len());
                if let Some(token) = want_token {
                    rec.check(
                        format!("{label}: the winner's token"),
                        &token.to_string(),
                        &shown(winners.first()),
                    );
                }
                let (peak, spread) = overlap(&attempts);
                rec.check_that(
                    format!("{label}: the attempts overlapped in time"),
                    peak >= 2,
                    format_args!(
                        "peak {peak} of {n} attempts in flight at one instant; sends spread over {} µs",
                        spread.as_micros()
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
                "{total} attempts in all (3 rounds × {n} contenders)"
            ));
            let row = lab.lease.inspect(LEASE).await?;
            rec.check("the final token", "2", &shown(row.map(|r| r.token)));
            rec.check("rows in the lease table", &1, &lab.lease.row_count().await?);
            Ok(())
        })
    }
}

/// Releases every client at once through a barrier; each tries one acquire.
async fn race(
    clients: &[fencing::lease::LeaseStore],
    ttl: Duration,
) -> anyhow::Result<Vec<Attempt>> {
    let barrier = Arc::new(Barrier::new(clients.len()));
    let mut set = JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, barrier) = (client.clone(), barrier.clone());
        set.spawn(async move {
            let holder = format!("contender-{:02}", i + 1);
            barrier.wait().await;
            let sent = Instant::now();
            let grant = client.acquire(LEASE, &holder, ttl).await?;
            let answered = Instant::now();
            anyhow::Ok(Attempt {
                token: grant.map(|g| g.token),
                sent,
                answered,
            })
        });
    }
    let mut attempts = Vec::with_capacity(clients.len());
    while let Some(joined) = set.join_next().await {
        attempts.push(joined??);
    }
    Ok(attempts)
}

/// The peak number of attempts in flight at one instant, and the spread of their send times.
fn overlap(attempts: &[Attempt]) -> (usize, Duration) {
    let mut edges: Vec<(Instant, i32)> = attempts
        .iter()
        .flat_map(|a| [(a.sent, 1), (a.answered, -1)])
        .collect();
    // At equal instants, count ends before starts: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        peak = peak.max(now);
    }
    let first = attempts.iter().map(|a| a.sent).min();
    let last = attempts.iter().map(|a| a.sent).max();
    let spread = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => Duration::ZERO,
    };
    (peak as usize, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, from_us: u64, to_us: u64) -> Attempt {
        Attempt {
            token: None,
            sent: base + Duration::from_micros(from_us),
            answered: base + Duration::from_micros(to_us),
        }
    }

    #[test]
    fn overlap_counts_attempts_in_flight_together() {
        let t = Instant::now();
        assert_eq!(overlap(&[at(t, 0, 10), at(t, 5, 15), at(t, 6, 7)]).0, 3);
        assert_eq!(
            overlap(&[at(t, 0, 10), at(t, 10, 20)]).0,
            1,
            "touching is not overlapping"
        );
        assert_eq!(
            overlap(&[at(t, 0, 10), at(t, 20, 30)]),
            (1, Duration::from_micros(20))
        );
    }
}
