//! `lab profile`: the systems under test as profiles (`fencing::profile`). `list` shows the
//! built-in ones; `check` refuses a bad profile before anything runs with it — its form first
//! (no server needed), then its SQL, every statement prepared against scratch databases on a
//! throwaway server of its dialect (a PostgreSQL cluster, or a MariaDB) that is removed on the
//! way out.

use std::path::PathBuf;

use fencing::profile::{JobProfile, Profile, Sut};
use harness::server::{Cluster, ClusterConfig, PgBinaries, Server as _, SUPERUSER};

use crate::args::ProfileAction;
use crate::{print_or_fail, Ended};

pub fn run(action: ProfileAction) -> Ended {
    match action {
        ProfileAction::List => {
            let width = Sut::built_in_names().map(str::len).max().unwrap_or(0);
            let list: String = Sut::built_in_names()
                .filter_map(Sut::built_in)
                .map(|p| {
                    let claims = p.claims();
                    format!(
                        "{:<width$} {:<10} {:<26}  {}\n",
                        p.name(),
                        p.dialect().server(),
                        match (claims.token_at_lease, claims.token_at_resource) {
                            (true, true) => "token at the resource",
                            (true, false) => "token at the lease only",
                            (false, _) => "no token",
                        },
                        p.about()
                    )
                })
                .collect();
            print_or_fail(&list)
        }
        ProfileAction::Show { name } => match fencing::profile::Profile::built_in_text(&name) {
            Some(text) => print_or_fail(text),
            None => {
                eprintln!(
                    "lab profile show: {name:?} is not a built-in profile; they are: {}",
                    Sut::built_in_names().collect::<Vec<_>>().join(", ")
                );
                Ended::CouldNotRun
            }
        },
        ProfileAction::Check { profile, pg_bindir } => check(&profile, pg_bindir),
    }
}

fn check(name_or_path: &str, pg_bindir: Option<PathBuf>) -> Ended {
    let profile = match Sut::load(name_or_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lab profile check: {e}");
            return Ended::CouldNotRun;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab profile check: failed to start the async runtime: {e}");
            return Ended::CouldNotRun;
        }
    };
    let prepared = match &profile {
        Sut::Pg(p) => runtime.block_on(prepare(p, pg_bindir)),
        Sut::Job(j) => runtime.block_on(prepare_job(j)),
    };
    match prepared {
        Ok(version) => print_or_fail(&format!(
            "lab profile check: {}: {} statements prepared against {} {version}: ok\n",
            profile.origin(),
            profile.statements().len(),
            profile.dialect().server(),
        )),
        Err(e) => {
            eprintln!("lab profile check: {e:#}");
            Ended::CouldNotRun
        }
    }
}

/// Prepares `profile` on a throwaway cluster, stopped and removed on every path; the server's
/// version.
async fn prepare(profile: &Profile, pg_bindir: Option<PathBuf>) -> anyhow::Result<String> {
    let bins =
        tokio::task::spawn_blocking(move || PgBinaries::locate(pg_bindir.as_deref())).await??;
    prepare_with(profile, bins).await
}

/// [`prepare`] with the server binaries found already (`lab run --sut` checks its profile so,
/// before its own cluster starts).
pub async fn prepare_with(profile: &Profile, bins: PgBinaries) -> anyhow::Result<String> {
    let mut cluster = Cluster::create(ClusterConfig::new(bins)).await?;
    let outcome = async {
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&mut cluster.admin().await?)
            .await?;
        profile
            .prepare(&cluster.connect_options("postgres", SUPERUSER))
            .await?;
        anyhow::Ok(version)
    }
    .await;
    cluster.stop().await;
    outcome
}

/// Prepares a MariaDB `profile` on a throwaway MariaDB, stopped and removed on every path; the
/// server's version.
#[cfg(feature = "mariadb")]
pub async fn prepare_job(profile: &JobProfile) -> anyhow::Result<String> {
    use harness::server::mariadb::{MariaBinaries, MariaServer};
    use sqlx::ConnectOptions as _;
    let bins = tokio::task::spawn_blocking(MariaBinaries::locate).await??;
    let mut server = MariaServer::create(bins).await?;
    let outcome = async {
        let root = server.connect_options(None, "root");
        let mut conn = root.connect().await?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&mut conn)
            .await?;
        sqlx::Connection::close(conn).await?;
        profile.prepare(&root).await?;
        anyhow::Ok(version)
    }
    .await;
    server.stop().await;
    outcome
}

/// Without MariaDB support a MariaDB profile cannot be prepared: said, never passed.
#[cfg(not(feature = "mariadb"))]
pub async fn prepare_job(profile: &JobProfile) -> anyhow::Result<String> {
    anyhow::bail!(
        "{}: a design on MariaDB, and this lab was built without MariaDB support: ./run.sh \
         builds it when MariaDB is installed (apt-get install -y mariadb-server), or build with \
         --features lab/mariadb",
        profile.origin
    )
}
