//! The experiments, one file each, named after the fault it injects: each opens with a `//!` that
//! names the fault and the property checked, then its `const SPEC`, then its timeline. They stand
//! on the kit (`crate::kit`) and the testbed; the registry above lists them.

pub mod f10_pause_before_the_check;
pub mod f11_lease_table_reset;
pub mod f12_holder_crash;
pub mod f13_clock_drift;
pub mod f14_lease_store_failover;
pub mod f15_delayed_write;
pub mod f16_partitioned_holder;
pub mod f17_patroni_failover;
pub mod f1_normal_path;
pub mod f2_now_in_long_transaction;
pub mod f3_concurrent_acquire;
pub mod f4_paused_holder;
pub mod f5_paused_holder_unfenced;
pub mod f6_interleavings;
pub mod f7_fence_granularity;
pub mod f8_database_crash;
pub mod f9_unfenceable_side_effect;
pub mod preflight;
pub mod r1_zookeeper_suffix;
pub mod r2_redis_sentinel_failover;
pub mod r3_etcd_restore;
pub mod rl1_redlock_paused_client;
pub mod rl2_redlock_clock_jump;
pub mod rl3_redlock_restart;
pub mod rl4_redlock_paused_acquire;
pub mod s1_session_lock_no_timeout;
pub mod s2_session_lock_server_crash;
#[cfg(feature = "mariadb")]
pub mod s3_getlock_replica;
pub mod s3_session_lock_failover;
pub mod s4_lock_in_the_write_transaction;
pub mod s5_session_lock_partition;
pub mod s6_session_lock_patroni;
pub mod u1_fenced_job_lease;
pub mod u2_stale_completion;
pub mod u3_database_time;
pub mod u4_reacquired_instance;
pub mod u5_check_then_complete;
