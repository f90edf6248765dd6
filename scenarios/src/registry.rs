//! The registry: every experiment in the order `./run.sh` runs them ([`ALL`]), their deliberately
//! broken variants ([`broken`]), and the resolution of `--only` ids ([`select`]) — the one list
//! that `lab list`, `lab run --only` and the tests read. It sits above the experiments it lists;
//! nothing below it names it.

use crate::experiments::{
    f10_pause_before_the_check, f11_lease_table_reset, f12_holder_crash, f13_clock_drift,
    f14_lease_store_failover, f15_delayed_write, f16_partitioned_holder, f17_patroni_failover,
    f1_normal_path, f2_now_in_long_transaction, f3_concurrent_acquire, f4_paused_holder,
    f5_paused_holder_unfenced, f6_interleavings, f7_fence_granularity, f8_database_crash,
    f9_unfenceable_side_effect, r1_zookeeper_suffix, r2_redis_sentinel_failover, r3_etcd_restore,
    rl1_redlock_paused_client, rl2_redlock_clock_jump, rl3_redlock_restart,
    rl4_redlock_paused_acquire, s1_session_lock_no_timeout, s2_session_lock_server_crash,
    s3_session_lock_failover, s4_lock_in_the_write_transaction, s5_session_lock_partition,
    s6_session_lock_patroni, u1_fenced_job_lease, u2_stale_completion, u3_database_time,
    u4_reacquired_instance, u5_check_then_complete,
};
use crate::Scenario;

/// The order of ids: by series (the letters), then by number — `F9` before `F10`.
pub fn id_order(id: &str) -> (String, u32) {
    let digits = id.find(|c: char| c.is_ascii_digit()).unwrap_or(id.len());
    let (series, number) = id.split_at(digits);
    (series.to_owned(), number.parse().unwrap_or(u32::MAX))
}

/// Every scenario, in the order `./run.sh` runs them.
pub const ALL: &[&dyn Scenario] = &[
    &f1_normal_path::F1,
    &f2_now_in_long_transaction::F2,
    &f3_concurrent_acquire::F3,
    &f4_paused_holder::F4,
    &f5_paused_holder_unfenced::F5,
    &f6_interleavings::F6,
    &f7_fence_granularity::F7,
    &f8_database_crash::F8,
    &f9_unfenceable_side_effect::F9,
    &f10_pause_before_the_check::F10,
    &f11_lease_table_reset::F11,
    &f12_holder_crash::F12,
    &f13_clock_drift::F13 {
        uncovered_rate: None,
    },
    &f14_lease_store_failover::F14 {
        synchronous_names: true,
    },
    &f15_delayed_write::F15 { hold: true },
    &f16_partitioned_holder::F16 { cut: true },
    &f17_patroni_failover::F17 { freeze: true },
    &r1_zookeeper_suffix::R1,
    &r2_redis_sentinel_failover::R2,
    &r3_etcd_restore::R3,
    &rl1_redlock_paused_client::RL1,
    &rl2_redlock_clock_jump::RL2,
    &rl3_redlock_restart::RL3,
    &rl4_redlock_paused_acquire::RL4,
    &s1_session_lock_no_timeout::S1,
    &s2_session_lock_server_crash::S2,
    &s3_session_lock_failover::S3,
    &s4_lock_in_the_write_transaction::S4,
    &s5_session_lock_partition::S5,
    &s6_session_lock_patroni::S6,
    &u1_fenced_job_lease::U1,
    &u2_stale_completion::U2,
    &u3_database_time::U3,
    &u4_reacquired_instance::U4,
    &u5_check_then_complete::U5,
];

/// Deliberately broken variants of experiments, for the tests that prove their checks can fail
/// (a reviewer's "break it and see it fail", kept as a test). Never in [`ALL`].
pub mod broken {
    use crate::Scenario;

    /// F13 with the not-covered rows' clock at rate 1: no drift, so the flaw cannot show and its
    /// negative control must fail.
    pub static F13_UNCOVERED_AT_RATE_1: crate::experiments::f13_clock_drift::F13 =
        crate::experiments::f13_clock_drift::F13 {
            uncovered_rate: Some(1.0),
        };

    /// F14 with part (b)'s `synchronous_standby_names` left empty: replication stays
    /// asynchronous, so the acquire during the cut is acknowledged at once.
    pub static F14_WITHOUT_SYNCHRONOUS_STANDBY: crate::experiments::f14_lease_store_failover::F14 =
        crate::experiments::f14_lease_store_failover::F14 {
            synchronous_names: false,
        };

    /// F15 with A's write sent without holding it in the network: it arrives at once.
    pub static F15_WITHOUT_HOLD: crate::experiments::f15_delayed_write::F15 =
        crate::experiments::f15_delayed_write::F15 { hold: false };

    /// F16 with A's lease connections left alone: no partition, so its renewals go on.
    pub static F16_WITHOUT_CUT: crate::experiments::f16_partitioned_holder::F16 =
        crate::experiments::f16_partitioned_holder::F16 { cut: false };

    /// F17 with the leader's WAL senders left alone (asynchronous mode only): A's second grant
    /// reaches the replicas, so the failover loses nothing.
    pub static F17_WITHOUT_FREEZE: crate::experiments::f17_patroni_failover::F17 =
        crate::experiments::f17_patroni_failover::F17 { freeze: false };

    /// Every broken variant, with the words of a check that must fail in it.
    pub fn all() -> Vec<(&'static dyn Scenario, &'static str)> {
        vec![
            (
                &F13_UNCOVERED_AT_RATE_1,
                "unfenced: A's write, made after B's, is accepted",
            ),
            (
                &F14_WITHOUT_SYNCHRONOUS_STANDBY,
                "A's acquire is not acknowledged: its commit waits on SyncRep",
            ),
            (&F15_WITHOUT_HOLD, "unfenced: A's late write is accepted"),
            (&F16_WITHOUT_CUT, "A's renewals fail during the partition"),
            (
                &F17_WITHOUT_FREEZE,
                "I2 broken — the new leader grants B the token the old one acknowledged to A",
            ),
        ]
    }
}

/// Resolves `--only` ids (case-insensitive) to scenarios, in the order given.
pub fn select(ids: &[String]) -> Result<Vec<&'static dyn Scenario>, String> {
    let known = || {
        ALL.iter()
            .map(|s| s.spec().id)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if ids.is_empty() || ids.iter().all(|id| id.trim().is_empty()) {
        return Err(format!(
            "--only needs at least one scenario id (known: {})",
            known()
        ));
    }
    let mut chosen: Vec<&'static dyn Scenario> = Vec::new();
    for id in ids {
        let id = id.trim();
        let scenario = ALL
            .iter()
            .copied()
            .find(|s| s.spec().id.eq_ignore_ascii_case(id))
            .ok_or_else(|| {
                format!(
                    "unknown scenario id {id:?} in --only (known: {}; see `lab list`)",
                    known()
                )
            })?;
        if chosen.iter().any(|s| s.spec().id == scenario.spec().id) {
            return Err(format!(
                "scenario {} appears twice in --only; name each scenario once",
                scenario.spec().id
            ));
        }
        chosen.push(scenario);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_ordered_by_series_then_number() {
        let ids: Vec<_> = ALL.iter().map(|s| s.spec().id).collect();
        let mut sorted = ids.clone();
        sorted.sort_by_key(|id| id_order(id));
        sorted.dedup();
        assert_eq!(ids, sorted);
        assert!(ids
            .iter()
            .all(|id| id_order(id).1 != u32::MAX && !id_order(id).0.is_empty()));
    }

    #[test]
    fn f10_orders_after_f9_and_before_u1() {
        let mut ids = vec!["U1", "F10", "F2", "F9", "U10", "U2"];
        ids.sort_by_key(|id| id_order(id));
        assert_eq!(ids, ["F2", "F9", "F10", "U1", "U2", "U10"]);
    }

    #[test]
    fn select_rejects_unknown_empty_and_duplicate_ids() {
        assert!(select(&["F9X".into()])
            .unwrap_err()
            .contains("unknown scenario id"));
        assert!(select(&[]).unwrap_err().contains("at least one"));
        assert!(select(&["".into()]).unwrap_err().contains("at least one"));
        assert!(select(&["F1".into(), "f1".into()])
            .unwrap_err()
            .contains("twice"));
        let ids: Vec<_> = select(&["f2".into(), "F1".into()])
            .unwrap()
            .iter()
            .map(|s| s.spec().id)
            .collect();
        assert_eq!(ids, ["F2", "F1"]);
    }
}
