//! S6 — the lock's server on Patroni fails over by itself (F17's side). The fault: PostgreSQL's
//! advisory lock (fenced form, `pg-advisory-fenced`) is taken by A on the leader of a Patroni
//! cluster (three PostgreSQL containers on a three-member etcd, asynchronous replication: F17's
//! image and settings), every replica replays A's counter row, the leader's host is lost
//! (SIGKILL to its container) and Patroni elects a new leader by itself. Property: as in S3, the
//! lock is not carried — no WAL, no lock on any replica — so the new leader grants it to B as
//! soon as it is elected, while A's own deadline says A still holds it; the replicated counter
//! gives B a greater token, so the fenced resource (the lab's own cluster) rejects A's write
//! after B's; the unfenced one accepts it (the negative control).
//!
//! A's lease is long (a minute: the session's idle timeout), so that A's deadline outlives the
//! failover — as a holder's does when the failover is quicker than its TTL. Needs the
//! `containers` feature and a Docker engine; without them S6 says `skip` with the reason.

use crate::{About, Applies, Checks, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed};
use fencing::lease::StoreId;

const SPEC: Spec = Spec {
    id: "S6",
    title: "the lock's server on Patroni and etcd (containers) fails over by itself: the advisory lock is not carried, the new leader grants it to B while A still believes it holds it — the replicated counter fences A, unfenced accepts it",
    about: About {
        fault: "the Patroni leader holding a database lock lost; Patroni elects a new leader",
        shows: "an HA manager's failover does not carry a database lock either; a replicated counter still fences",
        paragraph: "S3's failover as production runs it: PostgreSQL's advisory lock (with the \
                    lock row's counter as its token) is taken by A on the leader of a Patroni \
                    cluster of three, every replica replays A's counter row, and the \
                    leader's host is killed. Patroni elects a new leader by itself; it has \
                    A's row but not the lock, and grants the lock to B as soon as it is \
                    elected, while A's own deadline says A still holds it. B's token is above \
                    A's, so the fenced resource rejects A's write after B's; the unfenced one \
                    accepts it (the negative control).",
    },
    checks: Checks::fixed(7),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: crate::LockServices::AllBut(&[
        (StoreId::Redis, NOT_ADVISORY),
        (StoreId::RedisPlain, NOT_ADVISORY),
        (StoreId::Etcd, NOT_ADVISORY),
        (StoreId::Zookeeper, NOT_ADVISORY),
        (StoreId::ZookeeperSuffix, NOT_ADVISORY),
        (StoreId::MariadbGetlock, NOT_ADVISORY),
        (StoreId::MariadbGetlockFenced, NOT_ADVISORY),
    ]),
    fence_dependent: false,
    again_on_stores: false,
    // Three Patroni nodes and three etcd members: alone, as F17.
    runs_alone: true,
    holder_points: Err(crate::NO_HOLDER),
    fault_moments: &[],
    lanes: StoreLanes::Lease("patroni", "Patroni cluster (lock)"),
};

const NOT_ADVISORY: &str = "it runs on PostgreSQL's advisory lock on Patroni (pg-advisory, its \
    own choice in the default run, or the run's --lease-store pg-advisory, plain or -fenced); \
    S3 shows MariaDB's named lock failing over";

pub struct S6;

impl Scenario for S6 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(
        &'a self,
        bed: &'a mut Testbed,
        rec: &'a mut harness::evidence::Recorder,
    ) -> Outcome<'a> {
        Box::pin(async move {
            #[cfg(feature = "containers")]
            {
                imp::run(bed, rec).await
            }
            #[cfg(not(feature = "containers"))]
            {
                let _ = bed;
                crate::testbed::skip_unless_required(rec, harness::docker::NOT_BUILT.into())?;
                Ok(())
            }
        })
    }
}

#[cfg(feature = "containers")]
mod imp {
    use std::time::{Duration, Instant};

    use anyhow::Context as _;
    use fencing::lease::pg_advisory::{self, AdvisoryLeaseStore};
    use fencing::lease::{Grant, LeaseStore};
    use fencing::schema::{self, Database};
    use harness::containers::patroni::{Node, PatroniCluster, Replication, Settings};
    use harness::containers::Network;
    use harness::evidence::{Mark, Recorder};
    use sqlx::postgres::PgPoolOptions;
    use sqlx::PgPool;

    use crate::kit::session_locks;
    use crate::testbed::{acquired, lease_state, shown, HOLDER_A, HOLDER_B, LEASE};
    use crate::Testbed;

    /// How long Patroni may take to start, and to fail over.
    const CLUSTER_TIMEOUT: Duration = Duration::from_secs(120);
    /// A's lease: the idle timeout of its locking session, longer than the failover.
    const A_TTL: Duration = Duration::from_secs(60);

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
        let image = match harness::containers::pg_hosts::image_or_skip(true).await {
            Ok(image) => image,
            Err(reason) => {
                crate::testbed::skip_unless_required(rec, reason)?;
                return Ok(());
            }
        };
        rec.note(harness::containers::pg_hosts::image_note(&image));
        let mark = bed.run_mark.clone();
        let net = Network::create(&mark).await?;
        let settings = Settings::fast(Replication::Asynchronous);
        let cluster = PatroniCluster::start(
            &image,
            &net,
            &mark,
            &format!("{mark}-lock"),
            settings,
            CLUSTER_TIMEOUT,
        )
        .await;
        let mut cluster = match cluster {
            Ok(c) => c,
            Err(e) => {
                net.remove().await;
                return Err(e.into());
            }
        };
        let outcome = timeline(bed, rec, &mut cluster).await;
        cluster.remove().await;
        net.remove().await;
        outcome
    }

    async fn pool(opts: sqlx::postgres::PgConnectOptions) -> anyhow::Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .context("failed to connect to a container's server")
    }

    /// The fenced advisory lock on `node`'s lease database (provisioned there if `provision`).
    async fn lock_on(
        bed: &Testbed,
        node: &Node,
        provision: bool,
    ) -> anyhow::Result<AdvisoryLeaseStore> {
        if provision {
            let admin = pool(node.connect_options("postgres")).await?;
            schema::provision(&mut *admin.acquire().await?).await?;
            admin.close().await;
        }
        let opts = node
            .connect_options(Database::Lease.name())
            .username(Database::Lease.role());
        Ok(AdvisoryLeaseStore::open(pool(opts).await?, bed.params().margin, true).await?)
    }

    async fn timeline(
        bed: &Testbed,
        rec: &mut Recorder,
        cluster: &mut PatroniCluster,
    ) -> anyhow::Result<()> {
        let leader = cluster
            .leader()
            .await
            .context("Patroni reported ready without a leader")?;
        let leader_name = leader.name.clone();
        // The nodes' names without the run's mark, for the evidence: `lock-pg2`.
        let mark_prefix = format!("{}-", bed.run_mark);
        let short = |name: &str| name.replace(&mark_prefix, "");
        rec.note(format!(
            "the lock: pg-advisory-fenced on Patroni's leader ({}; three nodes, asynchronous \
             replication; Patroni settings: {}); A's lease {} s (its session's idle timeout); \
             the resource stays on the lab's cluster",
            cluster.versions,
            cluster.settings.describe(),
            A_TTL.as_secs()
        ));
        let on_leader = lock_on(bed, leader, true).await?;
        let a = on_leader
            .acquire(LEASE, HOLDER_A, A_TTL)
            .await?
            .context("A could not take the lock on the leader")?;
        rec.step(
            Mark::Acquired,
            "A",
            "acquire (on Patroni's leader)",
            Some(a.token),
            acquired(Some(&a)),
            None,
        );
        replicas_have_the_row_not_the_lock(bed, rec, cluster, &leader_name, &a).await?;
        let lost_at = cluster.lose_host(&leader_name).await?;
        rec.step(
            Mark::Failover,
            "lab",
            "the leader's host lost (SIGKILL to its container)",
            None,
            "",
            None,
        );
        let (new_leader, b) = b_takes_the_lock_on_the_new_leader(bed, cluster, lost_at).await?;
        let elected_in = lost_at.elapsed();
        rec.step(
            crate::testbed::acquire_mark(b.as_ref()),
            "B",
            "acquire (on the new leader)",
            b.as_ref().map(|g| g.token),
            acquired(b.as_ref()),
            None,
        );
        rec.check_that(
            "the leader's host is lost and Patroni elects a new leader by itself, which grants \
             B the lock at once",
            new_leader != leader_name && b.is_some(),
            format_args!(
                "{} lost; {} granted B the lock {} ms after: {}",
                short(&leader_name),
                short(&new_leader),
                elected_in.as_millis(),
                acquired(b.as_ref())
            ),
        );
        let b = b.context("B could not take the lock on the new leader")?;
        rec.check_that(
            "B's token is above A's (the counter replicated), while A's own deadline says A still \
             holds the lock: two holders by their own reckoning",
            b.token > a.token && a.locally_valid(),
            format_args!(
                "B token={} after A's token={}; A's local deadline {}",
                b.token,
                a.token,
                if a.locally_valid() {
                    "not passed"
                } else {
                    "passed"
                }
            ),
        );
        session_locks::writes_after_failover(bed, rec, a.token, b.token).await
    }

    /// Every replica has replayed A's counter row but holds no lock; the leader holds one.
    async fn replicas_have_the_row_not_the_lock(
        bed: &Testbed,
        rec: &mut Recorder,
        cluster: &PatroniCluster,
        leader_name: &str,
        a: &Grant,
    ) -> anyhow::Result<()> {
        let mut seen = Vec::new();
        for node in &cluster.nodes {
            let admin = pool(node.connect_options("postgres")).await?;
            let held = pg_advisory::locks_held(&admin).await?;
            admin.close().await;
            if node.name == leader_name {
                seen.push((node.name.clone(), held, true));
                continue;
            }
            let replica = lock_on(bed, node, false).await?;
            let replayed = harness::wait::until(
                "a replica replayed A's grant",
                bed.params().wait_timeout,
                // Until the replica has replayed the lock's table too, reading it is an error:
                // not replayed yet.
                || async {
                    Ok::<bool, std::convert::Infallible>(
                        replica
                            .inspect(LEASE)
                            .await
                            .ok()
                            .flatten()
                            .is_some_and(|r| r.holder == HOLDER_A && r.token == a.token),
                    )
                },
            )
            .await
            .is_ok();
            let row = replica.inspect(LEASE).await.ok().flatten();
            rec.note(format!(
                "{}: its row {}",
                node.name.replace(&format!("{}-", bed.run_mark), ""),
                shown(row.as_ref().map(lease_state))
            ));
            seen.push((node.name.clone(), held, replayed));
        }
        rec.check_that(
            "every replica has replayed A's grant — the lock's row, its token and holder — but \
             holds no lock; the leader holds A's (an advisory lock writes no WAL)",
            seen.iter().all(|(name, held, replayed)| {
                *replayed && (*held == i64::from(name == leader_name))
            }),
            format_args!(
                "the lab's advisory locks held, row replayed: {}",
                seen.iter()
                    .map(|(n, h, r)| {
                        let n = n.replace(&format!("{}-", bed.run_mark), "");
                        format!("{n} {h} held, row {}", if *r { "yes" } else { "NO" })
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        );
        Ok(())
    }

    /// Polls for the new leader and B's grant there: its name and B's grant.
    async fn b_takes_the_lock_on_the_new_leader(
        bed: &Testbed,
        cluster: &PatroniCluster,
        lost_at: Instant,
    ) -> anyhow::Result<(String, Option<Grant>)> {
        let found = std::sync::Mutex::new(None);
        let last_error = std::sync::Mutex::new(String::from("no node answered as the primary yet"));
        let waited =
            harness::wait::until("a new leader grants B the lock", CLUSTER_TIMEOUT, || {
                let (found, last_error) = (&found, &last_error);
                async move {
                    let Some(leader) = cluster.leader().await else {
                        return Ok::<_, std::convert::Infallible>(false);
                    };
                    // A server that just became primary may still refuse a connection or a write.
                    let attempt = async {
                        let lock = lock_on(bed, leader, false).await?;
                        anyhow::Ok(lock.acquire(LEASE, HOLDER_B, bed.case().ttl).await?)
                    };
                    match attempt.await {
                        Ok(b) => {
                            *found.lock().expect("not poisoned") = Some((leader.name.clone(), b));
                            Ok(true)
                        }
                        Err(e) => {
                            *last_error.lock().expect("not poisoned") = format!("{e:#}");
                            Ok(false)
                        }
                    }
                }
            })
            .await;
        if let Err(e) = waited {
            anyhow::bail!(
                "{e} ({} s after the leader's loss; last: {})",
                lost_at.elapsed().as_secs(),
                last_error.lock().expect("not poisoned")
            );
        }
        found
            .into_inner()
            .expect("not poisoned")
            .context("the wait ended without a leader")
    }
}
