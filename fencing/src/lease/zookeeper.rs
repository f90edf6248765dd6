//! The ZooKeeper lock (feature `zookeeper`): the shape of Curator's `InterProcessMutex`, taken
//! without waiting — an **ephemeral sequential node** `lock-N` under the lock's parent, created by
//! a session of its own whose timeout is the lease's TTL; the lock is held when that node is the
//! lowest child, else the node goes at once and the lock is refused. The parent is a
//! **container node**, as Curator makes it (`creatingParentContainersIfNeeded`): ZooKeeper
//! deletes it once its last child is gone, and the next acquire makes it anew.
//!
//! Two stores: `zookeeper`, whose token is the node's **czxid** (the transaction id that created
//! it: greater for every later write to the ensemble), the sequence suffix `N` recorded beside;
//! and `zookeeper-suffix`, whose token is the suffix — a counter kept per parent node, which
//! starts again at 0 when ZooKeeper deletes the empty container (R1: a token that goes back).
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

use super::{Grant, Holding, LeaseStore, StoreAt, StoreFuture, StoreId, StoreKind};
use crate::{Error, Result};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The session of the store's own reads (inspect, reset, renewals by another client): the
/// server's maximum here.
const OWN_SESSION: Duration = Duration::from_secs(5);
/// The parent of every lock's parent.
const ROOT: &str = "/fencing-lab";

/// Which number of the lock's node is the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenOf {
    /// The node's czxid: ordered across the whole ensemble, for ever.
    Czxid,
    /// The node's sequence suffix: a counter of its parent, which a deleted parent loses.
    Suffix,
}

/// A ZooKeeper lock client on one server.
pub struct ZkLeaseStore {
    endpoint: String,
    margin: Duration,
    token_of: TokenOf,
    /// The store's own session, for reads and for renewals of holdings another client took.
    own: zk::Client,
    /// The session of each holding this client took, by its node's path: it lives while this
    /// client does; the release deletes the node, and dropping the client ends the connection
    /// without closing the session (the server expires it, and a node still in it).
    sessions: Mutex<HashMap<String, zk::Client>>,
    /// `zookeeper-session`: the one session every lock of this client is taken in (Curator's
    /// recipe as a process runs it: one `CuratorFramework`, one session, many locks), once
    /// opened and until ZooKeeper expires it. `None`: a session per lock (`zookeeper`).
    shared: Option<tokio::sync::Mutex<Option<zk::Client>>>,
    /// The lab's fault at this client's next create of a lock's node ([`BeforeCreate`]).
    before_create: Mutex<Option<BeforeCreate>>,
}

/// A fault the lab runs right before this client's next create of a lock's node, taken by that
/// create alone: F3's probe of a create whose answer is lost holds the create there while it
/// pauses the server (`ZkLeaseStore::before_next_create`).
pub type BeforeCreate =
    Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

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

/// A holding's handle: its node's path and czxid, `/fencing-lab/job/lock-0000000003 czxid=42`
/// (a path alone may come back: the suffix starts again when the parent is made anew).
fn handle(node: &str, czxid: i64) -> String {
    format!("{node} czxid={czxid}")
}

/// The node's path and czxid in a holding's handle.
fn node_of(handle: &str) -> (&str, Option<i64>) {
    match handle.split_once(" czxid=") {
        Some((node, czxid)) => (node, czxid.parse().ok()),
        None => (handle, None),
    }
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

/// Whether `e` leaves `client`'s session usable: a connection lost or silent, which the client
/// reconnects within the session's timeout — not an expired or closed session.
fn transient(client: &zk::Client, e: &zk::Error) -> bool {
    !matches!(
        e,
        zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::NoHosts
            | zk::Error::AuthFailed
    ) && !client.state().is_terminated()
}

/// The child of `parent` that `client`'s session owns (an ephemeral node it created), with its
/// stat, asked again while the connection is lost until `deadline`.
async fn own_node(
    client: &zk::Client,
    parent: &str,
    deadline: Instant,
) -> std::result::Result<Option<(zk::Stat, String)>, zk::Error> {
    let id = client.session_id().0;
    loop {
        let looked: std::result::Result<Option<(zk::Stat, String)>, zk::Error> = async {
            let children = match client.get_children(parent).await {
                Ok((children, _)) => children,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(e),
            };
            for child in children {
                let path = format!("{parent}/{child}");
                if let Some(stat) = client.check_stat(&path).await? {
                    if stat.ephemeral_owner == id {
                        return Ok(Some((stat, path)));
                    }
                }
            }
            Ok(None)
        }
        .await;
        match looked {
            Err(e) if transient(client, &e) && Instant::now() < deadline => {
                let mut states = client.state_watcher();
                let left = deadline.saturating_duration_since(Instant::now());
                let _ = tokio::time::timeout(left, states.changed()).await;
            }
            other => return other,
        }
    }
}

/// `client`'s answer to whether `node` exists, its connection's loss waited out until
/// `deadline`. A connection the client finds gone — the server closed it (`ConnectionLoss`), no
/// word from it for the client's connection timeout, a write into a reset socket (the library's
/// own errors) — fails the requests in flight while the client reconnects in the background: on
/// each such failure, wait for the client's session state to change (reconnected, or expired)
/// and ask again. Seen after a freeze: the timer that notices the silence and the read of the
/// closed socket wake together, and whichever the client's loop polls first names the failure.
/// A terminal answer (`SessionExpired`, the client closed) is returned at once. The watcher is
/// taken before the first question, so no change is missed. Beside the answer: the failures
/// waited out, in the client's words.
async fn asked(
    client: &zk::Client,
    node: &str,
    deadline: Instant,
) -> (
    std::result::Result<Option<zk::Stat>, zk::Error>,
    Vec<String>,
) {
    let mut states = client.state_watcher();
    let mut answer = client.check_stat(node).await;
    let mut lost = Vec::new();
    while let Err(e) = &answer {
        if matches!(
            e,
            zk::Error::SessionExpired
                | zk::Error::ClientClosed
                | zk::Error::NoHosts
                | zk::Error::AuthFailed
        ) || client.state().is_terminated()
        {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        lost.push(e.to_string());
        // A timeout here is no answer either: ask one last time.
        let _ = tokio::time::timeout(left, states.changed()).await;
        answer = client.check_stat(node).await;
    }
    (answer, lost)
}

impl ZkLeaseStore {
    /// Connects to the server at `endpoint` (`host:port`); its grants' tokens are `token_of`.
    pub async fn connect(endpoint: &str, margin: Duration, token_of: TokenOf) -> Result<Self> {
        let own = session(endpoint, OWN_SESSION, false).await?;
        Ok(ZkLeaseStore {
            endpoint: endpoint.to_owned(),
            margin,
            token_of,
            own,
            sessions: Mutex::default(),
            shared: None,
            before_create: Mutex::default(),
        })
    }

    /// The client of the ZooKeeper store `id` (`zookeeper`, `zookeeper-suffix`,
    /// `zookeeper-session`) at `endpoint`, as the registry opens it — for a probe that needs
    /// this store's own methods ([`ZkLeaseStore::before_next_create`]).
    pub async fn open_named(id: StoreId, endpoint: &str, margin: Duration) -> Result<Self> {
        match id {
            StoreId::ZookeeperSession => ZkLeaseStore::connect_shared(endpoint, margin).await,
            StoreId::ZookeeperSuffix => {
                ZkLeaseStore::connect(endpoint, margin, TokenOf::Suffix).await
            }
            _ => ZkLeaseStore::connect(endpoint, margin, TokenOf::Czxid).await,
        }
    }

    /// Runs `fault` right before this client's next create of a lock's node (lab only).
    pub fn before_next_create(&self, fault: BeforeCreate) {
        *self.before_create.lock().expect("before_create") = Some(fault);
    }

    /// `zookeeper-session`: every lock this client takes is an ephemeral node of one session of
    /// its own, opened at its first lock with that lock's TTL as its timeout; the session's
    /// heartbeat (the client library's pings) is every lock's renewal. The token is the node's
    /// czxid. For fencing, the locks share one fate: a pause or a partition past the timeout
    /// expires the session and every lock with it.
    pub async fn connect_shared(endpoint: &str, margin: Duration) -> Result<Self> {
        let mut store = ZkLeaseStore::connect(endpoint, margin, TokenOf::Czxid).await?;
        store.shared = Some(tokio::sync::Mutex::default());
        Ok(store)
    }

    /// The session a lock of `ttl` is taken in: a new one of its own, or — `zookeeper-session` —
    /// the client's one session, opened now if it has none or ZooKeeper expired it.
    async fn lock_session(&self, ttl: Duration) -> Result<zk::Client> {
        let Some(shared) = &self.shared else {
            return session(&self.endpoint, ttl, true).await;
        };
        let mut current = shared.lock().await;
        if let Some(client) = current.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        let client = session(&self.endpoint, ttl, true).await?;
        *current = Some(client.clone());
        Ok(client)
    }

    /// `zookeeper-session`'s renewal of one holder's grants: one request through the client's
    /// session (an `exists` of the lab's root: an answer proves the session alive, as the
    /// heartbeat does), and every grant still held by this client renewed with it — the
    /// recipe's renewal, which trusts the client's own record of the locks it gave up. A session
    /// ZooKeeper expired renews none, and is forgotten.
    async fn renew_shared(&self, grants: &mut [Grant]) -> Result<Vec<bool>> {
        let sent = Instant::now();
        let shared = self.shared.as_ref().expect("a shared session store");
        let client = shared.lock().await.clone();
        let alive = match &client {
            None => Err(
                "this client has no session: it took no lock, or ZooKeeper expired it".to_owned(),
            ),
            Some(client) => {
                let ttl = grants.first().map_or(OWN_SESSION, |g| g.ttl);
                match asked(client, ROOT, Instant::now() + ttl * 7 / 5 + CONNECT_TIMEOUT).await.0 {
                    Ok(_) => Ok(()),
                    Err(e) if transient(client, &e) => {
                        return Err(failed("ask through the session whether it lives", e))
                    }
                    Err(e) => Err(format!(
                        "the client's session {} is gone ({e}, state {:?}): every lock in it went with it",
                        client.session_id(),
                        client.state()
                    )),
                }
            }
        };
        if alive.is_err() {
            *shared.lock().await = None;
        }
        let held = self.sessions.lock().expect("sessions").clone();
        Ok(grants
            .iter_mut()
            .map(|g| match &alive {
                Ok(()) if held.contains_key(node_of(&g.handle).0) => {
                    let ttl = g.ttl;
                    g.renewed(sent + (ttl - self.margin));
                    true
                }
                Ok(()) => false,
                Err(why) => {
                    g.lost_because(why.clone());
                    false
                }
            })
            .collect())
    }

    /// Creates `path` as a `mode` node unless it exists.
    async fn ensure(&self, path: &str, mode: zk::CreateMode) -> Result<()> {
        let options = mode.with_acls(zk::Acls::anyone_all());
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
        self.ensure(ROOT, zk::CreateMode::Persistent).await?;
        let sent = Instant::now();
        let mine = self.lock_session(ttl).await?;
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        // The container parent may be deleted by the server between its creation and the
        // child's (it was empty): make it again, as Curator does.
        let mut tries = 0;
        let (stat, node) = loop {
            self.ensure(&parent(name), zk::CreateMode::Container)
                .await?;
            let fault = self.before_create.lock().expect("before_create").take();
            if let Some(fault) = fault {
                fault().await;
            }
            match mine
                .create(
                    &format!("{}/lock-", parent(name)),
                    holder.as_bytes(),
                    &options,
                )
                .await
            {
                Err(zk::Error::NoNode) if tries < 3 => tries += 1,
                // The connection lost or silent (a loaded machine): the create may have been
                // applied with its answer lost. The node this session owns, if any, is ours
                // (Curator's protected mode finds it so); else create again.
                Err(e) if tries < 3 && transient(&mine, &e) => {
                    tries += 1;
                    let found = own_node(&mine, &parent(name), Instant::now() + ttl)
                        .await
                        .map_err(|e| failed("find the lock's node after a lost answer", e))?;
                    if let Some(found) = found {
                        break found;
                    }
                }
                created => {
                    let (stat, seq) = created
                        .map_err(|e| failed("create the lock's ephemeral sequential node", e))?;
                    break (stat, format!("{}/lock-{seq}", parent(name)));
                }
            }
        };
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
        let token = match self.token_of {
            TokenOf::Czxid => stat.czxid,
            TokenOf::Suffix => sequence(node.rsplit('/').next().unwrap_or_default()).unwrap_or(-1),
        };
        Ok(Some(
            Grant::new(name, holder, token, ttl, sent + (ttl - self.margin))
                .with_handle(handle(&node, stat.czxid)),
        ))
    }

    /// Whether the holding of `grant` still exists: its node, with the grant's czxid, asked
    /// through the store's own session (a connection lost on the way is waited out; see
    /// [`asked`]).
    async fn holds(&self, grant: &Grant) -> Result<bool> {
        let (node, czxid) = node_of(&grant.handle);
        match asked(
            &self.own,
            node,
            Instant::now() + OWN_SESSION * 7 / 5 + CONNECT_TIMEOUT,
        )
        .await
        .0
        {
            Ok(stat) => Ok(stat.is_some_and(|s| Some(s.czxid) == czxid)),
            Err(e) => Err(failed("read the holding's node", e)),
        }
    }

    async fn renew_now(&self, grant: &mut Grant) -> Result<bool> {
        let sent = Instant::now();
        let renewed = match self.asked_by_its_session(grant).await {
            Some(Ok(held)) => held,
            Some(Err(why)) => {
                grant.lost_because(why);
                false
            }
            None => self.holds(grant).await?,
        };
        if renewed {
            grant.renewed(sent + (grant.ttl - self.margin));
        }
        Ok(renewed)
    }

    /// Asks through the holding's own session, when this client took it, whether its node still
    /// exists — what a Curator client learns on waking: a session ZooKeeper expired while the
    /// client slept is `SessionExpired` to it once it tries to reconnect. `Some(Err(why))` is a
    /// holding lost, in the client's words; `None`, no session of this client holds it.
    async fn asked_by_its_session(
        &self,
        grant: &Grant,
    ) -> Option<std::result::Result<bool, String>> {
        let (node, czxid) = node_of(&grant.handle);
        let mine = self.sessions.lock().expect("sessions").get(node).cloned()?;
        let id = mine.session_id();
        // The client decides within its own bounds — it gives a session up 1.4 × its timeout
        // after it last heard from the server, or is told so by the server, each connection
        // attempt taking up to CONNECT_TIMEOUT — so wait that long: a bound of 2 s was too short
        // on a loaded machine (a fresh-clone CI saw no answer from A's session after its freeze,
        // and the check of what the client heard failed).
        let (answer, lost) = asked(
            &mine,
            node,
            Instant::now() + grant.ttl * 7 / 5 + CONNECT_TIMEOUT,
        )
        .await;
        let state = mine.state();
        // What the client went through before its answer, when it lost its connection first.
        let before = if lost.is_empty() {
            String::new()
        } else {
            format!(
                " (before that, its requests failed while it reconnected: {})",
                lost.join("; ")
            )
        };
        Some(match answer {
            Ok(Some(stat)) if Some(stat.czxid) == czxid => Ok(true),
            Ok(_) => Err(format!(
                "the node {node} is gone while its session {id} lives (state {state:?})"
            )),
            Err(zk::Error::SessionExpired) => Err(format!(
                "the client's session {id} is expired (zookeeper-client: SessionExpired, state \
                 {state:?}): ZooKeeper ended it while the client was silent — on reconnecting, \
                 the server answers so; past 1.4 × the session's timeout without a word from the \
                 server, the client gives it up itself; its ephemeral node {node} went with it{before}"
            )),
            // No answer in time: the store's own session is asked instead; if the node is gone,
            // the holding is lost for a reason that says what its session said.
            Err(e) => match self.holds(grant).await {
                Ok(true) => Ok(true),
                Ok(false) => Err(format!(
                    "the client's session {id} gave no answer ({e}, state {state:?}){before}; \
                     the store's session finds the node {node} gone"
                )),
                Err(own) => Err(format!(
                    "neither the client's session {id} ({e}, state {state:?}) nor the store's \
                     own session ({own}) could say whether the node {node} still exists: not \
                     renewed"
                )),
            },
        })
    }

    async fn release_now(&self, grant: &Grant) -> Result<bool> {
        if !self.holds(grant).await? {
            return Ok(false);
        }
        let node = node_of(&grant.handle).0;
        let mine = self.sessions.lock().expect("sessions").remove(node);
        let client = mine.as_ref().unwrap_or(&self.own);
        let deleted = match client.delete(node, None).await {
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
            token: match self.token_of {
                TokenOf::Czxid => stat.czxid,
                TokenOf::Suffix => sequence(&lowest).unwrap_or(-1),
            },
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
        if let Some(shared) = &self.shared {
            *shared.lock().await = None;
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
    super::forward_to_now!(acquire, renew, release, inspect, reset);

    fn token_name(&self) -> String {
        if self.shared.is_some() {
            return "czxid of the lock's ephemeral sequential node, every lock of a client in one session".into();
        }
        match self.token_of {
            TokenOf::Czxid => {
                "czxid of the lock's ephemeral sequential node (its sequence number recorded beside)"
            }
            TokenOf::Suffix => {
                "sequence suffix of the lock's ephemeral sequential node (a counter of its container parent)"
            }
        }
        .into()
    }

    /// `zookeeper-session`: one request for all of a holder's grants ([`Self::renew_shared`]);
    /// a session per lock: each grant's own renewal, in order.
    fn renew_all<'a>(&'a self, grants: &'a mut [Grant]) -> StoreFuture<'a, Vec<bool>> {
        Box::pin(async move {
            if self.shared.is_some() {
                return self.renew_shared(grants).await;
            }
            let mut renewed = Vec::with_capacity(grants.len());
            for grant in grants.iter_mut() {
                renewed.push(self.renew_now(grant).await?);
            }
            Ok(renewed)
        })
    }
}

async fn open_shared(at: &StoreAt) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("zookeeper")?;
    Ok(Arc::new(
        ZkLeaseStore::connect_shared(endpoint, at.table.margin()).await?,
    ))
}

/// Curator's lock recipe as a process runs it, in the registry: every lock of a client in one
/// session, whose heartbeat renews them all.
pub const SESSION: StoreKind = StoreKind {
    id: StoreId::ZookeeperSession,
    token: "czxid of the lock's ephemeral node",
    about: "the ZooKeeper lock as a Curator process runs it: every lock of a client an ephemeral sequential node of one session, whose heartbeat renews them all; the token is the node's czxid",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: true,
    one_session: false,
    open: Some(|at| Box::pin(open_shared(at))),
};

async fn open(at: &StoreAt, token_of: TokenOf) -> Result<Arc<dyn LeaseStore>> {
    let endpoint = at.endpoint("zookeeper")?;
    Ok(Arc::new(
        ZkLeaseStore::connect(endpoint, at.table.margin(), token_of).await?,
    ))
}

/// The ZooKeeper lock in the registry.
pub const KIND: StoreKind = StoreKind {
    id: StoreId::Zookeeper,
    token: "czxid of the lock's ephemeral node",
    about: "a ZooKeeper ephemeral sequential node (Curator's lock recipe), the session timeout as the TTL; the token is the node's czxid",
    has_token: true,
    sound: true,
    freed_on_disconnect: false,
    session_holdings: true,
    one_session: false,
    open: Some(|at| Box::pin(open(at, TokenOf::Czxid))),
};

/// The same lock with the sequence suffix as its token (R1): sound while the parent lives, and
/// back to 0 once ZooKeeper deletes the empty container.
pub const SUFFIX: StoreKind = StoreKind {
    id: StoreId::ZookeeperSuffix,
    token: "sequence suffix of the lock's ephemeral node",
    about: "the ZooKeeper lock with its node's sequence suffix as the token — a counter of the container parent, which starts again at 0 when ZooKeeper deletes the empty parent (R1)",
    has_token: true,
    sound: false,
    freed_on_disconnect: false,
    session_holdings: true,
    one_session: false,
    open: Some(|at| Box::pin(open(at, TokenOf::Suffix))),
};
