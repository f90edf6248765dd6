//! The order statistics both benches report: a sample sorted once, and its percentiles.

/// The value at fraction `p` (0.5 the median, 0.99 the p99) of a sample sorted ascending; NaN
/// for an empty sample.
pub(crate) fn percentile(sorted_ms: &[f64], p: f64) -> f64 {
    if sorted_ms.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted_ms.len() as f64 - 1.0) * p).round() as usize;
    sorted_ms[i.min(sorted_ms.len() - 1)]
}

/// The sample sorted ascending (NaNs last).
pub(crate) fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_from_the_sorted_sample() {
        let v = sorted((1..=100).map(f64::from).collect());
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99)), (51.0, 99.0));
        assert!(percentile(&[], 0.5).is_nan());
    }
}
