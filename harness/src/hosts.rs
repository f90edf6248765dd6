//! Where a lab's two databases live — the lease store's and the resource's — behind one trait,
//! [`Hosts`], always compiled: the embedded cluster (both databases on one [`Cluster`], over its
//! Unix socket; the default), a primary and its streaming standby (F14:
//! `server::standby::Replicated`), or, with the feature `containers`, a PostgreSQL container per
//! database on networks of their own, the lease store optionally a Patroni cluster
//! (`containers::pg_hosts`); and the servers an experiment starts for itself ([`OwnServers`]: F15,
//! F16), the network holds ([`Holds`]). A build without that feature reaches the container form through the
//! same path, [`start_containers`], which answers [`NOT_BUILT`]: callers hold no `cfg`.
//!
//! Each verb says what is true when it returns. This module must not know the fencing
//! implementation: it names the two hosts ([`Host`]), never a database's tables.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use sqlx::postgres::PgConnectOptions;

use crate::replication::Replication;
use crate::server::{Cluster, Server as _};

/// Why a container experiment cannot run in this build.
pub const NOT_BUILT: &str = "this lab was built without the containers feature: start a Docker \
    engine and build with --features lab/containers (./run.sh and scripts/test.sh do when one answers)";

/// Which of the lab's two hosts: the lease store's or the resource's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Lease,
    Resource,
}

/// Where the lease store and the resource run (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Both databases on the embedded cluster, over its Unix socket: the default.
    Embedded,
    /// Each database on a PostgreSQL container of its own (this major version), on networks
    /// of their own that the lab creates, reached over TCP (feature `containers`); with
    /// `patroni`, the lease database on a Patroni-managed cluster of three replicating so
    /// (`--lease-store patroni…`).
    Containers {
        pg_major: u32,
        patroni: Option<Replication>,
    },
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Embedded => f.write_str("embedded"),
            Backend::Containers {
                pg_major,
                patroni: None,
            } => write!(f, "containers (PostgreSQL {pg_major})"),
            Backend::Containers {
                pg_major,
                patroni: Some(replication),
            } => write!(
                f,
                "containers (PostgreSQL {pg_major}, the lease store on Patroni, {replication})"
            ),
        }
    }
}

/// A server crashed and started again ([`Hosts::crash_and_restart`]).
#[derive(Debug)]
pub struct Restarted {
    /// Which: `the cluster`, or `lease26's host`.
    pub server: String,
    /// The postmaster's pid before the crash and after the restart, as this host sees them.
    pub old_pid: Option<u32>,
    pub new_pid: Option<u32>,
    /// What it logged from just before the crash until it accepted connections again.
    pub log: String,
}

/// A verb's answer, boxed so that the hosts can be chosen at run time (`Box<dyn Hosts>`).
pub type HostsFuture<'a, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send + 'a>>;

/// A verb that cannot fail (a stop, a log read that says what it could not read).
pub type Infallible<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The lab's two hosts. End them with [`Hosts::shutdown`]; dropping them is the last resort of a
/// panic (each server's own `Drop`).
pub trait Hosts: Send + Sync {
    /// Which backend these are.
    fn backend(&self) -> Backend;

    /// Where the servers are, for the environment record.
    fn describe(&self) -> String;

    /// Connection options for `database` as `user` on `host`.
    fn connect_options(&self, host: Host, database: &str, user: &str) -> PgConnectOptions;

    /// The address a holder connects to for `host` over TCP (several, comma-separated, for a
    /// Patroni lease store: the holder finds the read-write one); `None`: the Unix socket.
    fn tcp_host(&self, host: Host) -> Option<String>;

    /// The Unix socket directory and port a holder connects to when [`Hosts::tcp_host`] is
    /// `None`.
    fn socket(&self) -> (PathBuf, u16);

    /// The embedded cluster, when that is where both databases live.
    fn embedded(&self) -> Option<&Cluster> {
        None
    }

    /// The address of `host`'s server on its network, when it has one of its own.
    fn ip(&self, host: Host) -> Option<IpAddr> {
        let _ = host;
        None
    }

    /// Crashes every server (immediate stop: no checkpoint) and starts it again on the same
    /// data; returns once each has recovered and accepts connections (within `timeout`), with
    /// what each logged meanwhile. Connections opened before are stale afterwards.
    fn crash_and_restart(&mut self, timeout: Duration) -> HostsFuture<'_, Vec<Restarted>>;

    /// Keeps every server's directory or container after the lab ends (stopped): one line per
    /// server saying where it is and how to look inside. Call [`Hosts::shutdown`] next.
    fn keep(&mut self) -> Vec<String>;

    /// Stops every server; returns once each has stopped. What was not kept is removed.
    fn shutdown(self: Box<Self>) -> Infallible<'static, ()>;

    /// Stops every server now, when a scenario is done with hosts of its own (F14's primary
    /// and standby), while [`Hosts::keep`] and [`Hosts::shutdown`] still decide at the lab's
    /// end whether they are kept; returns once each has stopped. The default leaves them
    /// running until [`Hosts::shutdown`] (containers: stopping one is removing it).
    fn stop_servers(&mut self) -> Infallible<'_, ()> {
        Box::pin(async {})
    }

    /// From the resource's host, what `pg_isready` says of the lease store's server and, as the
    /// control, of its own (within `timeout`); `None` where both share one host.
    fn resource_host_reaches(&self, timeout: Duration) -> HostsFuture<'_, Option<[String; 2]>> {
        let _ = timeout;
        Box::pin(async { Ok(None) })
    }

    /// (Patroni) Cuts the lease store's leader off from its peers (not from the lab's host)
    /// once the cluster is whole: its name, and the replicas reinitialised first.
    fn isolate_lease_leader(
        &mut self,
        timeout: Duration,
    ) -> HostsFuture<'_, (String, Vec<String>)> {
        let _ = timeout;
        Box::pin(async {
            anyhow::bail!("a failover needs the lease store on Patroni: --lease-store patroni")
        })
    }

    /// (Patroni) Once another leader was elected (within `timeout`), lets `old` back as a
    /// replica and talks to the new leader: its name.
    fn mend_lease_host<'a>(
        &'a mut self,
        old: &'a str,
        timeout: Duration,
    ) -> HostsFuture<'a, String> {
        let _ = (old, timeout);
        Box::pin(async {
            anyhow::bail!("a failover needs the lease store on Patroni: --lease-store patroni")
        })
    }

    /// (Patroni) Waits until the lease store is whole (a leader every replica streams from; a
    /// replica that does not is reinitialised) and talks to its leader: the replicas
    /// reinitialised, or `None` for a lease store that is not a Patroni cluster.
    fn heal_lease_store(&mut self, timeout: Duration) -> HostsFuture<'_, Option<Vec<String>>> {
        let _ = timeout;
        Box::pin(async { Ok(None) })
    }

    /// (Patroni) Waits for the lease store's leader and talks to it: `true` when that is
    /// another node than before (connections must be reopened).
    fn follow_lease_leader(&mut self, timeout: Duration) -> HostsFuture<'_, bool> {
        let _ = timeout;
        Box::pin(async { Ok(false) })
    }

    /// (Patroni) Each node's name and log from `since` on; none elsewhere.
    fn lease_logs(&self, since: SystemTime) -> Infallible<'_, Vec<(String, String)>> {
        let _ = since;
        Box::pin(async { Vec::new() })
    }
}

/// The embedded cluster: both databases on one server, over its Unix socket.
impl Hosts for Cluster {
    fn backend(&self) -> Backend {
        Backend::Embedded
    }

    fn describe(&self) -> String {
        format!("embedded: cluster {}", self.root().display())
    }

    fn connect_options(&self, _: Host, database: &str, user: &str) -> PgConnectOptions {
        Cluster::connect_options(self, database, user)
    }

    fn tcp_host(&self, _: Host) -> Option<String> {
        None
    }

    fn socket(&self) -> (PathBuf, u16) {
        (self.socket_dir(), self.port())
    }

    fn embedded(&self) -> Option<&Cluster> {
        Some(self)
    }

    fn crash_and_restart(&mut self, _: Duration) -> HostsFuture<'_, Vec<Restarted>> {
        Box::pin(async move {
            let offset = self.log_len();
            let old_pid = self.postmaster_pid();
            self.restart_immediate().await?;
            Ok(vec![Restarted {
                server: "the cluster".into(),
                old_pid,
                new_pid: self.postmaster_pid(),
                log: self.log_since(offset)?,
            }])
        })
    }

    fn keep(&mut self) -> Vec<String> {
        self.keep_on_drop();
        vec![format!(
            "kept the cluster at {} (server log {}); it is stopped. To look inside, start it as \
             the directory's owner: {}  (Ctrl-C stops it)",
            self.root().display(),
            self.log_path().display(),
            self.restart_hint(),
        )]
    }

    fn shutdown(mut self: Box<Self>) -> Infallible<'static, ()> {
        Box::pin(async move { self.stop().await })
    }

    fn stop_servers(&mut self) -> Infallible<'_, ()> {
        Box::pin(async move { self.stop().await })
    }
}

/// Starts the container backend: PostgreSQL `pg_major` in a container per database (the lease
/// store on a Patroni cluster of three when `patroni`), everything labelled `mark`; returns once
/// both accept connections. On error nothing is left. Without the feature `containers`:
/// [`NOT_BUILT`], through the same path.
pub fn start_containers(
    mark: &str,
    pg_major: u32,
    patroni: Option<Replication>,
) -> HostsFuture<'_, Box<dyn Hosts>> {
    #[cfg(feature = "containers")]
    return Box::pin(async move {
        let hosts =
            crate::containers::pg_hosts::ContainerServers::start(mark, pg_major, patroni).await?;
        Ok(Box::new(hosts) as Box<dyn Hosts>)
    });
    #[cfg(not(feature = "containers"))]
    {
        let _ = (mark, pg_major, patroni);
        Box::pin(async { anyhow::bail!("--backend containers: {NOT_BUILT}") })
    }
}

/// `Ok(server version)` when a Docker engine answers; else why not, with the fix (and
/// [`NOT_BUILT`] in a build without containers).
pub async fn engine() -> Result<String, String> {
    #[cfg(feature = "containers")]
    return crate::containers::engine().await;
    #[cfg(not(feature = "containers"))]
    Err(NOT_BUILT.to_owned())
}

/// Connections held in the network (containers: an iptables DROP rule on this host per
/// connection's source port — this machine kind's kernel has no netem): what each sends
/// meanwhile arrives once the rules go. Dropping them lifts them too.
#[derive(Default)]
pub struct Holds {
    #[cfg(feature = "containers")]
    holds: Vec<crate::containers::Hold>,
    /// Each rule as iptables lists it.
    rules: Vec<String>,
}

impl Holds {
    /// Holds every packet to `ip` from each of `ports` on this host; returns once every rule is
    /// in place (on an error, the rules placed so far are lifted). Without the feature
    /// `containers`: [`NOT_BUILT`].
    pub async fn start(ip: IpAddr, ports: &[u16], mark: &str) -> anyhow::Result<Holds> {
        #[cfg(feature = "containers")]
        {
            let mut held = Holds::default();
            for port in ports {
                let (hold, rule) = crate::containers::Hold::start(ip, *port, mark).await?;
                held.holds.push(hold);
                held.rules.push(rule);
            }
            Ok(held)
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = (ip, ports, mark);
            anyhow::bail!("holding a connection in the network: {NOT_BUILT}")
        }
    }

    /// Holds every TCP packet to `ip:port` from processes of the user `uid` on this host — the
    /// connections they have and those they open meanwhile (a client that reconnects at once,
    /// as ZooKeeper's does, stays cut off); returns once the rule is in place. Without the
    /// feature `containers`: [`NOT_BUILT`].
    pub async fn start_for_owner(
        ip: IpAddr,
        port: u16,
        uid: u32,
        mark: &str,
    ) -> anyhow::Result<Holds> {
        #[cfg(feature = "containers")]
        {
            let (hold, rule) =
                crate::containers::Hold::start_for_owner(ip, port, uid, mark).await?;
            Ok(Holds {
                holds: vec![hold],
                rules: vec![rule],
            })
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = (ip, port, uid, mark);
            anyhow::bail!("holding a process's connections in the network: {NOT_BUILT}")
        }
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
        #[cfg(feature = "containers")]
        {
            let mut lines = Vec::new();
            for hold in &self.holds {
                lines.push(hold.listed().await);
            }
            lines.join("; ")
        }
        #[cfg(not(feature = "containers"))]
        String::new()
    }

    /// Lifts every hold; returns once each rule is gone (the next retransmission gets through).
    pub async fn lift(self) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        for hold in self.holds {
            hold.lift().await?;
        }
        Ok(())
    }
}

/// The PostgreSQL port of a server on a host of its own (a container).
pub const PG_PORT: u16 = 5432;

/// This host's TCP connection from `sport` to `dst` as `ss -tin` reports it, reduced to its
/// state, send queue and retransmission figures; empty when there is none (or in a build
/// without containers, which holds no connection).
pub async fn tcp_state(dst: IpAddr, sport: u16) -> String {
    #[cfg(feature = "containers")]
    return crate::containers::tcp_state(dst, sport).await;
    #[cfg(not(feature = "containers"))]
    {
        let _ = (dst, sport);
        String::new()
    }
}

/// PostgreSQL servers an experiment starts for itself (F15: the resource on a host of its own;
/// F16: the lease store and the resource on two): containers on one private network of the
/// run, each labelled with the run's mark, reached over TCP at [`PG_PORT`]. Always compiled:
/// without the feature `containers`, [`OwnServers::start`] answers [`NOT_BUILT`] and no value
/// of this type can exist. End them with [`OwnServers::remove`]; dropping them removes them too.
pub struct OwnServers {
    #[cfg(feature = "containers")]
    hosts: crate::containers::pg_hosts::PgHosts,
    #[cfg(not(feature = "containers"))]
    never: std::convert::Infallible,
    /// Each server's address on that network, in start order.
    pub ips: Vec<IpAddr>,
    /// Where their image came from (built in this run and how long it took, or reused).
    pub image_note: String,
}

impl OwnServers {
    /// Starts `n` servers (building the PostgreSQL 15 image on first use); returns once each
    /// accepts connections. `Err(reason)` — what the experiment says when it skips — when no
    /// Docker engine answers, the image cannot be built here, or this build has no containers;
    /// `Ok(Err(_))` when starting failed (nothing is left then).
    pub async fn start(mark: &str, n: usize) -> Result<anyhow::Result<OwnServers>, String> {
        #[cfg(feature = "containers")]
        {
            use crate::containers::pg_hosts;
            let image = pg_hosts::image_or_skip(false).await?;
            Ok(pg_hosts::PgHosts::start(&image, mark, n)
                .await
                .map(|hosts| OwnServers {
                    ips: hosts.servers.iter().map(|s| s.ip).collect(),
                    image_note: pg_hosts::image_note(&image),
                    hosts,
                }))
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = (mark, n);
            Err(NOT_BUILT.to_owned())
        }
    }

    /// Connection options for `database` as `user` on server `i`.
    pub fn connect_options(&self, i: usize, database: &str, user: &str) -> PgConnectOptions {
        #[cfg(feature = "containers")]
        return self.hosts.servers[i].connect_options(database, user);
        #[cfg(not(feature = "containers"))]
        {
            let _ = (i, database, user);
            match self.never {}
        }
    }

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
                    self.ips[i]
                )
            })
    }

    /// Server `i`'s log so far (every statement it received, with its arrival time).
    pub async fn log(&self, i: usize) -> String {
        #[cfg(feature = "containers")]
        return self.hosts.servers[i].log().await;
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Removes the servers, then their network; returns once they are gone.
    pub async fn remove(self) {
        #[cfg(feature = "containers")]
        self.hosts.remove().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }
}

/// Removes whatever carries the run mark `mark` outside this process — containers, networks,
/// network holds — that a scenario interrupted mid-way left (nothing in a build without
/// containers, which makes none). Returns once they are gone.
pub async fn remove_marked(mark: &str) {
    #[cfg(feature = "containers")]
    {
        let _ = crate::containers::remove_labelled(Some(mark), false).await;
        crate::containers::remove_held_rules(Some(mark)).await;
    }
    #[cfg(not(feature = "containers"))]
    let _ = mark;
}

/// A lock service the lab runs as its lease store (`--lease-store redis|etcd|zookeeper`): one
/// server in a container of its own (`containers::ServiceContainer`), on a private network of
/// the run. Always compiled: without the feature `containers`, [`LockService::start`] answers
/// [`NOT_BUILT`] and no value of this type can exist. End it with [`LockService::remove`] (or
/// [`LockService::stop_and_keep`]); a run interrupted meanwhile removes it by its mark.
pub struct LockService {
    #[cfg(feature = "containers")]
    server: crate::containers::ServiceContainer,
    #[cfg(not(feature = "containers"))]
    never: std::convert::Infallible,
    /// `redis`, `etcd` or `zookeeper`.
    pub service: String,
    /// Where its image came from (built in this run and how long it took, or reused).
    pub image_note: String,
}

impl LockService {
    /// Starts `service` (building the image with the three services on first use); returns
    /// once it answers on its port.
    pub async fn start(service: &str, mark: &str) -> anyhow::Result<LockService> {
        #[cfg(feature = "containers")]
        {
            use crate::containers;
            containers::engine()
                .await
                .map_err(|reason| anyhow::anyhow!("--lease-store {service}: {reason}"))?;
            let image = containers::services_image().await.map_err(|e| {
                anyhow::anyhow!(
                    "--lease-store {service}: no way to build the lock services' image here \
                     ({e}); building needs root, debootstrap and the Debian archive"
                )
            })?;
            let server = containers::ServiceContainer::start(service, &image, mark).await?;
            Ok(LockService {
                server,
                service: service.to_owned(),
                image_note: containers::pg_hosts::image_note(&image),
            })
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = mark;
            anyhow::bail!("--lease-store {service}: {NOT_BUILT}")
        }
    }

    /// The service's first process on this host (its container's): where its CPU is read.
    pub async fn pid(&self) -> Option<u32> {
        #[cfg(feature = "containers")]
        return self.server.pid().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `ip:port` of the server, where clients connect.
    pub fn endpoint(&self) -> String {
        #[cfg(feature = "containers")]
        return self.server.endpoint();
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        #[cfg(feature = "containers")]
        return self.server.port;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The server's address on its network.
    pub fn ip(&self) -> IpAddr {
        #[cfg(feature = "containers")]
        return self.server.ip;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// What the server says its version is.
    pub fn version(&self) -> &str {
        #[cfg(feature = "containers")]
        return &self.server.version;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The settings that bear on expiry, as the lab started it.
    pub fn settings(&self) -> &[(String, String)] {
        #[cfg(feature = "containers")]
        return &self.server.settings;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The server's log so far.
    pub async fn log(&self) -> String {
        #[cfg(feature = "containers")]
        return self.server.log().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Removes it; returns once it is gone.
    pub async fn remove(self) {
        #[cfg(feature = "containers")]
        self.server.remove().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Stops it and leaves its container for inspection: the line that says where.
    pub async fn stop_and_keep(self) -> String {
        #[cfg(feature = "containers")]
        return self.server.stop_and_keep().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }
}

/// A Redis primary with a replica and three Sentinels (R2): `containers::SentinelGroup`. Always
/// compiled: without the feature `containers`, [`RedisFailover::start`] answers [`NOT_BUILT`]
/// and no value of this type can exist. End it with [`RedisFailover::remove`]; a run
/// interrupted meanwhile removes it by its mark.
pub struct RedisFailover {
    #[cfg(feature = "containers")]
    group: crate::containers::SentinelGroup,
    #[cfg(not(feature = "containers"))]
    never: std::convert::Infallible,
    /// Where its image came from.
    pub image_note: String,
}

impl RedisFailover {
    /// Starts the group (building the lock services' image on first use); returns once the
    /// replica has synchronised and the Sentinels monitor the primary.
    pub async fn start(mark: &str) -> anyhow::Result<RedisFailover> {
        #[cfg(feature = "containers")]
        {
            use crate::containers;
            containers::engine()
                .await
                .map_err(|reason| anyhow::anyhow!("Redis with Sentinel: {reason}"))?;
            let image = containers::services_image().await.map_err(|e| {
                anyhow::anyhow!(
                    "Redis with Sentinel: no way to build the lock services' image here ({e}); \
                     building needs root, debootstrap and the Debian archive"
                )
            })?;
            let group = containers::SentinelGroup::start(&image, mark).await?;
            Ok(RedisFailover {
                group,
                image_note: containers::pg_hosts::image_note(&image),
            })
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = mark;
            anyhow::bail!("Redis with Sentinel: {NOT_BUILT}")
        }
    }

    /// `ip:port` of the primary it started with.
    pub fn primary_endpoint(&self) -> String {
        #[cfg(feature = "containers")]
        return self.group.primary_endpoint();
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `ip:port` of the replica.
    pub fn replica_endpoint(&self) -> String {
        #[cfg(feature = "containers")]
        return self.group.replica_endpoint();
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The primary's and the replica's addresses.
    pub fn ips(&self) -> (IpAddr, IpAddr) {
        #[cfg(feature = "containers")]
        return (self.group.primary_ip, self.group.replica_ip);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `redis-server --version` of its servers.
    pub fn version(&self) -> &str {
        #[cfg(feature = "containers")]
        return &self.group.version;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `redis-cli ARGS` from inside the group: its output.
    pub async fn cli(&self, args: &str) -> anyhow::Result<String> {
        #[cfg(feature = "containers")]
        return Ok(self.group.cli(args).await?);
        #[cfg(not(feature = "containers"))]
        {
            let _ = args;
            match self.never {}
        }
    }

    /// Whether the replica is linked and every Sentinel knows it and the two others.
    pub async fn whole(&self) -> anyhow::Result<bool> {
        #[cfg(feature = "containers")]
        return Ok(self.group.whole().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Cuts the replica off from the primary; the rule as iptables lists it.
    pub async fn cut_replica(&self) -> anyhow::Result<String> {
        #[cfg(feature = "containers")]
        return Ok(self.group.cut_replica().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Loses the primary (its container removed, as a crashed host).
    pub async fn lose_primary(&mut self) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return Ok(self.group.lose_primary().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Where the Sentinels say the primary is now.
    pub async fn master_now(&self) -> Option<IpAddr> {
        #[cfg(feature = "containers")]
        return self.group.master_now().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The Sentinels' log lines of a failover, each once.
    pub async fn failover_log(&self) -> Vec<String> {
        #[cfg(feature = "containers")]
        return self.group.failover_log().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Removes it; returns once it is gone.
    pub async fn remove(self) {
        #[cfg(feature = "containers")]
        self.group.remove().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }
}

/// N independent Redis servers (the RL-series' Redlock): `containers::RedisServers`. Always
/// compiled: without the feature `containers`, [`RedlockServers::start`] answers [`NOT_BUILT`]
/// and no value of this type can exist. End it with [`RedlockServers::remove`]; a run
/// interrupted meanwhile removes it by its mark.
pub struct RedlockServers {
    #[cfg(feature = "containers")]
    servers: crate::containers::RedisServers,
    #[cfg(not(feature = "containers"))]
    never: std::convert::Infallible,
    /// Where its image came from.
    pub image_note: String,
}

/// The error of a method of [`RedlockServers`]: the container layer's, as `anyhow`.
#[cfg(feature = "containers")]
fn redlock_err(e: crate::containers::ContainerError) -> anyhow::Error {
    anyhow::Error::new(e)
}

impl RedlockServers {
    /// Starts `n` servers — server `shifted_clock`, if any, under the clock shim, so that
    /// [`RedlockServers::shift_clock`] can move its wall clock (RL2) — and returns once each is
    /// ready.
    pub async fn start(
        mark: &str,
        n: usize,
        shifted_clock: Option<usize>,
    ) -> anyhow::Result<RedlockServers> {
        #[cfg(feature = "containers")]
        {
            use crate::containers;
            containers::engine()
                .await
                .map_err(|reason| anyhow::anyhow!("Redis servers for Redlock: {reason}"))?;
            let image = containers::services_image().await.map_err(|e| {
                anyhow::anyhow!(
                    "Redis servers for Redlock: no way to build the lock services' image here \
                     ({e}); building needs root, debootstrap and the Debian archive"
                )
            })?;
            let servers = containers::RedisServers::start(&image, mark, n, shifted_clock)
                .await
                .map_err(redlock_err)?;
            Ok(RedlockServers {
                servers,
                image_note: containers::pg_hosts::image_note(&image),
            })
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = (mark, n, shifted_clock);
            anyhow::bail!("Redis servers for Redlock: {NOT_BUILT}")
        }
    }

    /// `ip:port` of each server.
    pub fn endpoints(&self) -> Vec<String> {
        #[cfg(feature = "containers")]
        return self.servers.endpoints();
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `redis-cli ARGS` on server `i`: its output.
    pub async fn cli(&self, i: usize, args: &str) -> anyhow::Result<String> {
        #[cfg(feature = "containers")]
        return self.servers.cli(i, args).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = (i, args);
            match self.never {}
        }
    }

    /// Server `i`'s log so far.
    pub async fn log(&self, i: usize) -> String {
        #[cfg(feature = "containers")]
        return self.servers.log(i).await;
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Server `i` refuses every connection until [`RedlockServers::admit`].
    pub async fn refuse(&self, i: usize) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return self.servers.refuse(i).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Server `i` accepts connections again.
    pub async fn admit(&self, i: usize) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return self.servers.admit(i).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Server `i`'s wall clock as it answers `TIME`, in ms since the epoch.
    pub async fn time_ms(&self, i: usize) -> anyhow::Result<i64> {
        #[cfg(feature = "containers")]
        return self.servers.time_ms(i).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Moves server `i`'s wall clock `ms` ahead (it must have been started under the shim).
    pub async fn shift_clock(&self, i: usize, ms: i64) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return self.servers.shift_clock(i, ms).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = (i, ms);
            match self.never {}
        }
    }

    /// Restarts server `i` without persistence (it forgets its keys); returns once it answers.
    pub async fn restart(&self, i: usize) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return self.servers.restart(i).await.map_err(redlock_err);
        #[cfg(not(feature = "containers"))]
        {
            let _ = i;
            match self.never {}
        }
    }

    /// Removes them; returns once they are gone.
    pub async fn remove(self) {
        #[cfg(feature = "containers")]
        self.servers.remove().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }
}

/// A three-member etcd cluster (R3): `containers::EtcdCluster`. Always compiled: without the
/// feature `containers`, [`EtcdMembers::start`] answers [`NOT_BUILT`] and no value of this type
/// can exist. End it with [`EtcdMembers::remove`]; a run interrupted meanwhile removes it by its
/// mark.
pub struct EtcdMembers {
    #[cfg(feature = "containers")]
    cluster: crate::containers::EtcdCluster,
    #[cfg(not(feature = "containers"))]
    never: std::convert::Infallible,
    /// Where its image came from.
    pub image_note: String,
}

impl EtcdMembers {
    /// Starts the three members; returns once every one is healthy.
    pub async fn start(mark: &str) -> anyhow::Result<EtcdMembers> {
        #[cfg(feature = "containers")]
        {
            use crate::containers;
            containers::engine()
                .await
                .map_err(|reason| anyhow::anyhow!("a three-member etcd cluster: {reason}"))?;
            let image = containers::services_image().await.map_err(|e| {
                anyhow::anyhow!(
                    "a three-member etcd cluster: no way to build the lock services' image here \
                     ({e}); building needs root, debootstrap and the Debian archive"
                )
            })?;
            let cluster = containers::EtcdCluster::start(&image, mark).await?;
            Ok(EtcdMembers {
                cluster,
                image_note: containers::pg_hosts::image_note(&image),
            })
        }
        #[cfg(not(feature = "containers"))]
        {
            let _ = mark;
            anyhow::bail!("a three-member etcd cluster: {NOT_BUILT}")
        }
    }

    /// The members' client endpoints, comma-separated.
    pub fn endpoints(&self) -> String {
        #[cfg(feature = "containers")]
        return self.cluster.endpoints();
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// `etcd --version`'s first line.
    pub fn version(&self) -> &str {
        #[cfg(feature = "containers")]
        return &self.cluster.version;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// The cluster's revision now.
    pub async fn revision(&self) -> anyhow::Result<i64> {
        #[cfg(feature = "containers")]
        return Ok(self.cluster.revision().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Saves a snapshot now; etcdctl's line.
    pub async fn snapshot(&self) -> anyhow::Result<String> {
        #[cfg(feature = "containers")]
        return Ok(self.cluster.snapshot().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Restores every member from the snapshot; etcdctl's lines of it.
    pub async fn restore(&self) -> anyhow::Result<Vec<String>> {
        #[cfg(feature = "containers")]
        return Ok(self.cluster.restore().await?);
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }

    /// Raises the revision by `n` writes of a scratch key.
    pub async fn bump(&self, n: i64) -> anyhow::Result<()> {
        #[cfg(feature = "containers")]
        return Ok(self.cluster.bump(n).await?);
        #[cfg(not(feature = "containers"))]
        {
            let _ = n;
            match self.never {}
        }
    }

    /// Removes it; returns once it is gone.
    pub async fn remove(self) {
        #[cfg(feature = "containers")]
        self.cluster.remove().await;
        #[cfg(not(feature = "containers"))]
        match self.never {}
    }
}
