//! N independent Redis servers (the RL-series' Redlock: five, as published), one container each,
//! from the lock services' image, on a private network of the run. No persistence, as a lock
//! server is usually run: a server restarted forgets its keys (RL3). Each container runs its
//! server in a loop, so that killing the server ([`RedisServers::restart`]) is a restart.
//! Faults by the network: [`RedisServers::refuse`] — an iptables rule in the server's own
//! namespace that resets every new connection from outside it — and [`RedisServers::admit`].
//! A clock fault (RL2): one server may run under the lab's clock shim (`clockshim.c`, compiled
//! here by the host's `cc` and mounted read-only), whose wall clock
//! [`RedisServers::shift_clock`] moves.

use std::net::IpAddr;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{
    docker, run, shell, until_logged, Container, ContainerError, Image, Network, Spec, CLI_TIMEOUT,
};
use crate::process::in_container as signals;

/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The rule that refuses clients from outside (iptables arguments after the chain): the lab's
/// own `redis-cli` inside the container still reaches its server over the loopback.
const CLIENTS: [&str; 8] = ["!", "-i", "lo", "-p", "tcp", "--dport", "6379", "-j"];
/// The reset a refusal answers with.
const RESET: &str = "tcp-reset";

/// N Redis servers.
pub struct RedisServers {
    network: Network,
    servers: Vec<Container>,
    pub ips: Vec<IpAddr>,
    /// The server whose wall clock the lab can shift, and the host directory of its shim
    /// (removed with this value).
    shifted: Option<(usize, tempfile::TempDir)>,
}

/// Each container's command: its server, started again whenever it ends. `{preload}` is empty,
/// or the clock shim's `LD_PRELOAD=…` for the shifted server.
fn script(preload: &str) -> String {
    format!(
        "redis-server --version >&2; while :; do {preload}redis-server --bind 0.0.0.0 \
         --port 6379 --protected-mode no --save '' --appendonly no --logfile '' 1>&2; \
         echo 'redis-server ended; starting it again, empty' >&2; done"
    )
}

/// The clock shim's source: it shifts CLOCK_REALTIME by the milliseconds in [`OFFSET_FILE`].
const SHIM_SOURCE: &str = include_str!("clockshim.c");
/// Where the shim reads its offset, in the shifted server's container.
const OFFSET_FILE: &str = "/tmp/clockshim-offset-ms";
/// Where the shim's directory is mounted.
const SHIM_DIR: &str = "/opt/clockshim";

/// Compiles the clock shim with this host's `cc` into a directory of its own (readable by the
/// container). The containers run the same Debian release as the host's C library or a newer
/// one; the shim needs nothing but `syscall`.
async fn clock_shim() -> Result<tempfile::TempDir, ContainerError> {
    let failed = |what: &str, e: std::io::Error| ContainerError::Cli {
        what: format!("the clock shim: {what}"),
        detail: e.to_string(),
    };
    let dir = tempfile::Builder::new()
        .prefix("fencing-lab-clockshim-")
        .tempdir()
        .map_err(|e| failed("make its directory", e))?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| failed("open its directory to the container", e))?;
    }
    let source = dir.path().join("clockshim.c");
    std::fs::write(&source, SHIM_SOURCE).map_err(|e| failed("write its source", e))?;
    let so = dir.path().join("clockshim.so");
    run(
        "compile the clock shim (cc -shared -fPIC)",
        "cc",
        &[
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            &so.to_string_lossy(),
            &source.to_string_lossy(),
        ],
        CLI_TIMEOUT,
    )
    .await?;
    Ok(dir)
}

impl RedisServers {
    /// Starts `n` servers, server `shifted` (if any) under the clock shim; returns once each
    /// logged that it is ready. On error nothing is left.
    pub async fn start(
        image: &Image,
        mark: &str,
        n: usize,
        shifted: Option<usize>,
    ) -> Result<RedisServers, ContainerError> {
        let shim = match shifted {
            Some(i) => Some((i, clock_shim().await?)),
            None => None,
        };
        let network = Network::create(mark).await?;
        let mut servers: Vec<Container> = Vec::new();
        let built = async {
            for i in 0..n {
                let (preload, binds) = match &shim {
                    Some((s, dir)) if *s == i => (
                        format!("LD_PRELOAD={SHIM_DIR}/clockshim.so "),
                        vec![format!("{}:{SHIM_DIR}:ro", dir.path().display())],
                    ),
                    _ => (String::new(), Vec::new()),
                };
                let container = Container::start(&Spec {
                    image: image.reference.clone(),
                    cmd: vec!["sh".into(), "-c".into(), script(&preload)],
                    network: Some(network.name.clone()),
                    mark: mark.to_owned(),
                    binds,
                    // Nothing is persisted (`--save ''`); the clock shim's offset file.
                    tmpfs: vec!["/tmp".into()],
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
                shifted: shim,
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

    /// Server `i`'s wall clock as it answers `TIME`, in ms since the epoch.
    pub async fn time_ms(&self, i: usize) -> Result<i64, ContainerError> {
        let out = self.cli(i, "TIME").await?;
        let mut parts = out.lines().map(|l| l.trim().parse::<i64>());
        match (parts.next(), parts.next()) {
            (Some(Ok(secs)), Some(Ok(micros))) => Ok(secs * 1000 + micros / 1000),
            _ => Err(ContainerError::Cli {
                what: format!("read server {i}'s clock (redis-cli TIME)"),
                detail: format!("unexpected answer: {out}"),
            }),
        }
    }

    /// Moves the shifted server's wall clock `ms` ahead of the host's (from now on: the shim
    /// reads its offset on every call). Only the server started under the shim can be shifted.
    pub async fn shift_clock(&self, i: usize, ms: i64) -> Result<(), ContainerError> {
        if !matches!(&self.shifted, Some((s, _)) if *s == i) {
            return Err(ContainerError::Cli {
                what: format!("shift server {i}'s clock"),
                detail: "it was not started under the clock shim".into(),
            });
        }
        let (code, out) = shell(
            self.servers[i].id(),
            &format!("echo {ms} > {OFFSET_FILE}.new && mv {OFFSET_FILE}.new {OFFSET_FILE}"),
        )
        .await?;
        if code != 0 {
            return Err(ContainerError::Cli {
                what: format!("shift server {i}'s clock"),
                detail: out,
            });
        }
        Ok(())
    }

    /// Server `i`'s log so far.
    pub async fn log(&self, i: usize) -> String {
        self.servers[i].stderr().await.unwrap_or_default()
    }

    async fn iptables(&self, i: usize, op: &str) -> Result<String, ContainerError> {
        self.rule(i, op, &["REJECT", "--reject-with", RESET]).await
    }

    /// Inserts (`-I`) or deletes (`-D`) the rule that ends in `target` for clients from outside
    /// server `i`, in its network namespace (which goes with its container).
    async fn rule(&self, i: usize, op: &str, target: &[&str]) -> Result<String, ContainerError> {
        let pid = self.servers[i]
            .pid()
            .await
            .ok_or_else(|| ContainerError::Cli {
                what: format!("iptables on server {i}"),
                detail: "its container does not run".into(),
            })?;
        let ns = format!("--net=/proc/{pid}/ns/net");
        let mut args = vec![ns.as_str(), "iptables", op, "INPUT"];
        args.extend(CLIENTS);
        args.extend(target);
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

    /// Server `i` answers nothing: every packet a client sends it is dropped (a DROP rule), so a
    /// connection attempt or a request waits out the client's own timeout — a server that is slow
    /// or cut off, not one that says no — until [`RedisServers::unstall`].
    pub async fn stall(&self, i: usize) -> Result<(), ContainerError> {
        self.rule(i, "-I", &["DROP"]).await.map(|_| ())
    }

    /// Server `i` answers again.
    pub async fn unstall(&self, i: usize) -> Result<(), ContainerError> {
        self.rule(i, "-D", &["DROP"]).await.map(|_| ())
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
        drop(self.shifted);
    }
}
