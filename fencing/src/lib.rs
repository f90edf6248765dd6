//! The system under test: a lease store that issues fencing tokens, a resource that checks them,
//! and a downstream side effect that cannot take one: seed 004's design (docs/sources.md).
//!
//! This crate is the fencing implementation a reader would copy into a service. It knows nothing
//! of clusters, processes, scenarios or evidence: it takes connection pools and answers with
//! plain values. All the SQL of the lab's system under test lives here: the fence's in the built-in
//! profiles (`profiles/*.toml`), the rest one module per store.
//!
//! - [`lease`]: `acquire` / `renew` / `release`, each one autocommit statement judged by the
//!   database clock, plus the client's local deadline (invariants I1 and I2).
//! - [`resource`]: the protected report table with its five write modes, the scope's fence floor
//!   and the `write_attempt` log (invariant I3).
//! - [`publish`]: the business-key publish stand-in and its versioned variant (F9).
//! - `fenced_job` (`--features mariadb`): the second source system, a fenced job lease with a
//!   completion fenced by a join on the lease, on MariaDB.
//! - [`profile`]: the system under test as data — lease table and statements, the resource's
//!   fence and write — parsed from TOML and checked against a scratch database; the lab's own
//!   design is the built-in profiles in `profiles/`, whose statements the stores above run.
//! - [`prepare`]: a profile's SQL judged by the server before anything runs with it (every
//!   statement prepared against scratch databases) — the one module above both the profiles and
//!   the stores.
//! - [`schema`]: the two databases, their owner roles and migrations.
//! - [`stores`]: every lease store the lab knows, in one table, and [`stores::open`], the one
//!   place a store is chosen — above `lease` and `fenced_job`, which it lists.
//! - [`value_cas`]: antirez's alternative to a token — the resource checks the lock's random
//!   value with a check-and-set (the RL-series runs it beside the fence).

#[cfg(feature = "mariadb")]
pub mod fenced_job;
pub mod lease;
pub mod prepare;
pub mod profile;
pub mod publish;
pub mod resource;
pub mod schema;
pub mod stores;
pub mod value_cas;

/// What can go wrong in the system under test. A refused lease or a rejected write is *not* an
/// error: those are answers (`None`, `false`). Errors are failures to ask the question at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A statement could not be run or its result could not be read.
    #[error("failed to {op}")]
    Db {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// A migration could not be applied.
    #[error("failed to apply the {database} schema")]
    Migrate {
        database: &'static str,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The caller asked for a lease whose local deadline would already be past on arrival.
    #[error("invalid lease timing: ttl {ttl_ms} ms must be greater than the safety margin {margin_ms} ms")]
    Timing { ttl_ms: u128, margin_ms: u128 },
    /// A lock service (Redis, etcd, ZooKeeper) could not be reached or answered an error.
    #[error("{store}: failed to {what}: {detail}")]
    Service {
        store: &'static str,
        what: String,
        detail: String,
    },
    /// A profile's `inspect` names `:ttl_ms` and the store was given no TTL yet
    /// ([`lease::TtlInForce`]).
    #[error("lease.inspect names :ttl_ms, and no TTL is in force yet: the lab binds the TTL of its last acquire or renew through the store, or the run's --ttl")]
    NoTtlInForce,
    /// No lease store of that name can be opened here.
    #[error("no lease store {name}: the lab opens {known}")]
    UnknownStore { name: String, known: String },
    /// The system under test answered a token its profile's claims rule out: a token at or
    /// below 0 from a design that claims one, anything but 0 from a design that claims none.
    #[error("the profile {profile} claims {claim}, but its {statement} answered token {token}")]
    Claim {
        profile: String,
        claim: &'static str,
        statement: &'static str,
        token: i64,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a database error with the operation it interrupted (for callers that drive a
    /// transaction around a store call themselves).
    pub fn from_sqlx(op: &'static str) -> impl Fn(sqlx::Error) -> Error {
        move |source| Error::Db { op, source }
    }
}

/// Attaches the name of the operation to a database error.
pub(crate) trait DbContext<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> DbContext<T> for std::result::Result<T, sqlx::Error> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| Error::Db { op, source })
    }
}
