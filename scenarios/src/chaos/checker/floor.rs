//! I3, per scope: in commit order, an accepted write never has a smaller token than one that
//! committed before it — what the resource's floor is there to hold. Commits at the same
//! microsecond are taken as concurrent; each violation is blamed on the fault that hit its writer.

use std::collections::BTreeMap;

use harness::observe::PartVersion;

use super::stale::blamed;
use super::{mark, version_line, writer_of, Observed, Verdict, Violation};

pub(super) fn check_i3(o: &Observed<'_>, v: &mut Verdict) {
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

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
}
