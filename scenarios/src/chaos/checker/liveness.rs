//! The fence's liveness: a write is rejected only when the resource had accepted a greater
//! token in its scope before it logged the rejection (its attempt log, its clock). A rejection
//! the holder reported that the log does not have is counted apart (`unlogged_rejections`).

use holder_protocol::OpKind;

use super::{mark, Observed, Outcome, Verdict, Violation};

pub(super) fn check_liveness(o: &Observed<'_>, v: &mut Verdict) {
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

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
}
