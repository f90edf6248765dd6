//! The etcd lock (feature `etcd`): a lease — TTL by etcd's own clock, in whole seconds — attached
//! to the lock key, taken with a transaction that succeeds only when the key does not exist
//! (`create_revision == 0`). The token is the key's **create revision**, what etcd's own docs name
//! as its fencing token ("revision number in the case of etcd"): every write to the store raises
//! the revision, so a later grant's is greater, with gaps. Renewal is one keep-alive of the lease,
//! release revokes it; either acts only while the key's create revision is still the grant's.
//!
//! etcd rounds a lease's TTL up to whole seconds and never below its minimum (1.5 × the election
//! timeout): the lab's 1.5 s lease is a 2 s lease here ([`LeaseStore::granted_ttl`]: the lab runs
//! its timelines with the TTL etcd grants). The holding ends when etcd's leader
//! revokes the expired lease and deletes the key (it checks every 500 ms): only then may another
//! take it, so the lease is free when the key is gone. The local deadline stays the requested
//! TTL minus the margin — earlier than the store's expiry, as a deadline should be.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};

use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreKind};
use crate::{Error, Result};

/// How long one request may wait for its answer (a partitioned holder's renewal fails).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The prefix of every lock key the lab makes.
const PREFIX: &str = "fencing-lab/lock/";

/// An etcd lock client on one member.
#[derive(Clone)]
pub struct EtcdLeaseStore {
    client: Client,
    endpoint: String,
    margin: Duration,
}

impl std::fmt::Debug for EtcdLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLeaseStore")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn failed(what: &str, e: etcd_client::Error) -> Error {
    Error::Service {
        store: "etcd",
        what: what.to_owned(),
        detail: e.to_string(),
    }
}

fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

impl EtcdLeaseStore {
    /// Connects to the member at `endpoint` (`host:port`, or several comma-separated).
    pub async fn connect(endpoint: &str, margin: Duration) -> Result<Self> {
        // Several members: `host:port,host:port` (a cluster's endpoints, R3).
        let client = Client::connect(
            endpoint
                .split(',')
                .map(|e| format!("http://{e}"))
                .collect::<Vec<_>>(),
            Some(
                ConnectOptions::new()
                    .with_connect_timeout(REQUEST_TIMEOUT)
                    .with_timeout(REQUEST_TIMEOUT),
            ),
        )
        .await
        .map_err(|e| failed(&format!("connect to etcd at {endpoint}"), e))?;
        Ok(EtcdLeaseStore {
            client,
            endpoint: endpoint.to_owned(),
            margin,
        })
    }

    /// The lock key of `name` as etcd holds it now: its value (the holder), create revision and
    /// lease; `None` when there is none.
    async fn current(&self, name: &str) -> Result<Option<(String, i64, i64)>> {
        let got = self
            .client
            .clone()
            .get(key(name), None)
            .await
            .map_err(|e| failed("read the lock key", e))?;
        Ok(got.kvs().first().map(|kv| {
            (
                kv.value_str().unwrap_or("").to_owned(),
                kv.create_revision(),
                kv.lease(),
            )
        }))
    }

    /// The lease of `grant`'s holding, while the key is still that holding's.
    async fn lease_of(&self, grant: &Grant) -> Result<Option<i64>> {
        Ok(self
            .current(&grant.name)
            .await?
            .filter(|(_, revision, _)| *revision == grant.token)
            .map(|(_, _, lease)| lease))
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.margin)?;
        let mut client = self.client.clone();
        let sent = Instant::now();
        let seconds = i64::try_from(self.granted_ttl(ttl).as_secs()).unwrap_or(i64::MAX);
        let lease = client
            .lease_grant(seconds, None)
            .await
            .map_err(|e| failed("grant a lease", e))?
            .id();
        let txn = Txn::new()
            .when([Compare::create_revision(key(name), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key(name),
                holder,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let done = client.txn(txn).await.map_err(|e| {
            failed(
                "take the lock key (a transaction on create_revision = 0)",
                e,
            )
        })?;
        if !done.succeeded() {
            // Someone holds it: the lease granted for nothing goes at once.
            let _ = client.lease_revoke(lease).await;
            return Ok(None);
        }
        // The put is the transaction's one write: its revision is the key's create revision.
        let token = done.header().map_or(0, |h| h.revision());
        Ok(Some(Grant::new(
            name,
            holder,
            token,
            ttl,
            sent + (ttl - self.margin),
        )))
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let Some(lease) = self.lease_of(grant).await? else {
            return Ok(false);
        };
        let (mut keeper, mut answers) = self
            .client
            .clone()
            .lease_keep_alive(lease)
            .await
            .map_err(|e| failed("open a keep-alive", e))?;
        keeper
            .keep_alive()
            .await
            .map_err(|e| failed("keep the lease alive", e))?;
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, answers.message())
            .await
            .map_err(|_| Error::Service {
                store: "etcd",
                what: "keep the lease alive".into(),
                detail: format!("no answer within {REQUEST_TIMEOUT:?}"),
            })?
            .map_err(|e| failed("keep the lease alive", e))?;
        // A lease etcd has expired answers TTL 0: never renewed.
        let renewed = answer.is_some_and(|a| a.ttl() > 0);
        if renewed {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed)
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let Some(lease) = self.lease_of(grant).await? else {
            return Ok(false);
        };
        self.client
            .clone()
            .lease_revoke(lease)
            .await
            .map_err(|e| failed("revoke the lease", e))?;
        Ok(true)
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let Some((holder, token, lease)) = self.current(name).await? else {
            return Ok(None);
        };
        let left = self
            .client
            .clone()
            .lease_time_to_live(lease, None)
            .await
            .map_err(|e| failed("read the lease's time to live", e))?
            .ttl();
        // etcd tells no clock: the remaining TTL (whole seconds, by the leader) against the
        // moment of the read here.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        // The holding ends when etcd deletes the key: its leader revokes an expired lease on its
        // own schedule (every 500 ms), and until then the key is there and nobody else can take
        // it. Expired is what etcd does, not what the TTL says.
        Ok(Some(Holding {
            holder,
            token,
            expires_at: if left < 0 {
                format!("lease {lease:x} expired, the key not yet deleted by etcd's leader")
            } else {
                format!("in {left} s (lease {lease:x} TTL, etcd's whole seconds)")
            },
            expires_epoch: now + left.max(0) as f64,
            expired: false,
            released: false,
            db_now: "(etcd tells no clock)".into(),
            db_now_epoch: now,
        }))
    }

    async fn reset_now(&self) -> Result<()> {
        self.client
            .clone()
            .delete(
                PREFIX,
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| failed("delete the lock keys", e))?;
        Ok(())
    }
}

impl LeaseStore for EtcdLeaseStore {
    fn token_name(&self) -> String {
        "create revision of the lock key (etcd's fencing token)".into()
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(self.acquire_now(name, holder, ttl))
    }

    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(self.renew_now(grant))
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        Box::pin(self.release_now(grant))
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        Box::pin(self.inspect_now(name))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.reset_now())
    }

    fn granted_ttl(&self, ttl: Duration) -> Duration {
        Duration::from_secs(ttl.as_millis().div_ceil(1000) as u64)
    }
}

async fn open(at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("etcd")?;
    Ok(Arc::new(
        EtcdLeaseStore::connect(endpoint, at.table.margin()).await?,
    ))
}

/// The etcd lock in the registry.
pub const KIND: StoreKind = StoreKind {
    name: "etcd",
    token: "create revision of the lock key",
    about: "an etcd lease on the lock key, taken by a transaction on create_revision = 0; the token is the key's create revision",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    service: Some("etcd"),
    open: Some(|at| Box::pin(open(at))),
};
