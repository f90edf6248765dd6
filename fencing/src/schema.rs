//! The two databases, their owner roles, and the embedded migrations that create their tables.
//!
//! The lease store lives in `lease26`, owned by [`LEASE_ROLE`]; the resource and the publish
//! stand-in live in `res26`, owned by [`RESOURCE_ROLE`]. `CONNECT` on each database is revoked
//! from `PUBLIC`, so the resource role *cannot connect* to the lease database: the rule "the
//! resource never reads the lease" is enforced by PostgreSQL, not by convention.
//!
//! This module must not decide *where* the server runs; it takes connections to it.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{Executor, PgConnection, PgPool};

use crate::profile::Profile;
use crate::{DbContext, Error, Result};

/// The database that holds the lease table.
pub const LEASE_DB: &str = "lease26";
/// The database that holds the protected resource and the publish stand-in.
pub const RESOURCE_DB: &str = "res26";
/// The role the lease service (and every holder) connects as. It owns `lease26`.
pub const LEASE_ROLE: &str = "lease_svc";
/// The role the resource side connects as. It owns `res26` and cannot connect to `lease26`.
pub const RESOURCE_ROLE: &str = "resource_svc";

/// Which of the two databases a migration set belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Lease,
    Resource,
}

impl Database {
    pub fn name(self) -> &'static str {
        match self {
            Database::Lease => LEASE_DB,
            Database::Resource => RESOURCE_DB,
        }
    }

    /// The role that owns this database and that its store connects as.
    pub fn role(self) -> &'static str {
        match self {
            Database::Lease => LEASE_ROLE,
            Database::Resource => RESOURCE_ROLE,
        }
    }

    /// The migrations of this database for `profile`: the lease database holds only the
    /// profile's lease schema; the resource database the lab's tables, then the profile's fence.
    fn migrations(self, profile: &Profile) -> Vec<(i64, &'static str, String)> {
        match self {
            Database::Lease => vec![(1, "lease", profile.lease.schema.clone())],
            Database::Resource => {
                let mut all = vec![(1, "resource", LAB_RESOURCE_SQL.to_owned())];
                if !profile.resource.schema.trim().is_empty() {
                    all.push((2, "fence", profile.resource.schema.clone()));
                }
                all
            }
        }
    }
}

/// The lab's own tables in the resource database: the report parts, the attempt log, the
/// publish stand-in. The fence's state is the system under test's (its profile's schema).
pub const LAB_RESOURCE_SQL: &str = include_str!("../migrations/resource/0001_resource.sql");

/// The migrations of one database, as a source for sqlx's migrator.
#[derive(Debug)]
struct Embedded(Vec<(i64, &'static str, String)>);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>> + Send + 's>>
    {
        let migrations = self
            .0
            .into_iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    Cow::Owned(sql),
                    false,
                )
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

/// Creates the two owner roles and the two databases, and revokes `CONNECT` from `PUBLIC`.
///
/// `admin` must be a superuser connection to a maintenance database (e.g. `postgres`) of a
/// cluster that does not have them yet. Afterwards, only [`LEASE_ROLE`] (and superusers) can
/// connect to `lease26`, and only [`RESOURCE_ROLE`] (and superusers) to `res26`.
pub async fn provision(admin: &mut PgConnection) -> Result<()> {
    for db in [Database::Lease, Database::Resource] {
        let (name, role) = (db.name(), db.role());
        // Identifiers cannot be bound as parameters; these are compile-time constants.
        admin
            .execute(
                format!("CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").as_str(),
            )
            .await
            .op("create an owner role")?;
        admin
            .execute(format!("CREATE DATABASE {name} OWNER {role}").as_str())
            .await
            .op("create a database")?;
        admin
            .execute(format!("REVOKE CONNECT, TEMPORARY ON DATABASE {name} FROM PUBLIC").as_str())
            .await
            .op("revoke CONNECT from PUBLIC")?;
    }
    Ok(())
}

/// Applies the migrations of `db` for the default system under test ([`Profile::seed004`])
/// through `pool`, which must connect as `db.role()`.
pub async fn migrate(db: Database, pool: &PgPool) -> Result<()> {
    migrate_for(Profile::seed004(), db, pool).await
}

/// Applies the migrations of `db` for `profile` through `pool`, which must connect as
/// `db.role()`.
pub async fn migrate_for(profile: &Profile, db: Database, pool: &PgPool) -> Result<()> {
    let migrator = Migrator::new(Embedded(db.migrations(profile)))
        .await
        .map_err(|source| Error::Migrate {
            database: db.name(),
            source,
        })?;
    migrator.run(pool).await.map_err(|source| Error::Migrate {
        database: db.name(),
        source,
    })
}

/// Empties every table of the database `pool` connects to (identity counters too) but the
/// migrator's, so that a scenario starts from empty tables whichever profile made
/// them. Token numbering therefore restarts at 1 in each scenario.
pub async fn reset(pool: &PgPool) -> Result<()> {
    let tables: Option<String> = sqlx::query_scalar(
        "SELECT string_agg(format('%I', tablename), ', ' ORDER BY tablename) FROM pg_tables
          WHERE schemaname = 'public' AND tablename <> '_sqlx_migrations'",
    )
    .fetch_one(pool)
    .await
    .op("list the tables")?;
    if let Some(tables) = tables {
        pool.execute(format!("TRUNCATE {tables} RESTART IDENTITY").as_str())
            .await
            .op("empty the tables")?;
    }
    Ok(())
}
