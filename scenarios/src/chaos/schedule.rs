//! The nemesis's schedule: which fault, when, against whom, for how long — drawn from the seed
//! alone (ChaCha8, value-stable), so that the same seed, duration, holder count, fault set and
//! TTL give the same schedule on every run. What the holders do in between is theirs: the
//! interleavings inside a replayed schedule may differ.

use std::fmt;
use std::time::Duration;

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// A kind of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP to a holder for a while, then SIGCONT: a GC pause, a VM stall.
    Pause,
    /// SIGKILL to a holder; a new incarnation of it starts after a while.
    Kill,
    /// The cluster stopped immediately (no checkpoint) and started again: WAL recovery.
    Crash,
    /// A holder's clock runs slow (libfaketime): a new incarnation of it starts with the clock
    /// at `rate_pct` % of real time, and is replaced by a normal one after a while.
    Drift,
    /// (containers) Every packet of a holder's connections to the resource's host dropped for a
    /// while, then let through: a write sent meanwhile reaches the resource late.
    Delay,
    /// (containers) Every packet of a holder's connections to the lease store's host dropped for
    /// a while: its renewals go unanswered while its resource connections are untouched.
    Partition,
    /// (Patroni) The lease store's leader cut off from its peers — not from its clients — for
    /// [`FAILOVER_HOLD`]: Patroni elects another leader, the old one demotes itself, and is let
    /// back as a replica.
    Failover,
}

/// How long a failover keeps the old leader cut off: longer than Patroni's `ttl` (10 s, the lab's
/// setting) plus an election, so that another node leads before it is let back.
pub const FAILOVER_HOLD: Duration = Duration::from_secs(15);
/// After a failover's end, the time left for the old leader to rejoin as a replica before the
/// next failover (which also waits, polled, until the cluster is whole).
pub const FAILOVER_REJOIN: Duration = Duration::from_secs(10);

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::Crash,
        FaultKind::Drift,
        FaultKind::Delay,
        FaultKind::Partition,
        FaultKind::Failover,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Kill => "kill",
            FaultKind::Crash => "crash",
            FaultKind::Drift => "drift",
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::Failover => "failover",
        }
    }

    /// Whether it needs the servers on hosts of their own (`--backend containers`): a network
    /// between the holders and a server to cut.
    pub fn needs_containers(self) -> bool {
        matches!(
            self,
            FaultKind::Delay | FaultKind::Partition | FaultKind::Failover
        )
    }

    /// Whether it needs the lease store on Patroni (`--lease-store patroni…`).
    pub fn needs_patroni(self) -> bool {
        self == FaultKind::Failover
    }

    /// Whether it acts on the whole cluster rather than on one holder.
    fn cluster_wide(self) -> bool {
        matches!(self, FaultKind::Crash | FaultKind::Failover)
    }

    /// The faults a run injects when none are named: every one the backend can carry out — on
    /// Patroni, failover instead of crash (Patroni replaces a lost leader, it does not restart
    /// it).
    pub fn defaults(containers: bool, patroni: bool) -> Vec<FaultKind> {
        FaultKind::defaults_on(containers, patroni, false)
    }

    /// [`FaultKind::defaults`] where `service_to_cut`: the lease store is a lock service whose
    /// holders' connections a partition can hold (the servers themselves embedded).
    pub fn defaults_on(containers: bool, patroni: bool, service_to_cut: bool) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| {
                containers
                    || !k.needs_containers()
                    || (service_to_cut && *k == FaultKind::Partition)
            })
            .filter(|k| patroni || !k.needs_patroni())
            .filter(|k| !(patroni && *k == FaultKind::Crash))
            .collect()
    }

    /// How often it is drawn, relative to the others.
    fn weight(self) -> u32 {
        match self {
            FaultKind::Pause => 10,
            FaultKind::Kill => 2,
            FaultKind::Crash => 1,
            FaultKind::Drift => 2,
            FaultKind::Delay => 4,
            FaultKind::Partition => 3,
            FaultKind::Failover => 2,
        }
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown fault {s:?}: the faults are pause, kill, crash, drift, with \
                     --backend containers delay and partition, with --lease-store patroni \
                     failover"
                )
            })
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// From the start of the run.
    pub at: Duration,
    pub kind: FaultKind,
    /// The holder slot (pause, kill); 0 and meaningless for a crash or a failover.
    pub target: usize,
    /// How long the holder stays frozen (pause), dead before it is started again (kill), or on
    /// its slow clock (drift), or the leader cut off (failover); zero for a crash (the restart is
    /// as fast as the server is).
    pub length: Duration,
    /// (drift) The holder's clock rate, in % of real time; 100 otherwise.
    pub rate_pct: u32,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at.as_millis();
        match self.kind {
            FaultKind::Crash => write!(
                f,
                "{at:>6} ms  crash   the cluster (immediate stop, restart)"
            ),
            FaultKind::Pause => write!(
                f,
                "{at:>6} ms  pause   h{} for {} ms",
                self.target,
                self.length.as_millis()
            ),
            FaultKind::Kill => write!(
                f,
                "{at:>6} ms  kill    h{}, restarted after {} ms",
                self.target,
                self.length.as_millis()
            ),
            FaultKind::Drift => write!(
                f,
                "{at:>6} ms  drift   h{}'s clock at {} % for {} ms (a new incarnation)",
                self.target,
                self.rate_pct,
                self.length.as_millis()
            ),
            FaultKind::Delay => write!(
                f,
                "{at:>6} ms  delay   h{}'s packets to the resource dropped for {} ms, then let through",
                self.target,
                self.length.as_millis()
            ),
            FaultKind::Partition => write!(
                f,
                "{at:>6} ms  partition h{} cut off from the lease store for {} ms",
                self.target,
                self.length.as_millis()
            ),
            FaultKind::Failover => write!(
                f,
                "{at:>6} ms  failover the lease store's leader cut off from its peers for {} ms",
                self.length.as_millis()
            ),
        }
    }
}

/// The schedule's inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub seed: u64,
    pub time: Duration,
    pub holders: usize,
    pub faults: Vec<FaultKind>,
    pub ttl: Duration,
}

/// The seed of holder `slot`'s `incarnation`: its own choices, replayed with the run's seed.
pub fn holder_seed(seed: u64, slot: usize, incarnation: u32) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    rng.set_stream(((slot as u64) << 32) | u64::from(incarnation));
    rng.random()
}

/// The faults, in time order. Between two faults 100–700 ms pass; a pause lasts 0.1–2.5 TTL
/// (shorter and longer than the lease), a killed holder stays dead 0–1 TTL, a drifted clock runs
/// at 30–70 % for 1–3 TTL; a delay holds a holder's packets to the resource 0.1–2.5 TTL, a
/// partition cuts it from the lease store 0.5–3 TTL; a failover cuts the leader off for
/// [`FAILOVER_HOLD`]. A holder is never the target of a fault while the last one against it still
/// runs; a crash leaves 1 s for the restart before the next fault; a failover is drawn only when
/// it ends before the run's last second, and no other failover or crash comes before
/// [`FAILOVER_REJOIN`] after its end. The last second of the run has no fault.
pub fn schedule(plan: &Plan) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
    let mut faults = Vec::new();
    if plan.faults.is_empty() || plan.holders == 0 {
        return faults;
    }
    let total: u32 = plan.faults.iter().map(|k| k.weight()).sum();
    let ttl = plan.ttl.as_millis() as u64;
    let mut busy_until = vec![Duration::ZERO; plan.holders];
    let mut cluster_busy_until = Duration::ZERO;
    let mut at = Duration::from_millis(rng.random_range(300..=800));
    let end = plan.time.saturating_sub(Duration::from_secs(1));
    while at < end {
        let mut pick = rng.random_range(0..total);
        let kind = *plan
            .faults
            .iter()
            .find(|k| {
                let hit = pick < k.weight();
                pick = pick.saturating_sub(k.weight());
                hit
            })
            .expect("the weights add up to the total");
        let target = rng.random_range(0..plan.holders);
        let length = match kind {
            FaultKind::Pause => Duration::from_millis(rng.random_range(ttl / 10..=ttl * 5 / 2)),
            FaultKind::Kill => Duration::from_millis(rng.random_range(0..=ttl)),
            FaultKind::Crash => Duration::ZERO,
            FaultKind::Drift => Duration::from_millis(rng.random_range(ttl..=ttl * 3)),
            FaultKind::Delay => Duration::from_millis(rng.random_range(ttl / 10..=ttl * 5 / 2)),
            FaultKind::Partition => Duration::from_millis(rng.random_range(ttl / 2..=ttl * 3)),
            FaultKind::Failover => FAILOVER_HOLD,
        };
        let rate_pct = if kind == FaultKind::Drift {
            rng.random_range(30..=70)
        } else {
            100
        };
        let gap = Duration::from_millis(rng.random_range(100..=700));
        let free = match kind {
            FaultKind::Crash => cluster_busy_until <= at,
            FaultKind::Failover => cluster_busy_until <= at && at + length < end,
            _ => busy_until[target] <= at,
        };
        if free {
            match kind {
                FaultKind::Crash => {}
                FaultKind::Failover => cluster_busy_until = at + length + FAILOVER_REJOIN,
                _ => busy_until[target] = at + length + Duration::from_millis(50),
            }
            faults.push(Fault {
                at,
                kind,
                target: if kind.cluster_wide() { 0 } else { target },
                length,
                rate_pct,
            });
        }
        at += gap
            + if kind == FaultKind::Crash && free {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            };
    }
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64) -> Plan {
        Plan {
            seed,
            time: Duration::from_secs(30),
            holders: 4,
            faults: FaultKind::defaults(false, false),
            ttl: Duration::from_millis(1500),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        assert_eq!(schedule(&plan(1)), schedule(&plan(1)));
        assert_ne!(schedule(&plan(1)), schedule(&plan(2)));
        assert_eq!(holder_seed(1, 2, 0), holder_seed(1, 2, 0));
        assert_ne!(holder_seed(1, 2, 0), holder_seed(1, 2, 1));
    }

    #[test]
    fn faults_stay_inside_the_run_and_never_overlap_on_one_holder() {
        for seed in 0..50 {
            let p = plan(seed);
            let faults = schedule(&p);
            assert!(!faults.is_empty());
            assert!(faults.windows(2).all(|w| w[0].at < w[1].at));
            assert!(faults
                .iter()
                .all(|f| f.at < p.time - Duration::from_secs(1)));
            for f in &faults {
                let later = faults.iter().filter(|g| {
                    !g.kind.cluster_wide()
                        && !f.kind.cluster_wide()
                        && g.target == f.target
                        && g.at > f.at
                        && g.at < f.at + f.length
                });
                assert_eq!(later.count(), 0, "seed {seed}: {f} overlaps");
            }
            // Pauses both shorter and longer than the TTL are drawn.
            let pauses: Vec<_> = faults
                .iter()
                .filter(|f| f.kind == FaultKind::Pause)
                .collect();
            assert!(pauses
                .iter()
                .all(|f| f.length >= p.ttl / 10 && f.length <= p.ttl * 5 / 2));
        }
        let all = (0..50).flat_map(|s| schedule(&plan(s))).collect::<Vec<_>>();
        assert!(all
            .iter()
            .any(|f| f.kind == FaultKind::Pause && f.length < Duration::from_millis(1500)));
        assert!(all
            .iter()
            .any(|f| f.kind == FaultKind::Pause && f.length > Duration::from_millis(1500)));
    }

    #[test]
    fn only_the_chosen_faults_are_drawn() {
        let p = Plan {
            faults: vec![FaultKind::Pause],
            ..plan(3)
        };
        assert!(schedule(&p).iter().all(|f| f.kind == FaultKind::Pause));
    }

    #[test]
    fn failovers_end_inside_the_run_and_leave_time_to_rejoin() {
        let mut seen = 0;
        for seed in 0..50 {
            let p = Plan {
                time: Duration::from_secs(60),
                faults: FaultKind::defaults(true, true),
                ..plan(seed)
            };
            assert!(!p.faults.contains(&FaultKind::Crash));
            let faults = schedule(&p);
            let failovers: Vec<_> = faults
                .iter()
                .filter(|f| f.kind == FaultKind::Failover)
                .collect();
            seen += failovers.len();
            for f in &failovers {
                assert_eq!(f.length, FAILOVER_HOLD);
                assert!(
                    f.at + f.length < p.time - Duration::from_secs(1),
                    "seed {seed}: {f}"
                );
            }
            for w in failovers.windows(2) {
                assert!(
                    w[1].at >= w[0].at + w[0].length + FAILOVER_REJOIN,
                    "seed {seed}: {} then {}",
                    w[0],
                    w[1]
                );
            }
        }
        assert!(seen > 50, "failovers are drawn: {seen} in 50 schedules");
        // Without Patroni, none.
        assert!(!FaultKind::defaults(true, false).contains(&FaultKind::Failover));
        assert!(FaultKind::defaults(false, false).contains(&FaultKind::Crash));
    }
}
