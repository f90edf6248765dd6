//! F12 — the holder crashes. The fault: holder A, a real holder process renewing in the
//! background, is killed with SIGKILL — (a) inside its fenced write transaction, after the floor
//! UPDATE, the part's upsert and the attempt record and before its commit; (b) right after its write
//! committed. No handler runs: nothing of A gets to release, roll back or say goodbye.
//! Property: (a) what the open transaction did — the floor advance, the part, the attempt record
//! — is rolled back by the server with the dead connection (`pg_xact_status` says `aborted`), and
//! the server keeps no session of A; (b) the committed part stays. In both, nobody releases A's
//! lease: it outlives A until the database clock expires it, and then B acquires with token 2
//! and writes. The orchestrator records how A died (signal 9, as waitpid reported it) and that
//! no process of A's group remains.
//!
//! A writes in fenced-scope whatever `--fenced-mode` says: it is the one mode with a write
//! transaction to be killed in. B is the lab's own lease client (as in F10): B is not under test.

use std::time::Instant;

use anyhow::{bail, Context as _};
use fencing::profile::WriteSql;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};
use harness::holder::{Holder, EVENT_TIMEOUT};
use harness::observe::{self, Session};
use harness::process::{self, describe_status};
use holder_protocol::{Event, Request};

use crate::kit::paused_holder::{
    lab_client_takes_over, lab_step, part_line, step, until_lease_expired, A_CONTENT, B_CONTENT,
};
use crate::testbed::{acquired, lease_state, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE};
use crate::testbed::{DETAIL, SUMMARY};
use crate::{
    About, Applies, Checks, FaultPoint, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes,
    Testbed,
};

const SPEC: Spec = Spec {
    id: "F12",
    title: "the holder crashes (kill -9): (a) inside its write transaction, (b) right after its commit; its lease outlives it until the database clock expires it",
    about: About {
        fault: "holder A killed (SIGKILL) in or right after its write",
        shows: "an open write is rolled back, a committed one stays; a dead holder's lease lasts until expiry",
        paragraph: "A real holder process, renewing in the background, is killed with SIGKILL, \
                    so no handler runs and nothing is released or rolled back by A. (a) A dies \
                    inside its write transaction, after the floor, the part and the attempt \
                    record were written but before the commit: the server aborts the \
                    transaction with the dead connection and all of it disappears. (b) A dies \
                    right after its write committed: the part, the floor and the attempt \
                    record stay. In both, the checks confirm that A's processes and database \
                    sessions are gone, that B is refused at once because A's lease outlives A, \
                    and that B acquires token 2 and writes once the lease expires. On a lock \
                    a session keeps (`--lease-store pg-advisory`), the server ends A's session \
                    when the kernel closes A's socket: the lock is free at once, before its \
                    TTL, and F12 measures how soon.",
    },
    checks: Checks::fixed(21),
    needs: Needs::Nothing,
    applies: Applies::When(
        // The lab's own fenced modes share seed004's design: A dies in seed004's transaction.
        |sut| {
            !matches!(sut.resource.write, WriteSql::OneStatement(_))
                || crate::testbed::Params::fence_label_of(sut) != "sut"
        },
        "its write is one statement: there is no open write transaction for the holder \
         to die inside",
    ),
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::All,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Ok(&[
        FaultPoint::WritePoint,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterWrite,
    ]),
    fault_moments: &["write transaction is open", "the committed part stays"],
    lanes: StoreLanes::Default,
};

pub struct F12;

impl Scenario for F12 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let admin = bed.cluster()?.admin_pool().await?;
            rec.note("(a) A is killed inside its write transaction, before its commit");
            rec.step(
                Mark::Info,
                "lab",
                "(a) kill inside the transaction",
                None,
                "",
                None,
            );
            // A case that stops early does not hide the next one's checks: (b) runs whatever
            // became of (a), and (a)'s error is the scenario's after it (a fence that refuses A's
            // write stops (a) at once, and (b)'s check of A's committed write must show it).
            let first = inside_the_transaction(bed, rec, &admin).await;
            bed.reset().await?;
            rec.restart_tokens();
            rec.note("(b) A is killed right after its write committed");
            rec.step(
                Mark::Info,
                "lab",
                "(b) kill after the commit",
                None,
                "",
                None,
            );
            let second = after_the_commit(bed, rec, &admin).await;
            admin.close().await;
            match (first, second) {
                (Err(a), Err(b)) => Err(a.context(format!("and (b) stopped too: {b:#}"))),
                (Err(a), Ok(())) => Err(a.context("(a) stopped; (b) ran to its end")),
                (Ok(()), second) => second,
            }
        })
    }
}

/// The `--sut` of the holder A is: the system under test's when its fence is a check and a
/// write in one transaction, else seed004's (`None`, the holder's own): a one-statement fence has
/// no moment before its commit to stop at.
fn before_commit_sut(bed: &Testbed) -> Option<String> {
    match &bed.case().sut.resource.write {
        fencing::profile::WriteSql::CheckThenWrite { .. } => bed.sut_arg(),
        fencing::profile::WriteSql::OneStatement(_) => None,
    }
}

/// A, spawned with `wait` set on its flags, acquired token 1 and was given the go-line at its
/// write point. Returns it and its sessions on the server as they were then.
async fn start_a(
    bed: &Testbed,
    rec: &mut Recorder,
    set: impl FnOnce(&mut holder_protocol::HolderFlags),
) -> anyhow::Result<Holder> {
    let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, WriteMode::Fenced, false);
    spec.flags.sut = before_commit_sut(bed);
    set(&mut spec.flags);
    let mut a = Holder::spawn(&spec).await?;
    let (at, event) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire", &event).await;
    rec.check(
        format!("A (pid {}) acquires the lease, token=1", a.pid()),
        "ACQUIRED token=1",
        &event.to_string(),
    );
    let (_, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { token, .. } if token == bed.token(rec, 1)) {
        bail!(a.unexpected("AT_WRITE_POINT token=1", &ready));
    }
    a.send(Request::Go).await?;
    Ok(a)
}

/// Kills A with SIGKILL and checks how it died and that nothing of it is left: no process of its
/// group, and — once the server noticed the closed connections — no session and no backend of
/// the `sessions` A had.
async fn kill_and_show(
    bed: &Testbed,
    rec: &mut Recorder,
    admin: &sqlx::PgPool,
    a: &mut Holder,
    sessions: &[Session],
) -> anyhow::Result<Instant> {
    let pid = a.pid();
    let status = a
        .crash()
        .await
        .context("A could not be reaped after SIGKILL")?;
    let killed_at = Instant::now();
    lab_step(
        bed,
        rec,
        Mark::Killed,
        "A",
        "SIGKILL",
        describe_status(&status),
    )
    .await;
    use std::os::unix::process::ExitStatusExt as _;
    rec.check(
        "waitpid reports A killed by signal 9 (SIGKILL): no handler of A ran",
        "signal 9",
        &status
            .signal()
            .map_or_else(|| describe_status(&status), |s| format!("signal {s}")),
    );
    let left = process::group_members(pid);
    rec.check_that(
        format!("/proc: no process of A's group (pgid {pid}) remains, A's own pid is gone"),
        left.is_empty() && !process::exists(pid),
        format_args!("group members left: {left:?}"),
    );
    let timeout = bed.params().wait_timeout;
    let backends: Vec<i32> = sessions.iter().map(|s| s.pid).collect();
    let alive = || -> Vec<i32> {
        backends
            .iter()
            .copied()
            .filter(|&b| process::exists(b as u32))
            .collect()
    };
    // A state, polled: the server drops the sessions first, and the backend processes exit (and
    // are reaped by the postmaster) a moment later.
    let gone = harness::wait::until(
        "the server has no session and no backend of A left",
        timeout,
        || async {
            let sessions = observe::sessions_of(admin, HOLDER_A).await?;
            Ok::<bool, sqlx::Error>(sessions.is_empty() && alive().is_empty())
        },
    )
    .await;
    let alive = alive();
    let sessions_left = observe::sessions_of(admin, HOLDER_A).await?;
    if let Err(e) = gone {
        rec.note(format!("{e}"));
    }
    rec.check_that(
        "the server has no session of A left (pg_stat_activity), and /proc no backend that served it",
        alive.is_empty() && sessions_left.is_empty() && !backends.is_empty(),
        format_args!(
            "A's backends before the kill: {backends:?}; sessions left: {}; still in /proc: {alive:?}; found gone {} ms after the kill",
            sessions_left.len(),
            killed_at.elapsed().as_millis()
        ),
    );
    Ok(killed_at)
}

/// After the kill: nobody released A's lease — B is refused at once — until it expires by the
/// database clock; then B acquires token 2 and writes `part`.
async fn the_lease_outlives_a(
    bed: &Testbed,
    rec: &mut Recorder,
    killed_at: Instant,
    part: &str,
) -> anyhow::Result<()> {
    let (p, c) = (bed.params().clone(), bed.case().clone());
    if fencing::stores::store_kind(c.store).is_some_and(|k| k.freed_on_disconnect) {
        // A lock its session keeps (the advisory locks): the kernel closed A's socket with A,
        // and the server ended the session and the lock with it — the TTL plays no part.
        let lease = &bed.lease;
        harness::wait::until("A's lock is free", p.wait_timeout, || lease.is_free(LEASE)).await?;
        let after = killed_at.elapsed();
        rec.check_that(
            "the server freed A's lock as soon as A's connection closed, before its TTL ran out \
             (a lock kept by a session: killed, its holder frees it at once)",
            after < c.ttl,
            format_args!(
                "free {} ms after the kill (TTL {} ms)",
                after.as_millis(),
                c.ttl.as_millis()
            ),
        );
    } else {
        let row = bed.lease.inspect(LEASE).await?;
        let early = bed.lease.acquire(LEASE, HOLDER_B, c.ttl).await?;
        rec.check(
            "nobody released A's lease: B's acquire right after the kill is refused while A's row stands",
            "REFUSED (holder-a token=1 unexpired)",
            &format!(
                "{} ({})",
                acquired(early.as_ref()),
                shown(row.as_ref().map(lease_state))
            ),
        );
        until_lease_expired(bed, rec).await?;
        rec.note(format!(
            "A's lease expired by {} {} ms after A was killed (TTL {} ms, renewed every {} ms while A lived)",
            bed.expiry_clock(),
            killed_at.elapsed().as_millis(),
            c.ttl.as_millis(),
            p.renew.as_millis()
        ));
    }
    let (b, ok) = lab_client_takes_over(bed, rec, part, B_CONTENT, WriteMode::Fenced).await?;
    rec.check(
        "B (the lab's lease client) acquires the expired lease with a greater token",
        "ACQUIRED token=2",
        &acquired(b.as_ref()),
    );
    rec.check(
        format!(
            "B's write of the {part} part is accepted (mode={})",
            c.fence_label()
        ),
        &wrote(true, 2),
        &ok.zip(b.as_ref()).map_or_else(
            || "no write: B holds no lease".into(),
            |(ok, g)| wrote(ok, g.token),
        ),
    );
    Ok(())
}

/// (a): killed with its transaction open.
async fn inside_the_transaction(
    bed: &Testbed,
    rec: &mut Recorder,
    admin: &sqlx::PgPool,
) -> anyhow::Result<()> {
    let mut a = start_a(bed, rec, |f| f.wait_before_commit = true).await?;
    let (at, event) = a.next("A before its commit", EVENT_TIMEOUT).await?;
    step(
        bed,
        rec,
        at,
        "A",
        "inside its write transaction, before its commit",
        &event,
    )
    .await;
    rec.check(
        "A advanced the floor, upserted the part and recorded the attempt, and stands before its commit",
        "BEFORE_COMMIT token=1",
        &event.to_string(),
    );
    // A state, polled: A's renewer has its own connection to lease26 by now (it renews while A
    // stands before its commit), so that the sessions shown — and killed — are all of A's. On a
    // lock service its connection goes there instead: it has renewed there once.
    if bed.service.is_some() {
        harness::wait::until(
            "A's renewer has renewed on the lock service",
            bed.params().wait_timeout,
            || {
                let renewed = !a.drain_renewals().is_empty();
                async move { Ok::<_, std::convert::Infallible>(renewed) }
            },
        )
        .await?;
    } else {
        harness::wait::until(
            "A's renewer is connected to lease26",
            bed.params().wait_timeout,
            || async {
                let lease_sessions = observe::sessions_of(admin, HOLDER_A)
                    .await?
                    .iter()
                    .filter(|s| s.database.as_deref() == Some("lease26"))
                    .count();
                Ok::<_, sqlx::Error>(lease_sessions >= 2)
            },
        )
        .await?;
    }
    let sessions = observe::sessions_of(admin, HOLDER_A).await?;
    let open = sessions
        .iter()
        .find(|s| s.database.as_deref() == Some("res26") && s.xid.is_some());
    rec.check_that(
        "pg_stat_activity: A's write transaction is open on res26 (idle in transaction, with a transaction id)",
        open.is_some_and(|s| s.state.as_deref() == Some("idle in transaction")),
        format_args!(
            "A's sessions: {}",
            sessions
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
    );
    let xid = open.and_then(|s| s.xid.clone());
    let killed_at = kill_and_show(bed, rec, admin, &mut a, &sessions).await?;

    let status = match &xid {
        Some(xid) => observe::xact_status(admin, xid).await?,
        None => None,
    };
    rec.check(
        format!(
            "pg_xact_status: A's transaction (xid {}) was aborted by the server with the dead connection",
            shown(xid.as_deref())
        ),
        "aborted",
        &shown(status),
    );
    let floor = bed.resource.floor(SCOPE).await?;
    let part = bed.resource.part(SCOPE, SUMMARY).await?;
    let attempts = bed.resource.attempts(SCOPE).await?;
    rec.check(
        "rolled back with it: the floor advance, the part and the attempt record",
        &format!(
            "fence_floor={} summary=none write_attempt rows=0",
            bed.floor_shown(Some(0))
        ),
        &format!(
            "fence_floor={} summary={} write_attempt rows={}",
            bed.floor_shown(floor),
            part_line(&part),
            attempts.len()
        ),
    );
    the_lease_outlives_a(bed, rec, killed_at, SUMMARY).await
}

/// (b): killed right after its write committed.
async fn after_the_commit(
    bed: &Testbed,
    rec: &mut Recorder,
    admin: &sqlx::PgPool,
) -> anyhow::Result<()> {
    let mut a = start_a(bed, rec, |f| f.wait_after_write = true).await?;
    let (at, event) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (committed)", &event).await;
    rec.check(
        "A's write is accepted and committed; A waits before its renew",
        "WRITE accepted=true token=1",
        &event.to_string(),
    );
    let sessions = observe::sessions_of(admin, HOLDER_A).await?;
    let killed_at = kill_and_show(bed, rec, admin, &mut a, &sessions).await?;
    let attempts: Vec<String> = bed
        .resource
        .attempts(SCOPE)
        .await?
        .iter()
        .map(|a| format!("{} token={} accepted={}", a.writer, a.token, a.accepted))
        .collect();
    rec.check(
        "the committed part stays after A's death, the floor A advanced, and the one record of its attempt",
        &format!(
            "summary={A_CONTENT} by holder-a token=1 fence_floor={} write_attempt=[holder-a token=1 accepted=true]",
            bed.floor_shown(Some(bed.token(rec, 1)))
        ),
        &format!(
            "summary={} fence_floor={} write_attempt=[{}]",
            part_line(&bed.resource.part(SCOPE, SUMMARY).await?),
            bed.floor_shown(bed.resource.floor(SCOPE).await?),
            attempts.join(", ")
        ),
    );
    the_lease_outlives_a(bed, rec, killed_at, DETAIL).await?;
    rec.check(
        "final state: A's committed summary (token 1) beside B's detail (token 2), floor at B's token",
        &format!(
            "summary={A_CONTENT} by holder-a token=1 detail={B_CONTENT} by holder-b token=2 fence_floor={}",
            bed.floor_shown(Some(bed.token(rec, 2)))
        ),
        &format!(
            "summary={} detail={} fence_floor={}",
            part_line(&bed.resource.part(SCOPE, SUMMARY).await?),
            part_line(&bed.resource.part(SCOPE, DETAIL).await?),
            bed.floor_shown(bed.resource.floor(SCOPE).await?)
        ),
    );
    Ok(())
}
