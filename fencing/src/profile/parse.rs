//! A profile's TOML form, parsed: [`Sut::parse`] reads a file's `dialect` and hands it to the
//! shape it names — [`Profile`] on PostgreSQL (its [`Claims`], its lease side [`LeaseSql`], its
//! resource side [`ResourceSql`] with the [`WriteSql`]), or a [`JobProfile`] on MariaDB — each
//! statement compiled for its place as it is read, the first refusal one [`ProfileError`] line
//! naming the file and the line or statement. The built-in profiles (`fencing/profiles/`,
//! compiled in) are parsed once, here.
//!
//! This file judges a profile's form only, never its SQL: it must not talk to a server (that is
//! `prepare.rs`) nor use the stores that run a profile (`lease`, `resource`, `schema`).

use std::path::Path;
use std::sync::LazyLock;

use serde::Deserialize;

use super::{Dialect, JobProfile, Slot, Statement};

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
const BUILT_IN: [(&str, &str); 8] = [
    ("seed004", include_str!("../../profiles/seed004.toml")),
    (
        "seed004-single",
        include_str!("../../profiles/seed004-single.toml"),
    ),
    (
        "seed004-shared",
        include_str!("../../profiles/seed004-shared.toml"),
    ),
    (
        "shedlock-style",
        include_str!("../../profiles/shedlock-style.toml"),
    ),
    (
        "quartz-style",
        include_str!("../../profiles/quartz-style.toml"),
    ),
    (
        "k8s-lease-style",
        include_str!("../../profiles/k8s-lease-style.toml"),
    ),
    (
        "db-scheduler-style",
        include_str!("../../profiles/db-scheduler-style.toml"),
    ),
    ("seed000", include_str!("../../profiles/seed000.toml")),
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
pub(super) fn toml_error(origin: &str, text: &str, e: toml::de::Error) -> ProfileError {
    // The line the parser stopped at: a claim written as a word (`yes`) is said to be a
    // boolean, not a string the parser wanted quoted.
    let line = e.span().map(|span| {
        let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
        let end = text[span.start..]
            .find('\n')
            .map_or(text.len(), |i| span.start + i);
        &text[start..end]
    });
    let boolean = line.and_then(|l| {
        let (key, value) = l.split_once('=')?;
        let (key, value) = (key.trim(), value.trim());
        BOOLEAN_KEYS
            .contains(&key)
            .then(|| format!("`{key}` is a boolean: write true or false (found `{value}`)"))
    });
    ProfileError {
        origin: origin.to_owned(),
        place: match e.span() {
            Some(span) => format!("line {}", text[..span.start].lines().count().max(1)),
            None => "file".into(),
        },
        message: boolean.unwrap_or_else(|| e.message().trim().replace('\n', " ")),
    }
}

/// The profile's keys whose values are booleans (the claims).
const BOOLEAN_KEYS: [&str; 2] = ["token_at_lease", "token_at_resource"];

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

/// A profile of the other dialect than the caller drives.
pub(super) fn not_this_series(origin: &str, runs_it: &str, not: &str) -> ProfileError {
    ProfileError {
        origin: origin.to_owned(),
        place: "dialect".into(),
        message: format!("{runs_it} runs a design of this dialect, not {not}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Param;

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
                "k8s-lease-style",
                "db-scheduler-style"
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
        let good = include_str!("../../profiles/seed000.toml");
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
        let good = include_str!("../../profiles/seed004.toml");
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
            // A claim is a boolean, said so, not "string values must be quoted".
            (
                good.replace("token_at_lease = true", "token_at_lease = yes"),
                "`token_at_lease` is a boolean: write true or false (found `yes`)",
            ),
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
