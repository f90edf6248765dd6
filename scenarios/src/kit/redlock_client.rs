//! The Redlock experiments' shared client: five independent Redis servers, as published, and the
//! lab's own client of the Redlock store over them (for its reads of who holds the lock), with the
//! extension a renewer makes a third of the TTL after a grant.

use std::sync::Arc;
use std::time::Duration;

use fencing::lease::{LeaseStore, StoreAt, StoreId};
use harness::docker::RedlockServers;

use crate::Testbed;

/// Five servers, as published.
pub(crate) const SERVERS: usize = 5;

/// How long RL3 holds their locks: long enough for two rounds, a fault and the servers'
/// state read in between (the published example's 10 s).
pub(crate) const LONG_TTL: Duration = Duration::from_secs(10);

/// A client of Redlock store `store` over `servers`, for the lab's own reads.
pub(crate) async fn redlock_client(
    bed: &Testbed,
    store: StoreId,
    servers: &dyn RedlockServers,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let at = StoreAt {
        table: bed.lease_table.clone(),
        endpoints: servers.endpoints(),
    };
    Ok(fencing::stores::open(store, &at).await?)
}

/// A's grant extended a third of its TTL after it was granted, as a renewer does (the timeline's
/// own wait): whether the store extended it, and how its local deadline moved (`later`, `not
/// moved`). RL1's extension and RL4's bare majority both extend so.
pub(crate) async fn extend_a_third_later(
    client: &dyn LeaseStore,
    a: &mut fencing::lease::Grant,
    ttl: std::time::Duration,
) -> anyhow::Result<(bool, &'static str)> {
    harness::wait::prescribed(ttl / 3).await;
    let before = a.local_deadline();
    let extended = client.renew(a).await?;
    let deadline = if a.local_deadline() > before {
        "later"
    } else {
        "not moved"
    };
    Ok((extended, deadline))
}
