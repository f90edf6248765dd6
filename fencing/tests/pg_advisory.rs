//! The advisory-lock stores (`pg-advisory`, `pg-advisory-fenced`) against a real PostgreSQL:
//! the lock refused while its session lives, kept alive by renewals past its TTL, lost when the
//! session says nothing for a TTL (the server's `idle_session_timeout`, by its own clock), taken
//! over with a greater token by the fenced form and with none by the plain one, freed by a
//! release, and a renewal that finds its session ended says so in the server's words.

mod common;

use std::time::{Duration, Instant};

use fencing::lease::pg_advisory::AdvisoryLeaseStore;
use fencing::lease::LeaseStore;

const TTL: Duration = Duration::from_millis(1000);

async fn store(db: &common::Db, fenced: bool) -> anyhow::Result<AdvisoryLeaseStore> {
    Ok(AdvisoryLeaseStore::open(db.lease.pool().clone(), common::MARGIN, fenced).await?)
}

#[tokio::test]
async fn a_held_lock_is_refused_and_renewals_keep_it_past_its_ttl() -> anyhow::Result<()> {
    let db = common::start().await?;
    let (a_side, b_side) = (store(&db, true).await?, store(&db, true).await?);
    let mut a = a_side
        .acquire("job", "holder-a", TTL)
        .await?
        .expect("a free lock is granted");
    assert!(a.token > 0, "the fenced store hands out its counter: {a:?}");
    assert!(b_side.acquire("job", "holder-b", TTL).await?.is_none());
    // Renewed every third of the TTL for three TTLs (the renew interval is the timeline's).
    let until = Instant::now() + TTL * 3;
    while Instant::now() < until {
        tokio::time::sleep(TTL / 3).await;
        assert!(a_side.renew(&mut a).await?, "renewal {:?}", a.lost());
    }
    let seen = b_side.inspect("job").await?.expect("a row");
    assert_eq!(
        (seen.holder.as_str(), seen.expired, seen.released),
        ("holder-a", false, false)
    );
    assert!(b_side.acquire("job", "holder-b", TTL).await?.is_none());
    assert!(a_side.release(&a).await?);
    let seen = b_side.inspect("job").await?.expect("a row");
    assert!(seen.released && seen.expired, "{seen:?}");
    let b = b_side
        .acquire("job", "holder-b", TTL)
        .await?
        .expect("a released lock is granted");
    assert!(b.token > a.token, "{} after {}", b.token, a.token);
    assert!(b_side.release(&b).await?);
    Ok(())
}

#[tokio::test]
async fn a_silent_session_is_ended_by_the_server_and_the_next_holder_gets_a_greater_token(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let (a_side, b_side) = (store(&db, true).await?, store(&db, true).await?);
    let mut a = a_side
        .acquire("job", "holder-a", TTL)
        .await?
        .expect("a free lock is granted");
    let held = b_side.inspect("job").await?.expect("a row");
    assert!(!held.expired && held.remaining_ms() > 0.0, "{held:?}");
    // Nothing said on A's session: the server ends it a TTL after it went idle.
    let waited = Instant::now();
    harness::wait::until("A's session is ended", Duration::from_secs(10), || {
        b_side.is_free("job")
    })
    .await?;
    assert!(
        waited.elapsed() >= TTL - Duration::from_millis(200),
        "freed after {:?}, before its TTL",
        waited.elapsed()
    );
    let b = b_side
        .acquire("job", "holder-b", TTL)
        .await?
        .expect("the lock of an ended session is granted");
    assert!(b.token > a.token, "{} after {}", b.token, a.token);
    assert!(!a_side.renew(&mut a).await?, "A's session is gone");
    let why = a.lost().expect("why the renewal failed");
    assert!(
        why.contains("the server ended the locking session") && why.contains("1000 ms"),
        "{why}"
    );
    assert!(!a_side.release(&a).await?, "nothing of A's to release");
    assert_eq!(
        b_side.inspect("job").await?.expect("row").holder,
        "holder-b"
    );
    Ok(())
}

#[tokio::test]
async fn the_plain_lock_answers_no_token_and_reset_ends_every_holding() -> anyhow::Result<()> {
    let db = common::start().await?;
    let plain = store(&db, false).await?;
    let a = plain
        .acquire("job", "holder-a", TTL * 10)
        .await?
        .expect("a free lock is granted");
    assert_eq!(a.token, 0, "no token: {a:?}");
    assert!(plain.token_name().starts_with("none"));
    assert_eq!(plain.inspect("job").await?.expect("row").token, 0);
    plain.reset().await?;
    assert!(plain.is_free("job").await?, "reset ended A's session");
    assert!(plain.acquire("job", "holder-b", TTL).await?.is_some());
    Ok(())
}
