//! MariaDB's own lock as a lease store: **`GET_LOCK(name, 0)`**, the named lock of MySQL and
//! MariaDB that schedulers, migration tools and tooz's mysql driver take. Like PostgreSQL's
//! advisory lock (`pg_advisory.rs`) it has no TTL: it lasts as long as the connection that took
//! it. The store takes it on a connection of its own whose `wait_timeout` is the lease's TTL, so
//! that the server — by its own clock — ends a connection that sends nothing for a TTL, and the
//! lock goes with it. `wait_timeout` counts whole seconds: the TTL granted is the one asked,
//! rounded up to a second (as etcd's). The holder's renewals are queries on the locking
//! connection (each restarts the server's wait); a holder frozen, killed or cut off stops them,
//! and the server ends the connection a TTL after its last request (killed, at once: the kernel
//! closes its socket). A takeover needs the old connection gone.
//!
//! Two stores, as named locks come:
//! - **`mariadb-getlock`** — the lock alone, as it is used: nothing ordered to fence with; every
//!   grant answers token 0 (its fenced experiments are negative results).
//! - **`mariadb-getlock-fenced`** — the same lock, and on the locking connection, once the lock
//!   is held, a counter of the lock's row bumped and committed (autocommit, InnoDB): its value is
//!   the token. It is greater after every takeover: a new holder bumps it only once it holds the
//!   lock, which it gets only after the old connection ended, whose bump committed before; and a
//!   committed row outlives a crash of the server, where the lock does not.
//!
//! In both, the lock's row (`lab_getlock`: the holder, its connection's id, the TTL granted,
//! whether it was released) is the lab's record of whom the lock was granted to; whether the lock
//! is still held is the server's own record, `IS_USED_LOCK` (joined to the process list for the
//! connection's idle time, `TIME_MS`). The lock's name on the server is `lab/` and the lease's.
//! The server is reached at the store's endpoint: a Unix socket's path (the lab's own MariaDB)
//! or `host:port`, as `root` with no password, on the database `lab_lock` the store makes.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _, MySqlConnection, Row as _};

use super::sessions::{on_runtime, on_runtime_for, Sessions};
use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreId, StoreKind};
use crate::{Error, Result};

/// The database the store's record lives in.
const DATABASE: &str = "lab_lock";

/// The lab's record of each lock's grants: the counter (the fenced store's token) and who holds
/// it on which connection.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS lab_getlock (
    name VARCHAR(60) PRIMARY KEY,
    token BIGINT NOT NULL,
    holder VARCHAR(200) NOT NULL,
    conn BIGINT NOT NULL,
    ttl_ms BIGINT NOT NULL,
    released BOOLEAN NOT NULL) ENGINE = InnoDB";

/// On the locking connection: the server ends it after this many seconds without a request.
const WAIT_TIMEOUT: &str = "SET SESSION wait_timeout = ?";

/// Takes the lock on the calling connection without waiting: 1 when taken.
const TRY_LOCK: &str = "SELECT GET_LOCK(CONCAT('lab/', ?), 0)";

/// On the locking connection, once the lock is held: the row of the grant, its counter bumped,
/// and then read (the row is this connection's to write while it holds the lock).
const RECORD: &str = "INSERT INTO lab_getlock (name, token, holder, conn, ttl_ms, released)
    VALUES (?, 1, ?, CONNECTION_ID(), ?, FALSE)
    ON DUPLICATE KEY UPDATE token = token + 1, holder = VALUES(holder), conn = VALUES(conn),
        ttl_ms = VALUES(ttl_ms), released = FALSE";
const TOKEN: &str = "SELECT token, CAST(CONNECTION_ID() AS SIGNED) FROM lab_getlock WHERE name = ?";

/// On the locking connection: whether it still holds the lock (the query itself restarts the
/// server's wait).
const STILL_HELD: &str =
    "SELECT CAST(COALESCE(IS_USED_LOCK(CONCAT('lab/', ?)) = CONNECTION_ID(), FALSE) AS SIGNED)";

/// On the locking connection: the release recorded, then the lock given up.
const MARK_RELEASED: &str =
    "UPDATE lab_getlock SET released = TRUE WHERE name = ? AND conn = CONNECTION_ID()";
const UNLOCK: &str = "SELECT CAST(COALESCE(RELEASE_LOCK(CONCAT('lab/', ?)), 0) AS SIGNED)";

/// The lock as the server sees it now, from any connection: the lab's row, whether its
/// connection still holds the lock (`IS_USED_LOCK`), the connection's command and for how long
/// (`TIME_MS`), the server's clock.
const INSPECT: &str = "SELECT l.holder, l.token, CAST(l.released AS SIGNED) AS released, l.ttl_ms,
        CAST(COALESCE(IS_USED_LOCK(CONCAT('lab/', l.name)) = l.conn, FALSE) AS SIGNED) AS held,
        p.COMMAND AS command, p.TIME_MS + 0e0 AS idle_ms,
        UNIX_TIMESTAMP(NOW(6)) + 0e0 AS now, CAST(NOW(6) AS CHAR) AS now_text
    FROM lab_getlock l LEFT JOIN information_schema.PROCESSLIST p ON p.ID = l.conn
    WHERE l.name = ?";

/// The connections that hold one of the lab's locks now (a holder frozen or killed by the last
/// experiment), but the caller's.
const HOLDERS: &str =
    "SELECT name, CAST(IS_USED_LOCK(CONCAT('lab/', name)) AS SIGNED) FROM lab_getlock
    WHERE IS_USED_LOCK(CONCAT('lab/', name)) IS NOT NULL
      AND IS_USED_LOCK(CONCAT('lab/', name)) <> CONNECTION_ID()";

/// The connection the server at `endpoint` shows holding the named lock `name` as any client
/// takes it (`GET_LOCK(name, …)`, no prefix): `IS_USED_LOCK`, the library card's truth for a
/// library holder of a named lock.
pub async fn connection_holding(endpoint: &str, name: &str) -> Result<Option<i64>> {
    let mut conn = MySqlConnection::connect_with(&options(endpoint, None)?)
        .await
        .map_err(|e| service("connect", e.to_string()))?;
    let holder = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| service("read IS_USED_LOCK", e.to_string()));
    let _ = conn.close().await;
    holder
}

/// Every locking connection of this process.
fn sessions() -> &'static Sessions<MySqlConnection> {
    static SESSIONS: LazyLock<Sessions<MySqlConnection>> = LazyLock::new(Sessions::default);
    &SESSIONS
}

fn service(what: &str, detail: String) -> Error {
    Error::Service {
        store: "mariadb-getlock",
        what: what.to_owned(),
        detail,
    }
}

/// The TTL a lock asked for `ttl` gets: `wait_timeout` counts whole seconds.
fn whole_seconds(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_millis().div_ceil(1000).max(1) as u64)
}

/// The server at `endpoint` (a Unix socket's path, or `host:port`) as `root`, on `database`.
fn options(endpoint: &str, database: Option<&str>) -> Result<MySqlConnectOptions> {
    let opts = if endpoint.starts_with('/') {
        MySqlConnectOptions::new().socket(endpoint)
    } else {
        let (host, port) = endpoint
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                service(
                    "open the store",
                    format!("{endpoint:?} is neither a socket's path nor host:port"),
                )
            })?;
        MySqlConnectOptions::new().host(host).port(port)
    };
    let opts = opts.username("root").disable_statement_logging();
    Ok(match database {
        Some(db) => opts.database(db),
        None => opts,
    })
}

/// The `GET_LOCK` client on a MariaDB (or MySQL) server.
#[derive(Debug, Clone)]
pub struct GetLockStore {
    /// The store's own reads (inspect, reset).
    pool: MySqlPool,
    /// Where a locking connection connects.
    options: MySqlConnectOptions,
    margin: Duration,
    /// With a token (`mariadb-getlock-fenced`) or without (`mariadb-getlock`).
    fenced: bool,
}

impl GetLockStore {
    /// The store on the server at `endpoint`; makes its database and record if they are missing.
    pub async fn open(endpoint: &str, margin: Duration, fenced: bool) -> Result<Self> {
        let mut admin = MySqlConnection::connect_with(&options(endpoint, None)?)
            .await
            .map_err(|e| service("connect", e.to_string()))?;
        sqlx::query(&format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))
            .execute(&mut admin)
            .await
            .map_err(|e| service("make the store's database", e.to_string()))?;
        let _ = admin.close().await;
        let options = options(endpoint, Some(DATABASE))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .map_err(|e| service("connect", e.to_string()))?;
        sqlx::query(TABLE)
            .execute(&pool)
            .await
            .map_err(|e| service("make the lab's record of the locks", e.to_string()))?;
        Ok(GetLockStore {
            pool,
            options,
            margin,
            fenced,
        })
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        let ttl = whole_seconds(ttl);
        super::check_timing(ttl, self.margin)?;
        let sent = Instant::now();
        let options = self.options.clone();
        let (name_, holder_) = (name.to_owned(), holder.to_owned());
        let taken = on_runtime_for("mariadb-getlock", "take the lock (GET_LOCK)", async move {
            let mut conn = MySqlConnection::connect_with(&options).await?;
            sqlx::query(WAIT_TIMEOUT)
                .bind(ttl.as_secs())
                .execute(&mut conn)
                .await?;
            let taken: Option<i64> = sqlx::query_scalar(TRY_LOCK)
                .bind(&name_)
                .fetch_one(&mut conn)
                .await?;
            if taken != Some(1) {
                conn.close().await?;
                return Ok(None);
            }
            sqlx::query(RECORD)
                .bind(&name_)
                .bind(&holder_)
                .bind(ttl.as_millis() as i64)
                .execute(&mut conn)
                .await?;
            let row = sqlx::query(TOKEN).bind(&name_).fetch_one(&mut conn).await?;
            Ok(Some((
                row.try_get::<i64, _>(0)?,
                row.try_get::<i64, _>(1)?,
                conn,
            )))
        })
        .await?;
        let Some((counter, id, conn)) = taken else {
            return Ok(None);
        };
        let handle = format!("connection={id}");
        sessions().insert(handle.clone(), conn);
        let token = if self.fenced { counter } else { 0 };
        Ok(Some(
            Grant::new(name, holder, token, ttl, sent + (ttl - self.margin)).with_handle(handle),
        ))
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let Some(session) = sessions().get(&grant.handle) else {
            if let Some(why) = sessions().why_ended(&grant.handle) {
                grant.lost_because(why);
                return Ok(false);
            }
            grant.lost_because(format!(
                "no connection of this process holds it ({}): a GET_LOCK lock is kept by the \
                 connection that took it, and only that connection can keep it alive",
                grant.handle
            ));
            return Ok(false);
        };
        let name = grant.name.clone();
        let asked = on_runtime(async move {
            let mut conn = session.lock().await;
            sqlx::query_scalar::<_, i64>(STILL_HELD)
                .bind(&name)
                .fetch_one(&mut *conn)
                .await
        })
        .await
        .map_err(|e| service("ask the locking connection", e))?;
        match asked {
            Ok(1) => {
                grant.renewed(sent + (grant.ttl - self.margin));
                Ok(true)
            }
            Ok(_) => {
                grant.lost_because(format!(
                    "its connection ({}) lives but no longer holds the lock",
                    grant.handle
                ));
                Ok(false)
            }
            // The server ended the connection (its wait_timeout, a KILL, a crash): the lock
            // went with it. In the driver's own words.
            Err(e) => {
                let why = format!(
                    "the server ended the locking connection ({}), and the lock with it — a \
                     connection silent for its wait_timeout ({} s, the TTL) is ended so, as is \
                     one a crash or KILL ends: {e}",
                    grant.handle,
                    grant.ttl.as_secs()
                );
                sessions().ended(&grant.handle, why.clone());
                grant.lost_because(why);
                Ok(false)
            }
        }
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let Some(session) = sessions().remove(&grant.handle) else {
            return Ok(false);
        };
        let name = grant.name.clone();
        let released = on_runtime(async move {
            let unlocked: std::result::Result<i64, sqlx::Error> = async {
                let mut conn = session.lock().await;
                sqlx::query(MARK_RELEASED)
                    .bind(&name)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query_scalar(UNLOCK)
                    .bind(&name)
                    .fetch_one(&mut *conn)
                    .await
            }
            .await;
            // The connection ends with the holding, whatever the answer.
            if let Ok(conn) = Arc::try_unwrap(session) {
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), conn.into_inner().close()).await;
            }
            unlocked
        })
        .await
        .map_err(|e| service("release the lock", e))?;
        // A connection the server ended holds nothing: not released by this call.
        Ok(released.is_ok_and(|n| n == 1))
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let Some(row) = sqlx::query(INSPECT)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| service("read IS_USED_LOCK", e.to_string()))?
        else {
            return Ok(None);
        };
        let get = |e: sqlx::Error| service("read IS_USED_LOCK", e.to_string());
        let held = row.try_get::<i64, _>("held").map_err(get)? == 1;
        let released = row.try_get::<i64, _>("released").map_err(get)? == 1;
        let ttl_ms: i64 = row.try_get("ttl_ms").map_err(get)?;
        let command: Option<String> = row.try_get("command").map_err(get)?;
        let idle_ms: Option<f64> = row.try_get("idle_ms").map_err(get)?;
        let now: f64 = row.try_get("now").map_err(get)?;
        let token: i64 = row.try_get("token").map_err(get)?;
        // Held: the server ends the connection a TTL after its last request (one running a
        // request does not expire). Not held: released, or ended with its connection.
        let (expires_epoch, expires_at) = match (held, command.as_deref(), idle_ms) {
            (true, Some("Sleep"), Some(idle)) => {
                let at = now + (ttl_ms as f64 - idle) / 1000.0;
                (
                    at,
                    format!("{at:.3} (idle for {idle:.0} ms of its {ttl_ms} ms wait_timeout)"),
                )
            }
            (true, ..) => (
                now + ttl_ms as f64 / 1000.0,
                format!(
                    "not before the connection is idle ({})",
                    command.unwrap_or_default()
                ),
            ),
            (false, ..) if released => (f64::NEG_INFINITY, "-infinity".to_owned()),
            (false, ..) => (now, "the connection ended".to_owned()),
        };
        Ok(Some(Holding {
            holder: row.try_get("holder").map_err(get)?,
            token: if self.fenced { token } else { 0 },
            expires_at,
            expires_epoch,
            expired: !held,
            released: released && !held,
            db_now: row.try_get("now_text").map_err(get)?,
            db_now_epoch: now,
        }))
    }

    /// Ends every connection that holds one of the lab's locks (`KILL CONNECTION`, which the
    /// server carries out in its own time), then waits at the server up to 5 s for each lock to
    /// be free — by taking it with a timeout (`GET_LOCK(name, 5)`) — and gives it back.
    async fn reset_now(&self) -> Result<()> {
        let fail = |what: &str, e: sqlx::Error| service(what, e.to_string());
        let mut conn = self.pool.acquire().await.map_err(|e| fail("connect", e))?;
        let holders: Vec<(String, i64)> = sqlx::query_as(HOLDERS)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| fail("list the locking connections", e))?;
        for (_, id) in &holders {
            // Gone meanwhile (ER_NO_SUCH_THREAD): nothing to end.
            let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
                .execute(&mut *conn)
                .await;
        }
        for (name, id) in &holders {
            let taken: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(CONCAT('lab/', ?), 5)")
                .bind(name)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| fail("wait for the locks to be free", e))?;
            if taken != Some(1) {
                return Err(service(
                    "end the locking connections",
                    format!("lock {name:?} is still held 5 s after KILL CONNECTION {id}"),
                ));
            }
            sqlx::query("SELECT RELEASE_LOCK(CONCAT('lab/', ?))")
                .bind(name)
                .execute(&mut *conn)
                .await
                .map_err(|e| fail("give a lock back", e))?;
        }
        Ok(())
    }
}

impl LeaseStore for GetLockStore {
    super::forward_to_now!(acquire, renew, release, inspect, reset);

    fn token_name(&self) -> String {
        if self.fenced {
            "the lock row's counter, bumped on the locking connection".into()
        } else {
            "none (a GET_LOCK lock has no token)".into()
        }
    }

    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        Box::pin(async {
            let now: String = sqlx::query_scalar("SELECT CAST(NOW(6) AS CHAR)")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| service("read the server's clock", e.to_string()))?;
            Ok(Some(now))
        })
    }

    fn granted_ttl(&self, ttl: Duration) -> Duration {
        whole_seconds(ttl)
    }
}

async fn open(at: &StoreAt, fenced: bool) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("mariadb-getlock")?;
    Ok(Arc::new(
        GetLockStore::open(endpoint, at.table.margin(), fenced).await?,
    ))
}

/// The named lock alone, as it is used: no token.
pub const KIND: StoreKind = StoreKind {
    id: StoreId::MariadbGetlock,
    token: "none",
    about: "MariaDB's named lock (GET_LOCK) on a connection whose wait_timeout is the TTL (whole seconds); no token",
    has_token: false,
    sound: false,
    freed_on_disconnect: true,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, false))),
};

/// The named lock with a counter bumped on the locking connection once the lock is held.
pub const FENCED: StoreKind = StoreKind {
    id: StoreId::MariadbGetlockFenced,
    token: "the lock row's counter, bumped on the locking connection",
    about: "MariaDB's GET_LOCK, and a counter of its row bumped and committed on the locking connection once the lock is held: the token",
    has_token: true,
    sound: true,
    freed_on_disconnect: true,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, true))),
};
