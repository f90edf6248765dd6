//! The experiments and their contract, in floors. This file is the contract every experiment
//! implements ([`Scenario`]: its spec and its timeline; [`FaultPoint`]: where a holder process is
//! stopped); beside it on the ground floor, what the contract speaks of: the [`Spec`] (what an
//! experiment is and needs, as data: `spec.rs`) and the [`Testbed`] (the servers, the stores and
//! the holders it runs on: `testbed/`). Above it, floor by floor, each using only the floors
//! below:
//!
//! - `kit/`: the pieces experiments share — the paused holder's timeline, session locks, the
//!   Redlock majorities and client, the U-series' helpers, the lost create, the stale handle,
//!   the token-regression finder, the latch;
//! - `experiments/` (one file each, named after the fault it injects), and the programs built
//!   like them: `conformance` (a user's holder checked), `chaos` (a seeded schedule and its
//!   checker), `library` (the library card);
//! - the registry (`registry.rs`: [`ALL`], [`broken`], [`select`]) and the run (`runner.rs`).
//!
//! A scenario talks to the system under test only through `fencing`'s stores, to the cluster and
//! the holder processes only through the harness, and reports only through the [`Recorder`]. It
//! never prints, never sleeps to wait for a state, and never calls kill(2) itself.

use std::future::Future;
use std::pin::Pin;

use harness::evidence::Recorder;

pub mod chaos;
pub mod conformance;
mod experiments;
mod kit;
/// The lock libraries people ship, frozen as they ship: the library card (feature `lock-services`).
#[cfg(feature = "lock-services")]
pub mod library;
mod registry;
mod runner;
mod spec;
pub mod testbed;
pub mod tokens_table;

pub use experiments::preflight::P0;
pub use registry::{broken, id_order, select, ALL};
pub use runner::{join_all, run_all, run_all_on, Images};
pub use spec::{
    About, Applies, Checks, LockServices, Needs, Part, Spec, StoreLanes, NO_HOLDER,
    ON_THE_LEASE_TABLE,
};
pub use testbed::{Backend, Case, Params, Replication, Testbed};

/// What a scenario's `run` returns: `Err` means it could not complete (a failed check).
pub type Outcome<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;

/// Where an experiment stops a holder process (docs/holder-protocol.md, "The fault points").
/// Every holder stands at the write point; the others are asked for with a flag, which a holder
/// that does not implement them refuses with exit 2 (bad arguments) — how a holder of the
/// user's (`--holder-cmd`) says which it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultPoint {
    /// `AT_WRITE_POINT`: the check passed, the write not yet sent.
    WritePoint,
    /// `BEFORE_CHECK` (`--wait-before-check`): before the local-deadline check.
    BeforeCheck,
    /// `BEFORE_COMMIT` (`--wait-before-commit`): inside the write's transaction.
    BeforeCommit,
    /// After `WRITE` (`--wait-after-write`): the write committed, the renew not yet tried.
    AfterWrite,
}

impl FaultPoint {
    /// The points a holder is asked for with a flag.
    pub const ASKED: [FaultPoint; 3] = [
        FaultPoint::BeforeCheck,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterWrite,
    ];

    /// The point as the protocol names it, with the flag that asks for it.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::WritePoint => "AT_WRITE_POINT",
            FaultPoint::BeforeCheck => "BEFORE_CHECK (--wait-before-check)",
            FaultPoint::BeforeCommit => "BEFORE_COMMIT (--wait-before-commit)",
            FaultPoint::AfterWrite => "the stop after WRITE (--wait-after-write)",
        }
    }

    /// Sets the flag that asks a holder to stop here.
    pub fn ask(self, flags: &mut holder_protocol::HolderFlags) {
        match self {
            FaultPoint::WritePoint => {}
            FaultPoint::BeforeCheck => flags.wait_before_check = true,
            FaultPoint::BeforeCommit => flags.wait_before_commit = true,
            FaultPoint::AfterWrite => flags.wait_after_write = true,
        }
    }
}

/// One experiment: what it is and needs, as data ([`Scenario::spec`]), and its timeline
/// ([`Scenario::run`]). Adding one is one file that opens with its `const SPEC` and implements
/// this trait, plus one line in the registry's [`ALL`] (ARCHITECTURE.md, "Adding an experiment").
pub trait Scenario: Sync {
    /// What it is and what it needs ([`Spec`]): everything the runner, `lab list`, the README's
    /// table, the interruption audit and the report know of it.
    fn spec(&self) -> &Spec;
    /// Runs on empty tables (the runner resets them) and records its checks in `rec`.
    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a>;
}

impl std::fmt::Debug for dyn Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.spec().id)
    }
}
