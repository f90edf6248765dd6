//! P0, the preflight: before any experiment, prove the premise that the resource side cannot
//! read the lease. The role the resource connects as must be refused by `lease26`, while each
//! role can reach its own database (so the refusal is not just a broken connection).

use fencing::schema::{LEASE_DB, LEASE_ROLE, RESOURCE_DB, RESOURCE_ROLE};
use harness::evidence::Recorder;
use sqlx::{Connection, PgConnection};

use crate::{Lab, Outcome, Scenario};

pub struct P0;

impl Scenario for P0 {
    fn id(&self) -> &'static str {
        "P0"
    }

    fn title(&self) -> &'static str {
        "preflight: the resource role cannot connect to the lease database"
    }

    fn checks(&self) -> usize {
        3
    }

    fn run<'a>(&'a self, lab: &'a mut Lab, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            for (db, role, expect_ok) in [
                (LEASE_DB, LEASE_ROLE, true),
                (RESOURCE_DB, RESOURCE_ROLE, true),
                (LEASE_DB, RESOURCE_ROLE, false),
            ] {
                let opts = lab.cluster.connect_options(db, role);
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
            Ok(())
        })
    }
}
