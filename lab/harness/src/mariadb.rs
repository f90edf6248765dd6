//! A throwaway MariaDB server from the local binaries, for the U-series (the second source
//! system). Like [`crate::cluster`]: a private temp directory (`fencing-lab-*`, owner-marked),
//! a Unix socket only (`--skip-networking`), run as the unprivileged user `mysql` when the lab runs
//! as root, the parent-death signal set (SIGKILL), stopped and removed on drop.
//!
//! Fault verbs and what is true when they return:
//! - [`MariaServer::create`]: the data directory is initialised and the server accepts
//!   connections on its socket (it sent its protocol greeting).
//! - [`MariaServer::restart_immediate`]: the server was SIGKILLed (no shutdown at all; InnoDB
//!   recovers from its redo log on start), started again, and accepts connections.
//!
//! This module needs no MySQL driver: readiness is the server's greeting on the socket.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::cluster::{die_with_parent, private_dir, PrivateDirError};
use crate::wait;

/// The unprivileged user the server runs as when the lab runs as root.
pub const SERVER_USER: &str = "mysql";
const INSTALL_HINT: &str = "install it (Debian: apt-get install -y mariadb-server)";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum MariaError {
    #[error("no MariaDB server found (mariadbd and mariadb-install-db on PATH or in /usr/sbin): {INSTALL_HINT}")]
    NotFound,
    #[error("the lab runs as root, and MariaDB should not: create the user `{SERVER_USER}` (the mariadb-server package does)")]
    NoServerUser,
    #[error("failed to {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("mariadb-install-db failed: {0}")]
    Install(String),
    #[error("the MariaDB server did not accept connections: {0}")]
    NotReady(String),
}

type Result<T, E = MariaError> = std::result::Result<T, E>;

fn io_err(what: &str) -> impl FnOnce(io::Error) -> MariaError + '_ {
    move |source| MariaError::Io {
        what: what.to_owned(),
        source,
    }
}

/// The located MariaDB programs.
#[derive(Debug, Clone)]
pub struct MariaBinaries {
    pub server: PathBuf,
    pub install_db: PathBuf,
    /// The command-line client (`mariadb`), used as a separate client process in U2.
    pub client: PathBuf,
    pub version: String,
}

impl MariaBinaries {
    pub fn locate() -> Result<MariaBinaries> {
        let find = |name: &str| -> Option<PathBuf> {
            let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            dirs.extend(
                ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from),
            );
            dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
        };
        let server = find("mariadbd").ok_or(MariaError::NotFound)?;
        let install_db = find("mariadb-install-db").ok_or(MariaError::NotFound)?;
        let client = find("mariadb").ok_or(MariaError::NotFound)?;
        let out = Command::new(&server)
            .arg("--version")
            .output()
            .map_err(io_err("run mariadbd --version"))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(MariaBinaries {
            server,
            install_db,
            client,
            version,
        })
    }
}

/// A running throwaway MariaDB server.
#[derive(Debug)]
pub struct MariaServer {
    bins: MariaBinaries,
    dir: Option<TempDir>,
    root: PathBuf,
    run_as: Option<(u32, u32)>,
    server: Option<Child>,
}

impl MariaServer {
    /// Initialises a data directory and starts the server on a private socket.
    pub async fn create(bins: MariaBinaries) -> Result<MariaServer> {
        let (dir, run_as) = private_dir(SERVER_USER).map_err(|e| match e {
            PrivateDirError::NoUser => MariaError::NoServerUser,
            PrivateDirError::Io { what, source } => MariaError::Io { what, source },
        })?;
        let root = dir.path().to_owned();
        let mut server = MariaServer {
            bins,
            dir: Some(dir),
            root,
            run_as,
            server: None,
        };
        let mut install = tokio::process::Command::new(&server.bins.install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", server.data_dir().display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .current_dir(&server.root)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some((uid, gid)) = run_as {
            install.uid(uid).gid(gid);
        }
        die_with_parent(install.as_std_mut(), Signal::SIGKILL);
        let out = install
            .output()
            .await
            .map_err(io_err("run mariadb-install-db"))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            return Err(MariaError::Install(
                text.lines().last().unwrap_or("no output").to_owned(),
            ));
        }
        server.start().await?;
        Ok(server)
    }

    /// Starts the server; returns once it greets a client on its socket.
    pub async fn start(&mut self) -> Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io_err("open the server log"))?;
        let mut cmd = Command::new(&self.bins.server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--socket={}", self.socket_path().display()))
            .arg(format!(
                "--pid-file={}",
                self.root.join("mariadbd.pid").display()
            ))
            .args([
                "--skip-networking",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-bin",
            ])
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io_err("open the server log"))?)
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        die_with_parent(&mut cmd, Signal::SIGKILL);
        self.server = Some(cmd.spawn().map_err(io_err("start mariadbd"))?);
        let start = Instant::now();
        let socket = self.socket_path();
        loop {
            if greets(&socket) {
                return Ok(());
            }
            if let Some(child) = self.server.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.server = None;
                    return Err(MariaError::NotReady(format!(
                        "mariadbd exited ({status}); see {}",
                        self.log_path().display()
                    )));
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(MariaError::NotReady(format!(
                    "no greeting within {READY_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(wait::POLL_INTERVAL).await;
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL); returns once it has exited.
    pub fn stop(&mut self) {
        let Some(mut child) = self.server.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        if !wait::until_blocking(STOP_TIMEOUT, || {
            matches!(child.try_wait(), Ok(Some(_)) | Err(_))
        }) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, then start again: InnoDB recovers from its redo log.
    pub async fn restart_immediate(&mut self) -> Result<()> {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.start().await
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket_dir().join("mysqld.sock")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.join("server.log")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn binaries(&self) -> &MariaBinaries {
        &self.bins
    }
}

/// Whether a MySQL-protocol server on `socket` sends its greeting.
fn greets(socket: &Path) -> bool {
    let Ok(mut stream) = UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut header = [0u8; 5];
    // A handshake packet: 3-byte length, sequence 0, protocol version 10.
    stream.read_exact(&mut header).is_ok() && header[3] == 0 && header[4] == 10
}

impl Drop for MariaServer {
    fn drop(&mut self) {
        self.stop();
        drop(self.dir.take());
    }
}
