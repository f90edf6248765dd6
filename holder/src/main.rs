//! The holder: one lease holder as its own OS process (SPEC §4 "Holder process").
//!
//! It acquires the lease, starts a background renewer on its own thread (named `renewer`),
//! checks its local deadline, reports that it is at the write point, and waits for the go-line on
//! stdin. On it, it writes at once — no re-check: that is the point where a real process can be
//! paused — then stops the renewer, tries one renew, reports both results and exits with a status
//! that says what happened (see `holder --help` and `holder_protocol::exit`). With
//! `--wait-before-check` it also stops before the check (`BEFORE_CHECK`, then a go-line), the one
//! place where a pause is still seen by the holder itself: its check, judged by its monotonic
//! clock, finds the deadline passed and it gives up ([`exit::DEADLINE_PASSED`]).
//!
//! It knows nothing of scenarios or of how it is orchestrated: it speaks the line protocol of
//! `holder-protocol` on stdin/stdout and nothing else. It never hangs: when stdin closes before
//! the go-line, it exits without writing ([`exit::ORPHANED`]).

use std::io::{self, BufRead, Write as _};
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::{CommandFactory as _, FromArgMatches as _};
use fencing::lease::{Grant, LeaseStore};
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::Database;
use holder_protocol::{exit, Event, HolderFlags, Request, VERSION};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// One holder's parameters: its flags ([`HolderFlags`], shared with the lab that builds them)
/// with the write mode resolved.
struct Args {
    flags: HolderFlags,
    mode: WriteMode,
}

impl Args {
    /// Parses the command line; `--help` and `--version` print and exit 0, bad arguments print a
    /// usage error and exit [`exit::USAGE`].
    fn parse() -> Args {
        let command = HolderFlags::command().version(env!("CARGO_PKG_VERSION"));
        let flags = command
            .try_get_matches()
            .and_then(|mut matches| HolderFlags::from_arg_matches_mut(&mut matches))
            .unwrap_or_else(|e| e.exit());
        match flags.mode.parse::<WriteMode>() {
            Ok(mode) => Args { flags, mode },
            Err(e) => {
                eprintln!("error: invalid value for '--mode <MODE>': {e}");
                std::process::exit(exit::USAGE);
            }
        }
    }
}

/// Writes one event line; an orchestrator that stopped listening ends the holder.
fn emit(event: &Event) {
    let mut out = io::stdout().lock();
    if writeln!(out, "{event}").and_then(|()| out.flush()).is_err() {
        std::process::exit(exit::ORPHANED);
    }
}

/// Reads one request line; `None` when stdin closed.
fn read_request() -> Result<Option<Request>, String> {
    let mut line = String::new();
    match io::stdin().lock().read_line(&mut line) {
        Ok(0) => Ok(None),
        Ok(_) => Request::decode(&line).map(Some).map_err(|e| e.to_string()),
        Err(e) => Err(format!("failed to read stdin: {e}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    ExitCode::from(match run(&args) {
        Ok(code) => code,
        Err(message) => {
            emit(&Event::Error { message });
            exit::FAILURE
        }
    } as u8)
}

fn run(args: &Args) -> Result<i32, String> {
    let flags = &args.flags;
    match read_request()? {
        Some(Request::Hello { version }) if version == VERSION => {}
        Some(other) => {
            emit(&Event::Error {
                message: format!("expected HELLO version={VERSION}, got {other}"),
            });
            return Ok(exit::PROTOCOL);
        }
        None => return Ok(exit::ORPHANED),
    }
    emit(&Event::Hello {
        version: VERSION,
        pid: std::process::id(),
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("failed to start a runtime: {e}"))?;
    let ttl = Duration::from_millis(flags.ttl_ms);
    let margin = Duration::from_millis(flags.margin_ms);
    let lease = rt
        .block_on(store(flags, Database::Lease))
        .map(|pool| LeaseStore::new(pool, margin))?;
    let resource = rt
        .block_on(store(flags, Database::Resource))
        .map(Resource::new)?;

    let grant = rt
        .block_on(lease.acquire(&flags.lease, &flags.holder, ttl))
        .map_err(|e| format!("{e:#}"))?;
    let Some(grant) = grant else {
        emit(&Event::Refused);
        return Ok(exit::NOT_ACQUIRED);
    };
    let token = grant.token;
    emit(&Event::Acquired { token });
    let grant = Arc::new(Mutex::new(grant));
    let mut renewer = Renewer::start(flags, margin, grant.clone())?;

    if flags.wait_before_check {
        // Reported, not decided: the check below reads the clock again after the go-line.
        let deadline = grant.lock().expect("grant lock").local_deadline();
        emit(&Event::BeforeCheck {
            token,
            deadline_left_ms: millis(deadline.saturating_duration_since(Instant::now())),
        });
        renewer = match await_go(renewer)? {
            Ok(running) => running,
            Err(code) => return Ok(code),
        };
    }

    // The local-deadline check, by the monotonic clock. A pause before this line is judged here;
    // from here to the write there is no other check: a pause after it is invisible to this
    // process.
    let deadline = grant.lock().expect("grant lock").local_deadline();
    let now = Instant::now();
    if now >= deadline {
        renewer.stop();
        emit(&Event::DeadlinePassed {
            token,
            overdue_ms: millis(now - deadline),
        });
        return Ok(exit::DEADLINE_PASSED);
    }
    emit(&Event::AtWritePoint {
        token,
        deadline_left_ms: millis(deadline - now),
    });
    let renewer = match await_go(renewer)? {
        Ok(running) => running,
        Err(code) => return Ok(code),
    };

    let write = Write {
        scope: &flags.scope,
        part: &flags.part,
        content: &flags.content,
        writer: &flags.holder,
        token,
    };
    let accepted = rt
        .block_on(resource.write(&write, args.mode))
        .map_err(|e| format!("{e:#}"))?;
    emit(&Event::Write { accepted, token });
    renewer.stop();
    let mut held = grant.lock().expect("grant lock").clone();
    let renewed = rt
        .block_on(lease.renew(&mut held))
        .map_err(|e| format!("{e:#}"))?;
    emit(&Event::RenewAfterWrite { ok: renewed });
    if flags.release && renewed {
        let released = rt
            .block_on(lease.release(&held))
            .map_err(|e| format!("{e:#}"))?;
        emit(&Event::Released { ok: released });
    }
    Ok(match (accepted, renewed) {
        (_, false) => exit::LEASE_LOST,
        (false, true) => exit::REJECTED,
        (true, true) => exit::WROTE,
    })
}

/// Waits for the go-line and hands the running renewer back. On anything else the renewer is
/// stopped and the holder's exit status is returned: [`exit::ORPHANED`] when stdin closed,
/// [`exit::PROTOCOL`] (reported as an `ERROR`) for another line.
fn await_go(renewer: Renewer) -> Result<Result<Renewer, i32>, String> {
    let other = match read_request()? {
        Some(Request::Go) => return Ok(Ok(renewer)),
        Some(other) => other,
        None => {
            renewer.stop();
            return Ok(Err(exit::ORPHANED));
        }
    };
    renewer.stop();
    emit(&Event::Error {
        message: format!("expected GO, got {other}"),
    });
    Ok(Err(exit::PROTOCOL))
}

/// Whole milliseconds, as the protocol reports durations.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A pool of one connection to `db` as its owner role.
async fn store(flags: &HolderFlags, db: Database) -> Result<sqlx::PgPool, String> {
    PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options(flags, db))
        .await
        .map_err(|e| format!("failed to connect to {} as {}: {e}", db.name(), db.role()))
}

fn options(flags: &HolderFlags, db: Database) -> PgConnectOptions {
    PgConnectOptions::new_without_pgpass()
        .socket(&flags.socket_dir)
        .port(flags.port)
        .username(db.role())
        .database(db.name())
        .application_name(&flags.holder)
}

/// The background renewer: its own thread (so that a frozen process visibly freezes it too),
/// its own connection, renewing every `renew_ms` until stopped or refused.
struct Renewer {
    stop: mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

impl Renewer {
    fn start(
        flags: &HolderFlags,
        margin: Duration,
        grant: Arc<Mutex<Grant>>,
    ) -> Result<Renewer, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let every = Duration::from_millis(flags.renew_ms);
        let opts = options(flags, Database::Lease);
        let thread = thread::Builder::new()
            .name("renewer".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    emit(&Event::Error {
                        message: "the renewer could not start a runtime".into(),
                    });
                    return;
                };
                let pool = rt.block_on(PgPoolOptions::new().max_connections(1).connect_with(opts));
                let Ok(pool) = pool else {
                    emit(&Event::Error {
                        message: "the renewer could not connect".into(),
                    });
                    return;
                };
                let lease = LeaseStore::new(pool, margin);
                // The renew interval is a duration the timeline prescribes; a stop ends the wait.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let mut held = grant.lock().expect("grant lock").clone();
                    let ok = rt.block_on(lease.renew(&mut held)).unwrap_or(false);
                    if ok {
                        *grant.lock().expect("grant lock") = held.clone();
                    }
                    emit(&Event::Renewed {
                        ok,
                        token: held.token,
                    });
                    if !ok {
                        break;
                    }
                }
            })
            .map_err(|e| format!("failed to start the renewer thread: {e}"))?;
        Ok(Renewer { stop, thread })
    }

    /// Stops the renewer and waits until its thread has ended.
    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}
