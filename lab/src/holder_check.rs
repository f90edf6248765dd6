//! `lab holder check --cmd CMD`: a holder of the user's against the holder protocol, each
//! finding in one line. First the protocol's plain paths on a lab of its own
//! ([`scenarios::conformance`]: the handshake, one holding as the resource recorded it, a holder
//! orphaned at its write point, an acquire answered past the local deadline), then the fault
//! points it has, then the experiments that judge a holder — F4 (its write carries the token the resource checks), F10 (its own local deadline
//! stops it), F12 (killed mid-write and after it) — through the ordinary run, their evidence in
//! `--evidence-dir`. An experiment's line is its first failed check, worded as the run words it.

use std::path::PathBuf;

use harness::evidence::{render_text, Event};
use scenarios::{Backend, Testbed};

use crate::run::run_lab;
use crate::{config, Ended, Signals};

/// The experiments that judge a holder's own behaviour.
pub const EXPERIMENTS: &str = "F4,F10,F12";

pub fn run(cmd: &str, evidence_dir: PathBuf) -> Ended {
    let mut args = config::run_defaults();
    args.holder_cmd = Some(cmd.to_owned());
    args.only = Some(EXPERIMENTS.split(',').map(str::to_owned).collect());
    args.fenced_mode = Some("fenced-scope".to_owned());
    args.evidence_dir.clone_from(&evidence_dir);
    let cfg = match config::inner_run(args) {
        Ok(cfg) => cfg,
        Err(e) => {
            // Worded for this command's own flag.
            let e = format!("{e:#}").replace("--holder-cmd", "--cmd");
            eprintln!("lab holder check: {e}");
            return Ended::CouldNotRun;
        }
    };
    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab holder check: failed to start the async runtime: {e}");
            return Ended::CouldNotRun;
        }
    };
    let mut lines: Vec<(Verdict, String)> = Vec::new();
    let mut handshake = false;
    // Experiments whose property a protocol probe judged another way (the late acquire judges
    // the local deadline, F10's, for a holder that refuses F10's fault point).
    let mut judged_by_probe: Vec<(&'static str, bool)> = Vec::new();
    let probed = runtime.block_on(async {
        let mut signals = Signals::install()?;
        let start = Testbed::start_on(
            Backend::Embedded,
            Testbed::new_run_mark(),
            cfg.cluster.clone(),
            cfg.params.clone(),
            cfg.holder_bin.clone(),
        );
        let mut bed = tokio::select! {
            bed = start => bed?,
            signal = signals.recv() => return Ok(Err(signal)),
        };
        bed.holder_prefix = cfg.holder_prefix.clone();
        let probes = async {
            let found = scenarios::conformance::probe(&mut bed).await?;
            // A holder that failed the handshake is not asked again per fault point: each ask
            // would wait out a handshake of its own (57 s for a holder that never answers).
            let refused = if found.first().is_some_and(|f| f.ok) {
                bed.refused_fault_points().await
            } else {
                Vec::new()
            };
            anyhow::Ok((found, refused))
        };
        let outcome = tokio::select! {
            outcome = probes => Ok(outcome),
            signal = signals.recv() => Err(signal),
        };
        bed.shutdown().await;
        anyhow::Ok(outcome.map(|o| o.map_err(|e| format!("{e:#}"))))
    });
    match probed {
        Err(e) => {
            eprintln!("lab holder check: {e:#}");
            return Ended::CouldNotRun;
        }
        Ok(Err(signal)) => return Ended::Interrupted(signal),
        Ok(Ok(Err(e))) => lines.push((Verdict::Fail, format!("the protocol probes stopped: {e}"))),
        Ok(Ok(Ok((found, refused)))) => {
            handshake = found.first().is_some_and(|f| f.ok);
            judged_by_probe.extend(found.iter().filter_map(|f| f.judges_for.map(|e| (e, f.ok))));
            lines.extend(found.into_iter().map(|f| (Verdict::of(f.ok), f.line)));
            if handshake {
                lines.extend(fault_point_lines(&refused));
            }
        }
    }
    let ended = if handshake {
        eprintln!(
            "lab holder check: running {EXPERIMENTS} with it (evidence in {})",
            evidence_dir.display()
        );
        let run = runtime.block_on(run_lab(&cfg, Backend::Embedded, &evidence_dir));
        if let Ended::Interrupted(_) = run.ended {
            return run.ended;
        }
        lines.extend(experiment_lines(&run.events));
        run.ended
    } else {
        lines.push((
            Verdict::Fail,
            format!("{EXPERIMENTS} not run: without a handshake no experiment can start it"),
        ));
        Ended::Failed
    };
    verdict(&lines, &judged_by_probe, ended)
}

/// One line per fault point the lab asks for: has it, or refused it (quoted). A refused point is
/// not a fault — a holder may leave it out; what it leaves unchecked is named by the
/// experiments' skip lines.
fn fault_point_lines(
    refused: &[(scenarios::FaultPoint, String)],
) -> impl Iterator<Item = (Verdict, String)> + '_ {
    scenarios::FaultPoint::ASKED.into_iter().map(|point| {
        let line = match refused.iter().find(|(p, _)| *p == point) {
            Some((_, words)) => format!(
                "{} refused ({words}): the experiments that stop a holder there say skip",
                point.name()
            ),
            None => format!(
                "{}: has it (answered the handshake with its flag)",
                point.name()
            ),
        };
        (Verdict::Ok, line)
    })
}

/// Prints the lines and the verdict; how the check ended: a finding, or an experiment not
/// checked, fails a run that passed. An experiment that said skip counts as judged only where
/// a protocol probe judged its property instead and passed (`judged_by_probe`); the verdict
/// names it.
fn verdict(
    lines: &[(Verdict, String)],
    judged_by_probe: &[(&str, bool)],
    mut ended: Ended,
) -> Ended {
    for (verdict, line) in lines {
        println!("{} {line}", verdict.word());
    }
    let failed = lines.iter().filter(|(v, _)| *v == Verdict::Fail).count();
    let skipped = lines
        .iter()
        .filter(|(v, _)| *v == Verdict::Skip)
        .map(|(_, line)| line.split(' ').next().unwrap_or(""));
    let (instead, unchecked): (Vec<&str>, Vec<&str>) =
        skipped.partition(|id| judged_by_probe.contains(&(*id, true)));
    // A skip is not a pass: a holder conforms only when every experiment judged it.
    if (failed > 0 || !unchecked.is_empty()) && ended == Ended::Passed {
        ended = Ended::Failed;
    }
    let verdict = match (failed, unchecked.is_empty()) {
        (0, true) => "conforms".to_owned(),
        (0, false) => format!(
            "not fully checked (not judged: {}; a holder conforms only when every experiment \
             judged it)",
            unchecked.join(", ")
        ),
        _ => "does not conform".to_owned(),
    };
    let instead = if instead.is_empty() {
        String::new()
    } else {
        format!(
            " ({} said skip; what it judges, the local deadline, was judged by the late \
             acquire above)",
            instead.join(", ")
        )
    };
    println!(
        "HOLDER CHECK {verdict}: {failed} finding(s) of {} line(s){instead}",
        lines.len()
    );
    ended
}

/// A line's verdict: a finding, a pass, or something not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Fail,
    /// Not checked (an experiment that said skip): never a pass.
    Skip,
}

impl Verdict {
    fn of(ok: bool) -> Verdict {
        if ok {
            Verdict::Ok
        } else {
            Verdict::Fail
        }
    }

    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok  ",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
        }
    }
}

/// One line per experiment case: its first failed check (as the run words it), its skip, or
/// how many checks passed.
fn experiment_lines(events: &[Event]) -> Vec<(Verdict, String)> {
    let mut lines = Vec::new();
    let mut case: Option<(String, usize, Option<String>)> = None;
    let flush = |case: &mut Option<(String, usize, Option<String>)>,
                 lines: &mut Vec<(Verdict, String)>| {
        if let Some((id, passed, failed)) = case.take() {
            lines.push(match failed {
                Some(line) => (Verdict::Fail, format!("{id}: {line}")),
                None => (Verdict::Ok, format!("{id}: {passed} checks passed")),
            });
        }
    };
    for event in events {
        match event {
            Event::CaseStarted { id, .. } => {
                flush(&mut case, &mut lines);
                case = Some((id.clone(), 0, None));
            }
            Event::Check(check) => {
                if let Some((_, passed, failed)) = &mut case {
                    if check.passed {
                        *passed += 1;
                    } else if failed.is_none() {
                        let text = render_text(event).unwrap_or_default();
                        let text = text.trim();
                        *failed = Some(text.strip_prefix("FAIL").unwrap_or(text).trim().to_owned());
                    }
                }
            }
            Event::Skipped { case: id, reason } => {
                case = None;
                lines.push((Verdict::Skip, format!("{id} not checked: {reason}")));
            }
            _ => {}
        }
    }
    flush(&mut case, &mut lines);
    lines
}
