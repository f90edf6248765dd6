//! A streaming standby of an embedded cluster (F14): a second [`Cluster`] made by
//! `pg_basebackup` from the primary and replicating from it over the primary's private Unix
//! socket — both directories 0700, no TCP anywhere.
//!
//! Fault verbs and what is true when each returns:
//! - [`Standby::create`]: the base backup was taken, the standby runs and accepts (read-only)
//!   connections, and the primary shows its WAL sender streaming to it.
//! - [`Standby::cut`]: the standby's link to the primary is gone — its WAL receiver stopped
//!   (`primary_conninfo` emptied and reloaded) and the primary's WAL sender for it has exited.
//!   From here on nothing the primary writes reaches it, not even bytes that were about to be
//!   sent: the socket they would travel on is closed.
//! - [`Standby::reconnect`]: the link is back and the primary streams to it again.
//! - [`Standby::promote`]: the standby left recovery and accepts writes (`pg_promote`).
//! - [`lose_host`]: the primary's postmaster and its whole process group were killed with
//!   SIGKILL — every backend, the WAL sender, the WAL writer — as when its machine is lost.
//!
//! The SQL here is the harness's own eyes and hands on replication (settings, LSNs,
//! `pg_stat_replication`), never the system under test's.

use std::fmt;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{PgPool, Row};

use super::{Cluster, Server, ServerDir, ServerError};
use crate::hosts::{Answer, Backend, Host, Hosts, HostsFuture, Restarted};
use crate::process::{describe_status, Spawn};
use crate::wait;

const BASEBACKUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the link may take to go down or come up.
const LINK_TIMEOUT: Duration = Duration::from_secs(30);

/// A WAL position (`X/Y`), comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Parses PostgreSQL's `pg_lsn` text form, `16/B374D848`.
    pub fn parse(text: &str) -> Option<Lsn> {
        let (hi, lo) = text.trim().split_once('/')?;
        let hi = u64::from_str_radix(hi, 16).ok()?;
        let lo = u64::from_str_radix(lo, 16).ok()?;
        Some(Lsn((hi << 32) | lo))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The primary's WAL flushed to its disk so far (`pg_current_wal_flush_lsn`).
pub async fn flush_lsn(primary: &PgPool) -> sqlx::Result<Lsn> {
    let text: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
        .fetch_one(primary)
        .await?;
    Ok(Lsn::parse(&text).unwrap_or(Lsn(0)))
}

/// One row of the primary's `pg_stat_replication`: a WAL sender and its standby.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub application_name: String,
    pub state: String,
    /// `async` or `sync`.
    pub sync_state: String,
}

/// The primary's WAL senders.
pub async fn senders(primary: &PgPool) -> sqlx::Result<Vec<Sender>> {
    let rows = sqlx::query("SELECT application_name, state, sync_state FROM pg_stat_replication")
        .fetch_all(primary)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| Sender {
            application_name: r.get(0),
            state: r.get(1),
            sync_state: r.get(2),
        })
        .collect())
}

/// The pids of the backends of `primary` waiting on `wait_event` (e.g. `SyncRep`: a commit that
/// waits for its synchronous standby).
pub async fn waiting_on(primary: &PgPool, wait_event: &str) -> sqlx::Result<Vec<i32>> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE wait_event = $1 ORDER BY pid")
        .bind(wait_event)
        .fetch_all(primary)
        .await
}

/// Makes `primary` wait, at every commit, for the standby named `name` to have flushed the
/// commit's WAL (`synchronous_standby_names`; `synchronous_commit` stays `on`); `None` makes it
/// asynchronous again. Returns once the setting is in force.
pub async fn set_synchronous_standby(primary: &PgPool, name: Option<&str>) -> sqlx::Result<()> {
    let value = name.map_or_else(String::new, |n| format!("\"{n}\""));
    sqlx::query(&format!(
        "ALTER SYSTEM SET synchronous_standby_names = '{value}'"
    ))
    .execute(primary)
    .await?;
    reload(primary).await
}

async fn reload(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_reload_conf()").execute(pool).await?;
    Ok(())
}

/// Kills `primary` the way a lost machine dies: SIGKILL to its postmaster's whole process group
/// (no shutdown, no checkpoint, no last WAL sent). Returns how waitpid saw the postmaster end.
pub async fn lose_host(primary: &mut Cluster) -> String {
    match primary.kill_group().await {
        Some(status) => describe_status(&status),
        None => "not running".into(),
    }
}

/// A running (or stopped) streaming standby. Stop it like a cluster (`stop`), or through
/// [`Standby::into_cluster`] once promoted.
#[derive(Debug)]
pub struct Standby {
    cluster: Cluster,
    /// Its `application_name` at the primary (`pg_stat_replication`, `synchronous_standby_names`).
    name: String,
    /// How it reaches the primary: restored by [`Standby::reconnect`].
    conninfo: String,
}

impl Standby {
    /// Takes a base backup of `primary` (streaming the WAL it needs) into a fresh private
    /// directory, configures it to stream from `primary` as `name`, starts it and waits until
    /// the primary streams to it. On error nothing is left behind.
    pub async fn create(
        primary: &Cluster,
        primary_admin: &PgPool,
        name: &str,
    ) -> Result<Standby, ServerError> {
        let dir = ServerDir::create(super::postgres::SERVER_USER)?;
        let conninfo = format!(
            "host={} port={} user={} application_name={name}",
            primary.socket_dir().display(),
            primary.port(),
            super::postgres::SUPERUSER
        );
        let mut standby = Standby {
            cluster: Cluster::unstarted(primary.config().clone(), dir),
            name: name.to_owned(),
            conninfo,
        };
        let made = async {
            standby.base_backup(primary).await?;
            standby.cluster.start().await?;
            standby.until_streaming(primary_admin).await
        };
        match made.await {
            Ok(()) => Ok(standby),
            Err(e) => {
                standby.cluster.stop().await;
                Err(e)
            }
        }
    }

    async fn base_backup(&self, primary: &Cluster) -> Result<(), ServerError> {
        let data = self.cluster.data_dir();
        let out = Spawn::new("pg_basebackup", primary.binaries().bin("pg_basebackup"))
            .arg("-D")
            .arg(&data)
            .arg("-d")
            .arg(&self.conninfo)
            .args(["-X", "stream", "-R", "-c", "fast", "--no-sync"])
            .current_dir(self.cluster.root())
            .run_as(self.cluster.dir().run_as())
            .output(BASEBACKUP_TIMEOUT)
            .await?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(ServerError::Setup {
                program: "pg_basebackup".into(),
                status: describe_status(&out.status),
                output,
            });
        }
        // `-R` wrote standby.signal and a primary_conninfo; ours (with the standby's name) comes
        // last and wins. A cut link is retried every 100 ms, not every 5 s, once restored.
        let auto = data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).map_err(|source| ServerError::Io {
            what: format!("read {}", auto.display()),
            source,
        })?;
        conf.push_str(&format!(
            "primary_conninfo = '{}'\nwal_retrieve_retry_interval = '100ms'\n",
            self.conninfo
        ));
        std::fs::write(&auto, conf).map_err(|source| ServerError::Io {
            what: format!("write {}", auto.display()),
            source,
        })
    }

    /// Waits until the primary's WAL sender for this standby is streaming.
    async fn until_streaming(&self, primary_admin: &PgPool) -> Result<(), ServerError> {
        let name = self.name.clone();
        wait::until("the primary streams to the standby", LINK_TIMEOUT, || {
            let name = name.clone();
            async move {
                Ok::<bool, sqlx::Error>(
                    senders(primary_admin)
                        .await?
                        .iter()
                        .any(|s| s.application_name == name && s.state == "streaming"),
                )
            }
        })
        .await
        .map(|_| ())
        .map_err(|e| ServerError::Io {
            what: "see the standby stream".into(),
            source: std::io::Error::other(e.to_string()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The promoted standby, now a primary of its own.
    pub fn into_cluster(self) -> Cluster {
        self.cluster
    }

    /// The WAL it has received from the primary and the WAL it has replayed
    /// (`pg_last_wal_receive_lsn`, `pg_last_wal_replay_lsn`; `None` before any).
    pub async fn lsns(admin: &PgPool) -> sqlx::Result<(Option<Lsn>, Option<Lsn>)> {
        let row =
            sqlx::query("SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text")
                .fetch_one(admin)
                .await?;
        let parse = |v: Option<String>| v.as_deref().and_then(Lsn::parse);
        Ok((parse(row.get(0)), parse(row.get(1))))
    }

    /// Cuts the link to the primary (see the module docs); returns once the standby's WAL
    /// receiver and the primary's WAL sender for it are both gone.
    pub async fn cut(&self, admin: &PgPool, primary_admin: &PgPool) -> sqlx::Result<()> {
        sqlx::query("ALTER SYSTEM SET primary_conninfo = ''")
            .execute(admin)
            .await?;
        reload(admin).await?;
        let name = self.name.clone();
        wait::until(
            "the standby's link to the primary is gone",
            LINK_TIMEOUT,
            || {
                let name = name.clone();
                async move {
                    let receiving: i64 =
                        sqlx::query_scalar("SELECT count(*) FROM pg_stat_wal_receiver")
                            .fetch_one(admin)
                            .await?;
                    let sending = senders(primary_admin)
                        .await?
                        .iter()
                        .any(|s| s.application_name == name);
                    Ok::<bool, sqlx::Error>(receiving == 0 && !sending)
                }
            },
        )
        .await
        .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        Ok(())
    }

    /// Restores the link cut by [`Standby::cut`]; returns once the primary streams to it again.
    pub async fn reconnect(&self, admin: &PgPool, primary_admin: &PgPool) -> sqlx::Result<()> {
        sqlx::query(&format!(
            "ALTER SYSTEM SET primary_conninfo = '{}'",
            self.conninfo
        ))
        .execute(admin)
        .await?;
        reload(admin).await?;
        self.until_streaming(primary_admin)
            .await
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))
    }

    /// Promotes the standby: returns once it has left recovery and accepts writes.
    pub async fn promote(&self, admin: &PgPool) -> sqlx::Result<bool> {
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 60)")
            .fetch_one(admin)
            .await?;
        let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(admin)
            .await?;
        Ok(promoted && !in_recovery)
    }
}

/// A primary and its streaming standby as a lab's hosts (F14), through
/// [`crate::hosts::Hosts`]: the lease database on the primary until [`Replicated::promoted`],
/// on the promoted standby after; the resource's database, which the primary was provisioned
/// with too, stays on the primary.
#[derive(Debug)]
pub struct Replicated {
    pub primary: Cluster,
    pub standby: Standby,
    promoted: bool,
}

impl Replicated {
    pub fn new(primary: Cluster, standby: Standby) -> Replicated {
        Replicated {
            primary,
            standby,
            promoted: false,
        }
    }

    /// The lease database is the standby's from now on: call once [`Standby::promote`] said so.
    pub fn promoted(&mut self) {
        self.promoted = true;
    }

    /// The server that holds `host`'s database now.
    fn server(&self, host: Host) -> &Cluster {
        match host {
            Host::Lease if self.promoted => &self.standby.cluster,
            _ => &self.primary,
        }
    }
}

impl Hosts for Replicated {
    fn backend(&self) -> Backend {
        Backend::Embedded
    }

    fn describe(&self) -> String {
        format!(
            "embedded: primary {} with streaming standby {} ({})",
            self.primary.root().display(),
            self.standby.cluster.root().display(),
            if self.promoted {
                "promoted: the lease store"
            } else {
                "not promoted"
            }
        )
    }

    fn connect_options(&self, host: Host, database: &str, user: &str) -> PgConnectOptions {
        self.server(host).connect_options(database, user)
    }

    fn tcp_host(&self, _: Host) -> Option<String> {
        None
    }

    fn socket(&self) -> (std::path::PathBuf, u16) {
        let lease = self.server(Host::Lease);
        (lease.socket_dir(), lease.port())
    }

    fn crash_and_restart(&mut self, _: Duration) -> HostsFuture<'_, Vec<Restarted>> {
        Box::pin(async move {
            let mut restarted = Vec::new();
            for (server, cluster) in [
                ("the primary", &mut self.primary),
                ("the standby", &mut self.standby.cluster),
            ] {
                let offset = cluster.log_len();
                let old_pid = cluster.postmaster_pid();
                cluster.restart_immediate().await?;
                restarted.push(Restarted {
                    server: server.into(),
                    old_pid,
                    new_pid: cluster.postmaster_pid(),
                    log: cluster.log_since(offset)?,
                });
            }
            Ok(restarted)
        })
    }

    fn keep(&mut self) -> Vec<String> {
        [
            ("primary", &mut self.primary),
            ("standby", &mut self.standby.cluster),
        ]
        .into_iter()
        .map(|(which, cluster)| {
            cluster.keep_on_drop();
            format!(
                "kept the {which} at {} (server log {}); it is stopped. To look inside: {}",
                cluster.root().display(),
                cluster.log_path().display(),
                cluster.restart_hint(),
            )
        })
        .collect()
    }

    fn shutdown(mut self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(async move { self.stop_servers().await })
    }

    fn stop_servers(&mut self) -> Answer<'_, ()> {
        Box::pin(async move {
            self.primary.stop().await;
            self.standby.cluster.stop().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_parse_compare_and_print_as_postgres_does() {
        let a = Lsn::parse("0/3000148").expect("an LSN");
        let b = Lsn::parse("1/0").expect("an LSN");
        assert!(a < b);
        assert_eq!(a.to_string(), "0/3000148");
        assert_eq!(b.0, 1 << 32);
        assert_eq!(Lsn::parse("nope"), None);
    }
}
