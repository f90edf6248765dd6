//! The lease store's edge cases against a real PostgreSQL: held vs expired vs
//! released, renew after expiry refused, tokens never reused, the local deadline.

mod common;

use std::time::{Duration, Instant};

use fencing::lease::{stmt, JudgedBy};
use fencing::Error;

const TTL: Duration = Duration::from_millis(1500);

/// The lease side of the lab's own design, whose statements the store runs by default.
fn seed004() -> &'static fencing::profile::LeaseSql {
    &fencing::profile::Profile::seed004().lease
}
const SHORT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_fresh_lease_is_granted_with_token_1_and_a_held_one_is_refused() -> anyhow::Result<()> {
    let db = common::start().await?;
    let a = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("fresh lease");
    assert_eq!((a.token, a.holder.as_str()), (1, "a"));
    let before = db.lease.inspect("job").await?.expect("row");
    assert!(
        db.lease.acquire("job", "b", TTL).await?.is_none(),
        "held lease must be refused"
    );
    assert!(
        db.lease.acquire("job", "a", TTL).await?.is_none(),
        "even to its own holder"
    );
    let after = db.lease.inspect("job").await?.expect("row");
    assert_eq!(
        (after.holder.as_str(), after.token, &after.expires_at),
        ("a", 1, &before.expires_at)
    );
    Ok(())
}

#[tokio::test]
async fn an_expired_lease_goes_to_the_next_holder_with_the_next_token() -> anyhow::Result<()> {
    let db = common::start().await?;
    let a = db
        .lease
        .acquire("job", "a", SHORT)
        .await?
        .expect("fresh lease");
    db.until_free("job").await?;
    let b = db
        .lease
        .acquire("job", "b", TTL)
        .await?
        .expect("expired lease");
    assert_eq!(b.token, a.token + 1);
    assert_eq!(db.lease.inspect("job").await?.expect("row").holder, "b");
    Ok(())
}

#[tokio::test]
async fn a_released_lease_is_free_at_once_and_its_token_never_goes_back() -> anyhow::Result<()> {
    let db = common::start().await?;
    let a = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("fresh lease");
    assert!(db.lease.release(&a).await?);
    let row = db.lease.inspect("job").await?.expect("row");
    assert!(row.released && row.expired, "{row:?}");
    assert_eq!((row.expires_at.as_str(), row.token), ("-infinity", 1));
    let b = db
        .lease
        .acquire("job", "b", TTL)
        .await?
        .expect("released lease");
    assert_eq!(b.token, 2);
    assert!(
        !db.lease.release(&a).await?,
        "a superseded holding cannot release"
    );
    assert!(
        !db.lease.inspect("job").await?.expect("row").expired,
        "b still holds it"
    );
    Ok(())
}

#[tokio::test]
async fn renew_moves_the_expiry_and_keeps_the_token() -> anyhow::Result<()> {
    let db = common::start().await?;
    let mut a = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("fresh lease");
    let before = db.lease.inspect("job").await?.expect("row");
    let deadline = a.local_deadline();
    let sent = Instant::now();
    assert!(db.lease.renew(&mut a).await?);
    let answered = Instant::now();
    let after = db.lease.inspect("job").await?.expect("row");
    assert!(after.expires_epoch > before.expires_epoch);
    assert_eq!((a.token, after.token), (1, 1));
    assert!(
        a.local_deadline() > deadline,
        "a successful renew moves the local deadline"
    );
    // To TTL minus the margin from a clock read before the request was sent.
    let span = TTL - common::MARGIN;
    assert!(a.local_deadline() >= sent + span && a.local_deadline() <= answered + span);
    Ok(())
}

#[tokio::test]
async fn the_expiry_read_inside_a_transaction_and_the_database_clock_read_as_they_should(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let pool = db.lease.pool();
    assert_eq!(
        stmt::expired_by_now(&db.lease, pool, "job").await?,
        None,
        "no such lease"
    );
    db.lease
        .acquire("job", "a", SHORT)
        .await?
        .expect("fresh lease");
    assert_eq!(
        stmt::expired_by_now(&db.lease, pool, "job").await?,
        Some(false)
    );
    db.until_free("job").await?;
    assert_eq!(
        stmt::expired_by_now(&db.lease, pool, "job").await?,
        Some(true)
    );
    // The database clock, as the evidence quotes it: a timestamp, moving forward.
    let (first, second) = (db.lease.db_clock().await?, db.lease.db_clock().await?);
    let b = first.as_bytes();
    let timestamp = b.len() > 19
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
        && (b[4], b[7], b[10], b[13], b[16]) == (b'-', b'-', b' ', b':', b':');
    assert!(timestamp, "{first:?}");
    assert!(first < second, "{first} then {second}");
    assert_eq!(db.lease.row_count().await?, 1);
    Ok(())
}

#[tokio::test]
async fn renew_after_expiry_is_refused_even_when_nobody_took_over() -> anyhow::Result<()> {
    let db = common::start().await?;
    let mut a = db
        .lease
        .acquire("job", "a", SHORT)
        .await?
        .expect("fresh lease");
    db.until_free("job").await?;
    let deadline = a.local_deadline();
    assert!(!db.lease.renew(&mut a).await?);
    assert_eq!(
        a.local_deadline(),
        deadline,
        "a refused renew leaves the local deadline"
    );
    let row = db.lease.inspect("job").await?.expect("row");
    assert!(
        row.expired && row.holder == "a" && row.token == 1,
        "{row:?}"
    );
    // Re-acquiring is the only way back, and it yields a new token.
    assert_eq!(
        db.lease
            .acquire("job", "a", TTL)
            .await?
            .expect("expired")
            .token,
        2
    );
    Ok(())
}

#[tokio::test]
async fn renew_with_a_superseded_token_or_another_holder_name_is_refused() -> anyhow::Result<()> {
    let db = common::start().await?;
    let mut a = db
        .lease
        .acquire("job", "a", SHORT)
        .await?
        .expect("fresh lease");
    db.until_free("job").await?;
    let b = db
        .lease
        .acquire("job", "b", TTL)
        .await?
        .expect("expired lease");
    assert!(
        !db.lease.renew(&mut a).await?,
        "token 1 was superseded by token 2"
    );
    let mut impostor = b.clone();
    impostor.holder = "a".into();
    assert!(
        !db.lease.renew(&mut impostor).await?,
        "holder must match too"
    );
    let mut b = b;
    assert!(db.lease.renew(&mut b).await?);
    Ok(())
}

#[tokio::test]
async fn the_local_deadline_is_ttl_minus_margin_from_before_the_request() -> anyhow::Result<()> {
    let db = common::start().await?;
    let before = Instant::now();
    let a = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("fresh lease");
    let after = Instant::now();
    let span = TTL - common::MARGIN;
    assert!(a.local_deadline() >= before + span && a.local_deadline() <= after + span);
    assert!(a.locally_valid());
    // Once the monotonic clock reaches the deadline, the grant says so.
    harness::wait::until("the local deadline passes", TTL * 4, || async {
        Ok::<_, std::convert::Infallible>(Instant::now() >= a.local_deadline())
    })
    .await?;
    assert!(!a.locally_valid());
    Ok(())
}

#[tokio::test]
async fn a_ttl_not_above_the_margin_is_an_error_not_a_lease() -> anyhow::Result<()> {
    let db = common::start().await?;
    let err = db
        .lease
        .acquire("job", "a", common::MARGIN)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timing { .. }), "{err}");
    assert!(
        db.lease.inspect("job").await?.is_none(),
        "nothing was written"
    );
    Ok(())
}

#[tokio::test]
async fn inside_a_transaction_now_is_frozen_and_only_clock_timestamp_sees_expiry(
) -> anyhow::Result<()> {
    use sqlx::Connection;
    let db = common::start().await?;
    let before_grant = Instant::now();
    let a = db
        .lease
        .acquire("job", "a", SHORT)
        .await?
        .expect("fresh lease");
    let mut conn = db.lease.pool().acquire().await?;
    let before_begin = Instant::now();
    let mut t = conn.begin().await?;
    let start = stmt::clocks(&mut *t).await?;
    let after_start = Instant::now();
    db.until_free("job").await?;
    let before_later = Instant::now();
    let later = stmt::clocks(&mut *t).await?;
    let elapsed_ms = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1000.0;
    assert_eq!(later.now, start.now);
    // clock_timestamp() - now() is T's age: bracketed by the monotonic clock (1 ms for the two
    // clocks' rates and rounding).
    let (low, high) = (
        elapsed_ms(after_start, before_later),
        elapsed_ms(before_begin, Instant::now()),
    );
    assert!(
        later.clock_minus_now_ms >= low - 1.0 && later.clock_minus_now_ms <= high + 1.0,
        "T's age {} ms, monotonic {low}..{high} ms",
        later.clock_minus_now_ms
    );
    // The lease came free no sooner than its TTL after the grant was asked for (from the
    // request, not from T's start: on a loaded machine the pool and BEGIN took 260 ms of the
    // TTL, and the wait from T's start was 239 ms of 500).
    let since_request = elapsed_ms(before_grant, before_later);
    assert!(
        since_request >= SHORT.as_secs_f64() * 1000.0 - 50.0,
        "free {since_request} ms after the grant was asked for"
    );
    assert_eq!(
        stmt::expired_by_now(&db.lease, &mut *t, "job").await?,
        Some(false)
    );
    assert!(stmt::acquire(seed004(), &mut *t, "job", "b", TTL)
        .await?
        .is_none());
    assert!(!stmt::renew(seed004(), &mut *t, &a, JudgedBy::ClockTimestamp).await?);
    assert!(
        stmt::renew(seed004(), &mut *t, &a, JudgedBy::Now).await?,
        "the stale now() revives it"
    );
    t.rollback().await?;
    Ok(())
}

#[tokio::test]
async fn a_lease_table_truncated_by_hand_reissues_token_1_below_the_resources_floor(
) -> anyhow::Result<()> {
    use fencing::lease::operator_mistake;
    use fencing::resource::{Write, WriteMode};
    let db = common::start().await?;
    let write = |token| Write {
        scope: common::SCOPE,
        part: "summary",
        content: "rows",
        writer: "a",
        token,
    };
    for expected in 1..=2 {
        let g = db
            .lease
            .acquire("job", "a", TTL)
            .await?
            .expect("free lease");
        assert_eq!(g.token, expected);
        assert!(
            db.resource
                .write(&write(g.token), WriteMode::Fenced)
                .await?
        );
        assert!(db.lease.release(&g).await?);
    }
    assert_eq!(db.resource.floor(common::SCOPE).await?, Some(2));

    operator_mistake::truncate_the_lease_table(seed004(), db.lease.pool()).await?;
    assert_eq!(db.lease.row_count().await?, 0);
    let g = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("empty table");
    assert_eq!(g.token, 1, "the reset forgot every token issued");
    let row = db.lease.inspect("job").await?.expect("row");
    assert!(
        !row.expired && row.holder == "a" && row.token == 1,
        "{row:?}"
    );
    assert!(
        !db.resource
            .write(&write(g.token), WriteMode::Fenced)
            .await?,
        "the current holder's token 1 is below the floor 2"
    );
    assert_eq!(db.resource.floor(common::SCOPE).await?, Some(2));
    Ok(())
}

#[tokio::test]
async fn the_timed_acquire_grants_refuses_and_takes_over_like_the_acquire() -> anyhow::Result<()> {
    let db = common::start().await?;
    let (a, span) = db.lease.acquire_timed("job", "a", SHORT).await?;
    let a = a.expect("fresh lease");
    assert_eq!((a.token, a.holder.as_str(), a.ttl), (1, "a", SHORT));
    assert!(span.started_us <= span.finished_us, "{span:?}");
    let row = db.lease.inspect("job").await?.expect("row");
    let (refused, _) = db.lease.acquire_timed("job", "b", TTL).await?;
    assert!(refused.is_none(), "a held lease is refused");
    let after = db.lease.inspect("job").await?.expect("row");
    assert_eq!(
        (after.holder, after.token, after.expires_at),
        (row.holder, row.token, row.expires_at),
        "a refused acquire changes nothing"
    );
    db.until_free("job").await?;
    let (b, _) = db.lease.acquire_timed("job", "b", TTL).await?;
    assert_eq!(b.expect("expired lease").token, 2);
    let err = db.lease.acquire_timed("job", "c", common::MARGIN).await;
    assert!(matches!(err, Err(Error::Timing { .. })), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn the_timed_acquire_span_covers_a_wait_on_the_row_lock() -> anyhow::Result<()> {
    use sqlx::Connection;
    let db = common::start().await?;
    let mut a = db
        .lease
        .acquire("job", "a", TTL)
        .await?
        .expect("fresh lease");
    // T holds the lease row's lock (a renew inside an open transaction).
    let mut t_conn = db.lease.pool().acquire().await?;
    let mut t = t_conn.begin().await?;
    assert!(stmt::renew(seed004(), &mut *t, &a, JudgedBy::Now).await?);
    let mut conn = db.lease.pool().acquire().await?;
    let pid = harness::observe::backend_pid(&mut conn).await?;
    let contender = tokio::spawn(async move {
        fencing::lease::for_experiments::acquire_timed(seed004(), &mut *conn, "job", "b", TTL).await
    });
    let admin = db.cluster.admin_pool().await?;
    harness::wait::until(
        "the timed acquire waits on a lock",
        Duration::from_secs(30),
        || async {
            let act = harness::observe::activity(&admin, pid).await?;
            Ok::<_, sqlx::Error>(act.is_some_and(|a| a.wait_event_type.as_deref() == Some("Lock")))
        },
    )
    .await?;
    let seen_waiting = Instant::now();
    harness::wait::prescribed(Duration::from_millis(200)).await;
    // Measured before the lock is released: the span must be at least this long.
    let held_ms = seen_waiting.elapsed().as_micros() as i64 / 1000;
    t.rollback().await?;
    let timed = contender.await??;
    assert_eq!(timed.token, None, "the lease is still a's");
    let span_ms = (timed.span.finished_us - timed.span.started_us) / 1000;
    assert!(
        span_ms + 1 >= held_ms,
        "the span ({span_ms} ms) must cover the wait seen from outside ({held_ms} ms)"
    );
    assert!(db.lease.renew(&mut a).await?, "a still holds it");
    Ok(())
}

#[tokio::test]
async fn the_table_gate_holds_every_acquire_at_the_server_until_it_opens() -> anyhow::Result<()> {
    let db = common::start().await?;
    // With nobody holding the table, nothing waits for it: the count F3 checks is no constant.
    assert_eq!(db.lease.waiting_for_the_table().await?, 0);
    let gate = db.lease.gate().await?;
    let contenders: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let lease = db.lease.clone();
            tokio::spawn(async move { lease.acquire_timed("job", who, TTL).await })
        })
        .collect();
    harness::wait::until(
        "both acquires wait at the server for the held table",
        Duration::from_secs(30),
        || async { Ok::<_, Error>(db.lease.waiting_for_the_table().await? == 2) },
    )
    .await?;
    assert!(
        contenders.iter().all(|c| !c.is_finished()),
        "an acquire ended while the table was held"
    );
    gate.open().await?;
    let mut winners = Vec::new();
    for c in contenders {
        if let (Some(grant), _) = c.await?? {
            winners.push(grant.token);
        }
    }
    assert_eq!(winners.len(), 1, "one winner once let go: {winners:?}");
    assert_eq!(db.lease.waiting_for_the_table().await?, 0);
    Ok(())
}
