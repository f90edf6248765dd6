//! `lab chaos`: pauses nobody chose. N looping holder processes (the holder's `--loop-seed`)
//! compete for one lease and write parts of one scope with their tokens; a nemesis driven only by
//! the seed ([`schedule`]) freezes them for random lengths (shorter and longer than the TTL), kills
//! and restarts them, and crashes the cluster. Every operation's invocation and completion is
//! recorded (`history.jsonl`), the database keeps its own record of every committed write and
//! every version of the lease row, and the [`checker`] says afterwards whether I2, I3 and
//! durability held.
//!
//! The negative control is built into every run: each holder writes every part twice, to the
//! scope under test (the `--mode` given) and, right after, unfenced to a control scope — the same
//! schedule, the same holders, the same interleavings. The control scope must show at least one
//! I3 violation; if it shows none, the schedule was too gentle to prove anything and the run fails.

pub mod checker;
pub mod schedule;
pub mod sweep;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencing::resource::WriteMode;
use harness::evidence::{Lane, Lanes, Mark, Recorder};
use harness::holder::Holder;
use holder_protocol::{Event, OpKind, OpPhase};

use crate::Lab;
use checker::{Injected, Op, Outcome, Verdict};
use schedule::{Fault, FaultKind, Plan};

/// The scope under test, and the unfenced control scope beside it.
pub const SCOPE: &str = "chaos";
pub const CONTROL_SCOPE: &str = "chaos-control";
/// The case id and title in the evidence.
pub const CASE: &str = "CHAOS";
pub const TITLE: &str = "seeded faults against looping holders; a checker over the recorded history (I2, I3 in commit order, durability), an unfenced control scope beside";

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub seed: u64,
    pub time: Duration,
    pub holders: usize,
    /// The write mode under test.
    pub mode: WriteMode,
    pub faults: Vec<FaultKind>,
    /// libfaketime, for the drift fault (required when `faults` has it).
    pub faketime: Option<harness::faketime::Faketime>,
}

impl ChaosConfig {
    /// The faults as the command line names them: `pause,kill,crash,drift`.
    pub fn fault_names(&self) -> String {
        self.faults
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What the run found, beyond the checks it recorded.
#[derive(Debug)]
pub struct Found {
    pub verdict: Verdict,
    pub schedule: Vec<Fault>,
    /// The faults as carried out, in the order [`Verdict::fault_effects`] follows.
    pub injected: Vec<Injected>,
}

/// A holder slot: its current process and how many it has had.
struct Slot {
    holder: Option<Holder>,
    incarnation: u32,
    frozen_since: Option<f64>,
    killed_at: Option<f64>,
    drifted_since: Option<f64>,
    /// (containers) The packets of its connections being dropped: since when, and the rules.
    cut: Option<(f64, Cut)>,
}

/// The iptables rules of a delay or partition in force; dropping them lifts them.
type Cut = harness::hosts::Holds;

/// What the nemesis does at one moment of the schedule.
#[derive(Debug, Clone, Copy)]
enum Action {
    Freeze(usize),
    Thaw(usize),
    Kill(usize),
    Respawn(usize),
    Crash,
    /// A new incarnation with its clock at this rate (%).
    Drift(usize, u32),
    Undrift(usize),
    /// (containers) Drops every packet of the slot's connections to the resource (delay) or to
    /// the lease store (partition), until it is mended.
    Cut(usize, FaultKind),
    Mend(usize, FaultKind),
    /// (Patroni) The lease store's leader cut off from its peers; later let back once another
    /// leads.
    Isolate,
    Rejoin,
}

/// The lanes of the run's timeline: a lane per holder slot.
pub fn lanes(holders: usize) -> Lanes {
    Lanes {
        actors: (0..holders).map(|i| format!("h{i}")).collect(),
        lease: Lane::new("lease26", "lease26 (holdings)"),
        resource: Lane::new("res26", "res26 (writes to the scope under test)"),
        orchestrator: "nemesis".into(),
    }
}

/// Runs the schedule against the lab (a fresh cluster with commit timestamps), records the
/// checks in `rec` (its case must be open) and writes `schedule.txt`, `history.jsonl` and
/// `verdict.md` into `dir`.
pub async fn run(
    lab: &mut Lab,
    rec: &mut Recorder,
    cfg: &ChaosConfig,
    dir: &Path,
) -> anyhow::Result<Found> {
    let ttl = lab.params.ttl;
    let plan = Plan {
        seed: cfg.seed,
        time: cfg.time,
        holders: cfg.holders,
        faults: cfg.faults.clone(),
        ttl,
    };
    let faults = schedule::schedule(&plan);
    let mut listing = format!(
        "seed {} · {} ms · {} holders · mode {} · faults {} · TTL {} ms\n",
        cfg.seed,
        cfg.time.as_millis(),
        cfg.holders,
        cfg.mode,
        cfg.fault_names(),
        ttl.as_millis()
    );
    for f in &faults {
        let _ = writeln!(listing, "{f}");
    }
    std::fs::write(dir.join("schedule.txt"), &listing)
        .with_context(|| format!("failed to write {}", dir.join("schedule.txt").display()))?;
    rec.note(format!(
        "schedule (the same seed replays it; the holders' interleavings inside it may differ): {} faults — {}",
        faults.len(),
        count_by_kind(&faults)
    ));
    for f in &faults {
        rec.note(format!("schedule: {f}"));
    }

    let reinit = lab.heal_lease_store().await?;
    if !reinit.is_empty() {
        rec.note(format!(
            "the lease store was not whole: {} reinitialised from its leader (patronictl reinit)",
            reinit.join(", ")
        ));
    }
    lab.reset().await?;
    lab.resource.setup_scope(SCOPE).await?;
    lab.resource.setup_scope(CONTROL_SCOPE).await?;
    harness::observe::record_part_history(lab.resource.pool())
        .await
        .context("failed to install the record of committed writes")?;
    harness::observe::record_lease_history(lab.lease.pool())
        .await
        .context("failed to install the record of the lease row")?;

    let mut actions: Vec<(Duration, Action)> = Vec::new();
    for f in &faults {
        match f.kind {
            FaultKind::Pause => {
                actions.push((f.at, Action::Freeze(f.target)));
                actions.push((f.at + f.length, Action::Thaw(f.target)));
            }
            FaultKind::Kill => {
                actions.push((f.at, Action::Kill(f.target)));
                actions.push((f.at + f.length, Action::Respawn(f.target)));
            }
            FaultKind::Crash => actions.push((f.at, Action::Crash)),
            FaultKind::Drift => {
                actions.push((f.at, Action::Drift(f.target, f.rate_pct)));
                actions.push((f.at + f.length, Action::Undrift(f.target)));
            }
            FaultKind::Delay | FaultKind::Partition => {
                actions.push((f.at, Action::Cut(f.target, f.kind)));
                actions.push((f.at + f.length, Action::Mend(f.target, f.kind)));
            }
            FaultKind::Failover => {
                actions.push((f.at, Action::Isolate));
                actions.push((f.at + f.length, Action::Rejoin));
            }
        }
    }
    if cfg.faults.contains(&FaultKind::Failover) && !lab.lease_on_patroni() {
        anyhow::bail!(
            "the failover fault needs the lease store on Patroni: --lease-store patroni \
             (or patroni-sync, patroni-strict)"
        );
    }
    if let Some(kind) = cfg.faults.iter().find(|k| k.needs_containers()) {
        if lab.backend() == crate::Backend::Embedded {
            anyhow::bail!(
                "the {kind} fault needs the servers on hosts of their own: --backend containers"
            );
        }
    }
    actions.sort_by_key(|(at, _)| *at);

    if cfg.faults.contains(&FaultKind::Drift) && cfg.faketime.is_none() {
        anyhow::bail!(
            "the drift fault needs libfaketime: {}",
            harness::faketime::INSTALL_HINT
        );
    }
    let started = Instant::now();
    // The Patroni nodes' logs are written from here on (a sweep's cluster serves every seed).
    let wall_started = std::time::SystemTime::now();
    let mut slots: Vec<Slot> = Vec::new();
    let mut events: Vec<(String, Instant, Event)> = Vec::new();
    let mut injected: Vec<Injected> = Vec::new();
    // The failover in progress: since when, and the old leader's name.
    let mut isolated: Option<(f64, String)> = None;
    let outcome = async {
        for slot in 0..cfg.holders {
            let holder = spawn(lab, cfg, slot, 0, None).await?;
            slots.push(Slot {
                holder: Some(holder),
                incarnation: 0,
                frozen_since: None,
                killed_at: None,
                drifted_since: None,
                cut: None,
            });
        }
        let ms = |at: Instant| at.saturating_duration_since(started).as_secs_f64() * 1000.0;
        for (at, action) in &actions {
            // The schedule prescribes when: the one kind of sleep the lab allows.
            harness::wait::prescribed(at.saturating_sub(started.elapsed())).await;
            collect(&mut slots, &mut events);
            match *action {
                Action::Freeze(i) => {
                    if let Some(h) = slots[i].holder.as_mut() {
                        match h.freeze().await {
                            Ok(_) => {
                                slots[i].frozen_since = Some(ms(Instant::now()));
                                rec.step(
                                    Mark::Frozen,
                                    &format!("h{i}"),
                                    "pause",
                                    None,
                                    "SIGSTOP",
                                    None,
                                );
                            }
                            // A holder that ended by itself is a finding, not the end of the run:
                            // it is said, and a new incarnation takes its place.
                            Err(e) => {
                                rec.note(format!("h{i}: {e}; {}", h.stderr().trim()));
                                collect(&mut slots, &mut events);
                                slots[i].incarnation += 1;
                                let holder = spawn(lab, cfg, i, slots[i].incarnation, None).await?;
                                slots[i].holder = Some(holder);
                            }
                        }
                    }
                }
                Action::Thaw(i) => {
                    let slot = &mut slots[i];
                    if let (Some(h), Some(since)) = (slot.holder.as_mut(), slot.frozen_since.take())
                    {
                        let name = h.name().to_owned();
                        h.thaw().await?;
                        injected.push(Injected {
                            kind: FaultKind::Pause,
                            process: name,
                            start_ms: since,
                            end_ms: ms(Instant::now()),
                        });
                        rec.step(
                            Mark::Thawed,
                            &format!("h{i}"),
                            "resume",
                            None,
                            "SIGCONT",
                            None,
                        );
                    }
                }
                Action::Kill(i) => {
                    if let Some(h) = slots[i].holder.as_mut() {
                        h.crash().await;
                        slots[i].killed_at = Some(ms(Instant::now()));
                        rec.step(
                            Mark::Killed,
                            &format!("h{i}"),
                            "kill",
                            None,
                            "SIGKILL",
                            None,
                        );
                    }
                }
                Action::Respawn(i) => {
                    collect(&mut slots, &mut events);
                    if let Some(old) = slots[i].holder.take() {
                        injected.push(Injected {
                            kind: FaultKind::Kill,
                            process: old.name().to_owned(),
                            start_ms: slots[i].killed_at.take().unwrap_or(0.0),
                            end_ms: ms(Instant::now()),
                        });
                    }
                    slots[i].incarnation += 1;
                    let holder = spawn(lab, cfg, i, slots[i].incarnation, None).await?;
                    slots[i].holder = Some(holder);
                }
                Action::Drift(i, rate) => {
                    collect(&mut slots, &mut events);
                    // The incarnation on the real clock ends (stdin closed; an operation it had
                    // in flight has no completion: unknown), one on a slow clock takes over.
                    if let Some(mut old) = slots[i].holder.take() {
                        old.finish(Duration::from_secs(5)).await;
                        collect_one(&mut old, &mut events);
                    }
                    slots[i].incarnation += 1;
                    let holder = spawn(lab, cfg, i, slots[i].incarnation, Some(rate)).await?;
                    slots[i].holder = Some(holder);
                    slots[i].drifted_since = Some(ms(Instant::now()));
                    rec.step(
                        Mark::Info,
                        &format!("h{i}"),
                        "drift",
                        None,
                        format!("clock at {rate} %"),
                        None,
                    );
                }
                Action::Undrift(i) => {
                    collect(&mut slots, &mut events);
                    if let Some(mut old) = slots[i].holder.take() {
                        old.finish(Duration::from_secs(5)).await;
                        collect_one(&mut old, &mut events);
                        injected.push(Injected {
                            kind: FaultKind::Drift,
                            process: old.name().to_owned(),
                            start_ms: slots[i].drifted_since.take().unwrap_or(0.0),
                            end_ms: ms(Instant::now()),
                        });
                    }
                    slots[i].incarnation += 1;
                    let holder = spawn(lab, cfg, i, slots[i].incarnation, None).await?;
                    slots[i].holder = Some(holder);
                }
                Action::Cut(i, kind) => {
                    if let Some(h) = slots[i].holder.as_ref() {
                        let name = h.name().to_owned();
                        if kind == FaultKind::Partition && isolated.is_some() {
                            rec.note(format!(
                                "h{i}: no partition from the lease store while it fails over \
                                 (which of its hosts would be cut is moving)"
                            ));
                            continue;
                        }
                        let rules = match cut(lab, &name, kind).await {
                            Ok(rules) => rules,
                            Err(e) => {
                                rec.note(format!("h{i}: no {kind} this time: {e:#}"));
                                continue;
                            }
                        };
                        if rules.is_empty() {
                            rec.note(format!(
                                "h{i}: {name} had no open connection to cut: no {kind} this time"
                            ));
                            continue;
                        }
                        rec.step(
                            Mark::Info,
                            &format!("h{i}"),
                            kind.as_str(),
                            None,
                            format!("{} connection(s) dropped", rules.len()),
                            None,
                        );
                        slots[i].cut = Some((ms(Instant::now()), rules));
                    }
                }
                Action::Mend(i, kind) => {
                    if let Some((since, rules)) = slots[i].cut.take() {
                        drop(rules);
                        let process = slots[i]
                            .holder
                            .as_ref()
                            .map_or("-".to_owned(), |h| h.name().to_owned());
                        injected.push(Injected {
                            kind,
                            process,
                            start_ms: since,
                            end_ms: ms(Instant::now()),
                        });
                        rec.step(
                            Mark::Info,
                            &format!("h{i}"),
                            &format!("{kind} ends"),
                            None,
                            "packets let through",
                            None,
                        );
                    }
                }
                Action::Isolate => {
                    // A cluster that did not become whole again is a finding, not the end of the
                    // run: said, and this failover is not injected (the fault table counts those
                    // that were).
                    let old = match lab.isolate_lease_leader().await {
                        Ok((old, reinit)) => {
                            if !reinit.is_empty() {
                                rec.note(format!(
                                    "failover: not streaming from the leader within 30 s \
                                     (WAL that went another way than the leader's), {} \
                                     reinitialised from it first (patronictl reinit), as an \
                                     operator would",
                                    reinit.join(", ")
                                ));
                            }
                            old
                        }
                        Err(e) => {
                            rec.note(format!("failover not injected: {e:#}"));
                            continue;
                        }
                    };
                    // From the cut on (the wait for a whole cluster before it is not the fault).
                    let from = ms(Instant::now());
                    rec.step(
                        Mark::Info,
                        "nemesis",
                        "failover",
                        None,
                        format!("leader {old} cut off from its peers"),
                        None,
                    );
                    isolated = Some((from, old));
                }
                Action::Rejoin => {
                    if let Some((since, old)) = isolated.take() {
                        // No election within the deadline is a finding (availability), said;
                        // the old leader is let back all the same.
                        let elected = lab.mend_lease_host(&old).await;
                        let new = match elected {
                            Ok(new) => {
                                rec.note(format!(
                                    "failover: Patroni elected {new}; {old} let back (it rejoins \
                                     as a replica)"
                                ));
                                new
                            }
                            Err(e) => {
                                rec.note(format!("failover: {old} let back, {e:#}"));
                                "no leader".into()
                            }
                        };
                        injected.push(Injected {
                            kind: FaultKind::Failover,
                            process: "-".into(),
                            start_ms: since,
                            end_ms: ms(Instant::now()),
                        });
                        // The orchestrator's steps are drawn on the lease lane.
                        rec.step(
                            Mark::Info,
                            "nemesis",
                            &format!("new leader {new}"),
                            None,
                            format!("{old} let back"),
                            None,
                        );
                    }
                }
                Action::Crash => {
                    let from = ms(Instant::now());
                    lab.crash_and_restart().await?;
                    lab.reopen().await?;
                    injected.push(Injected {
                        kind: FaultKind::Crash,
                        process: "-".into(),
                        start_ms: from,
                        end_ms: ms(Instant::now()),
                    });
                    rec.step(
                        Mark::Restart,
                        "nemesis",
                        "crash",
                        None,
                        "restart-immediate",
                        None,
                    );
                }
            }
        }
        harness::wait::prescribed(cfg.time.saturating_sub(started.elapsed())).await;
        anyhow::Ok(())
    }
    .await;
    // Every path: mend, thaw, drain, end each holder (a frozen one is never left behind).
    for slot in &mut slots {
        slot.cut = None;
    }
    for slot in &mut slots {
        if let Some(h) = slot.holder.as_mut() {
            if slot.frozen_since.is_some() {
                let _ = h.thaw().await;
            }
        }
    }
    collect(&mut slots, &mut events);
    for slot in &mut slots {
        if let Some(h) = slot.holder.as_mut() {
            h.finish(Duration::from_secs(5)).await;
        }
    }
    collect(&mut slots, &mut events);
    // What Patroni did, node by node, beside the history (on every path: a failed failover is
    // read there).
    for (node, log) in lab.lease_logs(wall_started).await {
        let path = dir.join(format!(
            "patroni-{}.log",
            node.rsplit('-').next().unwrap_or(&node)
        ));
        std::fs::write(&path, log)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    outcome?;
    let ended_ms = started.elapsed().as_secs_f64() * 1000.0;

    // The lease store's own record is read from its leader of now — or, with none, from the
    // node the lab last talked to (a replica answers reads).
    if let Err(e) = lab.follow_lease_leader().await {
        rec.note(format!(
            "the lease store's record is read without a leader: {e:#}"
        ));
    }
    let ops = ops_of(&events, started);
    let notes = other_events(&events);
    let parts = harness::observe::part_history(lab.resource.pool()).await?;
    let lease = harness::observe::lease_history(lab.lease.pool()).await?;
    let final_parts = harness::observe::final_parts(lab.resource.pool()).await?;
    let attempts = harness::observe::attempts(lab.resource.pool()).await?;
    let verdict = checker::check(&checker::Observed {
        ops: &ops,
        faults: &injected,
        parts: &parts,
        final_parts: &final_parts,
        lease: &lease,
        attempts: &attempts,
    });
    write_history(dir, &ops, &injected, &parts, &lease)?;
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
            OpKind::Write if op.scope == SCOPE && op.outcome != Outcome::Info => rec.step_at(
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

    // Every violation, marked where the operation that broke it completed.
    let all = verdict
        .i2
        .iter()
        .chain(verdict.i3.values().flatten())
        .chain(verdict.liveness.values().flatten())
        .chain(&verdict.durability);
    for violation in all {
        if let Some((process, at_ms)) = &violation.by {
            let lane = process.split('.').next().unwrap_or(process);
            rec.step_at(
                started + Duration::from_millis(*at_ms),
                Mark::Info,
                lane,
                "✗ violation",
                None,
                violation.what.clone(),
                None,
            );
        }
    }
    record(rec, cfg, &verdict, &notes, ops.len(), ended_ms);
    std::fs::write(dir.join("verdict.md"), verdict_markdown(cfg, &verdict))
        .with_context(|| format!("failed to write {}", dir.join("verdict.md").display()))?;
    Ok(Found {
        verdict,
        schedule: faults,
        injected,
    })
}

fn count_by_kind(faults: &[Fault]) -> String {
    let mut counts: BTreeMap<FaultKind, usize> = BTreeMap::new();
    for f in faults {
        *counts.entry(f.kind).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Starts holder slot `slot`'s `incarnation`, its clock at `rate` % when given (libfaketime).
async fn spawn(
    lab: &Lab,
    cfg: &ChaosConfig,
    slot: usize,
    incarnation: u32,
    rate: Option<u32>,
) -> anyhow::Result<Holder> {
    let name = format!("h{slot}.{incarnation}");
    let mut spec = lab.holder_spec(&name, "", cfg.mode, false);
    spec.flags.scope = SCOPE.into();
    spec.flags.loop_seed = Some(schedule::holder_seed(cfg.seed, slot, incarnation));
    spec.flags.control_scope = Some(CONTROL_SCOPE.into());
    if let (Some(rate), Some(faketime)) = (rate, cfg.faketime.as_ref()) {
        spec.env = faketime.env(&format!("+0 x{:.2}", f64::from(rate) / 100.0));
    }
    Holder::spawn(&spec)
        .await
        .with_context(|| format!("failed to start holder {name}"))
}

/// Drops every packet of `process`'s open connections to the resource (a delay: what it sends
/// meanwhile arrives when the rules go) or to the lease store (a partition).
async fn cut(lab: &Lab, process: &str, kind: FaultKind) -> anyhow::Result<Cut> {
    let db = match kind {
        FaultKind::Delay => fencing::schema::Database::Resource,
        _ => fencing::schema::Database::Lease,
    };
    lab.cut(process, db)
        .await
        .with_context(|| format!("the {kind} fault"))
}

/// Takes every event that arrived from every holder so far.
fn collect(slots: &mut [Slot], events: &mut Vec<(String, Instant, Event)>) {
    for slot in slots.iter_mut() {
        if let Some(h) = slot.holder.as_mut() {
            collect_one(h, events);
        }
    }
}

fn collect_one(h: &mut Holder, events: &mut Vec<(String, Instant, Event)>) {
    let name = h.name().to_owned();
    for (at, event) in h.take_events() {
        if let Ok(event) = event {
            events.push((name.clone(), at, event));
        }
    }
}

/// The operations: each invocation paired with its completion; one without a completion (its
/// holder was killed, or the run ended while it ran) has an unknown outcome.
fn ops_of(events: &[(String, Instant, Event)], started: Instant) -> Vec<Op> {
    let ms = |at: &Instant| at.saturating_duration_since(started).as_secs_f64() * 1000.0;
    let mut ops: Vec<Op> = Vec::new();
    let mut open: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for (process, at, event) in events {
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

/// The holders' other reports, counted: deadlines found passed, errors.
fn other_events(events: &[(String, Instant, Event)]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for (_, _, e) in events {
        let key = match e {
            Event::DeadlinePassed { .. } => "local deadline passed at the check (no write)",
            Event::Error { .. } => "holder errors",
            _ => continue,
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// A holding's renewals: its row versions' database times, and its ok renewals (process, op id).
type Renewals<'a> = (Vec<i64>, Vec<(&'a str, u64)>);

/// The history, one JSON object per line: the faults as carried out, then every operation with
/// its invocation and completion on the lab's monotonic clock (ms from the start) and, where the
/// database recorded it, on the database clock (µs since the epoch): a write's commit
/// (`db_commit_us`, from the record of committed versions), a grant's, a renewal's or a
/// release's row version (`db_at_us`). A holding's renewals are matched to its row versions in
/// order, and only where their numbers agree (a renewal of unknown outcome that took effect
/// would shift them: then none of that holding's renewals gets a database time).
fn write_history(
    dir: &Path,
    ops: &[Op],
    faults: &[Injected],
    parts: &[harness::observe::PartVersion],
    lease: &[harness::observe::LeaseVersion],
) -> anyhow::Result<()> {
    let mut text = String::new();
    for f in faults {
        let mut line = serde_json::to_value(f)?;
        line["type"] = "fault".into();
        text.push_str(&line.to_string());
        text.push('\n');
    }
    // Per token: the row versions its holder wrote after the grant — renewals (an expiry) and
    // the release (none) — and the ok renewals, in the order they completed.
    let mut renewed: BTreeMap<i64, Renewals> = BTreeMap::new();
    for l in lease {
        let first = lease.iter().position(|g| g.token == l.token);
        if l.expires_us.is_some() && first.is_some_and(|i| !std::ptr::eq(&lease[i], l)) {
            renewed.entry(l.token).or_default().0.push(l.at_us);
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
            .entry(op.token)
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
        let mut line = serde_json::to_value(op)?;
        line["type"] = "op".into();
        match op.f {
            OpKind::Renew if op.outcome == Outcome::Ok => {
                if let Some(at) = renew_at.get(&(op.process.as_str(), op.id)) {
                    line["db_at_us"] = (*at).into();
                }
            }
            OpKind::Release if op.outcome == Outcome::Ok => {
                if let Some(l) = lease
                    .iter()
                    .find(|l| l.token == op.token && l.expires_us.is_none())
                {
                    line["db_at_us"] = l.at_us.into();
                }
            }
            OpKind::Write => {
                if let Some(p) = parts.iter().find(|p| p.content == op.content()) {
                    line["db_commit_us"] = p.commit_us.unwrap_or(p.at_us).into();
                }
            }
            OpKind::Acquire if op.outcome == Outcome::Ok => {
                if let Some(l) = lease.iter().find(|l| l.token == op.token) {
                    line["db_at_us"] = l.at_us.into();
                }
            }
            _ => {}
        }
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let path = dir.join("history.jsonl");
    std::fs::write(&path, text).with_context(|| format!("failed to write {}", path.display()))
}

/// At most this many violations of one kind are printed; verdict.md has them all.
const SHOWN: usize = 5;

fn record(
    rec: &mut Recorder,
    cfg: &ChaosConfig,
    v: &Verdict,
    notes: &BTreeMap<&'static str, usize>,
    ops: usize,
    ended_ms: f64,
) {
    let writes = |scope: &str| v.i3.get(scope).map_or(0, Vec::len);
    rec.note(format!(
        "{ops} operations in {:.1} s; {} holdings ({} overlapping by the database clock — I1 is efficiency only); writes of unknown outcome: {} applied, {} not",
        ended_ms / 1000.0,
        v.holdings,
        v.overlapping_holdings,
        v.info_writes.0,
        v.info_writes.1
    ));
    for (what, n) in notes {
        rec.note(format!("{what}: {n}"));
    }
    for row in fault_table(v).lines() {
        rec.note(row.to_owned());
    }
    let show = |rec: &mut Recorder, found: &[checker::Violation]| {
        for violation in found.iter().take(SHOWN) {
            rec.note(format!(
                "violation: {} — {}",
                violation.what,
                violation.excerpt.join(" ⟶ ")
            ));
        }
        if found.len() > SHOWN {
            rec.note(format!("… and {} more (verdict.md)", found.len() - SHOWN));
        }
    };
    show(rec, &v.i2);
    rec.check_that(
        "I2: no token was granted twice, and grants follow real-time order",
        v.i2.is_empty(),
        format_args!("{} violations", v.i2.len()),
    );
    let under_test = v.i3.get(SCOPE).map(Vec::as_slice).unwrap_or_default();
    show(rec, under_test);
    rec.check_that(
        format!(
            "I3 ({} at scope {SCOPE}): in commit order, no accepted write has a smaller token than one committed before it",
            cfg.mode
        ),
        under_test.is_empty(),
        format_args!(
            "{} violations; {} stale writes committed",
            writes(SCOPE),
            v.stale.get(SCOPE).copied().unwrap_or(0)
        ),
    );
    show(rec, &v.durability);
    rec.check_that(
        "durability: every write acknowledged as accepted is committed, and each part's final content is its last commit",
        v.durability.is_empty(),
        format_args!("{} violations", v.durability.len()),
    );
    let turned_away = v.liveness.get(SCOPE).map(Vec::as_slice).unwrap_or_default();
    show(rec, turned_away);
    rec.check_that(
        format!(
            "the fence turned no current holding away ({} at scope {SCOPE}): every rejected write had a greater token granted before it",
            cfg.mode
        ),
        turned_away.is_empty(),
        format_args!("{} violations", turned_away.len()),
    );
    let control =
        v.i3.get(CONTROL_SCOPE)
            .map(Vec::as_slice)
            .unwrap_or_default();
    let exposed = rec.expose(
        format!("the unfenced control scope ({CONTROL_SCOPE}) shows at least one I3 violation under the same schedule"),
        !control.is_empty(),
        format_args!(
            "{} violations, {} stale writes committed{}",
            control.len(),
            v.stale.get(CONTROL_SCOPE).copied().unwrap_or(0),
            if control.is_empty() {
                " — the schedule was too gentle to prove anything: run longer (--time) or with more holders (--holders)"
            } else {
                ""
            }
        ),
    );
    if exposed {
        if let Some(first) = control.first() {
            rec.note(format!(
                "control: {} — {}",
                first.what,
                first.excerpt.join(" ⟶ ")
            ));
        }
    }
}

/// Per fault kind: injected, stale writes committed (scope under test / control), writes the
/// fence rejected.
fn fault_table(v: &Verdict) -> String {
    let mut text = format!(
        "| fault | injected | stale writes committed ({SCOPE}) | stale writes committed ({CONTROL_SCOPE}, unfenced) | writes rejected ({SCOPE}) |\n|---|---|---|---|---|\n"
    );
    for (kind, row) in &v.by_fault {
        let get = |m: &BTreeMap<String, usize>, s: &str| m.get(s).copied().unwrap_or(0);
        let _ = writeln!(
            text,
            "| {kind} | {} | {} | {} | {} |",
            if kind == "none" {
                "—".to_owned()
            } else {
                row.injected.to_string()
            },
            get(&row.stale_accepted, SCOPE),
            get(&row.stale_accepted, CONTROL_SCOPE),
            get(&row.rejected, SCOPE),
        );
    }
    text
}

fn verdict_markdown(cfg: &ChaosConfig, v: &Verdict) -> String {
    let mut text = format!(
        "# Chaos verdict — seed {}, {} ms, {} holders, mode {}\n\n",
        cfg.seed,
        cfg.time.as_millis(),
        cfg.holders,
        cfg.mode
    );
    text.push_str(&fault_table(v));
    let _ = writeln!(
        text,
        "\n{} operations · {} holdings ({} overlapping by the database clock) · writes of unknown outcome: {} applied, {} not\n",
        v.ops, v.holdings, v.overlapping_holdings, v.info_writes.0, v.info_writes.1
    );
    let mut section = |title: &str, found: &[checker::Violation]| {
        let _ = writeln!(text, "## {title}: {} violation(s)\n", found.len());
        for violation in found {
            let _ = writeln!(text, "- {}", violation.what);
            for line in &violation.excerpt {
                let _ = writeln!(text, "  - {line}");
            }
        }
        text.push('\n');
    };
    section("I2", &v.i2);
    for (scope, found) in &v.i3 {
        section(&format!("I3 at {scope}"), found);
    }
    section("Durability", &v.durability);
    for (scope, found) in &v.liveness {
        section(
            &format!("Rejections without a greater token at {scope}"),
            found,
        );
    }
    text
}
