//! A profile's statements, lexed and bound: a statement names its parameters `:name`;
//! [`Statement::compile_in`] reads its text as the server of its [`Dialect`] reads code —
//! literals, quoted identifiers, comments, PostgreSQL's dollar quotes, each dialect's backslash
//! escapes — and turns each parameter it finds in the code into PostgreSQL's `$1`, `$2`, … in its
//! place's order of parameters ([`Slot::params`]), or a `?` at each place on MariaDB, refusing a
//! name the place does not offer. [`Statement::query`] binds them from [`Args`].
//!
//! This file must not read a profile's file, know its TOML form, or talk to a server: it takes a
//! statement's text and its place, and hands back a query for the caller to run.

use std::fmt;

use serde::Deserialize;
use sqlx::postgres::{PgArguments, PgTypeInfo};
use sqlx::query::Query;
use sqlx::Postgres;

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
    pub(crate) fn type_info(self) -> PgTypeInfo {
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
            Slot::Inspect => &[Name, TtlMs],
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

    /// MariaDB's form of a statement whose parameters are NUL-delimited markers: a `?` at each
    /// place, bound in the order of the places (the markers alternate with the text; a NUL is
    /// nowhere else).
    fn placed_for_mariadb(slot: Slot, sql: &str) -> Statement {
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
        Statement {
            slot,
            sql: placed,
            params,
        }
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
                    let param = param_named(slot, &name)?;
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
            return Ok(Statement::placed_for_mariadb(slot, &sql));
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
/// lease and a fenced report write ([`Profile`](super::Profile), the F-series); a MariaDB
/// design is seed 000's shape, a job lease and the runs whose completion it fences
/// ([`JobProfile`](super::JobProfile), the U-series).
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

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The parameter `:name` of a statement in `slot`, or why it may not be named there.
fn param_named(slot: Slot, name: &str) -> Result<Param, String> {
    slot.params()
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
        })
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
}
