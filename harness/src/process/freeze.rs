//! The fault verbs on a child, with their post-conditions read from `/proc`:
//! [`ChildProcess::freeze`] (SIGSTOP) returns once `/proc/<pid>/task/*/stat` shows `T` for the
//! process and every one of its threads; [`ChildProcess::thaw`] (SIGCONT) once none is in `T`
//! any more; both say at once when the child has already exited instead of waiting out their
//! deadline. Why SIGSTOP is the right signal is in the module docs of `harness::process`. Only
//! these two verbs live here: stopping and crashing a child are `child`'s.

use nix::sys::signal::Signal;

use super::{describe_status, threads, ChildProcess, ProcessError, ThreadState, SIGNAL_TIMEOUT};
use crate::wait;

impl ChildProcess {
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::process::Spawn;

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
}
