//! What the U scenarios share: the lease name, unique owner tokens, and the skip reason when the
//! lab was built without MariaDB support.

/// The lease the U scenarios contend for (the source's singleton reconciliation job).
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub const JOB_LEASE: &str = "admin:reconciliation";

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

/// The U-series' timeline: the job lease and the runs live in one MariaDB database, one lane.
pub fn lanes() -> harness::evidence::Lanes {
    let store = harness::evidence::Lane::new("fencing", "fencing (MariaDB: job lease and runs)");
    harness::evidence::Lanes {
        lease: store.clone(),
        resource: store,
        ..Default::default()
    }
}

/// An owner token that identifies an *instance* (seed 000: "the unique runner identity"): the
/// same for every acquisition that instance makes in this lab process (U4).
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub fn instance_token(instance: &str) -> String {
    format!("instance-{instance}-{}", std::process::id())
}

/// Declares a U scenario: with the `mariadb` feature its `run` is the calling module's
/// `imp::run`; without it, the scenario reports a skip with [`NO_FEATURE`] — never a pass.
/// Why the U-series says skip with `--holder-cmd`.
pub const NOT_YOUR_HOLDER: &str = "the U-series runs job-lease designs on MariaDB through the lab's own \
     clients and holder (holder --store mariadb); a holder of yours takes its lease from PostgreSQL";

macro_rules! u_scenario {
    ($name:ident, $id:literal, $checks:literal, $title:literal, $about:expr $(,)?) => {
        pub struct $name;

        impl crate::Scenario for $name {
            fn id(&self) -> &'static str {
                $id
            }

            fn title(&self) -> &'static str {
                $title
            }

            fn about(&self) -> crate::About {
                $about
            }

            fn checks(&self) -> usize {
                $checks
            }

            fn needs(&self) -> crate::Needs {
                crate::Needs::MariaDb
            }

            fn lanes(&self) -> harness::evidence::Lanes {
                crate::u_common::lanes()
            }

            fn holder_points(&self) -> Result<&'static [crate::FaultPoint], &'static str> {
                Err(crate::u_common::NOT_YOUR_HOLDER)
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
                        rec.skip(crate::u_common::NO_FEATURE);
                    }
                    Ok(())
                })
            }
        }
    };
}
pub(crate) use u_scenario;
