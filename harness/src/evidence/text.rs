//! The text output: [`render_text`] turns an event into the lines people read, with a
//! plain-text diff for a failed multi-line check, and [`TextReporter`] sends them to the terminal
//! as they happen and to `output.txt` at the end. Also the sink (a terminal copy that a closed
//! pipe ends quietly, and a file written whole) the JSON-lines and JUnit reporters share.
//!
//! It renders what the events say and must not decide anything: a check is ok or FAIL because the
//! recorder said so. No terminal styling: the terminal and the file get the same bytes.

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use similar::{Algorithm, ChangeTag, TextDiff};

use super::model::{Check, CheckKind, Event};
use super::recorder::Reporter;
use super::write_atomically;

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
        Event::CaseStarted { id, title, .. } => Some(format!("CASE {id} :: {title}")),
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
                diff(&c.expected, &c.actual)
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

/// The diff of a failed multi-line check, plain text: a header, then each group of changes with
/// four lines of context, `-` for a line only in `expected`, `+` for one only in `actual`, groups
/// apart by `@ ~~~`. Where the line endings differ, they are shown (`␊`, `␍`). This is the text
/// similar-asserts' `SimpleDiff` printed with its colours off, drawn here with `similar` itself.
fn diff(expected: &str, actual: &str) -> String {
    if expected == actual {
        return "Invisible differences: the two values are the same in string form.\n".into();
    }
    let show_newlines = newlines_matter(expected, actual);
    let diff = TextDiff::configure()
        .timeout(Duration::from_millis(200))
        .algorithm(Algorithm::Patience)
        .diff_lines(expected, actual);
    let mut out = String::from("Differences (-expected|+actual):\n");
    for (i, group) in diff.grouped_ops(4).iter().enumerate() {
        if i > 0 {
            out.push_str("@ ~~~\n");
        }
        for op in group {
            for change in diff.iter_changes(op) {
                out.push(match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                });
                let line = change.value();
                if show_newlines {
                    out.push_str(
                        &line
                            .replace('\r', "␍\r")
                            .replace('\n', "␊\n")
                            .replace("␍\r␊\n", "␍␊\r\n"),
                    );
                } else {
                    out.push_str(line);
                }
                if change.missing_newline() {
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// Whether the two sides differ in their line endings (a trailing newline, or `\n` against
/// `\r\n` or `\r`), so that the diff must show them.
fn newlines_matter(left: &str, right: &str) -> bool {
    fn trailing(s: &str) -> &str {
        ["\r\n", "\r", "\n"]
            .into_iter()
            .find(|end| s.ends_with(end))
            .unwrap_or("")
    }
    /// (a lone `\r`, `\r\n`, a lone `\n`) seen.
    fn kinds(s: &str) -> (bool, bool, bool) {
        let (mut cr, mut crlf, mut lf) = (false, false, false);
        let mut last = None;
        for c in s.chars() {
            if c == '\n' {
                if last.take() == Some('\r') {
                    crlf = true;
                } else {
                    lf = true;
                }
            }
            if last == Some('\r') {
                cr = true;
            }
            last = Some(c);
        }
        if last == Some('\r') {
            cr = true;
        }
        (cr, crlf, lf)
    }
    if trailing(left) != trailing(right) {
        return true;
    }
    let ((cr1, crlf1, lf1), (cr2, crlf2, lf2)) = (kinds(left), kinds(right));
    // More than one kind of line ending between the two.
    [cr1 || cr2, crlf1 || crlf2, lf1 || lf2]
        .into_iter()
        .filter(|seen| *seen)
        .count()
        > 1
}

/// Where a reporter's output goes: each piece to stdout as it happens (optionally), and the whole
/// to a file at the end. What the text, the JSON-lines and the JUnit reporters share.
pub(super) struct Sink {
    terminal: bool,
    file: Option<PathBuf>,
}

impl Sink {
    /// `terminal`: also print to stdout. `file`: where the whole goes at the end.
    pub(super) fn new(terminal: bool, file: Option<PathBuf>) -> Sink {
        Sink { terminal, file }
    }

    /// Prints `text` and a newline to stdout, if this sink prints at all. A reader that went away
    /// (`lab run | head`) ends the terminal copy, never the run: the files are still written.
    pub(super) fn print(&mut self, text: &str) -> io::Result<()> {
        if self.terminal {
            let mut out = io::stdout().lock();
            match writeln!(out, "{text}").and_then(|()| out.flush()) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.terminal = false,
                other => other?,
            }
        }
        Ok(())
    }

    /// Writes `text` to the file, whole, if this sink has one.
    pub(super) fn write_file(&self, text: &str) -> io::Result<()> {
        match &self.file {
            Some(path) => write_atomically(path, text.as_bytes()),
            None => Ok(()),
        }
    }
}

/// Each line followed by a newline: the content of a line-oriented file.
pub(super) fn lines(lines: impl IntoIterator<Item = String>) -> String {
    lines.into_iter().fold(String::new(), |mut text, line| {
        text.push_str(&line);
        text.push('\n');
        text
    })
}

/// The text output: each line to the terminal as it happens, and all of them to a file at the end.
pub struct TextReporter(Sink);

impl TextReporter {
    /// `terminal`: also print to stdout. `file`: where the whole text goes at the end.
    pub fn new(terminal: bool, file: Option<PathBuf>) -> Self {
        TextReporter(Sink::new(terminal, file))
    }
}

impl Reporter for TextReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        match render_text(event) {
            Some(lines) => self.0.print(&lines),
            None => Ok(()),
        }
    }

    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        self.0
            .write_file(&lines(events.iter().filter_map(render_text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Recorder;

    #[test]
    fn a_failed_multi_line_check_shows_a_diff() {
        let mut r = Recorder::new(Vec::new());
        r.case("X3", "demo");
        r.check("rows", "a\nb\nc", "a\nB\nc");
        let text = r
            .events()
            .iter()
            .filter_map(render_text)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("  FAIL rows\n"), "{text}");
        assert!(text.contains("-b") && text.contains("+B"), "{text}");
    }

    /// What the text output says for a failed value check between `expected` and `actual`.
    fn failed_check_text(expected: &str, actual: &str) -> io::Result<String> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("output.txt");
        let mut reporter = TextReporter::new(false, Some(path.clone()));
        let check = Event::Check(Check {
            case: "X".into(),
            kind: CheckKind::Value,
            description: "rows".into(),
            expected: expected.into(),
            actual: actual.into(),
            passed: false,
        });
        reporter.event(&check)?;
        reporter.finish(&[check])?;
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
}
