//! The lease table renewed in batches (`postgres-batched`) against a real PostgreSQL:
//! one statement renews every lease a holder names, each only if its holding is still the
//! current one — a lease of the batch taken over meanwhile answers `false` and stays its new
//! holder's, the others are renewed (their expiry moved by the database's clock) — and a design
//! that is not seed 004's lease table is refused in one line.

mod common;

use std::time::Duration;

use fencing::lease::batched::BatchedLeaseStore;
use fencing::lease::LeaseStore;

const TTL: Duration = Duration::from_millis(2000);

#[tokio::test]
async fn one_statement_renews_the_current_holdings_and_leaves_a_lost_one_to_its_new_holder(
) -> anyhow::Result<()> {
    let db = common::start().await?;
    let store = BatchedLeaseStore::new(db.lease.clone())?;
    let mut grants = Vec::new();
    for name in ["job-1", "job-2", "job-3"] {
        grants.push(
            store
                .acquire(name, "holder-a", TTL)
                .await?
                .expect("a free lease is granted"),
        );
    }
    // job-2 is lost: given up, then taken by B with a greater token.
    assert!(store.release(&grants[1]).await?);
    let b = store
        .acquire("job-2", "holder-b", TTL)
        .await?
        .expect("a released lease is granted");
    assert!(b.token > grants[1].token);
    let before: Vec<f64> = futures_expiries(&store, &["job-1", "job-2", "job-3"]).await?;
    let renewed = store.renew_all(&mut grants).await?;
    assert_eq!(renewed, [true, false, true], "{grants:?}");
    let after = futures_expiries(&store, &["job-1", "job-2", "job-3"]).await?;
    assert!(
        after[0] > before[0] && after[2] > before[2],
        "{before:?} → {after:?}"
    );
    assert_eq!(after[1], before[1], "B's holding of job-2 was not touched");
    let job2 = store.inspect("job-2").await?.expect("a row");
    assert_eq!((job2.holder.as_str(), job2.token), ("holder-b", b.token));
    // A batch of one is the single renewal; an empty batch asks nothing.
    assert!(store.renew(&mut grants[0]).await?);
    assert_eq!(store.renew_all(&mut []).await?, Vec::<bool>::new());
    Ok(())
}

#[tokio::test]
async fn a_design_other_than_seed004s_lease_table_is_refused() -> anyhow::Result<()> {
    let db = common::start().await?;
    let quartz = fencing::profile::Profile::built_in("quartz-style").expect("a built-in design");
    let table = fencing::lease::SqlLeaseStore::with_profile(
        db.lease.pool().clone(),
        common::MARGIN,
        std::sync::Arc::new(quartz.clone()),
    );
    let refused = BatchedLeaseStore::new(table).expect_err("quartz-style is not seed 004's table");
    assert!(
        refused
            .to_string()
            .contains("the design in force is quartz-style"),
        "{refused}"
    );
    Ok(())
}

/// Each lease's expiry, by the database's clock (seconds since the epoch).
async fn futures_expiries(store: &BatchedLeaseStore, names: &[&str]) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for name in names {
        out.push(store.inspect(name).await?.expect("a row").expires_epoch);
    }
    Ok(out)
}
