//! The history of a chaos run: every holder's events collected as they arrive ([`Events`]),
//! paired into operations (an invocation and its completion, or none: unknown), and written as
//! `history.jsonl` — one [`Line`] a line, its JSON made by serde from the type, the faults as
//! carried out first, then every operation with the database's times where it recorded them.
//! The operations' steps on the run's timeline are drawn here too.
//!
//! It must not judge (that is the [`checker`](super::checker)'s) nor act on a holder beyond
//! taking what it reported; it never edits JSON by hand.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use harness::evidence::{Mark, Recorder};
use harness::holder::Holder;
use harness::observe::{Attempt, LeaseVersion, PartVersion};
use holder_protocol::{Event, OpKind, OpPhase};
use serde::{Deserialize, Serialize};

use super::checker::{Injected, Op, Outcome};
use super::schedule::FaultKind;
use super::under_test;
#[cfg(test)]
use super::SCOPE;

/// Every event the holders reported, each with its process's name and when it arrived.
#[derive(Default)]
pub struct Events(Vec<(String, Instant, Event)>);

impl Events {
    /// Takes every event that arrived from `h` so far.
    pub fn take_from(&mut self, h: &mut Holder) {
        let name = h.name().to_owned();
        for (at, event) in h.take_events() {
            if let Ok(event) = event {
                self.0.push((name.clone(), at, event));
            }
        }
    }

    /// The operations: each invocation paired with its completion; one without a completion (its
    /// holder was killed, or the run ended while it ran) has an unknown outcome.
    pub fn ops(&self, started: Instant) -> Vec<Op> {
        let ms = |at: &Instant| at.saturating_duration_since(started).as_secs_f64() * 1000.0;
        let mut ops: Vec<Op> = Vec::new();
        let mut open: BTreeMap<(String, u64), usize> = BTreeMap::new();
        for (process, at, event) in &self.0 {
            let Event::Op {
                id,
                phase,
                f,
                token,
                scope,
                part,
            } = event
            else {
                continue;
            };
            match phase {
                OpPhase::Invoke => {
                    open.insert((process.clone(), *id), ops.len());
                    ops.push(Op {
                        process: process.clone(),
                        id: *id,
                        f: *f,
                        token: *token,
                        scope: scope.clone(),
                        part: part.clone(),
                        invoke_ms: ms(at),
                        complete_ms: None,
                        outcome: Outcome::Info,
                    });
                }
                done => {
                    if let Some(i) = open.remove(&(process.clone(), *id)) {
                        let op = &mut ops[i];
                        op.complete_ms = Some(ms(at));
                        op.token = *token;
                        op.outcome = match done {
                            OpPhase::Ok => Outcome::Ok,
                            OpPhase::Fail => Outcome::Fail,
                            _ => Outcome::Info,
                        };
                    }
                }
            }
        }
        ops
    }

    /// Every holder process that reported anything (its connections carry its name).
    pub fn processes(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<&String> =
            self.0.iter().map(|(name, _, _)| name).collect();
        names.into_iter().cloned().collect()
    }

    /// The holders' other reports, counted: deadlines found passed, errors.
    pub fn others(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (_, _, e) in &self.0 {
            let key = match e {
                Event::DeadlinePassed { .. } => "local deadline passed at the check (no write)",
                Event::Error { .. } => "holder errors",
                _ => continue,
            };
            *counts.entry(key.to_owned()).or_default() += 1;
        }
        counts
    }
}

/// One line of `history.jsonl`, tagged by `type` (serde writes the tag first): the run's
/// settings (`run`), the faults as carried out (`fault`), every operation (`op`), then the
/// database's own records the checker read — each committed part version (`part_version`), each
/// version of the lease row (`lease_version`), each attempt the resource logged (`attempt`) and
/// each part's final content (`final_part`) — so that `lab check` re-checks a saved run offline
/// and prints the same verdict. The fields after the tag keep the names and the order the file
/// had when its lines were patched `serde_json::Value`s (alphabetical); `complete_ms` is `null`
/// for an operation that never completed, and a database time is absent where the database did
/// not record one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line<'a> {
    /// The run: what the verdict's wording needs, and the holders' other reports, counted.
    Run {
        ended_ms: f64,
        holders: usize,
        /// How many leases the holders were spread over (absent, in a history written before
        /// `--leases`: one).
        #[serde(default = "one_lease")]
        leases: usize,
        #[serde(borrow)]
        mode: Cow<'a, str>,
        reports: BTreeMap<String, usize>,
        seed: u64,
        time_ms: u64,
    },
    /// A fault as it was carried out (the lab's monotonic clock, ms from the start).
    Fault {
        end_ms: f64,
        #[serde(serialize_with = "fault_name", deserialize_with = "parsed")]
        kind: FaultKind,
        /// The holder process it hit (`-` for a crash or a failover).
        #[serde(borrow)]
        process: Cow<'a, str>,
        start_ms: f64,
    },
    /// An operation: invocation and completion on the lab's monotonic clock (ms from the
    /// start), and where the database recorded it, on the database clock (µs since the epoch).
    Op {
        complete_ms: Option<f64>,
        /// A grant's, a renewal's or a release's row version of the lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        db_at_us: Option<i64>,
        /// A write's commit, from the record of committed versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        db_commit_us: Option<i64>,
        #[serde(serialize_with = "kind_name", deserialize_with = "parsed")]
        f: OpKind,
        id: u64,
        invoke_ms: f64,
        outcome: Outcome,
        #[serde(borrow)]
        part: Cow<'a, str>,
        #[serde(borrow)]
        process: Cow<'a, str>,
        #[serde(borrow)]
        scope: Cow<'a, str>,
        token: i64,
    },
    /// A committed version of a part, from the resource's record (database clock, µs).
    PartVersion {
        at_us: i64,
        commit_us: Option<i64>,
        #[serde(borrow)]
        content: Cow<'a, str>,
        #[serde(borrow)]
        part: Cow<'a, str>,
        #[serde(borrow)]
        scope: Cow<'a, str>,
        token: i64,
    },
    /// A version of the lease row, from the lease store's record (database clock, µs).
    LeaseVersion {
        at_us: i64,
        expires_us: Option<i64>,
        #[serde(borrow)]
        holder: Cow<'a, str>,
        token: i64,
    },
    /// A write the resource logged, accepted or not (database clock, µs).
    Attempt {
        accepted: bool,
        at_us: i64,
        #[serde(borrow)]
        part: Cow<'a, str>,
        #[serde(borrow)]
        scope: Cow<'a, str>,
        token: i64,
        #[serde(borrow)]
        writer: Cow<'a, str>,
    },
    /// A part's content at the end of the run.
    FinalPart {
        #[serde(borrow)]
        content: Cow<'a, str>,
        #[serde(borrow)]
        part: Cow<'a, str>,
        #[serde(borrow)]
        scope: Cow<'a, str>,
        token: i64,
    },
}

fn kind_name<S: serde::Serializer>(kind: &OpKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

fn fault_name<S: serde::Serializer>(kind: &FaultKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

/// A name read back ([`FromStr`]: an operation's or a fault's).
fn parsed<'de, D: serde::Deserializer<'de>, T: FromStr>(d: D) -> Result<T, D::Error>
where
    T::Err: std::fmt::Debug,
{
    let name = Cow::<'de, str>::deserialize(d)?;
    name.parse()
        .map_err(|e| serde::de::Error::custom(format!("unknown name {name:?}: {e:?}")))
}

impl<'a> Line<'a> {
    fn fault(f: &'a Injected) -> Self {
        Line::Fault {
            end_ms: f.end_ms,
            kind: f.kind,
            process: Cow::Borrowed(&f.process),
            start_ms: f.start_ms,
        }
    }

    fn op(op: &'a Op, db_at_us: Option<i64>, db_commit_us: Option<i64>) -> Self {
        Line::Op {
            complete_ms: op.complete_ms,
            db_at_us,
            db_commit_us,
            f: op.f,
            id: op.id,
            invoke_ms: op.invoke_ms,
            outcome: op.outcome,
            part: Cow::Borrowed(&op.part),
            process: Cow::Borrowed(&op.process),
            scope: Cow::Borrowed(&op.scope),
            token: op.token,
        }
    }
}

/// The run's settings as its history records them ([`Line::Run`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunLine {
    pub ended_ms: f64,
    pub holders: usize,
    pub leases: usize,
    pub mode: String,
    pub reports: BTreeMap<String, usize>,
    pub seed: u64,
    pub time_ms: u64,
}

/// Everything a saved history holds: what the checker reads, as the run read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    pub run: Option<RunLine>,
    pub ops: Vec<Op>,
    pub faults: Vec<Injected>,
    pub parts: Vec<PartVersion>,
    pub lease: Vec<LeaseVersion>,
    pub attempts: Vec<Attempt>,
    pub final_parts: Vec<(String, String, String, i64)>,
}

/// The database's records of a run, as [`write`] saves them beside its operations.
pub struct Records<'r> {
    pub parts: &'r [PartVersion],
    pub lease: &'r [LeaseVersion],
    pub attempts: &'r [Attempt],
    pub final_parts: &'r [(String, String, String, i64)],
}

/// Reads a `history.jsonl` back: each line by its `type`. A line that is not one names its
/// number and what is wrong with it.
pub fn read(text: &str) -> anyhow::Result<Recorded> {
    let mut r = Recorded::default();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let parsed: Line = serde_json::from_str(line)
            .with_context(|| format!("line {}: not a line of a chaos history: {line}", n + 1))?;
        match parsed {
            Line::Run {
                ended_ms,
                holders,
                leases,
                mode,
                reports,
                seed,
                time_ms,
            } => {
                r.run = Some(RunLine {
                    ended_ms,
                    holders,
                    leases,
                    mode: mode.into_owned(),
                    reports,
                    seed,
                    time_ms,
                })
            }
            Line::Fault {
                end_ms,
                kind,
                process,
                start_ms,
            } => r.faults.push(Injected {
                kind,
                process: process.into_owned(),
                start_ms,
                end_ms,
            }),
            Line::Op {
                complete_ms,
                f,
                id,
                invoke_ms,
                outcome,
                part,
                process,
                scope,
                token,
                ..
            } => r.ops.push(Op {
                process: process.into_owned(),
                id,
                f,
                token,
                scope: scope.into_owned(),
                part: part.into_owned(),
                invoke_ms,
                complete_ms,
                outcome,
            }),
            Line::PartVersion {
                at_us,
                commit_us,
                content,
                part,
                scope,
                token,
            } => r.parts.push(PartVersion {
                scope: scope.into_owned(),
                part: part.into_owned(),
                content: content.into_owned(),
                token,
                at_us,
                commit_us,
            }),
            Line::LeaseVersion {
                at_us,
                expires_us,
                holder,
                token,
            } => r.lease.push(LeaseVersion {
                holder: holder.into_owned(),
                token,
                at_us,
                expires_us,
            }),
            Line::Attempt {
                accepted,
                at_us,
                part,
                scope,
                token,
                writer,
            } => r.attempts.push(Attempt {
                scope: scope.into_owned(),
                part: part.into_owned(),
                writer: writer.into_owned(),
                token,
                accepted,
                at_us,
            }),
            Line::FinalPart {
                content,
                part,
                scope,
                token,
            } => r.final_parts.push((
                scope.into_owned(),
                part.into_owned(),
                content.into_owned(),
                token,
            )),
        }
    }
    Ok(r)
}

/// A holding's renewals: its row versions' database times, and its ok renewals (process, op id).
type Renewals<'a> = (Vec<i64>, Vec<(&'a str, u64)>);

/// The history's lines: the faults as carried out, then every operation with, where the
/// database recorded it, its time there: a write's commit (`db_commit_us`, from the record of
/// committed versions), a grant's, a renewal's or a release's row version (`db_at_us`). A
/// holding's renewals are matched to its row versions in order, and only where their numbers
/// agree (a renewal of unknown outcome that took effect would shift them: then none of that
/// holding's renewals gets a database time). With several leases (`leases`), a holding is its
/// lease's and its token — tokens of two leases are counted apart and may be equal.
pub fn lines<'a>(
    ops: &'a [Op],
    faults: &'a [Injected],
    parts: &[PartVersion],
    lease: &[LeaseVersion],
    leases: usize,
) -> Vec<Line<'a>> {
    let mut lines: Vec<Line> = faults.iter().map(Line::fault).collect();
    let of = |process: &str| super::lease_index(process, leases).unwrap_or(0);
    let holding = |l: &LeaseVersion| (of(&l.holder), l.token);
    // Per holding: the row versions its holder wrote after the grant — renewals (an expiry) and
    // the release (none) — and the ok renewals, in the order they completed.
    let mut renewed: BTreeMap<(usize, i64), Renewals> = BTreeMap::new();
    for l in lease {
        let first = lease.iter().position(|g| holding(g) == holding(l));
        if l.expires_us.is_some() && first.is_some_and(|i| !std::ptr::eq(&lease[i], l)) {
            renewed.entry(holding(l)).or_default().0.push(l.at_us);
        }
    }
    let mut by_completion: Vec<&Op> = ops
        .iter()
        .filter(|op| op.f == OpKind::Renew && op.outcome == Outcome::Ok)
        .collect();
    by_completion.sort_by(|a, b| {
        a.complete_ms
            .partial_cmp(&b.complete_ms)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    for op in by_completion {
        renewed
            .entry((of(&op.process), op.token))
            .or_default()
            .1
            .push((op.process.as_str(), op.id));
    }
    let renew_at: BTreeMap<(&str, u64), i64> = renewed
        .values()
        .filter(|(versions, ids)| versions.len() == ids.len())
        .flat_map(|(versions, ids)| ids.iter().copied().zip(versions.iter().copied()))
        .collect();
    for op in ops {
        let ok = op.outcome == Outcome::Ok;
        let (db_at_us, db_commit_us) = match op.f {
            OpKind::Renew if ok => (renew_at.get(&(op.process.as_str(), op.id)).copied(), None),
            OpKind::Release if ok => (
                lease
                    .iter()
                    .find(|l| holding(l) == (of(&op.process), op.token) && l.expires_us.is_none())
                    .map(|l| l.at_us),
                None,
            ),
            OpKind::Write => (
                None,
                parts
                    .iter()
                    .find(|p| p.content == op.content())
                    .map(|p| p.commit_us.unwrap_or(p.at_us)),
            ),
            OpKind::Acquire if ok => (
                lease
                    .iter()
                    .find(|l| holding(l) == (of(&op.process), op.token))
                    .map(|l| l.at_us),
                None,
            ),
            _ => (None, None),
        };
        lines.push(Line::op(op, db_at_us, db_commit_us));
    }
    lines
}

/// Writes `history.jsonl` into `dir`, whole: one JSON object a line — the run's line, then
/// [`lines`], then the database's records ([`Records`]).
pub fn write(
    dir: &Path,
    run: &RunLine,
    ops: &[Op],
    faults: &[Injected],
    records: &Records<'_>,
) -> anyhow::Result<()> {
    let mut text = String::new();
    let mut put = |line: &Line| -> anyhow::Result<()> {
        text.push_str(&serde_json::to_string(line)?);
        text.push('\n');
        Ok(())
    };
    put(&Line::Run {
        ended_ms: run.ended_ms,
        holders: run.holders,
        leases: run.leases,
        mode: Cow::Borrowed(&run.mode),
        reports: run.reports.clone(),
        seed: run.seed,
        time_ms: run.time_ms,
    })?;
    for line in lines(ops, faults, records.parts, records.lease, run.leases) {
        put(&line)?;
    }
    for p in records.parts {
        put(&Line::PartVersion {
            at_us: p.at_us,
            commit_us: p.commit_us,
            content: Cow::Borrowed(&p.content),
            part: Cow::Borrowed(&p.part),
            scope: Cow::Borrowed(&p.scope),
            token: p.token,
        })?;
    }
    for l in records.lease {
        put(&Line::LeaseVersion {
            at_us: l.at_us,
            expires_us: l.expires_us,
            holder: Cow::Borrowed(&l.holder),
            token: l.token,
        })?;
    }
    for a in records.attempts {
        put(&Line::Attempt {
            accepted: a.accepted,
            at_us: a.at_us,
            part: Cow::Borrowed(&a.part),
            scope: Cow::Borrowed(&a.scope),
            token: a.token,
            writer: Cow::Borrowed(&a.writer),
        })?;
    }
    for (scope, part, content, token) in records.final_parts {
        put(&Line::FinalPart {
            content: Cow::Borrowed(content),
            part: Cow::Borrowed(part),
            scope: Cow::Borrowed(scope),
            token: *token,
        })?;
    }
    let path = dir.join("history.jsonl");
    harness::evidence::write_atomically(&path, text.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// Draws the operations that took effect on the run's timeline, each where it completed: grants,
/// releases, and the writes to the scope under test whose outcome is known (accepted or not).
pub fn draw(rec: &mut Recorder, started: Instant, ops: &[Op]) {
    for op in ops
        .iter()
        .filter(|op| op.outcome == Outcome::Ok || op.f == OpKind::Write)
    {
        let lane = op.process.split('.').next().unwrap_or(&op.process);
        let at = started + Duration::from_secs_f64(op.complete_ms.unwrap_or(op.invoke_ms) / 1000.0);
        match op.f {
            OpKind::Acquire => rec.step_at(
                at,
                Mark::Acquired,
                lane,
                "acquire",
                Some(op.token),
                "",
                None,
            ),
            OpKind::Write if under_test(&op.scope) && op.outcome != Outcome::Info => rec.step_at(
                at,
                Mark::Write {
                    accepted: op.outcome == Outcome::Ok,
                },
                lane,
                "write",
                Some(op.token),
                op.part.clone(),
                None,
            ),
            OpKind::Release => rec.step_at(
                at,
                Mark::Released,
                lane,
                "release",
                Some(op.token),
                "",
                None,
            ),
            _ => {}
        }
    }
}

/// The leases of a history written before `--leases`.
fn one_lease() -> usize {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: u64, f: OpKind, token: i64, done: Option<f64>, outcome: Outcome) -> Op {
        Op {
            process: "h0.0".into(),
            id,
            f,
            token,
            scope: if f == OpKind::Write { SCOPE } else { "-" }.into(),
            part: if f == OpKind::Write { "p1" } else { "-" }.into(),
            invoke_ms: id as f64,
            complete_ms: done,
            outcome,
        }
    }

    fn lease(token: i64, at_us: i64, expires_us: Option<i64>) -> LeaseVersion {
        LeaseVersion {
            holder: "h0.0".into(),
            token,
            at_us,
            expires_us,
        }
    }

    fn json(lines: &[Line]) -> anyhow::Result<Vec<String>> {
        Ok(lines
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()?)
    }

    #[test]
    fn every_line_is_one_tagged_object_with_the_database_times_it_has() -> anyhow::Result<()> {
        let faults = vec![Injected {
            kind: FaultKind::Pause,
            process: "h0.0".into(),
            start_ms: 1.5,
            end_ms: 2.0,
        }];
        let ops = vec![
            op(1, OpKind::Acquire, 1, Some(1.0), Outcome::Ok),
            op(2, OpKind::Write, 1, Some(3.0), Outcome::Ok),
            op(3, OpKind::Write, 1, None, Outcome::Info),
        ];
        let parts = vec![PartVersion {
            scope: SCOPE.into(),
            part: "p1".into(),
            content: "h0.0#2".into(),
            token: 1,
            at_us: 90,
            commit_us: Some(100),
        }];
        let got = json(&lines(
            &ops,
            &faults,
            &parts,
            &[lease(1, 50, Some(1_000))],
            1,
        ))?;
        assert_eq!(
            got,
            [
                r#"{"type":"fault","end_ms":2.0,"kind":"pause","process":"h0.0","start_ms":1.5}"#,
                r#"{"type":"op","complete_ms":1.0,"db_at_us":50,"f":"acquire","id":1,"invoke_ms":1.0,"outcome":"ok","part":"-","process":"h0.0","scope":"-","token":1}"#,
                r#"{"type":"op","complete_ms":3.0,"db_commit_us":100,"f":"write","id":2,"invoke_ms":2.0,"outcome":"ok","part":"p1","process":"h0.0","scope":"chaos","token":1}"#,
                r#"{"type":"op","complete_ms":null,"f":"write","id":3,"invoke_ms":3.0,"outcome":"info","part":"p1","process":"h0.0","scope":"chaos","token":1}"#,
            ]
        );
        Ok(())
    }

    #[test]
    fn a_written_history_reads_back_as_what_the_checker_read() -> anyhow::Result<()> {
        let faults = vec![Injected {
            kind: FaultKind::Kill,
            process: "h0.0".into(),
            start_ms: 1.5,
            end_ms: 2.0,
        }];
        let mut ops = vec![
            op(1, OpKind::Acquire, 1, Some(1.0), Outcome::Ok),
            op(2, OpKind::Write, 1, Some(3.0), Outcome::Ok),
            op(3, OpKind::Acquire, 0, None, Outcome::Info),
        ];
        // A content with a quote and a newline: read back whole.
        ops[1].part = "p\"1\n".into();
        let parts = vec![PartVersion {
            scope: SCOPE.into(),
            part: "p\"1\n".into(),
            content: "h0.0#2".into(),
            token: 1,
            at_us: 90,
            commit_us: None,
        }];
        let lease = vec![lease(1, 50, Some(1_000)), lease(1, 60, None)];
        let attempts = vec![Attempt {
            scope: SCOPE.into(),
            part: "p1".into(),
            writer: "h0.0".into(),
            token: 1,
            accepted: true,
            at_us: 95,
        }];
        let final_parts = vec![(SCOPE.to_owned(), "p1".to_owned(), "h0.0#2".to_owned(), 1)];
        let run = RunLine {
            ended_ms: 12.5,
            holders: 3,
            leases: 1,
            mode: "fenced-scope".into(),
            reports: BTreeMap::from([("holder errors".to_owned(), 2)]),
            seed: 7,
            time_ms: 10_000,
        };
        let dir = tempfile::tempdir()?;
        let records = Records {
            parts: &parts,
            lease: &lease,
            attempts: &attempts,
            final_parts: &final_parts,
        };
        write(dir.path(), &run, &ops, &faults, &records)?;
        let back = read(&std::fs::read_to_string(dir.path().join("history.jsonl"))?)?;
        assert_eq!(
            back,
            Recorded {
                run: Some(run),
                ops,
                faults,
                parts,
                lease,
                attempts,
                final_parts,
            }
        );
        let bad = read("{\"type\":\"op\",\"f\":\"fly\"}").unwrap_err();
        assert!(format!("{bad:#}").contains("line 1: not a line of a chaos history"));
        Ok(())
    }

    #[test]
    fn renewals_get_database_times_only_where_their_numbers_agree() {
        let renew = |id, done| op(id, OpKind::Renew, 1, Some(done), Outcome::Ok);
        let ops = vec![
            op(1, OpKind::Acquire, 1, Some(1.0), Outcome::Ok),
            renew(2, 2.0),
            renew(3, 3.0),
            op(4, OpKind::Release, 1, Some(4.0), Outcome::Ok),
        ];
        let db_at = |lease: &[LeaseVersion]| -> Vec<Option<i64>> {
            lines(&ops, &[], &[], lease, 1)
                .into_iter()
                .map(|l| match l {
                    Line::Op { db_at_us, .. } => db_at_us,
                    _ => None,
                })
                .collect()
        };
        let grant = lease(1, 10, Some(100));
        let release = lease(1, 40, None);
        let both = [
            grant.clone(),
            lease(1, 20, Some(200)),
            lease(1, 30, Some(300)),
            release.clone(),
        ];
        assert_eq!(db_at(&both), [Some(10), Some(20), Some(30), Some(40)]);
        // One row version for two ok renewals: neither is matched.
        let one = [grant, lease(1, 20, Some(200)), release];
        assert_eq!(db_at(&one), [Some(10), None, None, Some(40)]);
    }

    #[test]
    fn two_leases_with_equal_tokens_match_their_renewals_apart() {
        // h0.0 holds lease 0 and h1.0 lease 1 (two leases), each with token 1 and one renewal.
        let on = |process: &str, o: Op| Op {
            process: process.into(),
            ..o
        };
        let ops = vec![
            on("h0.0", op(1, OpKind::Acquire, 1, Some(1.0), Outcome::Ok)),
            on("h1.0", op(2, OpKind::Acquire, 1, Some(2.0), Outcome::Ok)),
            on("h0.0", op(3, OpKind::Renew, 1, Some(3.0), Outcome::Ok)),
            on("h1.0", op(4, OpKind::Renew, 1, Some(4.0), Outcome::Ok)),
        ];
        let by = |holder: &str, l: LeaseVersion| LeaseVersion {
            holder: holder.into(),
            ..l
        };
        let record = [
            by("h0.0", lease(1, 10, Some(100))),
            by("h1.0", lease(1, 20, Some(200))),
            by("h0.0", lease(1, 30, Some(300))),
            by("h1.0", lease(1, 40, Some(400))),
        ];
        let db_at = |leases: usize| -> Vec<Option<i64>> {
            lines(&ops, &[], &[], &record, leases)
                .into_iter()
                .map(|l| match l {
                    Line::Op { db_at_us, .. } => db_at_us,
                    _ => None,
                })
                .collect()
        };
        assert_eq!(db_at(2), [Some(10), Some(20), Some(30), Some(40)]);
        // Counted as one lease, the two holdings' versions run together: none is matched.
        assert_eq!(db_at(1)[2..], [None, None]);
    }
}
