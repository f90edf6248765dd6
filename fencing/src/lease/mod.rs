//! Lease stores: who may *start* work. A lease store grants a lease with an
//! expiry by its own clock and, if its design has one, a token; it is anything that answers the
//! four questions of [`LeaseStore`] — a SQL profile's table ([`sql`]), seed 000's job lease on
//! MariaDB (`job_lease.rs`, feature `mariadb`), a lock service (an etcd lease, a ZooKeeper node, a
//! Redis key), and the databases' own locks, whose lease is their session: PostgreSQL's advisory
//! lock (`pg_advisory.rs`) and MariaDB's `GET_LOCK` (`mariadb_getlock.rs`), both keeping their
//! locking sessions in `sessions.rs`.
//! `for_experiments.rs` is the lease table's SQL that only the lab runs.
//!
//! Tokens are opaque and ordered: what fencing needs is that a takeover's token is greater than
//! every earlier grant's and that one holding keeps its token — gaps are allowed, a release may
//! bump it, and each store names its token in its own words ([`LeaseStore::token_name`]: "token
//! column", "etcd revision", "ZooKeeper czxid"). Nothing here reads a token as a count.
//!
//! The client keeps a *local deadline* for stopping early, from a monotonic clock read **before**
//! the request is sent, plus `ttl - margin` ([`Grant::local_deadline`]). It is an efficiency
//! device only: safety comes from the resource's fence, which never reads the lease.
//!
//! Adding a store: one file here implementing [`LeaseStore`] (its `//!` names the store, its
//! token and what decides expiry), its name in `id.rs` ([`StoreId`]), and one entry in
//! `crate::stores::STORES`, the registry. What this module must not hold: any store's SQL or
//! client calls (they live in the store's own file), nor the registry (it lists the stores, so
//! it sits above them).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Error, Result};

pub mod batched;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod for_experiments;
mod id;
#[cfg(feature = "mariadb")]
pub mod job_lease;
#[cfg(feature = "mariadb")]
pub mod mariadb_getlock;
pub mod pg_advisory;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redlock;
mod sessions;
pub mod sql;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use for_experiments::operator_mistake;
pub use id::{Service, StoreId};
pub use sql::{stmt, SqlLeaseStore};

/// One continuous holding of a lease: the token identifies it for ever (I2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub name: String,
    pub holder: String,
    /// The store's token for this holding, opaque but ordered: a later holding's is greater.
    pub token: i64,
    pub ttl: Duration,
    local_deadline: Instant,
    /// What the store needs to find this holding again, opaque to everyone else (a Redis
    /// lock's unique value, a ZooKeeper node's path); empty where the name and token suffice.
    /// It travels with the grant, so that another client of the store — a holder's renewer —
    /// can renew what this one acquired.
    pub handle: String,
    /// Why the last renewal found the holding gone, in the client library's own words, where it
    /// says more than "not held" (a ZooKeeper session the server expired while the client slept).
    lost: Option<String>,
}

impl Grant {
    /// A grant whose local deadline is `local_deadline` (the sender's monotonic clock, read
    /// before the request was sent, plus `ttl - margin`).
    pub fn new(
        name: &str,
        holder: &str,
        token: i64,
        ttl: Duration,
        local_deadline: Instant,
    ) -> Self {
        Grant {
            name: name.to_owned(),
            holder: holder.to_owned(),
            token,
            ttl,
            local_deadline,
            handle: String::new(),
            lost: None,
        }
    }

    /// The grant with the store's handle on its holding.
    pub fn with_handle(mut self, handle: String) -> Self {
        self.handle = handle;
        self
    }

    /// The monotonic instant after which the holder must stop starting new work.
    pub fn local_deadline(&self) -> Instant {
        self.local_deadline
    }

    /// True while the local deadline has not passed. Passing this check says nothing about
    /// whether a write made a moment later is still safe: only the resource's fence says that.
    pub fn locally_valid(&self) -> bool {
        Instant::now() < self.local_deadline
    }

    /// Moves the local deadline after a successful renewal (from a clock read before it was
    /// sent); the token stays.
    pub fn renewed(&mut self, local_deadline: Instant) {
        self.local_deadline = local_deadline;
        self.lost = None;
    }

    /// Records why a renewal found the holding gone (see [`Grant::lost`]).
    pub fn lost_because(&mut self, why: String) {
        self.lost = Some(why);
    }

    /// Why the last renewal found the holding gone, when the store's client said more than
    /// "not held".
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }
}

/// Which clock a statement judges expiry by. The store always uses [`JudgedBy::Now`] on an
/// autocommit connection; [`JudgedBy::ClockTimestamp`] exists to show (F2) what changes when
/// the same statement runs inside a long transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgedBy {
    /// `now()`: the start of the current transaction.
    Now,
    /// `clock_timestamp()`: the moment the function is called.
    ClockTimestamp,
}

/// The lease as the store sees it at one moment, judged by the store's own clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub holder: String,
    pub token: i64,
    /// The expiry as the store prints it (`-infinity` once released, on PostgreSQL).
    pub expires_at: String,
    /// The expiry in seconds since the epoch (`-inf` once released), for comparisons.
    pub expires_epoch: f64,
    /// Expired at the moment of the read, by the store's clock.
    pub expired: bool,
    /// Given up by its holder.
    pub released: bool,
    /// The store's clock at the moment of the read.
    pub db_now: String,
    /// The store's clock at the moment of the read, in seconds since the epoch.
    pub db_now_epoch: f64,
}

impl Holding {
    /// The validity left at the moment of the read by the store's clock, in milliseconds:
    /// negative once expired, `-inf` once released.
    pub fn remaining_ms(&self) -> f64 {
        (self.expires_epoch - self.db_now_epoch) * 1000.0
    }
}

/// The TTL a profile's `inspect` reads as `:ttl_ms`: the TTL of the lab's last acquire or renew
/// through the store, the run's `--ttl` before any. A design whose expiry is configuration rather
/// than a column (db-scheduler's heartbeat interval × missed-heartbeat limit) computes its expiry
/// from it, as every node of such a design does from its own configuration. Shared by a store's
/// clones.
#[derive(Debug, Clone, Default)]
pub struct TtlInForce(Arc<AtomicU64>);

impl TtlInForce {
    /// `ttl` in force until the next acquire or renew asks another.
    pub fn new(ttl: Duration) -> Self {
        let t = TtlInForce::default();
        t.set(ttl);
        t
    }

    pub fn set(&self, ttl: Duration) {
        self.0.store(ttl.as_micros() as u64, Ordering::Relaxed);
    }

    /// In milliseconds; `None` before the lab gave one.
    pub fn ms(&self) -> Option<f64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            us => Some(us as f64 / 1000.0),
        }
    }
}

/// A store's answer, boxed so that a store can be chosen at run time (`dyn LeaseStore`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A store's answers to [`LeaseStore`]'s questions, each forwarded to the store's inherent
/// `async fn` of the same name and `_now` (`acquire_now`, `renew_now`, …): the forwarding
/// written once. Named in the store's `impl LeaseStore` block, with the questions it answers
/// that way: `forward_to_now!(acquire, renew, release, inspect, reset);`.
macro_rules! forward_to_now {
    ($($question:ident),+ $(,)?) => {
        $($crate::lease::forward_to_now!(@ $question);)+
    };
    (@ acquire) => {
        fn acquire<'a>(
            &'a self,
            name: &'a str,
            holder: &'a str,
            ttl: std::time::Duration,
        ) -> $crate::lease::StoreFuture<'a, Option<$crate::lease::Grant>> {
            Box::pin(self.acquire_now(name, holder, ttl))
        }
    };
    (@ renew) => {
        fn renew<'a>(
            &'a self,
            grant: &'a mut $crate::lease::Grant,
        ) -> $crate::lease::StoreFuture<'a, bool> {
            Box::pin(self.renew_now(grant))
        }
    };
    (@ release) => {
        fn release<'a>(
            &'a self,
            grant: &'a $crate::lease::Grant,
        ) -> $crate::lease::StoreFuture<'a, bool> {
            Box::pin(self.release_now(grant))
        }
    };
    (@ inspect) => {
        fn inspect<'a>(
            &'a self,
            name: &'a str,
        ) -> $crate::lease::StoreFuture<'a, Option<$crate::lease::Holding>> {
            Box::pin(self.inspect_now(name))
        }
    };
    (@ clock) => {
        fn clock(&self) -> $crate::lease::StoreFuture<'_, Option<String>> {
            Box::pin(self.clock_now())
        }
    };
    (@ reset) => {
        fn reset(&self) -> $crate::lease::StoreFuture<'_, ()> {
            Box::pin(self.reset_now())
        }
    };
}
pub(crate) use forward_to_now;

/// A lease store: the four questions every experiment and every holder asks, whatever the
/// store. Each call is one request to the store, judged by the store's clock; a refused lease is
/// an answer (`None`, `false`), never an error. What is true when each returns is on the method.
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// What the store calls its token, for the evidence ("token column `lease.token`", later
    /// "etcd revision of the lock key", "ZooKeeper czxid").
    fn token_name(&self) -> String;

    /// Takes the lease if nobody holds it by the store's clock. `Some(grant)`: the store
    /// committed the grant, whose token is greater than every earlier grant's of `name`;
    /// `None`: someone holds it.
    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>>;

    /// Extends `grant`'s holding by its TTL if it is still the current one and unexpired: `true`
    /// once the store committed the extension (the grant's local deadline moved; its token did
    /// not). An expired holding is never renewed.
    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool>;

    /// Renews every grant of `grants` (one holder's): for each, what [`LeaseStore::renew`] would
    /// answer. One request per grant, in order — unless the store renews a batch in one request
    /// (`postgres-batched`), where one failed request fails them all.
    fn renew_all<'a>(&'a self, grants: &'a mut [Grant]) -> StoreFuture<'a, Vec<bool>> {
        Box::pin(async move {
            let mut renewed = Vec::with_capacity(grants.len());
            for grant in grants.iter_mut() {
                renewed.push(self.renew(grant).await?);
            }
            Ok(renewed)
        })
    }

    /// Gives `grant`'s holding up at once: `true` once the store committed it (the lease is free;
    /// its token never goes back), `false` when the holding was no longer the current one.
    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool>;

    /// The lease `name` as the store sees it now (`None`: never granted).
    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>>;

    /// The store's clock now, as the store prints it, for the evidence's timeline; `None` for a
    /// store that does not tell its clock.
    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        Box::pin(async { Ok(None) })
    }

    /// True when nobody holds `name` by the store's clock (never granted, expired or released).
    fn is_free<'a>(&'a self, name: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move { Ok(self.inspect(name).await?.is_none_or(|h| h.expired)) })
    }

    /// The TTL a holding asked for `ttl` really gets from the store, by which it expires (etcd
    /// rounds up to whole seconds); the same for a store that grants what is asked.
    fn granted_ttl(&self, ttl: Duration) -> Duration {
        ttl
    }

    /// (The lab only, between experiments) Forgets every holding, so that the next experiment
    /// starts from free leases; returns once the store has committed it. Tokens do not go back.
    /// A SQL store's table is emptied with the lab's schema instead: nothing to do here.
    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// How a store kind opens one of its stores where the lab's servers are: returns once it is
/// connected.
pub type OpenStore = for<'a> fn(&'a StoreAt) -> StoreFuture<'a, Arc<dyn LeaseStore>>;

/// A kind of lease store the lab can run: the name a holder's `--store` gives, what it calls its
/// token, one line about it, and how to open one where the lab's servers are.
#[derive(Clone, Copy)]
pub struct StoreKind {
    /// Which store it is: its name and its service ([`StoreId`]).
    pub id: StoreId,
    pub token: &'static str,
    pub about: &'static str,
    /// Whether its grants carry a token (`false`: every grant answers 0; a fence fed by it has
    /// nothing to compare, and the evidence masks the numbers).
    pub has_token: bool,
    /// Whether a fence fed by its token holds — the token is greater for every later grant.
    /// `false`: a flawed design the lab runs to show it failing (no token; or one that starts
    /// again, R1's ZooKeeper suffix). The default run does not repeat F4/F5 on it, and the
    /// report card expects it unsafe.
    pub sound: bool,
    /// Whether the store ends a holding as soon as its holder's connection closes — a lock kept
    /// by a session, whose server notices the socket closed (the advisory locks): a holder
    /// killed frees its lock at once, and the TTL plays no part. `false`: a dead holder's
    /// holding lasts until the store expires it (a ZooKeeper session outlives its connection).
    pub freed_on_disconnect: bool,
    /// Whether a holding lives as long as a session the store's server expires (ZooKeeper's
    /// ephemeral nodes): the store shows it as `while session 0x… lives`, and the paused holder's
    /// timeline adds the server's own log line expiring it and what the frozen client heard on
    /// waking. One datum decides both those checks and how many a run declares
    /// (`scenarios::Part::OnSessions`).
    pub session_holdings: bool,
    /// Whether every holding of one client lives by one session of the store's, which its
    /// handle names (etcd's session lease as `concurrency.Session` keeps it: `lease=ID`): one
    /// keep-alive renews them all, and a holding taken after a renewal joins the same session
    /// (`scenarios::Part::OneSession`: F1 compares the handles).
    pub one_session: bool,
    /// Opens the store at `at` (`None`: the lab opens it its own way — the job lease, which the
    /// U-series runs beside its runs on MariaDB).
    pub open: Option<OpenStore>,
}

impl std::fmt::Debug for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreKind")
            .field("id", &self.id)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl PartialEq for StoreKind {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl StoreKind {
    /// Its name ([`StoreId::name`]).
    pub const fn name(&self) -> &'static str {
        self.id.name()
    }

    /// The lock service it runs on ([`StoreId::service`]).
    pub const fn service(&self) -> Option<Service> {
        self.id.service()
    }
}

/// Where a store is opened: what the lab (or a holder process) has reached. A SQL store runs on
/// `table`, the lease table the lab provisioned; a lock service's store connects to `endpoints`
/// (and takes its safety margin from `table`).
#[derive(Debug, Clone)]
pub struct StoreAt {
    /// The lease as a SQL table, on the lease database, with the run's profile and margin.
    pub table: SqlLeaseStore,
    /// `host:port` of the lock service's members (none for the SQL store).
    pub endpoints: Vec<String>,
}

impl StoreAt {
    /// The lock service's address (`host:port`) a store of `store` connects to: the first of
    /// [`StoreAt::endpoints`].
    pub fn endpoint(&self, store: &'static str) -> Result<&str> {
        self.endpoints
            .first()
            .map(String::as_str)
            .ok_or_else(|| Error::Service {
                store,
                what: "open the store".into(),
                detail: "no server's address (the lab passes --store-endpoint)".into(),
            })
    }
}

/// `Err` when a lease of `ttl` would have a local deadline already past on arrival: the TTL must
/// exceed the safety margin. Every store checks it before it asks.
pub(crate) fn check_timing(ttl: Duration, margin: Duration) -> Result<()> {
    if ttl <= margin {
        return Err(Error::Timing {
            ttl_ms: ttl.as_millis(),
            margin_ms: margin.as_millis(),
        });
    }
    Ok(())
}
