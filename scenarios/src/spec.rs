//! What an experiment is and what it needs, as data: the [`Spec`] every experiment file opens
//! with, and the small types its fields are made of ([`Needs`], [`About`], [`StoreChecks`],
//! [`Applies`], [`LockServices`], [`StoreLanes`]). The runner's skip decisions, `lab list`, the
//! README's table, the interruption audit and the report read a spec, never the experiment's
//! code; each spec is a `const`, so a reader sees all of it at a glance.

use fencing::profile::Profile;

use crate::FaultPoint;

/// What an experiment is and what it needs, as data: the runner's skip decisions, `lab list`, the
/// README's table, the interruption audit and the report read this, never the experiment's code.
/// Every field is spelled out in every spec (no defaults): what an experiment does not do is
/// said as plainly as what it does.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// `F1`, `F2`, … — a series letter and a number; [`crate::ALL`] is ordered by series, then
    /// number.
    pub id: &'static str,
    /// The CASE title: the fault and the property, in one line.
    pub title: &'static str,
    /// The fault, what it shows and a paragraph, for the README's table and the experiments page.
    pub about: About,
    /// How many checks a complete run makes. The runner fails a scenario that completes with
    /// another number (a check that silently went missing), and the tests hold every scenario to
    /// it.
    pub checks: usize,
    /// Where a lease store (`--lease-store`) makes a complete run make more or fewer checks than
    /// [`Spec::checks`] ([`Spec::checks_on`]).
    pub checks_on_store: StoreChecks,
    /// How many checks it makes when run again with another fenced mode
    /// ([`crate::Testbed::again_with_fence`]): fewer than [`Spec::checks`] where a part does not
    /// use the fenced mode under test (F6's check-then-write, F7's row-level fence), judged once
    /// in the first case. `None`: as many as [`Spec::checks`].
    pub checks_again: Option<usize>,
    /// What it needs beyond the embedded PostgreSQL.
    pub needs: Needs,
    /// Whether it applies to the system under test (`lab run --sut`); one that does not says
    /// `skip` (n/a on the report card).
    pub applies: Applies,
    /// Whether it runs on the container backend too (`--backend containers`: the lease store
    /// and the resource on PostgreSQL hosts of their own). One that does not says `skip` there.
    pub on_containers: bool,
    /// Whether it runs with the lease store on Patroni (`--lease-store patroni`): the ones that
    /// run on containers, unless they restart the lease store's server (a Patroni cluster
    /// replaces a lost leader instead: F17).
    pub on_patroni: bool,
    /// The lock services it runs on as the lease store (`--lease-store redis|etcd|zookeeper`).
    pub lock_services: LockServices,
    /// Whether its verdicts depend on the correct write mode under test (`--fenced-mode`): such
    /// experiments are run against every fenced mode the lab offers.
    pub fence_dependent: bool,
    /// Whether the default run repeats it on every lock service of the build
    /// ([`crate::Params::again_on`]): F4 and F5, the paused holder fenced and unfenced.
    pub again_on_stores: bool,
    /// Whether it must run with no other experiment at once (`lab run --jobs`): it stops or
    /// crashes a server, or measures timing that the load of another experiment would distort.
    pub runs_alone: bool,
    /// The fault points at which it stops a holder process — what a holder of the user's
    /// (`--holder-cmd`) must implement for it to run. `Err` says why such a holder is not what
    /// it judges (it starts none: [`NO_HOLDER`], or its holder reaches a server a holder of the
    /// user's is not asked to speak to), and with `--holder-cmd` the case says skip.
    pub holder_points: Result<&'static [FaultPoint], &'static str>,
    /// Words of check lines printed while its fault is in force (a holder frozen, a server just
    /// restarted): the interruption audit stops the lab at each. Empty: at its first check.
    pub fault_moments: &'static [&'static str],
    /// The lease store's and the resource's lanes of its timeline picture ([`Spec::lanes`]).
    pub lanes: StoreLanes,
}

impl Spec {
    /// How many checks a complete run makes on the lease store `store` (`--lease-store`): more
    /// than [`Spec::checks`] where a store has more to show (a ZooKeeper session expired by the
    /// server, and what its client heard on waking), fewer where a part needs the lease table.
    pub fn checks_on(&self, store: &str) -> usize {
        match self.checks_on_store {
            StoreChecks::Same => self.checks,
            StoreChecks::FewerOnLockServices(n) if store != fencing::lease::sql::KIND.name => {
                self.checks - n
            }
            StoreChecks::FewerOnLockServices(_) => self.checks,
            StoreChecks::MoreOnSessions(n) if holds_by_session(store) => self.checks + n,
            StoreChecks::MoreOnSessions(_) => self.checks,
        }
    }

    /// How many checks it makes when run again with another fenced mode ([`Spec::checks_again`]'s
    /// number, or [`Spec::checks`]), on the lab's own lease table.
    pub fn checks_again(&self) -> usize {
        self.checks_again.unwrap_or(self.checks)
    }

    /// [`Spec::checks_again`] on the lease store `store`: the store's own difference
    /// ([`Spec::checks_on`]) holds in every fenced mode — ZooKeeper's two checks of its session,
    /// a table-only part missing on a lock service — not only in the first.
    pub fn checks_again_on(&self, store: &str) -> usize {
        (self.checks_again() + self.checks_on(store)).saturating_sub(self.checks)
    }

    /// The lanes of its timeline picture: the holders (whoever acts, in name order), the lease
    /// store and the resource ([`Spec::lanes`]), and the lab as the orchestrator.
    pub fn lanes(&self) -> harness::evidence::Lanes {
        let mut lanes = harness::evidence::Lanes::default();
        match self.lanes {
            StoreLanes::Default => {}
            StoreLanes::Lease(name, label) => {
                lanes.lease = harness::evidence::Lane::new(name, label);
            }
            StoreLanes::OneStore(name, label) => {
                lanes.lease = harness::evidence::Lane::new(name, label);
                lanes.resource = lanes.lease.clone();
            }
        }
        lanes
    }
}

/// What a scenario needs beyond the embedded PostgreSQL. A scenario whose need is not met here
/// reports `skip` with the reason and the install hint — never a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// The embedded PostgreSQL only: runs everywhere the lab runs.
    Nothing,
    /// MariaDB installed and the `mariadb` feature built in (the U-series).
    MariaDb,
    /// libfaketime installed (F13: a holder's clock run slow).
    Faketime,
    /// A Docker engine, the `containers` feature built in, and a way to build the image (F15).
    Containers,
}

/// What a reader is told about an experiment beside its title: `lab list --markdown` makes the
/// README's table of experiments and docs/experiments.md from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// The fault it injects, in a few words ("A frozen (SIGSTOP) past its lease").
    pub fault: &'static str,
    /// What it shows, in one line: the property, or the flaw a negative control exposes.
    pub shows: &'static str,
    /// One paragraph for the experiments page: the timeline, what its checks judge, why it
    /// matters to someone choosing or building a lock.
    pub paragraph: &'static str,
}

/// Where a lease store changes how many checks a complete run makes ([`Spec::checks_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreChecks {
    /// As many on every store.
    Same,
    /// This many fewer on any store but the lease table (a lock service, the advisory locks): a
    /// part that needs the lease table is not run there.
    FewerOnLockServices(usize),
    /// This many more on a store that holds by session (`StoreKind::session_holdings`: every
    /// ZooKeeper store): the server's log expiring a session, and what its client heard of it.
    /// The store's kind says it, never a list of names here: the same datum decides whether the
    /// run makes those checks.
    MoreOnSessions(usize),
}

/// Whether the store named `store` holds by session ([`StoreChecks::MoreOnSessions`]).
fn holds_by_session(store: &str) -> bool {
    fencing::stores::store_kind(store).is_some_and(|k| k.session_holdings)
}

/// Whether an experiment applies to the system under test (`lab run --sut`). Every experiment
/// applies to the lab's own design.
#[derive(Debug, Clone, Copy)]
pub enum Applies {
    /// To every design: its fault needs nothing a design may lack.
    Always,
    /// To the designs for which the rule holds; to another, `skip` with why not — what the
    /// design lacks that the experiment's fault acts on.
    When(fn(&Profile) -> bool, &'static str),
}

impl Applies {
    /// Whether it applies to `sut`; `Err` says why not, for the `skip` line.
    pub fn to(&self, sut: &Profile) -> Result<(), &'static str> {
        match *self {
            Applies::Always => Ok(()),
            Applies::When(rule, _) if rule(sut) => Ok(()),
            Applies::When(_, why) => Err(why),
        }
    }
}

/// The lock services an experiment runs on as the lease store (`--lease-store redis|etcd|
/// zookeeper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockServices {
    /// Every one: its fault acts on a holder, or on the lease as any store grants it (F1, F3,
    /// F4, F5, F10, F12, F16).
    All,
    /// Every one but these stores, each with why not, for the `skip` line.
    AllBut(&'static [(&'static str, &'static str)]),
    /// None, and why — what it acts on that a lock service does not have — for the `skip` line
    /// (most often [`ON_THE_LEASE_TABLE`]).
    None(&'static str),
}

impl LockServices {
    /// Whether it runs on the lock service `store`; `Err` says why not.
    pub fn on(&self, store: &str) -> Result<(), &'static str> {
        match *self {
            LockServices::All => Ok(()),
            LockServices::AllBut(not) => not
                .iter()
                .find(|(name, _)| *name == store)
                .map_or(Ok(()), |(_, why)| Err(why)),
            LockServices::None(why) => Err(why),
        }
    }
}

/// Why most experiments do not run on a lock service.
pub const ON_THE_LEASE_TABLE: &str = "it acts on the lease table itself (its SQL, its server's crash or replication), which a lock service does not have; it runs with --lease-store single";

/// Why an experiment that starts no holder process says skip with `--holder-cmd`.
pub const NO_HOLDER: &str =
    "it starts no holder process (it drives the lease and the resource through \
                         the lab's own clients), so a holder of yours is not what it judges";

/// The lease store's and the resource's lanes of a timeline picture, each a name and a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreLanes {
    /// The embedded PostgreSQL's `lease26` and `res26` (the lease on a lock service: that
    /// service, in the runner).
    Default,
    /// The lease on servers the experiment starts itself, this lane; the resource `res26`.
    Lease(&'static str, &'static str),
    /// The lease and the resource in one store (one MariaDB database), drawn as one lane.
    OneStore(&'static str, &'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_on_a_store_and_again_follow_the_spec() {
        let spec = |checks_on_store, checks_again| Spec {
            checks: 10,
            checks_on_store,
            checks_again,
            ..*crate::ALL[0].spec()
        };
        let same = spec(StoreChecks::Same, None);
        assert_eq!(
            ["postgres", "redis", "zookeeper"].map(|s| same.checks_on(s)),
            [10; 3]
        );
        assert_eq!(same.checks_again(), 10);
        assert_eq!(same.checks_again_on("zookeeper"), 10);
        let fewer = spec(StoreChecks::FewerOnLockServices(2), Some(7));
        assert_eq!(
            ["postgres", "redis", "zookeeper-suffix"].map(|s| fewer.checks_on(s)),
            [10, 8, 8]
        );
        assert_eq!(fewer.checks_again(), 7);
        assert_eq!(
            ["postgres", "redis"].map(|s| fewer.checks_again_on(s)),
            [7, 5]
        );
        let more = spec(StoreChecks::MoreOnSessions(2), None);
        // Every store this build has: two more exactly where its kind holds by session.
        for kind in fencing::stores::built() {
            let extra = if kind.session_holdings { 2 } else { 0 };
            assert_eq!(more.checks_on(kind.name), 10 + extra, "{}", kind.name);
        }
        // Found by `./run.sh --lease-store zookeeper --only F4`: its fenced-single and
        // fenced-shared cases made 19 checks and were held to 17.
        // (ZooKeeper's count where this build has its client.)
        let zookeeper = if holds_by_session("zookeeper") {
            12
        } else {
            10
        };
        assert_eq!(
            ["postgres", "zookeeper"].map(|s| more.checks_again_on(s)),
            [10, zookeeper]
        );
    }

    #[test]
    fn lock_services_say_why_not() {
        assert_eq!(LockServices::All.on("redis"), Ok(()));
        let but = LockServices::AllBut(&[("zookeeper", "sessions")]);
        assert_eq!(but.on("redis"), Ok(()));
        assert_eq!(but.on("zookeeper-suffix"), Ok(()));
        assert_eq!(but.on("zookeeper"), Err("sessions"));
        assert_eq!(LockServices::None("why").on("etcd"), Err("why"));
    }

    #[test]
    fn the_lanes_default_to_the_embedded_postgresqls() {
        let spec = |lanes| Spec {
            lanes,
            ..*crate::ALL[0].spec()
        };
        let default = harness::evidence::Lanes::default();
        assert_eq!(spec(StoreLanes::Default).lanes(), default);
        let own = spec(StoreLanes::Lease("etcd", "etcd (lease)")).lanes();
        assert_eq!(
            own.lease,
            harness::evidence::Lane::new("etcd", "etcd (lease)")
        );
        assert_eq!(own.resource, default.resource);
        let one = spec(StoreLanes::OneStore("fencing", "fencing (one)")).lanes();
        assert!(one.one_store());
        assert_eq!(one.resource.label, "fencing (one)");
    }

    #[test]
    fn applies_says_why_not() {
        let sut = Profile::seed004();
        assert_eq!(Applies::Always.to(sut), Ok(()));
        assert_eq!(Applies::When(|_| true, "no").to(sut), Ok(()));
        assert_eq!(Applies::When(|_| false, "no").to(sut), Err("no"));
    }
}
