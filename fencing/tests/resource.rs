//! The resource's writes — the three fenced modes (each the fence of its built-in profile) and
//! the three negative controls — against a real PostgreSQL: what each accepts,
//! what each rejects, and the `write_attempt` log; and the shared fence's lock at work — writers
//! of the current token in parallel, an advance ordered after them, and without the lock, I3
//! broken.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::SCOPE;
use std::sync::Arc;

use fencing::resource::{broken, named_write, Resource, Write, WriteMode, NAMED_WRITES};

fn w(part: &'static str, writer: &'static str, token: i64) -> Write<'static> {
    Write {
        scope: SCOPE,
        part,
        content: writer,
        writer,
        token,
    }
}

/// `r` with the write the lab names `name` (a fenced mode's profile, or a control on seed004's
/// tables), and the mode to write it in.
fn named(r: &Resource, name: &str) -> (Resource, WriteMode) {
    let (mode, profile) = named_write(name).expect("a named write");
    (
        Resource::with_profile(r.pool().clone(), Arc::new(profile.clone())),
        mode,
    )
}

#[tokio::test]
async fn fenced_scope_accepts_equal_and_greater_tokens_and_rejects_smaller_on_any_part(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    let m = WriteMode::Fenced;
    assert!(r.write(&w("summary", "a", 1), m).await?);
    assert!(
        r.write(&w("summary", "a", 1), m).await?,
        "equal token: same holding"
    );
    assert!(r.write(&w("summary", "b", 2), m).await?);
    assert!(
        !r.write(&w("summary", "a", 1), m).await?,
        "smaller token on the same part"
    );
    assert!(
        !r.write(&w("detail", "a", 1), m).await?,
        "smaller token on a part never written"
    );
    assert_eq!(r.floor(SCOPE).await?, Some(2));
    assert_eq!(
        r.part(SCOPE, "summary").await?.map(|p| (p.writer, p.token)),
        Some(("b".into(), 2))
    );
    assert!(
        r.part(SCOPE, "detail").await?.is_none(),
        "the rejected write left nothing"
    );
    Ok(())
}

#[tokio::test]
async fn every_attempt_is_logged_and_a_rejection_survives_its_rollback() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    assert!(r.write(&w("summary", "b", 2), WriteMode::Fenced).await?);
    assert!(!r.write(&w("summary", "a", 1), WriteMode::Fenced).await?);
    let log: Vec<_> = r
        .attempts(SCOPE)
        .await?
        .into_iter()
        .map(|a| (a.writer, a.token, a.mode, a.accepted))
        .collect();
    assert_eq!(
        log,
        [
            ("b".into(), 2, "fenced-scope".into(), true),
            ("a".into(), 1, "fenced-scope".into(), false)
        ]
    );
    Ok(())
}

#[tokio::test]
async fn fenced_scope_rejects_a_scope_that_was_never_set_up() -> anyhow::Result<()> {
    let db = common::start().await?;
    let write = Write {
        scope: "unknown",
        part: "summary",
        content: "x",
        writer: "a",
        token: 5,
    };
    assert!(!db.resource.write(&write, WriteMode::Fenced).await?);
    Ok(())
}

#[tokio::test]
async fn the_gap_runs_between_a_passed_check_and_the_write_only() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    assert!(r.write(&w("summary", "b", 2), WriteMode::Fenced).await?);
    for name in NAMED_WRITES {
        let (r, mode) = named(r, name);
        let ran = AtomicBool::new(false);
        let gap = async { ran.store(true, Ordering::SeqCst) };
        r.write_with_gap(&w("summary", "a", 3), mode, gap).await?;
        assert!(
            ran.load(Ordering::SeqCst),
            "{name}: the gap runs when the check passes"
        );
    }
    for mode in [WriteMode::Fenced, WriteMode::CheckThenWrite] {
        let ran = AtomicBool::new(false);
        let gap = async { ran.store(true, Ordering::SeqCst) };
        assert!(!r.write_with_gap(&w("summary", "a", 1), mode, gap).await?);
        assert!(
            !ran.load(Ordering::SeqCst),
            "{mode}: no gap after a failed check"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_checked_gap_is_told_the_floor_check_then_write_read() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    assert!(r.write(&w("summary", "b", 3), WriteMode::Fenced).await?);
    for (name, token, expected) in [
        ("check-then-write", 4, Some(3)),
        // The floor is now 4: what the check read moves with it.
        ("check-then-write", 5, Some(4)),
        ("fenced-scope", 6, None),
        ("fenced-single", 7, None),
        ("fenced-row", 8, None),
        ("unfenced", 9, None),
    ] {
        let (r, mode) = named(r, name);
        let seen = std::sync::Mutex::new(Vec::new());
        let accepted = r
            .write_with_checked_gap(&w("summary", "a", token), mode, |checked| {
                seen.lock().expect("lock").push(checked.floor_read);
                async {}
            })
            .await?;
        assert!(accepted, "{mode}: token {token} is the greatest yet");
        assert_eq!(*seen.lock().expect("lock"), [expected], "{mode}");
    }
    Ok(())
}

#[tokio::test]
async fn fenced_row_rejects_a_smaller_token_on_an_existing_row_but_not_on_a_new_one(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    let m = WriteMode::FencedRow;
    assert!(r.write(&w("summary", "b", 2), m).await?);
    assert!(!r.write(&w("summary", "a", 1), m).await?);
    assert!(
        r.write(&w("detail", "a", 1), m).await?,
        "the flaw: a new row has no token to compare"
    );
    Ok(())
}

#[tokio::test]
async fn check_then_write_rejects_a_smaller_token_when_nothing_interleaves() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    let m = WriteMode::CheckThenWrite;
    assert!(r.write(&w("summary", "b", 2), m).await?);
    assert!(!r.write(&w("detail", "a", 1), m).await?);
    assert_eq!(r.floor(SCOPE).await?, Some(2));
    Ok(())
}

#[tokio::test]
async fn the_before_commit_hook_decides_and_the_attempt_log_follows() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    let mut conn = r.pool().acquire().await?;
    use fencing::resource::write_fenced_scope_before_commit as write;
    // The hook says commit: accepted, one accepted record.
    assert_eq!(
        write(&mut conn, &w("summary", "a", 2), async { true }).await?,
        Some(true)
    );
    // The hook says roll back: nothing of it stays, not even a record.
    assert_eq!(
        write(&mut conn, &w("detail", "a", 2), async { false }).await?,
        None
    );
    // A stale token: rejected before the hook, and recorded as rejected after the rollback.
    let ran = AtomicBool::new(false);
    let hook = async {
        ran.store(true, Ordering::SeqCst);
        true
    };
    assert_eq!(
        write(&mut conn, &w("summary", "b", 1), hook).await?,
        Some(false)
    );
    assert!(!ran.load(Ordering::SeqCst), "no hook after a failed check");
    let log: Vec<_> = r
        .attempts(SCOPE)
        .await?
        .into_iter()
        .map(|a| (a.part, a.writer, a.token, a.accepted))
        .collect();
    assert_eq!(
        log,
        [
            ("summary".into(), "a".into(), 2, true),
            ("summary".into(), "b".into(), 1, false)
        ]
    );
    assert!(r.part(SCOPE, "detail").await?.is_none());
    Ok(())
}

#[test]
fn every_mode_reads_back_from_the_name_it_shows() {
    for mode in WriteMode::ALL {
        assert_eq!(mode.to_string(), mode.as_str());
        assert_eq!(mode.to_string().parse::<WriteMode>(), Ok(mode));
    }
    assert!(
        "fenced-scope".parse::<WriteMode>().is_err(),
        "a fenced mode is a profile"
    );
    assert_eq!(WriteMode::ALL.iter().filter(|m| m.is_fence()).count(), 1);
    // Each name the command line takes resolves once: a fenced mode to its built-in profile,
    // whose write is recorded under that name; a control to itself.
    for name in NAMED_WRITES {
        let (mode, profile) = named_write(name).expect("a named write");
        match mode {
            WriteMode::Fenced => assert_eq!(profile.resource.mode, name),
            control => assert_eq!(control.as_str(), name),
        }
    }
    assert!(named_write("sut").is_none());
}

#[tokio::test]
async fn unfenced_accepts_a_smaller_token() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    assert!(r.write(&w("summary", "b", 2), WriteMode::Unfenced).await?);
    assert!(r.write(&w("summary", "a", 1), WriteMode::Unfenced).await?);
    assert_eq!(r.part(SCOPE, "summary").await?.map(|p| p.token), Some(1));
    assert_eq!(
        r.floor(SCOPE).await?,
        Some(0),
        "the unfenced mode never touches the floor"
    );
    Ok(())
}

#[tokio::test]
async fn fenced_single_keeps_the_scope_fence_and_logs_every_attempt_in_one_statement(
) -> anyhow::Result<()> {
    one_statement_fence("fenced-single").await
}

#[tokio::test]
async fn fenced_shared_keeps_the_scope_fence_and_logs_every_attempt_in_one_statement(
) -> anyhow::Result<()> {
    one_statement_fence("fenced-shared").await
}

async fn one_statement_fence(name: &str) -> anyhow::Result<()> {
    let db = common::start().await?;
    let (r, m) = named(&db.resource, name);
    let r = &r;
    assert!(r.write(&w("summary", "a", 1), m).await?);
    assert!(
        r.write(&w("summary", "a", 1), m).await?,
        "equal token: same holding"
    );
    assert!(r.write(&w("summary", "b", 2), m).await?);
    assert!(
        !r.write(&w("summary", "a", 1), m).await?,
        "smaller token on the same part"
    );
    assert!(
        !r.write(&w("detail", "a", 1), m).await?,
        "smaller token on a part never written"
    );
    assert_eq!(r.floor(SCOPE).await?, Some(2));
    assert!(
        r.part(SCOPE, "detail").await?.is_none(),
        "the rejected write left nothing"
    );
    let log: Vec<_> = r
        .attempts(SCOPE)
        .await?
        .into_iter()
        .map(|a| (a.writer, a.token, a.accepted))
        .collect();
    assert_eq!(
        log,
        [
            ("a".into(), 1, true),
            ("a".into(), 1, true),
            ("b".into(), 2, true),
            ("a".into(), 1, false),
            ("a".into(), 1, false)
        ]
    );
    assert!(r.attempts(SCOPE).await?.iter().all(|a| a.mode == name));
    Ok(())
}

/// Backends of the resource database waiting for a lock (the resource role sees its own
/// sessions' wait events).
async fn lock_waiters(pool: &sqlx::PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'res26' AND wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
}

/// A write of `w` in `mode` inside a transaction left open: the caller commits it.
async fn open_write(
    r: &fencing::resource::Resource,
    w: &Write<'_>,
    mode: WriteMode,
) -> anyhow::Result<(sqlx::Transaction<'static, sqlx::Postgres>, bool)> {
    let mut tx = r.pool().begin().await?;
    let ok = fencing::resource::write_on(&mut tx, r.profile(), w, mode, async {}).await?;
    Ok((tx, ok))
}

#[tokio::test]
async fn writers_of_the_current_token_share_the_floor_with_fenced_shared_and_queue_with_fenced_single(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    for (name, parallel) in [("fenced-shared", true), ("fenced-single", false)] {
        let (r, mode) = named(&db.resource, name);
        assert!(r.write(&w("summary", "a", 7), mode).await?);
        // One writer of the current token holds its transaction open…
        let (first, ok) = open_write(&r, &w("summary", "a", 7), mode).await?;
        assert!(ok);
        // …and another writer of the same token, to another part, comes along.
        let second = tokio::spawn({
            let r = r.clone();
            async move { r.write(&w("detail", "a", 7), mode).await }
        });
        if parallel {
            let ok = tokio::time::timeout(std::time::Duration::from_secs(10), second).await;
            assert!(
                matches!(ok, Ok(Ok(Ok(true)))),
                "{mode}: the second writer of the current token went through while the first was open: {ok:?}"
            );
            first.commit().await?;
        } else {
            harness::wait::until(
                "the second writer waits for the first",
                std::time::Duration::from_secs(10),
                || async { Ok::<_, sqlx::Error>(lock_waiters(r.pool()).await? == 1) },
            )
            .await?;
            first.commit().await?;
            assert!(second.await??, "{mode}: accepted once the first committed");
        }
        assert_eq!(r.floor(SCOPE).await?, Some(7));
    }
    Ok(())
}

/// A write of the current token stuck on the way (on a part row another transaction holds) and
/// an advance: with the shared lock the advance waits and commits after it; without the lock
/// (the broken statement) the advance commits first and the old token lands after it — I3 broken
/// in commit order.
#[tokio::test]
async fn fenced_shared_orders_an_advance_after_the_current_tokens_writes_and_without_its_lock_does_not(
) -> anyhow::Result<()> {
    for locked in [true, false] {
        let db = common::start().await?;
        let (r, m) = named(&db.resource, "fenced-shared");
        assert!(r.write(&w("detail", "a", 1), m).await?);
        // A transaction holds the detail row: A's next write of it will wait there.
        let mut holder = r.pool().begin().await?;
        sqlx::query("SELECT 1 FROM report_part WHERE scope = $1 AND part = 'detail' FOR UPDATE")
            .bind(SCOPE)
            .execute(&mut *holder)
            .await?;
        let a = tokio::spawn({
            let r = r.clone();
            async move {
                let a = w("detail", "a", 1);
                if locked {
                    Ok::<_, anyhow::Error>(r.write(&a, m).await?)
                } else {
                    Ok(broken::fenced_shared_without_the_lock(&r, &a).await?)
                }
            }
        });
        harness::wait::until(
            "A's write waits on the detail row",
            std::time::Duration::from_secs(10),
            || async { Ok::<_, sqlx::Error>(lock_waiters(r.pool()).await? == 1) },
        )
        .await?;
        // B, a newer holding, writes another part: it must advance the floor.
        let b = tokio::spawn({
            let r = r.clone();
            async move { r.write(&w("summary", "b", 2), m).await }
        });
        let b_first = if locked {
            // B waits for A's shared hold on the floor row.
            harness::wait::until(
                "B waits for A",
                std::time::Duration::from_secs(10),
                || async { Ok::<_, sqlx::Error>(lock_waiters(r.pool()).await? == 2) },
            )
            .await?;
            assert!(
                !b.is_finished(),
                "B's advance committed while A was on its way"
            );
            holder.commit().await?;
            let a_ok = a.await??;
            let b_ok = b.await??;
            assert!(a_ok && b_ok, "both accepted: A={a_ok} B={b_ok}");
            false
        } else {
            // Nothing holds B: it advances and commits while A is still on its way.
            let b_ok = tokio::time::timeout(std::time::Duration::from_secs(10), b).await???;
            assert!(b_ok);
            holder.commit().await?;
            let a_ok = a.await??;
            assert!(
                a_ok,
                "the broken fence accepted A's token 1 after B's token 2 committed"
            );
            true
        };
        assert_eq!(
            b_first, !locked,
            "with the lock, token 1 commits before token 2; without it, after"
        );
        assert_eq!(r.floor(SCOPE).await?, Some(2));
    }
    Ok(())
}
