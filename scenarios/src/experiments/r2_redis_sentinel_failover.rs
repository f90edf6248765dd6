//! R2 — a token that goes back: Redis's `INCR` on a primary that Sentinel replaces
//! (Redisson #2669). Redis replicates asynchronously: the primary acknowledges a write before any
//! replica has it. A fenced Redis lock (`redis`: `SET NX PX` and `INCR` of a counter in one
//! script) whose primary is lost before the grant reached the replica hands the same token out
//! again once Sentinel promotes the replica.
//!
//! Three runs, each on a fresh primary + replica + three Sentinels (`docker::RedisFailover`):
//! 1. **Negative control** (`redis`): the replica cut off from the primary (an iptables rule in
//!    its namespace); A takes the lock — token N, acknowledged by the primary alone (the
//!    replica's counter still at N−1) — and waits at its write point; the primary is lost;
//!    Sentinel promotes the replica (its own log lines); B takes the lock there: token N again.
//!    B writes; then A writes with its token: accepted — the fence cannot tell them apart — and
//!    the token-regression check names the token acknowledged twice.
//! 2. **Positive control** (`redis-wait`: `WAIT 1 500` before the token is used): A's grant is
//!    acknowledged by the replica; the primary is lost and the replica promoted with A's token
//!    in its counter; B's token is greater and A's stale write is rejected. B takes its lock
//!    with `redis` — the promoted primary has no replica left, and `WAIT` would refuse every
//!    grant until one is back: the remedy's cost.
//! 3. **When `WAIT` times out** (`redis-wait`, the replica cut off): A's acquire answers an error
//!    and no token — the key deleted again; the primary's counter moved (a gap, allowed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::{LeaseStore, StoreAt, StoreId};
use fencing::resource::WriteMode;
use harness::docker::RedisFailover;
use harness::evidence::Recorder;
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::kit::paused_holder::{part_line, step, A_CONTENT, B_CONTENT};
use crate::kit::regression::{self, GrantSeen, Kind};
use crate::testbed::{shown, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "R2",
    title: "a token that goes back: Redis's INCR acknowledged by the primary alone, the primary lost, Sentinel promotes the replica — the same token granted twice; WAIT 1 before use keeps it",
    about: About {
        fault: "the Redis primary lost before its replica had the grant",
        shows: "Sentinel's promoted replica grants the same token again; WAIT 1 before use prevents it",
        paragraph: "A fenced Redis lock takes its token from an INCR on the primary, and Redis \
                    replicates asynchronously. Each run starts a fresh primary, replica and \
                    three Sentinels. With the replica cut off, A takes the lock and its token \
                    is acknowledged by the primary alone; the primary is lost, Sentinel \
                    promotes the replica, and B is granted the same token there: A's stale \
                    write is accepted after B's, the negative control. With WAIT 1 before the \
                    token is used, A's grant is on the replica before the loss, so B's token \
                    is greater and A is rejected. A third run shows the price: with the \
                    replica cut off, WAIT times out and A gets no token.",
    },
    checks: Checks::fixed(NEGATIVE + POSITIVE + TIMED_OUT),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("R2 starts its own Redis primary, replica and Sentinels; it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("its holders take their lease from a lock service (--store-endpoint); a holder of yours takes its lease from PostgreSQL"),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("redis", "sentinel (lease)"),
};

pub struct R2;

/// How long the group may take to be whole, and the Sentinels to fail over.
const GROUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Checks of each run.
const NEGATIVE: usize = 8;
const POSITIVE: usize = 8;
const TIMED_OUT: usize = 3;

impl Scenario for R2 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if let Err(e) = fencing::stores::store_kind(StoreId::RedisWait).context(
                "this build left the Redis client out (build with --features lab/lock-services)",
            ) {
                crate::testbed::skip_unless_required(
                    rec,
                    format!("R2 needs the Redis lock stores: {e:#}"),
                )?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "R2 needs Redis with Sentinel in containers")
                .await?
            {
                return Ok(());
            }
            for run in [Run::Negative, Run::Positive, Run::TimedOut] {
                let mut group = harness::docker::redis_failover(&bed.run_mark)
                    .await
                    .with_context(|| {
                        format!("R2 could not start Redis with Sentinel ({run:?} run)")
                    })?;
                let outcome = one_run(bed, rec, &mut *group, run).await;
                // Every path: the group goes (a holder still running is ended by the run).
                group.remove().await;
                outcome?;
            }
            Ok(())
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Negative,
    Positive,
    TimedOut,
}

impl Run {
    fn label(self) -> &'static str {
        match self {
            Run::Negative => "redis, replica cut off",
            Run::Positive => "redis-wait",
            Run::TimedOut => "redis-wait, replica cut off",
        }
    }
}

/// A lease client of store `store` on the Redis server at `endpoint`, for the lab's own reads.
async fn client(
    bed: &Testbed,
    store: StoreId,
    endpoint: &str,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let at = StoreAt {
        table: bed.lease_table.clone(),
        endpoints: vec![endpoint.to_owned()],
    };
    Ok(fencing::stores::open(store, &at).await?)
}

/// The token counter of the lock on the server at `host` (`GET`), as redis-cli shows it.
async fn counter(group: &dyn RedisFailover, host: std::net::IpAddr) -> String {
    group
        .cli(&format!("-h {host} GET fencing-lab:token:{LEASE}"))
        .await
        .map_or_else(|e| format!("(no answer: {e:#})"), |v| v.trim().to_owned())
}

/// WAIT timed out (the replica cut off): A's acquire answers an error, A exits without
/// writing, and the lock's key is deleted again on the primary.
async fn wait_timed_out(
    rec: &mut Recorder,
    a: &mut Holder,
    group: &mut dyn RedisFailover,
    acquired: &Event,
    label: &str,
) -> anyhow::Result<()> {
    let (primary_ip, replica_ip) = group.ips();
    let said = acquired.to_string();
    rec.check_that(
        format!("[{label}] WAIT times out: A's acquire answers an error, never the token"),
        matches!(acquired, Event::Error { message } if message.contains("WAIT 1 500 answered 0")),
        &said,
    );
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        format!("[{label}] A exits without having written"),
        &describe(Some(exit::FAILURE)),
        &describe(Some(code)),
    );
    let key = group
        .cli(&format!("-h {primary_ip} EXISTS fencing-lab:lock:{LEASE}"))
        .await?;
    let moved = counter(group, primary_ip).await;
    rec.check_that(
    format!("[{label}] the lock's key is deleted again on the primary: nobody holds a grant no replica acknowledged"),
    key.trim() == "0",
    format_args!(
        "EXISTS = {}; the primary's counter moved to {moved}, the replica's {} (a gap, allowed)",
        key.trim(),
        counter(group, replica_ip).await
    ),
);
    Ok(())
}

/// The primary lost (its container removed, as a crashed host) and the replica promoted by the
/// Sentinels; on the positive run, A's replicated lock waited out on the new primary's clock.
async fn lose_the_primary(
    bed: &Testbed,
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    run: Run,
) -> anyhow::Result<()> {
    let label = run.label();
    let (primary_ip, replica_ip) = group.ips();
    group.lose_primary().await?;
    let lost_at = Instant::now();
    rec.step(
        harness::evidence::Mark::Info,
        "lab",
        "primary lost",
        None,
        format!("{primary_ip}'s container removed"),
        None,
    );
    rec.note(format!(
        "[{label}] the primary {primary_ip} is lost (its container removed, as a crashed host)"
    ));
    let promoted = harness::wait::until_every(
        "the Sentinels promoting the replica",
        GROUP_TIMEOUT,
        Duration::from_millis(100),
        || async { Ok::<_, std::io::Error>(group.master_now().await == Some(replica_ip)) },
    )
    .await;
    let log = group.failover_log().await;
    rec.check_that(
        format!("[{label}] Sentinel promotes the replica (its log)"),
        promoted.is_ok(),
        format_args!(
            "{} ms after the primary was lost: {}",
            lost_at.elapsed().as_millis(),
            log.join(" · ")
        ),
    );
    let on_new = client(bed, StoreId::Redis, &group.replica_endpoint()).await?;
    if run == Run::Positive {
        // The replica has A's key too: B waits for it to expire by the new primary's clock.
        let waited = harness::wait::until(
            "A's lock expired on the promoted replica",
            bed.params().wait_timeout,
            || on_new.is_free(LEASE),
        )
        .await?;
        rec.note(format!(
            "[{label}] A's lock was replicated with its token; B waited {} ms more for it to expire on the promoted replica (its clock)",
            waited.as_millis()
        ));
    }
    Ok(())
}

/// B acquires on the promoted replica, writes (accepted), renews, releases and exits: when its
/// acquire was sent and answered, and its token.
async fn b_writes_on_the_promoted_replica(
    bed: &Testbed,
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    label: &str,
) -> anyhow::Result<(Instant, Instant, i64)> {
    let b_sent = Instant::now();
    let mut b = Holder::spawn(&spec_at(
        bed,
        HOLDER_B,
        B_CONTENT,
        StoreId::Redis,
        group.replica_endpoint(),
        true,
    ))
    .await?;
    let (b_at, acquired) = b.next("B's acquire", EVENT_TIMEOUT).await?;
    step(
        bed,
        rec,
        b_at,
        "B",
        "acquire on the promoted replica",
        &acquired,
    )
    .await;
    let b_token = b.acquired_token(&acquired)?;
    let (_, ready) = b.next("B at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(b.unexpected("AT_WRITE_POINT", &ready));
    }
    b.send(Request::Go).await?;
    let (at, write) = b.next("B's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "B", "write", &write).await;
    rec.check(
        format!("[{label}] B's write is accepted"),
        &format!("WRITE accepted=true token={b_token}"),
        &write.to_string(),
    );
    for what in ["B's renew after its write", "B's release"] {
        let (at, event) = b.next(what, EVENT_TIMEOUT).await?;
        step(bed, rec, at, "B", what, &event).await;
    }
    let code = b.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        format!("[{label}] B exits having written"),
        &describe(Some(exit::WROTE)),
        &describe(Some(code)),
    );
    Ok((b_sent, b_at, b_token))
}

/// The run's verdicts: with WAIT, B's token greater and A's stale write rejected; without (the
/// negative control), A's token granted again and the stale write accepted — and the
/// token-regression check catching it.
fn judge(
    rec: &mut Recorder,
    run: Run,
    grants: &[GrantSeen],
    (a_token, b_token): (i64, i64),
    accepted: bool,
    summary: &Option<fencing::resource::Part>,
) {
    let label = run.label();
    let found = regression::regressions_with_control(rec, grants);
    let shown_found = regression::shown(grants, &found);
    let stale_kept = summary
        .as_ref()
        .is_some_and(|p| p.writer == HOLDER_A && p.content == A_CONTENT);
    if run == Run::Negative {
        rec.check_that(
            format!(
                "[{label}] negative control exposes: the promoted replica grants A's token again"
            ),
            b_token == a_token,
            format_args!("A {a_token}, B {b_token}"),
        );
        rec.check_that(
            format!("[{label}] negative control exposes: A's stale write is accepted after B's"),
            accepted && stale_kept,
            format_args!(
                "WRITE accepted={accepted} token={a_token}; final summary {}",
                part_line(summary)
            ),
        );
        rec.check_that(
            format!("[{label}] the token-regression check catches it"),
            found.iter().any(|r| r.kind == Kind::AcknowledgedTwice),
            shown_found,
        );
    } else {
        rec.check_that(
            format!("[{label}] B's token is greater than A's: A's grant survived the failover"),
            b_token > a_token,
            format_args!("A {a_token}, B {b_token}"),
        );
        rec.check_that(
            format!("[{label}] A's stale write is rejected by the resource's fence"),
            !accepted && !stale_kept,
            format_args!(
                "WRITE accepted={accepted} token={a_token}; final summary {}",
                part_line(summary)
            ),
        );
        rec.check_that(
            format!("[{label}] the token-regression check finds no token gone back"),
            found.is_empty(),
            shown_found,
        );
    }
}

/// A holder of the store `store` at `endpoint`, fenced.
fn spec_at(
    bed: &Testbed,
    holder: &str,
    content: &str,
    store: StoreId,
    endpoint: String,
    release: bool,
) -> harness::holder::HolderSpec {
    let mut spec = bed.holder_spec(holder, content, WriteMode::Fenced, release);
    spec.flags.store = store.name().into();
    spec.flags.store_endpoint = Some(endpoint);
    spec
}

/// Waits until the replica is linked and every Sentinel knows the group, and says what it is.
async fn the_group_formed(
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    label: &str,
) -> anyhow::Result<()> {
    let whole = harness::wait::until_every(
        "the replica linked and every Sentinel knowing the group",
        GROUP_TIMEOUT,
        Duration::from_millis(200),
        || async { group.whole().await.map_err(std::io::Error::other) },
    )
    .await;
    if let Err(e) = whole {
        bail!("[{label}] the Sentinel group did not form: {e}");
    }
    rec.note(format!(
        "[{label}] {} — primary {}, replica {}, three Sentinels (down-after-milliseconds 500, quorum 2); {}",
        group.version(),
        group.primary_endpoint(),
        group.replica_endpoint(),
        group.image_note()
    ));
    Ok(())
}

/// A first holding on a fresh primary, taken and released, the counter at 1 on both servers;
/// then, but for the positive run, the replica cut off from the primary.
async fn a_first_holding_replicated(
    bed: &Testbed,
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    run: Run,
) -> anyhow::Result<()> {
    let label = run.label();
    let (_, replica_ip) = group.ips();
    let on_primary = client(bed, StoreId::Redis, &group.primary_endpoint()).await?;
    // A first holding, taken and released: the counter at 1 on both servers.
    let first = on_primary
        .acquire(LEASE, "holder-c", bed.case().ttl)
        .await?
        .context("the first lock on a fresh primary was refused")?;
    on_primary.release(&first).await?;
    harness::wait::until("the replica having the counter", GROUP_TIMEOUT, || async {
        Ok::<_, std::io::Error>(counter(group, replica_ip).await == first.token.to_string())
    })
    .await?;
    if run != Run::Positive {
        let rule = group.cut_replica().await?;
        rec.note(format!(
            "[{label}] the replica is cut off from the primary (in its network namespace: {rule})"
        ));
    }
    Ok(())
}

/// Where A's token is once A stands at its write point: on the primary alone (without WAIT),
/// or on the replica too before A may use it.
async fn where_the_token_is(
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    run: Run,
    a_token: i64,
) {
    let label = run.label();
    let (primary_ip, replica_ip) = group.ips();
    let (on_p, on_r) = (
        counter(group, primary_ip).await,
        counter(group, replica_ip).await,
    );
    if run == Run::Negative {
        rec.check_that(
            format!("[{label}] A's token {a_token} is acknowledged by the primary alone"),
            on_p == a_token.to_string() && on_r != a_token.to_string(),
            format_args!("counter on the primary {on_p}, on the replica {on_r}"),
        );
    } else {
        rec.check_that(
            format!(
                "[{label}] A's token {a_token} is on the replica before A may use it (WAIT 1 500)"
            ),
            on_r == a_token.to_string(),
            format_args!("counter on the primary {on_p}, on the replica {on_r}"),
        );
    }
}

async fn one_run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    group: &mut dyn RedisFailover,
    run: Run,
) -> anyhow::Result<()> {
    let label = run.label();
    the_group_formed(rec, group, label).await?;

    let a_store = if run == Run::Negative {
        StoreId::Redis
    } else {
        StoreId::RedisWait
    };
    a_first_holding_replicated(bed, rec, group, run).await?;

    let started = Instant::now();
    let ms = |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    let mut a = Holder::spawn(&spec_at(
        bed,
        HOLDER_A,
        A_CONTENT,
        a_store,
        group.primary_endpoint(),
        false,
    ))
    .await?;
    let (a_at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, a_at, "A", "acquire", &acquired).await;
    if run == Run::TimedOut {
        return wait_timed_out(rec, &mut a, group, &acquired, label).await;
    }

    let a_token = a.acquired_token(&acquired)?;
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &ready).await;
    where_the_token_is(rec, group, run, a_token).await;

    lose_the_primary(bed, rec, group, run).await?;

    let (b_sent, b_at, b_token) = b_writes_on_the_promoted_replica(bed, rec, group, label).await?;

    a.send(Request::Go).await?;
    let (at, write) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (its primary gone)", &write).await;
    let Event::Write { accepted, .. } = write else {
        bail!(a.unexpected("WRITE …", &write));
    };
    // A's renewals go to a primary that is gone: it is ended here, its verdict is in.
    a.crash().await;

    let summary = bed.resource.part(SCOPE, SUMMARY).await?;
    let floor = bed.resource.floor(SCOPE).await?;
    rec.note(format!(
        "[{label}] A's token {a_token}, B's {b_token}; A's stale write accepted={accepted}; final summary = {}; fence_floor={}",
        part_line(&summary),
        shown(floor)
    ));
    let grants = [
        GrantSeen::acknowledged(
            HOLDER_A,
            a_token,
            0.0,
            ms(a_at),
            format!(
                "{HOLDER_A} ACQUIRED token={a_token} from the primary at {:.0} ms",
                ms(a_at)
            ),
        ),
        GrantSeen::acknowledged(
            HOLDER_B,
            b_token,
            ms(b_sent),
            ms(b_at),
            format!(
                "{HOLDER_B} ACQUIRED token={b_token} from the promoted replica at {:.0} ms",
                ms(b_at)
            ),
        ),
    ];
    judge(rec, run, &grants, (a_token, b_token), accepted, &summary);

    Ok(())
}
