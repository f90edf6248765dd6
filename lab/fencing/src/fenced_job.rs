//! The second source system (seed 000): a *fenced job lease* on MariaDB, and a completion write
//! fenced by the lease in the same statement (`--features mariadb`).
//!
//! Unlike the F-series resource, which never reads the lease and keeps its own floor, the
//! completion here *joins* the lease row: `UPDATE reconciliation_runs JOIN fenced_job_leases …
//! WHERE run fence = lease fence AND owner matches AND leased_until > CURRENT_TIMESTAMP(3)`. The
//! check and the write are one atomic statement, judged by database time. 0 rows means "lease lost
//! or stale" — an answer, never something to retry.
//!
//! Every operation requires lease name + owner token + fence token. The owner token is unique per
//! acquisition attempt (the caller makes it); the fence token is bumped on every takeover.

use std::time::Duration;

use sqlx::{Executor, MySqlPool};

use crate::{DbContext, Result};

/// The DDL of the two tables.
pub const MIGRATION: &str = include_str!("../migrations/mariadb/0001_fenced_job.sql");

/// One holding: lease name, the owner token of this attempt, and the fence token it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLease {
    pub lease_name: String,
    pub owner_token: String,
    pub fence_token: i64,
    pub ttl: Duration,
}

fn micros(d: Duration) -> i64 {
    d.as_micros() as i64
}

/// Creates the tables (idempotent for a fresh database) and empties them.
pub async fn reset(pool: &MySqlPool) -> Result<()> {
    let without_comments: Vec<&str> = MIGRATION
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    for stmt in without_comments
        .join("\n")
        .split(';')
        .filter(|s| !s.trim().is_empty())
    {
        let stmt = stmt.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ");
        pool.execute(stmt.as_str())
            .await
            .op("create the fenced-job tables")?;
    }
    pool.execute("DELETE FROM reconciliation_runs")
        .await
        .op("empty the runs")?;
    pool.execute("DELETE FROM fenced_job_leases")
        .await
        .op("empty the leases")?;
    Ok(())
}

/// The fenced job lease store.
#[derive(Debug, Clone)]
pub struct JobLeaseStore {
    pool: MySqlPool,
}

impl JobLeaseStore {
    pub fn new(pool: MySqlPool) -> Self {
        JobLeaseStore { pool }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Takes the lease for `owner_token` if it is absent or expired by `CURRENT_TIMESTAMP(3)`,
    /// bumping the fence token on a takeover. `None` while someone else holds it. The
    /// assignments run left to right, so `leased_until` is judged before it is replaced.
    pub async fn acquire(
        &self,
        lease_name: &str,
        owner_token: &str,
        ttl: Duration,
    ) -> Result<Option<JobLease>> {
        let mut conn = self.pool.acquire().await.op("connect to the lease store")?;
        sqlx::query(
            "INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until)
             VALUES (?, ?, 1, CURRENT_TIMESTAMP(3) + INTERVAL ? MICROSECOND)
             ON DUPLICATE KEY UPDATE
               owner_token  = IF(leased_until <= CURRENT_TIMESTAMP(3), VALUES(owner_token), owner_token),
               fence_token  = IF(leased_until <= CURRENT_TIMESTAMP(3), fence_token + 1, fence_token),
               leased_until = IF(leased_until <= CURRENT_TIMESTAMP(3), VALUES(leased_until), leased_until)",
        )
        .bind(lease_name)
        .bind(owner_token)
        .bind(micros(ttl))
        .execute(&mut *conn)
        .await
        .op("acquire the job lease")?;
        // The row names this owner only if it won just now — or already held the lease: an owner
        // token that identifies an instance (U4) gets its current, unexpired holding back with
        // the same fence. The fence separates holdings, not two executions inside one holding.
        let fence: Option<i64> = sqlx::query_scalar(
            "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ? AND owner_token = ?",
        )
        .bind(lease_name)
        .bind(owner_token)
        .fetch_optional(&mut *conn)
        .await
        .op("read the job lease back")?;
        Ok(fence.map(|fence_token| JobLease {
            lease_name: lease_name.to_owned(),
            owner_token: owner_token.to_owned(),
            fence_token,
            ttl,
        }))
    }

    /// Extends the holding if it is still the current one and unexpired by database time.
    pub async fn renew(&self, lease: &JobLease) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE fenced_job_leases SET leased_until = CURRENT_TIMESTAMP(3) + INTERVAL ? MICROSECOND
              WHERE lease_name = ? AND owner_token = ? AND fence_token = ?
                AND leased_until > CURRENT_TIMESTAMP(3)",
        )
        .bind(micros(lease.ttl))
        .bind(&lease.lease_name)
        .bind(&lease.owner_token)
        .bind(lease.fence_token)
        .execute(&self.pool)
        .await
        .op("renew the job lease")?;
        Ok(done.rows_affected() == 1)
    }

    /// The same renew, judged by the *client's* notion of now instead of the database's — the
    /// flaw U3 exposes: a client whose clock lags revives an expired lease. `client_epoch` is the
    /// client's clock as Unix seconds with a fraction (`date +%s.%3N`): no time zone to disagree
    /// on.
    pub async fn renew_by_client_clock(
        &self,
        lease: &JobLease,
        client_epoch: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE fenced_job_leases
                SET leased_until = FROM_UNIXTIME(CAST(? AS DECIMAL(20,3))) + INTERVAL ? MICROSECOND
              WHERE lease_name = ? AND owner_token = ? AND fence_token = ?
                AND leased_until > FROM_UNIXTIME(CAST(? AS DECIMAL(20,3)))",
        )
        .bind(client_epoch)
        .bind(micros(lease.ttl))
        .bind(&lease.lease_name)
        .bind(&lease.owner_token)
        .bind(lease.fence_token)
        .bind(client_epoch)
        .execute(&self.pool)
        .await
        .op("renew the job lease by the client's clock")?;
        Ok(done.rows_affected() == 1)
    }

    /// The database's clock as Unix seconds with a fraction, to compare with a client's.
    pub async fn db_epoch(&self) -> Result<f64> {
        let epoch: String =
            sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) AS CHAR)")
                .fetch_one(&self.pool)
                .await
                .op("read the database clock")?;
        Ok(epoch.parse().unwrap_or(f64::NAN))
    }

    /// The lease row's `leased_until`, as Unix seconds with a fraction (`None`: no such lease).
    pub async fn leased_until(&self, lease_name: &str) -> Result<Option<f64>> {
        let epoch: Option<String> = sqlx::query_scalar(
            "SELECT CAST(UNIX_TIMESTAMP(leased_until) AS CHAR) FROM fenced_job_leases WHERE lease_name = ?",
        )
        .bind(lease_name)
        .fetch_optional(&self.pool)
        .await
        .op("read the job lease's expiry")?;
        Ok(epoch.map(|e| e.parse().unwrap_or(f64::NAN)))
    }

    /// Ends the holding at once, if it is still the current, unexpired one.
    pub async fn release(&self, lease: &JobLease) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE fenced_job_leases SET leased_until = CURRENT_TIMESTAMP(3)
              WHERE lease_name = ? AND owner_token = ? AND fence_token = ?
                AND leased_until > CURRENT_TIMESTAMP(3)",
        )
        .bind(&lease.lease_name)
        .bind(&lease.owner_token)
        .bind(lease.fence_token)
        .execute(&self.pool)
        .await
        .op("release the job lease")?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether this holding is the current one and unexpired by database time.
    pub async fn is_held(&self, lease: &JobLease) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM fenced_job_leases
              WHERE lease_name = ? AND owner_token = ? AND fence_token = ?
                AND leased_until > CURRENT_TIMESTAMP(3)",
        )
        .bind(&lease.lease_name)
        .bind(&lease.owner_token)
        .bind(lease.fence_token)
        .fetch_one(&self.pool)
        .await
        .op("ask whether the job lease is held")?;
        Ok(n == 1)
    }

    /// Whether nobody holds `lease_name` by database time.
    pub async fn is_free(&self, lease_name: &str) -> Result<bool> {
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM fenced_job_leases WHERE lease_name = ? AND leased_until > CURRENT_TIMESTAMP(3)",
        )
        .bind(lease_name)
        .fetch_one(&self.pool)
        .await
        .op("ask whether the job lease is free")?;
        Ok(held == 0)
    }

    /// Starts a run under `lease`.
    pub async fn start_run(&self, run_id: &str, lease: &JobLease) -> Result<()> {
        sqlx::query(
            "INSERT INTO reconciliation_runs (run_id, lease_name, owner_token, fence_token, status)
             VALUES (?, ?, ?, ?, 'running')",
        )
        .bind(run_id)
        .bind(&lease.lease_name)
        .bind(&lease.owner_token)
        .bind(lease.fence_token)
        .execute(&self.pool)
        .await
        .op("start a run")?;
        Ok(())
    }

    /// The fenced completion, as one statement: `true` when the run was marked completed.
    pub async fn complete_run(&self, run_id: &str, lease: &JobLease) -> Result<bool> {
        let done = sqlx::query(COMPLETE_RUN)
            .bind(run_id)
            .bind(&lease.lease_name)
            .bind(lease.fence_token)
            .bind(&lease.owner_token)
            .execute(&self.pool)
            .await
            .op("complete a run (fenced)")?;
        Ok(done.rows_affected() == 1)
    }

    /// A completion that checks less than the fenced join — one of the naive forms seed 000 names
    /// ("only lease_name", "only owner_token", each with the expiry check). A negative control:
    /// it lets an old execution of a re-acquiring instance finish (U4). `true` when the run was
    /// marked completed.
    pub async fn complete_run_naive(
        &self,
        run_id: &str,
        lease: &JobLease,
        how: NaiveCompletion,
    ) -> Result<bool> {
        let query = match how {
            NaiveCompletion::LeaseNameOnly => sqlx::query(
                "UPDATE reconciliation_runs AS r
                   JOIN fenced_job_leases AS l ON l.lease_name = ?
                    SET r.status = 'completed', r.finished_at = CURRENT_TIMESTAMP(3)
                  WHERE r.run_id = ? AND l.leased_until > CURRENT_TIMESTAMP(3)",
            )
            .bind(&lease.lease_name)
            .bind(run_id),
            NaiveCompletion::OwnerTokenOnly => sqlx::query(
                "UPDATE reconciliation_runs AS r
                   JOIN fenced_job_leases AS l ON l.lease_name = r.lease_name
                    SET r.status = 'completed', r.finished_at = CURRENT_TIMESTAMP(3)
                  WHERE r.run_id = ? AND l.owner_token = ?
                    AND l.leased_until > CURRENT_TIMESTAMP(3)",
            )
            .bind(run_id)
            .bind(&lease.owner_token),
        };
        let done = query
            .execute(&self.pool)
            .await
            .op("complete a run (naive)")?;
        Ok(done.rows_affected() == 1)
    }

    /// Seed 000's Java check-then-set, `if (lease.isHeld()) run.setFinished(true)`: `is_held` in
    /// one statement, then — after `gap`, a test hook (nothing in production) — the completion in
    /// another. With [`CheckedWrite::Unconditional`] the write checks nothing: the race the seed
    /// contrasts with the conditional update (U5's negative control). With
    /// [`CheckedWrite::Fenced`] the write is the fenced join, which re-checks in the statement
    /// that writes. `None` when the check refused (nothing written); else whether the run
    /// changed.
    pub async fn complete_if_held(
        &self,
        run_id: &str,
        lease: &JobLease,
        write: CheckedWrite,
        gap: impl std::future::Future<Output = ()>,
    ) -> Result<Option<bool>> {
        if !self.is_held(lease).await? {
            return Ok(None);
        }
        gap.await;
        let changed = match write {
            CheckedWrite::Fenced => self.complete_run(run_id, lease).await?,
            CheckedWrite::Unconditional => self.complete_run_by_id(run_id).await?,
        };
        Ok(Some(changed))
    }

    /// The completion that checks only the run id: `UPDATE … WHERE run_id = ?`. A negative
    /// control (U2, and U5's write after a client-side check): it lets a stale owner finish.
    pub async fn complete_run_by_id(&self, run_id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE reconciliation_runs
                SET status = 'completed', finished_at = CURRENT_TIMESTAMP(3)
              WHERE run_id = ?",
        )
        .bind(run_id)
        .execute(&self.pool)
        .await
        .op("complete a run by its id only")?;
        Ok(done.rows_affected() == 1)
    }

    /// A run's status, `None` if there is no such run.
    pub async fn run_status(&self, run_id: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT status FROM reconciliation_runs WHERE run_id = ?")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .op("read a run's status")
    }
}

/// How [`JobLeaseStore::complete_if_held`] writes once the client's check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckedWrite {
    /// `UPDATE … WHERE run_id = ?`: the check in the client is all there is.
    Unconditional,
    /// The fenced join: the check is repeated in the writing statement.
    Fenced,
}

/// What a naive completion checks besides the run id (see [`JobLeaseStore::complete_run_naive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NaiveCompletion {
    /// The lease name is held by someone, unexpired — whoever and whichever generation.
    LeaseNameOnly,
    /// The lease is held, unexpired, by this owner token — whichever generation.
    OwnerTokenOnly,
}

impl NaiveCompletion {
    pub const ALL: [NaiveCompletion; 2] = [
        NaiveCompletion::LeaseNameOnly,
        NaiveCompletion::OwnerTokenOnly,
    ];

    /// How the evidence names it.
    pub fn as_str(self) -> &'static str {
        match self {
            NaiveCompletion::LeaseNameOnly => "only lease_name (+ expiry)",
            NaiveCompletion::OwnerTokenOnly => "only owner_token (+ expiry)",
        }
    }
}

/// The fenced completion. Placeholders: run id, lease name, fence token, owner token. The run is
/// joined to *its own* lease row, and run and lease must agree on fence and owner.
const COMPLETE_RUN: &str = "UPDATE reconciliation_runs AS r
                              JOIN fenced_job_leases AS l ON l.lease_name = r.lease_name
                               SET r.status = 'completed', r.finished_at = CURRENT_TIMESTAMP(3)
                             WHERE r.run_id = ? AND l.lease_name = ?
                               AND r.fence_token = l.fence_token AND l.fence_token = ?
                               AND r.owner_token = l.owner_token AND l.owner_token = ?
                               AND l.leased_until > CURRENT_TIMESTAMP(3)";

/// What an operator does by hand, not what a service does: kept here because it is SQL of the
/// job lease store, and only so that U1 can show what is left when it happens.
pub mod operator_mistake {
    use super::*;

    /// The mistake: deletes a job lease's row by hand, as a "cleanup" of stale leases might. Its
    /// fence is forgotten with the row: the next acquire starts again at fence 1, so a fence no
    /// longer names one holding — only the owner token in the completion's join still tells a
    /// new holding's runs from an old one's.
    pub async fn delete_the_job_lease(pool: &MySqlPool, lease_name: &str) -> Result<()> {
        sqlx::query("DELETE FROM fenced_job_leases WHERE lease_name = ?")
            .bind(lease_name)
            .execute(pool)
            .await
            .op("delete the job lease by hand")?;
        Ok(())
    }
}

/// Creates the database the fenced-job tables live in, if it is missing. `name` must be a plain
/// identifier (letters, digits, `_`): it cannot be a bound parameter.
pub async fn create_database(conn: &mut sqlx::MySqlConnection, name: &str) -> Result<()> {
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "a plain database name"
    );
    sqlx::Executor::execute(
        conn,
        format!("CREATE DATABASE IF NOT EXISTS {name}").as_str(),
    )
    .await
    .op("create the fenced-job database")?;
    Ok(())
}
