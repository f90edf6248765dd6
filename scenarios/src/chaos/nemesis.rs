//! The nemesis of a chaos run: it starts the looping holders and carries the schedule's faults
//! out through the harness's verbs — `Holder::freeze` / `thaw` (pause), `Holder::crash` and a new
//! incarnation (kill), an incarnation on a slow clock (drift), `Testbed::crash_and_restart` (crash),
//! `Testbed::cut` (a delay or a partition, on containers) and `Testbed::isolate_lease_leader` /
//! `mend_lease_host` (a Patroni failover) — recording each fault as it was carried out
//! ([`Injected`]) and drawing it on the timeline. A fault that could not be carried out this time
//! is said in a note, never silently skipped.
//!
//! It must not choose a fault (the [`schedule`](super::schedule) does, from the seed alone), wait
//! for anything but the moment the schedule prescribes, nor read the history it collects.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use harness::evidence::{Mark, Recorder};
use harness::holder::Holder;

use super::checker::Injected;
use super::history::Events;
use super::schedule::{self, Fault, FaultKind};
use super::ChaosConfig;
use crate::Testbed;

/// What the nemesis does at one moment of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
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

/// The schedule's faults as the nemesis's actions, each fault's start and (but for a crash) its
/// end, in time order (a fault's start before another's start or end at the same moment keeps
/// the schedule's order).
pub fn actions(faults: &[Fault]) -> Vec<(Duration, Action)> {
    let mut actions: Vec<(Duration, Action)> = Vec::new();
    for f in faults {
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
    actions.sort_by_key(|(at, _)| *at);
    actions
}

/// The iptables rules of a delay or partition in force; dropping them lifts them.
type Cut = harness::docker::Holds;

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

/// The holders of one run and the faults carried out against them.
pub struct Nemesis<'c> {
    cfg: &'c ChaosConfig,
    /// The start of the run: every time in the history is in ms from here.
    started: Instant,
    slots: Vec<Slot>,
    events: Events,
    injected: Vec<Injected>,
    /// The failover in progress: since when, and the old leader's name.
    isolated: Option<(f64, String)>,
}

impl<'c> Nemesis<'c> {
    /// A nemesis with no holder yet; its clock starts at `started`.
    pub fn new(cfg: &'c ChaosConfig, started: Instant) -> Self {
        Nemesis {
            cfg,
            started,
            slots: Vec::new(),
            events: Events::default(),
            injected: Vec::new(),
            isolated: None,
        }
    }

    /// Starts a holder in each slot, carries out `actions` each at its moment, then lets the
    /// rest of the run's time pass. Returns at the run's end, or at the first fault the harness
    /// could not carry out (a holder that would not start or thaw, a cluster that would not
    /// restart); the holders are left running either way, for [`Nemesis::end`].
    pub async fn carry_out(
        &mut self,
        bed: &mut Testbed,
        rec: &mut Recorder,
        actions: &[(Duration, Action)],
    ) -> anyhow::Result<()> {
        for slot in 0..self.cfg.holders {
            let holder = spawn(bed, self.cfg, slot, 0, None).await?;
            self.slots.push(Slot {
                holder: Some(holder),
                incarnation: 0,
                frozen_since: None,
                killed_at: None,
                drifted_since: None,
                cut: None,
            });
        }
        for (at, action) in actions {
            // The schedule prescribes when: the one kind of sleep the lab allows.
            harness::wait::prescribed(at.saturating_sub(self.started.elapsed())).await;
            self.collect();
            self.apply(bed, rec, *action).await?;
        }
        harness::wait::prescribed(self.cfg.time.saturating_sub(self.started.elapsed())).await;
        Ok(())
    }

    /// Ends the run on every path: mends every cut, thaws every frozen holder and ends each one
    /// (stdin closed, killed if it has not exited within 5 s). Returns once no holder is left,
    /// with every event they reported and the faults as carried out.
    pub async fn end(mut self) -> (Events, Vec<Injected>) {
        for slot in &mut self.slots {
            slot.cut = None;
        }
        for slot in &mut self.slots {
            if let Some(h) = slot.holder.as_mut() {
                if slot.frozen_since.is_some() {
                    let _ = h.thaw().await;
                }
            }
        }
        self.collect();
        for slot in &mut self.slots {
            if let Some(h) = slot.holder.as_mut() {
                h.finish(Duration::from_secs(5)).await;
            }
        }
        self.collect();
        (self.events, self.injected)
    }

    /// Now, in ms from the start of the run.
    fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    /// Takes every event that arrived from every holder so far.
    fn collect(&mut self) {
        for slot in &mut self.slots {
            if let Some(h) = slot.holder.as_mut() {
                self.events.take_from(h);
            }
        }
    }

    /// Slot `i`'s next incarnation, its clock at `rate` % when given.
    async fn respawn(&mut self, bed: &Testbed, i: usize, rate: Option<u32>) -> anyhow::Result<()> {
        self.slots[i].incarnation += 1;
        let holder = spawn(bed, self.cfg, i, self.slots[i].incarnation, rate).await?;
        self.slots[i].holder = Some(holder);
        Ok(())
    }

    /// Ends slot `i`'s incarnation as a looping holder ends (stdin closed; an operation it had
    /// in flight has no completion: unknown) and collects what it reported; its name.
    async fn retire(&mut self, i: usize) -> Option<String> {
        let mut old = self.slots[i].holder.take()?;
        old.finish(Duration::from_secs(5)).await;
        self.events.take_from(&mut old);
        Some(old.name().to_owned())
    }

    /// Freezes slot `i`'s holder (SIGSTOP); one that ended by itself is said and replaced.
    async fn freeze(
        &mut self,
        bed: &mut Testbed,
        rec: &mut Recorder,
        i: usize,
    ) -> anyhow::Result<()> {
        let Some(h) = self.slots[i].holder.as_mut() else {
            return Ok(());
        };
        match h.freeze().await {
            Ok(_) => {
                self.slots[i].frozen_since = Some(self.now_ms());
                rec.step(
                    Mark::Frozen,
                    &format!("h{i}"),
                    "pause",
                    None,
                    "SIGSTOP",
                    None,
                );
            }
            // A holder that ended by itself is a finding, not the end of the run: it is
            // said, and a new incarnation takes its place.
            Err(e) => {
                rec.note(format!("h{i}: {e}; {}", h.stderr().trim()));
                self.collect();
                self.respawn(bed, i, None).await?;
            }
        }
        Ok(())
    }

    /// Thaws slot `i`'s frozen holder (SIGCONT): the pause, injected from its freeze to now.
    async fn thaw(&mut self, rec: &mut Recorder, i: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[i];
        if let (Some(h), Some(since)) = (slot.holder.as_mut(), slot.frozen_since.take()) {
            let name = h.name().to_owned();
            h.thaw().await?;
            self.injected.push(Injected {
                kind: FaultKind::Pause,
                process: name,
                start_ms: since,
                end_ms: self.now_ms(),
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
        Ok(())
    }

    /// Lets slot `i`'s packets through again: the cut, injected from its start to now.
    fn mend(&mut self, rec: &mut Recorder, i: usize, kind: FaultKind) {
        if let Some((since, rules)) = self.slots[i].cut.take() {
            drop(rules);
            let process = self.slots[i]
                .holder
                .as_ref()
                .map_or("-".to_owned(), |h| h.name().to_owned());
            self.injected.push(Injected {
                kind,
                process,
                start_ms: since,
                end_ms: self.now_ms(),
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

    async fn apply(
        &mut self,
        bed: &mut Testbed,
        rec: &mut Recorder,
        action: Action,
    ) -> anyhow::Result<()> {
        match action {
            Action::Freeze(i) => self.freeze(bed, rec, i).await?,
            Action::Thaw(i) => self.thaw(rec, i).await?,
            Action::Kill(i) => {
                if let Some(h) = self.slots[i].holder.as_mut() {
                    h.crash().await;
                    self.slots[i].killed_at = Some(self.now_ms());
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
                self.collect();
                if let Some(old) = self.slots[i].holder.take() {
                    self.injected.push(Injected {
                        kind: FaultKind::Kill,
                        process: old.name().to_owned(),
                        start_ms: self.slots[i].killed_at.take().unwrap_or(0.0),
                        end_ms: self.now_ms(),
                    });
                }
                self.respawn(bed, i, None).await?;
            }
            Action::Drift(i, rate) => {
                self.collect();
                // The incarnation on the real clock ends, one on a slow clock takes over.
                self.retire(i).await;
                self.respawn(bed, i, Some(rate)).await?;
                self.slots[i].drifted_since = Some(self.now_ms());
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
                self.collect();
                if let Some(process) = self.retire(i).await {
                    self.injected.push(Injected {
                        kind: FaultKind::Drift,
                        process,
                        start_ms: self.slots[i].drifted_since.take().unwrap_or(0.0),
                        end_ms: self.now_ms(),
                    });
                }
                self.respawn(bed, i, None).await?;
            }
            Action::Cut(i, kind) => self.cut(bed, rec, i, kind).await,
            Action::Mend(i, kind) => self.mend(rec, i, kind),
            Action::Isolate => self.isolate(bed, rec).await,
            Action::Rejoin => self.rejoin(bed, rec).await,
            Action::Crash => {
                let from = self.now_ms();
                bed.crash_and_restart().await?;
                bed.reopen().await?;
                self.injected.push(Injected {
                    kind: FaultKind::Crash,
                    process: "-".into(),
                    start_ms: from,
                    end_ms: self.now_ms(),
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
        Ok(())
    }

    /// (containers) Drops every packet of slot `i`'s open connections to the resource (a delay:
    /// what it sends meanwhile arrives when the rules go) or to the lease store (a partition).
    /// Not this time — said in a note — when the lease store is failing over, when the rules
    /// could not be put in place, or when the holder had no open connection.
    async fn cut(&mut self, bed: &Testbed, rec: &mut Recorder, i: usize, kind: FaultKind) {
        let Some(h) = self.slots[i].holder.as_ref() else {
            return;
        };
        let (name, pid) = (h.name().to_owned(), h.pid());
        if kind == FaultKind::Partition && self.isolated.is_some() {
            rec.note(format!(
                "h{i}: no partition from the lease store while it fails over \
                 (which of its hosts would be cut is moving)"
            ));
            return;
        }
        let db = match kind {
            FaultKind::Delay => fencing::schema::Database::Resource,
            _ => fencing::schema::Database::Lease,
        };
        let rules = match bed
            .cut(&name, pid, db)
            .await
            .with_context(|| format!("the {kind} fault"))
        {
            Ok(rules) => rules,
            Err(e) => {
                rec.note(format!("h{i}: no {kind} this time: {e:#}"));
                return;
            }
        };
        if rules.is_empty() {
            rec.note(format!(
                "h{i}: {name} had no open connection to cut: no {kind} this time"
            ));
            return;
        }
        rec.step(
            Mark::Info,
            &format!("h{i}"),
            kind.as_str(),
            None,
            format!("{} connection(s) dropped", rules.len()),
            None,
        );
        self.slots[i].cut = Some((self.now_ms(), rules));
    }

    /// (Patroni) Cuts the lease store's leader off from its peers. A cluster that did not
    /// become whole again first is a finding, not the end of the run: said, and this failover
    /// is not injected (the fault table counts those that were).
    async fn isolate(&mut self, bed: &mut Testbed, rec: &mut Recorder) {
        let old = match bed.isolate_lease_leader().await {
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
                return;
            }
        };
        // From the cut on (the wait for a whole cluster before it is not the fault).
        let from = self.now_ms();
        rec.step(
            Mark::Info,
            "nemesis",
            "failover",
            None,
            format!("leader {old} cut off from its peers"),
            None,
        );
        self.isolated = Some((from, old));
    }

    /// (Patroni) Lets the isolated old leader back once another leads. No election within the
    /// deadline is a finding (availability), said; the old leader is let back all the same.
    async fn rejoin(&mut self, bed: &mut Testbed, rec: &mut Recorder) {
        let Some((since, old)) = self.isolated.take() else {
            return;
        };
        let new = match bed.mend_lease_host(&old).await {
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
        self.injected.push(Injected {
            kind: FaultKind::Failover,
            process: "-".into(),
            start_ms: since,
            end_ms: self.now_ms(),
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

/// Starts holder slot `slot`'s `incarnation`, its clock at `rate` % when given (libfaketime).
async fn spawn(
    bed: &Testbed,
    cfg: &ChaosConfig,
    slot: usize,
    incarnation: u32,
    rate: Option<u32>,
) -> anyhow::Result<Holder> {
    let name = format!("h{slot}.{incarnation}");
    let mut spec = bed.holder_spec(&name, "", cfg.mode, false);
    let k = slot % cfg.leases.max(1);
    spec.flags.lease = super::lease_of(k, cfg.leases);
    spec.flags.scope = super::scope_of(k, cfg.leases);
    spec.flags.loop_seed = Some(schedule::holder_seed(cfg.seed, slot, incarnation));
    spec.flags.control_scope = Some(super::control_of(k, cfg.leases));
    if let (Some(rate), Some(faketime)) = (rate, cfg.faketime.as_ref()) {
        spec.env = faketime.env(&format!("+0 x{:.2}", f64::from(rate) / 100.0));
    }
    Holder::spawn(&spec)
        .await
        .with_context(|| format!("failed to start holder {name}"))
}
