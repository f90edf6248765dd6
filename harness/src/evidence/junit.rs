//! The JUnit XML reporter: one `<testsuite>` per CASE, one `<testcase>` per check, a
//! `<failure>` carrying expected and actual for each failed check, and the environment record as
//! properties. Any CI that reads JUnit can gate on the lab with it. It translates the events of
//! the run into JUnit's terms and must not decide anything of its own.

use std::io;
use std::path::PathBuf;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::model::{CheckKind, Event};
use super::recorder::Reporter;
use super::text::Sink;

/// Writes `junit.xml` at the end of the run (and prints it when `stdout`: `--format junit`).
pub struct JunitReporter(Sink);

impl JunitReporter {
    pub fn new(file: Option<PathBuf>, stdout: bool) -> Self {
        JunitReporter(Sink::new(stdout, file))
    }
}

/// The whole report of a run as XML.
pub fn to_xml(events: &[Event]) -> io::Result<String> {
    let mut environment: &[(String, String)] = &[];
    let mut suites: Vec<TestSuite> = Vec::new();
    // Checks before the first case (there are none today) go into a suite of their own.
    fn suite(suites: &mut Vec<TestSuite>) -> &mut TestSuite {
        if suites.is_empty() {
            suites.push(TestSuite::new("run"));
        }
        suites.last_mut().expect("a suite")
    }
    for event in events {
        match event {
            Event::Environment { entries } => environment = entries,
            Event::CaseStarted { id, title, .. } => {
                suites.push(TestSuite::new(format!("{id} :: {title}")))
            }
            Event::Check(c) => {
                let status = if c.passed {
                    TestCaseStatus::success()
                } else {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    let message = match c.kind {
                        CheckKind::NegativeControl => {
                            format!("the negative control did not expose its flaw: {}", c.actual)
                        }
                        _ => format!("expected={}, actual={}", c.expected, c.actual),
                    };
                    status.set_message(message.clone()).set_description(message);
                    status
                };
                let name = match c.kind {
                    CheckKind::NegativeControl => format!("negative control: {}", c.description),
                    _ => c.description.clone(),
                };
                let mut case = TestCase::new(name, status);
                case.set_classname(format!("fencing-lab.{}", c.case));
                suite(&mut suites).add_test_case(case);
            }
            Event::CaseFinished { elapsed, .. } => {
                suite(&mut suites).set_time(*elapsed);
            }
            Event::Interrupted { signal } => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status.set_message(format!("interrupted by {signal}: the run did not finish"));
                suite(&mut suites).add_test_case(TestCase::new("the run finished", status));
            }
            Event::Skipped { case, reason } => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(reason.clone());
                let mut test = TestCase::new(format!("{case} could run here"), status);
                test.set_classname(format!("fencing-lab.{case}"));
                suite(&mut suites).add_test_case(test);
            }
            Event::Note { .. } | Event::Step(_) | Event::Finished(_) => {}
        }
    }
    let mut report = Report::new("fencing-lab");
    for mut suite in suites {
        for (key, value) in environment {
            suite.add_property(Property::new(key.as_str(), value.as_str()));
        }
        report.add_test_suite(suite);
    }
    report.to_string().map_err(io::Error::other)
}

impl Reporter for JunitReporter {
    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        let xml = to_xml(events)?;
        // The file first: a terminal that went away must not cost it.
        self.0.write_file(&xml)?;
        self.0.print(&xml)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One testsuite per case, one testcase per check, skips and interruptions as such: the
    /// report of a run with every kind of event, as committed.
    #[test]
    fn the_sample_run_writes_the_committed_junit_report() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("junit.xml");
        JunitReporter::new(Some(path.clone()), false)
            .finish(&crate::evidence::testing::sample_run())?;
        crate::evidence::testing::assert_snapshot(
            "sample-junit.xml",
            &std::fs::read_to_string(&path)?,
        )
    }
}
