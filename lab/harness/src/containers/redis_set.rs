//! N independent Redis servers (the RL-series' Redlock: five, as published), one container each,
//! from the lock services' image, on a private network of the run. No persistence, as a lock
//! server is usually run: a server restarted forgets its keys (RL3). Each container runs its
//! server in a loop, so that killing the server ([`RedisServers::restart`]) is a restart.
//! Faults by the network: [`RedisServers::refuse`] — an iptables rule in the server's own
//! namespace that resets every new connection from outside it — and [`RedisServers::admit`].

use std::net::IpAddr;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{
    docker, run, shell, until_logged, Container, ContainerError, Image, Network, Spec, CLI_TIMEOUT,
};
use crate::process::container as signals;

/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The rule that refuses clients from outside (iptables arguments after the chain): the lab's
/// own `redis-cli` inside the container still reaches its server over the loopback.
const REFUSE: [&str; 10] = [
    "!",
    "-i",
    "lo",
    "-p",
    "tcp",
    "--dport",
    "6379",
    "-j",
    "REJECT",
    "--reject-with",
];
/// The reset REFUSE ends with.
const RESET: &str = "tcp-reset";

/// N Redis servers.
pub struct RedisServers {
    network: Network,
    servers: Vec<Container>,
    pub ips: Vec<IpAddr>,
}

/// Each container's command: its server, started again whenever it ends.
const SCRIPT: &str = "redis-server --version >&2; while :; do redis-server --bind 0.0.0.0 \
     --port 6379 --protected-mode no --save '' --appendonly no --logfile '' 1>&2; \
     echo 'redis-server ended; starting it again, empty' >&2; done";

impl RedisServers {
    /// Starts `n` servers; returns once each logged that it is ready. On error nothing is left.
    pub async fn start(
        image: &Image,
        mark: &str,
        n: usize,
    ) -> Result<RedisServers, ContainerError> {
        let network = Network::create(mark).await?;
        let mut servers: Vec<Container> = Vec::new();
        let built = async {
            for _ in 0..n {
                let container = Container::start(&Spec {
                    image: image.reference.clone(),
                    cmd: vec!["sh".into(), "-c".into(), SCRIPT.into()],
                    network: Some(network.name.clone()),
                    mark: mark.to_owned(),
                    ..Spec::default()
                })
                .await?;
                servers.push(container);
            }
            let mut ips = Vec::new();
            for c in &servers {
                until_logged(c, "Ready to accept connections", START_TIMEOUT).await?;
                ips.push(c.ip().await?);
            }
            Ok::<_, ContainerError>(ips)
        }
        .await;
        match built {
            Ok(ips) => Ok(RedisServers {
                network,
                servers,
                ips,
            }),
            Err(e) => {
                for c in servers {
                    let _ = c.remove().await;
                }
                network.remove().await;
                Err(e)
            }
        }
    }

    /// `ip:6379` of each server.
    pub fn endpoints(&self) -> Vec<String> {
        self.ips.iter().map(|ip| format!("{ip}:6379")).collect()
    }

    /// `redis-cli ARGS` inside server `i`'s container: its output.
    pub async fn cli(&self, i: usize, args: &str) -> Result<String, ContainerError> {
        let (code, out) = shell(self.servers[i].id(), &format!("redis-cli {args}")).await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("redis-cli {args}"),
                detail: out,
            });
        }
        Ok(out.trim().to_owned())
    }

    /// Server `i`'s log so far.
    pub async fn log(&self, i: usize) -> String {
        self.servers[i].stderr().await.unwrap_or_default()
    }

    async fn iptables(&self, i: usize, op: &str) -> Result<String, ContainerError> {
        let pid = self.servers[i]
            .pid()
            .await
            .ok_or_else(|| ContainerError::Cli {
                what: format!("iptables on server {i}"),
                detail: "its container does not run".into(),
            })?;
        let ns = format!("--net=/proc/{pid}/ns/net");
        let mut args = vec![ns.as_str(), "iptables", op, "INPUT"];
        args.extend(REFUSE);
        args.push(RESET);
        run(
            "iptables in a Redis server's namespace",
            "nsenter",
            &args,
            CLI_TIMEOUT,
        )
        .await
    }

    /// Server `i` refuses every new connection (and resets those it has) — unreachable, as
    /// behind a partition — until [`RedisServers::admit`].
    pub async fn refuse(&self, i: usize) -> Result<(), ContainerError> {
        self.iptables(i, "-I").await.map(|_| ())
    }

    /// Server `i` accepts connections again.
    pub async fn admit(&self, i: usize) -> Result<(), ContainerError> {
        self.iptables(i, "-D").await.map(|_| ())
    }

    /// Kills server `i`'s redis-server (SIGKILL): its loop starts it again, empty — a restart
    /// without persistence. Returns once it answers again.
    pub async fn restart(&self, i: usize) -> Result<(), ContainerError> {
        let id = self.servers[i].id().to_owned();
        let before = self
            .log(i)
            .await
            .matches("Ready to accept connections")
            .count();
        signals::signal_processes(
            &docker().await?,
            &id,
            "redis-server",
            |cmdline| cmdline.starts_with("redis-server"),
            Signal::SIGKILL,
        )
        .await?;
        crate::wait::until_every(
            "the restarted Redis server ready",
            START_TIMEOUT,
            Duration::from_millis(50),
            || async {
                Ok::<_, std::io::Error>(
                    self.log(i)
                        .await
                        .matches("Ready to accept connections")
                        .count()
                        > before,
                )
            },
        )
        .await
        .map_err(|e| ContainerError::Cli {
            what: format!("restart Redis server {i}"),
            detail: e.to_string(),
        })?;
        Ok(())
    }

    /// Removes every container, then the network; returns once they are gone.
    pub async fn remove(self) {
        for c in self.servers {
            let _ = c.remove().await;
        }
        self.network.remove().await;
    }
}
