//! The JUnit XML reporter: one `<testsuite>` per CASE, one `<testcase>` per check, a
//! `<failure>` carrying expected and actual for each failed check, and the environment record as
//! properties. Any CI that reads JUnit can gate on the lab with it.

use std::io;
use std::path::PathBuf;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::{write_atomically, CheckKind, Event, Reporter};

/// Collects the checks and writes `junit.xml` at the end (and prints it when `stdout`).
pub struct JunitReporter {
    file: Option<PathBuf>,
    stdout: bool,
    environment: Vec<(String, String)>,
    suites: Vec<TestSuite>,
}

impl JunitReporter {
    pub fn new(file: Option<PathBuf>, stdout: bool) -> Self {
        JunitReporter {
            file,
            stdout,
            environment: Vec::new(),
            suites: Vec::new(),
        }
    }

    fn suite(&mut self) -> &mut TestSuite {
        if self.suites.is_empty() {
            self.suites.push(TestSuite::new("run"));
        }
        self.suites.last_mut().expect("a suite")
    }

    /// The whole report as XML.
    pub fn to_xml(&self) -> io::Result<String> {
        let mut report = Report::new("fencing-lab");
        for suite in &self.suites {
            let mut suite = suite.clone();
            for (key, value) in &self.environment {
                suite.add_property(Property::new(key.as_str(), value.as_str()));
            }
            report.add_test_suite(suite);
        }
        report.to_string().map_err(io::Error::other)
    }
}

impl Reporter for JunitReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        match event {
            Event::Environment { entries } => self.environment = entries.clone(),
            Event::CaseStarted { id, title } => {
                self.suites.push(TestSuite::new(format!("{id} :: {title}")))
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
                self.suite().add_test_case(case);
            }
            Event::CaseFinished { elapsed, .. } => {
                self.suite().set_time(*elapsed);
            }
            Event::Interrupted { signal } => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status.set_message(format!("interrupted by {signal}: the run did not finish"));
                self.suite()
                    .add_test_case(TestCase::new("the run finished", status));
            }
            Event::Skipped { case, reason } => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(reason.clone());
                let mut test = TestCase::new(format!("{case} could run here"), status);
                test.set_classname(format!("fencing-lab.{case}"));
                self.suite().add_test_case(test);
            }
            Event::Note { .. } | Event::Step(_) | Event::Finished(_) => {}
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        let xml = self.to_xml()?;
        if let Some(path) = &self.file {
            write_atomically(path, xml.as_bytes())?;
        }
        if self.stdout {
            println!("{xml}");
        }
        Ok(())
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
        let mut reporter = JunitReporter::new(Some(path.clone()), false);
        for event in crate::evidence::testing::sample_run() {
            reporter.event(&event)?;
        }
        reporter.finish()?;
        crate::evidence::testing::assert_snapshot(
            "sample-junit.xml",
            &std::fs::read_to_string(&path)?,
        )
    }
}
