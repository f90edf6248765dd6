//! F7 — fence granularity. The fault: after B (token 3: another holding came and went after A's,
//! and tokens may have gaps) rewrote `summary`, the old holder A
//! (token 1) writes `detail`, a part B never touched. A row-level fence compares only the row
//! being written, and a new row has nothing to compare against: the negative control (fenced-row)
//! must accept A's write. The scope-level fence keeps one floor for everything the lease protects
//! and rejects it (I3: "whichever part it targets"). In both, A then tries to overwrite
//! `summary`, B's row: both fences must reject that — the row-level one compares the row it
//! overwrites, so its control shows a fence that works where it looks and nowhere else, not a
//! fence that compares nothing.
//!
//! Run again with another fenced mode (`F7-fenced-single`, `F7-fenced-shared`), only the
//! scope-level part runs: the row-level one does not use the fenced mode under test, and was
//! judged in the first case.

use anyhow::{ensure, Context as _};
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};

use crate::testbed::{wrote, DETAIL, HOLDER_A, HOLDER_B, HOLDER_C, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Part, Scenario, Spec, StoreLanes,
    Testbed, NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F7",
    title: "fence granularity: the old holder writes a part the new holder never touched (fenced-row vs fenced-scope)",
    about: About {
        fault: "the old holder writes a part the new one never touched",
        shows: "a row-level fence misses new rows; one floor per scope rejects an old token wherever it writes",
        paragraph: "A writes the summary with token 1, its lease expires, another holding \
                    comes and goes, and B acquires token 3 (tokens may have gaps) and rewrites \
                    the summary. Then A, with its old token, writes the detail, \
                    a part B never touched, and tries the summary again. A fence that compares \
                    tokens row by row has nothing to compare for a new row, so it accepts A's \
                    detail: the negative control. The scope-level fence keeps one floor for \
                    everything the lease protects and rejects both of A's writes. In both \
                    modes A's overwrite of B's own row is rejected, which shows that the \
                    row-level fence works where it looks and nowhere else, rather than \
                    comparing nothing at all.",
    },
    // The row-level part runs once.
    checks: Checks::with(3, &[(Part::FirstFenceOnly, 3)]),
    needs: Needs::Nothing,
    applies: Applies::When(
        |sut| sut.claims.token_at_resource,
        "it compares how much a token check at the resource covers (a row or the scope), \
         and the design checks no token there (token_at_resource = false): F4 shows what \
         reaches it",
    ),
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: true,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

pub struct F7;

impl Scenario for F7 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let modes: &[WriteMode] = if bed.makes(Part::FirstFenceOnly) {
                &[WriteMode::FencedRow, WriteMode::Fenced]
            } else {
                &[WriteMode::Fenced]
            };
            for &mode in modes {
                let mode_label = bed.case().mode_label(mode);
                bed.reset().await?;
                let (b_token, b_ok, a_detail_ok, a_summary_ok) = timeline(bed, rec, mode).await?;
                let label = mode_label.to_uppercase().replace('-', "_");
                rec.note(format!(
                    "{label}: B summary accepted={b_ok}, A(token=1) detail accepted={a_detail_ok}"
                ));
                rec.check(
                    format!("{mode_label}: B's summary write with token={b_token}"),
                    &wrote(true, b_token),
                    &wrote(b_ok, b_token),
                );
                match mode {
                    WriteMode::FencedRow => rec.expose(
                        "a row-level comparison only sees the row being written: a new row has no old token, so the old holder's write to detail succeeded",
                        a_detail_ok,
                        format_args!("A(token=1) detail accepted={a_detail_ok}"),
                    ),
                    _ => rec.check(
                        format!("{mode_label}: A's write to detail with token=1 is rejected by the scope's floor"),
                        &wrote(false, 1),
                        &wrote(a_detail_ok, 1),
                    ),
                };
                rec.check(
                    format!(
                        "{mode_label}: A's overwrite of summary, B's row, with token=1 is rejected"
                    ),
                    &wrote(false, 1),
                    &wrote(a_summary_ok, 1),
                );
            }
            Ok(())
        })
    }
}

/// holder-b's grant, after another holding came and went: B's token is greater than A's by more
/// than one, as tokens may be (gaps allowed) — a fence that counted on the floor's successor
/// refuses B's write.
async fn b_after_another_holding(
    bed: &Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<fencing::lease::Grant> {
    let between = bed
        .lease
        .acquire(LEASE, HOLDER_C, bed.case().ttl)
        .await?
        .context("holder-c could not acquire the expired lease")?;
    bed.lease.release(&between).await?;
    rec.step(
        Mark::Info,
        "C",
        "acquire, release",
        Some(between.token),
        format!("ACQUIRED token={}; released", between.token),
        None,
    );
    bed.lease
        .acquire(LEASE, HOLDER_B, bed.case().ttl)
        .await?
        .context("holder-b could not acquire")
}

/// `who`'s write with `token` as a timeline step, `accepted` or not.
fn stepped(rec: &mut Recorder, who: &str, action: &str, token: i64, accepted: bool) {
    rec.step(
        Mark::Write { accepted },
        who,
        action,
        Some(token),
        wrote(accepted, token),
        None,
    );
}

/// A writes summary with token 1; the lease expires; C takes it and releases it; B acquires
/// token 3 and rewrites summary; A then writes detail with token 1, and summary again. Returns
/// (B's token, B's summary accepted, A's detail accepted, A's summary accepted).
async fn timeline(
    bed: &mut Testbed,
    rec: &mut Recorder,
    mode: WriteMode,
) -> anyhow::Result<(i64, bool, bool, bool)> {
    let mode_label = bed.case().mode_label(mode);
    rec.step(Mark::Info, "lab", mode_label, None, "", None);
    let p = bed.params().clone();
    let a = bed
        .lease
        .acquire(LEASE, HOLDER_A, p.short_ttl)
        .await?
        .context("holder-a could not acquire")?;
    let w = |part, writer, content, token| Write {
        scope: SCOPE,
        part,
        content,
        writer,
        token,
    };
    let a_ok = bed
        .resource
        .write(&w(SUMMARY, HOLDER_A, "summary(A)", a.token), mode)
        .await?;
    ensure!(
        a_ok,
        "holder-a's first write with token {} was rejected",
        a.token
    );
    rec.step(
        Mark::Acquired,
        "A",
        "acquire",
        Some(a.token),
        format!("ACQUIRED token={}", a.token),
        None,
    );
    stepped(rec, "A", "write summary", a.token, a_ok);
    bed.until_lease_expired("holder-a's lease").await?;
    rec.step(
        Mark::LeaseExpired,
        "A",
        "lease expired (database clock)",
        Some(a.token),
        "",
        None,
    );
    let b = b_after_another_holding(bed, rec).await?;
    rec.step(
        Mark::Acquired,
        "B",
        "acquire",
        Some(b.token),
        format!("ACQUIRED token={}", b.token),
        None,
    );
    ensure!(
        b.token > a.token,
        "holder-b got token {} after holder-a's {}: a takeover's token must be greater",
        b.token,
        a.token
    );
    let resource = &bed.resource;
    let write = async |part: &'static str, writer: &'static str, content: &'static str, token| {
        resource.write(&w(part, writer, content, token), mode).await
    };
    let b_ok = write(SUMMARY, HOLDER_B, "summary(B)", b.token).await?;
    stepped(rec, "B", "write summary", b.token, b_ok);
    let a_detail_ok = write(DETAIL, HOLDER_A, "detail(A)", a.token).await?;
    stepped(rec, "A", "write detail", a.token, a_detail_ok);
    let a_summary_ok = write(SUMMARY, HOLDER_A, "summary(A) again", a.token).await?;
    stepped(rec, "A", "write summary again", a.token, a_summary_ok);
    Ok((b.token, b_ok, a_detail_ok, a_summary_ok))
}
