//! The checker: reads the recorded history (every operation's invocation and completion, the
//! nemesis's faults) and the database's own records (every committed part version with its
//! commit time, every version of the lease row, the final parts) and says which invariant broke
//! where, each violation with the smallest excerpt that shows it.
//!
//! - **I2** (token regression, [`regression`](crate::kit::regression)): no token acknowledged to two
//!   holdings; a grant that completed before another was invoked has the smaller token (real-time
//!   order). An acquire with no answer (`info`) is resolved from the lease store's record where it
//!   names that holder; the record itself is checked too (a token written for two holders, or a
//!   smaller one after a greater, by the store's commit order).
//! - **I3** per scope: in commit order, an accepted write never has a smaller token than one that
//!   committed before it. Commits at the same microsecond are taken as concurrent.
//! - **Durability**: every write acknowledged as accepted is among the committed versions, and
//!   each part's final content is its last committed version. A write whose outcome is unknown
//!   (`info`: killed mid-write, server gone) is resolved from the committed versions, never
//!   counted as failed.
//! - **Stale writes**: committed versions whose token is below a token the lease store had
//!   granted before they committed (database clock) — the fence's whole business.
//! - **Liveness of the fence**: a write is rejected only when the resource had accepted a
//!   greater token in its scope before it logged the rejection (its attempt log, its clock) —
//!   else the fence turned away a holding it had no reason to (a grant the resource never saw
//!   excuses nothing). A rejection the holder reported that the log does not have is counted
//!   apart (`unlogged_rejections`).
//! - **I1** (efficiency only): holdings (grant to expiry or release, database clock) that
//!   overlap, as a statistic.
//!
//! One file per invariant, each with its tests: `token_order.rs` (I2), `floor.rs` (I3),
//! `durability.rs`, `stale.rs` (stale writes and the faults blamed for them), `liveness.rs` (the
//! fence's liveness), `holdings.rs` (I1); `controls.rs` holds the checker's own controls, and
//! `leases.rs` the verdict of a run spread over several leases.

use std::collections::BTreeMap;

use harness::observe::{Attempt, LeaseVersion, PartVersion};
use holder_protocol::OpKind;

use super::schedule::FaultKind;

mod controls;
mod durability;
#[cfg(test)]
mod fixtures;
mod floor;
mod holdings;
mod leases;
mod liveness;
mod stale;
mod token_order;

pub use controls::{controls, Control};
pub use leases::check_leases;

use durability::check_durability;
use floor::check_i3;
use holdings::check_i1;
use liveness::check_liveness;
use stale::check_stale;
use token_order::check_i2;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It happened (granted, accepted, renewed, released).
    Ok,
    /// It is known not to have happened (refused, rejected).
    Fail,
    /// Unknown: an error, or no completion at all (killed, or the run ended while it ran).
    Info,
}

/// One operation of the history (written as a [`Line::Op`](super::history::Line::Op)).
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// The holder process: slot and incarnation, `h2.1`.
    pub process: String,
    pub id: u64,
    pub f: OpKind,
    pub token: i64,
    pub scope: String,
    pub part: String,
    /// On the lab's monotonic clock, ms from the start of the run.
    pub invoke_ms: f64,
    pub complete_ms: Option<f64>,
    pub outcome: Outcome,
}

impl Op {
    /// What a write stores as its content: the process and the operation.
    pub fn content(&self) -> String {
        format!("{}#{}", self.process, self.id)
    }

    fn line(&self) -> String {
        let done = self
            .complete_ms
            .map_or_else(|| "never completed".into(), |c| format!("{c:.0} ms"));
        let place = if self.f == OpKind::Write {
            format!(" {}/{}", self.scope, self.part)
        } else {
            String::new()
        };
        format!(
            "{} op {} {}{place} token={} invoked {:.0} ms, completed {done}: {:?}",
            self.process,
            self.id,
            self.f.as_str(),
            self.token,
            self.invoke_ms,
            self.outcome
        )
    }
}

/// A fault as it was carried out (times on the lab's monotonic clock, ms from the start;
/// written as a [`Line::Fault`](super::history::Line::Fault)).
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub kind: FaultKind,
    /// The holder process it hit (`-` for a crash).
    pub process: String,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// One broken invariant, with the history lines that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub what: String,
    pub excerpt: Vec<String>,
    /// The holder process whose operation broke it, and when that operation completed (ms):
    /// where the timeline marks it.
    pub by: Option<(String, u64)>,
}

/// Per fault kind: how many were injected, how many committed stale writes they made, how many
/// writes the fence rejected after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultRow {
    pub injected: usize,
    pub stale_accepted: BTreeMap<String, usize>,
    pub rejected: BTreeMap<String, usize>,
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub i2: Vec<Violation>,
    /// Grants nobody acknowledged that a later grant reused or undercut
    /// ([`regression::Kind::LostUnacknowledged`](crate::kit::regression::Kind::LostUnacknowledged)):
    /// reported apart from I2.
    pub lost_grants: Vec<Violation>,
    /// Per scope.
    pub i3: BTreeMap<String, Vec<Violation>>,
    pub durability: Vec<Violation>,
    /// Per scope: writes rejected although no greater token had been granted.
    pub liveness: BTreeMap<String, Vec<Violation>>,
    /// Per scope: committed versions with a superseded token.
    pub stale: BTreeMap<String, usize>,
    /// Writes with an unknown outcome: (applied, not applied).
    pub info_writes: (usize, usize),
    /// Acquires with an unknown outcome: (resolved from the lease store's record as a grant,
    /// not found there).
    pub info_acquires: (usize, usize),
    /// Writes a holder reported rejected that the resource's attempt log has no rejection for:
    /// the fence's liveness could not be judged for them.
    pub unlogged_rejections: usize,
    pub holdings: usize,
    pub overlapping_holdings: usize,
    /// Whether the lease store's record was there to read (a lock service keeps none the lab
    /// reads): without it holdings and I1 are not counted, and stale writes are counted from
    /// the resource's own records as a lower bound ([`check_stale`]).
    pub lease_record: bool,
    /// Tokens the resource saw (a committed version or a logged attempt) that the lease store's
    /// record lacks, when it has one: each one's grant is bounded by its first sighting.
    pub unrecorded_grants: usize,
    /// Per scope: writes acknowledged as accepted (a fence that accepts none guards nothing).
    pub accepted: BTreeMap<String, usize>,
    /// Per fault kind (and `none`): see [`FaultRow`].
    pub by_fault: BTreeMap<String, FaultRow>,
    /// Per injected fault (in [`Observed::faults`]' order): the I3 violations it is blamed for,
    /// per scope — the write that went back in token order came from the process it hit.
    pub fault_effects: Vec<BTreeMap<String, usize>>,
    pub ops: usize,
    /// The checker's own controls on this run's history ([`controls`](fn@controls)).
    pub controls: Vec<Control>,
}

/// Everything the checker reads.
pub struct Observed<'a> {
    pub ops: &'a [Op],
    pub faults: &'a [Injected],
    pub parts: &'a [PartVersion],
    pub final_parts: &'a [(String, String, String, i64)],
    pub lease: &'a [LeaseVersion],
    /// The resource's own attempt log.
    pub attempts: &'a [Attempt],
}

/// The checker's verdict on `o`, with its controls ([`controls`](fn@controls)) judged on `o` too.
pub fn check(o: &Observed<'_>, scope: &str) -> Verdict {
    let mut v = judge(o);
    v.controls = controls(o, &v, scope);
    v
}

/// The checker's verdict on `o` alone, without controls.
fn judge(o: &Observed<'_>) -> Verdict {
    let mut v = Verdict {
        ops: o.ops.len(),
        fault_effects: vec![BTreeMap::new(); o.faults.len()],
        ..Verdict::default()
    };
    check_i2(o, &mut v);
    check_i3(o, &mut v);
    check_durability(o, &mut v);
    check_liveness(o, &mut v);
    check_stale(o, &mut v);
    check_i1(o, &mut v);
    for op in o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Write && op.outcome == Outcome::Ok)
    {
        *v.accepted.entry(op.scope.clone()).or_default() += 1;
    }
    v
}

/// Where the timeline marks a violation `op` made.
fn mark(op: &Op) -> Option<(String, u64)> {
    Some((
        op.process.clone(),
        op.complete_ms.unwrap_or(op.invoke_ms) as u64,
    ))
}

/// The operation that wrote `version`, if the history has it.
fn writer_of<'o>(o: &'o Observed<'_>, version: &PartVersion) -> Option<&'o Op> {
    o.ops
        .iter()
        .find(|op| op.f == OpKind::Write && op.content() == version.content)
}

fn version_line(o: &Observed<'_>, version: &PartVersion) -> String {
    let by = writer_of(o, version).map_or_else(|| "an unknown writer".into(), Op::line);
    format!(
        "{}/{} token={} committed at {} µs (db clock), by {by}",
        version.scope,
        version.part,
        version.token,
        version.commit_us.unwrap_or(version.at_us)
    )
}
