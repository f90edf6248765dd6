//! The machine-readable evidence: [`JsonlReporter`] writes one JSON object per event to
//! `events.jsonl` (and to stdout with `--format json`), [`EnvironmentReporter`] the environment
//! record to `environment.json`. They write what the events' serde form says (see the model) and
//! must not add, drop or reinterpret anything.

use std::io;
use std::path::PathBuf;

use super::model::Event;
use super::recorder::Reporter;
use super::text::{lines, Sink};
use super::write_atomically;

/// The machine-readable event log: one JSON object per line, every check and every timeline step.
pub struct JsonlReporter(Sink);

impl JsonlReporter {
    /// `file`: where the log goes at the end; `stdout`: also print each line as it happens
    /// (`--format json`).
    pub fn new(file: Option<PathBuf>, stdout: bool) -> Self {
        JsonlReporter(Sink::new(stdout, file))
    }
}

/// One event as its line of the log.
fn json_line(event: &Event) -> io::Result<String> {
    serde_json::to_string(event).map_err(io::Error::other)
}

impl Reporter for JsonlReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        self.0.print(&json_line(event)?)
    }

    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        let log = events
            .iter()
            .map(json_line)
            .collect::<io::Result<Vec<_>>>()?;
        self.0.write_file(&lines(log))
    }
}

/// Writes the environment record to a JSON file of its own (`environment.json`).
pub struct EnvironmentReporter {
    file: PathBuf,
}

impl EnvironmentReporter {
    pub fn new(file: PathBuf) -> Self {
        EnvironmentReporter { file }
    }
}

impl Reporter for EnvironmentReporter {
    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        // The last record, if the run made more than one; none makes an empty object.
        let entries = events
            .iter()
            .rev()
            .find_map(|event| match event {
                Event::Environment { entries } => Some(entries.as_slice()),
                _ => None,
            })
            .unwrap_or_default();
        let text =
            serde_json::to_string_pretty(&env_map(entries)).map_err(io::Error::other)? + "\n";
        write_atomically(&self.file, text.as_bytes())
    }
}

/// The environment record as a JSON object (keys sorted, as `environment.json` has them).
fn env_map(entries: &[(String, String)]) -> serde_json::Map<String, serde_json::Value> {
    entries
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::evidence::{Check, CheckKind, Lanes, Mark, Step, Summary};

    /// What the JSON-lines reporter writes for `events`, one parsed value per line.
    fn jsonl(events: &[Event]) -> io::Result<Vec<serde_json::Value>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("events.jsonl");
        let mut reporter = JsonlReporter::new(Some(path.clone()), false);
        for event in events {
            reporter.event(event)?;
        }
        reporter.finish(events)?;
        std::fs::read_to_string(&path)?
            .lines()
            .map(|line| serde_json::from_str(line).map_err(io::Error::other))
            .collect()
    }

    /// One event of each kind, and a step of each mark, in the order `expected` lists them.
    fn one_of_each_kind() -> Vec<Event> {
        let step = |mark: Mark, at: Duration, token: Option<i64>, db_clock: Option<&str>| {
            Event::Step(Step {
                case: "F4".into(),
                mark,
                at,
                actor: "B".into(),
                action: "acquire".into(),
                token,
                outcome: "ACQUIRED".into(),
                db_clock: db_clock.map(str::to_owned),
            })
        };
        let check = |kind: CheckKind, passed: bool| {
            Event::Check(Check {
                case: "F4".into(),
                kind,
                description: "fence_floor".into(),
                expected: "2".into(),
                actual: "1".into(),
                passed,
            })
        };
        let mut events = vec![
            Event::Environment {
                entries: vec![
                    ("server_version".into(), "17.2".into()),
                    ("parameters".into(), "ttl=1500ms".into()),
                ],
            },
            Event::CaseStarted {
                id: "F4".into(),
                title: "the paused old holder".into(),
                lanes: Lanes::default(),
            },
            check(CheckKind::Value, true),
            check(CheckKind::Condition, false),
            check(CheckKind::NegativeControl, true),
            Event::Note {
                case: "F4".into(),
                text: "A resumed".into(),
            },
            step(
                Mark::Acquired,
                Duration::from_micros(4_400_100),
                Some(2),
                Some("2025-01-02 03:04:05.678+00"),
            ),
            step(
                Mark::Write { accepted: false },
                Duration::from_nanos(1_234_567_891),
                None,
                None,
            ),
            Event::CaseFinished {
                id: "F4".into(),
                elapsed: Duration::from_micros(4_712_345),
            },
            Event::Skipped {
                case: "U1".into(),
                reason: "MariaDB is not installed".into(),
            },
            Event::Interrupted {
                signal: "SIGINT".into(),
            },
            Event::Finished(Summary {
                passed: 2,
                failed: 4,
                skipped: 1,
            }),
        ];
        // Every other mark, by its name.
        for mark in [
            Mark::Refused,
            Mark::Renewed,
            Mark::Released,
            Mark::LeaseExpired,
            Mark::Frozen,
            Mark::Thawed,
            Mark::Write { accepted: true },
            Mark::Restart,
            Mark::Failover,
            Mark::Killed,
            Mark::Info,
        ] {
            events.push(step(mark, Duration::from_millis(3), None, None));
        }
        events
    }

    /// Every kind of event, as the event log has always spelled it (captured from the hand-built
    /// `json!` before events serialized themselves): the log is an interface, its field names and
    /// values do not change with the code behind them.
    #[test]
    fn every_kind_of_event_keeps_its_json_fields_and_values() -> io::Result<()> {
        let events = one_of_each_kind();

        let step_json = |mark: &str| {
            json!({"event": "step", "case": "F4", "mark": mark, "at_ms": 3.0, "actor": "B",
                   "action": "acquire", "token": null, "outcome": "ACQUIRED", "db_clock": null})
        };
        let mut expected = vec![
            json!({"event": "environment",
                   "environment": {"server_version": "17.2", "parameters": "ttl=1500ms"}}),
            json!({"event": "case_started", "case": "F4", "title": "the paused old holder"}),
            json!({"event": "check", "case": "F4", "kind": "value", "description": "fence_floor",
                   "expected": "2", "actual": "1", "passed": true}),
            json!({"event": "check", "case": "F4", "kind": "condition", "description": "fence_floor",
                   "expected": "2", "actual": "1", "passed": false}),
            json!({"event": "check", "case": "F4", "kind": "negative_control",
                   "description": "fence_floor", "expected": "2", "actual": "1", "passed": true}),
            json!({"event": "note", "case": "F4", "text": "A resumed"}),
            json!({"event": "step", "case": "F4", "mark": "acquired", "at_ms": 4400.1, "actor": "B",
                   "action": "acquire", "token": 2, "outcome": "ACQUIRED",
                   "db_clock": "2025-01-02 03:04:05.678+00"}),
            json!({"event": "step", "case": "F4", "mark": "write_rejected", "at_ms": 1234.567891,
                   "actor": "B", "action": "acquire", "token": null, "outcome": "ACQUIRED",
                   "db_clock": null}),
            json!({"event": "case_finished", "case": "F4", "elapsed_ms": 4712.345}),
            json!({"event": "skipped", "case": "U1", "reason": "MariaDB is not installed"}),
            json!({"event": "interrupted", "signal": "SIGINT"}),
            json!({"event": "summary", "passed": 2, "failed": 4, "skipped": 1}),
        ];
        for mark in [
            "refused",
            "renewed",
            "released",
            "lease_expired",
            "frozen",
            "thawed",
            "write_accepted",
            "restart",
            "failover",
            "killed",
            "info",
        ] {
            expected.push(step_json(mark));
        }
        let actual = jsonl(&events)?;
        assert_eq!(actual.len(), expected.len());
        for (actual, expected) in actual.iter().zip(&expected) {
            similar_asserts::assert_eq!(actual, expected);
        }
        Ok(())
    }

    /// `environment.json` is the run's environment record as one object, keys sorted.
    #[test]
    fn the_environment_record_is_one_json_object() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("environment.json");
        EnvironmentReporter::new(path.clone()).finish(&crate::evidence::testing::sample_run())?;
        assert_eq!(
            std::fs::read_to_string(&path)?,
            "{\n  \"parameters\": \"ttl=1500ms\",\n  \"server_version\": \"17.2 <local>\"\n}\n"
        );
        Ok(())
    }
}
