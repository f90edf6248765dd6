//! F17 — the lease store as production runs it: three PostgreSQL servers managed by Patroni on a
//! three-member etcd cluster (containers on the lab's private network), failing over by itself.
//! The resource stays on a host of its own, outside the HA cluster. The fault, once per
//! replication mode: A holds token 1 (acknowledged, on every replica) and its lease runs out; the
//! leader's WAL senders are frozen, so that nothing it commits from then on reaches a replica;
//! A acquires again; the leader's host is lost (SIGKILL to its container); Patroni elects a new
//! leader; B acquires there and writes; A writes with the newest token it was acknowledged.
//!
//! - (a) asynchronous (Patroni's default): A's acquire is acknowledged by the leader alone, token
//!   2, and lost with it; the new leader grants token 2 again, to B (I2 broken), and A's stale
//!   write is accepted after B's — the negative control.
//! - (b) `synchronous_mode`, and `synchronous_mode_strict`: A's acquire waits for the
//!   synchronous standby that cannot answer — the price, measured — and is never acknowledged;
//!   every acknowledged token survives the failover, B gets token 2, A's write with token 1 is
//!   rejected.
//!
//! Recorded per mode: the leader's and the replicas' LSNs at the loss, what Patroni logged while
//! it failed over, and the time from the leader's loss to B's grant beside the lease's TTL.
//!
//! Needs the `containers` feature and a Docker engine; the image (PostgreSQL, Patroni, etcd) is
//! built here from Debian packages on first use. Without them F17 says `skip` with the reason.

use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    NO_HOLDER, ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F17",
    title: "the lease store on Patroni and etcd (containers) fails over by itself: asynchronous replication loses an acknowledged token and A's stale write gets through; synchronous_mode keeps every acknowledged token",
    about: About {
        fault: "the Patroni leader lost with its WAL senders frozen",
        shows: "asynchronous failover loses an acknowledged token; synchronous_mode keeps every one, at a price",
        paragraph: "The lease store as production runs it: three PostgreSQL servers managed by \
                    Patroni on etcd, failing over by themselves, with the resource on a host \
                    outside the cluster. A acquires token 1, which every replica replays, and \
                    its lease runs out. The lab freezes the leader's WAL senders, A acquires \
                    again, the leader's host is killed, and Patroni elects a new leader, where \
                    B acquires and writes. Asynchronously, A's second token was acknowledged \
                    by the leader alone and is lost: B is granted the same token and A's stale \
                    write is accepted, the negative control. With synchronous_mode, plain and \
                    strict, A's second acquire waits unanswered instead, and after the \
                    failover A's write is rejected.",
    },
    checks: Checks::fixed(18),
    needs: Needs::Containers,
    applies: Applies::When(
        |sut| sut.claims.token_at_lease,
        "it asks whether an acknowledged token survives the lease store's failover, \
         and the design issues no token",
    ),
    // It makes its own hosts: it runs on every backend.
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    // Beside the others: its checks are orders and acknowledgements made deterministic by frozen WAL
    // senders, not timings (the failover's duration is recorded beside the TTL, never judged),
    // and its three clusters are on networks of their own. Alone, its 130 s (three clusters
    // elected, each failed over) were the run's longest stretch with one job idle (measured on
    // 2026-12-03: the warm run's 326 s had F17 at 134 s, the whole sum of cases 418 s).
    runs_alone: false,
    holder_points: Err(NO_HOLDER),
    fault_moments: &["acknowledged by the leader alone", "not acknowledged while"],
    lanes: StoreLanes::Lease("patroni", "Patroni cluster (lease)"),
};

/// F17 as `./run.sh` runs it. `freeze: false` leaves the leader's WAL senders alone, so that
/// nothing opens a loss window: only a deliberately broken variant ([`crate::registry::broken`]) does that,
/// and it runs the asynchronous mode only.
pub struct F17 {
    pub freeze: bool,
}

impl Scenario for F17 {
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
                imp::run(bed, rec, self.freeze).await
            }
            #[cfg(not(feature = "containers"))]
            {
                let _ = (bed, self.freeze);
                crate::testbed::skip_unless_required(rec, harness::docker::NOT_BUILT.into())?;
                Ok(())
            }
        })
    }
}

#[cfg(feature = "containers")]
mod imp {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::Context as _;
    use fencing::lease::{Grant, SqlLeaseStore};
    use fencing::resource::{Resource, Write};
    use fencing::schema::{self, Database};
    use harness::containers::patroni::{Node, PatroniCluster, Replication, Settings};
    use harness::containers::{self, Network, PgContainer};
    use harness::evidence::{Mark, Recorder};
    use sqlx::postgres::PgPoolOptions;
    use sqlx::PgPool;

    use crate::kit::paused_holder::{part_line, A_CONTENT, B_CONTENT};
    use crate::testbed::{acquired, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
    use crate::Testbed;

    /// How long the lab lets A's acquire wait while the leader's WAL senders are frozen (the
    /// timeline prescribes it: long enough to call a synchronous commit blocked).
    const BLOCKED_AFTER: Duration = Duration::from_secs(3);
    /// How long Patroni may take to start, and to fail over.
    const CLUSTER_TIMEOUT: Duration = Duration::from_secs(120);

    pub async fn run(bed: &mut Testbed, rec: &mut Recorder, freeze: bool) -> anyhow::Result<()> {
        let image = match harness::containers::pg_hosts::image_or_skip(true).await {
            Ok(image) => image,
            Err(reason) => {
                rec.skip(reason);
                return Ok(());
            }
        };
        rec.note(harness::containers::pg_hosts::image_note(&image));
        let mark = bed.run_mark.clone();
        // The resource: a host of its own, on a network of its own, outside the HA cluster.
        let res_net = Network::create(&mark).await?;
        let res_host = match PgContainer::start(&image, &res_net, &mark).await {
            Ok(host) => host,
            Err(e) => {
                res_net.remove().await;
                return Err(e.into());
            }
        };
        let outcome = with_resource(bed, rec, &image, &res_host, &mark, freeze).await;
        res_host.remove().await;
        res_net.remove().await;
        outcome
    }

    async fn with_resource(
        bed: &mut Testbed,
        rec: &mut Recorder,
        image: &containers::Image,
        res_host: &PgContainer,
        mark: &str,
        freeze: bool,
    ) -> anyhow::Result<()> {
        let admin = pool(res_host.connect_options("postgres", "lab")).await?;
        schema::provision(&mut *admin.acquire().await?).await?;
        let res_pool =
            pool(res_host.connect_options(Database::Resource.name(), Database::Resource.role()))
                .await?;
        schema::migrate_for(&bed.case().sut, Database::Resource, &res_pool).await?;
        let resource = Resource::with_profile(res_pool.clone(), bed.case().sut.clone());
        for (i, replication) in [
            Replication::Asynchronous,
            Replication::Synchronous,
            Replication::SynchronousStrict,
        ]
        .into_iter()
        .enumerate()
        .take(if freeze { 3 } else { 1 })
        {
            schema::reset(&res_pool).await?;
            resource.setup_scope(SCOPE).await?;
            let settings = Settings::fast(replication);
            rec.step(Mark::Info, "lab", replication.as_str(), None, "", None);
            let net = Network::create(mark).await?;
            let cluster = PatroniCluster::start(
                image,
                &net,
                mark,
                &format!("{mark}-{}", ["async", "sync", "strict"][i]),
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
            let outcome = timeline(bed, rec, &mut cluster, &resource, freeze).await;
            cluster.remove().await;
            net.remove().await;
            outcome?;
        }
        res_pool.close().await;
        admin.close().await;
        Ok(())
    }

    async fn pool(opts: sqlx::postgres::PgConnectOptions) -> anyhow::Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .context("failed to connect to a container's server")
    }

    /// A lease store on `node`'s server (the lab's lease database, provisioned there if not yet).
    async fn store_on(
        bed: &Testbed,
        node: &Node,
        provision: bool,
    ) -> anyhow::Result<SqlLeaseStore> {
        if provision {
            let admin = pool(node.connect_options("postgres")).await?;
            schema::provision(&mut *admin.acquire().await?).await?;
            admin.close().await;
        }
        let opts = node
            .connect_options(Database::Lease.name())
            .username(Database::Lease.role());
        let lease_pool = pool(opts).await?;
        if provision {
            schema::migrate_for(&bed.case().sut, Database::Lease, &lease_pool).await?;
        }
        Ok(SqlLeaseStore::with_profile(
            lease_pool,
            bed.params().margin,
            Arc::clone(&bed.case().sut),
        ))
    }

    async fn timeline(
        bed: &Testbed,
        rec: &mut Recorder,
        cluster: &mut PatroniCluster,
        resource: &Resource,
        freeze: bool,
    ) -> anyhow::Result<()> {
        let s = cluster.settings;
        let mode = s.replication.as_str();
        let asynchronous = s.replication == Replication::Asynchronous;
        let (p, c) = (bed.params().clone(), bed.case().clone());
        let leader = cluster
            .leader()
            .await
            .context("Patroni reported ready without a leader")?;
        let leader_name = leader.name.clone();
        // The nodes' names without the run's mark, for the evidence: `async-pg2`.
        let mark_prefix = format!("{}-", bed.run_mark);
        let short = |name: &str| name.replace(&mark_prefix, "");
        rec.note(format!(
            "{mode}: {}; three nodes, each an etcd member and a Patroni-managed PostgreSQL 15; \
             leader {}; Patroni settings: {}",
            cluster.versions,
            short(&leader_name),
            s.describe()
        ));
        rec.step(
            Mark::Info,
            "lab",
            &format!("Patroni's leader {}", short(&leader_name)),
            None,
            mode,
            None,
        );
        let store = store_on(bed, leader, true).await?;
        let write = |writer, content, token| Write {
            scope: SCOPE,
            part: SUMMARY,
            content,
            writer,
            token,
        };

        // A holds token 1, acknowledged and on every replica; it writes with it.
        let a1 = store.acquire(LEASE, HOLDER_A, c.ttl).await?;
        rec.step(
            crate::testbed::acquire_mark(a1.as_ref()),
            "A",
            "acquire",
            a1.as_ref().map(|g| g.token),
            acquired(a1.as_ref()),
            None,
        );
        let a1 = a1.context("A could not acquire a fresh lease")?;
        let a1_ok = resource
            .write(
                &write(HOLDER_A, A_CONTENT, a1.token),
                fencing::resource::WriteMode::Fenced,
            )
            .await?;
        rec.step(
            Mark::Write { accepted: a1_ok },
            "A",
            "write",
            Some(a1.token),
            wrote(a1_ok, a1.token),
            None,
        );
        let lsn = leader
            .wal()
            .await
            .written
            .context("the leader did not say where its WAL stands")?;
        let replicas: Vec<&Node> = cluster
            .nodes
            .iter()
            .filter(|n| n.name != leader_name)
            .collect();
        let mut on_replicas = 0;
        for r in &replicas {
            let caught_up =
                harness::wait::until("the replica replayed A's grant", p.wait_timeout, || async {
                    let replayed = r.wal().await.replayed;
                    Ok::<_, std::convert::Infallible>(replayed.is_some_and(|at| at >= lsn))
                })
                .await;
            on_replicas += usize::from(caught_up.is_ok());
        }
        rec.check(
            format!("{mode}: A holds token 1, acknowledged, and every replica replayed it"),
            &format!("ACQUIRED token=1 WRITE accepted=true token=1 replicas=2/2 at {lsn}"),
            &format!(
                "{} {} replicas={on_replicas}/2 at {lsn}",
                acquired(Some(&a1)),
                wrote(a1_ok, a1.token)
            ),
        );
        lab_wait_expired(&store, &p).await?;
        rec.step(
            Mark::LeaseExpired,
            "A",
            "lease expired (the leader's clock)",
            Some(a1.token),
            "",
            None,
        );

        // The loss window: nothing the leader commits from now on reaches a replica.
        let frozen = if freeze {
            cluster.freeze_wal_senders(leader).await?
        } else {
            "none: this variant leaves them alone".to_owned()
        };
        rec.note(format!(
            "{mode}: the WAL senders of the leader {} are frozen (SIGSTOP): {frozen}",
            short(&leader_name)
        ));
        rec.step(
            Mark::Info,
            "lab",
            "the leader's WAL senders frozen",
            None,
            "",
            None,
        );
        let sent = Instant::now();
        let a2 = tokio::time::timeout(BLOCKED_AFTER, store.acquire(LEASE, HOLDER_A, c.ttl)).await;
        let waited = sent.elapsed();
        let a2: Option<Grant> = match a2 {
            Ok(granted) => granted?,
            Err(_) => None,
        };
        rec.step(
            // No answer is not a refusal: the acquire is still waiting.
            if a2.is_some() {
                Mark::Acquired
            } else {
                Mark::Info
            },
            "A",
            "acquire again",
            a2.as_ref().map(|g| g.token),
            match &a2 {
                Some(_) => acquired(a2.as_ref()),
                None => format!("no answer in {} ms", waited.as_millis()),
            },
            None,
        );
        // Where the leader's WAL stood once A's attempt was in: A's commit is at or before it.
        let leader_lsn = leader
            .wal()
            .await
            .written
            .context("the leader did not say where its WAL stands")?;
        if a2.is_some() {
            // The timeline gives the replicas a second to receive what the leader acknowledged.
            harness::wait::prescribed(Duration::from_secs(1)).await;
        }
        let mut lsns = Vec::new();
        let mut with_it = 0;
        for r in &replicas {
            let received = r.wal().await.received;
            lsns.push(format!("{} received {}", short(&r.name), shown(received)));
            with_it += usize::from(received.is_some_and(|at| at >= leader_lsn));
        }
        rec.note(format!(
            "{mode}: at the loss, the leader {} had written up to {leader_lsn}; {} \
             (A's first grant was at {lsn})",
            short(&leader_name),
            lsns.join(", ")
        ));
        if asynchronous {
            rec.check(
                format!("{mode}: A's second acquire is acknowledged by the leader alone: a second later no replica has received it"),
                "ACQUIRED token=2 on 0 of 2 replicas",
                &format!("{} on {with_it} of 2 replicas", acquired(a2.as_ref())),
            );
        } else {
            rec.check(
                format!(
                    "{mode}: A's second acquire is not acknowledged while the synchronous standby is cut off (the price: it waits)"
                ),
                &format!("no answer in {} ms, on 0 of 2 replicas", BLOCKED_AFTER.as_millis()),
                &match &a2 {
                    Some(g) => format!(
                        "ACQUIRED token={} in {} ms, on {with_it} of 2 replicas",
                        g.token,
                        waited.as_millis()
                    ),
                    None => format!(
                        "no answer in {} ms, on {with_it} of 2 replicas",
                        BLOCKED_AFTER.as_millis()
                    ),
                },
            );
        }
        // A's newest acknowledged token.
        let a_token = a2.as_ref().map_or(a1.token, |g| g.token);

        // The leader's host is lost; Patroni fails over by itself. (A's store goes with the
        // function: its connections lead nowhere now.)
        let mut log_from = Vec::new();
        for r in &replicas {
            log_from.push((r.name.clone(), r.log().await.len()));
        }
        let lost_at = cluster.lose_host(&leader_name).await?;
        rec.step(
            Mark::Failover,
            "lab",
            &format!("{} lost (SIGKILL to its container)", short(&leader_name)),
            None,
            "",
            None,
        );
        let (new_leader, b, b_at) = b_acquires_on_the_new_leader(bed, cluster, lost_at).await?;
        let failover = b_at.duration_since(lost_at);
        rec.step(
            Mark::Info,
            "lab",
            &format!("Patroni's new leader {}", short(&new_leader)),
            None,
            format!("{} ms after the loss", failover.as_millis()),
            None,
        );
        rec.step(
            crate::testbed::acquire_mark(b.as_ref()),
            "B",
            "acquire (new leader)",
            b.as_ref().map(|g| g.token),
            acquired(b.as_ref()),
            None,
        );
        // What Patroni logged from the loss on, on the node it promoted: the candidates' WAL
        // positions it compared, and its decision.
        let from = log_from
            .iter()
            .find(|(n, _)| *n == new_leader)
            .map_or(0, |(_, len)| *len);
        let log = cluster
            .nodes
            .iter()
            .find(|n| n.name == new_leader)
            .context("the new leader is a node")?
            .log()
            .await;
        let said: Vec<String> = log
            .get(from..)
            .unwrap_or("")
            .lines()
            .filter(|l| {
                [
                    "received_location",
                    "healthiest",
                    "lag",
                    "promoted self",
                    "acquiring session lock",
                ]
                .iter()
                .any(|w| l.contains(w))
            })
            .take(6)
            .map(|l| {
                // A member's answer is long JSON: its name and positions say enough.
                let l = short(l);
                match (l.find('{'), l.find("\"xlog\"")) {
                    (Some(open), Some(i)) => {
                        format!("{} … {}", &l[..open], &l[i..l.len().min(i + 90)])
                    }
                    _ => l,
                }
            })
            .collect();
        rec.note(format!(
            "{mode}: Patroni on {}, from the loss on (maximum_lag_on_failover {} bytes): {}",
            short(&new_leader),
            s.maximum_lag_on_failover,
            if said.is_empty() {
                "nothing about it".to_owned()
            } else {
                said.join(" | ")
            }
        ));
        rec.note(format!(
            "{mode}: {} ms from the leader's loss to B's grant on {} (Patroni ttl {} s, loop_wait {} s, retry_timeout {} s); the lease's TTL is {} ms{}",
            failover.as_millis(),
            short(&new_leader),
            s.ttl,
            s.loop_wait,
            s.retry_timeout,
            c.ttl.as_millis(),
            if failover > c.ttl {
                ": shorter than the failover — every holder's lease runs out while the lease store fails over, and none can renew"
            } else {
                ""
            }
        ));
        let b = b.context("B could not acquire on the new leader")?;
        if asynchronous {
            rec.expose(
                format!("{mode}: I2 broken — the new leader grants B the token the old one acknowledged to A"),
                b.token == a_token,
                format_args!("A was acknowledged token {a_token}; B is granted token {}", b.token),
            );
        } else {
            rec.check_that(
                format!(
                    "{mode}: every acknowledged token survived the failover: B's token is above A's"
                ),
                b.token > a_token,
                format_args!(
                    "A was acknowledged token {a_token}; B: {}",
                    acquired(Some(&b))
                ),
            );
        }
        let b_ok = resource
            .write(
                &write(HOLDER_B, B_CONTENT, b.token),
                fencing::resource::WriteMode::Fenced,
            )
            .await?;
        rec.step(
            Mark::Write { accepted: b_ok },
            "B",
            "write",
            Some(b.token),
            wrote(b_ok, b.token),
            None,
        );
        rec.check(
            format!("{mode}: B's write is accepted"),
            &wrote(true, b.token),
            &wrote(b_ok, b.token),
        );
        let a_ok = resource
            .write(
                &write(HOLDER_A, A_CONTENT, a_token),
                fencing::resource::WriteMode::Fenced,
            )
            .await?;
        rec.step(
            Mark::Write { accepted: a_ok },
            "A",
            "write (after B's)",
            Some(a_token),
            wrote(a_ok, a_token),
            None,
        );
        let summary = part_line(&resource.part(SCOPE, SUMMARY).await?);
        if asynchronous {
            rec.expose(
                format!(
                    "{mode}: A's stale write, with the token granted twice, is accepted after B's"
                ),
                a_ok,
                format_args!("{}; final summary {summary}", wrote(a_ok, a_token)),
            );
            rec.expose(
                format!("{mode}: the resource ends with A's content: B's write is lost"),
                summary.contains(HOLDER_A),
                &summary,
            );
        } else {
            rec.check(
                format!("{mode}: A's stale write with its acknowledged token 1 is rejected"),
                &wrote(false, 1),
                &wrote(a_ok, a_token),
            );
            rec.check(
                format!("{mode}: the final summary is B's"),
                &format!("{B_CONTENT} by holder-b token={}", b.token),
                &summary,
            );
        }
        Ok(())
    }

    /// Waits until A's lease has expired by the leader's clock.
    async fn lab_wait_expired(store: &SqlLeaseStore, p: &crate::Params) -> anyhow::Result<()> {
        harness::wait::until(
            "A's lease expired (the leader's clock)",
            p.wait_timeout,
            || store.is_free(LEASE),
        )
        .await?;
        Ok(())
    }

    /// Polls the surviving nodes until one answers as the primary and B's acquire there
    /// returns: the new leader's name, B's grant and when it returned.
    async fn b_acquires_on_the_new_leader(
        bed: &Testbed,
        cluster: &PatroniCluster,
        lost_at: Instant,
    ) -> anyhow::Result<(String, Option<Grant>, Instant)> {
        type Found = Option<(String, Option<Grant>, Instant)>;
        let found: std::sync::Mutex<Found> = std::sync::Mutex::new(None);
        let last_error = std::sync::Mutex::new(String::from("no node answered as the primary yet"));
        let waited =
            harness::wait::until("a new leader grants B the lease", CLUSTER_TIMEOUT, || {
                let (found, last_error) = (&found, &last_error);
                async move {
                    let Some(leader) = cluster.leader().await else {
                        return Ok::<_, std::convert::Infallible>(false);
                    };
                    // A server that just became primary may still refuse or drop a connection.
                    let attempt = async {
                        let store = store_on(bed, leader, false).await?;
                        let b = store.acquire(LEASE, HOLDER_B, bed.case().ttl).await?;
                        let at = Instant::now();
                        store.pool().close().await;
                        anyhow::Ok((b, at))
                    };
                    match attempt.await {
                        Ok((b, at)) => {
                            *found.lock().expect("not poisoned") =
                                Some((leader.name.clone(), b, at));
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
        let found = found.into_inner().expect("not poisoned");
        found.context("the wait ended without a leader")
    }
}
