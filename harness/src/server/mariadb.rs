//! A throwaway MariaDB server from the local binaries, for the U-series (the second source
//! system). Like [`super::postgres`]: a [`ServerDir`] (`fencing-lab-*`, owner-marked), a Unix
//! socket only (`--skip-networking`), run as the unprivileged user `mysql` when the lab runs as
//! root, started by `crate::process::Spawn` (own process group, parent-death signal SIGKILL).
//!
//! Fault verbs ([`Server`]) and what is true when they return:
//! - [`MariaServer::create`]: the data directory is initialised and the server accepts
//!   connections on its socket (it sent its protocol greeting).
//! - `stop`: SIGTERM (a clean shutdown), SIGKILL after a grace period; the server has exited.
//! - `crash`: SIGKILL (no shutdown at all; InnoDB recovers from its redo log on the next start);
//!   `restart_immediate` then starts it again and returns once it accepts connections.
//!
//! Readiness needs no MySQL driver: it is the server's greeting on the socket.
//! [`MariaServer::connect_options`] gives the driver's options per user and database.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use sqlx::mysql::MySqlConnectOptions;
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

use super::{Server, ServerDir, ServerError};
use crate::process::{describe_status, ChildProcess, Spawn, Stream};
use crate::wait;

/// The unprivileged user the server runs as when the lab runs as root.
pub const SERVER_USER: &str = "mysql";
const INSTALL_HINT: &str = "install it (Debian: apt-get install -y mariadb-server)";
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a greeting may take on a connected socket.
const GREETING_TIMEOUT: Duration = Duration::from_millis(500);
const STOP_PLAN: &[(Signal, Duration)] = &[(Signal::SIGTERM, Duration::from_secs(15))];

type Result<T, E = ServerError> = std::result::Result<T, E>;

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
    /// Finds `mariadbd`, `mariadb-install-db` and `mariadb` on PATH or in the usual places.
    /// Blocking (a `--version` probe): call it before or outside async code paths that must not
    /// block for long.
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
        let missing = || ServerError::NotInstalled {
            what:
                "no MariaDB server found (mariadbd and mariadb-install-db on PATH or in /usr/sbin)"
                    .into(),
            hint: INSTALL_HINT.into(),
        };
        let server = find("mariadbd").ok_or_else(missing)?;
        let install_db = find("mariadb-install-db").ok_or_else(missing)?;
        let client = find("mariadb").ok_or_else(missing)?;
        let out = Spawn::new("mariadbd --version", &server)
            .arg("--version")
            .output_blocking()
            .map_err(|source| ServerError::Io {
                what: "run mariadbd --version".into(),
                source,
            })?;
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
    server: Option<ChildProcess>,
    dir: ServerDir,
    /// Replication's needs: a TCP port on 127.0.0.1 (`None`: the socket only), the server id,
    /// and a binary log.
    replication: Option<ReplicationRole>,
}

/// What a server of a replicated pair runs with ([`super::maria_replica`]).
#[derive(Debug, Clone, Copy)]
pub struct ReplicationRole {
    /// Its TCP port on 127.0.0.1: a replica connects to its primary over TCP.
    pub port: u16,
    /// `--server-id`, distinct within the pair.
    pub server_id: u32,
}

impl MariaServer {
    /// Initialises a data directory and starts the server on a private socket. On error nothing
    /// is left behind.
    pub async fn create(bins: MariaBinaries) -> Result<MariaServer> {
        Self::create_as(bins, None).await
    }

    /// [`MariaServer::create`], listening on 127.0.0.1 as well and keeping a binary log when
    /// `replication` says so.
    pub async fn create_as(
        bins: MariaBinaries,
        replication: Option<ReplicationRole>,
    ) -> Result<MariaServer> {
        let dir = ServerDir::create(SERVER_USER)?;
        let mut server = MariaServer {
            bins,
            server: None,
            dir,
            replication,
        };
        let made = async {
            server.install().await?;
            server.start().await
        };
        match made.await {
            Ok(()) => Ok(server),
            Err(e) => {
                server.stop().await;
                Err(e)
            }
        }
    }

    async fn install(&self) -> Result<()> {
        let out = Spawn::new("mariadb-install-db", &self.bins.install_db)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--tmpdir={}", self.dir.tmp_dir().display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .current_dir(self.root())
            .run_as(self.dir.run_as())
            .output(INSTALL_TIMEOUT)
            .await?;
        if !out.status.success() {
            // Its last lines, stdout and stderr: the reason is rarely on the very last one.
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            return Err(ServerError::Setup {
                program: "mariadb-install-db".into(),
                status: describe_status(&out.status),
                output: lines[lines.len().saturating_sub(15)..].join("\n"),
            });
        }
        Ok(())
    }

    /// Connection options for `database` (if any) as `user`, over the private socket.
    pub fn connect_options(&self, database: Option<&str>, user: &str) -> MySqlConnectOptions {
        let opts = MySqlConnectOptions::new()
            .socket(self.socket_path())
            .username(user);
        match database {
            Some(db) => opts.database(db),
            None => opts,
        }
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.dir.socket_dir()
    }

    /// The command line that connects the `mariadb` client to `database` on this server as
    /// root, for a reader to type.
    pub fn client_command(&self, database: &str) -> String {
        format!(
            "{} --socket={} --user=root {database}",
            self.bins.client.display(),
            self.socket_path().display()
        )
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket_dir().join("mysqld.sock")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.data_dir()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.log_path()
    }

    pub fn root(&self) -> &Path {
        self.dir.root()
    }

    pub fn binaries(&self) -> &MariaBinaries {
        &self.bins
    }
}

/// Whether a MySQL-protocol server on `socket` sends its greeting.
async fn greets(socket: PathBuf) -> bool {
    let greeting = async {
        let mut stream = UnixStream::connect(socket).await?;
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).await?;
        std::io::Result::Ok(header)
    };
    // A handshake packet: 3-byte length, sequence 0, protocol version 10.
    matches!(
        tokio::time::timeout(GREETING_TIMEOUT, greeting).await,
        Ok(Ok(header)) if header[3] == 0 && header[4] == 10
    )
}

impl Server for MariaServer {
    fn dir(&self) -> &ServerDir {
        &self.dir
    }

    fn dir_mut(&mut self) -> &mut ServerDir {
        &mut self.dir
    }

    fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(ChildProcess::pid)
    }

    /// Starts the server; returns once it greets a client on its socket.
    async fn start(&mut self) -> Result<()> {
        let log = self.dir.open_log()?;
        let log2 = log.try_clone().map_err(|source| ServerError::Io {
            what: "open the server log".into(),
            source,
        })?;
        let child = Spawn::new("mariadbd", &self.bins.server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--socket={}", self.socket_path().display()))
            .arg(format!("--tmpdir={}", self.dir.tmp_dir().display()))
            .arg(format!(
                "--pid-file={}",
                self.root().join("mariadbd.pid").display()
            ))
            .args(["--innodb-buffer-pool-size=32M"])
            .args(match self.replication {
                None => vec!["--skip-networking".to_owned(), "--skip-log-bin".to_owned()],
                Some(role) => vec![
                    format!("--port={}", role.port),
                    "--bind-address=127.0.0.1".to_owned(),
                    format!("--server-id={}", role.server_id),
                    "--log-bin=mariadb-bin".to_owned(),
                    "--binlog-format=ROW".to_owned(),
                ],
            })
            .current_dir(self.root())
            .stdout(Stream::File(log))
            .stderr(Stream::File(log2))
            .run_as(self.dir.run_as())
            .spawn()?;
        let socket = self.socket_path();
        let server = self.server.insert(child);
        #[derive(Debug, thiserror::Error)]
        #[error("mariadbd exited")]
        struct Exited;
        let mut status = None;
        let ready = wait::until("MariaDB greets on its socket", READY_TIMEOUT, || {
            status = server.try_status();
            let (gone, socket) = (status.is_some(), socket.clone());
            async move {
                if gone {
                    return Err(Exited);
                }
                Ok(greets(socket).await)
            }
        })
        .await;
        match ready {
            Ok(_) => Ok(()),
            Err(wait::WaitError::Probe { .. }) => {
                self.server = None;
                Err(ServerError::StartFailed {
                    status: status.as_ref().map(describe_status).unwrap_or_default(),
                    reason: format!("see {}", self.log_path().display()),
                })
            }
            Err(wait::WaitError::TimedOut { after, .. }) => Err(ServerError::NotReady {
                after,
                log: self.log_path(),
                tail: self.dir.log_tail(20),
            }),
        }
    }

    /// SIGTERM, then SIGKILL after a grace period; returns once the server has exited.
    async fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop(STOP_PLAN).await;
        }
    }

    /// SIGKILL: no shutdown at all. Returns once the server has exited.
    async fn crash(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.crash().await;
        }
    }
}

impl Drop for MariaServer {
    fn drop(&mut self) {
        // The last resort (a panic): the paths the lab takes on purpose stopped it already.
        if let Some(server) = self.server.as_mut() {
            server.stop_blocking(&[]);
        }
    }
}

/// A local MariaDB server as the lock service of the named-lock stores (`--lease-store
/// mariadb-getlock`): no container, its Unix socket's path as the endpoint. Removed (stopped,
/// its directory deleted) like a container, or stopped and kept for inspection.
struct LocalLockService {
    server: MariaServer,
    settings: Vec<(String, String)>,
}

/// Starts a local MariaDB server for the named locks; returns once it accepts connections.
pub async fn lock_service() -> anyhow::Result<Box<dyn crate::docker::LockService>> {
    let bins = tokio::task::spawn_blocking(MariaBinaries::locate).await??;
    let server = MariaServer::create(bins).await?;
    let settings = vec![
        (
            "wait_timeout".to_owned(),
            "set on each locking connection to the TTL in whole seconds: the server ends a \
             connection silent for that long, and its locks with it"
                .to_owned(),
        ),
        (
            "where".to_owned(),
            format!("a local mariadbd, {}", server.root().display()),
        ),
    ];
    Ok(Box::new(LocalLockService { server, settings }))
}

impl crate::docker::LockService for LocalLockService {
    fn service(&self) -> &str {
        "mariadb"
    }

    fn image_note(&self) -> &str {
        "a local mariadbd from the host's binaries (no container)"
    }

    fn pid(&self) -> crate::hosts::Answer<'_, Option<u32>> {
        let pid = self.server.pid();
        Box::pin(async move { pid })
    }

    fn endpoint(&self) -> String {
        self.server.socket_path().display().to_string()
    }

    fn port(&self) -> u16 {
        0
    }

    fn ip(&self) -> std::net::IpAddr {
        std::net::IpAddr::from([127, 0, 0, 1])
    }

    fn version(&self) -> &str {
        &self.server.bins.version
    }

    fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    fn log(&self) -> crate::hosts::Answer<'_, String> {
        let text = std::fs::read_to_string(self.server.log_path())
            .unwrap_or_else(|e| format!("(no log: {e})"));
        Box::pin(async move { text })
    }

    fn remove(self: Box<Self>) -> crate::hosts::Answer<'static, ()> {
        Box::pin(async move {
            let mut server = self.server;
            server.stop().await;
        })
    }

    fn crash_and_restart(&mut self) -> crate::hosts::Answer<'_, anyhow::Result<()>> {
        Box::pin(async move { Ok(self.server.restart_immediate().await?) })
    }

    fn stop_and_keep(self: Box<Self>) -> crate::hosts::Answer<'static, String> {
        Box::pin(async move {
            let mut server = self.server;
            server.stop().await;
            server.dir.keep();
            format!(
                "the named locks' MariaDB kept at {} (its log: {})",
                server.root().display(),
                server.log_path().display()
            )
        })
    }
}
