//! Driving a holder process over its line protocol (`holder-protocol`): spawn it, shake hands,
//! read its events with deadlines, send the go-line. A silent, crashed or misbehaving holder
//! becomes an error that quotes its stderr — never a hang.
//!
//! The harness does not know the fencing implementation: the write mode travels as its name.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use holder_protocol::{exit, DecodeError, Event, HolderFlags, Request, Token, VERSION};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use crate::process::{ChildProcess, ProcessError, Spawn, Stream, ThreadState};

/// How long a holder may stay silent when the lab expects it to speak.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(15);

/// Everything a holder process is started with: its program, the arguments before its flags
/// (a holder of the user's, `--holder-cmd "python3 holder.py"`: `holder.py`) and its flags (the
/// write mode by name, `fenced-scope`, `unfenced`, …).
#[derive(Debug, Clone)]
pub struct HolderSpec {
    pub bin: PathBuf,
    pub prefix: Vec<OsString>,
    pub flags: HolderFlags,
    /// Extra environment, e.g. libfaketime's (`crate::faketime::Faketime::env`): F13 runs a
    /// holder's clock slow.
    pub env: Vec<(OsString, OsString)>,
    /// The user it runs as (`None`: the lab's): F16 on a lock service runs A as a user of its
    /// own, so that a rule by owner holds every connection A makes, its reconnections too.
    pub run_as: Option<crate::process::RunAs>,
}

impl HolderSpec {
    fn args(&self) -> Vec<OsString> {
        let mut args = self.prefix.clone();
        args.extend(self.flags.to_args());
        args
    }
}

/// A holder of the user's, `--holder-cmd "PROGRAM ARG…"` (words split at spaces, no quoting):
/// the program — a path, or a name found on `PATH` — and the arguments that come before the
/// lab's flags. `Err` says what is wrong with the command.
pub fn holder_command(cmd: &str) -> Result<(PathBuf, Vec<OsString>), String> {
    let mut words = cmd.split_whitespace();
    let program = words.next().ok_or_else(|| {
        "--holder-cmd is empty: give the command that starts your holder".to_owned()
    })?;
    let path = if program.contains('/') {
        PathBuf::from(program)
    } else {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("--holder-cmd: {program} is not found on PATH"))?
    };
    if !path.is_file() {
        return Err(format!("--holder-cmd: {} is not a file", path.display()));
    }
    Ok((path, words.map(OsString::from).collect()))
}

/// The holder a run starts: the user's command (`--holder-cmd`, see [`holder_command`]) or the
/// lab's own binary ([`locate_holder_bin`]) with nothing before its flags.
pub fn holder_for(cmd: Option<&str>) -> Result<(PathBuf, Vec<OsString>), String> {
    match cmd {
        Some(cmd) => holder_command(cmd),
        None => Ok((locate_holder_bin()?, Vec::new())),
    }
}

/// Finds the holder binary: `$LAB_HOLDER_BIN`, else beside the running executable (or one level
/// up, for test executables in `target/*/deps`).
pub fn locate_holder_bin() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("LAB_HOLDER_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "LAB_HOLDER_BIN={} is not a file; unset it or point it at a built holder",
                path.display()
            ))
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("failed to find the running executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [dir.join("holder"), dir.join("../holder")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "the holder binary is missing beside {}: build it with `cargo build -p holder` \
                 (./run.sh and scripts/test.sh do), or set LAB_HOLDER_BIN",
                exe.display()
            )
        })
}

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(
        "{name} said nothing for {after:?} while the lab waited for {what}; its stderr: {stderr}"
    )]
    Silent {
        name: String,
        what: String,
        after: Duration,
        stderr: String,
    },
    #[error("{name} exited ({status}) while the lab waited for {what}; its stderr: {stderr}")]
    Exited {
        name: String,
        what: String,
        status: String,
        stderr: String,
    },
    #[error("{name} sent a line that is not the protocol: {source}; its stderr: {stderr}")]
    Garbled {
        name: String,
        #[source]
        source: DecodeError,
        stderr: String,
    },
    #[error("{name} sent `{got}` while the lab waited for {what}")]
    Unexpected {
        name: String,
        what: String,
        got: String,
    },
    #[error("failed to send `{line}` to {name}")]
    Send {
        name: String,
        line: String,
        #[source]
        source: std::io::Error,
    },
}

/// A running holder process and the stream of its events.
pub struct Holder {
    process: ChildProcess,
    stdin: Option<ChildStdin>,
    events: mpsc::UnboundedReceiver<(Instant, Result<Event, DecodeError>)>,
    renewals: Vec<(Instant, bool)>,
    /// Events drained from the stream by [`Holder::drain_renewals`] that are not renewals.
    pending: std::collections::VecDeque<(Instant, Result<Event, DecodeError>)>,
    pid: u32,
}

impl Holder {
    /// Starts a holder and shakes hands with it. Returns once it answered `HELLO` with this
    /// protocol's version.
    pub async fn spawn(spec: &HolderSpec) -> Result<Holder, HolderError> {
        Holder::spawn_within(spec, EVENT_TIMEOUT).await
    }

    /// [`Holder::spawn`], waiting at most `handshake` for the holder's `HELLO`.
    pub async fn spawn_within(
        spec: &HolderSpec,
        handshake: Duration,
    ) -> Result<Holder, HolderError> {
        crate::wait::before_action().await;
        let mut spawn = Spawn::new(&spec.flags.holder, &spec.bin)
            .args(spec.args())
            .stdin(Stream::Piped)
            .capture_stderr();
        for (key, value) in &spec.env {
            spawn = spawn.env(key, value);
        }
        let mut process = spawn.run_as(spec.run_as).spawn()?;
        let stdin = process.take_stdin();
        let stdout = process.take_stdout().expect("piped stdout");
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send((Instant::now(), Event::decode(&line))).is_err() {
                    break;
                }
            }
        });
        let pid = process.pid();
        let mut holder = Holder {
            process,
            stdin,
            events,
            renewals: Vec::new(),
            pending: Default::default(),
            pid,
        };
        if let Err(sent) = holder.send(Request::Hello { version: VERSION }).await {
            // Gone before it read a line (bad arguments, say): how it exited says more than
            // the broken pipe.
            return Err(match holder.next("the HELLO handshake", handshake).await {
                Err(exited @ HolderError::Exited { .. }) => exited,
                _ => sent,
            });
        }
        match holder.next("the HELLO handshake", handshake).await? {
            (_, Event::Hello { version, pid }) if version == VERSION && pid == holder.pid => {
                Ok(holder)
            }
            (_, got) => {
                Err(holder.unexpected("HELLO with this protocol version and its pid", &got))
            }
        }
    }

    pub fn name(&self) -> &str {
        self.process.name()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the holder wrote to stderr so far (its last `process::STDERR_BOUND` bytes).
    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// The background renewals seen so far: when each was reported and whether it succeeded.
    pub fn renewals(&self) -> &[(Instant, bool)] {
        &self.renewals
    }

    /// Sends one request line.
    pub async fn send(&mut self, request: Request) -> Result<(), HolderError> {
        crate::wait::before_action().await;
        let line = format!("{request}\n");
        let name = self.name().to_owned();
        let stdin = self.stdin.as_mut().ok_or_else(|| HolderError::Send {
            name: name.clone(),
            line: request.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin already closed"),
        })?;
        let sent = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        sent.await.map_err(|source| HolderError::Send {
            name,
            line: request.to_string(),
            source,
        })
    }

    /// The next event other than a background renewal (those are recorded, see
    /// [`Holder::renewals`]), with the monotonic instant it arrived. Waits at most `timeout`.
    pub async fn next(
        &mut self,
        what: &str,
        timeout: Duration,
    ) -> Result<(Instant, Event), HolderError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let received = match self.pending.pop_front() {
                Some(event) => Ok(Some(event)),
                None => tokio::time::timeout_at(deadline, self.events.recv()).await,
            };
            match received {
                Err(_) => {
                    return Err(HolderError::Silent {
                        name: self.name().to_owned(),
                        what: what.to_owned(),
                        after: timeout,
                        stderr: self.stderr(),
                    })
                }
                Ok(None) => {
                    let status = match self.process.wait_exit(Duration::from_secs(5)).await {
                        Ok(Some(s)) => describe(s.code()),
                        _ => "closed its stdout".into(),
                    };
                    return Err(HolderError::Exited {
                        name: self.name().to_owned(),
                        what: what.to_owned(),
                        status,
                        stderr: self.stderr(),
                    });
                }
                Ok(Some((_, Err(source)))) => {
                    return Err(HolderError::Garbled {
                        name: self.name().to_owned(),
                        source,
                        stderr: self.stderr(),
                    })
                }
                Ok(Some((at, Ok(Event::Renewed { ok, .. })))) => self.renewals.push((at, ok)),
                Ok(Some((at, Ok(event)))) => return Ok((at, event)),
            }
        }
    }

    /// Takes in the renewals reported so far without waiting; other events stay queued for
    /// [`Holder::next`]. Returns all renewals seen so far.
    pub fn drain_renewals(&mut self) -> &[(Instant, bool)] {
        while let Ok(item) = self.events.try_recv() {
            match item {
                (at, Ok(Event::Renewed { ok, .. })) => self.renewals.push((at, ok)),
                other => self.pending.push_back(other),
            }
        }
        &self.renewals
    }

    /// Every event that arrived so far, with the instant it arrived, without waiting (a looping
    /// holder's stream: `lab chaos` reads it between its faults). Renewals are recorded too.
    pub fn take_events(&mut self) -> Vec<(Instant, Result<Event, DecodeError>)> {
        let mut taken: Vec<_> = self.pending.drain(..).collect();
        while let Ok(item) = self.events.try_recv() {
            if let (at, Ok(Event::Renewed { ok, .. })) = &item {
                self.renewals.push((*at, *ok));
            }
            taken.push(item);
        }
        taken
    }

    /// Closes the holder's stdin (a looping holder ends by itself) and waits for it to exit;
    /// `None` if it had to be killed after `timeout`.
    pub async fn finish(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.stdin = None;
        match self.process.wait_exit(timeout).await {
            Ok(Some(status)) => Some(status),
            _ => {
                self.process.crash().await;
                None
            }
        }
    }

    /// An error for an event the lab did not expect at this point.
    pub fn unexpected(&self, what: &str, got: &Event) -> HolderError {
        HolderError::Unexpected {
            name: self.name().to_owned(),
            what: what.to_owned(),
            got: got.to_string(),
        }
    }

    /// The number an `ACQUIRED` event carries, where the experiment needs one: any other event,
    /// or `token=none`, is an unexpected line.
    pub fn acquired_token(&self, got: &Event) -> Result<i64, HolderError> {
        match got {
            Event::Acquired {
                token: Token::Value(n),
            } => Ok(*n),
            _ => Err(self.unexpected("ACQUIRED token=T (a number: this experiment fences)", got)),
        }
    }

    /// See [`ChildProcess::freeze`].
    pub async fn freeze(&mut self) -> Result<Vec<ThreadState>, HolderError> {
        crate::wait::before_action().await;
        Ok(self.process.freeze().await?)
    }

    /// The holder's threads and their states, read from `/proc` now.
    pub fn threads(&self) -> Result<Vec<ThreadState>, HolderError> {
        Ok(self.process.threads()?)
    }

    /// See [`ChildProcess::thaw`].
    pub async fn thaw(&mut self) -> Result<Vec<ThreadState>, HolderError> {
        crate::wait::before_action().await;
        Ok(self.process.thaw().await?)
    }

    /// Kills the holder with SIGKILL — its whole process group, so no thread or child of it
    /// survives — and reaps it: a crash, no handler runs. Returns the status waitpid(2) reported
    /// (`None` only if even SIGKILL did not end it within a deadline).
    pub async fn crash(&mut self) -> Option<std::process::ExitStatus> {
        crate::wait::before_action().await;
        // Killed first, its stdin closed after: a holder whose stdin closes first may exit by
        // itself (orphaned) before the signal lands, and the crash would not be one.
        let status = self.process.crash().await;
        self.stdin = None;
        status
    }

    /// Waits for the holder to exit; its exit code. A holder still running after `timeout` is
    /// killed and reported as silent.
    pub async fn exit_code(&mut self, timeout: Duration) -> Result<i32, HolderError> {
        self.stdin = None;
        match self.process.wait_exit(timeout).await {
            Ok(Some(status)) => Ok(status.code().unwrap_or(-1)),
            _ => {
                self.process.crash().await;
                Err(HolderError::Silent {
                    name: self.name().to_owned(),
                    what: "its exit".into(),
                    after: timeout,
                    stderr: self.stderr(),
                })
            }
        }
    }
}

/// An exit code with its meaning in the holder's protocol.
pub fn describe(code: Option<i32>) -> String {
    match code {
        Some(c) => format!("exit {c} ({})", exit::name(c)),
        None => "killed by a signal".into(),
    }
}
