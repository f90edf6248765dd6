//! Profiles against a real server: every built-in profile's statements prepare against scratch
//! databases holding its schema; a statement the server refuses, or one that answers the wrong
//! columns, is named with the server's own words; the scratch databases are gone afterwards.

use fencing::profile::Profile;
use harness::server::{Cluster, ClusterConfig, PgBinaries, SUPERUSER};

async fn cluster() -> anyhow::Result<Cluster> {
    Ok(Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?)
}

/// The databases on the server whose name says they are a profile check's scratch.
async fn scratch_left(cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT datname::text FROM pg_database WHERE datname LIKE 'lab_profile_%' ORDER BY 1",
    )
    .fetch_all(&mut cluster.admin().await?)
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_profile_prepares_and_leaves_no_scratch_database() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let admin = cluster.connect_options("postgres", SUPERUSER);
    for name in Profile::built_in_names() {
        let profile = Profile::built_in(name).expect("built in");
        profile.prepare(&admin).await?;
    }
    assert_eq!(scratch_left(&cluster).await?, Vec::<String>::new());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_the_server_refuses_is_named_with_the_servers_words() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let admin = cluster.connect_options("postgres", SUPERUSER);
    let good = include_str!("../profiles/seed004.toml");
    let cases = [
        // A column the table does not have.
        (
            good.replace("AND expires_at > now()", "AND expires_on > now()"),
            "my.toml: lease.renew: the server refused it: column \"expires_on\" does not exist",
        ),
        // A syntax error in the fence's check.
        (
            good.replace(
                "UPDATE fence_floor SET max_token = :token WHERE",
                "UPDATE fence_floor SET max_token = :token WHER",
            ),
            "my.toml: resource.write.check: the server refused it: syntax error",
        ),
        // A schema the server refuses.
        (
            good.replace("max_token  bigint NOT NULL", "max_token  bigint NOT NUL"),
            "my.toml: resource.schema: the server refused it: syntax error",
        ),
        // An acquire that answers the wrong column.
        (
            good.replace("RETURNING l.token", "RETURNING l.holder"),
            "my.toml: lease.acquire: returns (holder TEXT), must return (any name INT8)",
        ),
        // An inspect without the columns the lab reads.
        (
            good.replace(
                "SELECT holder, token, expires_at FROM lease",
                "SELECT holder, token FROM lease",
            ),
            "my.toml: lease.inspect: returns (holder TEXT, token INT8), must return",
        ),
    ];
    for (text, expected) in cases {
        let profile = Profile::parse("my.toml", &text)?;
        let e = profile
            .prepare(&admin)
            .await
            .expect_err(expected)
            .to_string();
        assert!(e.starts_with(expected), "expected {expected:?}, got {e:?}");
        assert!(!e.contains('\n'), "{e}");
    }
    assert_eq!(scratch_left(&cluster).await?, Vec::<String>::new());
    Ok(())
}
