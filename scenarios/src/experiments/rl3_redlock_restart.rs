//! RL3 — Redlock and a server restarted without persistence (antirez's own caveat): A wins the
//! lock on servers 0, 1, 2 (3 and 4 refuse it), server 2 restarts empty, B wins on 2, 3, 4 (0
//! and 1 refuse it): two majorities at once, as the servers' own state shows
//! (`redlock_majorities.rs`).
//! - **Negative control** (`redlock`, no token): A's write after B's is accepted.
//! - **Negative control** (`redlock-fenced`): the restarted server forgot its counter too — B's
//!   token equals A's, and the counter fence accepts A's write: a token kept on servers that
//!   forget is no fence.
//! - **Positive control** (`redlock`, delayed restart — the remedy antirez proposes: a restarted
//!   server stays unavailable for at least the longest TTL): B cannot win a majority while A's
//!   lock is valid.

use anyhow::Context as _;
use fencing::lease::StoreId;
use harness::evidence::Recorder;

use crate::kit::redlock_client::SERVERS;
use crate::kit::redlock_majorities::{self, Fault, DELAYED, FULL};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER,
};

const SPEC: Spec = Spec {
    id: "RL3",
    title: "Redlock and a server restarted without persistence: it forgets the key (and a counter token) and two clients hold a majority at once; a restart delayed by a TTL keeps the second out",
    about: About {
        fault: "a Redis server restarts without persistence",
        shows: "a restarted server forgets the key and the counter token; a restart delayed by a TTL keeps B out",
        paragraph: "The caveat antirez himself gives, on five Redis servers with no \
                    persistence. A reaches only servers 0, 1 and 2 and wins the lock; server 2 \
                    restarts empty; B reaches only 2, 3 and 4 and wins too, so two clients \
                    hold a majority at once. Without a token, A's write after B's is accepted. \
                    With a counter token it is no better: the restarted server forgot its \
                    counter as well, B's token equals A's and the fence accepts A's write, a \
                    second negative control. The remedy antirez proposes, a restarted server \
                    kept unavailable for a TTL, holds: B cannot win a majority while A's lock \
                    is valid.",
    },
    checks: Checks::fixed(2 * FULL + DELAYED),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("RL3 starts its own five Redis servers; it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("redlock", "redlock ×5 (lease)"),
};

pub struct RL3;

const RUNS: [(StoreId, Fault, &str); 3] = [
    (StoreId::Redlock, Fault::Restart, "redlock"),
    (StoreId::RedlockFenced, Fault::Restart, "redlock-fenced"),
    (
        StoreId::Redlock,
        Fault::DelayedRestart,
        "redlock, delayed restart",
    ),
];

impl Scenario for RL3 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if fencing::stores::store_kind(StoreId::Redlock).is_none() {
                crate::testbed::skip_unless_required(rec, "RL3 needs the Redis client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "RL3 needs five Redis servers in containers")
                .await?
            {
                return Ok(());
            }
            let servers = harness::docker::redlock_servers(&bed.run_mark, SERVERS, None)
                .await
                .context("RL3 could not start its five Redis servers")?;
            rec.note(format!(
                "five independent Redis servers, no persistence (save '', appendonly no), each restarted by its container's loop when killed: {}; the lock's TTL 10 s; {}",
                servers.endpoints().join(", "),
                servers.image_note()
            ));
            let outcome = async {
                for (n, (store, fault, label)) in RUNS.into_iter().enumerate() {
                    bed.reset().await?;
                    let lock = format!("{}-rl3-{n}", crate::testbed::LEASE);
                    redlock_majorities::run(bed, rec, &*servers, store, fault, label, &lock)
                        .await?;
                }
                Ok::<_, anyhow::Error>(())
            }
            .await;
            servers.remove().await;
            outcome
        })
    }
}
