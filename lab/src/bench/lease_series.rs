//! The series of `lab bench --leases`, cell by cell: each (series, leases, holders) cell measured
//! in order on one testbed — through the lab's own client ([`super::lease_scaling`]) or a
//! library's ([`super::library_clients`]) — the store waited on between cells, one that stops
//! answering recorded as such for its remaining cells.

use std::time::Duration;

use anyhow::Context as _;
use fencing::lease::StoreId;
use scenarios::Testbed;

use super::lease_scaling::{one_cell, Cell};

/// How long a store may take to answer again after a cell that overloaded it.
const RESET_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until the store answers its reset (a store the cell before overloaded — ZooKeeper
/// expiring thousands of sessions — may not answer at once); `Err` says why it never did, for
/// the cells it cannot measure.
async fn store_answers(bed: &Testbed, store: StoreId) -> Result<(), String> {
    harness::wait::until(
        &format!("{store} answers the reset before the next cell"),
        RESET_TIMEOUT,
        || async { Ok::<bool, std::convert::Infallible>(bed.lease.reset().await.is_ok()) },
    )
    .await
    .map(drop)
    .map_err(|e| format!("the store stopped answering after an earlier cell ({e})"))
}

/// One series of the table: a lease store through the lab's own client, or a lock service
/// through a published library's client ([`super::library_clients`]).
#[derive(Debug, Clone)]
pub struct Series {
    /// The table's name for it: the store, or `redis-py (redis)`.
    pub label: String,
    /// The lease store the testbed runs (the library's lock service).
    pub store: StoreId,
    /// The library whose client holds the leases, if not the lab's.
    pub library: Option<&'static str>,
}

/// Every (series, leases, holders) cell, in order, on `lab`; `clients` runs the library series.
pub async fn measure(
    bed: &mut Testbed,
    series: &[Series],
    clients: Option<&super::library_clients::Clients>,
    leases: &[usize],
    holders: &[usize],
    renew: Duration,
    duration: Duration,
) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for one in series {
        let (store, label) = (one.store, one.label.as_str());
        bed.use_store(store)
            .await
            .with_context(|| format!("--lease-store {store}"))?;
        // Set once the store stops answering: its remaining cells are recorded as not measured.
        let mut wedged: Option<String> = None;
        for &h in holders {
            for &l in leases {
                if wedged.is_none() {
                    wedged = store_answers(bed, store).await.err();
                }
                if let Some(why) = &wedged {
                    eprintln!("bench: {label}, {l} leases, {h} holders: not measured: {why}");
                    cells.push(Cell::failed(label, l, h, renew, why.clone()));
                    continue;
                }
                bed.reset().await?;
                let n = cells.len();
                let measured = match (one.library, clients) {
                    (None, _) => one_cell(bed, store, n, l, h, renew, duration).await,
                    (Some(lib), Some(clients)) => {
                        super::library_clients::one_cell(
                            bed, clients, lib, label, n, l, h, renew, duration,
                        )
                        .await
                    }
                    (Some(lib), None) => Err(anyhow::anyhow!("no Python for {lib}'s holders")),
                };
                let cell = match measured {
                    Ok(cell) => {
                        eprintln!(
                            "bench: {label}, {l} leases, {h} holders: {:.0} of {:.0} renewals/s, p99 {:.1} ms, {} expired{}",
                            cell.renewed_per_s,
                            cell.offered_per_s,
                            cell.p99_ms,
                            cell.expired,
                            cell.limit().map_or(String::new(), |l| format!("; limited by {l}"))
                        );
                        cell
                    }
                    Err(e) => {
                        eprintln!(
                            "bench: {label}, {l} leases, {h} holders: could not hold them: {e:#}"
                        );
                        Cell::failed(label, l, h, renew, format!("{e:#}"))
                    }
                };
                cells.push(cell);
            }
        }
    }
    bed.use_store(StoreId::Postgres).await?;
    Ok(cells)
}
