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
//!
//! The design's statements are a profile's ([`JobProfile`]: seed 000's own is the built-in
//! `seed000`, `profiles/seed000.toml`); what is here besides is the lab's: the questions it asks
//! of the profile's `inspect`, and the negative controls — completions that check less, a renew
//! by the client's clock, an operator's DELETE — which run on seed 000's two tables.

use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions as _, Connection as _, Executor, MySqlPool};

use crate::lease::Grant;
use crate::profile::{Args, Dialect, JobProfile, ProfileError, Statement};
use crate::{DbContext, Result};

type ProfileResult = std::result::Result<(), ProfileError>;

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

impl JobLease {
    /// The holding a [`Grant`] of this store names (its holder is the owner token, its token
    /// the fence token).
    pub fn of(grant: &Grant) -> JobLease {
        JobLease {
            lease_name: grant.name.clone(),
            owner_token: grant.holder.clone(),
            fence_token: grant.token,
            ttl: grant.ttl,
        }
    }

    /// The holding as a statement's parameters.
    fn args(&self) -> Args<'_> {
        Args {
            name: &self.lease_name,
            holder: &self.owner_token,
            token: self.fence_token,
            ttl_ms: self.ttl.as_secs_f64() * 1000.0,
            ..Args::default()
        }
    }
}

/// The kind of type the lab reads, from MariaDB's name for a column's type: any text type is
/// `TEXT`, either time type `DATETIME`.
fn mariadb_kind(ty: &str) -> &str {
    match ty {
        "VARCHAR" | "CHAR" | "TEXT" | "TINYTEXT" | "MEDIUMTEXT" | "LONGTEXT" => "TEXT",
        "DATETIME" | "TIMESTAMP" => "DATETIME",
        other => other,
    }
}

/// A row's first column (the answer of a statement the lab reads one value of).
fn first_column<T>(row: sqlx::mysql::MySqlRow) -> std::result::Result<T, sqlx::Error>
where
    T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
{
    sqlx::Row::try_get(&row, 0)
}

/// The statements of a DDL text, one by one: `--` comment lines dropped, split at `;`.
fn ddl_statements(ddl: &str) -> Vec<String> {
    let without_comments: Vec<&str> = ddl
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    without_comments
        .join("\n")
        .split(';')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().to_owned())
        .collect()
}

/// Creates the profile's tables where they are missing, and empties them.
pub async fn reset(pool: &MySqlPool, profile: &JobProfile) -> Result<()> {
    for ddl in [&profile.lease.schema, &profile.runs.schema] {
        for stmt in ddl_statements(ddl) {
            let stmt = stmt.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ");
            pool.execute(stmt.as_str())
                .await
                .op("create the fenced-job tables")?;
        }
    }
    for table in [&profile.runs.table, &profile.lease.table] {
        pool.execute(format!("DELETE FROM {table}").as_str())
            .await
            .op("empty the fenced-job tables")?;
    }
    Ok(())
}

/// The fenced job lease store: a [`JobProfile`]'s statements on a pool.
#[derive(Debug, Clone)]
pub struct JobLeaseStore {
    pub(crate) pool: MySqlPool,
    pub(crate) profile: Arc<JobProfile>,
    /// The lab's questions of the profile's `inspect`, which they wrap (its places first).
    held_sql: String,
    free_sql: String,
    until_sql: String,
    pub(crate) state_sql: String,
    /// Subtracted from every TTL to form a [`Grant`]'s local deadline ([`LeaseStore`]).
    pub(crate) margin: Duration,
    /// What `inspect`'s `:ttl_ms` reads ([`crate::lease::TtlInForce`]).
    ttl_in_force: crate::lease::TtlInForce,
}

impl JobLeaseStore {
    /// Seed 000's own design (the built-in `seed000`) on `pool`.
    pub fn new(pool: MySqlPool) -> Self {
        JobLeaseStore::with_profile(pool, Arc::new(JobProfile::seed000().clone()))
    }

    /// The design `profile` describes, on `pool`.
    pub fn with_profile(pool: MySqlPool, profile: Arc<JobProfile>) -> Self {
        let [held_sql, free_sql, until_sql, state_sql] =
            JobLeaseStore::wrappers(&profile.lease.inspect);
        JobLeaseStore {
            held_sql,
            free_sql,
            until_sql,
            state_sql,
            pool,
            profile,
            margin: Duration::ZERO,
            ttl_in_force: crate::lease::TtlInForce::default(),
        }
    }

    /// This store with `ttl` in force for `inspect`'s `:ttl_ms` until an acquire or renew
    /// through it asks another: the run's `--ttl`.
    pub fn with_ttl_in_force(self, ttl: Duration) -> Self {
        self.ttl_in_force.set(ttl);
        self
    }

    /// The arguments of an `inspect` of `name`, its `:ttl_ms` the TTL in force.
    pub(crate) fn inspect_args<'a>(&self, name: &'a str) -> Result<Args<'a>> {
        crate::lease::sql::inspect_args(&self.profile.lease.inspect, &self.ttl_in_force, name)
    }

    /// The same store, whose grants ([`LeaseStore`]) keep a local deadline `margin` before their
    /// TTL runs out.
    pub fn with_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The lab's questions of `inspect`: is this holding held (its places, then holder and
    /// token), is the lease free, when does it expire, and the whole lease as [`Holding`] — each
    /// judged by `CURRENT_TIMESTAMP(3)`.
    fn wrappers(inspect: &Statement) -> [String; 4] {
        let inspect = inspect.sql();
        [
            format!(
                "SELECT COUNT(*) FROM ({inspect}) AS i WHERE i.holder = ? AND i.token = ? \
                 AND i.expires_at > CURRENT_TIMESTAMP(3)"
            ),
            format!(
                "SELECT COUNT(*) FROM ({inspect}) AS i WHERE i.expires_at > CURRENT_TIMESTAMP(3)"
            ),
            format!("SELECT CAST(UNIX_TIMESTAMP(i.expires_at) AS CHAR) FROM ({inspect}) AS i"),
            format!(
                "SELECT i.holder, i.token, CAST(i.expires_at AS CHAR), \
                        CAST(UNIX_TIMESTAMP(i.expires_at) AS CHAR), \
                        i.expires_at <= CURRENT_TIMESTAMP(3), CAST(CURRENT_TIMESTAMP(3) AS CHAR), \
                        CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) AS CHAR) FROM ({inspect}) AS i"
            ),
        ]
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub fn profile(&self) -> &JobProfile {
        &self.profile
    }

    /// Takes the lease for `owner_token` (the profile's `acquire`, then its read-back on the
    /// same connection). `None` while someone else holds it.
    pub async fn acquire(
        &self,
        lease_name: &str,
        owner_token: &str,
        ttl: Duration,
    ) -> Result<Option<JobLease>> {
        self.ttl_in_force.set(ttl);
        let args = Args {
            name: lease_name,
            holder: owner_token,
            ttl_ms: ttl.as_secs_f64() * 1000.0,
            ..Args::default()
        };
        let mut conn = self.pool.acquire().await.op("connect to the lease store")?;
        self.profile
            .lease
            .acquire
            .my_query(&args)
            .execute(&mut *conn)
            .await
            .op("acquire the job lease")?;
        let fence: Option<i64> = self
            .profile
            .acquired
            .my_query(&args)
            .try_map(first_column)
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
        self.ttl_in_force.set(lease.ttl);
        self.changes_one_row(
            &self.profile.lease.renew,
            &lease.args(),
            "renew the job lease",
        )
        .await
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
        let done = sqlx::query(controls::RENEW_BY_CLIENT_CLOCK)
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
        let args = self.inspect_args(lease_name)?;
        let epoch: Option<String> = self
            .profile
            .lease
            .inspect
            .my_query_with(&self.until_sql, &args)
            .try_map(first_column)
            .fetch_optional(&self.pool)
            .await
            .op("read the job lease's expiry")?;
        Ok(epoch.map(|e| e.parse().unwrap_or(f64::NAN)))
    }

    /// Ends the holding at once, if it is still the current, unexpired one.
    pub async fn release(&self, lease: &JobLease) -> Result<bool> {
        self.changes_one_row(
            &self.profile.lease.release,
            &lease.args(),
            "release the job lease",
        )
        .await
    }

    /// Whether this holding is the current one and unexpired by database time: the profile's
    /// `inspect`, asked in one statement whether it shows this holder and token, unexpired.
    pub async fn is_held(&self, lease: &JobLease) -> Result<bool> {
        let n: i64 = self
            .profile
            .lease
            .inspect
            .my_query_with(&self.held_sql, &lease.args())
            .bind(&lease.owner_token)
            .bind(lease.fence_token)
            .try_map(first_column)
            .fetch_one(&self.pool)
            .await
            .op("ask whether the job lease is held")?;
        Ok(n == 1)
    }

    /// Whether nobody holds `lease_name` by database time.
    pub async fn is_free(&self, lease_name: &str) -> Result<bool> {
        let args = self.inspect_args(lease_name)?;
        let held: i64 = self
            .profile
            .lease
            .inspect
            .my_query_with(&self.free_sql, &args)
            .try_map(first_column)
            .fetch_one(&self.pool)
            .await
            .op("ask whether the job lease is free")?;
        Ok(held == 0)
    }

    /// Starts a run under `lease`.
    pub async fn start_run(&self, run_id: &str, lease: &JobLease) -> Result<()> {
        let args = Args {
            run: run_id,
            ..lease.args()
        };
        self.profile
            .runs
            .start
            .my_query(&args)
            .execute(&self.pool)
            .await
            .op("start a run")?;
        Ok(())
    }

    /// The design's completion (seed000's: fenced by a join on the lease, in one statement):
    /// `true` when the run was marked completed.
    pub async fn complete_run(&self, run_id: &str, lease: &JobLease) -> Result<bool> {
        let args = Args {
            run: run_id,
            ..lease.args()
        };
        self.changes_one_row(&self.profile.runs.complete, &args, "complete a run")
            .await
    }

    /// Runs one of the profile's statements: whether it changed exactly one row (the design's
    /// "it worked" for a renew, a release, a completion).
    async fn changes_one_row(
        &self,
        s: &Statement,
        args: &Args<'_>,
        what: &'static str,
    ) -> Result<bool> {
        let done = s.my_query(args).execute(&self.pool).await.op(what)?;
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
            NaiveCompletion::LeaseNameOnly => sqlx::query(controls::COMPLETE_LEASE_NAME_ONLY)
                .bind(&lease.lease_name)
                .bind(run_id),
            NaiveCompletion::OwnerTokenOnly => sqlx::query(controls::COMPLETE_OWNER_TOKEN_ONLY)
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
        let done = sqlx::query(controls::COMPLETE_BY_RUN_ID)
            .bind(run_id)
            .execute(&self.pool)
            .await
            .op("complete a run by its id only")?;
        Ok(done.rows_affected() == 1)
    }

    /// When a run was completed, by the database's clock, as Unix seconds with a fraction
    /// (`None`: no such run, or not completed) — read from the lab's own column `finished_at`
    /// of the run table, which a design keeps (U1 dates a completion by it).
    pub async fn finished_at(&self, run_id: &str) -> Result<Option<f64>> {
        let at: Option<Option<String>> = sqlx::query_scalar(
            "SELECT CAST(UNIX_TIMESTAMP(finished_at) AS CHAR) FROM reconciliation_runs \
             WHERE run_id = ?",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .op("read when a run was completed")?;
        Ok(at.flatten().and_then(|t| t.parse().ok()))
    }

    /// A run's status, `None` if there is no such run.
    pub async fn run_status(&self, run_id: &str) -> Result<Option<String>> {
        let args = Args {
            run: run_id,
            ..Args::default()
        };
        self.profile
            .runs
            .status
            .my_query(&args)
            .try_map(first_column)
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

/// The lab's own SQL on seed 000's two tables: the negative controls, whatever the design under
/// test. [`JobProfile::prepare`] prepares them against a design's schema too.
mod controls {
    /// A renew judged by the client's clock (U3's control). Places: the client's epoch, the TTL
    /// in microseconds, lease name, owner token, fence token, the client's epoch.
    pub const RENEW_BY_CLIENT_CLOCK: &str = "UPDATE fenced_job_leases
            SET leased_until = FROM_UNIXTIME(CAST(? AS DECIMAL(20,3))) + INTERVAL ? MICROSECOND
          WHERE lease_name = ? AND owner_token = ? AND fence_token = ?
            AND leased_until > FROM_UNIXTIME(CAST(? AS DECIMAL(20,3)))";

    /// A completion that checks only that someone holds the lease name (U4's control).
    pub const COMPLETE_LEASE_NAME_ONLY: &str = "UPDATE reconciliation_runs AS r
           JOIN fenced_job_leases AS l ON l.lease_name = ?
            SET r.status = 'completed', r.finished_at = CURRENT_TIMESTAMP(3)
          WHERE r.run_id = ? AND l.leased_until > CURRENT_TIMESTAMP(3)";

    /// A completion that checks only the owner token, unexpired (U4's control).
    pub const COMPLETE_OWNER_TOKEN_ONLY: &str = "UPDATE reconciliation_runs AS r
           JOIN fenced_job_leases AS l ON l.lease_name = r.lease_name
            SET r.status = 'completed', r.finished_at = CURRENT_TIMESTAMP(3)
          WHERE r.run_id = ? AND l.owner_token = ?
            AND l.leased_until > CURRENT_TIMESTAMP(3)";

    /// A completion that checks only the run id (U2's and U5's control).
    pub const COMPLETE_BY_RUN_ID: &str = "UPDATE reconciliation_runs
            SET status = 'completed', finished_at = CURRENT_TIMESTAMP(3)
          WHERE run_id = ?";

    /// An operator's cleanup (U1).
    pub const DELETE_THE_LEASE: &str = "DELETE FROM fenced_job_leases WHERE lease_name = ?";

    pub const ALL: [&str; 5] = [
        RENEW_BY_CLIENT_CLOCK,
        COMPLETE_LEASE_NAME_ONLY,
        COMPLETE_OWNER_TOKEN_ONLY,
        COMPLETE_BY_RUN_ID,
        DELETE_THE_LEASE,
    ];
}

impl JobProfile {
    /// Prepares every statement against a scratch database on the MariaDB server `admin`
    /// connects to (as root), holding the profile's schema — the design's statements, the lab's
    /// questions of its `inspect`, and the lab's negative controls, which run on seed 000's
    /// tables. `Err` quotes the server on the first schema or statement it refuses, or names a
    /// statement whose answer is not what its place needs. The scratch database is dropped on
    /// every path.
    pub async fn prepare(&self, admin: &MySqlConnectOptions) -> ProfileResult {
        let db = format!(
            "lab_profile_{}_{}",
            std::process::id(),
            crate::prepare::unique()
        );
        let refused = |place: &str, e| crate::prepare::refused(&self.origin, place, e);
        let mut conn = admin.connect().await.map_err(|e| refused("server", e))?;
        let outcome = async {
            conn.execute(format!("CREATE DATABASE {db}").as_str())
                .await
                .map_err(|e| refused("server", e))?;
            let mut scratch = admin
                .clone()
                .database(&db)
                .connect()
                .await
                .map_err(|e| refused("server", e))?;
            let outcome = self.prepare_in(&mut scratch).await;
            let _ = scratch.close().await;
            outcome
        }
        .await;
        let _ = conn
            .execute(format!("DROP DATABASE IF EXISTS {db}").as_str())
            .await;
        let _ = conn.close().await;
        outcome
    }

    async fn prepare_in(&self, conn: &mut MySqlConnection) -> ProfileResult {
        let refused = |place: &str, e| crate::prepare::refused(&self.origin, place, e);
        for (place, ddl) in [
            ("lease.schema", &self.lease.schema),
            ("resource.schema", &self.runs.schema),
        ] {
            for stmt in ddl_statements(ddl) {
                conn.execute(stmt.as_str())
                    .await
                    .map_err(|e| refused(place, e))?;
            }
        }
        for s in self.statements() {
            self.prepare_one(conn, s).await?;
        }
        let store = JobLeaseStore::wrappers(&self.lease.inspect);
        for sql in store {
            conn.prepare(&sql).await.map_err(|e| {
                let mut e = refused("lease.inspect", e);
                e.message = format!(
                    "the lab asks of it inside a subquery (held? free?), and there {}",
                    e.message
                );
                e
            })?;
        }
        for sql in controls::ALL {
            conn.prepare(sql).await.map_err(|e| {
                let mut e = refused("resource.schema", e);
                e.message = format!(
                    "the lab's negative controls run on seed 000's tables \
                     (fenced_job_leases, reconciliation_runs: keep their names and columns), \
                     and there {}",
                    e.message
                );
                e
            })?;
        }
        Ok(())
    }

    async fn prepare_one(&self, conn: &mut MySqlConnection, s: &Statement) -> ProfileResult {
        let prepared = conn
            .prepare(s.sql())
            .await
            .map_err(|e| crate::prepare::refused(&self.origin, s.slot().key(), e))?;
        let Some(wanted) = s.slot().returns(Dialect::Mariadb) else {
            return Ok(());
        };
        crate::prepare::answers_fit(&self.origin, s.slot(), &prepared, wanted, mariadb_kind)
    }
}

/// What an operator does by hand, not what a service does: kept here because it is SQL of the
/// job lease store, and only so that U1 can show what is left when it happens.
pub mod operator_mistake {
    use super::*;

    /// The mistake: deletes a job lease's row by hand, as a "cleanup" of stale leases might. Its
    /// fence is forgotten with the row: the next acquire starts again at fence 1, so a fence no
    /// longer names one holding — only the owner token in the completion's join still tells a
    /// new holding's runs from an old one's.
    pub async fn delete_the_job_lease(pool: &MySqlPool, lease_name: &str) -> Result<()> {
        sqlx::query(super::controls::DELETE_THE_LEASE)
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
