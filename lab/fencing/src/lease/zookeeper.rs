//! The ZooKeeper lock (feature `zookeeper`): the shape of Curator's `InterProcessMutex`, taken
//! without waiting — an **ephemeral sequential node** `lock-N` under the lock's parent, created by
//! a session of its own whose timeout is the lease's TTL; the lock is held when that node is the
//! lowest child, else the node goes at once and the lock is refused. The token is the node's
//! **czxid** (the transaction id that created it: greater for every later write to the ensemble);
//! the sequential suffix `N` is recorded beside it (a counter kept per parent node: it starts
//! again when the parent is deleted — issue 29's R1).
//!
//! Expiry is the server's: a session lives while its client's heartbeats (pings every third of
//! the timeout, sent by the client library on its own) arrive within the timeout; when they stop
//! — the holder frozen, killed or cut off — the server expires the session and deletes its
//! ephemeral nodes. A renewal therefore sends nothing new: it asks whether the holding's node
//! still exists with the grant's czxid (the session is alive), and moves the local deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreKind};
use crate::{Error, Result};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The session of the store's own reads (inspect, reset, renewals by another client): the
/// server's maximum here.
const OWN_SESSION: Duration = Duration::from_secs(5);
/// The parent of every lock's parent.
const ROOT: &str = "/fencing-lab";

/// A ZooKeeper lock client on one server.
pub struct ZkLeaseStore {
    endpoint: String,
    margin: Duration,
    /// The store's own session, for reads and for renewals of holdings another client took.
    own: zk::Client,
    /// The session of each holding this client took, by its node's path: it lives while this
    /// client does; the release deletes the node, and dropping the client ends the connection
    /// without closing the session (the server expires it, and a node still in it).
    sessions: Mutex<HashMap<String, zk::Client>>,
}

impl std::fmt::Debug for ZkLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkLeaseStore")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn failed(what: &str, e: zk::Error) -> Error {
    Error::Service {
        store: "zookeeper",
        what: what.to_owned(),
        detail: e.to_string(),
    }
}

/// The lock's parent node.
fn parent(name: &str) -> String {
    format!("{ROOT}/{name}")
}

/// The sequence number of a child `lock-0000000012`.
fn sequence(child: &str) -> Option<i64> {
    child.strip_prefix("lock-")?.parse().ok()
}

/// The runtime the sessions live on: a thread of their own, as the Java client's `SendThread`,
/// so that heartbeats go out whatever the caller's thread does (a holder blocks its own runtime
/// between the steps of its timeline). Frozen with the process, like every thread.
fn sessions_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("zk-session")
            .enable_all()
            .build()
            .expect("a runtime for the ZooKeeper sessions")
    })
}

/// A new session at `endpoint` with `timeout`, its tasks on [`sessions_runtime`]. `detached`:
/// dropping the client does not close the session — its connection ends without a word and the
/// server expires it after its timeout, as when a holder dies (a holding's session); otherwise
/// dropping it closes it.
async fn session(endpoint: &str, timeout: Duration, detached: bool) -> Result<zk::Client> {
    let at = endpoint.to_owned();
    sessions_runtime()
        .spawn(async move {
            let mut connector = zk::Client::connector();
            if detached {
                connector = connector.with_detached();
            }
            connector
                .with_session_timeout(timeout)
                .with_connection_timeout(CONNECT_TIMEOUT)
                .connect(&at)
                .await
        })
        .await
        .map_err(|e| Error::Service {
            store: "zookeeper",
            what: format!("open a session at {endpoint}"),
            detail: e.to_string(),
        })?
        .map_err(|e| failed(&format!("open a session at {endpoint}"), e))
}

impl ZkLeaseStore {
    /// Connects to the server at `endpoint` (`host:port`).
    pub async fn connect(endpoint: &str, margin: Duration) -> Result<Self> {
        let own = session(endpoint, OWN_SESSION, false).await?;
        Ok(ZkLeaseStore {
            endpoint: endpoint.to_owned(),
            margin,
            own,
            sessions: Mutex::default(),
        })
    }

    /// Creates `path` as a persistent node unless it exists.
    async fn ensure(&self, path: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.own.create(path, b"", &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(failed(&format!("create {path}"), e)),
        }
    }

    /// The children of the lock's parent, lowest sequence first.
    async fn children(&self, name: &str) -> Result<Vec<String>> {
        let mut children = match self.own.get_children(&parent(name)).await {
            Ok((children, _)) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(failed("list the lock's nodes", e)),
        };
        children.sort_by_key(|c| sequence(c).unwrap_or(i64::MAX));
        Ok(children)
    }

    async fn acquire_now(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Grant>> {
        super::check_timing(ttl, self.margin)?;
        self.ensure(ROOT).await?;
        self.ensure(&parent(name)).await?;
        let sent = Instant::now();
        let mine = session(&self.endpoint, ttl, true).await?;
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (stat, seq) = mine
            .create(
                &format!("{}/lock-", parent(name)),
                holder.as_bytes(),
                &options,
            )
            .await
            .map_err(|e| failed("create the lock's ephemeral sequential node", e))?;
        let node = format!("{}/lock-{seq}", parent(name));
        let lowest = self.children(name).await?.into_iter().next();
        if lowest.as_deref() != node.rsplit('/').next() {
            // Someone holds it: our node goes at once, with its session.
            let _ = mine.delete(&node, None).await;
            return Ok(None);
        }
        self.sessions
            .lock()
            .expect("sessions")
            .insert(node.clone(), mine);
        Ok(Some(
            Grant::new(name, holder, stat.czxid, ttl, sent + (ttl - self.margin)).with_handle(node),
        ))
    }

    /// Whether the holding of `grant` still exists: its node, with the grant's czxid.
    async fn holds(&self, grant: &Grant) -> Result<bool> {
        match self.own.check_stat(&grant.handle).await {
            Ok(stat) => Ok(stat.is_some_and(|s| s.czxid == grant.token)),
            Err(e) => Err(failed("read the holding's node", e)),
        }
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let renewed = self.holds(grant).await?;
        if renewed {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed)
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        if !self.holds(grant).await? {
            return Ok(false);
        }
        let mine = self
            .sessions
            .lock()
            .expect("sessions")
            .remove(&grant.handle);
        let client = mine.as_ref().unwrap_or(&self.own);
        let deleted = match client.delete(&grant.handle, None).await {
            Ok(()) => true,
            Err(zk::Error::NoNode) => false,
            Err(e) => return Err(failed("delete the holding's node", e)),
        };
        // The holding's connection ends with it; its session, empty now, expires on the server.
        drop(mine);
        Ok(deleted)
    }

    async fn inspect_now(&self, name: &str) -> Result<Option<Holding>> {
        let Some(lowest) = self.children(name).await?.into_iter().next() else {
            return Ok(None);
        };
        let path = format!("{}/{lowest}", parent(name));
        let (data, stat) = match self.own.get_data(&path).await {
            Ok(got) => got,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(failed("read the lock's node", e)),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Ok(Some(Holding {
            holder: String::from_utf8_lossy(&data).into_owned(),
            token: stat.czxid,
            expires_at: format!(
                "while session 0x{:x} lives (node {lowest}, sequence {}; created {} ms since the epoch)",
                stat.ephemeral_owner,
                sequence(&lowest).unwrap_or(-1),
                stat.ctime
            ),
            // ZooKeeper keeps no expiry per node: its session ends it.
            expires_epoch: f64::INFINITY,
            expired: false,
            released: false,
            db_now: "(ZooKeeper tells no clock)".into(),
            db_now_epoch: now,
        }))
    }

    async fn reset_now(&self) -> Result<()> {
        // Every holding's node goes, with the sessions this client holds; the parents stay.
        for client in self.sessions.lock().expect("sessions").drain() {
            drop(client);
        }
        let names = match self.own.get_children(ROOT).await {
            Ok((names, _)) => names,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(failed("list the locks", e)),
        };
        for name in names {
            for child in self.children(&name).await? {
                match self
                    .own
                    .delete(&format!("{}/{child}", parent(&name)), None)
                    .await
                {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(failed("delete a lock's node", e)),
                }
            }
        }
        Ok(())
    }
}

impl LeaseStore for ZkLeaseStore {
    fn token_name(&self) -> String {
        "czxid of the lock's ephemeral sequential node (its sequence number recorded beside)".into()
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(self.acquire_now(name, holder, ttl))
    }

    fn renew<'a>(&'a self, grant: &'a mut Grant) -> StoreFuture<'a, bool> {
        Box::pin(self.renew_now(grant))
    }

    fn release<'a>(&'a self, grant: &'a Grant) -> StoreFuture<'a, bool> {
        Box::pin(self.release_now(grant))
    }

    fn inspect<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Holding>> {
        Box::pin(self.inspect_now(name))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.reset_now())
    }
}

async fn open(at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("zookeeper")?;
    Ok(Arc::new(
        ZkLeaseStore::connect(endpoint, at.table.margin()).await?,
    ))
}

/// The ZooKeeper lock in the registry.
pub const KIND: StoreKind = StoreKind {
    name: "zookeeper",
    token: "czxid of the lock's ephemeral node",
    about: "a ZooKeeper ephemeral sequential node (Curator's lock recipe), the session timeout as the TTL; the token is the node's czxid",
    has_token: true,
    service: Some("zookeeper"),
    open: Some(|at| Box::pin(open(at))),
};
