//! Token regression: over a run's grants in real-time order, a grant made after
//! another has a greater token. A fence is only as good as its token; this is the property the
//! R-series breaks on purpose (a ZooKeeper suffix that starts again, a Redis counter lost in a
//! failover, an etcd revision restored from an older snapshot) and chaos checks on every run.
//!
//! The grants are the store's own record where it has one, else the grants the holders
//! acknowledged. Three findings are told apart:
//! - **backwards**: a grant that began after another had completed carries a smaller token — or
//!   an equal one, acknowledged to two holdings — and both were acknowledged: two holders were
//!   told tokens out of order, and a fence fed by them either rejects the later holder or
//!   accepts the earlier one's stale writes;
//! - **acknowledged twice**: one token acknowledged to two different holdings (concurrent or
//!   not) — the fence cannot tell them apart;
//! - **lost, unacknowledged**: the store granted a token that no holder heard of (the holder
//!   was killed, or the store lost the grant in a failover before answering) and a later grant
//!   reused or undercut it. No holder can write with a token it never received, so this is
//!   reported apart: what the store forgot, not harm at the resource.

/// One grant as the run saw it. Times are on one clock for the whole list (the lab's monotonic
/// clock, or the store's own), in ms.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantSeen {
    pub token: i64,
    /// Who the grant was made to (`holder-a`, `h2.1`).
    pub holder: String,
    /// When the request was sent (or, from a store's record, when the grant was written).
    pub invoke_ms: f64,
    /// When the answer arrived; `None`: it never did.
    pub complete_ms: Option<f64>,
    /// Whether a holder received the token.
    pub acknowledged: bool,
    /// The line the evidence quotes for it.
    pub line: String,
}

impl GrantSeen {
    /// A grant a holder acknowledged: `token` to `holder`, asked at `invoke_ms`, answered at
    /// `complete_ms`, quoted as `line`.
    pub fn acknowledged(
        holder: &str,
        token: i64,
        invoke_ms: f64,
        complete_ms: f64,
        line: String,
    ) -> GrantSeen {
        GrantSeen {
            token,
            holder: holder.to_owned(),
            invoke_ms,
            complete_ms: Some(complete_ms),
            acknowledged: true,
            line,
        }
    }
}

/// `found` among `grants` as one evidence line: each finding with its excerpt — or, with none,
/// the tokens in the order given (`none: 27 then 36`).
pub fn shown(grants: &[GrantSeen], found: &[Regression]) -> String {
    if found.is_empty() {
        let tokens: Vec<String> = grants.iter().map(|g| g.token.to_string()).collect();
        return format!("none: {}", tokens.join(" then "));
    }
    found
        .iter()
        .map(|r| format!("{} — {}", r.what, r.excerpt.join(" ⟶ ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What kind of regression a pair of grants shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Backwards,
    AcknowledgedTwice,
    LostUnacknowledged,
}

impl Kind {
    /// Whether it harms the fence (an acknowledged token out of order or repeated); a lost,
    /// unacknowledged grant does not.
    pub fn harms(self) -> bool {
        self != Kind::LostUnacknowledged
    }
}

/// One finding, with the two grants that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regression {
    pub kind: Kind,
    pub what: String,
    /// The earlier grant's line, then the later one's.
    pub excerpt: Vec<String>,
    /// Index in the input of the earlier grant.
    pub earlier: usize,
    /// Index in the input of the later grant (where a timeline marks it).
    pub later: usize,
}

/// Every regression among `grants` (in any order): for each grant, the first earlier grant —
/// completed before it was invoked — whose token it does not exceed; and every token that two
/// acknowledged holdings share. Each pair is reported once.
pub fn regressions(grants: &[GrantSeen]) -> Vec<Regression> {
    let mut found = Vec::new();
    for (j, b) in grants.iter().enumerate() {
        // Twice acknowledged: the first other holding acknowledged with the same token.
        if b.acknowledged {
            if let Some((i, a)) = grants[..j]
                .iter()
                .enumerate()
                .find(|(_, a)| a.acknowledged && a.token == b.token)
            {
                found.push(Regression {
                    kind: Kind::AcknowledgedTwice,
                    what: format!(
                        "token {} was acknowledged to two holdings ({} and {})",
                        b.token, a.holder, b.holder
                    ),
                    excerpt: vec![a.line.clone(), b.line.clone()],
                    earlier: i,
                    later: j,
                });
                continue;
            }
        }
        let earlier = grants.iter().enumerate().filter(|(_, a)| {
            a.complete_ms.is_some_and(|done| done < b.invoke_ms) && b.token <= a.token
        });
        // Harm first: an acknowledged earlier grant outranks a lost one.
        let Some((i, a)) = earlier
            .clone()
            .find(|(_, a)| a.acknowledged && b.acknowledged)
            .or_else(|| earlier.clone().next())
        else {
            continue;
        };
        let (kind, what) = if a.acknowledged && b.acknowledged {
            (
                Kind::Backwards,
                format!(
                    "token {} was granted to {} after token {} had been granted to {} (real-time order): the token went back",
                    b.token, b.holder, a.token, a.holder
                ),
            )
        } else {
            let nobody = if a.acknowledged { b } else { a };
            (
                Kind::LostUnacknowledged,
                format!(
                    "token {} was granted to {}, which never heard of it, and token {} came after it: a lost grant, not a token two holders used",
                    nobody.token, nobody.holder, b.token
                ),
            )
        };
        found.push(Regression {
            kind,
            what,
            excerpt: vec![a.line.clone(), b.line.clone()],
            earlier: i,
            later: j,
        });
    }
    found
}

/// The check's own control on a run's grants: the smallest regression planted in a copy of
/// `grants` — a grant acknowledged to `planted`, one token below the greatest acknowledged,
/// asked a microsecond after the last grant was answered — and whether [`regressions`] finds
/// it (backwards, or a token acknowledged twice when that one was granted too), with the
/// evidence line. The runs' own regressions are large (a suffix back to 0,
/// a revision several steps back); a check that finds them could still miss one token behind.
/// `None` when no grant completed.
pub fn finds_the_smallest(grants: &[GrantSeen]) -> Option<(bool, String)> {
    let acknowledged = grants.iter().filter(|g| g.acknowledged);
    let done = acknowledged
        .clone()
        .filter_map(|g| g.complete_ms)
        .max_by(f64::total_cmp)?;
    let max = acknowledged.map(|g| g.token).max()?;
    let token = max - 1;
    let mut copy = grants.to_vec();
    copy.push(GrantSeen::acknowledged(
        "planted",
        token,
        done + 0.001,
        done + 0.002,
        format!("planted ACQUIRED token={token} a microsecond after the last grant answered"),
    ));
    let planted = copy.len() - 1;
    let found = regressions(&copy);
    let finding = found.iter().find(|r| r.later == planted && r.kind.harms());
    let shown = finding.map_or_else(
        || format!("nothing found for token {token} after token {max}"),
        |r| r.what.clone(),
    );
    Some((finding.is_some(), shown))
}

/// [`finds_the_smallest`] on a run's `grants`, as a check of the run: the smallest regression
/// planted in a copy must be found, or the check that found none in the run proves nothing.
pub fn check_finds_the_smallest(rec: &mut harness::evidence::Recorder, grants: &[GrantSeen]) {
    let (caught, shown) = finds_the_smallest(grants).unwrap_or((
        false,
        "no grant of the run completed: nothing to plant after".into(),
    ));
    rec.check_that(
        "the token-regression check finds the smallest regression planted in a copy of these grants (a token one below the greatest, granted a microsecond after the last answer)",
        caught,
        shown,
    );
}

/// [`regressions`] of a run's grants, once [`check_finds_the_smallest`] checked them.
pub fn regressions_with_control(
    rec: &mut harness::evidence::Recorder,
    grants: &[GrantSeen],
) -> Vec<Regression> {
    check_finds_the_smallest(rec, grants);
    regressions(grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(
        token: i64,
        holder: &str,
        invoke: f64,
        complete: Option<f64>,
        acked: bool,
    ) -> GrantSeen {
        GrantSeen {
            token,
            holder: holder.into(),
            invoke_ms: invoke,
            complete_ms: complete,
            acknowledged: acked,
            line: format!("{holder} token={token}"),
        }
    }

    #[test]
    fn tokens_that_rise_with_gaps_are_no_regression() {
        let grants = [
            grant(3, "a", 0.0, Some(1.0), true),
            grant(9, "b", 5.0, Some(6.0), true),
            grant(10, "c", 7.0, Some(8.0), true),
        ];
        assert_eq!(regressions(&grants), Vec::new());
    }

    #[test]
    fn a_smaller_token_after_a_completed_grant_is_backwards() {
        // R1's shape: the suffix starts again after the parent was deleted.
        let grants = [
            grant(1, "holder-a", 0.0, Some(2.0), true),
            grant(0, "holder-b", 10.0, Some(12.0), true),
        ];
        let found = regressions(&grants);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::Backwards);
        assert!(found[0].kind.harms());
        assert_eq!(found[0].later, 1);
        assert!(
            found[0]
                .what
                .contains("token 0 was granted to holder-b after token 1"),
            "{}",
            found[0].what
        );
        assert_eq!(found[0].excerpt, ["holder-a token=1", "holder-b token=0"]);
    }

    #[test]
    fn one_token_acknowledged_to_two_holdings_is_told_apart() {
        // R2's shape: the counter's INCR lost with the primary, the replica hands 7 out again.
        let grants = [
            grant(7, "holder-a", 0.0, Some(1.0), true),
            grant(7, "holder-b", 10.0, Some(11.0), true),
        ];
        let found = regressions(&grants);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::AcknowledgedTwice);
        assert!(found[0]
            .what
            .contains("token 7 was acknowledged to two holdings"));
    }

    #[test]
    fn concurrent_grants_with_one_token_are_acknowledged_twice() {
        // Overlapping in time: no real-time order, still one token for two holdings.
        let grants = [
            grant(4, "a", 0.0, Some(10.0), true),
            grant(4, "b", 5.0, Some(6.0), true),
        ];
        let found = regressions(&grants);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, Kind::AcknowledgedTwice);
    }

    #[test]
    fn concurrent_grants_in_any_token_order_are_no_regression() {
        // b was invoked before a completed: either order of their tokens is allowed.
        let grants = [
            grant(5, "a", 0.0, Some(10.0), true),
            grant(4, "b", 5.0, Some(6.0), true),
        ];
        assert_eq!(regressions(&grants), Vec::new());
    }

    #[test]
    fn a_lost_grant_nobody_heard_of_is_reported_apart() {
        // The store's record has token 8 for a holder killed before it answered; the store
        // then hands out 8 again — nobody wrote with the first.
        let grants = [
            grant(8, "h1.0", 0.0, Some(1.0), false),
            grant(8, "h2.0", 10.0, Some(11.0), true),
        ];
        let found = regressions(&grants);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::LostUnacknowledged);
        assert!(!found[0].kind.harms());
        assert!(found[0].what.contains("h1.0, which never heard of it"));
    }

    #[test]
    fn an_acknowledged_regression_outranks_a_lost_one_for_the_same_grant() {
        let grants = [
            grant(9, "lost", 0.0, Some(1.0), false),
            grant(6, "a", 2.0, Some(3.0), true),
            grant(5, "b", 10.0, Some(11.0), true),
        ];
        let found = regressions(&grants);
        let kinds: Vec<Kind> = found.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [Kind::LostUnacknowledged, Kind::Backwards],
            "{found:?}"
        );
        assert!(found[1]
            .what
            .contains("token 5 was granted to b after token 6"));
    }

    #[test]
    fn the_smallest_regression_planted_is_found_and_a_blind_check_would_miss_it() {
        let grants = [
            grant(3, "a", 0.0, Some(1.0), true),
            grant(9, "b", 5.0, Some(6.0), true),
        ];
        let (caught, shown) = finds_the_smallest(&grants).expect("a completed grant");
        assert!(caught, "{shown}");
        assert!(
            shown.contains("token 8 was granted to planted after token 9"),
            "{shown}"
        );
        // Equal or smaller by one is what the check must see: a check that looked only for a
        // token smaller by more (a suffix back to 0) would pass the copy.
        assert_eq!(regressions(&grants), Vec::new());
        assert_eq!(finds_the_smallest(&[grant(1, "a", 0.0, None, true)]), None);
    }

    #[test]
    fn the_planted_regression_is_quoted_even_beside_a_runs_own() {
        // A run that shows a regression of its own (R1's suffix back to 0): the control must
        // quote the planted grant's finding, not the first harm it meets — else a check blind to
        // the planted one would pass on the run's own regression.
        let grants = [
            grant(5, "a", 0.0, Some(1.0), true),
            grant(0, "b", 5.0, Some(6.0), true),
        ];
        assert_eq!(regressions(&grants).len(), 1);
        let (caught, shown) = finds_the_smallest(&grants).expect("a completed grant");
        assert!(caught, "{shown}");
        assert!(
            shown.contains("token 4 was granted to planted after token 5"),
            "{shown}"
        );
    }
}
