//! A lock's create whose answer is lost, on ZooKeeper (F3's part on a store that holds by
//! session). Curator's recipe, and the lab's ZooKeeper lock after it, answers a create that
//! failed with a lost connection by looking for the node its own session owns among the lock's
//! children — the create may have been applied with only its answer lost — and creates again if
//! it finds none. The look must pick the node of *this* session and no other: B's node, taken
//! for A's, would hand A the lock B holds.
//!
//! The timeline: B holds the lock; A's client reaches its create, the lab pauses the server (the
//! container's cgroup freezer) and lets the create go into it; A's client hears nothing, finds
//! its connection lost, and looks for its node once the server runs again, 2.7 s later. A
//! must be refused and B must still hold. Both sessions are opened for this probe with the
//! server's longest timeout, so that the pause ends neither. Found by the lock services' own
//! mutants: `own_node` taking a node its session does *not* own passed every experiment, none of
//! which lost a create's answer.

#[cfg(feature = "lock-services")]
use std::time::Duration;

use harness::evidence::Recorder;

use crate::Testbed;

/// The sessions' timeout here: ZooKeeper's longest (`maxSessionTimeout`, 5 s in the lab's
/// server), so that the pause ends no session.
#[cfg(feature = "lock-services")]
const SESSION: Duration = Duration::from_secs(5);

/// How long the server stays paused from A's create: past the client's wait for an answer (two
/// fifths of the session's timeout, 2 s) and well inside the sessions' timeout.
#[cfg(feature = "lock-services")]
const PAUSE: Duration = Duration::from_millis(2700);

/// The probe's one check.
pub(crate) const CHECKS: usize = 1;

/// B holds the lock; A's create goes into a paused server and its answer is lost; A, looking
/// for its own node after the pause, is refused, and B still holds.
pub(crate) async fn probe(bed: &Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    #[cfg(feature = "lock-services")]
    return lost_answer(bed, rec).await;
    #[cfg(not(feature = "lock-services"))]
    {
        let _ = (bed, rec);
        anyhow::bail!(
            "a store that holds by session needs the ZooKeeper client: this build left it out"
        )
    }
}

/// The probe itself (the ZooKeeper client is there).
#[cfg(feature = "lock-services")]
async fn lost_answer(bed: &Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use fencing::lease::zookeeper::ZkLeaseStore;
    use fencing::lease::LeaseStore as _;

    use crate::testbed::{shown, HOLDER_A, HOLDER_B, LEASE};

    let service = bed
        .service
        .as_ref()
        .context("a store that holds by session runs on a lock service")?;
    let (store, margin) = (bed.case().store, bed.params().margin);
    let endpoint = service.endpoint();
    let lock = &format!("{LEASE}-lost-create");
    let b_client = ZkLeaseStore::open_named(store, &endpoint, margin).await?;
    let b = b_client
        .acquire(lock, HOLDER_B, SESSION)
        .await?
        .context("B's grant of a free lock was refused")?;
    let a_client = ZkLeaseStore::open_named(store, &endpoint, margin).await?;
    let (reached, at_create) = tokio::sync::oneshot::channel::<()>();
    let (go, let_go) = tokio::sync::oneshot::channel::<()>();
    a_client.before_next_create(Box::new(move || {
        Box::pin(async move {
            let _ = reached.send(());
            let _ = let_go.await;
        })
    }));
    // The server paused while A's create waits, the create let go into it, and — the
    // timeline's own duration — the server let run again PAUSE later.
    let fault = async {
        at_create
            .await
            .context("A's acquire ended before its create")?;
        service.pause().await?;
        let _ = go.send(());
        harness::wait::prescribed(PAUSE).await;
        service.unpause().await
    };
    let (a, paused) = tokio::join!(a_client.acquire(lock, HOLDER_A, SESSION), fault);
    paused?;
    let a = a?;
    let held = b_client.inspect(lock).await?;
    rec.check_that(
        format!(
            "a create whose answer is lost: B holds the lock, A's create goes into the server paused for {} ms; A, looking for its own node once the server runs, is refused, and B still holds",
            PAUSE.as_millis()
        ),
        a.is_none() && held.as_ref().is_some_and(|h| h.holder == HOLDER_B),
        format_args!(
            "A {}; the lock's holder: {}",
            match &a {
                Some(g) => format!("GRANTED token={} on {}", g.token, g.handle),
                None => "refused".to_owned(),
            },
            shown(held.map(|h| h.holder))
        ),
    );
    if let Some(a) = a {
        a_client.release(&a).await?;
    }
    b_client.release(&b).await?;
    Ok(())
}
