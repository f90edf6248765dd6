//! The evidence model: the typed events a scenario can say (checks, notes, timeline steps with
//! their marks, skips, the summary) and the lanes a case's pictures draw, and nothing else. No I/O
//! and no formatting here (beyond the summary's one line): what an event looks like is each
//! reporter's business, and what it means is the scenario's.
//!
//! The one exception is the events' serde form, which *is* the event log's schema
//! (`events.jsonl`, one object per event): it is derived here, next to the fields it names, so
//! that a field cannot be added without the log saying it. The tag `event` names the kind
//! (`case_started`, `check`, …, `summary`), a [`Mark`] is its name ([`Mark::as_str`]), durations
//! are milliseconds as floats (`at_ms`, `elapsed_ms`), the environment is an object.

use std::fmt::{self, Display};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What kind of check a [`Check`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// `expected == actual`.
    Value,
    /// A condition holds; `actual` says what was observed.
    Condition,
    /// The flaw the control looks for really showed.
    NegativeControl,
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub case: String,
    pub kind: CheckKind,
    pub description: String,
    pub expected: String,
    pub actual: String,
    pub passed: bool,
}

/// What a timeline step means for the pictures: lease intervals start at `Acquired` and end at
/// `Released` / `LeaseExpired`; a frozen interval runs from `Frozen` to `Thawed`; writes are marked
/// accepted or rejected; `Restart` crosses every lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Acquired,
    Refused,
    Renewed,
    Released,
    /// The lease was seen expired by the database clock (the actor is the holder whose lease ended).
    LeaseExpired,
    Frozen,
    Thawed,
    Write {
        accepted: bool,
    },
    Restart,
    /// The lease store failed over: its primary lost, a standby promoted in its place.
    Failover,
    /// The actor was killed with SIGKILL (a crash: no handler ran).
    Killed,
    Info,
}

impl Mark {
    /// The mark's name, as the event log spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Acquired => "acquired",
            Mark::Refused => "refused",
            Mark::Renewed => "renewed",
            Mark::Released => "released",
            Mark::LeaseExpired => "lease_expired",
            Mark::Frozen => "frozen",
            Mark::Thawed => "thawed",
            Mark::Write { accepted: true } => "write_accepted",
            Mark::Write { accepted: false } => "write_rejected",
            Mark::Restart => "restart",
            Mark::Failover => "failover",
            Mark::Killed => "killed",
            Mark::Info => "info",
        }
    }

    /// Every mark, in declaration order.
    pub const ALL: [Mark; 13] = [
        Mark::Acquired,
        Mark::Refused,
        Mark::Renewed,
        Mark::Released,
        Mark::LeaseExpired,
        Mark::Frozen,
        Mark::Thawed,
        Mark::Write { accepted: true },
        Mark::Write { accepted: false },
        Mark::Restart,
        Mark::Failover,
        Mark::Killed,
        Mark::Info,
    ];

    /// The mark named `name` ([`Mark::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Mark> {
        Mark::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// A mark is its name in the event log (`"write_rejected"`), not a nested object.
impl Serialize for Mark {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Mark {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Mark, D::Error> {
        let name = String::deserialize(deserializer)?;
        Mark::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown mark {name:?}")))
    }
}

/// One step of a timeline: who did what, under which token, with what outcome, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub case: String,
    pub mark: Mark,
    /// Monotonic time since the run started.
    #[serde(rename = "at_ms", with = "millis")]
    pub at: Duration,
    pub actor: String,
    pub action: String,
    pub token: Option<i64>,
    pub outcome: String,
    /// The database's `clock_timestamp()` for the step, where the database was involved.
    pub db_clock: Option<String>,
}

/// The run's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    /// Cases that could not run here (a missing server or feature): never counted as passed.
    pub skipped: usize,
}

impl Summary {
    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }
}

impl Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SUMMARY passed={} failed={}", self.passed, self.failed)?;
        if self.skipped > 0 {
            write!(f, " skipped={}", self.skipped)?;
        }
        Ok(())
    }
}

/// A lane of the timeline pictures that is a store rather than a holder: its name (as steps and
/// diagrams call it) and the label the picture shows beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lane {
    pub name: String,
    pub label: String,
}

impl Lane {
    pub fn new(name: impl Into<String>, label: impl Into<String>) -> Lane {
        Lane {
            name: name.into(),
            label: label.into(),
        }
    }
}

/// What a case's timeline pictures draw: a lane per holder, the lease store's lane (holdings) and
/// the resource's lane (writes), and which actor is the orchestrator (its steps are phase markers
/// across every lane, not a lane of its own). A case declares them when it starts
/// ([`Recorder::case_with_lanes`](super::Recorder::case_with_lanes)); the default is the
/// F-series' `lease26` / `res26` with the lab as the orchestrator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lanes {
    /// The holders' lanes in this order. Empty: every actor with a step, by name. Actors with a
    /// step but not named here get a lane after these, by name.
    pub actors: Vec<String>,
    /// Where the lease is held: the holdings are drawn on this lane.
    pub lease: Lane,
    /// Where the writes land: accepted and rejected writes are drawn on this lane. When it has
    /// the lease's name (the lease and the resource in one store, e.g. one MariaDB database),
    /// the two are one lane, drawn once.
    pub resource: Lane,
    /// The actor that runs the case.
    pub orchestrator: String,
}

impl Default for Lanes {
    fn default() -> Lanes {
        Lanes {
            actors: Vec::new(),
            lease: Lane::new("lease26", "lease26 (lease)"),
            resource: Lane::new("res26", "res26 (resource)"),
            orchestrator: "lab".into(),
        }
    }
}

impl Lanes {
    pub fn is_default(&self) -> bool {
        *self == Lanes::default()
    }

    /// Whether the lease and the resource are one store, drawn as one lane.
    pub fn one_store(&self) -> bool {
        self.lease.name == self.resource.name
    }
}

/// Everything a scenario can say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The environment record: what ran, on what, with which parameters (key, value).
    Environment {
        #[serde(rename = "environment", with = "entries_as_object")]
        entries: Vec<(String, String)>,
    },
    CaseStarted {
        #[serde(rename = "case")]
        id: String,
        title: String,
        /// The lanes of the case's pictures; in the event log only when not the default.
        #[serde(default, skip_serializing_if = "Lanes::is_default")]
        lanes: Lanes,
    },
    Check(Check),
    Note {
        case: String,
        text: String,
    },
    Step(Step),
    CaseFinished {
        #[serde(rename = "case")]
        id: String,
        #[serde(rename = "elapsed_ms", with = "millis")]
        elapsed: Duration,
    },
    /// The case could not run here; `reason` says why and how to make it run.
    Skipped {
        case: String,
        reason: String,
    },
    /// The run was interrupted by a signal before it could finish.
    Interrupted {
        signal: String,
    },
    /// The run's verdict, the last event (`"summary"` in the event log).
    #[serde(rename = "summary")]
    Finished(Summary),
}

/// A duration as milliseconds, a float: `at_ms`, `elapsed_ms`.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(d.as_secs_f64() * 1000.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(deserializer)?;
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(serde::de::Error::custom(format!(
                "{ms} is not a duration in milliseconds"
            )));
        }
        // To the nanosecond the float can carry.
        Ok(Duration::from_nanos((ms * 1e6).round() as u64))
    }
}

/// The environment record's (key, value) entries as one JSON object, keys in their order.
mod entries_as_object {
    use std::fmt;

    use serde::de::{MapAccess, Visitor};
    use serde::ser::SerializeMap as _;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        entries: &[(String, String)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(entries.len()))?;
        for (key, value) in entries {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Vec<(String, String)>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(entries)
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the event log says, read back, is the event that was said.
    #[test]
    fn every_event_of_a_run_reads_back_from_its_json_line() -> serde_json::Result<()> {
        let mut events = crate::evidence::testing::sample_run();
        events.push(Event::CaseStarted {
            id: "U9".into(),
            title: "one database".into(),
            lanes: Lanes {
                actors: vec!["w2".into(), "w1".into()],
                lease: Lane::new("jobs", "jobs (lease + completion)"),
                resource: Lane::new("jobs", "jobs (lease + completion)"),
                orchestrator: "conductor".into(),
            },
        });
        for event in events {
            let line = serde_json::to_string(&event)?;
            assert_eq!(serde_json::from_str::<Event>(&line)?, event, "{line}");
        }
        Ok(())
    }

    #[test]
    fn every_mark_reads_back_from_its_name() {
        for mark in Mark::ALL {
            assert_eq!(Mark::from_name(mark.as_str()), Some(mark));
        }
        assert_eq!(Mark::from_name("paused"), None);
    }

    /// A case with the default lanes says nothing about them (its `case_started` line is as it
    /// always was); any other lanes are in the line.
    #[test]
    fn only_declared_lanes_are_in_the_case_started_line() -> serde_json::Result<()> {
        let started = |lanes: Lanes| Event::CaseStarted {
            id: "U9".into(),
            title: "t".into(),
            lanes,
        };
        assert_eq!(
            serde_json::to_value(started(Lanes::default()))?,
            serde_json::json!({"event": "case_started", "case": "U9", "title": "t"})
        );
        let lanes = Lanes {
            orchestrator: "conductor".into(),
            ..Lanes::default()
        };
        assert_eq!(
            serde_json::to_value(started(lanes))?["lanes"],
            serde_json::json!({
                "actors": [],
                "lease": {"name": "lease26", "label": "lease26 (lease)"},
                "resource": {"name": "res26", "label": "res26 (resource)"},
                "orchestrator": "conductor"
            })
        );
        // A partial record fills in the rest from the default.
        let read: Event = serde_json::from_str(
            r#"{"event":"case_started","case":"U9","title":"t","lanes":{"orchestrator":"conductor"}}"#,
        )?;
        assert_eq!(
            read,
            started(Lanes {
                orchestrator: "conductor".into(),
                ..Lanes::default()
            })
        );
        Ok(())
    }
}
