//! Stale writes: committed versions whose token is below a token the lease store had granted
//! before they committed (database clock; without the store's record, a lower bound from the
//! resource's own records) — the fence's whole business. Each is blamed on the fault that hit
//! its writer after its grant, and so is each rejected write: the per-fault rows.

use std::collections::{BTreeMap, BTreeSet};

use holder_protocol::OpKind;

use super::{writer_of, Observed, Outcome, Verdict};
use crate::chaos::schedule::FaultKind;

/// The holder process's fault that came between its grant of `token` and `until` (ms): the
/// latest one, by kind; `none` when nothing hit it.
fn blame(o: &Observed<'_>, process: &str, token: i64, until: f64) -> String {
    blamed(o, process, token, until)
        .map_or_else(|| "none".into(), |i| o.faults[i].kind.as_str().to_owned())
}

/// [`blame`]'s fault, as its index in [`Observed::faults`].
pub(super) fn blamed(o: &Observed<'_>, process: &str, token: i64, until: f64) -> Option<usize> {
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

pub(super) fn check_stale(o: &Observed<'_>, v: &mut Verdict) {
    // When each token was first granted, by the database clock — bounded as well by the
    // resource's own records: a token was granted before the resource first saw it (its first
    // committed version or logged attempt, the resource's clock). A lease store that keeps no
    // record the lab reads (a lock service) gives only that bound, so a version committed after
    // it with a smaller token is stale for certain (a lower bound of the count: a stale write
    // before the greater token reached the resource is not seen). A store whose record lacks a
    // token the resource saw (a grant lost with its leader in a failover, or a record read from
    // a replica behind it) is bounded the same way for that token, and the verdict counts it.
    let mut granted: BTreeMap<i64, i64> = BTreeMap::new();
    for l in o.lease {
        granted.entry(l.token).or_insert(l.at_us);
    }
    v.lease_record = !o.lease.is_empty();
    let seen = o
        .parts
        .iter()
        .map(|p| (p.token, p.commit_us.unwrap_or(p.at_us)))
        .chain(o.attempts.iter().map(|a| (a.token, a.at_us)));
    let recorded: BTreeSet<i64> = granted.keys().copied().collect();
    let mut unrecorded = BTreeSet::new();
    for (token, at) in seen {
        if v.lease_record && !recorded.contains(&token) {
            unrecorded.insert(token);
        }
        let first = granted.entry(token).or_insert(at);
        *first = (*first).min(at);
    }
    v.unrecorded_grants = unrecorded.len();
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

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
        // A record that lost token 2's grant (its leader failed over before a replica had
        // it): the resource's first sighting of token 2 bounds the grant, so A's version
        // after it is still stale, and the verdict counts the token the record lacks.
        let lost: Vec<_> = lease.iter().filter(|l| l.token != 2).cloned().collect();
        assert!(lost.len() < lease.len() && !lost.is_empty());
        let v = run(&ops, &parts, &lost);
        assert!(v.lease_record);
        assert_eq!(v.stale["s"], 1, "{v:?}");
        assert_eq!(v.unrecorded_grants, 1);
        assert_eq!(run(&ops, &parts, &lease).unrecorded_grants, 0);
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
}
