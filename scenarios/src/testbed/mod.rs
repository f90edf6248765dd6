//! The environment every scenario runs in: the lab's two hosts ([`Hosts`]: the embedded cluster
//! by default) with both databases provisioned, one pool per side (the lease side as
//! `lease_svc`, the resource side as `resource_svc`), the stores of the system under test, and
//! the run's parameters. One concern a file: `params.rs` the run's parameters and the names of
//! what it contends for; this file the lab's life (start, reset, keep, shutdown); `servers.rs`
//! the verbs on its servers (connections, crash and restart, network holds, Patroni's
//! failover); `holders.rs` how a holder process is started (its flags); `wording.rs` how the
//! evidence words what the lab reads (tokens, floors, grants, writes). It must not hold SQL of
//! the system under test (that lives in `fencing`), nor a cargo feature switch: what a build lacks
//! answers through [`Hosts`] and `maria::MariaSlot`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fencing::lease::{LeaseStore, Service, SqlLeaseStore, StoreId};
use fencing::profile::Profile;
use fencing::publish::Publisher;
use fencing::resource::Resource;
use fencing::schema::{self, Database};
use harness::docker::LockService;
use harness::hosts::Hosts;
use harness::server::{Cluster, ClusterConfig};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

mod holders;
pub(crate) mod maria;
mod stepped;
pub use holders::UserHolder;
pub use stepped::{SteppedResource, SteppedStore};
mod params;
mod servers;
mod wording;

pub use harness::hosts::{Backend, Restarted};
pub use harness::replication::Replication;
pub use params::*;
pub use servers::host_of;
pub(crate) use servers::skip_unless_required;
pub use wording::*;

use servers::SUPERUSER;

/// The environment of a run. End it with [`Testbed::shutdown`]; dropping it instead is the last
/// resort of a panic (a blocking immediate shutdown of every server).
pub struct Testbed {
    /// Where the lease store and the resource live: the embedded cluster ([`Testbed::cluster`]) by
    /// default, containers with `--backend containers`.
    pub servers: Box<dyn Hosts>,
    /// The lock service that is the lease store (`--lease-store redis|etcd|zookeeper`), in a
    /// container of its own; `None` when the lease store is the lease database's table.
    pub service: Option<Box<dyn LockService>>,
    /// Lock services started for a store the lab no longer uses ([`Testbed::use_store`]), kept for
    /// the next case that does.
    idle_services: Vec<(Service, Box<dyn LockService>)>,
    /// `--keep` or a failing run: the servers stay after [`Testbed::shutdown`] (stopped).
    kept: bool,
    /// A case run on this lab failed: a failing run keeps this lab's servers, not every lab's.
    pub failed_here: bool,
    /// `--keep`: every server stays, a passing case's extra clusters too.
    pub keep_all: bool,
    /// Clusters a scenario made besides [`Testbed::cluster`] (F14's primary and standby), handed
    /// over stopped with [`Testbed::adopt`] so that a failing or `--keep` run keeps them too.
    pub adopted: Vec<Box<dyn Hosts>>,
    /// This run's mark: the label value on every container, network and network hold the run
    /// makes (feature `containers`), so that leftovers can be found and removed.
    pub run_mark: String,
    /// The MariaDB server of the U-series, started by the first U scenario that runs, and the
    /// command line that connects to it.
    pub maria: crate::testbed::maria::MariaSlot,
    /// The holder binary the multi-process scenarios start.
    pub holder_bin: PathBuf,
    /// The arguments before the holder's flags: a holder of the user's (`--holder-cmd`), e.g.
    /// the script `python3` runs. Empty for the lab's own holder.
    pub holder_prefix: Vec<std::ffi::OsString>,
    /// A holder of the user's (`--holder-cmd`) and the fault points it refused: the
    /// experiments it is not what they judge say skip ([`crate::Spec::holder_points`]).
    /// `None` for the lab's own holder.
    pub user_holder: Option<holders::UserHolder>,
    /// The run's settings, fixed from start to shutdown ([`Testbed::params`]).
    params: Params,
    /// The open case: its lease store, the TTL that store granted, its fence
    /// ([`Testbed::case`]); changed between cases by [`Testbed::use_store`] and
    /// [`Testbed::use_sut`] only.
    case: Case,
    /// The lease store every experiment asks through the trait all stores implement.
    pub lease: Arc<dyn LeaseStore>,
    /// The same lease as a SQL table, for what only a table has: F2's statements inside a
    /// transaction, F3's server-side timings and row count, F11's truncation, the lab's own
    /// resets and chaos's record of its rows.
    pub lease_table: SqlLeaseStore,
    /// The resource the experiments write to (its writes pause at a step's request:
    /// [`SteppedResource`]).
    pub resource: SteppedResource,
    pub publisher: Publisher,
}

impl Testbed {
    /// Starts a cluster, creates the roles and databases, applies the migrations and opens the
    /// pools. On error nothing is left running.
    pub async fn start(
        cluster: ClusterConfig,
        params: Params,
        holder_bin: PathBuf,
    ) -> anyhow::Result<Testbed> {
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

    /// [`Testbed::start`] on `backend`: the embedded cluster (`cluster` says how to make it), or a
    /// PostgreSQL container per database. On error nothing is left running.
    /// `run_mark` labels whatever the run makes outside this process ([`Testbed::new_run_mark`]).
    pub async fn start_on(
        backend: Backend,
        run_mark: String,
        cluster: ClusterConfig,
        params: Params,
        holder_bin: PathBuf,
    ) -> anyhow::Result<Testbed> {
        let servers: Box<dyn Hosts> = match backend {
            Backend::Embedded => Box::new(
                Cluster::create(cluster)
                    .await
                    .context("failed to start the embedded PostgreSQL")?,
            ),
            Backend::Containers { pg_major, patroni } => {
                harness::docker::start_hosts(&run_mark, pg_major, patroni).await?
            }
        };
        let (lease_pool, resource_pool) =
            match Self::provision(servers.as_ref(), &params.case.sut).await {
                Ok(pools) => pools,
                Err(e) => {
                    servers.shutdown().await;
                    return Err(e);
                }
            };
        let asked = params.case.clone();
        let lease_table = SqlLeaseStore::with_profile(lease_pool, params.margin, asked.sut.clone())
            .with_ttl_in_force(asked.ttl);
        // A lock service as the lease store: a container of its own, started here.
        let service = match asked.store.service() {
            None => None,
            Some(name) => match start_service(name, &run_mark).await {
                Ok(service) => Some(service),
                Err(e) => {
                    servers.shutdown().await;
                    return Err(e);
                }
            },
        };
        let lease = match open_store(asked.store, &lease_table, service.as_deref()).await {
            Ok(lease) => lease,
            Err(e) => {
                if let Some(service) = service {
                    service.remove().await;
                }
                servers.shutdown().await;
                return Err(e);
            }
        };
        // The timelines run with the TTL the store grants (etcd: whole seconds).
        let case = Case {
            ttl: lease.granted_ttl(asked.ttl),
            ..asked
        };
        Ok(Testbed {
            lease: SteppedStore::wrap(lease),
            lease_table,
            resource: SteppedResource(Resource::with_profile(
                resource_pool.clone(),
                case.sut.clone(),
            )),
            publisher: Publisher::new(resource_pool),
            servers,
            service,
            idle_services: Vec::new(),
            kept: false,
            failed_here: false,
            keep_all: false,
            adopted: Vec::new(),
            run_mark,
            maria: crate::testbed::maria::MariaSlot::default(),
            holder_bin,
            holder_prefix: Vec::new(),
            user_holder: None,
            params,
            case,
        })
    }

    /// The run's settings (the defaults unless the command line set them): fixed for the
    /// whole run. What the open case runs with is [`Testbed::case`].
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The open case: the lease store every experiment and holder asks, the TTL it granted (the
    /// timelines run with it) and the system under test.
    pub fn case(&self) -> &Case {
        &self.case
    }

    /// Marks the open case as an experiment run again with another fence
    /// ([`Case::again_with_fence`]).
    pub(crate) fn set_again_with_fence(&mut self, again: bool) {
        self.case.again_with_fence = again;
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

    /// The lock service that is the lease store, in one line — what it is, where, its token and
    /// the settings that bear on expiry; `None` when the lease table is the store.
    pub fn describe_service(&self) -> Option<String> {
        if self.service.is_none() && !self.lease_is_the_table() {
            // The advisory locks: on the lease database, no container.
            return Some(format!(
                "{} on the lab's lease database ({}); token: {}",
                self.case.store,
                fencing::stores::store_kind(self.case.store).map_or("", |k| k.about),
                self.lease.token_name()
            ));
        }
        let service = self.service.as_ref()?;
        let token = self.lease.token_name();
        let settings: Vec<String> = service
            .settings()
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let ttl = if self.case.ttl == self.params.case.ttl {
            String::new()
        } else {
            format!(
                "; TTL {} ms as the store grants it (asked {} ms): the timelines run with it",
                self.case.ttl.as_millis(),
                self.params.case.ttl.as_millis()
            )
        };
        let own = if self.case.store.service() == Some(Service::Mariadb) {
            "a local server of its own"
        } else {
            "a container of its own"
        };
        Some(format!(
            "{} ({}) at {}, {own}; token: {token}; {}{ttl}",
            self.case.store,
            service.version(),
            service.endpoint(),
            settings.join("; ")
        ))
    }

    /// Which backend the lab runs on.
    pub fn backend(&self) -> Backend {
        self.servers.backend()
    }
}

impl Testbed {
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
    /// server saying where it is and how to look inside. Call [`Testbed::shutdown`] next.
    pub fn keep(&mut self) -> Vec<String> {
        self.kept = true;
        let mut kept = self.servers.keep();
        for other in &mut self.adopted {
            kept.extend(other.keep());
        }
        kept.extend(self.maria.keep());
        for service in self
            .service
            .iter()
            .chain(self.idle_services.iter().map(|(_, s)| s))
        {
            kept.push(format!(
                "the lock service {}'s container is kept, stopped, as fencing-lab-kept-…",
                service.service()
            ));
        }
        kept
    }

    /// Stops every server cleanly (each with its grace period) and closes the pools; returns
    /// once every server process has exited. Directories not kept are removed.
    pub async fn shutdown(mut self) {
        self.maria.shutdown().await;
        for pool in [
            self.lease_table.pool().clone(),
            self.resource.pool().clone(),
        ] {
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        self.servers.shutdown().await;
        for service in self
            .service
            .take()
            .into_iter()
            .chain(self.idle_services.drain(..).map(|(_, s)| s))
        {
            if self.kept {
                service.stop_and_keep().await;
            } else {
                service.remove().await;
            }
        }
        for other in self.adopted.drain(..) {
            other.shutdown().await;
        }
        // A scenario interrupted while its containers ran: whatever carries this run's mark.
        if !self.kept {
            harness::docker::remove_marked(&self.run_mark).await;
        }
    }

    /// Takes over hosts a scenario made (F14's primary and standby): stopped now, kept or
    /// removed with the lab's own.
    pub async fn adopt(&mut self, mut hosts: Box<dyn Hosts>) {
        hosts.stop_servers().await;
        self.adopted.push(hosts);
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
        let old = [
            self.lease_table.pool().clone(),
            self.resource.pool().clone(),
        ];
        self.set_lease(
            SqlLeaseStore::with_profile(lease_pool, self.params.margin, self.case.sut.clone())
                .sharing_ttl_in_force(self.lease_table.ttl_in_force()),
        );
        self.resource = SteppedResource(Resource::with_profile(
            resource_pool.clone(),
            self.case.sut.clone(),
        ));
        self.publisher = Publisher::new(resource_pool);
        for pool in old {
            // Connections to the server that is gone are dropped, not waited for.
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        }
        Ok(())
    }

    /// Makes `table` the lab's lease table, and the store of the run's kind on it the lab's lease
    /// store (it opened at the start, so it opens again).
    fn set_lease(&mut self, table: SqlLeaseStore) {
        // A lock service's store, or the advisory locks', stays: it does not run on the table.
        if self.lease_is_the_table() {
            self.lease = SteppedStore::wrap(Arc::new(table.clone()));
        }
        self.lease_table = table;
    }

    /// Makes `profile` the run's system under test: every store of the lab runs it from now on
    /// (on the same pools: the fences that take turns share one schema, seed004's).
    pub fn use_sut(&mut self, profile: Arc<Profile>) {
        self.set_lease(
            SqlLeaseStore::with_profile(
                self.lease_table.pool().clone(),
                self.params.margin,
                profile.clone(),
            )
            .sharing_ttl_in_force(self.lease_table.ttl_in_force()),
        );
        self.resource = SteppedResource(Resource::with_profile(
            self.resource.pool().clone(),
            profile.clone(),
        ));
        self.case.sut = profile;
    }

    /// Makes the store named `store` the lab's lease store (`fencing::stores::STORES`): the lease
    /// table, or a lock service — started on first use, kept (idle) for the next. Returns once
    /// it is open; on an error the lease table is the store.
    pub async fn use_store(&mut self, store: StoreId) -> anyhow::Result<()> {
        if let Some(service) = self.service.take() {
            let running = self
                .case
                .store
                .service()
                .expect("a lock service serves its store");
            self.idle_services.push((running, service));
        }
        self.lease = SteppedStore::wrap(Arc::new(self.lease_table.clone()));
        self.case.store = StoreId::Postgres;
        self.case.ttl = self.params.case.ttl;
        let Some(name) = store.service() else {
            if store != StoreId::Postgres {
                // A store on the lab's lease database (the advisory locks): opened on its pool.
                self.lease = SteppedStore::wrap(open_store(store, &self.lease_table, None).await?);
                self.case.store = store;
            }
            return Ok(());
        };
        let service = match self.idle_services.iter().position(|(s, _)| *s == name) {
            Some(i) => self.idle_services.remove(i).1,
            None => start_service(name, &self.run_mark).await?,
        };
        match open_store(store, &self.lease_table, Some(&*service)).await {
            Ok(lease) => {
                self.case.ttl = lease.granted_ttl(self.params.case.ttl);
                self.lease = SteppedStore::wrap(lease);
                self.service = Some(service);
                self.case.store = store;
                Ok(())
            }
            Err(e) => {
                self.idle_services.push((name, service));
                Err(e)
            }
        }
    }

    /// Whether this case makes the part `part` of its experiment: the one question its code asks
    /// before running the part and its declared count asks before counting it
    /// ([`crate::Checks`]).
    pub fn makes(&self, part: crate::Part) -> bool {
        part.holds(self.case.store, self.case.again_with_fence)
    }

    /// Whether the lease store is the lease table (the SQL profile's), not a lock service or
    /// the database's advisory locks: what acts on the table (its SQL, its server's crash or
    /// replication) acts on the lease only then.
    pub fn lease_is_the_table(&self) -> bool {
        self.case.store == StoreId::Postgres
    }

    /// Whether `row` shows the lease given up: released in the lease table, or — on a lock
    /// service, which keeps nothing of a holding once it ends — no holding at all.
    pub fn shows_released(&self, row: Option<&fencing::lease::Holding>) -> bool {
        match row {
            Some(row) => row.released,
            None => self.service.is_some(),
        }
    }

    /// Empties every table and sets the scope's floor up at 0: each scenario starts here.
    pub async fn reset(&mut self) -> anyhow::Result<()> {
        self.lease.reset().await?;
        schema::reset(self.lease_table.pool()).await?;
        schema::reset(self.resource.pool()).await?;
        self.resource.setup_scope(SCOPE).await?;
        Ok(())
    }
}

/// Starts the lock service `service`: a container of its own, or — MariaDB, the named locks'
/// server — a local MariaDB from the host's binaries, which needs no engine.
async fn start_service(
    service: Service,
    mark: &str,
) -> anyhow::Result<Box<dyn harness::docker::LockService>> {
    use harness::docker::ContainedService;
    let contained = match service {
        Service::Mariadb => {
            #[cfg(feature = "mariadb")]
            return harness::server::mariadb::lock_service().await;
            #[cfg(not(feature = "mariadb"))]
            anyhow::bail!(
                "the named locks need MariaDB's client, which this build lacks: build with \
                 --features lab/mariadb,holder/mariadb (./run.sh does when MariaDB is installed)"
            );
        }
        Service::Redis => ContainedService::Redis,
        Service::Etcd => ContainedService::Etcd,
        Service::Zookeeper => ContainedService::Zookeeper,
    };
    harness::docker::lock_service(contained, mark).await
}

/// The lease store `id`: on the lab's lease table, or on the lock service the lab started for it.
pub(super) async fn open_store(
    id: StoreId,
    table: &SqlLeaseStore,
    service: Option<&dyn LockService>,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let at = fencing::lease::StoreAt {
        table: table.clone(),
        endpoints: service.iter().map(|s| s.endpoint()).collect(),
    };
    Ok(fencing::stores::open(id, &at).await?)
}

#[cfg(test)]
mod tests {
    use super::Testbed;

    /// Labs started together must not share a mark: a lab's shutdown removes whatever carries
    /// its mark, the other lab's containers too.
    #[test]
    fn run_marks_started_together_are_distinct_and_carry_the_pid() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..250)
                        .map(|_| Testbed::new_run_mark())
                        .collect::<Vec<_>>()
                })
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
