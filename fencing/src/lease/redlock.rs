//! Redlock (feature `redis`), the algorithm as antirez published it (redis.io, "Distributed
//! Locks with Redis"), over N independent Redis servers: the client sets the key with `SET key
//! value NX PX ttl` on every server, each request with a timeout small beside the TTL; it holds
//! the lock when a majority (N/2 + 1) answered OK and the **validity** — the TTL minus the time
//! the round took minus the clock drift allowance (1 % of the TTL + 2 ms) — is still positive;
//! else it unlocks every server. Extension is the same round with a compare-value `PEXPIRE`;
//! release a compare-value `DEL` on every server.
//!
//! Written here rather than taken from `rslock` (Redlock for redis-rs): its only runtime features
//! turn on redis-rs's TLS stack (rustls with its C crypto provider) for a lab that speaks plain
//! TCP, and it sets no per-server timeout — the published algorithm asks for one, and a server
//! that does not answer would hold a round for ever.
//!
//! Two stores: `redlock`, without a token (the algorithm as published: the value is random), and
//! `redlock-fenced`, which takes a counter's `INCR` on every server that granted, in the same
//! script as the `SET`, and answers the greatest of the majority's as the token — a monotonic
//! fence while no server forgets its counter (RL3 shows one that does).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use super::{Grant, Holding, LeaseStore, StoreAt, StoreId, StoreKind};
use crate::{Error, Result};

/// One server's request timeout: small beside the lab's 1.5 s TTL (the published advice: 5–50 ms
/// for a 10 s TTL), large enough for a loaded 2-core machine.
pub const SERVER_TIMEOUT: Duration = Duration::from_millis(100);
/// What a server's silence is judged after: once [`SERVER_TIMEOUT`] has passed on the client's
/// clock, the client still reads, this long, an answer that already waits in its socket. A client
/// frozen past the timeout (RL4) is thawed with its servers' answers in hand and its timers all
/// expired at once; whether its connection's reader or its timer ran first decided alone whether
/// those answers counted (seen once in CI: RL4's negative control, thawed, found no majority). The
/// delay is the validity's to judge, not the per-server timeout's.
const READ_GRACE: Duration = Duration::from_millis(20);
/// The clock drift allowance, as published: 1 % of the TTL, plus 2 ms.
const DRIFT_FACTOR: f64 = 0.01;

/// SET NX PX; with a token, INCR of the counter in the same script. KEYS: the lock, the counter.
/// ARGV: the value, the TTL in ms, 1 for a token. Answers the counter (0 without), nil if held.
const LOCK: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '1' then return redis.call('INCR', KEYS[2]) end
  return 0
end
return false";

/// PEXPIRE if the value is still this holding's. KEYS: the lock. ARGV: the value, the TTL.
const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// DEL if the value is still this holding's. KEYS: the lock. ARGV: the value.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// One server: its address, and a connection once one is open.
struct Server {
    endpoint: String,
    client: redis::Client,
    con: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Server {
    /// The open connection, or a new one (within [`SERVER_TIMEOUT`]); `None` if the server does
    /// not answer.
    async fn con(&self) -> Option<MultiplexedConnection> {
        let mut con = self.con.lock().await;
        if con.is_none() {
            // The response's timeout is `answer`'s, not the connection's (which has no grace).
            let config = AsyncConnectionConfig::new().set_connection_timeout(SERVER_TIMEOUT);
            *con = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .ok();
        }
        con.clone()
    }

    /// Runs `script` here; an error drops the connection (a restarted server gets a new one).
    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Option<T> {
        let mut con = self.con().await?;
        let mut call = script.prepare_invoke();
        for k in keys {
            call.key(*k);
        }
        for a in args {
            call.arg(a);
        }
        match answer(call.invoke_async(&mut con)).await {
            Some(Ok(v)) => Some(v),
            _ => {
                *self.con.lock().await = None;
                None
            }
        }
    }
}

/// `call`'s answer within [`SERVER_TIMEOUT`], or one that is ready [`READ_GRACE`] after it;
/// `None`: the server was silent.
async fn answer<F: std::future::Future>(call: F) -> Option<F::Output> {
    let mut call = std::pin::pin!(call);
    match tokio::time::timeout(SERVER_TIMEOUT, &mut call).await {
        Ok(v) => Some(v),
        Err(_) => tokio::time::timeout(READ_GRACE, call).await.ok(),
    }
}

/// A Redlock client over N servers.
pub struct RedlockStore {
    servers: Vec<Server>,
    margin: Duration,
    fenced: bool,
    /// Whether a grant needs validity left (`false`: `redlock-unchecked`, RL4's negative control —
    /// a majority is a grant however long the round took).
    check_validity: bool,
    /// Unique values: this client's id and a counter.
    nonce: Mutex<u64>,
}

impl std::fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockStore")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.endpoint).collect::<Vec<_>>(),
            )
            .field("fenced", &self.fenced)
            .finish_non_exhaustive()
    }
}

/// The key of lock `name` and its counter.
fn keys(name: &str) -> (String, String) {
    (
        format!("fencing-lab:redlock:{name}"),
        format!("fencing-lab:redlock-token:{name}"),
    )
}

/// The validity left of a round that began at `start` for `ttl`: TTL − elapsed − drift.
fn validity(ttl: Duration, start: Instant) -> Option<Duration> {
    let drift = ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2);
    ttl.checked_sub(start.elapsed() + drift)
        .filter(|v| !v.is_zero())
}

impl RedlockStore {
    /// A client of the servers at `endpoints` (`host:port` each); connections open on first use.
    pub fn new(endpoints: &[String], margin: Duration, fenced: bool) -> Result<Self> {
        let servers = endpoints
            .iter()
            .map(|e| {
                Ok(Server {
                    endpoint: e.clone(),
                    client: redis::Client::open(format!("redis://{e}/")).map_err(|err| {
                        Error::Service {
                            store: "redlock",
                            what: format!("open a Redis client for {e}"),
                            detail: err.to_string(),
                        }
                    })?,
                    con: tokio::sync::Mutex::new(None),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RedlockStore {
            servers,
            margin,
            fenced,
            check_validity: true,
            nonce: Mutex::new(0),
        })
    }

    /// The same client with the validity check removed: a majority is a grant however long the
    /// round took, held for a TTL from the round's end — the client of RL4's negative control.
    pub fn without_validity_check(mut self) -> Self {
        self.check_validity = false;
        self
    }

    /// A majority of the servers.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    fn value(&self, holder: &str) -> String {
        let mut n = self.nonce.lock().expect("nonce");
        *n += 1;
        let id = u64::from(std::process::id()) << 32
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        format!("{holder} {id:x}.{n}")
    }

    /// Runs `script` on every server at once; each one's answer (`None`: no answer in time).
    async fn on_all<T: redis::FromRedisValue>(
        &self,
        script: &str,
        keys: &[&str],
        args: &[String],
    ) -> Vec<Option<T>> {
        let script = Script::new(script);
        let rounds = self.servers.iter().map(|s| s.run::<T>(&script, keys, args));
        futures_join_all(rounds).await
    }

    /// Opens the connections not open yet (a new client's first round, a server restarted), all
    /// at once, before a round's clock starts: the validity is what is left of the TTL after the
    /// lock round itself, as a client with its connections open would measure it. Timed with
    /// them, a new holder's first acquire on a loaded machine spent its whole TTL connecting to
    /// five servers and was refused a free lock (seen in RL1 under CI's load).
    async fn connect_all(&self) {
        futures_join_all(self.servers.iter().map(|s| s.con())).await;
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.margin)?;
        let (lock, counter) = keys(name);
        let value = self.value(holder);
        self.connect_all().await;
        let start = Instant::now();
        let answers: Vec<Option<Option<i64>>> = self
            .on_all(
                LOCK,
                &[&lock, &counter],
                &[
                    value.clone(),
                    (ttl.as_millis() as u64).to_string(),
                    if self.fenced { "1" } else { "0" }.into(),
                ],
            )
            .await;
        let granted: Vec<i64> = answers.iter().filter_map(|a| a.flatten()).collect();
        // Without the check the round's time is not counted: the TTL runs from its end.
        let start = if self.check_validity {
            start
        } else {
            Instant::now()
        };
        match validity(ttl, start) {
            Some(valid) if granted.len() >= self.quorum() && valid > self.margin => {
                let token = granted.iter().copied().max().unwrap_or(0);
                Ok(Some(
                    Grant::new(name, holder, token, ttl, start + (valid - self.margin))
                        .with_handle(value),
                ))
            }
            _ => {
                // No majority in time: undo every SET this round made.
                let _: Vec<Option<i64>> = self.on_all(UNLOCK, &[&lock], &[value]).await;
                Ok(None)
            }
        }
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let (lock, _) = keys(&grant.name);
        self.connect_all().await;
        let start = Instant::now();
        let answers: Vec<Option<i64>> = self
            .on_all(
                EXTEND,
                &[&lock],
                &[
                    grant.handle.clone(),
                    (grant.ttl.as_millis() as u64).to_string(),
                ],
            )
            .await;
        let extended = answers.iter().filter(|a| **a == Some(1)).count();
        match validity(grant.ttl, start) {
            Some(valid) if extended >= self.quorum() && valid > self.margin => {
                grant.renewed(start + (valid - self.margin));
                Ok(true)
            }
            _ => {
                grant.lost_because(format!(
                    "extended on {extended} of {} servers (a majority is {})",
                    self.servers.len(),
                    self.quorum()
                ));
                Ok(false)
            }
        }
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        let (lock, _) = keys(&grant.name);
        let answers: Vec<Option<i64>> = self
            .on_all(UNLOCK, &[&lock], std::slice::from_ref(&grant.handle))
            .await;
        Ok(answers.iter().filter(|a| **a == Some(1)).count() >= self.quorum())
    }

    /// What each server holds for lock `name`: its value and PTTL (`None`: no answer).
    pub async fn per_server(&self, name: &str) -> Vec<(String, Option<(Option<String>, i64)>)> {
        let (lock, _) = keys(name);
        // A new client's first look (the lab's inspection right after A's grant) opens its
        // connections first, as an acquire does: timed with the request, five connections on a
        // loaded machine outran the request's timeout and the lock looked held nowhere (seen in
        // RL1 under CI's load: "A wins the lock on a majority … (none)").
        self.connect_all().await;
        let answers: Vec<Option<(Option<String>, i64)>> = self
            .on_all(
                "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}",
                &[&lock],
                &[],
            )
            .await;
        self.servers
            .iter()
            .map(|s| s.endpoint.clone())
            .zip(answers)
            .collect()
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let seen = self.per_server(name).await;
        let mut values: Vec<&str> = seen
            .iter()
            .filter_map(|(_, a)| a.as_ref().and_then(|(v, _)| v.as_deref()))
            .collect();
        values.sort_unstable();
        let held = values
            .iter()
            .copied()
            .find(|v| values.iter().filter(|w| *w == v).count() >= self.quorum());
        let Some(value) = held else {
            return Ok(None);
        };
        let on: Vec<String> = seen
            .iter()
            .filter_map(|(e, a)| match a {
                Some((Some(v), pttl)) if v == value => Some(format!("{e} PTTL {pttl}")),
                _ => None,
            })
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Ok(Some(Holding {
            holder: value.split(' ').next().unwrap_or(value).to_owned(),
            token: 0,
            expires_at: format!(
                "held on {} of {} servers ({})",
                on.len(),
                self.servers.len(),
                on.join(", ")
            ),
            expires_epoch: f64::INFINITY,
            expired: false,
            released: false,
            db_now: "(every server has its own clock)".into(),
            db_now_epoch: now,
        }))
    }

    async fn reset_now(&self) -> Result<()> {
        let _: Vec<Option<i64>> = self
            .on_all(
                "local n = 0 for _, k in ipairs(redis.call('KEYS', 'fencing-lab:redlock:*')) do \
                 n = n + redis.call('DEL', k) end return n",
                &[],
                &[],
            )
            .await;
        Ok(())
    }
}

/// Awaits every future together (one round to every server at once); their outputs in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.map(|f| Some(Box::pin(f))).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (slot, result) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(f) = slot {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                    *result = Some(v);
                    *slot = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

impl LeaseStore for RedlockStore {
    super::forward_to_now!(acquire, renew, release, inspect, reset);

    fn token_name(&self) -> String {
        if self.fenced {
            "the greatest INCR of a counter kept on each server, taken with the SET on the majority"
                .into()
        } else {
            "none (Redlock's value is random; every grant answers 0)".into()
        }
    }
}

/// Opens Redlock over every server of `at` (an endpoint may list several, comma-separated: a
/// holder's `--store-endpoint`).
async fn open(at: &StoreAt, fenced: bool) -> Result<Arc<dyn LeaseStore>> {
    Ok(Arc::new(open_servers(at, fenced)?))
}

/// The client of `at`'s servers (at least three).
fn open_servers(at: &StoreAt, fenced: bool) -> Result<RedlockStore> {
    let endpoints: Vec<String> = at
        .endpoints
        .iter()
        .flat_map(|e| e.split(','))
        .map(str::to_owned)
        .collect();
    if endpoints.len() < 3 {
        return Err(Error::Service {
            store: "redlock",
            what: "open the store".into(),
            detail: format!(
                "Redlock runs on independent servers, 5 as published; given {}",
                endpoints.len()
            ),
        });
    }
    RedlockStore::new(&endpoints, at.table.margin(), fenced)
}

/// Redlock without a token, in the registry (the RL-series starts its servers).
pub const KIND: StoreKind = StoreKind {
    id: StoreId::Redlock,
    token: "none",
    about: "Redlock over independent Redis servers (a majority of SET NX PX within the validity), no token: the RL-series",
    has_token: false,
    sound: false,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, false))),
};

/// Redlock with a counter token, in the registry.
pub const FENCED: StoreKind = StoreKind {
    id: StoreId::RedlockFenced,
    token: "the greatest of the majority's INCR of a per-server counter",
    about: "Redlock with a token: each server that grants INCRs a counter in the same script, the token is the greatest of the majority's — monotonic while no server forgets it (RL3)",
    has_token: true,
    sound: false,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| Box::pin(open(at, true))),
};

/// Redlock with the validity check removed, in the registry: RL4's negative control, a client
/// that takes a majority as a grant however long its round took. Never a design to use.
pub const UNCHECKED: StoreKind = StoreKind {
    id: StoreId::RedlockUnchecked,
    token: "none",
    about: "Redlock with its validity check removed (a majority is a grant however long the round took), no token: RL4's negative control",
    has_token: false,
    sound: false,
    freed_on_disconnect: false,
    session_holdings: false,
    one_session: false,
    open: Some(|at| {
        Box::pin(async move {
            Ok(Arc::new(open_servers(at, false)?.without_validity_check()) as Arc<dyn LeaseStore>)
        })
    }),
};
