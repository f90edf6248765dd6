//! Seed 000's fenced job lease as a lease store (`fenced_job::JobLeaseStore`, on MariaDB): the
//! grant's token is the fence token, its holder the owner token, expiry is
//! `CURRENT_TIMESTAMP(3)`'s. The store's statements are the job profile's (`fenced_job`); this
//! file only answers the trait's four questions with them.

use std::time::{Duration, Instant};

use super::{Grant, Holding, LeaseStore, StoreFuture, StoreId, StoreKind};
use crate::fenced_job::{JobLease, JobLeaseStore};
use crate::{DbContext, Result};

/// The job lease store in the registry (`crate::stores::STORES`).
pub const KIND: StoreKind = StoreKind {
    id: StoreId::Mariadb,
    token: "fence token",
    about: "seed 000's fenced job lease on MariaDB, run by a job profile's statements (seed000's unless --sut names another)",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: None,
};

impl LeaseStore for JobLeaseStore {
    fn token_name(&self) -> String {
        format!("fence token (profile {})", self.profile.name)
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(async move {
            let sent = Instant::now();
            let lease = JobLeaseStore::acquire(self, name, holder, ttl).await?;
            Ok(lease.map(|l| {
                Grant::new(
                    name,
                    holder,
                    l.fence_token,
                    ttl,
                    sent + ttl.saturating_sub(self.margin),
                )
            }))
        })
    }

    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let sent = Instant::now();
            let renewed = JobLeaseStore::renew(self, &JobLease::of(grant)).await?;
            if renewed {
                grant.renewed(sent + grant.ttl.saturating_sub(self.margin));
            }
            Ok(renewed)
        })
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        Box::pin(async move { JobLeaseStore::release(self, &JobLease::of(grant)).await })
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        Box::pin(async move {
            let args = self.inspect_args(name)?;
            let row = self
                .profile
                .lease
                .inspect
                .my_query_with(&self.state_sql, &args)
                .fetch_optional(&self.pool)
                .await
                .op("read the job lease")?;
            let Some(r) = row else {
                return Ok(None);
            };
            let get =
                |i: usize| -> Result<String> { sqlx::Row::try_get(&r, i).op("read the job lease") };
            let epoch = |t: String| t.parse::<f64>().unwrap_or(f64::NAN);
            let expired: i64 = sqlx::Row::try_get(&r, 4).op("read the job lease")?;
            Ok(Some(Holding {
                holder: get(0)?,
                token: sqlx::Row::try_get(&r, 1).op("read the job lease")?,
                expires_at: get(2)?,
                expires_epoch: epoch(get(3)?),
                expired: expired != 0,
                // seed 000's release ends the holding by setting its expiry to now: a released
                // lease reads as expired.
                released: false,
                db_now: get(5)?,
                db_now_epoch: epoch(get(6)?),
            }))
        })
    }
}
