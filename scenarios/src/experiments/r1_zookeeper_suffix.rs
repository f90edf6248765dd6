//! R1 — a token that goes back: ZooKeeper's sequence suffix. Curator's lock makes its
//! parent a **container node**, which ZooKeeper deletes once its last child is gone
//! (CURATOR-222); the sequential suffix is a counter of that parent, so when the parent is made
//! anew it starts again at 0. A fence fed by the suffix sees the same token twice.
//!
//! The paused-holder timeline, run twice on one ZooKeeper server, with the lab's fenced resource:
//! A (a holder process) takes the lock — node `lock-0000000000` — and is frozen (SIGSTOP) at its
//! write point; ZooKeeper expires its session, deletes its node, then deletes the empty
//! container (the server's log says both); B (another process) takes the lock in the parent made
//! anew, writes, releases; A is thawed and writes with its old token.
//! - **Negative control** (`--lease-store zookeeper-suffix`, the suffix as the token): B's token
//!   is A's again, the fence cannot tell them apart, A's stale write is accepted over B's, and
//!   the token-regression check names the token acknowledged twice.
//! - **Positive control** (`--lease-store zookeeper`, the node's czxid as the token): B's czxid is
//!   greater, A's stale write is rejected, the regression check finds nothing.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use fencing::resource::WriteMode;
use harness::evidence::Recorder;
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::kit::paused_holder::{freeze_and_show, list, part_line, step, A_CONTENT, B_CONTENT};
use crate::kit::regression::{self, GrantSeen, Kind};
use crate::testbed::{shown, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "R1",
    title: "a token that goes back: ZooKeeper deletes the lock's empty container parent and its sequence suffix starts again at 0 (the suffix as the token: the same token twice; the czxid: holds)",
    about: About {
        fault: "ZooKeeper deletes the lock's parent; its suffix restarts",
        shows: "a sequence suffix used as the token repeats once the parent goes; the czxid keeps rising",
        paragraph: "Curator's ZooKeeper lock keeps its nodes under a container parent, which \
                    ZooKeeper deletes once its last child is gone; a child's sequence suffix \
                    counts from 0 again in the parent made anew. A takes the lock, node 0, and \
                    is frozen at its write point; ZooKeeper expires its session and deletes \
                    its node, then the empty parent; B takes the lock in a new parent, writes \
                    and releases; A is thawed and writes with its old token. With the suffix \
                    as the token, B's token is A's again and A's stale write is accepted (the \
                    negative control); with the czxid as the token, B's is greater and A is \
                    rejected. A token-regression check judges both runs.",
    },
    checks: Checks::fixed(2 * PER_RUN),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("R1 chooses its own stores (zookeeper-suffix, then zookeeper); it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    // A's expiry and the container's deletion are timed by ZooKeeper's clock; a loaded
    // machine stretches them, it does not change the verdict — but two experiments on one
    // ZooKeeper server would share its counter.
    runs_alone: false,
    holder_points: Err("its holders take their lease from a lock service (--store-endpoint); a holder of yours takes its lease from PostgreSQL"),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("zookeeper", "zookeeper (lease)"),
};

pub struct R1;

/// The two stores R1 runs, the flawed one first: (store, what its token is, whether a fence fed
/// by it must hold).
const RUNS: [(StoreId, &str, bool); 2] = [
    (StoreId::ZookeeperSuffix, "the sequence suffix", false),
    (StoreId::Zookeeper, "the czxid", true),
];

/// The lock of each run, a parent of its own: the first run's parent, deleted once B released,
/// must not be the second's.
fn lock_of(store: StoreId) -> String {
    format!("{LEASE}-{store}")
}

/// How long ZooKeeper may take to delete the empty container (its check runs every 200 ms here).
const CONTAINER_DELETED_WITHIN: Duration = Duration::from_secs(5);

/// Checks per run of the timeline.
const PER_RUN: usize = 11;

impl Scenario for R1 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if RUNS
                .iter()
                .any(|(store, ..)| fencing::stores::store_kind(*store).is_none())
            {
                crate::testbed::skip_unless_required(rec, "R1 needs the ZooKeeper client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "R1 needs the ZooKeeper lock service in a container")
                .await?
            {
                return Ok(());
            }
            let outcome = async {
                for (store, token, sound) in RUNS {
                    bed.use_store(store).await.with_context(|| {
                        format!(
                            "R1 could not start the ZooKeeper lock service (--lease-store {store})"
                        )
                    })?;
                    bed.reset().await?;
                    rec.note(format!(
                        "--lease-store {store}: {token} is the token; {}",
                        bed.describe_service().unwrap_or_default()
                    ));
                    one_run(bed, rec, store, sound).await?;
                }
                Ok::<_, anyhow::Error>(())
            }
            .await;
            // Every path: the lease table is the store again for the experiments after this one.
            let back = bed.use_store(StoreId::Postgres).await;
            outcome?;
            back
        })
    }
}

/// A frozen (its session's heartbeats stop) until ZooKeeper expires its session, deletes its
/// node and then the lock's empty container parent.
async fn a_frozen_until_the_parent_goes(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    store: StoreId,
    lock: &str,
) -> anyhow::Result<()> {
    // Counted while A's node keeps the parent alive: the server may delete the parent within
    // 200 ms of A's node going, before the lab has seen the node go.
    let parent = format!("Attempting to delete candidate container: /fencing-lab/{lock}");
    let service = bed
        .service
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the ZooKeeper service is not running"))?;
    let deletions_before = service.log().await.matches(&parent).count();
    let frozen_at = freeze_and_show(
        bed,
        rec,
        a,
        &format!(" [{store}]"),
        &format!("[{store}] A's renewer thread is frozen with it: its session's heartbeats stop"),
    )
    .await?;
    let lease = &bed.lease;
    harness::wait::until(
        "A's node deleted by ZooKeeper (its session expired)",
        bed.params().wait_timeout,
        || lease.is_free(lock),
    )
    .await?;
    rec.note(format!(
        "[{store}] A's session expired and its node went {} ms after A was frozen (ZooKeeper's clock)",
        frozen_at.elapsed().as_millis()
    ));
    // ZooKeeper's container manager deletes the empty parent on its next check.
    let deleted = harness::wait::until_every(
        "ZooKeeper deleting the lock's empty container parent",
        CONTAINER_DELETED_WITHIN,
        Duration::from_millis(100),
        || async {
            Ok::<_, std::io::Error>(service.log().await.matches(&parent).count() > deletions_before)
        },
    )
    .await;
    rec.check_that(
        format!("[{store}] ZooKeeper deletes the lock's container parent once A's node is gone (the server's log)"),
        deleted.is_ok(),
        match &deleted {
            Ok(took) => format!("{parent} — {} ms after A's lease expired", took.as_millis()),
            Err(e) => e.to_string(),
        },
    );
    Ok(())
}

/// B acquires the lock made anew, writes (accepted), renews, releases and exits: when its
/// acquire was sent and answered, and its token.
async fn b_writes(
    bed: &mut Testbed,
    rec: &mut Recorder,
    store: StoreId,
    lock: &str,
) -> anyhow::Result<(Instant, Instant, i64)> {
    let b_sent = Instant::now();
    let mut b = Holder::spawn(&spec_on(bed, lock, HOLDER_B, B_CONTENT, true)).await?;
    let (b_at, acquired) = b.next("B's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, b_at, "B", "acquire", &acquired).await;
    let b_token = b.acquired_token(&acquired)?;
    let (_, ready) = b.next("B at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(b.unexpected("AT_WRITE_POINT", &ready));
    }
    b.send(Request::Go).await?;
    let (at, write) = b.next("B's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "B", "write", &write).await;
    rec.check(
        format!("[{store}] B's write is accepted"),
        &format!("WRITE accepted=true token={b_token}"),
        &write.to_string(),
    );
    for what in ["B's renew after its write", "B's release"] {
        let (at, event) = b.next(what, EVENT_TIMEOUT).await?;
        step(bed, rec, at, "B", what, &event).await;
    }
    let code = b.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        format!("[{store}] B exits having written"),
        &describe(Some(exit::WROTE)),
        &describe(Some(code)),
    );
    Ok((b_sent, b_at, b_token))
}

/// The run's verdicts: on the czxid, B's token greater and A's stale write rejected; on the
/// suffix (the negative control), A's token granted again and the stale write accepted — and
/// the token-regression check catching it.
fn judge(
    rec: &mut Recorder,
    store: StoreId,
    sound: bool,
    grants: &[GrantSeen],
    (a_token, b_token): (i64, i64),
    accepted: bool,
    summary: &Option<fencing::resource::Part>,
) {
    let found = regression::regressions_with_control(rec, grants);
    let shown_found = regression::shown(grants, &found);
    let stale_kept = summary
        .as_ref()
        .is_some_and(|p| p.writer == HOLDER_A && p.content == A_CONTENT);
    if sound {
        rec.check_that(
            format!("[{store}] B's token is greater than A's: the czxid counts every write to ZooKeeper, not the parent's children"),
            b_token > a_token,
            format_args!("A {a_token}, B {b_token}"),
        );
        rec.check_that(
            format!("[{store}] A's stale write is rejected by the resource's fence"),
            !accepted,
            format_args!("WRITE accepted={accepted} token={a_token}"),
        );
        rec.check_that(
            format!("[{store}] the final summary is B's"),
            !stale_kept,
            part_line(summary),
        );
        rec.check_that(
            format!("[{store}] the token-regression check finds no token gone back"),
            found.is_empty(),
            shown_found,
        );
    } else {
        rec.check_that(
            format!("[{store}] negative control exposes: the parent made anew, B is granted A's suffix again"),
            b_token <= a_token,
            format_args!("A {a_token}, B {b_token}"),
        );
        rec.check_that(
            format!("[{store}] negative control exposes: the fence cannot tell A from B, A's stale write is accepted"),
            accepted,
            format_args!("WRITE accepted={accepted} token={a_token}"),
        );
        rec.check_that(
            format!("[{store}] negative control exposes: A's stale result overwrote B's"),
            stale_kept,
            part_line(summary),
        );
        rec.check_that(
            format!("[{store}] the token-regression check catches it"),
            found
                .iter()
                .any(|r| matches!(r.kind, Kind::AcknowledgedTwice | Kind::Backwards)),
            shown_found,
        );
    }
}

/// A holder of `lock`, fenced.
fn spec_on(
    bed: &Testbed,
    lock: &str,
    holder: &str,
    content: &str,
    release: bool,
) -> harness::holder::HolderSpec {
    let mut spec = bed.holder_spec(holder, content, WriteMode::Fenced, release);
    spec.flags.lease = lock.to_owned();
    spec
}

/// A takes the lock: its node is the parent's first child; it waits at its write point. A,
/// when its acquire was sent and answered, and its token.
async fn a_takes_the_first_node(
    bed: &mut Testbed,
    rec: &mut Recorder,
    store: StoreId,
    lock: &str,
) -> anyhow::Result<(Holder, Instant, Instant, i64)> {
    let a_sent = Instant::now();
    let mut a = Holder::spawn(&spec_on(bed, lock, HOLDER_A, A_CONTENT, false)).await?;
    let (a_at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, a_at, "A", "acquire", &acquired).await;
    let a_token = a.acquired_token(&acquired)?;
    let holding = bed.lease.inspect(lock).await?;
    rec.check_that(
        format!(
            "[{store}] A (pid {}) acquires the lock: its node is the parent's first child",
            a.pid()
        ),
        holding
            .as_ref()
            .is_some_and(|h| h.expires_at.contains("sequence 0;")),
        format_args!(
            "token={a_token}; {}",
            shown(holding.as_ref().map(|h| h.expires_at.clone()))
        ),
    );
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &ready).await;
    Ok((a, a_sent, a_at, a_token))
}

/// One run of the timeline on the store `store` (the lab's lease store now); `sound`: whether a
/// fence fed by its token must hold.
async fn one_run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    store: StoreId,
    sound: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let ms = |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    let lock = lock_of(store);
    let (mut a, a_sent, a_at, a_token) = a_takes_the_first_node(bed, rec, store, &lock).await?;

    a_frozen_until_the_parent_goes(bed, rec, &mut a, store, &lock).await?;

    let (b_sent, b_at, b_token) = b_writes(bed, rec, store, &lock).await?;

    a.send(Request::Go).await?;
    let thawed = a.thaw().await?;
    crate::kit::paused_holder::lab_step(
        bed,
        rec,
        harness::evidence::Mark::Thawed,
        "A",
        "SIGCONT",
        list(&thawed),
    )
    .await;
    let (at, write) = a.next("A's write after it resumed", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (after resuming)", &write).await;
    let Event::Write { accepted, .. } = write else {
        bail!(a.unexpected("WRITE …", &write));
    };
    let _ = a.next("A's renew after its write", EVENT_TIMEOUT).await?;
    let _ = a.exit_code(EVENT_TIMEOUT).await?;

    let summary = bed.resource.part(SCOPE, SUMMARY).await?;
    let floor = bed.resource.floor(SCOPE).await?;
    rec.note(format!(
        "[{store}] A's token {a_token}, B's token {b_token}; A's stale write accepted={accepted}; final summary = {}; fence_floor={}",
        part_line(&summary),
        shown(floor)
    ));

    // The token-regression check over the two grants, in real-time order.
    let grants = [
        GrantSeen::acknowledged(
            HOLDER_A,
            a_token,
            ms(a_sent),
            ms(a_at),
            format!("{HOLDER_A} ACQUIRED token={a_token} at {:.0} ms", ms(a_at)),
        ),
        GrantSeen::acknowledged(
            HOLDER_B,
            b_token,
            ms(b_sent),
            ms(b_at),
            format!("{HOLDER_B} ACQUIRED token={b_token} at {:.0} ms", ms(b_at)),
        ),
    ];
    judge(
        rec,
        store,
        sound,
        &grants,
        (a_token, b_token),
        accepted,
        &summary,
    );
    Ok(())
}
