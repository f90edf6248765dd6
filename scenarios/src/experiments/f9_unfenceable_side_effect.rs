//! F9 — a side effect that cannot take a token. The fault: the old holder A (token 1) and the new
//! holder B (token 2) both publish "the report is ready" downstream, in either order. Business-key
//! idempotency keeps the *first arrival*: in the order A→B the stale content is kept — the
//! negative control. The versioned publish carries the source token and keeps the highest: B's
//! content in both orders (the fence rebuilt at the business layer).
//!
//! The tokens are real grants, not assumed: A acquires (token 1) with a short TTL, its lease
//! expires by the database clock, B takes over (token 2), and only then does anyone publish.

use anyhow::Context as _;
use fencing::lease::Grant;
use fencing::schema;
use harness::evidence::{Mark, Recorder};

use crate::testbed::{acquired, shown, HOLDER_A, HOLDER_B, LEASE};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F9",
    title: "a side effect that cannot take a token: business-key publish vs versioned publish, in both orders",
    about: About {
        fault: "a side effect (a publish) that cannot check a token",
        shows: "a business-key publish keeps the first arrival; a versioned publish keeps the newest token",
        paragraph: "Not every effect lands in a database that can check a fencing token: here \
                    both holders publish \"the report is ready\" downstream. A acquires token \
                    1, its lease expires and B takes over with token 2 before anyone \
                    publishes. With idempotency by business key, the publisher keeps whichever \
                    message arrives first: in the order B then A, B's content is kept, but in \
                    the order A then B the stale content wins, the negative control. The \
                    versioned publish carries the source token and keeps the highest, so B's \
                    content is kept in both orders: the fence rebuilt at the business layer.",
    },
    checks: Checks::fixed(5),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F9;

const KEY: &str = "daily-report/2026-11-29";
const A_STALE: &str = "A-stale";
const B_FRESH: &str = "B-fresh";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    BusinessKey,
    Versioned,
}

impl Scenario for F9 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let (p, c) = (bed.params().clone(), bed.case().clone());
            let a = bed
                .lease
                .acquire(LEASE, HOLDER_A, p.short_ttl)
                .await?
                .context("holder-a could not acquire a fresh lease")?;
            rec.step(
                Mark::Acquired,
                "A",
                "acquire",
                Some(a.token),
                acquired(Some(&a)),
                None,
            );
            bed.until_lease_expired("A's lease").await?;
            let b = bed
                .lease
                .acquire(LEASE, HOLDER_B, c.ttl)
                .await?
                .context("holder-b could not acquire A's expired lease")?;
            rec.step(
                Mark::Acquired,
                "B",
                "acquire",
                Some(b.token),
                acquired(Some(&b)),
                None,
            );
            let row = bed.lease.inspect(LEASE).await?;
            rec.check(
                "before anything is published, A's holding (token 1) is superseded: the lease is B's, token 2",
                "A token=1; lease holder-b token=2 unexpired",
                &format!(
                    "A token={}; lease {}",
                    a.token,
                    shown(row.map(|r| format!(
                        "{} token={} {}",
                        r.holder,
                        r.token,
                        if r.expired { "expired" } else { "unexpired" }
                    )))
                ),
            );
            rec.note(format!(
                "A publishes with its superseded token {}, B with token {}",
                a.token, b.token
            ));
            let grants = (&a, &b);
            let (b_ok, a_ok, kept) = publish(bed, rec, grants, Variant::BusinessKey, false).await?;
            rec.check(
                "business key, order B→A: A's duplicate is dropped, B's content kept",
                &format!("B accepted=true, A accepted=false, kept {B_FRESH}"),
                &format!("B accepted={b_ok}, A accepted={a_ok}, kept {kept}"),
            );
            let (b_ok, a_ok, kept) = publish(bed, rec, grants, Variant::BusinessKey, true).await?;
            rec.note(format!(
                "business key, order A→B: A accepted={a_ok}, B accepted={b_ok}, kept {kept}"
            ));
            rec.expose(
                "idempotency keeps the first arrival, not the newest: the old holder's stale content was kept",
                a_ok && !b_ok && kept == A_STALE,
                format_args!("kept {kept}"),
            );
            for a_first in [true, false] {
                let order = if a_first { "A→B" } else { "B→A" };
                let (_, _, kept) = publish(bed, rec, grants, Variant::Versioned, a_first).await?;
                rec.check(
                    format!("versioned publish, order {order}: B's content is kept"),
                    B_FRESH,
                    &kept,
                );
            }
            Ok(())
        })
    }
}

/// Publishes A's and B's content with their grants' tokens, in the given order, on an empty
/// resource side (the lease, and with it the grants, stay as they are). Returns (B's publish
/// stored, A's publish stored, the content kept).
async fn publish(
    bed: &mut Testbed,
    rec: &mut Recorder,
    (a, b): (&Grant, &Grant),
    variant: Variant,
    a_first: bool,
) -> anyhow::Result<(bool, bool, String)> {
    schema::reset(bed.resource.pool()).await?;
    let phase = match (variant, a_first) {
        (Variant::BusinessKey, true) => "business key, A→B",
        (Variant::BusinessKey, false) => "business key, B→A",
        (Variant::Versioned, true) => "versioned, A→B",
        (Variant::Versioned, false) => "versioned, B→A",
    };
    rec.step(Mark::Info, "lab", phase, None, "", None);
    let p = &bed.publisher;
    let mut stored = [false; 2];
    let order: [(usize, &str, &str, i64); 2] = [
        (0, HOLDER_A, A_STALE, a.token),
        (1, HOLDER_B, B_FRESH, b.token),
    ];
    let order = if a_first { order } else { [order[1], order[0]] };
    for (i, who, content, token) in order {
        stored[i] = match variant {
            Variant::BusinessKey => p.publish(KEY, content, who, token).await?,
            Variant::Versioned => p.publish_versioned(KEY, content, who, token).await?,
        };
        let action = match variant {
            Variant::BusinessKey => "publish (business key)",
            Variant::Versioned => "publish (versioned)",
        };
        let actor = if who == HOLDER_A { "A" } else { "B" };
        let outcome = format!("stored={}", stored[i]);
        rec.step(
            Mark::Write {
                accepted: stored[i],
            },
            actor,
            action,
            Some(token),
            outcome,
            None,
        );
    }
    let kept = shown(p.published(KEY).await?.map(|x| x.content));
    Ok((stored[1], stored[0], kept))
}
