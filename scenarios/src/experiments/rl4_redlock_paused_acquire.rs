//! RL4 — Redlock's validity, exercised: the client paused *during* its acquire round. Redlock
//! (`lease/redlock.rs`, as published) over five independent Redis servers; two of them stalled (a
//! DROP rule: every packet a client sends them is dropped, so each round waits out the client's
//! per-server timeout for their answers). A (a holder process) starts its round; as soon as the
//! other three hold A's value — a majority has answered — the lab freezes A (SIGSTOP), keeps it
//! frozen past the lock's TTL while A's keys expire by each server's clock, and lets B win the
//! lock. Then A is thawed and its round ends.
//! 1. **Redlock as published** (`redlock`): A computes its validity — the TTL less the round's
//!    time less the drift allowance — finds it spent, undoes its round and does not use the lock
//!    (REFUSED); B's holding is untouched.
//! 2. **Negative control** (`redlock-unchecked`, the validity check removed: a majority is a
//!    grant however long the round took): A takes the lock and writes while B holds it — two
//!    holders by the lab's clock.
//! 3. **A bare majority**: with the two servers still stalled, the lab's own client takes, extends
//!    and releases a lock on the three that answer — exactly a quorum acknowledges each.
//!
//! RL1–RL3 freeze a client after it holds the lock; this is the one delay the
//! validity exists for.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use fencing::resource::WriteMode;
use harness::docker::RedlockServers;
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::kit::paused_holder::{lab_step, list, part_line, step, A_CONTENT, B_CONTENT};
use crate::kit::redlock_client::{extend_a_third_later, redlock_client, SERVERS};
use crate::testbed::{HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "RL4",
    title: "Redlock's validity: the client frozen during its acquire round, after a majority answered, past the TTL — as published it finds its validity spent and does not use the lock; with the check removed it writes while another client holds it",
    about: About {
        fault: "the Redlock client frozen (SIGSTOP) inside its acquire round, after a majority answered",
        shows: "Redlock's validity check stops a client whose round outlasted the TTL; without it two clients hold the lock",
        paragraph: "Redlock counts the time its acquire round took: a majority that answered \
                    is a grant only if the TTL, less the round's time and a drift allowance, \
                    is still positive. Five Redis servers, two of them stalled so that each \
                    round waits for their answers. A's round has its majority from the other \
                    three when the lab freezes A, for longer than the lock's TTL; A's keys \
                    expire and B wins the lock. Thawed, A as published finds its validity \
                    spent and gives the lock up; with the validity check removed (the \
                    negative control) A takes the lock anyway and writes while B holds it. \
                    Last, the three answering servers alone grant, extend and release a lock: \
                    a bare majority is a quorum.",
    },
    checks: Checks::fixed(RUNS.len() * PER_RUN + BARE_MAJORITY),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None(
        "RL4 starts its own five Redis servers; it runs with --lease-store single",
    ),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("its holders take their lease from Redlock's servers (--store-endpoint); a holder of yours takes its lease from PostgreSQL"),
    fault_moments: &["/proc shows state T"],
    lanes: StoreLanes::Lease("redlock", "redlock ×5 (lease)"),
};

pub struct RL4;

/// The runs: the store, and whether it checks the validity.
const RUNS: [(StoreId, bool); 2] = [(StoreId::Redlock, true), (StoreId::RedlockUnchecked, false)];

/// Checks of each run.
const PER_RUN: usize = 6;

/// The check of a round that a bare majority answers ([`bare_majority`]).
const BARE_MAJORITY: usize = 1;

/// The servers that answer (a majority); the others are stalled.
const ANSWERING: usize = 3;

/// How often the lab looks for A's value on the answering servers while A's round runs (it
/// waits out the stalled servers' timeout, 100 ms).
const WATCH_EVERY: Duration = Duration::from_millis(1);

/// How many rounds the lab starts before it gives up catching one: a round the lab could not
/// freeze in time (it ended first) is started again.
const ATTEMPTS: usize = 5;

/// How long the lab's look at the answering servers waits for each to answer (asking again after
/// the client's per-server timeout): they are not stalled, only a loaded machine delays them.
#[cfg(feature = "lock-services")]
const LOOK_PATIENCE: Duration = Duration::from_secs(5);

impl Scenario for RL4 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if fencing::stores::store_kind(StoreId::RedlockUnchecked).is_none() {
                crate::testbed::skip_unless_required(rec, "RL4 needs the Redis client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "RL4 needs five Redis servers in containers")
                .await?
            {
                return Ok(());
            }
            let servers = harness::docker::redlock_servers(&bed.run_mark, SERVERS, None)
                .await
                .context("RL4 could not start its five Redis servers")?;
            let outcome = async {
                for i in ANSWERING..SERVERS {
                    servers.stall(i).await?;
                }
                rec.note(format!(
                    "five independent Redis servers, no persistence: {}; servers {} stalled (every packet a client sends them dropped: each round waits out the client's 100 ms per-server timeout for them); {}",
                    servers.endpoints().join(", "),
                    (ANSWERING..SERVERS).map(|i| i.to_string()).collect::<Vec<_>>().join(" and "),
                    servers.image_note()
                ));
                for (n, (store, checked)) in RUNS.into_iter().enumerate() {
                    bed.reset().await?;
                    one_run(bed, rec, &*servers, store, checked, n).await?;
                }
                bed.reset().await?;
                bare_majority(bed, rec, &*servers).await?;
                anyhow::Ok(())
            }
            .await;
            servers.remove().await;
            outcome
        })
    }
}

/// A, frozen inside its acquire round: the answering servers hold its value, it reported
/// nothing, /proc shows state T. When it was frozen.
async fn a_frozen_inside_its_round(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &Holder,
    watch: &Watch,
    lock: &str,
    (label, tries): (&str, usize),
) -> anyhow::Result<Instant> {
    let frozen_at = Instant::now();
    let frozen = a.threads()?;
    lab_step(
        bed,
        rec,
        Mark::Frozen,
        "A",
        "SIGSTOP inside its acquire round",
        list(&frozen),
    )
    .await;
    let answered = watch.values(lock).await?;
    rec.check_that(
        format!("[{label}] A is frozen inside its acquire round: the {ANSWERING} answering servers hold A's value (a majority answered), A has reported nothing, /proc shows state T"),
        holds(&answered, HOLDER_A)
            && frozen.iter().all(|t| t.state == 'T'),
        format_args!("{}; frozen on attempt {tries} of {ATTEMPTS}; pid {}: {}", values(&answered), a.pid(), list(&frozen)),
    );
    Ok(frozen_at)
}

async fn one_run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    store: StoreId,
    checked: bool,
    n: usize,
) -> anyhow::Result<()> {
    let label = if checked {
        "redlock"
    } else {
        "redlock-unchecked, the validity check removed"
    };
    let spec = |holder: &str, content: &str, lock: &str| {
        let mut spec = bed.holder_spec(holder, content, WriteMode::Unfenced, true);
        spec.flags.store = store.name().into();
        spec.flags.store_endpoint = Some(servers.endpoints().join(","));
        spec.flags.lease = lock.into();
        spec
    };
    let watch = Watch::new(bed, servers)?;
    // A lock of its own per attempt: a void attempt leaves nothing in the next one's way.
    let mut a_spec =
        |attempt: usize| spec(HOLDER_A, A_CONTENT, &format!("{LEASE}-rl4-{n}.{attempt}"));
    let (mut a, tries) = a_frozen_in_its_round(rec, &watch, &mut a_spec).await?;
    let lock = format!("{LEASE}-rl4-{n}.{tries}");
    let frozen_at = a_frozen_inside_its_round(bed, rec, &a, &watch, &lock, (label, tries)).await?;

    // The timeline prescribes it: A stays frozen past the lock's TTL; then its keys are gone.
    let ttl = bed.case().ttl;
    harness::wait::until(
        "A's keys expired on the answering servers",
        ttl * 4,
        || async {
            Ok::<bool, std::io::Error>(watch.values(&lock).await?.iter().all(Option::is_none))
        },
    )
    .await?;
    let mut b = Holder::spawn(&spec(HOLDER_B, B_CONTENT, &lock)).await?;
    let (at, acquired) = b.next("B's acquire", EVENT_TIMEOUT).await?;
    let b_acquired_at = at;
    step(bed, rec, at, "B", "acquire (Redlock)", &acquired).await;
    let (b_holds, held) = watch.held_by(&lock, HOLDER_B).await?;
    rec.check_that(
        format!("[{label}] A's keys expired while A was frozen ({} ms, TTL {} ms); B wins the lock on the answering servers", frozen_at.elapsed().as_millis(), ttl.as_millis()),
        matches!(acquired, Event::Acquired { .. }) && b_holds,
        format_args!("{acquired}; the servers: {held}"),
    );
    let (_, ready) = b.next("B at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(b.unexpected("AT_WRITE_POINT", &ready));
    }
    let thawed = a.thaw().await?;
    lab_step(
        bed,
        rec,
        Mark::Thawed,
        "A",
        "SIGCONT: its round ends",
        list(&thawed),
    )
    .await;
    let (at, ended) = a.next("the end of A's round", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "its round ends", &ended).await;
    if checked {
        validity_spent(bed, rec, &mut a, &watch, &lock, label, &ended, frozen_at).await?;
    } else {
        unchecked_writes(
            bed,
            rec,
            &mut a,
            &watch,
            &lock,
            label,
            &ended,
            b_acquired_at,
        )
        .await?;
    }
    b_writes_last(bed, rec, &mut b, label).await
}

/// With two of the five servers stalled, exactly a majority answers: the lab's own client takes
/// the lock, extends it a third of the TTL later, and releases it, each acknowledged by the three
/// answering servers alone — a quorum is N/2 + 1 acknowledgements, not more. (Found by the lock
/// services' own mutants: Redlock's extension and release counting `> quorum` passed RL1–RL4,
/// whose every extension and release all five servers answered.)
async fn bare_majority(
    bed: &Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
) -> anyhow::Result<()> {
    const LABEL: &str = "redlock, a bare majority";
    let client = redlock_client(bed, StoreId::Redlock, servers).await?;
    let ttl = bed.case().ttl;
    let lock = &format!("{LEASE}-rl4-bare");
    let Some(mut a) = client.acquire(lock, HOLDER_A, ttl).await? else {
        rec.check_that(
            format!("[{LABEL}] three answering servers of five grant, extend and release the lock"),
            false,
            "A's acquire was refused by the three answering servers",
        );
        return Ok(());
    };
    let (extended, deadline) = extend_a_third_later(client.as_ref(), &mut a, ttl).await?;
    let released = client.release(&a).await?;
    let watch = Watch::new(bed, servers)?;
    let left = watch.values(lock).await?;
    let free = left.iter().all(Option::is_none);
    rec.check(
        format!("[{LABEL}] with servers {ANSWERING}–{} stalled, the {ANSWERING} answering servers are a majority: A's grant, its extension (its local deadline moved forward) and its release (the lock free at once) are each acknowledged by them alone", SERVERS - 1),
        "granted; EXTEND ok=true deadline=later; UNLOCK ok=true, free",
        &format!(
            "granted; EXTEND ok={extended} deadline={deadline}; UNLOCK ok={released}, {}",
            if free { "free".to_owned() } else { values(&left) }
        ),
    );
    Ok(())
}

/// B, given the go-line, writes, releases and exits; its content must be the last.
async fn b_writes_last(
    bed: &Testbed,
    rec: &mut Recorder,
    b: &mut Holder,
    label: &str,
) -> anyhow::Result<()> {
    b.send(Request::Go).await?;
    let (at, wrote) = b.next("B's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "B", "write", &wrote).await;
    let code = b.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("[{label}] B exits: {}", describe(Some(code))));
    let summary = part_line(&bed.resource.part(SCOPE, SUMMARY).await?);
    rec.check_that(
        format!("[{label}] B's write is accepted and its content is the last"),
        matches!(wrote, Event::Write { accepted: true, .. }) && summary.starts_with(B_CONTENT),
        format_args!("{wrote}; final summary {summary}"),
    );
    Ok(())
}

/// A's holder started, and frozen as soon as the answering servers hold its value — while its
/// round still waits for the stalled ones. A round that ended before the freeze (A reported its
/// outcome) is void: A is stopped, and a new A starts on a lock of its own (`spec(attempt)`), up
/// to [`ATTEMPTS`] times. Returns A, frozen, and the attempt that caught it.
async fn a_frozen_in_its_round(
    rec: &mut Recorder,
    watch: &Watch,
    spec: &mut (dyn FnMut(usize) -> harness::holder::HolderSpec + Send),
) -> anyhow::Result<(Holder, usize)> {
    for attempt in 1..=ATTEMPTS {
        let spec = spec(attempt);
        let lock = spec.flags.lease.clone();
        let lock = lock.as_str();
        let mut a = Holder::spawn(&spec).await?;
        harness::wait::until_every(
            "A's value on the answering servers",
            EVENT_TIMEOUT,
            WATCH_EVERY,
            || async { Ok::<bool, std::io::Error>(holds(&watch.values(lock).await?, HOLDER_A)) },
        )
        .await?;
        a.freeze().await?;
        let reported: Vec<String> = a
            .take_events()
            .into_iter()
            .filter_map(|(_, e)| e.ok())
            .filter(|e| !matches!(e, Event::Renewed { .. }))
            .map(|e| e.to_string())
            .collect();
        if reported.is_empty() {
            return Ok((a, attempt));
        }
        rec.note(format!(
            "attempt {attempt}: A's round ended before the freeze ({}): A stopped, a new A started on a lock of its own",
            reported.join(", ")
        ));
        a.crash().await;
    }
    bail!("A's acquire round ended before the lab could freeze it, {ATTEMPTS} times in a row")
}

/// Run 1: A, thawed, finds its validity spent: REFUSED, exit "not acquired"; B still holds.
#[allow(clippy::too_many_arguments)]
async fn validity_spent(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    watch: &Watch,
    lock: &str,
    label: &str,
    ended: &Event,
    frozen_at: Instant,
) -> anyhow::Result<()> {
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.check_that(
        format!("[{label}] A, thawed, computes its validity as spent (its round outlasted {} ms of freeze, the TTL {} ms) and does not use the lock", frozen_at.elapsed().as_millis(), bed.case().ttl.as_millis()),
        matches!(ended, Event::Refused) && code == exit::NOT_ACQUIRED,
        format_args!("{ended}; A exits: {}", describe(Some(code))),
    );
    let (b_holds, held) = watch.held_by(lock, HOLDER_B).await?;
    rec.check_that(
        format!("[{label}] B still holds the lock: A's undo of its round took only its own keys"),
        b_holds,
        held,
    );
    let attempts = bed.resource.attempts(SCOPE).await?;
    rec.check_that(
        format!("[{label}] the resource never saw A"),
        attempts.iter().all(|x| x.writer != HOLDER_A),
        format_args!(
            "{} attempt(s) by A",
            attempts.iter().filter(|x| x.writer == HOLDER_A).count()
        ),
    );
    Ok(())
}

/// Run 2, the negative control: A takes the lock anyway and writes while B holds it.
#[allow(clippy::too_many_arguments)]
async fn unchecked_writes(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    watch: &Watch,
    lock: &str,
    label: &str,
    ended: &Event,
    b_acquired_at: Instant,
) -> anyhow::Result<()> {
    rec.expose(
        format!("[{label}] A, thawed, takes the lock on its stale majority"),
        matches!(ended, Event::Acquired { .. }),
        ended,
    );
    let (_, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(a.unexpected("AT_WRITE_POINT", &ready));
    }
    a.send(Request::Go).await?;
    let (at, wrote) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write", &wrote).await;
    let (b_holds, held) = watch.held_by(lock, HOLDER_B).await?;
    rec.expose(
        format!("[{label}] A writes while B holds the lock (by the lab's clock, {} ms after B's grant, B not released)", at.duration_since(b_acquired_at).as_millis()),
        matches!(wrote, Event::Write { accepted: true, .. }) && b_holds,
        format_args!("{wrote}; the servers after A's write: {held}"),
    );
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("[{label}] A exits: {}", describe(Some(code))));
    let attempts = bed.resource.attempts(SCOPE).await?;
    rec.expose(
        format!("[{label}] the resource accepted A's write"),
        attempts.iter().any(|x| x.writer == HOLDER_A && x.accepted),
        format_args!(
            "{} accepted attempt(s) by A",
            attempts
                .iter()
                .filter(|x| x.writer == HOLDER_A && x.accepted)
                .count()
        ),
    );
    Ok(())
}

/// The answering servers, watched by a client of the lab's own whose connections stay open (a
/// look every millisecond while A's round waits out the stalled servers).
struct Watch {
    #[cfg(feature = "lock-services")]
    store: fencing::lease::redlock::RedlockStore,
}

impl Watch {
    fn new(bed: &Testbed, servers: &dyn RedlockServers) -> anyhow::Result<Watch> {
        let endpoints: Vec<String> = servers.endpoints().into_iter().take(ANSWERING).collect();
        #[cfg(feature = "lock-services")]
        return Ok(Watch {
            store: fencing::lease::redlock::RedlockStore::new(
                &endpoints,
                bed.params().margin,
                false,
            )?,
        });
        #[cfg(not(feature = "lock-services"))]
        {
            let _ = (bed, endpoints);
            bail!("RL4 needs the Redis client: this build left it out")
        }
    }

    /// What each answering server holds for `lock` now (`None`: nothing). The lab's look is not
    /// the algorithm's round: a server silent past the client's per-server timeout (a loaded
    /// machine, not a stall: these servers answer) is asked again until [`LOOK_PATIENCE`], never
    /// read as "nothing" — once it was, and RL4 said B's keys were gone while B still held them
    /// (CI: "B still holds the lock … (none)").
    async fn values(&self, lock: &str) -> std::io::Result<Vec<Option<String>>> {
        #[cfg(feature = "lock-services")]
        {
            let began = Instant::now();
            loop {
                let seen = self.store.per_server(lock).await;
                if seen.iter().all(|(_, answer)| answer.is_some()) {
                    return Ok(seen
                        .into_iter()
                        .map(|(_, held)| held.and_then(|(value, _)| value))
                        .collect());
                }
                if began.elapsed() > LOOK_PATIENCE {
                    let silent: Vec<String> = seen
                        .into_iter()
                        .filter(|(_, answer)| answer.is_none())
                        .map(|(server, _)| server)
                        .collect();
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "an answering server did not answer the lab's look at {lock} within {} ms: {}",
                            LOOK_PATIENCE.as_millis(),
                            silent.join(", ")
                        ),
                    ));
                }
            }
        }
        #[cfg(not(feature = "lock-services"))]
        {
            let _ = lock;
            Ok(Vec::new())
        }
    }

    /// Whether every answering server holds a value of `holder`'s; and what they hold.
    async fn held_by(&self, lock: &str, holder: &str) -> anyhow::Result<(bool, String)> {
        let held = self.values(lock).await?;
        Ok((holds(&held, holder), values(&held)))
    }
}

/// Whether every one of `held` is a value of `holder`'s (a majority: the answering servers).
fn holds(held: &[Option<String>], holder: &str) -> bool {
    !held.is_empty()
        && held
            .iter()
            .all(|v| v.as_deref().is_some_and(|v| v.starts_with(holder)))
}

/// The answering servers' values, for the evidence.
fn values(answered: &[Option<String>]) -> String {
    answered
        .iter()
        .enumerate()
        .map(|(i, v)| format!("server {i}: {}", v.as_deref().unwrap_or("(none)")))
        .collect::<Vec<_>>()
        .join(", ")
}
