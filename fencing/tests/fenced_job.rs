//! The fenced job lease of seed 000 (`fencing::fenced_job`) against a real, throwaway MariaDB:
//! acquire, renew, release and is_held each require lease name + owner token + fence token; and
//! every condition of the fenced completion matters — for each one, a case in which it alone is
//! false (the others are read back from the database and shown true) and the completion changes
//! no row. And a MariaDB profile is prepared against the server before anything runs with it: a
//! statement, a schema or an answer the lab cannot use is refused in one line, in the server's
//! words. Built with the feature `mariadb` (scripts/test.sh turns it on when MariaDB is here).
#![cfg(feature = "mariadb")]

use std::time::Duration;

use fencing::fenced_job::{self, JobLease, JobLeaseStore, NaiveCompletion};
use fencing::profile::JobProfile;
use harness::server::mariadb::{MariaBinaries, MariaServer};
use harness::server::Server;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{ConnectOptions, Connection, Row};

const LEASE: &str = "admin:reconciliation";
const DB: &str = "fencing";

struct Env {
    server: MariaServer,
    jobs: JobLeaseStore,
}

impl Env {
    async fn start() -> anyhow::Result<Env> {
        let bins = tokio::task::spawn_blocking(MariaBinaries::locate).await??;
        let mut server = MariaServer::create(bins).await?;
        let jobs = async {
            let root = server.connect_options(None, "root");
            let mut admin = root.connect().await?;
            fenced_job::create_database(&mut admin, DB).await?;
            admin.close().await?;
            let pool = MySqlPoolOptions::new()
                .max_connections(2)
                .connect_with(root.database(DB).disable_statement_logging())
                .await?;
            fenced_job::reset(&pool, JobProfile::seed000()).await?;
            anyhow::Ok(JobLeaseStore::new(pool))
        }
        .await;
        match jobs {
            Ok(jobs) => Ok(Env { server, jobs }),
            Err(e) => {
                server.stop().await;
                Err(e)
            }
        }
    }

    async fn stop(mut self) {
        self.jobs.pool().close().await;
        self.server.stop().await;
    }

    async fn until_free(&self) -> anyhow::Result<()> {
        harness::wait::until("the job lease expired", Duration::from_secs(30), || {
            self.jobs.is_free(LEASE)
        })
        .await?;
        Ok(())
    }

    /// Instance `X` acquires (fence 1) and starts `old_runs` under it, lets the lease expire,
    /// and acquires again with the same owner token (fence 2, `new_ttl`): (old, new).
    async fn reacquired(
        &self,
        old_runs: &[&str],
        new_ttl: Duration,
    ) -> anyhow::Result<(JobLease, JobLease)> {
        let old = self
            .jobs
            .acquire(LEASE, "X", Duration::from_millis(300))
            .await?
            .expect("a free lease");
        for run in old_runs {
            self.jobs.start_run(run, &old).await?;
        }
        self.until_free().await?;
        let new = self
            .jobs
            .acquire(LEASE, "X", new_ttl)
            .await?
            .expect("an expired lease");
        assert_eq!((new.owner_token.as_str(), new.fence_token), ("X", 2));
        Ok((old, new))
    }

    /// The truth value of each condition of the fenced completion for `run` and the caller's
    /// claim `who`, as the database evaluates it: (name, holds).
    async fn conditions(&self, run: &str, who: &JobLease) -> anyhow::Result<Vec<(&str, bool)>> {
        let row = sqlx::query(
            "SELECT l.lease_name = ?, r.fence_token = l.fence_token, l.fence_token = ?,
                    r.owner_token = l.owner_token, l.owner_token = ?,
                    l.leased_until > CURRENT_TIMESTAMP(3)
               FROM reconciliation_runs AS r
               JOIN fenced_job_leases AS l ON l.lease_name = r.lease_name
              WHERE r.run_id = ?",
        )
        .bind(&who.lease_name)
        .bind(who.fence_token)
        .bind(&who.owner_token)
        .bind(run)
        .fetch_one(self.jobs.pool())
        .await?;
        let names = [
            "l.lease_name = :leaseName",
            "r.fence_token = l.fence_token",
            "l.fence_token = :fenceToken",
            "r.owner_token = l.owner_token",
            "l.owner_token = :ownerToken",
            "l.leased_until > CURRENT_TIMESTAMP(3)",
        ];
        Ok(names
            .into_iter()
            .enumerate()
            .map(|(i, name)| (name, row.get::<i64, _>(i) == 1))
            .collect())
    }

    /// Asserts that for `run` and `who` exactly `failing` is false, and that the fenced
    /// completion then changes no row and leaves the run running.
    async fn only_this_rejects(
        &self,
        failing: &str,
        run: &str,
        who: &JobLease,
    ) -> anyhow::Result<()> {
        let conditions = self.conditions(run, who).await?;
        let false_ones: Vec<&str> = conditions
            .iter()
            .filter(|(_, holds)| !holds)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(false_ones, [failing], "{run}: {conditions:?}");
        assert!(
            !self.jobs.complete_run(run, who).await?,
            "{failing} alone must reject the completion of {run}"
        );
        assert_eq!(self.jobs.run_status(run).await?.as_deref(), Some("running"));
        Ok(())
    }
}

fn claim(lease: &JobLease, owner: &str, fence: i64) -> JobLease {
    JobLease {
        owner_token: owner.into(),
        fence_token: fence,
        ..lease.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_bumps_the_fence_and_every_operation_of_the_old_holding_fails(
) -> anyhow::Result<()> {
    let env = Env::start().await?;
    let jobs = &env.jobs;
    let a = jobs
        .acquire(LEASE, "A", Duration::from_millis(300))
        .await?
        .expect("a free lease");
    assert_eq!(a.fence_token, 1);
    assert!(
        jobs.acquire(LEASE, "B", Duration::from_secs(5))
            .await?
            .is_none(),
        "held by A"
    );
    env.until_free().await?;
    assert!(!jobs.renew(&a).await?, "an expired lease is never renewed");
    let b = jobs
        .acquire(LEASE, "B", Duration::from_secs(5))
        .await?
        .expect("an expired lease");
    assert_eq!(b.fence_token, 2, "a takeover bumps the fence");
    // The same owner token, an older fence: the fence alone refuses (seed 000's instance case).
    let old_b = claim(&b, "B", 1);
    assert!(!jobs.is_held(&old_b).await?);
    assert!(!jobs.renew(&old_b).await?);
    assert!(!jobs.release(&old_b).await?);
    // The current fence, another owner: the owner alone refuses.
    let other = claim(&b, "C", 2);
    assert!(!jobs.is_held(&other).await?);
    assert!(!jobs.renew(&other).await?);
    assert!(!jobs.release(&other).await?);
    // The positive control: the holding itself.
    assert!(jobs.is_held(&b).await? && jobs.renew(&b).await?);
    assert!(jobs.release(&b).await?);
    assert!(jobs.is_free(LEASE).await?);
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_condition_of_the_fenced_completion_alone_rejects_a_stale_completion(
) -> anyhow::Result<()> {
    let env = Env::start().await?;
    let jobs = &env.jobs;
    // Instance X holds fence 1, lets it expire, holds fence 2: the owner token is the same.
    let (old, new) = env.reacquired(&["r-old"], Duration::from_secs(3)).await?;
    jobs.start_run("r-new", &new).await?;
    jobs.start_run("r-new-2", &new).await?;
    // A run recorded by another owner under the current fence.
    jobs.start_run("r-other", &claim(&new, "Y", 2)).await?;

    env.only_this_rejects("r.fence_token = l.fence_token", "r-old", &new)
        .await?;
    env.only_this_rejects("l.fence_token = :fenceToken", "r-new", &old)
        .await?;
    env.only_this_rejects("r.owner_token = l.owner_token", "r-other", &new)
        .await?;
    env.only_this_rejects("l.owner_token = :ownerToken", "r-new", &claim(&new, "Y", 2))
        .await?;
    let elsewhere = JobLease {
        lease_name: "other-lease".into(),
        ..new.clone()
    };
    env.only_this_rejects("l.lease_name = :leaseName", "r-new", &elsewhere)
        .await?;
    // The positive control: every condition true, one row changed.
    assert!(env.conditions("r-new-2", &new).await?.iter().all(|c| c.1));
    assert!(jobs.complete_run("r-new-2", &new).await?);
    assert_eq!(
        jobs.run_status("r-new-2").await?.as_deref(),
        Some("completed")
    );
    // And expiry alone: the current holding, its lease expired with nobody taking over.
    env.until_free().await?;
    env.only_this_rejects("l.leased_until > CURRENT_TIMESTAMP(3)", "r-new", &new)
        .await?;
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_completions_let_an_old_execution_of_the_same_instance_finish(
) -> anyhow::Result<()> {
    let env = Env::start().await?;
    let jobs = &env.jobs;
    let runs = NaiveCompletion::ALL.map(NaiveCompletion::as_str);
    let (old, _new) = env
        .reacquired(&[runs[0], runs[1], "fenced"], Duration::from_secs(5))
        .await?;
    assert!(!jobs.complete_run("fenced", &old).await?);
    for how in NaiveCompletion::ALL {
        assert!(
            jobs.complete_run_naive(how.as_str(), &old, how).await?,
            "{} lets the old execution through",
            how.as_str()
        );
    }
    // And with nobody holding the lease, even the naive forms refuse (their expiry check).
    env.until_free().await?;
    jobs.start_run("late", &old).await?;
    for how in NaiveCompletion::ALL {
        assert!(!jobs.complete_run_naive("late", &old, how).await?);
    }
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_profile_is_prepared_on_the_server_and_a_bad_one_refused_in_its_words(
) -> anyhow::Result<()> {
    let env = Env::start().await?;
    let root = env.server.connect_options(None, "root");
    let good = include_str!("../profiles/seed000.toml");
    let outcome = async {
        JobProfile::parse("seed000.toml", good)?
            .prepare(&root)
            .await?;
        let cases = [
            (
                good.replace("AND l.fence_token = :token", "AND l.fence = :token"),
                "my.toml: resource.run.complete: the server refused it: Unknown column 'l.fence'",
            ),
            (
                good.replace("leased_until AS expires_at", "leased_until AS expiry"),
                "my.toml: lease.inspect: returns (holder VARCHAR, token BIGINT, expiry DATETIME), \
                 must return (holder TEXT, token BIGINT, expires_at DATETIME)",
            ),
            (
                good.replace("reconciliation_runs", "job_runs"),
                "my.toml: resource.schema: the lab's negative controls run on seed 000's tables",
            ),
            (
                good.replace(
                    "ENGINE = InnoDB;\n\"\"\"\n# :name :holder :ttl_ms",
                    "ENGINE = Nope;\n\"\"\"\n# :name :holder :ttl_ms",
                ),
                "my.toml: lease.schema: the server refused it: Unknown storage engine 'Nope'",
            ),
        ];
        for (text, expected) in cases {
            assert_ne!(text, good, "the case changes the profile: {expected}");
            let e = JobProfile::parse("my.toml", &text)?
                .prepare(&root)
                .await
                .expect_err(expected)
                .to_string();
            assert!(
                e.starts_with(expected),
                "{expected:?} is not how {e:?} starts"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        // Every scratch database is gone.
        let mut conn = root.connect().await?;
        let left: Vec<String> = sqlx::query_scalar("SHOW DATABASES LIKE 'lab\\_profile\\_%'")
            .fetch_all(&mut conn)
            .await?;
        assert_eq!(left, Vec::<String>::new());
        conn.close().await?;
        anyhow::Ok(())
    }
    .await;
    env.stop().await;
    outcome
}

/// The job lease through the [`fencing::lease::LeaseStore`] trait, as a holder reaches it: the
/// grant's token is the fence token, a renewal keeps it, inspect reads the lease by database
/// time, and a takeover after the release gets a greater token.
#[tokio::test]
async fn the_job_lease_answers_as_a_lease_store() -> anyhow::Result<()> {
    use fencing::lease::LeaseStore;
    let env = Env::start().await?;
    let outcome = async {
        let store: &dyn LeaseStore = &env.jobs;
        assert!(store.token_name().contains("fence token"));
        let ttl = Duration::from_millis(2000);
        let mut a = store.acquire(LEASE, "A", ttl).await?.expect("a free lease");
        assert!(store.acquire(LEASE, "B", ttl).await?.is_none(), "held");
        let before = a.local_deadline();
        assert!(store.renew(&mut a).await?);
        assert!(a.local_deadline() > before);
        let held = store.inspect(LEASE).await?.expect("a lease row");
        assert_eq!((held.holder.as_str(), held.token), ("A", a.token));
        assert!(!held.expired && held.remaining_ms() > 0.0, "{held:?}");
        assert!(store.release(&a).await?);
        assert!(store.inspect(LEASE).await?.expect("a lease row").expired);
        let b = store
            .acquire(LEASE, "B", ttl)
            .await?
            .expect("a released lease");
        assert!(b.token > a.token, "{b:?} after {a:?}");
        assert!(!store.renew(&mut a).await?, "A's holding was superseded");
        anyhow::Ok(())
    }
    .await;
    env.stop().await;
    outcome
}
