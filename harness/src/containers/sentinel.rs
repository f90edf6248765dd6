//! A Redis primary, its replica and three Sentinels (R2), from the lock services' image, on a
//! private network of the run: what a Redis lock with a failover looks like. Sentinel's settings
//! are chosen so that a failover takes a second or two: `down-after-milliseconds 500`, quorum 2,
//! `failover-timeout 3000`. No persistence anywhere, as a lock server is usually run.
//!
//! The lab cuts the replica off from the primary — an iptables rule in the replica's own network
//! namespace (`nsenter`), which goes with the container — so that a write the primary
//! acknowledges never reaches the replica; then it loses the primary (the container removed,
//! as a crashed host) and waits until the Sentinels promote the replica.

use std::net::IpAddr;
use std::time::Duration;

use super::{
    run, shell, until_logged, Container, ContainerError, Image, Network, Spec, CLI_TIMEOUT,
};

/// The name the Sentinels monitor the primary by.
pub const MASTER: &str = "lab";
/// The Sentinels' ports, inside their container.
const SENTINEL_PORTS: [u16; 3] = [26379, 26380, 26381];
/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A primary, a replica and three Sentinels.
pub struct SentinelGroup {
    network: Network,
    primary: Option<Container>,
    replica: Container,
    sentinels: Container,
    pub primary_ip: IpAddr,
    pub replica_ip: IpAddr,
    /// `redis-server --version`.
    pub version: String,
}

fn redis_script(extra: &str) -> String {
    format!(
        "redis-server --version >&2; exec redis-server --bind 0.0.0.0 --port 6379 \
         --protected-mode no --save '' --appendonly no --logfile '' {extra} 1>&2"
    )
}

impl SentinelGroup {
    /// Starts the primary, then the replica of it and the Sentinels that monitor it; returns
    /// once each server logged that it is ready. On error nothing is left.
    pub async fn start(image: &Image, mark: &str) -> Result<SentinelGroup, ContainerError> {
        let network = Network::create(mark).await?;
        let spec = |script: String| Spec {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), script],
            network: Some(network.name.clone()),
            mark: mark.to_owned(),
            tmpfs: vec!["/tmp".into()],
            ..Spec::default()
        };
        let mut started: Vec<Container> = Vec::new();
        let built = async {
            let primary = Container::start(&spec(redis_script(""))).await?;
            started.push(primary);
            let primary = &started[0];
            until_logged(primary, "Ready to accept connections", START_TIMEOUT).await?;
            let primary_ip = primary.ip().await?;
            let replica = Container::start(&spec(redis_script(&format!(
                "--replicaof {primary_ip} 6379"
            ))))
            .await?;
            started.push(replica);
            let mut script = String::new();
            for port in SENTINEL_PORTS {
                script.push_str(&format!(
                    "printf 'port {port}\\nprotected-mode no\\nsentinel monitor {MASTER} {primary_ip} 6379 2\\n\
                     sentinel down-after-milliseconds {MASTER} 500\\nsentinel failover-timeout {MASTER} 3000\\n\
                     sentinel parallel-syncs {MASTER} 1\\n' > /tmp/sentinel-{port}.conf; \
                     redis-server /tmp/sentinel-{port}.conf --sentinel 1>&2 & "
                ));
            }
            script.push_str("wait");
            let sentinels = Container::start(&spec(script)).await?;
            started.push(sentinels);
            until_logged(&started[1], "MASTER <-> REPLICA sync: Finished", START_TIMEOUT).await?;
            until_logged(&started[2], "+monitor master", START_TIMEOUT).await?;
            let replica_ip = started[1].ip().await?;
            let log = started[0].stderr().await.unwrap_or_default();
            let version = log
                .lines()
                .find(|l| l.contains("Redis server v="))
                .unwrap_or("")
                .trim()
                .to_owned();
            Ok::<_, ContainerError>((primary_ip, replica_ip, version))
        }
        .await;
        match built {
            Ok((primary_ip, replica_ip, version)) => {
                let sentinels = started.pop().expect("three containers");
                let replica = started.pop().expect("three containers");
                let primary = started.pop();
                Ok(SentinelGroup {
                    network,
                    primary,
                    replica,
                    sentinels,
                    primary_ip,
                    replica_ip,
                    version,
                })
            }
            Err(e) => {
                for c in started {
                    let _ = c.remove().await;
                }
                network.remove().await;
                Err(e)
            }
        }
    }

    /// `ip:6379` of the primary the group started with.
    pub fn primary_endpoint(&self) -> String {
        format!("{}:6379", self.primary_ip)
    }

    /// `ip:6379` of the replica.
    pub fn replica_endpoint(&self) -> String {
        format!("{}:6379", self.replica_ip)
    }

    /// `redis-cli` run in the Sentinels' container (which reaches every server): its output.
    pub async fn cli(&self, args: &str) -> Result<String, ContainerError> {
        let (code, out) = shell(self.sentinels.id(), &format!("redis-cli {args}")).await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("redis-cli {args}"),
                detail: out,
            });
        }
        Ok(out)
    }

    /// Whether the group is whole: the replica linked to the primary and every Sentinel knowing
    /// the replica and the two other Sentinels. `Ok(false)` while not.
    pub async fn whole(&self) -> Result<bool, ContainerError> {
        let link = self
            .cli(&format!("-h {} INFO replication", self.replica_ip))
            .await?;
        if !link.contains("master_link_status:up") {
            return Ok(false);
        }
        for port in SENTINEL_PORTS {
            let master = self
                .cli(&format!("-p {port} SENTINEL master {MASTER}"))
                .await?;
            let field = |name: &str| {
                let mut lines = master.lines();
                while let Some(l) = lines.next() {
                    if l.trim() == name {
                        return lines.next().map(|v| v.trim().to_owned());
                    }
                }
                None
            };
            if field("num-slaves").as_deref() != Some("1")
                || field("num-other-sentinels").as_deref() != Some("2")
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Cuts the replica off from the primary: an iptables rule in the replica's network
    /// namespace drops every packet from the primary (the replication stream stops arriving;
    /// the replica still answers the Sentinels). The rule as iptables lists it. It goes with the
    /// container.
    pub async fn cut_replica(&self) -> Result<String, ContainerError> {
        let pid = self
            .replica
            .pid()
            .await
            .ok_or_else(|| ContainerError::Cli {
                what: "cut the replica off".into(),
                detail: "the replica's container does not run".into(),
            })?;
        let ns = format!("--net=/proc/{pid}/ns/net");
        let from = self.primary_ip.to_string();
        run(
            "iptables in the replica's network namespace",
            "nsenter",
            &[&ns, "iptables", "-I", "INPUT", "-s", &from, "-j", "DROP"],
            CLI_TIMEOUT,
        )
        .await?;
        let listed = run(
            "iptables -L in the replica's network namespace",
            "nsenter",
            &[&ns, "iptables", "-L", "INPUT", "-v", "-n"],
            CLI_TIMEOUT,
        )
        .await?;
        Ok(listed
            .lines()
            .find(|l| l.contains("DROP"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or(listed))
    }

    /// Loses the primary: its container removed, as a host that crashed.
    pub async fn lose_primary(&mut self) -> Result<(), ContainerError> {
        if let Some(primary) = self.primary.take() {
            primary.remove().await?;
        }
        Ok(())
    }

    /// Where the Sentinel on `26379` says the primary is now (`ip`), if it answers.
    pub async fn master_now(&self) -> Option<IpAddr> {
        let out = self
            .cli(&format!(
                "-p {} SENTINEL get-master-addr-by-name {MASTER}",
                SENTINEL_PORTS[0]
            ))
            .await
            .ok()?;
        out.lines().next()?.trim().parse().ok()
    }

    /// The Sentinels' log lines of a failover (`+sdown`, `+odown`, `+elected-leader`,
    /// `+promoted-slave`, `+switch-master`, …, and `-failover-abort-…`), each once.
    pub async fn failover_log(&self) -> Vec<String> {
        let log = self.sentinels.stderr().await.unwrap_or_default();
        let mut lines: Vec<String> = Vec::new();
        for l in log.lines() {
            let Some(event) = l
                .split_once(" # ")
                .or_else(|| l.split_once(" * "))
                .map(|(_, e)| e.trim())
            else {
                continue;
            };
            // The failover's steps, and what stalls one (a replica judged down, no good
            // replica, a leader not elected): a failover that does not come says why.
            let wanted = [
                "+sdown",
                "+odown",
                "+elected-leader",
                "+selected-slave",
                "+promoted-slave",
                "+switch-master",
                "-failover-abort",
                "+failover-end-for-timeout",
            ];
            if wanted.iter().any(|w| event.starts_with(w)) && !lines.iter().any(|x| x == event) {
                lines.push(event.to_owned());
            }
        }
        lines
    }

    /// Removes every container, then the network; returns once they are gone.
    pub async fn remove(mut self) {
        if let Some(primary) = self.primary.take() {
            let _ = primary.remove().await;
        }
        let _ = self.replica.remove().await;
        let _ = self.sentinels.remove().await;
        self.network.remove().await;
    }
}
