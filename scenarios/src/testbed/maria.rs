//! The MariaDB side of the lab: a throwaway server started the first time a U scenario needs
//! it, the `fencing` database, and the fenced job lease store on it — the statements of the
//! job-lease design under test (`seed000` unless `--sut` names another).
//!
//! [`MariaSlot`] is always compiled: it is where a lab keeps that server, empty in a build
//! without the feature `mariadb` (the U-series then says skip, `u_common`). The server and the
//! store themselves need the MySQL driver: `imp`, behind the feature — the one place the lab's
//! shared code names it.

use std::sync::Arc;
use std::sync::Mutex;

/// The lease the U scenarios contend for (the source's singleton reconciliation job).
#[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
pub const JOB_LEASE: &str = "admin:reconciliation";

/// The MariaDB server of a lab's U-series, once one ran; a build without MariaDB support never
/// starts one.
#[derive(Default)]
pub struct MariaSlot {
    #[cfg(feature = "mariadb")]
    pub env: Option<imp::MariaEnv>,
    /// The `mariadb` command line that connects to that server, once it runs (`lab run --step`
    /// prints it at the U-series' steps).
    pub client: Arc<Mutex<Option<String>>>,
}

impl MariaSlot {
    /// Keeps the server's directory after the lab ends (it is stopped): the line saying where.
    pub fn keep(&mut self) -> Option<String> {
        #[cfg(feature = "mariadb")]
        if let Some(m) = self.env.as_mut() {
            use harness::server::Server as _;
            m.server.keep_on_drop();
            return Some(format!(
                "kept the MariaDB directory at {} (server log {}); it is stopped",
                m.server.root().display(),
                m.server.log_path().display()
            ));
        }
        None
    }

    /// Stops the server, if one runs (its directory stays if it was kept).
    pub async fn shutdown(&mut self) {
        #[cfg(feature = "mariadb")]
        if let Some(env) = self.env.take() {
            env.shutdown().await;
        }
    }
}

#[cfg(feature = "mariadb")]
pub use imp::MariaEnv;

#[cfg(feature = "mariadb")]
mod imp {
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
            harness::wait::until(what, timeout, || self.jobs.is_free(super::JOB_LEASE)).await?;
            Ok(())
        }
    }

    impl crate::Testbed {
        /// The MariaDB environment, started on first use and emptied for the caller.
        /// `Ok(Err(reason))` when MariaDB is not installed here: the U scenarios then report a
        /// skip, never a pass. A server that is installed but fails is an error (a failed
        /// check).
        pub async fn maria(&mut self) -> anyhow::Result<Result<&MariaEnv, String>> {
            if self.maria.env.is_none() {
                match MariaEnv::start(self.params().jobs.clone()).await? {
                    Ok(env) => {
                        let command = env.server.client_command(DATABASE);
                        if let Ok(mut client) = self.maria.client.lock() {
                            *client = Some(command);
                        }
                        self.maria.env = Some(env);
                    }
                    Err(reason) => return Ok(Err(reason)),
                }
            }
            let env = self.maria.env.as_ref().expect("just started");
            env.reset().await?;
            Ok(Ok(env))
        }

        /// [`crate::Testbed::maria`] for a scenario that cannot run without MariaDB: when it is not
        /// installed here, records the skip with its reason and install hint and returns
        /// `None`.
        pub async fn maria_or_skip(
            &mut self,
            rec: &mut harness::evidence::Recorder,
        ) -> anyhow::Result<Option<&MariaEnv>> {
            match self.maria().await? {
                Ok(env) => Ok(Some(env)),
                Err(reason) => {
                    rec.skip(reason);
                    Ok(None)
                }
            }
        }
    }
}
