//! The etcd lock (feature `etcd`): a lease — TTL by etcd's own clock, in whole seconds — attached
//! to the lock key, taken with a transaction that succeeds only when the key does not exist
//! (`create_revision == 0`). The token is the key's **create revision**, what etcd's own docs name
//! as its fencing token ("revision number in the case of etcd"): every write to the store raises
//! the revision, so a later grant's is greater, with gaps. Renewal is one keep-alive of the lease
//! on a keep-alive stream the store keeps open per lease — as etcd's own clients renew: one
//! request on a long-lived stream, where a key read and a new stream per renewal fall behind at
//! 1,000 leases in the bench. The lease is the holding: the key lives and dies with
//! it, and a lease etcd expired or revoked answers TTL 0, never renewed. Release revokes it.
//!
//! etcd rounds a lease's TTL up to whole seconds and never below its minimum (1.5 × the election
//! timeout): the lab's 1.5 s lease is a 2 s lease here ([`LeaseStore::granted_ttl`]: the lab runs
//! its timelines with the TTL etcd grants). The holding ends when etcd's leader
//! revokes the expired lease and deletes the key (it checks every 500 ms): only then may another
//! take it, so the lease is free when the key is gone. The local deadline stays the requested
//! TTL minus the margin — earlier than the store's expiry, as a deadline should be.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn,
    TxnOp,
};

use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreId, StoreKind};
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
    /// One keep-alive stream per lease this client renews, opened at its first renewal.
    streams: Arc<tokio::sync::Mutex<HashMap<i64, KeepAlive>>>,
}

/// A lease's keep-alive stream: its sender and its answers, one renewal at a time.
type KeepAlive = Arc<tokio::sync::Mutex<(LeaseKeeper, LeaseKeepAliveStream)>>;

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

/// A grant's handle: the lease its holding hangs on ([`lease_in`] reads it back).
fn handle(lease: i64) -> String {
    format!("lease={lease}")
}

/// The lease a grant's handle names ([`handle`]), if it names one.
fn lease_in(grant: &Grant) -> Option<i64> {
    grant.handle.strip_prefix("lease=")?.parse().ok()
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
            streams: Arc::default(),
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
        let Some(token) = self.put_if_absent(name, holder, lease).await? else {
            // Someone holds it: the lease granted for nothing goes at once.
            let _ = client.lease_revoke(lease).await;
            return Ok(None);
        };
        Ok(Some(
            Grant::new(name, holder, token, ttl, sent + (ttl - self.margin))
                .with_handle(handle(lease)),
        ))
    }

    /// The lock key put on `lease`, holding `holder`, if it does not exist (one transaction on
    /// its create revision): the key's create revision, the token — `None` when someone holds
    /// it.
    async fn put_if_absent(&self, name: &str, holder: &str, lease: i64) -> Result<Option<i64>> {
        let txn = Txn::new()
            .when([Compare::create_revision(key(name), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key(name),
                holder,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let done = self.client.clone().txn(txn).await.map_err(|e| {
            failed(
                "take the lock key (a transaction on create_revision = 0)",
                e,
            )
        })?;
        if !done.succeeded() {
            return Ok(None);
        }
        // The put is the transaction's one write: its revision is the key's create revision.
        Ok(Some(done.header().map_or(0, |h| h.revision())))
    }

    /// The lease a grant of this store was given (its handle), else the key's now.
    async fn lease_for(&self, grant: &Grant) -> Result<Option<i64>> {
        match lease_in(grant) {
            Some(lease) => Ok(Some(lease)),
            None => self.lease_of(grant).await,
        }
    }

    /// One keep-alive of `lease` on its stream (opened when it has none: etcd-client sends the
    /// first keep-alive and reads its answer itself, and refuses a lease etcd does not have):
    /// whether etcd extended it (a lease it expired or revoked answers TTL 0). A stream that
    /// fails or stays silent is dropped: the next renewal opens another.
    async fn keep_alive(&self, lease: i64) -> Result<bool> {
        let open = self.streams.lock().await.get(&lease).cloned();
        let Some(stream) = open else {
            return match self.client.clone().lease_keep_alive(lease).await {
                Ok(pair) => {
                    let stream = Arc::new(tokio::sync::Mutex::new(pair));
                    self.streams.lock().await.insert(lease, stream);
                    Ok(true)
                }
                Err(etcd_client::Error::LeaseKeepAliveError(e))
                    if e.contains("lease not found") =>
                {
                    Ok(false)
                }
                Err(e) => Err(failed("open a keep-alive stream", e)),
            };
        };
        let answered = {
            let mut pair = stream.lock().await;
            match pair.0.keep_alive().await {
                Ok(()) => tokio::time::timeout(REQUEST_TIMEOUT, pair.1.message())
                    .await
                    .map_err(|_| Error::Service {
                        store: "etcd",
                        what: "keep the lease alive".into(),
                        detail: format!("no answer within {REQUEST_TIMEOUT:?}"),
                    })
                    .and_then(|a| a.map_err(|e| failed("keep the lease alive", e))),
                Err(e) => Err(failed("keep the lease alive", e)),
            }
        };
        let renewed = match answered {
            Ok(answer) => answer.is_some_and(|a| a.ttl() > 0),
            Err(e) => {
                self.streams.lock().await.remove(&lease);
                return Err(e);
            }
        };
        if !renewed {
            self.streams.lock().await.remove(&lease);
        }
        Ok(renewed)
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let Some(lease) = self.lease_for(grant).await? else {
            return Ok(false);
        };
        let renewed = self.keep_alive(lease).await?;
        if renewed {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed)
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let Some(lease) = self.lease_of(grant).await? else {
            return Ok(false);
        };
        self.streams.lock().await.remove(&lease);
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
    super::forward_to_now!(acquire, renew, release, inspect, reset);

    fn token_name(&self) -> String {
        "create revision of the lock key (etcd's fencing token)".into()
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
    id: StoreId::Etcd,
    token: "create revision of the lock key",
    about: "an etcd lease on the lock key, taken by a transaction on create_revision = 0; the token is the key's create revision",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at))),
};

/// etcd's lock recipe as its own clients run it (`concurrency.Session`): every lock of
/// a client is attached to **one session lease** of that client, granted at its first lock and
/// kept alive on one stream — a holder with 10,000 locks renews one lease, once per period. The
/// token is the key's create revision, as [`EtcdLeaseStore`]'s. What it changes for fencing: the
/// locks share their fate — one lost session lease (a pause past its TTL, a partition) loses
/// every lock of the holder at once, and releasing one lock deletes its key, not the lease.
#[derive(Debug, Clone)]
pub struct EtcdSessionStore {
    locks: EtcdLeaseStore,
    /// This client's session lease, once granted and until etcd answers it expired.
    session: Arc<tokio::sync::Mutex<Option<i64>>>,
    /// The holdings this client gave up (name, token): a batch renewal never renews them,
    /// though their session lease lives on.
    released: Arc<std::sync::Mutex<std::collections::HashSet<(String, i64)>>>,
}

impl EtcdSessionStore {
    /// Connects to the member at `endpoint`; the session lease is granted at the first lock.
    pub async fn connect(endpoint: &str, margin: Duration) -> Result<Self> {
        Ok(EtcdSessionStore {
            locks: EtcdLeaseStore::connect(endpoint, margin).await?,
            session: Arc::default(),
            released: Arc::default(),
        })
    }

    /// This client's session lease: the one it has, or a new one of `ttl` (whole seconds).
    async fn session(&self, ttl: Duration) -> Result<i64> {
        let mut session = self.session.lock().await;
        if let Some(lease) = *session {
            return Ok(lease);
        }
        let seconds = i64::try_from(self.locks.granted_ttl(ttl).as_secs()).unwrap_or(i64::MAX);
        let lease = self
            .locks
            .client
            .clone()
            .lease_grant(seconds, None)
            .await
            .map_err(|e| failed("grant the session lease", e))?
            .id();
        *session = Some(lease);
        Ok(lease)
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.locks.margin)?;
        let sent = Instant::now();
        // A session lease etcd expired (a client silent past its TTL): forgotten, and the lock
        // taken on a new one.
        let taken = match self.take(name, holder, ttl).await {
            Err(Error::Service { detail, .. }) if detail.contains("requested lease not found") => {
                *self.session.lock().await = None;
                self.take(name, holder, ttl).await?
            }
            other => other?,
        };
        Ok(taken.map(|(lease, token)| {
            Grant::new(name, holder, token, ttl, sent + (ttl - self.locks.margin))
                .with_handle(handle(lease))
        }))
    }

    /// The lock key put on the session lease if it does not exist: the lease and the key's
    /// create revision, or `None` when someone holds it.
    async fn take(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<(i64, i64)>> {
        let lease = self.session(ttl).await?;
        let token = self.locks.put_if_absent(name, holder, lease).await?;
        Ok(token.map(|token| (lease, token)))
    }

    /// One keep-alive per session lease the grants of `grants` hang on (a holder's: one), on
    /// its stream: a grant is renewed when its lease is, unless this client gave it up. A lease
    /// etcd expired renews none of its locks; this client's own is then forgotten, so that its
    /// next lock grants a new one.
    async fn renew_session(&self, grants: &mut [Grant]) -> Result<Vec<bool>> {
        let sent = Instant::now();
        let mut alive: HashMap<i64, bool> = HashMap::new();
        for grant in grants.iter() {
            let Some(lease) = lease_in(grant) else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(seen) = alive.entry(lease) {
                let renewed = self.locks.keep_alive(lease).await?;
                seen.insert(renewed);
                if !renewed {
                    let mut current = self.session.lock().await;
                    if *current == Some(lease) {
                        *current = None;
                    }
                }
            }
        }
        let released = self.released.lock().expect("released").clone();
        let margin = self.locks.margin;
        Ok(grants
            .iter_mut()
            .map(|g| {
                let renewed = lease_in(g).is_some_and(|l| alive.get(&l) == Some(&true))
                    && !released.contains(&(g.name.clone(), g.token));
                if renewed {
                    let ttl = g.ttl;
                    g.renewed(sent + (ttl - margin));
                }
                renewed
            })
            .collect())
    }

    /// One grant renewed: its session lease kept alive, and its key still its own (its create
    /// revision) — a holding another client released or took over is not renewed.
    async fn renew_one(&self, grant: &mut Grant) -> Result<bool> {
        let still = self
            .locks
            .current(&grant.name)
            .await?
            .is_some_and(|(_, revision, _)| revision == grant.token);
        if !still {
            return Ok(false);
        }
        let renewed = self.renew_session(std::slice::from_mut(grant)).await?;
        Ok(renewed.first().copied().unwrap_or(false))
    }

    /// Deletes the lock key while it is still the grant's (its create revision): the session
    /// lease and the holder's other locks stay.
    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                key(&grant.name),
                CompareOp::Equal,
                grant.token,
            )])
            .and_then([TxnOp::delete(key(&grant.name), None)]);
        let done = self
            .locks
            .client
            .clone()
            .txn(txn)
            .await
            .map_err(|e| failed("delete the lock key", e))?;
        if done.succeeded() {
            self.released
                .lock()
                .expect("released")
                .insert((grant.name.clone(), grant.token));
        }
        Ok(done.succeeded())
    }
}

impl LeaseStore for EtcdSessionStore {
    super::forward_to_now!(acquire, release);

    fn token_name(&self) -> String {
        "create revision of the lock key (etcd's fencing token), every lock on one session lease"
            .into()
    }

    /// One grant: its key checked, its session lease kept alive (two requests).
    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(self.renew_one(grant))
    }

    /// A holder's grants: one keep-alive of their session lease — the recipe's renewal, which
    /// trusts the client's own record of the locks it gave up and reads no key.
    fn renew_all<'a>(&'a self, grants: &'a mut [Grant]) -> StoreFuture<'a, Vec<bool>> {
        Box::pin(self.renew_session(grants))
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        Box::pin(self.locks.inspect_now(name))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            *self.session.lock().await = None;
            self.locks.reset_now().await
        })
    }

    fn granted_ttl(&self, ttl: Duration) -> Duration {
        self.locks.granted_ttl(ttl)
    }
}

async fn open_session(at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("etcd")?;
    Ok(Arc::new(
        EtcdSessionStore::connect(endpoint, at.table.margin()).await?,
    ))
}

/// etcd's session-lease recipe in the registry.
pub const SESSION: StoreKind = StoreKind {
    id: StoreId::EtcdSession,
    token: "create revision of the lock key",
    about: "etcd's lock recipe as concurrency.Session runs it: every lock of a client on one session lease, kept alive once per period; the token is the key's create revision",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: true,
    open: Some(|at| Box::pin(open_session(at))),
};
