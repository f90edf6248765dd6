//! The holder's side for seed 000's fenced job lease on MariaDB (`--store mariadb`, feature
//! `mariadb`): the holder's id is its owner token, its write is the completion of the run it
//! started after acquiring. It runs the job profile's statements through `fencing`; it holds no
//! SQL of its own and knows no scenario.

use std::sync::Arc;
use std::time::Duration;

use fencing::fenced_job::{JobLease, JobLeaseStore};
use fencing::lease::{Grant, LeaseStore};
use fencing::profile::JobProfile;
use holder_protocol::HolderFlags;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

use super::{with_causes, Side};

/// How the completion checks the holding.
#[derive(Debug, Clone, Copy)]
pub enum Completion {
    /// The join on the lease: run and lease agree on fence and owner, unexpired.
    Fenced,
    /// `WHERE run_id = ?` only: the negative control.
    RunIdOnly,
}

impl Completion {
    pub fn parse(mode: &str) -> Result<Completion, String> {
        match mode {
            "fenced-completion" => Ok(Completion::Fenced),
            "run-id-only" => Ok(Completion::RunIdOnly),
            other => Err(format!(
                "unknown completion {other:?}; expected fenced-completion or run-id-only"
            )),
        }
    }
}

/// The job lease, reached for its holding through the trait every lease store implements, and
/// for its runs through the job store itself (a run is the resource side: started under a
/// holding, completed by the fenced join).
pub struct JobSide {
    lease: Arc<dyn LeaseStore>,
    jobs: JobLeaseStore,
    completion: Completion,
}

/// The database the fenced-job tables live in (the lab makes it).
const DATABASE: &str = "fencing";

/// The job-lease design under test: the MariaDB profile `--sut` names, or seed 000's own.
pub fn design_of(flags: &HolderFlags) -> Result<Arc<JobProfile>, String> {
    match &flags.sut {
        Some(arg) => JobProfile::load(arg)
            .map(Arc::new)
            .map_err(|e| e.to_string()),
        None => Ok(Arc::new(JobProfile::seed000().clone())),
    }
}

impl Side for JobSide {
    type Mode = Completion;

    async fn connect(
        flags: &HolderFlags,
        completion: Completion,
        _for_renewer: bool,
    ) -> Result<JobSide, String> {
        let opts = MySqlConnectOptions::new()
            .socket(flags.socket_dir.join("mysqld.sock"))
            .username("root")
            .database(DATABASE);
        let pool = MySqlPoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .map_err(|e| format!("failed to connect to MariaDB: {e}"))?;
        let jobs = JobLeaseStore::with_profile(pool, design_of(flags)?)
            .with_margin(Duration::from_millis(flags.margin_ms));
        Ok(JobSide {
            lease: Arc::new(jobs.clone()),
            jobs,
            completion,
        })
    }

    async fn acquire(&self, flags: &HolderFlags) -> Result<Option<Grant>, String> {
        let ttl = Duration::from_millis(flags.ttl_ms);
        let Some(grant) = self
            .lease
            .acquire(&flags.lease, &flags.holder, ttl)
            .await
            .map_err(|e| with_causes(&e))?
        else {
            return Ok(None);
        };
        let run_id = flags.run_id.as_deref().unwrap_or_default();
        self.jobs
            .start_run(run_id, &JobLease::of(&grant))
            .await
            .map_err(|e| with_causes(&e))?;
        Ok(Some(grant))
    }

    fn lease(&self) -> &dyn LeaseStore {
        self.lease.as_ref()
    }

    async fn write(&self, flags: &HolderFlags, held: &Grant) -> Result<bool, String> {
        let run_id = flags.run_id.as_deref().unwrap_or_default();
        let done = match self.completion {
            Completion::Fenced => self.jobs.complete_run(run_id, &JobLease::of(held)).await,
            Completion::RunIdOnly => self.jobs.complete_run_by_id(run_id).await,
        };
        done.map_err(|e| with_causes(&e))
    }
}
