//! What a chaos run's verdict says: the notes and the checks recorded into the run's case (I2,
//! I3 at the scope under test, durability, the fence's liveness, and the negative control that
//! the unfenced scope must expose), each violation marked on the timeline where it happened, and
//! `verdict.md` with every violation the [`checker`](super::checker) found.
//!
//! It must not judge — the checker's [`Verdict`] is the judgement, this file only words it — nor
//! touch a holder or a server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use harness::evidence::{Mark, Recorder};

use super::checker::{self, Verdict};
use super::{control_of, lease_of, scopes_label, ChaosConfig, CONTROL_SCOPE, SCOPE};

/// Marks every violation on the timeline, where the operation that broke it completed.
pub fn draw(rec: &mut Recorder, started: Instant, verdict: &Verdict) {
    let all = verdict
        .i2
        .iter()
        .chain(verdict.i3.values().flatten())
        .chain(verdict.liveness.values().flatten())
        .chain(&verdict.durability);
    for violation in all {
        if let Some((process, at_ms)) = &violation.by {
            let lane = process.split('.').next().unwrap_or(process);
            rec.step_at(
                started + Duration::from_millis(*at_ms),
                Mark::Info,
                lane,
                "✗ violation",
                None,
                violation.what.clone(),
                None,
            );
        }
    }
}

/// Writes `verdict.md` into `dir`, whole.
pub fn write(dir: &Path, cfg: &ChaosConfig, v: &Verdict) -> anyhow::Result<()> {
    let path = dir.join("verdict.md");
    harness::evidence::write_atomically(&path, markdown(cfg, v).as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// The scopes under test and the control scopes as the verdict names them: with K leases they
/// are K each, counted under one name ([`super::scopes_label`]).
fn labels(leases: usize) -> (String, String) {
    let control = if leases > 1 {
        format!(
            "{}…{}",
            control_of(0, leases),
            control_of(leases - 1, leases)
        )
    } else {
        CONTROL_SCOPE.to_owned()
    };
    (scopes_label(leases), control)
}

/// At most this many violations of one kind are printed; verdict.md has them all.
const SHOWN: usize = 5;

/// Records the run's counts and notes (`notes`: the holders' other reports, counted), the fault
/// table, and the checks with the first violations of each kind.
pub fn record(
    rec: &mut Recorder,
    cfg: &ChaosConfig,
    v: &Verdict,
    notes: &BTreeMap<String, usize>,
    ops: usize,
    ended_ms: f64,
) {
    let writes = |scope: &str| v.i3.get(scope).map_or(0, Vec::len);
    let (at, control_at) = labels(cfg.leases);
    if cfg.leases > 1 {
        rec.note(format!(
            "{} leases ({}…{}): holder slot i contends for lease i mod {}, which guards its own \
             scope ({at}) and control scope ({control_at}); each lease is judged on its own, the \
             counts below are summed over them",
            cfg.leases,
            lease_of(0, cfg.leases),
            lease_of(cfg.leases - 1, cfg.leases),
            cfg.leases
        ));
    }
    rec.note(format!(
        "{ops} operations in {:.1} s; {}",
        ended_ms / 1000.0,
        counts(v, "; ")
    ));
    for (what, n) in notes {
        rec.note(format!("{what}: {n}"));
    }
    for row in fault_table(v, &at, &control_at).lines() {
        rec.note(row.to_owned());
    }
    let show = |rec: &mut Recorder, found: &[checker::Violation]| {
        for violation in found.iter().take(SHOWN) {
            rec.note(format!(
                "violation: {} — {}",
                violation.what,
                violation.excerpt.join(" ⟶ ")
            ));
        }
        if found.len() > SHOWN {
            rec.note(format!("… and {} more (verdict.md)", found.len() - SHOWN));
        }
    };
    show(rec, &v.i2);
    rec.check_that(
        "I2: no token was granted twice, and grants follow real-time order",
        v.i2.is_empty(),
        format_args!("{} violations", v.i2.len()),
    );
    for lost in &v.lost_grants {
        rec.note(format!(
            "lost grant (not an I2 violation: no holder heard of it): {} — {}",
            lost.what,
            lost.excerpt.join(" ⟶ ")
        ));
    }
    let under_test = v.i3.get(SCOPE).map(Vec::as_slice).unwrap_or_default();
    show(rec, under_test);
    rec.check_that(
        format!(
            "I3 ({} at scope {at}): in commit order, no accepted write has a smaller token than one committed before it",
            cfg.mode_name
        ),
        under_test.is_empty(),
        format_args!(
            "{} violations; {} stale writes committed",
            writes(SCOPE),
            v.stale.get(SCOPE).copied().unwrap_or(0)
        ),
    );
    show(rec, &v.durability);
    rec.check_that(
        "durability: every write acknowledged as accepted is committed, and each part's final content is its last commit",
        v.durability.is_empty(),
        format_args!("{} violations", v.durability.len()),
    );
    let accepted = v.accepted.get(SCOPE).copied().unwrap_or(0);
    rec.check_that(
        format!(
            "the scope under test accepted writes ({} at scope {at}): a fence that accepts none guards nothing",
            cfg.mode_name
        ),
        accepted > 0,
        format_args!("{accepted} writes acknowledged as accepted"),
    );
    let turned_away = v.liveness.get(SCOPE).map(Vec::as_slice).unwrap_or_default();
    show(rec, turned_away);
    rec.check_that(
        format!(
            "the fence turned no current holding away ({} at scope {at}): every rejected write came after the resource had accepted a greater token",
            cfg.mode_name
        ),
        turned_away.is_empty(),
        format_args!("{} violations", turned_away.len()),
    );
    the_controls(rec, v, &control_at);
}

/// The controls: the checker's own, and the unfenced control scope, which must show at least
/// one I3 violation under the same schedule (else the schedule proved nothing).
fn the_controls(rec: &mut Recorder, v: &Verdict, control_at: &str) {
    for control in &v.controls {
        rec.expose(
            format!("the checker's own control — {}", control.what),
            control.shown,
            &control.evidence,
        );
    }
    let control =
        v.i3.get(CONTROL_SCOPE)
            .map(Vec::as_slice)
            .unwrap_or_default();
    let exposed = rec.expose(
        format!("the unfenced control scope ({control_at}) shows at least one I3 violation under the same schedule"),
        !control.is_empty(),
        format_args!(
            "{} violations, {} stale writes committed{}",
            control.len(),
            v.stale.get(CONTROL_SCOPE).copied().unwrap_or(0),
            if control.is_empty() {
                " — the schedule was too gentle to prove anything: run longer (--time) or with more holders (--holders)"
            } else {
                ""
            }
        ),
    );
    if exposed {
        if let Some(first) = control.first() {
            rec.note(format!(
                "control: {} — {}",
                first.what,
                first.excerpt.join(" ⟶ ")
            ));
        }
    }
}

/// What the verdict counts besides its violations, the parts joined by `sep`: holdings (I1),
/// and the operations of unknown outcome and how they were resolved.
fn counts(v: &Verdict, sep: &str) -> String {
    let holdings = if v.lease_record {
        let unrecorded = match v.unrecorded_grants {
            0 => String::new(),
            n => format!(
                "; {n} token(s) the resource saw are missing from the lease store's record (a \
                 grant it lost), each bounded by its first sighting"
            ),
        };
        format!(
            "{} holdings ({} overlapping by the database clock — I1 is efficiency only){unrecorded}",
            v.holdings, v.overlapping_holdings
        )
    } else {
        "holdings and I1 not counted: no record of the lease store's to count them from; stale \
         writes counted from the resource's records (a lower bound)"
            .to_owned()
    };
    [
        holdings,
        format!(
            "writes of unknown outcome: {} applied, {} not",
            v.info_writes.0, v.info_writes.1
        ),
        format!(
            "acquires of unknown outcome: {} resolved from the lease store's record, {} not in it",
            v.info_acquires.0, v.info_acquires.1
        ),
        format!(
            "rejections the resource's log lacks: {}",
            v.unlogged_rejections
        ),
    ]
    .join(sep)
}

/// Per fault kind: injected, stale writes committed (scope under test / control), writes the
/// fence rejected.
fn fault_table(v: &Verdict, at: &str, control_at: &str) -> String {
    let mut text = format!(
        "| fault | injected | stale writes committed ({at}) | stale writes committed ({control_at}, unfenced) | writes rejected ({at}) |\n|---|---|---|---|---|\n"
    );
    for (kind, row) in &v.by_fault {
        let get = |m: &BTreeMap<String, usize>, s: &str| m.get(s).copied().unwrap_or(0);
        let _ = writeln!(
            text,
            "| {kind} | {} | {} | {} | {} |",
            if kind == "none" {
                "—".to_owned()
            } else {
                row.injected.to_string()
            },
            get(&row.stale_accepted, SCOPE),
            get(&row.stale_accepted, CONTROL_SCOPE),
            get(&row.rejected, SCOPE),
        );
    }
    text
}

/// `verdict.md`: the run's settings, the fault table, and every violation with its excerpt.
fn markdown(cfg: &ChaosConfig, v: &Verdict) -> String {
    let mut text = format!(
        "# Chaos verdict — seed {}, {} ms, {} holders, {} lease(s), mode {}\n\n",
        cfg.seed,
        cfg.time.as_millis(),
        cfg.holders,
        cfg.leases,
        cfg.mode_name
    );
    let (at, control_at) = labels(cfg.leases);
    text.push_str(&fault_table(v, &at, &control_at));
    let _ = writeln!(text, "\n{} operations · {}\n", v.ops, counts(v, " · "));
    let mut section = |title: &str, found: &[checker::Violation]| {
        let _ = writeln!(text, "## {title}: {} violation(s)\n", found.len());
        for violation in found {
            let _ = writeln!(text, "- {}", violation.what);
            for line in &violation.excerpt {
                let _ = writeln!(text, "  - {line}");
            }
        }
        text.push('\n');
    };
    section("I2", &v.i2);
    if !v.lost_grants.is_empty() {
        section(
            "Lost grants (no holder heard of them; not I2)",
            &v.lost_grants,
        );
    }
    for (scope, found) in &v.i3 {
        section(&format!("I3 at {scope}"), found);
    }
    section("Durability", &v.durability);
    for (scope, found) in &v.liveness {
        section(
            &format!("Rejections without a greater token at {scope}"),
            found,
        );
    }
    text
}
