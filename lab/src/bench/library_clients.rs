//! `lab bench --leases … --library ID,…`: the lease bench's holders through a published lock
//! library's own client instead of the lab's Rust one. Each holder is a Python
//! process, `holder/libraries/libbench.py`, in the library holders' virtual environment
//! (`scripts/ensure-library-holders.sh`): it takes its leases and renews them with the library's
//! own calls on the lab's schedule, against the same lock service container, so that a row of
//! the table compares like for like with the lab's client on that service — and its clients'
//! CPU column is the library's cost.
//!
//! The lab starts H of them, waits until each says `ACQUIRED`, opens the window (`WINDOW ms=D`
//! on each one's stdin, the CPU of the store and of the processes read), collects each
//! `RESULT` and reads the CPU again; closing their stdin ends them, and every one is stopped on
//! every path (a [`ChildProcess`] is killed when dropped).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use harness::process::{ChildProcess, Spawn, Stream};
use scenarios::Testbed;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

use super::lease_scaling::{cell_of, Cell, Opened, Seen, ACQUIRE_LIMIT};

/// One library the bench drives: one with a renewal of its own (an extend, a lease refresh, a
/// session, a heartbeat).
#[derive(Debug)]
pub struct Benched {
    /// Its name, as `--library` and the card name it.
    pub id: &'static str,
    /// The lock service it runs on, by the lab's store there.
    pub store: StoreId,
    /// Whether it renews a process's locks in one call per period (a session, a heartbeat).
    pub batched: bool,
}

/// The libraries the bench drives.
pub const BENCHED: &[Benched] = &[
    Benched {
        id: "redis-py",
        store: StoreId::Redis,
        batched: false,
    },
    Benched {
        id: "python-redis-lock",
        store: StoreId::Redis,
        batched: false,
    },
    Benched {
        id: "pottery",
        store: StoreId::Redis,
        batched: false,
    },
    Benched {
        id: "tooz-redis",
        store: StoreId::Redis,
        batched: true,
    },
    Benched {
        id: "etcd3gw",
        store: StoreId::Etcd,
        batched: false,
    },
    Benched {
        id: "kazoo",
        store: StoreId::Zookeeper,
        batched: true,
    },
];

/// The library card's libraries the bench leaves out, and why.
pub const NOT_BENCHED: &[(&str, &str)] = &[
    ("curator", "a JVM client whose holder is one process per lock; a process's locks share its ZooKeeper session, as kazoo's row shows"),
    ("tooz-zookeeper", "tooz's ZooKeeper lock is kazoo's, renewed by the same session"),
    ("tooz-etcd", "tooz's etcd lock is etcd3gw's lease refresh, one request per lock"),
    ("psycopg-advisory", "a session-level advisory lock has nothing to renew: it lasts as long as its connection"),
];

/// Where the library holders' Python and the bench's holder are.
#[derive(Debug, Clone)]
pub struct Clients {
    pub python: PathBuf,
    pub script: PathBuf,
}

impl Clients {
    /// The virtual environment's `python` and `dir/libbench.py`, or what to run to have them.
    pub fn locate(python: PathBuf, dir: PathBuf) -> anyhow::Result<Clients> {
        let script = dir.join("libbench.py");
        if !python.exists() {
            bail!(
                "--library needs the library holders' Python at {}: run scripts/ensure-library-holders.sh (or pass --python)",
                python.display()
            );
        }
        if !script.exists() {
            bail!(
                "no {}: run the lab from the repository's root",
                script.display()
            );
        }
        Ok(Clients { python, script })
    }
}

/// The library `id` the bench drives, or an error naming the ones it drives.
pub fn benched(id: &str) -> anyhow::Result<&'static Benched> {
    if let Some((_, why)) = NOT_BENCHED.iter().find(|(l, _)| *l == id) {
        bail!("--library {id}: not in the lease bench: {why}");
    }
    BENCHED.iter().find(|b| b.id == id).with_context(|| {
        let ids: Vec<&str> = BENCHED.iter().map(|b| b.id).collect();
        format!("--library {id}: the bench drives {}", ids.join(", "))
    })
}

/// One running holder: the process, its stdin and its stdout's lines.
struct Running {
    child: ChildProcess,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Running {
    /// The next line starting with `word`, skipping none: any other line, or the end, is the
    /// holder failing (with its stderr).
    async fn expect(&mut self, word: &str) -> anyhow::Result<String> {
        let line = self.lines.next_line().await?;
        match line {
            Some(l) if l.starts_with(word) => Ok(l[word.len()..].trim().to_owned()),
            other => bail!(
                "{} said {:?} where {word} was due; its stderr: {}",
                self.child.name(),
                other.unwrap_or_else(|| "nothing (it ended)".into()),
                self.child.stderr()
            ),
        }
    }
}

/// One cell: `holders` library holders of `lib` holding `leases` on the testbed's service.
#[allow(clippy::too_many_arguments)]
pub async fn one_cell(
    bed: &Testbed,
    clients: &Clients,
    lib: &str,
    label: &str,
    n: usize,
    leases: usize,
    holders: usize,
    renew: Duration,
    duration: Duration,
) -> anyhow::Result<Cell> {
    let endpoint = bed
        .service
        .as_ref()
        .map(|s| s.endpoint())
        .context("the library's lock service is not running")?;
    let root = super::lease_scaling::store_root(bed).await;
    let started = Instant::now();
    let mut running = Vec::with_capacity(holders);
    for i in 0..holders.min(leases) {
        let names = super::lease_scaling::names_of(n, i, leases, holders);
        let mut child = Spawn::new(format!("{lib}-holder-{i}"), &clients.python)
            .arg(&clients.script)
            .args(["--library", lib, "--store-endpoint", &endpoint])
            .args([
                "--holder",
                &format!("holder-{i}"),
                "--names",
                &names.join(","),
            ])
            .args(["--ttl-ms", &(3 * renew.as_millis()).to_string()])
            .args(["--renew-ms", &renew.as_millis().to_string()])
            .stdin(Stream::Piped)
            .stdout(Stream::Piped)
            .capture_stderr()
            .spawn()?;
        let stdout = child.take_stdout().context("no stdout")?;
        running.push(Running {
            stdin: child.take_stdin(),
            lines: BufReader::new(stdout).lines(),
            child,
        });
    }
    let outcome = measure(&mut running, root, started + renew, duration).await;
    // Their stdin closed, they end; one still running after 5 s is killed (a failed cell's at
    // once): none outlives its cell.
    for r in &mut running {
        r.stdin = None;
        let ended = outcome.is_ok()
            && matches!(r.child.wait_exit(Duration::from_secs(5)).await, Ok(Some(_)));
        if !ended {
            r.child.crash().await;
        }
    }
    let (seen, opened, after) = outcome?;
    Ok(cell_of(
        label,
        leases,
        holders,
        renew,
        duration,
        BENCHED.iter().any(|b| b.id == lib && b.batched),
        seen,
        &opened,
        after,
    ))
}

type Measured = (Vec<Seen>, Opened, (Option<f64>, Option<f64>));

/// Every holder's `ACQUIRED` (within [`ACQUIRE_LIMIT`]), the window opened at the earliest at
/// `earliest`, every holder's `RESULT`, and the CPU of the store and the holders at both ends.
async fn measure(
    running: &mut [Running],
    root: Option<u32>,
    earliest: Instant,
    duration: Duration,
) -> anyhow::Result<Measured> {
    let acquired = scenarios::join_all(running.iter_mut().map(|r| r.expect("ACQUIRED")));
    tokio::time::timeout(ACQUIRE_LIMIT, acquired)
        .await
        .with_context(|| {
            format!(
                "the holders had not taken their leases {} s after the start",
                ACQUIRE_LIMIT.as_secs()
            )
        })?
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The timeline's own wait: the first period, when every lease is due for its first renewal.
    harness::wait::prescribed_until(earliest).await;
    let pids: Vec<u32> = running.iter().map(|r| r.child.pid()).collect();
    let clients_cpu = || {
        pids.iter()
            .map(|&p| harness::process::cpu_seconds(p))
            .sum::<Option<f64>>()
    };
    let opened = Opened {
        at: Instant::now(),
        store_cpu: root.and_then(harness::process::tree_cpu_seconds),
        client_cpu: clients_cpu(),
    };
    for r in running.iter_mut() {
        let stdin = r.stdin.as_mut().context("stdin")?;
        stdin
            .write_all(format!("WINDOW ms={}\n", duration.as_millis()).as_bytes())
            .await?;
        stdin.flush().await?;
    }
    let results = scenarios::join_all(running.iter_mut().map(|r| r.expect("RESULT")));
    let results = tokio::time::timeout(duration + Duration::from_secs(30), results)
        .await
        .context("the holders did not report the window's renewals 30 s after its end")?;
    let after = (
        root.and_then(harness::process::tree_cpu_seconds),
        clients_cpu(),
    );
    let mut seen = Vec::new();
    for r in results {
        let v: serde_json::Value = serde_json::from_str(&r?)?;
        let floats = |k: &str| -> Vec<f64> {
            v[k].as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        let count = |k: &str| v[k].as_u64().unwrap_or(0) as usize;
        seen.push(Seen {
            latencies_ms: floats("latencies_ms"),
            lags_ms: floats("lags_ms"),
            ok: count("ok"),
            expired: count("expired"),
            errors: count("errors"),
            acquire_s: v["acquire_s"].as_f64().unwrap_or(f64::NAN),
        });
    }
    Ok((seen, opened, after))
}
