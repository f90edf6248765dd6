//! `lab profile`: the systems under test as profiles (`fencing::profile`). `list` shows the
//! built-in ones; `check` refuses a bad profile before anything runs with it — its form first
//! (no server needed), then its SQL, every statement prepared against scratch databases on a
//! throwaway cluster that is removed on the way out.

use std::path::PathBuf;
use std::process::ExitCode;

use fencing::profile::Profile;
use harness::server::{Cluster, ClusterConfig, PgBinaries, Server as _, SUPERUSER};

use crate::args::ProfileAction;
use crate::{print_or_fail, EXIT_HARNESS};

pub fn run(action: ProfileAction) -> ExitCode {
    match action {
        ProfileAction::List => {
            let list: String = Profile::built_in_names()
                .filter_map(Profile::built_in)
                .map(|p| {
                    format!(
                        "{:<16} {:<26}  {}\n",
                        p.name,
                        match (p.claims.token_at_lease, p.claims.token_at_resource) {
                            (true, true) => "token at the resource",
                            (true, false) => "token at the lease only",
                            (false, _) => "no token",
                        },
                        p.about
                    )
                })
                .collect();
            print_or_fail(&list)
        }
        ProfileAction::Check { profile, pg_bindir } => check(&profile, pg_bindir),
    }
}

fn check(name_or_path: &str, pg_bindir: Option<PathBuf>) -> ExitCode {
    let profile = match Profile::load(name_or_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lab profile check: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab profile check: failed to start the async runtime: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    match runtime.block_on(prepare(&profile, pg_bindir)) {
        Ok(version) => print_or_fail(&format!(
            "lab profile check: {}: {} statements prepared against PostgreSQL {version}: ok\n",
            profile.origin,
            profile.statements().len()
        )),
        Err(e) => {
            eprintln!("lab profile check: {e:#}");
            ExitCode::from(EXIT_HARNESS)
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
