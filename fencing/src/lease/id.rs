//! The lab's lease stores and lock services as typed names: a store's name is parsed once, where
//! it enters (`lab run --lease-store`, a holder's `--store`, a library's entry), and from there on
//! the lab decides on the [`StoreId`], never on its spelling. Each store's name and the service it
//! runs on are written here and nowhere else; what a store *is* (its token, its modes, how to
//! open it) is its [`super::StoreKind`], in its own file.

use std::fmt;
use std::str::FromStr;

/// A lock service a lease store runs on, in a container the lab starts (Redis, etcd,
/// ZooKeeper) or — MariaDB, for the named locks — a local server the lab starts (no Docker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    Mariadb,
    Redis,
    Etcd,
    Zookeeper,
}

impl Service {
    /// Every service, in the order the lab lists them.
    pub const ALL: [Service; 4] = [
        Service::Mariadb,
        Service::Redis,
        Service::Etcd,
        Service::Zookeeper,
    ];

    /// Its name, as the evidence and the command line spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Service::Mariadb => "mariadb",
            Service::Redis => "redis",
            Service::Etcd => "etcd",
            Service::Zookeeper => "zookeeper",
        }
    }

    /// Its first store, the one the lab lists it by: named after it, or — MariaDB — its
    /// named lock in the plain form.
    pub const fn first_store(self) -> StoreId {
        match self {
            Service::Mariadb => StoreId::MariadbGetlock,
            Service::Redis => StoreId::Redis,
            Service::Etcd => StoreId::Etcd,
            Service::Zookeeper => StoreId::Zookeeper,
        }
    }
}

/// Declares [`StoreId`] from one table: variant, name, service.
macro_rules! stores {
    ($($(#[$doc:meta])* $id:ident = $name:literal on $service:expr;)*) => {
        /// One lease store of the lab, by identity (its kind: [`crate::stores::kind`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum StoreId {
            $($(#[$doc])* $id,)*
        }

        impl StoreId {
            /// Every store, in the registry's order.
            pub const ALL: &'static [StoreId] = &[$(StoreId::$id,)*];

            /// Its name: a holder's `--store`, `lab run --lease-store`, the evidence's.
            pub const fn name(self) -> &'static str {
                match self {
                    $(StoreId::$id => $name,)*
                }
            }

            /// The lock service it runs on; `None`: on the lab's lease database, or on servers
            /// an experiment starts for itself (R2's `redis-wait`, the RL-series' Redlock).
            pub const fn service(self) -> Option<Service> {
                match self {
                    $(StoreId::$id => $service,)*
                }
            }
        }
    };
}

stores! {
    /// The SQL profile's lease table.
    Postgres = "postgres" on None;
    PostgresBatched = "postgres-batched" on None;
    PgAdvisory = "pg-advisory" on None;
    PgAdvisoryFenced = "pg-advisory-fenced" on None;
    /// Seed 000's job lease, beside its runs on MariaDB (the U-series).
    Mariadb = "mariadb" on None;
    MariadbGetlock = "mariadb-getlock" on Some(Service::Mariadb);
    MariadbGetlockFenced = "mariadb-getlock-fenced" on Some(Service::Mariadb);
    Redis = "redis" on Some(Service::Redis);
    RedisPlain = "redis-plain" on Some(Service::Redis);
    RedisWait = "redis-wait" on None;
    Redlock = "redlock" on None;
    RedlockFenced = "redlock-fenced" on None;
    RedlockUnchecked = "redlock-unchecked" on None;
    Etcd = "etcd" on Some(Service::Etcd);
    EtcdSession = "etcd-session" on Some(Service::Etcd);
    Zookeeper = "zookeeper" on Some(Service::Zookeeper);
    ZookeeperSession = "zookeeper-session" on Some(Service::Zookeeper);
    ZookeeperSuffix = "zookeeper-suffix" on Some(Service::Zookeeper);
}

impl StoreId {
    /// Whether it is one of the databases' own named locks, fenced or not (PostgreSQL's
    /// advisory lock, MariaDB's `GET_LOCK`): a lease that is the locking session.
    pub const fn is_named_lock(self) -> bool {
        self.named_lock_forms().is_some()
    }

    /// A named lock's two forms, plain and fenced (the fenced one takes its token from a
    /// counter row beside the lock); `None` for any other store.
    pub const fn named_lock_forms(self) -> Option<(StoreId, StoreId)> {
        match self {
            StoreId::PgAdvisory | StoreId::PgAdvisoryFenced => {
                Some((StoreId::PgAdvisory, StoreId::PgAdvisoryFenced))
            }
            StoreId::MariadbGetlock | StoreId::MariadbGetlockFenced => {
                Some((StoreId::MariadbGetlock, StoreId::MariadbGetlockFenced))
            }
            _ => None,
        }
    }

    /// Whether it is the Redlock algorithm, on the RL-series' own majority of servers.
    pub const fn is_redlock(self) -> bool {
        matches!(
            self,
            StoreId::Redlock | StoreId::RedlockFenced | StoreId::RedlockUnchecked
        )
    }
}

/// Display as the name, parse from it (an unknown name: an error listing the known ones).
macro_rules! named {
    ($type:ident, $what:literal, $all:expr) => {
        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $type {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let all = $all;
                all.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|v| v.name()).collect();
                    format!(
                        "no {} is named {s:?}; the lab knows {}",
                        $what,
                        known.join(", ")
                    )
                })
            }
        }
    };
}

named!(Service, "lock service", Service::ALL);
named!(StoreId, "lease store", StoreId::ALL);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_store_and_names_are_unique() {
        for &id in StoreId::ALL {
            assert_eq!(id.name().parse::<StoreId>(), Ok(id));
        }
        for s in Service::ALL {
            assert_eq!(s.name().parse::<Service>(), Ok(s));
        }
        let err = "no-such-store".parse::<StoreId>().unwrap_err();
        assert!(err.contains("zookeeper-suffix"), "{err}");
        assert_eq!(StoreId::RedisPlain.service(), Some(Service::Redis));
        assert_eq!(StoreId::Postgres.service(), None);
    }
}
