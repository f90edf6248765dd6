//! A three-member etcd cluster (R3), three etcd processes in one container of the lock services'
//! image — one address, three client ports (2379, 2389, 2399) — so that an operator's restore
//! from a snapshot can be carried out as the etcd 3.4 docs give it: every member stopped, each
//! one's data directory restored from the same snapshot file (`etcdctl snapshot restore`), every
//! member started again. Each member runs in a loop that starts it while `/tmp/go` exists; the
//! container's log carries each member's lines, prefixed `m0 `, `m1 `, `m2 `. Heartbeat 50 ms,
//! election timeout 500 ms, as the single etcd of `--lease-store etcd`.

use std::net::IpAddr;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{docker, shell, until_logged, Container, ContainerError, Image, Network, Spec};
use crate::process::in_container as signals;

/// The client ports of the three members.
pub const CLIENT_PORTS: [u16; 3] = [2379, 2389, 2399];
/// How long the cluster may take to start, or to come back after a restore.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The initial cluster, as every member and every restore names it.
const CLUSTER: &str = "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2390,m2=http://127.0.0.1:2400";

/// The container's command.
fn script() -> String {
    format!(
        "etcd --version >&2; IP=$(hostname -i); touch /tmp/go; \
         member() {{ while :; do if [ -f /tmp/go ]; then etcd --name m$1 --data-dir /tmp/m$1 \
         --listen-client-urls http://0.0.0.0:$2 --advertise-client-urls http://$IP:$2 \
         --listen-peer-urls http://127.0.0.1:$3 --initial-advertise-peer-urls http://127.0.0.1:$3 \
         --initial-cluster {CLUSTER} --initial-cluster-state new --initial-cluster-token lab \
         --heartbeat-interval 50 --election-timeout 500 2>&1 | sed \"s/^/m$1 /\" >&2; fi; \
         sleep 0.2; done; }}; \
         member 0 2379 2380 & member 1 2389 2390 & member 2 2399 2400 & wait"
    )
}

/// Three etcd members.
pub struct EtcdCluster {
    network: Network,
    container: Container,
    pub ip: IpAddr,
    /// `etcd --version`'s first line.
    pub version: String,
}

impl EtcdCluster {
    /// Starts the three members; returns once each logged that it serves clients. On error
    /// nothing is left.
    pub async fn start(image: &Image, mark: &str) -> Result<EtcdCluster, ContainerError> {
        let network = Network::create(mark).await?;
        let container = match Container::start(&Spec {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), script()],
            network: Some(network.name.clone()),
            mark: mark.to_owned(),
            // The members' data directories and the snapshot (/tmp/m0…, /tmp/snap.db), in
            // memory: a restore restarts the members, never the container.
            tmpfs: vec!["/tmp".into()],
            ..Spec::default()
        })
        .await
        {
            Ok(c) => c,
            Err(e) => {
                network.remove().await;
                return Err(e);
            }
        };
        let ip = match until_logged(&container, "m2 ", START_TIMEOUT).await {
            Ok(()) => container.ip().await,
            Err(e) => Err(e),
        };
        let ip = match ip {
            Ok(ip) => ip,
            Err(e) => {
                let _ = container.remove().await;
                network.remove().await;
                return Err(e);
            }
        };
        let mut cluster = EtcdCluster {
            network,
            container,
            ip,
            version: String::new(),
        };
        if let Err(e) = cluster.until_healthy().await {
            cluster.remove().await;
            return Err(e);
        }
        let log = cluster.log().await;
        cluster.version = log
            .lines()
            .find(|l| l.starts_with("etcd Version"))
            .unwrap_or("")
            .trim()
            .to_owned();
        Ok(cluster)
    }

    /// `ip:port` of each member, comma-separated: a client's endpoints.
    pub fn endpoints(&self) -> String {
        CLIENT_PORTS
            .iter()
            .map(|p| format!("{}:{p}", self.ip))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcdctl ARGS` against every member, inside the container: its output.
    pub async fn etcdctl(&self, args: &str) -> Result<String, ContainerError> {
        let endpoints = CLIENT_PORTS
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let (code, out) = shell(
            self.container.id(),
            &format!("ETCDCTL_API=3 etcdctl --endpoints={endpoints} {args}"),
        )
        .await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("etcdctl {args}"),
                detail: out,
            });
        }
        Ok(out)
    }

    /// Returns once every member reports healthy (`etcdctl endpoint health`).
    pub async fn until_healthy(&self) -> Result<(), ContainerError> {
        crate::wait::until_every(
            "every etcd member healthy",
            START_TIMEOUT,
            Duration::from_millis(200),
            || async {
                Ok::<_, std::io::Error>(match self.etcdctl("endpoint health").await {
                    Ok(out) => out.matches("is healthy").count() == CLIENT_PORTS.len(),
                    Err(_) => false,
                })
            },
        )
        .await
        .map(|_| ())
        .map_err(|e| ContainerError::Cli {
            what: "wait for the etcd cluster".into(),
            detail: e.to_string(),
        })
    }

    /// The cluster's revision now (the first member's `endpoint status`).
    pub async fn revision(&self) -> Result<i64, ContainerError> {
        let out = self.etcdctl("endpoint status --write-out=fields").await?;
        out.lines()
            .find_map(|l| l.trim().strip_prefix("\"Revision\" : "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| ContainerError::Cli {
                what: "read the cluster's revision".into(),
                detail: out.lines().take(3).collect::<Vec<_>>().join(" / "),
            })
    }

    /// Saves a snapshot of the cluster now to `/tmp/snap.db`; etcdctl's own line.
    pub async fn snapshot(&self) -> Result<String, ContainerError> {
        let (code, out) = shell(
            self.container.id(),
            "ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:2379 snapshot save /tmp/snap.db",
        )
        .await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: "etcdctl snapshot save".into(),
                detail: out,
            });
        }
        Ok(out
            .lines()
            .find(|l| l.starts_with("Snapshot saved at"))
            .or_else(|| out.lines().last())
            .unwrap_or("")
            .trim()
            .to_owned())
    }

    /// The operator's restore, as etcd 3.4's docs give it: every member stopped, each data
    /// directory restored from `/tmp/snap.db`, every member started again; returns once each is
    /// healthy, with etcdctl's lines of the restore.
    pub async fn restore(&self) -> Result<Vec<String>, ContainerError> {
        // Every member stopped (SIGTERM: etcd's own shutdown), not started again by its loop.
        let (code, out) = shell(self.container.id(), "rm -f /tmp/go").await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: "hold the etcd members' loops".into(),
                detail: out,
            });
        }
        signals::signal_processes(
            &docker().await?,
            self.container.id(),
            "the etcd members",
            |cmdline| cmdline.starts_with("etcd "),
            Signal::SIGTERM,
        )
        .await?;
        let script = format!(
            "n=0; while pgrep -x etcd >/dev/null && [ $n -lt 100 ]; \
             do sleep 0.1; n=$((n+1)); done; \
             for m in 0 1 2; do p=$((2380 + 10 * m)); rm -rf /tmp/m$m; \
             ETCDCTL_API=3 etcdctl snapshot restore /tmp/snap.db --name m$m \
             --initial-cluster {CLUSTER} --initial-cluster-token lab \
             --initial-advertise-peer-urls http://127.0.0.1:$p --data-dir /tmp/m$m 2>&1 \
             | sed \"s/^/m$m: /\" || exit 1; done; touch /tmp/go"
        );
        let (code, out) = shell(self.container.id(), &script).await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: "restore the etcd cluster from its snapshot".into(),
                detail: out,
            });
        }
        self.until_healthy().await?;
        // etcdctl's JSON lines, shortened: `m0: restored snapshot /tmp/snap.db into /tmp/m0`.
        let field = |line: &str, name: &str| {
            let at = line.find(&format!("\"{name}\":\""))? + name.len() + 4;
            line[at..].split('"').next().map(str::to_owned)
        };
        Ok(out
            .lines()
            .filter(|l| l.contains("\"restored snapshot\""))
            .map(|l| {
                format!(
                    "{} restored snapshot {} into {}",
                    l.split(':').next().unwrap_or(""),
                    field(l, "path").unwrap_or_default(),
                    field(l, "data-dir").unwrap_or_default()
                )
            })
            .collect())
    }

    /// Raises the revision by `n` writes of a scratch key: the operator's remedy on 3.4, before
    /// clients are let in (3.5's `--bump-revision` does the same inside the restore).
    pub async fn bump(&self, n: i64) -> Result<(), ContainerError> {
        let (code, out) = shell(
            self.container.id(),
            &format!(
                "i=0; while [ $i -lt {n} ]; do ETCDCTL_API=3 etcdctl \
                 --endpoints=http://127.0.0.1:2379 put /fencing-lab-bump $i >/dev/null || exit 1; \
                 i=$((i+1)); done"
            ),
        )
        .await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("raise the revision by {n}"),
                detail: out,
            });
        }
        Ok(())
    }

    /// The container's log so far: every member's lines.
    pub async fn log(&self) -> String {
        self.container.stderr().await.unwrap_or_default()
    }

    /// Removes the container, then its network; returns once they are gone.
    pub async fn remove(self) {
        let _ = self.container.remove().await;
        self.network.remove().await;
    }
}
