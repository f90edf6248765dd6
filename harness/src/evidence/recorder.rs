//! The recorder scenarios write to, and the [`Reporter`] trait its consumers implement. The
//! recorder counts the verdicts and is the one owner of the run's event stream: it hands each
//! event to every reporter as it happens, and the whole stream to every reporter once at the end.
//! It must not format text or write files itself, and no reporter keeps a copy of the stream.

use std::fmt::Display;
use std::io;
use std::time::Instant;

use super::model::{Check, CheckKind, Event, Lanes, Mark, Step, Summary};
use super::tokens::TokenOrder;

/// A consumer of the event stream. A streaming reporter (the terminal copy) implements
/// [`event`](Reporter::event); one that needs the whole run (a file, a picture) implements
/// [`finish`](Reporter::finish), which gets the recorder's stream rather than a copy of its own.
pub trait Reporter: Send {
    /// Each event, as it happens.
    fn event(&mut self, event: &Event) -> io::Result<()> {
        let _ = event;
        Ok(())
    }

    /// Called once after the last event (the summary) with every event of the run, in order:
    /// write files here.
    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        let _ = events;
        Ok(())
    }
}

/// Collects the events of one run, hands each to every reporter as it happens, and the whole
/// run to every reporter at the end.
pub struct Recorder {
    started: Instant,
    case: String,
    case_started: Instant,
    summary: Summary,
    reporters: Vec<Box<dyn Reporter>>,
    events: Vec<Event>,
    errors: Vec<io::Error>,
    /// The system under test issues no token: token numbers are not evidence.
    token_blind: bool,
    /// Checks a case declares that did not apply to the system under test ([`Recorder::waive`]).
    waived: usize,
    /// The seed's token numbers bound to the store's tokens in the open case: checks judge
    /// tokens by order ([`TokenOrder`]).
    tokens: TokenOrder,
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
            token_blind: false,
            waived: 0,
            tokens: TokenOrder::default(),
        }
    }

    /// Whether the system under test issues no fencing token (its profile claims
    /// `token_at_lease = false` and answers 0 for one): from now on every `token=N` in a check,
    /// a note or a step reads `token=–`, so that a check compares what such a design does have
    /// (granted or refused, accepted or rejected, by whom) and never a number it does not issue.
    pub fn blind_tokens(&mut self, blind: bool) {
        self.token_blind = blind;
    }

    fn masked(&self, text: String) -> String {
        if self.token_blind {
            mask_tokens(&text)
        } else {
            text
        }
    }

    /// A check the case declares that does not apply to the system under test (what it reads,
    /// the design does not keep): recorded as a note saying so and why, counted apart from the
    /// verdicts — never a pass.
    pub fn waive(&mut self, description: impl Display, why: impl Display) {
        self.waived += 1;
        self.note(format!("n/a  {description} — {why}"));
    }

    /// How many checks were waived so far ([`Recorder::waive`]).
    pub fn waived(&self) -> usize {
        self.waived
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

    /// Starts a case with the default lanes ([`Lanes::default`]); the previous one, if any, ends.
    pub fn case(&mut self, id: &str, title: &str) {
        self.case_with_lanes(id, title, Lanes::default());
    }

    /// Starts a case whose timeline pictures draw `lanes`; the previous one, if any, ends.
    pub fn case_with_lanes(&mut self, id: &str, title: &str, lanes: Lanes) {
        self.end_case();
        self.case = id.to_owned();
        self.case_started = Instant::now();
        self.tokens.reset();
        self.emit(Event::CaseStarted {
            id: id.to_owned(),
            title: title.to_owned(),
            lanes,
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

    /// A new timeline within the open case (a part that starts again from free leases after
    /// `Testbed::reset`): the seed's token numbers count from 1 again, bound afresh to the store's
    /// tokens — a lock service's counter or revision does not start again, a table's does.
    pub fn restart_tokens(&mut self) {
        self.tokens.reset();
    }

    /// The store's token for the seed's token number `n` in the open case (`token=n` in an
    /// expected text): the one a passing check bound to `n`, or `n` itself before any did.
    pub fn token(&self, n: i64) -> i64 {
        self.tokens.token(n).unwrap_or(n)
    }

    /// A value check: passes when `expected == actual` — where the expected text names tokens
    /// (`token=n`, `token≥n`), in the seed's numbering, judged by their order ([`TokenOrder`]:
    /// a later grant's token is greater, one holding keeps its token, gaps allowed), the rest of
    /// the texts equal; with the token numbers masked, when [`Recorder::blind_tokens`]. Returns
    /// whether it passed.
    pub fn check<T: PartialEq + Display + ?Sized>(
        &mut self,
        description: impl Into<String>,
        expected: &T,
        actual: &T,
    ) -> bool {
        let (mut shown_expected, shown_actual) = (expected.to_string(), actual.to_string());
        // Blind to tokens, the texts are compared with their numbers masked (as `verdict`
        // records them). Where the expected text names a token, the check judged only the rest:
        // a difference there fails it, an agreement cannot pass it — it is waived, counted
        // apart, never a pass.
        let passed = if self.token_blind {
            let expected_masked = mask_tokens(&shown_expected.replace("token≥", "token="));
            let rest_agrees = expected_masked == mask_tokens(&shown_actual);
            if rest_agrees && expected_masked != shown_expected {
                self.waive(
                    Into::<String>::into(description),
                    format_args!(
                        "the design issues no token, so the token of \"{expected_masked}\" \
                         cannot be judged (the rest agreed)"
                    ),
                );
                return true;
            }
            rest_agrees
        } else if let Some(judged) = self.tokens.judge(&shown_expected, &shown_actual) {
            shown_expected = judged.shown_expected;
            judged.passed
        } else {
            expected == actual
        };
        let description = self.tokens.rename(&description.into());
        self.verdict(
            CheckKind::Value,
            description,
            shown_expected,
            shown_actual,
            passed,
        )
    }

    /// A value check of one token (a floor, a token column) against the seed's token number
    /// `expected`, judged by order as [`Recorder::check`] judges `token=n`; `actual` `None` reads
    /// `none`.
    pub fn check_token(
        &mut self,
        description: impl Into<String>,
        expected: i64,
        actual: Option<i64>,
    ) -> bool {
        let shown_actual = actual.map_or_else(|| "none".to_owned(), |t| t.to_string());
        let judged = self.tokens.judge_number(expected, actual);
        let description = self.tokens.rename(&description.into());
        self.verdict(
            CheckKind::Value,
            description,
            judged.shown_expected,
            shown_actual,
            judged.passed,
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
        let (description, expected, actual) = (
            self.masked(description),
            self.masked(expected),
            self.masked(actual),
        );
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
        let text = self.masked(text.into());
        self.emit(Event::Note { case, text });
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
            token: token.filter(|_| !self.token_blind),
            outcome: self.masked(outcome.into()),
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

    /// Takes over the events and verdicts of `child`, a recorder without reporters that recorded
    /// cases elsewhere (an experiment run on another job, `lab run --jobs`): each event goes to
    /// this recorder's reporters as if it happened here, its timeline steps shifted to this
    /// recorder's clock. The open case, if any, ends first.
    pub fn absorb(&mut self, mut child: Recorder) {
        child.end_case();
        self.end_case();
        let shift = child.started.saturating_duration_since(self.started);
        for mut event in std::mem::take(&mut child.events) {
            if let Event::Step(step) = &mut event {
                step.at += shift;
            }
            self.emit(event);
        }
        self.summary.passed += child.summary.passed;
        self.summary.failed += child.summary.failed;
        self.summary.skipped += child.summary.skipped;
        self.waived += child.waived;
        self.errors.append(&mut child.errors);
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
            if let Err(e) = r.finish(&self.events) {
                self.errors.push(e);
            }
        }
        match self.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}

/// `text` with the number after every `token=` replaced by `–`.
fn mask_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("token=") {
        let (head, tail) = rest.split_at(i + "token=".len());
        out.push_str(head);
        let sign = usize::from(tail.starts_with('-'));
        let digits = tail[sign..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len() - sign);
        if digits > 0 {
            out.push('–');
            rest = &tail[sign + digits..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::render_text;

    fn recorder() -> Recorder {
        Recorder::new(Vec::new())
    }

    fn lines(r: &Recorder) -> Vec<String> {
        r.events().iter().filter_map(render_text).collect()
    }

    #[test]
    fn an_absorbed_recorder_adds_its_cases_and_verdicts_in_order() {
        let mut main = recorder();
        main.case("X1", "here");
        main.check("one", &1, &1);
        let mut child = recorder();
        child.case("X2", "elsewhere");
        child.check("two", &2, &3);
        child.skip("not here");
        child.step(Mark::Info, "A", "act", None, "", None);
        main.absorb(child);
        assert_eq!(
            main.summary(),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        let text = lines(&main).join("\n");
        let (x1, x2) = (text.find("CASE X1").unwrap(), text.find("CASE X2").unwrap());
        assert!(x1 < x2 && text.contains("FAIL two"), "{text}");
        assert!(main
            .events()
            .iter()
            .any(|e| matches!(e, Event::CaseFinished { id, .. } if id == "X2")));
    }

    #[test]
    fn a_token_blind_recorder_compares_everything_but_the_token_numbers() {
        assert_eq!(
            mask_tokens("A(token=1) ACQUIRED token=12, token=-3; max_token 2 token=x"),
            "A(token=–) ACQUIRED token=–, token=–; max_token 2 token=x"
        );
        let mut r = recorder();
        r.case("X1", "demo");
        r.blind_tokens(true);
        assert!(!r.check("B acquires, token=2", "ACQUIRED token=2", "REFUSED"));
        // The rest agrees, and the token is all that is left to judge: waived, not passed.
        assert!(r.check(
            "B acquires, token=2",
            "ACQUIRED token=2",
            "ACQUIRED token=0"
        ));
        // Nothing names a token: judged as it stands.
        assert!(r.check("A exits", "exit 3", "exit 3"));
        r.waive("the resource's fence_floor", "the design keeps no floor");
        r.step(
            Mark::Acquired,
            "B",
            "acquire",
            Some(0),
            "ACQUIRED token=0",
            None,
        );
        assert_eq!(r.waived(), 2);
        assert_eq!((r.summary().passed, r.summary().failed), (1, 1));
        let text = lines(&r).join("\n");
        assert!(
            !text.contains("token=2") && !text.contains("token=0"),
            "{text}"
        );
        assert!(text.contains("n/a  the resource's fence_floor — the design keeps no floor"));
        assert!(
            text.contains("n/a  B acquires, token=– — the design issues no token"),
            "{text}"
        );
        assert!(r
            .events()
            .iter()
            .any(|e| matches!(e, Event::Step(s) if s.token.is_none())));
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
    fn absorbing_adds_every_count_of_the_child_to_the_parents() {
        let mut main = recorder();
        main.case("X1", "here");
        main.check("one", &1, &1);
        main.check("two", &1, &2);
        let mut child = recorder();
        child.case("X2", "elsewhere");
        child.check("three", &3, &3);
        child.check("four", &4, &4);
        child.check("five", &5, &6);
        child.skip("not here");
        child.waive("six", "no floor");
        main.absorb(child);
        assert_eq!(
            main.summary(),
            Summary {
                passed: 3,
                failed: 2,
                skipped: 1
            }
        );
        assert_eq!(main.waived(), 1);
    }

    #[test]
    fn an_interruption_adds_a_failure_to_those_before_it_and_says_which_signal() {
        let mut r = recorder();
        r.case("X1", "demo");
        r.check("one", &1, &2);
        r.interrupted("SIGINT");
        assert_eq!(r.summary().failed, 2);
        assert!(r
            .events()
            .iter()
            .any(|e| matches!(e, Event::Interrupted { signal } if signal == "SIGINT")));
    }

    #[test]
    fn a_token_check_judges_by_order_and_binds_the_number_until_the_tokens_restart() {
        let mut r = recorder();
        r.case("X1", "demo");
        // The first grant is whatever the store numbers it; the second must be greater.
        assert!(r.check_token("A's token", 1, Some(5)));
        assert_eq!((r.token(1), r.token(7)), (5, 7));
        assert!(!r.check_token("B's token, after A's", 2, Some(3)));
        assert!(r.check_token("B's token, after A's", 2, Some(9)));
        assert!(!r.check_token("nothing granted", 3, None));
        // A new timeline: the numbers are bound afresh.
        r.restart_tokens();
        assert_eq!(r.token(1), 1);
        assert!(r.check_token("A's token again", 1, Some(2)));
        assert_eq!(r.token(1), 2);
        assert!(r.check_that("a condition", true, "seen"));
        assert!(!r.check_that("another", false, "not seen"));
        assert_eq!((r.summary().passed, r.summary().failed), (4, 3));
    }

    #[test]
    fn the_environment_is_recorded_and_a_negative_token_is_masked_to_the_end() {
        let mut r = recorder();
        r.environment(vec![("git_revision".into(), "abc".into())]);
        assert!(matches!(
            r.events(),
            [Event::Environment { entries }] if entries[0].1 == "abc"
        ));
        assert_eq!(mask_tokens("A token=-3"), "A token=–");
        assert_eq!(mask_tokens("A token=12"), "A token=–");
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
}
