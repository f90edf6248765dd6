//! The publish stand-in (F9's side effect that cannot take a token) against a real PostgreSQL.

mod common;

#[tokio::test]
async fn business_key_idempotency_keeps_the_first_arrival_whatever_its_token() -> anyhow::Result<()>
{
    let db = common::start().await?;
    let p = &db.publisher;
    assert!(p.publish("2026-11-29", "A-stale", "a", 1).await?);
    assert!(!p.publish("2026-11-29", "B-fresh", "b", 2).await?);
    assert_eq!(
        p.published("2026-11-29").await?.map(|x| x.content),
        Some("A-stale".into())
    );
    Ok(())
}

#[tokio::test]
async fn the_versioned_publish_keeps_the_highest_token_in_either_order() -> anyhow::Result<()> {
    let db = common::start().await?;
    let p = &db.publisher;
    assert!(p.publish_versioned("k1", "A-stale", "a", 1).await?);
    assert!(p.publish_versioned("k1", "B-fresh", "b", 2).await?);
    assert!(p.publish_versioned("k2", "B-fresh", "b", 2).await?);
    assert!(!p.publish_versioned("k2", "A-stale", "a", 1).await?);
    for key in ["k1", "k2"] {
        let got = p.published(key).await?.expect("published");
        assert_eq!(
            (got.content.as_str(), got.source_token),
            ("B-fresh", 2),
            "{key}"
        );
    }
    Ok(())
}
