//! S1 — a lock its session keeps, with no server timeout. The fault: holder A, a real holder
//! process, takes the database's own lock (PostgreSQL's advisory lock, or MariaDB's `GET_LOCK`
//! with `--lease-store mariadb-getlock`) on a session the server never ends in the run's time —
//! as these locks are used: PostgreSQL ends no idle session by default (`idle_session_timeout` =
//! 0), MariaDB after 8 hours (`wait_timeout` = 28800); the lab gives A's session an hour — and is
//! frozen at its write point. Property: the opposite trade of a lease's. Safety is kept — nobody
//! else gets the lock while A's session lives, so A's write, once thawed, lands on data nobody
//! else touched — and liveness is lost: B, asking again and again, is refused for as long as the
//! lab is willing to wait (three TTLs of the other experiments, after one of which a server
//! timeout would have freed the lock: F4 on `pg-advisory-fenced` shows that side), and gets the
//! lock at once when A gives it up.
//!
//! On a run whose lease store is not one of these locks, S1 chooses its own (`pg-advisory`, on
//! the lab's own server: `session_locks.rs`).

use std::sync::Mutex;
use std::time::Duration;

use anyhow::bail;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};
use harness::holder::{Holder, EVENT_TIMEOUT};
use holder_protocol::Event;

use crate::kit::paused_holder::{freeze_and_show, go_and_thaw, lab_step, step, A_CONTENT};
use crate::kit::session_locks;
use crate::testbed::{lease_state, shown, HOLDER_A, HOLDER_B, LEASE};
use crate::{About, Applies, Checks, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed};

const SPEC: Spec = Spec {
    id: "S1",
    title: "a lock its session keeps, with no server timeout: A frozen keeps it, B waits — liveness lost (bounded by the lab), safety kept",
    about: About {
        fault: "holder A frozen (SIGSTOP) holding a database lock whose session never times out",
        shows: "no stale write, but no progress: B is refused for as long as A's session lives",
        paragraph: "The database's own locks (PostgreSQL's advisory lock, MariaDB's GET_LOCK) \
                    last as long as the session that took them, and by default the server \
                    ends no idle session (PostgreSQL) or only after 8 hours (MariaDB). A takes \
                    the lock on such a session and is frozen at its write point. B asks for \
                    the lock again and again for three TTLs of the other experiments — after \
                    one of which a server timeout would have freed it (F4 on \
                    pg-advisory-fenced) — and is refused every time, while the server shows A \
                    holding it: liveness lost, the lab's bound the only end to the wait. \
                    Thawed, A writes on data nobody else touched and releases; B gets the \
                    lock at once. The opposite trade of a lease: a lock with no expiry never \
                    lets a stale holder's write through, and never lets anyone else work.",
    },
    checks: Checks::fixed(7),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: session_locks::LOCK_SERVICES,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("it runs the lab's holder on the database's own lock (--store pg-advisory or mariadb-getlock), which a holder of yours is not asked to speak"),
    fault_moments: &["/proc shows state T"],
    lanes: StoreLanes::Default,
};

/// The idle timeout of A's session: none the run will see.
const NO_TIMEOUT: Duration = Duration::from_secs(3600);

/// How many TTLs of the other experiments B asks for the lock before the lab gives up.
const BOUND_IN_TTLS: u32 = 3;

pub struct S1;

impl Scenario for S1 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(session_locks::on_a_session_lock(
            bed,
            rec,
            false,
            |bed, rec| Box::pin(timeline(bed, rec)),
        ))
    }
}

async fn timeline(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    // The TTL the store grants (GET_LOCK: whole seconds).
    let ttl = bed.case().ttl;
    let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, WriteMode::Unfenced, true);
    spec.flags.ttl_ms = NO_TIMEOUT.as_millis() as u64;
    let mut a = Holder::spawn(&spec).await?;
    let (at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire", &acquired).await;
    rec.check_that(
        format!(
            "A (pid {}) takes the lock on a session the server ends only after {} s idle — none \
             the run will see",
            a.pid(),
            NO_TIMEOUT.as_secs()
        ),
        matches!(acquired, Event::Acquired { .. }),
        &acquired,
    );
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "waits at the write point", &ready).await;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(a.unexpected("AT_WRITE_POINT", &ready));
    }
    let frozen_at = freeze_and_show(
        bed,
        rec,
        &mut a,
        " (A holds the lock)",
        "A's renewer thread is frozen with it: A's session says nothing from now on",
    )
    .await?;

    let (refused, asked, granted) = b_asks_until_the_bound(bed, ttl * BOUND_IN_TTLS).await?;
    lab_step(
        bed,
        rec,
        Mark::Refused,
        "B",
        "acquire, again and again",
        format!("refused {asked} times"),
    )
    .await;
    rec.check_that(
        format!(
            "B, asking for the lock for {} ms ({BOUND_IN_TTLS} × the TTL of {} ms after which a \
             server timeout would have ended A's session), is refused every time: liveness \
             lost while A's session lives, the lab's bound the only end to the wait",
            (ttl * BOUND_IN_TTLS).as_millis(),
            ttl.as_millis()
        ),
        granted.is_none(),
        format_args!(
            "{asked} asks, {} refused, over {} ms of A frozen{}",
            refused,
            frozen_at.elapsed().as_millis(),
            granted.map_or(String::new(), |t| format!("; granted token={t}"))
        ),
    );
    let row = bed.lease.inspect(LEASE).await?;
    rec.check_that(
        "the server still shows A holding the lock, its session alive",
        row.as_ref()
            .is_some_and(|r| r.holder == HOLDER_A && !r.expired),
        format_args!(
            "{}; expires {}",
            shown(row.as_ref().map(lease_state)),
            shown(row.as_ref().map(|r| r.expires_at.as_str()))
        ),
    );

    a_writes_releases_and_b_gets_the_lock(bed, rec, &mut a, ttl).await
}

/// A, thawed, writes and releases; B then gets the lock at once.
async fn a_writes_releases_and_b_gets_the_lock(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    ttl: Duration,
) -> anyhow::Result<()> {
    go_and_thaw(bed, rec, a).await?;
    let (at, wrote) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write", &wrote).await;
    rec.check_that(
        "A, thawed, writes on data nobody else touched: its write is accepted (unfenced) — no \
         stale write, since nobody else held the lock",
        matches!(wrote, Event::Write { accepted: true, .. }),
        &wrote,
    );
    let (at, renewed) = a.next("A's renewal after its write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "renew after the write", &renewed).await;
    let (released_at, released) = a.next("A's release", EVENT_TIMEOUT).await?;
    step(bed, rec, released_at, "A", "release", &released).await;
    let lease = &bed.lease;
    let b = Mutex::new(None);
    let waited = harness::wait::until(
        "B acquires A's released lock",
        bed.params().wait_timeout,
        || async {
            let grant = lease.acquire(LEASE, HOLDER_B, ttl).await?;
            let got = grant.is_some();
            *b.lock().expect("B's grant") = grant;
            Ok::<_, fencing::Error>(got)
        },
    )
    .await;
    let grant = b.into_inner().expect("B's grant");
    rec.check_that(
        "once A released, B acquires the lock at once",
        waited.is_ok() && grant.is_some(),
        format_args!(
            "{}, {} ms after A's release was reported",
            crate::testbed::acquired(grant.as_ref()),
            released_at.elapsed().as_millis()
        ),
    );
    if let Some(grant) = grant {
        bed.lease.release(&grant).await?;
    }
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!(
        "A exits: {}",
        harness::holder::describe(Some(code))
    ));
    Ok(())
}

/// How often B asks.
const ASK_EVERY: Duration = Duration::from_millis(100);

/// B asks for the lock every [`ASK_EVERY`] until `bound`: how many asks were refused, how many
/// were made, and the token of a grant if one came (the lab releases it).
async fn b_asks_until_the_bound(
    bed: &Testbed,
    bound: Duration,
) -> anyhow::Result<(usize, usize, Option<i64>)> {
    let ttl = bed.case().ttl;
    let lease = &bed.lease;
    let asks = Mutex::new((0usize, 0usize, None));
    // The timeline prescribes the bound; the wait ends early only on a grant.
    let waited = harness::wait::until_every("B is granted A's lock", bound, ASK_EVERY, || async {
        let grant = lease.acquire(LEASE, HOLDER_B, ttl).await?;
        let mut asks = asks.lock().expect("B's asks");
        asks.1 += 1;
        match grant {
            None => {
                asks.0 += 1;
                Ok::<_, fencing::Error>(false)
            }
            Some(g) => {
                asks.2 = Some((g.token, g));
                Ok(true)
            }
        }
    })
    .await;
    if let Err(e @ harness::wait::WaitError::Probe { .. }) = waited {
        bail!("B could not ask for the lock: {e}");
    }
    let (refused, asked, granted) = asks.into_inner().expect("B's asks");
    if let Some((_, grant)) = &granted {
        bed.lease.release(grant).await?;
    }
    Ok((refused, asked, granted.map(|(t, _)| t)))
}
