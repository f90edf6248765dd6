//! Durability: every write acknowledged as accepted is among the committed versions, none
//! reported rejected is, and each part's final content is its last committed version. A write
//! whose outcome is unknown (`info`) is resolved from the committed versions, never counted as
//! failed.

use holder_protocol::OpKind;

use super::{mark, version_line, Observed, Outcome, Verdict, Violation};

pub(super) fn check_durability(o: &Observed<'_>, v: &mut Verdict) {
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

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
}
