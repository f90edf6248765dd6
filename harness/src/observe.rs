//! Observing the server from the side: which backend a connection is, and what a backend is
//! waiting for (`pg_stat_activity`, `pg_blocking_pids`). Read as the superuser, who sees every
//! session. These are the harness's eyes, not part of the system under test.

use sqlx::{PgConnection, PgPool, Row};

/// The server process (backend) serving `conn`.
pub async fn backend_pid(conn: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
}

/// What one backend is doing, as `pg_stat_activity` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    pub pid: i32,
    pub state: Option<String>,
    pub wait_event_type: Option<String>,
    pub wait_event: Option<String>,
    pub query: String,
    /// `pg_blocking_pids(pid)`: the backends holding the lock it waits for.
    pub blocked_by: Vec<i32>,
}

/// The activity of backend `pid`, `None` when no such backend exists. `admin` must connect as a
/// superuser (others see only their own role's sessions).
pub async fn activity(admin: &PgPool, pid: i32) -> sqlx::Result<Option<Activity>> {
    let row = sqlx::query(
        "SELECT pid, state, wait_event_type, wait_event, query, pg_blocking_pids(pid)
           FROM pg_stat_activity WHERE pid = $1",
    )
    .bind(pid)
    .fetch_optional(admin)
    .await?;
    Ok(row.map(|r| Activity {
        pid: r.get(0),
        state: r.get(1),
        wait_event_type: r.get(2),
        wait_event: r.get(3),
        query: r
            .get::<String, _>(4)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        blocked_by: r.get(5),
    }))
}

/// The backends waiting for a lock that backend `pid` holds (`pg_blocking_pids`). `admin` must
/// connect as a superuser.
pub async fn blocked_by(admin: &PgPool, pid: i32) -> sqlx::Result<Vec<i32>> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))")
        .bind(pid)
        .fetch_all(admin)
        .await
}

/// The server's version and the settings named in `names`, as `(name, value)` pairs, version
/// first. `admin` may be any connection.
pub async fn settings(admin: &PgPool, names: &[&str]) -> sqlx::Result<Vec<(String, String)>> {
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(admin)
        .await?;
    let mut out = vec![("server_version".to_owned(), version)];
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let rows =
        sqlx::query("SELECT name, setting FROM pg_settings WHERE name = ANY($1) ORDER BY name")
            .bind(&names)
            .fetch_all(admin)
            .await?;
    out.extend(rows.into_iter().map(|r| (r.get(0), r.get(1))));
    Ok(out)
}

/// One session of a client, as `pg_stat_activity` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The backend serving it (a server process: `/proc` shows it too).
    pub pid: i32,
    pub database: Option<String>,
    /// `active`, `idle`, `idle in transaction`, …
    pub state: Option<String>,
    /// `backend_xid`: the transaction id it was assigned by its first write, while that
    /// transaction is open.
    pub xid: Option<String>,
}

impl std::fmt::Display for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "backend {} on {} {}",
            self.pid,
            self.database.as_deref().unwrap_or("?"),
            self.state.as_deref().unwrap_or("?")
        )?;
        if let Some(xid) = &self.xid {
            write!(f, " xid={xid}")?;
        }
        Ok(())
    }
}

/// What each active backend on `database` other than the caller's is waiting for right now:
/// `wait_event_type:wait_event`, or `CPU` when it waits for nothing (running, or ready to).
/// A session sees the wait events of its own role's sessions; a superuser sees all.
pub async fn active_waits(pool: &PgPool, database: &str) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
          WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()",
    )
    .bind(database)
    .fetch_all(pool)
    .await
}

/// Where the server's WAL insertion stands, in bytes from its start
/// (`pg_current_wal_insert_lsn()`): the difference of two readings is the WAL written between.
pub async fn wal_insert_bytes(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8")
        .fetch_one(pool)
        .await
}

/// The sessions whose `application_name` is `name` (a holder names its connections after
/// itself), by backend pid. `admin` must connect as a superuser.
pub async fn sessions_of(admin: &PgPool, name: &str) -> sqlx::Result<Vec<Session>> {
    let rows = sqlx::query(
        "SELECT pid, datname::text, state, backend_xid::text
           FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid",
    )
    .bind(name)
    .fetch_all(admin)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Session {
            pid: r.get(0),
            database: r.get(1),
            state: r.get(2),
            xid: r.get(3),
        })
        .collect())
}

/// What became of transaction `xid` (as `backend_xid` shows it): `in progress`, `committed` or
/// `aborted` (`pg_xact_status`). The 32-bit id is widened with the current epoch: right for a
/// transaction of this run on a cluster far from wraparound, as the lab's are.
pub async fn xact_status(admin: &PgPool, xid: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT pg_xact_status((((pg_snapshot_xmax(pg_current_snapshot())::text::bigint >> 32) << 32)
                                 | $1::bigint)::text::xid8)",
    )
    .bind(xid.parse::<i64>().unwrap_or(-1))
    .fetch_one(admin)
    .await
}

/// How many sessions named one of `names` (a holder names its connections after itself) are
/// still open on the server `admin` connects to. A holder that ended with a statement in flight
/// — its `COMMIT` sent, its process gone — leaves a backend that still runs it, and may commit
/// after the process exited: the server's record is complete only once those are gone. `admin`
/// must connect as a superuser.
pub async fn open_sessions(admin: &PgPool, names: &[String]) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE backend_type = 'client backend' AND application_name = ANY($1)",
    )
    .bind(names)
    .fetch_one(admin)
    .await
}

/// The client ports of the TCP sessions whose `application_name` is `name` (sessions over a
/// Unix socket have none). `admin` must connect as a superuser.
pub async fn client_ports(admin: &PgPool, name: &str) -> sqlx::Result<Vec<u16>> {
    let ports: Vec<i32> = sqlx::query_scalar(
        "SELECT client_port FROM pg_stat_activity
          WHERE application_name = $1 AND client_port > 0 ORDER BY pid",
    )
    .bind(name)
    .fetch_all(admin)
    .await?;
    // A TCP port is 1–65535: anything else is not a TCP client.
    Ok(ports
        .into_iter()
        .filter_map(|p| u16::try_from(p).ok())
        .collect())
}

/// Installs (or empties) the lab's record of every committed version of the resource's parts: a trigger on
/// `report_part` that copies each inserted or updated row, in the write's own transaction, into
/// `lab_part_history` — so a write that rolled back leaves nothing, and the row's `xmin` is the
/// writing transaction (its commit time, with `track_commit_timestamp`, orders the commits). The
/// harness's instrument, not the system under test's: `resource` connects as the table's owner.
pub async fn record_part_history(resource: &PgPool) -> sqlx::Result<()> {
    for statement in [
        "CREATE TABLE IF NOT EXISTS lab_part_history (
           scope text NOT NULL, part text NOT NULL, content text NOT NULL, writer text NOT NULL,
           token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE OR REPLACE FUNCTION lab_part_history() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO lab_part_history (scope, part, content, writer, token)
           VALUES (NEW.scope, NEW.part, NEW.content, NEW.writer, NEW.token);
           RETURN NULL;
         END $$",
        "DROP TRIGGER IF EXISTS lab_part_history ON report_part",
        "CREATE TRIGGER lab_part_history AFTER INSERT OR UPDATE ON report_part
           FOR EACH ROW EXECUTE FUNCTION lab_part_history()",
        "TRUNCATE lab_part_history",
    ] {
        sqlx::query(statement).execute(resource).await?;
    }
    Ok(())
}

/// One committed version of a part (see [`record_part_history`]); times in µs since the epoch
/// by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartVersion {
    pub scope: String,
    pub part: String,
    pub content: String,
    pub token: i64,
    /// When the write ran (`clock_timestamp()` in its transaction).
    pub at_us: i64,
    /// When its transaction committed (`pg_xact_commit_timestamp`); `None` without
    /// `track_commit_timestamp`.
    pub commit_us: Option<i64>,
}

/// Every committed part version, in commit order (then write order).
pub async fn part_history(resource: &PgPool) -> sqlx::Result<Vec<PartVersion>> {
    let rows = sqlx::query(
        "SELECT scope, part, content, token, (extract(epoch FROM at) * 1000000)::int8,
                (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8
           FROM lab_part_history ORDER BY 6, 5",
    )
    .fetch_all(resource)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PartVersion {
            scope: r.get(0),
            part: r.get(1),
            content: r.get(2),
            token: r.get(3),
            at_us: r.get(4),
            commit_us: r.get(5),
        })
        .collect())
}

/// Installs (or empties) the lab's record of the lease table `table` (the profile's): a trigger
/// that copies every inserted or updated row (a grant, a renewal, a release) into
/// `lab_lease_history`, in the statement's transaction. It reads the row's `name`, `holder`,
/// `token` and `expires_at` — seed 004's columns, which every lease chaos runs has (the seed004
/// forms). `lease` connects as the table's owner; `table` is a plain identifier (checked).
pub async fn record_lease_history(lease: &PgPool, table: &str) -> sqlx::Result<()> {
    if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(sqlx::Error::Protocol(format!(
            "record_lease_history: {table:?} is not a plain table name"
        )));
    }
    for statement in [
        "CREATE TABLE IF NOT EXISTS lab_lease_history (
           name text NOT NULL, holder text NOT NULL, token bigint NOT NULL,
           expires_at timestamptz NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
            .to_owned(),
        "CREATE OR REPLACE FUNCTION lab_lease_history() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO lab_lease_history (name, holder, token, expires_at)
           VALUES (NEW.name, NEW.holder, NEW.token, NEW.expires_at);
           RETURN NULL;
         END $$"
            .to_owned(),
        format!("DROP TRIGGER IF EXISTS lab_lease_history ON {table}"),
        format!(
            "CREATE TRIGGER lab_lease_history AFTER INSERT OR UPDATE ON {table}
               FOR EACH ROW EXECUTE FUNCTION lab_lease_history()"
        ),
        "TRUNCATE lab_lease_history".to_owned(),
    ] {
        sqlx::query(&statement).execute(lease).await?;
    }
    Ok(())
}

/// The first of seed004's lease columns (name, holder, token, expires_at), which
/// [`record_lease_history`]'s trigger reads, that the lease table `table` lacks; `None` when it
/// has them all.
pub async fn missing_lease_column(
    lease: &PgPool,
    table: &str,
) -> sqlx::Result<Option<&'static str>> {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = $1",
    )
    .bind(table)
    .fetch_all(lease)
    .await?;
    Ok(["name", "holder", "token", "expires_at"]
        .into_iter()
        .find(|c| !columns.iter().any(|have| have == c)))
}

/// One version of the lease row (see [`record_lease_history`]): µs since the epoch by the
/// database clock; a released lease's `expires_us` is `None` (`-infinity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseVersion {
    pub holder: String,
    pub token: i64,
    pub at_us: i64,
    pub expires_us: Option<i64>,
}

/// Every committed version of the lease row, in the order they were written.
pub async fn lease_history(lease: &PgPool) -> sqlx::Result<Vec<LeaseVersion>> {
    let rows = sqlx::query(
        "SELECT holder, token, (extract(epoch FROM at) * 1000000)::int8,
                CASE WHEN isfinite(expires_at)
                     THEN (extract(epoch FROM expires_at) * 1000000)::int8 END
           FROM lab_lease_history ORDER BY at",
    )
    .fetch_all(lease)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LeaseVersion {
            holder: r.get(0),
            token: r.get(1),
            at_us: r.get(2),
            expires_us: r.get(3),
        })
        .collect())
}

/// The parts as they stand: (scope, part, content, token).
pub async fn final_parts(resource: &PgPool) -> sqlx::Result<Vec<(String, String, String, i64)>> {
    let rows = sqlx::query("SELECT scope, part, content, token FROM report_part ORDER BY 1, 2")
        .fetch_all(resource)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}

/// One row of the resource's own attempt log (`write_attempt`, the system under test's): the
/// write's scope, part, writer, token, whether it was accepted, and when it was recorded (µs since
/// the epoch by the database clock — just after the write's transaction ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub scope: String,
    pub part: String,
    pub writer: String,
    pub token: i64,
    pub accepted: bool,
    pub at_us: i64,
}

/// Every attempt the resource logged, in order.
pub async fn attempts(resource: &PgPool) -> sqlx::Result<Vec<Attempt>> {
    let rows = sqlx::query(
        "SELECT scope, part, writer, token, accepted, (extract(epoch FROM at) * 1000000)::int8
           FROM write_attempt ORDER BY id",
    )
    .fetch_all(resource)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Attempt {
            scope: r.get(0),
            part: r.get(1),
            writer: r.get(2),
            token: r.get(3),
            accepted: r.get(4),
            at_us: r.get(5),
        })
        .collect())
}
