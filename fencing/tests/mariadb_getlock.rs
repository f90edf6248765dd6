//! The named-lock stores (`mariadb-getlock`, `mariadb-getlock-fenced`) against a real, throwaway
//! MariaDB: the lock refused while its connection lives, kept alive by renewals past its TTL,
//! lost when the connection says nothing for a TTL (the server's `wait_timeout`, by its own
//! clock), taken over with a greater token by the fenced form and with none by the plain one,
//! freed by a release, and a renewal that finds its connection ended says so in the driver's
//! words. Built with the feature `mariadb` (scripts/test.sh turns it on when MariaDB is here).
#![cfg(feature = "mariadb")]

use std::time::{Duration, Instant};

use fencing::lease::mariadb_getlock::GetLockStore;
use fencing::lease::LeaseStore;
use harness::server::mariadb::{MariaBinaries, MariaServer};
use harness::server::Server;

/// `wait_timeout` counts whole seconds: a TTL of one.
const TTL: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_millis(300);

async fn server() -> anyhow::Result<MariaServer> {
    let bins = tokio::task::spawn_blocking(MariaBinaries::locate).await??;
    Ok(MariaServer::create(bins).await?)
}

async fn stores(
    server: &MariaServer,
    fenced: bool,
) -> anyhow::Result<(GetLockStore, GetLockStore)> {
    let at = server.socket_path().display().to_string();
    Ok((
        GetLockStore::open(&at, MARGIN, fenced).await?,
        GetLockStore::open(&at, MARGIN, fenced).await?,
    ))
}

/// Runs `test` on a fresh server, stopping it whatever the test's outcome.
async fn on_a_server<F, Fut>(test: F) -> anyhow::Result<()>
where
    F: FnOnce(MariaServer) -> Fut,
    Fut: std::future::Future<Output = (MariaServer, anyhow::Result<()>)>,
{
    let (mut server, outcome) = test(server().await?).await;
    server.stop().await;
    outcome
}

#[tokio::test]
async fn a_held_lock_is_refused_and_renewals_keep_it_past_its_ttl() -> anyhow::Result<()> {
    on_a_server(|server| async move {
        let outcome = async {
            let (a_side, b_side) = stores(&server, true).await?;
            let mut a = a_side
                .acquire("job", "holder-a", Duration::from_millis(700))
                .await?
                .expect("a free lock is granted");
            assert_eq!(a.ttl, TTL, "the TTL granted is whole seconds");
            assert!(a.token > 0, "the fenced store hands out its counter: {a:?}");
            assert!(b_side.acquire("job", "holder-b", TTL).await?.is_none());
            let until = Instant::now() + TTL * 3;
            while Instant::now() < until {
                tokio::time::sleep(TTL / 3).await;
                assert!(a_side.renew(&mut a).await?, "renewal {:?}", a.lost());
            }
            let seen = b_side.inspect("job").await?.expect("a row");
            assert_eq!(
                (seen.holder.as_str(), seen.expired, seen.released),
                ("holder-a", false, false)
            );
            assert!(seen.remaining_ms() > 0.0, "{seen:?}");
            assert!(b_side.acquire("job", "holder-b", TTL).await?.is_none());
            assert!(a_side.release(&a).await?);
            let seen = b_side.inspect("job").await?.expect("a row");
            assert!(seen.released && seen.expired, "{seen:?}");
            let b = b_side
                .acquire("job", "holder-b", TTL)
                .await?
                .expect("a released lock is granted");
            assert!(b.token > a.token, "{} after {}", b.token, a.token);
            assert!(b_side.release(&b).await?);
            anyhow::Ok(())
        }
        .await;
        (server, outcome)
    })
    .await
}

#[tokio::test]
async fn a_silent_connection_is_ended_by_the_server_and_the_next_holder_gets_a_greater_token(
) -> anyhow::Result<()> {
    on_a_server(|server| async move {
        let outcome = async {
            let (a_side, b_side) = stores(&server, true).await?;
            let mut a = a_side
                .acquire("job", "holder-a", TTL)
                .await?
                .expect("a free lock is granted");
            // Nothing said on A's connection: the server ends it a TTL after its last request.
            let waited = Instant::now();
            harness::wait::until("A's connection is ended", Duration::from_secs(15), || {
                b_side.is_free("job")
            })
            .await?;
            assert!(
                waited.elapsed() >= TTL - Duration::from_millis(200),
                "freed after {:?}, before its TTL",
                waited.elapsed()
            );
            let b = b_side
                .acquire("job", "holder-b", TTL)
                .await?
                .expect("the lock of an ended connection is granted");
            assert!(b.token > a.token, "{} after {}", b.token, a.token);
            assert!(!a_side.renew(&mut a).await?, "A's connection is gone");
            let why = a.lost().expect("why the renewal failed");
            assert!(
                why.contains("the server ended the locking connection") && why.contains("1 s"),
                "{why}"
            );
            assert!(!a_side.release(&a).await?, "nothing of A's to release");
            assert_eq!(
                b_side.inspect("job").await?.expect("row").holder,
                "holder-b"
            );
            anyhow::Ok(())
        }
        .await;
        (server, outcome)
    })
    .await
}

#[tokio::test]
async fn the_plain_lock_answers_no_token_and_reset_ends_every_holding() -> anyhow::Result<()> {
    on_a_server(|server| async move {
        let outcome = async {
            let (plain, _) = stores(&server, false).await?;
            let a = plain
                .acquire("job", "holder-a", TTL * 10)
                .await?
                .expect("a free lock is granted");
            assert_eq!(a.token, 0, "no token: {a:?}");
            assert!(plain.token_name().starts_with("none"));
            assert_eq!(plain.inspect("job").await?.expect("row").token, 0);
            plain.reset().await?;
            assert!(plain.is_free("job").await?, "reset ended A's connection");
            assert!(plain.acquire("job", "holder-b", TTL).await?.is_some());
            anyhow::Ok(())
        }
        .await;
        (server, outcome)
    })
    .await
}
