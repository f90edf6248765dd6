//! Process control: children that cannot outlive the lab, and the fault verbs on them, each with
//! the post-condition that holds when it returns. All signal code of the lab lives here.
//!
//! Why SIGSTOP: it cannot be caught, blocked or ignored, and it stops every thread of the process
//! at once — the renewer thread too. That is what a long GC pause, a VM stall or a debugger does
//! to a real holder, and it is the fault the lab needs: a process that stops between its check
//! and its write without noticing. SIGCONT resumes it exactly where it was.
//!
//! Every child is spawned in its own process group (a terminal's Ctrl-C reaches the lab only,
//! which then cleans up in order), with the kernel's parent-death signal set to SIGKILL (if the
//! lab is killed outright, its children die with it, frozen or not), and is killed when its
//! handle is dropped — on success, failure or panic.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::cluster::die_with_parent;
use crate::wait;

/// How long a freeze or a thaw may take to show in `/proc` before it is an error.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);

/// One thread of a process as `/proc/<pid>/task/<tid>/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadState {
    pub tid: i32,
    /// The thread's name (`comm`), e.g. `holder` or `renewer`.
    pub name: String,
    /// The scheduler state letter: `R`, `S`, `D`, `T` (stopped), `Z`, …
    pub state: char,
}

impl std::fmt::Display for ThreadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})={}", self.name, self.tid, self.state)
    }
}

/// The state of the process `pid` and of each of its threads, read from `/proc`.
pub fn threads(pid: u32) -> io::Result<Vec<ThreadState>> {
    let to_io = |e: procfs::ProcError| io::Error::other(e.to_string());
    let process = procfs::process::Process::new(pid as i32).map_err(to_io)?;
    let mut states = Vec::new();
    for task in process.tasks().map_err(to_io)? {
        // A thread may end between listing and reading: skip it.
        let Ok(task) = task else { continue };
        if let Ok(stat) = task.stat() {
            states.push(ThreadState {
                tid: task.tid,
                name: stat.comm,
                state: stat.state,
            });
        }
    }
    Ok(states)
}

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
}

/// A child process of the lab. Dropping it kills it (SIGKILL works on a stopped process too).
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    pid: u32,
    child: Child,
    frozen: bool,
}

impl ChildProcess {
    /// Starts `program` with piped stdin, stdout and stderr, in its own process group, with the
    /// parent-death signal SIGKILL. Call it from a thread that lives as long as the lab (see
    /// [`die_with_parent`]). Returns once the process exists.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[OsString],
    ) -> Result<ChildProcess, ProcessError> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(cmd.as_std_mut(), Signal::SIGKILL);
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            name: name.to_owned(),
            program: program.display().to_string(),
            source,
        })?;
        let pid = child.id().expect("a just-spawned child has a pid");
        Ok(ChildProcess {
            name: name.to_owned(),
            pid,
            child,
            frozen: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// The process's threads and their states now.
    pub fn threads(&self) -> Result<Vec<ThreadState>, ProcessError> {
        threads(self.pid).map_err(|source| ProcessError::Proc {
            name: self.name.clone(),
            pid: self.pid,
            source,
        })
    }

    /// SIGSTOP. Returns once `/proc` shows state `T` for the process and every one of its threads,
    /// with those states.
    pub async fn freeze(&mut self) -> Result<Vec<ThreadState>, ProcessError> {
        self.signal(Signal::SIGSTOP);
        self.frozen = true;
        self.await_threads("state T in every thread", |s| s.state == 'T')
            .await
    }

    /// SIGCONT. Returns once no thread of the process is in state `T` any more, with the states.
    pub async fn thaw(&mut self) -> Result<Vec<ThreadState>, ProcessError> {
        self.signal(Signal::SIGCONT);
        self.frozen = false;
        self.await_threads("no thread in state T", |s| s.state != 'T')
            .await
    }

    async fn await_threads(
        &self,
        wanted: &'static str,
        holds: impl Fn(&ThreadState) -> bool,
    ) -> Result<Vec<ThreadState>, ProcessError> {
        let mut last = Vec::new();
        let reached = wait::until(wanted, SIGNAL_TIMEOUT, || {
            let states = self.threads();
            let done = states
                .as_ref()
                .map(|s| !s.is_empty() && s.iter().all(&holds))
                .unwrap_or(false);
            if let Ok(s) = states {
                last = s;
            }
            std::future::ready(Ok::<_, std::convert::Infallible>(done))
        })
        .await;
        match reached {
            Ok(_) => Ok(last),
            Err(_) => Err(ProcessError::NotReached {
                name: self.name.clone(),
                pid: self.pid,
                wanted,
                after: SIGNAL_TIMEOUT,
                threads: last
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            }),
        }
    }

    /// Waits for the process to exit, at most `timeout`; `None` if it is still running then.
    pub async fn wait_exit(
        &mut self,
        timeout: Duration,
    ) -> io::Result<Option<std::process::ExitStatus>> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// SIGKILL (and SIGCONT, so that nothing stays stopped), then reaps it.
    pub async fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.signal(Signal::SIGCONT);
        self.frozen = false;
        let _ = self.child.wait().await;
    }

    fn signal(&self, signal: Signal) {
        // Only signal a child not yet reaped: its pid cannot have been reused.
        if self.child.id().is_some() {
            let _ = kill(Pid::from_raw(self.pid as i32), signal);
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // kill_on_drop sends SIGKILL; a frozen child is also continued so it is never left stopped
        // should the kill be lost.
        self.signal(Signal::SIGKILL);
        self.signal(Signal::SIGCONT);
    }
}
