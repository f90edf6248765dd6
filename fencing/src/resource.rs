//! The protected resource: who may still *finish*. Invariant I3: within a scope the
//! resource accepts writes with non-decreasing tokens; once it accepted token n, every later write
//! with a token < n is rejected, whichever part it targets.
//!
//! The resource never reads the lease database. It remembers the highest token it has seen per
//! scope in `fence_floor` (Chubby §2.4) and connects as a role that cannot reach `lease26`.
//!
//! [`WriteMode::Fenced`] runs the fence of the resource's profile — the one thing a run gates,
//! resolved once from the command line: seed004's check and write in one transaction (the
//! textbook form, the seed's), seed004-single's one statement, seed004-shared's (the same
//! guarantee without serializing the writers that hold the current token — the one to copy:
//! `lab bench` shows it scales with writers where the other two queue on the floor row), or a
//! user's profile. The other three modes are negative controls, the lab's own code, kept side by
//! side so that the lab can show, in the same run, what each one lets through. Every attempt is logged in
//! `write_attempt`: an accepted fenced write in its own transaction (committed together), a
//! rejected one after its rollback (so its record survives it).

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use sqlx::{Acquire, PgConnection, PgPool, Row};

use crate::profile::{Args, Profile, Statement, WriteSql};
use crate::{DbContext, Result};

/// How the resource decides whether to accept a write: with the fence of its profile, or with
/// one of the negative controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// The fence of the resource's profile ([`Resource::with_profile`]): its one statement, or its
    /// check and write in one transaction with the test hook between them; its attempts are
    /// recorded under the profile's own name for its write (`resource.mode`). Seed004's is the
    /// textbook form: `UPDATE fence_floor SET max_token = $t WHERE scope = $s AND max_token <= $t`,
    /// no row → rollback, rejected; else upsert the part and commit — the UPDATE holds the floor
    /// row's lock until commit, and under Read Committed a blocked writer re-evaluates its
    /// `WHERE` on the newer row version. Why seed004-single and seed004-shared keep I3 is told in
    /// their profiles (`profiles/*.toml`) and ARCHITECTURE.md.
    Fenced,
    /// Negative control: the upsert compares only the existing row's token. A new row has
    /// nothing to compare against, so a stale holder can still create parts (F7).
    FencedRow,
    /// Negative control: `SELECT max_token`, compare in the client, then update floor and data
    /// in separate autocommit statements. The check is stale by the time of the write (F6a).
    CheckThenWrite,
    /// Negative control: a plain upsert, no token check at all (F5).
    Unfenced,
}

impl WriteMode {
    pub const ALL: [WriteMode; 4] = [
        WriteMode::Fenced,
        WriteMode::FencedRow,
        WriteMode::CheckThenWrite,
        WriteMode::Unfenced,
    ];

    /// The negative controls: the lab's own writes beside the fence.
    pub const CONTROLS: [WriteMode; 3] = [
        WriteMode::FencedRow,
        WriteMode::CheckThenWrite,
        WriteMode::Unfenced,
    ];

    /// The mode's name on the holder's command line and, for a control, in `write_attempt.mode`
    /// and the evidence (the fence is recorded under its profile's name for its write).
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMode::Fenced => "fenced",
            WriteMode::FencedRow => "fenced-row",
            WriteMode::CheckThenWrite => "check-then-write",
            WriteMode::Unfenced => "unfenced",
        }
    }

    /// Whether it keeps I3: the fence (which claims to; the experiments judge it).
    pub fn is_fence(self) -> bool {
        self == WriteMode::Fenced
    }
}

impl fmt::Display for WriteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WriteMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WriteMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = WriteMode::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown write mode {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The built-in profiles of the lab's own fence, by the name their write is recorded under: the
/// fenced modes `lab run --fenced-mode` names, each run by default.
pub const FENCED_MODES: [(&str, &str); 3] = [
    ("fenced-scope", "seed004"),
    ("fenced-single", "seed004-single"),
    ("fenced-shared", "seed004-shared"),
];

/// The lab's named writes, in the order the command line lists them: the fenced modes, then the
/// negative controls.
pub const NAMED_WRITES: [&str; 6] = [
    "fenced-scope",
    "fenced-single",
    "fenced-shared",
    "fenced-row",
    "check-then-write",
    "unfenced",
];

/// A write the command line names (`--mode`, the bench's rows), resolved once: a fenced mode is
/// [`WriteMode::Fenced`] with its built-in profile, a negative control is itself, on seed004's
/// tables. `None` for any other name.
pub fn named_write(name: &str) -> Option<(WriteMode, &'static Profile)> {
    if let Some(profile) = fenced_mode_profile(name) {
        return Some((WriteMode::Fenced, profile));
    }
    WriteMode::CONTROLS
        .into_iter()
        .find(|m| m.as_str() == name)
        .map(|m| (m, Profile::seed004()))
}

/// The built-in profile of the fenced mode `mode` ([`FENCED_MODES`]).
pub fn fenced_mode_profile(mode: &str) -> Option<&'static Profile> {
    FENCED_MODES
        .iter()
        .find(|(m, _)| *m == mode)
        .map(|(_, name)| Profile::built_in(name).expect("the fenced modes' profiles are built in"))
}

/// One write request: `content` for `part` of `scope`, by `writer`, under fencing token `token`.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub scope: &'a str,
    pub part: &'a str,
    pub content: &'a str,
    pub writer: &'a str,
    pub token: i64,
}

/// A stored part of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub content: String,
    pub writer: String,
    pub token: i64,
}

/// One row of `write_attempt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub part: String,
    pub writer: String,
    pub token: i64,
    pub mode: String,
    pub accepted: bool,
}

/// What a write's check saw, handed to the test hook that runs between the check and the write
/// ([`write_on_checked`]), so that a test can report what the check really read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The fence floor the check read and compared the token with: `Some` only for
    /// check-then-write, the one mode that reads the floor in a statement of its own. `None` for
    /// the modes whose comparison is part of a write statement (fenced-scope's conditional
    /// UPDATE, fenced-single, fenced-row) or that compare nothing (unfenced).
    pub floor_read: Option<i64>,
}

/// The arguments of the statements about one write, its attempts recorded as `record`.
fn args<'a>(w: &Write<'a>, record: &'a str) -> Args<'a> {
    Args {
        scope: w.scope,
        part: w.part,
        content: w.content,
        writer: w.writer,
        token: w.token,
        mode: record,
        ..Args::default()
    }
}

/// seed004's own write statement (the upsert of a part), which every negative control but
/// fenced-row ends with: the same write, without its fence.
fn seed004_write() -> &'static Statement {
    match &Profile::seed004().resource.write {
        WriteSql::CheckThenWrite { write, .. } => write,
        WriteSql::OneStatement(_) => unreachable!("seed004 checks and writes in a transaction"),
    }
}

/// A deliberately broken fence, for the test that shows what the shared lock is for.
pub mod broken {
    use super::*;

    /// The fenced-shared mode's statement (seed004-shared's) with its `FOR SHARE`
    /// removed: a writer of the current token checks the floor without locking it, so an advance
    /// can commit while the writer is still on its way, and the writer's old token lands after it
    /// (I3 broken in commit order). Nothing but that test runs it; its attempts are recorded as
    /// `fenced-shared-without-the-lock`.
    pub async fn fenced_shared_without_the_lock(r: &Resource, w: &Write<'_>) -> Result<bool> {
        let Some(WriteSql::OneStatement(statement)) =
            fenced_mode_profile("fenced-shared").map(|p| &p.resource.write)
        else {
            unreachable!("seed004-shared writes in one statement")
        };
        let unlocked = statement.sql().replace("FOR SHARE", "");
        let row = statement
            .query_with(&unlocked, &args(w, "fenced-shared-without-the-lock"))
            .fetch_one(r.pool())
            .await
            .op("write the part (fenced-shared without its lock)")?;
        row.try_get(0).op("read whether it was accepted")
    }
}

/// The protected resource, reached through a pool that connects as the resource role, with the
/// fence of a profile (by default the built-in `seed004`): its scope setup, its floor, and the
/// write [`WriteMode::Fenced`] runs.
#[derive(Debug, Clone)]
pub struct Resource {
    pool: PgPool,
    profile: Arc<Profile>,
}

impl Resource {
    /// The lab's own resource ([`Profile::seed004`]).
    pub fn new(pool: PgPool) -> Self {
        Resource::with_profile(pool, Arc::new(Profile::seed004().clone()))
    }

    /// The resource with `profile`'s fence.
    pub fn with_profile(pool: PgPool, profile: Arc<Profile>) -> Self {
        Resource { pool, profile }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The profile whose fence this resource keeps.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Makes the scope writable before any write (idempotent): seed004 creates its floor row
    /// with `max_token = 0`. Nothing for a design without a `resource.setup`.
    pub async fn setup_scope(&self, scope: &str) -> Result<()> {
        if let Some(setup) = &self.profile.resource.setup {
            setup
                .query(&Args {
                    scope,
                    ..Args::default()
                })
                .execute(&self.pool)
                .await
                .op("create the scope's fence floor")?;
        }
        Ok(())
    }

    /// Writes `w` in `mode`; `true` when the resource accepted it.
    pub async fn write(&self, w: &Write<'_>, mode: WriteMode) -> Result<bool> {
        self.write_with_gap(w, mode, async {}).await
    }

    /// [`Resource::write`] with a test hook: `gap` is awaited between the check and the write
    /// (inside the transaction for fenced-scope). Production code passes nothing (`async {}`).
    pub async fn write_with_gap(
        &self,
        w: &Write<'_>,
        mode: WriteMode,
        gap: impl Future<Output = ()>,
    ) -> Result<bool> {
        self.write_with_checked_gap(w, mode, |_| gap).await
    }

    /// [`Resource::write_with_gap`] whose hook is told what the check saw ([`Checked`]).
    pub async fn write_with_checked_gap<G, F>(
        &self,
        w: &Write<'_>,
        mode: WriteMode,
        gap: G,
    ) -> Result<bool>
    where
        G: FnOnce(Checked) -> F,
        F: Future<Output = ()>,
    {
        let mut conn = self.pool.acquire().await.op("connect to the resource")?;
        write_on_checked(&mut conn, &self.profile, w, mode, gap).await
    }

    /// The scope's fence floor, `None` if the scope was never set up or the profile keeps none.
    pub async fn floor(&self, scope: &str) -> Result<Option<i64>> {
        let Some(floor) = self.profile.resource.floor.as_ref() else {
            return Ok(None);
        };
        let row = floor
            .query(&Args {
                scope,
                ..Args::default()
            })
            .fetch_optional(&self.pool)
            .await
            .op("read the fence floor")?;
        row.map(|r| r.try_get(0))
            .transpose()
            .op("read the fence floor")
    }

    /// The stored part, `None` if it was never written.
    pub async fn part(&self, scope: &str, part: &str) -> Result<Option<Part>> {
        let row = sqlx::query(
            "SELECT content, writer, token FROM report_part WHERE scope = $1 AND part = $2",
        )
        .bind(scope)
        .bind(part)
        .fetch_optional(&self.pool)
        .await
        .op("read a report part")?;
        Ok(row.map(|r| Part {
            content: r.get(0),
            writer: r.get(1),
            token: r.get(2),
        }))
    }

    /// Every logged attempt on `scope`, oldest first.
    pub async fn attempts(&self, scope: &str) -> Result<Vec<Attempt>> {
        let rows = sqlx::query(
            "SELECT part, writer, token, mode, accepted FROM write_attempt WHERE scope = $1 ORDER BY id",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await
        .op("read the write attempts")?;
        Ok(rows
            .into_iter()
            .map(|r| Attempt {
                part: r.get(0),
                writer: r.get(1),
                token: r.get(2),
                mode: r.get(3),
                accepted: r.get(4),
            })
            .collect())
    }
}

/// Writes `w` in `mode` on a connection the caller owns (so that it can know the connection's
/// backend pid, as F6 does), awaiting `gap` between the check and the write. The connection must
/// not be inside a transaction. Returns whether the resource accepted the write.
pub async fn write_on(
    conn: &mut PgConnection,
    sut: &Profile,
    w: &Write<'_>,
    mode: WriteMode,
    gap: impl Future<Output = ()>,
) -> Result<bool> {
    write_on_checked(conn, sut, w, mode, |_| gap).await
}

/// [`write_on`] whose hook is told what the check saw ([`Checked`]): the hook is called, and its
/// future awaited, only after a passed check.
pub async fn write_on_checked<G, F>(
    conn: &mut PgConnection,
    sut: &Profile,
    w: &Write<'_>,
    mode: WriteMode,
    gap: G,
) -> Result<bool>
where
    G: FnOnce(Checked) -> F,
    F: Future<Output = ()>,
{
    let nothing_read = Checked { floor_read: None };
    if mode == WriteMode::Fenced {
        return write_fenced(conn, sut, w, gap(nothing_read)).await;
    }
    let accepted = match mode {
        WriteMode::FencedRow => {
            // Check and write are one statement here; the hook runs just before it.
            gap(nothing_read).await;
            sqlx::query(
                "INSERT INTO report_part AS r (scope, part, content, writer, token)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (scope, part) DO UPDATE
                    SET content = EXCLUDED.content, writer = EXCLUDED.writer,
                        token = EXCLUDED.token, written_at = clock_timestamp()
                  WHERE r.token <= EXCLUDED.token",
            )
            .bind(w.scope)
            .bind(w.part)
            .bind(w.content)
            .bind(w.writer)
            .bind(w.token)
            .execute(&mut *conn)
            .await
            .op("write the part (row-fenced)")?
            .rows_affected()
                == 1
        }
        WriteMode::CheckThenWrite => {
            let floor: Option<i64> =
                sqlx::query_scalar("SELECT max_token FROM fence_floor WHERE scope = $1")
                    .bind(w.scope)
                    .fetch_optional(&mut *conn)
                    .await
                    .op("read the fence floor")?;
            if floor.is_some_and(|floor| floor <= w.token) {
                gap(Checked { floor_read: floor }).await;
                sqlx::query("UPDATE fence_floor SET max_token = $1 WHERE scope = $2")
                    .bind(w.token)
                    .bind(w.scope)
                    .execute(&mut *conn)
                    .await
                    .op("set the fence floor")?;
                upsert(&mut *conn, w).await?;
                true
            } else {
                false
            }
        }
        WriteMode::Unfenced => {
            gap(nothing_read).await;
            upsert(&mut *conn, w).await?;
            true
        }
        WriteMode::Fenced => unreachable!("the fence is written above"),
    };
    // The negative controls, which have no transaction, record every attempt here.
    log_attempt(&mut *conn, w, mode.as_str(), accepted).await?;
    Ok(accepted)
}

/// Writes `w` with `fence`'s write, its attempts recorded under the profile's name for it: one
/// statement (which records its attempt itself; the hook runs just before it), or the check, the
/// hook and the write in one transaction (a rejected attempt recorded after the rollback).
async fn write_fenced(
    conn: &mut PgConnection,
    fence: &Profile,
    w: &Write<'_>,
    gap: impl Future<Output = ()>,
) -> Result<bool> {
    let record = fence.resource.mode.as_str();
    match &fence.resource.write {
        WriteSql::OneStatement(statement) => {
            gap.await;
            let row = statement
                .query(&args(w, record))
                .fetch_one(&mut *conn)
                .await
                .op("write the part (fenced, one statement)")?;
            row.try_get(0).op("read whether it was accepted")
        }
        WriteSql::CheckThenWrite { check, write } => {
            let fence = Fence {
                check,
                write,
                record,
            };
            if in_transaction(conn, &fence, w, gap, async { true }).await? == Some(true) {
                return Ok(true);
            }
            log_attempt(&mut *conn, w, record, false).await?;
            Ok(false)
        }
    }
}

/// seed004's fence with a test hook *before COMMIT*: `before_commit` is awaited once
/// the floor has been advanced and the part and its attempt record written, with the transaction
/// still open (F12 kills the writer there; nothing of it may survive). The hook answers whether
/// to commit; `false` rolls everything back. Returns `Some(accepted)` once decided, `None` when
/// the hook chose to roll back an accepted write. The connection must not be inside a
/// transaction.
pub async fn write_fenced_scope_before_commit(
    conn: &mut PgConnection,
    w: &Write<'_>,
    before_commit: impl Future<Output = bool>,
) -> Result<Option<bool>> {
    write_profile_before_commit(conn, Profile::seed004(), w, before_commit)
        .await
        .expect("seed004 checks and writes in a transaction")
}

/// [`write_fenced_scope_before_commit`] with `sut`'s fence, when it is a check and a write in
/// one transaction (`None` when it is one statement: there is no moment before its commit to
/// stop at).
pub async fn write_profile_before_commit(
    conn: &mut PgConnection,
    sut: &Profile,
    w: &Write<'_>,
    before_commit: impl Future<Output = bool>,
) -> Option<Result<Option<bool>>> {
    let WriteSql::CheckThenWrite { check, write } = &sut.resource.write else {
        return None;
    };
    let fence = Fence {
        check,
        write,
        record: &sut.resource.mode,
    };
    Some(write_before_commit(conn, &fence, w, before_commit).await)
}

async fn write_before_commit(
    conn: &mut PgConnection,
    fence: &Fence<'_>,
    w: &Write<'_>,
    before_commit: impl Future<Output = bool>,
) -> Result<Option<bool>> {
    let decided = in_transaction(conn, fence, w, async {}, before_commit).await?;
    if decided == Some(false) {
        log_attempt(conn, w, fence.record, false).await?;
    }
    Ok(decided)
}

/// A fence in the form check, hook, write, COMMIT: the statements and the name its attempts
/// are recorded under.
struct Fence<'p> {
    check: &'p Statement,
    write: &'p Statement,
    record: &'p str,
}

/// A check-then-write fence's transaction: `check` (passed when it changed or returned a row —
/// the command tag's count, `UPDATE 1` or `SELECT 1`) or roll back
/// (`Some(false)`; the caller logs the rejected attempt after the rollback), await `gap`,
/// `write` and log, await `before_commit`, commit (`Some(true)`) or roll back at its word
/// (`None`).
async fn in_transaction(
    conn: &mut PgConnection,
    fence: &Fence<'_>,
    w: &Write<'_>,
    gap: impl Future<Output = ()>,
    before_commit: impl Future<Output = bool>,
) -> Result<Option<bool>> {
    let a = args(w, fence.record);
    let mut tx = conn.begin().await.op("begin the write transaction")?;
    let advanced = fence
        .check
        .query(&a)
        .execute(&mut *tx)
        .await
        .op("advance the fence floor")?
        .rows_affected();
    if advanced == 0 {
        tx.rollback().await.op("roll back the rejected write")?;
        return Ok(Some(false));
    }
    gap.await;
    fence
        .write
        .query(&a)
        .execute(&mut *tx)
        .await
        .op("write the part")?;
    // An accepted write and its record commit together: none without the other.
    log_attempt(&mut tx, w, fence.record, true).await?;
    if !before_commit.await {
        tx.rollback().await.op("roll back the abandoned write")?;
        return Ok(None);
    }
    tx.commit().await.op("commit the write")?;
    Ok(Some(true))
}

async fn log_attempt(
    conn: &mut PgConnection,
    w: &Write<'_>,
    record: &str,
    accepted: bool,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(w.scope)
    .bind(w.part)
    .bind(w.writer)
    .bind(w.token)
    .bind(record)
    .bind(accepted)
    .execute(conn)
    .await
    .op("log the write attempt")?;
    Ok(())
}

async fn upsert(conn: &mut PgConnection, w: &Write<'_>) -> Result<()> {
    seed004_write()
        .query(&args(w, WriteMode::Unfenced.as_str()))
        .execute(conn)
        .await
        .op("write the part")?;
    Ok(())
}
