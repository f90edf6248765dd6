//! The classroom's pause points in the lab's own clients (`lab run --step`): the lease store's
//! actions (acquire, renew, release) and the resource's writes first take a pause a step asked
//! for ([`harness::wait::before_action`]), as the harness's own actions do (a holder started,
//! sent a line, frozen, thawed or killed; a wait begun). So a step's checks are made and printed
//! before the pause, and the state the reader looks at is the one the step left. The reads
//! (inspect, the clock, the floor) are observations: no pause before them. Without `--step` no
//! pause is ever pending, and each wrapper is one atomic load.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use fencing::lease::{Grant, Holding, LeaseStore, StoreFuture};
use fencing::resource::{Resource, Write, WriteMode};
use harness::wait::before_action;

/// A lease store whose actions take a pending pause first.
#[derive(Debug)]
pub struct SteppedStore(pub Arc<dyn LeaseStore>);

impl SteppedStore {
    /// `store`, its actions paused at a step's request.
    pub fn wrap(store: Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
        Arc::new(SteppedStore(store))
    }
}

impl LeaseStore for SteppedStore {
    fn token_name(&self) -> String {
        self.0.token_name()
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(async move {
            before_action().await;
            self.0.acquire(name, holder, ttl).await
        })
    }

    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            before_action().await;
            self.0.renew(grant).await
        })
    }

    /// The store's own renewal of a holder's grants, forwarded: left to the trait's default,
    /// it became a renewal of each grant in turn, and a store that renews them together (a
    /// batch's one statement, a session's one keep-alive) went unjudged by the lab's clients.
    fn renew_all<'a>(&'a self, grants: &'a mut [Grant]) -> StoreFuture<'a, Vec<bool>> {
        Box::pin(async move {
            before_action().await;
            self.0.renew_all(grants).await
        })
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            before_action().await;
            self.0.release(grant).await
        })
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        self.0.inspect(name)
    }

    fn clock(&self) -> StoreFuture<'_, Option<String>> {
        self.0.clock()
    }

    fn is_free<'a>(&'a self, name: &'a str) -> StoreFuture<'a, bool> {
        self.0.is_free(name)
    }

    fn granted_ttl(&self, ttl: Duration) -> Duration {
        self.0.granted_ttl(ttl)
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        self.0.reset()
    }
}

/// The resource, its writes taking a pending pause first; every read goes to the resource as it
/// is ([`Deref`]).
#[derive(Debug, Clone)]
pub struct SteppedResource(pub Resource);

impl Deref for SteppedResource {
    type Target = Resource;

    fn deref(&self) -> &Resource {
        &self.0
    }
}

impl SteppedResource {
    /// See [`Resource::write`].
    pub async fn write(&self, w: &Write<'_>, mode: WriteMode) -> fencing::Result<bool> {
        before_action().await;
        self.0.write(w, mode).await
    }
}
