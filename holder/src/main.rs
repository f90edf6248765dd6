//! The holder: one lease holder as its own OS process (docs/holder-protocol.md).
//!
//! It acquires the lease, starts a background renewer on its own thread (named `renewer`),
//! checks its local deadline, reports that it is at the write point, and waits for the go-line on
//! stdin. On it, it writes at once — no re-check: that is the point where a real process can be
//! paused — then stops the renewer, tries one renew, reports both results and exits with a status
//! that says what happened (see `holder --help` and `holder_protocol::exit`). With
//! `--wait-before-check` it also stops before the check (`BEFORE_CHECK`, then a go-line), the one
//! place where a pause is still seen by the holder itself: its check, judged by its monotonic
//! clock, finds the deadline passed and it gives up ([`exit::DEADLINE_PASSED`]). With
//! `--wait-before-commit` it stops inside its write transaction before COMMIT, with
//! `--wait-after-write` right after the write: places where the lab kills it (F12). With
//! `--renew-ms 0` it has no renewer: it acquires once and relies on the TTL (F13).
//!
//! The lease lives in one of two stores (`--store`): `postgres`, seed 004's lease table and
//! fenced resource (the write is a part of a report scope), or `mariadb`, seed 000's fenced
//! job lease (the holder starts its run after acquiring, and the write is that run's completion;
//! feature `mariadb`). Both go through [`Side`]: the same timeline, the same protocol.
//!
//! It knows nothing of scenarios or of how it is orchestrated: it speaks the line protocol of
//! `holder-protocol` on stdin/stdout and nothing else. It never hangs: when stdin closes before
//! the go-line, it exits without writing ([`exit::ORPHANED`]).

use std::future::Future;
use std::io::{self, BufRead, Write as _};
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::{CommandFactory as _, FromArgMatches as _};
use fencing::lease::{Grant, LeaseStore, SqlLeaseStore, StoreId};
use fencing::profile::Profile;
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::Database;
use holder_protocol::{
    exit, kernel_clock_line, Event, HolderFlags, Request, Token, LOST_PREFIX, VERSION,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

mod looping;

/// Parses the command line; `--help` and `--version` print and exit 0, bad arguments print a
/// usage error and exit [`exit::USAGE`].
fn parse_flags() -> HolderFlags {
    let command = HolderFlags::command().version(env!("CARGO_PKG_VERSION"));
    command
        .try_get_matches()
        .and_then(|mut matches| HolderFlags::from_arg_matches_mut(&mut matches))
        .unwrap_or_else(|e| e.exit())
}

/// A usage error: one line on stderr, exit status [`exit::USAGE`].
fn usage(message: String) -> ! {
    eprintln!("error: {message}");
    std::process::exit(exit::USAGE);
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

/// The lease store `--store` names, parsed where the holder starts (exit 2 for a name the lab
/// does not know): from here on the holder decides on the [`StoreId`], not on its spelling.
fn store_of(flags: &HolderFlags) -> StoreId {
    flags.store.parse().unwrap_or_else(|_| {
        usage(format!(
            "invalid value for '--store <STORE>': {:?}; expected one of: {}",
            flags.store,
            built_stores()
        ))
    })
}

/// The stores this build opens, each with a line about it.
fn built_stores() -> String {
    fencing::stores::built()
        .map(|k| format!("{} ({})", k.name(), k.about))
        .collect::<Vec<_>>()
        .join("; ")
}

fn main() -> ExitCode {
    let flags = parse_flags();
    let outcome = match store_of(&flags) {
        // A lease store the lab opens on its lease database (stores::STORES), the resource
        // fenced by the profile's floor.
        id if fencing::stores::store_kind(id).is_some_and(|k| k.open.is_some()) => {
            let mode = flags
                .mode
                .parse::<WriteMode>()
                .unwrap_or_else(|e| usage(format!("invalid value for '--mode <MODE>': {e}")));
            if let Some(seed) = flags.loop_seed {
                return ExitCode::from(match handshake() {
                    Ok(None) => match looping::run(&flags, mode, seed) {
                        Ok(()) => exit::WROTE,
                        Err(message) => {
                            emit(&Event::Error { message });
                            exit::FAILURE
                        }
                    },
                    Ok(Some(code)) => code,
                    Err(message) => {
                        emit(&Event::Error { message });
                        exit::FAILURE
                    }
                } as u8);
            }
            let sut = sut_of(&flags)
                .unwrap_or_else(|e| usage(format!("invalid value for '--sut <PROFILE>': {e}")));
            if flags.wait_before_commit
                && !(mode == WriteMode::Fenced
                    && matches!(
                        sut.resource.write,
                        fencing::profile::WriteSql::CheckThenWrite { .. }
                    ))
            {
                usage(format!(
                    "--wait-before-commit needs --mode fenced with a profile whose fence is a check \
                     and a write in one transaction (seed004's), not --mode {mode} with {}",
                    sut.name
                ));
            }
            run::<PgSide>(&flags, mode)
        }
        #[cfg(feature = "mariadb")]
        StoreId::Mariadb => {
            if flags.wait_before_commit {
                usage("--wait-before-commit: only --store postgres has a write transaction".into());
            }
            let completion = job::Completion::parse(&flags.mode)
                .unwrap_or_else(|e| usage(format!("invalid value for '--mode <MODE>': {e}")));
            if flags.run_id.is_none() {
                usage("--store mariadb needs --run-id: the run to start and complete".into());
            }
            if let Err(e) = job::design_of(&flags) {
                usage(format!("invalid value for '--sut <PROFILE>': {e}"));
            }
            run::<job::JobSide>(&flags, completion)
        }
        #[cfg(not(feature = "mariadb"))]
        StoreId::Mariadb => usage(
            "--store mariadb: this holder was built without MariaDB support \
             (cargo build -p holder --features holder/mariadb)"
                .into(),
        ),
        other => usage(format!(
            "invalid value for '--store <STORE>': {:?}: this holder was built without its \
             client; expected one of: {}",
            other.name(),
            built_stores()
        )),
    };
    ExitCode::from(match outcome {
        Ok(code) => code,
        Err(message) => {
            emit(&Event::Error { message });
            exit::FAILURE
        }
    } as u8)
}

/// What the holder needs of the store its lease lives in: the same timeline runs on either.
trait Side: Sized {
    /// How the write checks the token (the `--mode`, resolved).
    type Mode: Copy;
    /// Connects; `for_renewer` connects only what renewing needs.
    fn connect(
        flags: &HolderFlags,
        mode: Self::Mode,
        for_renewer: bool,
    ) -> impl Future<Output = Result<Self, String>>;
    /// Acquires (and, for a job, starts its run); `None` while someone else holds the lease.
    fn acquire(&self, flags: &HolderFlags) -> impl Future<Output = Result<Option<Grant>, String>>;
    /// The lease store the holding lives in, through the trait every store implements.
    fn lease(&self) -> &dyn LeaseStore;
    /// Renews `held` (its local deadline — the holder's monotonic clock, read before the renew
    /// was sent, plus `ttl - margin` — moves when it succeeds).
    fn renew(&self, held: &mut Grant) -> impl Future<Output = Result<bool, String>> {
        async { self.lease().renew(held).await.map_err(|e| with_causes(&e)) }
    }
    fn release(&self, held: &Grant) -> impl Future<Output = Result<bool, String>> {
        async {
            self.lease()
                .release(held)
                .await
                .map_err(|e| with_causes(&e))
        }
    }
    /// The write at the write point: accepted?
    fn write(
        &self,
        flags: &HolderFlags,
        held: &Grant,
    ) -> impl Future<Output = Result<bool, String>>;
}

/// The handshake: `Ok(None)` when the orchestrator speaks this protocol's version, else the
/// exit status to end with.
fn handshake() -> Result<Option<i32>, String> {
    match read_request()? {
        Some(Request::Hello { version }) if version == VERSION => {}
        Some(other) => {
            emit(&Event::Error {
                message: format!("expected HELLO version={VERSION}, got {other}"),
            });
            return Ok(Some(exit::PROTOCOL));
        }
        None => return Ok(Some(exit::ORPHANED)),
    }
    emit(&Event::Hello {
        version: VERSION,
        pid: std::process::id(),
    });
    Ok(None)
}

fn run<S>(flags: &HolderFlags, mode: S::Mode) -> Result<i32, String>
where
    S: Side + Send + 'static,
    S::Mode: Send + 'static,
{
    if let Some(code) = handshake()? {
        return Ok(code);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("failed to start a runtime: {e}"))?;
    let side = rt.block_on(S::connect(flags, mode, false))?;
    let Some(held) = rt.block_on(side.acquire(flags))? else {
        emit(&Event::Refused);
        return Ok(exit::NOT_ACQUIRED);
    };
    // The lab's holder always has a number to fence with.
    let token = Token::Value(held.token);
    emit(&Event::Acquired { token });
    let held = Arc::new(Mutex::new(held));
    let mut renewer = Renewer::start::<S>(flags, mode, held.clone())?;

    if flags.wait_before_check {
        // Reported, not decided: the check below reads the clock again after the go-line.
        let deadline = held.lock().expect("holding lock").local_deadline();
        let now = Instant::now();
        let kernel = kernel_clock_ms();
        emit(&Event::BeforeCheck {
            token,
            deadline_left_ms: millis(deadline.saturating_duration_since(now)),
        });
        say_kernel_clock("BEFORE_CHECK", kernel);
        renewer = match await_go(renewer)? {
            Ok(running) => running,
            Err(code) => return Ok(code),
        };
    }

    // The local-deadline check, by the monotonic clock. A pause before this line is judged here;
    // from here to the write there is no other check: a pause after it is invisible to this
    // process.
    let deadline = held.lock().expect("holding lock").local_deadline();
    let now = Instant::now();
    let kernel = kernel_clock_ms();
    if now >= deadline {
        renewer.stop();
        emit(&Event::DeadlinePassed {
            token,
            overdue_ms: millis(now - deadline),
        });
        say_kernel_clock("DEADLINE_PASSED", kernel);
        return Ok(exit::DEADLINE_PASSED);
    }
    emit(&Event::AtWritePoint {
        token,
        deadline_left_ms: millis(deadline - now),
    });
    say_kernel_clock("AT_WRITE_POINT", kernel);
    let renewer = match await_go(renewer)? {
        Ok(running) => running,
        Err(code) => return Ok(code),
    };

    let current = held.lock().expect("holding lock").clone();
    let accepted = rt.block_on(side.write(flags, &current))?;
    emit(&Event::Write { accepted, token });
    let renewer = if flags.wait_after_write {
        match await_go(renewer)? {
            Ok(running) => running,
            Err(code) => return Ok(code),
        }
    } else {
        renewer
    };
    renewer.stop();
    let mut current = held.lock().expect("holding lock").clone();
    let renewed = rt.block_on(side.renew(&mut current))?;
    if let Some(why) = current.lost() {
        // What the store's client library said of the holding it lost (a ZooKeeper session
        // expired while this process was frozen): the lab quotes it from stderr (`LOST_PREFIX`).
        eprintln!("{LOST_PREFIX}{why}");
    }
    emit(&Event::RenewAfterWrite { ok: renewed });
    if flags.release && renewed {
        let released = rt.block_on(side.release(&current))?;
        emit(&Event::Released { ok: released });
    }
    Ok(match (accepted, renewed) {
        (_, false) => exit::LEASE_LOST,
        (false, true) => exit::REJECTED,
        (true, true) => exit::WROTE,
    })
}

/// Seed 004's lease table and fenced resource, on PostgreSQL.
struct PgSide {
    /// The lease store, reached through the trait every store implements.
    lease: Arc<dyn LeaseStore>,
    /// `None` on the renewer's side, which only renews.
    resource: Option<Resource>,
    mode: WriteMode,
}

/// The system under test: the profile `--sut` names (a built-in's name or a file's path), or the
/// lab's own design.
fn sut_of(flags: &HolderFlags) -> Result<Arc<Profile>, String> {
    match &flags.sut {
        Some(arg) => Profile::load(arg).map(Arc::new).map_err(|e| e.to_string()),
        None => Ok(Arc::new(Profile::seed004().clone())),
    }
}

impl Side for PgSide {
    type Mode = WriteMode;

    async fn connect(
        flags: &HolderFlags,
        mode: WriteMode,
        for_renewer: bool,
    ) -> Result<PgSide, String> {
        let margin = Duration::from_millis(flags.margin_ms);
        let sut = sut_of(flags)?;
        let at = fencing::lease::StoreAt {
            table: SqlLeaseStore::with_profile(
                pg_pool(flags, Database::Lease).await?,
                margin,
                sut.clone(),
            ),
            endpoints: flags.store_endpoint.iter().cloned().collect(),
        };
        let lease: Arc<dyn LeaseStore> = fencing::stores::open(store_of(flags), &at)
            .await
            .map_err(|e| with_causes(&e))?;
        let resource = if for_renewer {
            None
        } else {
            Some(Resource::with_profile(
                pg_pool(flags, Database::Resource).await?,
                sut,
            ))
        };
        Ok(PgSide {
            lease,
            resource,
            mode,
        })
    }

    async fn acquire(&self, flags: &HolderFlags) -> Result<Option<Grant>, String> {
        let ttl = Duration::from_millis(flags.ttl_ms);
        self.lease
            .acquire(&flags.lease, &flags.holder, ttl)
            .await
            .map_err(|e| with_causes(&e))
    }

    fn lease(&self) -> &dyn LeaseStore {
        self.lease.as_ref()
    }

    async fn write(&self, flags: &HolderFlags, held: &Grant) -> Result<bool, String> {
        let resource = self.resource.as_ref().ok_or("the renewer does not write")?;
        let write = Write {
            scope: &flags.scope,
            part: &flags.part,
            content: &flags.content,
            writer: &flags.holder,
            token: held.token,
        };
        if !flags.wait_before_commit {
            return resource
                .write(&write, self.mode)
                .await
                .map_err(|e| with_causes(&e));
        }
        let mut conn = resource
            .pool()
            .acquire()
            .await
            .map_err(|e| format!("failed to connect to the resource: {e}"))?;
        // The transaction is open while the holder waits: blocking this thread's runtime is the
        // point (nothing else of the write may move).
        let go = async {
            emit(&Event::BeforeCommit {
                token: held.token.into(),
            });
            matches!(read_request(), Ok(Some(Request::Go)))
        };
        let decided = fencing::resource::write_profile_before_commit(
            &mut conn,
            resource.profile(),
            &write,
            go,
        )
        .await
        .ok_or("--wait-before-commit: the profile's write is one statement")?;
        decided
            .map_err(|e| with_causes(&e))?
            .ok_or_else(|| "no GO before the commit: the write was rolled back".into())
    }
}

#[cfg(feature = "mariadb")]
mod job;

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

/// An error with every cause under it, `: `-joined: "failed to begin the write transaction: error
/// communicating with database: Connection reset by peer (os error 104)" — the lab's evidence
/// shows why, not only what.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// The kernel's monotonic clock, in ms, read through the raw `clock_gettime` system call: a
/// time-faking library preloaded into this process (libfaketime, F13) replaces the libc
/// function that `Instant::now` calls, not the system call. `None` if the call fails.
fn kernel_clock_ms() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one `timespec` through its second argument, which points
    // at `ts`, alive and writable for the call's duration.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    (rc == 0).then_some(secs * 1000 + nanos / 1_000_000)
}

/// Tells the lab, on stderr, the kernel's clock read with the event `tag`'s own clock reading
/// (`holder_protocol::KERNEL_CLOCK_PREFIX`).
fn say_kernel_clock(tag: &str, kernel_ms: Option<u64>) {
    if let Some(ms) = kernel_ms {
        eprintln!("{}", kernel_clock_line(tag, ms));
    }
}

/// Whole milliseconds, as the protocol reports durations.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A pool of one connection to `db` as its owner role (the resource's lent without a ping
/// first): over the Unix socket, or over TCP when that database lives on a host of its own
/// (`--lease-host`, `--resource-host`); of several hosts, the one that is read-write.
async fn pg_pool(flags: &HolderFlags, db: Database) -> Result<sqlx::PgPool, String> {
    let base = PgConnectOptions::new_without_pgpass()
        .username(db.role())
        .database(db.name())
        .application_name(&flags.holder);
    let opts = match (db, &flags.lease_host, &flags.resource_host) {
        (Database::Lease, Some(hosts), _) => {
            read_write(&base, hosts, flags.lease_port.unwrap_or(5432)).await?
        }
        (Database::Resource, _, Some(host)) => {
            base.host(host).port(flags.resource_port.unwrap_or(5432))
        }
        _ => base.socket(&flags.socket_dir).port(flags.port),
    };
    PgPoolOptions::new()
        .max_connections(1)
        // On a resource over TCP (a host of its own), the write is the first thing the resource
        // hears after the check: no ping before it. (sqlx pings an idle connection before
        // lending it; F15 holds A's connection in the network, and the held packet must be A's
        // request, not a ping that delays sending it.) Over the embedded cluster's socket, where
        // no packet is held, the ping stays, as sqlx's default: a server restarted while the
        // holder was frozen (S2) is reconnected to, as any pooled client is, instead of the
        // write failing on the dead connection.
        .test_before_acquire(!matches!(db, Database::Resource) || flags.resource_host.is_none())
        .connect_with(opts)
        .await
        .map_err(|e| format!("failed to connect to {} as {}: {e}", db.name(), db.role()))
}

/// Whether `--lease-host` names several hosts (a Patroni cluster's nodes).
fn several_lease_hosts(flags: &HolderFlags) -> bool {
    flags.lease_host.as_deref().is_some_and(|h| h.contains(','))
}

/// `base` at the host of `hosts` (comma-separated) whose server is read-write — the first that
/// answers `pg_is_in_recovery()` with false within a second, as libpq's
/// `target_session_attrs=read-write` tries them in order. One host is taken as it is.
async fn read_write(
    base: &PgConnectOptions,
    hosts: &str,
    port: u16,
) -> Result<PgConnectOptions, String> {
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if let [one] = hosts[..] {
        return Ok(base.clone().host(one).port(port));
    }
    let mut said = Vec::new();
    for host in &hosts {
        let opts = base.clone().host(host).port(port);
        let ask = async {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect_with(&opts).await?;
            let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                .fetch_one(&mut conn)
                .await?;
            let _ = sqlx::Connection::close(conn).await;
            Ok::<_, sqlx::Error>(in_recovery)
        };
        match tokio::time::timeout(Duration::from_secs(1), ask).await {
            Ok(Ok(false)) => return Ok(opts),
            Ok(Ok(true)) => said.push(format!("{host}: in recovery")),
            Ok(Err(e)) => said.push(format!("{host}: {e}")),
            Err(_) => said.push(format!("{host}: no answer within 1 s")),
        }
    }
    Err(format!("no read-write server among {}", said.join("; ")))
}

/// The background renewer: its own thread (so that a frozen process visibly freezes it too),
/// its own connection, renewing every `renew_ms` until stopped or refused.
struct Renewer {
    stop: mpsc::Sender<()>,
    /// `None` with `--renew-ms 0`: no background renewer.
    thread: Option<thread::JoinHandle<()>>,
}

impl Renewer {
    fn start<S: Side + 'static>(
        flags: &HolderFlags,
        mode: S::Mode,
        held: Arc<Mutex<Grant>>,
    ) -> Result<Renewer, String>
    where
        S::Mode: Send + 'static,
    {
        let (stop, stopped) = mpsc::channel::<()>();
        if flags.renew_ms == 0 {
            return Ok(Renewer { stop, thread: None });
        }
        let every = Duration::from_millis(flags.renew_ms);
        let ttl = Duration::from_millis(flags.ttl_ms);
        let flags = flags.clone();
        // Told once the thread runs: std names the OS thread before it runs the closure.
        let (named, is_named) = mpsc::sync_channel::<()>(1);
        let thread = thread::Builder::new()
            .name("renewer".into())
            .spawn(move || {
                let _ = named.send(());
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    emit(&Event::Error {
                        message: "the renewer could not start a runtime".into(),
                    });
                    return;
                };
                let Ok(side) = rt.block_on(S::connect(&flags, mode, true)) else {
                    emit(&Event::Error {
                        message: "the renewer could not connect".into(),
                    });
                    return;
                };
                // The renew interval is a duration the timeline prescribes; a stop ends the wait.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let mut current = held.lock().expect("holding lock").clone();
                    // A renew not answered within the TTL failed: the lease may be gone by now
                    // (a partition holds the request, F16).
                    let ok = rt
                        .block_on(async {
                            tokio::time::timeout(ttl, side.renew(&mut current)).await
                        })
                        .is_ok_and(|r| r.unwrap_or(false));
                    if ok {
                        *held.lock().expect("holding lock") = current.clone();
                    }
                    emit(&Event::Renewed {
                        ok,
                        token: current.token.into(),
                    });
                    if !ok {
                        break;
                    }
                }
            })
            .map_err(|e| format!("failed to start the renewer thread: {e}"))?;
        // On only once it is named, as the lab sees it in /proc (a thread just spawned may not
        // have run yet; seen with the example Python holder under load). An error: it ended.
        let _ = is_named.recv();
        Ok(Renewer {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the renewer and waits until its thread has ended.
    fn stop(self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread {
            let _ = thread.join();
        }
    }
}
