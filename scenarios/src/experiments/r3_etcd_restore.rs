//! R3 — a token that goes back: etcd restored from a snapshot (etcd #16028). The etcd
//! lock's token is the lock key's create revision — greater for every later write while the
//! cluster keeps its history. An operator who restores a cluster from a snapshot taken before the
//! last grants (the etcd 3.4 way: every member stopped, each data directory restored from the
//! same file, every member started) turns the revision back: the next grant's revision is one the
//! resource has seen exceeded.
//!
//! On a three-member cluster (`docker::EtcdMembers`): a snapshot is saved; A (a holder process)
//! takes the lock, writes with its revision — the resource's floor — and releases.
//! 1. **Negative control**: the cluster is restored from the snapshot; the revision goes back;
//!    B (a holder process, the rightful holder now) takes the lock with a smaller revision and
//!    its write is rejected — for ever, until the revisions pass A's — and the
//!    token-regression check names the token gone back.
//! 2. **Positive control** (the operator's remedy on 3.4 — 3.5's `--bump-revision` is newer
//!    than Debian's etcd): restored again, then, before any client, the revision raised past the
//!    one before the restore (writes of a scratch key); B's revision is greater than A's and its
//!    write is accepted.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use fencing::lease::{LeaseStore, StoreAt, StoreId};
use fencing::resource::WriteMode;
use harness::docker::EtcdMembers;
use harness::evidence::Recorder;
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::kit::paused_holder::{step, A_CONTENT, B_CONTENT};
use crate::kit::regression::{self, regressions, GrantSeen, Kind};
use crate::testbed::{shown, HOLDER_A, HOLDER_B, LEASE, SCOPE};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "R3",
    title: "a token that goes back: a three-member etcd cluster restored from a snapshot taken before the last grant — the next holder's revision is smaller and the fence rejects it; raising the revision before serving holds",
    about: About {
        fault: "a three-member etcd cluster restored from an old snapshot",
        shows: "a restore turns revisions back and fences out the rightful holder; raising them first holds",
        paragraph: "An etcd lock's token is the revision at which its key was created, which \
                    only grows while the cluster keeps its history. The lab saves a snapshot, \
                    grants a few more locks, and A takes the lock and writes, setting the \
                    resource's floor to its revision. Then the whole cluster is restored from \
                    the snapshot: the revision goes back, and B, the rightful holder now, is \
                    granted a smaller revision and its write is rejected by the fence (the \
                    negative control, which a token-regression check also catches). Restored \
                    again, but with the revision raised past the old one before any client \
                    connects, B's revision is greater and its write is accepted.",
    },
    checks: Checks::fixed(12),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None("R3 starts its own three-member etcd cluster; it runs with --lease-store single"),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("its holders take their lease from a lock service (--store-endpoint); a holder of yours takes its lease from PostgreSQL"),
    fault_moments: &[],
    // The lease lives on the servers this experiment starts, not in lease26.
    lanes: StoreLanes::Lease("etcd", "etcd ×3 (lease)"),
};

pub struct R3;

impl Scenario for R3 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            if fencing::stores::store_kind(StoreId::Etcd).is_none() {
                crate::testbed::skip_unless_required(rec, "R3 needs the etcd client: this build left it out (build with --features lab/lock-services)".into())?;
                return Ok(());
            }
            if !bed
                .containers_here(rec, "R3 needs a three-member etcd cluster in containers")
                .await?
            {
                return Ok(());
            }
            let cluster = harness::docker::etcd_members(&bed.run_mark)
                .await
                .context("R3 could not start its three-member etcd cluster")?;
            let outcome = timeline(bed, rec, &*cluster).await;
            cluster.remove().await;
            outcome
        })
    }
}

/// What a holder process did: its token, when its grant came (and was asked), whether its
/// write was accepted.
struct Ran {
    token: i64,
    sent: Instant,
    at: Instant,
    accepted: bool,
    code: i32,
}

/// One holder process from acquire to exit on the cluster: acquire, write (given the go-line at
/// once), renew, release.
async fn holder_run(
    bed: &Testbed,
    rec: &mut Recorder,
    cluster: &dyn EtcdMembers,
    who: (&str, &str),
    content: &str,
) -> anyhow::Result<Ran> {
    let (holder, actor) = who;
    let mut spec = bed.holder_spec(holder, content, WriteMode::Fenced, true);
    spec.flags.store = "etcd".into();
    spec.flags.store_endpoint = Some(cluster.endpoints());
    let sent = Instant::now();
    let mut h = Holder::spawn(&spec).await?;
    let (at, acquired) = h.next(&format!("{actor}'s acquire"), EVENT_TIMEOUT).await?;
    step(bed, rec, at, actor, "acquire", &acquired).await;
    let token = h.acquired_token(&acquired)?;
    let (_, ready) = h
        .next(&format!("{actor} at its write point"), EVENT_TIMEOUT)
        .await?;
    if !matches!(ready, Event::AtWritePoint { .. }) {
        bail!(h.unexpected("AT_WRITE_POINT", &ready));
    }
    h.send(Request::Go).await?;
    let (wat, write) = h.next(&format!("{actor}'s write"), EVENT_TIMEOUT).await?;
    step(bed, rec, wat, actor, "write", &write).await;
    let Event::Write { accepted, .. } = write else {
        bail!(h.unexpected("WRITE …", &write));
    };
    for what in ["renew after the write", "release"] {
        let (at, event) = h.next(&format!("{actor}'s {what}"), EVENT_TIMEOUT).await?;
        step(bed, rec, at, actor, what, &event).await;
    }
    let code = h.exit_code(EVENT_TIMEOUT).await?;
    Ok(Ran {
        token,
        sent,
        at,
        accepted,
        code,
    })
}

/// A first grant, the snapshot saved after it, and two grants after the snapshot: the history
/// a restore will forget.
async fn history_a_restore_forgets(
    bed: &Testbed,
    rec: &mut Recorder,
    cluster: &dyn EtcdMembers,
) -> anyhow::Result<()> {
    let own: Arc<dyn LeaseStore> = fencing::stores::open(
        StoreId::Etcd,
        &StoreAt {
            table: bed.lease_table.clone(),
            endpoints: vec![cluster.endpoints()],
        },
    )
    .await?;
    let ttl = own.granted_ttl(bed.case().ttl);
    let first = own
        .acquire(LEASE, "holder-c", ttl)
        .await?
        .context("the first lock on a fresh cluster was refused")?;
    own.release(&first).await?;
    let saved = cluster.snapshot().await?;
    let at_snapshot = cluster.revision().await?;
    rec.note(format!(
        "a snapshot is saved at revision {at_snapshot}: {saved}"
    ));
    // Grants after the snapshot, before A's: the history a restore will forget.
    for _ in 0..2 {
        let later = own
            .acquire(LEASE, "holder-c", ttl)
            .await?
            .context("a lock on a free cluster was refused")?;
        own.release(&later).await?;
    }
    Ok(())
}

/// The second restore, the revision raised past the old one before any client: B's revision is
/// greater than A's, its write accepted.
async fn restored_and_raised(
    bed: &mut Testbed,
    rec: &mut Recorder,
    cluster: &dyn EtcdMembers,
    a: &Ran,
    before: i64,
    started: Instant,
) -> anyhow::Result<()> {
    // 2. Restored again, the revision raised past the old one before any client.
    let lines = cluster.restore().await?;
    let restored = cluster.revision().await?;
    let raise = before - restored + 1;
    cluster.bump(raise).await?;
    let raised = cluster.revision().await?;
    rec.step(
        harness::evidence::Mark::Info,
        "lab",
        "restore again, raise the revision",
        None,
        format!("revision {restored} → {raised}"),
        None,
    );
    rec.check_that(
        "the remedy: restored again, the revision raised past the one before the first restore, before any client",
        raised > before,
        format_args!(
            "revision {restored} after the restore, {raised} after {raise} writes of a scratch key (before the first restore: {before}); etcdctl: {}",
            lines.join(" · ")
        ),
    );
    let b2 = holder_run(bed, rec, cluster, (HOLDER_B, "B"), B_CONTENT).await?;
    rec.check_that(
        format!("B's revision {} is greater than A's {}", b2.token, a.token),
        b2.token > a.token,
        format_args!("A {}, B {}", a.token, b2.token),
    );
    rec.check_that(
        "B's write is accepted",
        b2.accepted && b2.code == exit::WROTE,
        format_args!(
            "WRITE accepted={}; {}",
            b2.accepted,
            describe(Some(b2.code))
        ),
    );
    let grants = [grant(a, HOLDER_A, started), grant(&b2, HOLDER_B, started)];
    let found = regression::regressions_with_control(rec, &grants);
    rec.check_that(
        "the token-regression check finds no token gone back",
        found.is_empty(),
        regression::shown(&grants, &found),
    );
    let floor = bed.resource.floor(SCOPE).await?;
    rec.check_that(
        "the floor follows B's revision",
        floor == Some(b2.token),
        format_args!("fence_floor={}", shown(floor)),
    );
    Ok(())
}

/// `r`'s grant to `holder` as the token-regression check reads it, timed from `started`.
fn grant(r: &Ran, holder: &str, started: Instant) -> GrantSeen {
    let ms = |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    GrantSeen::acknowledged(
        holder,
        r.token,
        ms(r.sent),
        ms(r.at),
        format!(
            "{holder} ACQUIRED revision={} at {:.0} ms",
            r.token,
            ms(r.at)
        ),
    )
}

async fn timeline(
    bed: &mut Testbed,
    rec: &mut Recorder,
    cluster: &dyn EtcdMembers,
) -> anyhow::Result<()> {
    rec.note(format!(
        "{} — three members (heartbeat 50 ms, election 500 ms) at {}; {}",
        cluster.version(),
        cluster.endpoints(),
        cluster.image_note()
    ));
    history_a_restore_forgets(bed, rec, cluster).await?;

    let started = Instant::now();
    let a = holder_run(bed, rec, cluster, (HOLDER_A, "A"), A_CONTENT).await?;
    rec.check_that(
        format!(
            "A takes the lock (revision {}) and writes; the floor is A's",
            a.token
        ),
        a.accepted && bed.resource.floor(SCOPE).await? == Some(a.token),
        format_args!(
            "WRITE accepted={}; fence_floor={}",
            a.accepted,
            shown(bed.resource.floor(SCOPE).await?)
        ),
    );
    rec.check(
        "A exits having written and released",
        &describe(Some(exit::WROTE)),
        &describe(Some(a.code)),
    );
    let before = cluster.revision().await?;

    // 1. Restored from the snapshot.
    let lines = cluster.restore().await?;
    let after = cluster.revision().await?;
    rec.step(
        harness::evidence::Mark::Info,
        "lab",
        "restore from the snapshot",
        None,
        format!("revision {before} → {after}"),
        None,
    );
    rec.check_that(
        "negative control exposes: restored from the snapshot, the cluster's revision goes back",
        after < before,
        format_args!(
            "revision {before} before the restore, {after} after; etcdctl: {}",
            lines.join(" · ")
        ),
    );
    let b = holder_run(bed, rec, cluster, (HOLDER_B, "B"), B_CONTENT).await?;
    rec.check_that(
        format!("negative control exposes: B, the rightful holder, is granted revision {} — below A's {}", b.token, a.token),
        b.token < a.token,
        format_args!("A {}, B {}", a.token, b.token),
    );
    rec.check_that(
        "negative control exposes: B's write is rejected by the fence — A's revision is the floor, and stays it until the revisions pass it",
        !b.accepted && b.code == exit::REJECTED,
        format_args!("WRITE accepted={}; {}; fence_floor={}", b.accepted, describe(Some(b.code)), shown(bed.resource.floor(SCOPE).await?)),
    );
    let grants = [grant(&a, HOLDER_A, started), grant(&b, HOLDER_B, started)];
    let found = regressions(&grants);
    rec.check_that(
        "the token-regression check catches it",
        found.iter().any(|r| r.kind == Kind::Backwards),
        regression::shown(&grants, &found),
    );

    restored_and_raised(bed, rec, cluster, &a, before, started).await?;

    Ok(())
}
