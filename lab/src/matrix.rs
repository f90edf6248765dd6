//! `lab run --pg-versions`: each experiment's verdict per server version, as one table. A
//! verdict is read off the run's own events, never assumed: `passed (N)` when every one of its N
//! checks passed, `FAILED (k of N)` naming how many failed, `skip` with the run's reason.

use harness::evidence::Event;

/// One version's run: its cases' verdicts, in order.
pub struct Column {
    pub major: u32,
    /// The run could not start (exit 2): its cells say so.
    pub could_not_run: bool,
    pub verdicts: Vec<(String, String)>,
}

/// What one case made.
#[derive(Default)]
struct Tally {
    checks: usize,
    failed: usize,
    skipped: bool,
}

/// Each case of a run, in order, with its verdict.
pub fn verdicts(events: &[Event]) -> Vec<(String, String)> {
    let mut out: Vec<(String, Tally)> = Vec::new();
    for event in events {
        match event {
            Event::CaseStarted { id, .. } => out.push((id.clone(), Tally::default())),
            Event::Check(check) => {
                if let Some((_, t)) = out.iter_mut().find(|(id, _)| *id == check.case) {
                    t.checks += 1;
                    t.failed += usize::from(!check.passed);
                }
            }
            Event::Skipped { case, .. } => {
                if let Some((_, t)) = out.iter_mut().find(|(id, _)| id == case) {
                    t.skipped = true;
                }
            }
            _ => {}
        }
    }
    out.into_iter()
        .map(|(id, t)| {
            let verdict = match (t.skipped, t.failed) {
                (true, 0) => "skip".to_owned(),
                (_, 0) => format!("passed ({})", t.checks),
                (_, f) => format!("FAILED ({f} of {})", t.checks),
            };
            (id, verdict)
        })
        .collect()
}

/// The matrix as a Markdown table: a row per experiment, a column per version. A version whose
/// run could not start says so in every row.
pub fn render(columns: &[Column]) -> String {
    let mut ids: Vec<&str> = Vec::new();
    for column in columns {
        for (id, _) in &column.verdicts {
            if !ids.contains(&id.as_str()) {
                ids.push(id);
            }
        }
    }
    let mut text = String::from("| experiment |");
    for column in columns {
        text.push_str(&format!(" PostgreSQL {} |", column.major));
    }
    text.push_str("\n|---|");
    text.push_str(&"---|".repeat(columns.len()));
    text.push('\n');
    for id in &ids {
        text.push_str(&format!("| {id} |"));
        for column in columns {
            let cell = match column.verdicts.iter().find(|(i, _)| i == id) {
                Some((_, v)) => v.as_str(),
                None if column.could_not_run => "could not run",
                None => "not run",
            };
            text.push_str(&format!(" {cell} |"));
        }
        text.push('\n');
    }
    if ids.is_empty() {
        for column in columns {
            let said = if column.could_not_run {
                "could not run"
            } else {
                "ran nothing"
            };
            text.push_str(&format!("PostgreSQL {}: {said}\n", column.major));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::evidence::{Check, CheckKind};

    fn check(case: &str, passed: bool) -> Event {
        Event::Check(Check {
            case: case.into(),
            kind: CheckKind::Value,
            description: String::new(),
            expected: String::new(),
            actual: String::new(),
            passed,
        })
    }

    fn started(id: &str) -> Event {
        Event::CaseStarted {
            id: id.into(),
            title: String::new(),
            lanes: Default::default(),
        }
    }

    #[test]
    fn a_verdict_counts_checks_and_names_failures_and_skips() {
        let events = vec![
            started("F1"),
            check("F1", true),
            check("F1", true),
            started("F2"),
            check("F2", true),
            check("F2", false),
            started("F15"),
            Event::Skipped {
                case: "F15".into(),
                reason: "no engine".into(),
            },
        ];
        let v = verdicts(&events);
        assert_eq!(
            v,
            [
                ("F1".to_owned(), "passed (2)".to_owned()),
                ("F2".to_owned(), "FAILED (1 of 2)".to_owned()),
                ("F15".to_owned(), "skip".to_owned()),
            ]
        );
        let table = render(&[
            Column {
                major: 13,
                could_not_run: false,
                verdicts: v.clone(),
            },
            Column {
                major: 17,
                could_not_run: true,
                verdicts: Vec::new(),
            },
        ]);
        assert!(
            table.contains("| F2 | FAILED (1 of 2) | could not run |"),
            "{table}"
        );
        assert!(table.starts_with("| experiment | PostgreSQL 13 | PostgreSQL 17 |"));
    }
}
