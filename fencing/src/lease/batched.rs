//! The lease table with a **batched renewal**: the lab's own lease rows (seed 004's
//! table and its acquire, release and inspect), renewed as real schedulers renew them — one
//! statement per holder per period, every lease the holder holds in it — instead of one statement
//! per lease.
//!
//! The statement is seed 004's renewal over a set: each row is extended only if it is still the
//! holding named (name, holder, token) and unexpired by the database's clock, exactly the single
//! renewal's predicate, so I1 and I2 hold as they do there. What it changes for fencing: nothing
//! per lease — a lease of the batch that was lost (expired, or taken over) is simply not matched
//! and answers `false`, the others are renewed — but one failed request (a broken connection, a
//! statement timeout) fails every lease of the batch at once, where single renewals fail one by
//! one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Grant, Holding, LeaseStore, SqlLeaseStore, StoreAt, StoreFuture, StoreId, StoreKind};
use crate::{DbContext as _, Error, Result};

/// Every lease of the batch at once: extended where the holding named is still current and
/// unexpired (seed 004's renewal, row by row); the names renewed.
const RENEW_ALL: &str = "
UPDATE lease AS l SET expires_at = now() + make_interval(secs => b.ttl_ms::float8 / 1000)
  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS b(name, holder, token, ttl_ms)
 WHERE l.name = b.name AND l.holder = b.holder AND l.token = b.token AND l.expires_at > now()
RETURNING l.name";

/// The lease table, renewed in batches.
#[derive(Debug, Clone)]
pub struct BatchedLeaseStore {
    table: SqlLeaseStore,
}

impl BatchedLeaseStore {
    /// The batched renewal over `table`, whose design must be seed 004's lease table (the
    /// batch statement is its renewal, written over a set).
    pub fn new(table: SqlLeaseStore) -> Result<Self> {
        if table.sql().table != "lease" || !table.profile_name().starts_with("seed004") {
            return Err(Error::Service {
                store: "postgres-batched",
                what: "open the store".into(),
                detail: format!(
                    "the batched renewal is seed 004's lease table's renewal over a set; the \
                     design in force is {} (table {})",
                    table.profile_name(),
                    table.sql().table
                ),
            });
        }
        Ok(BatchedLeaseStore { table })
    }

    async fn renew_batch(&self, grants: &mut [Grant]) -> Result<Vec<bool>> {
        if grants.is_empty() {
            return Ok(Vec::new());
        }
        let margin = self.table.margin();
        let sent = Instant::now();
        let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
        let holders: Vec<&str> = grants.iter().map(|g| g.holder.as_str()).collect();
        let tokens: Vec<i64> = grants.iter().map(|g| g.token).collect();
        let ttls: Vec<i64> = grants.iter().map(|g| g.ttl.as_millis() as i64).collect();
        let renewed: Vec<String> = sqlx::query_scalar(RENEW_ALL)
            .bind(&names)
            .bind(&holders)
            .bind(&tokens)
            .bind(&ttls)
            .fetch_all(self.table.pool())
            .await
            .op("renew the holder's leases in one statement")?;
        let renewed: std::collections::HashSet<String> = renewed.into_iter().collect();
        Ok(grants
            .iter_mut()
            .map(|g| {
                let ok = renewed.contains(&g.name);
                if ok {
                    let ttl: Duration = g.ttl;
                    g.renewed(sent + (ttl - margin));
                }
                ok
            })
            .collect())
    }
}

impl LeaseStore for BatchedLeaseStore {
    fn token_name(&self) -> String {
        format!("{}, renewed in batches", self.table.token_name())
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        LeaseStore::acquire(&self.table, name, holder, ttl)
    }

    /// A batch of one.
    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let renewed = self.renew_batch(std::slice::from_mut(grant)).await?;
            Ok(renewed.first().copied().unwrap_or(false))
        })
    }

    fn renew_all<'a>(&'a self, grants: &'a mut [Grant]) -> StoreFuture<'a, Vec<bool>> {
        Box::pin(self.renew_batch(grants))
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        LeaseStore::release(&self.table, grant)
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        LeaseStore::inspect(&self.table, name)
    }

    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        LeaseStore::clock(&self.table)
    }
}

async fn open(at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    Ok(Arc::new(BatchedLeaseStore::new(at.table.clone())?))
}

/// The lease table renewed in batches, in the registry.
pub const KIND: StoreKind = StoreKind {
    id: StoreId::PostgresBatched,
    token: "token column",
    about: "the lease table (seed 004's rows) renewed in batches: one statement per holder per period, every lease it holds in it",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at))),
};
