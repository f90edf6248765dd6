//! A throwaway PostgreSQL cluster made from the local server binaries (SPEC §4).
//!
//! The cluster lives in a private temp directory (`fencing-lab-*` under the system temp dir):
//! `data/` (the data directory), `sock/` (the Unix socket, mode 0700) and `server.log`. It listens
//! on that socket only; a TCP listener on 127.0.0.1 exists only when asked for. `initdb` and the
//! server refuse to run as root, so when the lab runs as root the server runs as the unprivileged
//! user `postgres`, which must exist.
//!
//! The postmaster is a direct child of the lab, in its own process group (a Ctrl-C at the terminal
//! reaches the lab, which then stops the cluster in order), with the kernel's parent-death signal
//! set to SIGQUIT: if the lab is killed outright, the server shuts down immediately by itself.
//!
//! Fault verbs and what is true when they return:
//! - [`Cluster::create`]: initdb ran and the server accepts connections.
//! - [`Cluster::stop`]: the postmaster process has exited (fast shutdown, escalating to immediate
//!   and then SIGKILL if it lingers).
//! - [`Cluster::restart_immediate`]: the server was stopped without a checkpoint (SIGQUIT, as
//!   `pg_ctl stop -m immediate` does), started again, replayed its WAL and accepts connections.
//!
//! On drop the server is stopped and the directory removed, unless [`Cluster::keep_on_drop`] was
//! called (after a failing run, or with `--keep`), in which case both stay and are named.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tempfile::TempDir;

use crate::wait;

/// The oldest server major version the lab supports.
pub const MIN_MAJOR: u32 = 15;
/// The default port number: it names the socket file (`.s.PGSQL.55426`), and the TCP port
/// when a TCP listener is asked for.
pub const DEFAULT_PORT: u16 = 55426;
/// The bootstrap superuser made by initdb. Only the harness connects as it.
pub const SUPERUSER: &str = "lab";
/// The unprivileged user the server runs as when the lab runs as root.
pub const SERVER_USER: &str = "postgres";
/// The prefix of every cluster directory the lab makes; it marks them as the lab's.
pub const DIR_PREFIX: &str = "fencing-lab-";

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const FAST_STOP_TIMEOUT: Duration = Duration::from_secs(15);
const IMMEDIATE_STOP_TIMEOUT: Duration = Duration::from_secs(5);
const INSTALL_HINT: &str =
    "install the PostgreSQL server (Debian: apt-get install -y postgresql-15) \
                            or pass --pg-bindir DIR";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (initdb and postgres, version >= {MIN_MAJOR}) found on PATH, \
         via pg_config --bindir or under /usr/lib/postgresql/*/bin: {INSTALL_HINT}"
    )]
    NotFound,
    #[error("--pg-bindir {0}: no initdb and postgres executables there: {INSTALL_HINT}")]
    NotInBindir(PathBuf),
    #[error(
        "PostgreSQL {version} in {bindir} is older than the supported {MIN_MAJOR}: {INSTALL_HINT}"
    )]
    Unsupported { bindir: PathBuf, version: String },
    #[error(
        "the lab runs as root, and PostgreSQL will not: create the unprivileged user \
         `{SERVER_USER}` (useradd --system {SERVER_USER}) or run the lab as a normal user"
    )]
    NoServerUser,
    #[error("failed to {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("initdb failed ({status}); its output:\n{output}")]
    Initdb { status: ExitStatus, output: String },
    #[error("the server exited during start-up ({status}): {reason}")]
    StartFailed { status: ExitStatus, reason: String },
    #[error("the server did not accept connections within {after:?}; end of {log}:\n{tail}")]
    NotReady {
        after: Duration,
        log: PathBuf,
        tail: String,
    },
}

type Result<T, E = ClusterError> = std::result::Result<T, E>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

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
    /// `pg_config --bindir`, or under `/usr/lib/postgresql/*/bin`, newest major first.
    pub fn locate(explicit: Option<&Path>) -> Result<PgBinaries> {
        if let Some(dir) = explicit {
            let bins = Self::probe(dir).ok_or_else(|| ClusterError::NotInBindir(dir.to_owned()))?;
            if bins.major < MIN_MAJOR {
                return Err(ClusterError::Unsupported {
                    bindir: bins.bindir,
                    version: bins.version,
                });
            }
            return Ok(bins);
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        if let Ok(out) = Command::new("pg_config")
            .arg("--bindir")
            .stderr(Stdio::null())
            .output()
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
            .ok_or(ClusterError::NotFound)
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
        let out = Command::new(&postgres).arg("--version").output().ok()?;
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
}

impl ClusterConfig {
    pub fn new(bins: PgBinaries) -> Self {
        ClusterConfig {
            bins,
            port: DEFAULT_PORT,
            listen_tcp: false,
            max_connections: 100,
        }
    }
}

/// The user the server runs as, when it is not the lab's own.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: Uid,
    gid: Gid,
}

/// A running (or stopped) throwaway cluster. See the module docs for the fault verbs.
#[derive(Debug)]
pub struct Cluster {
    cfg: ClusterConfig,
    dir: Option<TempDir>,
    root: PathBuf,
    run_as: Option<RunAs>,
    postmaster: Option<Child>,
    keep: bool,
}

impl Cluster {
    /// Makes a new cluster in a fresh temp directory and starts it. On error nothing is left
    /// behind (the directory is removed, a started server stopped).
    pub async fn create(cfg: ClusterConfig) -> Result<Cluster> {
        let (dir, run_as) = private_dir(SERVER_USER).map_err(|e| match e {
            PrivateDirError::NoUser => ClusterError::NoServerUser,
            PrivateDirError::Io { what, source } => ClusterError::Io { what, source },
        })?;
        let run_as = run_as.map(|(uid, gid)| RunAs {
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(gid),
        });
        let root = dir.path().to_owned();
        let mut cluster = Cluster {
            cfg,
            dir: Some(dir),
            root,
            run_as,
            postmaster: None,
            keep: false,
        };
        cluster.initdb().await?;
        cluster.start().await?;
        Ok(cluster)
    }

    async fn initdb(&self) -> Result<()> {
        let mut cmd = tokio::process::Command::new(self.cfg.bins.bin("initdb"));
        cmd.arg("-D")
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
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(who) = self.run_as {
            cmd.uid(who.uid.as_raw()).gid(who.gid.as_raw());
        }
        die_with_parent(cmd.as_std_mut(), Signal::SIGKILL);
        let out = cmd.output().await.map_err(io_err("run initdb"))?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(ClusterError::Initdb {
                status: out.status,
                output,
            });
        }
        Ok(())
    }

    /// Starts the server; returns once it accepts connections.
    pub async fn start(&mut self) -> Result<()> {
        assert!(self.postmaster.is_none(), "start() on a running cluster");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io_err("open the server log"))?;
        let log2 = log.try_clone().map_err(io_err("open the server log"))?;
        let listen = if self.cfg.listen_tcp { "127.0.0.1" } else { "" };
        let mut cmd = Command::new(self.cfg.bins.bin("postgres"));
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-k")
            .arg(self.socket_dir())
            .arg("-p")
            .arg(self.cfg.port.to_string())
            .arg("-c")
            .arg(format!("listen_addresses={listen}"))
            .arg("-c")
            .arg(format!("max_connections={}", self.cfg.max_connections))
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a terminal's Ctrl-C goes to the lab, which stops us in order.
            .process_group(0);
        if let Some(who) = self.run_as {
            cmd.uid(who.uid.as_raw()).gid(who.gid.as_raw());
        }
        die_with_parent(&mut cmd, Signal::SIGQUIT);
        let child = cmd.spawn().map_err(io_err("start the postgres server"))?;
        self.postmaster = Some(child);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        let opts = self.connect_options("postgres", SUPERUSER);
        loop {
            let attempt =
                tokio::time::timeout(Duration::from_secs(5), PgConnection::connect_with(&opts));
            if let Ok(Ok(conn)) = attempt.await {
                let _ = conn.close().await;
                return Ok(());
            }
            let child = self.postmaster.as_mut().expect("started");
            if let Ok(Some(status)) = child.try_wait() {
                self.postmaster = None;
                return Err(ClusterError::StartFailed {
                    status,
                    reason: self.start_failure(),
                });
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(ClusterError::NotReady {
                    after: start.elapsed(),
                    log: self.log_path(),
                    tail: self.log_tail(),
                });
            }
            tokio::time::sleep(wait::POLL_INTERVAL).await;
        }
    }

    /// Stops the server: fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL, each
    /// after a deadline. Returns once the postmaster has exited. A no-op when it is not running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.postmaster.take() else {
            return;
        };
        let pid = Pid::from_raw(child.id() as i32);
        for (signal, timeout) in [
            (Signal::SIGINT, FAST_STOP_TIMEOUT),
            (Signal::SIGQUIT, IMMEDIATE_STOP_TIMEOUT),
        ] {
            let _ = kill(pid, signal);
            if wait::until_blocking(timeout, || matches!(child.try_wait(), Ok(Some(_)) | Err(_))) {
                return;
            }
        }
        // The postmaster leads its own process group: take its backends down with it.
        let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the server without a checkpoint (SIGQUIT to the postmaster: every backend quits at
    /// once, as on a crash) and starts it again. Returns once the restarted server accepts
    /// connections, which means it has replayed its WAL. Open connections do not survive.
    pub async fn restart_immediate(&mut self) -> Result<()> {
        if let Some(mut child) = self.postmaster.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGQUIT);
            let exited = wait::until_blocking(IMMEDIATE_STOP_TIMEOUT, || {
                matches!(child.try_wait(), Ok(Some(_)) | Err(_))
            });
            if !exited {
                let _ = kill(Pid::from_raw(-(child.id() as i32)), Signal::SIGKILL);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.start().await
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

    /// Keep the directory (data, socket, log) after the cluster is dropped. It is marked as kept,
    /// so that later runs leave it alone; `lab clean` removes it.
    pub fn keep_on_drop(&mut self) {
        self.keep = true;
        let _ = fs::write(
            self.root.join(KEPT_FILE),
            "kept on purpose; `lab clean` removes it\n",
        );
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.join("server.log")
    }

    pub fn port(&self) -> u16 {
        self.cfg.port
    }

    pub fn binaries(&self) -> &PgBinaries {
        &self.cfg.bins
    }

    /// The postmaster's pid while it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.postmaster.as_ref().map(Child::id)
    }

    /// The server log's current length: pass it to [`Cluster::log_since`] later.
    pub fn log_len(&self) -> u64 {
        fs::metadata(self.log_path()).map(|m| m.len()).unwrap_or(0)
    }

    /// The server log from byte `offset` on.
    pub fn log_since(&self, offset: u64) -> io::Result<String> {
        let mut file = File::open(self.log_path())?;
        file.seek(SeekFrom::Start(offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(text)
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

    fn log_tail(&self) -> String {
        let text = self.log_since(0).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = self.dir.take() {
            if self.keep {
                let _ = dir.keep();
            }
            // else: dropping the TempDir removes it.
        }
    }
}

/// The file in a cluster directory that names the lab process that made it.
const OWNER_FILE: &str = "lab.owner";
/// The file in a cluster directory that says it was kept on purpose.
const KEPT_FILE: &str = "KEPT";

/// Why [`private_dir`] failed.
#[derive(Debug)]
pub(crate) enum PrivateDirError {
    /// The lab runs as root and the server's unprivileged user does not exist.
    NoUser,
    Io {
        what: String,
        source: io::Error,
    },
}

/// Makes the private home of a throwaway server: a `fencing-lab-*` directory (0700) carrying the
/// owner mark, with a `sock/` directory (0700) inside. When the lab runs as root, both are handed
/// to `server_user` (servers refuse to run as root), whose uid and gid are returned.
pub(crate) fn private_dir(
    server_user: &str,
) -> std::result::Result<(TempDir, Option<(u32, u32)>), PrivateDirError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| PrivateDirError::Io { what, source }
    };
    let run_as = if Uid::effective().is_root() {
        let user = User::from_name(server_user)
            .ok()
            .flatten()
            .ok_or(PrivateDirError::NoUser)?;
        Some((user.uid.as_raw(), user.gid.as_raw()))
    } else {
        None
    };
    let dir = tempfile::Builder::new()
        .prefix(DIR_PREFIX)
        .tempdir()
        .map_err(io("make a temp directory"))?;
    let sock = dir.path().join("sock");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .map_err(io("restrict the directory to 0700"))?;
    // The owner mark: which lab process made it, so that a later run can tell a directory whose
    // lab was killed outright from one still in use.
    mark_owner(dir.path()).map_err(io("mark the directory as the lab's"))?;
    fs::create_dir(&sock).map_err(io("make the socket directory"))?;
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o700))
        .map_err(io("restrict the socket directory to 0700"))?;
    if let Some((uid, gid)) = run_as {
        for path in [dir.path(), sock.as_path()] {
            chown(path, Some(uid), Some(gid))
                .map_err(io("hand the directory to the server user"))?;
        }
    }
    Ok((dir, run_as))
}

/// Writes the owner mark of this lab process into `dir`.
pub(crate) fn mark_owner(dir: &Path) -> io::Result<()> {
    // Whole or not at all (temp file + rename): a concurrent run must never read a half mark and
    // take a live lab's directory for a leftover.
    let mark = owner_mark(std::process::id())
        .ok_or_else(|| io::Error::other("cannot read /proc/self/stat"))?;
    crate::evidence::write_atomically(&dir.join(OWNER_FILE), mark.as_bytes())
}

/// `"<pid> <start time>"` of a process: the pair names it even after its pid is reused.
fn owner_mark(pid: u32) -> Option<String> {
    let stat = procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()?;
    Some(format!("{pid} {}", stat.starttime))
}

/// Why [`remove_leftovers`] removed a cluster directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub dir: PathBuf,
    /// A postmaster that was still running from it and was stopped.
    pub stopped_server: Option<i32>,
    pub was_kept: bool,
}

/// Finds the lab's cluster directories (`fencing-lab-*`) in `temp_dir` whose lab is gone — killed
/// outright, so that it could not clean up — stops a server still running from one (identified
/// by its `postmaster.pid` *and* a command line naming that data directory), and removes them.
/// Directories kept on purpose are removed only with `include_kept` (`lab clean`); those of a
/// lab that is still running never are.
pub fn remove_leftovers(temp_dir: &Path, include_kept: bool) -> Vec<Removed> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(temp_dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_ours = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && dir.join(OWNER_FILE).is_file();
        if !is_ours {
            continue;
        }
        let owner = fs::read_to_string(dir.join(OWNER_FILE)).unwrap_or_default();
        let owner_alive = owner
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse::<u32>().ok())
            .and_then(owner_mark)
            .is_some_and(|mark| mark == owner.trim());
        let was_kept = dir.join(KEPT_FILE).is_file();
        if owner_alive || (was_kept && !include_kept) {
            continue;
        }
        let stopped_server =
            stop_orphan_server(&dir.join("data"), &dir.join("data/postmaster.pid"))
                .or_else(|| stop_orphan_server(&dir.join("data"), &dir.join("mariadbd.pid")));
        if fs::remove_dir_all(&dir).is_ok() {
            removed.push(Removed {
                dir,
                stopped_server,
                was_kept,
            });
        }
    }
    removed
}

/// Stops a postmaster still running from `data` (immediate shutdown, then SIGKILL); its pid.
fn stop_orphan_server(data: &Path, pid_file: &Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(pid_file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let needle = data.to_string_lossy();
    if !String::from_utf8_lossy(&cmdline).contains(needle.as_ref()) {
        return None; // the pid was reused by something else
    }
    let pid_ = Pid::from_raw(pid);
    let _ = kill(pid_, Signal::SIGQUIT);
    // Gone, or a zombie waiting for a parent that is not the lab any more.
    let gone = || {
        procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .map_or(true, |s| s.state == 'Z')
    };
    if !wait::until_blocking(IMMEDIATE_STOP_TIMEOUT, gone) {
        let _ = kill(pid_, Signal::SIGKILL);
        wait::until_blocking(IMMEDIATE_STOP_TIMEOUT, gone);
    }
    Some(pid)
}

/// Arranges for the child to receive `signal` when the lab dies (Linux's parent-death signal),
/// and to exit at once if the lab already died while it was being spawned.
///
/// The kernel sends the signal when the *thread* that spawned the child exits, not the process:
/// spawn from threads that live as long as the lab (the main thread or a runtime worker), never
/// from a short-lived blocking-pool thread.
pub fn die_with_parent(cmd: &mut Command, signal: Signal) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(io::Error::from)?;
            if nix::unistd::getppid() != parent {
                // The lab died while this child was being spawned: do not outlive it.
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}
