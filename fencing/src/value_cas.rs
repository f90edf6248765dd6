//! antirez's proposal against Kleppmann ("Is Redlock safe?"): no counter, the lock's own random
//! value as the check. A holder that starts to work on the resource first *claims* it — sets the
//! resource's current lock value to its own, unconditionally — and then writes only while that
//! value is still its own (a check-and-set). Random values never repeat, so a server that forgot
//! a counter cannot make two holders equal (RL3); but a claim is unconditional — the resource
//! cannot tell an older value from a newer one — so a stale holder whose claim arrives after the
//! new holder's takes the resource back (RL1's late claim), which a monotonic token refuses.
//!
//! One table in the resource database, `value_cas`, one row per scope (made here on first use).

use sqlx::PgPool;

use crate::{DbContext, Result};

/// The table, made on first use by the resource's owner role.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS value_cas (
    scope      text PRIMARY KEY,
    lock_value text NOT NULL,
    content    text,
    writer     text
)";

/// The resource checked by the lock's value.
#[derive(Debug, Clone)]
pub struct ValueCas {
    pool: PgPool,
}

/// A scope's row: the value that claimed it last, and the last accepted write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasState {
    pub lock_value: String,
    pub content: Option<String>,
    pub writer: Option<String>,
}

impl ValueCas {
    /// On the resource database's pool; makes the table if it is missing.
    pub async fn new(pool: PgPool) -> Result<Self> {
        sqlx::query(SCHEMA)
            .execute(&pool)
            .await
            .op("create the value_cas table")?;
        Ok(ValueCas { pool })
    }

    /// Sets `scope`'s current lock value to `value`, whatever it was: the holder starts to work.
    pub async fn claim(&self, scope: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO value_cas (scope, lock_value) VALUES ($1, $2)
             ON CONFLICT (scope) DO UPDATE SET lock_value = EXCLUDED.lock_value",
        )
        .bind(scope)
        .bind(value)
        .execute(&self.pool)
        .await
        .op("claim the resource with the lock's value")?;
        Ok(())
    }

    /// Writes `content` only if `scope`'s current lock value is still `value` (one statement):
    /// whether it was accepted.
    pub async fn write(
        &self,
        scope: &str,
        value: &str,
        content: &str,
        writer: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE value_cas SET content = $3, writer = $4 WHERE scope = $1 AND lock_value = $2",
        )
        .bind(scope)
        .bind(value)
        .bind(content)
        .bind(writer)
        .execute(&self.pool)
        .await
        .op("write if the lock's value is still the holder's")?;
        Ok(done.rows_affected() == 1)
    }

    /// `scope`'s row, if it was ever claimed.
    pub async fn state(&self, scope: &str) -> Result<Option<CasState>> {
        let row: Option<(String, Option<String>, Option<String>)> =
            sqlx::query_as("SELECT lock_value, content, writer FROM value_cas WHERE scope = $1")
                .bind(scope)
                .fetch_optional(&self.pool)
                .await
                .op("read the value_cas row")?;
        Ok(row.map(|(lock_value, content, writer)| CasState {
            lock_value,
            content,
            writer,
        }))
    }
}
