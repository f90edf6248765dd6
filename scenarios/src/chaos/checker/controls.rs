//! The checker's own controls: a flaw planted in a copy of the run's history for each invariant
//! nothing in a fenced run breaks (I2, durability, the fence's liveness), which the checker must
//! find there — as the unfenced scope controls I3, whose smallest violation (one token behind)
//! is planted too.

use harness::observe::{Attempt, PartVersion};
use holder_protocol::OpKind;

use super::{judge, Observed, Op, Outcome, Verdict};

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
    found.push(smallest_stale_write(o, v, scope));
    found
}

/// I3's control at its smallest: a version one token behind the latest one committed at
/// `scope`, committed a microsecond after it — the least stale write there is, where the
/// unfenced scope's real violations may all be large (token 27 after 39). The checker must count
/// it stale.
fn smallest_stale_write(o: &Observed<'_>, v: &Verdict, scope: &str) -> Control {
    let what = format!(
        "I3 at its smallest: a version one token behind the latest committed at {scope}, \
         committed right after it, is found stale"
    );
    let latest = o
        .parts
        .iter()
        .filter(|p| p.scope == scope)
        .max_by_key(|p| (p.commit_us.unwrap_or(p.at_us), p.token));
    let Some(latest) = latest else {
        return Control {
            what,
            shown: false,
            evidence: format!("no version was committed at {scope}: nothing to plant it on"),
        };
    };
    let at = latest.commit_us.unwrap_or(latest.at_us) + 1;
    let mut parts = o.parts.to_vec();
    parts.push(PartVersion {
        token: latest.token - 1,
        content: "planted one token behind".into(),
        at_us: at,
        commit_us: latest.commit_us.map(|_| at),
        ..latest.clone()
    });
    let planted = judge(&Observed {
        parts: &parts,
        ..*o
    });
    let count = |v: &Verdict| v.stale.get(scope).copied().unwrap_or(0);
    Control {
        what,
        shown: count(&planted) > count(v),
        evidence: format!(
            "token {} committed right after token {}'s version: {} stale write(s) found at {scope}, {} before",
            latest.token - 1,
            latest.token,
            count(&planted),
            count(v)
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

    #[test]
    fn the_checkers_controls_find_each_planted_flaw_and_a_thin_run_fails_them() {
        let (ops, parts, lease) = stale_history(false);
        let v = run(&ops, &parts, &lease);
        assert!(v.i2.is_empty() && v.durability.is_empty() && v.liveness.is_empty());
        assert_eq!(v.controls.len(), 4);
        for c in &v.controls {
            assert!(c.shown, "{c:?}");
        }
        // I3 at its smallest: one token behind the latest version, committed right after it.
        assert!(
            v.controls[3]
                .evidence
                .starts_with("token 1 committed right after token 2's"),
            "{:?}",
            v.controls[3]
        );
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
}
