//! The command line as clap parses it: shapes and defaults only. Meaning is checked in
//! [`crate::config`] (and, for `lab chaos`, `crate::chaos`), which read this module; it reads none
//! of theirs. An argument whose absence means something beside its default (`--backend`: naming
//! `embedded` contradicts `--lease-store patroni`, leaving it out does not) is an `Option` here,
//! its default applied where it is read.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use fencing::lease::StoreId;

/// Where the lease store and the resource run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum BackendArg {
    /// One throwaway cluster from the local server binaries holds both databases.
    #[default]
    Embedded,
    /// Each database on a PostgreSQL container of its own, on networks of their own.
    Containers,
}

/// The lease store (`--lease-store`): the lease table — where the lease database lives — or a
/// lock service in a container of its own, each with its own token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LeaseStoreArg {
    /// Where the backend puts it: the embedded cluster, or a container of its own.
    Single,
    /// A Patroni-managed cluster of three PostgreSQL containers on a three-member etcd cluster
    /// (asynchronous replication, Patroni's default); the lab talks to its leader.
    Patroni,
    /// The same with `synchronous_mode: true`: a commit waits for a synchronous standby.
    PatroniSync,
    /// The same with `synchronous_mode_strict: true` as well: commits wait even with no standby.
    PatroniStrict,
    /// Redis 7.0: a key set with SET NX PX and a unique value, the token an INCR of a counter key
    /// taken with the grant (Redisson's fenced lock).
    Redis,
    /// Redis without a token (plain SET NX PX, as most Redis locks are): its fenced experiments
    /// are negative results.
    RedisPlain,
    /// etcd 3.4: a lease on the lock key taken by a transaction; the token is the key's create
    /// revision.
    Etcd,
    /// etcd's lock recipe as concurrency.Session runs it: every lock of a holder on one session
    /// lease, kept alive once per period (one lost lease loses every lock).
    EtcdSession,
    /// ZooKeeper 3.8: an ephemeral sequential node, the session timeout as the TTL; the token is
    /// the node's czxid.
    Zookeeper,
    /// The ZooKeeper lock as a Curator process runs it: every lock of a holder an ephemeral node
    /// of one session, whose heartbeat renews them all (one expired session loses every lock).
    ZookeeperSession,
    /// The same ZooKeeper lock with the node's sequence suffix as the token — a counter of the
    /// lock's container parent, which starts again when ZooKeeper deletes the empty parent (R1):
    /// a flawed token, its fenced experiments negative results.
    ZookeeperSuffix,
    /// PostgreSQL's own session-level advisory lock (pg_try_advisory_lock) on the lease
    /// database, its session's idle_session_timeout as the TTL; no token. No Docker needed.
    PgAdvisory,
    /// The same advisory lock with a counter bumped and committed in the locking session once the
    /// lock is held: the token.
    PgAdvisoryFenced,
    /// MariaDB's named lock (GET_LOCK) on a local MariaDB server the lab starts, its locking
    /// connection's wait_timeout as the TTL (whole seconds); no token. No Docker needed; needs
    /// MariaDB installed and --features lab/mariadb,holder/mariadb.
    MariadbGetlock,
    /// The same named lock with a counter bumped and committed on the locking connection once
    /// the lock is held: the token.
    MariadbGetlockFenced,
    /// The lease table (seed 004's rows) renewed in batches: one statement per holder per
    /// period, every lease it holds in it, as schedulers renew theirs.
    PostgresBatched,
}

impl LeaseStoreArg {
    /// The Patroni cluster's replication mode; `None` for a single server.
    pub fn replication(self) -> Option<scenarios::Replication> {
        use scenarios::Replication;
        match self {
            LeaseStoreArg::Patroni => Some(Replication::Asynchronous),
            LeaseStoreArg::PatroniSync => Some(Replication::Synchronous),
            LeaseStoreArg::PatroniStrict => Some(Replication::SynchronousStrict),
            _ => None,
        }
    }

    /// The lease store it names.
    pub fn store(self) -> StoreId {
        match self {
            LeaseStoreArg::Redis => StoreId::Redis,
            LeaseStoreArg::RedisPlain => StoreId::RedisPlain,
            LeaseStoreArg::Etcd => StoreId::Etcd,
            LeaseStoreArg::EtcdSession => StoreId::EtcdSession,
            LeaseStoreArg::Zookeeper => StoreId::Zookeeper,
            LeaseStoreArg::ZookeeperSession => StoreId::ZookeeperSession,
            LeaseStoreArg::ZookeeperSuffix => StoreId::ZookeeperSuffix,
            LeaseStoreArg::PgAdvisory => StoreId::PgAdvisory,
            LeaseStoreArg::PgAdvisoryFenced => StoreId::PgAdvisoryFenced,
            LeaseStoreArg::MariadbGetlock => StoreId::MariadbGetlock,
            LeaseStoreArg::MariadbGetlockFenced => StoreId::MariadbGetlockFenced,
            LeaseStoreArg::PostgresBatched => StoreId::PostgresBatched,
            LeaseStoreArg::Single
            | LeaseStoreArg::Patroni
            | LeaseStoreArg::PatroniSync
            | LeaseStoreArg::PatroniStrict => StoreId::Postgres,
        }
    }
}

/// What the lab prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Junit,
}

const ABOUT: &str = "The fencing lab: proves, with real processes and a real PostgreSQL, that a \
lease alone cannot stop a paused old holder from writing, and that a fencing token checked at the \
resource does.";

const LONG_ABOUT: &str =
    "The fencing lab: proves, with real processes and a real PostgreSQL, that a \
lease alone cannot stop a paused old holder from writing, and that a fencing token checked at the \
resource does.

A lease decides who may start; only a fencing token checked at the resource decides who may still \
finish. Each experiment (F1, F2, …) injects one fault and checks one property; negative controls \
run the same timeline against a resource with a known flaw and pass only if the flaw shows.

Every run starts its own throwaway PostgreSQL cluster from the local server binaries (Unix socket \
only, removed afterwards) and writes its evidence to a directory: output.txt (what the terminal \
showed) and events.jsonl (every check and timeline step).

Exit status: 0 all checks passed, 1 a check failed, 2 the lab could not run, 130/143 interrupted.";

#[derive(Debug, Parser)]
#[command(name = "lab", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the experiments (all of them unless --only) and write the evidence.
    #[command(
        after_help = "Examples:\n  lab run\n  lab run --only F2,F3 --contenders 32\n  \
                            lab run --only F1 --keep --evidence-dir /tmp/ev\n  \
                            lab run --backend containers --only F1,F4,F8\n  \
                            lab run --pg-versions 13,15,17 --only F1,F2,F3,F4,F5,F6,F7,F8,F9"
    )]
    Run(RunArgs),
    /// List the experiments: id and what each one shows.
    ///
    /// With --markdown, the table the README carries (id, fault, what it shows, where it runs);
    /// with --markdown --long, docs/experiments.md (a paragraph each). Both are generated from
    /// the lab's own registry, and a test fails when the files in the repository are stale.
    #[command(after_help = "Examples:\n  lab list\n  lab list --markdown\n  \
                            lab list --markdown --long > docs/experiments.md")]
    List(ListArgs),
    /// Measure what fencing costs, beside pgbench on the same cluster.
    ///
    /// Every write mode at 1, 4, 16 and 64 writers, lease contention at 16, 64 and 256
    /// contenders, and pgbench on the same cluster as the reference.
    Bench(BenchArgs),
    /// Remove what labs kept (--keep, failed runs) or left behind (a lab killed outright).
    ///
    /// Every cluster directory the lab kept or left, stopping a server still running from one —
    /// and, built with the feature `containers`, the containers, networks and network holds such
    /// labs left. What belongs to running labs is left alone.
    Clean(CleanArgs),
    /// Pauses nobody chose: a seeded nemesis, looping holders, a checker over the history.
    ///
    /// N looping holder processes compete for the lease and write parts of
    /// one scope while a nemesis driven only by the seed freezes them (shorter and longer than
    /// the TTL), kills and restarts them and crashes the cluster. A checker over the recorded
    /// history says whether I2, I3 (in commit order) and durability held; an unfenced control
    /// scope written beside, under the same schedule, must show at least one violation.
    #[command(after_help = "Examples:\n  lab chaos --seed 1 --time 30s\n  \
                      lab chaos --seed 1 --time 30s --mode unfenced     (exits 1, listing violations)\n  \
                      lab chaos --holders 8 --faults pause\n  \
                      lab chaos --sweep 20 --faults pause --time 30s")]
    Chaos(ChaosArgs),
    /// Re-check a saved chaos run offline, from its history.jsonl.
    ///
    /// Reads its history.jsonl (the operations, the faults
    /// and the database's own records the run saved), run the same checker over it and print
    /// the same verdict — no server, no holder. A seed replays a schedule, not the interleavings:
    /// the history is what a failing run is judged on again.
    ///
    /// Exit 0 when the verdict passes, 1 when it does not, 2 when the file cannot be read.
    #[command(after_help = "Examples:\n  lab check evidence/chaos/history.jsonl")]
    Check {
        /// The history a `lab chaos` run wrote into its evidence directory.
        history: PathBuf,
    },
    /// The systems under test as profiles: list, show or check one.
    ///
    /// A profile is TOML: the lease table and its statements, the resource's fence and its write
    /// — or, on MariaDB, seed 000's job lease and runs. List the built-in ones, or check a file
    /// before anything runs with it (on a throwaway server of its dialect).
    #[command(
        after_help = "Examples:\n  lab profile list\n  lab profile show seed004 > mine.toml\n  lab profile check seed004\n  lab profile check seed000\n  \
                      lab profile check my-lock-table.toml     (exit 2 with one line naming the statement)"
    )]
    Profile(ProfileArgs),
    /// Your own holder, checked against the holder protocol (docs/holder-protocol.md).
    ///
    /// The handshake, one holding from acquire to release as the resource recorded it, a holder
    /// orphaned at its write point, the fault points it has, then the experiments that judge a
    /// holder (F4, F10, F12) — each finding in one line.
    ///
    /// Exit 0 when it conforms, 1 with a finding, 2 when the command cannot be started.
    #[command(
        after_help = "Examples:\n  lab holder check --cmd examples/holders/python/holder.py\n  \
                      lab holder check --cmd \"java -cp app.jar my.Holder\""
    )]
    Holder(HolderArgs),
    /// The published lock libraries, frozen as they ship: the library card.
    ///
    /// Each library holder (Curator, kazoo, tooz, redis-py, python-redis-lock, pottery, etcd3gw,
    /// psycopg with an advisory lock: real packages — PyPI's pinned, Curator Debian's — installed by
    /// scripts/ensure-library-holders.sh) through F1, F3, F5, F4, F10, F12 and F16 on the lab's
    /// lock services in containers: can a paused (or cut off) process still write, what does the
    /// library tell it afterwards against the truth at the service, what does it offer to fence
    /// with — and do those answers match what the library's own docstring or source says.
    ///
    /// The card goes to <evidence-dir>/library-card.md; <evidence-dir>/library/ has the runs
    /// (output.txt) and a page with the card in colour and every case's timeline (report.html),
    /// and the card is added to <evidence-dir>/report.html when a run wrote one.
    ///
    /// Exit 0 when every run completed and held, 1 when not, 2 when it could not run (a package
    /// missing, a service that cannot be reached, a holder of another protocol version).
    #[command(
        after_help = "Examples:\n  scripts/ensure-library-holders.sh && lab library\n  \
                            lab library --only kazoo,redis-py"
    )]
    Library(LibraryArgs),
    /// The report card: each design × the experiments that judge a fence: safe, UNSAFE or n/a.
    ///
    /// Each design through the experiments that judge a fence (F1–F4, F6–F8,
    /// F10–F12 on PostgreSQL designs, U1–U5 on MariaDB ones), design × experiment → safe /
    /// UNSAFE (with the failed check that shows it) / n/a (with why), to stdout and
    /// <evidence-dir>/report-card.md. Without --sut: the seeds' own designs (seed004's three
    /// forms and seed000, which must come out safe), the designs modelled on ShedLock, Quartz and
    /// Kubernetes Leases and the exercises' planted flaws (which must not).
    ///
    /// Exit 0 when every design came out as expected, 1 when not, 2 when one could not run.
    #[command(
        after_help = "Examples:\n  lab grade\n  lab grade --sut stale-write.toml\n  lab grade --sut shedlock-style\n  lab grade --lease-store etcd --lease-store redis-plain"
    )]
    Grade {
        /// Grade this profile (a built-in's name or a file); repeatable.
        #[arg(long, value_name = "PROFILE")]
        sut: Vec<String>,
        /// Grade this lock service as the lease store, the lab's own fence at the resource:
        /// redis (its INCR token), redis-plain (no token), etcd, zookeeper; repeatable. Without
        /// --sut or --lease-store the card grades every built-in design and every lock service
        /// of the build (in containers: a Docker engine must answer).
        #[arg(long, value_name = "STORE")]
        lease_store: Vec<StoreId>,
        /// Grade your own holder (docs/holder-protocol.md): one row, the experiments that start
        /// a holder run with this command (its write is its own fence), the others n/a with why;
        /// repeatable. E.g. `--holder-cmd examples/holders/python/holder.py`
        #[arg(long, value_name = "CMD")]
        holder_cmd: Vec<String>,
        /// Where the card goes (report-card.md), and each design's evidence (grade/<design>/).
        #[arg(long, value_name = "DIR", default_value = "evidence")]
        evidence_dir: PathBuf,
    },
    /// For a student: write a profile with a planted flaw, to fix until `lab run --sut` passes.
    ///
    /// A seed's design (seed004, or seed000 on MariaDB) with one flaw planted in its SQL, or a
    /// template with every statement left to write — to fix until `lab run --sut FILE` passes.
    /// Without a name, lists the exercises.
    #[command(
        after_help = "Examples:\n  lab exercise\n  lab exercise stale-write\n  \
                      lab run --only F2,F4,F6,F7 --sut stale-write.toml"
    )]
    Exercise {
        /// The exercise (lab exercise lists them).
        name: Option<String>,
        /// Where to write it (default: ./NAME.toml); an existing file is never overwritten.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// `lab library`'s arguments.
#[derive(Debug, Args)]
pub struct LibraryArgs {
    /// Only these libraries, comma-separated (curator, kazoo, tooz-zookeeper, redis-py,
    /// python-redis-lock, tooz-redis, pottery, etcd3gw, tooz-etcd3gw). Default: every one.
    #[arg(long, value_delimiter = ',', value_name = "LIB")]
    pub only: Vec<String>,
    /// The python of the virtual environment that has the libraries
    /// (scripts/ensure-library-holders.sh prints it).
    #[arg(
        long,
        value_name = "PYTHON",
        default_value = "target/library-holders/venv/bin/python"
    )]
    pub python: PathBuf,
    /// The library holders' directory.
    #[arg(long, value_name = "DIR", default_value = "holder/libraries")]
    pub holders: PathBuf,
    /// Where the card (library-card.md) and the runs' evidence (library/) go.
    #[arg(long, value_name = "DIR", default_value = "evidence")]
    pub evidence_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// A Markdown table: id, fault, what it shows, where it runs (the README's).
    #[arg(long)]
    pub markdown: bool,
    /// With --markdown: a heading and a paragraph per experiment (docs/experiments.md).
    #[arg(long, requires = "markdown")]
    pub long: bool,
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub action: ProfileAction,
}

#[derive(Debug, Args)]
pub struct HolderArgs {
    #[command(subcommand)]
    pub action: HolderAction,
}

#[derive(Debug, Subcommand)]
pub enum HolderAction {
    /// The conformance run: one line per check, what is wrong said in the line.
    Check {
        /// The command that starts your holder; the lab appends the holder's flags. Words are
        /// split at spaces (no quoting); the first is a path or a name on PATH.
        #[arg(long, value_name = "CMD")]
        cmd: String,
        /// Where the experiments' evidence goes (made if missing).
        #[arg(long, value_name = "DIR", default_value = "evidence/holder-check")]
        evidence_dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProfileAction {
    /// The built-in profiles: name, whether the resource sees a token, what the design is.
    List,
    /// Prints a built-in profile's file, comments and all — the start of a profile of your own
    /// (`lab profile show seed004 > mine.toml`, edit, `lab profile check mine.toml`).
    Show {
        /// A built-in profile's name (lab profile list).
        name: String,
    },
    /// Checks a profile: parses it (TOML, every statement's `:name` parameters), then prepares
    /// every statement against scratch databases that hold its schema on a throwaway cluster.
    /// Exit 0 when the server accepted all of them; 2 with one line naming the file, the
    /// statement and the server's own error otherwise. Nothing is left behind.
    Check {
        /// A built-in profile's name (lab profile list) or a file's path.
        profile: String,
        /// The directory of the PostgreSQL server binaries (initdb, postgres, pg_ctl) to use
        /// instead of the ones found on PATH or under /usr/lib/postgresql (a MariaDB profile
        /// runs on the mariadbd found on PATH or in /usr/sbin).
        #[arg(long, value_name = "DIR")]
        pg_bindir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// The nemesis's seed: the same seed (with the same --time, --holders, --faults) replays
    /// the same schedule; the holders' interleavings inside it may differ. Default: drawn now
    /// and printed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long the holders run (30s, 2m, 7500ms; at least 5s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub time: Duration,
    /// The looping holders are this command instead of the lab's own holder, the flags
    /// appended (`--loop-seed` among them): your own client's looping form, in any language
    /// (docs/holder-protocol.md, "The looping form") — e.g. `--holder-cmd
    /// examples/holders/python/holder.py`
    #[arg(long, value_name = "CMD")]
    pub holder_cmd: Option<String>,
    /// How many looping holder processes compete.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=32))]
    pub holders: u64,
    /// How many leases the holders are spread over (holder slot i contends for lease i mod K),
    /// each guarding a scope under test and a control scope of its own at the resource, as a
    /// service holds many locks at once; the checker judges each lease on its own. At most half
    /// the holders. Default: 2, or 1 with fewer than 4 holders.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=16))]
    pub leases: Option<u64>,
    /// The write under test at the scope `chaos` (the control scope is always unfenced): a fenced
    /// mode (fenced-scope, fenced-single, fenced-shared) or a negative control (fenced-row,
    /// check-then-write, unfenced).
    #[arg(long, value_name = "MODE", default_value = "fenced-scope", value_parser = clap::builder::PossibleValuesParser::new(fencing::resource::NAMED_WRITES))]
    pub mode: String,
    /// The system under test, as a PostgreSQL profile (a built-in's name or a TOML file, `lab
    /// profile check`): every holder runs its lease statements, and its write is the one under
    /// test at the scope `chaos` (in place of --mode). The file is checked first. Its lease
    /// table needs seed004's columns (name, holder, token, expires_at): the run's record of the
    /// lease reads them.
    #[arg(long, value_name = "PROFILE", conflicts_with = "mode")]
    pub sut: Option<String>,
    /// The faults the nemesis may inject (comma-separated): pause (SIGSTOP … SIGCONT), kill
    /// (SIGKILL, restarted later), crash (the servers stopped immediately and restarted), drift
    /// (a holder's clock slowed with libfaketime); with --backend containers also delay (a
    /// holder's packets to the resource dropped for a while, then let through: its write
    /// arrives late) and partition (a holder cut off from the lease store for a while; also with
    /// --lease-store redis or etcd, whose service is a host of its own); with
    /// --lease-store patroni… also failover (the leader cut off from its peers, not from its
    /// clients, until Patroni elects another, then let back). Default: every one the backend can
    /// carry out (drift only where libfaketime is installed; the run says when it leaves drift
    /// out).
    #[arg(long, value_name = "FAULTS", value_delimiter = ',')]
    pub faults: Option<Vec<scenarios::chaos::schedule::FaultKind>>,
    /// Where the lease store and the resource run: `embedded` (one throwaway cluster), or
    /// `containers` (each on a PostgreSQL 15 container of its own, reached over TCP, so that the
    /// network between a holder and a server can fail: the delay and partition faults). Needs a
    /// Docker engine and a lab built with --features lab/containers. Default: embedded.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// The lease store. `single`: the backend's (default). `patroni`, `patroni-sync`,
    /// `patroni-strict`: a Patroni-managed cluster of three PostgreSQL containers on etcd,
    /// replicating asynchronously (Patroni's default), with synchronous_mode, or with
    /// synchronous_mode_strict; the holders connect to whichever node is read-write. Implies
    /// --backend containers, and adds the failover fault (the leader cut off from its peers
    /// until Patroni elects another) to the default faults; crash is left out (Patroni replaces
    /// a lost leader, it does not restart it).
    #[arg(long, value_enum, default_value_t = LeaseStoreArg::Single)]
    pub lease_store: LeaseStoreArg,
    /// Where the evidence goes: output.txt, events.jsonl, schedule.txt, history.jsonl,
    /// verdict.md, report.html.
    #[arg(long, value_name = "DIR", default_value = "evidence/chaos")]
    pub evidence_dir: PathBuf,
    /// Seed 004's open question: N runs (seeds --seed … --seed+N-1), then the share of pauses,
    /// by length as a fraction of the TTL, that led to an I3 violation at the unfenced control
    /// (and at the scope under test), with its spread (sweep.md). Try --faults pause.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub sweep: Option<u64>,
    /// The PostgreSQL server binaries to use.
    #[arg(long, value_name = "DIR")]
    pub pg_bindir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CleanArgs {
    /// Also remove the container images the lab built (fencing-lab/postgres:*); the next
    /// container experiment builds them again (about a minute).
    #[arg(long)]
    pub images: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// How long each cell (a mode at a writer count) is measured, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1500, value_parser = clap::value_parser!(u64).range(100..))]
    pub duration_ms: u64,
    /// Writes per writer before each cell's measurement starts.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub warmup: usize,
    /// Rounds per contention size.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
    /// Where bench.json and bench.svg go.
    #[arg(long, value_name = "DIR", default_value = "evidence")]
    pub evidence_dir: PathBuf,
    /// The PostgreSQL server binaries to use (pgbench ships with them).
    #[arg(long, value_name = "DIR")]
    pub pg_bindir: Option<PathBuf>,
    /// Lease scaling instead of the write modes: hold this many leases in all (comma-separated
    /// counts, e.g. 100,1000,10000), spread over --holders, each renewed every --renew-ms; per
    /// cell renewals/s against the offered rate, renew p50/p99, the share that came back expired
    /// and the lease store's CPU; the knee named. Writes bench-leases.json and bench-leases.svg
    #[arg(long, value_delimiter = ',', value_name = "L")]
    pub leases: Vec<usize>,
    /// Instead of the write modes, only what the fence costs on the server: pgbench on the same
    /// SQL for the write with no check, the check's read alone, fenced-shared with and without
    /// its row lock and the advisory-lock fence, at 16 and 64 writers, this many rounds in a
    /// rotating order; medians of each one's tx/s over the unchecked write's in the same round,
    /// of its server CPU and WAL per transaction. Writes bench-fence-cost.txt and .json
    #[arg(long, value_name = "ROUNDS", value_parser = clap::value_parser!(u64).range(1..100), conflicts_with = "leases")]
    pub fence_cost: Option<u64>,
    /// With --leases: how many holders (tasks, each with its own client of the store) share
    /// the leases (comma-separated counts)
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "H",
        default_value = "4,16,64"
    )]
    pub holders: Vec<usize>,
    /// With --leases: the renewal period, in milliseconds (the TTL is three periods, which must
    /// be above the lab's 300 ms safety margin)
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(101..))]
    pub renew_ms: u64,
    /// With --leases: the lease stores, side by side in one run (comma-separated): single (the
    /// lease table, one statement per lease per renewal), postgres-batched (the same rows, one
    /// statement per holder per period) and the lock services of the build (redis, etcd,
    /// etcd-session, zookeeper, zookeeper-session; a Docker engine must answer)
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "STORE",
        default_value = "single"
    )]
    pub lease_store: Vec<String>,
    /// With --leases: also hold the leases through these published libraries' own clients
    /// (comma-separated: redis-py, python-redis-lock, pottery, tooz-redis, etcd3gw, kazoo), each
    /// on its lock service, one Python process per holder (holder/libraries/libbench.py) — a
    /// row per library beside the lab's Rust client on the same service, its clients' CPU the
    /// library's cost. Needs scripts/ensure-library-holders.sh and a Docker engine
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    pub library: Vec<String>,
    /// With --library: the Python that has the libraries (scripts/ensure-library-holders.sh
    /// prints it).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/library-holders/venv/bin/python"
    )]
    pub python: PathBuf,
    /// Instead of measuring: render a recorded lease bench (its bench-leases.json) again into
    /// --evidence-dir — the figures as measured, the knees and what limited each cell by this
    /// build's rules
    #[arg(long, value_name = "FILE", conflicts_with_all = ["leases", "fence_cost"])]
    pub from_json: Option<PathBuf>,
    /// With --library: the library holders' directory (libbench.py).
    #[arg(long, value_name = "DIR", default_value = "holder/libraries")]
    pub library_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run only these experiments, in this order (comma-separated ids, see `lab list`).
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub only: Option<Vec<String>>,

    /// The gate for a pull request's CI: the fewest experiments that still kill every planted
    /// bug of the mutation map (each SQL mutant of scripts/sql-mutants.txt, each broken variant
    /// of the lab), each in every fenced mode — computed by scripts/gate.py from
    /// evidence/mutants.md and evidence/broken-checks.tsv, not chosen by hand. The full run stays
    /// the default
    #[arg(long, conflicts_with = "only")]
    pub gate: bool,

    /// Every holder the run starts is this command instead of the lab's own holder, with the
    /// holder's flags appended: your own lock client, in any language, speaking the holder
    /// protocol (docs/holder-protocol.md) — e.g. `--holder-cmd "python3
    /// examples/holders/python/holder.py"`. Words are split at spaces (no quoting); the first is a
    /// path or a name on PATH
    #[arg(long, value_name = "CMD")]
    pub holder_cmd: Option<String>,

    /// Where the evidence goes (made if missing).
    #[arg(long, value_name = "DIR", default_value = "evidence")]
    pub evidence_dir: PathBuf,

    /// Keep the cluster's directory (data, socket dir, server log) after the run. It is always
    /// kept after a failing run.
    #[arg(long)]
    pub keep: bool,

    /// Fail the run when any case says skip: for a gate, where an experiment that could not run
    /// here (no engine, a fault point your holder refused, a store this build lacks) must not
    /// pass as if it had judged something. Without it, a skip is reported and the run can still
    /// exit 0.
    #[arg(long)]
    pub strict: bool,

    /// How many experiments run at once, each on a cluster of its own (the output stays in
    /// registry order). Those that crash or fail over a server, or measure timing that load
    /// would distort (F3, F8, F13, F14), run alone. Default: the number of cores. Always 1 with
    /// --backend containers or --tcp.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: Option<u64>,

    /// The classroom: stop at each phase of each experiment's timeline (A holds, A frozen, the
    /// lease expired, B wrote, A resumed, …), print what just happened, the SQL that shows the
    /// state and the psql command that connects to the running cluster, and go on at Enter.
    /// Ctrl-C stops the run and leaves nothing behind (no holder stays frozen). One experiment at
    /// a time, on the embedded cluster; the evidence is the same as without it. Try
    /// `lab run --only F4 --step`.
    #[arg(long)]
    pub step: bool,

    /// Where the lease store and the resource run. `embedded`: one throwaway cluster from the
    /// local server binaries, over its Unix socket. `containers`: each database on a PostgreSQL
    /// container of its own (PostgreSQL 15, image built here from Debian packages on first use,
    /// about a minute), on private networks with no route between the two servers, reached over
    /// TCP; runs P0 and F1–F9, the others say skip. Needs a Docker engine and a lab built with
    /// --features lab/containers (./run.sh does both when an engine answers). Default: embedded.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,

    /// The lease store. `single`: the backend's (default). `patroni`: a Patroni-managed cluster
    /// of three PostgreSQL containers on a three-member etcd cluster, Patroni's default
    /// asynchronous replication, the lab and the holders talking to its leader; the resource on a
    /// container of its own; `patroni-sync`, `patroni-strict`: the same with synchronous_mode
    /// (and synchronous_mode_strict). Implies --backend containers (P0 and F1–F9 but F8 run on
    /// it; F17 makes clusters of its own in every mode, whatever this says). `redis`,
    /// `redis-plain`, `etcd`, `zookeeper`: a lock service in a container of its own (image built
    /// here on first use), each with its own token — the resource stays PostgreSQL, its floor fed
    /// by that token; the experiments that do not apply to a lock service say skip with why.
    /// Needs a Docker engine and --features lab/lock-services. `pg-advisory`,
    /// `pg-advisory-fenced`: PostgreSQL's advisory lock on the lab's own server; `mariadb-getlock`,
    /// `mariadb-getlock-fenced`: MariaDB's GET_LOCK on a local MariaDB the lab starts — the
    /// databases' own locks, which last as long as their session, no Docker needed.
    #[arg(long, value_enum, default_value_t = LeaseStoreArg::Single)]
    pub lease_store: LeaseStoreArg,

    /// With the lease table as the store: the lock services on which F4 and F5 run again, each
    /// as a case of its own (F4-redis), comma-separated, or `none`. Default: every lock service
    /// this build has a client for (--features lab/lock-services) and whose lock has a token —
    /// redis, etcd, zookeeper — each in a container of its own (without a Docker engine those
    /// cases say skip), and pg-advisory-fenced, PostgreSQL's advisory lock on the lab's own
    /// server, in every build.
    #[arg(long, value_name = "STORES")]
    pub again_on: Option<String>,

    /// One container run per PostgreSQL major version (13: Debian bullseye, 15: bookworm, 17:
    /// trixie), each with its own evidence in <evidence-dir>/pgN, then a matrix of version ×
    /// experiment (matrix.md). Implies --backend containers.
    #[arg(long, value_delimiter = ',', value_name = "VERSIONS")]
    pub pg_versions: Option<Vec<u32>>,

    /// The PostgreSQL server binaries to use (a directory holding initdb and postgres, version
    /// 15 or newer). Default: found on PATH, via pg_config, or under /usr/lib/postgresql.
    #[arg(long, value_name = "DIR")]
    pub pg_bindir: Option<PathBuf>,

    /// The cluster's port number. It names the Unix socket; it is a TCP port only with --tcp.
    #[arg(long, allow_negative_numbers = true, default_value_t = harness::server::postgres::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,

    /// Also listen on 127.0.0.1:PORT. Off by default: the lab needs no network.
    #[arg(long)]
    pub tcp: bool,

    /// The TTL of a holder that renews in the background (F1, F3, F4, F5), in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        allow_negative_numbers = true,
        default_value_t = 1500
    )]
    pub ttl_ms: u64,

    /// The short TTL of experiments that wait for expiry right after acquiring (F2), in ms.
    #[arg(
        long,
        value_name = "MS",
        allow_negative_numbers = true,
        default_value_t = 500
    )]
    pub short_ttl_ms: u64,

    /// How often a holder renews, in milliseconds. Must be below TTL minus margin.
    #[arg(
        long,
        value_name = "MS",
        allow_negative_numbers = true,
        default_value_t = 400
    )]
    pub renew_ms: u64,

    /// The safety margin: the local deadline is TTL minus this, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        allow_negative_numbers = true,
        default_value_t = 300
    )]
    pub margin_ms: u64,

    /// What goes to stdout: the text lines (default), the event log as JSON lines, or the JUnit
    /// XML at the end. The evidence directory always gets all of them.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// The correct write mode the fence-dependent experiments (F4, F6, F7, F11, F14–F16) check:
    /// fenced-scope (floor UPDATE, then the data, in one transaction), fenced-single (the same
    /// in one statement) or fenced-shared (one statement; writers of the current token share the
    /// floor row, only an advance takes it exclusively). Default: all three — each of those
    /// experiments runs with fenced-scope, then again with each of the others as a case of its
    /// own (F4-fenced-single, F4-fenced-shared). Naming one runs only it.
    #[arg(long, value_name = "MODE")]
    pub fenced_mode: Option<String>,

    /// The system under test, as a profile (`lab profile list`, `lab profile check`): a
    /// built-in's name or a TOML file whose lease statements every holder runs and whose write
    /// the fence-dependent experiments check in place of the lab's fence. The file is checked
    /// first (every statement prepared on a throwaway cluster): a bad one is one line, exit 2.
    /// A design is judged on what its profile says it has: without a token at the lease or a
    /// floor at the resource, those checks are noted n/a; without a token at the resource, F6
    /// and F7 say skip. A MariaDB profile (dialect mariadb, seed 000's shape: seed000) is run by
    /// the U-series, and the F-series says skip; a PostgreSQL one the other way round.
    /// Default: seed004 (and its one-statement forms, --fenced-mode) for the F-series, seed000
    /// for the U-series.
    #[arg(long, value_name = "PROFILE", conflicts_with = "fenced_mode")]
    pub sut: Option<String>,

    /// How many contenders race for the lease in F3.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = 16
    )]
    pub contenders: usize,
}

/// Parses a duration as `30s`, `2m`, `1500ms` or plain seconds (`lab chaos --time`: at least 5s).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write 30s, 2m or 1500ms"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("{text:?}: the units are ms, s and m")),
    };
    if d < Duration::from_secs(5) {
        return Err(format!(
            "{text:?} is too short: a chaos run lasts at least 5s"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7500ms"), Ok(Duration::from_millis(7500)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert!(parse_duration("1s").unwrap_err().contains("too short"));
        assert!(parse_duration("3h").unwrap_err().contains("units"));
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("not a duration"));
    }

    #[test]
    fn a_backend_named_is_told_from_one_left_out() {
        let backend = |argv: &[&str]| match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Run(args)) => args.backend,
            Ok(Command::Chaos(args)) => args.backend,
            other => panic!("{other:?}"),
        };
        assert_eq!(backend(&["lab", "run"]), None);
        assert_eq!(
            backend(&["lab", "run", "--backend", "embedded"]),
            Some(BackendArg::Embedded)
        );
        assert_eq!(
            backend(&["lab", "run", "--backend=embedded"]),
            Some(BackendArg::Embedded)
        );
        assert_eq!(backend(&["lab", "chaos"]), None);
        assert_eq!(
            backend(&["lab", "chaos", "--backend", "containers"]),
            Some(BackendArg::Containers)
        );
    }
}
