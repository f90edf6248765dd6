//! Evidence: scenarios emit typed [`Event`]s into a [`Recorder`]; separate [`Reporter`]s turn the
//! one stream into the terminal output, `evidence/output.txt` and `evidence/events.jsonl`.
//!
//! The text format (SPEC §4 "Evidence"):
//! ```text
//! CASE F4 :: the paused old holder: …
//!   ok   B acquired the lease, token=2 (expected=ACQUIRED token=2, actual=ACQUIRED token=2)
//!   FAIL fence_floor after the run (expected=2, actual=1)
//!   note A resumed: WRITE accepted=false token=1; RENEW_AFTER_WRITE ok=false
//!   ok   negative control exposes: the unfenced resource accepted A's stale write (…)
//! SUMMARY passed=86 failed=0
//! ```
//! A check passes only when `expected == actual`. A negative-control check passes only when the
//! flaw it looks for really showed: a control that fails to expose its flaw is a FAIL, because
//! it means the lab could no longer tell a broken resource from a correct one.
//!
//! Reporters must not decide outcomes; the recorder must not format text. Evidence files are
//! written whole, through a temp file and a rename, so an interrupted run never leaves half a file.

use std::fmt::{self, Display};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

pub mod junit;
pub mod timeline;

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

/// A consumer of the event stream.
pub trait Reporter: Send {
    fn event(&mut self, event: &Event) -> io::Result<()>;
    /// Called once after the last event: write files here.
    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Collects the events of one run and hands each to every reporter as it happens.
pub struct Recorder {
    started: Instant,
    case: String,
    case_started: Instant,
    summary: Summary,
    reporters: Vec<Box<dyn Reporter>>,
    events: Vec<Event>,
    errors: Vec<io::Error>,
}

impl Recorder {
    pub fn new(reporters: Vec<Box<dyn Reporter>>) -> Self {
        let now = Instant::now();
        Recorder {
            started: now,
            case: String::new(),
            case_started: now,
            summary: Summary {
                passed: 0,
                failed: 0,
                skipped: 0,
            },
            reporters,
            events: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn emit(&mut self, event: Event) {
        for r in &mut self.reporters {
            if let Err(e) = r.event(&event) {
                self.errors.push(e);
            }
        }
        self.events.push(event);
    }

    /// Records the environment of the run (shown as the output's header).
    pub fn environment(&mut self, entries: Vec<(String, String)>) {
        self.emit(Event::Environment { entries });
    }

    /// Starts a case; the previous one, if any, ends.
    pub fn case(&mut self, id: &str, title: &str) {
        self.end_case();
        self.case = id.to_owned();
        self.case_started = Instant::now();
        self.emit(Event::CaseStarted {
            id: id.to_owned(),
            title: title.to_owned(),
        });
    }

    /// Ends the current case (a no-op when none is open).
    pub fn end_case(&mut self) {
        if !self.case.is_empty() {
            let id = std::mem::take(&mut self.case);
            self.emit(Event::CaseFinished {
                id,
                elapsed: self.case_started.elapsed(),
            });
        }
    }

    /// The id of the open case ("" outside cases).
    pub fn current_case(&self) -> &str {
        &self.case
    }

    /// A value check: passes when `expected == actual`. Returns whether it passed.
    pub fn check<T: PartialEq + Display + ?Sized>(
        &mut self,
        description: impl Into<String>,
        expected: &T,
        actual: &T,
    ) -> bool {
        let passed = expected == actual;
        self.verdict(
            CheckKind::Value,
            description.into(),
            expected.to_string(),
            actual.to_string(),
            passed,
        )
    }

    /// A condition check: passes when `holds`; `observed` says what was seen either way.
    pub fn check_that(
        &mut self,
        description: impl Into<String>,
        holds: bool,
        observed: impl Display,
    ) -> bool {
        self.verdict(
            CheckKind::Condition,
            description.into(),
            "holds".into(),
            observed.to_string(),
            holds,
        )
    }

    /// A negative control: passes only when the flaw `flaw` really showed. `evidence` says what
    /// was observed, shown or not.
    pub fn expose(&mut self, flaw: impl Into<String>, shown: bool, evidence: impl Display) -> bool {
        let actual = evidence.to_string();
        self.verdict(
            CheckKind::NegativeControl,
            flaw.into(),
            "the flaw shows".into(),
            actual,
            shown,
        )
    }

    /// Records that the scenario could not complete: a failed check, so the run cannot pass.
    pub fn abort(&mut self, error: &dyn Display) {
        let actual = format!("{error:#}");
        self.verdict(
            CheckKind::Value,
            "the scenario ran to its end".into(),
            "completed".into(),
            actual,
            false,
        );
    }

    fn verdict(
        &mut self,
        kind: CheckKind,
        description: String,
        expected: String,
        actual: String,
        passed: bool,
    ) -> bool {
        if passed {
            self.summary.passed += 1;
        } else {
            self.summary.failed += 1;
        }
        let case = self.case.clone();
        self.emit(Event::Check(Check {
            case,
            kind,
            description,
            expected,
            actual,
            passed,
        }));
        passed
    }

    pub fn note(&mut self, text: impl Into<String>) {
        let case = self.case.clone();
        self.emit(Event::Note {
            case,
            text: text.into(),
        });
    }

    /// Records a timeline step at the current monotonic time.
    pub fn step(
        &mut self,
        mark: Mark,
        actor: &str,
        action: &str,
        token: Option<i64>,
        outcome: impl Into<String>,
        db_clock: Option<String>,
    ) {
        self.step_at(
            Instant::now(),
            mark,
            actor,
            action,
            token,
            outcome,
            db_clock,
        );
    }

    /// Records a timeline step that happened at the monotonic instant `at`.
    #[allow(clippy::too_many_arguments)]
    pub fn step_at(
        &mut self,
        at: Instant,
        mark: Mark,
        actor: &str,
        action: &str,
        token: Option<i64>,
        outcome: impl Into<String>,
        db_clock: Option<String>,
    ) {
        let step = Step {
            case: self.case.clone(),
            mark,
            at: at.saturating_duration_since(self.started),
            actor: actor.to_owned(),
            action: action.to_owned(),
            token,
            outcome: outcome.into(),
            db_clock,
        };
        self.emit(Event::Step(step));
    }

    /// Records that the current case could not run here, and why. A skip is neither a pass nor
    /// a failure; the summary counts it apart.
    pub fn skip(&mut self, reason: impl Into<String>) {
        self.summary.skipped += 1;
        let case = self.case.clone();
        self.emit(Event::Skipped {
            case,
            reason: reason.into(),
        });
    }

    /// Records that a signal interrupted the run; the summary that follows cannot pass.
    pub fn interrupted(&mut self, signal: &str) {
        self.end_case();
        self.summary.failed += 1;
        self.emit(Event::Interrupted {
            signal: signal.to_owned(),
        });
    }

    pub fn summary(&self) -> Summary {
        self.summary
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Ends the open case, emits the summary and lets every reporter write its files.
    /// Returns the summary, or the first error a reporter hit along the way.
    pub fn finish(mut self) -> io::Result<Summary> {
        self.end_case();
        let summary = self.summary;
        self.emit(Event::Finished(summary));
        for r in &mut self.reporters {
            if let Err(e) = r.finish() {
                self.errors.push(e);
            }
        }
        match self.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}

/// Renders an event as the lines of the text output (no trailing newline), or `None`.
pub fn render_text(event: &Event) -> Option<String> {
    match event {
        Event::Environment { entries } => Some(
            entries
                .iter()
                .map(|(k, v)| format!("# {k}: {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Event::CaseStarted { id, title } => Some(format!("CASE {id} :: {title}")),
        Event::Check(c) => Some(render_check(c)),
        Event::Note { text, .. } => Some(format!("  note {text}")),
        Event::Step(_) | Event::CaseFinished { .. } => None,
        Event::Skipped { reason, .. } => Some(format!("  skip {reason}")),
        Event::Interrupted { signal } => {
            Some(format!("INTERRUPTED by {signal}: the run did not finish"))
        }
        Event::Finished(summary) => Some(summary.to_string()),
    }
}

fn render_check(c: &Check) -> String {
    let mark = if c.passed { "ok  " } else { "FAIL" };
    match c.kind {
        CheckKind::Condition => format!("  {mark} {} ({})", c.description, c.actual),
        CheckKind::NegativeControl if c.passed => {
            format!(
                "  {mark} negative control exposes: {} ({})",
                c.description, c.actual
            )
        }
        CheckKind::NegativeControl => {
            format!(
                "  {mark} negative control did not expose: {} ({})",
                c.description, c.actual
            )
        }
        CheckKind::Value if c.expected.contains('\n') || c.actual.contains('\n') => {
            let body = if c.passed {
                c.actual.clone()
            } else {
                similar_asserts::SimpleDiff::from_str(&c.expected, &c.actual, "expected", "actual")
                    .to_string()
            };
            let indented: Vec<String> = body.lines().map(|l| format!("       {l}")).collect();
            format!("  {mark} {}\n{}", c.description, indented.join("\n"))
        }
        CheckKind::Value => {
            format!(
                "  {mark} {} (expected={}, actual={})",
                c.description, c.expected, c.actual
            )
        }
    }
}

/// Writes `bytes` to `path` whole: into a temp file beside it, then renamed over it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Lines going to stdout as they happen (optionally) and to a file, whole, at the end: what the
/// text and the JSON-lines reporters share.
struct Sink {
    stdout: bool,
    file: Option<PathBuf>,
    text: String,
}

impl Sink {
    fn line(&mut self, line: &str) -> io::Result<()> {
        if self.stdout {
            let mut out = io::stdout().lock();
            match writeln!(out, "{line}").and_then(|()| out.flush()) {
                // A reader that went away (`lab run | head`) ends the terminal copy, not the run:
                // the files still get every line.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.stdout = false,
                other => other?,
            }
        }
        self.text.push_str(line);
        self.text.push('\n');
        Ok(())
    }

    fn finish(&self) -> io::Result<()> {
        match &self.file {
            Some(path) => write_atomically(path, self.text.as_bytes()),
            None => Ok(()),
        }
    }
}

/// The text output: each line to the terminal as it happens, and all of them to a file at the end.
pub struct TextReporter(Sink);

impl TextReporter {
    /// `terminal`: also print to stdout. `file`: where the whole text goes at the end.
    pub fn new(terminal: bool, file: Option<PathBuf>) -> Self {
        // Diffs are plain text, in the file and on the terminal alike.
        console::set_colors_enabled(false);
        TextReporter(Sink {
            stdout: terminal,
            file,
            text: String::new(),
        })
    }
}

impl Reporter for TextReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        match render_text(event) {
            Some(lines) => self.0.line(&lines),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        self.0.finish()
    }
}

/// The machine-readable event log: one JSON object per line, every check and every timeline step.
pub struct JsonlReporter(Sink);

impl JsonlReporter {
    /// `file`: where the log goes at the end; `stdout`: also print each line as it happens
    /// (`--format json`).
    pub fn new(file: Option<PathBuf>, stdout: bool) -> Self {
        JsonlReporter(Sink {
            stdout,
            file,
            text: String::new(),
        })
    }
}

/// Writes the environment record to a JSON file of its own (`environment.json`).
pub struct EnvironmentReporter {
    file: PathBuf,
    entries: Vec<(String, String)>,
}

impl EnvironmentReporter {
    pub fn new(file: PathBuf) -> Self {
        EnvironmentReporter {
            file,
            entries: Vec::new(),
        }
    }
}

impl Reporter for EnvironmentReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        if let Event::Environment { entries } = event {
            self.entries = entries.clone();
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        let text =
            serde_json::to_string_pretty(&env_map(&self.entries)).map_err(io::Error::other)? + "\n";
        write_atomically(&self.file, text.as_bytes())
    }
}

/// The environment record as a JSON object.
fn env_map(entries: &[(String, String)]) -> serde_json::Map<String, serde_json::Value> {
    entries.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
}

/// One event as a JSON value.
pub fn event_json(event: &Event) -> serde_json::Value {
    match event {
        Event::Environment { entries } => {
            json!({"event": "environment", "environment": env_map(entries)})
        }
        Event::CaseStarted { id, title } => {
            json!({"event": "case_started", "case": id, "title": title})
        }
        Event::Check(c) => json!({
            "event": "check",
            "case": c.case,
            "kind": match c.kind {
                CheckKind::Value => "value",
                CheckKind::Condition => "condition",
                CheckKind::NegativeControl => "negative_control",
            },
            "description": c.description,
            "expected": c.expected,
            "actual": c.actual,
            "passed": c.passed,
        }),
        Event::Note { case, text } => json!({"event": "note", "case": case, "text": text}),
        Event::Step(s) => json!({
            "event": "step",
            "case": s.case,
            "mark": s.mark.as_str(),
            "at_ms": s.at.as_secs_f64() * 1000.0,
            "actor": s.actor,
            "action": s.action,
            "token": s.token,
            "outcome": s.outcome,
            "db_clock": s.db_clock,
        }),
        Event::CaseFinished { id, elapsed } => {
            json!({"event": "case_finished", "case": id, "elapsed_ms": elapsed.as_secs_f64() * 1000.0})
        }
        Event::Skipped { case, reason } => {
            json!({"event": "skipped", "case": case, "reason": reason})
        }
        Event::Interrupted { signal } => json!({"event": "interrupted", "signal": signal}),
        Event::Finished(s) => {
            json!({"event": "summary", "passed": s.passed, "failed": s.failed, "skipped": s.skipped})
        }
    }
}

impl Reporter for JsonlReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        self.0.line(&event_json(event).to_string())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.0.finish()
    }
}

/// A run with one event of every kind and a two-holder timeline, at fixed times: what the
/// reporters' tests render.
#[cfg(test)]
pub(crate) fn sample_run() -> Vec<Event> {
    let step =
        |at_us: u64, mark: Mark, actor: &str, action: &str, token: Option<i64>, outcome: &str| {
            Event::Step(Step {
                case: "F4".into(),
                mark,
                at: Duration::from_micros(at_us),
                actor: actor.into(),
                action: action.into(),
                token,
                outcome: outcome.into(),
                db_clock: (mark == Mark::Acquired).then(|| "2025-01-02 03:04:05.678+00".to_owned()),
            })
        };
    let check = |description: &str, kind: CheckKind, expected: &str, actual: &str, passed: bool| {
        Event::Check(Check {
            case: "F4".into(),
            kind,
            description: description.into(),
            expected: expected.into(),
            actual: actual.into(),
            passed,
        })
    };
    vec![
        Event::Environment {
            entries: vec![
                ("server_version".into(), "17.2 <local>".into()),
                ("parameters".into(), "ttl=1500ms".into()),
            ],
        },
        Event::CaseStarted {
            id: "F4".into(),
            title: "the paused old holder & its stale write".into(),
        },
        step(
            1_000,
            Mark::Info,
            "lab",
            "phase 1: A holds the lease for a long while",
            None,
            "",
        ),
        step(2_150, Mark::Acquired, "A", "acquire", Some(1), "ACQUIRED"),
        step(402_000, Mark::Renewed, "A", "renew", Some(1), "ok"),
        step(802_500, Mark::Renewed, "A", "renew", Some(1), "ok"),
        step(3_001_000, Mark::Frozen, "A", "SIGSTOP", None, "state T"),
        step(
            4_300_250,
            Mark::LeaseExpired,
            "A",
            "lease expired",
            None,
            "expires_at <= now()",
        ),
        step(4_400_000, Mark::Refused, "C", "acquire", None, "held; by B"),
        step(
            4_400_100,
            Mark::Acquired,
            "B",
            "acquire",
            Some(2),
            "ACQUIRED",
        ),
        step(
            4_450_000,
            Mark::Write { accepted: true },
            "B",
            "write #1",
            Some(2),
            "accepted",
        ),
        step(
            4_470_000,
            Mark::Restart,
            "lab",
            "restart_immediate",
            None,
            "recovered",
        ),
        step(4_500_000, Mark::Released, "B", "release", None, "ok"),
        step(4_600_000, Mark::Thawed, "A", "GO + SIGCONT", None, ""),
        step(
            4_650_000,
            Mark::Write { accepted: false },
            "A",
            "write #2",
            Some(1),
            "rejected",
        ),
        step(
            4_700_000,
            Mark::Info,
            "A",
            "renew after write",
            None,
            "ok=false",
        ),
        check(
            "B acquired the lease",
            CheckKind::Value,
            "ACQUIRED token=2",
            "ACQUIRED token=2",
            true,
        ),
        check(
            "fence_floor after the run",
            CheckKind::Value,
            "2",
            "1",
            false,
        ),
        check("rows", CheckKind::Value, "a\nb\nc", "a\nB\nc", false),
        check(
            "A's write is refused",
            CheckKind::Condition,
            "holds",
            "accepted=false",
            true,
        ),
        check(
            "stale write accepted",
            CheckKind::NegativeControl,
            "the flaw shows",
            "A accepted=false",
            false,
        ),
        Event::Note {
            case: "F4".into(),
            text: "A resumed: WRITE accepted=false token=1; FAIL is not a verdict here".into(),
        },
        Event::CaseFinished {
            id: "F4".into(),
            elapsed: Duration::from_micros(4_712_345),
        },
        Event::CaseStarted {
            id: "U1".into(),
            title: "job lease".into(),
        },
        Event::Skipped {
            case: "U1".into(),
            reason: "MariaDB is not installed".into(),
        },
        Event::CaseFinished {
            id: "U1".into(),
            elapsed: Duration::from_millis(3),
        },
        Event::Interrupted {
            signal: "SIGINT".into(),
        },
        Event::Finished(Summary {
            passed: 2,
            failed: 4,
            skipped: 1,
        }),
    ]
}

/// Compares `actual` with the committed snapshot `snapshots/<name>`; `UPDATE_GOLDEN=1` rewrites
/// it (then read `git diff` before committing).
#[cfg(test)]
pub(crate) fn assert_snapshot(name: &str, actual: &str) -> io::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/evidence/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual)?;
    }
    let snapshot = std::fs::read_to_string(&path)?;
    similar_asserts::assert_eq!(snapshot: snapshot, actual: actual, "{name} changed; if on purpose, UPDATE_GOLDEN=1 and review the diff");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        Recorder::new(Vec::new())
    }

    fn lines(r: &Recorder) -> Vec<String> {
        r.events().iter().filter_map(render_text).collect()
    }

    #[test]
    fn a_value_check_passes_only_when_expected_equals_actual() {
        let mut r = recorder();
        r.case("X1", "demo");
        assert!(r.check("fence_floor", &2, &2));
        assert!(!r.check("fence_floor after the run", &2, &1));
        assert_eq!(
            r.summary(),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert_eq!(
            lines(&r),
            [
                "CASE X1 :: demo",
                "  ok   fence_floor (expected=2, actual=2)",
                "  FAIL fence_floor after the run (expected=2, actual=1)",
            ]
        );
    }

    #[test]
    fn a_negative_control_that_does_not_expose_its_flaw_is_a_failure() {
        let mut r = recorder();
        r.case("X2", "demo");
        assert!(r.expose("stale write accepted", true, "A accepted=true"));
        assert!(!r.expose("stale write accepted", false, "A accepted=false"));
        assert_eq!(
            r.summary(),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert_eq!(
            lines(&r)[1..],
            [
                "  ok   negative control exposes: stale write accepted (A accepted=true)",
                "  FAIL negative control did not expose: stale write accepted (A accepted=false)",
            ]
        );
    }

    #[test]
    fn a_failed_multi_line_check_shows_a_diff() {
        let mut r = recorder();
        r.case("X3", "demo");
        r.check("rows", "a\nb\nc", "a\nB\nc");
        let text = lines(&r).join("\n");
        assert!(text.contains("  FAIL rows\n"), "{text}");
        assert!(text.contains("-b") && text.contains("+B"), "{text}");
    }

    #[test]
    fn a_skip_is_counted_apart_and_shown_in_the_summary() {
        let mut r = recorder();
        r.case("U1", "demo");
        r.skip("MariaDB is not installed: apt-get install -y mariadb-server");
        assert_eq!(
            r.summary(),
            Summary {
                passed: 0,
                failed: 0,
                skipped: 1
            }
        );
        assert_eq!(
            r.summary().to_string(),
            "SUMMARY passed=0 failed=0 skipped=1"
        );
        assert!(r.summary().all_passed(), "a skip does not fail the run");
        assert_eq!(
            lines(&r)[1],
            "  skip MariaDB is not installed: apt-get install -y mariadb-server"
        );
    }

    #[test]
    fn an_aborted_scenario_counts_as_a_failure() {
        let mut r = recorder();
        r.case("X4", "demo");
        r.abort(&"failed to connect");
        assert_eq!(
            r.summary(),
            Summary {
                passed: 0,
                failed: 1,
                skipped: 0
            }
        );
    }

    /// What the JSON-lines reporter writes for `events`, one parsed value per line.
    fn jsonl(events: &[Event]) -> io::Result<Vec<serde_json::Value>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("events.jsonl");
        let mut reporter = JsonlReporter::new(Some(path.clone()), false);
        for event in events {
            reporter.event(event)?;
        }
        reporter.finish()?;
        std::fs::read_to_string(&path)?
            .lines()
            .map(|line| serde_json::from_str(line).map_err(io::Error::other))
            .collect()
    }

    /// Every kind of event, as the event log has always spelled it (captured from the hand-built
    /// `json!` before events serialized themselves): the log is an interface, its field names and
    /// values do not change with the code behind them.
    #[test]
    fn every_kind_of_event_keeps_its_json_fields_and_values() -> io::Result<()> {
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
            Mark::Info,
        ] {
            events.push(step(mark, Duration::from_millis(3), None, None));
        }
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

    /// What the text output says for a failed value check between `expected` and `actual`.
    fn failed_check_text(expected: &str, actual: &str) -> io::Result<String> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("output.txt");
        let mut reporter = TextReporter::new(false, Some(path.clone()));
        reporter.event(&Event::Check(Check {
            case: "X".into(),
            kind: CheckKind::Value,
            description: "rows".into(),
            expected: expected.into(),
            actual: actual.into(),
            passed: false,
        }))?;
        reporter.finish()?;
        std::fs::read_to_string(&path)
    }

    /// The diff of a failed multi-line check, as plain text (captured from similar-asserts'
    /// `SimpleDiff` with the colours off, before the lab drew it with `similar` itself).
    #[test]
    fn a_failed_multi_line_check_shows_the_same_plain_diff() -> io::Result<()> {
        let header = "  FAIL rows\n       Differences (-expected|+actual):\n";
        for (expected, actual, diff) in [
            // A line changed.
            ("a\nb\nc", "a\nB\nc", "        a\n       -b\n       +B\n        c\n"),
            // A line added (the last line gains a newline, so it shows as changed too).
            ("a\nb", "a\nb\nc", "        a\n       -b\n       +b\n       +c\n"),
            // A line removed.
            ("a\nb\nc", "a\nc", "        a\n       -b\n        c\n"),
            // Only the trailing newline differs: the newlines are shown.
            ("a\nb\n", "a\nb", "        a␊\n       -b␊\n       +b\n"),
            // Changes far apart: two groups with four lines of context each.
            (
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14",
                "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\nY\n14",
                "        1\n       -2\n       +X\n        3\n        4\n        5\n        6\n       @ ~~~\n        9\n        10\n        11\n        12\n       -13\n       +Y\n        14\n",
            ),
        ] {
            similar_asserts::assert_eq!(failed_check_text(expected, actual)?, format!("{header}{diff}"));
        }
        Ok(())
    }

    #[test]
    fn evidence_files_are_replaced_whole() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("output.txt");
        write_atomically(&path, b"first\n")?;
        write_atomically(&path, b"second\n")?;
        assert_eq!(std::fs::read_to_string(&path)?, "second\n");
        assert_eq!(
            std::fs::read_dir(dir.path())?.count(),
            1,
            "no temp file left beside it"
        );
        Ok(())
    }
}
