//! How the lab starts a holder process: its flags (`HolderFlags`, the one type the holder parses),
//! the profile it loads (`--sut`: the lab's resolved system under test, by name or path), where
//! it reaches each database (the socket, or a host over TCP), and the lab's own lease clients
//! beside it. Nothing here spawns: `harness::holder::Holder::spawn` does.

use std::time::Duration;

use anyhow::Context as _;
use fencing::lease::SqlLeaseStore;
use fencing::profile::{JobProfile, Profile};
use fencing::resource::WriteMode;
use fencing::schema::Database;
use harness::holder::{Holder, HolderError, HolderSpec};
use harness::hosts::Host;
use holder_protocol::HolderFlags;
use sqlx::postgres::PgPoolOptions;

use super::{Testbed, LEASE, SCOPE, SUMMARY};
use harness::docker::PG_PORT;

/// A holder of the user's (`--holder-cmd`): the fault points it refused when asked for each
/// ([`Testbed::refused_fault_points`]), with its words.
#[derive(Debug, Clone)]
pub struct UserHolder {
    pub refused: Vec<(crate::FaultPoint, String)>,
}

impl UserHolder {
    /// Why the experiment `spec` does not run with this holder (the skip line), `None` when it
    /// does.
    pub fn not_for(&self, spec: &crate::Spec) -> Option<String> {
        let id = spec.id;
        match spec.holder_points {
            Err(why) => Some(format!(
                "{id} does not judge your holder (--holder-cmd): {why}"
            )),
            Ok(points) => points.iter().find_map(|p| {
                self.refused.iter().find(|(q, _)| q == p).map(|(p, words)| {
                    format!(
                        "{id} stops its holder at {}, which your holder refused (a holder \
                         without a fault point exits 2 on its flag): {words}",
                        p.name()
                    )
                })
            }),
        }
    }
}

impl Testbed {
    /// Asks the holder of the run for each fault point a flag asks for
    /// ([`crate::FaultPoint::ASKED`]): started with that flag (on a lease of its own), a holder
    /// that answers the handshake has it and is killed at once; one that exits 2 (bad
    /// arguments) refused it — what those words were. Any other failure is not a refusal: the
    /// experiments that start it fail on it, quoting it.
    pub async fn refused_fault_points(&self) -> Vec<(crate::FaultPoint, String)> {
        let mut refused = Vec::new();
        for point in crate::FaultPoint::ASKED {
            let mut spec = self.holder_spec("holder-probe", "probe", WriteMode::Fenced, false);
            spec.flags.lease = "holder-probe".into();
            point.ask(&mut spec.flags);
            match Holder::spawn(&spec).await {
                Ok(mut holder) => {
                    holder.crash().await;
                }
                Err(HolderError::Exited { status, stderr, .. })
                    if status.starts_with("exit 2 ") =>
                {
                    let said = stderr.lines().rev().find(|l| !l.trim().is_empty());
                    refused.push((point, said.unwrap_or(&status).trim().to_owned()));
                }
                Err(_) => {}
            }
        }
        refused
    }

    /// How to start a holder process that writes `content` to the summary in `mode`.
    pub fn holder_spec(
        &self,
        holder: &str,
        content: &str,
        mode: WriteMode,
        release: bool,
    ) -> HolderSpec {
        // Durations travel as whole milliseconds (validated non-zero and far below u64::MAX).
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        HolderSpec {
            bin: self.holder_bin.clone(),
            prefix: self.holder_prefix.clone(),
            flags: HolderFlags {
                store: self.case.store.name().into(),
                socket_dir: self.servers.socket().0,
                port: self.servers.socket().1,
                lease: LEASE.into(),
                holder: holder.into(),
                ttl_ms: ms(self.case.ttl),
                renew_ms: ms(self.params.renew),
                margin_ms: ms(self.params.margin),
                scope: SCOPE.into(),
                part: SUMMARY.into(),
                content: content.into(),
                mode: mode.as_str().into(),
                sut: self.sut_arg(),
                run_id: None,
                release,
                wait_before_check: false,
                wait_before_commit: false,
                wait_after_write: false,
                resource_host: self.servers.tcp_host(Host::Resource),
                resource_port: self.servers.tcp_host(Host::Resource).map(|_| PG_PORT),
                lease_host: self.servers.tcp_host(Host::Lease),
                lease_port: self.servers.tcp_host(Host::Lease).map(|_| PG_PORT),
                store_endpoint: self.service.as_ref().map(|s| s.endpoint()),
                loop_seed: None,
                loop_parts: 3,
                control_scope: None,
            },
            env: Vec::new(),
            run_as: None,
        }
    }

    /// Waits, polling the database clock, until the lease is free (expired or released);
    /// `whose` names it in the timeout error ("A's lease"). Returns how long that took.
    pub async fn until_lease_expired(&self, whose: &str) -> anyhow::Result<Duration> {
        let what = format!("{whose} is expired by {}", self.expiry_clock());
        let lease = &self.lease;
        Ok(harness::wait::until(&what, self.params.wait_timeout, || lease.is_free(LEASE)).await?)
    }

    /// A client of the run's lease store on a connection (a session) of its own (F3's
    /// contenders): for a lock service, a new client of it; for the lease table,
    /// [`Testbed::own_lease_client`].
    pub async fn own_store_client(
        &self,
    ) -> anyhow::Result<std::sync::Arc<dyn fencing::lease::LeaseStore>> {
        let table = if self.service.is_some() {
            // The service's client takes only its margin from the table.
            self.lease_table.clone()
        } else {
            self.own_lease_client().await?
        };
        super::open_store(self.case.store, &table, self.service.as_deref()).await
    }

    /// A lease client with its own single connection, already open (F3's contenders).
    pub async fn own_lease_client(&self) -> anyhow::Result<SqlLeaseStore> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(self.connect_options(
                Database::Lease,
                Database::Lease.name(),
                Database::Lease.role(),
            ))
            .await
            .context("failed to open a contender's connection")?;
        Ok(
            SqlLeaseStore::with_profile(pool, self.params.margin, self.case.sut.clone())
                .with_ttl_in_force(self.case.ttl),
        )
    }

    /// A job holder's `--sut` (`--store mariadb`): the job-lease design it loads, `None` for
    /// seed 000's own.
    pub fn jobs_arg(&self) -> Option<String> {
        (*self.params.jobs != *JobProfile::seed000()).then(|| self.params.jobs.load_arg())
    }

    /// The holder's `--sut`: the profile a holder loads, `None` for the lab's own design.
    pub fn sut_arg(&self) -> Option<String> {
        (*self.case.sut != *Profile::seed004()).then(|| self.case.sut.load_arg())
    }
}
