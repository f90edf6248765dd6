//! SQL of the lease table that a service would never run, kept apart from the store a reader
//! copies (`sql.rs`): an acquire timed by the server's own clock (F3 asks whether contenders'
//! statements really ran at the same time; `lab profile check` prepares a profile's acquire in
//! that form too), a hold on the lease table that makes F3's contenders wait at the server and
//! lets them go together ([`TableGate`]), and an operator's mistake (F11 truncates the lease
//! table by hand to show what it costs). Nothing of the system under test calls these.

use std::time::{Duration, Instant};

use sqlx::{PgExecutor, Postgres, Row, Transaction};

use super::sql::stmt::acquire_args;
use super::{Grant, SqlLeaseStore};
use crate::profile::LeaseSql;
use crate::{DbContext, Result};

impl SqlLeaseStore {
    /// [`SqlLeaseStore::acquire`], the same statement, with the moments the database ran it (F3:
    /// did the contenders' statements really execute at the same time on the server?).
    pub async fn acquire_timed(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(Option<Grant>, ServerSpan)> {
        self.check_timing(ttl)?;
        let sent = Instant::now();
        let timed = acquire_timed(self.sql(), self.pool(), name, holder, ttl).await?;
        let grant = timed
            .token
            .map(|token| self.grant(name, holder, token, ttl, sent))
            .transpose()?;
        Ok((grant, timed.span))
    }
}

impl SqlLeaseStore {
    /// Holds the lease table (`LOCK TABLE … IN SHARE MODE`, in a transaction of this store's
    /// connection) so that every statement that writes it waits at the server until
    /// [`TableGate::open`]: F3's barrier, at the server rather than in the lab's tasks. Each
    /// contender's acquire waits for the table's lock before it executes — at Parse the first
    /// time its connection prepares the statement, at Bind once it is cached — so the
    /// `statement_timestamp()` [`acquire_timed`] reports (taken at Execute) falls after the gate
    /// opened, while its `now()`, the transaction's start, may fall before. Dropped unopened,
    /// the transaction rolls back and the table is free again.
    pub async fn gate(&self) -> Result<TableGate> {
        let mut tx = self
            .pool()
            .begin()
            .await
            .op("begin the gate's transaction")?;
        sqlx::query(&format!("LOCK TABLE {} IN SHARE MODE", self.sql().table))
            .execute(&mut *tx)
            .await
            .op("hold the lease table (LOCK TABLE … IN SHARE MODE)")?;
        Ok(TableGate { tx })
    }

    /// How many sessions of the lease database wait on a lock now (`pg_stat_activity`, a live
    /// view): F3's contenders, once they reached the server — waiting for the lease table the
    /// gate holds, or queued behind a contender that does (a design that takes a row lock before
    /// it writes the table, Quartz's `QRTZ_LOCKS … FOR UPDATE`, queues the others on that row,
    /// not on the table).
    pub async fn waiting_for_the_table(&self) -> Result<i64> {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'
                AND pid <> pg_backend_pid()",
        )
        .fetch_one(self.pool())
        .await
        .op("count the statements waiting at the server")
    }
}

/// The lease table held by [`SqlLeaseStore::gate`].
pub struct TableGate {
    tx: Transaction<'static, Postgres>,
}

impl TableGate {
    /// Lets every waiting statement go at once: the gate's transaction ends, its lock with it.
    pub async fn open(self) -> Result<()> {
        self.tx
            .commit()
            .await
            .op("open the gate (end its transaction)")
    }
}

/// When the database ran one statement, by its own clock, in microseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSpan {
    /// `statement_timestamp()`: when the server began to execute the statement.
    pub started_us: i64,
    /// `now()`: the clock the acquire judges expiry by — the transaction's start. Sent with the
    /// extended protocol (as sqlx sends it), an autocommit statement's transaction starts at its
    /// Parse message, and `statement_timestamp()` moves on at its Execute: `now()` can be earlier
    /// than `started_us`, and a statement started after `expires_at` may still have been judged
    /// before it (seen: an acquire refused with `statement_timestamp()` at `expires_at`).
    pub judged_us: i64,
    /// `clock_timestamp()` read once the statement's work was done (any lock wait
    /// included), before its commit.
    pub finished_us: i64,
}

/// An acquire with the moments the database ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedAcquire {
    /// The new token, as [`super::stmt::acquire`] returns it: `None` when the lease is held.
    pub token: Option<i64>,
    pub span: ServerSpan,
}

/// `acquire` (its text, `$n` placeholders) inside the query [`acquire_timed`] runs: a profile
/// is checked with it too, since not every statement may sit in a `WITH` (one with a
/// data-modifying `WITH` of its own may not).
pub fn timed_sql(acquire: &str) -> String {
    format!(
        "WITH attempt AS ({acquire}), outcome AS MATERIALIZED (SELECT (SELECT * FROM attempt) AS token)
         SELECT token,
                (extract(epoch FROM statement_timestamp()) * 1000000)::int8,
                (extract(epoch FROM clock_timestamp()) * 1000000)::int8,
                (extract(epoch FROM now()) * 1000000)::int8
           FROM outcome"
    )
}

/// The acquire statement, unchanged, as a data-modifying CTE, with the statement's start
/// (`statement_timestamp()`), the clock it judged expiry by (`now()`) and the clock read after it
/// (`clock_timestamp()`) returned
/// whether or not it granted the lease. Semantics are the acquire's: PostgreSQL runs a
/// data-modifying `WITH` exactly once and to completion, in the same autocommit statement;
/// the outer query only reads its result. The clock is read in the outer query, over the
/// materialized result, so it is read after the `INSERT` finished, lock waits included.
pub async fn acquire_timed<'e>(
    sql: &LeaseSql,
    e: impl PgExecutor<'e>,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Result<TimedAcquire> {
    let timed = timed_sql(sql.acquire.sql());
    let r = sql
        .acquire
        .query_with(&timed, &acquire_args(name, holder, ttl))
        .fetch_one(e)
        .await
        .op("acquire the lease (timed)")?;
    Ok(TimedAcquire {
        token: r.get(0),
        span: ServerSpan {
            started_us: r.get(1),
            finished_us: r.get(2),
            judged_us: r.get(3),
        },
    })
}

/// What an operator does by hand, not what a service does. Kept here because it is SQL of the
/// lease store, and only so that experiment F11 can show what it costs; nothing else calls it.
pub mod operator_mistake {
    use super::*;

    /// The mistake: empties the lease table by hand (`TRUNCATE lease`), as a "cleanup" of old
    /// rows might. The tokens issued so far are forgotten with their rows, so the next grant is
    /// token 1 again (I2 broken) — below the floor of every resource that accepted a greater one,
    /// which from then on rejects the lease's legitimate holders (evidence/LIMITS.md says what
    /// repairs it). Releasing or expiring a lease never needs this: the row and its token stay.
    pub async fn truncate_the_lease_table<'e>(
        sql: &LeaseSql,
        e: impl PgExecutor<'e>,
    ) -> Result<()> {
        sqlx::query(&format!("TRUNCATE {}", sql.table))
            .execute(e)
            .await
            .op("truncate the lease table by hand")?;
        Ok(())
    }
}
