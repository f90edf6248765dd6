//! Timeline pictures, from the same event stream as every other reporter: an SVG per multi-actor
//! case inside one self-contained `report.html` (no network, no script), and a Mermaid sequence
//! diagram per case (`timeline-<CASE>.mmd`, which code-hosting sites render).
//!
//! This module groups the events by case ([`CaseTimeline`], borrowed from the recorder's stream at
//! the end of the run: the reporter keeps no copy of it) and finds the intervals the pictures draw
//! (lease holdings, frozen holders); [`svg`], [`mermaid`] and [`html`] draw them, on the lanes
//! each case declared ([`Lanes`]). It only draws what the steps say; it decides nothing.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::model::{Event, Lanes, Mark, Step};
use super::recorder::Reporter;
use super::write_atomically;

mod html;
mod mermaid;
mod svg;

pub use self::html::{html, html_with_preface};
pub use self::mermaid::mermaid;
pub use self::svg::svg;

/// One case as the pictures need it, borrowed from the recorder's stream.
#[derive(Debug, Clone)]
pub struct CaseTimeline<'a> {
    pub id: &'a str,
    pub title: &'a str,
    /// What the pictures draw, as the case declared it when it started.
    pub lanes: &'a Lanes,
    pub steps: Vec<&'a Step>,
    /// What the case said besides its steps, in order: its checks, notes and skips (typed; the
    /// text module renders them when they are drawn).
    pub said: Vec<&'a Event>,
}

impl CaseTimeline<'_> {
    /// The actors with a lane of their own: those the lanes declare, in their order, then those
    /// with a step, by name. The orchestrator is not an actor: what it does shows on the lanes of
    /// those it does it to, or as a phase marker across all lanes.
    pub fn actors(&self) -> Vec<&str> {
        let mut stepped: Vec<&str> = Vec::new();
        for s in &self.steps {
            if s.actor != self.lanes.orchestrator && !stepped.contains(&s.actor.as_str()) {
                stepped.push(&s.actor);
            }
        }
        // A before B, whoever spoke first.
        stepped.sort_unstable();
        let mut actors: Vec<&str> = self.lanes.actors.iter().map(String::as_str).collect();
        stepped.retain(|a| !actors.contains(a));
        actors.extend(stepped);
        actors
    }

    /// Cases with steps and two actors or more get a picture.
    pub fn is_multi_actor(&self) -> bool {
        !self.steps.is_empty() && self.actors().len() >= 2
    }
}

/// Groups the events by case.
pub fn cases(events: &[Event]) -> Vec<CaseTimeline<'_>> {
    let mut cases: Vec<CaseTimeline> = Vec::new();
    for event in events {
        match event {
            Event::CaseStarted { id, title, lanes } => cases.push(CaseTimeline {
                id,
                title,
                lanes,
                steps: Vec::new(),
                said: Vec::new(),
            }),
            Event::Step(step) => {
                if let Some(case) = cases.last_mut() {
                    case.steps.push(step);
                }
            }
            Event::Check(_) | Event::Note { .. } | Event::Skipped { .. } => {
                if let Some(case) = cases.last_mut() {
                    case.said.push(event);
                }
            }
            _ => {}
        }
    }
    cases
}

/// An interval on one lane.
#[derive(Debug, Clone, PartialEq)]
struct Span {
    actor: String,
    from: Duration,
    to: Duration,
    token: Option<i64>,
}

/// The lease holdings (Acquired → Released / LeaseExpired / a takeover / the end) and the frozen
/// intervals (Frozen → Thawed / the end), in step order.
fn spans(steps: &[&Step], end: Duration) -> (Vec<Span>, Vec<Span>) {
    let (mut holdings, mut frozen) = (Vec::new(), Vec::new());
    let mut open_lease: Option<Span> = None;
    let mut open_frozen: Vec<Span> = Vec::new();
    for s in steps {
        match s.mark {
            Mark::Acquired => {
                if let Some(mut span) = open_lease.take() {
                    span.to = s.at;
                    holdings.push(span);
                }
                open_lease = Some(Span {
                    actor: s.actor.clone(),
                    from: s.at,
                    to: s.at,
                    token: s.token,
                });
            }
            Mark::Released | Mark::LeaseExpired => {
                if let Some(mut span) = open_lease.take_if(|span| span.actor == s.actor) {
                    span.to = s.at;
                    holdings.push(span);
                }
            }
            Mark::Frozen => open_frozen.push(Span {
                actor: s.actor.clone(),
                from: s.at,
                to: s.at,
                token: None,
            }),
            Mark::Thawed => {
                if let Some(i) = open_frozen.iter().position(|f| f.actor == s.actor) {
                    let mut span = open_frozen.remove(i);
                    span.to = s.at;
                    frozen.push(span);
                }
            }
            _ => {}
        }
    }
    holdings.extend(open_lease.map(|span| Span { to: end, ..span }));
    frozen.extend(open_frozen.into_iter().map(|span| Span { to: end, ..span }));
    (holdings, frozen)
}

/// Writes `report.html` and one `timeline-<CASE>.mmd` per multi-actor case into `dir`, from the
/// recorder's stream at the end of the run (a case named `kazoo/F5` in `timeline-kazoo-F5.mmd`).
pub struct TimelineReporter {
    dir: PathBuf,
    preface: Option<Arc<Mutex<String>>>,
}

impl TimelineReporter {
    pub fn new(dir: PathBuf) -> Self {
        TimelineReporter { dir, preface: None }
    }

    /// A report with a section of the run's own before its cases ([`html_with_preface`]): what
    /// `preface` holds when the run finishes (the run fills it once it knows, e.g. the library
    /// card).
    pub fn with_preface(dir: PathBuf, preface: Arc<Mutex<String>>) -> Self {
        TimelineReporter {
            dir,
            preface: Some(preface),
        }
    }
}

impl Reporter for TimelineReporter {
    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        let preface = self
            .preface
            .as_ref()
            .map(|p| {
                p.lock()
                    .map_or_else(|e| e.into_inner().clone(), |p| p.clone())
            })
            .unwrap_or_default();
        write_atomically(
            &self.dir.join("report.html"),
            html_with_preface(events, &preface).as_bytes(),
        )?;
        for case in cases(events).iter().filter(|c| c.is_multi_actor()) {
            write_atomically(
                &self
                    .dir
                    .join(format!("timeline-{}.mmd", case.id.replace('/', "-"))),
                mermaid(case).as_bytes(),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Lane, Recorder};

    fn step(at_ms: u64, mark: Mark, actor: &str, token: Option<i64>) -> Step {
        Step {
            case: "F4".into(),
            mark,
            at: Duration::from_millis(at_ms),
            actor: actor.into(),
            action: "act".into(),
            token,
            outcome: String::new(),
            db_clock: None,
        }
    }

    #[test]
    fn holdings_and_frozen_intervals_follow_the_marks() {
        let steps = [
            step(0, Mark::Acquired, "A", Some(1)),
            step(400, Mark::Renewed, "A", Some(1)),
            step(800, Mark::Renewed, "A", Some(1)),
            step(3000, Mark::Frozen, "A", None),
            step(4300, Mark::LeaseExpired, "A", None),
            step(4400, Mark::Acquired, "B", Some(2)),
            step(4450, Mark::Write { accepted: true }, "B", Some(2)),
            step(4500, Mark::Released, "B", None),
            step(4600, Mark::Thawed, "A", None),
            step(4650, Mark::Write { accepted: false }, "A", Some(1)),
        ];
        let steps: Vec<&Step> = steps.iter().collect();
        let (holdings, frozen) = spans(&steps, Duration::from_millis(4650));
        let ms = |s: &Span| {
            (
                s.actor.clone(),
                s.from.as_millis(),
                s.to.as_millis(),
                s.token,
            )
        };
        assert_eq!(
            holdings.iter().map(ms).collect::<Vec<_>>(),
            [
                ("A".into(), 0, 4300, Some(1)),
                ("B".into(), 4400, 4500, Some(2))
            ]
        );
        assert_eq!(
            frozen.iter().map(ms).collect::<Vec<_>>(),
            [("A".into(), 3000, 4600, None)]
        );
    }

    #[test]
    fn a_case_keeps_what_it_said_typed_and_in_order() {
        let events = crate::evidence::testing::sample_run();
        let cases = cases(&events);
        assert_eq!(cases.len(), 2);
        let kinds: Vec<&str> = cases[0]
            .said
            .iter()
            .map(|event| match event {
                Event::Check(c) if c.passed => "passed",
                Event::Check(_) => "failed",
                Event::Note { .. } => "note",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            ["passed", "failed", "failed", "passed", "failed", "note"]
        );
        assert!(matches!(cases[1].said[..], [Event::Skipped { .. }]));
        assert_eq!((cases[0].steps.len(), cases[1].steps.len()), (14, 0));
    }

    /// The report and the diagram of a run with every kind of step, as they were drawn before
    /// the lanes were declared: a case with the default lanes draws exactly this.
    #[test]
    fn the_sample_run_draws_the_committed_report_and_diagram() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        TimelineReporter::new(dir.path().to_owned())
            .finish(&crate::evidence::testing::sample_run())?;
        for name in ["report.html", "timeline-F4.mmd"] {
            let drawn = std::fs::read_to_string(dir.path().join(name))?;
            crate::evidence::testing::assert_snapshot(&format!("sample-{name}"), &drawn)?;
        }
        assert_eq!(
            std::fs::read_dir(dir.path())?.count(),
            2,
            "U1 has no actor: no diagram"
        );
        Ok(())
    }

    /// A case on one MariaDB database, run by a "conductor": two declared holders in their
    /// order, the lease and the resource one lane drawn once, the conductor's steps as phases.
    fn one_store_case() -> Vec<Event> {
        let same = Lane::new("jobs", "jobs (lease + completion)");
        let mut rec = Recorder::new(Vec::new());
        rec.case_with_lanes(
            "U9",
            "one database",
            Lanes {
                actors: vec!["worker-2".into(), "worker-1".into()],
                lease: same.clone(),
                resource: same,
                orchestrator: "conductor".into(),
            },
        );
        rec.step(Mark::Info, "conductor", "phase 1", None, "", None);
        rec.step(Mark::Acquired, "worker-1", "acquire", Some(1), "", None);
        rec.step(
            Mark::Write { accepted: true },
            "worker-1",
            "complete",
            Some(1),
            "",
            None,
        );
        rec.step(Mark::Acquired, "worker-2", "acquire", Some(2), "", None);
        rec.step(Mark::Restart, "conductor", "restart", None, "", None);
        rec.step(
            Mark::Write { accepted: false },
            "worker-1",
            "complete",
            Some(1),
            "",
            None,
        );
        rec.end_case();
        rec.events().to_vec()
    }

    #[test]
    fn a_case_draws_the_lanes_it_declares() {
        let events = one_store_case();
        let case = &cases(&events)[0];
        assert_eq!(case.actors(), ["worker-2", "worker-1"], "declared order");
        assert!(case.is_multi_actor());

        let svg = svg(case);
        // The lane labels: bold text at the left edge, each whole in its hover title.
        let labels: Vec<&str> = svg
            .lines()
            .filter(|l| l.starts_with(r#"<text font-weight="bold"><title>"#))
            .filter_map(|l| l.split("<title>").nth(1)?.split("</title>").next())
            .collect();
        assert_eq!(
            labels,
            [
                "holder worker-2",
                "holder worker-1",
                "jobs (lease + completion)"
            ],
            "the orchestrator has no lane: {svg}"
        );
        assert!(!svg.contains("lease26") && !svg.contains("res26"), "{svg}");
        assert!(
            // Whole on hover; on the strip, cut before the next mark when it comes close.
            svg.contains("<title>phase 1</title>")
                && svg.contains("<title>database crash + restart</title>"),
            "the orchestrator's steps mark phases across the lanes: {svg}"
        );

        let m = mermaid(case);
        assert!(
            m.contains(
                "    participant worker2 as worker-2\n    participant worker1 as worker-1\n    \
                 participant L as jobs\n    Note over L: phase 1 \n"
            ),
            "{m}"
        );
        assert!(
            !m.contains("participant R") && !m.contains("conductor"),
            "{m}"
        );
        assert!(
            m.contains("worker1->>L: complete token=1\n    L-->>worker1: accepted"),
            "{m}"
        );
        assert!(m.contains("    Note over L: immediate stop"), "{m}");

        let report = html(&events);
        assert!(
            report.contains("then the store that holds both the lease and the resource")
                && report.contains("Coloured bars on <i>jobs</i>"),
            "{report}"
        );
    }

    #[test]
    fn a_case_may_name_its_own_lease_and_resource_lanes() {
        let mut rec = Recorder::new(Vec::new());
        rec.case_with_lanes(
            "X1",
            "two stores",
            Lanes {
                lease: Lane::new("leases", "leases (lease, etcd)"),
                resource: Lane::new("orders", "orders (resource)"),
                ..Lanes::default()
            },
        );
        rec.step(Mark::Acquired, "A", "acquire", Some(1), "", None);
        rec.step(
            Mark::Write { accepted: true },
            "B",
            "write",
            Some(1),
            "",
            None,
        );
        rec.step(Mark::Restart, "lab", "restart", None, "", None);
        let case = &cases(rec.events())[0];
        let svg = svg(case);
        assert!(
            svg.contains("<title>leases (lease, etcd)</title>")
                && svg.contains("<title>orders (resource)</title>"),
            "{svg}"
        );
        let m = mermaid(case);
        assert!(
            m.contains("    participant L as leases\n    participant R as orders\n"),
            "{m}"
        );
        assert!(
            m.contains("B->>R: write token=1") && m.contains("Note over L,R: immediate stop"),
            "{m}"
        );
    }
}
