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
        // An acquire that runs alone but not where F3 times it, inside a WITH.
        (
            good.replace(
                "INSERT INTO lease AS l (name, holder, token, expires_at)",
                "WITH x AS (DELETE FROM lease WHERE false) INSERT INTO lease AS l (name, holder, token, expires_at)",
            ),
            "my.toml: lease.acquire: the statement must also run as the body of a WITH (F3 times \
             each acquire on the server so), and there the server refused it: WITH clause \
             containing a data-modifying statement must be at the top level",
        ),
        // An acquire that answers two columns is told so, not what the WITH makes of it.
        (
            good.replace("RETURNING l.token", "RETURNING l.token, l.holder"),
            "my.toml: lease.acquire: returns (token INT8, holder TEXT), must return (any name INT8)",
        ),
    ];
    // A one-statement write that does not record its attempt: said up front, about the design.
    let single = include_str!("../profiles/seed004-single.toml");
    let attempt = "   INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)\n   SELECT :scope, :part, :writer, :token, :mode, EXISTS (SELECT 1 FROM floor))";
    assert!(single.contains(attempt));
    let cases: Vec<(String, &str)> = cases
        .into_iter()
        .chain([(
            single.replace(attempt, "   SELECT 1)"),
            "my.toml: resource.write.statement: a write with token 2 added 0 rows to write_attempt, not 1: the one statement must record its own attempt",
        )])
        .collect();
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

/// A design's answers are held to its claims: a design that claims no token must answer 0, one
/// that claims a token must answer one above 0 — a run stops on the first contradiction, naming
/// the profile, the claim and the statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_contradicts_the_claims_is_an_error() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::time::Duration;

    use fencing::lease::SqlLeaseStore;
    use fencing::schema::{self, Database};

    let cluster = cluster().await?;
    let admin = cluster.connect_options("postgres", SUPERUSER);
    let pool = sqlx::PgPool::connect_with(admin).await?;
    let seed004 = include_str!("../profiles/seed004.toml");
    let shed = include_str!("../profiles/shedlock-style.toml");
    let cases = [
        // seed004 claiming no token: its acquire answers 1.
        (
            seed004.replace("token_at_lease = true", "token_at_lease = false"),
            "the profile seed004 claims no token at the lease (token_at_lease = false: it answers 0), but its acquire answered token 1",
        ),
        // A ShedLock row claiming a token: its acquire answers 0.
        (
            shed.replace("token_at_lease = false", "token_at_lease = true"),
            "the profile shedlock-style claims a token at the lease (token_at_lease = true, above 0), but its acquire answered token 0",
        ),
    ];
    for (text, expected) in cases {
        let profile = Arc::new(Profile::parse("my.toml", &text)?);
        sqlx::raw_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            .execute(&pool)
            .await?;
        schema::migrate_for(&profile, Database::Lease, &pool).await?;
        let store = SqlLeaseStore::with_profile(pool.clone(), Duration::from_millis(100), profile);
        let e = store
            .acquire("job", "holder-a", Duration::from_secs(2))
            .await
            .expect_err(expected)
            .to_string();
        assert_eq!(e, expected);
    }
    Ok(())
}

/// A design whose expiry is configuration (db-scheduler's heartbeat interval × limit) reads the
/// TTL in force as `:ttl_ms` in `inspect`: the TTL of the last acquire or renew through the store,
/// the run's TTL before any — and a store given none refuses to guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_the_ttl_in_force_and_a_store_without_one_says_so() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::time::Duration;

    use fencing::lease::SqlLeaseStore;
    use fencing::schema::{self, Database};

    let cluster = cluster().await?;
    let pool = sqlx::PgPool::connect_with(cluster.connect_options("postgres", SUPERUSER)).await?;
    let profile = Arc::new(
        Profile::built_in("db-scheduler-style")
            .expect("built in")
            .clone(),
    );
    schema::migrate_for(&profile, Database::Lease, &pool).await?;
    let margin = Duration::from_millis(100);

    let bare = SqlLeaseStore::with_profile(pool.clone(), margin, profile.clone());
    let e = bare.inspect("job").await.expect_err("no TTL in force");
    assert!(e.to_string().contains("no TTL is in force"), "{e}");

    // Given the run's TTL, it asks: no row yet.
    let store = SqlLeaseStore::with_profile(pool.clone(), margin, profile.clone())
        .with_ttl_in_force(Duration::from_secs(4));
    assert!(store.inspect("job").await?.is_none());
    // An acquire for 2 s: the row's expiry is its heartbeat + 2 s, by the database clock.
    let grant = store
        .acquire("job", "holder-a", Duration::from_secs(2))
        .await?
        .expect("a free execution");
    let held = store.inspect("job").await?.expect("the row");
    assert_eq!(
        (held.holder.as_str(), held.token),
        ("holder-a", grant.token)
    );
    let left = held.remaining_ms();
    assert!(left > 1500.0 && left <= 2000.0, "{left} ms left of 2000");
    // Another store on the same row, told 10 s (another run's configuration), sees 10 s.
    let other = SqlLeaseStore::with_profile(pool.clone(), margin, profile)
        .with_ttl_in_force(Duration::from_secs(10));
    let left = other.inspect("job").await?.expect("the row").remaining_ms();
    assert!(left > 9500.0 && left <= 10_000.0, "{left} ms left of 10000");
    Ok(())
}
