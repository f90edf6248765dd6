//! A throwaway PostgreSQL cluster made from the local server binaries.
//!
//! The cluster lives in a [`ServerDir`] (`fencing-lab-*` under the system temp dir): `data/`
//! (the data directory), `sock/` (the Unix socket, mode 0700) and `server.log`. It listens on
//! that socket only; a TCP listener on 127.0.0.1 exists only when asked for. `initdb` and the
//! server refuse to run as root, so when the lab runs as root the server runs as the unprivileged
//! user `postgres`, which must exist.
//!
//! The postmaster is a direct child of the lab, started by `crate::process::Spawn` like every
//! child: its own process group (a Ctrl-C at the terminal reaches the lab, which then stops the
//! cluster in order), the kernel's parent-death signal set to SIGQUIT (if the lab is killed
//! outright, the server shuts down immediately by itself).
//!
//! Fault verbs ([`Server`]) and what is true when they return:
//! - [`Cluster::create`]: initdb ran and the server accepts connections.
//! - `stop`: the postmaster process has exited (fast shutdown, escalating to immediate and then
//!   SIGKILL to its group if it lingers).
//! - `crash`: the postmaster was stopped without a checkpoint (SIGQUIT, as `pg_ctl stop -m
//!   immediate` does) and has exited; `restart_immediate` then starts it again, and returns once
//!   it has replayed its WAL and accepts connections.
//!
//! Stop it with `stop` (async) before dropping it; dropping a running cluster is the last resort
//! of a panic (a blocking immediate shutdown). The directory is removed on drop unless kept
//! (`keep_on_drop`: after a failing run, or with `--keep`), in which case it stays and is named.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use super::{Server, ServerDir, ServerError};
use crate::process::{describe_status, ChildProcess, Spawn, Stream};
use crate::wait;

/// The oldest server major version the lab supports.
pub const MIN_MAJOR: u32 = 15;
/// The default port number: it names the socket file (`.s.PGSQL.55426`), and the TCP port
/// when a TCP listener is asked for.
pub const DEFAULT_PORT: u16 = 55426;
/// The bootstrap superuser made by initdb. Only the harness connects as it.
pub const SUPERUSER: &str = "lab";

/// The Debian suite that ships PostgreSQL `major`: the container images are built from it.
pub fn debian_suite_for(major: u32) -> Option<&'static str> {
    match major {
        13 => Some("bullseye"),
        15 => Some("bookworm"),
        17 => Some("trixie"),
        _ => None,
    }
}
/// The unprivileged user the server runs as when the lab runs as root.
pub const SERVER_USER: &str = "postgres";

const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A clean stop: fast shutdown (SIGINT), then immediate (SIGQUIT), each with its grace period;
/// then SIGKILL to the postmaster's process group.
const STOP_PLAN: &[(Signal, Duration)] = &[
    (Signal::SIGINT, Duration::from_secs(15)),
    (Signal::SIGQUIT, Duration::from_secs(5)),
];
/// A crash: immediate shutdown (SIGQUIT, as `pg_ctl stop -m immediate`: no checkpoint), then
/// SIGKILL to the group if it lingers.
const CRASH_PLAN: &[(Signal, Duration)] = &[(Signal::SIGQUIT, Duration::from_secs(5))];
const INSTALL_HINT: &str =
    "install the PostgreSQL server (Debian: apt-get install -y postgresql-15) or pass --pg-bindir DIR";

fn not_installed(what: String) -> ServerError {
    ServerError::NotInstalled {
        what,
        hint: INSTALL_HINT.into(),
    }
}

type Result<T, E = ServerError> = std::result::Result<T, E>;

/// A located set of server binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    pub bindir: PathBuf,
    /// As `postgres --version` prints it, e.g. `15.18`.
    pub version: String,
    pub major: u32,
}

impl PgBinaries {
    /// Finds the server binaries: `explicit` if given (and then only there), else on PATH, via
    /// `pg_config --bindir`, or under `/usr/lib/postgresql/*/bin`, newest major first. Blocking
    /// (it runs `--version` probes): call it before the runtime starts.
    pub fn locate(explicit: Option<&Path>) -> Result<PgBinaries> {
        if let Some(dir) = explicit {
            let bins = Self::probe(dir).ok_or_else(|| {
                not_installed(format!(
                    "--pg-bindir {}: no initdb and postgres executables there",
                    dir.display()
                ))
            })?;
            if bins.major < MIN_MAJOR {
                return Err(not_installed(format!(
                    "PostgreSQL {} in {} is older than the supported {MIN_MAJOR}",
                    bins.version,
                    bins.bindir.display()
                )));
            }
            return Ok(bins);
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        if let Ok(out) = Spawn::new("pg_config", "pg_config")
            .arg("--bindir")
            .output_blocking()
        {
            if out.status.success() {
                candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
            }
        }
        let mut versioned: Vec<PgBinaries> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Self::probe(&e.path().join("bin")))
            .collect();
        versioned.sort_by_key(|b| std::cmp::Reverse(b.major));
        candidates
            .iter()
            .filter_map(|dir| Self::probe(dir))
            .chain(versioned)
            .find(|bins| bins.major >= MIN_MAJOR)
            .ok_or_else(|| {
                not_installed(format!(
                    "no PostgreSQL server binaries (initdb and postgres, version >= {MIN_MAJOR}) \
                     found on PATH, via pg_config --bindir or under /usr/lib/postgresql/*/bin"
                ))
            })
    }

    /// `Some` when `dir` holds runnable `initdb` and `postgres` and the version can be read.
    fn probe(dir: &Path) -> Option<PgBinaries> {
        if !dir.join("initdb").is_file() {
            return None;
        }
        // Resolve symlinks (e.g. /usr/local/bin/postgres) to the real binaries' directory.
        let postgres = fs::canonicalize(dir.join("postgres")).ok()?;
        let bindir = postgres.parent()?.to_owned();
        if !bindir.join("initdb").is_file() {
            return None;
        }
        let out = Spawn::new("postgres --version", &postgres)
            .arg("--version")
            .output_blocking()
            .ok()?;
        // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text.split_whitespace().nth(2)?.to_owned();
        let major = version
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()?;
        Some(PgBinaries {
            bindir,
            version,
            major,
        })
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// How to make and run a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub bins: PgBinaries,
    pub port: u16,
    /// Also listen on 127.0.0.1:`port`. Off by default: the socket directory is private.
    pub listen_tcp: bool,
    pub max_connections: u32,
    /// `track_commit_timestamp = on`: each transaction's commit time is kept, so that the order
    /// in which writes committed can be read back (`lab chaos`'s checker).
    pub track_commit_timestamp: bool,
}

impl ClusterConfig {
    pub fn new(bins: PgBinaries) -> Self {
        ClusterConfig {
            bins,
            port: DEFAULT_PORT,
            listen_tcp: false,
            max_connections: 100,
            track_commit_timestamp: false,
        }
    }
}

/// A running (or stopped) throwaway cluster. See the module docs for the fault verbs.
#[derive(Debug)]
pub struct Cluster {
    cfg: ClusterConfig,
    postmaster: Option<ChildProcess>,
    dir: ServerDir,
}

impl Cluster {
    /// Makes a new cluster in a fresh private directory and starts it. On error nothing is left
    /// behind (the directory is removed, a started server stopped).
    pub async fn create(cfg: ClusterConfig) -> Result<Cluster> {
        let dir = ServerDir::create(SERVER_USER)?;
        let mut cluster = Cluster {
            cfg,
            postmaster: None,
            dir,
        };
        let made = async {
            cluster.initdb().await?;
            cluster.start().await
        };
        match made.await {
            Ok(()) => Ok(cluster),
            Err(e) => {
                cluster.stop().await;
                Err(e)
            }
        }
    }

    /// A cluster in `dir` that is neither made nor started: a standby fills it with a base
    /// backup (`super::standby`).
    pub(crate) fn unstarted(cfg: ClusterConfig, dir: ServerDir) -> Cluster {
        Cluster {
            cfg,
            postmaster: None,
            dir,
        }
    }

    /// How it was made: a second cluster like it starts from this.
    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }

    /// SIGKILL to the postmaster's whole process group, then reaps it: a lost host (see
    /// `super::standby::lose_host`). Returns the postmaster's exit status.
    pub(crate) async fn kill_group(&mut self) -> Option<std::process::ExitStatus> {
        match self.postmaster.take() {
            Some(mut postmaster) => postmaster.crash().await,
            None => None,
        }
    }

    async fn initdb(&self) -> Result<()> {
        let out = Spawn::new("initdb", self.cfg.bins.bin("initdb"))
            .arg("-D")
            .arg(self.data_dir())
            .args([
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .current_dir(self.root())
            .run_as(self.dir.run_as())
            .output(INITDB_TIMEOUT)
            .await?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(ServerError::Setup {
                program: "initdb".into(),
                status: describe_status(&out.status),
                output,
            });
        }
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<()> {
        #[derive(Debug, thiserror::Error)]
        #[error("the server exited")]
        struct Exited;
        let opts = self.connect_options("postgres", SUPERUSER);
        let postmaster = self.postmaster.as_mut().expect("started");
        let mut status = None;
        let ready = wait::until("the server accepts connections", READY_TIMEOUT, || {
            status = postmaster.try_status();
            let (gone, opts) = (status.is_some(), opts.clone());
            async move {
                if gone {
                    return Err(Exited);
                }
                Ok(match PgConnection::connect_with(&opts).await {
                    Ok(conn) => {
                        let _ = conn.close().await;
                        true
                    }
                    Err(_) => false,
                })
            }
        })
        .await;
        match ready {
            Ok(_) => Ok(()),
            Err(wait::WaitError::Probe { .. }) => {
                self.postmaster = None;
                Err(ServerError::StartFailed {
                    status: status.as_ref().map(describe_status).unwrap_or_default(),
                    reason: self.start_failure(),
                })
            }
            Err(wait::WaitError::TimedOut { after, .. }) => Err(ServerError::NotReady {
                after,
                log: self.log_path(),
                tail: self.dir.log_tail(20),
            }),
        }
    }

    /// Connection options for `database` as `user`, over the private Unix socket.
    pub fn connect_options(&self, database: &str, user: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(self.socket_dir())
            .port(self.cfg.port)
            .username(user)
            .database(database)
            .application_name("fencing-lab")
            .disable_statement_logging()
    }

    /// A superuser connection to the maintenance database `postgres`.
    pub async fn admin(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect_with(&self.connect_options("postgres", SUPERUSER)).await
    }

    /// A small superuser pool on the maintenance database, for observing the server.
    pub async fn admin_pool(&self) -> Result<sqlx::PgPool, sqlx::Error> {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(self.connect_options("postgres", SUPERUSER))
            .await
    }

    pub fn root(&self) -> &Path {
        self.dir.root()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.data_dir()
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.dir.socket_dir()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.log_path()
    }

    pub fn port(&self) -> u16 {
        self.cfg.port
    }

    pub fn binaries(&self) -> &PgBinaries {
        &self.cfg.bins
    }

    /// The postmaster's pid while it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.pid()
    }

    /// The server log's current length: pass it to [`Cluster::log_since`] later.
    pub fn log_len(&self) -> u64 {
        self.dir.log_len()
    }

    /// The server log from byte `offset` on.
    pub fn log_since(&self, offset: u64) -> io::Result<String> {
        self.dir.log_since(offset)
    }

    /// How to start the kept cluster again by hand, for a look inside.
    pub fn restart_hint(&self) -> String {
        format!(
            "{} -D {} -k {} -p {} -c listen_addresses=''",
            self.cfg.bins.bin("postgres").display(),
            self.data_dir().display(),
            self.socket_dir().display(),
            self.cfg.port
        )
    }

    /// The server log's own words for a failed start: its last FATAL line, with a hint for the
    /// common case of a TCP port in use.
    fn start_failure(&self) -> String {
        let text = self.log_since(0).unwrap_or_default();
        let fatal = text
            .lines()
            .rev()
            .find(|l| l.contains("FATAL") || l.contains("could not bind"));
        let line = fatal
            .map_or("nothing in the server log", |l| {
                l.split("  ").last().unwrap_or(l)
            })
            .trim();
        if text.contains("Address already in use") {
            format!(
                "{line}: port {} is in use; pass another --port",
                self.cfg.port
            )
        } else {
            line.to_owned()
        }
    }
}

impl Server for Cluster {
    fn dir(&self) -> &ServerDir {
        &self.dir
    }

    fn dir_mut(&mut self) -> &mut ServerDir {
        &mut self.dir
    }

    fn pid(&self) -> Option<u32> {
        self.postmaster.as_ref().map(ChildProcess::pid)
    }

    /// Starts the postmaster as a direct child of the lab (parent-death signal SIGQUIT: if the
    /// lab is killed outright, the server shuts down immediately by itself); returns once it
    /// accepts connections.
    async fn start(&mut self) -> Result<()> {
        assert!(self.postmaster.is_none(), "start() on a running cluster");
        let log = self.dir.open_log()?;
        let log2 = log.try_clone().map_err(|source| ServerError::Io {
            what: "open the server log".into(),
            source,
        })?;
        let listen = if self.cfg.listen_tcp { "127.0.0.1" } else { "" };
        let postmaster = Spawn::new("postgres", self.cfg.bins.bin("postgres"))
            .arg("-D")
            .arg(self.data_dir())
            .arg("-k")
            .arg(self.socket_dir())
            .arg("-p")
            .arg(self.cfg.port.to_string())
            .arg("-c")
            .arg(format!("listen_addresses={listen}"))
            .arg("-c")
            .arg(format!("max_connections={}", self.cfg.max_connections))
            .arg("-c")
            .arg(format!(
                "track_commit_timestamp={}",
                if self.cfg.track_commit_timestamp {
                    "on"
                } else {
                    "off"
                }
            ))
            .current_dir(self.root())
            .stdout(Stream::File(log))
            .stderr(Stream::File(log2))
            .run_as(self.dir.run_as())
            .death_signal(Signal::SIGQUIT)
            .spawn()?;
        self.postmaster = Some(postmaster);
        self.wait_ready().await
    }

    /// Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL to the postmaster's
    /// group, each after a grace period. Returns once the postmaster has exited.
    async fn stop(&mut self) {
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.stop(STOP_PLAN).await;
        }
    }

    /// SIGQUIT to the postmaster — every backend quits at once, no checkpoint, as on a crash —
    /// and SIGKILL to the group if it lingers. Returns once the postmaster has exited; the next
    /// start replays the WAL.
    async fn crash(&mut self) {
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.stop(CRASH_PLAN).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The last resort (a panic): the paths the lab takes on purpose stopped the server
        // already. Immediate shutdown, so that the directory is not removed under a live server.
        if let Some(postmaster) = self.postmaster.as_mut() {
            postmaster.stop_blocking(CRASH_PLAN);
        }
    }
}

/// The server's TCP timeouts, which decide how long it keeps the session of a client it can no
/// longer reach: its keepalives (`tcp_keepalives_idle`, `_interval`, `_count`: seconds, seconds,
/// probes), for a session with nothing in flight, and `tcp_user_timeout` (ms), for one whose
/// last answer was sent and never acknowledged — keepalives do not probe such a socket, and
/// the kernel retransmits for about 15 minutes before it gives up. `None` gives them back to
/// the system's (Linux: a first probe after 7200 s idle). Set for the whole server (`ALTER
/// SYSTEM`, then a reload) and returned once a session reads them in force — a session opened
/// afterwards, or an idle one at its next statement, has them.
pub async fn set_tcp_timeouts(
    admin: &sqlx::PgPool,
    timeouts: Option<[u32; 4]>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    const NAMES: [&str; 4] = [
        "tcp_keepalives_idle",
        "tcp_keepalives_interval",
        "tcp_keepalives_count",
        "tcp_user_timeout",
    ];
    let values = timeouts;
    for (i, name) in NAMES.iter().enumerate() {
        let statement = match values {
            Some(v) => format!("ALTER SYSTEM SET {name} = {}", v[i]),
            None => format!("ALTER SYSTEM RESET {name}"),
        };
        sqlx::query(&statement)
            .execute(admin)
            .await
            .with_context(|| statement.clone())?;
    }
    sqlx::query("SELECT pg_reload_conf()")
        .execute(admin)
        .await
        .context("reload the server's configuration")?;
    // The reload reaches the sessions asynchronously: read until a session shows the values,
    // or the defaults back (whose value over TCP is the socket's: the system's).
    let wanted = values.map(|v| v.map(|n| n.to_string()));
    wait::until(
        "the server's TCP keepalives in force",
        Duration::from_secs(10),
        || async {
            let shown: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT name, setting, source FROM pg_settings WHERE name = ANY($1)",
            )
            .bind(&NAMES[..])
            .fetch_all(admin)
            .await?;
            Ok::<bool, sqlx::Error>(
                shown.len() == NAMES.len()
                    && shown.iter().all(|(name, setting, source)| match &wanted {
                        None => source == "default",
                        Some(v) => NAMES
                            .iter()
                            .position(|n| n == name)
                            .is_some_and(|i| &v[i] == setting),
                    }),
            )
        },
    )
    .await?;
    Ok(())
}
