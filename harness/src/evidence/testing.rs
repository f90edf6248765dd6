//! Test support for the evidence reporters: a sample run with every kind of event, and committed
//! snapshots (`snapshots/`) of what the reporters make of it. Compiled for tests only; no reporter
//! may depend on it.

use std::io;
use std::path::Path;
use std::time::Duration;

use super::model::{Check, CheckKind, Event, Lanes, Mark, Step, Summary};

/// A run with one event of every kind and a two-holder timeline, at fixed times: what the
/// reporters' tests render.
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
            lanes: Lanes::default(),
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
            lanes: Lanes::default(),
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
