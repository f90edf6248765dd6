//! The resolved configuration: everything checked and found before any side effect but one
//! (making the evidence directory, which is undone if the run cannot start).

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use fencing::profile::{Dialect, Profile, Sut};
use fencing::resource::{self, WriteMode};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::{Backend, Case, Params, Scenario, Testbed};

use crate::args::{BackendArg, Format, LeaseStoreArg, RunArgs};

/// A run, ready to go.
pub struct Config {
    pub scenarios: Vec<&'static dyn Scenario>,
    pub params: Params,
    pub cluster: ClusterConfig,
    /// One run per backend: one, or one per `--pg-versions` entry (then a matrix).
    pub backends: Vec<Backend>,
    pub holder_bin: PathBuf,
    /// The arguments before the holder's flags (`--holder-cmd`); empty for the lab's holder.
    pub holder_prefix: Vec<std::ffi::OsString>,
    /// `--holder-cmd` as given: the holders are the user's.
    pub holder_cmd: Option<String>,
    pub evidence_dir: PathBuf,
    /// Whether this run made the evidence directory (and may remove it if it stays empty).
    made_evidence_dir: bool,
    pub keep: bool,
    /// `--strict`: any case that says skip fails the run.
    pub strict: bool,
    /// How many labs (clusters) run experiments at once.
    pub jobs: usize,
    /// `--step`: stop at each phase of a timeline until Enter (one job, embedded).
    pub step: bool,
    /// Nothing on stdout (`lab grade` runs several designs and prints only its card); the
    /// evidence files are written all the same.
    pub quiet: bool,
    /// Keep the servers of a failing run for inspection (not for `lab grade`, where a flawed
    /// design failing is the expected answer; its evidence stays).
    pub keep_failed: bool,
    pub format: Format,
    command_line: String,
    /// Read before anything runs (it starts `git`, which blocks for a moment).
    git_revision: String,
    /// The MariaDB of the U-series, as `mariadbd --version` names it (or why there is none).
    mariadb: String,
}

/// The other fences each fence-dependent experiment runs again with ([`Params::again_with`]):
/// every fence the lab offers is gated unless one was named (`named`) — or the holders are the
/// user's (`--holder-cmd`), whose write is their own fence whatever the mode's name.
fn again_with(named: bool, args: &RunArgs) -> Vec<Arc<Profile>> {
    if named || args.holder_cmd.is_some() {
        return Vec::new();
    }
    resource::FENCED_MODES[1..]
        .iter()
        .filter_map(|(mode, _)| resource::fenced_mode_profile(mode))
        .map(|p| Arc::new(p.clone()))
        .collect()
}

/// The lock services F4 and F5 run again on (`--again-on`): every one of the build with a
/// token by default — and the database's fenced advisory lock, on the lab's own server —, none
/// when a store was named.
fn again_on(args: &RunArgs) -> anyhow::Result<Vec<StoreId>> {
    // A second design on a service already repeated (etcd-session beside etcd,
    // zookeeper-session beside zookeeper) is repeated only when asked (--again-on etcd-session).
    let offered = || {
        fencing::stores::built()
            .filter(|k| k.sound && (k.service().is_some() || k.freed_on_disconnect))
    };
    let by_default = |k: &&fencing::lease::StoreKind| {
        !matches!(k.id, StoreId::EtcdSession | StoreId::ZookeeperSession)
    };
    match args.again_on.as_deref() {
        // A holder of the user's runs its own lease client: F4 and F5 are not repeated on the
        // lab's lock services unless asked.
        None if args.holder_cmd.is_some() => Ok(Vec::new()),
        None if args.lease_store == LeaseStoreArg::Single => {
            Ok(offered().filter(by_default).map(|k| k.id).collect())
        }
        None | Some("none") => Ok(Vec::new()),
        Some(_) if args.lease_store != LeaseStoreArg::Single => {
            bail!("--again-on repeats F4 and F5 on lock services when the lease table is the store: drop --lease-store, or --again-on")
        }
        Some(list) => list
            .split(',')
            .map(|name| {
                let id = name.trim().parse::<StoreId>().ok();
                offered()
                    .find(|k| Some(k.id) == id)
                    .map(|k| k.id)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "--again-on {name}: not a lock of this build whose token holds; pass \
                         some of {} (or none){}",
                            offered().map(|k| k.name()).collect::<Vec<_>>().join(", "),
                            if offered().next().is_none() {
                                " — this build has none: build with --features lab/lock-services"
                            } else {
                                ""
                            }
                        )
                    })
            })
            .collect(),
    }
}

/// A TCP port on 127.0.0.1 that the system has free now: a cluster that listens on TCP for a
/// holder of the user's (JDBC has no Unix-socket transport) without meeting another run's.
pub fn free_port() -> Option<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .ok()
        .map(|a| a.port())
}

/// The run's arguments with every default, as `lab run` alone has them. A command that runs
/// experiments itself (`lab grade`, `lab holder check`) sets the fields it needs on this value,
/// typed, instead of writing a command line to be parsed again.
pub fn run_defaults() -> RunArgs {
    use clap::Parser as _;
    match crate::args::Cli::try_parse_from(["lab", "run"]).map(|cli| cli.command) {
        Ok(crate::args::Command::Run(args)) => args,
        other => unreachable!("`lab run` alone parses as a run: {other:?}"),
    }
}

/// A run another command makes (`lab grade`'s per design, `lab holder check`'s): its settings
/// ([`run_defaults`] and the fields it set) resolved as the command line's are, its output to
/// the evidence only (quiet) and no servers kept when it fails.
pub fn inner_run(args: RunArgs) -> anyhow::Result<Config> {
    let cfg = resolve(args)?;
    Ok(Config {
        quiet: true,
        keep_failed: false,
        ..cfg
    })
}

/// Checks the arguments, finds the server binaries and makes sure the evidence directory can
/// be written. Every error is one line that names the problem and the fix.
pub fn resolve(args: RunArgs) -> anyhow::Result<Config> {
    // The fence the run gates, resolved once: a fenced mode's built-in profile (all three in
    // turn unless one was named), or the profile --sut names (below).
    let fence = match args.fenced_mode.as_deref() {
        None => None,
        Some("sut") => bail!(
            "--fenced-mode sut: name the profile with --sut FILE (or a built-in, lab profile list)"
        ),
        Some(mode) => match resource::named_write(mode) {
            Some((WriteMode::Fenced, profile)) => Some(profile),
            Some(_) => bail!(
                "--fenced-mode {mode} is a negative control, not a fence: pass fenced-scope, \
                 fenced-single or fenced-shared"
            ),
            None => bail!(
                "--fenced-mode {mode}: no such fenced mode; pass fenced-scope, fenced-single or \
                 fenced-shared"
            ),
        },
    };
    let scenarios = match args.gate.then(gate).as_ref().or(args.only.as_ref()) {
        Some(ids) => scenarios::select(ids).map_err(anyhow::Error::msg)?,
        None => scenarios::ALL.to_vec(),
    };
    let params = Params {
        case: Case {
            store: args.lease_store.store(),
            ttl: Duration::from_millis(args.ttl_ms),
            sut: Arc::new(fence.unwrap_or(Profile::seed004()).clone()),
            again_with_fence: false,
        },
        short_ttl: Duration::from_millis(args.short_ttl_ms),
        renew: Duration::from_millis(args.renew_ms),
        margin: Duration::from_millis(args.margin_ms),
        contenders: args.contenders,
        // F4 and F5 again on every lock service this build has a client for (with a token),
        // unless a store was named.
        again_on: again_on(&args)?,
        again_with: again_with(fence.is_some(), &args),
        ..Params::default()
    };
    // The system under test: a PostgreSQL profile is the fence every fence-dependent experiment
    // runs once (a built-in seed004 form reads as its fenced mode); a MariaDB one is the
    // U-series' job lease. The series on the other server says skip.
    let params = match &args.sut {
        None => params,
        Some(arg) => {
            let sut = Sut::load(arg).map_err(|e| anyhow::anyhow!("--sut {e}"))?;
            if args.backend.unwrap_or_default() != BackendArg::Embedded
                || args.pg_versions.is_some()
                || args.lease_store != LeaseStoreArg::Single
            {
                bail!("--sut runs on the embedded cluster for now: drop --backend containers, --lease-store and --pg-versions");
            }
            match sut {
                // Without MariaDB support the U-series says skip, with why and the fix (a
                // built-in design runs so, in `lab grade` too; a file cannot be checked then).
                Sut::Job(jobs) => Params {
                    jobs: Arc::new(jobs),
                    sut_dialect: Some(Dialect::Mariadb),
                    again_with: Vec::new(),
                    again_on: Vec::new(),
                    ..params
                },
                Sut::Pg(profile) => {
                    let params = Params {
                        sut_dialect: Some(Dialect::Postgres),
                        again_with: Vec::new(),
                        again_on: Vec::new(),
                        ..params
                    };
                    Params {
                        case: Case {
                            sut: Arc::new(profile),
                            ..params.case
                        },
                        ..params
                    }
                }
            }
        }
    };
    // Stepping through a timeline is for reading it: each experiment once, in one fenced mode.
    let params = if args.step {
        Params {
            again_with: Vec::new(),
            again_on: Vec::new(),
            ..params
        }
    } else {
        params
    };
    params.validate().map_err(anyhow::Error::msg)?;
    // A holder of the user's may have no Unix-socket client (JDBC): the cluster listens on
    // 127.0.0.1:--port too, and then runs one job (the jobs' clusters would share the port).
    let tcp = args.tcp || args.holder_cmd.is_some();
    // Without --tcp, a port the system has free (so that two such runs at once do not meet).
    let port = if tcp && !args.tcp && args.port == harness::server::postgres::DEFAULT_PORT {
        free_port().unwrap_or(args.port)
    } else {
        args.port
    };
    if tcp {
        // Found now, before anything starts: the server would only say so in its log.
        std::net::TcpListener::bind(("127.0.0.1", port)).map_err(|e| {
            anyhow::anyhow!(
                "--port {port}: cannot listen on 127.0.0.1 ({e}); pass another --port{}",
                if args.tcp {
                    ", or drop --tcp"
                } else {
                    " (with --holder-cmd the cluster listens on TCP too)"
                }
            )
        })?;
    }
    let replication = args.lease_store.replication();
    let patroni = replication.is_some();
    if patroni && args.pg_versions.is_some() {
        bail!("--lease-store patroni runs PostgreSQL 15 (Debian bookworm's Patroni): drop --pg-versions");
    }
    // `--backend embedded` named contradicts these; left out, it gives way.
    let embedded_named = args.backend == Some(BackendArg::Embedded);
    if patroni && embedded_named {
        bail!("--lease-store patroni runs on containers: drop --backend embedded");
    }
    let backend = if patroni {
        BackendArg::Containers
    } else {
        args.backend.unwrap_or_default()
    };
    let backends = match (&args.pg_versions, backend) {
        (Some(versions), BackendArg::Containers | BackendArg::Embedded) => {
            if versions.is_empty() {
                bail!("--pg-versions needs at least one major version (13, 15 or 17)");
            }
            let mut seen = Vec::new();
            for &v in versions {
                if harness::server::postgres::debian_suite_for(v).is_none() {
                    bail!(
                        "--pg-versions: PostgreSQL {v} is not shipped by a Debian suite the lab \
                         builds images from; pass 13 (bullseye), 15 (bookworm) or 17 (trixie)"
                    );
                }
                if seen.contains(&v) {
                    bail!("--pg-versions names {v} twice; name each version once");
                }
                seen.push(v);
            }
            if embedded_named {
                bail!("--pg-versions runs on containers: drop --backend embedded");
            }
            versions
                .iter()
                .map(|&pg_major| Backend::Containers {
                    pg_major,
                    patroni: None,
                })
                .collect()
        }
        (None, BackendArg::Embedded) => vec![Backend::Embedded],
        (None, BackendArg::Containers) => vec![Backend::Containers {
            pg_major: 15,
            patroni: replication,
        }],
    };
    if args.step && backends != [Backend::Embedded] {
        bail!("--step runs on the embedded cluster (its psql command connects to it): drop --backend containers, --lease-store and --pg-versions");
    }
    if backends != [Backend::Embedded] && !cfg!(feature = "containers") {
        bail!(
            "--backend containers, --lease-store patroni and --pg-versions need a lab built with the containers feature: \
             start a Docker engine and run ./run.sh (it builds with --features lab/containers when \
             one answers), or cargo build --features lab/containers"
        );
    }
    let bins = PgBinaries::locate(args.pg_bindir.as_deref())?;
    let (holder_bin, holder_prefix) =
        harness::holder::holder_for(args.holder_cmd.as_deref()).map_err(anyhow::Error::msg)?;
    let cluster = ClusterConfig {
        port,
        listen_tcp: tcp,
        max_connections: params.max_connections(),
        ..ClusterConfig::new(bins)
    };

    let dir = args.evidence_dir;
    let made_evidence_dir = !dir.exists();
    if dir.exists() && !dir.is_dir() {
        bail!(
            "--evidence-dir {}: exists and is not a directory; pass a directory",
            dir.display()
        );
    }
    fs::create_dir_all(&dir).with_context(|| {
        format!(
            "--evidence-dir {}: cannot be made; pass a writable directory",
            dir.display()
        )
    })?;
    let probe = tempfile::Builder::new()
        .prefix(".write-probe")
        .tempfile_in(&dir);
    if let Err(e) = probe {
        if made_evidence_dir {
            let _ = fs::remove_dir(&dir);
        }
        bail!(
            "--evidence-dir {}: cannot be written ({e}); pass a writable directory",
            dir.display()
        );
    }
    // One cluster per job: with TCP they would share a port, and containers are heavy; one
    // experiment at a time while a reader steps through them.
    let jobs = if tcp || args.step || backends != [Backend::Embedded] {
        1
    } else {
        args.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n as usize,
        )
    };
    Ok(Config {
        scenarios,
        params,
        cluster,
        backends,
        holder_bin,
        holder_prefix,
        holder_cmd: args.holder_cmd.clone(),
        evidence_dir: dir,
        made_evidence_dir,
        keep: args.keep,
        strict: args.strict,
        jobs,
        step: args.step,
        quiet: false,
        keep_failed: true,
        format: args.format,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        git_revision: git_revision(),
        mariadb: mariadb_binaries(),
    })
}

impl Config {
    /// Undoes the one side effect of [`resolve`] when the run could not start.
    pub fn remove_evidence_dir_if_made_and_empty(&self) {
        if self.made_evidence_dir {
            let _ = fs::remove_dir(&self.evidence_dir);
        }
    }

    /// The environment record: what ran, on what, with which parameters. It heads the output
    /// and goes to `environment.json`.
    pub async fn environment(&self, bed: &Testbed) -> Vec<(String, String)> {
        let p = &self.params;
        let bins = self.cluster.bins.clone();
        let mut env = vec![
            (
                "lab".to_owned(),
                format!("fencing lab {}", env!("CARGO_PKG_VERSION")),
            ),
            ("git_revision".to_owned(), self.git_revision.clone()),
            ("command_line".to_owned(), self.command_line.clone()),
            (
                "date".to_owned(),
                bed.lease_table
                    .db_clock()
                    .await
                    .unwrap_or_else(|e| format!("unknown ({e})")),
            ),
            ("kernel".to_owned(), kernel()),
            (
                "postgresql_binaries".to_owned(),
                format!("{} ({})", bins.version, bins.bindir.display()),
            ),
            ("backend".to_owned(), bed.describe_servers()),
            ("mariadb_binaries".to_owned(), self.mariadb.clone()),
        ];
        if let Some(service) = bed.describe_service() {
            env.push(("lease_store".to_owned(), service));
        }
        if !p.again_on.is_empty() {
            env.push((
                "again_on".to_owned(),
                format!(
                    "F4 and F5 again on the locks {} (a lock service each in a container of its own, started on first use; an advisory lock on the lab's own server; each one's version and settings in each case's first note)",
                    p.again_on.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let names = [
            "fsync",
            "synchronous_commit",
            "wal_level",
            "default_transaction_isolation",
            "max_connections",
            "listen_addresses",
        ];
        match bed.admin_pool(fencing::schema::Database::Lease).await {
            Ok(admin) => match harness::observe::settings(&admin, &names).await {
                Ok(settings) => env.extend(settings),
                Err(e) => env.push(("settings".into(), format!("unknown ({e})"))),
            },
            Err(e) => env.push(("settings".into(), format!("unknown ({e})"))),
        }
        env.push((
            "parameters".to_owned(),
            format!(
                "ttl={}ms short_ttl={}ms renew={}ms margin={}ms contenders={} wait_timeout={}s fenced_mode={}{}",
                p.case.ttl.as_millis(),
                p.short_ttl.as_millis(),
                p.renew.as_millis(),
                p.margin.as_millis(),
                p.contenders,
                p.wait_timeout.as_secs(),
                p.case.fence_label(),
                p.again_with
                    .iter()
                    .map(|m| format!(" then {}", Params::fence_label_of(m)))
                    .collect::<String>()
            ),
        ));
        if p.sut_dialect == Some(Dialect::Mariadb) {
            let j = &p.jobs;
            env.push((
                "system_under_test".to_owned(),
                format!(
                    "{} ({}; a job-lease design on MariaDB, run by the U-series): {}",
                    j.name, j.origin, j.about
                ),
            ));
        }
        if p.case.fence_label() == "sut" {
            env.push((
                "system_under_test".to_owned(),
                format!(
                    "{} ({}; its write recorded as {}): {}",
                    p.case.sut.name, p.case.sut.origin, p.case.sut.resource.mode, p.case.sut.about
                ),
            ));
        }
        let ids: Vec<&str> = self.scenarios.iter().map(|s| s.spec().id).collect();
        env.push(("scenarios".to_owned(), ids.join(",")));
        env.push((
            "jobs".to_owned(),
            format!(
                "{} (experiments at once, each on a cluster of its own; F3, F8, F13, F14 alone)",
                self.jobs
            ),
        ));
        env
    }
}

/// The lab's git revision (`+dirty` with uncommitted changes), read from the checkout the lab
/// binary was built in.
fn git_revision() -> String {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
        .unwrap_or_default();
    let git = |args: &[&str]| {
        harness::process::Spawn::new("git", "git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .output_blocking()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(rev) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{rev}+dirty"),
            _ => rev,
        },
        None => "unknown (not run from a git checkout)".into(),
    }
}

/// The MariaDB server the U-series would start: its `--version` line and path, or why none.
fn mariadb_binaries() -> String {
    #[cfg(feature = "mariadb")]
    {
        match harness::server::mariadb::MariaBinaries::locate() {
            Ok(bins) => bins.version,
            Err(e) => format!("none: {e}"),
        }
    }
    #[cfg(not(feature = "mariadb"))]
    {
        "not built in (the U-series needs the cargo feature mariadb)".to_owned()
    }
}

/// The kernel, as `/proc` names it.
fn kernel() -> String {
    let read = |p: &str| {
        fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    format!(
        "{} {}",
        read("/proc/sys/kernel/ostype"),
        read("/proc/sys/kernel/osrelease")
    )
}

/// The gate's experiment ids (`lab run --gate`): scripts/gate.py's answer from the mutation map,
/// written to gate.txt (a test checks that it is still the script's answer).
pub fn gate() -> Vec<String> {
    include_str!("gate.txt")
        .trim()
        .split(',')
        .map(str::to_owned)
        .collect()
}
