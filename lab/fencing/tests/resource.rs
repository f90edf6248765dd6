//! The resource's five write modes against a real PostgreSQL (SPEC §3.2): what each accepts,
//! what each rejects, and the `write_attempt` log.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::SCOPE;
use fencing::resource::{Write, WriteMode};

fn w(part: &'static str, writer: &'static str, token: i64) -> Write<'static> {
    Write {
        scope: SCOPE,
        part,
        content: writer,
        writer,
        token,
    }
}

#[tokio::test]
async fn fenced_scope_accepts_equal_and_greater_tokens_and_rejects_smaller_on_any_part(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    let m = WriteMode::FencedScope;
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
    assert!(
        r.write(&w("summary", "b", 2), WriteMode::FencedScope)
            .await?
    );
    assert!(
        !r.write(&w("summary", "a", 1), WriteMode::FencedScope)
            .await?
    );
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
    assert!(!db.resource.write(&write, WriteMode::FencedScope).await?);
    Ok(())
}

#[tokio::test]
async fn the_gap_runs_between_a_passed_check_and_the_write_only() -> anyhow::Result<()> {
    let db = common::start().await?;
    let r = &db.resource;
    assert!(
        r.write(&w("summary", "b", 2), WriteMode::FencedScope)
            .await?
    );
    for mode in WriteMode::ALL {
        let ran = AtomicBool::new(false);
        let gap = async { ran.store(true, Ordering::SeqCst) };
        r.write_with_gap(&w("summary", "a", 3), mode, gap).await?;
        assert!(
            ran.load(Ordering::SeqCst),
            "{mode}: the gap runs when the check passes"
        );
    }
    for mode in [WriteMode::FencedScope, WriteMode::CheckThenWrite] {
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
    assert!(
        r.write(&w("summary", "b", 3), WriteMode::FencedScope)
            .await?
    );
    for (mode, token, expected) in [
        (WriteMode::CheckThenWrite, 4, Some(3)),
        // The floor is now 4: what the check read moves with it.
        (WriteMode::CheckThenWrite, 5, Some(4)),
        (WriteMode::FencedScope, 6, None),
        (WriteMode::FencedSingle, 7, None),
        (WriteMode::FencedRow, 8, None),
        (WriteMode::Unfenced, 9, None),
    ] {
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
    let db = common::start().await?;
    let r = &db.resource;
    let m = WriteMode::FencedSingle;
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
    assert!(r
        .attempts(SCOPE)
        .await?
        .iter()
        .all(|a| a.mode == "fenced-single"));
    Ok(())
}
