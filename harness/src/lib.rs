//! The lab's harness: everything that is *not* the system under test and not a scenario.
//!
//! - [`process`]: the one place children are started, signalled and stopped — the spawn builder
//!   (own process group, parent-death signal, run-as user, kill on drop, bounded stderr), the
//!   async stop with a grace period, and the fault verbs `freeze` / `thaw` / `crash` with their
//!   `/proc` and waitpid post-conditions. All signal code lives here, one concern a file
//!   under `process/`.
//! - [`server`]: the throwaway servers behind one interface (`Server`: start, stop, crash,
//!   restart, keep) over one private-directory type with owner marks and leftover removal: the
//!   embedded PostgreSQL cluster and (feature `mariadb`) the embedded MariaDB.
//! - `containers` (feature `containers`): PostgreSQL in containers built here from Debian
//!   packages, on a private network, through the engine's API; a hold on one TCP connection
//!   (an iptables rule on this host: F15, F16); Patroni clusters (F17). One concern a file
//!   under `containers/`.
//! - [`hosts`]: where the lab's two databases live, behind one trait (`Hosts`, always compiled):
//!   the embedded cluster, a primary and its standby, or a container per database.
//! - [`docker`]: what the lab asks of the container backend, as one trait (`Docker`) and the
//!   handles it answers, always compiled; [`docker_backend`] is the one place the feature
//!   `containers` is decided — a build without it answers "not built" there, and `containers`
//!   implements the trait.
//! - [`faketime`]: a child's clock, skewed or slowed by libfaketime.
//! - [`holder`]: driving a holder process over its line protocol, with deadlines.
//! - [`observe`]: the server seen from the side (backend pids, lock waits).
//! - [`evidence`]: typed events (checks, notes, timeline steps) and the reporters that turn them
//!   into the text output and the files in `evidence/`.
//! - [`wait`]: waiting for a state by polling it with a deadline (never a fixed sleep), and the
//!   one way to let a duration pass that a timeline prescribes.
//! - [`require`]: for the tests, a missing Docker engine, MariaDB or libfaketime — `skip` with
//!   the reason where the test run shows it, or a failure when `LAB_REQUIRE` names it.
//!
//! The harness must not know the fencing implementation: it never imports `fencing`, and it holds
//! no SQL of the system under test (only the administration it needs to run a cluster).

#[cfg(feature = "containers")]
pub mod containers;
pub mod docker;
pub mod evidence;
pub mod faketime;
pub mod holder;
pub mod hosts;
pub mod observe;
pub mod process;
pub mod replication;
pub mod require;
pub mod server;
pub mod wait;

/// The container backend (`harness::containers::Engine`), or why this build has none
/// ([`docker::NOT_BUILT`]): the one place the feature `containers` is decided for the handles of
/// [`docker`], so that their callers hold no `cfg` and no handle needs a stub.
pub fn docker_backend() -> Result<&'static dyn docker::Docker, &'static str> {
    #[cfg(feature = "containers")]
    return Ok(&containers::Engine);
    #[cfg(not(feature = "containers"))]
    Err(docker::NOT_BUILT)
}
