//! F6 — interleavings at the resource, made deterministic with latches in the resource's test
//! hook (the `gap` between check and write), never with sleeps.
//!
//! B's token is 3, not 2: a token is greater after a takeover, and gaps are allowed (a lock
//! service's tokens have them), so a fence that counted on the floor's successor — `:token <=
//! floor + 1` — refuses B's current write here, and the checks of it fail.
//!
//! (a) check-then-write, the fault: A (token 1) checks the floor (0), passes and pauses; B (token
//!     3) checks, writes floor 3 and new(B); A resumes and writes floor 1 and old(A). Negative
//!     control: the floor regresses 3 → 1 and the old content wins. The floor A's check read is
//!     reported by the resource's hook (`Checked`), not assumed.
//! (b) fenced-scope, A first: A's conditional UPDATE advances the floor to 1 and pauses inside its
//!     open transaction; B's UPDATE blocks on the floor row's lock — observed in
//!     `pg_stat_activity` and `pg_blocking_pids` — until A commits; then B is accepted. What (b)
//!     shows is the wait (the two writes are serialised on the floor row, none lost); its
//!     verdict cannot show Read Committed's re-evaluation, since B's token passes the floor A
//!     committed (`1 <= 3`) and the one B's snapshot saw (`0 <= 3`) alike — a floor that only
//!     rises cannot make them differ in this order.
//! (c) fenced-scope, B first: B holds the floor at 3; A's UPDATE blocks, then re-evaluates
//!     `3 <= 1` and is rejected. This is the order that depends on the re-evaluation: A's
//!     snapshot saw the floor at 0, and `0 <= 1` would have accepted it.
//! (d) A first, the floor already at A's token (A wrote the summary before): A's write of the
//!     detail, with the *current* token, pauses inside its open transaction; B's advance (to the
//!     summary: no part row in common) must still wait for it,
//!     so that A's token-1 commit precedes B's token-3 commit. (The shared fence lets writers of
//!     the current token through together; this is the case its `FOR SHARE` is for.)
//! (e) Two writes of A's *new* token, 3 (its summary and its detail, in parallel), the floor below
//!     it: the first advances the floor to 3 and pauses in its open transaction; the second —
//!     whose snapshot saw the floor at 0 — waits on the floor row, then re-evaluates on the
//!     committed floor, `3 <= 3`, and is accepted. This is the order where Read Committed's
//!     re-evaluation decides for an equal token: a fence that let only a greater token advance
//!     (`<`) would reject a holder's own second part here, though each alone passes.
//! Property (I3): in (b)–(d) the final content is B's, token 3, floor 3; in (e) both parts are
//! A's at floor 3.
//!
//! Run again with another fenced mode (`F6-fenced-single`, `F6-fenced-shared`), only (b)–(d)
//! run: (a) uses no fenced mode, and was judged in the first case.

use anyhow::Context as _;
use fencing::profile::WriteSql;
use fencing::resource::{self, Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::observe;
use sqlx::{Connection as _, PgPool};
use tokio::sync::oneshot;

use crate::kit::latch::{finishes, latch, reached};
use crate::kit::paused_holder::part_line;
use crate::testbed::{shown, wrote, HOLDER_A, HOLDER_B, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Part, Scenario, Spec, StoreLanes,
    Testbed, NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F6",
    title: "interleavings at the resource, made deterministic with latches: check-then-write vs the fenced scope",
    about: About {
        fault: "two writers interleaved at the resource by latches",
        shows: "check-then-write lets an old token win; the fenced write queues writers on the floor row",
        paragraph: "The lab pauses writers inside the resource's own write path with latches, \
                    so each interleaving happens exactly, never by luck of timing. (a) With \
                    check-then-write, A (token 1) reads the floor, passes and pauses; B (token \
                    3: tokens may have gaps) writes; A resumes and writes: the floor falls \
                    back from 3 to 1 and A's old content wins, the negative control. (b) to \
                    (e) use the fenced write: the first writer pauses inside its open \
                    transaction, and the checks see \
                    the second wait on the floor row's lock (pg_stat_activity, \
                    pg_blocking_pids), then be judged on the committed floor. B's content is \
                    kept whichever writes first, and A's two parts under one new token are \
                    both accepted.",
    },
    // (a), check-then-write, is not run again: one negative control.
    checks: Checks::with(23, &[(Part::FirstFenceOnly, 1)]),
    needs: Needs::Nothing,
    applies: Applies::When(
        |sut| sut.claims.token_at_resource,
        "it interleaves two writers' token checks at the resource, and the design checks no \
         token there (token_at_resource = false): F4 shows what reaches it",
    ),
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: true,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F6;

const OLD_A: &str = "old(A)";
const NEW_B: &str = "new(B)";

/// A's token, and B's: greater after the takeover, with a gap (tokens need not be consecutive).
const TOKEN_A: i64 = 1;
const TOKEN_B: i64 = 3;
/// A's new token in (e): above the floor by more than one.
const TOKEN_A_NEW: i64 = 3;

fn write(writer: &'static str) -> Write<'static> {
    match writer {
        HOLDER_A => Write {
            scope: SCOPE,
            part: SUMMARY,
            content: OLD_A,
            writer: HOLDER_A,
            token: TOKEN_A,
        },
        _ => Write {
            scope: SCOPE,
            part: SUMMARY,
            content: NEW_B,
            writer: HOLDER_B,
            token: TOKEN_B,
        },
    }
}

impl Scenario for F6 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if bed.makes(Part::FirstFenceOnly) {
                check_then_write(bed, rec).await?;
                bed.reset().await?;
            }
            // A first: B (token 3) re-evaluates `1 <= 3` and is accepted.
            fenced_scope(bed, rec, Order::AFirst).await?;
            bed.reset().await?;
            // B first: A (token 1) re-evaluates `3 <= 1` and is rejected.
            fenced_scope(bed, rec, Order::BFirst).await?;
            bed.reset().await?;
            // A first with the floor already at 1: B's advance still waits for A's commit.
            fenced_scope(bed, rec, Order::AtCurrent).await?;
            bed.reset().await?;
            // A's two writes of its new token: the second re-evaluates `3 <= 3`, accepted.
            fenced_scope(bed, rec, Order::SameToken).await?;
            Ok(())
        })
    }
}

async fn check_then_write(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    rec.step(Mark::Info, "lab", "(a) check-then-write", None, "", None);
    let (gap, at_gap, release) = latch();
    // The hook is told the floor A's check read; it reports it, then holds A in its gap.
    let (read_tx, read_rx) = oneshot::channel();
    let res = bed.resource.clone();
    let a = tokio::spawn(async move {
        res.write_with_checked_gap(&write(HOLDER_A), WriteMode::CheckThenWrite, |checked| {
            let _ = read_tx.send(checked.floor_read);
            gap
        })
        .await
    });
    reached("A's check-then-write", at_gap).await?;
    let a_read = read_rx
        .await
        .context("A's check reached its gap without reporting the floor it read")?;
    rec.step(
        Mark::Info,
        "A",
        &format!("read floor {}, check passed, paused", shown(a_read)),
        Some(TOKEN_A),
        "",
        None,
    );
    let b = write(HOLDER_B);
    let b_write = bed.resource.write(&b, WriteMode::CheckThenWrite);
    let b_ok = finishes("B's write", b_write).await??;
    let floor_after_b = bed.resource.floor(SCOPE).await?;
    rec.step(
        Mark::Write { accepted: b_ok },
        "B",
        "check-then-write",
        Some(TOKEN_B),
        wrote(b_ok, TOKEN_B),
        None,
    );
    let _ = release.send(());
    let a_ok = finishes("A's write", a).await???;
    rec.step(
        Mark::Write { accepted: a_ok },
        "A",
        "resumed, wrote",
        Some(TOKEN_A),
        wrote(a_ok, TOKEN_A),
        None,
    );
    let floor = bed.resource.floor(SCOPE).await?;
    let part = bed.resource.part(SCOPE, SUMMARY).await?;
    rec.note(format!(
        "check-then-write: A's check read fence_floor={}; B accepted={b_ok}, A accepted={a_ok}, final {}, fence_floor={}",
        shown(a_read),
        part_line(&part),
        shown(floor)
    ));
    let old_won = part
        .as_ref()
        .is_some_and(|p| p.writer == HOLDER_A && p.token == TOKEN_A);
    rec.expose(
        format!(
            "A's check was stale when it wrote: the old token overwrote the new result and \
             fence_floor regressed {TOKEN_B} → {TOKEN_A}"
        ),
        a_read == Some(0)
            && a_ok
            && b_ok
            && floor_after_b == Some(TOKEN_B)
            && floor == Some(TOKEN_A)
            && old_won,
        format_args!(
            "fence_floor {} (read by A's check) → {} (B) → {} (A); final summary = {}",
            shown(a_read),
            shown(floor_after_b),
            shown(floor),
            part_line(&part)
        ),
    );
    Ok(())
}

/// `first` writes (advancing the floor, or — `at_current` — at the floor its earlier write set)
/// and pauses inside its open transaction; `second` must block on the floor row's lock until
/// `first` commits, then re-evaluate its condition on the new row version.
/// The orders F6 runs at the fenced resource, (b)–(e).
#[derive(Clone, Copy, PartialEq)]
enum Order {
    AFirst,
    BFirst,
    AtCurrent,
    SameToken,
}

impl Order {
    /// Who writes first and second, whether the second write is accepted, and whether the
    /// floor already stands at the first writer's token.
    fn roles(self) -> (&'static str, &'static str, bool, bool) {
        match self {
            Order::AFirst => (HOLDER_A, HOLDER_B, true, false),
            Order::BFirst => (HOLDER_B, HOLDER_A, false, false),
            Order::AtCurrent => (HOLDER_A, HOLDER_B, true, true),
            Order::SameToken => (HOLDER_A, HOLDER_A, true, false),
        }
    }

    /// The order, as the checks name it, and the phase, as the timeline does.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Order::AFirst => ("A first", "(b) fenced-scope, A first"),
            Order::BFirst => ("B first", "(c) fenced-scope, B first"),
            Order::AtCurrent => (
                "A first at the current token",
                "(d) A first, the floor already at A's token",
            ),
            Order::SameToken => (
                "A's two parts at its new token",
                "(e) two writes of A's new token, the first advancing the floor",
            ),
        }
    }

    /// `writer`'s write in this order: in (e), of A's new token.
    fn write_of(self, writer: &'static str) -> Write<'static> {
        match self {
            Order::SameToken => Write {
                token: TOKEN_A_NEW,
                ..write(writer)
            },
            _ => write(writer),
        }
    }

    /// The second writer's write: in (e), A's detail at its new token, not B's at all.
    fn second_write(self, second: &'static str) -> Write<'static> {
        match self {
            Order::SameToken => Write {
                part: crate::testbed::DETAIL,
                ..self.write_of(HOLDER_A)
            },
            _ => write(second),
        }
    }
}

/// The second writer's fence UPDATE waits on a lock that the first writer's open transaction
/// holds (pg_stat_activity, pg_blocking_pids).
async fn second_waits_on_the_first(
    bed: &Testbed,
    rec: &mut Recorder,
    said: &Said<'_>,
    admin: &PgPool,
    second_task: &tokio::task::JoinHandle<fencing::Result<bool>>,
    (first_pid, second_pid): (i32, i32),
) -> anyhow::Result<()> {
    let Said {
        mode_label,
        order,
        f,
        s,
    } = *said;
    // Until it waits — or, where nothing holds it, has already finished (then the check fails).
    let blocked = harness::wait::until(
        &format!("{s}'s UPDATE waits on a lock"),
        bed.params().wait_timeout,
        || async {
            let act = observe::activity(admin, second_pid).await?;
            Ok::<_, sqlx::Error>(
                second_task.is_finished()
                    || act.is_some_and(|a| a.wait_event_type.as_deref() == Some("Lock")),
            )
        },
    )
    .await;
    let act = observe::activity(admin, second_pid).await?;
    let waiting_on = shown(act.as_ref().and_then(|a| a.wait_event_type.clone()));
    rec.check(
        format!("{mode_label}, {order}: {s}'s fence UPDATE waits on a lock (pg_stat_activity.wait_event_type)"),
        "Lock",
        &waiting_on,
    );
    blocked?;
    let act = act.context("the second writer's backend vanished")?;
    rec.note(format!(
        "{s} (backend {second_pid}) waits: wait_event_type={waiting_on} wait_event={} query={:?}",
        shown(act.wait_event.clone()),
        act.query
    ));
    rec.check_that(
        format!("{mode_label}, {order}: pg_blocking_pids({s}) names {f}'s backend"),
        act.blocked_by.contains(&first_pid),
        format_args!(
            "pg_blocking_pids({second_pid}) = {:?}; {f}'s backend = {first_pid}",
            act.blocked_by
        ),
    );
    // Implied by the lock wait just seen: shown, not judged again.
    rec.note(format!(
        "{s}'s write has not returned while {f}'s transaction is open: finished={}",
        second_task.is_finished()
    ));
    Ok(())
}

/// The final summary (and, for A's two parts, the detail) and the floor.
async fn what_the_resource_kept(
    bed: &Testbed,
    rec: &mut Recorder,
    case: Order,
    said: &Said<'_>,
) -> anyhow::Result<()> {
    let Said {
        mode_label, order, ..
    } = *said;
    let part = bed.resource.part(SCOPE, SUMMARY).await?;
    let floor = bed.resource.floor(SCOPE).await?;
    if case == Order::SameToken {
        // Both parts are A's, and the floor stands at A's token.
        let detail = bed.resource.part(SCOPE, crate::testbed::DETAIL).await?;
        rec.check(
            format!("{mode_label}, {order}: the summary and the detail, and fence_floor"),
            &format!(
                "{OLD_A} by holder-a token={TOKEN_A_NEW}; {OLD_A} by holder-a \
                 token={TOKEN_A_NEW}; floor {TOKEN_A_NEW}"
            ),
            &format!(
                "{}; {}; floor {}",
                part_line(&part),
                part_line(&detail),
                shown(floor)
            ),
        );
        return Ok(());
    }
    rec.check(
        format!("{mode_label}, {order}: the final summary"),
        &format!("{NEW_B} by holder-b token={TOKEN_B}"),
        &part_line(&part),
    );
    rec.check(
        format!("{mode_label}, {order}: fence_floor"),
        &TOKEN_B.to_string(),
        &shown(floor),
    );
    Ok(())
}

/// The first writer's fenced write on its own connection, paused inside its open transaction at
/// `gap`: one statement cannot pause between its check and its write, so it runs inside an
/// explicit transaction and pauses before the commit, holding the floor row's lock the same.
fn first_writer(
    mut conn_first: sqlx::pool::PoolConnection<sqlx::Postgres>,
    sut: std::sync::Arc<fencing::profile::Profile>,
    first_write: Write<'static>,
    mode: WriteMode,
    gap: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<fencing::Result<bool>> {
    let one_statement = matches!(sut.resource.write, WriteSql::OneStatement(_));
    tokio::spawn(async move {
        if one_statement {
            // One statement cannot pause between its check and its write: it runs inside
            // an explicit transaction and pauses before the commit, holding the floor row's
            // lock just the same.
            let mut tx = conn_first
                .begin()
                .await
                .map_err(fencing::Error::from_sqlx("begin"))?;
            let ok = resource::write_on(&mut tx, &sut, &first_write, mode, async {}).await?;
            gap.await;
            tx.commit()
                .await
                .map_err(fencing::Error::from_sqlx("commit"))?;
            Ok(ok)
        } else {
            resource::write_on(&mut conn_first, &sut, &first_write, mode, gap).await
        }
    })
}

/// Holder `h` as the timeline names it.
fn short_name(h: &str) -> &'static str {
    if h == HOLDER_A {
        "A"
    } else {
        "B"
    }
}

/// Both writes commit once the first writer's transaction is let go: the first's is accepted,
/// the second's — re-evaluated on the new row version — as `second_accepted` says.
async fn both_commit(
    rec: &mut Recorder,
    said: &Said<'_>,
    case: Order,
    (first, second): (&'static str, &'static str),
    second_write: Write<'_>,
    second_accepted: bool,
    (first_task, second_task): (
        tokio::task::JoinHandle<fencing::Result<bool>>,
        tokio::task::JoinHandle<fencing::Result<bool>>,
    ),
) -> anyhow::Result<()> {
    let Said {
        mode_label,
        order,
        f,
        s,
    } = *said;
    let first_ok = finishes(&format!("{f}'s write"), first_task).await???;
    let second_ok = finishes(&format!("{s}'s write"), second_task).await???;
    rec.step(
        Mark::Write { accepted: first_ok },
        short_name(first),
        "committed",
        Some(case.write_of(first).token),
        wrote(first_ok, case.write_of(first).token),
        None,
    );
    rec.step(
        Mark::Write {
            accepted: second_ok,
        },
        short_name(second),
        "re-evaluated on the new row version",
        Some(second_write.token),
        wrote(second_ok, second_write.token),
        None,
    );
    rec.check(
        format!("{mode_label}, {order}: {f}'s write"),
        &wrote(true, case.write_of(first).token),
        &wrote(first_ok, case.write_of(first).token),
    );
    rec.check(
        format!("{mode_label}, {order}: {s}'s write after re-evaluating on {f}'s committed floor"),
        &wrote(second_accepted, second_write.token),
        &wrote(second_ok, second_write.token),
    );
    Ok(())
}

/// How a fenced-scope case's checks name what they judge.
#[derive(Clone, Copy)]
struct Said<'a> {
    /// The fence under test.
    mode_label: &'a str,
    /// The order of the two writes.
    order: &'a str,
    /// The first writer, and the second.
    f: &'a str,
    s: &'a str,
}

async fn fenced_scope(bed: &mut Testbed, rec: &mut Recorder, case: Order) -> anyhow::Result<()> {
    let (first, second, second_accepted, at_current) = case.roles();
    let (order, phase) = case.names();
    let second_write = case.second_write(second);
    rec.step(Mark::Info, "lab", phase, None, "", None);
    let mode = WriteMode::Fenced;
    let mode_label = bed.case().fence_label();
    // At the current token: A's earlier write (of the summary, committed) set the floor to A's
    // token, and the write it pauses in is of another part than B's, so that only the floor row
    // can make B wait.
    let first_write = if at_current {
        let ok = bed.resource.write(&case.write_of(first), mode).await?;
        anyhow::ensure!(ok, "{first}'s earlier write was rejected");
        Write {
            part: crate::testbed::DETAIL,
            ..case.write_of(first)
        }
    } else {
        case.write_of(first)
    };
    let (f, s) = match case {
        Order::SameToken => ("A's summary", "A's detail"),
        _ => (short_name(first), short_name(second)),
    };
    let admin = bed.admin_pool(fencing::schema::Database::Resource).await?;
    let mut conn_first = bed.resource.pool().acquire().await?;
    let mut conn_second = bed.resource.pool().acquire().await?;
    let first_pid = observe::backend_pid(&mut conn_first).await?;
    let second_pid = observe::backend_pid(&mut conn_second).await?;

    let (gap, at_gap, release) = latch();
    let sut = bed.case().sut.clone();
    let first_task = first_writer(conn_first, sut.clone(), first_write, mode, gap);
    reached(&format!("{f}'s fenced write"), at_gap).await?;
    let floor_token = case.write_of(first).token;
    rec.step(
        Mark::Info,
        short_name(first),
        if at_current {
            "wrote at the current floor, paused in its open transaction"
        } else {
            "advanced the floor, paused in its open transaction"
        },
        Some(floor_token),
        "",
        None,
    );
    let second_task = tokio::spawn(async move {
        resource::write_on(&mut conn_second, &sut, &second_write, mode, async {}).await
    });
    let said = Said {
        mode_label,
        order,
        f,
        s,
    };
    second_waits_on_the_first(
        bed,
        rec,
        &said,
        &admin,
        &second_task,
        (first_pid, second_pid),
    )
    .await?;

    let _ = release.send(());
    let tasks = (first_task, second_task);
    both_commit(
        rec,
        &said,
        case,
        (first, second),
        second_write,
        second_accepted,
        tasks,
    )
    .await?;
    what_the_resource_kept(bed, rec, case, &said).await?;

    Ok(())
}
