//! Processes in containers (feature `containers`): the container's first process and the
//! processes inside it are not the lab's children — their pids are the container's own, and the
//! Docker engine is their parent's keeper — so they are started, signalled and stopped through
//! the engine's API (bollard), from here like every other signal of the lab. Each verb says what
//! is true when it returns.
//!
//! - [`stop`]: a container stopped by signals, as [`super::ChildProcess::stop`] stops a child
//!   (SIGQUIT to a postmaster is its crash; an empty plan, SIGKILL, is a lost host): returns once
//!   the engine reports it not running.
//! - [`signal_processes`]: a signal to the processes inside a container whose command
//!   line matches (a server's WAL senders); SIGSTOP returns once the container's `/proc` shows
//!   state `T` for every thread of each, SIGCONT once for none.
//! - [`exec`]: a command run inside a container to its end (`docker exec`).
//!
//! It holds no container of its own and makes none (that is `harness::containers`): only the
//! verbs that start, signal and stop the processes in one.

use std::time::Duration;

use bollard::models::ExecConfig;
use bollard::query_parameters::KillContainerOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt as _;
use nix::sys::signal::Signal;

use super::{REAP_TIMEOUT, SIGNAL_TIMEOUT};
use crate::wait;

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

/// Sends `signal` to the processes `pids` of container `id` with the shell's own `kill`: an
/// image need not have procps.
async fn kill_each(
    docker: &Docker,
    id: &str,
    what: &str,
    pids: &[String],
    signal: Signal,
) -> Result<(), ContainerProcessError> {
    let root = Some("root");
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
    Ok(())
}

/// The processes signalled, each with the states its threads were last seen in and its command
/// line (from `listed`, the listing's "pid cmdline" lines).
fn processes(listed: &str, seen: Vec<(String, String)>) -> Vec<ContainerProcess> {
    let cmdlines: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    seen.into_iter()
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
        .collect()
}

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
    kill_each(docker, id, what, &pids, signal).await?;
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
    Ok(processes(&listed.output, seen))
}
