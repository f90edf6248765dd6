//! `lab bench`: what fencing costs, measured side by side in one run on one embedded cluster.
//!
//! - every resource write mode at 1, 4, 16 and 64 concurrent writers (one connection each, all
//!   holding the current token, writing distinct parts of one scope): writes per second and
//!   latency p50 / p99, after a warm-up, over a fixed duration per cell;
//! - lease contention: rounds of 16, 64 and 256 contenders on a fresh lease, exactly one winner
//!   per round, time per round p50 / p99;
//! - the reference: `pgbench` on the same cluster with the same client counts, running a one-row
//!   `UPDATE` per transaction (each client its own row), so that every figure can be read as a
//!   ratio to what this machine's PostgreSQL can commit;
//! - like for like: `unfenced-single`, the one statement of fenced-single with the floor taken
//!   out (the same upsert and attempt record, one commit), so that "× unfenced-single" is the
//!   fence's own cost; and `pgbench` running the lab's own statement of each one-statement mode
//!   (`pgbench:fenced-single`, …: the same SQL, the same parts, the server's limit for it), so
//!   that "× same SQL" is the lab's Rust client's efficiency.
//!
//! Output: a table on the terminal, `bench.json` and `bench.svg` in the evidence directory.
//! Figures are measurements of this machine at this moment; compare ratios within one run.

mod fence_cost;
pub mod lease_scaling;
pub mod lease_series;
pub mod library_clients;
mod stats;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use fencing::resource::{self, Write};
use harness::evidence::write_atomically;
use harness::process::Spawn;
use harness::server::{ClusterConfig, PgBinaries, Server as _};
use scenarios::testbed::SCOPE;
use scenarios::{Params, Testbed};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::Executor;
use stats::{percentile, sorted};
use tokio::sync::Barrier;

use crate::args::BenchArgs;
use crate::Ended;

/// One measured cell: a mode (or the reference) at a client count.
#[derive(Debug, Clone)]
struct Cell {
    name: String,
    clients: usize,
    writes: usize,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// What the writers' backends waited for while measured: the two most frequent wait events
    /// in `pg_stat_activity`, sampled every 10 ms, with their shares ("" for pgbench).
    waits: String,
    /// WAL written per transaction while pgbench ran (bytes; `None` for the lab's writers, whose
    /// warm-up writes share the measurement, and for a pgbench cell that completed none).
    wal_per_tx: Option<f64>,
    /// The server's CPU per transaction while pgbench ran (µs: every process of the cluster,
    /// the backends that served pgbench included once they ended; `None` for the lab's writers
    /// and where `/proc` could not be read).
    cpu_us_per_tx: Option<f64>,
}

/// One contention size.
#[derive(Debug, Clone)]
struct Contention {
    contenders: usize,
    rounds: usize,
    one_winner_rounds: usize,
    p50_ms: f64,
    p99_ms: f64,
}

/// The writer counts every mode is measured at.
const WRITERS: [usize; 4] = [1, 4, 16, 64];

/// The one-statement writes pgbench also runs as they are (their profile's statement), and the
/// diagnostics of the fence's cost on the server: [`NO_ROW_LOCK`], [`CHECK_READ_ONLY`],
/// [`ADVISORY`].
const SAME_SQL: [&str; 6] = [
    "fenced-single",
    "fenced-shared",
    "unfenced-single",
    NO_ROW_LOCK,
    CHECK_READ_ONLY,
    ADVISORY,
];

/// A diagnostic of the fence's cost on the server, run by pgbench only: the check's read alone —
/// unfenced-single's upsert and record, done only when the scope's floor row, read without a
/// lock, is at or below the token. Not a fence (nothing orders it against an advance), but the
/// least any check at the resource does: it reads the floor. Beside unfenced-single it weighs
/// that read, the floor of what a fence costs on this server.
const CHECK_READ_ONLY: &str = "fenced-check-read-only";

/// A diagnostic of the fence's cost on the server, run by pgbench only: the same guarantee as
/// fenced-shared without its row lock's WAL — PL/pgSQL [`ADVISORY_FUNCTION`], where writers of the
/// current token share an advisory lock on the scope (held in the lock manager's memory, never
/// logged) and an advance takes it exclusively, each re-reading the floor after its lock with a
/// fresh snapshot (a volatile function's every query takes one). What removing the row lock's
/// WAL buys, measured; not one of the lab's designs (the experiments do not judge it).
const ADVISORY: &str = "fenced-advisory";

/// [`ADVISORY`]'s function, created on the bench's resource database before its cells.
const ADVISORY_FUNCTION: &str = r#"
CREATE OR REPLACE FUNCTION lab_bench_fenced_advisory(
  p_scope text, p_part text, p_content text, p_writer text, p_token bigint, p_mode text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  seen bigint;
  ok boolean := false;
BEGIN
  SELECT max_token INTO seen FROM fence_floor WHERE scope = p_scope;
  IF p_token = seen THEN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_scope, 0));
    SELECT max_token = p_token INTO ok FROM fence_floor WHERE scope = p_scope;
  ELSIF p_token > seen THEN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_scope, 0));
    UPDATE fence_floor SET max_token = p_token WHERE scope = p_scope AND max_token <= p_token;
    ok := FOUND;
  END IF;
  IF ok THEN
    INSERT INTO report_part AS r (scope, part, content, writer, token)
    VALUES (p_scope, p_part, p_content, p_writer, p_token)
    ON CONFLICT (scope, part) DO UPDATE
       SET content = EXCLUDED.content, writer = EXCLUDED.writer,
           token = EXCLUDED.token, written_at = clock_timestamp();
  END IF;
  INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
  VALUES (p_scope, p_part, p_writer, p_token, p_mode, ok);
  RETURN ok;
END $$
"#;

/// A diagnostic of the fence's cost on the server, run by pgbench only: fenced-shared's statement
/// with its row lock (`FOR SHARE`) taken out. Not a fence — a writer whose token equals the floor
/// no longer holds the floor against one that advances it — but beside fenced-shared and
/// unfenced-single it weighs what the shared row lock costs per commit (the WAL it writes).
const NO_ROW_LOCK: &str = "fenced-shared-no-row-lock";

/// fenced-single's statement with the fence taken out: the part's upsert and the attempt's
/// record in one statement, always accepted — the like-for-like baseline of the one-statement
/// fences (`unfenced`, the lab's negative control, is two autocommit statements).
const UNFENCED_SINGLE: &str = r#"
WITH part AS (
   INSERT INTO report_part AS r (scope, part, content, writer, token)
   VALUES (:scope, :part, :content, :writer, :token)
   ON CONFLICT (scope, part) DO UPDATE
      SET content = EXCLUDED.content, writer = EXCLUDED.writer,
          token = EXCLUDED.token, written_at = clock_timestamp()
RETURNING 1),
attempt AS (
   INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
   VALUES (:scope, :part, :writer, :token, :mode, true))
SELECT true
"#;

/// [`CHECK_READ_ONLY`]'s statement: [`UNFENCED_SINGLE`] done only when the floor row, read
/// without a lock, is at or below the token.
const CHECK_READ_ONLY_SQL: &str = r#"
WITH fence AS (
   SELECT scope FROM fence_floor WHERE scope = :scope AND max_token <= :token),
part AS (
   INSERT INTO report_part AS r (scope, part, content, writer, token)
   SELECT :scope, :part, :content, :writer, :token FROM fence
   ON CONFLICT (scope, part) DO UPDATE
      SET content = EXCLUDED.content, writer = EXCLUDED.writer,
          token = EXCLUDED.token, written_at = clock_timestamp()
RETURNING 1),
attempt AS (
   INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
   SELECT :scope, :part, :writer, :token, :mode, EXISTS (SELECT 1 FROM fence))
SELECT EXISTS (SELECT 1 FROM fence)
"#;

/// seed004-single's profile with `statement` as its write, recorded as `name`: the bench's own
/// writes.
fn bench_profile(name: &str, statement: &str) -> fencing::profile::Profile {
    let single = fencing::profile::Profile::built_in_text("seed004-single")
        .expect("seed004-single is built in");
    let (head, _) = single
        .split_once("[resource.write]")
        .expect("seed004-single has a write");
    let text = format!(
        "{}[resource.write]\nmode = \"{name}\"\nstatement = \"\"\"{statement}\"\"\"\n",
        head.replace("name = \"seed004-single\"", &format!("name = \"{name}\""))
    );
    fencing::profile::Profile::parse(name, &text).unwrap_or_else(|e| panic!("{name} parses: {e}"))
}

/// The bench's own write `unfenced-single`: seed004-single's profile with [`UNFENCED_SINGLE`]
/// as its write.
static UNFENCED_SINGLE_PROFILE: std::sync::LazyLock<fencing::profile::Profile> =
    std::sync::LazyLock::new(|| bench_profile("unfenced-single", UNFENCED_SINGLE));

/// The diagnostics [`CHECK_READ_ONLY`] and [`ADVISORY`] as profiles, for pgbench's cells.
static CHECK_READ_ONLY_PROFILE: std::sync::LazyLock<fencing::profile::Profile> =
    std::sync::LazyLock::new(|| bench_profile(CHECK_READ_ONLY, CHECK_READ_ONLY_SQL));
static ADVISORY_PROFILE: std::sync::LazyLock<fencing::profile::Profile> =
    std::sync::LazyLock::new(|| {
        bench_profile(
            ADVISORY,
            "SELECT lab_bench_fenced_advisory(:scope, :part, :content, :writer, :token, :mode)",
        )
    });

/// A write the bench measures: the lab's named writes, [`UNFENCED_SINGLE_PROFILE`], and the
/// pgbench-only diagnostics.
fn bench_write(name: &str) -> Option<(resource::WriteMode, &'static fencing::profile::Profile)> {
    match name {
        "unfenced-single" => Some((resource::WriteMode::Fenced, &UNFENCED_SINGLE_PROFILE)),
        CHECK_READ_ONLY => Some((resource::WriteMode::Fenced, &CHECK_READ_ONLY_PROFILE)),
        ADVISORY => Some((resource::WriteMode::Fenced, &ADVISORY_PROFILE)),
        _ => resource::named_write(name),
    }
}

/// Runs it on the lab's runtime: passed once the table and the files are out, could not run
/// (the error's chain on stderr) otherwise.
pub fn run(args: BenchArgs) -> Ended {
    let result = match crate::runtime() {
        Ok(rt) => rt.block_on(bench(args)),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => Ended::Passed,
        Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
            eprintln!("lab bench: {e}; its servers stopped, its containers removed");
            Ended::Interrupted(e.downcast_ref::<Interrupted>().expect("checked").0)
        }
        Err(e) => {
            eprintln!("lab bench: {e:#}");
            Ended::CouldNotRun
        }
    }
}

/// A bench stopped by SIGINT or SIGTERM, once its testbed was shut down.
#[derive(Debug)]
struct Interrupted(crate::Interruption);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {}", self.0.name())
    }
}

impl std::error::Error for Interrupted {}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let clients: Vec<usize> = WRITERS.to_vec();
    let contenders: Vec<usize> = vec![16, 64, 256];
    let duration = Duration::from_millis(args.duration_ms);
    // The `--version` probes block for a moment: off the async workers.
    let bindir = args.pg_bindir.clone();
    let bins = tokio::task::spawn_blocking(move || PgBinaries::locate(bindir.as_deref())).await??;
    let pgbench = bins.bin("pgbench");
    if !pgbench.is_file() {
        bail!(
            "pgbench is missing beside the server binaries in {}: it ships with them",
            bins.bindir.display()
        );
    }
    std::fs::create_dir_all(&args.evidence_dir).with_context(|| {
        format!(
            "--evidence-dir {}: cannot be made",
            args.evidence_dir.display()
        )
    })?;
    if let Some(recorded) = &args.from_json {
        return render_recorded(recorded, &args.evidence_dir);
    }
    if !args.leases.is_empty() {
        return lease_scaling(args, bins, started).await;
    }
    let params = Params {
        contenders: 256,
        ..Params::default()
    };
    let cluster = ClusterConfig {
        max_connections: 300,
        ..ClusterConfig::new(bins)
    };
    let mut bed = Testbed::start(cluster, params, PathBuf::new()).await?;
    eprintln!(
        "bench: PostgreSQL {}, {} ms per cell after {} warm-up writes per writer",
        bed.cluster()?.binaries().version,
        duration.as_millis(),
        args.warmup
    );

    // Whatever the measurement's outcome, the cluster is stopped cleanly before the verdict — an
    // interruption's too.
    let mut signals = crate::Signals::install()?;
    if let Some(rounds) = args.fence_cost {
        let measured = tokio::select! {
            m = fence_cost::measure(&mut bed, &pgbench, rounds as usize, duration) => m,
            signal = signals.recv() => Err(Interrupted(signal).into()),
        };
        bed.shutdown().await;
        let (table, json) = measured?;
        if let Err(e) = crate::print_stdout(&table) {
            eprintln!("bench: failed to write the table to stdout: {e}");
        }
        let dir = &args.evidence_dir;
        write_atomically(&dir.join("bench-fence-cost.txt"), table.as_bytes())?;
        write_atomically(
            &dir.join("bench-fence-cost.json"),
            json.to_string().as_bytes(),
        )?;
        eprintln!(
            "bench: bench-fence-cost.txt and .json in {}; {:.0} s",
            dir.display(),
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let measured = tokio::select! {
        m = measure(&mut bed, &pgbench, &clients, &contenders, duration, &args) => m,
        signal = signals.recv() => Err(Interrupted(signal).into()),
    };
    bed.shutdown().await;
    let (cells, contention) = measured?;

    let table = render_table(&cells, &contention);
    // A reader that went away (`lab bench | head -1`) loses the table, not the files; any other
    // stdout failure is said, and the files (which hold the same numbers) are still written.
    if let Err(e) = crate::print_stdout(&table) {
        eprintln!("bench: failed to write the table to stdout: {e}");
    }
    let dir = &args.evidence_dir;
    write_atomically(
        &dir.join("bench.json"),
        bench_json(&cells, &contention).to_string().as_bytes(),
    )?;
    write_atomically(&dir.join("bench.svg"), chart(&cells).as_bytes())?;
    write_atomically(&dir.join("bench.txt"), table.as_bytes())?;
    write_page(dir)?;
    eprintln!(
        "bench: bench.json, bench.svg and bench.html in {}; {:.0} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--from-json`: a recorded lease bench rendered again into `dir` — the figures as recorded,
/// the knees and limits by this build's rules.
fn render_recorded(recorded: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(recorded)
        .with_context(|| format!("--from-json {}", recorded.display()))?;
    let cells = lease_scaling::cells_from_json(&serde_json::from_str(&text)?)
        .with_context(|| format!("--from-json {}", recorded.display()))?;
    write_lease_scaling(dir, &cells)?;
    eprintln!(
        "bench: {} cells of {} rendered again into {}",
        cells.len(),
        recorded.display(),
        dir.display()
    );
    Ok(())
}

/// The series `--lease-store` and `--library` name, and the library holders' Python when a
/// library is named.
fn series_of(
    args: &BenchArgs,
) -> anyhow::Result<(Vec<lease_series::Series>, Option<library_clients::Clients>)> {
    let mut series: Vec<lease_series::Series> = Vec::new();
    for name in &args.lease_store {
        // `single`: the lease table, as `lab run --lease-store single` names it.
        let id = match name.as_str() {
            "single" => Ok(StoreId::Postgres),
            other => other.parse::<StoreId>(),
        };
        let kind = fencing::stores::built()
            .find(|k| {
                id == Ok(k.id)
                    && (k.service().is_some()
                        || matches!(k.id, StoreId::Postgres | StoreId::PostgresBatched))
            })
            .with_context(|| {
                format!(
                    "--lease-store {name}: not a lease store of this build; pass single, postgres-batched{}",
                    fencing::stores::built()
                        .filter(|k| k.service().is_some())
                        .map(|k| format!(", {}", k.name()))
                        .collect::<String>()
                )
            })?;
        series.push(lease_series::Series {
            label: kind.name().to_owned(),
            store: kind.id,
            library: None,
        });
    }
    let clients = if args.library.is_empty() {
        None
    } else {
        Some(library_clients::Clients::locate(
            args.python.clone(),
            args.library_dir.clone(),
        )?)
    };
    for id in &args.library {
        let benched = library_clients::benched(id)?;
        let (lib, service) = (benched.id, benched.store);
        let store = fencing::stores::built()
            .find(|k| k.id == service)
            .with_context(|| {
                format!("--library {id} runs on {service}, which this build leaves out (the lock-services feature)")
            })?;
        series.push(lease_series::Series {
            label: format!("{lib} ({service}, Python)"),
            store: store.id,
            library: Some(lib),
        });
    }
    Ok((series, clients))
}

/// `--leases`: the lease-scaling bench ([`lease_scaling`]) on every store named.
async fn lease_scaling(args: BenchArgs, bins: PgBinaries, started: Instant) -> anyhow::Result<()> {
    let (series, clients) = series_of(&args)?;
    if args.holders.contains(&0) || args.leases.contains(&0) {
        bail!("--leases and --holders count from 1");
    }
    let most = *args.holders.iter().max().unwrap_or(&1);
    let cluster = ClusterConfig {
        max_connections: (most as u32 + 20).max(100),
        ..ClusterConfig::new(bins)
    };
    let mut bed = Testbed::start(cluster, Params::default(), PathBuf::new()).await?;
    let duration = Duration::from_millis(args.duration_ms.max(3 * args.renew_ms));
    eprintln!(
        "bench: lease scaling on {} — leases {:?}, holders {:?}, renewals every {} ms (TTL {} ms), {} ms per cell",
        series
            .iter()
            .map(|s| s.label.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        args.leases,
        args.holders,
        args.renew_ms,
        3 * args.renew_ms,
        duration.as_millis()
    );
    // Its lock services' containers go with the testbed, an interruption's too.
    let mut signals = crate::Signals::install()?;
    let measured = tokio::select! {
        m = lease_series::measure(
            &mut bed,
            &series,
            clients.as_ref(),
            &args.leases,
            &args.holders,
            Duration::from_millis(args.renew_ms),
            duration,
        ) => m,
        signal = signals.recv() => Err(Interrupted(signal).into()),
    };
    bed.shutdown().await;
    write_lease_scaling(&args.evidence_dir, &measured?)?;
    eprintln!(
        "bench: bench-leases.json, bench-leases.svg and bench.html in {}; {:.0} s",
        args.evidence_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `bench-leases.md` (also printed), `.json`, `.svg` and the page, of `cells` into `dir`.
fn write_lease_scaling(dir: &std::path::Path, cells: &[lease_scaling::Cell]) -> anyhow::Result<()> {
    let cells = cells.to_vec();
    let table = lease_scaling::render(&cells);
    if let Err(e) = crate::print_stdout(&table) {
        eprintln!("bench: failed to write the table to stdout: {e}");
    }
    write_atomically(
        &dir.join("bench-leases.json"),
        lease_scaling::json(&cells).to_string().as_bytes(),
    )?;
    write_atomically(
        &dir.join("bench-leases.svg"),
        lease_scaling::chart(&cells).as_bytes(),
    )?;
    write_atomically(&dir.join("bench-leases.md"), table.as_bytes())?;
    write_page(dir)
}

/// `bench.html`: the report page of the benches run into `dir` — each one's chart and its table
/// as it printed them (the write modes: `bench.svg`, `bench.txt`; lease scaling:
/// `bench-leases.svg`, `bench-leases.md`), whichever are there.
fn write_page(dir: &std::path::Path) -> anyhow::Result<()> {
    let escape = harness::evidence::escape::html;
    let mut page = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>fencing lab — bench</title>\
         <style>body{font-family:DejaVu Sans,sans-serif;margin:20px}pre{font-size:11px;overflow-x:auto}</style>\
         <h1>What fencing costs, and what a lease costs as locks grow</h1>\
         <p>Measurements of this machine at this moment: compare ratios within one run.</p>",
    );
    for (title, svg, table) in [
        ("Write modes (lab bench)", "bench.svg", "bench.txt"),
        (
            "Lease scaling (lab bench --leases)",
            "bench-leases.svg",
            "bench-leases.md",
        ),
    ] {
        let Ok(text) = std::fs::read_to_string(dir.join(table)) else {
            continue;
        };
        let _ = write!(
            page,
            "<h2>{title}</h2><img src=\"{svg}\" alt=\"{title}\"><pre>{}</pre>",
            escape(&text)
        );
    }
    write_atomically(&dir.join("bench.html"), page.as_bytes())?;
    Ok(())
}

/// Every cell and every contention size, in order, on `lab`'s cluster.
async fn measure(
    bed: &mut Testbed,
    pgbench: &std::path::Path,
    clients: &[usize],
    contenders: &[usize],
    duration: Duration,
    args: &BenchArgs,
) -> anyhow::Result<(Vec<Cell>, Vec<Contention>)> {
    let mut cells = Vec::new();
    for &n in clients {
        cells.push(pgbench_cell(bed, pgbench, n, duration).await?);
        for name in resource::NAMED_WRITES
            .into_iter()
            .chain(["unfenced-single"])
        {
            bed.reset().await?;
            cells.push(write_cell(bed, name, n, duration, args.warmup).await?);
        }
        for name in SAME_SQL {
            bed.reset().await?;
            cells.push(same_sql_cell(bed, pgbench, name, n, duration).await?);
        }
    }
    let mut contention = Vec::new();
    for &c in contenders {
        contention.push(contention_rounds(bed, c, args.rounds as usize).await?);
    }
    Ok((cells, contention))
}

/// `n` writers of the named write `name` (a fenced mode or a control), each on its own
/// connection writing its own part with token 1.
async fn write_cell(
    bed: &Testbed,
    name: &'static str,
    n: usize,
    duration: Duration,
    warmup: usize,
) -> anyhow::Result<Cell> {
    let (mode, profile) = bench_write(name).context("a named write")?;
    let opts = bed.connect_options(
        fencing::schema::Database::Resource,
        fencing::schema::RESOURCE_DB,
        fencing::schema::RESOURCE_ROLE,
    );
    let pool = PgPoolOptions::new()
        .max_connections(n as u32)
        .connect_with(opts)
        .await?;
    // The writers and the wait-event sampler start measuring together.
    let barrier = Arc::new(Barrier::new(n + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (pool, barrier) = (pool.clone(), barrier.clone());
        tasks.spawn(async move {
            let mut conn = pool.acquire().await?;
            let part = format!("part-{i:02}");
            let w = Write {
                scope: SCOPE,
                part: &part,
                content: "bench",
                writer: "bench",
                token: 1,
            };
            for _ in 0..warmup {
                resource::write_on(&mut conn, profile, &w, mode, async {}).await?;
            }
            barrier.wait().await;
            let (start, mut lat, mut rejected) = (Instant::now(), Vec::new(), 0usize);
            while start.elapsed() < duration {
                let t = Instant::now();
                if !resource::write_on(&mut conn, profile, &w, mode, async {}).await? {
                    rejected += 1;
                }
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            anyhow::Ok((lat, start.elapsed(), rejected))
        });
    }
    barrier.wait().await;
    let waits = sample_waits(bed, duration).await?;
    let (mut all, mut longest, mut rejected) = (Vec::new(), Duration::ZERO, 0);
    while let Some(joined) = tasks.join_next().await {
        let (lat, took, rej) = joined??;
        all.extend(lat);
        longest = longest.max(took);
        rejected += rej;
    }
    if rejected > 0 {
        bail!("{name} at {n} writers rejected {rejected} writes holding the current token");
    }
    let writes = all.len();
    let all = sorted(all);
    Ok(Cell {
        name: name.into(),
        clients: n,
        writes,
        per_sec: writes as f64 / longest.as_secs_f64(),
        p50_ms: percentile(&all, 0.50),
        p99_ms: percentile(&all, 0.99),
        waits,
        wal_per_tx: None,
        cpu_us_per_tx: None,
    })
}

/// Samples the resource's active backends' wait events every 10 ms for `duration`; the two most
/// frequent, with their share of all samples: "Lock:transactionid 64%, CPU 30%".
async fn sample_waits(bed: &Testbed, duration: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut total = 0usize;
    while start.elapsed() < duration {
        for wait in
            harness::observe::active_waits(bed.resource.pool(), fencing::schema::RESOURCE_DB)
                .await?
        {
            *counts.entry(wait).or_default() += 1;
            total += 1;
        }
        // The sampling period, not a wait for a state.
        harness::wait::prescribed(Duration::from_millis(10)).await;
    }
    let mut top: Vec<(String, usize)> = counts.into_iter().collect();
    top.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    Ok(top
        .iter()
        .take(2)
        .map(|(w, n)| format!("{w} {:.0}%", 100.0 * *n as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", "))
}

/// The reference: pgbench, one-row UPDATE per transaction, each client its own row.
async fn pgbench_cell(
    bed: &Testbed,
    pgbench: &std::path::Path,
    n: usize,
    duration: Duration,
) -> anyhow::Result<Cell> {
    // The reference table is the bench's own, beside the resource's tables; not the system under test.
    let pool = bed.resource.pool();
    pool.execute("CREATE TABLE IF NOT EXISTS bench_row (id int PRIMARY KEY, v bigint NOT NULL)")
        .await?;
    pool.execute(
        "INSERT INTO bench_row SELECT g, 0 FROM generate_series(1, 64) g ON CONFLICT DO NOTHING",
    )
    .await?;
    let script = "\\set id :client_id + 1\nUPDATE bench_row SET v = v + 1 WHERE id = :id;\n";
    run_pgbench(bed, pgbench, "pgbench", script, &[], n, duration).await
}

/// pgbench running the statement of the one-statement write `name` as the lab's client sends
/// it: the same parameters (pgbench's `-D` variables, bound), client `i` writing part `part-<i>`
/// with token 1 as the lab's writer `i` does — the server's limit for that SQL. Checked to have
/// done the same work: every attempt it recorded accepted, at least one per transaction.
async fn same_sql_cell(
    bed: &Testbed,
    pgbench: &std::path::Path,
    name: &str,
    n: usize,
    duration: Duration,
) -> anyhow::Result<Cell> {
    let written = if name == NO_ROW_LOCK {
        "fenced-shared"
    } else {
        name
    };
    let (_, profile) = bench_write(written).context("a named write")?;
    if name == ADVISORY {
        sqlx::raw_sql(ADVISORY_FUNCTION)
            .execute(bed.resource.pool())
            .await
            .context("failed to create the advisory-lock fence's function")?;
    }
    let fencing::profile::WriteSql::OneStatement(statement) = &profile.resource.write else {
        bail!("{name} is not one statement");
    };
    // The statement as the lab's client sends it, its `$k` placeholders made pgbench's
    // variables — bound as parameters (`-M prepared`: prepared once per connection, as the lab's
    // client prepares and caches its statements) — the part per client. Replaced from the last
    // number down, so that `$1` does not eat the start of `$10`.
    let mut sql = statement.sql().trim().to_owned();
    if name == NO_ROW_LOCK {
        anyhow::ensure!(
            sql.matches("FOR SHARE").count() == 1,
            "fenced-shared's statement takes one FOR SHARE"
        );
        sql = sql.replace("FOR SHARE", "");
    }
    for (k, param) in statement.params().iter().enumerate().rev() {
        let var = match param {
            fencing::profile::Param::Part => {
                "('part-' || lpad(CAST(:client_id AS text), 2, '0'))".to_owned()
            }
            other => format!(":{}", other.as_str()),
        };
        sql = sql.replace(&format!("${}", k + 1), &var);
    }
    let script = format!("{sql};\n");
    let vars = [
        "-M".to_owned(),
        "prepared".to_owned(),
        "-D".to_owned(),
        format!("scope={SCOPE}"),
        "-D".to_owned(),
        "content=bench".to_owned(),
        "-D".to_owned(),
        "writer=bench".to_owned(),
        "-D".to_owned(),
        "token=1".to_owned(),
        "-D".to_owned(),
        format!("mode={}", profile.resource.mode),
    ];
    let cell = run_pgbench(
        bed,
        pgbench,
        &format!("pgbench:{name}"),
        &script,
        &vars,
        n,
        duration,
    )
    .await?;
    // The same work, or the figure means nothing: every transaction pgbench logged wrote its
    // part and recorded an accepted attempt, as the lab's writers' do.
    let (accepted, recorded): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE accepted), count(*) FROM write_attempt WHERE mode = $1",
    )
    .bind(&profile.resource.mode)
    .fetch_one(bed.resource.pool())
    .await?;
    if accepted != recorded || (recorded as usize) < cell.writes {
        bail!(
            "pgbench on {name}'s SQL did not do the lab's work: {accepted} accepted of {recorded} attempts recorded for {} transactions",
            cell.writes
        );
    }
    Ok(cell)
}

/// Runs pgbench's `script` with `n` clients for `duration` on the resource database, with the
/// `extra` options: its tps and its per-transaction latencies as the cell `name`.
async fn run_pgbench(
    bed: &Testbed,
    pgbench: &std::path::Path,
    name: &str,
    script: &str,
    extra: &[String],
    n: usize,
    duration: Duration,
) -> anyhow::Result<Cell> {
    let work = tempfile::tempdir()?;
    let path = work.path().join("script.sql");
    std::fs::write(&path, script)?;
    let secs = duration.as_secs().max(1);
    let cost = ServerCost::start(bed).await?;
    // Bounded by its own -T plus a margin for connecting and writing its logs.
    let out = Spawn::new("pgbench", pgbench)
        .args([
            "-n",
            "-c",
            &n.to_string(),
            "-j",
            &n.min(2).to_string(),
            "-T",
            &secs.to_string(),
            "-l",
        ])
        .args(extra)
        .arg(format!(
            "--log-prefix={}",
            work.path().join("pgbench").display()
        ))
        .arg("-f")
        .arg(&path)
        .arg("-h")
        .arg(bed.cluster()?.socket_dir())
        .args([
            "-p",
            &bed.cluster()?.port().to_string(),
            "-U",
            fencing::schema::RESOURCE_ROLE,
            fencing::schema::RESOURCE_DB,
        ])
        .current_dir(work.path())
        .output(Duration::from_secs(secs + 60))
        .await
        .context("failed to run pgbench")?;
    let (wal, cpu) = cost.spent(bed, &format!("{name} at {n} clients")).await?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{name} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let tps: Option<f64> = text.lines().find_map(|l| {
        l.strip_prefix("tps = ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    });
    let processed: Option<u64> = text.lines().find_map(|l| {
        l.strip_prefix("number of transactions actually processed: ")
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|v| v.parse().ok())
    });
    let tps = match (tps, processed) {
        (Some(tps), _) => tps,
        // pgbench prints no rate when no transaction ended in its window: the cell measured
        // none (seen: a 1 s cell while seven tests loaded two cores). Zero, said so, not an error.
        (None, Some(0)) => {
            eprintln!(
                "lab bench: {name} with {n} client(s) completed no transaction in its {secs} s \
                 (the machine was too busy for a cell this short; --duration-ms gives it longer)"
            );
            0.0
        }
        _ => bail!("{name} printed no tps:\n{}", text.trim()),
    };
    let lat = latencies_ms(work.path())?;

    let writes = lat.len();
    let lat = sorted(lat);
    Ok(Cell {
        name: name.into(),
        clients: n,
        writes,
        per_sec: tps,
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        waits: String::new(),
        wal_per_tx: per_tx(Some(wal as f64), writes),
        cpu_us_per_tx: per_tx(cpu.map(|c| c * 1e6), writes),
    })
}

/// Every transaction's latency in ms, from pgbench's per-transaction logs in `dir`
/// ("client_id transaction_no latency_us script_no epoch epoch_us").
fn latencies_ms(dir: &std::path::Path) -> anyhow::Result<Vec<f64>> {
    // Per-transaction logs: "client_id transaction_no latency_us script_no epoch epoch_us".
    let mut lat = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_string_lossy().starts_with("pgbench.") {
            for line in std::fs::read_to_string(entry.path())?.lines() {
                if let Some(us) = line
                    .split_whitespace()
                    .nth(2)
                    .and_then(|v| v.parse::<f64>().ok())
                {
                    lat.push(us / 1000.0);
                }
            }
        }
    }
    Ok(lat)
}

/// `total` over `writes` transactions; `None` when there were none or no total.
fn per_tx(total: Option<f64>, writes: usize) -> Option<f64> {
    total.filter(|_| writes > 0).map(|t| t / writes as f64)
}

/// What the server spends from a start: the WAL it writes, and its CPU — every process of the
/// cluster, from its postmaster down.
struct ServerCost {
    wal: i64,
    postmaster: Option<u32>,
    children: Option<usize>,
    seconds: Option<f64>,
}

impl ServerCost {
    async fn start(bed: &Testbed) -> anyhow::Result<Self> {
        let postmaster = bed.cluster()?.pid();
        Ok(ServerCost {
            wal: wal_lsn(bed).await?,
            postmaster,
            children: postmaster.map(harness::process::children),
            seconds: postmaster.and_then(harness::process::tree_cpu_seconds),
        })
    }

    /// The WAL bytes written since the start, and the CPU seconds spent — once the backends
    /// that ended meanwhile (a client's, disconnected) are reaped and their CPU is the
    /// postmaster's; `None` where `/proc` could not be read. `what` names the measurement if
    /// the wait runs out.
    async fn spent(self, bed: &Testbed, what: &str) -> anyhow::Result<(i64, Option<f64>)> {
        let wal = wal_lsn(bed).await? - self.wal;
        let Some((pid, before)) = self.postmaster.zip(self.children) else {
            return Ok((wal, None));
        };
        let reaped = harness::wait::until(
            "the backends that served pgbench reaped",
            Duration::from_secs(5),
            || async move { Ok::<_, std::io::Error>(harness::process::children(pid) <= before) },
        )
        .await;
        if let Err(e) = reaped {
            eprintln!("lab bench: {what}: {e} (its CPU per transaction may miss some)");
        }
        let cpu = harness::process::tree_cpu_seconds(pid).zip(self.seconds);
        Ok((wal, cpu.map(|(after, before)| after - before)))
    }
}

/// Where the server's WAL insertion stands, in bytes from its start.
async fn wal_lsn(bed: &Testbed) -> anyhow::Result<i64> {
    Ok(harness::observe::wal_insert_bytes(bed.resource.pool()).await?)
}

/// `rounds` rounds of `c` contenders released by a barrier on a fresh lease each round.
async fn contention_rounds(bed: &Testbed, c: usize, rounds: usize) -> anyhow::Result<Contention> {
    let mut clients = Vec::with_capacity(c);
    for _ in 0..c {
        clients.push(bed.own_lease_client().await?);
    }
    let (mut times, mut one_winner) = (Vec::new(), 0);
    for round in 0..rounds {
        let name = format!("bench-{c}-{round}");
        let barrier = Arc::new(Barrier::new(c + 1));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, client) in clients.iter().enumerate() {
            let (client, barrier, name) = (client.clone(), barrier.clone(), name.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                let won = client
                    .acquire(&name, &format!("c{i}"), Duration::from_secs(60))
                    .await?
                    .is_some();
                anyhow::Ok(won)
            });
        }
        barrier.wait().await;
        let t = Instant::now();
        let mut winners = 0;
        while let Some(joined) = tasks.join_next().await {
            winners += usize::from(joined??);
        }
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        one_winner += usize::from(winners == 1);
    }
    for client in clients {
        client.pool().close().await;
    }
    let times = sorted(times);
    Ok(Contention {
        contenders: c,
        rounds,
        one_winner_rounds: one_winner,
        p50_ms: percentile(&times, 0.50),
        p99_ms: percentile(&times, 0.99),
    })
}

fn reference(cells: &[Cell], name: &str, clients: usize) -> Option<f64> {
    cells
        .iter()
        .find(|c| c.name == name && c.clients == clients)
        .map(|c| c.per_sec)
        // A reference cell that completed nothing is no yardstick.
        .filter(|r| *r > 0.0)
}

/// For the lab's cell of a one-statement mode, pgbench's cell on the same SQL, writers, writes/s.
fn same_sql(cells: &[Cell], c: &Cell) -> Option<f64> {
    SAME_SQL
        .contains(&c.name.as_str())
        .then(|| reference(cells, &format!("pgbench:{}", c.name), c.clients))
        .flatten()
}

fn render_table(cells: &[Cell], contention: &[Contention]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<34} {:>7} {:>10} {:>8} {:>8} {:>9} {:>10} {:>8} {:>9}  waits (pg_stat_activity)",
        "mode",
        "writers",
        "writes/s",
        "p50 ms",
        "p99 ms",
        "×pgbench",
        "×unfenced",
        "×unf-1st",
        "×sameSQL",
    );
    for c in cells {
        let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.2}", c.per_sec / r));
        let _ = writeln!(
            out,
            "{:<34} {:>7} {:>10.0} {:>8.2} {:>8.2} {:>9} {:>10} {:>8} {:>9}  {}",
            c.name,
            c.clients,
            c.per_sec,
            c.p50_ms,
            c.p99_ms,
            ratio(reference(cells, "pgbench", c.clients)),
            ratio(reference(cells, "unfenced", c.clients)),
            ratio(reference(cells, "unfenced-single", c.clients)),
            ratio(same_sql(cells, c)),
            c.waits,
        );
    }
    let _ = writeln!(
        out,
        "×unf-1st: × unfenced-single, the same one statement without the fence (the fence's own \
         cost); ×sameSQL: × pgbench running that mode's own statement (the lab's client's efficiency)"
    );
    for n in [1, 16, 64] {
        if let (Some(shared), Some(base)) = (
            reference(cells, "fenced-shared", n),
            reference(cells, "unfenced-single", n),
        ) {
            let r = shared / base;
            let _ = writeln!(
                out,
                "goal: fenced-shared ≥ 0.95× unfenced-single at {n:>2} writers: {r:.2}× — {}",
                if r >= 0.95 { "met" } else { "NOT met" }
            );
        }
    }
    if let (Some(ours), Some(server)) = (
        reference(cells, "fenced-shared", 16),
        reference(cells, "pgbench:fenced-shared", 16),
    ) {
        let r = ours / server;
        let _ = writeln!(
            out,
            "goal: the lab's client ≥ 0.9× pgbench on fenced-shared's SQL at 16 writers: {r:.2}× — {}",
            if r >= 0.9 { "met" } else { "NOT met" }
        );
    }
    for n in WRITERS {
        for mode in ["fenced-single", "fenced-shared"] {
            if let (Some(one), Some(tx)) = (
                reference(cells, mode, n),
                reference(cells, "fenced-scope", n),
            ) {
                let _ = writeln!(
                    out,
                    "{mode} vs fenced-scope at {n:>2} writers: {:.2}× the writes per second",
                    one / tx
                );
            }
        }
    }
    server_side(cells, &mut out);
    let _ = writeln!(
        out,
        "{:<18} {:>7} {:>10} {:>8} {:>8}",
        "lease contention", "rounds", "1 winner", "p50 ms", "p99 ms"
    );
    for c in contention {
        let _ = writeln!(
            out,
            "{:<18} {:>7} {:>10} {:>8.2} {:>8.2}",
            format!("{} contenders", c.contenders),
            c.rounds,
            format!("{}/{}", c.one_winner_rounds, c.rounds),
            c.p50_ms,
            c.p99_ms
        );
    }
    out
}

/// The server's side of the fence's cost, from pgbench's cells on the same SQL: per writer
/// count, each diagnostic's transactions per second (× unfenced-single), the server's CPU and
/// WAL per transaction; then what the check's read costs alone (the floor of any fence that
/// reads the floor row) and what each fence adds to it.
fn server_side(cells: &[Cell], out: &mut String) {
    const ROWS: [(&str, &str); 5] = [
        ("unfenced-single", "unfenced-single (no check)"),
        (CHECK_READ_ONLY, "the check's read alone (not a fence)"),
        (NO_ROW_LOCK, "fenced-shared without FOR SHARE (not a fence)"),
        ("fenced-shared", "fenced-shared"),
        (ADVISORY, "fenced-advisory (advisory lock, PL/pgSQL)"),
    ];
    for n in WRITERS {
        let cell = |name: &str| {
            cells
                .iter()
                .find(|c| c.name == format!("pgbench:{name}") && c.clients == n)
                .filter(|c| c.per_sec > 0.0)
        };
        let Some(base) = cell("unfenced-single") else {
            continue;
        };
        let figure =
            |v: Option<f64>, unit: &str| v.map_or("?".to_owned(), |v| format!("{v:.0} {unit}"));
        let _ = writeln!(
            out,
            "server side at {n:>2} writers (pgbench on the same SQL: tx/s, × unfenced-single, server CPU per tx, WAL per tx):"
        );
        for (name, label) in ROWS {
            if let Some(c) = cell(name) {
                let _ = writeln!(
                    out,
                    "  {label:<48} {:>7.0}/s {:>5.2}×  {:>7}  {:>6}",
                    c.per_sec,
                    c.per_sec / base.per_sec,
                    figure(c.cpu_us_per_tx, "µs"),
                    figure(c.wal_per_tx, "B")
                );
            }
        }
        let (Some(read), Some(base_cpu)) = (cell(CHECK_READ_ONLY), base.cpu_us_per_tx) else {
            continue;
        };
        let Some(read_cpu) = read.cpu_us_per_tx else {
            continue;
        };
        let added = |name: &str| {
            cell(name).and_then(|c| {
                Some(format!(
                    "{name} {:+.0} µs and {:+.0} B",
                    c.cpu_us_per_tx? - read_cpu,
                    c.wal_per_tx? - read.wal_per_tx?
                ))
            })
        };
        let _ = writeln!(
            out,
            "  the floor at {n:>2} writers: reading the floor row costs {:+.0} µs of server CPU per write ({:.2}× unfenced-single's tx/s); on top of that read: {}",
            read_cpu - base_cpu,
            read.per_sec / base.per_sec,
            ["fenced-shared", ADVISORY]
                .into_iter()
                .filter_map(added)
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

fn bench_json(cells: &[Cell], contention: &[Contention]) -> serde_json::Value {
    json!({
        "writes": cells.iter().map(|c| json!({
            "mode": c.name, "writers": c.clients, "writes": c.writes, "writes_per_sec": c.per_sec,
            "p50_ms": c.p50_ms, "p99_ms": c.p99_ms, "waits": c.waits, "wal_bytes_per_tx": c.wal_per_tx,
            "server_cpu_us_per_tx": c.cpu_us_per_tx,
            "ratio_to_pgbench": reference(cells, "pgbench", c.clients).map(|r| c.per_sec / r),
            "ratio_to_unfenced": reference(cells, "unfenced", c.clients).map(|r| c.per_sec / r),
            "ratio_to_unfenced_single": reference(cells, "unfenced-single", c.clients).map(|r| c.per_sec / r),
            "ratio_to_pgbench_same_sql": same_sql(cells, c).map(|r| c.per_sec / r),
        })).collect::<Vec<_>>(),
        "lease_contention": contention.iter().map(|c| json!({
            "contenders": c.contenders, "rounds": c.rounds, "rounds_with_one_winner": c.one_winner_rounds,
            "round_p50_ms": c.p50_ms, "round_p99_ms": c.p99_ms,
        })).collect::<Vec<_>>(),
    })
}

/// A grouped bar chart: writes per second per mode, one group per writer count, pgbench first.
fn chart(cells: &[Cell]) -> String {
    let names = [
        "pgbench",
        "fenced-scope",
        "fenced-single",
        "fenced-shared",
        "fenced-row",
        "check-then-write",
        "unfenced",
        "unfenced-single",
        "pgbench:fenced-shared",
    ];
    let colors = [
        "#5f6368", "#1f77b4", "#17becf", "#9467bd", "#ff7f0e", "#d62728", "#2ca02c", "#98df8a",
        "#c5b0d5",
    ];
    let max = cells.iter().map(|c| c.per_sec).fold(1.0, f64::max);
    let (w, h, left, top, plot_h) = (1120.0, 380.0, 70.0, 40.0, 260.0);
    let group_w = (w - left - 20.0) / WRITERS.len() as f64;
    let bar_w = group_w / (names.len() as f64 + 1.0);
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/><text x="10" y="20" font-size="14" font-weight="bold">writes/s by write mode and writers — pgbench: a one-row UPDATE; pgbench:fenced-shared: fenced-shared's own SQL</text>"##
    );
    for (g, n) in WRITERS.iter().enumerate() {
        let gx = left + group_w * g as f64;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" font-weight="bold">{n} writer{}</text>"#,
            gx + group_w / 2.0,
            top + plot_h + 36.0,
            if *n == 1 { "" } else { "s" }
        );
        for (i, name) in names.iter().enumerate() {
            let Some(c) = cells.iter().find(|c| c.name == *name && c.clients == *n) else {
                continue;
            };
            let bh = c.per_sec / max * plot_h;
            let x = gx + bar_w * (i as f64 + 0.5);
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{name}, {n} writers: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{:.0}</text>"#,
                top + plot_h - bh,
                bar_w * 0.9,
                colors[i],
                c.per_sec,
                c.p50_ms,
                c.p99_ms,
                x + bar_w * 0.45,
                top + plot_h - bh - 3.0,
                c.per_sec
            );
        }
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#444"/>"##,
        top + plot_h,
        w - 20.0,
        top + plot_h
    );
    // The legend in two rows of five, each entry as wide as the longest name needs.
    for (i, name) in names.iter().enumerate() {
        let (row, col) = (i / 5, i % 5);
        let x = left + 200.0 * col as f64;
        let y = h - 34.0 + 16.0 * row as f64;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{y}" width="10" height="10" fill="{}"/><text x="{}" y="{}">{name}</text>"#,
            colors[i],
            x + 14.0,
            y + 9.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}
