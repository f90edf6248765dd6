//! The sessions that keep a database's own locks (`pg_advisory.rs`, `mariadb_getlock.rs`): a lock
//! of this kind lasts as long as the connection that took it, so the store keeps that connection
//! open, by its holding's handle, on a runtime thread of its own (like a ZooKeeper client's),
//! shared by every store of the process. A holder blocks its own runtime between the steps of its
//! timeline; its sessions still answer, and are frozen with the process like every thread. A
//! holder's renewer, a store of its own on another thread, renews on the session its main thread
//! took.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A locking session: its connection, used by one request at a time.
pub(crate) type Session<C> = Arc<tokio::sync::Mutex<C>>;

/// Every locking session of one store kind in this process, by its holding's handle, and why
/// each one the server ended was lost — so that every thread that asks after it hears the same
/// words (a holder's renewer and its main thread race to find it gone).
#[derive(Debug)]
pub(crate) struct Sessions<C> {
    open: Mutex<HashMap<String, Session<C>>>,
    ended: Mutex<HashMap<String, String>>,
}

impl<C> Default for Sessions<C> {
    fn default() -> Self {
        Sessions {
            open: Mutex::default(),
            ended: Mutex::default(),
        }
    }
}

impl<C> Sessions<C> {
    pub(crate) fn insert(&self, handle: String, conn: C) {
        self.open
            .lock()
            .expect("sessions")
            .insert(handle, Arc::new(tokio::sync::Mutex::new(conn)));
    }

    pub(crate) fn get(&self, handle: &str) -> Option<Session<C>> {
        self.open.lock().expect("sessions").get(handle).cloned()
    }

    pub(crate) fn remove(&self, handle: &str) -> Option<Session<C>> {
        self.open.lock().expect("sessions").remove(handle)
    }

    /// Forgets the session the server ended, keeping `why` for [`Sessions::why_ended`].
    pub(crate) fn ended(&self, handle: &str, why: String) {
        self.remove(handle);
        self.ended
            .lock()
            .expect("sessions")
            .insert(handle.to_owned(), why);
    }

    /// Why the server ended the session `handle`, when a thread of this process found it so.
    pub(crate) fn why_ended(&self, handle: &str) -> Option<String> {
        self.ended.lock().expect("sessions").get(handle).cloned()
    }
}

/// The runtime the locking sessions live on: one worker thread.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lock-session")
            .enable_all()
            .build()
            .expect("a runtime for the locking sessions")
    })
}

/// Runs `work` on the sessions' runtime; `Err` with the runtime's words if it panicked.
pub(crate) async fn on_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> std::result::Result<T, String> {
    runtime().spawn(work).await.map_err(|e| e.to_string())
}

/// [`on_runtime`] for a store's request: `work`'s driver error, or the runtime's, as the store
/// `store`'s failure to do `what`.
pub(crate) async fn on_runtime_for<T: Send + 'static>(
    store: &'static str,
    what: &str,
    work: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>> + Send + 'static,
) -> crate::Result<T> {
    let failed = |detail: String| crate::Error::Service {
        store,
        what: what.to_owned(),
        detail,
    };
    on_runtime(work)
        .await
        .map_err(failed)?
        .map_err(|e| failed(e.to_string()))
}
