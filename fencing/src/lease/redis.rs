//! The Redis lock (feature `redis`): a key set with `SET key value NX PX ttl`, the value unique to
//! the holding; renewal and release by compare-value scripts, so that a holder never extends or
//! deletes a holding that is no longer its own. Expiry is Redis's own clock: the key's `PX`.
//!
//! Two forms, as Redis locks come:
//! - **`redis`** — with a token: `INCR` of a counter key taken with the grant, in the same script
//!   as the `SET` (the shape of Redisson's `RFencedLock`), so the token is greater for every later
//!   grant while the counter lives. The value is `holder token`.
//! - **`redis-plain`** — no token, as most Redis locks are (the value is `holder nonce`): every
//!   grant answers token 0, and a fence has nothing to compare. Its fenced experiments are
//!   negative results.
//! - **`redis-wait`** — `redis`, then `WAIT 1 500` before the token is handed out: the grant
//!   (the key and the counter's `INCR`) acknowledged by at least one replica within 500 ms, or
//!   no grant — a token only the primary knows could be granted again by a replica promoted
//!   after the primary is lost (R2). A `WAIT` that times out says nothing of the write (it is on
//!   the primary, maybe on no replica): the store deletes its key and answers an error, never
//!   the token. `WAIT` is Redis's whole remedy and not consensus: a replica that acknowledged may
//!   still not be the one Sentinel promotes.
//!
//! A single server as a lease store (`LIMITS.md`); R2 runs the counter on a primary and a
//! replica under Sentinel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use super::{Grant, Holding, LeaseStore, StoreAt, StoreId, StoreKind};
use crate::{Error, Result};

/// How long one request may wait for its answer: a partitioned holder's renewal is a failure,
/// not a wait (its renewer gives up after one TTL anyway).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Takes the lock if the key is absent; with a token, `INCR`s the counter in the same script.
/// KEYS: the lock, the counter. ARGV: the holder, the TTL in ms, 1 for a token / 0 for a nonce,
/// the nonce. Answers the token (0 without), or nil when the key exists.
const ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = 0
local tag = ARGV[4]
if ARGV[3] == '1' then
  token = redis.call('INCR', KEYS[2])
  tag = tostring(token)
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. tag, 'PX', ARGV[2])
return token";

/// Extends the key's expiry if its value is still this holding's. KEYS: the lock. ARGV: the
/// value, the TTL in ms. `PEXPIRE` on a key Redis has expired finds nothing: never renewed.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// Deletes the key if its value is still this holding's. KEYS: the lock. ARGV: the value.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// The key, its value, its remaining time and the server's clock, in one script (one moment).
/// KEYS: the lock. Answers {value or false, pttl, seconds, microseconds}.
const INSPECT: &str = r"
local t = redis.call('TIME')
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), t[1], t[2]}";

/// A Redis lock client on one server.
#[derive(Clone)]
pub struct RedisLeaseStore {
    con: MultiplexedConnection,
    endpoint: String,
    margin: Duration,
    /// With a token (`redis`) or without (`redis-plain`).
    fenced: bool,
    /// `redis-wait`: how long a grant waits for one replica's acknowledgement (`WAIT 1 ms`).
    wait: Option<Duration>,
}

impl std::fmt::Debug for RedisLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaseStore")
            .field("endpoint", &self.endpoint)
            .field("fenced", &self.fenced)
            .finish_non_exhaustive()
    }
}

/// The key of lease `name`, and its token counter.
fn keys(name: &str) -> (String, String) {
    (
        format!("fencing-lab:lock:{name}"),
        format!("fencing-lab:token:{name}"),
    )
}

fn failed(what: &str, e: redis::RedisError) -> Error {
    Error::Service {
        store: "redis",
        what: what.to_owned(),
        detail: e.to_string(),
    }
}

impl RedisLeaseStore {
    /// Connects to the server at `endpoint` (`host:port`).
    pub async fn connect(
        endpoint: &str,
        margin: Duration,
        fenced: bool,
        wait: Option<Duration>,
    ) -> Result<Self> {
        let client = redis::Client::open(format!("redis://{endpoint}/"))
            .map_err(|e| failed("open a Redis client", e))?;
        let con = client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_connection_timeout(RESPONSE_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT),
            )
            .await
            .map_err(|e| failed(&format!("connect to Redis at {endpoint}"), e))?;
        Ok(RedisLeaseStore {
            con,
            endpoint: endpoint.to_owned(),
            margin,
            fenced,
            wait,
        })
    }

    /// The value the store set for `grant`'s holding: its handle.
    fn value_of(grant: &Grant) -> &str {
        &grant.handle
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.margin)?;
        let (lock, counter) = keys(name);
        let nonce: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 40;
        let sent = Instant::now();
        let token: Option<i64> = Script::new(ACQUIRE)
            .key(&lock)
            .key(&counter)
            .arg(holder)
            .arg(ttl.as_millis() as u64)
            .arg(if self.fenced { "1" } else { "0" })
            .arg(format!("n{nonce}"))
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("acquire the lock (SET NX PX)", e))?;
        if let (Some(token), Some(wait)) = (token, self.wait) {
            self.replicated(&lock, holder, token, wait).await?;
        }
        Ok(token.map(|token| {
            let value = if self.fenced {
                format!("{holder} {token}")
            } else {
                format!("{holder} n{nonce}")
            };
            Grant::new(name, holder, token, ttl, sent + (ttl - self.margin)).with_handle(value)
        }))
    }

    /// `redis-wait`: `WAIT 1 ms` after the grant's script on this connection — every write of it
    /// (the key, the counter) acknowledged by a replica — or the key deleted again and an error
    /// that says the token is not to be used.
    async fn replicated(&self, lock: &str, holder: &str, token: i64, wait: Duration) -> Result<()> {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(wait.as_millis() as u64)
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("WAIT for a replica", e))?;
        if acked >= 1 {
            return Ok(());
        }
        let _: i64 = Script::new(RELEASE)
            .key(lock)
            .arg(format!("{holder} {token}"))
            .invoke_async(&mut self.con.clone())
            .await
            .unwrap_or(0);
        Err(Error::Service {
            store: "redis",
            what: format!("have token {token} acknowledged by a replica"),
            detail: format!(
                "WAIT 1 {} answered {acked}: no replica acknowledged the grant within {} ms; it \
                 is on the primary alone and a failover could grant the token again — not used \
                 (the key deleted)",
                wait.as_millis(),
                wait.as_millis()
            ),
        })
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let renewed: i64 = Script::new(RENEW)
            .key(keys(&grant.name).0)
            .arg(Self::value_of(grant))
            .arg(grant.ttl.as_millis() as u64)
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("renew the lock (compare value, PEXPIRE)", e))?;
        if renewed == 1 {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed == 1)
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let released: i64 = Script::new(RELEASE)
            .key(keys(&grant.name).0)
            .arg(Self::value_of(grant))
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("release the lock (compare value, DEL)", e))?;
        Ok(released == 1)
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let (value, pttl, secs, micros): (Option<String>, i64, i64, i64) = Script::new(INSPECT)
            .key(keys(name).0)
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("read the lock (GET, PTTL, TIME)", e))?;
        let Some(value) = value else {
            return Ok(None);
        };
        let (holder, tag) = value.split_once(' ').unwrap_or((value.as_str(), ""));
        let token = if self.fenced {
            tag.parse().unwrap_or(0)
        } else {
            0
        };
        let now = secs as f64 + micros as f64 / 1e6;
        let expires = now + pttl.max(0) as f64 / 1000.0;
        Ok(Some(Holding {
            holder: holder.to_owned(),
            token,
            expires_at: format!("in {pttl} ms (PTTL)"),
            expires_epoch: expires,
            // GET and PTTL ran in one script: the key is live (a PTTL of 0 is under a
            // millisecond left, and still refuses a SET NX). Expired is gone.
            expired: false,
            released: false,
            db_now: format!("{now:.6} (Redis TIME)"),
            db_now_epoch: now,
        }))
    }

    async fn clock_now(&self) -> Result<Option<String>> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("read Redis's clock (TIME)", e))?;
        Ok(Some(format!("{}.{micros:06} (Redis TIME)", secs)))
    }

    async fn reset_now(&self) -> Result<()> {
        // The lock keys go; the token counters stay, so that tokens never go back.
        let locks: Vec<String> = redis::cmd("KEYS")
            .arg("fencing-lab:lock:*")
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| failed("list the lock keys", e))?;
        if !locks.is_empty() {
            let _: i64 = redis::cmd("DEL")
                .arg(&locks)
                .query_async(&mut self.con.clone())
                .await
                .map_err(|e| failed("delete the lock keys", e))?;
        }
        Ok(())
    }
}

impl LeaseStore for RedisLeaseStore {
    super::forward_to_now!(acquire, renew, release, inspect, clock, reset);

    fn token_name(&self) -> String {
        if let Some(wait) = self.wait {
            format!(
                "INCR of the lock's counter key, taken with the grant and acknowledged by a replica (WAIT 1 {})",
                wait.as_millis()
            )
        } else if self.fenced {
            "INCR of the lock's counter key, taken with the grant".into()
        } else {
            "none (SET NX PX with a unique value; every grant answers 0)".into()
        }
    }
}

/// Opens the Redis store of `at` (its first endpoint).
async fn open(at: &StoreAt, fenced: bool, wait: Option<Duration>) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("redis")?;
    Ok(Arc::new(
        RedisLeaseStore::connect(endpoint, at.table.margin(), fenced, wait).await?,
    ))
}

/// How long `redis-wait` waits for a replica's acknowledgement.
pub const WAIT_FOR_REPLICA: Duration = Duration::from_millis(500);

/// The Redis lock with a token (`INCR`), in the registry.
pub const KIND: StoreKind = StoreKind {
    id: StoreId::Redis,
    token: "INCR of a counter key taken with the grant",
    about: "a Redis key set with SET NX PX and a unique value, a token from INCR (Redisson's fenced lock)",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, true, None))),
};

/// The Redis lock with a token acknowledged by a replica (`WAIT 1 500`), in the registry: R2's
/// remedy, opened on the primary R2 starts (holders get `--store-endpoint`). On a server without
/// replicas every grant fails.
pub const WAIT: StoreKind = StoreKind {
    id: StoreId::RedisWait,
    token: "INCR of a counter key taken with the grant, acknowledged by a replica (WAIT 1 500)",
    about: "the Redis fenced lock, its grant acknowledged by a replica before the token is used (WAIT 1 500): R2's remedy for a failover",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    // Not a lock service of `--lease-store`: it needs a primary with a replica, which R2 starts.
    open: Some(|at| Box::pin(open(at, true, Some(WAIT_FOR_REPLICA)))),
};

/// The Redis lock without a token, in the registry.
pub const PLAIN: StoreKind = StoreKind {
    id: StoreId::RedisPlain,
    token: "none",
    about: "a Redis key set with SET NX PX and a unique value, no token (most Redis locks)",
    has_token: false,
    sound: false,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, false, None))),
};
