//! The looping holder (`--loop-seed`, `lab chaos`): a worker that keeps competing for the lease
//! and, while it holds it, writes parts of one scope — until stdin closes. Its own choices (how
//! long it works, in which order it writes the parts) come from its seed; when it is paused,
//! killed or starved is the orchestrator's business, never its own.
//!
//! One holding: acquire (refused: wait a little and try again) → work → the local-deadline
//! check, which also asks for time enough to write every part before the deadline (so that,
//! unpaused, it never writes late) → for each part: work, write it with the token (and, with
//! `--control-scope`, the same write unfenced to the control scope) → renew → release. There is
//! no check between the parts: a pause there is what a real job's pause looks like, and what the
//! fence is for. Every operation is reported as its invocation and then its completion (`ok`,
//! `fail`, or `info` when an error leaves its outcome unknown — the holder then goes on). With
//! several lease hosts (a Patroni cluster), a lease operation that ended in an error sends it to
//! look for the read-write one again: a failover moves the lease store under it.

use std::io::{self, BufRead as _};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use fencing::lease::{Grant, LeaseStore, SqlLeaseStore};
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::Database;
use holder_protocol::{Event, HolderFlags, OpKind, OpPhase};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::{emit, pg_pool, several_lease_hosts};

/// Runs until stdin closes (then returns `Ok`); an error only when it cannot start.
pub fn run(flags: &HolderFlags, mode: WriteMode, seed: u64) -> Result<(), String> {
    // The orchestrator ends the loop by closing stdin.
    thread::Builder::new()
        .name("stdin".into())
        .spawn(|| {
            let mut line = String::new();
            while io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
                line.clear();
            }
            std::process::exit(0);
        })
        .map_err(|e| format!("failed to start the stdin watcher: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("failed to start a runtime: {e}"))?;
    rt.block_on(async {
        let margin = Duration::from_millis(flags.margin_ms);
        // Chaos runs the lab's own lease (its history checker reads seed004's tables) and the
        // fence of the profile the lab resolved (`--sut`: a seed004 form).
        let sut = crate::sut_of(flags)?;
        let lease = open_lease(flags, margin).await?;
        let resource = Resource::with_profile(connect(flags, Database::Resource).await, sut);
        let mut worker = Worker {
            flags,
            mode,
            lease,
            resource,
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_id: 0,
        };
        loop {
            worker.one_holding().await;
        }
    })
}

/// The run's lease store (`--store`): the lease table on a pool of the lease database, or a
/// lock service at `--store-endpoint` (retried until it answers, as the pool is).
async fn open_lease(flags: &HolderFlags, margin: Duration) -> Result<Arc<dyn LeaseStore>, String> {
    let table = SqlLeaseStore::new(connect(flags, Database::Lease).await, margin);
    let at = fencing::lease::StoreAt {
        table,
        endpoints: flags.store_endpoint.iter().cloned().collect(),
    };
    loop {
        match fencing::stores::open(crate::store_of(flags), &at).await {
            Ok(lease) => return Ok(lease),
            Err(e @ fencing::Error::UnknownStore { .. }) => return Err(e.to_string()),
            // Polling the service's state (does it answer?), as `connect` polls the server's.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A pool to `db`, retried until the server answers: a holder started while the cluster is
/// being crashed and restarted waits for it, as a real worker would.
async fn connect(flags: &HolderFlags, db: Database) -> sqlx::PgPool {
    loop {
        if let Ok(pool) = pg_pool(flags, db).await {
            return pool;
        }
        // Polling the server's state (does it answer?), not waiting a fixed time for it: the
        // holder has no deadline of its own; the orchestrator ends it by closing stdin.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Worker<'a> {
    flags: &'a HolderFlags,
    mode: WriteMode,
    lease: Arc<dyn LeaseStore>,
    resource: Resource,
    rng: ChaCha8Rng,
    next_id: u64,
}

impl Worker<'_> {
    fn ttl(&self) -> Duration {
        Duration::from_millis(self.flags.ttl_ms)
    }

    /// A random stretch of work, up to `max` — the holder's own timeline.
    async fn work(&mut self, max: Duration) {
        let ms = self.rng.random_range(0..=max.as_millis().max(1) as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Reports the invocation of an operation; its id.
    fn invoke(&mut self, f: OpKind, token: i64, scope: &str, part: &str) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.report(id, OpPhase::Invoke, f, token, scope, part);
        id
    }

    fn report(&self, id: u64, phase: OpPhase, f: OpKind, token: i64, scope: &str, part: &str) {
        emit(&Event::Op {
            id,
            phase,
            f,
            token,
            scope: scope.to_owned(),
            part: part.to_owned(),
        });
    }

    /// The completion of a yes/no operation: ok, fail, or info on an error.
    fn complete<E>(
        &self,
        id: u64,
        f: OpKind,
        token: i64,
        scope: &str,
        part: &str,
        outcome: Result<bool, E>,
    ) -> Option<bool> {
        let (phase, known) = match outcome {
            Ok(true) => (OpPhase::Ok, Some(true)),
            Ok(false) => (OpPhase::Fail, Some(false)),
            Err(_) => (OpPhase::Info, None),
        };
        self.report(id, phase, f, token, scope, part);
        known
    }

    async fn one_holding(&mut self) {
        let ttl = self.ttl();
        let id = self.invoke(OpKind::Acquire, 0, "-", "-");
        let grant = match self
            .lease
            .acquire(&self.flags.lease, &self.flags.holder, ttl)
            .await
        {
            Ok(Some(g)) => {
                self.report(id, OpPhase::Ok, OpKind::Acquire, g.token, "-", "-");
                g
            }
            other => {
                let phase = if other.is_ok() {
                    OpPhase::Fail
                } else {
                    OpPhase::Info
                };
                self.report(id, phase, OpKind::Acquire, 0, "-", "-");
                if other.is_err() {
                    self.lease_failed().await;
                }
                // Refused: try again soon (a contender that notices an expired lease quickly).
                self.work(ttl / 10).await;
                return;
            }
        };
        self.work(ttl / 10).await;
        // The check: the deadline by the monotonic clock, with time for every part's work and
        // write still ahead of it. The write phase is most of a holding: a pause that hits the
        // holder is more often there than anywhere else — as in a real job.
        let parts = self.flags.loop_parts.max(1);
        let per_part = ttl / (2 * parts);
        let needed = per_part * parts + Duration::from_millis(100);
        let left = grant
            .local_deadline()
            .saturating_duration_since(Instant::now());
        if left < needed {
            emit(&Event::DeadlinePassed {
                token: grant.token.into(),
                overdue_ms: u64::try_from(needed.saturating_sub(left).as_millis())
                    .unwrap_or(u64::MAX),
            });
            return;
        }
        let mut order: Vec<u32> = (1..=parts).collect();
        for i in (1..order.len()).rev() {
            let j = self.rng.random_range(0..=i);
            order.swap(i, j);
        }
        for n in order {
            self.work(per_part).await;
            let part = format!("p{n}");
            self.write(&grant, &self.flags.scope.clone(), &part, self.mode)
                .await;
            if let Some(control) = self.flags.control_scope.clone() {
                self.write(&grant, &control, &part, WriteMode::Unfenced)
                    .await;
            }
        }
        let mut grant = grant;
        let id = self.invoke(OpKind::Renew, grant.token, "-", "-");
        let renewed = self.lease.renew(&mut grant).await;
        if self
            .complete(id, OpKind::Renew, grant.token, "-", "-", renewed)
            .is_none()
        {
            self.lease_failed().await;
        }
        let id = self.invoke(OpKind::Release, grant.token, "-", "-");
        let released = self.lease.release(&grant).await;
        if self
            .complete(id, OpKind::Release, grant.token, "-", "-", released)
            .is_none()
        {
            self.lease_failed().await;
        }
    }

    /// After a lease operation that ended in an error: with several lease hosts, a new
    /// connection to whichever is read-write now (waiting, as a worker would, while none is —
    /// during an election); with one, the pool reconnects by itself.
    async fn lease_failed(&mut self) {
        if several_lease_hosts(self.flags) {
            let margin = Duration::from_millis(self.flags.margin_ms);
            if let Ok(lease) = open_lease(self.flags, margin).await {
                // The old store's pool closes when its last user drops it.
                self.lease = lease;
            }
        }
    }

    /// One write of `part` with the holding's token; its content names the operation, so that
    /// the resource's own record of it can be told apart from every other write.
    async fn write(&mut self, grant: &Grant, scope: &str, part: &str, mode: WriteMode) {
        let id = self.invoke(OpKind::Write, grant.token, scope, part);
        let content = format!("{}#{id}", self.flags.holder);
        let write = Write {
            scope,
            part,
            content: &content,
            writer: &self.flags.holder,
            token: grant.token,
        };
        let accepted = self.resource.write(&write, mode).await;
        self.complete(id, OpKind::Write, grant.token, scope, part, accepted);
    }
}
