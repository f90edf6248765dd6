//! Where a lab's two databases live — the lease store's and the resource's — behind one trait,
//! [`Hosts`], always compiled: the embedded cluster (both databases on one [`Cluster`], over its
//! Unix socket; the default), a primary and its streaming standby (F14:
//! `server::standby::Replicated`), or PostgreSQL containers, one per database, the lease store
//! optionally a Patroni cluster (`containers::pg_hosts`, started through [`crate::docker`]).
//!
//! Each verb says what is true when it returns. This module must not know the fencing
//! implementation: it names the two hosts ([`Host`]), never a database's tables; nor does it
//! know any implementation of its trait but the embedded cluster's.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use sqlx::postgres::PgConnectOptions;

use crate::replication::Replication;
use crate::server::{Cluster, Server as _};

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
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    fn shutdown(self: Box<Self>) -> Answer<'static, ()>;

    /// Stops every server now, when a scenario is done with hosts of its own (F14's primary
    /// and standby), while [`Hosts::keep`] and [`Hosts::shutdown`] still decide at the lab's
    /// end whether they are kept; returns once each has stopped. The default leaves them
    /// running until [`Hosts::shutdown`] (containers: stopping one is removing it).
    fn stop_servers(&mut self) -> Answer<'_, ()> {
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
    fn lease_logs(&self, since: SystemTime) -> Answer<'_, Vec<(String, String)>> {
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

    fn shutdown(mut self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(async move { self.stop().await })
    }

    fn stop_servers(&mut self) -> Answer<'_, ()> {
        Box::pin(async move { self.stop().await })
    }
}
