//! RL2 — Redlock and a clock that jumps (Kleppmann's own example): A wins the lock on servers
//! 0, 1, 2 (3 and 4 refuse it), server 2's wall clock jumps 11 s forward and A's key expires
//! there early, B wins on 2, 3, 4 (0 and 1 refuse it): two majorities at once, as the servers'
//! own state shows (`redlock_majorities.rs`). Server 2 runs under the lab's clock shim
//! (`clockshim.c`: CLOCK_REALTIME shifted by an offset it reads on every call — Redis expires
//! keys by gettimeofday); the other servers' clocks are the host's.
//! - **Negative control** (`redlock`, no token): A's write after B's is accepted.
//! - **Positive control** (`redlock-fenced`): the counter has no TTL, the jump does not touch
//!   it — B's token is greater than A's and the fence rejects A's write. (Contrast RL3, where
//!   the server forgets the counter too.)

use anyhow::Context as _;
use fencing::lease::StoreId;
use harness::evidence::Recorder;

use crate::kit::redlock_client::SERVERS;
use crate::kit::redlock_majorities::{self, Fault, FULL};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER,
};

const SPEC: Spec = Spec {
    id: "RL2",
    title: "Redlock and a server whose clock jumps forward: its key expires early and two clients hold a majority at once; a counter token, which has no TTL, still orders them",
    about: About {
        fault: "one Redis server's clock jumps 11 s forward",
        shows: "two clients hold a Redlock majority at once; a counter token, with no TTL, still orders them",
        paragraph: "Kleppmann's clock example against Redlock on five Redis servers. A reaches \
                    only servers 0, 1 and 2 and wins the lock there. Server 2's wall clock \
                    then jumps 11 seconds forward, so A's key expires there early; B reaches \
                    only 2, 3 and 4 and wins too. The servers' own state shows two majorities \
                    at once, each client within its validity. Without a token, A's write after \
                    B's is accepted (the negative control). With a counter token, the counter \
                    has no TTL and outlives the jump: B's token is greater and the fence \
                    rejects A. Beside it, antirez's check-and-set rejects A's write once B has \
                    claimed the resource.",
    },
    checks: Checks::fixed(RUNS.len() * FULL),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("RL2 starts its own five Redis servers; it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("redlock", "redlock ×5 (lease)"),
};

pub struct RL2;

/// The server whose clock jumps.
const SHIFTED: usize = redlock_majorities::FAULTY;

const RUNS: [StoreId; 2] = [StoreId::Redlock, StoreId::RedlockFenced];

impl Scenario for RL2 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if fencing::stores::store_kind(StoreId::Redlock).is_none() {
                crate::testbed::skip_unless_required(rec, "RL2 needs the Redis client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(
                    rec,
                    "RL2 needs five Redis servers in containers, one under the clock shim",
                )
                .await?
            {
                return Ok(());
            }
            let servers = harness::docker::redlock_servers(&bed.run_mark, SERVERS, Some(SHIFTED))
                .await
                .context("RL2 could not start its five Redis servers")?;
            rec.note(format!(
                "five independent Redis servers, no persistence: {}; server {SHIFTED} runs under the lab's clock shim (LD_PRELOAD: gettimeofday and CLOCK_REALTIME shifted by an offset the lab writes; Debian's libfaketime recurses under redis-server's jemalloc); the lock's TTL 10 s; {}",
                servers.endpoints().join(", "),
                servers.image_note()
            ));
            let outcome = async {
                for (n, store) in RUNS.into_iter().enumerate() {
                    bed.reset().await?;
                    let lock = format!("{}-rl2-{n}", crate::testbed::LEASE);
                    redlock_majorities::run(
                        bed,
                        rec,
                        &*servers,
                        store,
                        Fault::ClockJump,
                        store.name(),
                        &lock,
                    )
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
