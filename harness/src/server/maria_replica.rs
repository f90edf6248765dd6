//! A MariaDB primary and its replica (feature `mariadb`), from the local binaries: two
//! [`MariaServer`]s, each listening on 127.0.0.1 as well as its socket, the primary keeping a
//! binary log, the replica replicating it by GTID over TCP. S3 runs the named lock's failover on
//! it: what replicates (a committed row) and what does not (a `GET_LOCK`, which lives in the
//! server's memory with its connection).
//!
//! What is true when each verb returns:
//! - [`MariaPair::create`]: both servers accept connections and the replica's I/O and SQL
//!   threads run (`SHOW SLAVE STATUS`).
//! - [`MariaPair::wait_replayed`]: the replica has applied everything the primary had logged
//!   when it was called (`MASTER_GTID_WAIT` on the primary's `gtid_binlog_pos`).
//! - [`MariaPair::lose_primary`]: the primary's process was killed (SIGKILL) and has exited.
//! - [`MariaPair::promote`]: the replica replicates no more and accepts writes.

use std::time::Duration;

use anyhow::{bail, Context as _};
use sqlx::{Connection as _, MySqlConnection, Row as _};

use super::mariadb::{MariaBinaries, MariaServer, ReplicationRole};
use super::Server as _;
use crate::wait;

/// The replication user the replica connects as.
const REPL_USER: &str = "lab_repl";
/// How long the replica may take to connect, or to apply what the primary logged.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(30);

/// A primary and its replica.
pub struct MariaPair {
    pub primary: MariaServer,
    pub replica: MariaServer,
}

/// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("find a free TCP port")?;
    Ok(listener.local_addr()?.port())
}

/// A connection to `server` as root, over its socket.
pub async fn root(server: &MariaServer) -> anyhow::Result<MySqlConnection> {
    MySqlConnection::connect_with(&server.connect_options(None, "root"))
        .await
        .with_context(|| format!("connect to the MariaDB at {}", server.root().display()))
}

impl MariaPair {
    /// Starts both, makes the replication user on the primary, and starts the replica
    /// replicating from the primary's first event. On error nothing is left running.
    pub async fn create() -> anyhow::Result<MariaPair> {
        let bins = tokio::task::spawn_blocking(MariaBinaries::locate).await??;
        let primary_role = ReplicationRole {
            port: free_port()?,
            server_id: 1,
        };
        let mut primary = MariaServer::create_as(bins.clone(), Some(primary_role)).await?;
        let replica_role = ReplicationRole {
            port: free_port()?,
            server_id: 2,
        };
        let mut replica = match MariaServer::create_as(bins, Some(replica_role)).await {
            Ok(replica) => replica,
            Err(e) => {
                primary.stop().await;
                return Err(e.into());
            }
        };
        match start_replicating(&primary, &replica, primary_role.port).await {
            Ok(()) => Ok(MariaPair { primary, replica }),
            Err(e) => {
                primary.stop().await;
                replica.stop().await;
                Err(e)
            }
        }
    }

    /// Returns once the replica has applied everything the primary has logged now: the GTID
    /// position it waited for.
    pub async fn wait_replayed(&self) -> anyhow::Result<String> {
        let mut on_primary = root(&self.primary).await?;
        let position: String = sqlx::query_scalar("SELECT @@GLOBAL.gtid_binlog_pos")
            .fetch_one(&mut on_primary)
            .await?;
        on_primary.close().await?;
        let mut on_replica = root(&self.replica).await?;
        let waited: i64 = sqlx::query_scalar("SELECT MASTER_GTID_WAIT(?, ?)")
            .bind(&position)
            .bind(REPLICA_TIMEOUT.as_secs_f64())
            .fetch_one(&mut on_replica)
            .await?;
        on_replica.close().await?;
        if waited != 0 {
            bail!(
                "the replica did not apply the primary's {position} within {} s",
                REPLICA_TIMEOUT.as_secs()
            );
        }
        Ok(position)
    }

    /// The primary's host lost: SIGKILL, no shutdown. Returns once it has exited.
    pub async fn lose_primary(&mut self) {
        self.primary.crash().await;
    }

    /// The replica made a primary: it stops replicating, forgets its primary and accepts writes.
    pub async fn promote(&self) -> anyhow::Result<()> {
        let mut conn = root(&self.replica).await?;
        for statement in [
            "STOP SLAVE",
            "RESET SLAVE ALL",
            "SET GLOBAL read_only = OFF",
        ] {
            sqlx::query(statement)
                .execute(&mut conn)
                .await
                .with_context(|| format!("promote the replica: {statement}"))?;
        }
        conn.close().await?;
        Ok(())
    }

    /// Stops both servers (their directories removed unless kept).
    pub async fn stop(mut self) {
        self.primary.stop().await;
        self.replica.stop().await;
    }
}

/// Makes the replication user on `primary` and starts `replica` replicating from it over TCP,
/// by GTID from the primary's first event; returns once its threads run.
async fn start_replicating(
    primary: &MariaServer,
    replica: &MariaServer,
    port: u16,
) -> anyhow::Result<()> {
    let mut on_primary = root(primary).await?;
    for statement in [
        format!("CREATE USER '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_USER}'"),
        format!("GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'127.0.0.1'"),
    ] {
        sqlx::query(&statement)
            .execute(&mut on_primary)
            .await
            .with_context(|| statement.clone())?;
    }
    on_primary.close().await?;
    let mut on_replica = root(replica).await?;
    for statement in [
        "SET GLOBAL gtid_slave_pos = ''".to_owned(),
        format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, \
             MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{REPL_USER}', \
             MASTER_USE_GTID = slave_pos"
        ),
        "START SLAVE".to_owned(),
    ] {
        sqlx::query(&statement)
            .execute(&mut on_replica)
            .await
            .with_context(|| statement.clone())?;
    }
    on_replica.close().await?;
    let replica_pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(replica.connect_options(None, "root"))
        .await?;
    wait::until(
        "the replica's I/O and SQL threads run",
        REPLICA_TIMEOUT,
        || async {
            let row = sqlx::query("SHOW SLAVE STATUS")
                .fetch_optional(&replica_pool)
                .await?;
            Ok::<bool, sqlx::Error>(row.is_some_and(|r| {
                r.try_get::<String, _>("Slave_IO_Running")
                    .is_ok_and(|s| s == "Yes")
                    && r.try_get::<String, _>("Slave_SQL_Running")
                        .is_ok_and(|s| s == "Yes")
            }))
        },
    )
    .await?;
    replica_pool.close().await;
    Ok(())
}
