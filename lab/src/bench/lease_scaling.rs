//! `lab bench --leases L,… --holders H,… --renew-ms R`: what a lease costs as locks and holders
//! grow — the shape of ShedLock, db-scheduler and Quartz clusters, where dozens of nodes renew
//! hundreds or thousands of locks. For each lease store named (`--lease-store`: the lease table,
//! and the lock services of the build), each lease count L and holder count H: H holders (tasks,
//! each with its own client of the store — its own connection, or its own session) acquire L/H
//! leases each with a TTL of 3 R, then renew every one of them every R ms, spread evenly over the
//! period, for `--duration-ms`. Measured per cell:
//!
//! - renewals/s sustained, against the offered L·1000/R;
//! - renew latency p50 / p99 (request to answer), and how late the requests left against their
//!   schedule (p99): a holder that cannot keep up falls behind;
//! - the share of renewals that came back `false` — the lease had expired by the store's own
//!   clock before the renewal arrived: the holder lost it without being paused;
//! - the lease store's CPU over the window (its processes' user + system time, from `/proc`: the
//!   embedded cluster's postmaster and backends, or the service container's processes), and the
//!   clients' (the lab's own process for its Rust clients; a library's holder processes,
//!   [`super::library_clients`]) — so that a cell that did not keep up says which side limited
//!   it ([`Cell::limit`]).
//!
//! The renewals are measured in a window that opens once every holder has taken all its leases
//! (at the earliest one period after the start) and lasts `--duration-ms`: how fast a store
//! takes locks is the acquire column, not a share of the renewal rate. Until it opens, the
//! holders renew what they hold without measuring.
//!
//! The knee, per store and holder count, is the first lease count at which renewals fall below
//! 95 % of the offered rate, or 1 % come back expired, or p99 exceeds the period. A renewal sleeps
//! until its slot in the period: that wait is the timeline under test, not a wait for a state.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencing::lease::{Grant, LeaseStore, StoreId};
use scenarios::Testbed;
use serde_json::json;

use super::stats::{percentile, sorted};

/// One measured cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub store: String,
    pub leases: usize,
    pub holders: usize,
    pub renew_ms: u64,
    /// When the slowest holder had taken its last lease, from the start (all are due within
    /// the first period).
    pub acquire_s: f64,
    pub offered_per_s: f64,
    pub renewed_per_s: f64,
    pub attempts: usize,
    /// Renewals the store answered `false`: the lease had expired before the renewal arrived.
    pub expired: usize,
    /// Renewals that failed with an error.
    pub errors: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub lag_p99_ms: f64,
    /// The store's CPU over the window, in cores (1.0 = one core busy throughout); `None`
    /// when its processes could not be read.
    pub cpu_cores: Option<f64>,
    /// The clients' CPU over the window, in cores: the lab's own process (its Rust clients), or
    /// a library's holder processes together; `None` when it could not be read.
    pub client_cpu_cores: Option<f64>,
    /// Whether its holders renew all their leases in one request per period (a batch, a
    /// session): its latencies are a batch's.
    pub batched: bool,
    /// Why the cell could not be measured (a lease could not be taken), if it could not.
    pub failed: Option<String>,
}

impl Cell {
    pub(super) fn failed(
        store: &str,
        leases: usize,
        holders: usize,
        renew: Duration,
        why: String,
    ) -> Cell {
        Cell {
            store: store.to_owned(),
            leases,
            holders,
            renew_ms: renew.as_millis() as u64,
            acquire_s: f64::NAN,
            offered_per_s: leases as f64 * 1000.0 / renew.as_millis() as f64,
            renewed_per_s: 0.0,
            attempts: 0,
            expired: 0,
            errors: 0,
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            lag_p99_ms: f64::NAN,
            cpu_cores: None,
            client_cpu_cores: None,
            batched: false,
            failed: Some(why),
        }
    }

    fn expired_share(&self) -> f64 {
        self.expired as f64 / self.attempts.max(1) as f64
    }

    /// Whether the store kept up: renewals at ≥ 95 % of the offered rate, < 1 % expired, p99
    /// within the period.
    pub fn kept_up(&self) -> bool {
        self.failed.is_none()
            && self.renewed_per_s >= 0.95 * self.offered_per_s
            && self.expired_share() < 0.01
            && self.p99_ms <= self.renew_ms as f64
    }

    /// Why the cell has no point to draw, if it has none: it could not hold its leases, or no
    /// renewal was measured (what its row says) — the chart marks it ✗.
    fn unmeasured(&self) -> Option<String> {
        self.failed
            .clone()
            .or_else(|| (!self.p99_ms.is_finite()).then(|| self.limit().unwrap_or_default()))
    }

    /// What limited a cell that did not keep up, from its figures (`None` when it kept up):
    /// taking the leases, when it outlasted the TTL and every lease had expired; the store's CPU
    /// or the clients' near a core, both together on this machine's cores, or — neither
    /// busy — the holders' round trips (a holder of one lease per request sends one at a time:
    /// its leases × the answer time against the period; a batch's time against the period).
    pub fn limit(&self) -> Option<String> {
        if self.failed.is_some() || self.kept_up() {
            return None;
        }
        let (store, client) = (
            self.cpu_cores.unwrap_or(0.0),
            self.client_cpu_cores.unwrap_or(0.0),
        );
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
        let busy = |x: f64| x >= 0.8;
        let per_holder = self.leases.div_ceil(self.holders.max(1));
        let serial_ms = if self.batched {
            self.p50_ms
        } else {
            per_holder as f64 * self.p50_ms
        };
        let ttl_s = 3.0 * self.renew_ms as f64 / 1000.0;
        let cpus = format!("store {store:.2}, clients {client:.2} cores");
        Some(if self.attempts == 0 {
            // Not one renewal left in the window: the holders were still behind their schedule.
            format!(
                "no renewal was sent in the window: the holders were behind their schedule when it closed (taking the leases {:.1} s; {cpus})",
                self.acquire_s
            )
        } else if self.expired_share() >= 0.99 && self.acquire_s > ttl_s {
            // Lost before the window opened: taking them outlasted the TTL.
            format!(
                "taking them: {:.1} s, past the {ttl_s:.1} s TTL — the leases expired before the last was taken ({cpus})",
                self.acquire_s
            )
        } else if store + client >= 0.85 * cores {
            format!("the machine: its {cores:.0} cores shared by the store ({store:.2}) and the clients ({client:.2})")
        } else if busy(store) && store >= client {
            format!("the store's CPU ({store:.2} cores; clients {client:.2})")
        } else if busy(client) {
            format!("the clients' CPU ({client:.2} cores; store {store:.2})")
        } else if serial_ms >= 0.8 * self.renew_ms as f64 {
            if self.batched {
                format!(
                    "the batch's round trip: {serial_ms:.0} ms of the {} ms period (p50)",
                    self.renew_ms
                )
            } else {
                format!(
                    "the holders' round trips, one at a time: {per_holder} leases × p50 {:.2} ms = {serial_ms:.0} ms of the {} ms period",
                    self.p50_ms, self.renew_ms
                )
            }
        } else {
            format!(
                "neither CPU busy ({cpus}): renewals left up to {:.0} ms late (p99)",
                self.lag_p99_ms
            )
        })
    }
}

/// What one holder saw.
#[derive(Default)]
pub(super) struct Seen {
    pub latencies_ms: Vec<f64>,
    pub lags_ms: Vec<f64>,
    pub ok: usize,
    pub expired: usize,
    pub errors: usize,
    pub acquire_s: f64,
}

/// The designs that renew per holder, not per lease: the batched lease table (one statement
/// per holder per period), etcd's session lease (one keep-alive per holder per period) and
/// ZooKeeper's session per holder (one request through it).
fn batched(store: StoreId) -> bool {
    matches!(
        store,
        StoreId::PostgresBatched | StoreId::EtcdSession | StoreId::ZookeeperSession
    )
}

/// How long a cell's holders may take to take their leases before the cell is given up.
pub(super) const ACQUIRE_LIMIT: Duration = Duration::from_secs(60);

/// The measuring window every holder of a cell shares, `(start, end)`: `None` until it opens.
pub(super) type Window = tokio::sync::watch::Receiver<Option<(Instant, Instant)>>;

/// What the window's opening read: when, and the store's and the clients' CPU seconds then.
pub(super) struct Opened {
    pub at: Instant,
    pub store_cpu: Option<f64>,
    pub client_cpu: Option<f64>,
}

/// Opens the window once `holders` holders have each said they hold all their leases (`true`
/// on `acquired`; `false`: one gave up), at the earliest at `earliest`, for `duration`; reads
/// the CPU of the store (`root`'s tree) and of the clients (`clients()`) at that moment. `Err`
/// says why it never opened (the window is then closed at once, so that the holders stop).
pub(super) async fn open_window(
    mut acquired: tokio::sync::mpsc::UnboundedReceiver<bool>,
    holders: usize,
    window: &tokio::sync::watch::Sender<Option<(Instant, Instant)>>,
    earliest: Instant,
    duration: Duration,
    root: Option<u32>,
    clients: impl Fn() -> Option<f64>,
) -> Result<Opened, String> {
    let deadline = tokio::time::Instant::now() + ACQUIRE_LIMIT;
    let mut ready = 0;
    let why = loop {
        if ready == holders {
            break None;
        }
        match tokio::time::timeout_at(deadline, acquired.recv()).await {
            Ok(Some(true)) => ready += 1,
            Ok(Some(false)) | Ok(None) => {
                break Some("a holder gave up taking its leases".to_owned())
            }
            Err(_) => {
                break Some(format!(
                    "{ready} of {holders} holders had taken their leases {} s after the start",
                    ACQUIRE_LIMIT.as_secs()
                ))
            }
        }
    };
    if let Some(why) = why {
        let now = Instant::now();
        let _ = window.send(Some((now, now)));
        return Err(why);
    }
    // The timeline's own wait: the first period, when every lease is due for its first renewal.
    harness::wait::prescribed_until(earliest).await;
    let opened = Opened {
        at: Instant::now(),
        store_cpu: root.and_then(harness::process::tree_cpu_seconds),
        client_cpu: clients(),
    };
    let _ = window.send(Some((opened.at, opened.at + duration)));
    Ok(opened)
}

/// The cell from what its holders saw and the CPU read when the window opened and now.
#[allow(clippy::too_many_arguments)]
pub(super) fn cell_of(
    store: &str,
    leases: usize,
    holders: usize,
    renew: Duration,
    duration: Duration,
    batched: bool,
    seen: Vec<Seen>,
    opened: &Opened,
    (store_cpu, client_cpu): (Option<f64>, Option<f64>),
) -> Cell {
    let measured = opened.at.elapsed().as_secs_f64();
    let cores = |before: Option<f64>, after: Option<f64>| {
        before.zip(after).map(|(b, a)| (a - b) / measured)
    };
    let mut all = Seen::default();
    for s in seen {
        all.latencies_ms.extend(s.latencies_ms);
        all.lags_ms.extend(s.lags_ms);
        all.ok += s.ok;
        all.expired += s.expired;
        all.errors += s.errors;
        all.acquire_s = all.acquire_s.max(s.acquire_s);
    }
    let lat = sorted(all.latencies_ms);
    let lag = sorted(all.lags_ms);
    Cell {
        store: store.to_owned(),
        leases,
        holders,
        renew_ms: renew.as_millis() as u64,
        acquire_s: all.acquire_s,
        offered_per_s: leases as f64 * 1000.0 / renew.as_millis() as f64,
        // Per second of the window the renewals were due in (the last one is due just before
        // its end: the elapsed time would flatter the rate by that slot).
        renewed_per_s: all.ok as f64 / duration.as_secs_f64(),
        attempts: all.ok + all.expired + all.errors,
        expired: all.expired,
        errors: all.errors,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        lag_p99_ms: percentile(&lag, 0.99),
        cpu_cores: cores(opened.store_cpu, store_cpu),
        client_cpu_cores: cores(opened.client_cpu, client_cpu),
        batched,
        failed: None,
    }
}

/// The leases holder `i` of `holders` holds in cell `n`: leases i, i + H, i + 2H, … of `leases`
/// (the first L mod H one more), each named for its cell so that no cell finds another's.
pub(super) fn names_of(n: usize, i: usize, leases: usize, holders: usize) -> Vec<String> {
    (i..leases)
        .step_by(holders)
        .map(|j| format!("scale{n}-{j}"))
        .collect()
}

pub(super) async fn one_cell(
    bed: &Testbed,
    store: StoreId,
    n: usize,
    leases: usize,
    holders: usize,
    renew: Duration,
    duration: Duration,
) -> anyhow::Result<Cell> {
    let ttl = renew * 3;
    let mut clients = Vec::with_capacity(holders);
    for _ in 0..holders {
        clients.push(bed.own_store_client().await?);
    }
    // Holder i holds leases i, i + H, i + 2H, …: L/H each (the first L mod H one more). The
    // first period takes them, each lease in its own slot; the periods after it renew them,
    // measured in the window.
    let root = store_root(bed).await;
    let started = Instant::now();
    let (window_tx, window) = tokio::sync::watch::channel(None);
    let (acquired_tx, acquired) = tokio::sync::mpsc::unbounded_channel();
    let batched = batched(store);
    let store = store.name();
    let holding = scenarios::join_all(clients.iter().enumerate().map(|(i, client)| {
        let names = names_of(n, i, leases, holders);
        let t = Timing {
            ttl,
            renew,
            started,
            window: window.clone(),
            acquired: acquired_tx.clone(),
        };
        let gave_up = acquired_tx.clone();
        let client = client.clone();
        async move {
            let seen = if batched {
                hold_batched(client, names, i, t).await
            } else {
                hold(client, names, i, t).await
            };
            if seen.is_err() {
                let _ = gave_up.send(false);
            }
            seen
        }
    }));
    let lab = std::process::id();
    let opening = open_window(
        acquired,
        holders,
        &window_tx,
        started + renew,
        duration,
        root,
        || harness::process::cpu_seconds(lab),
    );
    let (seen, opened) = tokio::join!(holding, opening);
    let after = (
        root.and_then(harness::process::tree_cpu_seconds),
        harness::process::cpu_seconds(lab),
    );
    let seen = seen.into_iter().collect::<anyhow::Result<Vec<Seen>>>()?;
    let opened = opened.map_err(anyhow::Error::msg)?;
    Ok(cell_of(
        store, leases, holders, renew, duration, batched, seen, &opened, after,
    ))
}

/// One holder, one event at a time in the order they fall due: lease j of n is taken at its
/// slot `j·renew/n` of the first period, then renewed every `renew` from when it was taken — a
/// holder still taking leases renews the ones it holds in between, as a lock client's renewer
/// does. It says on `acquired` when it holds them all; renewals due in the window are measured,
/// and it stops at the window's end. A holder that cannot keep up falls behind (the send lag)
/// and its leases expire. `Err` when a lease could not be taken (the cell cannot be measured).
async fn hold(
    client: Arc<dyn LeaseStore>,
    names: Vec<String>,
    i: usize,
    t: Timing,
) -> anyhow::Result<Seen> {
    use std::cmp::Reverse;
    let mut seen = Seen::default();
    if names.is_empty() {
        let _ = t.acquired.send(true);
        return Ok(seen);
    }
    let holder = format!("holder-{i}");
    let slot = t.renew / names.len() as u32;
    // (due, lease): the earliest first.
    let mut due: std::collections::BinaryHeap<Reverse<(Instant, usize)>> = (0..names.len())
        .map(|j| Reverse((t.started + slot * j as u32, j)))
        .collect();
    let mut grants: Vec<Option<Grant>> = names.iter().map(|_| None).collect();
    let mut taken = 0;
    while let Some(Reverse((at, j))) = due.pop() {
        // The window's end, by the schedule or by the clock: a holder behind its schedule does
        // not send the renewals that fell due in the window after it closed.
        if t.window
            .borrow()
            .is_some_and(|(_, end)| at >= end || Instant::now() >= end)
        {
            break;
        }
        // The timeline's own wait: this lease's slot.
        harness::wait::prescribed_until(at).await;
        let window = *t.window.borrow();
        let sent = Instant::now();
        match &mut grants[j] {
            None => {
                let grant = client
                    .acquire(&names[j], &holder, t.ttl)
                    .await
                    .with_context(|| format!("{holder} taking {}", names[j]))?
                    .with_context(|| format!("{} was not free", names[j]))?;
                grants[j] = Some(grant);
                seen.acquire_s = seen.acquire_s.max(t.started.elapsed().as_secs_f64());
                taken += 1;
                if taken == names.len() {
                    let _ = t.acquired.send(true);
                }
                due.push(Reverse((sent + t.renew, j)));
            }
            Some(grant) => {
                let answered = client.renew(grant).await;
                if window.is_some_and(|(start, _)| at >= start) {
                    seen.lags_ms
                        .push(sent.duration_since(at).as_secs_f64() * 1000.0);
                    seen.latencies_ms
                        .push(sent.elapsed().as_secs_f64() * 1000.0);
                    match answered {
                        Ok(true) => seen.ok += 1,
                        Ok(false) => seen.expired += 1,
                        Err(_) => seen.errors += 1,
                    }
                }
                due.push(Reverse((at + t.renew, j)));
            }
        }
    }
    Ok(seen)
}

/// A holder's timeline: the TTL it asks, its renewal period, when the cell started, the window
/// it measures in, and where it says that it holds all its leases.
struct Timing {
    ttl: Duration,
    renew: Duration,
    started: Instant,
    window: Window,
    acquired: tokio::sync::mpsc::UnboundedSender<bool>,
}

/// One holder of the batched design: its leases taken in the first period as [`hold`] takes
/// them (each in its own slot), and every period from the first on, all the leases it holds
/// renewed in one request ([`LeaseStore::renew_all`]) — between two acquisitions when taking
/// them runs past a period, as a scheduler's renewer does. Each lease a batch renewed counts as
/// a renewal; a batch's latency and send lag count once per batch; a failed batch fails all its
/// leases. Batches due in the window are measured.
async fn hold_batched(
    client: Arc<dyn LeaseStore>,
    names: Vec<String>,
    i: usize,
    t: Timing,
) -> anyhow::Result<Seen> {
    let mut seen = Seen::default();
    if names.is_empty() {
        let _ = t.acquired.send(true);
        return Ok(seen);
    }
    let holder = format!("holder-{i}");
    let slot = t.renew / names.len() as u32;
    let mut grants = Vec::with_capacity(names.len());
    let mut batch_at = t.started + t.renew;
    loop {
        if t.window
            .borrow()
            .is_some_and(|(_, end)| batch_at >= end || Instant::now() >= end)
        {
            break;
        }
        let next = grants.len();
        let take_at = (next < names.len()).then(|| t.started + slot * next as u32);
        // A lease is taken in its slot unless the batch is due first — by the schedule, or,
        // taking behind it, by the clock: the renewer does not wait for the last acquisition.
        if let Some(take_at) = take_at.filter(|at| *at < batch_at && Instant::now() < batch_at) {
            // The timeline's own wait: this lease's slot.
            harness::wait::prescribed_until(take_at).await;
            let grant = client
                .acquire(&names[next], &holder, t.ttl)
                .await
                .with_context(|| format!("{holder} taking {}", names[next]))?
                .with_context(|| format!("{} was not free", names[next]))?;
            grants.push(grant);
            seen.acquire_s = seen.acquire_s.max(t.started.elapsed().as_secs_f64());
            if grants.len() == names.len() {
                let _ = t.acquired.send(true);
            }
            continue;
        }
        // The timeline's own wait: the next period.
        harness::wait::prescribed_until(batch_at).await;
        let window = *t.window.borrow();
        let sent = Instant::now();
        let answered = client.renew_all(&mut grants).await;
        if window.is_some_and(|(start, _)| batch_at >= start) {
            seen.lags_ms
                .push(sent.duration_since(batch_at).as_secs_f64() * 1000.0);
            seen.latencies_ms
                .push(sent.elapsed().as_secs_f64() * 1000.0);
            match answered {
                Ok(renewed) => {
                    let ok = renewed.iter().filter(|r| **r).count();
                    seen.ok += ok;
                    seen.expired += renewed.len() - ok;
                }
                Err(_) => seen.errors += grants.len(),
            }
        }
        batch_at += t.renew;
    }
    Ok(seen)
}

/// The process whose tree is the lease store: the embedded cluster's postmaster, or the lock
/// service container's first process.
pub(super) async fn store_root(bed: &Testbed) -> Option<u32> {
    match &bed.service {
        Some(service) => service.pid().await,
        None => bed.cluster().ok()?.postmaster_pid(),
    }
}

/// The knee of each (store, holders) series, then the table, then why a cell could not be held.
pub fn render(cells: &[Cell]) -> String {
    // The knee of each store and holder count heads the table: the first thing a reader wants.
    let mut text = String::new();
    for line in knees(cells) {
        let _ = writeln!(text, "{line}");
    }
    text.push('\n');
    text.push_str(
        "| store | leases | holders | acquire s | offered renewals/s | renewed/s | expired | errors | renew p50 ms | p99 ms | send lag p99 ms | store CPU (cores) | clients CPU (cores) | kept up |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in cells {
        let _ = writeln!(
            text,
            "| {} | {} | {} | {:.1} | {:.0} | {:.0} | {} ({:.1} %) | {} | {:.2} | {:.2} | {:.1} | {} | {} | {} |",
            c.store,
            c.leases,
            c.holders,
            c.acquire_s,
            c.offered_per_s,
            c.renewed_per_s,
            c.expired,
            c.expired_share() * 100.0,
            c.errors,
            c.p50_ms,
            c.p99_ms,
            c.lag_p99_ms,
            c.cpu_cores.map_or("–".to_owned(), |x| format!("{x:.2}")),
            c.client_cpu_cores.map_or("–".to_owned(), |x| format!("{x:.2}")),
            match (&c.failed, c.limit()) {
                (Some(_), _) => "could not hold them".to_owned(),
                (None, None) => "yes".to_owned(),
                (None, Some(limit)) => format!("NO: {limit}"),
            }
        );
    }
    text.push('\n');
    for c in cells {
        if let Some(why) = &c.failed {
            let _ = writeln!(
                text,
                "{} × {} leases × {} holders: {why}",
                c.store, c.leases, c.holders
            );
        }
    }
    text
}

/// Per (store, holders), in the cells' order: where the store stopped keeping up.
pub fn knees(cells: &[Cell]) -> Vec<String> {
    let mut series: Vec<(&str, usize)> = Vec::new();
    for c in cells {
        if !series.contains(&(c.store.as_str(), c.holders)) {
            series.push((&c.store, c.holders));
        }
    }
    series
        .into_iter()
        .map(|(store, holders)| {
            let mut mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.store == store && c.holders == holders)
                .collect();
            mine.sort_by_key(|c| c.leases);
            let renew = mine.first().map_or(0, |c| c.renew_ms);
            let first_missed = mine.iter().find(|c| !c.kept_up());
            // The largest count below the first missed one that kept up.
            let below = first_missed.map(|c| {
                mine.iter()
                    .rev()
                    .find(|k| k.leases < c.leases && k.kept_up())
                    .map_or("none of the counts measured".to_owned(), |k| {
                        format!("{} leases", k.leases)
                    })
            });
            match first_missed {
                Some(c) if c.failed.is_some() => {
                    format!(
                        "knee: {store} with {holders} holders renewing every {renew} ms keeps up with {}, not with {}: could not hold them ({})",
                        below.unwrap_or_default(),
                        c.leases,
                        c.failed.as_deref().unwrap_or_default()
                    )
                }
                Some(c) => {
                    format!(
                        "knee: {store} with {holders} holders renewing every {renew} ms keeps up with {}, not with {} ({:.0} of {:.0} renewals/s, {:.1} % expired, p99 {:.1} ms{})",
                        below.unwrap_or_default(),
                        c.leases,
                        c.renewed_per_s,
                        c.offered_per_s,
                        c.expired_share() * 100.0,
                        c.p99_ms,
                        c.limit().map_or(String::new(), |l| format!("; limited by {l}"))
                    )
                }
                None => format!(
                    "knee: {store} with {holders} holders renewing every {renew} ms kept up with every count measured (up to {} leases)",
                    mine.last().map_or(0, |c| c.leases)
                ),
            }
        })
        .collect()
}

pub fn json(cells: &[Cell]) -> serde_json::Value {
    json!({
        "cells": cells.iter().map(|c| json!({
            "store": c.store, "leases": c.leases, "holders": c.holders, "renew_ms": c.renew_ms,
            "acquire_s": c.acquire_s, "offered_per_s": c.offered_per_s,
            "renewed_per_s": c.renewed_per_s, "attempts": c.attempts, "expired": c.expired,
            "errors": c.errors, "p50_ms": c.p50_ms, "p99_ms": c.p99_ms,
            "lag_p99_ms": c.lag_p99_ms, "cpu_cores": c.cpu_cores,
            "client_cpu_cores": c.client_cpu_cores, "batched": c.batched,
            "kept_up": c.kept_up(), "limit": c.limit(), "failed": c.failed,
        })).collect::<Vec<_>>(),
        "knees": knees(cells),
    })
}

/// The cells of a recorded `bench-leases.json` ([`json`]): the figures as measured, to be
/// rendered again — knees and limits by this build's rules (`lab bench --from-json`).
pub fn cells_from_json(v: &serde_json::Value) -> anyhow::Result<Vec<Cell>> {
    let cells = v["cells"]
        .as_array()
        .context("no \"cells\" array: not a bench-leases.json")?;
    let f = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap_or(f64::NAN);
    let n = |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap_or(0) as usize;
    cells
        .iter()
        .map(|c| {
            Ok(Cell {
                store: c["store"]
                    .as_str()
                    .context("a cell without a store")?
                    .to_owned(),
                leases: n(c, "leases"),
                holders: n(c, "holders"),
                renew_ms: c["renew_ms"].as_u64().context("a cell without renew_ms")?,
                acquire_s: f(c, "acquire_s"),
                offered_per_s: f(c, "offered_per_s"),
                renewed_per_s: f(c, "renewed_per_s"),
                attempts: n(c, "attempts"),
                expired: n(c, "expired"),
                errors: n(c, "errors"),
                p50_ms: f(c, "p50_ms"),
                p99_ms: f(c, "p99_ms"),
                lag_p99_ms: f(c, "lag_p99_ms"),
                cpu_cores: c["cpu_cores"].as_f64(),
                client_cpu_cores: c["client_cpu_cores"].as_f64(),
                batched: c["batched"].as_bool().unwrap_or(false),
                failed: c["failed"].as_str().map(str::to_owned),
            })
        })
        .collect()
}

/// Renew p99 and send lag p99 (log scale) against the lease count: one panel per store, a line
/// per holder count (solid: the store's answer time; dashed: how late the renewals left), the
/// period as the limit; a cell that did not keep up hollow, one that could not hold its leases
/// marked ✗.
pub fn chart(cells: &[Cell]) -> String {
    let shades = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"];
    let mut stores: Vec<&str> = Vec::new();
    let mut holder_counts: Vec<usize> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for c in cells {
        if !stores.contains(&c.store.as_str()) {
            stores.push(&c.store);
        }
        if !holder_counts.contains(&c.holders) {
            holder_counts.push(c.holders);
        }
        if !counts.contains(&c.leases) {
            counts.push(c.leases);
        }
    }
    holder_counts.sort_unstable();
    counts.sort_unstable();
    let cols = stores.len().clamp(1, 2);
    let rows = stores.len().div_ceil(cols).max(1);
    let (pw, ph, pad_l, pad_t, gap) = (400.0, 230.0, 70.0, 60.0, 60.0);
    // Wide enough for the title whatever the number of panels.
    let w = (pad_l + cols as f64 * (pw + gap) + 20.0).max(980.0);
    let h = pad_t + rows as f64 * (ph + gap + 20.0) + 50.0;
    let renew = cells.first().map_or(500, |c| c.renew_ms) as f64;
    let top_ms = cells
        .iter()
        .flat_map(|c| [c.p99_ms, c.lag_p99_ms])
        .filter(|v| v.is_finite())
        .fold(renew * 2.0, f64::max);
    let (lo, hi) = (0.1f64.log10(), top_ms.log10());
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/><text x="10" y="20" font-size="14" font-weight="bold">lease scaling: renew p99 (solid) and how late renewals left, p99 (dashed) — ms, log scale</text><text x="10" y="38">each lease renewed every {renew:.0} ms (TTL {:.0} ms); hollow: the store did not keep up there; ✗: could not hold the leases, or no renewal left in the window</text>"##,
        renew * 3.0
    );
    for (k, store) in stores.iter().enumerate() {
        let (col, row) = (k % cols, k / cols);
        let x0 = pad_l + col as f64 * (pw + gap);
        let y0 = pad_t + row as f64 * (ph + gap + 20.0);
        let x_of = |l: usize| {
            let i = counts.iter().position(|&c| c == l).unwrap_or(0);
            x0 + pw * (i as f64 + 0.5) / counts.len().max(1) as f64
        };
        let y_of = |ms: f64| y0 + ph - (ms.max(0.1).log10() - lo) / (hi - lo) * ph;
        let _ = write!(
            svg,
            r##"<text x="{x0}" y="{:.1}" font-weight="bold">{store}</text><rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>"##,
            y0 - 6.0
        );
        for ms in [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0] {
            if ms > top_ms * 1.01 {
                break;
            }
            let y = y_of(ms);
            let _ = write!(
                svg,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10">{ms}</text>"##,
                x0 + pw,
                x0 - 4.0,
                y + 4.0
            );
        }
        let y = y_of(renew);
        let _ = write!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#d62728" font-size="10">the period</text>"##,
            x0 + pw,
            x0 + 4.0,
            y - 4.0
        );
        for &l in &counts {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{l}</text>"#,
                x_of(l),
                y0 + ph + 14.0
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">leases held</text>"#,
            x0 + pw / 2.0,
            y0 + ph + 28.0
        );
        for (hi_k, &holders) in holder_counts.iter().enumerate() {
            let color = shades[hi_k % shades.len()];
            let mut mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.store == *store && c.holders == holders)
                .collect();
            mine.sort_by_key(|c| c.leases);
            let held: Vec<&&Cell> = mine.iter().filter(|c| c.failed.is_none()).collect();
            let line = |f: fn(&Cell) -> f64| {
                held.iter()
                    .filter(|c| f(c).is_finite())
                    .map(|c| format!("{:.1},{:.1}", x_of(c.leases), y_of(f(c))))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = write!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/><polyline points="{}" fill="none" stroke="{color}" stroke-width="1.2" stroke-dasharray="4 3"/>"#,
                line(|c| c.p99_ms),
                line(|c| c.lag_p99_ms)
            );
            for c in &mine {
                match &c.unmeasured() {
                    Some(why) => {
                        let _ = write!(
                            svg,
                            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{color}" font-weight="bold">✗<title>{store}, {holders} holders, {} leases: not measured — {}</title></text>"#,
                            x_of(c.leases),
                            y0 + 14.0 + 12.0 * hi_k as f64,
                            c.leases,
                            harness::evidence::escape::html(why)
                        );
                    }
                    None => {
                        let _ = write!(
                            svg,
                            r#"<circle cx="{:.1}" cy="{:.1}" r="{}" fill="{}" stroke="{color}" stroke-width="2"><title>{store}, {holders} holders, {} leases: p99 {:.2} ms, sent up to {:.0} ms late (p99), {:.0} of {:.0} renewals/s, {} expired</title></circle>"#,
                            x_of(c.leases),
                            y_of(c.p99_ms),
                            if c.kept_up() { 3 } else { 5 },
                            if c.kept_up() { color } else { "#fff" },
                            c.leases,
                            c.p99_ms,
                            c.lag_p99_ms,
                            c.renewed_per_s,
                            c.offered_per_s,
                            c.expired
                        );
                    }
                }
            }
        }
    }
    // The legend: one shade per holder count.
    let ly = h - 22.0;
    for (k, holders) in holder_counts.iter().enumerate() {
        let x = pad_l + 150.0 * k as f64;
        let color = shades[k % shades.len()];
        let _ = write!(
            svg,
            r#"<line x1="{x}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{holders} holders</text>"#,
            x + 24.0,
            x + 30.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(leases: usize, renewed: f64, expired: usize, p99: f64) -> Cell {
        Cell {
            store: "single".into(),
            leases,
            holders: 4,
            renew_ms: 500,
            acquire_s: 0.0,
            offered_per_s: leases as f64 * 2.0,
            renewed_per_s: renewed,
            attempts: 1000,
            expired,
            errors: 0,
            p50_ms: 1.0,
            p99_ms: p99,
            lag_p99_ms: 0.0,
            cpu_cores: None,
            client_cpu_cores: None,
            batched: false,
            failed: None,
        }
    }

    #[test]
    fn the_knee_is_the_first_count_that_did_not_keep_up_by_any_measure() {
        let ok = [cell(100, 200.0, 0, 3.0), cell(1000, 1990.0, 9, 40.0)];
        assert!(ok.iter().all(Cell::kept_up));
        assert!(knees(&ok)[0].contains("kept up with every count measured (up to 1000 leases)"));
        // Each measure alone stops it keeping up: the rate, the expired share, the p99.
        for bad in [
            cell(10000, 18000.0, 0, 3.0),
            cell(10000, 20000.0, 10, 3.0),
            cell(10000, 20000.0, 0, 501.0),
        ] {
            assert!(!bad.kept_up(), "{bad:?}");
            let cells = [ok[0].clone(), ok[1].clone(), bad];
            let knee = &knees(&cells)[0];
            assert!(
                knee.contains("keeps up with 1000 leases, not with 10000"),
                "{knee}"
            );
        }
        let table = render(&[cell(10000, 18000.0, 0, 3.0)]);
        assert!(table.contains("limited by"), "{table}");
        assert!(
            table.contains("| NO: ") && table.contains("keeps up with none of the counts measured"),
            "{table}"
        );
    }

    /// A recorded run renders again to the same cells: every field survives its JSON.
    #[test]
    fn a_recorded_run_renders_again_from_its_json() {
        let mut failed = Cell::failed("etcd", 10000, 4, Duration::from_millis(500), "why".into());
        failed.client_cpu_cores = Some(0.5);
        let cells = vec![
            cell(100, 200.0, 0, 3.0),
            cell(10000, 18000.0, 7, 3.0),
            failed,
        ];
        let again = cells_from_json(&json(&cells)).expect("cells");
        assert_eq!(render(&again), render(&cells));
        assert_eq!(json(&again), json(&cells));
    }

    /// What limited a cell is read off its figures, the first of: both CPUs together near the
    /// machine's cores, the store's, the clients', the holders' round trips one at a time.
    #[test]
    fn a_cell_that_did_not_keep_up_says_what_limited_it() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
        let slow = |store: f64, client: f64, p50: f64| Cell {
            cpu_cores: Some(store),
            client_cpu_cores: Some(client),
            p50_ms: p50,
            ..cell(10000, 10000.0, 0, 3.0)
        };
        assert_eq!(cell(100, 200.0, 0, 3.0).limit(), None, "it kept up");
        let said = |c: Cell| c.limit().expect("did not keep up");
        assert!(said(slow(0.9, 0.1, 0.1)).starts_with("the store's CPU (0.90"));
        assert!(said(slow(0.1, 0.9, 0.1)).starts_with("the clients' CPU (0.90"));
        assert!(said(slow(cores * 0.5, cores * 0.45, 0.1)).starts_with("the machine"));
        // 2500 leases a holder, one at a time at 0.2 ms each: 500 ms of the 500 ms period.
        let rt = said(slow(0.1, 0.1, 0.2));
        assert!(rt.contains("2500 leases × p50 0.20 ms = 500 ms"), "{rt}");
        assert!(said(slow(0.1, 0.1, 0.01)).starts_with("neither CPU busy"));
        let none = Cell {
            attempts: 0,
            ..slow(0.1, 0.1, 0.1)
        };
        assert!(said(none).starts_with("no renewal was sent in the window"));
        // Every lease expired, and taking them took longer than the TTL.
        let lost = Cell {
            expired: 1000,
            acquire_s: 5.0,
            ..slow(0.9, 0.1, 0.1)
        };
        assert!(said(lost).starts_with("taking them: 5.0 s, past the 1.5 s TTL"));
    }
}
