//! The lab's verbs on its servers, through its [`harness::hosts::Hosts`]: connection options and superuser
//! pools per database, a crash and restart of every server, a process's connections held in the
//! network, and a Patroni lease store's failover (its leader cut off, let back, the lab
//! following the new one). Each says what is true when it returns; none signals a process or
//! sleeps itself (that is `harness::process` and `harness::hosts`).

use std::time::Duration;

use anyhow::Context as _;
use fencing::schema::Database;
use harness::hosts::Host;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::{Restarted, Testbed};

impl Testbed {
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
    /// returned holds are lifted or dropped. A connection it opens meanwhile is not held. On a
    /// lock service as the lease store, the lease's host is the service's, and `pid`'s
    /// connections to it are named by `/proc`.
    pub async fn cut(
        &self,
        process: &str,
        pid: u32,
        db: Database,
    ) -> anyhow::Result<harness::docker::Holds> {
        if let (Database::Lease, Some(service)) = (db, &self.service) {
            let (ip, port) = (service.ip(), service.port());
            let ports = harness::process::tcp_ports_to(pid, ip, port)
                .context("failed to list the process's connections to the lock service")?;
            return harness::docker::Holds::start(ip, &ports, &self.run_mark).await;
        }
        let ip = self
            .servers
            .ip(host_of(db))
            .context("cutting a process off a server needs --backend containers")?;
        let admin = self.admin_pool(db).await?;
        let ports = harness::observe::client_ports(&admin, process).await;
        admin.close().await;
        let ports = ports.context("failed to list the process's connections")?;
        harness::docker::Holds::start(ip, &ports, &self.run_mark).await
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

    /// Whether the experiment can start containers here: `false` once `rec` says `skip` with why
    /// — `needs` (what the experiment needs, in its words), and this build's or this machine's
    /// reason (a build without the containers feature, no Docker engine answering). The only
    /// reasons a container experiment does not run: once the engine answers, a container that
    /// fails to start (an image that does not build, a server that never answers, a timeout) is
    /// the experiment's failure, never a skip. With `LAB_REQUIRE` naming docker, no engine is
    /// the experiment's failure too.
    pub async fn containers_here(
        &self,
        rec: &mut harness::evidence::Recorder,
        needs: &str,
    ) -> anyhow::Result<bool> {
        match harness::docker::engine().await {
            Ok(_) => Ok(true),
            Err(why) => {
                skip_unless_required(rec, format!("{needs}: {why}"))?;
                Ok(false)
            }
        }
    }

    /// Starts `n` PostgreSQL servers of the experiment's own, each on a host of its own (F15's
    /// resource, F16's lease store and resource), and notes in `rec` where their image came
    /// from. `None` once `rec` says `skip` with the reason: no Docker engine, no way to build
    /// the image, or a build without containers. End them with
    /// [`harness::docker::OwnServers::remove`]; a run interrupted meanwhile removes them by its mark.
    pub async fn own_servers(
        &self,
        rec: &mut harness::evidence::Recorder,
        n: usize,
    ) -> anyhow::Result<Option<Box<dyn harness::docker::OwnServers>>> {
        match harness::docker::own_servers(&self.run_mark, n).await {
            Err(reason) => {
                skip_unless_required(rec, reason)?;
                Ok(None)
            }
            Ok(started) => {
                let servers = started?;
                rec.note(servers.image_note());
                Ok(Some(servers))
            }
        }
    }

    /// Crashes every server of the lab (immediate stop: no checkpoint) and starts it again on
    /// the same data; returns once each has recovered and accepts connections, with what each
    /// logged meanwhile. The pools are stale afterwards: call [`Testbed::reopen`].
    pub async fn crash_and_restart(&mut self) -> anyhow::Result<Vec<Restarted>> {
        harness::wait::before_action().await;
        self.servers
            .crash_and_restart(self.params.wait_timeout)
            .await
    }
}

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
pub(super) const SUPERUSER: &str = harness::server::postgres::SUPERUSER;

/// Says `skip` with `reason` for an experiment that needs containers (or a client the
/// containers' build brings) — or, when `LAB_REQUIRE` names docker (CI, a gate), fails it with
/// the reason.
pub(crate) fn skip_unless_required(
    rec: &mut harness::evidence::Recorder,
    reason: String,
) -> anyhow::Result<()> {
    if harness::require::Dependency::Docker.required() {
        anyhow::bail!("LAB_REQUIRE names docker, and this experiment cannot run here: {reason}");
    }
    rec.skip(reason);
    Ok(())
}
