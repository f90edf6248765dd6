//! The lock libraries people ship, frozen as they ship: each library holder — a real
//! package from PyPI, used as its own README shows, in `holder/libraries/` — through the
//! experiments that apply to a library's lock, on the lab's lock service in a container:
//!
//! - **F1**: one holding from acquire to release: the service's own record shows it, the write is
//!   accepted, the release ends well and frees the lock;
//! - **F5** (unfenced) and **F4** (fenced with the library's token, where it has one): A frozen
//!   at its write point until the service itself ends its holding, B takes the lock and writes,
//!   A is thawed — it asks its library the library's own question, writes, releases. The lab sets
//!   the library's answer beside the truth at the service ([`truth`]) and judges the write at
//!   the resource;
//! - **F12**: A killed with SIGKILL while it holds the lock: the time until the service frees
//!   it, against the TTL;
//! - **F16**: A cut off from the service, not paused ([`partitioned`]): what its library tells
//!   it while it cannot reach the service, and its write through the resource it still reaches.
//!
//! A library that exposes nothing ordered to fence with reports `token=none`: its F4 is "cannot
//! fence" — not run, never a pass, never an UNSAFE for lacking the token alone. What each run
//! showed becomes a row of the library card ([`card`]).

pub mod card;
pub mod docs;
mod partitioned;
pub mod truth;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::lease::StoreId;
use fencing::resource::WriteMode;
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, HolderSpec, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request, Token};

use docs::Docs;

use crate::kit::steps::{go_and_thaw, lab_step, list, states, step};
use crate::testbed::{HOLDER_A, HOLDER_B, SCOPE};
use crate::Testbed;

/// One published lock library on one service: the holder file that uses it and what it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Library {
    /// The card's name for it: `kazoo`, `tooz-redis`, …
    pub id: &'static str,
    /// Its package on PyPI (its version is read from the installed package).
    pub package: &'static str,
    /// The holder file in `holder/libraries/`.
    pub file: &'static str,
    /// The lease store it runs on (`--store`).
    pub store: StoreId,
    /// What it exposes to fence with, in words; `None`: nothing ordered (`token=none`).
    pub fence: Option<&'static str>,
    /// The library's own ownership question, as its holder asks it.
    pub question: &'static str,
    /// Where the lab reads what the library says its question answers ([`docs`]).
    pub docs: Docs,
    /// Why, by its source, its answer can differ from the service's record: the card shows it
    /// where a run's answer did.
    pub why: &'static str,
}

/// Every library holder, in the card's order.
pub const LIBRARIES: &[Library] = &[
    Library {
        id: "kazoo",
        package: "kazoo",
        file: "kazoo_lock.py",
        store: StoreId::Zookeeper,
        fence: Some("the lock node's czxid (ordered: the ensemble's zxid)"),
        question: "lock.is_acquired",
        docs: Docs::Python("kazoo.recipe.lock:Lock.is_acquired"),
        why: "a field the lock sets when acquire() returns and clears only in release(); nothing clears it when ZooKeeper ends the session and deletes the lock node — kazoo leaves that to the application, which must listen to the client's state (`zk.add_listener`, KazooState.LOST)",
    },
    Library {
        id: "curator",
        package: "curator-recipes",
        file: "curator_mutex.sh",
        store: StoreId::Zookeeper,
        fence: Some("the lock node's czxid (ordered: the ensemble's zxid)"),
        question: "mutex.isOwnedByCurrentThread()",
        docs: Docs::Quoted {
            text: "Returns true if the mutex is acquired by the calling thread",
            from: "InterProcessMutex.isOwnedByCurrentThread(), its javadoc in Curator's source (the jar ships none)",
        },
        why: "it reads the mutex's own record of its threads (`threadData`, in the JVM's memory), which nothing clears when the session ends — Curator's docs ask the application to add a ConnectionStateListener and treat SUSPENDED and LOST as the lock lost",
    },
    Library {
        id: "tooz-zookeeper",
        package: "tooz",
        file: "tooz_lock.py",
        store: StoreId::Zookeeper,
        fence: None,
        question: "lock.is_still_owner()",
        docs: Docs::Python("tooz.drivers.zookeeper:ZooKeeperLock.is_still_owner"),
        why: "",
    },
    Library {
        id: "redis-py",
        package: "redis",
        file: "redis_py_lock.py",
        store: StoreId::Redis,
        fence: None,
        question: "lock.owned()",
        docs: Docs::Python("redis.lock:Lock.owned"),
        why: "",
    },
    Library {
        id: "python-redis-lock",
        package: "python-redis-lock",
        file: "python_redis_lock.py",
        store: StoreId::Redis,
        fence: None,
        question: "lock.get_owner_id()==lock.id",
        docs: Docs::Python("redis_lock:Lock.get_owner_id"),
        why: "",
    },
    Library {
        id: "tooz-redis",
        package: "tooz",
        file: "tooz_lock.py",
        store: StoreId::Redis,
        fence: None,
        question: "lock.is_still_owner()",
        docs: Docs::Python("tooz.drivers.redis:RedisLock.is_still_owner"),
        why: "",
    },
    Library {
        id: "pottery",
        package: "pottery",
        file: "pottery_redlock.py",
        store: StoreId::Redlock,
        fence: None,
        question: "lock.locked()>0",
        docs: Docs::Python("pottery:Redlock.locked"),
        why: "",
    },
    Library {
        id: "etcd3gw",
        package: "etcd3gw",
        file: "etcd3gw_lock.py",
        store: StoreId::Etcd,
        fence: Some("the lock key's create_revision (ordered: etcd's revision)"),
        question: "lock.is_acquired()",
        docs: Docs::Python("etcd3gw.lock:Lock.is_acquired"),
        why: "",
    },
    Library {
        id: "tooz-etcd3gw",
        package: "tooz",
        file: "tooz_lock.py",
        store: StoreId::Etcd,
        fence: None,
        question: "lock.is_still_owner()",
        docs: Docs::Python("tooz.drivers.etcd3gw:Etcd3Lock.is_still_owner"),
        why: "",
    },
    Library {
        id: "psycopg-advisory",
        package: "psycopg",
        file: "psycopg_advisory.py",
        store: StoreId::PgAdvisory,
        fence: None,
        question: "pg_locks.granted",
        docs: Docs::Quoted {
            text: "granted: True if lock is held, false if lock is awaited",
            from: "the pg_locks view, PostgreSQL's documentation (psycopg has no lock API: the application asks the server on its locking session)",
        },
        why: "",
    },
    Library {
        id: "tooz-postgresql",
        package: "tooz",
        file: "tooz_database.py",
        store: StoreId::PgAdvisory,
        fence: None,
        question: "lock.is_still_owner()",
        docs: Docs::Python("tooz.drivers.pgsql:PostgresLock.is_still_owner"),
        why: "",
    },
    Library {
        id: "tooz-mysql",
        package: "tooz",
        file: "tooz_database.py",
        store: StoreId::MariadbGetlock,
        fence: None,
        question: "lock.is_still_owner()",
        docs: Docs::Python("tooz.drivers.mysql:MySQLLock.is_still_owner"),
        why: "",
    },
];

/// The server `lib` reaches over a Unix socket (the lab's own PostgreSQL, the named locks'
/// MariaDB), which F16's iptables rules cannot hold; `None` for a lock service over TCP.
fn over_a_socket(lib: &Library) -> Option<&'static str> {
    if on_the_lab_database(lib) {
        Some("its embedded PostgreSQL")
    } else if lib.store.service() == Some(fencing::lease::Service::Mariadb) {
        Some("the named locks' local MariaDB")
    } else {
        None
    }
}

/// Whether `lib` runs on the lab's own PostgreSQL (an advisory lock), not on a lock service.
pub fn on_the_lab_database(lib: &Library) -> bool {
    lib.store.service().is_none() && !lib.store.is_redlock()
}

/// The library `id`, or an error listing them.
pub fn library(id: &str) -> anyhow::Result<&'static Library> {
    LIBRARIES.iter().find(|l| l.id == id).with_context(|| {
        let ids: Vec<&str> = LIBRARIES.iter().map(|l| l.id).collect();
        format!(
            "no library holder named {id}; the library holders: {}",
            ids.join(", ")
        )
    })
}

/// Where the library holders are and the Python that has their packages.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The virtual environment's python (`scripts/ensure-library-holders.sh` prints it).
    pub python: PathBuf,
    /// `holder/libraries/`.
    pub dir: PathBuf,
    /// The servers a library runs on when they are not the testbed's lock service: Redlock's
    /// (`redlock`: pottery over N Redis servers), their endpoints comma-separated.
    pub servers: Option<(StoreId, String)>,
}

impl Installed {
    /// How to start `lib`'s holder as `name`, writing `content` in `mode`.
    fn spec(
        &self,
        bed: &Testbed,
        lib: &Library,
        name: &str,
        content: &str,
        mode: WriteMode,
    ) -> HolderSpec {
        let mut spec = bed.holder_spec(name, content, mode, true);
        if lib.file.ends_with(".sh") {
            // A JVM library: its launcher compiles and starts it.
            spec.bin = self.dir.join(lib.file);
            spec.prefix = Vec::new();
        } else {
            spec.bin = self.python.clone();
            spec.prefix = vec![self.dir.join(lib.file).into_os_string()];
        }
        if let Some((store, endpoints)) = &self.servers {
            spec.flags.store = store.name().to_owned();
            spec.flags.store_endpoint = Some(endpoints.clone());
        }
        if on_the_lab_database(lib) {
            // The lab's lease database, as a libpq URI over its Unix socket.
            spec.flags.store_endpoint = Some(format!(
                "postgresql:///{}?host={}&port={}",
                fencing::schema::LEASE_DB,
                spec.flags.socket_dir.display(),
                spec.flags.port
            ));
        }
        spec
    }

    /// The installed version of `package`, read off its `.dist-info` directory in the virtual
    /// environment's site-packages (`<venv>/bin/python` → `<venv>/lib/python3.*/site-packages`),
    /// or why it cannot be.
    pub fn version(&self, package: &str) -> anyhow::Result<String> {
        let venv = self
            .python
            .parent()
            .and_then(Path::parent)
            .context("the python is not in a virtual environment's bin/")?;
        let wanted = format!("{}-", package.to_lowercase().replace('-', "_"));
        let lib = venv.join("lib");
        for python in std::fs::read_dir(&lib).with_context(|| format!("no {}", lib.display()))? {
            let site = python?.path().join("site-packages");
            let Ok(entries) = std::fs::read_dir(&site) else {
                continue;
            };
            for entry in entries {
                let name = entry?.file_name().to_string_lossy().to_lowercase();
                if let Some(version) = name
                    .strip_prefix(&wanted)
                    .and_then(|rest| rest.strip_suffix(".dist-info"))
                {
                    return Ok(version.to_owned());
                }
            }
        }
        // A JVM library from Debian's packages: its jar's name carries its version.
        let java = Path::new("/usr/share/java");
        if let Ok(entries) = std::fs::read_dir(java) {
            for entry in entries {
                let name = entry?.file_name().to_string_lossy().into_owned();
                if let Some(version) = name
                    .strip_prefix(&format!("{package}-"))
                    .and_then(|rest| rest.strip_suffix(".jar"))
                {
                    return Ok(version.to_owned());
                }
            }
        }
        bail!(
            "the package {package} is not installed in {} nor in {} (scripts/ensure-library-holders.sh installs it)",
            venv.display(),
            java.display()
        )
    }
}

/// One observation for the card: what it says and the evidence line it was read off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cell {
    /// What the run concluded: the cell's colour and the card's advice follow from it, never
    /// from its words.
    pub verdict: Verdict,
    pub said: String,
    pub evidence: String,
}

impl Cell {
    fn new(verdict: Verdict, said: impl Into<String>, evidence: impl Into<String>) -> Cell {
        Cell {
            verdict,
            said: said.into(),
            evidence: evidence.into(),
        }
    }

    /// A stale write's cell: accepted (in `accepted_words`), or rejected.
    fn stale_write(accepted: bool, accepted_words: &str, write: impl Into<String>) -> Cell {
        if accepted {
            Cell::new(Verdict::StaleAccepted, accepted_words, write)
        } else {
            Cell::new(Verdict::StaleRejected, "rejected", write)
        }
    }

    /// A run that failed before it could judge: the error as its evidence.
    fn could_not_run(e: &anyhow::Error) -> Cell {
        Cell::new(Verdict::CouldNotRun, "could not run", format!("{e:#}"))
    }
}

/// What a cell of the card concluded, set where the run judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Not run (the column's experiment does not apply, or nothing ran).
    #[default]
    NotRun,
    /// The run failed before it could judge.
    CouldNotRun,
    /// F1's one holding passed, or failed.
    Passes,
    Fails,
    /// F3: one winner at a time in every round, or not.
    OneWinner,
    SeveralWinners,
    /// A stale write (F5 unfenced, F4 fenced) accepted, or rejected.
    StaleAccepted,
    StaleRejected,
    /// F4: the library exposes nothing ordered to fence with.
    CannotFence,
    /// F10: its check caught the pause (nothing written), missed it (wrote while another held
    /// the lock), raised instead of answering (`not_implemented`: the library does not offer
    /// the question), or it wrote with no other holder.
    Caught,
    Missed,
    Raised {
        not_implemented: bool,
    },
    Wrote,
    /// F12: the service freed the killed holder's lock, or did not.
    Freed,
    NotFreed,
    /// F16: asked while cut off — whether it answered before the partition was lifted, whether
    /// it said the lock was held — and whether its stale write was accepted.
    CutOff {
        answered_cut_off: bool,
        said_held: bool,
        stale_accepted: bool,
    },
    /// An answer the card shows as said (the question after the pause, a release): judged
    /// elsewhere, if at all.
    Answered,
    /// A release after the loss that returned True: the application is not told.
    ReleaseReturnedTrue,
}

/// What the runs of one library showed: a row of the card.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub f1: Cell,
    pub f3: Cell,
    pub f10: Cell,
    pub unfenced: Cell,
    pub fenced: Cell,
    pub told: Cell,
    /// The library's answer after the pause against the service's record (`None`: it raised).
    pub told_agrees: Option<bool>,
    /// The same, asked while cut off from the service (F16).
    pub cut_off_agrees: Option<bool>,
    pub release: Cell,
    pub killed: Cell,
    pub partitioned: Cell,
    /// Why the library's holder could not even start here ([`probe`]): nothing ran.
    pub unstartable: Option<String>,
}

/// What one paused run showed.
struct Paused {
    accepted: bool,
    write: String,
    asked: Option<(String, String)>,
    truth_when_asked: Option<String>,
    a_owner: String,
    release: (bool, String),
}

/// The events of one holding up to its write point: token, key, owner.
async fn up_to_the_write_point(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &mut Holder,
    actor: &str,
) -> anyhow::Result<(Token, String, String)> {
    let (token, key, owner) = holding(bed, rec, h, actor).await?;
    let (at, ready) = h
        .next(&format!("{actor} at its write point"), EVENT_TIMEOUT)
        .await?;
    step(bed, rec, at, actor, "waits at the write point", &ready).await;
    if !matches!(ready, Event::AtWritePoint { token: t, .. } if t == token) {
        bail!(h.unexpected(&format!("AT_WRITE_POINT token={token}"), &ready));
    }
    Ok((token, key, owner))
}

/// A holding's first two lines: `ACQUIRED` (its token) and `HOLDING` (its key and owner).
async fn holding(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &mut Holder,
    actor: &str,
) -> anyhow::Result<(Token, String, String)> {
    let (at, acquired) = h.next(&format!("{actor}'s acquire"), EVENT_TIMEOUT).await?;
    step(bed, rec, at, actor, "acquire", &acquired).await;
    let Event::Acquired { token } = acquired else {
        bail!(h.unexpected("ACQUIRED token=T|none", &acquired));
    };
    let (_, holding) = h.next(&format!("{actor}'s HOLDING"), EVENT_TIMEOUT).await?;
    rec.note(format!("{actor}: {holding}"));
    let Event::Holding { key, owner } = holding else {
        bail!(h.unexpected("HOLDING key=K owner=O", &holding));
    };
    Ok((token, key, owner))
}

/// Who holds `key` at the library's service now, by the service's own record.
async fn truth(bed: &Testbed, installed: &Installed, key: &str) -> anyhow::Result<Option<String>> {
    if let Some((store, endpoints)) = &installed.servers {
        return truth::owner(*store, endpoints, key).await;
    }
    if bed.service.is_none() && !bed.lease_is_the_table() {
        return truth::advisory_owner(bed.lease_table.pool(), key).await;
    }
    let service = bed
        .service
        .as_ref()
        .context("the library runs need a lock service")?;
    truth::owner(bed.case().store, &service.endpoint(), key).await
}

/// Whether the service no longer shows `owner` holding `key` (a wait's condition).
async fn not_holding(
    bed: &Testbed,
    installed: &Installed,
    key: &str,
    owner: &str,
) -> std::io::Result<bool> {
    match truth(bed, installed, key).await {
        Ok(now) => Ok(now.as_deref() != Some(owner)),
        Err(e) => Err(std::io::Error::other(format!("{e:#}"))),
    }
}

fn shown(owner: &Option<String>) -> String {
    owner.clone().unwrap_or_else(|| "nobody".to_owned())
}

/// The events after the go-line: the question's answer, the write, the release.
async fn after_go(
    bed: &Testbed,
    installed: &Installed,
    rec: &mut Recorder,
    h: &mut Holder,
    actor: &str,
    key: &str,
) -> anyhow::Result<(Option<(String, String)>, Option<String>, Event)> {
    let (at, asked) = h
        .next(&format!("{actor}'s question to its library"), EVENT_TIMEOUT)
        .await?;
    let truth_now = truth(bed, installed, key).await?;
    step(bed, rec, at, actor, "asks its library", &asked).await;
    let asked = match asked {
        Event::Asked { question, answer } => Some((question, answer)),
        other => bail!(h.unexpected("ASKED question=Q answer=A", &other)),
    };
    let (at, write) = h.next(&format!("{actor}'s write"), EVENT_TIMEOUT).await?;
    step(bed, rec, at, actor, "write", &write).await;
    if !matches!(write, Event::Write { .. }) {
        bail!(h.unexpected("WRITE accepted=B token=T", &write));
    }
    Ok((asked, truth_now, write))
}

async fn release(
    bed: &Testbed,
    rec: &mut Recorder,
    h: &mut Holder,
    actor: &str,
) -> anyhow::Result<(bool, String)> {
    let (at, ended) = h.next(&format!("{actor}'s release"), EVENT_TIMEOUT).await?;
    step(bed, rec, at, actor, "release", &ended).await;
    match ended {
        Event::ReleaseEnded { ok, said } => Ok((ok, said)),
        other => bail!(h.unexpected("RELEASE_ENDED ok=B said=…", &other)),
    }
}

/// F1 for `lib`: one holding, acquire to release, on the service's own record.
pub async fn normal_path(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> anyhow::Result<Cell> {
    bed.reset().await?;
    let mode = mode_of(lib);
    let mut a = Holder::spawn(&installed.spec(bed, lib, HOLDER_A, "rows=200(A)", mode)).await?;
    let (token, key, owner) = up_to_the_write_point(bed, rec, &mut a, "A").await?;
    let held = truth(bed, installed, &key).await?;
    rec.check_that(
        format!("the service's own record shows A's holding at {key}"),
        held.as_deref() == Some(owner.as_str()),
        format_args!("{key} held by {}", shown(&held)),
    );
    rec.check_that(
        format!(
            "{}: the token A reports is {}",
            lib.id,
            lib.fence
                .map_or("none: nothing to fence with", |_| "a number")
        ),
        token.value().is_some() == lib.fence.is_some(),
        format_args!("token={token}"),
    );
    a.send(Request::Go).await?;
    let (_, _, write) = after_go(bed, installed, rec, &mut a, "A", &key).await?;
    let accepted = matches!(write, Event::Write { accepted: true, .. });
    rec.check_that("A's write is accepted", accepted, &write);
    let (ok, said) = release(bed, rec, &mut a, "A").await?;
    rec.check_that("A's release ends well", ok, format_args!("said={said}"));
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        "A exits",
        &describe(Some(exit::WROTE)),
        &describe(Some(code)),
    );
    let after = truth(bed, installed, &key).await?;
    rec.check_that(
        "after the release, the service shows nobody holding the lock",
        after.is_none(),
        format_args!("{key} held by {}", shown(&after)),
    );
    let passed = held.as_deref() == Some(owner.as_str())
        && accepted
        && ok
        && code == exit::WROTE
        && after.is_none();
    Ok(Cell::new(
        if passed {
            Verdict::Passes
        } else {
            Verdict::Fails
        },
        if passed { "passes" } else { "FAILS" },
        format!("{write}; RELEASE_ENDED ok={ok} said={said}"),
    ))
}

/// The write mode a library's holder is asked for in its first runs: fenced where it has a
/// token, unfenced where it has none.
fn mode_of(lib: &Library) -> WriteMode {
    if lib.fence.is_some() {
        WriteMode::Fenced
    } else {
        WriteMode::Unfenced
    }
}

/// F4/F5 for `lib` in `mode`: A frozen at its write point until the service ends its holding,
/// B takes the lock and writes, A thawed asks, writes, releases.
async fn paused(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
    mode: WriteMode,
) -> anyhow::Result<Paused> {
    bed.reset().await?;
    let mut a = Holder::spawn(&installed.spec(bed, lib, HOLDER_A, "rows=200(A)", mode)).await?;
    let (a_token, key, a_owner) = up_to_the_write_point(bed, rec, &mut a, "A").await?;
    a.freeze().await?;
    let frozen_at = Instant::now();
    let frozen = a.threads()?;
    lab_step(bed, rec, Mark::Frozen, "A", "SIGSTOP", list(&frozen)).await;
    rec.check(
        "after SIGSTOP, /proc shows state T for A and every thread of A (its library's too)",
        "T",
        &states(&frozen),
    );
    until_ended(bed, installed, rec, &mut a, &key, &a_owner, frozen_at).await?;
    let (mut b, b_owner) = b_takes_over(bed, rec, lib, installed, mode, &key, a_token).await?;

    go_and_thaw(bed, rec, &mut a).await?;
    let (asked, truth_when_asked, write) = after_go(bed, installed, rec, &mut a, "A", &key).await?;
    let a_release = release(bed, rec, &mut a, "A").await?;
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("A exits: {}", describe(Some(code))));
    let after = truth(bed, installed, &key).await?;
    rec.check_that(
        "A's release after the loss leaves B's lock in place",
        after.as_deref() == Some(b_owner.as_str()),
        format_args!("{key} held by {}", shown(&after)),
    );
    b.send(Request::Go).await?;
    let b_release = release(bed, rec, &mut b, "B").await?;
    rec.check_that(
        "B's release ends well",
        b_release.0,
        format_args!("said={}", b_release.1),
    );
    let b_code = b.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        "B exits",
        &describe(Some(exit::WROTE)),
        &describe(Some(b_code)),
    );

    // The resource's word on A's write, not A's.
    let attempts = bed.resource.attempts(SCOPE).await?;
    let a_accepted = attempts.iter().any(|x| x.writer == HOLDER_A && x.accepted);
    let Event::Write { accepted, .. } = write else {
        bail!("A's write was not reported");
    };
    rec.check_that(
        "the resource's record of A's write agrees with what A reported",
        a_accepted == accepted,
        format_args!("write_attempt accepted={a_accepted}; {write}"),
    );
    Ok(Paused {
        accepted: a_accepted,
        write: write.to_string(),
        asked,
        truth_when_asked,
        a_owner,
        release: a_release,
    })
}

/// Waits until the service itself ends A's holding (its TTL, its session timeout), by its own
/// record, and checks it; A is killed when it does not.
async fn until_ended(
    bed: &Testbed,
    installed: &Installed,
    rec: &mut Recorder,
    a: &mut Holder,
    key: &str,
    a_owner: &str,
    frozen_at: Instant,
) -> anyhow::Result<()> {
    // Until the service itself ends A's holding (its TTL, its session timeout), by its record.
    let ttl = bed.case().ttl;
    let gone = harness::wait::until(
        "A's holding ended by the service",
        ttl * 4 + Duration::from_secs(20),
        || not_holding(bed, installed, key, a_owner),
    )
    .await;
    let gone_ms = frozen_at.elapsed().as_millis();
    rec.check_that(
        "while A is frozen, the service ends A's holding (its own record)",
        gone.is_ok(),
        format_args!("{gone_ms} ms after the freeze (TTL {} ms)", ttl.as_millis()),
    );
    lab_step(
        bed,
        rec,
        Mark::LeaseExpired,
        "A",
        "holding ended by the service",
        "",
    )
    .await;
    if let Err(e) = gone {
        a.crash().await;
        bail!(e);
    }

    Ok(())
}

/// B, a second process of the same library, takes the lock once the service ended A's
/// holding, and writes; it then waits (`--wait-after-write`) holding the lock. Returns it and
/// the owner the service records for it.
async fn b_takes_over(
    bed: &Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
    mode: WriteMode,
    key: &str,
    a_token: Token,
) -> anyhow::Result<(Holder, String)> {
    let mut b = Holder::spawn(&{
        let mut spec = installed.spec(bed, lib, HOLDER_B, "rows=201(B)", mode);
        spec.flags.wait_after_write = true;
        spec
    })
    .await?;
    let (b_token, _, b_owner) = up_to_the_write_point(bed, rec, &mut b, "B").await?;
    b.send(Request::Go).await?;
    let (_, _, b_write) = after_go(bed, installed, rec, &mut b, "B", key).await?;
    rec.check_that(
        "B takes the lock and its write is accepted",
        matches!(b_write, Event::Write { accepted: true, .. }),
        &b_write,
    );
    if let (Some(a_n), Some(b_n)) = (a_token.value(), b_token.value()) {
        rec.check_that(
            "B's token is greater than A's (the library's fence is ordered)",
            b_n > a_n,
            format_args!("A {a_n}, B {b_n}"),
        );
    }

    Ok((b, b_owner))
}

/// F12 for `lib`: A killed with SIGKILL while it holds the lock; how long until the service
/// frees it, against the TTL.
async fn killed(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> anyhow::Result<Cell> {
    bed.reset().await?;
    let mut a =
        Holder::spawn(&installed.spec(bed, lib, HOLDER_A, "rows=200(A)", mode_of(lib))).await?;
    let (_, key, owner) = up_to_the_write_point(bed, rec, &mut a, "A").await?;
    let status = a.crash().await;
    let killed_at = Instant::now();
    lab_step(
        bed,
        rec,
        Mark::Killed,
        "A",
        "SIGKILL",
        format!("{status:?}"),
    )
    .await;
    let ttl = bed.case().ttl;
    let freed = harness::wait::until(
        "the lock freed after A's kill",
        ttl * 4 + Duration::from_secs(20),
        || not_holding(bed, installed, &key, &owner),
    )
    .await;
    let ms = killed_at.elapsed().as_millis();
    rec.check_that(
        "after kill -9, the service frees A's lock by itself",
        freed.is_ok(),
        format_args!("{ms} ms after the kill (TTL {} ms)", ttl.as_millis()),
    );
    let (verdict, said) = match freed {
        Ok(_) => (
            Verdict::Freed,
            format!("freed after {ms} ms (TTL {} ms)", ttl.as_millis()),
        ),
        Err(_) => (Verdict::NotFreed, format!("NOT freed within {ms} ms")),
    };
    Ok(Cell::new(
        verdict,
        said,
        format!("the service's record of {key}, polled from the kill"),
    ))
}

/// F10's cell: what A did after its library's answer — caught the pause (nothing written),
/// missed it (wrote while B held the lock), raised instead of answering, or wrote.
fn f10_cell(
    wrote: bool,
    held_by_b: bool,
    (question, answer): (&str, &str),
    truth_now: &Option<String>,
) -> Cell {
    let (verdict, said) = match wrote {
        false if answer.starts_with("raised") => (
            Verdict::Raised {
                not_implemented: answer.contains("NotImplemented"),
            },
            format!("no answer ({answer}): nothing written"),
        ),
        false => (
            Verdict::Caught,
            "caught the pause: nothing written".to_owned(),
        ),
        true if held_by_b => (
            Verdict::Missed,
            "MISSED the pause: wrote while B held the lock".to_owned(),
        ),
        true => (Verdict::Wrote, "wrote".to_owned()),
    };
    Cell::new(
        verdict,
        said,
        format!(
            "ASKED question={question} answer={answer}; the service's record: {}",
            shown(truth_now)
        ),
    )
}

/// F10 for `lib`: the check its library offers — its ownership question, called before the
/// write as the library's docs advise, the write only if it says the lock is still held — with
/// A frozen right *before* it until the service ends A's holding, B holding the lock when A
/// wakes. Whether the check catches the pause is the library's answer, read against the service.
async fn checked(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> anyhow::Result<Cell> {
    bed.reset().await?;
    let mut spec = installed.spec(bed, lib, HOLDER_A, "rows=200(A)", WriteMode::Unfenced);
    spec.flags.wait_before_check = true;
    let mut a = Holder::spawn(&spec).await?;
    let (a_token, key, a_owner) = holding(bed, rec, &mut a, "A").await?;
    let (at, before) = a.next("A before its check", EVENT_TIMEOUT).await?;
    step(
        bed,
        rec,
        at,
        "A",
        "stands before its library's check",
        &before,
    )
    .await;
    if !matches!(before, Event::BeforeCheck { .. }) {
        bail!(a.unexpected("BEFORE_CHECK token=T deadline_left_ms=N", &before));
    }
    a.freeze().await?;
    let frozen_at = Instant::now();
    lab_step(bed, rec, Mark::Frozen, "A", "SIGSTOP", list(&a.threads()?)).await;
    until_ended(bed, installed, rec, &mut a, &key, &a_owner, frozen_at).await?;
    let (mut b, b_owner) =
        b_takes_over(bed, rec, lib, installed, WriteMode::Unfenced, &key, a_token).await?;
    go_and_thaw(bed, rec, &mut a).await?;
    let (at, asked) = a.next("A's check", EVENT_TIMEOUT).await?;
    let truth_now = truth(bed, installed, &key).await?;
    step(bed, rec, at, "A", "asks its library", &asked).await;
    let Event::Asked { question, answer } = &asked else {
        bail!(a.unexpected("ASKED question=Q answer=A", &asked));
    };
    let held = says_held(answer) == Some(true);
    rec.note(format!(
        "A's library, asked after the pause: {question} {answer}; the service's record: {}",
        shown(&truth_now)
    ));
    let wrote = acts_on_the_answer(bed, rec, &mut a, held, &asked).await?;
    b.send(Request::Go).await?;
    let b_release = release(bed, rec, &mut b, "B").await?;
    rec.check_that(
        "B's release ends well",
        b_release.0,
        format_args!("said={}", b_release.1),
    );
    let _ = b.exit_code(EVENT_TIMEOUT).await?;
    let held_by_b = truth_now.as_deref() == Some(b_owner.as_str());
    Ok(f10_cell(wrote, held_by_b, (question, answer), &truth_now))
}

/// What A does after its library's answer (F10): told the lock is held, it goes on to the write
/// point and writes; told not, it exits without writing. Checks that the resource saw a write
/// from A exactly in the first case; returns whether A wrote.
async fn acts_on_the_answer(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    says_held: bool,
    asked: &Event,
) -> anyhow::Result<bool> {
    if says_held {
        let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
        step(
            bed,
            rec,
            at,
            "A",
            "check passed, at the write point",
            &ready,
        )
        .await;
        a.send(Request::Go).await?;
        let (at, write) = a.next("A's write", EVENT_TIMEOUT).await?;
        step(bed, rec, at, "A", "write", &write).await;
        release(bed, rec, a, "A").await?;
        let _ = a.exit_code(EVENT_TIMEOUT).await?;
    } else {
        let code = a.exit_code(EVENT_TIMEOUT).await?;
        rec.check(
            "A, told the lock is not held, exits without writing",
            &describe(Some(exit::DEADLINE_PASSED)),
            &describe(Some(code)),
        );
    }
    let a_wrote = bed
        .resource
        .attempts(SCOPE)
        .await?
        .iter()
        .any(|x| x.writer == HOLDER_A);
    rec.check_that(
        "A wrote at the resource exactly when its library said it still held the lock",
        a_wrote == says_held,
        format_args!("{asked}; write_attempt by A: {a_wrote}"),
    );
    Ok(a_wrote)
}

/// Whether the grants of one round, `at` (when each contender's ACQUIRED arrived), came one at a
/// time: at least one, and each later one at least 90 % of the TTL after the one before — a
/// contender slow to start (four Python processes on a loaded machine) may find the first
/// winner's lock expired, which is the TTL at work, not two holders at once. What it saw.
fn one_at_a_time(at: &mut [std::time::Instant], ttl: std::time::Duration) -> (bool, String) {
    at.sort();
    let gaps: Vec<std::time::Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let ok = !at.is_empty() && gaps.iter().all(|g| *g >= ttl.mul_f64(0.9));
    let seen = if gaps.is_empty() {
        String::new()
    } else {
        let ms: Vec<String> = gaps.iter().map(|g| g.as_millis().to_string()).collect();
        format!(
            " — each later grant {} ms after the one before (TTL {} ms)",
            ms.join(", "),
            ttl.as_millis()
        )
    };
    (ok, seen)
}

/// F3 for `lib`: several processes of the library race for the free lock, round after round;
/// the service must grant it to exactly one per round (the others answer `REFUSED`).
async fn one_winner(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> anyhow::Result<Cell> {
    const ROUNDS: usize = 3;
    bed.reset().await?;
    let mut winners = Vec::new();
    let mut all_ok = true;
    for round in 1..=ROUNDS {
        let spec = |n: usize| {
            installed.spec(
                bed,
                lib,
                &format!("contender-{round}-{n}"),
                "rows=1",
                mode_of(lib),
            )
        };
        let (s1, s2, s3, s4) = (spec(1), spec(2), spec(3), spec(4));
        // Started together: each tries the lock as soon as it has shaken hands.
        let (h1, h2, h3, h4) = tokio::join!(
            Holder::spawn(&s1),
            Holder::spawn(&s2),
            Holder::spawn(&s3),
            Holder::spawn(&s4)
        );
        let mut holders = [h1?, h2?, h3?, h4?];
        let mut won = Vec::new();
        let mut granted_at = Vec::new();
        for (i, h) in holders.iter_mut().enumerate() {
            let (at, first) = h.next("a contender's acquire", EVENT_TIMEOUT).await?;
            match first {
                Event::Acquired { .. } => {
                    won.push(i);
                    granted_at.push(at);
                }
                Event::Refused => {}
                other => bail!(h.unexpected("ACQUIRED or REFUSED", &other)),
            }
        }
        let (ok, seen) = one_at_a_time(&mut granted_at, bed.case().ttl);
        all_ok &= ok;
        rec.check_that(
            format!(
                "round {round}: one of 4 contenders is granted the lock, and no other while its \
                 grant lasts"
            ),
            ok,
            format_args!("granted: {}{seen}", won.len()),
        );
        for (i, h) in holders.iter_mut().enumerate() {
            if won.contains(&i) {
                let _ = h.next("the winner's HOLDING", EVENT_TIMEOUT).await?;
                let _ = h
                    .next("the winner at its write point", EVENT_TIMEOUT)
                    .await?;
                h.send(Request::Go).await?;
                let _ = h.next("the winner's question", EVENT_TIMEOUT).await?;
                let _ = h.next("the winner's write", EVENT_TIMEOUT).await?;
                let _ = h.next("the winner's release", EVENT_TIMEOUT).await?;
            }
            let _ = h.exit_code(EVENT_TIMEOUT).await?;
        }
        winners.push(won.len());
    }
    Ok(Cell::new(
        if all_ok {
            Verdict::OneWinner
        } else {
            Verdict::SeveralWinners
        },
        if all_ok {
            "one winner at a time"
        } else {
            "NOT one winner at a time"
        },
        format!("granted per round of 4: {winners:?}"),
    ))
}

/// Starts `lib`'s holder once and lets it take a lock of its own, before any experiment: a
/// holder that cannot start (its launcher missing a jar, its package not importable), that speaks
/// another protocol version, or whose library cannot reach the service at the endpoint it was
/// given is one line naming what is wrong, not a run of failures. The probe is killed once it
/// has answered (its lock is a name of its own, `library-probe`).
pub async fn probe(bed: &Testbed, lib: &Library, installed: &Installed) -> anyhow::Result<()> {
    let mut spec = installed.spec(bed, lib, "library-probe", "probe", mode_of(lib));
    spec.flags.lease = "library-probe".into();
    let endpoint = spec
        .flags
        .store_endpoint
        .clone()
        .unwrap_or_else(|| "(none given)".into());
    let mut holder = match Holder::spawn(&spec).await {
        Ok(holder) => holder,
        Err(e) => bail!(
            "the library holder {} did not answer this lab's handshake (HELLO version={}): {e}",
            lib.file,
            holder_protocol::VERSION
        ),
    };
    let answer = holder.next("the probe's acquire", EVENT_TIMEOUT).await;
    holder.crash().await;
    match answer {
        Ok((_, Event::Acquired { .. } | Event::Refused)) => Ok(()),
        Ok((_, Event::Error { message })) => bail!(
            "{} could not take a lock at the {} endpoint {endpoint}: {message}",
            lib.id,
            spec.flags.store
        ),
        Ok((_, other)) => bail!(
            "the library holder {} sent `{other}` where this lab's protocol has ACQUIRED or REFUSED",
            lib.file
        ),
        Err(e) => bail!(
            "{} could not take a lock at the {} endpoint {endpoint}: {e}",
            lib.id,
            spec.flags.store
        ),
    }
}

/// F4 for `lib`: the paused holder's write fenced with the library's token, or "cannot fence"
/// (a skip, never a pass) where the library has none.
async fn fenced(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> Cell {
    match lib.fence {
        None => {
            rec.skip(format!(
                "{} exposes nothing ordered to fence with (token=none): cannot fence",
                lib.id
            ));
            Cell::new(
                Verdict::CannotFence,
                "cannot fence (no token)",
                "ACQUIRED token=none",
            )
        }
        Some(_) => match paused(bed, rec, lib, installed, WriteMode::Fenced).await {
            Ok(p) => {
                rec.check_that(
                    "fenced with the library's token, A's stale write is rejected",
                    !p.accepted,
                    &p.write,
                );
                Cell::stale_write(p.accepted, "ACCEPTED", p.write)
            }
            Err(e) => {
                rec.abort(&e);
                Cell::could_not_run(&e)
            }
        },
    }
}

/// Every run of `lib` on the open case's service, each a case of `rec`; the card's row.
pub async fn run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> Row {
    let mut row = Row::default();
    if let Err(e) = probe(bed, lib, installed).await {
        row.unstartable = Some(format!("{e:#}"));
        return row;
    }
    open_case(rec, lib, "F1", "one holding, acquire to release");
    let f1 = normal_path(bed, rec, lib, installed).await;
    row.f1 = closed(rec, f1);

    open_case(
        rec,
        lib,
        "F5",
        "paused past its lock's end, then writes unfenced",
    );
    match paused(bed, rec, lib, installed, WriteMode::Unfenced).await {
        Ok(p) => {
            rec.expose(
                "unfenced, A's stale write is accepted while B holds the lock",
                p.accepted,
                &p.write,
            );
            row.unfenced = Cell::stale_write(p.accepted, "accepted (stale write)", &p.write);
            tell(&mut row, &p);
        }
        Err(e) => {
            rec.abort(&e);
            row.unfenced = Cell::could_not_run(&e);
        }
    }
    rec.end_case();

    open_case(
        rec,
        lib,
        "F4",
        "paused past its lock's end, then writes fenced with the library's token",
    );
    row.fenced = fenced(bed, rec, lib, installed).await;
    rec.end_case();

    open_case(rec, lib, "F12", "killed with SIGKILL while holding");
    let killed = killed(bed, rec, lib, installed).await;
    row.killed = closed(rec, killed);

    open_case(
        rec,
        lib,
        "F3",
        "four processes race for the free lock, three rounds",
    );
    let f3 = one_winner(bed, rec, lib, installed).await;
    row.f3 = closed(rec, f3);

    open_case(
        rec,
        lib,
        "F10",
        "paused before the check its library offers, then asks and writes only if held",
    );
    let f10 = checked(bed, rec, lib, installed).await;
    row.f10 = closed(rec, f10);

    open_case(
        rec,
        lib,
        "F16",
        "cut off from its service while holding, then asks and writes unfenced",
    );
    if let Some(server) = over_a_socket(lib) {
        let why = format!(
            "F16 cuts A off from its service by an iptables rule per server, and the lab \
             reaches {server} over a Unix socket, which no rule holds"
        );
        rec.skip(&why);
        rec.end_case();
        row.partitioned = Cell::new(Verdict::NotRun, "not run (a Unix socket)", &why);
        return row;
    }
    let f16 = partitioned::partitioned(bed, rec, lib, installed).await;
    let f16 = f16.map(|(cell, agrees)| {
        row.cut_off_agrees = agrees;
        cell
    });
    row.partitioned = closed(rec, f16);
    row
}

/// The library's answer as a yes or no to "do I hold the lock?" (Python's and Java's words), to
/// set against the service's record; `None` for anything else (an exception): reported, not
/// judged.
fn says_held(answer: &str) -> Option<bool> {
    match answer {
        "returned True" | "returned true" => Some(true),
        "returned False" | "returned false" => Some(false),
        _ => None,
    }
}

/// What A's library told it after the pause, beside the truth, and how its release ended.
fn tell(row: &mut Row, p: &Paused) {
    if let Some((question, answer)) = &p.asked {
        let truth = shown(&p.truth_when_asked);
        let a_holds = p.truth_when_asked.as_deref() == Some(p.a_owner.as_str());
        row.told_agrees = says_held(answer).map(|s| s == a_holds);
        let whose = if a_holds {
            "A"
        } else if p.truth_when_asked.is_some() {
            "B"
        } else {
            "nobody"
        };
        row.told = Cell::new(
            Verdict::Answered,
            format!("{question} {answer}; the service: held by {whose}"),
            format!("ASKED question={question} answer={answer}; the service's record: {truth}"),
        );
    }
    let (ok, said) = &p.release;
    // Its words read once, as `says_held` reads the question's: True after the loss is no
    // word of it.
    let verdict = if said.starts_with("returned True") {
        Verdict::ReleaseReturnedTrue
    } else {
        Verdict::Answered
    };
    row.release = Cell::new(
        verdict,
        said.clone(),
        format!("RELEASE_ENDED ok={ok} said={said}"),
    );
}

/// Opens the case `id` of `lib` (`kazoo/F4`), titled with what it does.
fn open_case(rec: &mut Recorder, lib: &Library, id: &str, what: &str) {
    rec.case(
        &format!("{}/{id}", lib.id),
        &format!("{} on {}: {what}", lib.id, lib.store),
    );
}

/// [`ended`], then closes the case.
fn closed(rec: &mut Recorder, cell: anyhow::Result<Cell>) -> Cell {
    let cell = ended(rec, cell);
    rec.end_case();
    cell
}

fn ended(rec: &mut Recorder, cell: anyhow::Result<Cell>) -> Cell {
    match cell {
        Ok(cell) => cell,
        Err(e) => {
            rec.abort(&e);
            Cell::could_not_run(&e)
        }
    }
}
