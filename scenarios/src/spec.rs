//! What an experiment is and what it needs, as data: the [`Spec`] every experiment file opens
//! with, and the small types its fields are made of ([`Needs`], [`About`], [`Checks`],
//! [`Applies`], [`LockServices`], [`StoreLanes`]). The runner's skip decisions, `lab list`, the
//! README's table, the interruption audit and the report read a spec, never the experiment's
//! code; each spec is a `const`, so a reader sees all of it at a glance.

use fencing::lease::StoreId;
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
    /// How many checks a complete run makes, as data: the checks every case makes, and the parts
    /// only some cases make, each under the condition ([`Part`]) that the experiment's code reads
    /// too ([`crate::Testbed::makes`]). The runner fails a scenario that completes with another
    /// number (a check that silently went missing), and the tests hold every scenario to it.
    pub checks: Checks,
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
    /// How many checks a complete run makes in a case on the lease store `store`, run again with
    /// another fenced mode or not ([`Checks::in_case`]).
    pub fn checks_in(&self, store: StoreId, again_with_fence: bool) -> usize {
        self.checks.in_case(store, again_with_fence)
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

/// How many checks an experiment makes ([`Spec::checks`]): `always`, in every case, and each
/// part's, in the cases its [`Part`] holds in. The code that runs a part asks the same question
/// ([`crate::Testbed::makes`]), so that no case can run a part its count leaves out — the trap a
/// count per store was (`./run.sh --lease-store zookeeper --only F4` made 19 checks, held to 17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// The checks every case makes.
    pub always: usize,
    /// The parts only some cases make: each one's condition, and its checks.
    pub parts: &'static [(Part, usize)],
}

impl Checks {
    /// As many checks in every case.
    pub const fn fixed(always: usize) -> Checks {
        Checks { always, parts: &[] }
    }

    /// `always`, and the checks of `parts` where each holds.
    pub const fn with(always: usize, parts: &'static [(Part, usize)]) -> Checks {
        Checks { always, parts }
    }

    /// How many checks a case on the lease store `store` makes, run again with another fenced
    /// mode (`again_with_fence`) or not.
    pub fn in_case(&self, store: StoreId, again_with_fence: bool) -> usize {
        self.always
            + self
                .parts
                .iter()
                .filter(|(part, _)| part.holds(store, again_with_fence))
                .map(|(_, n)| n)
                .sum::<usize>()
    }
}

/// A part of an experiment that only some cases make — the one condition both its code and its
/// count read ([`Part::holds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// On the lab's lease table alone (`--lease-store postgres`): a part that acts on its rows
    /// (F3's round in the lease's last moments, judged by the table's own `now()`).
    OnTheTable,
    /// Where no lock service is the lease store — the lease table, batched or not, the advisory
    /// locks: the database ends a lease when it is asked, at the TTL by its clock, which F13's
    /// row just below the boundary needs (a lock service ends it in its own time after).
    NoLockService,
    /// Where a holding its client stops renewing ends at its TTL while the client lives: not a
    /// session lock, which lives as long as its connection (`StoreKind::freed_on_disconnect`:
    /// the advisory locks), nor a holding by session, whose client's heartbeat keeps it
    /// (`StoreKind::session_holdings`: ZooKeeper) — F1's holding left to expire and taken over.
    ExpiresUnrenewed,
    /// On a store that holds its leases by session (`StoreKind::session_holdings`: every
    /// ZooKeeper store): the server's log expiring A's session, and what its client heard.
    OnSessions,
    /// On a store that keeps every holding of a client on one session, named by the holding's
    /// handle (`StoreKind::one_session`: etcd-session): F1's holding taken after a renewal
    /// joins the session the client's first holding lives by.
    OneSession,
    /// In a case's first fenced mode, not when the experiment runs again with another: a part
    /// that does not use the fenced mode under test, judged once (F6's check-then-write, F7's
    /// row-level fence).
    FirstFenceOnly,
}

impl Part {
    /// Whether a case on the lease store `store`, run again with another fenced mode
    /// (`again_with_fence`) or not, makes this part.
    pub fn holds(self, store: StoreId, again_with_fence: bool) -> bool {
        match self {
            Part::OnTheTable => store == StoreId::Postgres,
            Part::NoLockService => store.service().is_none(),
            Part::ExpiresUnrenewed => fencing::stores::store_kind(store)
                .is_some_and(|k| !k.freed_on_disconnect && !k.session_holdings),
            Part::OnSessions => holds_by_session(store),
            Part::OneSession => fencing::stores::store_kind(store).is_some_and(|k| k.one_session),
            Part::FirstFenceOnly => !again_with_fence,
        }
    }
}

/// Whether the store `store`'s kind holds its leases by session.
fn holds_by_session(store: StoreId) -> bool {
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
    AllBut(&'static [(StoreId, &'static str)]),
    /// None, and why — what it acts on that a lock service does not have — for the `skip` line
    /// (most often [`ON_THE_LEASE_TABLE`]).
    None(&'static str),
}

impl LockServices {
    /// Whether it runs on the lock service `store`; `Err` says why not.
    pub fn on(&self, store: StoreId) -> Result<(), &'static str> {
        match *self {
            LockServices::All => Ok(()),
            LockServices::AllBut(not) => not
                .iter()
                .find(|(id, _)| *id == store)
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
    fn a_count_adds_each_part_where_it_holds() {
        let fixed = Checks::fixed(10);
        for (store, again) in [
            (StoreId::Postgres, false),
            (StoreId::Redis, true),
            (StoreId::Zookeeper, false),
        ] {
            assert_eq!(fixed.in_case(store, again), 10);
        }
        let parts = Checks::with(
            5,
            &[
                (Part::OnTheTable, 1),
                (Part::NoLockService, 2),
                (Part::FirstFenceOnly, 4),
            ],
        );
        assert_eq!(parts.in_case(StoreId::Postgres, false), 12);
        assert_eq!(parts.in_case(StoreId::Postgres, true), 8);
        // The batched lease table and the advisory locks: no lock service, not the table.
        assert_eq!(parts.in_case(StoreId::PostgresBatched, false), 11);
        assert_eq!(parts.in_case(StoreId::PgAdvisoryFenced, true), 7);
        assert_eq!(parts.in_case(StoreId::Redis, false), 9);
        assert_eq!(parts.in_case(StoreId::ZookeeperSuffix, true), 5);
        // A holding left unrenewed expires on a table and a lock service's lease, never on a
        // session lock (nor, where this build has them, on ZooKeeper's sessions).
        let expiring = Checks::with(0, &[(Part::ExpiresUnrenewed, 1)]);
        for kind in fencing::stores::built() {
            let expires = !kind.freed_on_disconnect && !kind.session_holdings;
            assert_eq!(
                expiring.in_case(kind.id, false),
                usize::from(expires),
                "{}",
                kind.id
            );
        }
        assert_eq!(expiring.in_case(StoreId::Postgres, true), 1);
        assert_eq!(expiring.in_case(StoreId::PgAdvisoryFenced, false), 0);
        // Every store this build has: the session part exactly where its kind holds by session,
        // in every fenced mode.
        let sessions = Checks::with(10, &[(Part::OnSessions, 2)]);
        for kind in fencing::stores::built() {
            let extra = if kind.session_holdings { 2 } else { 0 };
            for again in [false, true] {
                assert_eq!(sessions.in_case(kind.id, again), 10 + extra, "{}", kind.id);
            }
        }
    }

    #[test]
    fn lock_services_say_why_not() {
        assert_eq!(LockServices::All.on(StoreId::Redis), Ok(()));
        let but = LockServices::AllBut(&[(StoreId::Zookeeper, "sessions")]);
        assert_eq!(but.on(StoreId::Redis), Ok(()));
        assert_eq!(but.on(StoreId::ZookeeperSuffix), Ok(()));
        assert_eq!(but.on(StoreId::Zookeeper), Err("sessions"));
        assert_eq!(LockServices::None("why").on(StoreId::Etcd), Err("why"));
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
