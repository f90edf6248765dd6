//! The probe of a handle whose token the lease store granted again. Where a
//! store hands one token to two holdings of one lease — F11's reset reissues token 1, F14's
//! asynchronous failover grants an acknowledged token again — the old holding's handle and the
//! new holding carry the same lease and token, and only the holder's name tells them apart. A
//! renew or release that names a holding by the lease and the token alone (`holder = :holder`
//! dropped or loosened) takes the new holding's row for the old one's: the renew tells the old
//! holder it still holds, the release frees the new holder's lease. The probe asks both and
//! checks that each is refused and the new holding stays as it was.

use anyhow::ensure;
use fencing::lease::{Grant, LeaseStore};
use harness::evidence::{Mark, Recorder};

use crate::testbed::{lease_state, shown};

/// `old`'s holder renews and then releases `old` on `store`, which has since granted `old`'s
/// token to `current`'s holder; one check: both refused, `current`'s holding unexpired. `when`
/// says where `old` comes from, for the check's text ("from before the reset"); `actor` is the
/// old holder's lane in the timeline picture.
pub async fn probe(
    rec: &mut Recorder,
    actor: &str,
    store: &dyn LeaseStore,
    mut old: Grant,
    current: &Grant,
    when: &str,
) -> anyhow::Result<()> {
    ensure!(
        old.name == current.name && old.token == current.token && old.holder != current.holder,
        "the probe needs one token of one lease held twice: {} token {} and {} token {}",
        old.holder,
        old.token,
        current.holder,
        current.token
    );
    let renewed = store.renew(&mut old).await?;
    rec.step(
        if renewed {
            Mark::Renewed
        } else {
            Mark::Refused
        },
        actor,
        &format!("renew (its handle {when})"),
        Some(old.token),
        format!("RENEWED ok={renewed}"),
        None,
    );
    let released = store.release(&old).await?;
    rec.step(
        if released {
            Mark::Released
        } else {
            Mark::Refused
        },
        actor,
        &format!("release (its handle {when})"),
        Some(old.token),
        format!("RELEASED ok={released}"),
        None,
    );
    let row = store.inspect(&current.name).await?;
    rec.check(
        format!(
            "{}'s handle of token {} {when}: its renew and its release are refused, and {}'s holding of the same token stays",
            old.holder, old.token, current.holder
        ),
        &format!(
            "renewed=false released=false; {} token={} unexpired",
            current.holder, current.token
        ),
        &format!(
            "renewed={renewed} released={released}; {}",
            shown(row.as_ref().map(lease_state))
        ),
    );
    Ok(())
}
