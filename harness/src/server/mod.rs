//! The lab's throwaway servers, behind one interface: [`Server`] (start, stop, crash, restart,
//! keep) over one private directory type ([`dir::ServerDir`]: owner mark, `KEPT` mark, leftover
//! removal), with one error type ([`ServerError`]).
//!
//! - [`postgres`]: the embedded PostgreSQL cluster, the default lease store and
//!   resource.
//! - [`standby`]: a streaming standby of an embedded cluster, with the faults of a failover —
//!   the link cut, the primary's host lost, the standby promoted (F14).
//! - [`mariadb`] (feature `mariadb`): the embedded MariaDB of the U-series.
//!
//! These are processes of this host; a server on a host of its own (a container) lives in
//! `crate::containers`. Both kinds reach a lab through [`crate::hosts::Hosts`] (the embedded
//! cluster, [`standby::Replicated`], the container forms); scenarios reach servers through
//! `scenarios::Testbed` and never signal one themselves. Every server process is a
//! [`crate::process::ChildProcess`].

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub mod dir;
#[cfg(feature = "mariadb")]
pub mod maria_replica;
#[cfg(feature = "mariadb")]
pub mod mariadb;
pub mod postgres;
pub mod standby;

pub use dir::{prune_kept, remove_leftovers, Removed, ServerDir};
pub use postgres::{Cluster, ClusterConfig, PgBinaries, SUPERUSER};

use crate::process::ProcessError;

/// Why a server could not be made, started or reached.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The server's programs are not on this machine; `hint` says how to get them.
    #[error("{what}: {hint}")]
    NotInstalled { what: String, hint: String },
    #[error(
        "the lab runs as root, and the server will not: create the unprivileged user \
         `{user}` (useradd --system {user}) or run the lab as a normal user"
    )]
    NoUser { user: String },
    #[error("failed to {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Making the data directory failed (initdb, mariadb-install-db).
    #[error("{program} failed ({status}); its output:\n{output}")]
    Setup {
        program: String,
        status: String,
        output: String,
    },
    #[error("the server exited during start-up ({status}): {reason}")]
    StartFailed { status: String, reason: String },
    #[error("the server did not accept connections within {after:?}; end of {log}:\n{tail}")]
    NotReady {
        after: Duration,
        log: PathBuf,
        tail: String,
    },
}

/// What every throwaway server can do, and what is true when each verb returns.
///
/// Connecting is per role and per driver, so it is not part of the trait: each server type has
/// `connect_options(database, user)` for its driver.
pub trait Server {
    /// The server's private directory (data, socket, log).
    fn dir(&self) -> &ServerDir;
    fn dir_mut(&mut self) -> &mut ServerDir;
    /// The server process's pid while it runs.
    fn pid(&self) -> Option<u32>;
    /// Starts the server; returns once it accepts connections.
    fn start(&mut self) -> impl Future<Output = Result<(), ServerError>> + Send;
    /// Stops the server cleanly; returns once its process has exited (escalating to SIGKILL
    /// after a grace period). A no-op when it is not running.
    fn stop(&mut self) -> impl Future<Output = ()> + Send;
    /// Stops the server the way a crash does — no checkpoint, no clean shutdown; returns once
    /// its process has exited. Committed data must survive through recovery on the next start.
    fn crash(&mut self) -> impl Future<Output = ()> + Send;
    /// [`Server::crash`], then [`Server::start`]: returns once the server has recovered and
    /// accepts connections. Open connections do not survive.
    fn restart_immediate(&mut self) -> impl Future<Output = Result<(), ServerError>> + Send
    where
        Self: Send,
    {
        async move {
            self.crash().await;
            self.start().await
        }
    }
    /// Keep the directory (data, socket, log) after the server is dropped or stopped.
    fn keep_on_drop(&mut self) {
        self.dir_mut().keep();
    }
}
