//! Servers on hosts of their own (feature `containers`): PostgreSQL in a Docker container on a
//! private network the lab creates, started through the Docker engine's API (bollard) from an
//! image the lab builds here from Debian packages — nothing is pulled from a registry — and a
//! hold on one client's TCP connection (an iptables rule on this host), so that its request is
//! held in the network. The engine is reached through its API only, never the `docker` command;
//! signals to containers and to the processes in them go through `harness::process::container`.
//!
//! - [`engine`]: whether a Docker engine answers; the reason when not (experiments then `skip`).
//! - [`postgres_image`]: the image for a PostgreSQL major version, built once with `debootstrap`
//!   (a minimal Debian root with `postgresql-N` and `iproute2`) and imported into the engine as
//!   a tar stream of that root (`docker import`'s API call), tagged by its recipe's hash, reused
//!   while the tag exists. `lab clean --images` removes them.
//! - [`Container`]: one container of the lab, removed on drop unless kept ([`container`]).
//! - [`Network`]: a bridge network labelled with the run's mark; removed on drop.
//! - [`PgContainer`]: a PostgreSQL server in a container on that network (initdb inside, trust
//!   for the network's hosts, every statement logged); removed on drop.
//! - [`patroni`]: a highly available lease store — three PostgreSQL servers managed by Patroni on
//!   a three-member etcd cluster, from [`patroni_image`].
//! - [`Hold`]: every packet of one TCP connection (by source port) to one host dropped until
//!   lifted — the request is held, nothing else is; removed on drop. (netem is not in this
//!   machine kind's kernel: see [`Hold`].)
//!
//! Every container and network carries the label [`LABEL`]: [`remove_labelled`] removes what a
//! lab killed outright left behind (`lab clean`, and the next run).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptionsBuilder, ListImagesOptionsBuilder,
    ListNetworksOptionsBuilder, RemoveImageOptionsBuilder,
};
use futures_util::StreamExt as _;
use sqlx::postgres::PgConnectOptions;
use tokio::io::AsyncReadExt as _;

use crate::process::container::{self as signals, ContainerProcessError};
use crate::process::{describe_status, Spawn, Stream};

pub mod container;
pub mod hosts;
pub mod patroni;

use container::{block_on, docker_with};
pub use container::{docker, Container, Spec};

/// The label on every container and network the lab makes; its value is the run's mark.
pub const LABEL: &str = "fencing-lab.run";
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

/// A locally built image: its reference, and how long building it took (`None`: it was there).
#[derive(Debug, Clone)]
pub struct Image {
    pub reference: String,
    pub major: u32,
    pub built_in: Option<Duration>,
}

/// What goes into the image: bump `RECIPE` when the steps change, and the tag changes with it.
/// (The import through the engine's API makes the same image as `docker import` did: v1 stays.)
const RECIPE: &str = "v1: debootstrap --variant=minbase, docker import";

pub use crate::server::postgres::debian_suite_for as suite_for;

/// One image build at a time in this process (tests run scenarios side by side).
static BUILDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The image for PostgreSQL `major`, built here from Debian packages if it is not there yet.
pub async fn postgres_image(major: u32) -> Result<Image, ContainerError> {
    image_with(major, "", &[]).await
}

/// The image for PostgreSQL `major` with Patroni and etcd (Debian's `patroni` and `etcd-server`,
/// and `procps` to find and signal a server's processes), built here if it is not there yet.
pub async fn patroni_image(major: u32) -> Result<Image, ContainerError> {
    image_with(major, "patroni-", &["patroni", "etcd-server", "procps"]).await
}

/// The image for PostgreSQL `major` and `extra` packages, tagged `<major>-<flavour><suite>-<hash>`.
async fn image_with(major: u32, flavour: &str, extra: &[&str]) -> Result<Image, ContainerError> {
    let _one_at_a_time = BUILDING.lock().await;
    let suite = suite_for(major).ok_or_else(|| ContainerError::Cli {
        what: format!("PostgreSQL {major}"),
        detail: "no Debian suite ships it (13: bullseye, 15: bookworm, 17: trixie)".into(),
    })?;
    let mut packages = format!("postgresql-{major},iproute2");
    for p in extra {
        packages.push(',');
        packages.push_str(p);
    }
    let hash = fnv1a(&format!("{RECIPE}|{suite}|{packages}"));
    let reference = format!("{IMAGE_REPO}:{major}-{flavour}{suite}-{hash:08x}");
    if docker().await?.inspect_image(&reference).await.is_ok() {
        return Ok(Image {
            reference,
            major,
            built_in: None,
        });
    }
    let started = Instant::now();
    let root = tempfile::Builder::new()
        .prefix("fencing-lab-image-")
        .tempdir()
        .map_err(|e| ContainerError::Cli {
            what: "make the image's root directory".into(),
            detail: e.to_string(),
        })?;
    let dir = root.path().join("root");
    let dir_s = dir.to_string_lossy().into_owned();
    let include = format!("--include={packages}");
    run(
        "debootstrap",
        "debootstrap",
        &["--variant=minbase", &include, suite, &dir_s, &mirror()],
        BUILD_TIMEOUT,
    )
    .await?;
    import(&dir_s, major, &reference).await?;
    Ok(Image {
        reference,
        major,
        built_in: Some(started.elapsed()),
    })
}

/// Imports the root file system in `dir` as the image `reference` (`docker import`'s API call,
/// `POST /images/create?fromSrc=-`): `tar` writes the root — owners, modes and device files as
/// debootstrap made them — to a pipe, and its stream goes to the engine as it comes. Returns
/// once the engine has tagged the image.
async fn import(dir: &str, major: u32, reference: &str) -> Result<(), ContainerError> {
    let (repo, tag) = reference.split_once(':').unwrap_or((reference, "latest"));
    let mut tar = Spawn::new("tar of the image's root", "tar")
        .args(["-C", dir, "-c", "."])
        .stdout(Stream::Piped)
        .capture_stderr()
        .spawn()?;
    let out = tar.take_stdout().expect("piped");
    let root = futures_util::stream::unfold(out, |mut out| async move {
        let mut chunk = vec![0u8; 256 * 1024];
        match out.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(bytes::Bytes::from(chunk)), out))
            }
            Err(e) => Some((Err(e), out)),
        }
    });
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec![format!("LABEL fencing-lab.image={major}")])
        .build();
    let docker = docker_with(BUILD_TIMEOUT).await?;
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_try_stream(root)), None);
    let mut imported = Ok(());
    while let Some(step) = progress.next().await {
        if let Err(source) = step {
            imported = Err(ContainerError::engine(
                format!("import the image {reference}"),
                source,
            ));
            break;
        }
    }
    let status = tar.wait_exit(BUILD_TIMEOUT).await;
    let tar_failed = match status {
        Ok(Some(status)) if status.success() => None,
        Ok(Some(status)) => Some(describe_status(&status)),
        Ok(None) | Err(_) => Some("it did not finish".to_owned()),
    };
    if let Some(how) = tar_failed {
        tar.stop(&[]).await;
        return Err(ContainerError::Cli {
            what: format!("tar of the image's root ({how})"),
            detail: tar.stderr(),
        });
    }
    imported
}

/// The Debian mirror this machine's apt uses (not its security or snapshot archive), else
/// deb.debian.org.
fn mirror() -> String {
    let sources = std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources")
        .or_else(|_| std::fs::read_to_string("/etc/apt/sources.list"))
        .unwrap_or_default();
    sources
        .split_whitespace()
        .find(|w| w.starts_with("http") && !w.contains("security") && !w.contains("snapshot"))
        .unwrap_or("http://deb.debian.org/debian")
        .to_owned()
}

/// FNV-1a: a stable hash for the image tag (std's hasher may change between releases).
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Removes the lab's images (`lab clean --images`); how many.
pub async fn remove_images() -> Result<usize, ContainerError> {
    let docker = docker().await?;
    let filters = HashMap::from([("reference".to_owned(), vec![IMAGE_REPO.to_owned()])]);
    let images = docker
        .list_images(Some(
            ListImagesOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's images", source))?;
    let refs: Vec<String> = images
        .into_iter()
        .flat_map(|image| image.repo_tags)
        .filter(|r| r.starts_with(&format!("{IMAGE_REPO}:")))
        .collect();
    for reference in &refs {
        docker
            .remove_image(
                reference,
                Some(RemoveImageOptionsBuilder::new().force(true).build()),
                None,
            )
            .await
            .map_err(|source| {
                ContainerError::engine(format!("remove the image {reference}"), source)
            })?;
    }
    Ok(refs.len())
}

/// Whether the lab whose run mark is `mark` (`<pid>-<ms>`) is still running.
fn lab_alive(mark: &str) -> bool {
    mark.split('-')
        .next()
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| pid != std::process::id() && crate::process::exists(pid))
}

/// Removes every container and network labelled [`LABEL`] with `mark`, or, when `None`, those
/// of every lab that is not running any more (what a lab killed outright left; with
/// `kept_too`, also what a kept or failing run left on purpose: `lab clean`). A network that
/// still has a container is left. Returns how many of each.
pub async fn remove_labelled(
    mark: Option<&str>,
    kept_too: bool,
) -> Result<(usize, usize), ContainerError> {
    let docker = docker().await?;
    let filters = label_filter(mark);
    let listed = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's containers", source))?;
    // (id, name without the engine's leading `/`, the run's mark)
    let listed: Vec<(String, String, String)> = listed
        .into_iter()
        .filter_map(|c| {
            let name = c.names?.first()?.trim_start_matches('/').to_owned();
            let mark = c.labels?.get(LABEL)?.clone();
            Some((c.id?, name, mark))
        })
        .collect();
    let is_kept = |name: &str| !kept_too && mark.is_none() && name.starts_with(KEPT_PREFIX);
    // The runs whose kept containers stay: their networks stay too.
    let kept_marks: Vec<&str> = listed
        .iter()
        .filter(|(_, name, _)| is_kept(name))
        .map(|(_, _, m)| m.as_str())
        .collect();
    let containers: Vec<&str> = listed
        .iter()
        .filter(|(_, name, m)| mark.is_some() || (!lab_alive(m) && !is_kept(name)))
        .map(|(id, _, _)| id.as_str())
        .collect();
    for id in &containers {
        container::remove(id).await?;
    }
    let networks = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's networks", source))?;
    let networks: Vec<String> = networks
        .into_iter()
        .filter_map(|n| Some((n.id?, n.labels?.get(LABEL)?.clone())))
        .filter(|(_, m)| mark.is_some() || (!lab_alive(m) && !kept_marks.contains(&m.as_str())))
        .map(|(id, _)| id)
        .collect();
    let mut removed_networks = 0;
    for id in &networks {
        // A network a kept container is on stays (the engine refuses while it has endpoints).
        if docker.remove_network(id).await.is_ok() {
            removed_networks += 1;
        }
    }
    Ok((containers.len(), removed_networks))
}

/// The engine's filter for what carries [`LABEL`] — with the value `mark`, or any.
fn label_filter(mark: Option<&str>) -> HashMap<String, Vec<String>> {
    let label = match mark {
        Some(m) => format!("{LABEL}={m}"),
        None => LABEL.to_owned(),
    };
    HashMap::from([("label".to_owned(), vec![label])])
}

/// A private bridge network of the run. Its bridge device on this host is `bridge`.
#[derive(Debug)]
pub struct Network {
    pub name: String,
    pub bridge: String,
    removed: bool,
}

impl Network {
    /// Creates the network, labelled with the run's `mark`.
    pub async fn create(mark: &str) -> Result<Network, ContainerError> {
        let suffix = fnv1a(&format!("{mark}{:?}", Instant::now()));
        let name = format!("fencing-lab-{suffix:08x}");
        let bridge = format!("fl{suffix:08x}");
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(LABEL.to_owned(), mark.to_owned())])),
            options: Some(HashMap::from([(
                "com.docker.network.bridge.name".to_owned(),
                bridge.clone(),
            )])),
            ..Default::default()
        };
        docker()
            .await?
            .create_network(request)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("create the network {name}"), source)
            })?;
        Ok(Network {
            name,
            bridge,
            removed: false,
        })
    }

    /// Leaves the network in place (its kept containers are on it); `lab clean` removes it.
    pub fn keep(mut self) {
        self.removed = true;
    }

    /// Removes the network (its containers must be gone).
    pub async fn remove(mut self) {
        self.removed = true;
        remove_network(&self.name).await;
    }
}

/// Removes the network `name`, if the engine lets it (not while a container is on it).
async fn remove_network(name: &str) {
    if let Ok(docker) = docker().await {
        let _ = docker.remove_network(name).await;
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if !self.removed {
            let name = self.name.clone();
            block_on(async move { remove_network(&name).await });
        }
    }
}

/// How long a container may take to say it is ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a starting container's log is read (each read asks the engine for all of it).
const LOG_POLL: Duration = Duration::from_millis(50);

/// Waits, polled with a deadline, until `container`'s stderr holds `message`; an error if the
/// container stops first (its exit code and the end of its log) or the deadline passes.
///
/// Each poll reads the log to its end (the engine's log without following). testcontainers' own
/// wait follows one log stream, and a CI run saw that stream end at once with no line at all
/// while the container was starting ("End of stream reached before finding message: []"): the
/// container never got the chance to say it was ready.
pub async fn until_logged(
    container: &Container,
    message: &str,
    timeout: Duration,
) -> Result<(), ContainerError> {
    let what = format!("the container logs {message:?}");
    let logged = crate::wait::until_every(&what, timeout, LOG_POLL, || async {
        if container.stderr().await?.contains(message) {
            return Ok(true);
        }
        match container.state().await? {
            (_, None) => Ok(false),
            (_, Some(code)) => Err(ContainerError::Cli {
                what: "the start".into(),
                detail: format!("it stopped with exit code {code} before it logged {message:?}"),
            }),
        }
    })
    .await;
    if let Err(e) = logged {
        let why = chain(&e);
        let log = container.stderr().await.unwrap_or_default();
        return Err(ContainerError::Cli {
            what: format!("start container {}", container.id()),
            detail: format!("{why}; the end of its log:\n{}", last_lines(&log, 10)),
        });
    }
    Ok(())
}

/// The last `n` lines of `text`, joined again.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Options for `database` as `user` over TCP to `ip`'s PostgreSQL port.
fn tcp_options(ip: IpAddr, database: &str, user: &str) -> PgConnectOptions {
    PgConnectOptions::new_without_pgpass()
        .host(&ip.to_string())
        .port(PG_PORT)
        .username(user)
        .database(database)
        .application_name("fencing-lab")
}

/// A PostgreSQL server in a container on a [`Network`]: initdb'd inside, trusting the network's
/// hosts (it is private), logging every statement with its time and application name, keeping
/// commit timestamps (the chaos checker orders writes by commit).
pub struct PgContainer {
    container: Container,
    pub ip: IpAddr,
}

impl PgContainer {
    /// Starts it from `image` on `network`; returns once it accepts connections.
    pub async fn start(
        image: &Image,
        network: &Network,
        mark: &str,
    ) -> Result<PgContainer, ContainerError> {
        let bin = format!("/usr/lib/postgresql/{}/bin", image.major);
        // initdb only on the first start: a restart (after a crash, F8) runs the same command
        // and recovers the data directory the container's own layer kept.
        let script = format!(
            "{{ [ -s /tmp/pg/PG_VERSION ] || {{ {bin}/initdb -D /tmp/pg -U lab -A trust -E UTF8 \
                 --locale=C --no-sync >/dev/null \
               && echo 'host all all 0.0.0.0/0 trust' >> /tmp/pg/pg_hba.conf; }}; }} \
             && exec {bin}/postgres -D /tmp/pg -k /tmp -c listen_addresses='*' \
                -c log_line_prefix='%m [%a] ' -c log_statement=all -c track_commit_timestamp=on"
        );
        let container = Container::start(&Spec {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), script],
            user: Some("postgres".into()),
            network: Some(network.name.clone()),
            mark: mark.to_owned(),
            ..Spec::default()
        })
        .await?;
        until_logged(
            &container,
            "database system is ready to accept connections",
            STARTUP_TIMEOUT,
        )
        .await?;
        let ip = container.ip().await?;
        Ok(PgContainer { container, ip })
    }

    /// Connection options for `database` as `user`, over TCP to the container's address.
    pub fn connect_options(&self, database: &str, user: &str) -> PgConnectOptions {
        tcp_options(self.ip, database, user)
    }

    /// The server's log so far (its stderr).
    pub async fn log(&self) -> String {
        self.container.stderr().await.unwrap_or_default()
    }

    /// The server's whole log, across restarts, as the engine keeps it.
    pub async fn full_log(&self) -> String {
        self.container.stderr().await.unwrap_or_default()
    }

    /// The container's id, as `docker ps` shows it.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// The postmaster's pid as this host sees it (the container's first process), while it runs.
    pub async fn postmaster_pid(&self) -> Option<u32> {
        self.container.pid().await
    }

    /// A crash and a restart on the same data: SIGQUIT to the postmaster, sent by the engine
    /// (immediate shutdown — every backend quits, no checkpoint), then SIGKILL if it lingers past
    /// `timeout` (`process::container::stop`); once the container has stopped, it is started
    /// again, recovers its data directory from the WAL, and this returns when it accepts
    /// connections (its address is read again: the network may give it another).
    pub async fn crash_restart(&mut self, timeout: Duration) -> Result<(), ContainerError> {
        // The engine signals the container's first process: the postmaster.
        signals::stop(
            &docker().await?,
            self.container.id(),
            &[(nix::sys::signal::Signal::SIGQUIT, timeout)],
        )
        .await?;
        self.container.restart().await?;
        self.ip = self.container.ip().await?;
        let opts = self.connect_options("postgres", "lab");
        crate::wait::until(
            "the restarted container accepts connections",
            timeout,
            || {
                let opts = opts.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        <sqlx::PgConnection as sqlx::Connection>::connect_with(&opts)
                            .await
                            .is_ok(),
                    )
                }
            },
        )
        .await
        .map_err(|e| ContainerError::Cli {
            what: "restart the container".into(),
            detail: e.to_string(),
        })?;
        Ok(())
    }

    /// Runs `script` with `sh -c` inside the container: its exit code and its output (stdout
    /// and stderr, trimmed).
    pub async fn shell(&self, script: &str) -> Result<(i32, String), ContainerError> {
        shell(self.container.id(), script).await
    }

    /// Stops and removes the container.
    pub async fn remove(self) {
        let _ = self.container.remove().await;
    }

    /// Stops the container and leaves it in place, renamed `fencing-lab-kept-<id>` so that the
    /// next run leaves it alone (`lab clean` removes it): a kept or failing run.
    pub async fn stop_and_keep(self) {
        let id = self.container.id().to_owned();
        let name = format!("{KEPT_PREFIX}{}", &id[..12.min(id.len())]);
        let _ = self.container.keep(&name, Duration::from_secs(5)).await;
    }
}

/// A request held in the network: this host drops every packet of one TCP connection — from
/// its source port `sport` to `dst` — until the hold is lifted; then TCP's next retransmission
/// delivers what was sent meanwhile. The request left the client when the client sent it and
/// reaches the server only after [`Hold::lift`]: what a partition of that length, or a network
/// that delays it, does to a request in flight.
///
/// Why not netem: this machine kind's kernel has no `sch_netem` (nor `sch_prio`, nor TC actions);
/// `tc qdisc add … netem` answers "Specified qdisc kind is unknown". The hold is an iptables rule
/// in the host's OUTPUT chain, commented with the run's mark so that a lab killed outright leaves
/// nothing that [`remove_labelled`] cannot find.
#[derive(Debug)]
pub struct Hold {
    rule: Vec<String>,
    lifted: bool,
}

impl Hold {
    /// Starts holding; returns the hold and the rule as iptables lists it.
    pub async fn start(
        dst: IpAddr,
        sport: u16,
        mark: &str,
    ) -> Result<(Hold, String), ContainerError> {
        let rule: Vec<String> = [
            "OUTPUT",
            "-d",
            &dst.to_string(),
            "-p",
            "tcp",
            "--sport",
            &sport.to_string(),
            "-m",
            "comment",
            "--comment",
            &format!("{LABEL}={mark}"),
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut add = vec!["-I"];
        add.extend(rule.iter().map(String::as_str));
        run("iptables -I", "iptables", &add, CLI_TIMEOUT).await?;
        let hold = Hold {
            rule,
            lifted: false,
        };
        let shown = hold.listed().await;
        Ok((hold, shown))
    }

    /// The rule with its counters, as `iptables -L OUTPUT -v -n` lists it.
    pub async fn listed(&self) -> String {
        let listing = run(
            "iptables -L",
            "iptables",
            &["-L", "OUTPUT", "-v", "-n", "-x"],
            CLI_TIMEOUT,
        )
        .await
        .unwrap_or_default();
        let mark = self.rule.iter().rev().nth(2).cloned().unwrap_or_default();
        listing
            .lines()
            .find(|l| l.contains(&mark))
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Lifts the hold: the next retransmission gets through.
    pub async fn lift(mut self) -> Result<(), ContainerError> {
        self.lifted = true;
        let mut del = vec!["-D"];
        del.extend(self.rule.iter().map(String::as_str));
        run("iptables -D", "iptables", &del, CLI_TIMEOUT)
            .await
            .map(|_| ())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.lifted {
            let _ = Spawn::new("iptables -D", "iptables")
                .arg("-D")
                .args(&self.rule)
                .output_blocking();
        }
    }
}

/// The TCP connection of this host from `sport` to `dst` as `ss -tin` reports it, reduced to
/// what says whether and when it retransmits: its state, the bytes in its send queue, and the
/// kernel's retransmission figures (`rto` and `lastsnd` in ms, `backoff` the number of doublings
/// of the timeout). Empty when there is no such connection.
pub async fn tcp_state(dst: IpAddr, sport: u16) -> String {
    let filter = format!("sport = :{sport}");
    let dst = dst.to_string();
    let line = run(
        "ss -tin",
        "ss",
        &["-tinH", "state", "all", "dst", &dst, &filter],
        CLI_TIMEOUT,
    )
    .await
    .unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    let [state, _recv_q, send_q, ..] = words[..] else {
        return String::new();
    };
    const KEPT: [&str; 6] = [
        "rto:", "backoff:", "retrans:", "unacked:", "lastsnd:", "notsent:",
    ];
    let kept = words
        .iter()
        .filter(|w| KEPT.iter().any(|k| w.starts_with(k)));
    std::iter::once(format!("{state} send-q:{send_q}"))
        .chain(kept.map(|w| w.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Removes every container, network and network hold that this process's labs made (run marks
/// `<this pid>-…`): for a process a signal is stopping, whose labs will not shut down (a test
/// process at its timeout). How many containers.
pub async fn remove_this_process() -> usize {
    let prefix = format!("{}-", std::process::id());
    let filters = label_filter(None);
    let mut marks: Vec<String> = Vec::new();
    if let Ok(docker) = docker().await {
        let mut labels: Vec<HashMap<String, String>> = Vec::new();
        if let Ok(listed) = docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
        {
            labels.extend(listed.into_iter().filter_map(|c| c.labels));
        }
        if let Ok(listed) = docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::new().filters(&filters).build(),
            ))
            .await
        {
            labels.extend(listed.into_iter().filter_map(|n| n.labels));
        }
        for mark in labels.iter().filter_map(|l| l.get(LABEL)) {
            if mark.starts_with(&prefix) && !marks.contains(mark) {
                marks.push(mark.clone());
            }
        }
    }
    let mut removed = 0;
    for mark in &marks {
        if let Ok((c, _)) = remove_labelled(Some(mark), false).await {
            removed += c;
        }
    }
    // Every hold of this process's labs: the needle is the mark's prefix.
    remove_held_rules(Some(&prefix)).await;
    removed
}

/// Removes the hold rules with the lab's comment — this run's (`mark`), or any run's when `None`
/// (what a lab killed outright left); how many.
pub async fn remove_held_rules(mark: Option<&str>) -> usize {
    let needle = match mark {
        Some(m) => format!("{LABEL}={m}"),
        None => LABEL.to_owned(),
    };
    let rules = run("iptables -S", "iptables", &["-S", "OUTPUT"], CLI_TIMEOUT)
        .await
        .unwrap_or_default();
    let mut removed = 0;
    let dead_lab = |line: &str| {
        line.split(&format!("{LABEL}="))
            .nth(1)
            .and_then(|rest| rest.split(['"', ' ']).next())
            .is_some_and(|m| !lab_alive(m))
    };
    for line in rules
        .lines()
        .filter(|l| l.contains(&needle) && l.starts_with("-A ") && (mark.is_some() || dead_lab(l)))
    {
        let args: Vec<String> = line[3..]
            .split_whitespace()
            .map(|a| a.trim_matches('"').to_owned())
            .collect();
        let mut del = vec!["-D".to_owned()];
        del.extend(args);
        let del: Vec<&str> = del.iter().map(String::as_str).collect();
        if run("iptables -D", "iptables", &del, CLI_TIMEOUT)
            .await
            .is_ok()
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_are_stable_and_follow_the_recipe() {
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_ne!(fnv1a("v1|bookworm|a"), fnv1a("v1|bookworm|b"));
        assert_eq!(suite_for(15), Some("bookworm"));
        assert_eq!(suite_for(14), None);
    }
}
