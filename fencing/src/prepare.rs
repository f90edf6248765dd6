//! A profile's SQL, judged by the server: [`Profile::prepare`] prepares every statement against
//! scratch databases that hold its schema, as the lab lays them out, and quotes the server on the
//! first one it refuses. The helpers it shares with the MariaDB check (`fenced_job`) are here too.
//!
//! It sits above both the profiles and the stores: it reads the lab's resource tables from
//! [`crate::schema`] and the form in which F3 times an acquire from [`crate::lease::for_experiments`],
//! while `profile` uses nothing of the crate beyond itself and `lease` and `schema` use only the
//! profile's data types — neither calls back into this module (a test below checks both sides),
//! so the modules' dependencies go one way: profile ← lease, schema ← prepare.
//! It must not change a profile, nor leave a scratch database behind on any path.

use sqlx::postgres::{PgConnectOptions, PgTypeInfo};
use sqlx::TypeInfo as _;
use sqlx::{Column as _, ConnectOptions as _, Connection as _, Executor as _, PgConnection};

use crate::lease::for_experiments::timed_sql;
use crate::profile::{Dialect, Profile, ProfileError, Slot, Statement, WriteSql};
use crate::schema::LAB_RESOURCE_SQL;

impl Profile {
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
                    ("the lab's resource tables", LAB_RESOURCE_SQL),
                    ("resource.schema", &self.resource.schema),
                ],
                &res_statements,
            )
            .await?;
            if let WriteSql::OneStatement(s) = &self.resource.write {
                self.records_its_attempts(&admin.clone().database(&res_db), s)
                    .await?;
            }
            Ok(())
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

    /// A one-statement write must record each attempt in `write_attempt` itself (the lab's log
    /// of every write, accepted or not, that F4, F11 and chaos read): run twice on the scratch
    /// database — with the greatest token, and with a smaller one — each call must add a row.
    /// Said up front, about the design, rather than as an experiment's miscount later.
    async fn records_its_attempts(
        &self,
        db: &PgConnectOptions,
        s: &Statement,
    ) -> Result<(), ProfileError> {
        let mut conn = db.connect().await.map_err(|e| self.error("server", e))?;
        let outcome = async {
            let scope = "profile-check";
            if let Some(setup) = &self.resource.setup {
                setup
                    .query(&crate::profile::Args {
                        scope,
                        ..Default::default()
                    })
                    .execute(&mut conn)
                    .await
                    .map_err(|e| self.error(setup.slot().key(), e))?;
            }
            let count = "SELECT count(*) FROM write_attempt";
            for token in [2, 1] {
                let before: i64 = sqlx::query_scalar(count)
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| self.error("server", e))?;
                s.query(&crate::profile::Args {
                    scope,
                    part: "summary",
                    content: "profile check",
                    writer: "lab-profile-check",
                    token,
                    mode: &self.resource.mode,
                    ..Default::default()
                })
                .fetch_all(&mut conn)
                .await
                .map_err(|e| self.error(s.slot().key(), e))?;
                let after: i64 = sqlx::query_scalar(count)
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| self.error("server", e))?;
                if after != before + 1 {
                    return Err(ProfileError {
                        origin: self.origin.clone(),
                        place: s.slot().key().to_owned(),
                        message: format!(
                            "a write with token {token} added {} rows to write_attempt, not 1: the \
                             one statement must record its own attempt, accepted or not (the lab's \
                             log every experiment reads), as seed004-single's does: attempt AS \
                             (INSERT INTO write_attempt (scope, part, writer, token, mode, accepted) …)",
                            after - before
                        ),
                    });
                }
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
        let types: Vec<PgTypeInfo> = s.params().iter().map(|p| p.type_info()).collect();
        let prepared = conn
            .prepare_with(s.sql(), &types)
            .await
            .map_err(|e| self.error(s.slot().key(), e))?;
        // What it answers first: a design's acquire that answers two columns is told so, not
        // what the timed form below makes of it.
        if let Some(wanted) = s.slot().returns(Dialect::Postgres) {
            answers_fit(&self.origin, s.slot(), &prepared, wanted, |ty| ty)?;
        }
        if s.slot() == Slot::Acquire {
            // F3 times the acquire inside a WITH: it must run there too.
            conn.prepare_with(&timed_sql(s.sql()), &types)
                .await
                .map_err(|e| {
                    let mut e = self.error(s.slot().key(), e);
                    e.message = format!(
                        "the statement must also run as the body of a WITH (F3 times each \
                         acquire on the server so), and there {}",
                        e.message
                    );
                    e
                })?;
        }
        Ok(())
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

/// A number unique within this process, for scratch database names.
pub(crate) fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The code of a source file, its comment lines dropped (docs may name any module).
    fn code(path: &Path) -> String {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        text.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn only_the_preparing_step_reaches_above_the_profiles_data_types() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offences = Vec::new();
        // The profile module uses nothing of the crate beyond itself.
        for file in rust_files(&src.join("profile")) {
            let code = code(&file);
            for store in [
                "crate::lease",
                "crate::schema",
                "crate::resource",
                "crate::fenced_job",
                "crate::prepare",
            ] {
                if code.contains(store) {
                    offences.push(format!("{}: uses {store}", file.display()));
                }
            }
        }
        // The stores that use those data types never ask a server to judge a profile.
        let mut stores = rust_files(&src.join("lease"));
        stores.push(src.join("schema.rs"));
        for file in stores {
            if code(&file).contains("prepare(") {
                offences.push(format!("{}: prepares a profile", file.display()));
            }
        }
        assert!(
            offences.is_empty(),
            "a cycle through Profile::prepare: {offences:#?}"
        );
    }
}
