//! The container backend (`--backend containers`, feature `containers`): the lease store and the
//! resource each on a PostgreSQL host of its own — a container made from the image the lab
//! builds here from Debian packages — each on a private network of its own that the lab creates.
//! The lab's host is on both networks (it reaches both servers over TCP, and so do the holders it
//! starts); the two servers are not on a common network, so the resource's host has no route to
//! the lease store's: a stronger separation than the role check of the embedded cluster, and P0
//! shows it. With `--lease-store patroni` the lease store is a Patroni-managed cluster of three
//! nodes on etcd on the lease's network, and the lab talks to its leader — after a
//! failover (`lab chaos`'s failover fault: the leader cut off from its peers, then let back), to
//! the new one; the holders are given every node's address and find the leader themselves.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use std::path::PathBuf;

use anyhow::Context as _;
use sqlx::postgres::PgConnectOptions;

use crate::containers::patroni::{PatroniCluster, Replication, Settings};
use crate::containers::{self, Image, Network, PgContainer, PG_PORT};
use crate::hosts::{Answer, Backend, Host, Hosts, HostsFuture, Restarted};

/// Where the lease database lives on the container backend.
// One value per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum LeaseHost {
    /// A PostgreSQL container of its own.
    Single(PgContainer),
    /// A Patroni-managed cluster (`--lease-store patroni`): the lab talks to the node that led
    /// when the run started.
    Patroni {
        cluster: PatroniCluster,
        leader: usize,
    },
}

impl LeaseHost {
    /// The address the lab and the holders reach the lease database at.
    pub fn ip(&self) -> IpAddr {
        match self {
            LeaseHost::Single(c) => c.ip,
            LeaseHost::Patroni { cluster, leader } => cluster.nodes[*leader].ip,
        }
    }

    fn connect_options(&self, database: &str, user: &str) -> PgConnectOptions {
        match self {
            LeaseHost::Single(c) => c.connect_options(database, user),
            LeaseHost::Patroni { cluster, leader } => {
                cluster.nodes[*leader].connect_options_as(database, user)
            }
        }
    }

    /// Whether it is a Patroni cluster.
    pub fn is_patroni(&self) -> bool {
        matches!(self, LeaseHost::Patroni { .. })
    }

    /// The Patroni cluster's replication mode; `None` for a single server.
    pub fn replication(&self) -> Option<Replication> {
        match self {
            LeaseHost::Single(_) => None,
            LeaseHost::Patroni { cluster, .. } => Some(cluster.settings.replication),
        }
    }

    /// Every address a client may find the lease database at: the single server's, or each
    /// Patroni node's (a holder connects to the one that is read-write, as libpq's
    /// `target_session_attrs=read-write` would).
    pub fn ips(&self) -> Vec<IpAddr> {
        match self {
            LeaseHost::Single(c) => vec![c.ip],
            LeaseHost::Patroni { cluster, .. } => cluster.nodes.iter().map(|n| n.ip).collect(),
        }
    }

    async fn remove(self) {
        match self {
            LeaseHost::Single(c) => c.remove().await,
            LeaseHost::Patroni { cluster, .. } => cluster.remove().await,
        }
    }
}

/// The servers of a run on the container backend.
pub struct ContainerServers {
    pub lease: LeaseHost,
    pub resource: PgContainer,
    lease_net: Network,
    resource_net: Network,
    /// The image both run (its build time when this run built it).
    pub image: Image,
    /// `--keep` or a failing run: [`Hosts::shutdown`] stops the servers and leaves them.
    kept: bool,
}

impl ContainerServers {
    /// Builds the image for PostgreSQL `pg_major` if it is not there yet (with Patroni and etcd
    /// when `patroni`), creates the two networks and starts the lease store (one server, or a
    /// Patroni cluster of three) on one and the resource's server on the other; returns once
    /// both accept connections (Patroni: once it has a leader every replica streams from). On
    /// error nothing is left.
    pub async fn start(
        mark: &str,
        pg_major: u32,
        patroni: Option<Replication>,
    ) -> anyhow::Result<ContainerServers> {
        containers::engine()
            .await
            .map_err(|reason| anyhow::anyhow!("--backend containers: {reason}"))?;
        let image = if patroni.is_some() {
            containers::patroni_image(pg_major).await
        } else {
            containers::postgres_image(pg_major).await
        };
        let image = image.with_context(|| {
            format!(
                "--backend containers: no way to build the PostgreSQL {pg_major} image here \
                 (building needs root, debootstrap and the Debian archive)"
            )
        })?;
        let lease_net = Network::create(mark).await?;
        let resource_net = match Network::create(mark).await {
            Ok(n) => n,
            Err(e) => {
                lease_net.remove().await;
                return Err(e.into());
            }
        };
        let lease = if let Some(replication) = patroni {
            start_patroni(&image, &lease_net, mark, replication).await
        } else {
            PgContainer::start(&image, &lease_net, mark)
                .await
                .map(LeaseHost::Single)
                .map_err(anyhow::Error::from)
        };
        let resource = PgContainer::start(&image, &resource_net, mark)
            .await
            .map_err(anyhow::Error::from);
        match (lease, resource) {
            (Ok(lease), Ok(resource)) => Ok(ContainerServers {
                lease,
                resource,
                lease_net,
                resource_net,
                image,
                kept: false,
            }),
            (lease, resource) => {
                let mut error = None;
                match lease {
                    Ok(l) => l.remove().await,
                    Err(e) => error = Some(e),
                }
                match resource {
                    Ok(r) => r.remove().await,
                    Err(e) => error = Some(e),
                }
                lease_net.remove().await;
                resource_net.remove().await;
                Err(error.expect("one of them failed"))
            }
        }
    }

    /// The address of `host`'s server.
    pub fn ip(&self, host: Host) -> IpAddr {
        match host {
            Host::Lease => self.lease.ip(),
            Host::Resource => self.resource.ip,
        }
    }

    /// How the run's environment record names them.
    fn describe_servers(&self) -> String {
        let built = match self.image.built_in {
            Some(took) => format!("built here in {:.1} s", took.as_secs_f64()),
            None => "built here earlier, reused".into(),
        };
        let lease = match &self.lease {
            LeaseHost::Single(c) => format!("lease26 at {}:{PG_PORT}", c.ip),
            LeaseHost::Patroni { cluster, leader } => format!(
                "lease26 on a Patroni cluster of three nodes ({}; {}), its leader {} at {}:{PG_PORT}",
                cluster.versions,
                cluster.settings.describe(),
                cluster.nodes[*leader].name,
                cluster.nodes[*leader].ip
            ),
        };
        format!(
            "containers: {lease} on network {}, res26 at {}:{PG_PORT} on network {} \
             (no common network); image {} ({built})",
            self.lease_net.name, self.resource.ip, self.resource_net.name, self.image.reference
        )
    }

    /// Whether the resource's host reaches the lease store's server (`pg_isready` run on the
    /// resource's host, with `timeout`), and, as the control, its own: each `pg_isready`'s words.
    async fn pg_isready_from_resource(&self, timeout: Duration) -> anyhow::Result<[String; 2]> {
        let bin = format!("/usr/lib/postgresql/{}/bin/pg_isready", self.image.major);
        let secs = timeout.as_secs().max(1);
        let mut said = Vec::new();
        for ip in [self.lease.ip(), self.resource.ip] {
            let (code, out) = self
                .resource
                .shell(&format!("{bin} -h {ip} -p {PG_PORT} -t {secs}"))
                .await?;
            said.push(format!("{out} (exit {code})"));
        }
        Ok([said[0].clone(), said[1].clone()])
    }

    /// Waits until the Patroni cluster is whole — a leader every replica streams from — within
    /// `timeout`; a replica that does not stream by then is reinitialised, and the wait begins
    /// again (twice as long). Talks to its leader from now on. The replicas reinitialised; none
    /// for a single server.
    async fn heal(&mut self, timeout: Duration) -> anyhow::Result<Vec<String>> {
        let LeaseHost::Patroni { cluster, leader } = &mut self.lease else {
            return Ok(Vec::new());
        };
        let what = "the Patroni cluster has a leader every replica streams from";
        let mut reinit = Vec::new();
        if crate::wait::until(what, timeout, || cluster.ready())
            .await
            .is_err()
        {
            let state = cluster.describe_state().await;
            reinit = cluster
                .reinit_stragglers()
                .await
                .with_context(|| state.clone())?;
            let whole = crate::wait::until(what, timeout * 2, || cluster.ready()).await;
            if let Err(e) = whole {
                let e = anyhow::Error::new(e).context(format!(
                    "{} (after reinitialising {reinit:?})",
                    cluster.describe_state().await
                ));
                return Err(e);
            }
        }
        let name = match cluster.leader().await {
            Some(node) => node.name.clone(),
            None => anyhow::bail!("the Patroni cluster has no leader"),
        };
        *leader = node_index(cluster, &name);
        Ok(reinit)
    }

    /// Cuts the lease store's leader off from the other Patroni nodes (not from the lab's host:
    /// its clients still reach it), once the cluster is whole
    /// ([`Hosts::heal_lease_store`] within `timeout`). Returns the leader's name and
    /// the replicas reinitialised first.
    async fn isolate(&mut self, timeout: Duration) -> anyhow::Result<(String, Vec<String>)> {
        let reinit = self.heal(timeout).await?;
        let LeaseHost::Patroni { cluster, leader } = &mut self.lease else {
            anyhow::bail!("a failover needs the lease store on Patroni: --lease-store patroni");
        };
        let name = cluster.nodes[*leader].name.clone();
        cluster.isolate(&name).await?;
        Ok((name, reinit))
    }

    /// Waits (within `timeout`) until the Patroni cluster has a leader and talks to it from now
    /// on (a leader let back may take its place again after a failover); its name. Nothing for a
    /// single server.
    async fn follow(&mut self, timeout: Duration) -> anyhow::Result<Option<String>> {
        let LeaseHost::Patroni { cluster, leader } = &mut self.lease else {
            return Ok(None);
        };
        let found = crate::wait::until("the Patroni cluster has a leader", timeout, || async {
            Ok::<_, std::convert::Infallible>(cluster.leader().await.is_some())
        })
        .await;
        if let Err(e) = found {
            return Err(anyhow::Error::new(e).context(cluster.describe_state().await));
        }
        let name = cluster
            .leader()
            .await
            .map(|n| n.name.clone())
            .context("the leader stopped answering")?;
        *leader = node_index(cluster, &name);
        Ok(Some(name))
    }

    /// Waits (within `timeout`) until Patroni has elected a leader other than the cut-off `old`,
    /// lets `old` reach its peers again (it comes back as a replica) and talks to the new leader
    /// from now on. Returns the new leader's name; on a timeout `old` is let back all the same.
    async fn mend(&mut self, old: &str, timeout: Duration) -> anyhow::Result<String> {
        let LeaseHost::Patroni { cluster, leader } = &mut self.lease else {
            anyhow::bail!("a failover needs the lease store on Patroni: --lease-store patroni");
        };
        let elected = crate::wait::until(
            &format!("Patroni elects a leader other than {old}"),
            timeout,
            || async {
                Ok::<_, std::convert::Infallible>(cluster.leader_other_than(old).await.is_some())
            },
        )
        .await;
        let new = cluster.leader_other_than(old).await.map(|n| n.name.clone());
        let state = match elected {
            Ok(_) => None,
            Err(e) => Some(anyhow::Error::new(e).context(cluster.describe_state().await)),
        };
        cluster.mend(old).await?;
        if let Some(e) = state {
            return Err(e);
        }
        let new = new.context("the new leader stopped answering")?;
        *leader = node_index(cluster, &new);
        Ok(new)
    }

    /// Each Patroni node's name and log (Patroni's, etcd's and the server's lines) from `since`
    /// on; none for a single server.
    async fn logs(&self, since: SystemTime) -> Vec<(String, String)> {
        let LeaseHost::Patroni { cluster, .. } = &self.lease else {
            return Vec::new();
        };
        let mut logs = Vec::new();
        for node in &cluster.nodes {
            logs.push((node.name.clone(), node.log_since(Some(since)).await));
        }
        logs
    }

    /// Crashes both servers and starts them again ([`PgContainer::crash_restart`]).
    async fn crash_restart_both(&mut self, timeout: Duration) -> anyhow::Result<Vec<Restarted>> {
        let mut restarted = Vec::new();
        let LeaseHost::Single(lease) = &mut self.lease else {
            anyhow::bail!(
                "a crash and restart of the lease store's server: on Patroni a lost leader is \
                 replaced, not restarted (F17)"
            );
        };
        for (name, server) in [
            ("lease26's host", lease),
            ("res26's host", &mut self.resource),
        ] {
            let before = server.full_log().await.len();
            let old_pid = server.postmaster_pid().await;
            let started = Instant::now();
            server
                .crash_restart(timeout)
                .await
                .with_context(|| format!("failed to crash and restart {name}"))?;
            let log = server.full_log().await;
            restarted.push(Restarted {
                server: format!("{name} (restarted in {} ms)", started.elapsed().as_millis()),
                old_pid,
                new_pid: server.postmaster_pid().await,
                log: log.get(before..).unwrap_or(&log).to_owned(),
            });
        }
        Ok(restarted)
    }

    /// For a kept run: what was kept and how to look inside.
    fn kept_lines(&self) -> Vec<String> {
        let mut kept: Vec<(&str, &PgContainer)> = vec![("res26", &self.resource)];
        match &self.lease {
            LeaseHost::Single(c) => kept.insert(0, ("lease26", c)),
            LeaseHost::Patroni { .. } => {}
        }
        let mut lines: Vec<String> = kept
            .into_iter()
            .map(|(db, s)| {
                format!(
                    "kept {db}'s container {} (stopped); to look inside: docker start {0} && \
                     docker exec -it {0} psql -h /tmp -U lab {db}",
                    &s.id()[..12.min(s.id().len())]
                )
            })
            .collect();
        if self.lease.is_patroni() {
            lines.push(
                "the Patroni cluster is not kept (a stopped cluster's leader key would be stale): \
                 it was removed"
                    .into(),
            );
        }
        lines
    }

    /// Stops the servers and leaves them and their networks in place (`--keep`, a failing run);
    /// `lab clean` removes them.
    async fn stop_and_keep(self) {
        match self.lease {
            LeaseHost::Single(c) => c.stop_and_keep().await,
            patroni @ LeaseHost::Patroni { .. } => patroni.remove().await,
        }
        self.resource.stop_and_keep().await;
        self.lease_net.keep();
        self.resource_net.keep();
    }

    /// Removes the servers, then the networks.
    async fn remove(self) {
        self.lease.remove().await;
        self.resource.remove().await;
        self.lease_net.remove().await;
        self.resource_net.remove().await;
    }
}

impl Hosts for ContainerServers {
    fn backend(&self) -> Backend {
        Backend::Containers {
            pg_major: self.image.major,
            patroni: self.lease.replication(),
        }
    }

    fn describe(&self) -> String {
        self.describe_servers()
    }

    fn connect_options(&self, host: Host, database: &str, user: &str) -> PgConnectOptions {
        let opts = match host {
            Host::Lease => self.lease.connect_options(database, user),
            Host::Resource => self.resource.connect_options(database, user),
        };
        sqlx::ConnectOptions::disable_statement_logging(opts)
    }

    fn tcp_host(&self, host: Host) -> Option<String> {
        Some(match host {
            // Each Patroni node's: the holder connects to the read-write one.
            Host::Lease => self
                .lease
                .ips()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            Host::Resource => self.resource.ip.to_string(),
        })
    }

    fn socket(&self) -> (PathBuf, u16) {
        (std::env::temp_dir(), PG_PORT)
    }

    fn ip(&self, host: Host) -> Option<IpAddr> {
        Some(ContainerServers::ip(self, host))
    }

    fn crash_and_restart(&mut self, timeout: Duration) -> HostsFuture<'_, Vec<Restarted>> {
        Box::pin(self.crash_restart_both(timeout))
    }

    fn keep(&mut self) -> Vec<String> {
        self.kept = true;
        self.kept_lines()
    }

    fn shutdown(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(async move {
            if self.kept {
                self.stop_and_keep().await
            } else {
                self.remove().await
            }
        })
    }

    fn resource_host_reaches(&self, timeout: Duration) -> HostsFuture<'_, Option<[String; 2]>> {
        Box::pin(async move { self.pg_isready_from_resource(timeout).await.map(Some) })
    }

    fn isolate_lease_leader(
        &mut self,
        timeout: Duration,
    ) -> HostsFuture<'_, (String, Vec<String>)> {
        Box::pin(self.isolate(timeout))
    }

    fn mend_lease_host<'a>(
        &'a mut self,
        old: &'a str,
        timeout: Duration,
    ) -> HostsFuture<'a, String> {
        Box::pin(self.mend(old, timeout))
    }

    fn heal_lease_store(&mut self, timeout: Duration) -> HostsFuture<'_, Option<Vec<String>>> {
        Box::pin(async move {
            if self.lease.is_patroni() {
                self.heal(timeout).await.map(Some)
            } else {
                Ok(None)
            }
        })
    }

    fn follow_lease_leader(&mut self, timeout: Duration) -> HostsFuture<'_, bool> {
        Box::pin(async move { Ok(self.follow(timeout).await?.is_some()) })
    }

    fn lease_logs(&self, since: SystemTime) -> Answer<'_, Vec<(String, String)>> {
        Box::pin(self.logs(since))
    }
}

/// The lease store as a Patroni cluster on `network` (`replication`, with the fastest timing
/// Patroni accepts), with the lease database on its leader.
async fn start_patroni(
    image: &Image,
    network: &Network,
    mark: &str,
    replication: Replication,
) -> anyhow::Result<LeaseHost> {
    let cluster = PatroniCluster::start(
        image,
        network,
        mark,
        &format!("{mark}-lease"),
        Settings::fast(replication),
        Duration::from_secs(120),
    )
    .await?;
    let Some(leader) = cluster.leader().await.map(|l| l.name.clone()) else {
        cluster.remove().await;
        anyhow::bail!("the Patroni cluster reported ready without a leader");
    };
    let leader = node_index(&cluster, &leader);
    Ok(LeaseHost::Patroni { cluster, leader })
}

/// The index of the node named `name`.
fn node_index(cluster: &PatroniCluster, name: &str) -> usize {
    cluster
        .nodes
        .iter()
        .position(|n| n.name == name)
        .expect("a node of this cluster")
}

/// PostgreSQL servers an experiment starts for itself (F15, F16): `n` containers on one private
/// network of the run, each labelled with the run's mark.
pub struct PgHosts {
    network: Network,
    pub servers: Vec<PgContainer>,
}

impl PgHosts {
    /// Creates the network and starts `n` servers from `image` on it; returns once each accepts
    /// connections. On error nothing is left.
    pub async fn start(image: &Image, mark: &str, n: usize) -> anyhow::Result<PgHosts> {
        let mut hosts = PgHosts {
            network: Network::create(mark).await?,
            servers: Vec::new(),
        };
        for _ in 0..n {
            match PgContainer::start(image, &hosts.network, mark).await {
                Ok(server) => hosts.servers.push(server),
                Err(e) => {
                    hosts.remove().await;
                    return Err(e.into());
                }
            }
        }
        Ok(hosts)
    }

    /// Removes the servers, then the network; returns once they are gone.
    pub async fn remove(self) {
        for server in self.servers {
            server.remove().await;
        }
        self.network.remove().await;
    }
}

/// The PostgreSQL 15 image (with Patroni and etcd when `patroni`), built here on first use.
/// `Err(reason)` — what an experiment says when it skips — when no Docker engine answers or the
/// image cannot be built here.
pub async fn image_or_skip(patroni: bool) -> Result<Image, String> {
    containers::engine().await?;
    let built = if patroni {
        containers::patroni_image(15).await
    } else {
        containers::postgres_image(15).await
    };
    built.map_err(|e| {
        format!(
            "no way to build the {} image here ({e}); building needs root, debootstrap and the \
             Debian archive",
            if patroni { "Patroni" } else { "PostgreSQL" }
        )
    })
}

/// How the evidence says where `image` came from: built here in this run (and how long that
/// took), or built earlier and reused.
pub fn image_note(image: &Image) -> String {
    match image.built_in {
        Some(took) => format!(
            "built the image {} from Debian packages in {:.1} s (debootstrap + docker import; reused from now on)",
            image.reference,
            took.as_secs_f64()
        ),
        None => format!("image {} (built here earlier, reused)", image.reference),
    }
}
