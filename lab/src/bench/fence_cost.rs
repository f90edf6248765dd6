//! `lab bench --fence-cost N`: what the fence costs on the server, and what any check must cost,
//! measured with the noise of a shared machine taken into account. pgbench runs the same SQL
//! as the lab's writers (`-M prepared`, each client its own part) for five statements — the
//! write with no check (`unfenced-single`), the check's read alone, fenced-shared without its row
//! lock, fenced-shared, and the advisory-lock fence — at 16 and 64 writers, in `N` rounds, each
//! round in another order (rotated), so that a slow minute of the machine falls on every
//! statement alike. Per statement: the median over the rounds of its tx/s over unfenced-single's
//! in the same round, and the median CPU and WAL per transaction (the server's: its whole
//! process tree, [`super::ServerCost`]).

use std::fmt::Write as _;
use std::time::Duration;

use scenarios::Testbed;
use serde_json::json;

use super::stats::{percentile, sorted};
use super::{same_sql_cell, ADVISORY, CHECK_READ_ONLY, NO_ROW_LOCK};

/// The statements, in their first round's order, with what each is.
const STATEMENTS: [(&str, &str); 5] = [
    ("unfenced-single", "the write, no check"),
    (CHECK_READ_ONLY, "the check's read alone (not a fence)"),
    (NO_ROW_LOCK, "fenced-shared without FOR SHARE (not a fence)"),
    ("fenced-shared", "fenced-shared"),
    (ADVISORY, "fenced-advisory (advisory lock, PL/pgSQL)"),
];

/// The writer counts the goal names.
const WRITERS: [usize; 2] = [16, 64];

/// One statement's figures at one writer count, one value per round.
#[derive(Debug, Default, Clone)]
struct Rounds {
    ratio: Vec<f64>,
    per_sec: Vec<f64>,
    cpu_us: Vec<f64>,
    wal: Vec<f64>,
}

/// Measures every statement at every writer count `rounds` times on `bed`, each cell `duration`
/// long; the table, and the same figures as JSON.
pub(super) async fn measure(
    bed: &mut Testbed,
    pgbench: &std::path::Path,
    rounds: usize,
    duration: Duration,
) -> anyhow::Result<(String, serde_json::Value)> {
    let mut figures = vec![vec![Rounds::default(); STATEMENTS.len()]; WRITERS.len()];
    for round in 0..rounds {
        for (w, &n) in WRITERS.iter().enumerate() {
            let mut per_sec = vec![0.0; STATEMENTS.len()];
            let mut order: Vec<usize> = (0..STATEMENTS.len()).collect();
            order.rotate_left(round % STATEMENTS.len());
            for i in order {
                bed.reset().await?;
                let cell = same_sql_cell(bed, pgbench, STATEMENTS[i].0, n, duration).await?;
                per_sec[i] = cell.per_sec;
                let f = &mut figures[w][i];
                if cell.per_sec > 0.0 {
                    f.per_sec.push(cell.per_sec);
                }
                f.cpu_us.extend(cell.cpu_us_per_tx);
                f.wal.extend(cell.wal_per_tx);
            }
            eprintln!(
                "bench: fence cost, round {} of {rounds}, {n} writers: {}",
                round + 1,
                STATEMENTS
                    .iter()
                    .zip(&per_sec)
                    .map(|((name, _), r)| format!("{name} {r:.0}/s"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            // A cell that completed nothing (a loaded machine; the bench said so) has no ratio.
            for (i, r) in per_sec.iter().enumerate() {
                if per_sec[0] > 0.0 && *r > 0.0 {
                    figures[w][i].ratio.push(r / per_sec[0]);
                }
            }
        }
    }
    Ok((table(&figures, rounds, duration), to_json(&figures, rounds)))
}

fn median(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| percentile(&sorted(values.to_vec()), 0.5))
}

fn table(figures: &[Vec<Rounds>], rounds: usize, duration: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fence cost on the server: pgbench on the same SQL, {rounds} round(s) of {} ms per cell, medians",
        duration.as_millis()
    );
    let shown = |v: Option<f64>, unit: &str| v.map_or("?".to_owned(), |v| format!("{v:.0} {unit}"));
    for (w, &n) in WRITERS.iter().enumerate() {
        let _ = writeln!(
            out,
            "{n} writers: {:<48} {:>9} {:>7} {:>8} {:>7} {:>13}",
            "statement", "tx/s", "× write", "CPU/tx", "WAL/tx", "ratio range"
        );
        for (i, (_, what)) in STATEMENTS.iter().enumerate() {
            let f = &figures[w][i];
            let range = sorted(f.ratio.clone());
            let _ = writeln!(
                out,
                "            {what:<48} {:>9} {:>6.2}× {:>8} {:>7} {:>13}",
                shown(median(&f.per_sec), "/s"),
                median(&f.ratio).unwrap_or(f64::NAN),
                shown(median(&f.cpu_us), "µs"),
                shown(median(&f.wal), "B"),
                match (range.first(), range.last()) {
                    (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}"),
                    _ => "?".to_owned(),
                }
            );
        }
        let cpu = |i: usize| median(&figures[w][i].cpu_us);
        if let (Some(write), Some(read), Some(shared), Some(advisory)) =
            (cpu(0), cpu(1), cpu(3), cpu(4))
        {
            let _ = writeln!(
                out,
                "            the floor at {n} writers: the check's read costs {:+.0} µs of server CPU per write; \
                 ordering it against an advance costs {:+.0} µs more with FOR SHARE, {:+.0} µs with the advisory lock",
                read - write,
                shared - read,
                advisory - read
            );
        }
    }
    out
}

fn to_json(figures: &[Vec<Rounds>], rounds: usize) -> serde_json::Value {
    let mut cells = Vec::new();
    for (w, &n) in WRITERS.iter().enumerate() {
        for (i, (name, what)) in STATEMENTS.iter().enumerate() {
            let f = &figures[w][i];
            cells.push(json!({
                "statement": name, "what": what, "writers": n,
                "tx_per_sec": f.per_sec, "ratio_to_unfenced_single": f.ratio,
                "server_cpu_us_per_tx": f.cpu_us, "wal_bytes_per_tx": f.wal,
                "median_ratio": median(&f.ratio), "median_cpu_us": median(&f.cpu_us),
            }));
        }
    }
    json!({ "rounds": rounds, "cells": cells })
}
