//! A MariaDB design in seed 000's shape: a job lease — taken by an upsert whose row is then read
//! back, renewed, released, inspected — and the runs a holder starts under its holding and
//! completes, the completion fenced by whatever the design checks. The U-series runs it;
//! `fenced_job::JobLeaseStore` (`--features mariadb`) runs its statements, and
//! `JobProfile::prepare` there refuses one the server refuses.

use serde::Deserialize;

use super::{is_built_in_origin, load_arg_of, not_this_series, toml_error};
use super::{Claims, Dialect, LeaseSql, ProfileError, Slot};
use super::{Statement, Sut};

/// A job-lease design on MariaDB, parsed and compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobProfile {
    pub name: String,
    pub about: String,
    /// Where it came from: `built-in NAME` or the file's path.
    pub origin: String,
    pub claims: Claims,
    /// The lease table and its statements.
    pub lease: LeaseSql,
    /// `lease.acquired`, `:name :holder` → the token of this holder's holding, one BIGINT
    /// column; no row when the acquire did not grant it (MariaDB's upsert answers no row).
    pub acquired: Statement,
    pub runs: RunSql,
}

/// The runs: their table and the three statements on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSql {
    /// The table the runs live in (emptied between experiments).
    pub table: String,
    /// The DDL that creates it, beside the lease table.
    pub schema: String,
    /// `:run :name :holder :token` → starts the run under that holding.
    pub start: Statement,
    /// `:run :name :holder :token` → completed when it changed one row; 0 rows is "lease lost
    /// or stale", an answer.
    pub complete: Statement,
    /// `:run` → one text column, the run's status.
    pub status: Statement,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJobProfile {
    name: String,
    about: String,
    #[allow(dead_code)]
    dialect: Dialect,
    claims: Claims,
    lease: RawJobLease,
    resource: RawRuns,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJobLease {
    table: String,
    schema: String,
    acquire: String,
    acquired: String,
    renew: String,
    release: String,
    inspect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuns {
    table: String,
    schema: String,
    run: RawRun,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    start: String,
    complete: String,
    status: String,
}

impl JobProfile {
    /// Parses and compiles a MariaDB profile's text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<JobProfile, ProfileError> {
        let raw: RawJobProfile = toml::from_str(text).map_err(|e| toml_error(origin, text, e))?;
        let compile = |slot: Slot, text: &str| {
            Statement::compile_in(Dialect::Mariadb, slot, text).map_err(|message| ProfileError {
                origin: origin.to_owned(),
                place: slot.key().to_owned(),
                message,
            })
        };
        if raw.name.trim().is_empty() {
            return Err(ProfileError {
                origin: origin.to_owned(),
                place: "name".into(),
                message: "empty".into(),
            });
        }
        // In the file's order: the first statement refused is the first one a reader meets.
        let acquire = compile(Slot::Acquire, &raw.lease.acquire)?;
        let acquired = compile(Slot::Acquired, &raw.lease.acquired)?;
        let lease = LeaseSql {
            table: raw.lease.table,
            schema: raw.lease.schema,
            acquire,
            renew: compile(Slot::Renew, &raw.lease.renew)?,
            release: compile(Slot::Release, &raw.lease.release)?,
            inspect: compile(Slot::Inspect, &raw.lease.inspect)?,
        };
        let r = raw.resource;
        let runs = RunSql {
            table: r.table,
            schema: r.schema,
            start: compile(Slot::Start, &r.run.start)?,
            complete: compile(Slot::Complete, &r.run.complete)?,
            status: compile(Slot::Status, &r.run.status)?,
        };
        Ok(JobProfile {
            name: raw.name,
            about: raw.about,
            origin: origin.to_owned(),
            claims: raw.claims,
            lease,
            acquired,
            runs,
        })
    }

    /// A built-in MariaDB profile by name.
    pub fn built_in(name: &str) -> Option<&'static JobProfile> {
        match Sut::built_in(name)? {
            Sut::Job(j) => Some(j),
            Sut::Pg(_) => None,
        }
    }

    /// Seed 000's own design: the default the U-series runs.
    pub fn seed000() -> &'static JobProfile {
        JobProfile::built_in("seed000").expect("seed000 is built in")
    }

    /// A built-in MariaDB profile by name, or else the profile in the file at `name_or_path`.
    pub fn load(name_or_path: &str) -> Result<JobProfile, ProfileError> {
        match Sut::load(name_or_path)? {
            Sut::Job(j) => Ok(j),
            Sut::Pg(p) => Err(not_this_series(&p.origin, "the F-series", "the U-series")),
        }
    }

    /// Whether it is one of the built-in profiles.
    pub fn is_built_in(&self) -> bool {
        is_built_in_origin(&self.origin)
    }

    /// What [`JobProfile::load`] takes to load this profile again (a holder process does).
    pub fn load_arg(&self) -> String {
        load_arg_of(&self.name, &self.origin)
    }

    /// Every statement, lease side first.
    pub fn statements(&self) -> Vec<&Statement> {
        let l = &self.lease;
        let r = &self.runs;
        vec![
            &l.acquire,
            &self.acquired,
            &l.renew,
            &l.release,
            &l.inspect,
            &r.start,
            &r.complete,
            &r.status,
        ]
    }
}
