//! The one way the lab starts a process: the [`Spawn`] builder — a user to run as ([`RunAs`]),
//! where each standard stream goes ([`Stream`]), a bounded stderr capture — and its three ends:
//! [`Spawn::spawn`] (a [`ChildProcess`] to drive), [`Spawn::output`] (run to its end with a
//! deadline) and [`Spawn::output_blocking`] (a short probe before any runtime exists). What
//! every child gets is in the module docs of `harness::process`. It forks nothing itself (the
//! fork is `spawner`'s, on its one thread) and never signals a child (that is `child`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Uid, User};
use tokio::io::AsyncReadExt;

use super::spawner::{die_with_parent, spawner, Spawned};
use super::{new_command, ChildProcess, ProcessError, STDERR_BOUND};

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

    /// The user's home directory, from the password database.
    pub fn home(&self) -> Option<PathBuf> {
        User::from_uid(Uid::from_raw(self.uid))
            .ok()
            .flatten()
            .map(|user| user.dir)
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
        let mut cmd = new_command(&self.program);
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
            // Its own HOME, not the lab's (root's is not its to write: a JVM launcher keeps its
            // class cache under it), unless the caller chose one.
            if let Some(home) = who
                .home()
                .filter(|_| !self.env.iter().any(|(k, _)| k == "HOME"))
            {
                cmd.env("HOME", home);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait;

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
