//! `lab chaos --sweep`: seed 004's open question — how likely is a pause to do harm, when
//! nobody chose its moment? Over many seeded runs, each injected pause is put in a bucket by its
//! length as a fraction of the TTL, and counted as harmful when the checker blames an I3
//! violation on it (a write of the paused holder that went back in token order, at that scope).
//! The share is given per bucket, pooled over every run, with its spread over the runs.

use std::fmt::Write as _;
use std::time::Duration;

use super::checker::Injected;
use super::schedule::FaultKind;
use super::{Found, CONTROL_SCOPE, SCOPE};

/// The buckets: pause length / TTL in `[lo, hi)`.
pub const BUCKETS: [(f64, f64); 6] = [
    (0.0, 0.25),
    (0.25, 0.5),
    (0.5, 1.0),
    (1.0, 1.5),
    (1.5, 2.0),
    (2.0, f64::INFINITY),
];

/// One run's pauses: (length / TTL, I3 violations blamed at the scope under test, at the
/// unfenced control scope).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub seed: u64,
    pub pauses: Vec<(f64, usize, usize)>,
}

impl Run {
    pub fn of(seed: u64, found: &Found, ttl: Duration) -> Run {
        let pauses = found
            .injected
            .iter()
            .zip(&found.verdict.fault_effects)
            .filter(|(f, _)| f.kind == FaultKind::Pause)
            .map(|(f, effects): (&Injected, _)| {
                let get = |s: &str| effects.get(s).copied().unwrap_or(0);
                (
                    (f.end_ms - f.start_ms) / ttl.as_secs_f64() / 1000.0,
                    get(SCOPE),
                    get(CONTROL_SCOPE),
                )
            })
            .collect();
        Run { seed, pauses }
    }
}

/// The table: per bucket, the pauses, the share that broke I3 at the unfenced control (pooled,
/// and min–max over the runs that had such pauses), and how many broke it at the fenced scope.
pub fn table(runs: &[Run], mode: &str) -> String {
    let mut text = format!(
        "| pause / TTL | pauses | led to an I3 violation, unfenced (pooled) | spread over {} runs (min–max) | led to an I3 violation, {mode} |\n|---|---|---|---|---|\n",
        runs.len()
    );
    for (lo, hi) in BUCKETS {
        let inside = |p: &&(f64, usize, usize)| p.0 >= lo && p.0 < hi;
        let all: Vec<&(f64, usize, usize)> = runs
            .iter()
            .flat_map(|r| r.pauses.iter().filter(inside))
            .collect();
        let harmful = all.iter().filter(|p| p.2 > 0).count();
        let fenced = all.iter().filter(|p| p.1 > 0).count();
        let shares: Vec<f64> = runs
            .iter()
            .filter_map(|r| {
                let mine: Vec<_> = r.pauses.iter().filter(inside).collect();
                (!mine.is_empty())
                    .then(|| mine.iter().filter(|p| p.2 > 0).count() as f64 / mine.len() as f64)
            })
            .collect();
        let spread = if shares.is_empty() {
            "—".to_owned()
        } else {
            let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
            let max = shares.iter().copied().fold(0.0, f64::max);
            format!("{:.0}–{:.0} %", min * 100.0, max * 100.0)
        };
        let bucket = if hi.is_infinite() {
            format!("≥ {lo}")
        } else {
            format!("{lo}–{hi}")
        };
        let share = if all.is_empty() {
            "—".to_owned()
        } else {
            format!(
                "{harmful} of {} ({:.0} %)",
                all.len(),
                harmful as f64 * 100.0 / all.len() as f64
            )
        };
        let _ = writeln!(
            text,
            "| {bucket} | {} | {share} | {spread} | {fenced} |",
            all.len()
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_fall_in_their_bucket_and_shares_are_pooled_with_their_spread() {
        let runs = vec![
            Run {
                seed: 1,
                pauses: vec![(0.1, 0, 0), (1.2, 0, 1), (1.4, 0, 0)],
            },
            Run {
                seed: 2,
                pauses: vec![(1.1, 0, 2), (2.4, 0, 0)],
            },
        ];
        let t = table(&runs, "fenced-scope");
        assert!(
            t.contains("| 0–0.25 | 1 | 0 of 1 (0 %) | 0–0 % | 0 |"),
            "{t}"
        );
        assert!(
            t.contains("| 1–1.5 | 3 | 2 of 3 (67 %) | 50–100 % | 0 |"),
            "{t}"
        );
        assert!(t.contains("| 0.5–1 | 0 | — | — | 0 |"), "{t}");
        assert!(t.contains("| ≥ 2 | 1 | 0 of 1 (0 %) | 0–0 % | 0 |"), "{t}");
    }
}
