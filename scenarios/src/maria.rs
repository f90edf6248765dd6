//! The MariaDB side of the lab (`--features mariadb`): a throwaway server started the first time
//! a U scenario needs it, the `fencing` database, and the fenced job lease store on it — the
//! statements of the job-lease design under test (`seed000` unless `--sut` names another).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fencing::fenced_job::{self, JobLeaseStore};
use fencing::profile::JobProfile;
use harness::server::mariadb::{MariaBinaries, MariaServer};
use harness::server::Server;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{ConnectOptions, Connection};

pub const DATABASE: &str = "fencing";

/// A running MariaDB with the fenced-job tables.
pub struct MariaEnv {
    pub server: MariaServer,
    pub jobs: JobLeaseStore,
}

impl MariaEnv {
    /// `Ok(Err(reason))` when MariaDB is not installed here (a skip); `Err` when it is but
    /// could not be started (a failure).
    pub async fn start(profile: Arc<JobProfile>) -> anyhow::Result<Result<MariaEnv, String>> {
        // The probe blocks for a moment (`mariadbd --version`): off the async workers.
        let bins = match tokio::task::spawn_blocking(MariaBinaries::locate).await? {
            Ok(bins) => bins,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let mut server = MariaServer::create(bins).await?;
        match Self::provision(&server, profile).await {
            Ok(jobs) => Ok(Ok(MariaEnv { server, jobs })),
            Err(e) => {
                server.stop().await;
                Err(e)
            }
        }
    }

    /// Creates the database and the design's tables; the store on them.
    async fn provision(
        server: &MariaServer,
        profile: Arc<JobProfile>,
    ) -> anyhow::Result<JobLeaseStore> {
        let root = server.connect_options(None, "root");
        let mut admin = root
            .connect()
            .await
            .context("failed to connect to MariaDB as root")?;
        fenced_job::create_database(&mut admin, DATABASE).await?;
        admin.close().await?;
        let pool = MySqlPoolOptions::new()
            .max_connections(4)
            .connect_with(root.database(DATABASE).disable_statement_logging())
            .await
            .context("failed to open a pool on MariaDB")?;
        fenced_job::reset(&pool, &profile).await?;
        Ok(JobLeaseStore::with_profile(pool, profile))
    }

    /// Closes the pool and stops the server (its directory stays if it was kept).
    pub async fn shutdown(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.jobs.pool().close()).await;
        self.server.stop().await;
    }

    /// Empties the design's tables.
    pub async fn reset(&self) -> anyhow::Result<()> {
        Ok(fenced_job::reset(self.jobs.pool(), self.jobs.profile()).await?)
    }

    /// Waits, polling `CURRENT_TIMESTAMP(3)`, until nobody holds the job lease.
    pub async fn until_expired(&self, timeout: Duration) -> anyhow::Result<()> {
        let what = "the job lease is expired by CURRENT_TIMESTAMP(3)";
        harness::wait::until(what, timeout, || {
            self.jobs.is_free(crate::u_common::JOB_LEASE)
        })
        .await?;
        Ok(())
    }
}
