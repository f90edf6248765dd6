//! RL1 — Redlock and the paused client (Kleppmann, "How to do distributed locking"): Redlock over
//! five independent Redis servers (`lease/redlock.rs`, the algorithm as published), the
//! resource the lab's fenced PostgreSQL table. A (a holder process) wins the lock on a majority,
//! is frozen (SIGSTOP) at its write point past its validity; the keys expire on every server by
//! its own clock; B (another process) wins the lock and writes; A wakes and writes.
//! 1. **Negative control** (`redlock`, no token — the algorithm as published): the fence has
//!    nothing to compare; A's stale write is accepted over B's.
//! 2. **Positive control** (`redlock-fenced`: a counter's `INCR` on each server that grants,
//!    the greatest of the majority's as the token): A's stale write is rejected.
//! 3. **What a fence does not promise** (`redlock-fenced`, A's stale write reaching the
//!    resource after B acquired but before B's first write): accepted — the floor is still
//!    A's — and then B's write supersedes it. A fence orders writes at the resource; a stale
//!    write that arrives before any newer one is not stale to it.
//! 4. **antirez's proposal beside the fence** (`fencing::value_cas`: the holder claims the
//!    resource with its lock's random value, then writes only while the value is still its
//!    own), two interleavings the lab schedules itself with real Redlock grants (`redlock-fenced`,
//!    so that each grant carries both a value and a token): a stale write arriving before the new
//!    holder's first touch is accepted by both; a stale holder whose *claim* arrives late takes
//!    the resource back under check-and-set — its write accepted, the lock's real holder rejected
//!    from then on — while the fence rejects it by its smaller token.

use std::time::Instant;

use anyhow::{bail, Context as _};
use fencing::lease::{Grant, LeaseStore, StoreId};
use fencing::resource::{Write, WriteMode};
use fencing::value_cas::ValueCas;
use harness::docker::RedlockServers;
use harness::evidence::Recorder;
use harness::holder::{Holder, HolderSpec, EVENT_TIMEOUT};
use holder_protocol::{Event, Request, Token};

use crate::kit::paused_holder::{freeze_and_show, list, part_line, step, A_CONTENT, B_CONTENT};
use crate::kit::redlock_client::{extend_a_third_later, redlock_client, SERVERS};
use crate::testbed::{shown, summary_write, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "RL1",
    title: "Redlock over five Redis servers, the winner frozen past its validity: another client wins, the frozen one wakes and writes — accepted without a token, rejected by a monotonic fence (unless it reaches the resource before the new holder's first write)",
    about: About {
        fault: "the Redlock winner frozen (SIGSTOP) past its validity",
        shows: "Redlock alone lets the stale holder write; a counter token fences it, if it arrives after B's",
        paragraph: "Kleppmann's critique of Redlock, run for real on five independent Redis \
                    servers. A wins the lock on a majority and is frozen at its write point \
                    until its keys expire; B wins the lock and writes; A wakes and writes. \
                    With Redlock as published there is no token, so A's stale write is \
                    accepted over B's (the negative control). With a counter token, A's write \
                    is rejected. But a fence only orders writes: if A's write arrives before \
                    B's first one, it is accepted, then superseded. The lab also tries \
                    antirez's check-and-set on the lock's random value, where a claim that \
                    arrives late lets the stale holder take the resource back.",
    },
    checks: Checks::fixed(RUNS.len() * PER_RUN + INTERLEAVINGS + EXTENSION),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("RL1 starts its own five Redis servers; it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("its holders take their lease from a lock service (--store-endpoint); a holder of yours takes its lease from PostgreSQL"),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("redlock", "redlock ×5 (lease)"),
};

pub struct RL1;

/// The runs: (store, whether A's stale write comes after B's write, label).
const RUNS: [(StoreId, bool, &str); 3] = [
    (StoreId::Redlock, true, "redlock, no token"),
    (StoreId::RedlockFenced, true, "redlock-fenced"),
    (
        StoreId::RedlockFenced,
        false,
        "redlock-fenced, A's write before B's first",
    ),
];

/// Checks of each run.
const PER_RUN: usize = 8;
/// Checks of the check-and-set interleavings.
const INTERLEAVINGS: usize = 3;
/// The checks of Redlock's extension ([`extension`]).
const EXTENSION: usize = 2;

impl Scenario for RL1 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if fencing::stores::store_kind(StoreId::Redlock).is_none() {
                crate::testbed::skip_unless_required(rec, "RL1 needs the Redis client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "RL1 needs five Redis servers in containers")
                .await?
            {
                return Ok(());
            }
            let servers = harness::docker::redlock_servers(&bed.run_mark, SERVERS, None)
                .await
                .context("RL1 could not start its five Redis servers")?;
            rec.note(format!(
                "five independent Redis servers (no persistence, no replication): {}; {}",
                servers.endpoints().join(", "),
                servers.image_note()
            ));
            let outcome = async {
                for (n, (store, after, label)) in RUNS.into_iter().enumerate() {
                    bed.reset().await?;
                    one_run(bed, rec, &*servers, store, after, label, n).await?;
                }
                bed.reset().await?;
                extension(bed, rec, &*servers).await?;
                interleavings(bed, rec, &*servers).await?;
                Ok::<_, anyhow::Error>(())
            }
            .await;
            servers.remove().await;
            outcome
        })
    }
}

#[allow(clippy::too_many_arguments)]
/// A, at its write point, is frozen (its renewer too: nothing extends its keys) until its keys
/// expired on a majority of the servers, by each server's clock.
async fn a_frozen_until_its_keys_expire(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    own: &dyn LeaseStore,
    lock: &str,
    label: &str,
) -> anyhow::Result<()> {
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &ready).await;
    let frozen_at = freeze_and_show(
        bed,
        rec,
        a,
        &format!(" [{label}]"),
        &format!("[{label}] A's renewer is frozen with it: nothing extends its keys"),
    )
    .await?;
    harness::wait::until(
        "A's keys expired on a majority of the servers",
        bed.params().wait_timeout,
        || own.is_free(lock),
    )
    .await?;
    rec.note(format!(
        "[{label}] A's keys expired on a majority of the servers {} ms after A was frozen (each server's clock)",
        frozen_at.elapsed().as_millis()
    ));
    Ok(())
}

/// B wins the lock on a majority while A is frozen and stands at its write point: B, when its
/// grant came, and its token.
async fn b_wins_while_a_is_frozen(
    bed: &Testbed,
    rec: &mut Recorder,
    b_spec: &HolderSpec,
    own: &dyn LeaseStore,
    lock: &str,
    label: &str,
) -> anyhow::Result<(Holder, Instant, Token)> {
    let mut b = Holder::spawn(b_spec).await?;
    let (at, acquired) = b.next("B's acquire", EVENT_TIMEOUT).await?;
    let b_acquired_at = at;
    step(bed, rec, at, "B", "acquire (Redlock)", &acquired).await;
    let Event::Acquired { token: b_token } = acquired else {
        bail!(b.unexpected("ACQUIRED token=…", &acquired));
    };
    let held = own.inspect(lock).await?;
    rec.check_that(
        format!("[{label}] B wins the lock on a majority while A is frozen"),
        held.as_ref().is_some_and(|h| h.holder == HOLDER_B),
        shown(held.map(|h| format!("{}: {}", h.holder, h.expires_at))),
    );
    let (_, ready) = b.next("B at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(b.unexpected("AT_WRITE_POINT", &ready));
    }
    Ok((b, b_acquired_at, b_token))
}

async fn one_run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    store: StoreId,
    after: bool,
    label: &str,
    n: usize,
) -> anyhow::Result<()> {
    let lock = format!("{LEASE}-rl1-{n}");
    let own = redlock_client(bed, store, servers).await?;
    let spec = |holder: &str, content: &str, release: bool| {
        let mut spec = bed.holder_spec(holder, content, WriteMode::Fenced, release);
        spec.flags.store = store.name().into();
        spec.flags.store_endpoint = Some(servers.endpoints().join(","));
        spec.flags.lease.clone_from(&lock);
        spec
    };
    let mut a = Holder::spawn(&spec(HOLDER_A, A_CONTENT, false)).await?;
    let (at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    let a_acquired_at = at;
    step(bed, rec, at, "A", "acquire (Redlock)", &acquired).await;
    let Event::Acquired { token: a_token } = acquired else {
        bail!(a.unexpected("ACQUIRED token=…", &acquired));
    };
    let held = own.inspect(&lock).await?;
    rec.check_that(
        format!(
            "[{label}] A (pid {}) wins the lock on a majority of the five servers",
            a.pid()
        ),
        held.as_ref().is_some_and(|h| h.holder == HOLDER_A),
        shown(held.map(|h| format!("{}: {}", h.holder, h.expires_at))),
    );
    a_frozen_until_its_keys_expire(bed, rec, &mut a, own.as_ref(), &lock, label).await?;

    let b_spec = spec(HOLDER_B, B_CONTENT, true);
    let (mut b, b_acquired_at, b_token) =
        b_wins_while_a_is_frozen(bed, rec, &b_spec, own.as_ref(), &lock, label).await?;

    // A's stale write: after B's (runs 1, 2), or before B's first (run 3).
    let mut a_result = None;
    if !after {
        a_result = Some(stale_write(&mut a).await?);
    }
    b.send(Request::Go).await?;
    let (at, write) = b.next("B's write", EVENT_TIMEOUT).await?;
    let b_wrote_at = at;
    step(bed, rec, at, "B", "write", &write).await;
    let b_write = write;
    if after {
        a_result = Some(stale_write(&mut a).await?);
    }
    let (thawed, at, a_write) = a_result.expect("A wrote");
    crate::kit::paused_holder::lab_step(
        bed,
        rec,
        harness::evidence::Mark::Thawed,
        "A",
        "SIGCONT",
        list(&thawed),
    )
    .await;
    step(bed, rec, at, "A", "write (after resuming)", &a_write).await;
    let Event::Write { accepted, .. } = a_write else {
        bail!(a.unexpected("WRITE …", &a_write));
    };
    rec.check(
        format!("[{label}] B's write is accepted"),
        &format!("WRITE accepted=true token={b_token}"),
        &b_write.to_string(),
    );
    // Both are ended here: their verdicts are in (A's renewals would only fail).
    a.crash().await;
    let _ = b.exit_code(EVENT_TIMEOUT).await;

    let summary = bed.resource.part(SCOPE, SUMMARY).await?;
    let floor = bed.resource.floor(SCOPE).await?;
    rec.note(format!(
        "[{label}] A's token {a_token}, B's {b_token}; A's stale write accepted={accepted}; final summary = {}; fence_floor={}",
        part_line(&summary),
        shown(floor)
    ));
    let held = Held {
        a: (a_acquired_at, at),
        b: (b_acquired_at, b_wrote_at),
    };
    verdicts(
        rec,
        store,
        after,
        label,
        (a_token, b_token),
        accepted,
        &summary,
        held,
    );
    Ok(())
}

/// When each holder acted on its grant, by the lab's clock: from its ACQUIRED to its WRITE.
struct Held {
    a: (std::time::Instant, std::time::Instant),
    b: (std::time::Instant, std::time::Instant),
}

impl Held {
    /// Whether A's interval and B's intersect: two holders at once.
    fn overlap(&self) -> bool {
        self.a.0 < self.b.1 && self.b.0 < self.a.1
    }

    /// The four instants in ms after A's acquire.
    fn shown(&self) -> String {
        let ms = |t: std::time::Instant| t.saturating_duration_since(self.a.0).as_millis();
        format!(
            "A: acquired at +0 ms, wrote at +{} ms; B: acquired at +{} ms, wrote at +{} ms",
            ms(self.a.1),
            ms(self.b.0),
            ms(self.b.1)
        )
    }
}

/// One run's verdicts on its store: the harm unfenced or without a token, the fence's answer
/// otherwise.
#[allow(clippy::too_many_arguments)]
fn verdicts(
    rec: &mut Recorder,
    store: StoreId,
    after: bool,
    label: &str,
    (a_token, b_token): (holder_protocol::Token, holder_protocol::Token),
    accepted: bool,
    summary: &Option<fencing::resource::Part>,
    held: Held,
) {
    let b_final = summary
        .as_ref()
        .is_some_and(|p| p.writer == HOLDER_B && p.content == B_CONTENT);
    match (store, after) {
        (StoreId::Redlock, _) => {
            // No token tells the two grants apart: the harm is the overlap itself, judged
            // by the lab's clock (not by the tokens, which are 0 for every grant).
            rec.check_that(
                format!(
                    "[{label}] negative control exposes: two holders at once — A acted on its \
                     grant (acquired → write) over an interval that intersects B's (acquired → \
                     write), by the lab's clock"
                ),
                held.overlap(),
                held.shown(),
            );
            rec.check_that(
                format!(
                    "[{label}] negative control exposes: A's stale write is accepted after B's"
                ),
                accepted,
                format_args!("WRITE accepted={accepted}"),
            );
            rec.check_that(
                format!("[{label}] negative control exposes: A's stale result overwrote B's"),
                !b_final,
                part_line(summary),
            );
        }
        (_, true) => {
            rec.check_that(
                format!("[{label}] B's token is greater than A's"),
                b_token > a_token,
                format_args!("A {a_token}, B {b_token}"),
            );
            rec.check_that(
                format!("[{label}] A's stale write is rejected by the resource's fence"),
                !accepted,
                format_args!("WRITE accepted={accepted}"),
            );
            rec.check_that(
                format!("[{label}] the final summary is B's"),
                b_final,
                part_line(summary),
            );
        }
        (_, false) => {
            rec.check_that(
                format!("[{label}] B's token is greater than A's"),
                b_token > a_token,
                format_args!("A {a_token}, B {b_token}"),
            );
            rec.check_that(
                format!("[{label}] A's stale write, arriving before B's first, is accepted: the floor was still below A's token"),
                accepted,
                format_args!("WRITE accepted={accepted}"),
            );
            rec.check_that(
                format!("[{label}] B's write supersedes it: the final summary is B's"),
                b_final,
                part_line(summary),
            );
        }
    }
}

/// Redlock's extension as published (the value compared and the expiry reset on every server, kept
/// when a majority extended it within the validity left), and what it must refuse: A extends its
/// fresh lock — granted, its local deadline moved forward, B's acquire meanwhile refused; once its
/// keys expired and B holds the lock, A's handle can neither extend nor release it, B still holds
/// it, and B's own release frees it at once. Two checks.
async fn extension(
    bed: &mut Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
) -> anyhow::Result<()> {
    const LABEL: &str = "redlock, extension";
    let client = redlock_client(bed, StoreId::RedlockFenced, servers).await?;
    let client = client.as_ref();
    let (ttl, wait) = (bed.case().ttl, bed.params().wait_timeout);
    let lock = &format!("{LEASE}-rl1-extend");
    let mut a = client
        .acquire(lock, HOLDER_A, ttl)
        .await?
        .context("A's Redlock grant was refused")?;
    let (extended, deadline) = extend_a_third_later(client, &mut a, ttl).await?;
    // Each server that holds A's value shows its expiry reset: a PTTL above what was left of the
    // TTL before the extension (two thirds of it).
    let left = pttls(client.inspect(lock).await?.as_ref());
    let reset = !left.is_empty() && left.iter().all(|&ms| ms as u128 > ttl.as_millis() * 2 / 3);
    // While A holds it, B's acquire finds A's key on every server (SET NX): refused.
    let meanwhile = client.acquire(lock, HOLDER_B, ttl).await?;
    rec.check(
        format!("[{LABEL}] A extends its lock: granted by a majority, its local deadline moved forward, every server's expiry reset; B's acquire meanwhile is refused"),
        "EXTEND ok=true deadline=later expiry=reset; B refused",
        &format!(
            "EXTEND ok={extended} deadline={deadline} expiry={}; B {}",
            if reset { "reset" } else { "not reset" },
            if meanwhile.is_some() { "GRANTED" } else { "refused" }
        ),
    );
    rec.note(format!(
        "[{LABEL}] A's keys after its extension, a third of the TTL after its grant: PTTL {left:?} ms of a {} ms TTL",
        ttl.as_millis()
    ));
    if let Some(b) = meanwhile {
        client.release(&b).await?;
    }
    harness::wait::until("A's keys expired on a majority", wait, || {
        client.is_free(lock)
    })
    .await?;
    let b = client
        .acquire(lock, HOLDER_B, ttl)
        .await?
        .context("B's Redlock grant was refused")?;
    let stale_extend = client.renew(&mut a).await?;
    let stale_release = client.release(&a).await?;
    let held = client.inspect(lock).await?;
    // B's own release then frees the lock on every server at once.
    let released = client.release(&b).await?;
    let free = client.is_free(lock).await?;
    rec.check(
        format!("[{LABEL}] A's expired handle can neither extend nor release B's lock, and B still holds it; B's release frees it at once"),
        &format!("EXTEND ok=false RELEASE ok=false; {HOLDER_B} unexpired; B's RELEASE ok=true, free"),
        &format!(
            "EXTEND ok={stale_extend} RELEASE ok={stale_release}; {}; B's RELEASE ok={released}, {}",
            // Redlock's record keeps the holder's value, not the counter: the holder is compared.
            held.as_ref().map_or("no holding".to_owned(), |h| format!(
                "{} {}",
                h.holder,
                if h.released || h.expired {
                    "expired or released"
                } else {
                    "unexpired"
                }
            )),
            if free { "free" } else { "still held" }
        ),
    );
    Ok(())
}

/// The PTTL of each server that holds the lock's value, as Redlock's record shows them
/// (`held on 5 of 5 servers (host:port PTTL 1432, …)`).
fn pttls(held: Option<&fencing::lease::Holding>) -> Vec<i64> {
    held.map_or(Vec::new(), |h| {
        h.expires_at
            .split("PTTL ")
            .skip(1)
            .filter_map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit() && c != '-')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    })
}

/// antirez's check-and-set and the fence, side by side on the same grants, in two interleavings
/// the lab schedules (it plays A and B with real Redlock grants; A's "pause" is the schedule:
/// A's keys expire on the servers' clocks before B acquires).
async fn interleavings(
    bed: &mut Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
) -> anyhow::Result<()> {
    const LABEL: &str = "check-and-set beside the fence";
    let client = redlock_client(bed, StoreId::RedlockFenced, servers).await?;
    let cas = ValueCas::new(bed.resource.pool().clone()).await?;
    let ttl = bed.case().ttl;
    let fence = |writer, content, token| Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer,
        token,
    };
    // A grant for A, then one for B once A's keys expired (each server's clock).
    let wait = bed.params().wait_timeout;
    let grants = move |lock: String| {
        let client = client.clone();
        async move {
            let a = client
                .acquire(&lock, HOLDER_A, ttl)
                .await?
                .context("A's Redlock grant was refused")?;
            harness::wait::until("A's keys expired on a majority", wait, || {
                client.is_free(&lock)
            })
            .await?;
            let b = client
                .acquire(&lock, HOLDER_B, ttl)
                .await?
                .context("B's Redlock grant was refused")?;
            Ok::<_, anyhow::Error>((a, b))
        }
    };

    // 1. A claimed on time and wrote once; its next write arrives after B acquired, before B's
    //    first touch of the resource.
    let scope = format!("{LEASE}-rl1-early");
    let (a, b) = grants(scope.clone()).await?;
    cas.claim(&scope, &a.handle).await?;
    let a_first = cas
        .write(&scope, &a.handle, "rows=300(A)", HOLDER_A)
        .await?
        && bed
            .resource
            .write(&fence(HOLDER_A, "rows=300(A)", a.token), WriteMode::Fenced)
            .await?;
    let (a_cas, a_fence) = write_both(bed, &cas, &scope, &a, "rows=302(A)").await?;
    rec.check_that(
        format!("[{LABEL}] A's stale write, arriving before B's first touch, is accepted by both: the resource has seen nothing newer"),
        a_first && a_cas && a_fence,
        format_args!(
            "A's value {}, token {}; B's value {}, token {} (granted, not yet used); check-and-set accepted={a_cas}, fence accepted={a_fence}",
            a.handle, a.token, b.handle, b.token
        ),
    );

    // 2. A was paused before its claim: B claims and writes, then A's claim and write arrive,
    //    then B writes again.
    bed.reset().await?;
    let scope = format!("{LEASE}-rl1-late");
    let (a, b) = grants(scope.clone()).await?;
    cas.claim(&scope, &b.handle).await?;
    let (b_cas, b_fence) = write_both(bed, &cas, &scope, &b, "rows=301(B)").await?;
    cas.claim(&scope, &a.handle).await?;
    let (a_cas, a_fence) = write_both(bed, &cas, &scope, &a, "rows=302(A)").await?;
    let (b_cas_again, b_fence_again) = write_both(bed, &cas, &scope, &b, "rows=303(B)").await?;
    let row = cas.state(&scope).await?;
    let row = shown(row.map(|r| {
        format!(
            "lock_value {} content {} by {}",
            r.lock_value,
            r.content.unwrap_or_default(),
            r.writer.unwrap_or_default()
        )
    }));
    rec.check_that(
        format!("[{LABEL}] negative control exposes: A's late claim takes the resource back under check-and-set — its stale write is accepted"),
        b_cas && a_cas,
        format_args!(
            "B claims and writes {b_cas}; A (value {}) claims and writes {a_cas}; the row: {row}",
            a.handle
        ),
    );
    rec.check_that(
        format!("[{LABEL}] negative control exposes: B, the lock's holder, is rejected from then on by check-and-set; the fence rejects A by its token and keeps accepting B"),
        !b_cas_again && b_fence && !a_fence && b_fence_again && b.token > a.token,
        format_args!(
            "check-and-set: B's next write accepted={b_cas_again}; fence: B (token {}) {b_fence}, A (token {}) {a_fence}, B again {b_fence_again}",
            b.token, a.token
        ),
    );
    Ok(())
}

/// `grant`'s holder writes `content` under check-and-set (its lock's value) and then through the
/// fence (its token): what each answered.
async fn write_both(
    bed: &Testbed,
    cas: &ValueCas,
    scope: &str,
    grant: &Grant,
    content: &str,
) -> anyhow::Result<(bool, bool)> {
    let by_value = cas
        .write(scope, &grant.handle, content, &grant.holder)
        .await?;
    let write = summary_write(&grant.holder, content, grant.token);
    let by_token = bed.resource.write(&write, WriteMode::Fenced).await?;
    Ok((by_value, by_token))
}

/// Gives the frozen A its go-line and thaws it; what `/proc` showed, and its write.
async fn stale_write(
    a: &mut Holder,
) -> anyhow::Result<(
    Vec<harness::process::ThreadState>,
    std::time::Instant,
    Event,
)> {
    a.send(Request::Go).await?;
    let thawed = a.thaw().await?;
    let (at, write) = a.next("A's write after it resumed", EVENT_TIMEOUT).await?;
    Ok((thawed, at, write))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Held;

    /// Planted runs, instants set by hand: the overlap is judged on the intervals themselves,
    /// never a constant — grants one after the other (A's write before B's grant, or the instant
    /// of it) are not two holders at once.
    #[test]
    fn two_holders_overlap_only_when_their_intervals_intersect() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let held = |a: (u64, u64), b: (u64, u64)| Held {
            a: (at(a.0), at(a.1)),
            b: (at(b.0), at(b.1)),
        };
        assert!(!held((0, 10), (20, 30)).overlap());
        assert!(!held((0, 20), (20, 30)).overlap());
        assert!(held((0, 25), (20, 30)).overlap());
        assert!(held((0, 50), (20, 30)).overlap());
        assert!(!held((40, 50), (20, 30)).overlap());
    }
}
