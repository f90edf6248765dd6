//! Every lease store the lab knows, in one table ([`STORES`]), whether this build has its client
//! or not: its name (a holder's `--store`, `lab run --lease-store`), the lock service it runs on,
//! the cargo feature that builds its client and — when built — its kind
//! ([`StoreKind`]: its token, a line about it, whether a fence fed by it holds, how to open one,
//! each in the store's own file). [`open`] is the one place a lease store is chosen, for the lab
//! and for every holder.
//!
//! The table sits above the stores it lists (`lease`'s files, and `fenced_job`'s seed 000 store
//! through `lease::job_lease`), so that none of them depends on it.

use std::sync::Arc;

use crate::lease::{self, LeaseStore, StoreAt, StoreKind};
pub use crate::lease::{Service, StoreId};
use crate::{Error, Result};

/// One lease store of the lab, built into this build or not.
#[derive(Debug)]
pub struct Store {
    /// Which store: its name and its service ([`StoreId`]).
    pub id: StoreId,
    /// The cargo feature of `fencing` that builds its client; `None`: always built.
    pub feature: Option<&'static str>,
    /// What it is and how to open one, when this build has its client.
    pub kind: Option<StoreKind>,
}

/// `Some(kind)` when the feature `$feature` is built, else `None`.
macro_rules! built {
    ($feature:literal, $kind:path) => {{
        #[cfg(feature = $feature)]
        {
            Some($kind)
        }
        #[cfg(not(feature = $feature))]
        {
            None
        }
    }};
}

/// Every lease store the lab knows, one entry each.
pub const STORES: &[Store] = &[
    Store {
        id: StoreId::Postgres,
        feature: None,
        kind: Some(lease::sql::KIND),
    },
    Store {
        id: StoreId::PostgresBatched,
        feature: None,
        kind: Some(lease::batched::KIND),
    },
    Store {
        id: StoreId::PgAdvisory,
        feature: None,
        kind: Some(lease::pg_advisory::KIND),
    },
    Store {
        id: StoreId::PgAdvisoryFenced,
        feature: None,
        kind: Some(lease::pg_advisory::FENCED),
    },
    Store {
        id: StoreId::Mariadb,
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::job_lease::KIND),
    },
    Store {
        id: StoreId::MariadbGetlock,
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::mariadb_getlock::KIND),
    },
    Store {
        id: StoreId::MariadbGetlockFenced,
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::mariadb_getlock::FENCED),
    },
    Store {
        id: StoreId::Redis,
        feature: Some("redis"),
        kind: built!("redis", lease::redis::KIND),
    },
    Store {
        id: StoreId::RedisPlain,
        feature: Some("redis"),
        kind: built!("redis", lease::redis::PLAIN),
    },
    Store {
        id: StoreId::RedisWait,
        feature: Some("redis"),
        kind: built!("redis", lease::redis::WAIT),
    },
    Store {
        id: StoreId::Redlock,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::KIND),
    },
    Store {
        id: StoreId::RedlockFenced,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::FENCED),
    },
    Store {
        id: StoreId::RedlockUnchecked,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::UNCHECKED),
    },
    Store {
        id: StoreId::Etcd,
        feature: Some("etcd"),
        kind: built!("etcd", lease::etcd::KIND),
    },
    Store {
        id: StoreId::EtcdSession,
        feature: Some("etcd"),
        kind: built!("etcd", lease::etcd::SESSION),
    },
    Store {
        id: StoreId::Zookeeper,
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::KIND),
    },
    Store {
        id: StoreId::ZookeeperSession,
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::SESSION),
    },
    Store {
        id: StoreId::ZookeeperSuffix,
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::SUFFIX),
    },
];

impl Store {
    /// Its name ([`StoreId::name`]).
    pub fn name(&self) -> &'static str {
        self.id.name()
    }

    /// The lock service it runs on ([`StoreId::service`]).
    pub fn service(&self) -> Option<Service> {
        self.id.service()
    }
}

/// The entry of the store `id`.
pub fn entry(id: StoreId) -> &'static Store {
    STORES
        .iter()
        .find(|s| s.id == id)
        .expect("every store has its entry (a test walks StoreId::ALL)")
}

/// The kind of the store `id` when this build has its client.
pub fn store_kind(id: StoreId) -> Option<&'static StoreKind> {
    entry(id).kind.as_ref()
}

/// The kinds of every store this build has, in the table's order.
pub fn built() -> impl Iterator<Item = &'static StoreKind> {
    STORES.iter().filter_map(|s| s.kind.as_ref())
}

/// Opens the store `id` at `at`: the one place a lease store is chosen, for the lab and for
/// every holder process. Returns once it is connected.
pub async fn open(id: StoreId, at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let known_names = || built().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    let kind = match entry(id) {
        Store {
            kind: Some(kind), ..
        } => kind,
        Store {
            feature: Some(feature),
            ..
        } => {
            return Err(Error::UnknownStore {
                name: format!(
                    "{id} (this build left its client out: build with --features fencing/{feature})"
                ),
                known: known_names(),
            })
        }
        Store { feature: None, .. } => unreachable!("a store always built has its kind"),
    };
    let open = kind.open.ok_or_else(|| Error::UnknownStore {
        name: format!("{id} (opened by the U-series itself)"),
        known: built()
            .filter(|k| k.open.is_some())
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    open(at).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every store on ZooKeeper holds its leases by session (what decides the paused holder's
    /// two session checks and the count a run declares), and no other store does.
    #[test]
    fn the_stores_on_zookeeper_and_only_they_hold_by_session() {
        for store in STORES {
            if let Some(kind) = &store.kind {
                assert_eq!(
                    kind.session_holdings,
                    store.service() == Some(Service::Zookeeper),
                    "{}",
                    store.name()
                );
            }
        }
    }

    #[test]
    fn every_store_has_one_entry_and_its_kind_is_its_own() {
        assert_eq!(STORES.len(), StoreId::ALL.len(), "{STORES:#?}");
        for &id in StoreId::ALL {
            let s = entry(id);
            if let Some(k) = &s.kind {
                assert_eq!(k.id, id, "{s:?}");
                assert!(!k.token.is_empty() && !k.about.is_empty(), "{k:?}");
            }
            assert!(
                s.kind.is_some() || s.feature.is_some(),
                "{s:?}: always built"
            );
        }
    }
}
