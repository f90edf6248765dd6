//! P0, the preflight: before any experiment, prove the premise that the resource side cannot
//! read the lease. The role the resource connects as must be refused by `lease26`, while each
//! role can reach its own database (so the refusal is not just a broken connection). On the
//! container backend the separation is stronger, and P0 shows that too: the resource's host has
//! no route to the lease store's server at all, while it reaches its own.

use fencing::schema::{Database, LEASE_DB, LEASE_ROLE, RESOURCE_DB, RESOURCE_ROLE};
use harness::evidence::Recorder;
use harness::hosts::Host;
use sqlx::{Connection, PgConnection};

use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "P0",
    title: "preflight: the resource role cannot connect to the lease database",
    about: About {
        fault: "none: the preflight checks the premise",
        shows:
            "the resource's role cannot read the lease database, while each role reaches its own",
        paragraph: "Before any experiment, P0 proves the premise every other one relies on: \
                    the resource side cannot read the lease, so whatever it accepts or rejects \
                    it judges by the token a write carries, never by asking the lease store. \
                    The role the resource connects as must be refused by the lease database, \
                    while each role can still reach its own database, so the refusal is a \
                    permission and not a broken connection. On the container backend, where \
                    the lease store and the resource run on hosts of their own, P0 also shows \
                    that the resource's host has no route to the lease store's server at all, \
                    while it reaches its own.",
    },
    // On the embedded cluster; on hosts of their own, two more: [`SEPARATE_HOSTS`].
    checks: Checks::fixed(3),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: false,
    again_on_stores: false,
    runs_alone: false,
    // It judges the servers, not a holder: it runs whoever the holders are.
    holder_points: Ok(&[]),
    fault_moments: &[],
    lanes: StoreLanes::Default,
};

/// The container backend's P0: the two checks of the network besides.
const SEPARATE_HOSTS: Spec = Spec {
    checks: Checks::fixed(5),
    ..SPEC
};

/// `separate_hosts`: the container backend's P0, with the two checks of the network.
pub struct P0 {
    pub separate_hosts: bool,
}

impl Scenario for P0 {
    fn spec(&self) -> &Spec {
        if self.separate_hosts {
            &SEPARATE_HOSTS
        } else {
            &SPEC
        }
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            for (side, db, role, expect_ok) in [
                (Database::Lease, LEASE_DB, LEASE_ROLE, true),
                (Database::Resource, RESOURCE_DB, RESOURCE_ROLE, true),
                (Database::Lease, LEASE_DB, RESOURCE_ROLE, false),
            ] {
                let opts = bed.connect_options(side, db, role);
                let actual = match PgConnection::connect_with(&opts).await {
                    Ok(conn) => {
                        conn.close().await?;
                        "connected".to_owned()
                    }
                    Err(sqlx::Error::Database(e)) => {
                        format!("refused ({} {})", e.code().unwrap_or_default(), e.message())
                    }
                    Err(e) => return Err(e.into()),
                };
                let expected = if expect_ok {
                    "connected".to_owned()
                } else {
                    format!("refused (42501 permission denied for database \"{db}\")")
                };
                rec.check(format!("{role} connects to {db}"), &expected, &actual);
            }
            if self.separate_hosts {
                network_checks(bed, rec).await?;
            }
            Ok(())
        })
    }
}

/// The container backend's two checks: from the resource's host, the lease store's server does
/// not answer (no common network), and its own server does (so the silence is the network's).
async fn network_checks(bed: &Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    let timeout = std::time::Duration::from_secs(2);
    let Some([to_lease, to_own]) = bed.servers.resource_host_reaches(timeout).await? else {
        anyhow::bail!("the network checks need the container backend");
    };
    let ip = |host| {
        bed.servers
            .ip(host)
            .map_or_else(|| "?".into(), |ip| ip.to_string())
    };
    rec.check_that(
        format!(
            "from the resource's host, the lease store's server does not answer (pg_isready -t {}): no route between them",
            timeout.as_secs()
        ),
        to_lease.contains("no response"),
        format_args!("pg_isready -h {}: {to_lease}", ip(Host::Lease)),
    );
    rec.check_that(
        "from the resource's host, its own server answers (the control)",
        to_own.contains("accepting connections"),
        format_args!("pg_isready -h {}: {to_own}", ip(Host::Resource)),
    );
    Ok(())
}
