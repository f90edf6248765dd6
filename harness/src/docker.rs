//! What the lab asks of the container backend, always compiled: one trait, [`Docker`], whose
//! only implementation (`harness::containers::Engine`) exists with the feature `containers`, and
//! the handles it answers — a lock service ([`LockService`]), a Redis primary with its replica
//! and Sentinels ([`RedisFailover`]), N Redis servers for Redlock ([`RedlockServers`]), a
//! three-member etcd cluster ([`EtcdMembers`]), PostgreSQL servers an experiment starts for
//! itself ([`OwnServers`]) and a connection held in the network ([`Hold`], gathered in
//! [`Holds`]). [`crate::docker_backend`] is the one place the feature is decided: a build without
//! it answers [`NOT_BUILT`] there, so that no caller of these handles holds a `cfg` and no handle
//! has a stub.
//!
//! The free functions ([`lock_service`], [`own_servers`], …) start a handle through the backend
//! and word the error for the experiment that asked. Each verb says what is true when it
//! returns. A handle a run interrupted meanwhile is removed by the run's mark
//! ([`remove_marked`]).

use std::net::IpAddr;

use sqlx::postgres::PgConnectOptions;

use crate::hosts::{Answer, Hosts, HostsFuture};
use crate::replication::Replication;

/// Why a container experiment cannot run in this build.
pub const NOT_BUILT: &str = "this lab was built without the containers feature: start a Docker \
    engine and build with --features lab/containers (./run.sh and scripts/test.sh do when one answers)";

/// The PostgreSQL port of a server on a host of its own (a container).
pub const PG_PORT: u16 = 5432;

/// The container backend: servers in containers on private networks of the run, everything
/// labelled with the run's mark.
pub trait Docker: Send + Sync {
    /// `Ok(server version)` when a Docker engine answers; else why not, with the fix.
    fn engine(&self) -> Answer<'_, Result<String, String>>;
    /// PostgreSQL `pg_major` in a container per database (the lease store on a Patroni cluster
    /// of three when `patroni`); returns once both accept connections. On error nothing is left.
    fn start_hosts<'a>(
        &'a self,
        mark: &'a str,
        pg_major: u32,
        patroni: Option<Replication>,
    ) -> HostsFuture<'a, Box<dyn Hosts>>;
    /// `n` PostgreSQL 15 servers (building the image on first use); returns once each accepts
    /// connections. `Err(reason)` when the image cannot be built here; `Ok(Err(_))` when
    /// starting failed (nothing is left then).
    fn own_servers<'a>(
        &'a self,
        mark: &'a str,
        n: usize,
    ) -> Answer<'a, Result<anyhow::Result<Box<dyn OwnServers>>, String>>;
    /// The lock service `service` in a container of its own; returns once it answers on its
    /// port.
    fn lock_service<'a>(
        &'a self,
        service: ContainedService,
        mark: &'a str,
    ) -> HostsFuture<'a, Box<dyn LockService>>;
    /// A Redis primary, its replica and three Sentinels; returns once the replica has
    /// synchronised and the Sentinels monitor the primary.
    fn redis_failover<'a>(&'a self, mark: &'a str) -> HostsFuture<'a, Box<dyn RedisFailover>>;
    /// `n` independent Redis servers — server `shifted_clock`, if any, under the clock shim (see
    /// [`RedlockServers::shift_clock`]); returns once each is ready.
    fn redlock_servers<'a>(
        &'a self,
        mark: &'a str,
        n: usize,
        shifted_clock: Option<usize>,
    ) -> HostsFuture<'a, Box<dyn RedlockServers>>;
    /// A three-member etcd cluster; returns once it has a leader.
    fn etcd_members<'a>(&'a self, mark: &'a str) -> HostsFuture<'a, Box<dyn EtcdMembers>>;
    /// Holds every packet to `ip` from `port` on this host (an iptables DROP rule); returns once
    /// the rule is in place, with the rule as iptables lists it.
    fn hold<'a>(
        &'a self,
        ip: IpAddr,
        port: u16,
        mark: &'a str,
    ) -> HostsFuture<'a, (Box<dyn Hold>, String)>;
    /// Holds every TCP packet to `ip:port` from processes of the user `uid` on this host — the
    /// connections they have and those they open meanwhile; returns once the rule is in place.
    fn hold_owner<'a>(
        &'a self,
        ip: IpAddr,
        port: u16,
        uid: u32,
        mark: &'a str,
    ) -> HostsFuture<'a, (Box<dyn Hold>, String)>;
    /// This host's TCP connection from `sport` to `dst` as `ss -tin` reports it, reduced to its
    /// state, send queue and retransmission figures; empty when there is none.
    fn tcp_state(&self, dst: IpAddr, sport: u16) -> Answer<'_, String>;
    /// Removes whatever carries the run mark `mark` — containers, networks, network holds;
    /// returns once they are gone.
    fn remove_marked<'a>(&'a self, mark: &'a str) -> Answer<'a, ()>;
}

/// A lock service the lab runs as its lease store (`--lease-store redis|etcd|zookeeper`): one
/// server in a container of its own, on a private network of the run.
pub trait LockService: Send + Sync {
    /// `redis`, `etcd` or `zookeeper`.
    fn service(&self) -> &str;
    /// Where its image came from (built in this run and how long it took, or reused).
    fn image_note(&self) -> &str;
    /// The service's first process on this host (its container's): where its CPU is read.
    fn pid(&self) -> Answer<'_, Option<u32>>;
    /// `ip:port` of the server, where clients connect.
    fn endpoint(&self) -> String;
    /// The port it listens on.
    fn port(&self) -> u16;
    /// The server's address on its network.
    fn ip(&self) -> IpAddr;
    /// What the server says its version is.
    fn version(&self) -> &str;
    /// The settings that bear on expiry, as the lab started it.
    fn settings(&self) -> &[(String, String)];
    /// The server's log so far.
    fn log(&self) -> Answer<'_, String>;
    /// Removes it; returns once it is gone.
    fn remove(self: Box<Self>) -> Answer<'static, ()>;
    /// Stops it and leaves its container for inspection: the line that says where.
    fn stop_and_keep(self: Box<Self>) -> Answer<'static, String>;
    /// Pauses the server (its container's cgroup freezer): it neither answers nor acts, and what
    /// clients send waits in its sockets until [`LockService::unpause`]. Removing or keeping it
    /// unpauses it first. `Err` from a service that cannot be paused.
    fn pause(&self) -> Answer<'_, anyhow::Result<()>> {
        let service = self.service().to_owned();
        Box::pin(async move { anyhow::bail!("the lock service {service} cannot be paused here") })
    }
    /// Lets a paused server run on.
    fn unpause(&self) -> Answer<'_, anyhow::Result<()>> {
        let service = self.service().to_owned();
        Box::pin(async move { anyhow::bail!("the lock service {service} cannot be paused here") })
    }
    /// Crashes the server (SIGKILL: no shutdown) and starts it again on the same address;
    /// returns once it accepts connections. Offered by the named locks' local MariaDB (S2);
    /// `Err` from a service in a container, whose experiments restart it their own way.
    fn crash_and_restart(&mut self) -> Answer<'_, anyhow::Result<()>> {
        let service = self.service().to_owned();
        Box::pin(async move {
            anyhow::bail!("the lock service {service} offers no crash and restart of its own")
        })
    }
}

/// A Redis primary with a replica and three Sentinels (R2).
pub trait RedisFailover: Send + Sync {
    /// Where its image came from.
    fn image_note(&self) -> &str;
    /// `ip:port` of the primary it started with.
    fn primary_endpoint(&self) -> String;
    /// `ip:port` of the replica.
    fn replica_endpoint(&self) -> String;
    /// The primary's and the replica's addresses.
    fn ips(&self) -> (IpAddr, IpAddr);
    /// `redis-server --version` of its servers.
    fn version(&self) -> &str;
    /// `redis-cli ARGS` from inside the group: its output.
    fn cli<'a>(&'a self, args: &'a str) -> HostsFuture<'a, String>;
    /// Whether the replica is linked and every Sentinel knows it and the two others.
    fn whole(&self) -> HostsFuture<'_, bool>;
    /// Cuts the replica off from the primary; the rule as iptables lists it.
    fn cut_replica(&self) -> HostsFuture<'_, String>;
    /// Loses the primary (its container removed, as a crashed host).
    fn lose_primary(&mut self) -> HostsFuture<'_, ()>;
    /// Where the Sentinels say the primary is now.
    fn master_now(&self) -> Answer<'_, Option<IpAddr>>;
    /// The Sentinels' log lines of a failover, each once.
    fn failover_log(&self) -> Answer<'_, Vec<String>>;
    /// Removes it; returns once it is gone.
    fn remove(self: Box<Self>) -> Answer<'static, ()>;
}

/// N independent Redis servers (the RL-series' Redlock).
pub trait RedlockServers: Send + Sync {
    /// Where its image came from.
    fn image_note(&self) -> &str;
    /// `ip:port` of each server.
    fn endpoints(&self) -> Vec<String>;
    /// `redis-cli ARGS` against server `i`: its output.
    fn cli<'a>(&'a self, i: usize, args: &'a str) -> HostsFuture<'a, String>;
    /// Server `i`'s log so far.
    fn log(&self, i: usize) -> Answer<'_, String>;
    /// Server `i` refuses every new connection (a REJECT rule); returns once it is in place.
    fn refuse(&self, i: usize) -> HostsFuture<'_, ()>;
    /// Server `i` accepts connections again.
    fn admit(&self, i: usize) -> HostsFuture<'_, ()>;
    /// Server `i` answers nothing (a DROP rule): a client's connection attempt or request waits
    /// out its own timeout; returns once the rule is in place.
    fn stall(&self, i: usize) -> HostsFuture<'_, ()>;
    /// Server `i` answers again.
    fn unstall(&self, i: usize) -> HostsFuture<'_, ()>;
    /// Server `i`'s wall clock, in ms since the epoch, as Redis's TIME reads it.
    fn time_ms(&self, i: usize) -> HostsFuture<'_, i64>;
    /// Moves server `i`'s wall clock by `ms` (the clock shim; only the server started shifted).
    fn shift_clock(&self, i: usize, ms: i64) -> HostsFuture<'_, ()>;
    /// Restarts server `i` without persistence: it comes back empty.
    fn restart(&self, i: usize) -> HostsFuture<'_, ()>;
    /// Removes them; returns once they are gone.
    fn remove(self: Box<Self>) -> Answer<'static, ()>;
}

/// A three-member etcd cluster (R3).
pub trait EtcdMembers: Send + Sync {
    /// Where its image came from.
    fn image_note(&self) -> &str;
    /// The members' client endpoints, comma-separated.
    fn endpoints(&self) -> String;
    /// `etcd --version` of its members.
    fn version(&self) -> &str;
    /// The cluster's current revision.
    fn revision(&self) -> HostsFuture<'_, i64>;
    /// Saves a snapshot; the line that says which.
    fn snapshot(&self) -> HostsFuture<'_, String>;
    /// Restores every member from the snapshot; what each said.
    fn restore(&self) -> HostsFuture<'_, Vec<String>>;
    /// Raises the revision by `n` (writes to a key of its own) before serving.
    fn bump(&self, n: i64) -> HostsFuture<'_, ()>;
    /// Removes it; returns once it is gone.
    fn remove(self: Box<Self>) -> Answer<'static, ()>;
}

/// PostgreSQL servers an experiment starts for itself (F15: the resource on a host of its own;
/// F16: the lease store and the resource on two), on one private network of the run, reached
/// over TCP at [`PG_PORT`].
pub trait OwnServers: Send + Sync {
    /// Each server's address on that network, in start order.
    fn ips(&self) -> Vec<IpAddr>;
    /// Where their image came from.
    fn image_note(&self) -> &str;
    /// Connection options for `database` as `user` on server `i`.
    fn connect_options(&self, i: usize, database: &str, user: &str) -> PgConnectOptions;
    /// Server `i`'s log so far (every statement it received, with its arrival time).
    fn log(&self, i: usize) -> Answer<'_, String>;
    /// Removes the servers, then their network; returns once they are gone.
    fn remove(self: Box<Self>) -> Answer<'static, ()>;
}

impl dyn OwnServers + '_ {
    /// A small pool (two connections) to `database` as `user` on server `i`.
    pub async fn pool(&self, i: usize, database: &str, user: &str) -> anyhow::Result<sqlx::PgPool> {
        use anyhow::Context as _;
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(self.connect_options(i, database, user))
            .await
            .with_context(|| {
                format!(
                    "failed to connect to {database} as {user} on {}",
                    self.ips()[i]
                )
            })
    }
}

/// One connection (or one user's connections) held in the network: dropping it lifts it too.
pub trait Hold: Send + Sync {
    /// The rule with its counters now, as `iptables -L OUTPUT -v -n` lists it.
    fn listed(&self) -> Answer<'_, String>;
    /// Lifts it; returns once the rule is gone (the next retransmission gets through).
    fn lift(self: Box<Self>) -> HostsFuture<'static, ()>;
}

/// Connections held in the network (containers: an iptables DROP rule on this host per
/// connection's source port — this machine kind's kernel has no netem): what each sends
/// meanwhile arrives once the rules go. Dropping them lifts them too.
#[derive(Default)]
pub struct Holds {
    holds: Vec<Box<dyn Hold>>,
    /// Each rule as iptables lists it.
    rules: Vec<String>,
}

impl Holds {
    /// Holds every packet to `ip` from each of `ports` on this host; returns once every rule is
    /// in place (on an error, the rules placed so far are lifted: dropped).
    pub async fn start(ip: IpAddr, ports: &[u16], mark: &str) -> anyhow::Result<Holds> {
        let docker = backend("holding a connection in the network")?;
        let mut held = Holds::default();
        for port in ports {
            let (hold, rule) = docker.hold(ip, *port, mark).await?;
            held.holds.push(hold);
            held.rules.push(rule);
        }
        Ok(held)
    }

    /// Holds every TCP packet to `ip:port` from processes of the user `uid` on this host — the
    /// connections they have and those they open meanwhile (a client that reconnects at once,
    /// as ZooKeeper's does, stays cut off); returns once the rule is in place.
    pub async fn start_for_owner(
        ip: IpAddr,
        port: u16,
        uid: u32,
        mark: &str,
    ) -> anyhow::Result<Holds> {
        let docker = backend("holding a process's connections in the network")?;
        let (hold, rule) = docker.hold_owner(ip, port, uid, mark).await?;
        Ok(Holds {
            holds: vec![hold],
            rules: vec![rule],
        })
    }

    /// How many rules hold connections.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Each rule as iptables lists it.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    /// Each rule with its counters now, as `iptables -L OUTPUT -v -n` lists it, `; `-joined.
    pub async fn listed(&self) -> String {
        let mut lines = Vec::new();
        for hold in &self.holds {
            lines.push(hold.listed().await);
        }
        lines.join("; ")
    }

    /// Lifts every hold; returns once each rule is gone (the next retransmission gets through).
    pub async fn lift(self) -> anyhow::Result<()> {
        for hold in self.holds {
            hold.lift().await?;
        }
        Ok(())
    }
}

/// The backend, or why there is none, worded for `what` asked.
fn backend(what: &str) -> anyhow::Result<&'static dyn Docker> {
    crate::docker_backend().map_err(|why| anyhow::anyhow!("{what}: {why}"))
}

/// `Ok(server version)` when a Docker engine answers; else why not, with the fix (and
/// [`NOT_BUILT`] in a build without containers).
pub async fn engine() -> Result<String, String> {
    match crate::docker_backend() {
        Ok(docker) => docker.engine().await,
        Err(why) => Err(why.to_owned()),
    }
}

/// Starts the container backend's hosts (see [`Docker::start_hosts`]); [`NOT_BUILT`] without it.
pub async fn start_hosts(
    mark: &str,
    pg_major: u32,
    patroni: Option<Replication>,
) -> anyhow::Result<Box<dyn Hosts>> {
    backend("--backend containers")?
        .start_hosts(mark, pg_major, patroni)
        .await
}

/// Starts `n` PostgreSQL servers of an experiment's own (see [`Docker::own_servers`]);
/// `Err(reason)`, what the experiment says when it skips, without a backend.
pub async fn own_servers(
    mark: &str,
    n: usize,
) -> Result<anyhow::Result<Box<dyn OwnServers>>, String> {
    match crate::docker_backend() {
        Ok(docker) => docker.own_servers(mark, n).await,
        Err(why) => Err(why.to_owned()),
    }
}

/// A lock service the container backend starts in a container of its own (the lab's lease
/// stores on Redis, etcd and ZooKeeper).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainedService {
    Redis,
    Etcd,
    Zookeeper,
}

impl ContainedService {
    /// Its name, as the evidence and the containers' labels spell it.
    pub const fn name(self) -> &'static str {
        match self {
            ContainedService::Redis => "redis",
            ContainedService::Etcd => "etcd",
            ContainedService::Zookeeper => "zookeeper",
        }
    }
}

impl std::fmt::Display for ContainedService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Starts the lock service `service` (see [`Docker::lock_service`]).
pub async fn lock_service(
    service: ContainedService,
    mark: &str,
) -> anyhow::Result<Box<dyn LockService>> {
    backend(&format!("--lease-store {service}"))?
        .lock_service(service, mark)
        .await
}

/// Starts a Redis primary with its replica and Sentinels (see [`Docker::redis_failover`]).
pub async fn redis_failover(mark: &str) -> anyhow::Result<Box<dyn RedisFailover>> {
    backend("Redis with Sentinel")?.redis_failover(mark).await
}

/// Starts `n` Redis servers for Redlock (see [`Docker::redlock_servers`]).
pub async fn redlock_servers(
    mark: &str,
    n: usize,
    shifted_clock: Option<usize>,
) -> anyhow::Result<Box<dyn RedlockServers>> {
    backend("Redis servers for Redlock")?
        .redlock_servers(mark, n, shifted_clock)
        .await
}

/// Starts a three-member etcd cluster (see [`Docker::etcd_members`]).
pub async fn etcd_members(mark: &str) -> anyhow::Result<Box<dyn EtcdMembers>> {
    backend("a three-member etcd cluster")?
        .etcd_members(mark)
        .await
}

/// This host's TCP connection from `sport` to `dst` (see [`Docker::tcp_state`]); empty in a
/// build without containers, which holds no connection.
pub async fn tcp_state(dst: IpAddr, sport: u16) -> String {
    match crate::docker_backend() {
        Ok(docker) => docker.tcp_state(dst, sport).await,
        Err(_) => String::new(),
    }
}

/// Removes whatever carries the run mark `mark` outside this process (see
/// [`Docker::remove_marked`]); nothing in a build without containers, which makes none.
pub async fn remove_marked(mark: &str) {
    if let Ok(docker) = crate::docker_backend() {
        docker.remove_marked(mark).await;
    }
}
