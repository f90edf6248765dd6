//! I1, for efficiency only: holdings (grant to expiry or release, database clock) that overlap,
//! counted as a statistic, never failed.

use std::collections::BTreeMap;

use super::{Observed, Verdict};

pub(super) fn check_i1(o: &Observed<'_>, v: &mut Verdict) {
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
    use crate::chaos::checker::fixtures::*;

    #[test]
    fn overlapping_holdings_are_counted_not_failed() {
        let (ops, parts, _) = stale_history(false);
        let lease = vec![lease(1, 0, 2_500_000), lease(2, 2_000_000, 3_500_000)];
        let v = run(&ops, &parts, &lease);
        assert_eq!(v.overlapping_holdings, 1);
    }
}
