//! A server process the lab does not own any more — left by a lab that was killed outright —
//! stopped by pid ([`stop_orphan`]), but only while `/proc` shows it is still that server (its
//! command line names its data directory): a reused pid is never signalled. Blocking, for the
//! synchronous clean-up before a run and `lab clean`; never for the lab's own children.

use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::signal_pid;
use crate::wait;

/// Stops a server process the lab does not own any more (left by a lab that was killed
/// outright): `signal`, then SIGKILL after `grace`. It must still be the process named by
/// `pid` and its command line must contain `needle` (its data directory), or nothing is sent.
/// Blocking: for the synchronous clean-up before a run and `lab clean`. Returns whether it
/// signalled it.
pub fn stop_orphan(pid: i32, needle: &str, signal: Signal, grace: Duration) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    if !String::from_utf8_lossy(&cmdline).contains(needle) {
        return false; // the pid was reused by something else
    }
    let target = Pid::from_raw(pid);
    let _ = signal_pid(target, signal);
    // Gone, or a zombie waiting for a parent that is not the lab any more.
    let gone = || {
        procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .map_or(true, |s| s.state == 'Z')
    };
    if !wait::until_blocking(grace, gone) {
        let _ = signal_pid(target, Signal::SIGKILL);
        wait::until_blocking(grace, gone);
    }
    true
}
