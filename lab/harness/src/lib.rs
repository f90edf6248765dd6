//! The lab's harness: everything that is *not* the system under test and not a scenario.
//!
//! - [`cluster`]: a throwaway PostgreSQL cluster from the local server binaries, with its fault
//!   verbs (`start`, `stop`, `restart_immediate`) and their post-conditions.
//! - [`process`]: children that cannot outlive the lab; `freeze` / `thaw` with `/proc`
//!   post-conditions. All signal code lives here.
//! - [`holder`]: driving a holder process over its line protocol, with deadlines.
//! - [`observe`]: the server seen from the side (backend pids, lock waits).
//! - [`evidence`]: typed events (checks, notes, timeline steps) and the reporters that turn them
//!   into the text output and the files in `evidence/`.
//! - [`wait`]: waiting for a state by polling it with a deadline (never a fixed sleep).
//!
//! The harness must not know the fencing implementation: it never imports `fencing`, and it holds
//! no SQL of the system under test (only the administration it needs to run a cluster).

pub mod cluster;
pub mod evidence;
pub mod holder;
pub mod mariadb;
pub mod observe;
pub mod process;
pub mod wait;
