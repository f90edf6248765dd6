//! The environment every scenario runs in: the embedded cluster with both databases provisioned,
//! one pool per side (the lease side as `lease_svc`, the resource side as `resource_svc`), the
//! stores of the system under test, and the run's parameters.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use fencing::lease::LeaseStore;
use fencing::publish::Publisher;
use fencing::resource::{Resource, WriteMode};
use fencing::schema::{self, Database};
use harness::holder::HolderSpec;
use harness::server::{Cluster, ClusterConfig, Server};
use holder_protocol::HolderFlags;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The run's parameters (SPEC §5 defaults). Validated before anything starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// The TTL of a holder that must stay valid while it renews (F1, F3, F4, F5): 1500 ms.
    pub ttl: Duration,
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
    /// The correct write mode F4, F6 and F7 check: fenced-scope, or its one-statement form.
    pub fenced_mode: WriteMode,
}

/// The lease every scenario contends for.
pub const LEASE: &str = "report-job";
/// The scope every report part belongs to.
pub const SCOPE: &str = "daily-report";
pub const SUMMARY: &str = "summary";
pub const DETAIL: &str = "detail";
pub const HOLDER_A: &str = "holder-a";
pub const HOLDER_B: &str = "holder-b";

impl Default for Params {
    fn default() -> Self {
        Params {
            ttl: Duration::from_millis(1500),
            short_ttl: Duration::from_millis(500),
            renew: Duration::from_millis(400),
            margin: Duration::from_millis(300),
            contenders: 16,
            wait_timeout: Duration::from_secs(30),
            fenced_mode: WriteMode::FencedScope,
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
        if self.ttl.is_zero() || self.short_ttl.is_zero() {
            return Err("--ttl-ms and --short-ttl-ms must be greater than 0".into());
        }
        if self.renew.is_zero() {
            return Err("--renew-ms must be greater than 0".into());
        }
        for (flag, ttl) in [("--ttl-ms", self.ttl), ("--short-ttl-ms", self.short_ttl)] {
            if self.margin >= ttl {
                return Err(format!(
                    "--margin-ms {} must be smaller than {flag} {}: the local deadline is ttl - margin",
                    ms(self.margin),
                    ms(ttl)
                ));
            }
        }
        if self.renew >= self.ttl - self.margin {
            return Err(format!(
                "--renew-ms {} must be smaller than --ttl-ms minus --margin-ms ({} ms), or renewals \
                 cannot keep the lease",
                ms(self.renew),
                ms(self.ttl - self.margin)
            ));
        }
        if !matches!(
            self.fenced_mode,
            WriteMode::FencedScope | WriteMode::FencedSingle
        ) {
            return Err(format!(
                "--fenced-mode {} is a negative control, not a fence: pass fenced-scope or fenced-single",
                self.fenced_mode
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

    /// The connections the cluster must allow for these parameters.
    pub fn max_connections(&self) -> u32 {
        (self.contenders as u32).max(16) + 64
    }
}

/// The environment of a run. End it with [`Lab::shutdown`]; dropping it instead is the last
/// resort of a panic (a blocking immediate shutdown of every server).
pub struct Lab {
    pub cluster: Cluster,
    /// Clusters a scenario made besides [`Lab::cluster`] (F14's primary and standby), handed
    /// over stopped with [`Lab::adopt`] so that a failing or `--keep` run keeps them too.
    pub adopted: Vec<Cluster>,
    /// This run's mark: the label value on every container, network and network hold the run
    /// makes (feature `containers`), so that leftovers can be found and removed.
    pub run_mark: String,
    /// The MariaDB server of the U-series, started by the first U scenario that runs.
    #[cfg(feature = "mariadb")]
    pub maria: Option<crate::maria::MariaEnv>,
    /// The holder binary the multi-process scenarios start.
    pub holder_bin: PathBuf,
    pub params: Params,
    pub lease: LeaseStore,
    pub resource: Resource,
    pub publisher: Publisher,
}

impl Lab {
    /// Starts a cluster, creates the roles and databases, applies the migrations and opens the
    /// pools. On error nothing is left running.
    pub async fn start(
        cluster: ClusterConfig,
        params: Params,
        holder_bin: PathBuf,
    ) -> anyhow::Result<Lab> {
        let mut cluster = Cluster::create(cluster)
            .await
            .context("failed to start the embedded PostgreSQL")?;
        let (lease_pool, resource_pool) = match Self::provision(&cluster).await {
            Ok(pools) => pools,
            Err(e) => {
                cluster.stop().await;
                return Err(e);
            }
        };
        Ok(Lab {
            lease: LeaseStore::new(lease_pool, params.margin),
            resource: Resource::new(resource_pool.clone()),
            publisher: Publisher::new(resource_pool),
            cluster,
            adopted: Vec::new(),
            run_mark: format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis())
            ),
            #[cfg(feature = "mariadb")]
            maria: None,
            holder_bin,
            params,
        })
    }

    /// Creates the roles and databases, applies the migrations; the lease and resource pools.
    pub(crate) async fn provision(cluster: &Cluster) -> anyhow::Result<(PgPool, PgPool)> {
        let mut admin = cluster
            .admin()
            .await
            .context("failed to connect as the superuser")?;
        schema::provision(&mut admin).await?;
        let lease_pool = Self::pool(cluster, Database::Lease).await?;
        let resource_pool = Self::pool(cluster, Database::Resource).await?;
        schema::migrate(Database::Lease, &lease_pool).await?;
        schema::migrate(Database::Resource, &resource_pool).await?;
        Ok((lease_pool, resource_pool))
    }

    /// Keeps every server's directory (data, socket, log) after the lab ends: one line per
    /// server saying where it is and how to look inside. Call [`Lab::shutdown`] next.
    pub fn keep(&mut self) -> Vec<String> {
        self.cluster.keep_on_drop();
        let c = &self.cluster;
        let mut kept = vec![format!(
            "kept the cluster at {} (server log {}); it is stopped. To look inside, start it as \
             the directory's owner: {}  (Ctrl-C stops it)",
            c.root().display(),
            c.log_path().display(),
            c.restart_hint(),
        )];
        for other in &mut self.adopted {
            other.keep_on_drop();
            kept.push(format!(
                "kept the cluster at {} (server log {}); it is stopped. To look inside: {}",
                other.root().display(),
                other.log_path().display(),
                other.restart_hint(),
            ));
        }
        #[cfg(feature = "mariadb")]
        if let Some(m) = self.maria.as_mut() {
            m.server.keep_on_drop();
            kept.push(format!(
                "kept the MariaDB directory at {} (server log {}); it is stopped",
                m.server.root().display(),
                m.server.log_path().display()
            ));
        }
        kept
    }

    /// Stops every server cleanly (each with its grace period) and closes the pools; returns
    /// once every server process has exited. Directories not kept are removed.
    pub async fn shutdown(mut self) {
        #[cfg(feature = "mariadb")]
        if let Some(maria) = self.maria.take() {
            maria.shutdown().await;
        }
        for pool in [self.lease.pool().clone(), self.resource.pool().clone()] {
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        self.cluster.stop().await;
        for mut other in self.adopted.drain(..) {
            other.stop().await;
        }
        // A scenario interrupted while its containers ran: whatever carries this run's mark.
        #[cfg(feature = "containers")]
        {
            let _ = harness::containers::remove_labelled(Some(&self.run_mark)).await;
            harness::containers::remove_held_rules(Some(&self.run_mark)).await;
        }
    }

    /// Takes over a cluster a scenario made: stopped now, kept or removed with the lab's own.
    pub async fn adopt(&mut self, mut cluster: Cluster) {
        cluster.stop().await;
        self.adopted.push(cluster);
    }

    /// A pool that connects to `db` as its owner role.
    pub async fn pool(cluster: &Cluster, db: Database) -> anyhow::Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(8)
            .connect_with(cluster.connect_options(db.name(), db.role()))
            .await
            .with_context(|| format!("failed to connect to {} as {}", db.name(), db.role()))
    }

    /// The MariaDB environment, started on first use and emptied for the caller. `Ok(Err(reason))`
    /// when MariaDB is not installed here: the U scenarios then report a skip, never a pass. A
    /// server that is installed but fails is an error (a failed check).
    #[cfg(feature = "mariadb")]
    pub async fn maria(&mut self) -> anyhow::Result<Result<&crate::maria::MariaEnv, String>> {
        if self.maria.is_none() {
            match crate::maria::MariaEnv::start().await? {
                Ok(env) => self.maria = Some(env),
                Err(reason) => return Ok(Err(reason)),
            }
        }
        let env = self.maria.as_ref().expect("just started");
        env.reset().await?;
        Ok(Ok(env))
    }

    /// [`Lab::maria`] for a scenario that cannot run without MariaDB: when it is not installed
    /// here, records the skip with its reason and install hint and returns `None`.
    #[cfg(feature = "mariadb")]
    pub async fn maria_or_skip(
        &mut self,
        rec: &mut harness::evidence::Recorder,
    ) -> anyhow::Result<Option<&crate::maria::MariaEnv>> {
        match self.maria().await? {
            Ok(env) => Ok(Some(env)),
            Err(reason) => {
                rec.skip(reason);
                Ok(None)
            }
        }
    }

    /// Replaces every pool with a fresh one, e.g. after a restart of the cluster, so that no
    /// store hands out a connection to the server that is gone.
    pub async fn reopen(&mut self) -> anyhow::Result<()> {
        let lease_pool = Self::pool(&self.cluster, Database::Lease).await?;
        let resource_pool = Self::pool(&self.cluster, Database::Resource).await?;
        let old = [self.lease.pool().clone(), self.resource.pool().clone()];
        self.lease = LeaseStore::new(lease_pool, self.params.margin);
        self.resource = Resource::new(resource_pool.clone());
        self.publisher = Publisher::new(resource_pool);
        for pool in old {
            // Connections to the server that is gone are dropped, not waited for.
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        Ok(())
    }

    /// Empties every table and sets the scope's floor up at 0: each scenario starts here.
    pub async fn reset(&mut self) -> anyhow::Result<()> {
        schema::reset(Database::Lease, self.lease.pool()).await?;
        schema::reset(Database::Resource, self.resource.pool()).await?;
        self.resource.setup_scope(SCOPE).await?;
        Ok(())
    }

    /// How to start a holder process that writes `content` to the summary in `mode`.
    pub fn holder_spec(
        &self,
        holder: &str,
        content: &str,
        mode: WriteMode,
        release: bool,
    ) -> HolderSpec {
        // Durations travel as whole milliseconds (validated non-zero and far below u64::MAX).
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        HolderSpec {
            bin: self.holder_bin.clone(),
            flags: HolderFlags {
                store: "postgres".into(),
                socket_dir: self.cluster.socket_dir(),
                port: self.cluster.port(),
                lease: LEASE.into(),
                holder: holder.into(),
                ttl_ms: ms(self.params.ttl),
                renew_ms: ms(self.params.renew),
                margin_ms: ms(self.params.margin),
                scope: SCOPE.into(),
                part: SUMMARY.into(),
                content: content.into(),
                mode: mode.as_str().into(),
                run_id: None,
                release,
                wait_before_check: false,
                wait_before_commit: false,
                wait_after_write: false,
                resource_host: None,
                resource_port: None,
                lease_host: None,
                lease_port: None,
            },
            env: Vec::new(),
        }
    }

    /// Waits, polling the database clock, until the lease is free (expired or released);
    /// `whose` names it in the timeout error ("A's lease"). Returns how long that took.
    pub async fn until_lease_expired(&self, whose: &str) -> anyhow::Result<Duration> {
        let what = format!("{whose} is expired by the database clock");
        let lease = &self.lease;
        Ok(harness::wait::until(&what, self.params.wait_timeout, || lease.is_free(LEASE)).await?)
    }

    /// A lease client with its own single connection, already open (F3's contenders).
    pub async fn own_lease_client(&self) -> anyhow::Result<LeaseStore> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(
                self.cluster
                    .connect_options(Database::Lease.name(), Database::Lease.role()),
            )
            .await
            .context("failed to open a contender's connection")?;
        Ok(LeaseStore::new(pool, self.params.margin))
    }
}

/// The timeline mark of an acquire's result.
pub fn acquire_mark(grant: Option<&fencing::lease::Grant>) -> harness::evidence::Mark {
    match grant {
        Some(_) => harness::evidence::Mark::Acquired,
        None => harness::evidence::Mark::Refused,
    }
}

/// How the evidence names an acquire's result: `ACQUIRED token=N` or `REFUSED`.
pub fn acquired(grant: Option<&fencing::lease::Grant>) -> String {
    match grant {
        Some(g) => format!("ACQUIRED token={}", g.token),
        None => "REFUSED".into(),
    }
}

/// How the evidence names a write's result: `WRITE accepted=BOOL token=N`.
pub fn wrote(accepted: bool, token: i64) -> String {
    format!("WRITE accepted={accepted} token={token}")
}

/// An optional value as the evidence shows it: the value, or `none`.
pub fn shown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "none".into(), |v| v.to_string())
}
