//! Latches that make an interleaving exact without sleeps: a hook future handed to a store's
//! test `gap` (between its check and its write) reports that the check passed and waits until
//! the scenario releases it. F6 and U5 use them.

use std::future::Future;

use anyhow::Context as _;
use harness::holder::EVENT_TIMEOUT;
use tokio::sync::oneshot;

/// A gap hook, the receiver that fires when the hook is reached, and the sender that releases
/// it.
pub fn latch() -> (
    impl Future<Output = ()> + Send + 'static,
    oneshot::Receiver<()>,
    oneshot::Sender<()>,
) {
    let (reached_tx, reached) = oneshot::channel();
    let (release, release_rx) = oneshot::channel::<()>();
    let gap = async move {
        let _ = reached_tx.send(());
        let _ = release_rx.await;
    };
    (gap, reached, release)
}

/// Waits until the gap hook was reached; an error if it never is.
pub async fn reached(what: &str, latch: oneshot::Receiver<()>) -> anyhow::Result<()> {
    tokio::time::timeout(EVENT_TIMEOUT, latch)
        .await
        .with_context(|| format!("{what} never reached its gap"))?
        // The hook was dropped unreached: the statement ended on its own (the channel's own
        // "channel closed" says nothing to a reader).
        .map_err(|_| {
            anyhow::anyhow!(
                "{what} ended without reaching the point between its check and its write: its \
                 check refused it, or it failed"
            )
        })
}

/// Awaits an operation that must finish now that nothing should hold it; one that stays blocked
/// (e.g. on a lock its own scenario holds) becomes an error instead of a hang.
pub async fn finishes<T>(what: &str, op: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(EVENT_TIMEOUT, op)
        .await
        .with_context(|| {
            format!("{what} did not return within {EVENT_TIMEOUT:?}: is it blocked on a lock?")
        })
}
