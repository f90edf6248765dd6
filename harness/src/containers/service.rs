//! A lock service in a container of its own (`--lease-store redis|etcd|zookeeper`): one server of
//! Redis, etcd or ZooKeeper from Debian's bookworm packages ([`services_image`]), on a private
//! network of the run, its settings chosen so that a lease of the lab's TTL (1.5 s) is what the
//! service itself expires:
//! - **Redis** 7.0: no persistence (`--save ''`, no AOF), as a lock server is usually run; a key's
//!   `PX` is judged by the server's clock.
//! - **etcd** 3.4: heartbeat 50 ms, election timeout 500 ms, so that its minimum lease TTL
//!   (1.5 × the election timeout, rounded up to whole seconds) is 1 s; a lease is expired by the
//!   leader's clock.
//! - **ZooKeeper** 3.8: `tickTime` 250 ms, so that a session timeout may be 0.5–5 s (2 to 20
//!   ticks); the JVM's heap capped at 256 MB for a 2-core machine. A session is expired by the
//!   server when it hears nothing from the client for the timeout.
//!
//! [`ServiceContainer::start`] returns once the service answers on its port, with its version.

use std::net::IpAddr;
use std::time::Duration;

use crate::docker::ContainedService;

use super::{until_logged, Container, ContainerError, Image, LabImage, Network, Spec, KEPT_PREFIX};

/// How long a service may take to start (ZooKeeper's JVM takes a few seconds on 2 cores).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The image with the three lock services (and PostgreSQL, which the image recipe starts from;
/// etcdctl for the R-series), built here on first use.
pub async fn services_image() -> Result<Image, ContainerError> {
    LabImage::Services.image().await
}

/// One lock service's server.
pub struct ServiceContainer {
    network: Network,
    container: Container,
    pub ip: IpAddr,
    pub port: u16,
    /// What the server says it is (`redis_version:7.0.15`, `etcd Version: 3.4.23`, …).
    pub version: String,
    /// The settings that bear on expiry, as the lab started it.
    pub settings: Vec<(String, String)>,
}

/// What each service runs and logs when it is ready.
struct Recipe {
    port: u16,
    script: String,
    ready: &'static str,
    version: &'static str,
    settings: Vec<(String, String)>,
}

fn recipe(service: ContainedService) -> Recipe {
    let s = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    match service {
        ContainedService::Redis => Recipe {
            port: 6379,
            script: "redis-server --version >&2; exec redis-server --bind 0.0.0.0 --port 6379 \
                     --protected-mode no --save '' --appendonly no --logfile '' 1>&2"
                .into(),
            ready: "Ready to accept connections",
            version: "redis-server --version",
            settings: vec![
                s("persistence", "none (save '', appendonly no)"),
                s("expiry", "a key's PX, by the server's clock"),
            ],
        },
        ContainedService::Etcd => Recipe {
            port: 2379,
            script: "etcd --version >&2; exec etcd --name lab --data-dir /tmp/etcd \
                     --listen-client-urls http://0.0.0.0:2379 \
                     --advertise-client-urls http://$(hostname -i):2379 \
                     --listen-peer-urls http://127.0.0.1:2380 \
                     --initial-advertise-peer-urls http://127.0.0.1:2380 \
                     --initial-cluster lab=http://127.0.0.1:2380 \
                     --heartbeat-interval 50 --election-timeout 500"
                .into(),
            ready: "ready to serve client requests",
            version: "etcd --version",
            settings: vec![
                s("heartbeat-interval", "50 ms"),
                s("election-timeout", "500 ms"),
                s(
                    "minimum lease TTL",
                    "1 s (1.5 × the election timeout, in whole seconds)",
                ),
                s("expiry", "a lease's TTL, by the leader's clock"),
            ],
        },
        ContainedService::Zookeeper => Recipe {
            port: 2181,
            script:
                "mkdir -p /tmp/zk && printf 'tickTime=250\\ndataDir=/tmp/zk\\nclientPort=2181\\n\
                     minSessionTimeout=500\\nmaxSessionTimeout=5000\\nadmin.enableServer=false\\n\
                     4lw.commands.whitelist=*\\nmaxClientCnxns=0\\n' > /tmp/zoo.cfg; \
                     echo \"ZooKeeper $(dpkg-query -W -f '${Version}' zookeeper)\" >&2; \
                     exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
                     -Dzookeeper.log.dir=/tmp -Dzookeeper.root.logger=INFO,CONSOLE \
                     -Dznode.container.checkIntervalMs=200 \
                     -Dlog4j.configuration=file:/etc/zookeeper/conf/log4j.properties \
                     -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar \
                     org.apache.zookeeper.server.ZooKeeperServerMain /tmp/zoo.cfg 1>&2"
                    .into(),
            ready: "binding to port",
            version: "ZooKeeper ",
            settings: vec![
                s("tickTime", "250 ms"),
                s(
                    "session timeout bounds",
                    "500–5000 ms (minSessionTimeout, maxSessionTimeout)",
                ),
                s("heap", "256 MB (-Xmx256m)"),
                s(
                    "maxClientCnxns",
                    "0, no limit (the default 60 per address would refuse the lab's lock a \
                     session per holding past 60 holdings)",
                ),
                s(
                    "expiry",
                    "a session's timeout, by the server, from the client's last message",
                ),
                s(
                    "container nodes",
                    "an empty one deleted within 200 ms (znode.container.checkIntervalMs; ZooKeeper's default 60 s)",
                ),
            ],
        },
    }
}

impl ServiceContainer {
    /// Starts `service` from `image` on a network of its own, labelled `mark`; returns once it
    /// logged that it is ready. On error nothing is left.
    pub async fn start(
        service: ContainedService,
        image: &Image,
        mark: &str,
    ) -> Result<ServiceContainer, ContainerError> {
        let recipe = recipe(service);
        let network = Network::create(mark).await?;
        let container = match Container::start(&Spec {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), recipe.script.clone()],
            network: Some(network.name.clone()),
            mark: mark.to_owned(),
            // The service's data (etcd's /tmp/etcd, ZooKeeper's /tmp/zk) in memory: the
            // container is never started again.
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
        let ready = async {
            until_logged(&container, recipe.ready, START_TIMEOUT).await?;
            container.ip().await
        };
        let ip = match ready.await {
            Ok(ip) => ip,
            Err(e) => {
                let _ = container.remove().await;
                network.remove().await;
                return Err(e);
            }
        };
        let log = container.stderr().await.unwrap_or_default();
        let version = log
            .lines()
            .find(|l| l.contains(recipe.version) || l.contains("Version") || l.contains(" v="))
            .unwrap_or("")
            .trim()
            .to_owned();
        Ok(ServiceContainer {
            network,
            container,
            ip,
            port: recipe.port,
            version,
            settings: recipe.settings,
        })
    }

    /// `ip:port`, where its clients connect.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// Pauses the server's container ([`Container::pause`]): it neither answers nor acts.
    pub async fn pause(&self) -> Result<(), ContainerError> {
        self.container.pause().await
    }

    /// Lets the paused server run on.
    pub async fn unpause(&self) -> Result<(), ContainerError> {
        self.container.unpause().await
    }

    /// The container's first process on this host (`None` once it is gone).
    pub async fn pid(&self) -> Option<u32> {
        self.container.pid().await
    }

    /// The server's log so far.
    pub async fn log(&self) -> String {
        self.container.stderr().await.unwrap_or_default()
    }

    /// Removes the container, then its network; returns once they are gone.
    pub async fn remove(self) {
        let _ = self.container.remove().await;
        self.network.remove().await;
    }

    /// Stops the container and leaves it in place, renamed `fencing-lab-kept-<id>` (`lab clean`
    /// removes it); its network goes. The line that says where it is.
    pub async fn stop_and_keep(self) -> String {
        let id = self.container.id().to_owned();
        let name = format!("{KEPT_PREFIX}{}", &id[..12.min(id.len())]);
        let _ = self.container.keep(&name, Duration::from_secs(5)).await;
        self.network.remove().await;
        format!("kept the lock service's container {name} (stopped; its log: docker logs {name})")
    }
}
