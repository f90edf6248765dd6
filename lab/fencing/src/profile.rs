//! Profiles: a system under test described as data — its lease table with the four statements on
//! it, and the resource's fence with its write — in a TOML file (issue 17). The lab's own design
//! ships as the built-in profiles `seed004`, `seed004-single` and `seed004-shared` (the files in
//! `lab/fencing/profiles/`, compiled in): [`crate::lease::SqlLeaseStore`] and
//! [`crate::resource::Resource`] run their statements, so the SQL of the lab's fence lives in those
//! files and nowhere else. A profile with `dialect = "mariadb"` is the other shape, seed 000's
//! job lease and the runs it fences ([`JobProfile`], built in as `seed000`, run by the U-series);
//! [`Sut`] is either, as `--sut` names it.
//!
//! A statement names its parameters `:name`; [`Statement::compile`] turns them into PostgreSQL's
//! `$1`, `$2`, … in its place's order of parameters (on MariaDB a `?` at each place) and refuses
//! a name the place does not offer ([`Slot`]). A profile is refused before anything runs, with
//! one line naming the file and the statement: [`Sut::parse`] judges its form (TOML syntax, a
//! missing or unknown key, a parameter), [`Profile::prepare`] its SQL (every statement prepared
//! against scratch databases that hold its schema, the server's own error quoted; a MariaDB
//! profile's `JobProfile::prepare` is in `fenced_job`).

use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use serde::Deserialize;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgTypeInfo};
use sqlx::query::Query;
use sqlx::{Column as _, ConnectOptions as _, Connection as _, Executor as _, PgConnection};
use sqlx::{Postgres, TypeInfo as _};

mod job;
pub use job::{JobProfile, RunSql};

/// A parameter a statement may name, written `:name` in its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// The lease's name (text).
    Name,
    /// Who holds or asks for the lease (text).
    Holder,
    /// The fencing token of a holding (bigint).
    Token,
    /// The lease's time to live in milliseconds (double precision).
    TtlMs,
    /// The resource scope written to (text).
    Scope,
    /// The part of the scope written (text).
    Part,
    /// What is written (text).
    Content,
    /// Who writes (text).
    Writer,
    /// The write's record name in `write_attempt.mode` (text).
    Mode,
    /// The run a job starts and completes (text; MariaDB profiles).
    Run,
}

impl Param {
    const ALL: [Param; 10] = [
        Param::Name,
        Param::Holder,
        Param::Token,
        Param::TtlMs,
        Param::Scope,
        Param::Part,
        Param::Content,
        Param::Writer,
        Param::Mode,
        Param::Run,
    ];

    /// The name a statement writes after its colon.
    pub fn as_str(self) -> &'static str {
        match self {
            Param::Name => "name",
            Param::Holder => "holder",
            Param::Token => "token",
            Param::TtlMs => "ttl_ms",
            Param::Scope => "scope",
            Param::Part => "part",
            Param::Content => "content",
            Param::Writer => "writer",
            Param::Mode => "mode",
            Param::Run => "run",
        }
    }

    /// The type the lab binds it with.
    fn type_info(self) -> PgTypeInfo {
        match self {
            Param::Token => PgTypeInfo::with_name("INT8"),
            Param::TtlMs => PgTypeInfo::with_name("FLOAT8"),
            _ => PgTypeInfo::with_name("TEXT"),
        }
    }
}

/// Where a statement sits in a profile: its key, the parameters it may name and what it must
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Acquire,
    /// A MariaDB profile's read-back after its acquire (an upsert answers no row there).
    Acquired,
    Renew,
    Release,
    Inspect,
    Setup,
    Floor,
    Check,
    Write,
    Statement,
    /// A MariaDB profile's job run: start it under a holding, complete it, read its status.
    Start,
    Complete,
    Status,
}

impl Slot {
    /// The statement's key in the file.
    pub fn key(self) -> &'static str {
        match self {
            Slot::Acquire => "lease.acquire",
            Slot::Acquired => "lease.acquired",
            Slot::Renew => "lease.renew",
            Slot::Release => "lease.release",
            Slot::Inspect => "lease.inspect",
            Slot::Setup => "resource.setup",
            Slot::Floor => "resource.floor",
            Slot::Check => "resource.write.check",
            Slot::Write => "resource.write.write",
            Slot::Statement => "resource.write.statement",
            Slot::Start => "resource.run.start",
            Slot::Complete => "resource.run.complete",
            Slot::Status => "resource.run.status",
        }
    }

    /// The parameters the statement may name, in the order they are numbered (`$1`, `$2`, …,
    /// among those it names).
    pub fn params(self) -> &'static [Param] {
        use Param::*;
        match self {
            Slot::Acquire => &[Name, Holder, TtlMs],
            Slot::Acquired => &[Name, Holder],
            Slot::Renew => &[Name, Holder, Token, TtlMs],
            Slot::Release => &[Name, Holder, Token],
            Slot::Inspect => &[Name],
            Slot::Setup | Slot::Floor => &[Scope],
            Slot::Check => &[Token, Scope, Part, Writer],
            Slot::Write => &[Scope, Part, Content, Writer, Token],
            Slot::Statement => &[Scope, Part, Content, Writer, Token, Mode],
            Slot::Start | Slot::Complete => &[Run, Name, Holder, Token],
            Slot::Status => &[Run],
        }
    }

    /// The columns the statement must return, by name (`None`: any name) and type; `None` when
    /// only its count of changed rows is read. A type `TEXT` on MariaDB is any of its text
    /// types, `DATETIME` either of its time types.
    pub(crate) fn returns(
        self,
        dialect: Dialect,
    ) -> Option<&'static [(Option<&'static str>, &'static str)]> {
        if dialect == Dialect::Mariadb {
            return match self {
                Slot::Acquired => Some(&[(None, "BIGINT")]),
                Slot::Inspect => Some(&[
                    (Some("holder"), "TEXT"),
                    (Some("token"), "BIGINT"),
                    (Some("expires_at"), "DATETIME"),
                ]),
                Slot::Status => Some(&[(None, "TEXT")]),
                _ => None,
            };
        }
        match self {
            Slot::Acquire => Some(&[(None, "INT8")]),
            Slot::Inspect => Some(&[
                (Some("holder"), "TEXT"),
                (Some("token"), "INT8"),
                (Some("expires_at"), "TIMESTAMPTZ"),
            ]),
            Slot::Floor => Some(&[(None, "INT8")]),
            Slot::Statement => Some(&[(None, "BOOL")]),
            _ => None,
        }
    }
}

/// One statement of a profile, compiled: its `:name` parameters replaced by `$1`, `$2`, … in
/// its slot's order of parameters ([`Slot::params`]) on PostgreSQL, by a `?` at each place a
/// parameter is named on MariaDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    slot: Slot,
    sql: String,
    params: Vec<Param>,
}

/// Where the text the server does not read as code that starts at byte `i` of `text` ends (a
/// literal, a quoted identifier, a comment: see [`Statement::compile_in`]), and whether it
/// counts as code (a literal does, a comment does not); `None` when code starts there. An
/// unterminated one runs to the end (the server then says what is wrong).
fn not_code(dialect: Dialect, text: &str, i: usize) -> Option<(usize, bool)> {
    let mariadb = dialect == Dialect::Mariadb;
    let rest = &text[i..];
    let before = text[..i].chars().next_back();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
    let line = || (rest.find('\n').map_or(text.len(), |n| i + n + 1), false);
    match rest.chars().next()? {
        '\'' => {
            // PostgreSQL reads backslashes only in E'…' (standard_conforming_strings).
            let escape_string =
                matches!(before, Some('E' | 'e')) && !word(text[..i].chars().rev().nth(1));
            Some((quoted_end(text, i, '\'', mariadb || escape_string), true))
        }
        // PostgreSQL: an identifier; MariaDB: a literal (without ANSI_QUOTES).
        '"' => Some((quoted_end(text, i, '"', mariadb), true)),
        '`' if mariadb => Some((quoted_end(text, i, '`', false), true)),
        '-' if rest.starts_with("--")
            && (!mariadb || rest[2..].chars().next().is_none_or(char::is_whitespace)) =>
        {
            Some(line())
        }
        '#' if mariadb => Some(line()),
        // MariaDB runs what a `/*!` or `/*M!` comment holds: code.
        '/' if rest.starts_with("/*")
            && !(mariadb && (rest.starts_with("/*!") || rest.starts_with("/*M!"))) =>
        {
            let mut depth = 0usize;
            let mut k = 0;
            while k < rest.len() {
                if rest[k..].starts_with("/*") && (depth == 0 || !mariadb) {
                    depth += 1;
                    k += 2;
                } else if rest[k..].starts_with("*/") {
                    depth -= 1;
                    k += 2;
                    if depth == 0 {
                        return Some((i + k, false));
                    }
                } else {
                    k += rest[k..].chars().next().map_or(1, char::len_utf8);
                }
            }
            Some((text.len(), false))
        }
        '$' if !mariadb && !word(before) => {
            // A dollar quote: `$$` or `$tag$`, to the same tag again.
            let tag_len = rest[1..]
                .char_indices()
                .find(|&(k, c)| !(c.is_alphabetic() || c == '_' || (k > 0 && c.is_ascii_digit())))
                .filter(|&(_, c)| c == '$')
                .map(|(k, _)| k + 2)?;
            let tag = &rest[..tag_len];
            Some((
                rest[tag_len..]
                    .find(tag)
                    .map_or(text.len(), |n| i + tag_len + n + tag_len),
                true,
            ))
        }
        _ => None,
    }
}

/// Where the literal or quoted identifier that opens with `quote` at byte `i` ends: after its
/// closing quote (a doubled quote is one quote inside it; with `backslash`, so is `\'`).
fn quoted_end(text: &str, i: usize, quote: char, backslash: bool) -> usize {
    let mut chars = text[i + 1..].char_indices().peekable();
    while let Some((k, c)) = chars.next() {
        if backslash && c == '\\' {
            chars.next();
        } else if c == quote {
            if chars.peek().is_some_and(|&(_, d)| d == quote) {
                chars.next();
            } else {
                return i + 1 + k + c.len_utf8();
            }
        }
    }
    text.len()
}

/// The values a statement's parameters are bound from; each statement reads the ones it names.
#[derive(Debug, Clone, Copy, Default)]
pub struct Args<'a> {
    pub name: &'a str,
    pub holder: &'a str,
    pub token: i64,
    pub ttl_ms: f64,
    pub scope: &'a str,
    pub part: &'a str,
    pub content: &'a str,
    pub writer: &'a str,
    pub mode: &'a str,
    pub run: &'a str,
}

impl Statement {
    /// Compiles `text` for `slot` on PostgreSQL: `Err` names the first parameter the slot does
    /// not offer, or a positional one (`$1`: the lab binds by name). The text must not hold a
    /// NUL character.
    pub fn compile(slot: Slot, text: &str) -> Result<Statement, String> {
        Statement::compile_in(Dialect::Postgres, slot, text)
    }

    /// [`Statement::compile`] for a server of `dialect`. What the server does not read as code
    /// is copied as it is, whatever it holds (a `:name`, a `$1`, a `?`): string literals and
    /// quoted identifiers, `--` and `/* … */` comments, and each dialect's own — on PostgreSQL
    /// nested block comments, dollar quotes (`$$ … $$`, `$tag$ … $tag$`) and backslash escapes
    /// in `E'…'` only; on MariaDB backslash escapes in every `'…'` and `"…"` literal, `` `…` ``
    /// identifiers, `#` comments, and `--` only before a space (`/*! … */` is code there).
    pub fn compile_in(dialect: Dialect, slot: Slot, text: &str) -> Result<Statement, String> {
        let text = text.trim();
        if text.contains('\0') {
            return Err("a NUL character in the statement".into());
        }
        let mariadb = dialect == Dialect::Mariadb;
        let mut sql = String::with_capacity(text.len());
        let mut params: Vec<Param> = Vec::new();
        // Whether anything but comments and white space was seen.
        let mut code = false;
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if let Some((end, is_code)) = not_code(dialect, text, i) {
                sql.push_str(&text[i..end]);
                code |= is_code;
                while chars.peek().is_some_and(|&(j, _)| j < end) {
                    chars.next();
                }
                continue;
            }
            code |= !c.is_whitespace();
            match c {
                ':' if chars.peek().is_some_and(|&(_, d)| d == ':') => {
                    sql.push_str("::");
                    chars.next();
                }
                ':' if chars
                    .peek()
                    .is_some_and(|&(_, d)| d.is_ascii_lowercase() || d == '_') =>
                {
                    let mut name = String::new();
                    while let Some(&(_, d)) = chars.peek() {
                        if d.is_ascii_lowercase() || d.is_ascii_digit() || d == '_' {
                            name.push(d);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    let param = slot
                        .params()
                        .iter()
                        .copied()
                        .find(|p| p.as_str() == name)
                        .ok_or_else(|| {
                            let known = Param::ALL.iter().any(|p| p.as_str() == name);
                            format!(
                                "{} parameter :{name}: this statement may name {}",
                                if known { "unavailable" } else { "unknown" },
                                slot.params()
                                    .iter()
                                    .map(|p| format!(":{}", p.as_str()))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        })?;
                    // A marker for now: the numbers are known once every name is.
                    if !params.contains(&param) {
                        params.push(param);
                    }
                    sql.push_str(&format!("\u{0}{}\u{0}", param.as_str()));
                }
                '$' if !mariadb && chars.peek().is_some_and(|&(_, d)| d.is_ascii_digit()) => {
                    return Err(
                        "positional parameter $…: name the parameters (:name, :token, …)".into(),
                    );
                }
                '?' if mariadb => {
                    return Err(
                        "positional parameter ?: name the parameters (:name, :token, …)".into(),
                    );
                }
                _ => sql.push(c),
            }
        }
        if !code {
            return Err("empty statement (nothing but comments)".into());
        }
        if dialect == Dialect::Mariadb {
            // A `?` at each place, bound in the order of the places: the markers alternate with
            // the text (a NUL is nowhere else).
            let mut placed = String::with_capacity(sql.len());
            let mut params = Vec::new();
            for (k, piece) in sql.split('\0').enumerate() {
                if k % 2 == 0 {
                    placed.push_str(piece);
                } else {
                    placed.push('?');
                    params.extend(Param::ALL.iter().copied().find(|p| p.as_str() == piece));
                }
            }
            return Ok(Statement {
                slot,
                sql: placed,
                params,
            });
        }
        // Numbered in the slot's order of parameters, among those the statement names: a
        // statement's `$n` means the same wherever it is read (pg_stat_activity, the evidence).
        let params: Vec<Param> = slot
            .params()
            .iter()
            .copied()
            .filter(|p| params.contains(p))
            .collect();
        for (k, p) in params.iter().enumerate() {
            sql = sql.replace(&format!("\u{0}{}\u{0}", p.as_str()), &format!("${}", k + 1));
        }
        Ok(Statement { slot, sql, params })
    }

    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// The statement as the server runs it (`$n` placeholders on PostgreSQL, `?` on MariaDB).
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters in the order of their placeholders (on MariaDB one per place: a
    /// parameter named twice is bound twice).
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The statement with its parameters bound from `args`.
    pub fn query<'q>(&'q self, args: &Args<'q>) -> Query<'q, Postgres, PgArguments> {
        bind(sqlx::query(&self.sql), &self.params, args)
    }

    /// `sql` (this statement's text, changed by an experiment: wrapped, its clock swapped) with
    /// this statement's parameters bound from `args`.
    pub fn query_with<'q>(
        &self,
        sql: &'q str,
        args: &Args<'q>,
    ) -> Query<'q, Postgres, PgArguments> {
        bind(sqlx::query(sql), &self.params, args)
    }

    /// [`Statement::query`] on MariaDB.
    #[cfg(feature = "mariadb")]
    pub fn my_query<'q>(
        &'q self,
        args: &Args<'q>,
    ) -> Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
        bind(sqlx::query(&self.sql), &self.params, args)
    }

    /// [`Statement::query_with`] on MariaDB: `sql` holds this statement's places first (a
    /// wrapper's own parameters are bound after them, by the caller).
    #[cfg(feature = "mariadb")]
    pub fn my_query_with<'q>(
        &self,
        sql: &'q str,
        args: &Args<'q>,
    ) -> Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
        bind(sqlx::query(sql), &self.params, args)
    }
}

fn bind<'q, DB: sqlx::Database>(
    mut q: Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    params: &[Param],
    args: &Args<'q>,
) -> Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for p in params {
        q = match p {
            Param::Name => q.bind(args.name),
            Param::Holder => q.bind(args.holder),
            Param::Token => q.bind(args.token),
            Param::TtlMs => q.bind(args.ttl_ms),
            Param::Scope => q.bind(args.scope),
            Param::Part => q.bind(args.part),
            Param::Content => q.bind(args.content),
            Param::Writer => q.bind(args.writer),
            Param::Mode => q.bind(args.mode),
            Param::Run => q.bind(args.run),
        };
    }
    q
}

/// The SQL dialect of a profile: the server its statements run on. A PostgreSQL design is a
/// lease and a fenced report write ([`Profile`], the F-series); a MariaDB design is seed 000's
/// shape, a job lease and the runs whose completion it fences ([`JobProfile`], the U-series).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Postgres,
    Mariadb,
}

impl Dialect {
    /// The server's name, as the lab's text says it.
    pub fn server(self) -> &'static str {
        match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mariadb => "MariaDB",
        }
    }
}

/// What a design claims about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Whether a grant carries a fencing token: a number that goes up at every grant. A design
    /// without one answers `0` wherever the lab reads a token (acquire's column, inspect's
    /// `token`), and the lease store refuses any other answer; its runs show `token=–`.
    pub token_at_lease: bool,
    /// Whether the resource sees the holder's token (and can refuse a stale one).
    pub token_at_resource: bool,
}

/// The lease side: its table, its schema and its four statements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSql {
    /// The table the lease rows live in.
    pub table: String,
    /// The DDL that creates it, in the lease database.
    pub schema: String,
    pub acquire: Statement,
    pub renew: Statement,
    pub release: Statement,
    pub inspect: Statement,
}

/// The resource's write: one statement, or a check and a write in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteSql {
    /// One statement answering whether it accepted the write, and recording the attempt itself.
    OneStatement(Statement),
    /// In one transaction: `check` (passed when it changed or returned a row — an UPDATE of the
    /// floor, or a `SELECT … FOR UPDATE` of a lock row; else rollback, rejected), the
    /// test hook, `write`, COMMIT. The lab records the attempt.
    CheckThenWrite { check: Statement, write: Statement },
}

/// The resource side: the fence's own state and the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSql {
    /// The DDL of the fence's state, in the resource database beside the lab's tables.
    pub schema: String,
    /// Makes a scope writable, before any write, when the design needs that.
    pub setup: Option<Statement>,
    /// The highest token the resource accepted in a scope, when the design keeps one.
    pub floor: Option<Statement>,
    /// The write's record name in `write_attempt.mode`.
    pub mode: String,
    pub write: WriteSql,
}

/// A system under test, parsed and compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub about: String,
    /// Where it came from: `built-in` or the file's path.
    pub origin: String,
    pub dialect: Dialect,
    pub claims: Claims,
    pub lease: LeaseSql,
    pub resource: ResourceSql,
}

/// A profile refused, in one line: the file, the statement or line, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {place}: {message}")]
pub struct ProfileError {
    pub origin: String,
    /// The statement's key, or the line in the file.
    pub place: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: String,
    about: String,
    dialect: Dialect,
    claims: Claims,
    lease: RawLease,
    resource: RawResource,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLease {
    table: String,
    schema: String,
    acquire: String,
    renew: String,
    release: String,
    inspect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    #[serde(default)]
    schema: String,
    setup: Option<String>,
    floor: Option<String>,
    write: RawWrite,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWrite {
    mode: String,
    statement: Option<String>,
    check: Option<String>,
    write: Option<String>,
}

/// The built-in profiles: name and file text.
const BUILT_IN: [(&str, &str); 7] = [
    ("seed004", include_str!("../profiles/seed004.toml")),
    (
        "seed004-single",
        include_str!("../profiles/seed004-single.toml"),
    ),
    (
        "seed004-shared",
        include_str!("../profiles/seed004-shared.toml"),
    ),
    (
        "shedlock-style",
        include_str!("../profiles/shedlock-style.toml"),
    ),
    (
        "quartz-style",
        include_str!("../profiles/quartz-style.toml"),
    ),
    (
        "k8s-lease-style",
        include_str!("../profiles/k8s-lease-style.toml"),
    ),
    ("seed000", include_str!("../profiles/seed000.toml")),
];

static PARSED: LazyLock<Vec<Sut>> = LazyLock::new(|| {
    BUILT_IN
        .iter()
        .map(|(name, text)| {
            Sut::parse(&format!("built-in {name}"), text)
                .unwrap_or_else(|e| panic!("a built-in profile does not parse: {e}"))
        })
        .collect()
});

/// A system under test of either shape, as `--sut` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sut {
    /// A lease and a fenced report write on PostgreSQL: the F-series runs it.
    Pg(Profile),
    /// Seed 000's shape on MariaDB, a job lease and the runs it fences: the U-series runs it.
    Job(JobProfile),
}

#[derive(Deserialize)]
struct RawHead {
    dialect: Dialect,
}

impl Sut {
    /// The names of every built-in profile, the default first.
    pub fn built_in_names() -> impl Iterator<Item = &'static str> {
        BUILT_IN.iter().map(|(name, _)| *name)
    }

    /// A built-in profile by name.
    pub fn built_in(name: &str) -> Option<&'static Sut> {
        PARSED.iter().find(|p| p.name() == name)
    }

    /// A built-in profile by name, or else the profile in the file at `name_or_path`.
    pub fn load(name_or_path: &str) -> Result<Sut, ProfileError> {
        if let Some(p) = Sut::built_in(name_or_path) {
            return Ok(p.clone());
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            origin: name_or_path.to_owned(),
            place: "file".into(),
            message: if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "no such file, and no built-in profile of that name (built in: {})",
                    Sut::built_in_names().collect::<Vec<_>>().join(", ")
                )
            } else {
                e.to_string()
            },
        })?;
        Sut::parse(name_or_path, &text)
    }

    /// Parses and compiles a profile's text, of the shape its `dialect` says; `origin` names it
    /// in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Sut, ProfileError> {
        let head: RawHead = toml::from_str(text).map_err(|e| toml_error(origin, text, e))?;
        match head.dialect {
            Dialect::Postgres => Profile::parse_pg(origin, text).map(Sut::Pg),
            Dialect::Mariadb => JobProfile::parse(origin, text).map(Sut::Job),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Sut::Pg(p) => &p.name,
            Sut::Job(j) => &j.name,
        }
    }

    pub fn about(&self) -> &str {
        match self {
            Sut::Pg(p) => &p.about,
            Sut::Job(j) => &j.about,
        }
    }

    /// Where it came from: `built-in NAME` or the file's path.
    pub fn origin(&self) -> &str {
        match self {
            Sut::Pg(p) => &p.origin,
            Sut::Job(j) => &j.origin,
        }
    }

    pub fn claims(&self) -> Claims {
        match self {
            Sut::Pg(p) => p.claims,
            Sut::Job(j) => j.claims,
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Sut::Pg(_) => Dialect::Postgres,
            Sut::Job(_) => Dialect::Mariadb,
        }
    }

    /// Every statement, lease side first.
    pub fn statements(&self) -> Vec<&Statement> {
        match self {
            Sut::Pg(p) => p.statements(),
            Sut::Job(j) => j.statements(),
        }
    }

    /// Whether it is one of the built-in profiles.
    pub fn is_built_in(&self) -> bool {
        is_built_in_origin(self.origin())
    }
}

/// Turns a TOML error into the one line that names the file and the line.
fn toml_error(origin: &str, text: &str, e: toml::de::Error) -> ProfileError {
    ProfileError {
        origin: origin.to_owned(),
        place: match e.span() {
            Some(span) => format!("line {}", text[..span.start].lines().count().max(1)),
            None => "file".into(),
        },
        message: e.message().trim().replace('\n', " "),
    }
}

impl Profile {
    /// The names of the built-in PostgreSQL profiles, the default first.
    pub fn built_in_names() -> impl Iterator<Item = &'static str> {
        PARSED.iter().filter_map(|p| match p {
            Sut::Pg(p) => Some(p.name.as_str()),
            Sut::Job(_) => None,
        })
    }

    /// A built-in PostgreSQL profile by name.
    pub fn built_in(name: &str) -> Option<&'static Profile> {
        match Sut::built_in(name)? {
            Sut::Pg(p) => Some(p),
            Sut::Job(_) => None,
        }
    }

    /// The lab's own design in its textbook form: the default system under test.
    pub fn seed004() -> &'static Profile {
        Profile::built_in("seed004").expect("seed004 is built in")
    }

    /// A built-in PostgreSQL profile by name, or else the profile in the file at `name_or_path`.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        match Sut::load(name_or_path)? {
            Sut::Pg(p) => Ok(p),
            Sut::Job(j) => Err(not_this_series(&j.origin, "the U-series", "the F-series")),
        }
    }

    /// Parses and compiles a profile's text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Profile, ProfileError> {
        match Sut::parse(origin, text)? {
            Sut::Pg(p) => Ok(p),
            Sut::Job(_) => Err(not_this_series(origin, "the U-series", "the F-series")),
        }
    }

    /// [`Profile::parse`] once the dialect is known to be PostgreSQL.
    fn parse_pg(origin: &str, text: &str) -> Result<Profile, ProfileError> {
        let raw: RawProfile = toml::from_str(text).map_err(|e| toml_error(origin, text, e))?;
        let compile = |slot: Slot, text: &str| {
            Statement::compile(slot, text).map_err(|message| ProfileError {
                origin: origin.to_owned(),
                place: slot.key().to_owned(),
                message,
            })
        };
        let refuse = |place: &str, message: &str| ProfileError {
            origin: origin.to_owned(),
            place: place.to_owned(),
            message: message.to_owned(),
        };
        // In the file's order: the first statement refused is the first one a reader meets.
        let lease = LeaseSql {
            table: raw.lease.table,
            schema: raw.lease.schema,
            acquire: compile(Slot::Acquire, &raw.lease.acquire)?,
            renew: compile(Slot::Renew, &raw.lease.renew)?,
            release: compile(Slot::Release, &raw.lease.release)?,
            inspect: compile(Slot::Inspect, &raw.lease.inspect)?,
        };
        let setup = raw
            .resource
            .setup
            .map(|s| compile(Slot::Setup, &s))
            .transpose()?;
        let floor = raw
            .resource
            .floor
            .map(|f| compile(Slot::Floor, &f))
            .transpose()?;
        let w = raw.resource.write;
        let write = match (w.statement, w.check, w.write) {
            (Some(s), None, None) => WriteSql::OneStatement(compile(Slot::Statement, &s)?),
            (None, Some(check), Some(write)) => WriteSql::CheckThenWrite {
                check: compile(Slot::Check, &check)?,
                write: compile(Slot::Write, &write)?,
            },
            (None, Some(_), None) => {
                return Err(refuse("resource.write", "a `check` needs its `write`"))
            }
            (None, None, Some(_)) => {
                return Err(refuse(
                    "resource.write",
                    "a `write` needs its `check` (or write `statement` for one statement)",
                ))
            }
            (None, None, None) => {
                return Err(refuse(
                    "resource.write",
                    "missing the write: `statement`, or `check` and `write`",
                ))
            }
            (Some(_), _, _) => {
                return Err(refuse(
                    "resource.write",
                    "`statement` or `check` and `write`, not both",
                ))
            }
        };
        if raw.name.trim().is_empty() {
            return Err(refuse("name", "empty"));
        }
        Ok(Profile {
            name: raw.name,
            about: raw.about,
            origin: origin.to_owned(),
            dialect: raw.dialect,
            claims: raw.claims,
            lease,
            resource: ResourceSql {
                schema: raw.resource.schema,
                setup,
                floor,
                mode: w.mode,
                write,
            },
        })
    }

    /// The text of a built-in profile's file (`lab exercise` starts from seed004's).
    pub fn built_in_text(name: &str) -> Option<&'static str> {
        BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// Whether it is one of the built-in profiles (checked by the lab's own tests).
    pub fn is_built_in(&self) -> bool {
        is_built_in_origin(&self.origin)
    }

    /// What [`Profile::load`] takes to load this profile again (a holder process does): the
    /// built-in's name, or the file's path.
    pub fn load_arg(&self) -> String {
        load_arg_of(&self.name, &self.origin)
    }

    /// Every statement, lease side first.
    pub fn statements(&self) -> Vec<&Statement> {
        let l = &self.lease;
        let r = &self.resource;
        let mut all = vec![&l.acquire, &l.renew, &l.release, &l.inspect];
        all.extend(r.setup.as_ref());
        all.extend(r.floor.as_ref());
        match &r.write {
            WriteSql::OneStatement(s) => all.push(s),
            WriteSql::CheckThenWrite { check, write } => all.extend([check, write]),
        }
        all
    }

    /// Prepares every statement against two scratch databases created on the server `admin`
    /// connects to (a superuser, to a maintenance database): one with the lease schema, one with
    /// the lab's resource tables and the profile's resource schema, as the lab lays them out.
    /// `Err` quotes the server on the first schema or statement it refuses, or a statement whose
    /// answer is not what its place needs. The scratch databases are dropped on every path.
    pub async fn prepare(&self, admin: &PgConnectOptions) -> Result<(), ProfileError> {
        let suffix = format!("{}_{}", std::process::id(), unique());
        let lease_db = format!("lab_profile_lease_{suffix}");
        let res_db = format!("lab_profile_res_{suffix}");
        let mut conn = admin.connect().await.map_err(|e| self.error("server", e))?;
        let outcome = async {
            for db in [&lease_db, &res_db] {
                conn.execute(format!("CREATE DATABASE {db}").as_str())
                    .await
                    .map_err(|e| self.error("server", e))?;
            }
            self.prepare_in(
                &admin.clone().database(&lease_db),
                &[("lease.schema", &self.lease.schema)],
                &[
                    &self.lease.acquire,
                    &self.lease.renew,
                    &self.lease.release,
                    &self.lease.inspect,
                ],
            )
            .await?;
            let mut res_statements: Vec<&Statement> = self.resource.setup.iter().collect();
            res_statements.extend(self.resource.floor.as_ref());
            match &self.resource.write {
                WriteSql::OneStatement(s) => res_statements.push(s),
                WriteSql::CheckThenWrite { check, write } => res_statements.extend([check, write]),
            }
            self.prepare_in(
                &admin.clone().database(&res_db),
                &[
                    ("the lab's resource tables", crate::schema::LAB_RESOURCE_SQL),
                    ("resource.schema", &self.resource.schema),
                ],
                &res_statements,
            )
            .await
        }
        .await;
        for db in [&lease_db, &res_db] {
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
                .await;
        }
        let _ = conn.close().await;
        outcome
    }

    async fn prepare_in(
        &self,
        db: &PgConnectOptions,
        schemas: &[(&str, &str)],
        statements: &[&Statement],
    ) -> Result<(), ProfileError> {
        let mut conn = db.connect().await.map_err(|e| self.error("server", e))?;
        let outcome = async {
            for (place, ddl) in schemas {
                if !ddl.trim().is_empty() {
                    sqlx::raw_sql(ddl)
                        .execute(&mut conn)
                        .await
                        .map_err(|e| self.error(place, e))?;
                }
            }
            for s in statements {
                self.prepare_one(&mut conn, s).await?;
            }
            Ok(())
        }
        .await;
        let _ = conn.close().await;
        outcome
    }

    async fn prepare_one(
        &self,
        conn: &mut PgConnection,
        s: &Statement,
    ) -> Result<(), ProfileError> {
        let types: Vec<PgTypeInfo> = s.params.iter().map(|p| p.type_info()).collect();
        let prepared = conn
            .prepare_with(&s.sql, &types)
            .await
            .map_err(|e| self.error(s.slot.key(), e))?;
        if s.slot == Slot::Acquire {
            // F3 times the acquire inside a WITH: it must run there too.
            conn.prepare_with(&crate::lease::stmt::timed_sql(&s.sql), &types)
                .await
                .map_err(|e| {
                    let mut e = self.error(s.slot.key(), e);
                    e.message = format!(
                        "F3 runs it inside a WITH, to time it on the server, and there {}",
                        e.message
                    );
                    e
                })?;
        }
        let Some(wanted) = s.slot.returns(Dialect::Postgres) else {
            return Ok(());
        };
        answers_fit(&self.origin, s.slot, &prepared, wanted, |ty| ty)
    }

    fn error(&self, place: &str, e: sqlx::Error) -> ProfileError {
        refused(&self.origin, place, e)
    }
}

/// Whether `prepared`, a statement of `origin` in `slot` prepared on either server, answers the
/// columns its place needs: each column's name and the server's type name, read through `kind`
/// (the kind of type the lab reads), against `wanted` ([`Slot::returns`]); `Err` says both, in
/// one line.
pub(crate) fn answers_fit<'q>(
    origin: &str,
    slot: Slot,
    prepared: &impl sqlx::Statement<'q>,
    wanted: &[(Option<&str>, &str)],
    kind: fn(&str) -> &str,
) -> Result<(), ProfileError> {
    let got: Vec<(String, String)> = prepared
        .columns()
        .iter()
        .map(|c| (c.name().to_owned(), c.type_info().name().to_owned()))
        .collect();
    let fits = got.len() == wanted.len()
        && got
            .iter()
            .zip(wanted)
            .all(|((name, ty), (want_name, want_ty))| {
                kind(ty) == *want_ty && want_name.is_none_or(|w| w == name)
            });
    if fits {
        return Ok(());
    }
    let describe = |cols: Vec<String>| format!("({})", cols.join(", "));
    Err(ProfileError {
        origin: origin.to_owned(),
        place: slot.key().to_owned(),
        message: format!(
            "returns {}, must return {}",
            describe(got.iter().map(|(n, t)| format!("{n} {t}")).collect()),
            describe(
                wanted
                    .iter()
                    .map(|(n, t)| format!("{} {t}", n.unwrap_or("any name")))
                    .collect()
            )
        ),
    })
}

/// Whether `origin` names a built-in profile (`built-in NAME`), not a file.
pub(crate) fn is_built_in_origin(origin: &str) -> bool {
    origin.starts_with("built-in ")
}

/// What `load` takes to load a profile again (a holder process does): the built-in's name, or
/// the file's path.
pub(crate) fn load_arg_of(name: &str, origin: &str) -> String {
    if is_built_in_origin(origin) {
        name.to_owned()
    } else {
        origin.to_owned()
    }
}

/// A statement or schema of `origin` at `place` the server refused, in its own words.
pub(crate) fn refused(origin: &str, place: &str, e: sqlx::Error) -> ProfileError {
    let message = match &e {
        sqlx::Error::Database(db) => format!("the server refused it: {}", db.message()),
        other => other.to_string(),
    };
    ProfileError {
        origin: origin.to_owned(),
        place: place.to_owned(),
        message: message.replace('\n', " "),
    }
}

/// A profile of the other dialect than the caller drives.
fn not_this_series(origin: &str, runs_it: &str, not: &str) -> ProfileError {
    ProfileError {
        origin: origin.to_owned(),
        place: "dialect".into(),
        message: format!("{runs_it} runs a design of this dialect, not {not}"),
    }
}

/// A number unique within this process, for scratch database names.
pub(crate) fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_parameters_become_positional_in_the_slots_order() {
        let s = Statement::compile(
            Slot::Check,
            "UPDATE f SET m = :token WHERE s = :scope AND m <= :token",
        )
        .unwrap();
        assert_eq!(s.sql(), "UPDATE f SET m = $1 WHERE s = $2 AND m <= $1");
        assert_eq!(s.params(), [Param::Token, Param::Scope]);
        let s = Statement::compile(Slot::Write, "VALUES (:token, :writer, :scope)").unwrap();
        assert_eq!(s.sql(), "VALUES ($3, $2, $1)");
        assert_eq!(s.params(), [Param::Scope, Param::Writer, Param::Token]);
    }

    #[test]
    fn casts_literals_identifiers_and_comments_are_not_parameters() {
        let s = Statement::compile(
            Slot::Acquire,
            "SELECT :ttl_ms::float8, ':holder', \":name\" -- :nothing here\nFROM t WHERE n = :name",
        )
        .unwrap();
        assert_eq!(
            s.sql(),
            "SELECT $2::float8, ':holder', \":name\" -- :nothing here\nFROM t WHERE n = $1"
        );
        assert_eq!(s.params(), [Param::Name, Param::TtlMs]);
    }

    #[test]
    fn what_postgresql_does_not_read_as_code_holds_no_parameter() {
        let s = Statement::compile(
            Slot::Acquire,
            "SELECT /* :holder /* $1 nested */ :token */ :name, $$ :holder $1 $$, \
             $q$ it's :ttl_ms $q$, E'it\\'s :token', 'a\\' || :holder, x$y -- $1\n",
        )
        .unwrap();
        assert_eq!(
            s.sql(),
            "SELECT /* :holder /* $1 nested */ :token */ $1, $$ :holder $1 $$, \
             $q$ it's :ttl_ms $q$, E'it\\'s :token', 'a\\' || $2, x$y -- $1"
        );
        assert_eq!(s.params(), [Param::Name, Param::Holder]);
        assert!(Statement::compile(Slot::Renew, "/* nothing */ -- here").is_err());
        assert!(Statement::compile(Slot::Renew, "SELECT $$ $$ || $2").is_err());
    }

    #[test]
    fn what_mariadb_does_not_read_as_code_holds_no_parameter() {
        let s = Statement::compile_in(
            Dialect::Mariadb,
            Slot::Complete,
            "UPDATE r SET s = 'it\\'s :token ?', n = \"\\\" :run ?\" # :token ?\n\
             /* :run ? /* */ WHERE `:token?` = :run -- ? :token\n\
             AND t = 1 --:token AND /*! :token */ 1",
        )
        .unwrap();
        assert_eq!(
            s.sql(),
            "UPDATE r SET s = 'it\\'s :token ?', n = \"\\\" :run ?\" # :token ?\n\
             /* :run ? /* */ WHERE `:token?` = ? -- ? :token\n\
             AND t = 1 --? AND /*! ? */ 1"
        );
        assert_eq!(s.params(), [Param::Run, Param::Token, Param::Token]);
        assert!(Statement::compile_in(Dialect::Mariadb, Slot::Status, "# nothing").is_err());
    }

    #[test]
    fn a_parameter_the_slot_does_not_offer_is_refused_by_name() {
        let unknown = Statement::compile(Slot::Acquire, "SELECT :nme").unwrap_err();
        assert!(unknown.starts_with("unknown parameter :nme"), "{unknown}");
        assert!(unknown.contains(":name, :holder, :ttl_ms"), "{unknown}");
        let unavailable = Statement::compile(Slot::Acquire, "SELECT :token").unwrap_err();
        assert!(
            unavailable.starts_with("unavailable parameter :token"),
            "{unavailable}"
        );
        assert!(Statement::compile(Slot::Renew, "SELECT $1").is_err());
        assert!(Statement::compile(Slot::Renew, "  ").is_err());
        assert!(Statement::compile(Slot::Renew, "-- your statement here\n").is_err());
    }

    #[test]
    fn the_built_in_profiles_parse_and_the_default_is_seed004() {
        let names: Vec<_> = Profile::built_in_names().collect();
        assert_eq!(
            names,
            [
                "seed004",
                "seed004-single",
                "seed004-shared",
                "shedlock-style",
                "quartz-style",
                "k8s-lease-style"
            ]
        );
        for name in names {
            let p = Profile::built_in(name).expect(name);
            assert_eq!(p.name, name);
            // The lab's own forms fence at the resource; the modelled designs do not.
            let own = name.starts_with("seed004");
            assert_eq!(p.claims.token_at_resource, own, "{name}");
            assert_eq!(p.resource.floor.is_some(), own, "{name}");
            assert_eq!(
                p.claims.token_at_lease,
                name != "shedlock-style" && name != "quartz-style"
            );
        }
        assert_eq!(Profile::seed004().resource.mode, "fenced-scope");
        assert!(matches!(
            Profile::seed004().resource.write,
            WriteSql::CheckThenWrite { .. }
        ));
    }

    #[test]
    fn on_mariadb_each_place_is_a_question_mark_bound_in_the_order_of_the_places() {
        let s = Statement::compile_in(
            Dialect::Mariadb,
            Slot::Complete,
            "UPDATE r SET t = :token WHERE id = :run AND ':holder' <> '?' AND t = :token",
        )
        .unwrap();
        assert_eq!(
            s.sql(),
            "UPDATE r SET t = ? WHERE id = ? AND ':holder' <> '?' AND t = ?"
        );
        assert_eq!(s.params(), [Param::Token, Param::Run, Param::Token]);
        let positional = Statement::compile_in(
            Dialect::Mariadb,
            Slot::Status,
            "SELECT s FROM r WHERE id = ?",
        )
        .unwrap_err();
        assert!(
            positional.starts_with("positional parameter ?"),
            "{positional}"
        );
        let unavailable =
            Statement::compile_in(Dialect::Mariadb, Slot::Status, "SELECT :token").unwrap_err();
        assert!(
            unavailable.starts_with("unavailable parameter :token: this statement may name :run"),
            "{unavailable}"
        );
    }

    #[test]
    fn seed000_is_the_built_in_mariadb_design_and_each_series_refuses_the_others() {
        assert_eq!(Sut::built_in_names().last(), Some("seed000"));
        assert!(!Profile::built_in_names().any(|n| n == "seed000"));
        let j = JobProfile::seed000();
        assert_eq!(
            Sut::built_in("seed000").unwrap().dialect(),
            Dialect::Mariadb
        );
        assert_eq!(j.statements().len(), 8);
        assert!(j.claims.token_at_lease && j.claims.token_at_resource);
        assert_eq!(
            j.acquired.params(),
            [Param::Name, Param::Holder],
            "{}",
            j.acquired.sql()
        );
        let e = Profile::load("seed000").unwrap_err().to_string();
        assert!(
            e.contains("dialect: the U-series runs a design of this dialect, not the F-series"),
            "{e}"
        );
        let e = JobProfile::load("seed004").unwrap_err().to_string();
        assert!(
            e.contains("the F-series runs a design of this dialect"),
            "{e}"
        );
        // A MariaDB profile is refused as a PostgreSQL one is: the statement and what is wrong.
        let good = include_str!("../profiles/seed000.toml");
        let cases = [
            (
                good.replace(
                    "AND owner_token = :holder\n\"\"\"",
                    "AND owner = :hodler\n\"\"\"",
                ),
                "my.toml: lease.acquired: unknown parameter :hodler",
            ),
            (
                good.replace("[resource.run]", "[resource.write]"),
                "my.toml: line ",
            ),
            (
                good.replace("dialect = \"mariadb\"", "dialect = \"oracle\""),
                "my.toml: line ",
            ),
        ];
        for (text, expected) in cases {
            assert_ne!(text, good, "{expected}");
            let e = Sut::parse("my.toml", &text).unwrap_err().to_string();
            assert!(
                e.starts_with(expected),
                "{expected:?} is not how {e:?} starts"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        let start = good.find("status = \"\"\"").expect("status");
        let without_status = &good[..start];
        let e = Sut::parse("my.toml", without_status)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `status`"), "{e}");
    }

    #[test]
    fn a_bad_profile_is_refused_in_one_line_naming_the_file_and_the_place() {
        let good = include_str!("../profiles/seed004.toml");
        let cases = [
            (good.replace("[lease]", "[lease"), "line "),
            (good.replace("renew = ", "renewal = "), "line "),
            (
                good.replace(
                    "WHERE name = :name AND holder",
                    "WHERE name = :nmae AND holder",
                ),
                "lease.renew: unknown parameter :nmae",
            ),
            (good.replace("check = \"\"\"", "checked = \"\"\""), "line "),
        ];
        for (text, expected) in cases {
            let e = Profile::parse("my.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with("my.toml: "), "{e}");
            assert!(e.contains(expected), "{expected:?} not in {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // The renew statement cut out, whole.
        let start = good.find("renew = \"\"\"").expect("renew");
        let end = start + 12 + good[start + 12..].find("\"\"\"").expect("its end") + 3;
        let without_renew = format!("{}{}", &good[..start], &good[end..]);
        let missing = Profile::parse("my.toml", &without_renew)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing field `renew`"), "{missing}");
        assert!(!missing.contains('\n'), "{missing}");
    }
}
