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
//!   ([`spawner`]), whichever thread or runtime asked for it;
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
//! and its write without noticing. SIGCONT resumes it exactly where it was.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{Pid, Uid, User};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::wait;

/// How long a freeze or a thaw may take to show in `/proc` before it is an error.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a child's stderr is kept: the last this many bytes.
pub const STDERR_BOUND: usize = 64 * 1024;
/// How long a child gets after SIGKILL to be reaped before the lab gives up on it.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Every process whose process group is `pgid` (a child of the lab leads its own group, whose
/// id is its pid), as `/proc` lists them now: `(pid, comm, state)`. Empty when the group is gone.
pub fn group_members(pgid: u32) -> Vec<(i32, String, char)> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|stat| stat.pgrp == pgid as i32)
        .map(|stat| (stat.pid, stat.comm, stat.state))
        .collect()
}

/// Whether `/proc` lists the process `pid` now (a zombie counts: it is not reaped yet).
pub fn exists(pid: u32) -> bool {
    procfs::process::Process::new(pid as i32).is_ok_and(|p| p.stat().is_ok())
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

/// The user a child runs as, when it is not the lab's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// `Ok(None)` when the lab does not run as root (children run as the lab's user); the uid and
    /// gid of `user` when it does; `Err(())` when it does and `user` does not exist.
    #[allow(clippy::result_unit_err)]
    pub fn unless_root_then(user: &str) -> Result<Option<RunAs>, ()> {
        if !Uid::effective().is_root() {
            return Ok(None);
        }
        let user = User::from_name(user).ok().flatten().ok_or(())?;
        Ok(Some(RunAs {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }))
    }
}

/// Where a child's standard stream goes.
#[derive(Debug)]
pub enum Stream {
    /// `/dev/null` (stdin: end of file at once).
    Null,
    /// A pipe to the lab.
    Piped,
    /// Appended to this file (a server's log).
    File(File),
}

impl Stream {
    fn stdio(self) -> Stdio {
        match self {
            Stream::Null => Stdio::null(),
            Stream::Piped => Stdio::piped(),
            Stream::File(f) => Stdio::from(f),
        }
    }
}

/// The one way the lab starts a process. See the module docs for what every child gets.
#[derive(Debug)]
pub struct Spawn {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    dir: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    run_as: Option<RunAs>,
    death_signal: Signal,
    stdin: Stream,
    stdout: Stream,
    stderr: Stream,
    capture_stderr: bool,
}

impl Spawn {
    /// A child named `name` in the evidence and in errors, running `program`. By default its
    /// stdin is `/dev/null` and its stdout and stderr are piped.
    pub fn new(name: impl Into<String>, program: impl AsRef<Path>) -> Spawn {
        Spawn {
            name: name.into(),
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            dir: None,
            env: Vec::new(),
            run_as: None,
            death_signal: Signal::SIGKILL,
            stdin: Stream::Null,
            stdout: Stream::Piped,
            stderr: Stream::Piped,
            capture_stderr: false,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Spawn {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Spawn
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Spawn {
        self.dir = Some(dir.as_ref().to_owned());
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Spawn {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Runs the child as this user (when `Some`).
    pub fn run_as(mut self, who: Option<RunAs>) -> Spawn {
        self.run_as = who;
        self
    }

    /// The signal the child gets when the lab dies (SIGKILL unless set).
    pub fn death_signal(mut self, signal: Signal) -> Spawn {
        self.death_signal = signal;
        self
    }

    pub fn stdin(mut self, stream: Stream) -> Spawn {
        self.stdin = stream;
        self
    }

    pub fn stdout(mut self, stream: Stream) -> Spawn {
        self.stdout = stream;
        self
    }

    pub fn stderr(mut self, stream: Stream) -> Spawn {
        self.stderr = stream;
        self
    }

    /// Keeps the last [`STDERR_BOUND`] bytes of the child's stderr for [`ChildProcess::stderr`]
    /// (implies a piped stderr).
    pub fn capture_stderr(mut self) -> Spawn {
        self.stderr = Stream::Piped;
        self.capture_stderr = true;
        self
    }

    fn command(self) -> (String, PathBuf, bool, std::process::Command) {
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(self.stdin.stdio())
            .stdout(self.stdout.stdio())
            .stderr(self.stderr.stdio())
            .process_group(0);
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(who) = self.run_as {
            cmd.uid(who.uid).gid(who.gid);
        }
        die_with_parent(&mut cmd, self.death_signal);
        (self.name, self.program, self.capture_stderr, cmd)
    }

    /// Starts the child on the lab's spawner thread, registered with the current tokio runtime.
    /// Returns once the process exists. (A fork is a synchronous system call in tokio too; this
    /// waits only for that.)
    pub fn spawn(self) -> Result<ChildProcess, ProcessError> {
        let (name, program, capture, cmd) = self.command();
        let handle = tokio::runtime::Handle::current();
        let child = spawner()
            .run(cmd, Some(handle))
            .and_then(|s| match s {
                Spawned::Tokio(child) => Ok(child),
                Spawned::Std(_) => Err(io::Error::other("spawned outside the runtime")),
            })
            .map_err(|source| ProcessError::Spawn {
                name: name.clone(),
                program: program.display().to_string(),
                source,
            })?;
        Ok(ChildProcess::new(name, child, capture))
    }

    /// Runs the child to its end, at most `timeout` (then it is killed): its exit status, stdout
    /// and stderr (each bounded by [`STDERR_BOUND`] × 16). For initdb, pgbench and the like.
    pub async fn output(self, timeout: Duration) -> Result<Output, ProcessError> {
        let spawn = self.stdout(Stream::Piped).stderr(Stream::Piped);
        let mut child = spawn.spawn()?;
        let name = child.name.clone();
        let read = |pipe: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
            let mut buf = Vec::new();
            if let Some(pipe) = pipe {
                pipe.take((STDERR_BOUND * 16) as u64)
                    .read_to_end(&mut buf)
                    .await?;
            }
            io::Result::Ok(buf)
        };
        let stdout = child
            .child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
        let stderr = child
            .child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
        let all = async {
            let (out, err) = tokio::try_join!(read(stdout), read(stderr))?;
            let status = child.child.wait().await?;
            io::Result::Ok((status, out, err))
        };
        let result = tokio::time::timeout(timeout, all).await;
        match result {
            Ok(Ok((status, stdout, stderr))) => {
                child.exited = Some(status);
                Ok(Output {
                    status,
                    stdout,
                    stderr,
                })
            }
            Ok(Err(source)) => Err(ProcessError::Output { name, source }),
            Err(_) => {
                child.stop(&[]).await;
                Err(ProcessError::TimedOut {
                    name,
                    after: timeout,
                })
            }
        }
    }

    /// Runs a short child (a `--version` probe, `git rev-parse`) to its end, blocking the calling
    /// thread: for the synchronous phase before any runtime exists. Never call it from async code.
    pub fn output_blocking(self) -> io::Result<Output> {
        let (_, _, _, cmd) = self.command();
        match spawner().run(cmd, None)? {
            Spawned::Std(child) => child.wait_with_output(),
            Spawned::Tokio(_) => Err(io::Error::other("spawned inside a runtime")),
        }
    }
}

/// Arranges for the child to receive `signal` when the spawning thread dies (Linux's
/// parent-death signal), and to exit at once if the lab already died while it was being spawned.
fn die_with_parent(cmd: &mut std::process::Command, signal: Signal) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(io::Error::from)?;
            if nix::unistd::getppid() != parent {
                // The lab died while this child was being spawned: do not outlive it.
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

enum Spawned {
    Tokio(Child),
    Std(std::process::Child),
}

struct Job {
    cmd: std::process::Command,
    runtime: Option<tokio::runtime::Handle>,
    reply: mpsc::SyncSender<io::Result<Spawned>>,
}

/// The thread every child is forked from. It lives as long as the lab process (it is never
/// joined and never returns), so the parent-death signal fires when the lab dies — not when
/// some short-lived thread that happened to start the child does.
struct Spawner(Mutex<mpsc::Sender<Job>>);

fn spawner() -> &'static Spawner {
    static SPAWNER: OnceLock<Spawner> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("lab-spawner".into())
            .spawn(move || {
                for job in rx {
                    let spawned = match job.runtime {
                        Some(rt) => {
                            let _entered = rt.enter();
                            let mut cmd = tokio::process::Command::from(job.cmd);
                            cmd.kill_on_drop(true).spawn().map(Spawned::Tokio)
                        }
                        None => {
                            let mut cmd = job.cmd;
                            cmd.spawn().map(Spawned::Std)
                        }
                    };
                    let _ = job.reply.send(spawned);
                }
            })
            .expect("failed to start the lab's spawner thread");
        Spawner(Mutex::new(tx))
    })
}

impl Spawner {
    fn run(
        &self,
        cmd: std::process::Command,
        runtime: Option<tokio::runtime::Handle>,
    ) -> io::Result<Spawned> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = Job {
            cmd,
            runtime,
            reply,
        };
        self.0
            .lock()
            .map_err(|_| io::Error::other("the spawner's lock is poisoned"))?
            .send(job)
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        answer
            .recv()
            .map_err(|_| io::Error::other("the spawner thread is gone"))?
    }
}

/// The last [`STDERR_BOUND`] bytes a child wrote to stderr.
#[derive(Debug, Default)]
struct Tail(VecDeque<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend(bytes);
        let over = self.0.len().saturating_sub(STDERR_BOUND);
        self.0.drain(..over);
    }
}

/// A child process of the lab. Dropping it while it runs kills its process group (a last
/// resort: stop it with [`ChildProcess::stop`]).
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    pid: u32,
    child: Child,
    frozen: bool,
    exited: Option<ExitStatus>,
    stderr: Option<Arc<Mutex<Tail>>>,
}

impl ChildProcess {
    fn new(name: String, mut child: Child, capture: bool) -> ChildProcess {
        let pid = child.id().expect("a just-spawned child has a pid");
        let stderr = if capture {
            child.stderr.take().map(|mut pipe: ChildStderr| {
                let tail = Arc::new(Mutex::new(Tail::default()));
                let sink = tail.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = pipe.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        if let Ok(mut t) = sink.lock() {
                            t.push(&buf[..n]);
                        }
                    }
                });
                tail
            })
        } else {
            None
        };
        ChildProcess {
            name,
            pid,
            child,
            frozen: false,
            exited: None,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's stdin pipe, once (when it was piped).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The child's stdout pipe, once (when it was piped).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// What the child wrote to stderr (its last [`STDERR_BOUND`] bytes), when captured.
    pub fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .and_then(|t| {
                t.lock().ok().map(|t| {
                    let (a, b) = t.0.as_slices();
                    let mut bytes = a.to_vec();
                    bytes.extend_from_slice(b);
                    String::from_utf8_lossy(&bytes).trim().to_owned()
                })
            })
            .unwrap_or_default()
    }

    /// The exit status if the child has exited (it is reaped then), without waiting.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exited = Some(status);
                self.frozen = false;
            }
        }
        self.exited
    }

    /// The process's threads and their states now.
    pub fn threads(&self) -> Result<Vec<ThreadState>, ProcessError> {
        threads(self.pid).map_err(|source| ProcessError::Proc {
            name: self.name.clone(),
            pid: self.pid,
            source,
        })
    }

    /// SIGSTOP. Returns once `/proc` shows state `T` for the process and every one of its
    /// threads, with those states; at once with [`ProcessError::Exited`] if it has exited.
    pub async fn freeze(&mut self) -> Result<Vec<ThreadState>, ProcessError> {
        const WANTED: &str = "state T in every thread";
        self.alive_for(WANTED)?;
        self.signal(Signal::SIGSTOP);
        self.frozen = true;
        self.await_threads(WANTED, |s| s.state == 'T').await
    }

    /// SIGCONT. Returns once no thread of the process is in state `T` any more, with the
    /// states; at once with [`ProcessError::Exited`] if it had exited before. A child that runs
    /// on and exits right after the SIGCONT (it had its go-line waiting) was thawed: that is
    /// `Ok` with no threads left to show.
    pub async fn thaw(&mut self) -> Result<Vec<ThreadState>, ProcessError> {
        const WANTED: &str = "no thread in state T";
        self.alive_for(WANTED)?;
        self.signal(Signal::SIGCONT);
        self.frozen = false;
        match self.await_threads(WANTED, |s| s.state != 'T').await {
            Err(ProcessError::Exited { .. }) => Ok(Vec::new()),
            other => other,
        }
    }

    fn alive_for(&mut self, wanted: &'static str) -> Result<(), ProcessError> {
        match self.try_status() {
            Some(status) => Err(ProcessError::Exited {
                name: self.name.clone(),
                pid: self.pid,
                wanted,
                status: describe_status(&status),
            }),
            None => Ok(()),
        }
    }

    async fn await_threads(
        &mut self,
        wanted: &'static str,
        holds: impl Fn(&ThreadState) -> bool,
    ) -> Result<Vec<ThreadState>, ProcessError> {
        #[derive(Debug, thiserror::Error)]
        #[error("exited")]
        struct Gone;
        let mut last = Vec::new();
        let reached = wait::until(wanted, SIGNAL_TIMEOUT, || {
            // A child that dies meanwhile is reaped here and ends the wait at once.
            let gone = self.try_status().is_some();
            let states = threads(self.pid);
            let done = states
                .as_ref()
                .map(|s| !s.is_empty() && s.iter().all(&holds))
                .unwrap_or(false);
            if let Ok(s) = states {
                last = s;
            }
            std::future::ready(if gone { Err(Gone) } else { Ok(done) })
        })
        .await;
        match reached {
            Ok(_) => Ok(last),
            Err(wait::WaitError::Probe { .. }) => {
                let status = self
                    .exited
                    .as_ref()
                    .map(describe_status)
                    .unwrap_or_default();
                Err(ProcessError::Exited {
                    name: self.name.clone(),
                    pid: self.pid,
                    wanted,
                    status,
                })
            }
            Err(wait::WaitError::TimedOut { .. }) => Err(ProcessError::NotReached {
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
    pub async fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.exited {
            return Ok(Some(status));
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                self.exited = Some(status);
                self.frozen = false;
                Ok(Some(status))
            }
            Err(_) => Ok(None),
        }
    }

    /// Stops the child: each `(signal, grace)` in turn — the signal to the process, then up to
    /// `grace` for it to exit — and finally SIGKILL (and SIGCONT) to its whole process group.
    /// Returns once it has been reaped, with its exit status (`None` only if even SIGKILL did
    /// not end it within a deadline). A frozen child is continued so that it can act on a
    /// catchable signal.
    pub async fn stop(&mut self, plan: &[(Signal, Duration)]) -> Option<ExitStatus> {
        if let Some(status) = self.try_status() {
            return Some(status);
        }
        for &(signal, grace) in plan {
            self.signal(signal);
            if self.frozen && signal != Signal::SIGKILL {
                self.signal(Signal::SIGCONT);
            }
            if let Ok(Some(status)) = self.wait_exit(grace).await {
                self.kill_group();
                return Some(status);
            }
        }
        self.kill_group();
        self.wait_exit(REAP_TIMEOUT).await.ok().flatten()
    }

    /// SIGKILL to the process group (a crash: no handler runs), then reaps it. Returns its exit
    /// status, as waitpid(2) reported it.
    pub async fn crash(&mut self) -> Option<ExitStatus> {
        self.stop(&[]).await
    }

    /// The blocking last resort, for `Drop` of a server only: each `(signal, grace)` in turn,
    /// then SIGKILL to the group, polling without a runtime. Never call it on an async path.
    pub fn stop_blocking(&mut self, plan: &[(Signal, Duration)]) {
        if self.try_status().is_some() {
            return;
        }
        for &(signal, grace) in plan {
            self.signal(signal);
            if wait::until_blocking(grace, || self.try_status().is_some()) {
                self.kill_group();
                return;
            }
        }
        self.kill_group();
        wait::until_blocking(REAP_TIMEOUT, || self.try_status().is_some());
    }

    fn signal(&self, signal: Signal) {
        // Only signal a child not yet reaped: its pid cannot have been reused.
        if self.exited.is_none() && self.child.id().is_some() {
            let _ = kill(Pid::from_raw(self.pid as i32), signal);
        }
    }

    /// SIGKILL and SIGCONT to the child's process group (it leads it: `process_group(0)`), so
    /// that nothing it started outlives it and nothing stays stopped.
    fn kill_group(&mut self) {
        // While the leader is not reaped, its pid names the group and cannot be reused; right
        // after reaping it, the group may still hold its children (a server's backends).
        let group = Pid::from_raw(self.pid as i32);
        let _ = killpg(group, Signal::SIGKILL);
        let _ = killpg(group, Signal::SIGCONT);
        self.frozen = false;
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // The last resort: the paths the lab takes on purpose have stopped the child already.
        if self.try_status().is_none() {
            self.kill_group();
        }
    }
}

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
    let _ = kill(target, signal);
    // Gone, or a zombie waiting for a parent that is not the lab any more.
    let gone = || {
        procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .map_or(true, |s| s.state == 'Z')
    };
    if !wait::until_blocking(grace, gone) {
        let _ = kill(target, Signal::SIGKILL);
        wait::until_blocking(grace, gone);
    }
    true
}

/// Processes in containers (feature `containers`): the container's first process and the
/// processes inside it are not the lab's children — their pids are the container's own, and the
/// Docker engine is their parent's keeper — so they are started, signalled and stopped through
/// the engine's API (bollard), from here like every other signal of the lab. Each verb says what
/// is true when it returns.
///
/// - [`container::stop`]: a container stopped by signals, as [`ChildProcess::stop`] stops a child
///   (SIGQUIT to a postmaster is its crash; an empty plan, SIGKILL, is a lost host): returns once
///   the engine reports it not running.
/// - [`container::signal_processes`]: a signal to the processes inside a container whose command
///   line matches (a server's WAL senders); SIGSTOP returns once the container's `/proc` shows
///   state `T` for every thread of each, SIGCONT once for none.
/// - [`container::exec`]: a command run inside a container to its end (`docker exec`).
#[cfg(feature = "containers")]
pub mod container {
    use std::time::Duration;

    use bollard::models::ExecConfig;
    use bollard::query_parameters::KillContainerOptionsBuilder;
    use bollard::Docker;
    use futures_util::StreamExt as _;
    use nix::sys::signal::Signal;

    use super::{wait, REAP_TIMEOUT, SIGNAL_TIMEOUT};

    /// Why a verb on a container or on a process in it failed.
    #[derive(Debug, thiserror::Error)]
    pub enum ContainerProcessError {
        #[error("failed to {what} (container {id})")]
        Engine {
            what: String,
            id: String,
            #[source]
            source: bollard::errors::Error,
        },
        #[error("{what} (container {id}) did not finish within {after:?}")]
        TimedOut {
            what: String,
            id: String,
            after: Duration,
        },
        #[error("{what} (container {id}) did not reach {wanted} within {after:?}: {seen}")]
        NotReached {
            what: String,
            id: String,
            wanted: &'static str,
            after: Duration,
            seen: String,
        },
        #[error(transparent)]
        Wait(#[from] wait::WaitError),
        #[error("no process in container {id} is {what}")]
        NoneMatched { what: String, id: String },
        #[error("{what} (container {id}) failed ({code}): {output}")]
        Failed {
            what: String,
            id: String,
            code: i64,
            output: String,
        },
    }

    /// What a command run in a container ([`exec`]) left: its exit code and its stdout and
    /// stderr, interleaved as they came.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExecOutput {
        pub code: i64,
        pub output: String,
    }

    /// Runs `cmd` inside the running container `id`, as `user` (`None`: the container's own),
    /// to its end, at most `timeout`. Returns once the engine reports the command exited, with
    /// its exit code and output (a command that exits non-zero is `Ok` here: the caller judges).
    /// At the deadline the command is left to the container (the engine has no verb to stop
    /// one exec): every command the lab runs this way ends by itself.
    pub async fn exec(
        docker: &Docker,
        id: &str,
        user: Option<&str>,
        cmd: &[&str],
        timeout: Duration,
    ) -> Result<ExecOutput, ContainerProcessError> {
        let what = cmd.first().copied().unwrap_or("exec").to_owned();
        let engine = |action: &str, source| ContainerProcessError::Engine {
            what: format!("{action} {what}"),
            id: id.to_owned(),
            source,
        };
        let run = async {
            let config = ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
                user: user.map(str::to_owned),
                ..Default::default()
            };
            let created = docker
                .create_exec(id, config)
                .await
                .map_err(|e| engine("create the exec of", e))?;
            let mut text = Vec::new();
            match docker
                .start_exec(&created.id, None)
                .await
                .map_err(|e| engine("start", e))?
            {
                bollard::exec::StartExecResults::Attached { mut output, .. } => {
                    while let Some(chunk) = output.next().await {
                        text.extend_from_slice(chunk.map_err(|e| engine("read", e))?.as_ref());
                    }
                }
                bollard::exec::StartExecResults::Detached => {}
            }
            // The output ends when the command closes it; its exit code follows at once.
            let code = std::sync::Mutex::new(None);
            let (code_ref, exec_id) = (&code, created.id.as_str());
            wait::until(
                "the engine reports the exec's exit code",
                timeout,
                || async move {
                    let inspected = docker
                        .inspect_exec(exec_id)
                        .await
                        .map_err(|e| engine("inspect the exec of", e))?;
                    let exited = inspected
                        .exit_code
                        .filter(|_| inspected.running != Some(true));
                    *code_ref.lock().expect("not poisoned") = exited;
                    Ok::<_, ContainerProcessError>(exited.is_some())
                },
            )
            .await?;
            let code = code.into_inner().expect("not poisoned");
            Ok(ExecOutput {
                code: code.unwrap_or(-1),
                output: String::from_utf8_lossy(&text).trim().to_owned(),
            })
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| ContainerProcessError::TimedOut {
                what: what.clone(),
                id: id.to_owned(),
                after: timeout,
            })?
    }

    /// Whether the container `id` runs now, as the engine says.
    async fn running(docker: &Docker, id: &str) -> Result<bool, ContainerProcessError> {
        let inspected = docker.inspect_container(id, None).await.map_err(|source| {
            ContainerProcessError::Engine {
                what: "inspect the container".into(),
                id: id.to_owned(),
                source,
            }
        })?;
        Ok(inspected.state.and_then(|s| s.running).unwrap_or(false))
    }

    /// Sends `signal` to the container's first process through the engine (`POST
    /// /containers/{id}/kill`). Returns once the engine has delivered it.
    async fn send(docker: &Docker, id: &str, signal: Signal) -> Result<(), ContainerProcessError> {
        let options = KillContainerOptionsBuilder::new()
            .signal(signal.as_str())
            .build();
        docker
            .kill_container(id, Some(options))
            .await
            .map_err(|source| ContainerProcessError::Engine {
                what: format!("send {signal}"),
                id: id.to_owned(),
                source,
            })
    }

    /// Stops the container `id` as [`super::ChildProcess::stop`] stops a child: each `(signal,
    /// grace)` in turn — the signal to the container's first process, sent by the engine (SIGQUIT
    /// to a postmaster: its immediate shutdown, every backend quits, no checkpoint), then up to
    /// `grace` for it to exit — and finally SIGKILL (an empty plan: at once — a lost host).
    /// Returns once the engine reports the container not running (at once if it was not); the
    /// container stays, stopped, to be started again or removed.
    pub async fn stop(
        docker: &Docker,
        id: &str,
        plan: &[(Signal, Duration)],
    ) -> Result<(), ContainerProcessError> {
        let stopped = |after: Duration| async move {
            let reached = wait::until("the container has stopped", after, || async move {
                running(docker, id).await.map(|r| !r)
            })
            .await;
            match reached {
                Ok(_) => Ok(true),
                Err(wait::WaitError::TimedOut { .. }) => Ok(false),
                Err(e) => Err(ContainerProcessError::from(e)),
            }
        };
        if !running(docker, id).await? {
            return Ok(());
        }
        for &(signal, grace) in plan {
            // The container may stop between the check and the signal: the engine then refuses
            // to signal it, and it is stopped all the same.
            if let Err(e) = send(docker, id, signal).await {
                return if running(docker, id).await? {
                    Err(e)
                } else {
                    Ok(())
                };
            }
            if stopped(grace).await? {
                return Ok(());
            }
        }
        if let Err(e) = send(docker, id, Signal::SIGKILL).await {
            if running(docker, id).await? {
                return Err(e);
            }
        }
        if stopped(REAP_TIMEOUT).await? {
            Ok(())
        } else {
            Err(ContainerProcessError::NotReached {
                what: "SIGKILL".into(),
                id: id.to_owned(),
                wanted: "not running",
                after: REAP_TIMEOUT,
                seen: "the engine reports it running".into(),
            })
        }
    }

    /// A process inside a container, as the container's `/proc` shows it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ContainerProcess {
        /// Its pid in the container's pid namespace.
        pub pid: u32,
        /// The state letter of each of its threads (`T`: stopped).
        pub states: String,
        /// Its command line, arguments joined by spaces (a PostgreSQL backend's: its title).
        pub cmdline: String,
    }

    impl std::fmt::Display for ContainerProcess {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{} {} {}", self.pid, self.states, self.cmdline)
        }
    }

    /// Lists every process of the container (not the listing shell itself): `pid cmdline`.
    const LIST: &str = r#"for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue;
c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) && [ -n "$c" ] && printf '%s %s\n' "$p" "$c"; done; true"#;

    /// The state letters of the threads of the pids given as arguments: `pid letters`, a pid
    /// that has gone is left out. (The state follows the last `) ` of a stat line: the name
    /// before it may hold anything.)
    const STATES: &str = r#"for p in "$@"; do s=; for t in /proc/$p/task/*/stat; do
read -r l < "$t" 2>/dev/null || continue; l=${l##*) }; s="$s${l%% *}"; done;
[ -n "$s" ] && printf '%s %s\n' "$p" "$s"; done; true"#;

    /// Sends `signal` to every process inside the running container `id` whose command line
    /// (`/proc/<pid>/cmdline`, arguments joined by spaces) `matches`; `what` names them in
    /// errors ("a WAL sender"). The signal is sent by `kill` inside the container, as root
    /// there. Returns the processes with their threads' states: for SIGSTOP once the
    /// container's `/proc` shows `T` for every thread of each (they are stopped; nothing they
    /// would send goes out), for SIGCONT once none is `T`, for any other signal once it is sent.
    /// [`ContainerProcessError::NoneMatched`] when nothing matches.
    pub async fn signal_processes(
        docker: &Docker,
        id: &str,
        what: &str,
        matches: impl Fn(&str) -> bool,
        signal: Signal,
    ) -> Result<Vec<ContainerProcess>, ContainerProcessError> {
        let root = Some("root");
        let listed = exec(docker, id, root, &["sh", "-c", LIST], SIGNAL_TIMEOUT).await?;
        let pids: Vec<String> = listed
            .output
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, cmdline)| matches(cmdline.trim()))
            .map(|(pid, _)| pid.to_owned())
            .collect();
        if pids.is_empty() {
            return Err(ContainerProcessError::NoneMatched {
                what: what.to_owned(),
                id: id.to_owned(),
            });
        }
        // The shell's own `kill`: an image need not have procps.
        let script = format!(
            "kill -s {} \"$@\"",
            signal.as_str().trim_start_matches("SIG")
        );
        let mut kill = vec!["sh", "-c", &script, "kill"];
        kill.extend(pids.iter().map(String::as_str));
        let sent = exec(docker, id, root, &kill, SIGNAL_TIMEOUT).await?;
        if sent.code != 0 {
            return Err(ContainerProcessError::Failed {
                what: format!("{signal} to {what}"),
                id: id.to_owned(),
                code: sent.code,
                output: sent.output,
            });
        }
        /// The state awaited, and whether a thread's state letter shows it.
        type Awaited = (&'static str, fn(char) -> bool);
        let wanted: Option<Awaited> = match signal {
            Signal::SIGSTOP => Some(("state T in every thread", |c| c == 'T')),
            Signal::SIGCONT => Some(("no thread in state T", |c| c != 'T')),
            _ => None,
        };
        let mut states = vec!["sh", "-c", STATES, "states"];
        states.extend(pids.iter().map(String::as_str));
        let seen: std::sync::Mutex<Vec<(String, String)>> = Default::default();
        let (seen_ref, states) = (&seen, &states);
        let read = || async move {
            let out = exec(docker, id, root, states, SIGNAL_TIMEOUT).await?;
            let now: Vec<(String, String)> = out
                .output
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(p, s)| (p.to_owned(), s.to_owned()))
                .collect();
            let done = |holds: fn(char) -> bool| {
                !now.is_empty() && now.iter().all(|(_, s)| s.chars().all(holds))
            };
            let reached = wanted.is_none_or(|(_, holds)| done(holds));
            *seen_ref.lock().expect("not poisoned") = now;
            Ok::<_, ContainerProcessError>(reached)
        };
        match wanted {
            None => {
                read().await?;
            }
            Some((wanted, _)) => {
                if let Err(e) = wait::until(wanted, SIGNAL_TIMEOUT, read).await {
                    let wait::WaitError::TimedOut { .. } = e else {
                        return Err(e.into());
                    };
                    let seen = seen.lock().expect("not poisoned");
                    return Err(ContainerProcessError::NotReached {
                        what: format!("{signal} to {what}"),
                        id: id.to_owned(),
                        wanted,
                        after: SIGNAL_TIMEOUT,
                        seen: seen
                            .iter()
                            .map(|(p, s)| format!("{p}={s}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                    });
                }
            }
        }
        let seen = seen.into_inner().expect("not poisoned");
        let cmdlines: Vec<(&str, &str)> = listed
            .output
            .lines()
            .filter_map(|l| l.split_once(' '))
            .collect();
        Ok(seen
            .into_iter()
            .filter_map(|(pid, states)| {
                let cmdline = cmdlines
                    .iter()
                    .find(|(p, _)| *p == pid)?
                    .1
                    .trim()
                    .to_owned();
                Some(ContainerProcess {
                    pid: pid.parse().ok()?,
                    states,
                    cmdline,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_tail_keeps_only_the_last_bytes() {
        let mut t = Tail::default();
        t.push(&vec![b'a'; STDERR_BOUND]);
        t.push(b"end");
        assert_eq!(t.0.len(), STDERR_BOUND);
        assert!(t.0.iter().rev().take(3).eq(b"dne".iter()));
    }

    #[tokio::test]
    async fn freezing_a_child_that_has_exited_says_so_at_once() -> anyhow::Result<()> {
        let mut child = Spawn::new("true", "/bin/true").spawn()?;
        child.wait_exit(Duration::from_secs(10)).await?;
        let started = std::time::Instant::now();
        let err = child
            .freeze()
            .await
            .expect_err("an exited child cannot freeze");
        assert!(matches!(err, ProcessError::Exited { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let err = child.thaw().await.expect_err("nor thaw");
        assert!(err.to_string().contains("already exited (exit 0)"), "{err}");
        Ok(())
    }

    #[tokio::test]
    async fn stop_ends_a_frozen_child_and_reports_how_it_died() -> anyhow::Result<()> {
        let mut child = Spawn::new("sleep", "/bin/sleep").arg("60").spawn()?;
        child.freeze().await?;
        let status = child
            .stop(&[(Signal::SIGTERM, Duration::from_secs(5))])
            .await
            .expect("reaped");
        assert_eq!(describe_status(&status), "killed by SIGTERM");
        assert!(!Path::new(&format!("/proc/{}", child.pid())).exists());
        Ok(())
    }

    #[tokio::test]
    async fn crash_is_a_sigkill_seen_by_waitpid() -> anyhow::Result<()> {
        let mut child = Spawn::new("sleep", "/bin/sleep").arg("60").spawn()?;
        let status = child.crash().await.expect("reaped");
        assert_eq!(status.signal(), Some(libc_sigkill()));
        Ok(())
    }

    fn libc_sigkill() -> i32 {
        Signal::SIGKILL as i32
    }

    #[tokio::test]
    async fn output_returns_stdout_and_a_bounded_run_is_killed() -> anyhow::Result<()> {
        let out = Spawn::new("echo", "/bin/echo")
            .arg("hello")
            .output(Duration::from_secs(10))
            .await?;
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
        let err = Spawn::new("sleep", "/bin/sleep")
            .arg("60")
            .output(Duration::from_millis(200))
            .await
            .expect_err("killed at its deadline");
        assert!(matches!(err, ProcessError::TimedOut { .. }), "{err}");
        Ok(())
    }

    #[tokio::test]
    async fn captured_stderr_is_quoted() -> anyhow::Result<()> {
        let mut child = Spawn::new("sh", "/bin/sh")
            .args(["-c", "echo oops >&2"])
            .capture_stderr()
            .spawn()?;
        child.wait_exit(Duration::from_secs(10)).await?;
        // The reader task may lag the exit by a moment: poll for it.
        wait::until("stderr captured", Duration::from_secs(5), || {
            std::future::ready(Ok::<_, std::convert::Infallible>(child.stderr() == "oops"))
        })
        .await?;
        Ok(())
    }

    #[test]
    fn a_blocking_probe_runs_without_a_runtime() -> io::Result<()> {
        let out = Spawn::new("echo", "/bin/echo").arg("x").output_blocking()?;
        assert_eq!(out.stdout, b"x\n");
        Ok(())
    }
}
