//! The checker: reads the recorded history (every operation's invocation and completion, the
//! nemesis's faults) and the database's own records (every committed part version with its
//! commit time, every version of the lease row, the final parts) and says which invariant broke
//! where, each violation with the smallest excerpt that shows it.
//!
//! - **I2** (token regression, [`regression`]): no token acknowledged to two holdings; a grant
//!   that completed before another was invoked has the smaller token (real-time order). An
//!   acquire with no answer (`info`) is resolved from the lease store's record where it names
//!   that holder; the record itself is checked too (a token written for two holders, or a
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

use std::collections::BTreeMap;

use harness::observe::{Attempt, LeaseVersion, PartVersion};
use holder_protocol::OpKind;

use super::regression::{self, regressions, GrantSeen};
use super::schedule::FaultKind;

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
    /// ([`regression::Kind::LostUnacknowledged`]): reported apart from I2.
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
    /// Per scope: writes acknowledged as accepted (a fence that accepts none guards nothing).
    pub accepted: BTreeMap<String, usize>,
    /// Per fault kind (and `none`): see [`FaultRow`].
    pub by_fault: BTreeMap<String, FaultRow>,
    /// Per injected fault (in [`Observed::faults`]' order): the I3 violations it is blamed for,
    /// per scope — the write that went back in token order came from the process it hit.
    pub fault_effects: Vec<BTreeMap<String, usize>>,
    pub ops: usize,
    /// The checker's own controls on this run's history ([`controls`]).
    pub controls: Vec<Control>,
}

impl Verdict {
    /// Adds one lease's verdict `v` to this one (the merge of [`check_leases`]): its violations
    /// named by `lease`, its scopes renamed by `rename`, its counts summed, its fault effects
    /// moved to the run's fault indices (`fault_ix[i]` is the run's index of `v`'s fault `i`).
    /// Faults injected are not summed here: a fault that hit every lease is counted once by the
    /// caller. The controls and `ops` are the caller's too.
    fn absorb(
        &mut self,
        v: Verdict,
        lease: &str,
        rename: impl Fn(&String) -> String,
        fault_ix: &[usize],
    ) {
        let named = |list: Vec<Violation>| {
            list.into_iter().map(|x| Violation {
                what: format!("lease {lease}: {}", x.what),
                ..x
            })
        };
        self.i2.extend(named(v.i2));
        self.lost_grants.extend(named(v.lost_grants));
        self.durability.extend(named(v.durability));
        for (key, list) in v.i3 {
            self.i3.entry(rename(&key)).or_default().extend(named(list));
        }
        for (key, list) in v.liveness {
            self.liveness
                .entry(rename(&key))
                .or_default()
                .extend(named(list));
        }
        for (key, n) in v.stale {
            *self.stale.entry(rename(&key)).or_default() += n;
        }
        for (key, n) in v.accepted {
            *self.accepted.entry(rename(&key)).or_default() += n;
        }
        self.info_writes.0 += v.info_writes.0;
        self.info_writes.1 += v.info_writes.1;
        self.info_acquires.0 += v.info_acquires.0;
        self.info_acquires.1 += v.info_acquires.1;
        self.unlogged_rejections += v.unlogged_rejections;
        self.holdings += v.holdings;
        self.overlapping_holdings += v.overlapping_holdings;
        self.lease_record |= v.lease_record;
        for (kind, row) in v.by_fault {
            let to = self.by_fault.entry(kind).or_default();
            for (key, n) in row.stale_accepted {
                *to.stale_accepted.entry(rename(&key)).or_default() += n;
            }
            for (key, n) in row.rejected {
                *to.rejected.entry(rename(&key)).or_default() += n;
            }
        }
        for (i, effects) in v.fault_effects.into_iter().enumerate() {
            for (key, n) in effects {
                *self.fault_effects[fault_ix[i]]
                    .entry(rename(&key))
                    .or_default() += n;
            }
        }
    }
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

/// The checker's verdict on `o`, with its controls ([`controls`]) judged on `o` too.
pub fn check(o: &Observed<'_>, scope: &str) -> Verdict {
    let mut v = judge(o);
    v.controls = controls(o, &v, scope);
    v
}

/// The checker's verdict on a run whose holders were spread over `leases` leases
/// ([`super::lease_of`]): each lease judged on its own — its holders' operations and faults, its
/// rows of the lease store's record, its two scopes at the resource — for tokens are a lease's
/// own (two leases may both grant token 5). The verdicts are summed, each lease's scopes counted
/// under the names of one lease's ([`super::SCOPE`], [`super::CONTROL_SCOPE`]) and each
/// violation named by its lease; the checker's own controls are planted on the first lease.
/// One lease: [`check`].
pub fn check_leases(o: &Observed<'_>, leases: usize) -> Verdict {
    use super::{control_of, lease_index, lease_of, scope_of, CONTROL_SCOPE, SCOPE};
    if leases <= 1 {
        return check(o, SCOPE);
    }
    let mut merged = Verdict {
        ops: o.ops.len(),
        fault_effects: vec![BTreeMap::new(); o.faults.len()],
        ..Verdict::default()
    };
    for k in 0..leases {
        let mine = |process: &str| lease_index(process, leases) == Some(k);
        let (scope, control) = (scope_of(k, leases), control_of(k, leases));
        let at = |s: &String| *s == scope || *s == control;
        let ops: Vec<Op> = o
            .ops
            .iter()
            .filter(|op| mine(&op.process))
            .cloned()
            .collect();
        // A holder's fault is its lease's; one that hits every holder (a crash) is each lease's.
        let fault_ix: Vec<usize> = (0..o.faults.len())
            .filter(|&i| lease_index(&o.faults[i].process, leases).is_none_or(|j| j == k))
            .collect();
        let faults: Vec<Injected> = fault_ix.iter().map(|&i| o.faults[i].clone()).collect();
        let parts: Vec<PartVersion> = o.parts.iter().filter(|p| at(&p.scope)).cloned().collect();
        let final_parts: Vec<(String, String, String, i64)> =
            o.final_parts.iter().filter(|p| at(&p.0)).cloned().collect();
        let lease: Vec<LeaseVersion> = o
            .lease
            .iter()
            .filter(|l| mine(&l.holder))
            .cloned()
            .collect();
        let attempts: Vec<Attempt> = o
            .attempts
            .iter()
            .filter(|a| at(&a.scope))
            .cloned()
            .collect();
        let one = Observed {
            ops: &ops,
            faults: &faults,
            parts: &parts,
            final_parts: &final_parts,
            lease: &lease,
            attempts: &attempts,
        };
        let v = judge(&one);
        if k == 0 {
            merged.controls = controls(&one, &v, &scope);
        }
        let name = lease_of(k, leases);
        let rename = |key: &String| {
            if *key == scope {
                SCOPE.to_owned()
            } else if *key == control {
                CONTROL_SCOPE.to_owned()
            } else {
                key.clone()
            }
        };
        merged.absorb(v, &name, rename, &fault_ix);
    }
    // Each fault once, whichever leases it hit.
    for f in o.faults {
        merged
            .by_fault
            .entry(f.kind.as_str().into())
            .or_default()
            .injected += 1;
    }
    merged
}

/// One of the checker's own controls: a flaw planted in a copy of the run's history, which the
/// checker must find there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// The flaw and what must show it.
    pub what: String,
    pub shown: bool,
    pub evidence: String,
}

/// The checker's controls, each on a copy of this run's own history with one flaw planted — the
/// way the unfenced scope controls I3, for the invariants nothing in a fenced run breaks: one
/// token acknowledged again to another holding (I2), an acknowledged write missing from the
/// committed versions (durability), an equal token rejected at `scope` (the fence's liveness).
/// A checker that stopped seeing one fails its control; a run too thin to plant one in fails
/// it too, saying so.
pub fn controls(o: &Observed<'_>, v: &Verdict, scope: &str) -> Vec<Control> {
    let mut found = Vec::new();

    let what = "I2: a token acknowledged again, to a holding planted after its own, is found";
    let last_grant = o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Acquire && op.outcome == Outcome::Ok)
        .max_by(|a, b| {
            a.complete_ms
                .unwrap_or(0.0)
                .total_cmp(&b.complete_ms.unwrap_or(0.0))
        });
    found.push(match last_grant {
        Some(g) => {
            let done = g.complete_ms.unwrap_or(g.invoke_ms);
            let mut ops = o.ops.to_vec();
            ops.push(Op {
                process: "planted.0".into(),
                id: 1,
                f: OpKind::Acquire,
                token: g.token,
                scope: g.scope.clone(),
                part: g.part.clone(),
                invoke_ms: done + 1.0,
                complete_ms: Some(done + 2.0),
                outcome: Outcome::Ok,
            });
            let planted = judge(&Observed { ops: &ops, ..*o });
            let new = planted.i2.len().saturating_sub(v.i2.len());
            Control {
                what: what.into(),
                shown: planted.i2.iter().any(|x| x.what.contains("planted.0")),
                evidence: format!(
                    "token {} of {} acknowledged again to planted.0: {new} more I2 violation(s) found",
                    g.token, g.process
                ),
            }
        }
        None => Control {
            what: what.into(),
            shown: false,
            evidence: "no grant was acknowledged in this run: nothing to plant it on".into(),
        },
    });

    let what = "durability: an acknowledged write whose committed version is taken away is found";
    let acked = o.ops.iter().rev().find(|op| {
        op.f == OpKind::Write
            && op.outcome == Outcome::Ok
            && o.parts.iter().any(|p| p.content == op.content())
    });
    found.push(match acked {
        Some(w) => {
            let parts: Vec<PartVersion> = o
                .parts
                .iter()
                .filter(|p| p.content != w.content())
                .cloned()
                .collect();
            let planted = judge(&Observed {
                parts: &parts,
                ..*o
            });
            Control {
                what: what.into(),
                shown: planted
                    .durability
                    .iter()
                    .any(|x| x.what.contains(&w.content())),
                evidence: format!(
                    "{} taken from the committed versions: {} durability violation(s) found",
                    w.content(),
                    planted.durability.len()
                ),
            }
        }
        None => Control {
            what: what.into(),
            shown: false,
            evidence: "no write was acknowledged as accepted in this run: nothing to take away"
                .into(),
        },
    });

    let what = format!(
        "the fence's liveness: a write rejected at {scope} with the greatest token the resource had accepted there is found"
    );
    let greatest = o
        .attempts
        .iter()
        .filter(|a| a.accepted && a.scope == scope)
        .max_by_key(|a| (a.token, a.at_us));
    found.push(match greatest {
        Some(a) => {
            let after = o
                .ops
                .iter()
                .filter_map(|op| op.complete_ms)
                .fold(0.0, f64::max);
            let mut ops = o.ops.to_vec();
            ops.push(Op {
                process: a.writer.clone(),
                id: u64::MAX,
                f: OpKind::Write,
                token: a.token,
                scope: a.scope.clone(),
                part: a.part.clone(),
                invoke_ms: after + 1.0,
                complete_ms: Some(after + 2.0),
                outcome: Outcome::Fail,
            });
            let mut attempts = o.attempts.to_vec();
            // Logged first among its writer's rejections of that token, so that the checker
            // pairs the planted write with it.
            attempts.insert(
                0,
                Attempt {
                    accepted: false,
                    at_us: a.at_us + 1,
                    ..a.clone()
                },
            );
            let planted = judge(&Observed {
                ops: &ops,
                attempts: &attempts,
                ..*o
            });
            let count = |v: &Verdict| v.liveness.get(scope).map_or(0, Vec::len);
            Control {
                what,
                shown: count(&planted) > count(v),
                evidence: format!(
                    "{}'s token {} rejected right after it was accepted: {} violation(s) of the fence's liveness found",
                    a.writer,
                    a.token,
                    count(&planted)
                ),
            }
        }
        None => Control {
            what,
            shown: false,
            evidence: format!("the resource accepted no write at {scope}: nothing to plant it on"),
        },
    });
    found
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

fn check_i2(o: &Observed<'_>, v: &mut Verdict) {
    // The grants the holders acknowledged, and the `info` acquires (no answer reached the lab:
    // the holder killed, or the run ended) that the lease store's record resolves: a version of
    // the lease row naming that holder process with a token none of its acknowledged grants
    // has. Such a grant counts as heard of when its holder wrote with the token (it got the
    // answer, then was cut off before reporting it).
    let acked: Vec<&Op> = o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Acquire && op.outcome == Outcome::Ok)
        .collect();
    let mut grants: Vec<(&Op, i64, bool)> = acked.iter().map(|g| (*g, g.token, true)).collect();
    for op in o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Acquire && op.outcome == Outcome::Info)
    {
        let resolved = o.lease.iter().find(|l| {
            l.holder == op.process
                && l.token != 0
                && !acked
                    .iter()
                    .any(|g| g.process == op.process && g.token == l.token)
                && !grants
                    .iter()
                    .any(|(g, t, _)| g.process == op.process && *t == l.token)
        });
        if let Some(l) = resolved {
            let heard = o
                .ops
                .iter()
                .any(|w| w.f == OpKind::Write && w.process == op.process && w.token == l.token);
            grants.push((op, l.token, heard));
            v.info_acquires.0 += 1;
        } else {
            v.info_acquires.1 += 1;
        }
    }
    let seen: Vec<GrantSeen> = grants
        .iter()
        .map(|(g, token, heard)| GrantSeen {
            token: *token,
            holder: g.process.clone(),
            invoke_ms: g.invoke_ms,
            complete_ms: g.complete_ms,
            acknowledged: *heard,
            line: if g.outcome == Outcome::Ok {
                g.line()
            } else {
                format!(
                    "{} (no answer reached the lab; the lease store's record names token {token}{})",
                    g.line(),
                    if *heard { ", and its holder wrote with it" } else { "" }
                )
            },
        })
        .collect();
    let mut judged: Vec<[(String, i64); 2]> = Vec::new();
    let pair = |a: &GrantSeen, b: &GrantSeen| {
        let mut p = [(a.holder.clone(), a.token), (b.holder.clone(), b.token)];
        p.sort();
        p
    };
    for r in regressions(&seen) {
        let (a, b) = (&seen[r.earlier], &seen[r.later]);
        judged.push(pair(a, b));
        if r.kind == regression::Kind::LostUnacknowledged {
            v.lost_grants.push(Violation {
                what: r.what,
                excerpt: r.excerpt,
                by: None,
            });
            continue;
        }
        v.i2.push(Violation {
            what: r.what,
            excerpt: r.excerpt,
            by: mark(grants[r.later].0),
        });
    }
    // The lease store's own record, in its commit order (a lock service keeps none the lab can
    // read): a token it wrote twice for two holders, or a smaller one after a greater, is I2 on
    // the store's word — unless the holders' view above already found the same pair. A grant
    // it made that no holder acknowledged, reused or undercut later, is a lost grant — told
    // apart from I2.
    let mut record: Vec<GrantSeen> = Vec::new();
    for version in o.lease {
        let same = |g: &GrantSeen| g.token == version.token && g.holder == version.holder;
        if record.last().is_some_and(same) || version.token == 0 {
            continue;
        }
        let at = version.at_us as f64 / 1000.0;
        record.push(GrantSeen {
            token: version.token,
            holder: version.holder.clone(),
            invoke_ms: at,
            complete_ms: Some(at),
            acknowledged: seen
                .iter()
                .any(|g| g.acknowledged && g.token == version.token && g.holder == version.holder),
            line: format!(
                "lease row: {} token={} written at {} µs (db clock)",
                version.holder, version.token, version.at_us
            ),
        });
    }
    for r in regressions(&record) {
        let key = pair(&record[r.earlier], &record[r.later]);
        if judged.contains(&key) {
            continue;
        }
        judged.push(key);
        if r.kind == regression::Kind::LostUnacknowledged {
            v.lost_grants.push(Violation {
                what: r.what,
                excerpt: r.excerpt,
                by: None,
            });
        } else {
            v.i2.push(Violation {
                what: format!("{} (the lease store's own record)", r.what),
                excerpt: r.excerpt,
                by: None,
            });
        }
    }
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

fn check_i3(o: &Observed<'_>, v: &mut Verdict) {
    let mut scopes: BTreeMap<&str, Vec<&PartVersion>> = BTreeMap::new();
    for p in o.parts {
        scopes.entry(&p.scope).or_default().push(p);
    }
    for (scope, mut versions) in scopes {
        versions.sort_by_key(|p| (p.commit_us.unwrap_or(p.at_us), p.at_us));
        let found = v.i3.entry(scope.to_owned()).or_default();
        for (i, p) in versions.iter().enumerate() {
            let at = p.commit_us.unwrap_or(p.at_us);
            // The greatest token committed strictly before this one.
            let before = versions[..i]
                .iter()
                .filter(|q| q.commit_us.unwrap_or(q.at_us) < at)
                .max_by_key(|q| q.token);
            if let Some(q) = before.filter(|q| q.token > p.token) {
                if let Some(i) = writer_of(o, p).and_then(|op| {
                    blamed(o, &op.process, op.token, op.complete_ms.unwrap_or(f64::MAX))
                }) {
                    *v.fault_effects[i].entry(scope.to_owned()).or_default() += 1;
                }
                found.push(Violation {
                    what: format!(
                        "{scope}: token {} accepted after token {} had committed",
                        p.token, q.token
                    ),
                    excerpt: vec![version_line(o, q), version_line(o, p)],
                    by: writer_of(o, p).and_then(mark),
                });
            }
        }
    }
}

fn check_durability(o: &Observed<'_>, v: &mut Verdict) {
    for op in o.ops.iter().filter(|op| op.f == OpKind::Write) {
        let committed = o.parts.iter().any(|p| p.content == op.content());
        match op.outcome {
            Outcome::Ok if !committed => v.durability.push(Violation {
                what: format!(
                    "a write acknowledged as accepted is not among the committed versions ({})",
                    op.content()
                ),
                excerpt: vec![op.line()],
                by: mark(op),
            }),
            Outcome::Fail if committed => v.durability.push(Violation {
                what: format!(
                    "a write reported as rejected was committed ({})",
                    op.content()
                ),
                excerpt: vec![op.line()],
                by: mark(op),
            }),
            Outcome::Info if committed => v.info_writes.0 += 1,
            Outcome::Info => v.info_writes.1 += 1,
            _ => {}
        }
    }
    for (scope, part, content, token) in o.final_parts {
        let last = o
            .parts
            .iter()
            .filter(|p| &p.scope == scope && &p.part == part)
            .max_by_key(|p| (p.commit_us.unwrap_or(p.at_us), p.at_us));
        if last.is_none_or(|l| &l.content != content) {
            v.durability.push(Violation {
                what: format!("{scope}/{part}'s final content is not its last committed version"),
                excerpt: vec![
                    format!("final: {content} token={token}"),
                    last.map_or_else(|| "no committed version".into(), |l| version_line(o, l)),
                ],
                by: None,
            });
        }
    }
}

fn check_liveness(o: &Observed<'_>, v: &mut Verdict) {
    for op in o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Write && op.outcome == Outcome::Fail)
    {
        let logged = o.attempts.iter().find(|a| {
            !a.accepted
                && a.writer == op.process
                && a.token == op.token
                && a.scope == op.scope
                && a.part == op.part
        });
        let Some(logged) = logged else {
            // Reported rejected, with no rejection in the resource's log: counted, and said.
            v.unlogged_rejections += 1;
            continue;
        };
        // A fence rejects a token only for a greater one it had seen: a write with a greater
        // token accepted in the same scope, logged before this rejection (the resource's
        // clock). A grant the resource never saw excuses nothing — else a fence that wrongly
        // rejected an equal token would be excused after any takeover.
        let justified = o.attempts.iter().any(|a| {
            a.accepted && a.scope == op.scope && a.token > op.token && a.at_us < logged.at_us
        });
        if !justified {
            v.liveness
                .entry(op.scope.clone())
                .or_default()
                .push(Violation {
                    what: format!(
                        "{}: a write with token {} was rejected, and the resource had accepted no greater token before",
                        op.scope, op.token
                    ),
                    excerpt: vec![op.line()],
                    by: mark(op),
                });
        }
    }
}

/// The holder process's fault that came between its grant of `token` and `until` (ms): the
/// latest one, by kind; `none` when nothing hit it.
fn blame(o: &Observed<'_>, process: &str, token: i64, until: f64) -> String {
    blamed(o, process, token, until)
        .map_or_else(|| "none".into(), |i| o.faults[i].kind.as_str().to_owned())
}

/// [`blame`]'s fault, as its index in [`Observed::faults`].
fn blamed(o: &Observed<'_>, process: &str, token: i64, until: f64) -> Option<usize> {
    let granted = o
        .ops
        .iter()
        .filter(|op| {
            op.process == process
                && op.f == OpKind::Acquire
                && op.outcome == Outcome::Ok
                && op.token == token
        })
        .filter_map(|op| op.complete_ms)
        .next()
        .unwrap_or(0.0);
    o.faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.process == process || f.kind == FaultKind::Crash)
        .filter(|(_, f)| f.start_ms <= until && f.end_ms >= granted)
        .max_by(|(_, a), (_, b)| a.start_ms.total_cmp(&b.start_ms))
        .map(|(i, _)| i)
}

fn check_stale(o: &Observed<'_>, v: &mut Verdict) {
    // When each token was first granted, by the database clock. A lease store that keeps no
    // record the lab reads (a lock service) gives a bound instead: a token was granted before
    // the resource first saw it — its first committed version or logged attempt, the resource's
    // clock — so a version committed after that with a smaller token is stale for certain (a
    // lower bound of the count: a stale write before the greater token reached the resource is
    // not seen).
    let mut granted: BTreeMap<i64, i64> = BTreeMap::new();
    for l in o.lease {
        granted.entry(l.token).or_insert(l.at_us);
    }
    v.lease_record = !o.lease.is_empty();
    if !v.lease_record {
        let seen = o
            .parts
            .iter()
            .map(|p| (p.token, p.commit_us.unwrap_or(p.at_us)))
            .chain(o.attempts.iter().map(|a| (a.token, a.at_us)));
        for (token, at) in seen {
            let first = granted.entry(token).or_insert(at);
            *first = (*first).min(at);
        }
    }
    for f in o.faults {
        v.by_fault
            .entry(f.kind.as_str().into())
            .or_default()
            .injected += 1;
    }
    for p in o.parts {
        let at = p.commit_us.unwrap_or(p.at_us);
        let stale = granted.iter().any(|(t, g)| *t > p.token && *g < at);
        if stale {
            *v.stale.entry(p.scope.clone()).or_default() += 1;
            let kind = writer_of(o, p).map_or_else(
                || "none".into(),
                |op| blame(o, &op.process, op.token, op.complete_ms.unwrap_or(f64::MAX)),
            );
            *v.by_fault
                .entry(kind)
                .or_default()
                .stale_accepted
                .entry(p.scope.clone())
                .or_default() += 1;
        }
    }
    for op in o
        .ops
        .iter()
        .filter(|op| op.f == OpKind::Write && op.outcome == Outcome::Fail)
    {
        let kind = blame(o, &op.process, op.token, op.complete_ms.unwrap_or(f64::MAX));
        *v.by_fault
            .entry(kind)
            .or_default()
            .rejected
            .entry(op.scope.clone())
            .or_default() += 1;
    }
}

fn check_i1(o: &Observed<'_>, v: &mut Verdict) {
    // Each token's holding: from its first version to its last expiry (or its release).
    let mut holdings: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for l in o.lease {
        let end = l.expires_us.unwrap_or(l.at_us);
        holdings
            .entry(l.token)
            .and_modify(|(_, e)| *e = end)
            .or_insert((l.at_us, end));
    }
    v.holdings = holdings.len();
    let spans: Vec<(i64, i64)> = holdings.values().copied().collect();
    v.overlapping_holdings = spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(process: &str, id: u64, f: OpKind, token: i64, t: (f64, f64), outcome: Outcome) -> Op {
        Op {
            process: process.into(),
            id,
            f,
            token,
            scope: if f == OpKind::Write {
                "s".into()
            } else {
                "-".into()
            },
            part: if f == OpKind::Write {
                "p1".into()
            } else {
                "-".into()
            },
            invoke_ms: t.0,
            complete_ms: Some(t.1),
            outcome,
        }
    }

    fn version(content: &str, token: i64, commit_us: i64) -> PartVersion {
        PartVersion {
            scope: "s".into(),
            part: "p1".into(),
            content: content.into(),
            token,
            at_us: commit_us - 10,
            commit_us: Some(commit_us),
        }
    }

    fn lease(token: i64, at_us: i64, expires_us: i64) -> LeaseVersion {
        LeaseVersion {
            holder: format!("h{token}"),
            token,
            at_us,
            expires_us: Some(expires_us),
        }
    }

    fn lease_of(holder: &str, token: i64, at_us: i64) -> LeaseVersion {
        LeaseVersion {
            holder: holder.into(),
            token,
            at_us,
            expires_us: Some(at_us + 1_500_000),
        }
    }

    /// A then B: A (token 1) wrote, B (token 2) wrote; A's late write with token 1 commits last.
    fn stale_history(late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let mut ops = vec![
            op("h0.0", 1, OpKind::Acquire, 1, (0.0, 1.0), Outcome::Ok),
            op("h0.0", 2, OpKind::Write, 1, (2.0, 3.0), Outcome::Ok),
            op("h1.0", 1, OpKind::Acquire, 2, (2000.0, 2001.0), Outcome::Ok),
            op("h1.0", 2, OpKind::Write, 2, (2002.0, 2003.0), Outcome::Ok),
        ];
        let outcome = if late_accepted {
            Outcome::Ok
        } else {
            Outcome::Fail
        };
        ops.push(op("h0.0", 3, OpKind::Write, 1, (2500.0, 2501.0), outcome));
        let mut versions = vec![version("h0.0#2", 1, 3_000), version("h1.0#2", 2, 2_003_000)];
        if late_accepted {
            versions.push(version("h0.0#3", 1, 2_501_000));
        }
        let leases = vec![lease(1, 0, 1_500_000), lease(2, 2_000_000, 3_500_000)];
        (ops, versions, leases)
    }

    fn run(ops: &[Op], parts: &[PartVersion], lease: &[LeaseVersion]) -> Verdict {
        run_logging(ops, parts, lease, &[])
    }

    /// [`run`], the resource's log holding `accepted` too.
    fn run_logging(
        ops: &[Op],
        parts: &[PartVersion],
        lease: &[LeaseVersion],
        accepted: &[Attempt],
    ) -> Verdict {
        let last = parts.iter().max_by_key(|p| p.commit_us).expect("a version");
        let finals = vec![("s".into(), "p1".into(), last.content.clone(), last.token)];
        let faults = vec![Injected {
            kind: FaultKind::Pause,
            process: "h0.0".into(),
            start_ms: 4.0,
            end_ms: 2400.0,
        }];
        // The resource logged each write it answered 1 ms after it completed.
        let attempts: Vec<Attempt> = ops
            .iter()
            .filter(|op| op.f == OpKind::Write && op.outcome != Outcome::Info)
            .map(|op| Attempt {
                scope: op.scope.clone(),
                part: op.part.clone(),
                writer: op.process.clone(),
                token: op.token,
                accepted: op.outcome == Outcome::Ok,
                at_us: (op.complete_ms.unwrap_or(0.0) as i64 + 1) * 1000,
            })
            .chain(accepted.iter().cloned())
            .collect();
        check(
            &Observed {
                ops,
                faults: &faults,
                parts,
                final_parts: &finals,
                lease,
                attempts: &attempts,
            },
            "s",
        )
    }

    /// [`stale_history`] moved to lease `k` of two: its holders in slots k and k+2, its writes
    /// at `chaos-k`.
    fn on_lease(k: usize, late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let (ops, parts, lease) = stale_history(late_accepted);
        let process = |p: &str| match p {
            "h0.0" => format!("h{k}.0"),
            _ => format!("h{}.0", k + 2),
        };
        let scope = super::super::scope_of(k, 2);
        let ops = ops
            .into_iter()
            .map(|o| Op {
                process: process(&o.process),
                scope: if o.f == OpKind::Write {
                    scope.clone()
                } else {
                    o.scope
                },
                ..o
            })
            .collect();
        let parts = parts
            .into_iter()
            .map(|p| PartVersion {
                scope: scope.clone(),
                content: match p.content.split_once('#') {
                    Some((writer, op)) => format!("{}#{op}", process(writer)),
                    None => p.content.clone(),
                },
                ..p
            })
            .collect();
        let lease = lease
            .into_iter()
            .map(|l| LeaseVersion {
                holder: process(if l.token == 1 { "h0.0" } else { "h1.0" }),
                ..l
            })
            .collect();
        (ops, parts, lease)
    }

    /// Each scope's final content: part p1's last committed version there.
    fn finals_of(parts: &[PartVersion], scopes: &[&str]) -> Vec<(String, String, String, i64)> {
        scopes
            .iter()
            .map(|scope| {
                let last = parts
                    .iter()
                    .filter(|p| p.scope == *scope)
                    .max_by_key(|p| p.commit_us)
                    .expect("a version");
                (
                    scope.to_string(),
                    "p1".into(),
                    last.content.clone(),
                    last.token,
                )
            })
            .collect()
    }

    #[test]
    fn each_lease_is_judged_on_its_own_tokens_and_scopes() {
        // Both leases grant tokens 1 and 2; lease 0's stale write is accepted, lease 1's fenced.
        let (mut ops, mut parts, mut lease) = on_lease(0, true);
        let (ops1, parts1, lease1) = on_lease(1, false);
        ops.extend(ops1);
        parts.extend(parts1);
        lease.extend(lease1);
        let finals = finals_of(&parts, &["chaos-0", "chaos-1"]);
        let faults = vec![Injected {
            kind: FaultKind::Pause,
            process: "h0.0".into(),
            start_ms: 4.0,
            end_ms: 2400.0,
        }];
        let o = Observed {
            ops: &ops,
            faults: &faults,
            parts: &parts,
            final_parts: &finals,
            lease: &lease,
            attempts: &[],
        };
        let v = check_leases(&o, 2);
        assert!(v.i2.is_empty(), "tokens are each lease's own: {:?}", v.i2);
        assert_eq!(v.i3[super::super::SCOPE].len(), 1, "{v:?}");
        assert!(
            v.i3[super::super::SCOPE][0]
                .what
                .starts_with("lease report-job-0: chaos-0"),
            "{v:?}"
        );
        assert_eq!(v.stale[super::super::SCOPE], 1);
        assert_eq!(v.by_fault["pause"].injected, 1);
        assert_eq!(v.by_fault["pause"].stale_accepted[super::super::SCOPE], 1);
        assert_eq!(
            v.fault_effects,
            [BTreeMap::from([(super::super::SCOPE.to_owned(), 1)])]
        );
        assert_eq!(v.holdings, 4);
        assert!(v.durability.is_empty(), "{:?}", v.durability);
        // Planted on lease 0's history (the liveness one needs the resource's log, not here).
        assert_eq!(v.controls.len(), 3);
        assert!(v.controls[..2].iter().all(|c| c.shown), "{:?}", v.controls);
        // Judged as one lease, the same history has every token granted twice.
        assert!(!check(&o, "chaos-0").i2.is_empty());
    }

    #[test]
    fn the_verdict_of_several_leases_is_the_sum_of_each_leases_own() {
        // Two leases with the same story, each with an info write and an info acquire the
        // records cannot resolve: every count of the merged verdict is the two leases' sum.
        let lease_k = |k: usize| {
            let (mut ops, parts, lease) = on_lease(k, true);
            let process = format!("h{k}.0");
            for (id, f, token) in [(100, OpKind::Write, 2), (101, OpKind::Acquire, 9)] {
                ops.push(Op {
                    process: process.clone(),
                    id,
                    f,
                    token,
                    scope: if f == OpKind::Write {
                        super::super::scope_of(k, 2)
                    } else {
                        "-".into()
                    },
                    part: if f == OpKind::Write { "p1" } else { "-" }.into(),
                    invoke_ms: 3000.0,
                    complete_ms: None,
                    outcome: Outcome::Info,
                });
            }
            (ops, parts, lease)
        };
        let (ops0, parts0, lease0) = lease_k(0);
        let (ops1, parts1, lease1) = lease_k(1);
        let last = |parts: &[PartVersion], scope: &str| {
            let p = parts
                .iter()
                .filter(|p| p.scope == scope)
                .max_by_key(|p| p.commit_us)
                .expect("a version");
            (
                scope.to_owned(),
                "p1".to_owned(),
                p.content.clone(),
                p.token,
            )
        };
        let (s0, s1) = (super::super::scope_of(0, 2), super::super::scope_of(1, 2));
        let single = |ops: &[Op], parts: &[PartVersion], lease: &[LeaseVersion], scope: &str| {
            let finals = [last(parts, scope)];
            check(
                &Observed {
                    ops,
                    faults: &[],
                    parts,
                    final_parts: &finals,
                    lease,
                    attempts: &[],
                },
                scope,
            )
        };
        let v0 = single(&ops0, &parts0, &lease0, &s0);
        let v1 = single(&ops1, &parts1, &lease1, &s1);
        let ops: Vec<Op> = ops0.iter().chain(&ops1).cloned().collect();
        let parts: Vec<PartVersion> = parts0.iter().chain(&parts1).cloned().collect();
        let lease: Vec<LeaseVersion> = lease0.iter().chain(&lease1).cloned().collect();
        let finals = [last(&parts, &s0), last(&parts, &s1)];
        let v = check_leases(
            &Observed {
                ops: &ops,
                faults: &[],
                parts: &parts,
                final_parts: &finals,
                lease: &lease,
                attempts: &[],
            },
            2,
        );
        let sum = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
        assert!(
            v0.info_writes != (0, 0) && v0.info_acquires != (0, 0),
            "{v0:?}"
        );
        assert!(
            v0.holdings > 0 && v0.stale[&s0] > 0 && v0.accepted[&s0] > 0,
            "{v0:?}"
        );
        assert_eq!(v.ops, ops.len());
        assert_eq!(v.holdings, v0.holdings + v1.holdings);
        assert_eq!(
            v.overlapping_holdings,
            v0.overlapping_holdings + v1.overlapping_holdings
        );
        assert_eq!(v.info_writes, sum(v0.info_writes, v1.info_writes));
        assert_eq!(v.info_acquires, sum(v0.info_acquires, v1.info_acquires));
        assert_eq!(
            v.unlogged_rejections,
            v0.unlogged_rejections + v1.unlogged_rejections
        );
        let scope = super::super::SCOPE;
        assert_eq!(v.stale[scope], v0.stale[&s0] + v1.stale[&s1]);
        assert_eq!(v.accepted[scope], v0.accepted[&s0] + v1.accepted[&s1]);
        assert_eq!(v.i3[scope].len(), v0.i3[&s0].len() + v1.i3[&s1].len());
        assert!(v.i3[scope]
            .iter()
            .all(|x| x.what.starts_with("lease report-job-")));
    }

    #[test]
    fn a_stale_write_accepted_after_a_greater_token_breaks_i3_and_is_blamed_on_the_pause() {
        let (ops, parts, lease) = stale_history(true);
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.i3["s"].len(), 1, "{v:?}");
        assert!(
            v.i3["s"][0].what.contains("token 1 accepted after token 2"),
            "{v:?}"
        );
        assert_eq!(v.i3["s"][0].excerpt.len(), 2);
        assert_eq!(v.stale["s"], 1);
        assert_eq!(v.accepted["s"], 3, "every write acknowledged as accepted");
        assert_eq!(v.accepted.len(), 1, "writes only: {:?}", v.accepted);
        assert_eq!(v.ops, 5);
        // The excerpt: the version B committed, then A's, each with the operation that wrote it.
        assert_eq!(
            v.i3["s"][0].excerpt[1],
            "s/p1 token=1 committed at 2501000 µs (db clock), by h0.0 op 3 write s/p1 token=1 \
             invoked 2500 ms, completed 2501 ms: Ok"
        );
        // Marked on the timeline where A's late write completed.
        assert_eq!(v.i3["s"][0].by, Some(("h0.0".to_owned(), 2501)));
        assert_eq!(v.by_fault["pause"].stale_accepted["s"], 1);
        assert_eq!(v.fault_effects, [BTreeMap::from([("s".to_owned(), 1)])]);
        assert!(v.i2.is_empty() && v.durability.is_empty(), "{v:?}");
        assert_eq!((v.holdings, v.overlapping_holdings), (2, 0));
    }

    #[test]
    fn without_the_lease_stores_record_stale_writes_are_bounded_by_the_resources_own_records() {
        // A lock service: no record of its grants. Token 2 first reached the resource at
        // 2003 ms (its committed version), so A's token-1 version at 2501 ms is stale for
        // certain; holdings are not counted.
        let (ops, parts, _) = stale_history(true);
        let v = run(&ops, &parts, &[]);
        assert!(!v.lease_record);
        assert_eq!(v.stale["s"], 1, "{v:?}");
        assert_eq!(v.by_fault["pause"].stale_accepted["s"], 1);
        assert_eq!((v.holdings, v.overlapping_holdings), (0, 0));
        // A stale version committed after the grant (2000 ms) but before token 2 reached the
        // resource is what the bound does not see — the lease store's record does.
        let mut early = parts.clone();
        early[2].commit_us = Some(2_002_000);
        early[2].at_us = 2_002_000;
        assert!(run(&ops, &early, &[]).stale.is_empty());
        let (_, _, lease) = stale_history(true);
        let with_record = run(&ops, &early, &lease);
        assert!(with_record.lease_record);
        assert_eq!(with_record.stale["s"], 1);
        // The earliest sighting counts, whichever record it is in: a rejected attempt logged
        // with token 2 at 2001 ms bounds the grant before its version's commit.
        let logged = Attempt {
            scope: "s".into(),
            part: "p1".into(),
            writer: "h1.0".into(),
            token: 2,
            accepted: false,
            at_us: 2_001_500,
        };
        let v = run_logging(&ops, &early, &[], &[logged]);
        assert_eq!(v.stale["s"], 1, "{v:?}");
        // Fenced: nothing stale, with or without the record.
        let (ops, parts, _) = stale_history(false);
        assert!(run(&ops, &parts, &[]).stale.is_empty());
    }

    #[test]
    fn the_same_history_fenced_is_clean_and_counts_the_rejection() {
        let (ops, parts, lease) = stale_history(false);
        let v = run(&ops, &parts, &lease);
        assert!(
            v.i3["s"].is_empty() && v.i2.is_empty() && v.durability.is_empty(),
            "{v:?}"
        );
        assert!(v.stale.is_empty());
        assert_eq!(v.by_fault["pause"].rejected["s"], 1);
        assert_eq!(v.by_fault["pause"].injected, 1);
        // Only the rejected write is counted a rejection: not the accepted ones, nor a grant.
        assert!(
            v.by_fault.get("none").is_none_or(|r| r.rejected.is_empty()),
            "{:?}",
            v.by_fault
        );
    }

    #[test]
    fn a_version_committed_as_a_greater_token_is_granted_is_not_stale_nor_are_touching_holdings_overlapping(
    ) {
        // B's grant of token 2 and A's commit of token 1 dated to the same microsecond by the
        // database: not "after" the grant. A's holding ended as B's began: no overlap.
        let (ops, mut parts, _) = stale_history(true);
        parts[2].commit_us = Some(2_000_000);
        let lease = vec![lease(1, 0, 2_000_000), lease(2, 2_000_000, 3_500_000)];
        let v = run(&ops, &parts, &lease);
        assert!(v.stale.is_empty(), "{:?}", v.stale);
        assert_eq!((v.holdings, v.overlapping_holdings), (2, 0));
    }

    #[test]
    fn an_info_acquire_the_store_granted_a_token_twice_for_breaks_i2_and_unheard_is_lost() {
        // h2.0's acquire got no answer to the lab (killed mid-acquire); the lease row says the
        // store gave it token 2 — already acknowledged to h1.0 — and h2.0 wrote with it: it
        // heard. I2: one token, two holdings.
        let (mut ops, parts, _) = stale_history(false);
        let mut lease = vec![
            lease_of("h0.0", 1, 0),
            lease_of("h1.0", 2, 2_000_000),
            lease_of("h2.0", 2, 3_000_000),
        ];
        let mut info = op("h2.0", 1, OpKind::Acquire, 0, (3000.0, 0.0), Outcome::Info);
        info.complete_ms = None;
        ops.push(info);
        ops.push(op(
            "h2.0",
            2,
            OpKind::Write,
            2,
            (3002.0, 3003.0),
            Outcome::Fail,
        ));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.info_acquires, (1, 0), "{v:?}");
        assert_eq!(v.i2.len(), 1, "{v:?}");
        assert!(
            v.i2[0]
                .what
                .contains("token 2 was acknowledged to two holdings (h1.0 and h2.0)"),
            "{v:?}"
        );
        assert!(v.i2[0].excerpt[1].contains("the lease store's record names token 2"));
        // Without its write, nobody heard of h2.0's token: a lost grant, not I2.
        ops.pop();
        let v = run(&ops, &parts, &lease);
        assert!(v.i2.is_empty(), "{v:?}");
        assert_eq!(v.lost_grants.len(), 1, "{v:?}");
        // An info acquire the record does not name stays unresolved.
        lease.pop();
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.info_acquires, (0, 1), "{v:?}");
        // The record alone: the store wrote token 6 after token 7, for two holdings that
        // acknowledged them — I2 on the store's word, though the holders' requests overlapped
        // (neither completed before the other was sent).
        let ops = [
            op("h5.0", 1, OpKind::Acquire, 7, (0.0, 10.0), Outcome::Ok),
            op("h6.0", 1, OpKind::Acquire, 6, (5.0, 20.0), Outcome::Ok),
        ];
        let record = [lease_of("h5.0", 7, 8_000), lease_of("h6.0", 6, 9_000)];
        let v = run(&ops, &parts, &record);
        assert_eq!(v.i2.len(), 1, "{v:?}");
        assert!(
            v.i2[0].what.contains("(the lease store's own record)"),
            "{v:?}"
        );
        // In the store's order 6 then 7: no regression anywhere.
        let record = [lease_of("h6.0", 6, 8_000), lease_of("h5.0", 7, 9_000)];
        assert!(run(&ops, &parts, &record).i2.is_empty());
    }

    #[test]
    fn the_checkers_controls_find_each_planted_flaw_and_a_thin_run_fails_them() {
        let (ops, parts, lease) = stale_history(false);
        let v = run(&ops, &parts, &lease);
        assert!(v.i2.is_empty() && v.durability.is_empty() && v.liveness.is_empty());
        assert_eq!(v.controls.len(), 3);
        for c in &v.controls {
            assert!(c.shown, "{c:?}");
        }
        assert!(
            v.controls[0].evidence.contains("token 2 of h1.0"),
            "{:?}",
            v.controls[0]
        );
        assert!(
            v.controls[1].evidence.contains("h1.0#2"),
            "{:?}",
            v.controls[1]
        );
        // A run with nothing to plant on: every control fails, saying why.
        let v = check(
            &Observed {
                ops: &[],
                faults: &[],
                parts: &[],
                final_parts: &[],
                lease: &[],
                attempts: &[],
            },
            "s",
        );
        assert!(v.controls.iter().all(|c| !c.shown), "{:?}", v.controls);
        assert!(v.controls[0].evidence.contains("nothing to plant it on"));
    }

    #[test]
    fn a_token_granted_twice_or_out_of_real_time_order_breaks_i2() {
        let (mut ops, parts, lease) = stale_history(false);
        ops.push(op(
            "h2.0",
            1,
            OpKind::Acquire,
            2,
            (3000.0, 3001.0),
            Outcome::Ok,
        ));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.i2.len(), 1, "{v:?}");
        assert!(v.i2[0]
            .what
            .contains("token 2 was acknowledged to two holdings"));
    }

    #[test]
    fn a_smaller_token_acknowledged_later_breaks_i2_as_a_token_gone_back() {
        let (mut ops, parts, lease) = stale_history(false);
        ops.push(op(
            "h2.0",
            1,
            OpKind::Acquire,
            7,
            (2600.0, 2601.0),
            Outcome::Ok,
        ));
        ops.push(op(
            "h3.0",
            1,
            OpKind::Acquire,
            6,
            (3000.0, 3001.0),
            Outcome::Ok,
        ));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.i2.len(), 1, "{v:?}");
        assert!(
            v.i2[0]
                .what
                .contains("token 6 was granted to h3.0 after token 7 had been granted to h2.0"),
            "{v:?}"
        );
        assert!(v.lost_grants.is_empty(), "{v:?}");
    }

    #[test]
    fn a_grant_in_the_store_record_nobody_heard_of_reused_later_is_a_lost_grant_not_i2() {
        // The lease row granted 5 to a holder killed before the answer; 5 was granted again.
        let (ops, parts, mut lease) = stale_history(false);
        lease.push(lease_of("h9.0", 5, 3_000_000));
        lease.push(lease_of("h8.0", 5, 3_100_000));
        let mut ops = ops;
        ops.push(op(
            "h8.0",
            1,
            OpKind::Acquire,
            5,
            (3100.0, 3101.0),
            Outcome::Ok,
        ));
        let v = run(&ops, &parts, &lease);
        assert!(
            v.i2.is_empty(),
            "one acknowledged holding of 5: no I2 {v:?}"
        );
        assert_eq!(v.lost_grants.len(), 1, "{v:?}");
        assert!(v.lost_grants[0].what.contains("never heard of it"));
    }

    #[test]
    fn a_holdings_renewals_in_the_store_record_are_one_grant_not_two() {
        // h5.0's grant of 7, its renewal (a second version of the same holding), then h6.0's 8.
        let (_, parts, _) = stale_history(false);
        let ops = [
            op("h5.0", 1, OpKind::Acquire, 7, (0.0, 10.0), Outcome::Ok),
            op("h6.0", 1, OpKind::Acquire, 8, (50.0, 60.0), Outcome::Ok),
        ];
        let record = [
            lease_of("h5.0", 7, 8_000),
            lease_of("h5.0", 7, 30_000),
            lease_of("h6.0", 8, 55_000),
        ];
        let v = run(&ops, &parts, &record);
        assert!(v.i2.is_empty(), "{v:?}");
        assert!(v.lost_grants.is_empty(), "{v:?}");
        // The same token written for another holder is a second grant: I2 on the store's word.
        let record = [
            lease_of("h5.0", 7, 8_000),
            lease_of("h6.0", 7, 30_000),
            lease_of("h6.0", 8, 55_000),
        ];
        let ops = [
            op("h5.0", 1, OpKind::Acquire, 7, (0.0, 10.0), Outcome::Ok),
            op("h6.0", 1, OpKind::Acquire, 7, (20.0, 40.0), Outcome::Ok),
        ];
        assert!(!run(&ops, &parts, &record).i2.is_empty());
    }

    #[test]
    fn a_lost_acknowledged_write_breaks_durability_and_info_writes_are_resolved() {
        let (mut ops, mut parts, lease) = stale_history(false);
        parts.retain(|p| p.content != "h1.0#2");
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.durability.len(), 1, "{v:?}");
        assert!(v.durability[0].what.contains("h1.0#2"));
        // A write killed mid-flight: unknown, resolved from the committed versions.
        let (_, parts, _) = stale_history(false);
        ops[4].outcome = Outcome::Info;
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.info_writes, (0, 1));
        assert!(v.durability.is_empty(), "{v:?}");
    }

    #[test]
    fn a_rejection_with_no_greater_token_granted_breaks_the_fences_liveness() {
        let (mut ops, parts, lease) = stale_history(false);
        // The stale write's rejection is justified: token 2 was accepted at 2003 ms.
        let v = run(&ops, &parts, &lease);
        assert!(v.liveness.is_empty(), "{v:?}");
        assert_eq!(v.unlogged_rejections, 0);
        // B's own write rejected: the resource never accepted anything greater than 1, so
        // neither B's rejection nor, now, A's is justified — token 2's grant at the lease
        // excuses nothing the resource did not see.
        ops[3].outcome = Outcome::Fail;
        let parts: Vec<_> = parts
            .into_iter()
            .filter(|p| p.content != "h1.0#2")
            .collect();
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.liveness["s"].len(), 2, "{v:?}");
        assert!(v.liveness["s"][0].what.contains("token 2 was rejected"));
        assert!(v.liveness["s"][1].what.contains("token 1 was rejected"));
    }

    #[test]
    fn only_a_greater_token_the_resource_accepted_before_justifies_a_rejection() {
        let (mut ops, parts, _) = stale_history(false);
        // A failover lost the store's record of token 2's grant: the resource's acceptance of
        // B's write still justifies A's rejection.
        let lost = vec![lease(1, 0, 1_500_000)];
        assert!(run(&ops, &parts, &lost).liveness.is_empty());
        // B's write never reached the resource (its outcome unknown, not logged): token 2 was
        // granted, but the fence had not seen it — A's rejection is unjustified.
        ops[3].outcome = Outcome::Info;
        let v = run(&ops, &parts, &lost);
        assert_eq!(v.liveness["s"].len(), 1, "{v:?}");
        // Accepted, but in another scope, only after the rejection, or with an equal token (a
        // fence that rejects equal tokens): unjustified; the same write in the scope before
        // the rejection: justified.
        let wrote = |scope: &str, token: i64, at_us: i64| Attempt {
            scope: scope.into(),
            part: "p1".into(),
            writer: "h1.0".into(),
            token,
            accepted: true,
            at_us,
        };
        for unjustified in [
            wrote("other", 2, 2_003_000),
            wrote("s", 2, 2_503_000),
            wrote("s", 1, 2_003_000),
        ] {
            let v = run_logging(&ops, &parts, &lost, std::slice::from_ref(&unjustified));
            assert_eq!(v.liveness["s"].len(), 1, "{unjustified:?}: {v:?}");
        }
        let v = run_logging(&ops, &parts, &lost, &[wrote("s", 2, 2_003_000)]);
        assert!(v.liveness.is_empty(), "{v:?}");
        // A rejection the holder reported that the log lacks is counted, not judged.
        let v = check(
            &Observed {
                ops: &ops,
                faults: &[],
                parts: &parts,
                final_parts: &[],
                lease: &lost,
                attempts: &[],
            },
            "s",
        );
        assert_eq!(v.unlogged_rejections, 1);
        assert!(v.liveness.is_empty());
    }

    #[test]
    fn overlapping_holdings_are_counted_not_failed() {
        let (ops, parts, _) = stale_history(false);
        let lease = vec![lease(1, 0, 2_500_000), lease(2, 2_000_000, 3_500_000)];
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.overlapping_holdings, 1);
    }

    /// [`on_lease`], its writes moved to lease `k`'s control scope.
    fn on_control(k: usize, late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let (ops, parts, lease) = on_lease(k, late_accepted);
        let (scope, control) = (super::super::scope_of(k, 2), super::super::control_of(k, 2));
        let to_control = |s: String| if s == scope { control.clone() } else { s };
        let ops = ops
            .into_iter()
            .map(|o| Op {
                scope: to_control(o.scope),
                ..o
            })
            .collect();
        let parts = parts
            .into_iter()
            .map(|p| PartVersion {
                scope: to_control(p.scope),
                ..p
            })
            .collect();
        (ops, parts, lease)
    }

    #[test]
    fn a_leases_control_scope_is_judged_with_its_lease_and_the_controls_on_the_first() {
        // Lease 0 fenced at its scope; lease 1's stale write accepted at its control scope.
        let (mut ops, mut parts, mut lease) = on_lease(0, false);
        let (ops1, parts1, lease1) = on_control(1, true);
        ops.extend(ops1);
        parts.extend(parts1);
        lease.extend(lease1);
        let finals = finals_of(&parts, &["chaos-0", "chaos-control-1"]);
        let o = Observed {
            ops: &ops,
            faults: &[],
            parts: &parts,
            final_parts: &finals,
            lease: &lease,
            attempts: &[],
        };
        let v = check_leases(&o, 2);
        let found: Vec<(&str, usize)> =
            v.i3.iter()
                .filter(|(_, list)| !list.is_empty())
                .map(|(scope, list)| (scope.as_str(), list.len()))
                .collect();
        assert_eq!(found, [(super::super::CONTROL_SCOPE, 1)], "{:?}", v.i3);
        assert!(
            v.i3[super::super::CONTROL_SCOPE][0]
                .what
                .starts_with("lease report-job-1: chaos-control-1: token 1"),
            "{:?}",
            v.i3
        );
        assert!(
            v.i3.keys()
                .all(|k| k == super::super::SCOPE || k == super::super::CONTROL_SCOPE),
            "every scope under one lease's name: {:?}",
            v.i3.keys()
        );
        assert!(v.durability.is_empty(), "{:?}", v.durability);
        // The controls are planted on lease 0's history: its last grant is h2.0's token 2.
        assert!(
            v.controls[0].evidence.contains("token 2 of h2.0"),
            "{:?}",
            v.controls[0]
        );
    }

    #[test]
    fn the_controls_plant_on_the_last_grant_and_the_last_committed_acknowledged_write() {
        // A's late write accepted, completing after B's grant and B's write: the last
        // acknowledged operation is a write with token 1, not a grant.
        let (ops, parts, lease) = stale_history(true);
        let v = run(&ops, &parts, &lease);
        assert!(
            v.controls[0].evidence.contains("token 2 of h1.0"),
            "the last grant, not the last operation: {:?}",
            v.controls[0]
        );
        // An acknowledged write with no committed version comes last: the durability control
        // takes a write that has one (taking away the lost one's would plant nothing).
        let (mut ops, parts, lease) = stale_history(false);
        ops.push(op(
            "h1.0",
            3,
            OpKind::Write,
            2,
            (2600.0, 2601.0),
            Outcome::Ok,
        ));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.durability.len(), 1, "h1.0#3 was lost: {:?}", v.durability);
        assert!(
            v.controls[1].evidence.starts_with("h1.0#2 taken from"),
            "{:?}",
            v.controls[1]
        );
        assert_eq!(v.durability[0].by, Some(("h1.0".to_owned(), 2601)));
        // The liveness control plants on the greatest token accepted at the scope under test,
        // not at another scope.
        let (ops, parts, lease) = stale_history(false);
        let elsewhere = Attempt {
            scope: "chaos-control".into(),
            part: "p1".into(),
            writer: "h9.0".into(),
            token: 7,
            accepted: true,
            at_us: 5_000_000,
        };
        let v = run_logging(&ops, &parts, &lease, &[elsewhere]);
        assert!(
            v.controls[2]
                .evidence
                .starts_with("h1.0's token 2 rejected"),
            "{:?}",
            v.controls[2]
        );
        assert!(v.controls[2].shown, "{:?}", v.controls[2]);
    }

    #[test]
    fn each_info_acquire_resolves_to_its_own_processs_next_unacknowledged_grant() {
        // h3.0 was granted token 3 (acknowledged), then asked twice more with no answer reaching
        // the lab; the record gives it 4, then 5, and it wrote with both. Each info acquire is
        // one of those grants, in turn — neither the acknowledged 3 nor the same one twice —
        // and one holder's successive grants break nothing.
        let ops = vec![
            op("h3.0", 1, OpKind::Acquire, 3, (0.0, 1.0), Outcome::Ok),
            op(
                "h3.0",
                2,
                OpKind::Acquire,
                0,
                (2000.0, 2001.0),
                Outcome::Info,
            ),
            op("h3.0", 3, OpKind::Write, 4, (2002.0, 2003.0), Outcome::Ok),
            op(
                "h3.0",
                4,
                OpKind::Acquire,
                0,
                (4000.0, 4001.0),
                Outcome::Info,
            ),
            op("h3.0", 5, OpKind::Write, 5, (4002.0, 4003.0), Outcome::Ok),
        ];
        let parts = vec![
            version("h3.0#3", 4, 2_003_000),
            version("h3.0#5", 5, 4_003_000),
        ];
        let lease = vec![
            lease_of("h3.0", 3, 0),
            lease_of("h3.0", 4, 2_000_500),
            lease_of("h3.0", 5, 4_000_500),
        ];
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.info_acquires, (2, 0), "{v:?}");
        assert!(v.i2.is_empty(), "{:?}", v.i2);
        assert!(v.lost_grants.is_empty(), "{:?}", v.lost_grants);
    }

    #[test]
    fn durability_judges_every_outcome_and_each_parts_own_final_content() {
        let (mut ops, mut parts, lease) = stale_history(false);
        // Two writes with no answer: one committed, one not.
        ops.push(op(
            "h1.0",
            3,
            OpKind::Write,
            2,
            (2600.0, 2601.0),
            Outcome::Info,
        ));
        parts.push(version("h1.0#3", 2, 2_601_000));
        ops.push(op(
            "h1.0",
            4,
            OpKind::Write,
            2,
            (2700.0, 2701.0),
            Outcome::Info,
        ));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.info_writes, (1, 1), "{v:?}");
        assert!(v.durability.is_empty(), "{:?}", v.durability);
        // A write reported rejected whose version committed.
        parts.push(version("h0.0#3", 1, 2_501_000));
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.durability.len(), 1, "{:?}", v.durability);
        assert_eq!(
            v.durability[0].what,
            "a write reported as rejected was committed (h0.0#3)"
        );
        // Two parts: each part's final content is its own last version, whatever the other's.
        let (ops, mut parts, lease) = stale_history(false);
        parts.push(PartVersion {
            part: "p2".into(),
            ..version("h0.0#9", 1, 1_000)
        });
        let finals = vec![
            ("s".into(), "p1".into(), "h1.0#2".into(), 2),
            ("s".into(), "p2".into(), "h0.0#9".into(), 1),
        ];
        let o = Observed {
            ops: &ops,
            faults: &[],
            parts: &parts,
            final_parts: &finals,
            lease: &lease,
            attempts: &[],
        };
        assert!(check(&o, "s").durability.is_empty());
    }

    #[test]
    fn equal_tokens_and_versions_committed_at_one_instant_are_no_i3_violation() {
        // One holder writes twice with its token: no token went back.
        let ops = vec![
            op("h0.0", 1, OpKind::Acquire, 1, (0.0, 1.0), Outcome::Ok),
            op("h0.0", 2, OpKind::Write, 1, (2.0, 3.0), Outcome::Ok),
            op("h0.0", 3, OpKind::Write, 1, (4.0, 5.0), Outcome::Ok),
        ];
        let parts = vec![version("h0.0#2", 1, 3_000), version("h0.0#3", 1, 5_000)];
        let lease = vec![lease(1, 0, 1_500_000)];
        let v = run(&ops, &parts, &lease);
        assert!(v.i3.values().all(Vec::is_empty), "{:?}", v.i3);
        // Two versions whose commits the resource dates to the same microsecond are not ordered
        // by it: the smaller token is not "after" the greater.
        let mut parts = vec![version("h0.0#2", 2, 3_000), version("h0.0#3", 1, 3_000)];
        parts[1].at_us = parts[0].at_us + 1;
        let v = run(&ops, &parts, &lease);
        assert!(v.i3.values().all(Vec::is_empty), "{:?}", v.i3);
    }

    #[test]
    fn a_stale_write_is_blamed_on_a_fault_after_its_own_grant_not_one_that_ended_before() {
        // h0.0 held token 1, then token 3 (granted at 3001 ms); its write with token 3 committed
        // after h1.0's token 4. A partition of h0.0 came between the grant of 3 and the write; a
        // pause of h0.0 began later than the partition but ended before 3 was granted: it did
        // nothing to the holding of 3, and is not blamed — nor is a later pause of h1.0.
        let ops = vec![
            op("h0.0", 1, OpKind::Acquire, 1, (0.0, 1.0), Outcome::Ok),
            op("h1.0", 1, OpKind::Acquire, 2, (1500.0, 1501.0), Outcome::Ok),
            op("h0.0", 2, OpKind::Acquire, 3, (3000.0, 3001.0), Outcome::Ok),
            op("h1.0", 2, OpKind::Acquire, 4, (4000.0, 4001.0), Outcome::Ok),
            op("h1.0", 3, OpKind::Write, 4, (4002.0, 4003.0), Outcome::Ok),
            op("h0.0", 3, OpKind::Write, 3, (4500.0, 4501.0), Outcome::Ok),
        ];
        let parts = vec![
            version("h1.0#3", 4, 4_003_000),
            version("h0.0#3", 3, 4_501_000),
        ];
        let lease = vec![
            lease_of("h0.0", 1, 0),
            lease_of("h1.0", 2, 1_500_000),
            lease_of("h0.0", 3, 3_000_000),
            lease_of("h1.0", 4, 4_000_000),
        ];
        let faults = vec![
            Injected {
                kind: FaultKind::Partition,
                process: "h0.0".into(),
                start_ms: 1000.0,
                end_ms: 4000.0,
            },
            Injected {
                kind: FaultKind::Pause,
                process: "h0.0".into(),
                start_ms: 2000.0,
                end_ms: 2500.0,
            },
            Injected {
                kind: FaultKind::Pause,
                process: "h1.0".into(),
                start_ms: 3500.0,
                end_ms: 3600.0,
            },
        ];
        let finals = vec![("s".into(), "p1".into(), "h0.0#3".into(), 3)];
        let v = check(
            &Observed {
                ops: &ops,
                faults: &faults,
                parts: &parts,
                final_parts: &finals,
                lease: &lease,
                attempts: &[],
            },
            "s",
        );
        assert_eq!(v.i3["s"].len(), 1, "{:?}", v.i3);
        assert_eq!(
            v.by_fault["partition"].stale_accepted.get("s"),
            Some(&1),
            "{:?}",
            v.by_fault
        );
        assert!(
            v.by_fault["pause"].stale_accepted.is_empty(),
            "{:?}",
            v.by_fault
        );
        assert_eq!(
            v.fault_effects,
            [
                BTreeMap::from([("s".to_owned(), 1)]),
                BTreeMap::new(),
                BTreeMap::new()
            ]
        );
    }

    #[test]
    fn a_rejection_logged_in_the_same_microsecond_as_the_greater_acceptance_is_not_excused() {
        // The resource logged B's acceptance of token 2 and A's rejection of token 1 at one
        // instant: it cannot have seen 2 before rejecting 1.
        let (ops, parts, lease) = stale_history(false);
        let faults: Vec<Injected> = Vec::new();
        let last = parts.iter().max_by_key(|p| p.commit_us).expect("a version");
        let finals = vec![("s".into(), "p1".into(), last.content.clone(), last.token)];
        let attempt = |writer: &str, token: i64, accepted: bool, at_us: i64| Attempt {
            scope: "s".into(),
            part: "p1".into(),
            writer: writer.into(),
            token,
            accepted,
            at_us,
        };
        let attempts = vec![
            attempt("h0.0", 1, true, 4_000),
            attempt("h1.0", 2, true, 2_501_000),
            attempt("h0.0", 1, false, 2_501_000),
        ];
        let v = check(
            &Observed {
                ops: &ops,
                faults: &faults,
                parts: &parts,
                final_parts: &finals,
                lease: &lease,
                attempts: &attempts,
            },
            "s",
        );
        assert_eq!(
            v.liveness.get("s").map_or(0, Vec::len),
            1,
            "{:?}",
            v.liveness
        );
    }

    #[test]
    fn absorbing_a_leases_verdict_names_renames_sums_and_moves_its_fault_effects() {
        let violation = |what: &str| Violation {
            what: what.into(),
            excerpt: vec![],
            by: None,
        };
        let scoped = |n: usize| BTreeMap::from([("chaos-1".to_owned(), n)]);
        // Every count a different prime, so that a sum taken from the wrong field shows.
        let one = Verdict {
            i2: vec![violation("i2")],
            lost_grants: vec![violation("lost")],
            i3: BTreeMap::from([("chaos-1".into(), vec![violation("i3")])]),
            durability: vec![violation("dur")],
            liveness: BTreeMap::from([("control-1".into(), vec![violation("live")])]),
            stale: scoped(3),
            info_writes: (5, 7),
            info_acquires: (11, 13),
            unlogged_rejections: 17,
            holdings: 19,
            overlapping_holdings: 23,
            lease_record: true,
            accepted: scoped(29),
            by_fault: BTreeMap::from([(
                "pause".into(),
                FaultRow {
                    injected: 31,
                    stale_accepted: scoped(37),
                    rejected: scoped(41),
                },
            )]),
            fault_effects: vec![scoped(43), scoped(47)],
            ops: 53,
            controls: vec![],
        };
        let rename = |key: &String| match key.as_str() {
            "chaos-1" => "chaos".to_owned(),
            "control-1" => "control".to_owned(),
            _ => key.clone(),
        };
        let mut merged = Verdict {
            fault_effects: vec![BTreeMap::new(); 4],
            ..Verdict::default()
        };
        merged.absorb(one.clone(), "b", rename, &[3, 1]);
        merged.absorb(one, "b", rename, &[3, 1]);
        let twice = |n: usize| BTreeMap::from([("chaos".to_owned(), 2 * n)]);
        assert_eq!(merged.i2.len(), 2);
        assert_eq!(merged.i2[0].what, "lease b: i2");
        assert_eq!(merged.lost_grants[1].what, "lease b: lost");
        assert_eq!(merged.durability[0].what, "lease b: dur");
        assert_eq!(merged.i3["chaos"].len(), 2);
        assert_eq!(merged.i3["chaos"][0].what, "lease b: i3");
        assert_eq!(merged.liveness["control"][1].what, "lease b: live");
        assert_eq!(merged.stale, twice(3));
        assert_eq!(merged.info_writes, (10, 14));
        assert_eq!(merged.info_acquires, (22, 26));
        assert_eq!(merged.unlogged_rejections, 34);
        assert_eq!(merged.holdings, 38);
        assert_eq!(merged.overlapping_holdings, 46);
        assert!(merged.lease_record, "one lease's record makes the run's");
        assert_eq!(merged.accepted, twice(29));
        let row = &merged.by_fault["pause"];
        assert_eq!(
            row.injected, 0,
            "the caller counts each injected fault once"
        );
        assert_eq!(row.stale_accepted, twice(37));
        assert_eq!(row.rejected, twice(41));
        assert_eq!(
            merged.fault_effects,
            vec![BTreeMap::new(), twice(47), BTreeMap::new(), twice(43)]
        );
        assert_eq!(merged.ops, 0, "the caller counts the run's operations");
    }
}
