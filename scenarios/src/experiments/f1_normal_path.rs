//! F1 — the normal path, no fault injected: acquire → write → renew → release → the next holder
//! acquires a greater token and writes. Property: the token advances only on acquire (a renew
//! keeps it; one continuous holding is one token), release never moves it back (I2), and the
//! resource's floor follows the tokens it accepted (I3). holder-a holds a second lease meanwhile:
//! its renew and release of the first leave the second alone, and its write under the second
//! lease's token to that lease's own scope is accepted after B's (each scope its own floor). Last, B releases and acquires again:
//! its first holding's handle (token 2) can neither renew nor release the new one (token 3) —
//! a holding is its token, not its holder's name.

use anyhow::Context as _;
use fencing::lease::{Grant, Holding, StoreId};
use fencing::resource::Write;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};

use crate::testbed::{
    acquire_mark, acquired, summary_write, wrote, HOLDER_A, HOLDER_B, LEASE, SUMMARY,
};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Part, Scenario, Spec, StoreLanes,
    Testbed, NO_HOLDER,
};

/// holder-a's second lease, and the scope it guards.
const OTHER: &str = "report-job-other";
const OTHER_SCOPE: &str = "report-other";

const SPEC: Spec = Spec {
    id: "F1",
    title: "normal path: acquire → write → renew → release → the next holder acquires a greater token and writes",
    about: About {
        fault: "none: the normal path",
        shows: "tokens grow only on acquire, a renew keeps the token, a holding is its token",
        paragraph: "Two holders take turns without any fault: A acquires, writes, renews and \
                    releases; B acquires a greater token and writes. The checks pin down \
                    what the other experiments rely on: a renew keeps the token (one \
                    continuous holding is one token), a release never moves it back, the \
                    resource's floor follows the tokens it accepted, each scope keeps a \
                    floor of its own, and an old holding's handle can neither renew nor \
                    release the holding that replaced it. Run it first: if F1 fails, no \
                    other verdict means anything.",
    },
    checks: Checks::with(16, &[(Part::ExpiresUnrenewed, 1), (Part::OneSession, 1)]),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::All,
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F1;

impl Scenario for F1 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let (mut a, other, other_before) = a_holds_two_leases_and_writes(bed, rec).await?;
            a_renews(bed, rec, &mut a, &other_before).await?;
            a_releases(bed, rec, &a).await?;
            let b = b_takes_over_and_writes(bed, rec).await?;
            each_scope_keeps_its_floor(bed, rec, &a, &other).await?;
            // The same holder, a new holding: the first one's handle must not reach it.
            let again = released_and_acquired_again(bed, rec, &b, &a.handle).await?;
            first_holding_cannot_reach_the_new(bed, rec, b).await?;
            if bed.makes(Part::ExpiresUnrenewed) {
                expired_and_taken_over(bed, rec, again).await
            } else {
                Ok(bed.lease.release(&again).await.map(drop)?)
            }
        })
    }
}

/// holder-a acquires the lease and a second one (as a service holds several; on a table, its
/// token is 1 too), and writes under the first: the grants, and the second lease as it stood.
async fn a_holds_two_leases_and_writes(
    bed: &mut Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<(Grant, Grant, Holding)> {
    let ttl = bed.case().ttl;
    let a = bed.lease.acquire(LEASE, HOLDER_A, ttl).await?;
    rec.step(
        acquire_mark(a.as_ref()),
        "holder-a",
        "acquire",
        a.as_ref().map(|g| g.token),
        acquired(a.as_ref()),
        None,
    );
    rec.check(
        "holder-a acquires the lease, token=1",
        "ACQUIRED token=1",
        &acquired(a.as_ref()),
    );
    let a = a.context("holder-a could not acquire a fresh lease")?;
    // A second lease of the same holder, as a service holds several (on a table, its
    // token is 1 too): what holder-a does to the first must not reach it.
    let other = bed
        .lease
        .acquire(OTHER, HOLDER_A, ttl)
        .await?
        .context("holder-a could not acquire a second, fresh lease")?;
    bed.resource.setup_scope(OTHER_SCOPE).await?;
    let other_before = bed
        .lease
        .inspect(OTHER)
        .await?
        .context("the second lease vanished")?;

    let ok = bed
        .resource
        .write(
            &summary_write(HOLDER_A, "rows=100(A)", a.token),
            WriteMode::Fenced,
        )
        .await?;
    rec.step(
        Mark::Write { accepted: ok },
        "holder-a",
        "write",
        Some(a.token),
        wrote(ok, a.token),
        None,
    );
    rec.check(
        "holder-a's write with token=1 is accepted",
        "WRITE accepted=true token=1",
        &wrote(ok, a.token),
    );
    Ok((a, other, other_before))
}

/// holder-a renews: the token unchanged, its local deadline and the store's expiry moved
/// forward, its other lease not moved.
async fn a_renews(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Grant,
    other_before: &Holding,
) -> anyhow::Result<()> {
    let before = bed
        .lease
        .inspect(LEASE)
        .await?
        .context("the lease row vanished")?;
    let (renewed, moved) = renew_watching_deadline(bed, a).await?;
    let after = bed
        .lease
        .inspect(LEASE)
        .await?
        .context("the lease row vanished")?;
    rec.step(
        Mark::Renewed,
        "holder-a",
        "renew",
        Some(a.token),
        format!("ok={renewed}"),
        Some(after.db_now.clone()),
    );
    rec.check(
        "holder-a renews: ok, the token is unchanged, and its local deadline moved forward",
        "RENEW ok=true token=1 deadline=later",
        &format!("RENEW ok={renewed} token={} deadline={moved}", after.token),
    );
    if before.expires_epoch.is_infinite() && after.expires_epoch.is_infinite() {
        // ZooKeeper: no expiry per holding to move — its session lives while the
        // client's heartbeats arrive, and the renew asked that it still does.
        rec.waive(
            "the renew moved expires_at forward",
            format_args!(
                "the store keeps no expiry per holding ({})",
                after.expires_at
            ),
        );
    } else {
        rec.check_that(
            "the renew moved expires_at forward",
            after.expires_epoch > before.expires_epoch,
            format_args!("{} → {}", before.expires_at, after.expires_at),
        );
    }

    other_lease_unmoved(bed, rec, other_before).await?;
    Ok(())
}

/// holder-a releases: the lease free, its token not moved back, its other lease still held.
async fn a_releases(bed: &mut Testbed, rec: &mut Recorder, a: &Grant) -> anyhow::Result<()> {
    let released = bed.lease.release(a).await?;
    let row = bed.lease.inspect(LEASE).await?;
    rec.step(
        Mark::Released,
        "holder-a",
        "release",
        Some(a.token),
        format!("ok={released}"),
        match &row {
            Some(row) => Some(row.db_now.clone()),
            None => bed.lease.clock().await?,
        },
    );
    match row {
        // A lock service keeps nothing of a holding that ended: the lock is gone.
        None if bed.service.is_some() => rec.check(
            "holder-a releases: ok, and the lock service keeps no holding (the lock is gone)",
            "RELEASE ok=true holding=none",
            &format!("RELEASE ok={released} holding=none"),
        ),
        row => {
            let row = row.context("the lease row vanished")?;
            rec.check(
                "holder-a releases: ok, expires_at = -infinity, the token not moved back",
                "RELEASE ok=true expires_at=-infinity token≥1",
                &format!(
                    "RELEASE ok={released} expires_at={} token={}",
                    row.expires_at, row.token
                ),
            )
        }
    };

    let other_after = bed.lease.inspect(OTHER).await?;
    rec.check(
        "holder-a's release left its other lease held",
        &format!("{OTHER}: holder={HOLDER_A} expired=false released=false"),
        &match other_after {
            Some(h) => format!(
                "{OTHER}: holder={} expired={} released={}",
                h.holder, h.expired, h.released
            ),
            None => format!("{OTHER}: no holding"),
        },
    );
    Ok(())
}

/// holder-b acquires at once with a greater token and writes: the floor follows it.
async fn b_takes_over_and_writes(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<Grant> {
    let ttl = bed.case().ttl;
    let b = bed.lease.acquire(LEASE, HOLDER_B, ttl).await?;
    rec.step(
        acquire_mark(b.as_ref()),
        "holder-b",
        "acquire",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    rec.check(
        "holder-b acquires at once after the release, token=2",
        "ACQUIRED token=2",
        &acquired(b.as_ref()),
    );
    let b = b.context("holder-b could not acquire a released lease")?;
    let ok = bed
        .resource
        .write(
            &summary_write(HOLDER_B, "rows=101(B)", b.token),
            WriteMode::Fenced,
        )
        .await?;
    rec.step(
        Mark::Write { accepted: ok },
        "holder-b",
        "write",
        Some(b.token),
        wrote(ok, b.token),
        None,
    );
    rec.check(
        "holder-b's write with token=2 is accepted",
        "WRITE accepted=true token=2",
        &wrote(ok, b.token),
    );

    bed.check_floor(rec, "the resource's fence_floor", 2)
        .await?;
    Ok(b)
}

/// Each scope keeps a floor of its own: holder-a's other lease writes to its scope after B's
/// token, and its first, superseded holding is stale at the first scope.
async fn each_scope_keeps_its_floor(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &Grant,
    other: &Grant,
) -> anyhow::Result<()> {
    // holder-a's other lease guards a scope of its own: B's token there is nothing to
    // it (a fence that raised every scope's floor would refuse it now).
    let ok = bed
        .resource
        .write(
            &Write {
                scope: OTHER_SCOPE,
                part: SUMMARY,
                content: "rows=1(A, other)",
                writer: HOLDER_A,
                token: other.token,
            },
            WriteMode::Fenced,
        )
        .await?;
    rec.check_that(
        format!(
            "holder-a's write to {OTHER_SCOPE}, under its other lease's token, is accepted: each scope keeps its own floor"
        ),
        ok,
        wrote(ok, other.token),
    );
    // And the other way: what report-other accepted counts only there. holder-a's first
    // holding is superseded: its token is stale at the first scope.
    let stale = bed
        .resource
        .write(
            &summary_write(HOLDER_A, "rows=102(A, stale)", a.token),
            WriteMode::Fenced,
        )
        .await?;
    rec.step(
        Mark::Write { accepted: stale },
        "holder-a",
        "stale write",
        Some(a.token),
        wrote(stale, a.token),
        None,
    );
    let what = format!(
        "holder-a's stale write with token=1, after B's token=2, is rejected: the floor of {OTHER_SCOPE} counts only there"
    );
    if bed.case().sut.claims.token_at_resource {
        rec.check(what, "WRITE accepted=false token=1", &wrote(stale, a.token));
    } else {
        // F4 judges a resource without a fence; here it is about floors per scope.
        rec.waive(
            what,
            format_args!(
                "{} checks no token at the resource: no floor to keep per scope",
                bed.case().sut.name
            ),
        );
    }
    bed.lease.release(other).await?;
    Ok(())
}

/// How far a lease's expiry, read twice with nothing between, may move by the reading alone, in
/// seconds: nothing on a table; the 1 ms a lock service's remaining-time answer is rounded to
/// (Redis's PTTL); 5 ms on MariaDB's named lock, whose expiry is the server's clock less the
/// session's idle time (`PROCESSLIST.TIME_MS`) — two reads of one statement that drift apart by
/// a few milliseconds (seen 2 ms). A renew of the lease would reset its idle time and move its
/// expiry by all of it (tens of milliseconds in F1).
fn expiry_slack_s(bed: &Testbed) -> f64 {
    if bed.case().store.service() == Some(fencing::lease::Service::Mariadb) {
        0.005
    } else if bed.service.is_some() {
        0.001
    } else {
        0.0
    }
}

/// Why the other lease's expiry cannot judge a renew on this store, if it cannot: etcd tells a
/// lease's time left in whole seconds; etcd-session renews every lock of a holder at once.
fn why_other_expiry_unjudged(bed: &Testbed, other_expires: &str) -> Option<String> {
    match bed.case().store {
        StoreId::Etcd => Some(format!(
            "etcd tells a lease's time left in whole seconds ({other_expires}), and a renew moves it by milliseconds"
        )),
        StoreId::EtcdSession => Some(
            "etcd-session hangs every lock of a holder on one session lease: renewing one \
             extends them all, by design — they share one fate"
                .into(),
        ),
        _ => None,
    }
}

/// holder-a's renew of its first lease left its other lease as it was: the other's expiry, read
/// again, not moved (beyond what reading it can move it by).
async fn other_lease_unmoved(
    bed: &Testbed,
    rec: &mut Recorder,
    other_before: &fencing::lease::Holding,
) -> anyhow::Result<()> {
    let asked = std::time::Instant::now();
    let other_renewed = bed
        .lease
        .inspect(OTHER)
        .await?
        .context("the second lease vanished")?;
    let answered_in = asked.elapsed();
    // Its expiry by the store's clock, not moved: exactly on a table; within the 1 ms a
    // lock service's remaining-time answer is rounded to (Redis's PTTL), and the time
    // its answer took to come back (the expiry is this host's clock at the answer plus
    // the time left: a late answer reads later; seen 12 ms under load). etcd tells a
    // lease's time left in whole seconds: a renew's few milliseconds cannot show there.
    let what = "holder-a's renew left its other lease as it was: its expiry not moved";
    if let Some(why) = why_other_expiry_unjudged(bed, &other_renewed.expires_at) {
        rec.waive(what, why);
    } else {
        let slack_s = expiry_slack_s(bed)
            + if bed.service.is_some() {
                answered_in.as_secs_f64()
            } else {
                0.0
            };
        rec.check_that(
            what,
            other_renewed.expires_epoch <= other_before.expires_epoch + slack_s,
            format_args!(
                "{OTHER}: expires_at {} → {} (slack {:.1} ms)",
                other_before.expires_at,
                other_renewed.expires_at,
                slack_s * 1e3
            ),
        );
    }
    Ok(())
}

/// holder-b releases its holding `b` and acquires again: a new holding, token 3. On a store that
/// keeps a client's holdings on one session, the new one lives by the session holder-a's first
/// (`a_handle`) did — the lab's one client took every holding so far, holder-a's renewed among
/// them.
async fn released_and_acquired_again(
    bed: &Testbed,
    rec: &mut Recorder,
    b: &fencing::lease::Grant,
    a_handle: &str,
) -> anyhow::Result<fencing::lease::Grant> {
    let ttl = bed.case().ttl;
    let released = bed.lease.release(b).await?;
    rec.step(
        Mark::Released,
        "holder-b",
        "release",
        Some(b.token),
        format!("ok={released}"),
        bed.lease.clock().await?,
    );
    let again = bed.lease.acquire(LEASE, HOLDER_B, ttl).await?;
    rec.step(
        acquire_mark(again.as_ref()),
        "holder-b",
        "acquire again",
        again.as_ref().map(|g| g.token),
        acquired(again.as_ref()),
        None,
    );
    rec.check(
        "holder-b releases and acquires again: a new holding, token=3",
        "RELEASE ok=true ACQUIRED token=3",
        &format!("RELEASE ok={released} {}", acquired(again.as_ref())),
    );
    let again = again.context("holder-b could not acquire its released lease again")?;
    if bed.makes(Part::OneSession) {
        rec.check(
            "holder-b's new holding, taken after holder-a's renewal, lives by the client's one session, as holder-a's first did",
            a_handle,
            again.handle.as_str(),
        );
    }
    Ok(again)
}

/// holder-b's first holding (token 2), released, and its new one (token 3) current: the first
/// one's handle can neither renew nor release the new one, which stays unexpired.
async fn first_holding_cannot_reach_the_new(
    bed: &Testbed,
    rec: &mut Recorder,
    mut stale: fencing::lease::Grant,
) -> anyhow::Result<()> {
    let (renewed, moved) = renew_watching_deadline(bed, &mut stale).await?;
    rec.check(
        "holder-b's first holding (token=2) cannot renew the new one, nor move its own local deadline",
        "RENEW ok=false deadline=unchanged",
        &format!("RENEW ok={renewed} deadline={moved}"),
    );
    let released = bed.lease.release(&stale).await?;
    rec.check(
        "holder-b's first holding (token=2) cannot release the new one",
        "RELEASE ok=false",
        &format!("RELEASE ok={released}"),
    );
    let row = bed.lease.inspect(LEASE).await?;
    rec.check(
        "the lease is still holder-b's new holding, token=3, neither expired nor released",
        "holder=holder-b token=3 expired=false released=false",
        &match row {
            Some(h) => format!(
                "holder={} token={} expired={} released={}",
                h.holder, h.token, h.expired, h.released
            ),
            None => "no holding".to_owned(),
        },
    );
    Ok(())
}

/// holder-b's new holding, renewed once and then left to expire, is taken over by holder-a; its
/// handle's renewal through the same client is then refused. The renewal before opens what the
/// store's client keeps for renewing (etcd's keep-alive stream, on which etcd answers TTL 0 for
/// a lease it expired): found by the lock services' own mutants, etcd's `ttl() > 0` made `>= 0`
/// passed every experiment, whose stale renewals all went through a client that had none open.
async fn expired_and_taken_over(
    bed: &Testbed,
    rec: &mut Recorder,
    mut held: fencing::lease::Grant,
) -> anyhow::Result<()> {
    let ttl = bed.case().ttl;
    let renewed = bed.lease.renew(&mut held).await?;
    harness::wait::until(
        "holder-b's unrenewed holding expired",
        bed.params().wait_timeout,
        || bed.lease.is_free(LEASE),
    )
    .await?;
    let taken = bed.lease.acquire(LEASE, HOLDER_A, ttl).await?;
    rec.step(
        acquire_mark(taken.as_ref()),
        "holder-a",
        "acquire (after B's holding expired)",
        taken.as_ref().map(|g| g.token),
        acquired(taken.as_ref()),
        None,
    );
    let (stale, moved) = renew_watching_deadline(bed, &mut held).await?;
    rec.check(
        "holder-b's holding, renewed once and then left to expire, is taken over by holder-a; its renewal through the same client is refused, and its local deadline stays",
        "RENEW ok=true; A ACQUIRED; RENEW ok=false deadline=unchanged",
        &format!(
            "RENEW ok={renewed}; A {}; RENEW ok={stale} deadline={moved}",
            if taken.is_some() { "ACQUIRED" } else { "refused" }
        ),
    );
    if let Some(taken) = taken {
        bed.lease.release(&taken).await?;
    }
    Ok(())
}

/// Renews `grant` through the lab's store and says how its local deadline moved (`later`,
/// `unchanged`, `earlier`): the holder's own bookkeeping, which a renewal the store granted moves
/// forward (the deadline the holder checks before it writes) and a refused one leaves as it was.
/// The renewal is the store's renewal of a holder's grants (`renew_all`, here of one): a
/// store that renews them together — a statement per batch (`postgres-batched`), a session's
/// one keep-alive (`etcd-session`, `zookeeper-session`) — is judged on that path, which the
/// holders' one-by-one renewals never take (found by the lock services' own mutants: etcd
/// session renewal's `alive && !released` made `||` passed every experiment); on the others it
/// is their renewal of one grant.
async fn renew_watching_deadline(
    bed: &Testbed,
    grant: &mut fencing::lease::Grant,
) -> anyhow::Result<(bool, &'static str)> {
    let before = grant.local_deadline();
    let renewed = bed
        .lease
        .renew_all(std::slice::from_mut(grant))
        .await?
        .first()
        .copied()
        .unwrap_or(false);
    Ok((
        renewed,
        match grant.local_deadline().cmp(&before) {
            std::cmp::Ordering::Greater => "later",
            std::cmp::Ordering::Equal => "unchanged",
            std::cmp::Ordering::Less => "earlier",
        },
    ))
}
