//! A PostgreSQL server in a container ([`PgContainer`]): initdb'd inside on its first start,
//! trusting the private network's hosts, every statement logged; its crash and restart (SIGQUIT
//! through `harness::process::in_container::stop`, then recovery on the same data); and the wait
//! for a starting container to say it is ready ([`until_logged`], polled with a deadline). It
//! sends no signal itself and never sleeps for a state: `harness::process` and `harness::wait`.

use std::net::IpAddr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use super::{
    chain, docker, last_lines, shell, signals, Container, ContainerError, Image, Network, Spec,
    KEPT_PREFIX, PG_PORT,
};

/// How long a container may take to say it is ready.
pub(super) const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
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

/// Options for `database` as `user` over TCP to `ip`'s PostgreSQL port.
pub(super) fn tcp_options(ip: IpAddr, database: &str, user: &str) -> PgConnectOptions {
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
    /// `timeout` (`process::in_container::stop`); once the container has stopped, it is started
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
