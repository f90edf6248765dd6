//! The container backend (`--backend containers`, feature `containers`): the lease store and the
//! resource each on a PostgreSQL host of its own — a container made from the image the lab
//! builds here from Debian packages — each on a private network of its own that the lab creates.
//! The lab's host is on both networks (it reaches both servers over TCP, and so do the holders it
//! starts); the two servers are not on a common network, so the resource's host has no route to
//! the lease store's: a stronger separation than the role check of the embedded cluster, and P0
//! shows it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencing::schema::Database;
use harness::containers::{self, Image, Network, PgContainer, PG_PORT};

use crate::lab::Restarted;

/// The servers of a run on the container backend.
pub struct ContainerServers {
    pub lease: PgContainer,
    pub resource: PgContainer,
    lease_net: Network,
    resource_net: Network,
    /// The image both run (its build time when this run built it).
    pub image: Image,
}

impl ContainerServers {
    /// Builds the image for PostgreSQL `pg_major` if it is not there yet, creates the two
    /// networks and starts a server on each; returns once both accept connections. On error
    /// nothing is left.
    pub async fn start(mark: &str, pg_major: u32) -> anyhow::Result<ContainerServers> {
        containers::engine()
            .await
            .map_err(|reason| anyhow::anyhow!("--backend containers: {reason}"))?;
        let image = containers::postgres_image(pg_major)
            .await
            .with_context(|| {
                format!(
                    "--backend containers: no way to build the PostgreSQL {pg_major} image here \
                 (building needs root, debootstrap and the Debian archive)"
                )
            })?;
        let lease_net = Network::create(mark).await?;
        let resource_net = match Network::create(mark).await {
            Ok(n) => n,
            Err(e) => {
                lease_net.remove().await;
                return Err(e.into());
            }
        };
        let lease = PgContainer::start(&image, &lease_net, mark).await;
        let resource = PgContainer::start(&image, &resource_net, mark).await;
        match (lease, resource) {
            (Ok(lease), Ok(resource)) => Ok(ContainerServers {
                lease,
                resource,
                lease_net,
                resource_net,
                image,
            }),
            (lease, resource) => {
                let mut error = None;
                for server in [lease, resource] {
                    match server {
                        Ok(s) => s.remove().await,
                        Err(e) => error = Some(e),
                    }
                }
                lease_net.remove().await;
                resource_net.remove().await;
                Err(error.expect("one of them failed").into())
            }
        }
    }

    /// The server that holds `db`.
    pub fn server(&self, db: Database) -> &PgContainer {
        match db {
            Database::Lease => &self.lease,
            Database::Resource => &self.resource,
        }
    }

    /// How the run's environment record names them.
    pub fn describe(&self) -> String {
        let built = match self.image.built_in {
            Some(took) => format!("built here in {:.1} s", took.as_secs_f64()),
            None => "built here earlier, reused".into(),
        };
        format!(
            "containers: lease26 at {}:{PG_PORT} on network {}, res26 at {}:{PG_PORT} on network {} \
             (no common network); image {} ({built})",
            self.lease.ip,
            self.lease_net.name,
            self.resource.ip,
            self.resource_net.name,
            self.image.reference
        )
    }

    /// Whether the resource's host reaches the lease store's server (`pg_isready` run on the
    /// resource's host, with `timeout`), and, as the control, its own: each `pg_isready`'s words.
    pub async fn resource_host_reaches(&self, timeout: Duration) -> anyhow::Result<[String; 2]> {
        let bin = format!("/usr/lib/postgresql/{}/bin/pg_isready", self.image.major);
        let secs = timeout.as_secs().max(1);
        let mut said = Vec::new();
        for ip in [self.lease.ip, self.resource.ip] {
            let (code, out) = self
                .resource
                .shell(&format!("{bin} -h {ip} -p {PG_PORT} -t {secs}"))
                .await?;
            said.push(format!("{out} (exit {code})"));
        }
        Ok([said[0].clone(), said[1].clone()])
    }

    /// Crashes both servers and starts them again ([`PgContainer::crash_restart`]).
    pub async fn crash_and_restart(&mut self, timeout: Duration) -> anyhow::Result<Vec<Restarted>> {
        let mut restarted = Vec::new();
        for (name, server) in [
            ("lease26's host", &mut self.lease),
            ("res26's host", &mut self.resource),
        ] {
            let before = server.full_log().await.len();
            let old_pid = server.postmaster_pid().await;
            let started = Instant::now();
            server
                .crash_restart(timeout)
                .await
                .with_context(|| format!("failed to crash and restart {name}"))?;
            let log = server.full_log().await;
            restarted.push(Restarted {
                server: format!("{name} (restarted in {} ms)", started.elapsed().as_millis()),
                old_pid,
                new_pid: server.postmaster_pid().await,
                log: log.get(before..).unwrap_or(&log).to_owned(),
            });
        }
        Ok(restarted)
    }

    /// For a kept run: what was kept and how to look inside.
    pub fn kept_lines(&self) -> Vec<String> {
        [("lease26", &self.lease), ("res26", &self.resource)]
            .into_iter()
            .map(|(db, s)| {
                format!(
                    "kept {db}'s container {} (stopped); to look inside: docker start {0} && \
                     docker exec -it {0} psql -h /tmp -U lab {db}",
                    &s.id()[..12.min(s.id().len())]
                )
            })
            .collect()
    }

    /// Stops the servers and leaves them and their networks in place (`--keep`, a failing run);
    /// `lab clean` removes them.
    pub async fn stop_and_keep(self) {
        self.lease.stop_and_keep().await;
        self.resource.stop_and_keep().await;
        self.lease_net.keep();
        self.resource_net.keep();
    }

    /// Removes the servers, then the networks.
    pub async fn remove(self) {
        self.lease.remove().await;
        self.resource.remove().await;
        self.lease_net.remove().await;
        self.resource_net.remove().await;
    }
}
