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
use crate::{Error, Result};

/// One lease store of the lab, built into this build or not.
#[derive(Debug)]
pub struct Store {
    /// Its name: a holder's `--store`, `lab run --lease-store`.
    pub name: &'static str,
    /// The lock service it runs on, in a container the lab starts (`redis`, `etcd`,
    /// `zookeeper`) or — `mariadb`, for the named locks — a local MariaDB server the lab starts
    /// (no Docker); `None`: it runs on the lab's lease database, or on servers an experiment
    /// starts for itself (R2's `redis-wait`, the RL-series' Redlock).
    pub service: Option<&'static str>,
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
        name: "postgres",
        service: None,
        feature: None,
        kind: Some(lease::sql::KIND),
    },
    Store {
        name: "postgres-batched",
        service: None,
        feature: None,
        kind: Some(lease::batched::KIND),
    },
    Store {
        name: "pg-advisory",
        service: None,
        feature: None,
        kind: Some(lease::pg_advisory::KIND),
    },
    Store {
        name: "pg-advisory-fenced",
        service: None,
        feature: None,
        kind: Some(lease::pg_advisory::FENCED),
    },
    Store {
        name: "mariadb",
        service: None,
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::job_lease::KIND),
    },
    Store {
        name: "mariadb-getlock",
        service: Some("mariadb"),
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::mariadb_getlock::KIND),
    },
    Store {
        name: "mariadb-getlock-fenced",
        service: Some("mariadb"),
        feature: Some("mariadb"),
        kind: built!("mariadb", lease::mariadb_getlock::FENCED),
    },
    Store {
        name: "redis",
        service: Some("redis"),
        feature: Some("redis"),
        kind: built!("redis", lease::redis::KIND),
    },
    Store {
        name: "redis-plain",
        service: Some("redis"),
        feature: Some("redis"),
        kind: built!("redis", lease::redis::PLAIN),
    },
    Store {
        name: "redis-wait",
        service: None,
        feature: Some("redis"),
        kind: built!("redis", lease::redis::WAIT),
    },
    Store {
        name: "redlock",
        service: None,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::KIND),
    },
    Store {
        name: "redlock-fenced",
        service: None,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::FENCED),
    },
    Store {
        name: "redlock-unchecked",
        service: None,
        feature: Some("redis"),
        kind: built!("redis", lease::redlock::UNCHECKED),
    },
    Store {
        name: "etcd",
        service: Some("etcd"),
        feature: Some("etcd"),
        kind: built!("etcd", lease::etcd::KIND),
    },
    Store {
        name: "etcd-session",
        service: Some("etcd"),
        feature: Some("etcd"),
        kind: built!("etcd", lease::etcd::SESSION),
    },
    Store {
        name: "zookeeper",
        service: Some("zookeeper"),
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::KIND),
    },
    Store {
        name: "zookeeper-session",
        service: Some("zookeeper"),
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::SESSION),
    },
    Store {
        name: "zookeeper-suffix",
        service: Some("zookeeper"),
        feature: Some("zookeeper"),
        kind: built!("zookeeper", lease::zookeeper::SUFFIX),
    },
];

/// The store named `name`, built or not.
pub fn known(name: &str) -> Option<&'static Store> {
    STORES.iter().find(|s| s.name == name)
}

/// The kind of the store named `name` when this build has its client.
pub fn store_kind(name: &str) -> Option<&'static StoreKind> {
    known(name)?.kind.as_ref()
}

/// The kinds of every store this build has, in the table's order.
pub fn built() -> impl Iterator<Item = &'static StoreKind> {
    STORES.iter().filter_map(|s| s.kind.as_ref())
}

/// The lock service the store named `name` runs on (`redis`, `etcd`, `zookeeper`), whether or
/// not this build has its client; `None` for a store on the lab's databases.
pub fn service_of(name: &str) -> Option<&'static str> {
    known(name)?.service
}

/// Opens the store named `name` at `at`: the one place a lease store is chosen, for the lab and
/// for every holder process. Returns once it is connected.
pub async fn open(name: &str, at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let known_names = || built().map(|k| k.name).collect::<Vec<_>>().join(", ");
    let kind = match known(name) {
        Some(Store {
            kind: Some(kind), ..
        }) => kind,
        Some(Store {
            feature: Some(feature),
            ..
        }) => {
            return Err(Error::UnknownStore {
                name: format!(
                "{name} (this build left its client out: build with --features fencing/{feature})"
            ),
                known: known_names(),
            })
        }
        _ => {
            return Err(Error::UnknownStore {
                name: name.to_owned(),
                known: known_names(),
            })
        }
    };
    let open = kind.open.ok_or_else(|| Error::UnknownStore {
        name: format!("{name} (opened by the U-series itself)"),
        known: built()
            .filter(|k| k.open.is_some())
            .map(|k| k.name)
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
                    store.service == Some("zookeeper"),
                    "{}",
                    store.name
                );
            }
        }
    }

    #[test]
    fn every_store_has_a_unique_name_and_its_kind_agrees_with_its_entry() {
        let mut names: Vec<&str> = STORES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            STORES.len(),
            "a name used twice in {STORES:#?}"
        );
        for s in STORES {
            if let Some(k) = &s.kind {
                assert_eq!((k.name, k.service), (s.name, s.service), "{s:?}");
                assert!(!k.token.is_empty() && !k.about.is_empty(), "{k:?}");
                let found = store_kind(s.name).expect("built");
                assert_eq!((found.name, found.token), (k.name, k.token), "{s:?}");
            } else {
                assert!(store_kind(s.name).is_none(), "{s:?}");
            }
            assert!(
                s.kind.is_some() || s.feature.is_some(),
                "{s:?}: always built"
            );
        }
        assert_eq!(known("no-such-store").map(|s| s.name), None);
        assert_eq!(service_of("redis-plain"), Some("redis"));
        assert_eq!(service_of("postgres"), None);
    }
}
