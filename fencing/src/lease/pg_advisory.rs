//! PostgreSQL's own lock as a lease store: a **session-level advisory lock**
//! (`pg_try_advisory_lock`), the lock schedulers, migration tools and tooz's postgresql driver
//! take. It has no TTL: it lasts as long as the session that took it. The store takes it on a
//! session of its own, opened with `idle_session_timeout` set to the lease's TTL, so that the
//! server — by its own clock — ends a session that says nothing for a TTL, and the lock goes with
//! it. That is the lease: the holder's renewals are queries on the locking session (each resets
//! the server's idle timer); a holder frozen, killed or cut off stops them, and the server ends
//! the session after the TTL (killed, at once: the kernel closes its socket). A takeover needs the
//! old session gone, so a second holder waits on the lock for as long as the old session lives.
//!
//! Two stores, as advisory locks come:
//! - **`pg-advisory`** — the lock alone, as it is used: nothing ordered to fence with; every grant
//!   answers token 0 (its fenced experiments are negative results).
//! - **`pg-advisory-fenced`** — the same lock, and in the locking session, once the lock is
//!   taken, a counter of the lock's row bumped and committed: its value is the token. It is
//!   greater after every takeover: a new holder bumps it only once it holds the lock, which it
//!   gets only after the old session ended, whose bump committed before. The counter is a
//!   committed row, so it survives a crash of the server, where the lock itself does not.
//!
//! In both, the lock's row (`lab_advisory_lock`: the holder, its session's pid and start, the TTL
//! asked, whether it was released) is the lab's record of whom the lock was granted to; whether
//! the lock is still held is the server's own record, `pg_locks` (joined to `pg_stat_activity`
//! for the session's idle time). The lock's key is (`CLASS`, `hashtext(name)`).
//!
//! The locking sessions live on a runtime thread of their own, shared by every store of the
//! process (`sessions.rs`): a store of another process cannot renew a holding (it has no
//! session): it answers "not renewed".

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, PgPool, Row as _};

use super::sessions::{on_runtime, on_runtime_for, Sessions};
use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreId, StoreKind};
use crate::{Error, Result};

/// The first key of every advisory lock the store takes (the second is `hashtext(name)`): the
/// lab's own number, so that `pg_locks` tells its locks from anyone else's.
const CLASS: i32 = 20_260;

/// The lab's record of each lock's grants: the counter (the fenced store's token) and who holds
/// it in which session.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS lab_advisory_lock (
    name text PRIMARY KEY,
    token bigint NOT NULL,
    holder text NOT NULL,
    pid int NOT NULL,
    backend_start timestamptz NOT NULL,
    ttl_ms bigint NOT NULL,
    released boolean NOT NULL)";

/// Takes the lock on the calling session: true when taken.
const TRY_LOCK: &str = "SELECT pg_try_advisory_lock($1, hashtext($2))";

/// In the locking session, once the lock is held: the row of the grant, its counter bumped.
const RECORD: &str = "INSERT INTO lab_advisory_lock AS l
        (name, token, holder, pid, backend_start, ttl_ms, released)
    SELECT $1, 1, $2, pid, backend_start, $3, false
      FROM pg_stat_activity WHERE pid = pg_backend_pid()
    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, holder = excluded.holder,
        pid = excluded.pid, backend_start = excluded.backend_start, ttl_ms = excluded.ttl_ms,
        released = false
    RETURNING token, pid, extract(epoch FROM backend_start)::float8";

/// On the locking session: whether it still holds the lock (the query itself resets the
/// server's idle timer).
const STILL_HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
      AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2)";

/// On the locking session: the release recorded, then the lock given up.
const MARK_RELEASED: &str =
    "UPDATE lab_advisory_lock SET released = true WHERE name = $1 AND pid = pg_backend_pid()";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1, hashtext($2))";

/// The lock as the server sees it now, from any session: the lab's row, whether its session
/// still holds the lock (`pg_locks`), the session's state and since when, the server's clock.
const INSPECT: &str = "SELECT l.holder, l.token, l.released, l.ttl_ms,
        (h.pid IS NOT NULL AND a.pid IS NOT NULL) AS held, a.state,
        extract(epoch FROM a.state_change)::float8 AS since,
        extract(epoch FROM clock_timestamp())::float8 AS now, clock_timestamp()::text AS now_text
    FROM lab_advisory_lock l
    LEFT JOIN pg_locks h ON h.locktype = 'advisory' AND h.granted AND h.pid = l.pid
        AND h.classid = $2::oid AND h.objid = hashtext(l.name)::oid AND h.objsubid = 2
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid AND a.backend_start = l.backend_start
    WHERE l.name = $1";

/// Ends every session that holds one of the lab's advisory locks but the caller's.
const TERMINATE_HOLDERS: &str = "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_locks
    WHERE locktype = 'advisory' AND classid = $1::oid AND pid <> pg_backend_pid()";
const HOLDERS_LEFT: &str = "SELECT count(*) FROM pg_locks
    WHERE locktype = 'advisory' AND classid = $1::oid AND pid <> pg_backend_pid()";

/// How many of the lab's advisory locks the server behind `pool` shows held now (`pg_locks`),
/// by any session: S3 reads it on a primary and on its standby.
pub async fn locks_held(pool: &PgPool) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::oid",
    )
    .bind(CLASS)
    .fetch_one(pool)
    .await
    .map_err(|e| service("read pg_locks", e.to_string()))
}

/// An advisory lock's key as any client takes it, and how `pg_locks` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryKey {
    /// `pg_try_advisory_lock(bigint)`, below 2^31: classid 0, objid the key, objsubid 1.
    One(i64),
    /// `pg_try_advisory_lock(int, int)`: classid the first, objid the second, objsubid 2.
    Two(i32, i32),
}

/// The `application_name` of the session the server shows holding the advisory lock `key`, as
/// any client takes it: the library card's truth for a library holder of an advisory lock, which
/// names its connection after itself.
pub async fn session_holding(pool: &PgPool, key: AdvisoryKey) -> Result<Option<String>> {
    let (classid, objid, objsubid) = match key {
        AdvisoryKey::One(k) => (0, k, 1),
        AdvisoryKey::Two(a, b) => (i64::from(a), i64::from(b), 2),
    };
    sqlx::query_scalar(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::bigint::oid
            AND l.objid = $2::bigint::oid AND l.objsubid = $3",
    )
    .bind(classid)
    .bind(objid)
    .bind(objsubid)
    .fetch_optional(pool)
    .await
    .map_err(|e| service("read pg_locks", e.to_string()))
}

/// Every locking session of this process.
fn sessions() -> &'static Sessions<PgConnection> {
    static SESSIONS: LazyLock<Sessions<PgConnection>> = LazyLock::new(Sessions::default);
    &SESSIONS
}

fn service(what: &str, detail: String) -> Error {
    Error::Service {
        store: "pg-advisory",
        what: what.to_owned(),
        detail,
    }
}

/// A holding's handle: its session, `pid=4242 started=1733400000.123456`.
fn handle(pid: i32, started: f64) -> String {
    format!("pid={pid} started={started:.6}")
}

/// The advisory lock client on the lab's lease database.
#[derive(Debug, Clone)]
pub struct AdvisoryLeaseStore {
    /// The store's own reads (inspect, reset), on the lease database.
    pool: PgPool,
    /// Where a locking session connects: the pool's server, database and user.
    options: PgConnectOptions,
    margin: Duration,
    /// With a token (`pg-advisory-fenced`) or without (`pg-advisory`).
    fenced: bool,
}

impl AdvisoryLeaseStore {
    /// The store on `pool`'s database; makes the lab's record of the locks if it is missing.
    pub async fn open(pool: PgPool, margin: Duration, fenced: bool) -> Result<Self> {
        // The lease is the session's idle timeout, which PostgreSQL has from version 14.
        let version: String = sqlx::query_scalar("SHOW server_version_num")
            .fetch_one(&pool)
            .await
            .map_err(|e| service("read the server's version", e.to_string()))?;
        if version.parse::<u32>().is_ok_and(|v| v < 140_000) {
            return Err(service(
                "open the store",
                format!(
                    "the advisory-lock stores need PostgreSQL 14 or newer (idle_session_timeout \
                     is the lease's TTL); this server is version {version}"
                ),
            ));
        }
        match sqlx::query(TABLE).execute(&pool).await {
            // Two processes making it at once: the other one did. Or a hot standby, read-only,
            // which has the record its primary made (S3 reads the lock there).
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("23505" | "42P07" | "25006")) => {}
            other => {
                other.map_err(|e| service("make the lab's record of the locks", e.to_string()))?;
            }
        }
        let options = (*pool.connect_options()).clone();
        Ok(AdvisoryLeaseStore {
            pool,
            options,
            margin,
            fenced,
        })
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.margin)?;
        let sent = Instant::now();
        let options = self
            .options
            .clone()
            .application_name(holder)
            .options([("idle_session_timeout", format!("{}ms", ttl.as_millis()))])
            .disable_statement_logging();
        let (name_, holder_) = (name.to_owned(), holder.to_owned());
        let taken = on_runtime_for("pg-advisory", "take the advisory lock", async move {
            let mut conn = PgConnection::connect_with(&options).await?;
            let taken: bool = sqlx::query_scalar(TRY_LOCK)
                .bind(CLASS)
                .bind(&name_)
                .fetch_one(&mut conn)
                .await?;
            if !taken {
                conn.close().await?;
                return Ok(None);
            }
            let row = sqlx::query(RECORD)
                .bind(&name_)
                .bind(&holder_)
                .bind(ttl.as_millis() as i64)
                .fetch_one(&mut conn)
                .await?;
            Ok(Some((
                row.try_get::<i64, _>(0)?,
                row.try_get::<i32, _>(1)?,
                row.try_get::<f64, _>(2)?,
                conn,
            )))
        })
        .await?;
        let Some((counter, pid, started, conn)) = taken else {
            return Ok(None);
        };
        let handle = handle(pid, started);
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
                "no session of this process holds it ({}): an advisory lock is kept by the \
                 session that took it, and only that session can keep it alive",
                grant.handle
            ));
            return Ok(false);
        };
        let name = grant.name.clone();
        let asked = on_runtime(async move {
            let mut conn = session.lock().await;
            sqlx::query_scalar::<_, bool>(STILL_HELD)
                .bind(CLASS)
                .bind(&name)
                .fetch_one(&mut *conn)
                .await
        })
        .await
        .map_err(|e| service("ask the locking session", e))?;
        match asked {
            Ok(true) => {
                grant.renewed(sent + (grant.ttl - self.margin));
                Ok(true)
            }
            Ok(false) => {
                grant.lost_because(format!(
                    "its session ({}) lives but no longer holds the lock",
                    grant.handle
                ));
                Ok(false)
            }
            // The server ended the session (its idle timeout, a terminate, a crash): the lock
            // went with it. In the server's own words.
            Err(e) => {
                let why = format!(
                    "the server ended the locking session ({}), and the lock with it — a \
                     session silent for its idle_session_timeout ({} ms, the TTL) is ended so, \
                     as is one a crash or pg_terminate_backend ends: {e}",
                    grant.handle,
                    grant.ttl.as_millis()
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
            let unlocked: std::result::Result<bool, sqlx::Error> = async {
                let mut conn = session.lock().await;
                sqlx::query(MARK_RELEASED)
                    .bind(&name)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query_scalar(UNLOCK)
                    .bind(CLASS)
                    .bind(&name)
                    .fetch_one(&mut *conn)
                    .await
            }
            .await;
            // The session ends with the holding, whatever the answer: closed here, or
            // dropped with the last request still using it.
            if let Ok(conn) = Arc::try_unwrap(session) {
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), conn.into_inner().close()).await;
            }
            unlocked
        })
        .await
        .map_err(|e| service("release the advisory lock", e))?;
        // A session the server ended holds nothing: not released by this call.
        Ok(released.unwrap_or(false))
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let Some(row) = sqlx::query(INSPECT)
            .bind(name)
            .bind(CLASS)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| service("read pg_locks", e.to_string()))?
        else {
            return Ok(None);
        };
        let get = |e: sqlx::Error| service("read pg_locks", e.to_string());
        let held: bool = row.try_get("held").map_err(get)?;
        let released: bool = row.try_get("released").map_err(get)?;
        let ttl_ms: i64 = row.try_get("ttl_ms").map_err(get)?;
        let state: Option<String> = row.try_get("state").map_err(get)?;
        let since: Option<f64> = row.try_get("since").map_err(get)?;
        let now: f64 = row.try_get("now").map_err(get)?;
        let token: i64 = row.try_get("token").map_err(get)?;
        // Held: the server ends the session a TTL after it went idle (an active session does
        // not expire). Not held: released, or ended with its session — over either way.
        let (expires_epoch, expires_at) = match (held, state.as_deref(), since) {
            (true, Some("idle"), Some(since)) => {
                let at = since + ttl_ms as f64 / 1000.0;
                (
                    at,
                    format!("{at:.3} (idle since {since:.3}, + {ttl_ms} ms)"),
                )
            }
            (true, ..) => (
                now + ttl_ms as f64 / 1000.0,
                format!(
                    "not before the session is idle ({})",
                    state.unwrap_or_default()
                ),
            ),
            // As the lease table prints a released lease (the same server's convention).
            (false, ..) if released => (f64::NEG_INFINITY, "-infinity".to_owned()),
            (false, ..) => (now, "the session ended".to_owned()),
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

    /// Ends every session that holds one of the lab's locks (a holder frozen or killed by the
    /// last experiment): `pg_terminate_backend` waits up to 5 s for each session to be gone.
    async fn reset_now(&self) -> Result<()> {
        sqlx::query(TERMINATE_HOLDERS)
            .bind(CLASS)
            .execute(&self.pool)
            .await
            .map_err(|e| service("end the locking sessions", e.to_string()))?;
        let left: i64 = sqlx::query_scalar(HOLDERS_LEFT)
            .bind(CLASS)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| service("count the locking sessions", e.to_string()))?;
        if left > 0 {
            return Err(service(
                "end the locking sessions",
                format!("{left} still hold a lock 5 s after pg_terminate_backend"),
            ));
        }
        Ok(())
    }
}

impl LeaseStore for AdvisoryLeaseStore {
    super::forward_to_now!(acquire, renew, release, inspect, reset);

    fn token_name(&self) -> String {
        if self.fenced {
            "the lock row's counter, bumped in the locking session".into()
        } else {
            "none (an advisory lock has no token)".into()
        }
    }

    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        Box::pin(async {
            let now: String = sqlx::query_scalar("SELECT clock_timestamp()::text")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| service("read the server's clock", e.to_string()))?;
            Ok(Some(now))
        })
    }
}

async fn open(at: &StoreAt, fenced: bool) -> Result<Arc<dyn LeaseStore>> {
    let store =
        AdvisoryLeaseStore::open(at.table.pool().clone(), at.table.margin(), fenced).await?;
    Ok(Arc::new(store))
}

/// The advisory lock alone, as it is used: no token.
pub const KIND: StoreKind = StoreKind {
    id: StoreId::PgAdvisory,
    token: "none",
    about: "PostgreSQL's session-level advisory lock (pg_try_advisory_lock) on a session whose idle_session_timeout is the TTL; no token",
    has_token: false,
    sound: false,
    freed_on_disconnect: true,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, false))),
};

/// The advisory lock with a counter bumped in the locking session once the lock is held.
pub const FENCED: StoreKind = StoreKind {
    id: StoreId::PgAdvisoryFenced,
    token: "the lock row's counter, bumped in the locking session",
    about: "the advisory lock, and a counter of its row bumped and committed in the locking session once the lock is held: the token",
    has_token: true,
    sound: true,
    freed_on_disconnect: true,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, true))),
};

/// The advisory lock in the form that fences by construction: taken in the write's own
/// transaction (`pg_try_advisory_xact_lock`), on the resource's own database, and given up by the
/// transaction's end. A write made in that transaction commits only if the transaction still
/// holds the lock at its commit — nothing else can end the lock but the transaction, and a
/// transaction the server ended takes its write with it. What it does not guard: a write the
/// holder makes through another connection, outside the lock's transaction. S4 shows both.
#[derive(Debug)]
pub struct XactLock {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    pid: i32,
}

impl XactLock {
    /// Begins a transaction on `pool` that the server ends once it stands idle for `idle`
    /// (`SET LOCAL idle_in_transaction_session_timeout`) and takes the lock `name` in it: `None`
    /// when another transaction holds it (the transaction is rolled back).
    pub async fn begin(pool: &PgPool, name: &str, idle: Duration) -> Result<Option<XactLock>> {
        let fail = |what: &str, e: sqlx::Error| service(what, e.to_string());
        let mut tx = pool.begin().await.map_err(|e| fail("begin", e))?;
        sqlx::query(&format!(
            "SET LOCAL idle_in_transaction_session_timeout = {}",
            idle.as_millis()
        ))
        .execute(&mut *tx)
        .await
        .map_err(|e| fail("set the transaction's idle timeout", e))?;
        let (pid, taken): (i32, bool) =
            sqlx::query_as("SELECT pg_backend_pid(), pg_try_advisory_xact_lock($1, hashtext($2))")
                .bind(CLASS)
                .bind(name)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| fail("take the lock in the transaction", e))?;
        if !taken {
            tx.rollback().await.map_err(|e| fail("roll back", e))?;
            return Ok(None);
        }
        Ok(Some(XactLock { tx, pid }))
    }

    /// The backend that runs the lock's transaction.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The lock's transaction, to write in.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Commits the transaction, its writes and the lock's end with it.
    pub async fn commit(self) -> Result<()> {
        self.tx
            .commit()
            .await
            .map_err(|e| service("commit the lock's transaction", e.to_string()))
    }
}

/// Whether the server behind `pool` still runs the backend `pid` (`pg_stat_activity`).
pub async fn backend_alive(pool: &PgPool, pid: i32) -> Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .map_err(|e| service("read pg_stat_activity", e.to_string()))
}
