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
