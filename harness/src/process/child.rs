//! A child process of the lab ([`ChildProcess`]) and how it ends: the async [`ChildProcess::stop`]
//! (each signal with its grace, then SIGKILL and SIGCONT to the whole process group, returning
//! once it is reaped), [`ChildProcess::crash`] (SIGKILL, reaped, how it died from waitpid), the
//! blocking last resort for a server's `Drop`, kill on drop; its pipes and the bounded tail of
//! its stderr. The fault verbs `freeze` and `thaw` are `freeze`'s. It starts nothing (that is
//! `spawn`) and sends every signal through the module's `signal_pid` / `signal_group`.

use std::collections::VecDeque;
use std::io;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use super::{signal_group, signal_pid, REAP_TIMEOUT, STDERR_BOUND};
use crate::wait;

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
    pub(super) name: String,
    pub(super) pid: u32,
    pub(super) child: Child,
    pub(super) frozen: bool,
    pub(super) exited: Option<ExitStatus>,
    stderr: Option<Arc<Mutex<Tail>>>,
}

impl ChildProcess {
    pub(super) fn new(name: String, mut child: Child, capture: bool) -> ChildProcess {
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

    pub(super) fn signal(&self, signal: Signal) {
        // Only signal a child not yet reaped: its pid cannot have been reused.
        if self.exited.is_none() && self.child.id().is_some() {
            let _ = signal_pid(Pid::from_raw(self.pid as i32), signal);
        }
    }

    /// SIGKILL and SIGCONT to the child's process group (it leads it: `process_group(0)`), so
    /// that nothing it started outlives it and nothing stays stopped.
    fn kill_group(&mut self) {
        // While the leader is not reaped, its pid names the group and cannot be reused; right
        // after reaping it, the group may still hold its children (a server's backends).
        let group = Pid::from_raw(self.pid as i32);
        let _ = signal_group(group, Signal::SIGKILL);
        let _ = signal_group(group, Signal::SIGCONT);
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    use super::*;
    use crate::process::{describe_status, Spawn};

    #[test]
    fn the_stderr_tail_keeps_only_the_last_bytes() {
        let mut t = Tail::default();
        t.push(&vec![b'a'; STDERR_BOUND]);
        t.push(b"end");
        assert_eq!(t.0.len(), STDERR_BOUND);
        assert!(t.0.iter().rev().take(3).eq(b"dne".iter()));
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
}
