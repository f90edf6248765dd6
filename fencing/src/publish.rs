//! A side effect that cannot take a fencing token (experiment F9): a downstream
//! "report published" record keyed by business key.
//!
//! [`Publisher::publish`] is business-key idempotency only (`ON CONFLICT DO NOTHING`): it keeps
//! the *first* arrival, not the newest. [`Publisher::publish_versioned`] carries the source token
//! in the content and keeps the row with the highest token: the fence rebuilt at the business
//! layer. Like the resource, the publisher never reads the lease.

use sqlx::{PgPool, Row};

use crate::{DbContext, Result};

/// A stored publication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub content: String,
    pub publisher: String,
    pub source_token: i64,
}

/// The publish stand-in, reached through the resource role's pool.
#[derive(Debug, Clone)]
pub struct Publisher {
    pool: PgPool,
}

impl Publisher {
    pub fn new(pool: PgPool) -> Self {
        Publisher { pool }
    }

    /// Publishes unless the business key was published before; `true` when this call stored it.
    pub async fn publish(
        &self,
        key: &str,
        content: &str,
        publisher: &str,
        token: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO publication (business_key, content, publisher, source_token)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (business_key) DO NOTHING",
        )
        .bind(key)
        .bind(content)
        .bind(publisher)
        .bind(token)
        .execute(&self.pool)
        .await
        .op("publish")?;
        Ok(done.rows_affected() == 1)
    }

    /// Publishes, replacing an earlier publication only if this one comes from a higher source
    /// token; `true` when this call's content is the one stored.
    pub async fn publish_versioned(
        &self,
        key: &str,
        content: &str,
        publisher: &str,
        token: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO publication AS p (business_key, content, publisher, source_token)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (business_key) DO UPDATE
                SET content = EXCLUDED.content, publisher = EXCLUDED.publisher,
                    source_token = EXCLUDED.source_token, published_at = clock_timestamp()
              WHERE p.source_token < EXCLUDED.source_token",
        )
        .bind(key)
        .bind(content)
        .bind(publisher)
        .bind(token)
        .execute(&self.pool)
        .await
        .op("publish (versioned)")?;
        Ok(done.rows_affected() == 1)
    }

    /// What is published under `key`, if anything.
    pub async fn published(&self, key: &str) -> Result<Option<Publication>> {
        let row = sqlx::query(
            "SELECT content, publisher, source_token FROM publication WHERE business_key = $1",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .op("read a publication")?;
        Ok(row.map(|r| Publication {
            content: r.get(0),
            publisher: r.get(1),
            source_token: r.get(2),
        }))
    }
}
