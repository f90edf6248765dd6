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
    let start = Instant::now();
    loop {
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
    tokio::time::sleep(duration).await;
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

/// Whether SIGINT or SIGTERM arrived since [`for_enter`] was first called.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Blocks until the reader presses Enter (a line on stdin), stdin closes, or SIGINT or SIGTERM
/// arrives — the classroom's pause (`lab run --step`). The state polled is stdin's readiness,
/// every [`POLL_INTERVAL`] × 20, and a flag set by a signal action registered beside the
/// process's other handlers (tokio's keep working: the run still sees the signal and cleans up).
/// Reads stdin unbuffered, byte by byte, so that a second line typed ahead is not swallowed.
pub fn for_enter() -> Reader {
    use std::os::fd::AsFd as _;
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
