//! What the S-series shares: the locks a session keeps (the databases' own — PostgreSQL's
//! advisory lock, MariaDB's `GET_LOCK`), which an S experiment runs on whatever the run's lease
//! store is. On a run whose store is one of them, it runs there (in its fenced or plain form, as
//! the experiment needs); otherwise on PostgreSQL's advisory lock, on the lab's own server — and
//! gives the run's store back on every path.

use fencing::lease::StoreId;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};

use crate::kit::paused_holder::{A_CONTENT, B_CONTENT};
use crate::testbed::{summary_write, wrote, HOLDER_A, HOLDER_B};

use crate::{LockServices, Outcome, Testbed};

/// Why an S experiment does not run on a lock service's run.
const NOT_A_SESSION_LOCK: &str = "it runs on a lock its session keeps: pg-advisory, its own \
    choice in the default run, or the run's --lease-store pg-advisory or mariadb-getlock (plain or \
    -fenced)";

/// The lock services an S experiment runs on: none in a container.
pub(crate) const LOCK_SERVICES: LockServices = LockServices::AllBut(&[
    (StoreId::Redis, NOT_A_SESSION_LOCK),
    (StoreId::RedisPlain, NOT_A_SESSION_LOCK),
    (StoreId::Etcd, NOT_A_SESSION_LOCK),
    (StoreId::Zookeeper, NOT_A_SESSION_LOCK),
    (StoreId::ZookeeperSuffix, NOT_A_SESSION_LOCK),
]);

/// The store an S experiment runs on when the run's is `run_store`: the run's own session lock
/// in the form asked (`fenced`: with the lock row's counter as the token), else PostgreSQL's.
pub(crate) fn store_for(run_store: StoreId, fenced: bool) -> StoreId {
    let session_lock =
        fencing::stores::store_kind(run_store).is_some_and(|k| k.freed_on_disconnect);
    let (plain, with_token) = run_store
        .named_lock_forms()
        .filter(|_| session_lock)
        .unwrap_or((StoreId::PgAdvisory, StoreId::PgAdvisoryFenced));
    if fenced {
        with_token
    } else {
        plain
    }
}

/// Runs `body` on [`store_for`]'s store (noted when it is not the run's), and makes the run's
/// store the lab's again on every path.
pub(crate) async fn on_a_session_lock(
    bed: &mut Testbed,
    rec: &mut Recorder,
    fenced: bool,
    body: for<'a> fn(&'a mut Testbed, &'a mut Recorder) -> Outcome<'a>,
) -> anyhow::Result<()> {
    let run_store = bed.case().store;
    let store = store_for(run_store, fenced);
    let outcome = async {
        if store != run_store {
            bed.use_store(store).await?;
            bed.reset().await?;
            // The case's tokens read as this store issues them (the runner set them for the
            // run's store).
            let has_token = fencing::stores::store_kind(store).is_some_and(|k| k.has_token);
            rec.blind_tokens(!has_token || !bed.case().sut.claims.token_at_lease);
            rec.note(format!(
                "the lock, {store} (the experiment's own choice: the run's lease store is \
                 {run_store}): {}",
                bed.describe_service().unwrap_or_default()
            ));
        }
        body(bed, rec).await
    }
    .await;
    let back = if store != run_store {
        bed.use_store(run_store).await
    } else {
        Ok(())
    };
    outcome?;
    back
}

/// S3's writes after a failover (PostgreSQL's and MariaDB's): B writes, then A with its old
/// token: in fenced-scope (A rejected), then unfenced (A
/// accepted, the negative control).
pub(crate) async fn writes_after_failover(
    bed: &Testbed,
    rec: &mut Recorder,
    a: i64,
    b: i64,
) -> anyhow::Result<()> {
    for mode in [WriteMode::Fenced, WriteMode::Unfenced] {
        let label = bed.case().mode_label(mode);
        let write = summary_write;
        let b_ok = bed
            .resource
            .write(&write(HOLDER_B, B_CONTENT, b), mode)
            .await?;
        rec.step(
            Mark::Write { accepted: b_ok },
            "B",
            &format!("write ({label})"),
            Some(b),
            wrote(b_ok, b),
            None,
        );
        let a_ok = bed
            .resource
            .write(&write(HOLDER_A, A_CONTENT, a), mode)
            .await?;
        rec.step(
            Mark::Write { accepted: a_ok },
            "A",
            &format!("write ({label})"),
            Some(a),
            wrote(a_ok, a),
            None,
        );
        rec.check_that(
            format!("{label}: B's write is accepted"),
            b_ok,
            wrote(b_ok, b),
        );
        if mode == WriteMode::Unfenced {
            rec.check_that(
                format!("negative control exposes: {label}: A's write after B's, under the lock the failover gave B, is accepted"),
                a_ok,
                wrote(a_ok, a),
            );
        } else {
            rec.check_that(
                format!("{label}: the fenced resource rejects A's write by B's greater token"),
                !a_ok,
                wrote(a_ok, a),
            );
        }
    }
    Ok(())
}

/// S3's check after a failover (PostgreSQL's and MariaDB's): B's grant on the new primary came
/// at once with a token above A's while A's own deadline says A still holds the lock. B's grant,
/// or why there is none.
pub(crate) fn b_took_the_lock_after_failover(
    rec: &mut Recorder,
    b: Option<fencing::lease::Grant>,
    a: &fencing::lease::Grant,
) -> anyhow::Result<fencing::lease::Grant> {
    rec.check_that(
        "B takes the lock on the new primary at once, with a token above A's (the counter \
         replicated), while A's own deadline says A still holds it: two holders by their own \
         reckoning",
        b.as_ref().is_some_and(|b| b.token > a.token) && a.locally_valid(),
        format_args!(
            "{} after A's token={}; A's local deadline {}",
            crate::testbed::acquired(b.as_ref()),
            a.token,
            if a.locally_valid() {
                "not passed"
            } else {
                "passed"
            }
        ),
    );
    anyhow::Context::context(b, "B could not take the lock on the new primary")
}

#[cfg(test)]
mod tests {
    use super::store_for;
    use fencing::lease::StoreId;

    #[test]
    fn each_run_store_maps_to_its_own_session_lock_in_the_form_asked() {
        for (run, fenced, expected) in [
            (StoreId::Postgres, false, StoreId::PgAdvisory),
            (StoreId::Postgres, true, StoreId::PgAdvisoryFenced),
            (StoreId::PgAdvisory, true, StoreId::PgAdvisoryFenced),
            (StoreId::PgAdvisoryFenced, false, StoreId::PgAdvisory),
            (StoreId::PgAdvisoryFenced, true, StoreId::PgAdvisoryFenced),
        ] {
            assert_eq!(store_for(run, fenced), expected, "{run} fenced={fenced}");
        }
        #[cfg(feature = "mariadb")]
        for (run, fenced, expected) in [
            (StoreId::MariadbGetlock, true, StoreId::MariadbGetlockFenced),
            (
                StoreId::MariadbGetlockFenced,
                false,
                StoreId::MariadbGetlock,
            ),
        ] {
            assert_eq!(store_for(run, fenced), expected, "{run} fenced={fenced}");
        }
    }
}
