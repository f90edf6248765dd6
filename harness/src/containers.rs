//! Servers on hosts of their own (feature `containers`): PostgreSQL in a Docker container on a
//! private network the lab creates, started through the Docker engine's API (bollard) from an
//! image the lab builds here from Debian packages — nothing is pulled from a registry — and a
//! hold on one client's TCP connection (an iptables rule on this host), so that its request is
//! held in the network. The engine is reached through its API only, never the `docker` command;
//! signals to containers and to the processes in them go through `harness::process::in_container`.
//!
//! This file holds what the parts share — the engine's answer ([`engine`]), the error
//! ([`ContainerError`]), the label and the other constants, running a host tool or a shell in a
//! container — and re-exports each part's items, so that `harness::containers::X` names them all.
//! It holds no part itself: one concern a file.
//!
//! - [`engine`]: whether a Docker engine answers; the reason when not (experiments then `skip`).
//! - `image` — [`postgres_image`] / [`patroni_image`]: the image for a PostgreSQL major version,
//!   built once with `debootstrap` (a minimal Debian root with `postgresql-N` and `iproute2`) and
//!   imported into the engine as a tar stream of that root (`docker import`'s API call), tagged
//!   by its recipe's hash, reused while the tag exists. `lab clean --images` removes them
//!   ([`remove_images`]).
//! - [`container`] — [`Container`]: one container of the lab, removed on drop unless kept.
//! - `network` — [`Network`]: a bridge network labelled with the run's mark; removed on drop.
//! - `pg` — [`PgContainer`]: a PostgreSQL server in a container on that network (initdb inside,
//!   trust for the network's hosts, every statement logged); removed on drop. [`until_logged`]
//!   waits for a container to say it is ready.
//! - [`patroni`]: a highly available lease store — three PostgreSQL servers managed by Patroni on
//!   a three-member etcd cluster, from [`patroni_image`].
//! - `hold` — [`Hold`]: every packet of one TCP connection (by source port) to one host dropped
//!   until lifted — the request is held, nothing else is; removed on drop. (netem is not in this
//!   machine kind's kernel: see [`Hold`].) [`tcp_state`] shows the held connection as `ss` does.
//! - `leftovers`: every container and network carries the label [`LABEL`]: [`remove_labelled`]
//!   removes what a lab killed outright left behind (`lab clean`, and the next run),
//!   [`remove_held_rules`] its holds, [`remove_this_process`] what this process's labs made.
//! - [`pg_hosts`]: a lab's two databases in containers, behind `harness::hosts::Hosts`.
//! - `backend` — [`Engine`]: all of the above as the lab asks for it, `harness::docker::Docker`.
//! - `service` — [`ServiceContainer`]: a lock service (Redis, etcd or ZooKeeper) in a container
//!   of its own, from [`services_image`], for `--lease-store redis|etcd|zookeeper`.

use std::time::Duration;

use crate::process::in_container::{self as signals, ContainerProcessError};
use crate::process::{describe_status, Spawn};

mod backend;
pub mod container;
mod etcd_cluster;
mod hold;
mod image;
mod leftovers;
mod network;
pub mod patroni;
mod pg;
pub mod pg_hosts;
mod redis_set;
mod sentinel;
mod service;

pub use backend::Engine;
use container::docker_with;
pub use container::{docker, Container, Spec};
pub use etcd_cluster::EtcdCluster;
pub use hold::{remove_held_rules, tcp_state, Hold};
pub use image::{
    patroni_image, postgres_image, remove_images, remove_killed_builds, suite_for, Image, LabImage,
};
pub use leftovers::{prune_kept_runs, remove_labelled, remove_this_process};
pub use network::Network;
use pg::{tcp_options, STARTUP_TIMEOUT};
pub use pg::{until_logged, PgContainer};
pub use redis_set::RedisServers;
pub use sentinel::SentinelGroup;
pub use service::{services_image, ServiceContainer};

/// The label on every container and network the lab makes; its value is the run's mark.
pub const LABEL: &str = "fencing-lab.run";
/// The label naming the temp dir of the lab that made a container: what failing runs keep is
/// bounded per temp dir, its containers as its cluster directories ([`prune_kept_runs`]).
pub const TMP_LABEL: &str = "fencing-lab.tmp";
/// The name prefix of a container a kept or failing run left for inspection: the next run leaves
/// it alone, `lab clean` removes it.
pub const KEPT_PREFIX: &str = "fencing-lab-kept-";
/// The repository of the images the lab builds.
pub const IMAGE_REPO: &str = "fencing-lab/postgres";
/// How to get a Docker engine, for a `skip` line.
pub const INSTALL_HINT: &str = "start a Docker engine (docker info must answer) and build with \
     --features lab/containers (./run.sh and scripts/test.sh do when one answers)";

const CLI_TIMEOUT: Duration = Duration::from_secs(60);
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// The PostgreSQL port inside a container.
pub const PG_PORT: u16 = 5432;

/// Why a container could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{what} failed: {detail}")]
    Cli { what: String, detail: String },
    #[error("failed to {what}")]
    Engine {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    #[error(transparent)]
    InContainer(#[from] ContainerProcessError),
}

impl ContainerError {
    fn engine(what: impl Into<String>, source: bollard::errors::Error) -> ContainerError {
        ContainerError::Engine {
            what: what.into(),
            source,
        }
    }
}

/// Runs a command line tool of this host (debootstrap, iptables, ss) to its end; its stdout, or
/// an error quoting its output.
async fn run(
    what: &str,
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String, ContainerError> {
    let out = Spawn::new(what, program).args(args).output(timeout).await?;
    if !out.status.success() {
        let mut detail = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if detail.is_empty() {
            detail = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        }
        // The last lines say why; one line, for a check or a skip.
        let lines: Vec<&str> = detail.lines().collect();
        let detail = lines[lines.len().saturating_sub(3)..].join(" / ");
        return Err(ContainerError::Cli {
            what: format!("{what} ({})", describe_status(&out.status)),
            detail,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Runs `script` with `sh -c` inside the container `id`: its exit code and its output (stdout
/// and stderr, trimmed).
async fn shell(id: &str, script: &str) -> Result<(i32, String), ContainerError> {
    shell_as(id, None, script).await
}

/// [`shell`] as `user` (`None`: the container's own user).
async fn shell_as(
    id: &str,
    user: Option<&str>,
    script: &str,
) -> Result<(i32, String), ContainerError> {
    let docker = docker().await?;
    let out = signals::exec(&docker, id, user, &["sh", "-c", script], CLI_TIMEOUT).await?;
    Ok((i32::try_from(out.code).unwrap_or(-1), out.output))
}

/// `Ok(server version)` when a Docker engine answers; else the reason, with the hint.
pub async fn engine() -> Result<String, String> {
    let ask = async {
        let info = docker_with(Duration::from_secs(20))
            .await?
            .info()
            .await
            .map_err(|source| {
                ContainerError::engine("ask the Docker engine for its info", source)
            })?;
        Ok::<_, ContainerError>(info.server_version.unwrap_or_default())
    };
    match ask.await {
        Ok(version) if !version.is_empty() => Ok(version),
        Ok(_) => Err(format!("no Docker engine answers: {INSTALL_HINT}")),
        Err(e) => Err(format!(
            "no Docker engine answers ({}): {INSTALL_HINT}",
            chain(&e)
        )),
    }
}

/// An error with its sources, `: `-joined, for a one-line reason.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// FNV-1a: a stable hash for the image tag (std's hasher may change between releases).
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The last `n` lines of `text`, joined again.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
