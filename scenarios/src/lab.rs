//! The environment every scenario runs in: the embedded cluster with both databases provisioned,
//! one pool per side (the lease side as `lease_svc`, the resource side as `resource_svc`), the
//! stores of the system under test, and the run's parameters.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fencing::lease::SqlLeaseStore;
use fencing::profile::{Dialect, JobProfile, Profile};
use fencing::publish::Publisher;
use fencing::resource::{fenced_mode_profile, Resource, WriteMode, FENCED_MODES};
use fencing::schema::{self, Database};
use harness::evidence::Recorder;
use harness::holder::HolderSpec;
use harness::hosts::{Host, Hosts};
use harness::server::{Cluster, ClusterConfig, Server};
use holder_protocol::HolderFlags;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

pub use harness::hosts::{Backend, Restarted};
pub use harness::replication::Replication;

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
    /// The system under test, resolved once from the command line: the profile whose lease
    /// table and statements every lease store runs, whose fence state the resource keeps, and
    /// whose write [`WriteMode::Fenced`] runs — in the lab and in every holder (`--sut`). The
    /// built-in `seed004` unless `--fenced-mode` or `--sut` names another.
    pub sut: Arc<Profile>,
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
}

/// The lease every scenario contends for.
pub const LEASE: &str = "report-job";
/// The scope every report part belongs to.
pub const SCOPE: &str = "daily-report";
pub const SUMMARY: &str = "summary";
pub const DETAIL: &str = "detail";
pub const HOLDER_A: &str = "holder-a";
pub const HOLDER_B: &str = "holder-b";
pub const HOLDER_C: &str = "holder-c";

impl Default for Params {
    fn default() -> Self {
        Params {
            ttl: Duration::from_millis(1500),
            short_ttl: Duration::from_millis(500),
            renew: Duration::from_millis(400),
            margin: Duration::from_millis(300),
            contenders: 16,
            wait_timeout: Duration::from_secs(30),
            sut: Arc::new(Profile::seed004().clone()),
            again_with: Vec::new(),
            jobs: Arc::new(JobProfile::seed000().clone()),
            sut_dialect: None,
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

    /// How the evidence names the run's fence ([`Params::fence_label_of`] its profile).
    pub fn fence_label(&self) -> &'static str {
        Self::fence_label_of(&self.sut)
    }

    /// How the evidence names `mode`: the fence's label, or the control's name.
    pub fn mode_label(&self, mode: WriteMode) -> &'static str {
        match mode {
            WriteMode::Fenced => self.fence_label(),
            control => control.as_str(),
        }
    }

    /// The connections the cluster must allow for these parameters.
    pub fn max_connections(&self) -> u32 {
        (self.contenders as u32).max(16) + 64
    }
}

/// The environment of a run. End it with [`Lab::shutdown`]; dropping it instead is the last
/// resort of a panic (a blocking immediate shutdown of every server).
pub struct Lab {
    /// Where the lease store and the resource live: the embedded cluster ([`Lab::cluster`]) by
    /// default, containers with `--backend containers`.
    pub servers: Box<dyn Hosts>,
    /// `--keep` or a failing run: the servers stay after [`Lab::shutdown`] (stopped).
    kept: bool,
    /// Clusters a scenario made besides [`Lab::cluster`] (F14's primary and standby), handed
    /// over stopped with [`Lab::adopt`] so that a failing or `--keep` run keeps them too.
    pub adopted: Vec<Cluster>,
    /// This run's mark: the label value on every container, network and network hold the run
    /// makes (feature `containers`), so that leftovers can be found and removed.
    pub run_mark: String,
    /// The MariaDB server of the U-series, started by the first U scenario that runs, and the
    /// command line that connects to it.
    pub maria: crate::maria::MariaSlot,
    /// The holder binary the multi-process scenarios start.
    pub holder_bin: PathBuf,
    pub params: Params,
    pub lease: SqlLeaseStore,
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
        Self::start_on(
            Backend::Embedded,
            Self::new_run_mark(),
            cluster,
            params,
            holder_bin,
        )
        .await
    }

    /// A new run mark: `<pid>-<ms since the epoch>` — whether the lab that made something is
    /// still running is read off its pid. Unique within the process: labs started in the same
    /// millisecond (`lab run --jobs N`, the scenario tests' four at once) get the next free
    /// millisecond, since a lab's shutdown removes every container, network and network hold
    /// that carries its mark — with a shared mark, the first lab to finish could remove
    /// another's containers mid-experiment (the scenario tests start F13, F15, U1 and U2 within
    /// a few ms; CI saw F15's held write answered "terminating connection due to unexpected
    /// postmaster exit").
    pub fn new_run_mark() -> String {
        use std::sync::atomic::{AtomicU64, Ordering};
        static LAST: AtomicU64 = AtomicU64::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let next = |last: u64| now.max(last.saturating_add(1));
        let ms = LAST
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(next(last)))
            .map_or(now, next);
        format!("{}-{ms}", std::process::id())
    }

    /// [`Lab::start`] on `backend`: the embedded cluster (`cluster` says how to make it), or a
    /// PostgreSQL container per database. On error nothing is left running.
    /// `run_mark` labels whatever the run makes outside this process ([`Lab::new_run_mark`]).
    pub async fn start_on(
        backend: Backend,
        run_mark: String,
        cluster: ClusterConfig,
        params: Params,
        holder_bin: PathBuf,
    ) -> anyhow::Result<Lab> {
        let servers: Box<dyn Hosts> = match backend {
            Backend::Embedded => Box::new(
                Cluster::create(cluster)
                    .await
                    .context("failed to start the embedded PostgreSQL")?,
            ),
            Backend::Containers { pg_major, patroni } => {
                harness::hosts::start_containers(&run_mark, pg_major, patroni).await?
            }
        };
        let (lease_pool, resource_pool) = match Self::provision(servers.as_ref(), &params.sut).await
        {
            Ok(pools) => pools,
            Err(e) => {
                servers.shutdown().await;
                return Err(e);
            }
        };
        Ok(Lab {
            lease: SqlLeaseStore::with_profile(lease_pool, params.margin, params.sut.clone()),
            resource: Resource::with_profile(resource_pool.clone(), params.sut.clone()),
            publisher: Publisher::new(resource_pool),
            servers,
            kept: false,
            adopted: Vec::new(),
            run_mark,
            maria: crate::maria::MariaSlot::default(),
            holder_bin,
            params,
        })
    }

    /// The lease store in a few words: `a single server`, or `Patroni, <replication mode>`.
    pub fn describe_lease_store(&self) -> String {
        match self.backend() {
            Backend::Containers {
                patroni: Some(replication),
                ..
            } => format!("Patroni, {replication}"),
            _ => "a single server".into(),
        }
    }

    /// Whether the lease store is a Patroni cluster (`--lease-store patroni`).
    pub fn lease_on_patroni(&self) -> bool {
        matches!(
            self.backend(),
            Backend::Containers {
                patroni: Some(_),
                ..
            }
        )
    }

    /// The embedded cluster; an error on another backend (where only the scenarios that run on
    /// every backend run, so no scenario reaching this meets it).
    pub fn cluster(&self) -> anyhow::Result<&Cluster> {
        self.servers
            .embedded()
            .context("this experiment needs the embedded cluster (--backend embedded)")
    }

    /// Where the servers are, for the environment record: the cluster's directory, or each
    /// container's address and network and the image.
    pub fn describe_servers(&self) -> String {
        self.servers.describe()
    }

    /// Which backend the lab runs on.
    pub fn backend(&self) -> Backend {
        self.servers.backend()
    }

    /// Connection options for `database` as `user`, on the server that holds `db`.
    pub fn connect_options(&self, db: Database, database: &str, user: &str) -> PgConnectOptions {
        self.servers.connect_options(host_of(db), database, user)
    }

    /// A small superuser pool on the maintenance database of the server that holds `db`, for
    /// observing it (`pg_stat_activity`, `pg_locks`).
    pub async fn admin_pool(&self, db: Database) -> anyhow::Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(2)
            .connect_with(self.connect_options(db, "postgres", SUPERUSER))
            .await
            .context("failed to connect as the superuser")
    }

    /// (containers) Drops every packet of `process`'s open connections to `db`'s host — by
    /// the connections' source ports, as the server's `pg_stat_activity` names them — until the
    /// returned holds are lifted or dropped. A connection it opens meanwhile is not held.
    pub async fn cut(&self, process: &str, db: Database) -> anyhow::Result<harness::hosts::Holds> {
        let ip = self
            .servers
            .ip(host_of(db))
            .context("cutting a process off a server needs --backend containers")?;
        let admin = self.admin_pool(db).await?;
        let ports = harness::observe::client_ports(&admin, process).await;
        admin.close().await;
        let ports = ports
            .context("failed to list the process's connections")?
            .into_iter()
            .map(|p| u16::try_from(p).context("a client port out of range"))
            .collect::<anyhow::Result<Vec<u16>>>()?;
        harness::hosts::Holds::start(ip, &ports, &self.run_mark).await
    }

    /// Cuts the lease store's Patroni leader off from its peers (not from the lab's host) once
    /// the cluster is whole (a replica that does not stream is reinitialised first): the first
    /// half of a failover by the engine. Its name, and the replicas reinitialised.
    pub async fn isolate_lease_leader(&mut self) -> anyhow::Result<(String, Vec<String>)> {
        self.servers.isolate_lease_leader(WHOLE_TIMEOUT).await
    }

    /// The second half: once Patroni elected another leader, lets `old` back (as a replica) and
    /// reopens the pools on the new leader. The new leader's name.
    pub async fn mend_lease_host(&mut self, old: &str) -> anyhow::Result<String> {
        let new = self.servers.mend_lease_host(old, FAILOVER_TIMEOUT).await?;
        self.reopen().await?;
        Ok(new)
    }

    /// On a Patroni lease store: waits until it is whole (a leader every replica streams from;
    /// a replica that does not stream is reinitialised) and reopens the pools on its leader —
    /// before a run that writes to it (with `synchronous_mode_strict` and no standby, a write
    /// would wait for ever). The replicas reinitialised; none otherwise.
    pub async fn heal_lease_store(&mut self) -> anyhow::Result<Vec<String>> {
        match self.servers.heal_lease_store(WHOLE_TIMEOUT).await? {
            Some(reinit) => {
                self.reopen().await?;
                Ok(reinit)
            }
            None => Ok(Vec::new()),
        }
    }

    /// On a Patroni lease store: waits for its leader (a failover may have moved it, and a
    /// leader let back may have taken its place again) and reopens the pools on it. Nothing
    /// otherwise.
    pub async fn follow_lease_leader(&mut self) -> anyhow::Result<()> {
        if self.servers.follow_lease_leader(FAILOVER_TIMEOUT).await? {
            self.reopen().await?;
        }
        Ok(())
    }

    /// Each Patroni node's name and log from `since` on, when the lease store is on Patroni.
    pub async fn lease_logs(&self, since: std::time::SystemTime) -> Vec<(String, String)> {
        self.servers.lease_logs(since).await
    }

    /// Crashes every server of the lab (immediate stop: no checkpoint) and starts it again on
    /// the same data; returns once each has recovered and accepts connections, with what each
    /// logged meanwhile. The pools are stale afterwards: call [`Lab::reopen`].
    pub async fn crash_and_restart(&mut self) -> anyhow::Result<Vec<Restarted>> {
        self.servers
            .crash_and_restart(self.params.wait_timeout)
            .await
    }

    /// Creates the roles and databases on each server `servers` has, applies the migrations
    /// (each database's tables on the host that holds it); the lease and resource pools.
    pub(crate) async fn provision(
        servers: &dyn Hosts,
        sut: &Profile,
    ) -> anyhow::Result<(PgPool, PgPool)> {
        let hosts: &[Database] = if servers.embedded().is_some() {
            &[Database::Lease]
        } else {
            &[Database::Lease, Database::Resource]
        };
        for db in hosts {
            let opts = servers.connect_options(host_of(*db), "postgres", SUPERUSER);
            let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect_with(&opts)
                .await
                .context("failed to connect as the superuser")?;
            schema::provision(&mut admin).await?;
        }
        let lease_pool = Self::pool(servers, Database::Lease).await?;
        let resource_pool = Self::pool(servers, Database::Resource).await?;
        schema::migrate_for(sut, Database::Lease, &lease_pool).await?;
        schema::migrate_for(sut, Database::Resource, &resource_pool).await?;
        Ok((lease_pool, resource_pool))
    }

    /// Keeps every server's directory (data, socket, log) after the lab ends: one line per
    /// server saying where it is and how to look inside. Call [`Lab::shutdown`] next.
    pub fn keep(&mut self) -> Vec<String> {
        self.kept = true;
        let mut kept = self.servers.keep();
        for other in &mut self.adopted {
            other.keep_on_drop();
            kept.push(format!(
                "kept the cluster at {} (server log {}); it is stopped. To look inside: {}",
                other.root().display(),
                other.log_path().display(),
                other.restart_hint(),
            ));
        }
        kept.extend(self.maria.keep());
        kept
    }

    /// Stops every server cleanly (each with its grace period) and closes the pools; returns
    /// once every server process has exited. Directories not kept are removed.
    pub async fn shutdown(mut self) {
        self.maria.shutdown().await;
        for pool in [self.lease.pool().clone(), self.resource.pool().clone()] {
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        self.servers.shutdown().await;
        for mut other in self.adopted.drain(..) {
            other.stop().await;
        }
        // A scenario interrupted while its containers ran: whatever carries this run's mark.
        if !self.kept {
            harness::hosts::remove_marked(&self.run_mark).await;
        }
    }

    /// Takes over a cluster a scenario made: stopped now, kept or removed with the lab's own.
    pub async fn adopt(&mut self, mut cluster: Cluster) {
        cluster.stop().await;
        self.adopted.push(cluster);
    }

    /// A pool that connects to `db` as its owner role, wherever `db` lives.
    pub async fn pool(servers: &dyn Hosts, db: Database) -> anyhow::Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(8)
            .connect_with(servers.connect_options(host_of(db), db.name(), db.role()))
            .await
            .with_context(|| format!("failed to connect to {} as {}", db.name(), db.role()))
    }

    /// Replaces every pool with a fresh one, e.g. after a restart of the cluster, so that no
    /// store hands out a connection to the server that is gone.
    pub async fn reopen(&mut self) -> anyhow::Result<()> {
        let lease_pool = Self::pool(self.servers.as_ref(), Database::Lease).await?;
        let resource_pool = Self::pool(self.servers.as_ref(), Database::Resource).await?;
        let old = [self.lease.pool().clone(), self.resource.pool().clone()];
        self.lease =
            SqlLeaseStore::with_profile(lease_pool, self.params.margin, self.params.sut.clone());
        self.resource = Resource::with_profile(resource_pool.clone(), self.params.sut.clone());
        self.publisher = Publisher::new(resource_pool);
        for pool in old {
            // Connections to the server that is gone are dropped, not waited for.
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        Ok(())
    }

    /// Makes `profile` the run's system under test: every store of the lab runs it from now on
    /// (on the same pools: the fences that take turns share one schema, seed004's).
    pub fn use_sut(&mut self, profile: Arc<Profile>) {
        self.lease = SqlLeaseStore::with_profile(
            self.lease.pool().clone(),
            self.params.margin,
            profile.clone(),
        );
        self.resource = Resource::with_profile(self.resource.pool().clone(), profile.clone());
        self.params.sut = profile;
    }

    /// Empties every table and sets the scope's floor up at 0: each scenario starts here.
    pub async fn reset(&mut self) -> anyhow::Result<()> {
        schema::reset(self.lease.pool()).await?;
        schema::reset(self.resource.pool()).await?;
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
                socket_dir: self.servers.socket().0,
                port: self.servers.socket().1,
                lease: LEASE.into(),
                holder: holder.into(),
                ttl_ms: ms(self.params.ttl),
                renew_ms: ms(self.params.renew),
                margin_ms: ms(self.params.margin),
                scope: SCOPE.into(),
                part: SUMMARY.into(),
                content: content.into(),
                mode: mode.as_str().into(),
                sut: self.sut_arg(),
                run_id: None,
                release,
                wait_before_check: false,
                wait_before_commit: false,
                wait_after_write: false,
                resource_host: self.servers.tcp_host(Host::Resource),
                resource_port: self.servers.tcp_host(Host::Resource).map(|_| PG_PORT),
                lease_host: self.servers.tcp_host(Host::Lease),
                lease_port: self.servers.tcp_host(Host::Lease).map(|_| PG_PORT),
                loop_seed: None,
                loop_parts: 3,
                control_scope: None,
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
    pub async fn own_lease_client(&self) -> anyhow::Result<SqlLeaseStore> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(self.connect_options(
                Database::Lease,
                Database::Lease.name(),
                Database::Lease.role(),
            ))
            .await
            .context("failed to open a contender's connection")?;
        Ok(SqlLeaseStore::with_profile(
            pool,
            self.params.margin,
            self.params.sut.clone(),
        ))
    }

    /// A job holder's `--sut` (`--store mariadb`): the job-lease design it loads, `None` for
    /// seed 000's own.
    pub fn jobs_arg(&self) -> Option<String> {
        (*self.params.jobs != *JobProfile::seed000()).then(|| self.params.jobs.load_arg())
    }

    /// The holder's `--sut`: the profile a holder loads, `None` for the lab's own design.
    pub fn sut_arg(&self) -> Option<String> {
        (*self.params.sut != *Profile::seed004()).then(|| self.params.sut.load_arg())
    }
}

/// A lease row as the checks show it: its holder, its token and the database's verdict on it —
/// `holder-a token=1 unexpired`, or `released` once given up, `expired` once run out.
pub fn lease_state(r: &fencing::lease::Holding) -> String {
    let state = if r.released {
        "released"
    } else if r.expired {
        "expired"
    } else {
        "unexpired"
    };
    format!("{} token={} {state}", r.holder, r.token)
}

impl Lab {
    /// The token the grant the seed numbers `n` carries in this case: the store's token a
    /// passing check bound to `n` (`rec.token`: tokens are judged by order, not by seed 004's
    /// numbering), `0` for a design without a token at the lease (its profile's contract; the
    /// lease store refuses any other answer, and the recorder shows such a run's tokens as
    /// `token=–`).
    pub fn token(&self, rec: &Recorder, n: i64) -> i64 {
        if self.params.sut.claims.token_at_lease {
            rec.token(n)
        } else {
            0
        }
    }

    /// Checks the scope's fence floor against `expected`, the seed's number of the grant whose
    /// token it must hold (judged by order, [`Recorder::check_token`]) — or, for a design whose resource
    /// keeps no floor (its profile has no `resource.floor`), records the check as waived, with
    /// why.
    pub async fn check_floor(
        &self,
        rec: &mut Recorder,
        description: &str,
        expected: i64,
    ) -> anyhow::Result<()> {
        let floor = self.resource.floor(SCOPE).await?;
        self.check_floor_is(rec, description, expected, floor);
        Ok(())
    }

    /// A floor as a check's text shows it: the value (or `none`), or `n/a` for a design whose
    /// resource keeps no floor — on both sides of a check that compares more than the floor.
    pub fn floor_shown(&self, floor: Option<i64>) -> String {
        if self.params.sut.resource.floor.is_none() {
            "n/a".into()
        } else {
            shown(floor)
        }
    }

    /// [`Lab::check_floor`] on a floor read before (`None` for a design that keeps none).
    pub fn check_floor_is(
        &self,
        rec: &mut Recorder,
        description: &str,
        expected: i64,
        floor: Option<i64>,
    ) {
        if self.params.sut.resource.floor.is_none() {
            rec.waive(description, NO_FLOOR);
        } else {
            rec.check_token(description, expected, floor);
        }
    }
}

impl Lab {
    /// Checks a token read from the lease against `expected`, the seed's number of the grant
    /// (judged by order, [`Recorder::check_token`]) — or, for a design that issues no
    /// token (`token_at_lease = false`), records the check as waived, with why.
    pub fn check_token(
        &self,
        rec: &mut Recorder,
        description: impl Into<String>,
        expected: i64,
        actual: Option<i64>,
    ) {
        let description = description.into();
        if self.params.sut.claims.token_at_lease {
            rec.check_token(description, expected, actual);
        } else {
            rec.waive(description, NO_TOKEN);
        }
    }
}

/// Why a token check is waived.
pub const NO_TOKEN: &str = "the design issues no token (token_at_lease = false)";

/// Why a floor check is waived.
pub const NO_FLOOR: &str = "the design keeps no floor at the resource (no resource.floor)";

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

/// The PostgreSQL port on a host of its own (a container's).
const PG_PORT: u16 = 5432;

/// How long a Patroni cluster may take to elect a new leader (its `ttl` is 10 s).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a Patroni cluster may take to become whole again after a failover (an old leader
/// rewound and streaming takes a few seconds).
const WHOLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The host that holds `db`: the lease store's for the lease database, the resource's for the
/// resource's.
pub fn host_of(db: Database) -> Host {
    match db {
        Database::Lease => Host::Lease,
        Database::Resource => Host::Resource,
    }
}

/// The superuser the lab administers its servers as.
const SUPERUSER: &str = harness::server::postgres::SUPERUSER;

#[cfg(test)]
mod tests {
    use super::Lab;

    /// Labs started together must not share a mark: a lab's shutdown removes whatever carries
    /// its mark, the other lab's containers too.
    #[test]
    fn run_marks_started_together_are_distinct_and_carry_the_pid() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..250).map(|_| Lab::new_run_mark()).collect::<Vec<_>>())
            })
            .collect();
        let marks: Vec<String> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("a mark thread panicked"))
            .collect();
        let distinct: std::collections::HashSet<&String> = marks.iter().collect();
        assert_eq!(distinct.len(), marks.len(), "a mark was issued twice");
        let pid = format!("{}-", std::process::id());
        assert!(marks
            .iter()
            .all(|m| m.starts_with(&pid) && m[pid.len()..].parse::<u64>().is_ok()));
    }
}
