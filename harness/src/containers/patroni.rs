//! A lease store as production runs one: three PostgreSQL servers managed by Patroni,
//! with a three-member etcd cluster as Patroni's configuration store, each node one container on
//! a private network of the run (an etcd member and a Patroni-managed server side by side, as
//! small deployments put them). Patroni — not the lab — elects the leader and fails over when the
//! leader's host is lost; the lab finds the leader as libpq's `target_session_attrs=read-write`
//! would (the one server not in recovery) and reads what Patroni said in its log.
//!
//! The loss window of asynchronous replication is made deterministic without netem (not in this
//! machine kind's kernel): the leader's WAL senders are frozen with SIGSTOP, so that what commits
//! on the leader from then on is acknowledged to the client and sent to no replica. (Freezing a
//! replica's WAL *receiver* is not enough: the bytes already sent wait in its socket and arrive
//! once it is thawed.) The leader is then lost with SIGKILL to its container, frozen senders with
//! it; nothing is left frozen. Both signals go through `harness::process::in_container`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, PgConnection};

use super::{
    docker, until_logged, Container, ContainerError, Image, Network, Spec, PG_PORT, STARTUP_TIMEOUT,
};
use crate::process::in_container as signals;
pub use crate::server::standby::Lsn;

/// A node's WAL positions, each `None` where the server has none or does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wal {
    /// A primary's current write position (`pg_current_wal_lsn`).
    pub written: Option<Lsn>,
    /// A replica's last position received from its primary (`pg_last_wal_receive_lsn`).
    pub received: Option<Lsn>,
    /// A replica's last position replayed (`pg_last_wal_replay_lsn`).
    pub replayed: Option<Lsn>,
}

pub use crate::replication::Replication;

/// The Patroni settings that decide a failover's timing and what it may lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub replication: Replication,
    /// Seconds the leader key lives in etcd without being refreshed: a lost leader is replaced
    /// no sooner than this.
    pub ttl: u32,
    /// Seconds between Patroni's checks.
    pub loop_wait: u32,
    /// Seconds Patroni retries etcd and PostgreSQL before it gives up a loop.
    pub retry_timeout: u32,
    /// Bytes a replica may lag the last known leader position and still be promoted.
    pub maximum_lag_on_failover: u64,
}

impl Settings {
    /// The fastest timing Patroni accepts (`loop_wait + 2 × retry_timeout ≤ ttl`), default lag.
    pub fn fast(replication: Replication) -> Settings {
        Settings {
            replication,
            ttl: 10,
            loop_wait: 1,
            retry_timeout: 3,
            maximum_lag_on_failover: 1_048_576,
        }
    }

    /// How the evidence names them.
    pub fn describe(&self) -> String {
        format!(
            "{} (ttl {} s, loop_wait {} s, retry_timeout {} s, maximum_lag_on_failover {} bytes)",
            self.replication.as_str(),
            self.ttl,
            self.loop_wait,
            self.retry_timeout,
            self.maximum_lag_on_failover
        )
    }
}

/// One node: an etcd member and a Patroni-managed PostgreSQL server in one container.
pub struct Node {
    container: Container,
    /// Its name in Patroni and etcd (and its host name on the network).
    pub name: String,
    pub ip: IpAddr,
    /// Lost with [`PatroniCluster::lose_host`].
    pub lost: bool,
    /// The addresses it has no route to while [`PatroniCluster::isolate`]d.
    isolated_from: Vec<IpAddr>,
}

impl Node {
    /// Connection options for `database` as the superuser `lab`, over TCP.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        self.connect_options_as(database, "lab")
    }

    /// Connection options for `database` as `user`, over TCP.
    pub fn connect_options_as(&self, database: &str, user: &str) -> PgConnectOptions {
        super::tcp_options(self.ip, database, user)
    }

    /// Its container's log: Patroni's and PostgreSQL's lines.
    pub async fn log(&self) -> String {
        self.log_since(None).await
    }

    /// Its container's log from `since` on, all of it for `None`.
    pub async fn log_since(&self, since: Option<std::time::SystemTime>) -> String {
        match self.container.logs(since).await {
            Ok((stdout, stderr)) => format!("{stdout}{stderr}"),
            Err(_) => String::new(),
        }
    }

    /// Runs `script` with `sh -c` inside the node: its exit code and output.
    pub async fn shell(&self, script: &str) -> Result<(i32, String), ContainerError> {
        super::shell(self.container.id(), script).await
    }

    /// Its WAL positions, read within 3 s.
    pub async fn wal(&self) -> Wal {
        let opts = self.connect_options("postgres");
        let ask = async {
            let mut conn = PgConnection::connect_with(&opts).await.ok()?;
            let r: Option<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END,
                        pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text",
            )
            .fetch_one(&mut conn)
            .await
            .ok();
            let _ = conn.close().await;
            r
        };
        let lsn = |t: Option<String>| t.as_deref().and_then(Lsn::parse);
        match tokio::time::timeout(Duration::from_secs(3), ask).await {
            Ok(Some((w, r, p))) => Wal {
                written: lsn(w),
                received: lsn(r),
                replayed: lsn(p),
            },
            _ => Wal::default(),
        }
    }

    /// What the server says of itself, when it answers within a second: `Some(true)` for a
    /// primary (not in recovery).
    pub async fn is_primary(&self) -> Option<bool> {
        let opts = self.connect_options("postgres");
        let ask = async {
            let mut conn = PgConnection::connect_with(&opts).await.ok()?;
            let r: Option<bool> = sqlx::query_scalar("SELECT NOT pg_is_in_recovery()")
                .fetch_one(&mut conn)
                .await
                .ok();
            let _ = conn.close().await;
            r
        };
        tokio::time::timeout(Duration::from_secs(1), ask)
            .await
            .ok()
            .flatten()
    }
}

/// Three nodes on a network of the run, Patroni on etcd; removed on drop.
pub struct PatroniCluster {
    pub nodes: Vec<Node>,
    pub settings: Settings,
    /// Patroni's and etcd's versions, as they answer `--version`.
    pub versions: String,
}

/// The nodes' names on the network, `<prefix>-pg1`…: container names are global, so the prefix
/// must be unique to the run.
fn node_names(prefix: &str) -> Vec<String> {
    (1..=3).map(|i| format!("{prefix}-pg{i}")).collect()
}

/// The node's start script: its etcd member in the background, then Patroni in its place.
fn script(me: &str, all: &[String], s: &Settings, major: u32) -> String {
    let cluster: Vec<String> = all.iter().map(|n| format!("{n}=http://{n}:2380")).collect();
    let hosts: Vec<String> = all.iter().map(|n| format!("{n}:2379")).collect();
    let (sync, strict) = match s.replication {
        Replication::Asynchronous => (false, false),
        Replication::Synchronous => (true, false),
        Replication::SynchronousStrict => (true, true),
    };
    format!(
        r#"etcd --name {me} --data-dir /tmp/etcd --listen-peer-urls http://0.0.0.0:2380 \
  --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://{me}:2379 \
  --initial-advertise-peer-urls http://{me}:2380 --initial-cluster {cluster} \
  --initial-cluster-state new --initial-cluster-token lab > /tmp/etcd.log 2>&1 &
cat > /tmp/patroni.yml <<'YML'
scope: lab
name: {me}
restapi:
  listen: 0.0.0.0:8008
  connect_address: {me}:8008
etcd3:
  hosts: {hosts}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry}
    maximum_lag_on_failover: {lag}
    synchronous_mode: {sync}
    synchronous_mode_strict: {strict}
    postgresql:
      # A leader cut off and demoted (`isolate`) may have WAL the new leader never got:
      # pg_rewind brings it back as a replica (wal_log_hints is on by Patroni's default).
      use_pg_rewind: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - host all all 0.0.0.0/0 trust
    - host replication all 0.0.0.0/0 trust
    - local all all trust
postgresql:
  listen: 0.0.0.0:{PG_PORT}
  connect_address: {me}:{PG_PORT}
  data_dir: /tmp/pgdata
  bin_dir: /usr/lib/postgresql/{major}/bin
  pgpass: /tmp/pgpass
  authentication:
    superuser:
      username: lab
      password: lab
    replication:
      username: replicator
      password: replicator
  parameters:
    unix_socket_directories: /tmp
    log_line_prefix: '%m [%a] '
YML
echo "lab: patroni $(patroni --version 2>&1 | tail -1), $(etcd --version 2>&1 | head -1)" >&2
exec patroni /tmp/patroni.yml"#,
        cluster = cluster.join(","),
        hosts = hosts.join(","),
        ttl = s.ttl,
        loop_wait = s.loop_wait,
        retry = s.retry_timeout,
        lag = s.maximum_lag_on_failover,
    )
}

impl PatroniCluster {
    /// Starts the three nodes from `image` on `network`, named `<prefix>-pg1`… and labelled with
    /// the run's `mark`, and returns once Patroni has a leader that every replica streams from
    /// (and, in a synchronous mode, one of them is its synchronous standby), within `timeout`.
    /// On error nothing is left.
    pub async fn start(
        image: &Image,
        network: &Network,
        mark: &str,
        prefix: &str,
        settings: Settings,
        timeout: Duration,
    ) -> Result<PatroniCluster, ContainerError> {
        let names = node_names(prefix);
        let mut cluster = PatroniCluster {
            nodes: Vec::new(),
            settings,
            versions: String::new(),
        };
        for name in &names {
            let container = Container::start(&Spec {
                image: image.reference.clone(),
                cmd: vec![
                    "sh".into(),
                    "-c".into(),
                    script(name, &names, &settings, image.major),
                ],
                user: Some("postgres".into()),
                network: Some(network.name.clone()),
                mark: mark.to_owned(),
                name: Some(name.clone()),
                // To cut a node off from its peers with routes of its own (`isolate`).
                cap_add: vec!["NET_ADMIN".into()],
                binds: Vec::new(),
                // Its etcd member's and its server's data (/tmp/etcd, /tmp/pgdata) in memory: a
                // node is never started again (a lost host stays lost).
                tmpfs: vec!["/tmp".into()],
            })
            .await;
            let container = match container {
                Ok(c) => c,
                Err(e) => {
                    cluster.remove().await;
                    return Err(e);
                }
            };
            if let Err(e) = until_logged(&container, "lab: patroni", STARTUP_TIMEOUT).await {
                drop(container);
                cluster.remove().await;
                return Err(e);
            }
            let ip = match container.ip().await {
                Ok(ip) => ip,
                Err(e) => {
                    let _ = container.remove().await;
                    cluster.remove().await;
                    return Err(e);
                }
            };
            cluster.nodes.push(Node {
                container,
                name: name.clone(),
                ip,
                lost: false,
                isolated_from: Vec::new(),
            });
        }
        cluster.versions = cluster.nodes[0]
            .log()
            .await
            .lines()
            .find_map(|l| l.strip_prefix("lab: "))
            .unwrap_or("patroni, etcd: versions unknown")
            .to_owned();
        let ready = crate::wait::until(
            "Patroni has a leader that every replica streams from",
            timeout,
            || cluster.ready(),
        )
        .await;
        if let Err(e) = ready {
            let why = e.to_string();
            cluster.remove().await;
            return Err(ContainerError::Cli {
                what: "start the Patroni cluster".into(),
                detail: why,
            });
        }
        Ok(cluster)
    }

    /// Whether a leader answers with both replicas streaming (and a synchronous standby in a
    /// synchronous mode), and both replicas answer: the cluster can lose its leader again.
    pub async fn ready(&self) -> Result<bool, std::convert::Infallible> {
        let Some(leader) = self.leader().await else {
            return Ok(false);
        };
        let want_sync = self.settings.replication != Replication::Asynchronous;
        let streaming = async {
            let mut conn = PgConnection::connect_with(&leader.connect_options("postgres"))
                .await
                .ok()?;
            let r: Option<(i64, i64)> = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE state = 'streaming'),
                        count(*) FILTER (WHERE sync_state = 'sync')
                   FROM pg_stat_replication",
            )
            .fetch_one(&mut conn)
            .await
            .ok();
            let _ = conn.close().await;
            r
        }
        .await;
        let Some((streaming, sync)) = streaming else {
            return Ok(false);
        };
        if streaming < 2 || (want_sync && sync < 1) {
            return Ok(false);
        }
        for node in self.nodes.iter().filter(|n| n.name != leader.name) {
            if node.is_primary().await != Some(false) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The node that answers as a primary, among those not lost (the first, if two would).
    pub async fn leader(&self) -> Option<&Node> {
        for node in self.nodes.iter().filter(|n| !n.lost) {
            if node.is_primary().await == Some(true) {
                return Some(node);
            }
        }
        None
    }

    /// Freezes (SIGSTOP, `process::in_container::signal_processes`) every WAL sender of `node`'s
    /// server — the processes whose title starts `postgres: ` and names a `walsender`: from now
    /// on nothing it commits reaches a replica. Returns once the container's `/proc` shows state
    /// `T` for every thread of each, with the frozen senders (`pid states title`, `; `-joined).
    /// They stay frozen until the node is lost ([`PatroniCluster::lose_host`]).
    pub async fn freeze_wal_senders(&self, node: &Node) -> Result<String, ContainerError> {
        let frozen = signals::signal_processes(
            &docker().await?,
            node.container.id(),
            "a WAL sender",
            |cmdline| cmdline.starts_with("postgres: ") && cmdline.contains("walsender"),
            Signal::SIGSTOP,
        )
        .await?;
        Ok(frozen
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// Reinitialises (`patronictl reinit --force`: a fresh base backup from the leader) every
    /// replica that does not stream from the leader — what an operator does with a member whose
    /// WAL went another way than the leader's without Patroni noticing (two promotions that chose
    /// the same timeline). Their names; none when there is no leader to ask.
    pub async fn reinit_stragglers(&self) -> Result<Vec<String>, ContainerError> {
        let Some(leader) = self.leader().await else {
            return Ok(Vec::new());
        };
        let streaming: Vec<String> = async {
            let mut conn = PgConnection::connect_with(&leader.connect_options("postgres"))
                .await
                .ok()?;
            let names = sqlx::query_scalar(
                "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .fetch_all(&mut conn)
            .await
            .ok();
            let _ = conn.close().await;
            names
        }
        .await
        .unwrap_or_default();
        let mut reinit = Vec::new();
        for node in self
            .nodes
            .iter()
            .filter(|n| !n.lost && n.name != leader.name && !streaming.contains(&n.name))
        {
            let (code, out) = leader
                .shell(&format!(
                    "patronictl -c /tmp/patroni.yml reinit lab {} --force 2>&1",
                    node.name
                ))
                .await?;
            if code != 0 {
                return Err(ContainerError::Cli {
                    what: format!("reinitialise {}", node.name),
                    detail: out,
                });
            }
            reinit.push(node.name.clone());
        }
        Ok(reinit)
    }

    /// What Patroni says of its members (`patronictl list`, asked of each node that answers)
    /// and the last lines each node logged: for an error that a cluster did not become whole.
    pub async fn describe_state(&self) -> String {
        let mut text = String::new();
        for node in self.nodes.iter().filter(|n| !n.lost) {
            if let Ok((0, list)) = node
                .shell("patronictl -c /tmp/patroni.yml list 2>&1 | tail -n 8")
                .await
            {
                text.push_str(&format!("patronictl list on {}:\n{list}\n", node.name));
                break;
            }
        }
        for node in self.nodes.iter().filter(|n| !n.lost) {
            let log = node.log().await;
            text.push_str(&format!(
                "{} logged last:\n{}\n",
                node.name,
                super::last_lines(&log, 6)
            ));
        }
        text
    }

    /// The node that answers as a primary other than `name` (the new leader while `name` is
    /// cut off), among those not lost.
    pub async fn leader_other_than(&self, name: &str) -> Option<&Node> {
        for node in self.nodes.iter().filter(|n| !n.lost && n.name != name) {
            if node.is_primary().await == Some(true) {
                return Some(node);
            }
        }
        None
    }

    /// Cuts `name`'s host off from the other nodes — a blackhole route to each of their
    /// addresses, inside its own container — while the lab's host (the holders, the lab) still
    /// reaches it: its etcd member loses the quorum, the others see its leader key expire after
    /// `ttl` and elect a new leader, and Patroni on it demotes its server once it cannot reach
    /// etcd; until then it still answers its clients. [`PatroniCluster::mend`] lets it back.
    pub async fn isolate(&mut self, name: &str) -> Result<(), ContainerError> {
        let peers: Vec<IpAddr> = self
            .nodes
            .iter()
            .filter(|n| n.name != name)
            .map(|n| n.ip)
            .collect();
        let node = self.node_mut(name);
        if let Err(e) = Self::routes(node, "add", &peers, " && ").await {
            // Whatever was added goes (a route that is not there is not an error worth more).
            let _ = Self::routes(node, "del", &peers, "; ").await;
            return Err(e);
        }
        node.isolated_from = peers;
        Ok(())
    }

    /// Lets `name`'s host reach its peers again: Patroni on it finds the new leader and brings
    /// its server back as a replica (pg_rewind where its WAL went further).
    pub async fn mend(&mut self, name: &str) -> Result<(), ContainerError> {
        let node = self.node_mut(name);
        let peers = std::mem::take(&mut node.isolated_from);
        Self::routes(node, "del", &peers, "; ").await
    }

    /// `ip route <verb> blackhole` for each of `peers` inside `node`, as root, the commands
    /// joined by `join` (` && `: stop at the first failure; `; `: try every one).
    async fn routes(
        node: &Node,
        verb: &str,
        peers: &[IpAddr],
        join: &str,
    ) -> Result<(), ContainerError> {
        if peers.is_empty() {
            return Ok(());
        }
        let script: Vec<String> = peers
            .iter()
            .map(|ip| format!("ip route {verb} blackhole {ip}/32"))
            .collect();
        let (code, out) =
            super::shell_as(node.container.id(), Some("root"), &script.join(join)).await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("ip route {verb} blackhole on {}", node.name),
                detail: out,
            });
        }
        Ok(())
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .expect("a node of this cluster")
    }

    /// Loses `node`'s host: SIGKILL to its container (etcd member, Patroni and server at once,
    /// `process::in_container::stop` with no grace). Returns when the engine reports it stopped,
    /// with that moment.
    pub async fn lose_host(&mut self, name: &str) -> Result<Instant, ContainerError> {
        let docker = docker().await?;
        let node = self.node_mut(name);
        signals::stop(&docker, node.container.id(), &[]).await?;
        node.lost = true;
        Ok(Instant::now())
    }

    /// Removes every node.
    pub async fn remove(self) {
        for node in self.nodes {
            let _ = node.container.remove().await;
        }
    }
}
