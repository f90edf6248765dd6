//! What the U scenarios share: the lease name, unique owner tokens, and the skip reason when the
//! lab was built without MariaDB support.

#[cfg_attr(not(feature = "mariadb"), allow(unused_imports))]
pub use crate::testbed::maria::JOB_LEASE;

/// Why a U scenario cannot run in a build without the `mariadb` feature, and how to make it run.
#[cfg_attr(feature = "mariadb", allow(dead_code))]
pub const NO_FEATURE: &str =
    "needs MariaDB support, which this build lacks: ./run.sh builds with it when \
    MariaDB is installed (apt-get install -y mariadb-server), or build with --features lab/mariadb";

/// An owner token unique to this attempt: holder, pid, and a per-process counter.
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub fn owner_token(holder: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{holder}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A step on the U-series' one lane: `actor` did `action` holding fence `fence`, with nothing
/// more to say than that (the steps with an outcome call `Recorder::step` themselves).
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub fn on_lane(
    rec: &mut harness::evidence::Recorder,
    mark: harness::evidence::Mark,
    actor: &str,
    action: &str,
    fence: i64,
) {
    rec.step(mark, actor, action, Some(fence), "", None);
}

/// An owner token that identifies an *instance* (seed 000: "the unique runner identity"): the
/// same for every acquisition that instance makes in this lab process (U4).
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub fn instance_token(instance: &str) -> String {
    format!("instance-{instance}-{}", std::process::id())
}

/// Why the U-series says skip with `--holder-cmd`.
pub const NOT_YOUR_HOLDER: &str = "the U-series runs job-lease designs on MariaDB through the lab's own \
     clients and holder (holder --store mariadb); a holder of yours takes its lease from PostgreSQL";

/// What every U scenario's spec shares: each names its own `id`, `title`, `about` and `checks`
/// and takes the rest from here (`..u_common::SERIES`) — MariaDB only (no container backend, no
/// Patroni, no lock service: the job lease is a row of its own database), no holder of the
/// user's, and one lane for the job lease and the runs.
pub const SERIES: crate::Spec = crate::Spec {
    id: "U",
    title: "",
    about: crate::About {
        fault: "",
        shows: "",
        paragraph: "",
    },
    checks: crate::Checks::fixed(0),
    needs: crate::Needs::MariaDb,
    applies: crate::Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: crate::LockServices::None(crate::ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NOT_YOUR_HOLDER),
    fault_moments: &[],
    // The job lease and the runs live in one MariaDB database: one lane.
    lanes: crate::StoreLanes::OneStore("fencing", "fencing (MariaDB: job lease and runs)"),
};

/// Declares the U scenario `$name`, whose spec is the calling module's `SPEC`: with the `mariadb`
/// feature its `run` is the calling module's `imp::run`; without it, the scenario reports a skip
/// with [`NO_FEATURE`] — never a pass.
macro_rules! u_scenario {
    ($name:ident) => {
        pub struct $name;

        impl crate::Scenario for $name {
            fn spec(&self) -> &crate::Spec {
                &SPEC
            }

            fn run<'a>(
                &'a self,
                bed: &'a mut crate::Testbed,
                rec: &'a mut harness::evidence::Recorder,
            ) -> crate::Outcome<'a> {
                Box::pin(async move {
                    #[cfg(feature = "mariadb")]
                    imp::run(bed, rec).await?;
                    #[cfg(not(feature = "mariadb"))]
                    {
                        let _ = bed;
                        rec.skip(crate::kit::u_common::NO_FEATURE);
                    }
                    Ok(())
                })
            }
        }
    };
}
pub(crate) use u_scenario;
