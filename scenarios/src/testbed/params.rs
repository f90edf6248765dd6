//! The run's parameters (docs/guide.md lists the defaults; validated before anything starts),
//! the system under test they resolve to (one profile, the fence the run gates), and the names of
//! what every scenario contends for (the lease, the scope, its parts, the holders). Nothing here
//! starts or reads anything.

use std::sync::Arc;
use std::time::Duration;

use fencing::lease::StoreId;
use fencing::profile::{Dialect, JobProfile, Profile};
use fencing::resource::{fenced_mode_profile, Write, WriteMode, FENCED_MODES};

/// The run's parameters (docs/guide.md lists the defaults). Validated before anything starts,
/// and fixed for the whole run: what changes from one case to the next (the lease store, the TTL
/// it grants, the fence under test) is the case's ([`Case`]), which the runner sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// The case the run asks for: its lease store (`--lease-store`), TTL (`--ttl-ms`) and
    /// system under test (`--sut`, `--fenced-mode`). A case on a lock service may be granted
    /// another TTL ([`crate::Testbed::case`] holds what was granted).
    pub case: Case,
    /// The TTL where a scenario waits for expiry soon after acquiring (F2): 500 ms.
    pub short_ttl: Duration,
    /// How often a holder renews in the background: 400 ms.
    pub renew: Duration,
    /// The local deadline is `ttl - margin` after the request was sent: 300 ms.
    pub margin: Duration,
    /// How many contenders race in F3: 16.
    pub contenders: usize,
    /// The longest a scenario waits for a state (e.g. expiry) before it fails.
    pub wait_timeout: Duration,
    /// The other fences every fence-dependent experiment runs again with, each as a case of its
    /// own (`F4-fenced-single`), right after its run with `sut`: how the default `lab run` gates
    /// every fence the lab offers (seed004-single and seed004-shared share seed004's lease and
    /// floor). Empty: each experiment runs once.
    pub again_with: Vec<Arc<Profile>>,
    /// The job-lease design the U-series runs, on MariaDB: seed 000's own (`seed000`) unless
    /// `--sut` names another.
    pub jobs: Arc<JobProfile>,
    /// The server of the design `--sut` named: the series that runs on the other one does not
    /// apply (its experiments say `skip`). `None`: each series runs its own seed's design.
    pub sut_dialect: Option<Dialect>,
    /// The lock services (their stores' names) on which each experiment that gates on them
    /// ([`crate::Spec::again_on_stores`]: F4, F5) runs again, as a case of its own
    /// (`F4-redis`), when the run's store is the lease table: every store of this build with a
    /// token, unless `--lease-store` named one.
    pub again_on: Vec<StoreId>,
}

/// What one case runs with: the lease store every experiment and every holder asks, the TTL it
/// grants, and the system under test. A run's first case of an experiment runs with the case it
/// asked for ([`Params::case`]); the runner then changes the store (F4 and F5 again on each lock
/// service) or the fence (each fence-dependent experiment again with every other fence), one
/// case at a time, through [`crate::Testbed::use_store`] and [`crate::Testbed::use_sut`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The lease store: `postgres`, the profile's lease table, unless `--lease-store` named a
    /// lock service.
    pub store: StoreId,
    /// The TTL of a holder that must stay valid while it renews (F1, F3, F4, F5): 1500 ms — as
    /// the store grants it (etcd: whole seconds).
    pub ttl: Duration,
    /// The system under test: the profile whose lease table and statements every lease store
    /// runs, whose fence state the resource keeps, and whose write [`WriteMode::Fenced`] runs —
    /// in the lab and in every holder (`--sut`). The built-in `seed004` unless `--fenced-mode`
    /// or `--sut` names another.
    pub sut: Arc<Profile>,
    /// This case runs a fence-dependent experiment again with another fenced mode
    /// (`F6-fenced-single`…): parts that do not use the fenced mode under test were judged in
    /// the first case and are not run (nor counted) again ([`crate::Part::FirstFenceOnly`]).
    pub again_with_fence: bool,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            store: StoreId::Postgres,
            ttl: Duration::from_millis(1500),
            sut: Arc::new(Profile::seed004().clone()),
            again_with_fence: false,
        }
    }
}

impl Case {
    /// How the evidence names this case's fence ([`Params::fence_label_of`] its profile).
    pub fn fence_label(&self) -> &'static str {
        Params::fence_label_of(&self.sut)
    }

    /// How the evidence names `mode`: the fence's label, or the control's name.
    pub fn mode_label(&self, mode: WriteMode) -> &'static str {
        match mode {
            WriteMode::Fenced => self.fence_label(),
            control => control.as_str(),
        }
    }
}

/// The lease every scenario contends for.
pub const LEASE: &str = "report-job";
/// The scope every report part belongs to.
pub const SCOPE: &str = "daily-report";
pub const SUMMARY: &str = "summary";

/// A write of `content` to the summary part of the scope every scenario writes to.
pub fn summary_write<'w>(writer: &'w str, content: &'w str, token: i64) -> Write<'w> {
    Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer,
        token,
    }
}
pub const DETAIL: &str = "detail";
pub const HOLDER_A: &str = "holder-a";
pub const HOLDER_B: &str = "holder-b";
pub const HOLDER_C: &str = "holder-c";

impl Default for Params {
    fn default() -> Self {
        Params {
            case: Case::default(),
            short_ttl: Duration::from_millis(500),
            renew: Duration::from_millis(400),
            margin: Duration::from_millis(300),
            contenders: 16,
            wait_timeout: Duration::from_secs(30),
            again_with: Vec::new(),
            jobs: Arc::new(JobProfile::seed000().clone()),
            sut_dialect: None,
            again_on: Vec::new(),
        }
    }
}

impl Params {
    /// The fewest contenders F3 races: measured here, 2 are often run one after the other by
    /// the server (no race to show); from 4 on they overlap.
    pub const MIN_CONTENDERS: usize = 4;
    /// The most contenders F3 may start (each holds its own connection).
    pub const MAX_CONTENDERS: usize = 500;

    /// Checks that the durations make sense together; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis();
        let ttl = self.case.ttl;
        if ttl.is_zero() || self.short_ttl.is_zero() {
            return Err("--ttl-ms and --short-ttl-ms must be greater than 0".into());
        }
        if self.renew.is_zero() {
            return Err("--renew-ms must be greater than 0".into());
        }
        for (flag, ttl) in [("--ttl-ms", ttl), ("--short-ttl-ms", self.short_ttl)] {
            if self.margin >= ttl {
                return Err(format!(
                    "--margin-ms {} must be smaller than {flag} {}: the local deadline is ttl - margin",
                    ms(self.margin),
                    ms(ttl)
                ));
            }
        }
        if self.renew >= ttl - self.margin {
            return Err(format!(
                "--renew-ms {} must be smaller than --ttl-ms minus --margin-ms ({} ms), or renewals \
                 cannot keep the lease",
                ms(self.renew),
                ms(ttl - self.margin)
            ));
        }
        if !(Self::MIN_CONTENDERS..=Self::MAX_CONTENDERS).contains(&self.contenders) {
            return Err(format!(
                "--contenders {} is out of range: a race needs {} to {} contenders (with fewer, the \
                 server often runs the acquires one after the other and F3 shows no race)",
                self.contenders,
                Self::MIN_CONTENDERS,
                Self::MAX_CONTENDERS
            ));
        }
        Ok(())
    }

    /// How the evidence names the fence of `profile`: its fenced mode for the lab's own
    /// (`fenced-scope`, `fenced-single`, `fenced-shared`), `sut` for a profile of one's own.
    pub fn fence_label_of(profile: &Profile) -> &'static str {
        FENCED_MODES
            .iter()
            .find(|(mode, _)| fenced_mode_profile(mode).is_some_and(|p| *p == *profile))
            .map_or("sut", |(mode, _)| mode)
    }

    /// The connections the cluster must allow for these parameters.
    pub fn max_connections(&self) -> u32 {
        (self.contenders as u32).max(16) + 64
    }
}
