//! One container of the lab and the connection to the Docker engine, both through the engine's
//! API (bollard, over its Unix socket; `DOCKER_HOST=unix://…` names another). A [`Container`]
//! is a value whose `Drop` removes it, as testcontainers' are — and, unlike those, one that can
//! be kept ([`Container::keep`]: a kept or failing run leaves it for inspection) without a second
//! handle on it. Signals to it and to its processes go through `harness::process::in_container`.
//! Nothing here runs the `docker` command.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    RenameContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::{ClientVersion, Docker};
use futures_util::StreamExt as _;

use super::{ContainerError, LABEL, TMP_LABEL};

/// How long one request to the engine may take (an image's import has its own deadline).
pub(crate) const ENGINE_TIMEOUT: Duration = Duration::from_secs(60);

/// The API version this engine speaks, asked once (an older engine refuses a newer client's).
static VERSION: OnceLock<ClientVersion> = OnceLock::new();

/// A connection to the Docker engine whose requests time out after `timeout`. A new one each
/// time: a connection pool lives on the runtime that made it, and the lab's tests and `Drop`s
/// run on several.
pub(crate) async fn docker_with(timeout: Duration) -> Result<Docker, ContainerError> {
    let connect = |version: &ClientVersion| {
        let path = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| h.starts_with("unix://"))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
        Docker::connect_with_unix(&path, timeout.as_secs(), version)
            .map_err(|source| ContainerError::engine("connect to the Docker engine", source))
    };
    if let Some(version) = VERSION.get() {
        return connect(version);
    }
    let docker = connect(bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await
        .map_err(|source| ContainerError::engine("ask the Docker engine its version", source))?;
    let _ = VERSION.set(docker.client_version());
    Ok(docker)
}

/// A connection to the Docker engine, for `harness::process::in_container`'s verbs.
pub async fn docker() -> Result<Docker, ContainerError> {
    docker_with(ENGINE_TIMEOUT).await
}

/// Runs `job` to its end, blocking the calling thread: for `Drop`, which may run inside a
/// runtime (where blocking on a future would panic) or outside any. It gets a thread and a
/// runtime of its own either way. `None` if that runtime could not be made.
pub(crate) fn block_on<T: Send>(job: impl Future<Output = T> + Send) -> Option<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            Some(runtime.block_on(job))
        })
        .join()
        .ok()
        .flatten()
    })
}

/// What a container is made of: the lab's containers differ only in these.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The image's reference (`repo:tag`), built here (the engine never pulls one).
    pub image: String,
    pub cmd: Vec<String>,
    /// The user its command runs as (`None`: the image's).
    pub user: Option<String>,
    /// The network it is on (`None`: the engine's default bridge).
    pub network: Option<String>,
    /// The run's mark, its [`LABEL`].
    pub mark: String,
    /// Its name (`None`: the engine makes one up); also its host name when set.
    pub name: Option<String>,
    /// Capabilities beyond the engine's default set (`NET_ADMIN` for routes of its own).
    pub cap_add: Vec<String>,
    /// Host directories mounted in it, `host:container:ro` as the engine spells them (RL2's
    /// clock shim). The engine must run on this host, as the lab's network faults need anyway.
    pub binds: Vec<String>,
    /// Directories that are file systems in memory (tmpfs) inside it: where its servers keep
    /// their data, so that their writes and fsyncs do not go through the engine's storage driver
    /// — here fuse-overlayfs, a FUSE daemon per container, which took a fifth of the CPU while the
    /// container tests ran (`perf record -a`). A tmpfs is emptied when the container stops: only
    /// for a container that is never started again on the same data (not
    /// [`super::PgContainer`], whose crash and restart recover its data directory).
    pub tmpfs: Vec<String>,
}

/// The mount options of a [`Spec::tmpfs`] directory: writable by every user as `/tmp` is, and
/// bounded (a server that fills it fails there, not the machine).
const TMPFS_OPTIONS: &str = "rw,exec,nosuid,nodev,size=2g,mode=1777";

/// A container of the lab: removed (with its volumes) on drop, unless kept.
#[derive(Debug)]
pub struct Container {
    id: String,
    network: Option<String>,
    removed: bool,
}

impl Container {
    /// Creates the container labelled with the run's mark and starts it. Returns once the
    /// engine has started its first process; on error nothing is left.
    pub async fn start(spec: &Spec) -> Result<Container, ContainerError> {
        let docker = docker().await?;
        let mut options = CreateContainerOptionsBuilder::new();
        if let Some(name) = &spec.name {
            options = options.name(name);
        }
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            user: spec.user.clone(),
            hostname: spec.name.clone(),
            labels: Some(HashMap::from([
                (LABEL.to_owned(), spec.mark.clone()),
                (
                    TMP_LABEL.to_owned(),
                    std::env::temp_dir().display().to_string(),
                ),
            ])),
            host_config: Some(HostConfig {
                network_mode: spec.network.clone(),
                cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
                binds: (!spec.binds.is_empty()).then(|| spec.binds.clone()),
                tmpfs: (!spec.tmpfs.is_empty()).then(|| {
                    spec.tmpfs
                        .iter()
                        .map(|dir| (dir.clone(), TMPFS_OPTIONS.to_owned()))
                        .collect()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(Some(options.build()), body)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("create a container of {}", spec.image), source)
            })?;
        let container = Container {
            id: created.id,
            network: spec.network.clone(),
            removed: false,
        };
        // Dropped on error: removed.
        container.restart().await?;
        Ok(container)
    }

    /// The container's id, as the engine shows it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Starts the stopped container again, its file system as it was. Returns once the engine
    /// has started its first process.
    pub async fn restart(&self) -> Result<(), ContainerError> {
        docker()
            .await?
            .start_container(&self.id, None)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("start container {}", self.id), source)
            })
    }

    /// Pauses every process of it (the engine's cgroup freezer): the server neither answers nor
    /// acts, and what clients send waits in its sockets. Returns once the engine says paused.
    /// Removing or keeping it unpauses it first, so that no path leaves it frozen.
    pub async fn pause(&self) -> Result<(), ContainerError> {
        docker()
            .await?
            .pause_container(&self.id)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("pause container {}", self.id), source)
            })
    }

    /// Lets a paused container run on.
    pub async fn unpause(&self) -> Result<(), ContainerError> {
        docker()
            .await?
            .unpause_container(&self.id)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("unpause container {}", self.id), source)
            })
    }

    /// Whether its first process runs, and its exit code once it has exited.
    pub async fn state(&self) -> Result<(bool, Option<i64>), ContainerError> {
        let inspected = docker()
            .await?
            .inspect_container(&self.id, None)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("inspect container {}", self.id), source)
            })?;
        let state = inspected.state.unwrap_or_default();
        let running = state.running.unwrap_or(false);
        Ok((running, state.exit_code.filter(|_| !running)))
    }

    /// Its first process's pid as this host sees it, while it runs.
    pub async fn pid(&self) -> Option<u32> {
        let inspected = docker()
            .await
            .ok()?
            .inspect_container(&self.id, None)
            .await
            .ok()?;
        inspected
            .state?
            .pid
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|&pid| pid > 0)
    }

    /// Its address on its network.
    pub async fn ip(&self) -> Result<IpAddr, ContainerError> {
        let inspected = docker()
            .await?
            .inspect_container(&self.id, None)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("inspect container {}", self.id), source)
            })?;
        let network = self.network.as_deref().unwrap_or("bridge");
        inspected
            .network_settings
            .and_then(|s| s.networks)
            .and_then(|mut n| n.remove(network))
            .and_then(|n| n.ip_address)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| ContainerError::Cli {
                what: format!("the address of container {}", self.id),
                detail: format!("the engine shows none on network {network}"),
            })
    }

    /// Its stdout and stderr as the engine keeps them, across restarts (from `since` on, all
    /// of it for `None`).
    pub async fn logs(
        &self,
        since: Option<SystemTime>,
    ) -> Result<(String, String), ContainerError> {
        let since = since.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        // The engine takes whole seconds: ask from the second before, with each line's time,
        // and keep the lines from `since` on.
        let mut options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(since.is_some());
        if let Some(since) = since {
            options = options.since(i32::try_from(since.as_secs()).unwrap_or(i32::MAX));
        }
        let docker = docker().await?;
        let mut stream = docker.logs(&self.id, Some(options.build()));
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|source| {
                ContainerError::engine(format!("read the log of container {}", self.id), source)
            })?;
            let (sink, bytes) = match &chunk {
                bollard::container::LogOutput::StdErr { message } => (&mut stderr, message),
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::Console { message } => (&mut stdout, message),
                bollard::container::LogOutput::StdIn { .. } => continue,
            };
            match since {
                None => sink.extend_from_slice(bytes),
                Some(since) => {
                    let line = String::from_utf8_lossy(bytes);
                    if let Some((at, rest)) = line.split_once(' ') {
                        if logged_at(at).is_none_or(|at| at >= since) {
                            sink.extend_from_slice(rest.as_bytes());
                        }
                    }
                }
            }
        }
        Ok((
            String::from_utf8_lossy(&stdout).into_owned(),
            String::from_utf8_lossy(&stderr).into_owned(),
        ))
    }

    /// Its stderr so far (across restarts).
    pub async fn stderr(&self) -> Result<String, ContainerError> {
        self.logs(None).await.map(|(_, stderr)| stderr)
    }

    /// Stops it (SIGTERM, then SIGKILL after `grace`, as `docker stop` does — a removal or a
    /// keep, not a fault), renames it `name` and leaves it in place: this value no longer
    /// removes it. Returns once the engine has renamed it.
    pub async fn keep(mut self, name: &str, grace: Duration) -> Result<(), ContainerError> {
        self.removed = true;
        let docker = docker().await?;
        // A paused container is let run first: a stop would wait on its frozen processes.
        let _ = docker.unpause_container(&self.id).await;
        let stop = StopContainerOptionsBuilder::new()
            .t(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX))
            .build();
        let _ = docker.stop_container(&self.id, Some(stop)).await;
        docker
            .rename_container(
                &self.id,
                RenameContainerOptionsBuilder::new().name(name).build(),
            )
            .await
            .map_err(|source| {
                ContainerError::engine(format!("rename container {}", self.id), source)
            })
    }

    /// Removes it, running or not, with its anonymous volumes.
    pub async fn remove(mut self) -> Result<(), ContainerError> {
        self.removed = true;
        remove(&self.id).await
    }
}

/// Removes the container `id`, running or not, with its anonymous volumes; one already gone
/// (another sweep removed it) counts as removed, and one whose removal another sweep has under
/// way (the engine answers 409) is waited for until it is gone: two labs that find the same
/// leftovers at once (`lab clean` beside a starting `lab run`) both end with it removed.
pub(crate) async fn remove(id: &str) -> Result<(), ContainerError> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    let engine = docker().await?;
    // A paused container (a probe's fault, cut short) is let run first, so that the forced
    // removal's kill reaches it; not paused, the engine refuses this at once.
    let _ = engine.unpause_container(id).await;
    let engine_error = |source| ContainerError::engine(format!("remove container {id}"), source);
    match engine.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => {
            let gone = || async {
                match engine.inspect_container(id, None).await {
                    Ok(_) => Ok(false),
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => Ok(true),
                    Err(e) => Err(e),
                }
            };
            let what = format!("the removal of container {id} under way elsewhere is done");
            crate::wait::until(&what, Duration::from_secs(60), gone)
                .await
                .map(|_| ())
                .map_err(|e| ContainerError::Cli {
                    what: format!("remove container {id}"),
                    detail: e.to_string(),
                })
        }
        Err(source) => Err(engine_error(source)),
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.removed {
            // The last resort of a panic or an early return: the paths the lab takes on purpose
            // remove or keep it.
            let id = self.id.clone();
            block_on(async move { remove(&id).await });
        }
    }
}

/// The time of a log line as the engine stamps it (RFC 3339 in UTC with up to nine digits of
/// the second: `2024-05-01T12:34:56.123456789Z`), since the epoch.
fn logged_at(stamp: &str) -> Option<Duration> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|n| n.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|n| n.parse::<u64>());
    let (h, min, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let nanos = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").get(..9)?.parse().ok()?
    };
    Some(Duration::new(
        days * 86_400 + h * 3600 + min * 60 + s,
        nanos,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_log_stamps_read_as_times() {
        assert_eq!(logged_at("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
        // date -u -d 2024-05-01T12:34:56Z +%s → 1714566896
        assert_eq!(
            logged_at("2024-05-01T12:34:56.1234Z"),
            Some(Duration::new(1_714_566_896, 123_400_000))
        );
        assert_eq!(
            logged_at("2000-02-29T23:59:59.000000001Z"),
            Some(Duration::new(951_868_799, 1))
        );
        assert_eq!(logged_at("not a time"), None);
    }
}
