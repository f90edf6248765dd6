//! The evidence model: the typed events a scenario can say (checks, notes, timeline steps with
//! their marks, skips, the summary) and nothing else. No formatting and no I/O here: what an event
//! looks like is each reporter's business, and what it means is the scenario's.

use std::fmt::{self, Display};
use std::time::Duration;

/// What kind of check a [`Check`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    /// `expected == actual`.
    Value,
    /// A condition holds; `actual` says what was observed.
    Condition,
    /// The flaw the control looks for really showed.
    NegativeControl,
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    Info,
}

impl Mark {
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
            Mark::Info => "info",
        }
    }
}

/// One step of a timeline: who did what, under which token, with what outcome, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub case: String,
    pub mark: Mark,
    /// Monotonic time since the run started.
    pub at: Duration,
    pub actor: String,
    pub action: String,
    pub token: Option<i64>,
    pub outcome: String,
    /// The database's `clock_timestamp()` for the step, where the database was involved.
    pub db_clock: Option<String>,
}

/// The run's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Everything a scenario can say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The environment record: what ran, on what, with which parameters (key, value).
    Environment {
        entries: Vec<(String, String)>,
    },
    CaseStarted {
        id: String,
        title: String,
    },
    Check(Check),
    Note {
        case: String,
        text: String,
    },
    Step(Step),
    CaseFinished {
        id: String,
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
    Finished(Summary),
}
