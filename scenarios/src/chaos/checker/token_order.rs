//! I2, token order: no token acknowledged to two holdings, and a grant that completed before
//! another was invoked has the smaller token — judged on what the holders acknowledged (with the
//! `info` acquires the lease store's record resolves) and on the store's own record, in its commit
//! order. A grant nobody heard of that a later one reused or undercut is a lost grant, told apart.

use holder_protocol::OpKind;

use super::{mark, Observed, Op, Outcome, Verdict, Violation};
use crate::kit::regression::{self, regressions, GrantSeen};

/// The grants the holders acknowledged, and the `info` acquires (no answer reached the lab: the
/// holder killed, or the run ended) that the lease store's record resolves — each with its
/// token and whether it was heard of. Counts the info acquires resolved and not in `v`.
fn grants_heard<'a>(o: &Observed<'a>, v: &mut Verdict) -> Vec<(&'a Op, i64, bool)> {
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
    let mut grants: Vec<(&'a Op, i64, bool)> = acked.iter().map(|g| (*g, g.token, true)).collect();
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
    grants
}

pub(super) fn check_i2(o: &Observed<'_>, v: &mut Verdict) {
    let grants = grants_heard(o, v);
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

#[cfg(test)]
mod tests {
    use crate::chaos::checker::fixtures::*;
    use crate::chaos::checker::*;

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
}
