//! The experiments (SPEC §5) and their contract. Each scenario lives in its own file, named after
//! the fault it injects, with a `//!` that names the fault and the property checked, then its
//! [`Spec`] (what it is and needs, as data: `spec.rs`); this file is the contract they implement
//! ([`Scenario`]: the spec and the timeline) and [`ALL`], the one list that `lab list`, `lab run
//! --only` and the tests read. Running them is `runner.rs`.
//!
//! A scenario talks to the system under test only through `fencing`'s stores, to the cluster and
//! the holder processes only through the harness, and reports only through the [`Recorder`]. It
//! never prints, never sleeps to wait for a state, and never calls kill(2) itself.

use std::future::Future;
use std::pin::Pin;

use harness::evidence::Recorder;

pub mod chaos;
pub mod conformance;
mod f10_pause_before_the_check;
mod f11_lease_table_reset;
mod f12_holder_crash;
mod f13_clock_drift;
mod f14_lease_store_failover;
mod f15_delayed_write;
mod f16_partitioned_holder;
mod f17_patroni_failover;
mod f1_normal_path;
mod f2_now_in_long_transaction;
mod f3_concurrent_acquire;
mod f4_paused_holder;
mod f5_paused_holder_unfenced;
mod f6_interleavings;
mod f7_fence_granularity;
mod f8_database_crash;
mod f9_unfenceable_side_effect;
mod latch;
/// The lock libraries people ship, frozen as they ship: the library card (feature `lock-services`).
#[cfg(feature = "lock-services")]
pub mod library;
mod lost_create;
mod maria;
mod paused_holder;
mod preflight;
mod r1_zookeeper_suffix;
mod r2_redis_sentinel_failover;
mod r3_etcd_restore;
mod redlock_majorities;
mod rl1_redlock_paused_client;
mod rl2_redlock_clock_jump;
mod rl3_redlock_restart;
mod rl4_redlock_paused_acquire;
mod runner;
mod s1_session_lock_no_timeout;
mod s2_session_lock_server_crash;
#[cfg(feature = "mariadb")]
mod s3_getlock_replica;
mod s3_session_lock_failover;
mod s4_lock_in_the_write_transaction;
mod s5_session_lock_partition;
mod s6_session_lock_patroni;
mod session_locks;
mod spec;
mod stale_handle;
pub mod testbed;
pub mod tokens_table;
mod u1_fenced_job_lease;
mod u2_stale_completion;
mod u3_database_time;
mod u4_reacquired_instance;
mod u5_check_then_complete;
mod u_common;

pub use preflight::P0;
pub use runner::{join_all, run_all, run_all_on, Images};
pub use spec::{
    About, Applies, Checks, LockServices, Needs, Part, Spec, StoreLanes, NO_HOLDER,
    ON_THE_LEASE_TABLE,
};
pub use testbed::{Backend, Case, Params, Replication, Testbed};

/// What a scenario's `run` returns: `Err` means it could not complete (a failed check).
pub type Outcome<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;

/// Where an experiment stops a holder process (docs/holder-protocol.md, "The fault points").
/// Every holder stands at the write point; the others are asked for with a flag, which a holder
/// that does not implement them refuses with exit 2 (bad arguments) — how a holder of the
/// user's (`--holder-cmd`) says which it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultPoint {
    /// `AT_WRITE_POINT`: the check passed, the write not yet sent.
    WritePoint,
    /// `BEFORE_CHECK` (`--wait-before-check`): before the local-deadline check.
    BeforeCheck,
    /// `BEFORE_COMMIT` (`--wait-before-commit`): inside the write's transaction.
    BeforeCommit,
    /// After `WRITE` (`--wait-after-write`): the write committed, the renew not yet tried.
    AfterWrite,
}

impl FaultPoint {
    /// The points a holder is asked for with a flag.
    pub const ASKED: [FaultPoint; 3] = [
        FaultPoint::BeforeCheck,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterWrite,
    ];

    /// The point as the protocol names it, with the flag that asks for it.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::WritePoint => "AT_WRITE_POINT",
            FaultPoint::BeforeCheck => "BEFORE_CHECK (--wait-before-check)",
            FaultPoint::BeforeCommit => "BEFORE_COMMIT (--wait-before-commit)",
            FaultPoint::AfterWrite => "the stop after WRITE (--wait-after-write)",
        }
    }

    /// Sets the flag that asks a holder to stop here.
    pub fn ask(self, flags: &mut holder_protocol::HolderFlags) {
        match self {
            FaultPoint::WritePoint => {}
            FaultPoint::BeforeCheck => flags.wait_before_check = true,
            FaultPoint::BeforeCommit => flags.wait_before_commit = true,
            FaultPoint::AfterWrite => flags.wait_after_write = true,
        }
    }
}

/// One experiment: what it is and needs, as data ([`Scenario::spec`]), and its timeline
/// ([`Scenario::run`]). Adding one is one file that opens with its `const SPEC` and implements
/// this trait, plus one line in [`ALL`] (ARCHITECTURE.md, "Adding an experiment").
pub trait Scenario: Sync {
    /// What it is and what it needs ([`Spec`]): everything the runner, `lab list`, the README's
    /// table, the interruption audit and the report know of it.
    fn spec(&self) -> &Spec;
    /// Runs on empty tables (the runner resets them) and records its checks in `rec`.
    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a>;
}

/// The order of ids: by series (the letters), then by number — `F9` before `F10`.
pub fn id_order(id: &str) -> (String, u32) {
    let digits = id.find(|c: char| c.is_ascii_digit()).unwrap_or(id.len());
    let (series, number) = id.split_at(digits);
    (series.to_owned(), number.parse().unwrap_or(u32::MAX))
}

impl std::fmt::Debug for dyn Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.spec().id)
    }
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
    pub static F13_UNCOVERED_AT_RATE_1: crate::f13_clock_drift::F13 = crate::f13_clock_drift::F13 {
        uncovered_rate: Some(1.0),
    };

    /// F14 with part (b)'s `synchronous_standby_names` left empty: replication stays
    /// asynchronous, so the acquire during the cut is acknowledged at once.
    pub static F14_WITHOUT_SYNCHRONOUS_STANDBY: crate::f14_lease_store_failover::F14 =
        crate::f14_lease_store_failover::F14 {
            synchronous_names: false,
        };

    /// F15 with A's write sent without holding it in the network: it arrives at once.
    pub static F15_WITHOUT_HOLD: crate::f15_delayed_write::F15 =
        crate::f15_delayed_write::F15 { hold: false };

    /// F16 with A's lease connections left alone: no partition, so its renewals go on.
    pub static F16_WITHOUT_CUT: crate::f16_partitioned_holder::F16 =
        crate::f16_partitioned_holder::F16 { cut: false };

    /// F17 with the leader's WAL senders left alone (asynchronous mode only): A's second grant
    /// reaches the replicas, so the failover loses nothing.
    pub static F17_WITHOUT_FREEZE: crate::f17_patroni_failover::F17 =
        crate::f17_patroni_failover::F17 { freeze: false };

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
