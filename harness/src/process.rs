//! Process control: the one place the lab starts, signals and stops processes. Every child — the
//! postmaster, initdb, mariadbd, mariadb-install-db, holders, the U2 client, pgbench, the short
//! `--version` probes — is started by [`Spawn`], and every signal the lab sends goes out from
//! this module — to a container and to a process inside one too ([`container`], through the
//! Docker engine's API). Nothing else calls `Command::new`, kill(2) or prctl(2), signals a
//! container or runs `kill`/`pkill` inside one.
//!
//! What every child gets, whoever starts it:
//! - **its own process group**: a terminal's Ctrl-C reaches the lab only, which then stops its
//!   children in order; a server's backends share their postmaster's group, so a last-resort
//!   SIGKILL to the group takes them too;
//! - **the kernel's parent-death signal** (SIGKILL unless the builder says otherwise; SIGQUIT
//!   for the postmaster, its immediate shutdown): if the lab is killed outright, its children die
//!   with it, frozen or not. The kernel sends that signal when the *thread* that forked the child
//!   exits, so every fork happens on one spawner thread that lives as long as the lab
//!   (`spawner`), whichever thread or runtime asked for it;
//! - **a user to run as** when the lab is root and the child must not be ([`RunAs`]);
//! - **kill on drop**: dropping a [`ChildProcess`] that still runs kills its group (and continues
//!   it, so that nothing stays stopped) — a last resort only; the paths the lab takes on purpose
//!   stop children with [`ChildProcess::stop`], which is async and has a grace period;
//! - **stderr captured with a bound** (the last [`STDERR_BOUND`] bytes) when asked, so that an
//!   error can quote what the child said without the lab's memory growing with a chatty child.
//!
//! Fault verbs and what is true when they return: [`ChildProcess::freeze`] (SIGSTOP) returns once
//! `/proc/<pid>/task/*/stat` shows `T` for the process and every one of its threads;
//! [`ChildProcess::thaw`] (SIGCONT) once none is in `T` any more; both say at once when the child
//! has already exited instead of waiting out their deadline. [`ChildProcess::crash`] (SIGKILL)
//! returns once the child has been reaped, with how it died.
//!
//! Why SIGSTOP: it cannot be caught, blocked or ignored, and it stops every thread of the process
//! at once — the renewer thread too. That is what a long GC pause, a VM stall or a debugger does
//! to a real holder, and it is the fault the lab needs: a process that stops between its check
//!
//! One concern a file: `spawn` (the [`Spawn`] builder, [`RunAs`], [`Stream`]), `spawner` (the
//! one thread every child is forked from, and the parent-death signal), `child`
//! ([`ChildProcess`]: its pipes, stderr tail, `stop`, `crash`, kill on drop), `freeze` (the
//! fault verbs `freeze` / `thaw` and their `/proc` post-conditions), `proc` (what `/proc` shows:
//! [`threads`], [`group_members`], [`exists`]), `orphan` ([`stop_orphan`]) and, with the feature
//! `containers`, [`container`]. Every `harness::process::…` path names its item here.
//!
//! This file holds what they share — the error ([`ProcessError`]), [`describe_status`], the
//! deadlines — and the only places the module builds a `std::process::Command` or calls
//! kill(2) or killpg(2) (`new_command`, `signal_pid`, `signal_group`): the tidy test
//! (`lab/tests/tidy.rs`) allows those calls in this file's path alone, and the submodules go
//! through these three.

use std::ffi::OsStr;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

mod child;
mod freeze;
#[cfg(feature = "containers")]
pub mod in_container;
mod orphan;
mod proc;
mod spawn;
mod spawner;

pub use child::ChildProcess;
pub use orphan::stop_orphan;
pub use proc::{
    children, cpu_seconds, exists, group_members, tcp_ports_to, threads, tree_cpu_seconds,
    ThreadState,
};
pub use spawn::{RunAs, Spawn, Stream};

/// How long a freeze or a thaw may take to show in `/proc` before it is an error.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a child's stderr is kept: the last this many bytes.
pub const STDERR_BOUND: usize = 64 * 1024;
/// How long a child gets after SIGKILL to be reaped before the lab gives up on it.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("failed to start {name} ({program})")]
    Spawn {
        name: String,
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("failed to read /proc for {name} (pid {pid})")]
    Proc {
        name: String,
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("{name} (pid {pid}) did not reach {wanted} within {after:?}: {threads}")]
    NotReached {
        name: String,
        pid: u32,
        wanted: &'static str,
        after: Duration,
        threads: String,
    },
    #[error("{name} (pid {pid}) has already exited ({status}); it cannot reach {wanted}")]
    Exited {
        name: String,
        pid: u32,
        wanted: &'static str,
        status: String,
    },
    #[error("{name} did not finish within {after:?}; it was killed")]
    TimedOut { name: String, after: Duration },
    #[error("failed to read the output of {name}")]
    Output {
        name: String,
        #[source]
        source: io::Error,
    },
}

/// How an exit status reads in the evidence: `exit 0`, `killed by SIGKILL`.
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {sig}"),
        },
        (None, None) => status.to_string(),
    }
}

/// A new `std::process::Command` for `program`: the only one the lab builds (for [`Spawn`]).
fn new_command(program: impl AsRef<OsStr>) -> std::process::Command {
    std::process::Command::new(program)
}

/// kill(2): `signal` to the process `pid`. The callers make sure the pid is still theirs.
fn signal_pid(pid: Pid, signal: Signal) -> nix::Result<()> {
    kill(pid, signal)
}

/// killpg(2): `signal` to every process of the group `pgid`.
fn signal_group(pgid: Pid, signal: Signal) -> nix::Result<()> {
    killpg(pgid, signal)
}
