//! A run spread over several leases: each lease judged on its own — its holders, its rows of the
//! lease store's record, its two scopes — for tokens are a lease's own, and the verdicts summed
//! under one lease's scope names, each violation named by its lease.

use std::collections::BTreeMap;

use harness::observe::{Attempt, LeaseVersion, PartVersion};

use super::{check, controls, judge, Injected, Observed, Op, Verdict, Violation};

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
        self.unrecorded_grants += v.unrecorded_grants;
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

/// The checker's verdict on a run whose holders were spread over `leases` leases
/// ([`chaos::lease_of`](crate::chaos::lease_of)): each lease judged on its own — its holders'
/// operations and faults, its rows of the lease store's record, its two scopes at the resource —
/// for tokens are a lease's own (two leases may both grant token 5). The verdicts are summed, each
/// lease's scopes counted under the names of one lease's ([`chaos::SCOPE`](crate::chaos::SCOPE),
/// [`chaos::CONTROL_SCOPE`](crate::chaos::CONTROL_SCOPE)) and each violation named by its lease;
/// the checker's own controls are planted on the first lease. One lease: [`check`].
pub fn check_leases(o: &Observed<'_>, leases: usize) -> Verdict {
    use crate::chaos::{control_of, lease_index, lease_of, scope_of, CONTROL_SCOPE, SCOPE};
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

    /// [`stale_history`] moved to lease `k` of two: its holders in slots k and k+2, its writes
    /// at `chaos-k`.
    fn on_lease(k: usize, late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let (ops, parts, lease) = stale_history(late_accepted);
        let process = |p: &str| match p {
            "h0.0" => format!("h{k}.0"),
            _ => format!("h{}.0", k + 2),
        };
        let scope = crate::chaos::scope_of(k, 2);
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
        assert_eq!(v.i3[crate::chaos::SCOPE].len(), 1, "{v:?}");
        assert!(
            v.i3[crate::chaos::SCOPE][0]
                .what
                .starts_with("lease report-job-0: chaos-0"),
            "{v:?}"
        );
        assert_eq!(v.stale[crate::chaos::SCOPE], 1);
        assert_eq!(v.by_fault["pause"].injected, 1);
        assert_eq!(v.by_fault["pause"].stale_accepted[crate::chaos::SCOPE], 1);
        assert_eq!(
            v.fault_effects,
            [BTreeMap::from([(crate::chaos::SCOPE.to_owned(), 1)])]
        );
        assert_eq!(v.holdings, 4);
        assert!(v.durability.is_empty(), "{:?}", v.durability);
        // Planted on lease 0's history (the liveness one needs the resource's log, not here).
        assert_eq!(v.controls.len(), 4);
        assert!(v.controls[..2].iter().all(|c| c.shown), "{:?}", v.controls);
        // Judged as one lease, the same history has every token granted twice.
        assert!(!check(&o, "chaos-0").i2.is_empty());
    }

    /// Lease `k`'s story ([`on_lease`]) with an info write and an info acquire the records
    /// cannot resolve.
    fn with_unresolved_info(k: usize) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let (mut ops, parts, lease) = on_lease(k, true);
        let process = format!("h{k}.0");
        for (id, f, token) in [(100, OpKind::Write, 2), (101, OpKind::Acquire, 9)] {
            ops.push(Op {
                process: process.clone(),
                id,
                f,
                token,
                scope: if f == OpKind::Write {
                    crate::chaos::scope_of(k, 2)
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
    }

    /// The last committed version of `scope`'s part, as a final part.
    fn last_version(parts: &[PartVersion], scope: &str) -> (String, String, String, i64) {
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
    }

    #[test]
    fn the_verdict_of_several_leases_is_the_sum_of_each_leases_own() {
        // Two leases with the same story, each with an info write and an info acquire the
        // records cannot resolve: every count of the merged verdict is the two leases' sum.
        let (ops0, parts0, lease0) = with_unresolved_info(0);
        let (ops1, parts1, lease1) = with_unresolved_info(1);
        let (s0, s1) = (crate::chaos::scope_of(0, 2), crate::chaos::scope_of(1, 2));
        let single = |ops: &[Op], parts: &[PartVersion], lease: &[LeaseVersion], scope: &str| {
            let finals = [last_version(parts, scope)];
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
        let finals = [last_version(&parts, &s0), last_version(&parts, &s1)];
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
        let scope = crate::chaos::SCOPE;
        assert_eq!(v.stale[scope], v0.stale[&s0] + v1.stale[&s1]);
        assert_eq!(v.accepted[scope], v0.accepted[&s0] + v1.accepted[&s1]);
        assert_eq!(v.i3[scope].len(), v0.i3[&s0].len() + v1.i3[&s1].len());
        assert!(v.i3[scope]
            .iter()
            .all(|x| x.what.starts_with("lease report-job-")));
    }

    /// [`on_lease`], its writes moved to lease `k`'s control scope.
    fn on_control(k: usize, late_accepted: bool) -> (Vec<Op>, Vec<PartVersion>, Vec<LeaseVersion>) {
        let (ops, parts, lease) = on_lease(k, late_accepted);
        let (scope, control) = (crate::chaos::scope_of(k, 2), crate::chaos::control_of(k, 2));
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
        assert_eq!(found, [(crate::chaos::CONTROL_SCOPE, 1)], "{:?}", v.i3);
        assert!(
            v.i3[crate::chaos::CONTROL_SCOPE][0]
                .what
                .starts_with("lease report-job-1: chaos-control-1: token 1"),
            "{:?}",
            v.i3
        );
        assert!(
            v.i3.keys()
                .all(|k| k == crate::chaos::SCOPE || k == crate::chaos::CONTROL_SCOPE),
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
            unrecorded_grants: 59,
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
        assert_eq!(merged.unrecorded_grants, 118);
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
