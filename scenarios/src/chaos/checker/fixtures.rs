//! The checker tests' shared histories: operations, committed versions and lease rows built
//! by hand, the stale-write story every invariant's tests start from, and the checker run on it.

use harness::observe::{Attempt, LeaseVersion, PartVersion};
use holder_protocol::OpKind;

use super::{check, Injected, Observed, Op, Outcome, Verdict};
use crate::chaos::schedule::FaultKind;

pub(super) fn op(
    process: &str,
    id: u64,
    f: OpKind,
    token: i64,
    t: (f64, f64),
    outcome: Outcome,
) -> Op {
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

pub(super) fn version(content: &str, token: i64, commit_us: i64) -> PartVersion {
    PartVersion {
        scope: "s".into(),
        part: "p1".into(),
        content: content.into(),
        token,
        at_us: commit_us - 10,
        commit_us: Some(commit_us),
    }
}

pub(super) fn lease(token: i64, at_us: i64, expires_us: i64) -> LeaseVersion {
    LeaseVersion {
        holder: format!("h{token}"),
        token,
        at_us,
        expires_us: Some(expires_us),
    }
}

pub(super) fn lease_of(holder: &str, token: i64, at_us: i64) -> LeaseVersion {
    LeaseVersion {
        holder: holder.into(),
        token,
        at_us,
        expires_us: Some(at_us + 1_500_000),
    }
}

/// A then B: A (token 1) wrote, B (token 2) wrote; A's late write with token 1 commits last.
pub(super) fn stale_history(late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
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

pub(super) fn run(ops: &[Op], parts: &[PartVersion], lease: &[LeaseVersion]) -> Verdict {
    run_logging(ops, parts, lease, &[])
}

/// [`run`], the resource's log holding `accepted` too.
pub(super) fn run_logging(
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
