//! F11 — the lease table reset by hand. The fault: after the lease was granted four times (tokens
//! 1…4, each holder's write accepted, the resource's floor at 4), an operator truncates the lease
//! table. The property it breaks is I2 (tokens never go back): the next grant is token 1 again,
//! below the floor. The fenced resource then rejects a *legitimate*, current holder, and every
//! grant after it while the reissued tokens stay below the floor. The floor cannot tell such a
//! holder from a stale one — it keeps no lease, only the highest token it has seen — so I2 broken
//! turns into a loss of liveness, not of safety (seed 004, table 26-2).
//!
//! A negative control: the flaw must show. If the reset stopped reissuing small tokens (a token
//! source the reset cannot move back), the grant would be above the floor, the write accepted,
//! and F11 fails. What repairs it is in evidence/LIMITS.md.

use anyhow::{ensure, Context as _};
use fencing::lease::{operator_mistake, Grant};
use fencing::resource::Write;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};

use crate::kit::paused_holder::part_line;
use crate::testbed::{
    acquire_mark, acquired, lease_state, shown, wrote, HOLDER_A, HOLDER_B, HOLDER_C, LEASE, SCOPE,
    SUMMARY,
};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F11",
    title: "the lease table reset by hand: tokens start again at 1 below the resource's floor, and the legitimate holder is rejected (I2 broken → liveness lost)",
    about: About {
        fault: "an operator truncates the lease table by hand",
        shows: "tokens restart below the resource's floor and the rightful holder is rejected: liveness lost",
        paragraph: "Four holdings in turn take tokens 1 to 4 and write, so the resource's \
                    floor stands at 4. Then an operator empties the lease table by hand, and \
                    its token counter with it. The next holder, C, is granted token 1 again: \
                    it is the lease's current, unexpired holder, yet the fenced resource \
                    rejects its write, and the next two grants (tokens 2 and 3) are rejected \
                    too. The floor keeps no lease, only the highest token it has seen, so it \
                    cannot tell a reissued token from a stale holder's. Breaking the rule that \
                    tokens never go back costs liveness here, not safety: nothing wrong is \
                    written, but the job cannot run.",
    },
    checks: Checks::fixed(11),
    needs: Needs::Nothing,
    applies: Applies::When(
        |sut| sut.claims.token_at_lease && sut.resource.floor.is_some(),
        "it restarts the lease's tokens below the floor the resource keeps, and the \
         design has no token at the lease or no floor at the resource",
    ),
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: true,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

/// The grants before the reset, A's and B's in turn, each written and released: the first,
/// and the resource's floor after them.
async fn grants_before_the_reset(
    bed: &mut Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<(Option<Grant>, i64)> {
    let mut before = Vec::new();
    let mut first = None;
    for n in 1..=GRANTS_BEFORE {
        let who = if n % 2 == 1 { HOLDER_A } else { HOLDER_B };
        let (g, ok) = grant_and_write(bed, rec, who, &format!("rows={n}00")).await?;
        before.push(format!("token={} accepted={ok}", g.token));
        first.get_or_insert_with(|| g.clone());
        let released = bed.lease.release(&g).await?;
        ensure!(released, "{who} could not release its holding");
        rec.step(
            Mark::Released,
            who,
            "release",
            Some(g.token),
            "RELEASED ok=true",
            None,
        );
    }
    rec.check(
        format!("before the reset: {GRANTS_BEFORE} grants, each holder's write accepted"),
        &(1..=GRANTS_BEFORE)
            .map(|t| format!("token={t} accepted=true"))
            .collect::<Vec<_>>()
            .join(", "),
        &before.join(", "),
    );
    let floor = bed
        .resource
        .floor(SCOPE)
        .await?
        .context("the scope has no floor")?;
    rec.check_token(
        "the resource's floor before the reset",
        GRANTS_BEFORE,
        Some(floor),
    );
    Ok((first, floor))
}

/// holder-c's further grants, each its current holding and each write rejected while the
/// reissued tokens stay below the floor; the floor and the summary unmoved.
async fn holder_c_rejected_while_below_the_floor(
    bed: &mut Testbed,
    rec: &mut Recorder,
    g: Grant,
    floor: i64,
) -> anyhow::Result<()> {
    let further = further_grants(bed, rec, g).await?;
    rec.check(
        format!("{FURTHER_GRANTS} further grants, each holder-c's current holding and each write rejected while the tokens stay below the floor"),
        &(2..2 + FURTHER_GRANTS)
            .map(|t| format!("token={t} current accepted=false"))
            .collect::<Vec<_>>()
            .join(", "),
        &further.join(", "),
    );

    rec.check_token(
        "the resource's floor did not move",
        GRANTS_BEFORE,
        bed.resource.floor(SCOPE).await?,
    );
    let last = if GRANTS_BEFORE % 2 == 1 {
        HOLDER_A
    } else {
        HOLDER_B
    };
    rec.check(
        "the summary is still the last write before the reset",
        &format!("rows={GRANTS_BEFORE}00 by {last} token={GRANTS_BEFORE}"),
        &part_line(&bed.resource.part(SCOPE, SUMMARY).await?),
    );
    let attempts = bed.resource.attempts(SCOPE).await?;
    let by_c = |accepted: bool| {
        attempts
            .iter()
            .filter(|x| x.writer == HOLDER_C && x.accepted == accepted)
            .count()
    };
    rec.check(
        "write_attempt: holder-c's attempts (the resource logged each rejection)",
        &format!("{} rejected, 0 accepted", 1 + FURTHER_GRANTS),
        &format!("{} rejected, {} accepted", by_c(false), by_c(true)),
    );
    rec.note(format!(
        "the rejection lasts while the reissued tokens stay below the floor: here {} grants, \
         in a service as many as were made before the reset. From the floor on, reissued \
         tokens equal old ones, and the floor takes an old holding and a new one with the \
         same number for one (not run here). Never reset the lease table: \
         evidence/LIMITS.md says what repairs it",
        floor - 1
    ));
    Ok(())
}

pub struct F11;

/// The grants before the reset: the resource's floor ends at this token. Four, so that after the
/// first grant past the reset two more (tokens 2 and 3) still fall below it.
const GRANTS_BEFORE: i64 = 4;
/// How many more grants holder-c takes after its first one past the reset.
const FURTHER_GRANTS: i64 = 2;

impl Scenario for F11 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let (first, floor) = grants_before_the_reset(bed, rec).await?;

            let rows = bed.lease_table.row_count().await?;
            operator_mistake::truncate_the_lease_table(
                bed.lease_table.sql(),
                bed.lease_table.pool(),
            )
            .await?;
            let left = bed.lease_table.row_count().await?;
            rec.step(
                Mark::Info,
                "lab",
                "an operator truncates the lease table by hand",
                None,
                format!("lease rows {rows} → {left}"),
                bed.lease.clock().await.ok().flatten(),
            );
            rec.check(
                "an operator truncates the lease table by hand (lease rows before → after)",
                "1 → 0",
                &format!("{rows} → {left}"),
            );

            let (g, ok) = grant_and_write(bed, rec, HOLDER_C, "rows=500(C)").await?;
            rec.expose(
                format!("I2 broken: tokens went back; the first grant after the reset is below the resource's floor {floor}"),
                g.token < floor,
                format_args!("ACQUIRED token={}; fence_floor={floor}", g.token),
            );
            let row = bed.lease.inspect(LEASE).await?;
            rec.check(
                "holder-c is the lease's current, unexpired holder: a legitimate holding",
                &format!("{HOLDER_C} token={} unexpired", g.token),
                &shown(row.as_ref().map(lease_state)),
            );
            rec.expose(
                format!(
                    "liveness lost: the fenced resource rejects the current holder; its floor {floor} \
                     cannot tell a reissued token from a stale holder's"
                ),
                !ok,
                wrote(ok, g.token),
            );
            let first = first.context("no grant before the reset")?;
            crate::kit::stale_handle::probe(
                rec,
                HOLDER_A,
                bed.lease.as_ref(),
                first,
                &g,
                BEFORE_RESET,
            )
            .await?;

            holder_c_rejected_while_below_the_floor(bed, rec, g, floor).await?;

            Ok(())
        })
    }
}

/// Where the probe's old handle comes from, for its check.
const BEFORE_RESET: &str = "from before the reset";

/// holder-c tries again with a new grant each time, as a scheduled job would, releasing `held`
/// first: per grant, its token, whether it is the lease's current holding, whether its write
/// was accepted.
async fn further_grants(
    bed: &Testbed,
    rec: &mut Recorder,
    mut held: Grant,
) -> anyhow::Result<Vec<String>> {
    let mut further = Vec::new();
    for _ in 0..FURTHER_GRANTS {
        let released = bed.lease.release(&held).await?;
        ensure!(released, "holder-c could not release its holding");
        rec.step(
            Mark::Released,
            HOLDER_C,
            "release",
            Some(held.token),
            "RELEASED ok=true",
            None,
        );
        let (g, ok) = grant_and_write(bed, rec, HOLDER_C, "rows=500(C)").await?;
        let current = bed
            .lease
            .inspect(LEASE)
            .await?
            .is_some_and(|r| r.holder == HOLDER_C && r.token == g.token && !r.expired);
        let state = if current { "current" } else { "not current" };
        further.push(format!("token={} {state} accepted={ok}", g.token));
        held = g;
    }
    Ok(further)
}

/// `who` acquires the lease (which must be free) and writes `content` with its token in the
/// fenced mode under test; both are recorded as steps. The grant and whether the write was
/// accepted.
async fn grant_and_write(
    bed: &Testbed,
    rec: &mut Recorder,
    who: &str,
    content: &str,
) -> anyhow::Result<(Grant, bool)> {
    let g = bed.lease.acquire(LEASE, who, bed.case().ttl).await?;
    rec.step(
        acquire_mark(g.as_ref()),
        who,
        "acquire",
        g.as_ref().map(|g| g.token),
        acquired(g.as_ref()),
        bed.lease.clock().await.ok().flatten(),
    );
    let g = g.with_context(|| format!("{who} could not acquire a free lease"))?;
    let write = Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer: who,
        token: g.token,
    };
    let ok = bed.resource.write(&write, WriteMode::Fenced).await?;
    rec.step(
        Mark::Write { accepted: ok },
        who,
        "write",
        Some(g.token),
        wrote(ok, g.token),
        bed.lease.clock().await.ok().flatten(),
    );
    Ok((g, ok))
}
