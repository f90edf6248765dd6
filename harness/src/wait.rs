//! Waiting for a state: poll it with a deadline. The lab never sleeps to *wait for* something;
//! it sleeps only where a timeline prescribes a duration, and says so where it does.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a state is polled. Short against every duration in the lab (TTLs ≥ 300 ms).
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Why a wait ended without its state.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("timed out after {after:?} waiting until {what}")]
    TimedOut { what: String, after: Duration },
    #[error("failed to check whether {what}")]
    Probe {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Polls `probe` every [`POLL_INTERVAL`] until it returns `true`, and returns how long that took.
/// `what` names the awaited state in the error ("the lease is expired by the database clock").
pub async fn until<F, Fut, E>(
    what: &str,
    timeout: Duration,
    probe: F,
) -> Result<Duration, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    until_every(what, timeout, POLL_INTERVAL, probe).await
}

/// [`until`], polling every `interval`: for a probe that costs more than a query (one that asks
/// the Docker engine for a container's whole log).
pub async fn until_every<F, Fut, E>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: F,
) -> Result<Duration, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    before_action().await;
    let start = Instant::now();
    // A long wait says what it waits for, every HEARTBEAT: nothing silent for long.
    let mut say_at = HEARTBEAT;
    loop {
        if start.elapsed() >= say_at {
            eprintln!(
                "lab: waiting until {what}: {:.0} s of up to {:.0} s",
                start.elapsed().as_secs_f64(),
                timeout.as_secs_f64()
            );
            say_at += HEARTBEAT;
        }
        // A probe that blocks (e.g. on a lock) counts against the same deadline.
        let left = timeout.saturating_sub(start.elapsed());
        match tokio::time::timeout(left.max(interval), probe()).await {
            Ok(Ok(true)) => return Ok(start.elapsed()),
            Ok(Ok(false)) | Err(_) => {}
            Ok(Err(e)) => {
                return Err(WaitError::Probe {
                    what: what.to_owned(),
                    source: Box::new(e),
                })
            }
        }
        if start.elapsed() >= timeout {
            return Err(WaitError::TimedOut {
                what: what.to_owned(),
                after: start.elapsed(),
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// The blocking twin of [`until`], for `Drop` and other synchronous paths.
pub fn until_blocking(timeout: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if probe() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Lets a duration pass that the timeline itself prescribes (F4's 2×TTL of renewing) — the one
/// kind of sleep the lab allows outside this module's polling. Never use it to wait for a state:
/// poll the state with [`until`].
pub async fn prescribed(duration: Duration) {
    before_action().await;
    tokio::time::sleep(duration).await;
}

/// [`prescribed`], until the instant the timeline prescribes (a renewal's slot in its period in
/// `lab bench --leases`); at once when it has passed.
pub async fn prescribed_until(at: Instant) {
    before_action().await;
    tokio::time::sleep_until(at.into()).await;
}

/// How often a long piece of work says it is still going ([`with_heartbeat`]).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Awaits `work`, saying on stderr every [`HEARTBEAT`] that `what` is still going and for how
/// long (`lab: image …: debootstrap, 30 s so far`): nothing silent for more than ten seconds.
pub async fn with_heartbeat<T>(what: &str, work: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let mut work = std::pin::pin!(work);
    let mut ticks = tokio::time::interval_at((started + HEARTBEAT).into(), HEARTBEAT);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = ticks.tick() => eprintln!(
                "lab: {what}, {:.0} s so far",
                started.elapsed().as_secs_f64()
            ),
        }
    }
}

/// A classroom pause asked for at a step (`lab run --step`) and not yet taken.
static PAUSE_PENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once the reader cannot answer (stdin closed) or the run was interrupted: no more pauses.
static PAUSES_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// What the pending pause says when it is taken (on stderr).
static PAUSE_PROMPT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Asks for the classroom's pause before the experiment's next action (`lab run --step`): the
/// step that was just recorded has its checks made and printed first, then the lab stands still
/// at [`before_action`] until Enter, `prompt` said then. Whether pauses are still on.
pub fn pause_before_next_action(prompt: &str) -> bool {
    use std::sync::atomic::Ordering;
    hear_signals();
    if PAUSES_OFF.load(Ordering::SeqCst) || INTERRUPTED.load(Ordering::SeqCst) {
        return false;
    }
    if let Ok(mut said) = PAUSE_PROMPT.lock() {
        prompt.clone_into(&mut said);
    }
    PAUSE_PENDING.store(true, Ordering::SeqCst);
    true
}

/// Where an action of the lab begins — a holder started, sent a line, frozen, thawed or killed; a
/// lease acquired, renewed or released; a write sent; a server crashed; a wait begun: a pause
/// asked for with [`pause_before_next_action`] is taken here, so that the state the reader looks
/// at is the one the step left. Nothing pending: returns at once.
pub async fn before_action() {
    use std::sync::atomic::Ordering;
    if PAUSE_PENDING.swap(false, Ordering::SeqCst) {
        say_prompt();
        // The wait for Enter blocks a thread of its own, not the runtime's.
        let reader = tokio::task::spawn_blocking(for_enter)
            .await
            .unwrap_or(Reader::Closed);
        after_pause(reader);
    }
}

/// [`before_action`] for a place that cannot await (the step reporter, when a new step or the
/// case's end comes before any action did): takes a pending pause now.
pub fn take_pending_pause() {
    use std::sync::atomic::Ordering;
    if PAUSE_PENDING.swap(false, Ordering::SeqCst) {
        say_prompt();
        after_pause(for_enter());
    }
}

fn say_prompt() {
    use std::io::Write as _;
    let said = PAUSE_PROMPT.lock().map(|p| p.clone()).unwrap_or_default();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{said}").and_then(|()| err.flush());
}

fn after_pause(reader: Reader) {
    use std::sync::atomic::Ordering;
    match reader {
        Reader::Enter => {}
        Reader::Closed => {
            PAUSES_OFF.store(true, Ordering::SeqCst);
            eprintln!("   (stdin closed: going on without stopping)");
        }
        Reader::Interrupted => PAUSES_OFF.store(true, Ordering::SeqCst),
    }
}

/// What ended a wait for the reader ([`for_enter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A line arrived on stdin.
    Enter,
    /// Stdin is closed (or cannot be read): nobody will press Enter.
    Closed,
    /// SIGINT or SIGTERM arrived while waiting (the run's own handlers see it too).
    Interrupted,
}

/// Whether SIGINT or SIGTERM arrived since [`for_enter`] or [`pause_before_next_action`] was
/// first called.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers the signal action that sets [`INTERRUPTED`] (once), beside the process's other
/// handlers: a pause still pending when the run is interrupted is never waited for.
fn hear_signals() {
    use std::sync::atomic::Ordering;
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        for signal in [nix::libc::SIGINT, nix::libc::SIGTERM] {
            // SAFETY: the action only stores to an atomic, which is async-signal-safe.
            let _ = unsafe {
                signal_hook_registry::register(signal, || INTERRUPTED.store(true, Ordering::SeqCst))
            };
        }
    });
}

/// Blocks until the reader presses Enter (a line on stdin), stdin closes, or SIGINT or SIGTERM
/// arrives — the classroom's pause (`lab run --step`). The state polled is stdin's readiness,
/// every [`POLL_INTERVAL`] × 20, and a flag set by a signal action registered beside the
/// process's other handlers (tokio's keep working: the run still sees the signal and cleans up).
/// Reads stdin unbuffered, byte by byte, so that a second line typed ahead is not swallowed.
pub fn for_enter() -> Reader {
    use std::os::fd::AsFd as _;
    use std::sync::atomic::Ordering;

    hear_signals();
    let stdin = std::io::stdin();
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Reader::Interrupted;
        }
        let mut fds = [nix::poll::PollFd::new(
            stdin.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return Reader::Closed,
        }
        // One byte, unbuffered, and only once poll said one is there: a second line typed
        // ahead stays for the next pause, and Ctrl-C is heard between keystrokes.
        let mut byte = [0u8; 1];
        match nix::unistd::read(stdin.as_fd(), &mut byte) {
            Ok(0) => return Reader::Closed,
            Ok(_) if byte[0] == b'\n' => return Reader::Enter,
            Ok(_) | Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => return Reader::Closed,
        }
    }
}
