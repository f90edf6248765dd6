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
        match tokio::time::timeout(left.max(POLL_INTERVAL), probe()).await {
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
        tokio::time::sleep(POLL_INTERVAL).await;
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
