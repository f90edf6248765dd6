//! The SQL lease store: a lease table run by a profile's statements on PostgreSQL —
//! seed 004's own design unless `--sut` names another. Invariants I1 (at most one unexpired
//! holder, by the database clock) and I2 (tokens strictly increase and are never reused).
//!
//! Each operation is ONE statement on an autocommit connection. Only the database clock decides
//! expiry: `now()` inside an autocommit statement is the statement's own start time. Inside an
//! explicit transaction `now()` is frozen at the transaction's start (experiment F2), which is why
//! [`SqlLeaseStore`] only ever runs these statements on a pool, never inside a transaction.
//!
//! The client keeps a *local deadline* for stopping early, from a monotonic clock read **before**
//! the request is sent, plus `ttl - margin`. It never compares its wall clock with `expires_at`.
//! The local deadline is an efficiency device only: safety comes from the resource's fence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::{PgExecutor, PgPool, Row};

use super::{Grant, Holding, JudgedBy, LeaseStore, StoreFuture, StoreId, StoreKind, TtlInForce};
use crate::profile::{Args, LeaseSql, Profile};
use crate::{DbContext, Error, Result};

/// A client of the lease table, running the statements of a profile (by default the built-in
/// `seed004`). Cheap to clone; every call takes a connection from the pool and runs one
/// autocommit statement.
#[derive(Debug, Clone)]
pub struct SqlLeaseStore {
    pool: PgPool,
    margin: Duration,
    profile: Arc<Profile>,
    ttl_in_force: TtlInForce,
}

impl SqlLeaseStore {
    /// The lab's own lease store ([`Profile::seed004`]). `margin` is subtracted from every TTL to
    /// form the local deadline.
    pub fn new(pool: PgPool, margin: Duration) -> Self {
        SqlLeaseStore::with_profile(pool, margin, Arc::new(Profile::seed004().clone()))
    }

    /// The lease store of `profile`.
    pub fn with_profile(pool: PgPool, margin: Duration, profile: Arc<Profile>) -> Self {
        SqlLeaseStore {
            pool,
            margin,
            profile,
            ttl_in_force: TtlInForce::default(),
        }
    }

    /// This store with `ttl` in force for `inspect`'s `:ttl_ms` until an acquire or renew
    /// through it asks another ([`TtlInForce`]): the run's `--ttl`.
    pub fn with_ttl_in_force(self, ttl: Duration) -> Self {
        self.ttl_in_force.set(ttl);
        self
    }

    /// This store sharing `ttl` ([`TtlInForce`]) with the store it replaces (a reconnection:
    /// the design's configuration stays).
    pub fn sharing_ttl_in_force(mut self, ttl: &TtlInForce) -> Self {
        self.ttl_in_force = ttl.clone();
        self
    }

    /// What `inspect`'s `:ttl_ms` reads ([`TtlInForce`]).
    pub fn ttl_in_force(&self) -> &TtlInForce {
        &self.ttl_in_force
    }

    /// The arguments of an `inspect` of `name`: its `:ttl_ms` is the TTL in force; `Err` when the
    /// profile's inspect names it and none was given.
    pub(crate) fn inspect_args<'a>(&self, name: &'a str) -> Result<Args<'a>> {
        inspect_args(&self.sql().inspect, &self.ttl_in_force, name)
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The name of the design whose statements it runs (`seed004`, `quartz-style`, …).
    pub fn profile_name(&self) -> &str {
        &self.profile.name
    }

    /// The lab's hook: a transaction that holds the lease table against every write — each
    /// acquire, renew and release waits (`LOCK TABLE … IN EXCLUSIVE MODE`; reads go on) — until
    /// it ends. Taken as the store's own role, whose search path finds the table.
    pub async fn hold_writes(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        let mut tx = self.pool.begin().await.map_err(Error::from_sqlx("begin"))?;
        sqlx::query(&format!(
            "LOCK TABLE {} IN EXCLUSIVE MODE",
            self.sql().table
        ))
        .execute(&mut *tx)
        .await
        .map_err(Error::from_sqlx("LOCK TABLE"))?;
        Ok(tx)
    }

    /// What is subtracted from every TTL to form the local deadline.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The lease side of the profile this store runs.
    pub fn sql(&self) -> &LeaseSql {
        &self.profile.lease
    }

    /// Takes the lease if it is absent, expired or released. `Some(grant)` carries a token
    /// greater than any issued before for this name — what fencing needs; seed 004 counts 1, 2,
    /// 3, other designs leave gaps — and `None` means it is held.
    pub async fn acquire(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        self.check_timing(ttl)?;
        self.ttl_in_force.set(ttl);
        let sent = Instant::now();
        let token = stmt::acquire(self.sql(), &self.pool, name, holder, ttl).await?;
        token
            .map(|token| self.grant(name, holder, token, ttl, sent))
            .transpose()
    }

    pub(super) fn check_timing(&self, ttl: Duration) -> Result<()> {
        super::check_timing(ttl, self.margin)
    }

    /// The grant of a successful acquire whose request was sent at `sent`; `Err` when its token
    /// contradicts the profile's claims.
    pub(super) fn grant(
        &self,
        name: &str,
        holder: &str,
        token: i64,
        ttl: Duration,
        sent: Instant,
    ) -> Result<Grant> {
        self.token_as_claimed("acquire", token)?;
        Ok(Grant::new(
            name,
            holder,
            token,
            ttl,
            sent + (ttl - self.margin),
        ))
    }

    /// `Err` when `token`, answered by `statement`, contradicts the profile's claims: a design
    /// with a token at the lease answers one above 0, a design without answers 0.
    fn token_as_claimed(&self, statement: &'static str, token: i64) -> Result<()> {
        let (claim, fits) = if self.profile.claims.token_at_lease {
            (
                "a token at the lease (token_at_lease = true, above 0)",
                token > 0,
            )
        } else {
            (
                "no token at the lease (token_at_lease = false: it answers 0)",
                token == 0,
            )
        };
        if fits {
            Ok(())
        } else {
            Err(Error::Claim {
                profile: self.profile.name.clone(),
                claim,
                statement,
                token,
            })
        }
    }

    /// Extends the holding identified by `grant` by its TTL, if it has not expired. An expired
    /// lease is never renewed, even if nobody took it over: re-acquire and get a new token.
    /// On success the local deadline moves (from a clock read before the request was sent).
    pub async fn renew(&self, grant: &mut Grant) -> Result<bool> {
        self.ttl_in_force.set(grant.ttl);
        let sent = Instant::now();
        let renewed = stmt::renew(self.sql(), &self.pool, grant, JudgedBy::Now).await?;
        if renewed {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed)
    }

    /// Gives the lease up at once (`expires_at = '-infinity'`). The token never goes back.
    /// `false` when this holding is no longer the lease's current one.
    pub async fn release(&self, grant: &Grant) -> Result<bool> {
        let done = self
            .sql()
            .release
            .query(&stmt::args_of(grant))
            .execute(&self.pool)
            .await
            .op("release the lease")?;
        Ok(done.rows_affected() == 1)
    }

    /// Reads the lease row and the database's verdict on it, in one statement.
    pub async fn inspect(&self, name: &str) -> Result<Option<Holding>> {
        // The profile's inspect answers holder, token and expires_at; the database's verdict on
        // them is read around it, in the same statement.
        let sql = format!(
            "SELECT holder, token, expires_at::text, extract(epoch FROM expires_at)::float8,
                    expires_at <= now(), expires_at = '-infinity'::timestamptz, now()::text,
                    extract(epoch FROM now())::float8
               FROM ({}) AS l",
            self.sql().inspect.sql()
        );
        let row = self
            .sql()
            .inspect
            .query_with(&sql, &self.inspect_args(name)?)
            .fetch_optional(&self.pool)
            .await
            .op("read the lease row")?;
        if let Some(r) = &row {
            self.token_as_claimed("inspect", r.get(1))?;
        }
        Ok(row.map(|r| Holding {
            holder: r.get(0),
            token: r.get(1),
            expires_at: r.get(2),
            expires_epoch: r.get(3),
            expired: r.get(4),
            released: r.get(5),
            db_now: r.get(6),
            db_now_epoch: r.get(7),
        }))
    }

    /// True when nobody holds the lease by the database clock (absent, expired or released).
    pub async fn is_free(&self, name: &str) -> Result<bool> {
        Ok(self.inspect(name).await?.is_none_or(|row| row.expired))
    }

    /// The database clock (`clock_timestamp()`), the one clock that decides expiry, as text.
    pub async fn db_clock(&self) -> Result<String> {
        sqlx::query_scalar("SELECT clock_timestamp()::text")
            .fetch_one(&self.pool)
            .await
            .op("read the database clock")
    }

    /// The number of rows in the lease table.
    pub async fn row_count(&self) -> Result<i64> {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {}", self.sql().table))
            .fetch_one(&self.pool)
            .await
            .op("count the lease rows")
    }
}

/// The SQL lease store in the registry (`crate::stores::STORES`).
pub const KIND: StoreKind = StoreKind {
    id: StoreId::Postgres,
    token: "token column",
    about: "a lease table on PostgreSQL, run by a profile's statements (seed 004's unless --sut names another)",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(async move { Ok(Arc::new(at.table.clone()) as Arc<dyn LeaseStore>) })),
};

impl LeaseStore for SqlLeaseStore {
    fn token_name(&self) -> String {
        format!(
            "token column of {} (profile {})",
            self.sql().table,
            self.profile.name
        )
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(SqlLeaseStore::acquire(self, name, holder, ttl))
    }

    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(SqlLeaseStore::renew(self, grant))
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        Box::pin(SqlLeaseStore::release(self, grant))
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        Box::pin(SqlLeaseStore::inspect(self, name))
    }

    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        Box::pin(async { self.db_clock().await.map(Some) })
    }
}

/// The arguments of an `inspect` of `name` by `statement`, its `:ttl_ms` the TTL in force.
pub(crate) fn inspect_args<'a>(
    statement: &crate::profile::Statement,
    ttl: &TtlInForce,
    name: &'a str,
) -> Result<Args<'a>> {
    let ttl_ms = match ttl.ms() {
        Some(ms) => ms,
        None if statement.params().contains(&crate::profile::Param::TtlMs) => {
            return Err(Error::NoTtlInForce)
        }
        None => 0.0,
    };
    Ok(Args {
        name,
        ttl_ms,
        ..Args::default()
    })
}

/// The lease statements themselves, runnable on any executor. [`SqlLeaseStore`] runs them in
/// autocommit; experiments run them inside a transaction to show why that is wrong. Each takes
/// the profile's lease side ([`SqlLeaseStore::sql`]).
pub mod stmt {
    use super::*;

    /// The arguments of a statement about `grant`'s holding.
    pub(crate) fn args_of(grant: &Grant) -> Args<'_> {
        Args {
            name: &grant.name,
            holder: &grant.holder,
            token: grant.token,
            ttl_ms: millis(grant.ttl),
            ..Args::default()
        }
    }

    pub(in crate::lease) fn acquire_args<'a>(
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> Args<'a> {
        Args {
            name,
            holder,
            ttl_ms: millis(ttl),
            ..Args::default()
        }
    }

    /// The acquire statement. A returned row is the only success test: `RETURNING` yields a row
    /// only for an inserted row or for a conflicting row the `WHERE` let the update through.
    pub async fn acquire<'e>(
        sql: &LeaseSql,
        e: impl PgExecutor<'e>,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<i64>> {
        let row = sql
            .acquire
            .query(&acquire_args(name, holder, ttl))
            .fetch_optional(e)
            .await
            .op("acquire the lease")?;
        row.map(|r| r.try_get(0))
            .transpose()
            .op("read the granted token")
    }

    /// The renew statement, judged by `clock`: [`JudgedBy::Now`] runs the profile's statement
    /// as it is; [`JudgedBy::ClockTimestamp`] the same statement with every `now()` read as
    /// `clock_timestamp()` (F2: what changes inside a long transaction).
    pub async fn renew<'e>(
        sql: &LeaseSql,
        e: impl PgExecutor<'e>,
        grant: &Grant,
        clock: JudgedBy,
    ) -> Result<bool> {
        let text = match clock {
            JudgedBy::Now => sql.renew.sql().to_owned(),
            JudgedBy::ClockTimestamp => sql.renew.sql().replace("now()", "clock_timestamp()"),
        };
        let done = sql
            .renew
            .query_with(&text, &args_of(grant))
            .execute(e)
            .await
            .op("renew the lease")?;
        Ok(done.rows_affected() == 1)
    }

    /// Both database clocks as one statement sees them.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Clocks {
        /// `now()`: the start of the current transaction.
        pub now: String,
        /// `clock_timestamp()`: the moment of the call.
        pub clock_timestamp: String,
        /// `clock_timestamp() - now()` in milliseconds: how long the transaction has been
        /// open by the database clock (0 to a few µs in an autocommit statement).
        pub clock_minus_now_ms: f64,
    }

    /// Reads `now()` and `clock_timestamp()` in one statement (the clock read once).
    pub async fn clocks<'e>(e: impl PgExecutor<'e>) -> Result<Clocks> {
        let r = sqlx::query(
            "SELECT n::text, c::text, (extract(epoch FROM c - n) * 1000)::float8
               FROM (SELECT now() AS n, clock_timestamp() AS c) AS t",
        )
        .fetch_one(e)
        .await
        .op("read the database clocks")?;
        Ok(Clocks {
            now: r.get(0),
            clock_timestamp: r.get(1),
            clock_minus_now_ms: r.get(2),
        })
    }

    /// Whether the lease looks expired judged by `now()` of the executor's transaction (`None`
    /// when there is no row): the judgement every lease statement makes.
    pub async fn expired_by_now<'e>(
        store: &SqlLeaseStore,
        e: impl PgExecutor<'e>,
        name: &str,
    ) -> Result<Option<bool>> {
        let sql = store.sql();
        let judged = format!(
            "SELECT expires_at <= now() FROM ({}) AS l",
            sql.inspect.sql()
        );
        let row = sql
            .inspect
            .query_with(&judged, &store.inspect_args(name)?)
            .fetch_optional(e)
            .await
            .op("judge the lease by now()")?;
        Ok(row.map(|r| r.get(0)))
    }

    fn millis(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }
}
