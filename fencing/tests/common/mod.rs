//! A fresh embedded cluster with both databases provisioned, per test: tests share nothing.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::time::Duration;

use fencing::lease::SqlLeaseStore;
use fencing::publish::Publisher;
use fencing::resource::Resource;
use fencing::schema::{self, Database};
use harness::server::{Cluster, ClusterConfig, PgBinaries};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

pub const MARGIN: Duration = Duration::from_millis(100);
pub const SCOPE: &str = "daily-report";

pub struct Db {
    pub cluster: Cluster,
    pub lease: SqlLeaseStore,
    pub resource: Resource,
    pub publisher: Publisher,
}

pub async fn start() -> anyhow::Result<Db> {
    let cluster = Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?;
    schema::provision(&mut cluster.admin().await?).await?;
    let lease = pool(&cluster, Database::Lease).await?;
    let res = pool(&cluster, Database::Resource).await?;
    schema::migrate(Database::Lease, &lease).await?;
    schema::migrate(Database::Resource, &res).await?;
    let resource = Resource::new(res.clone());
    resource.setup_scope(SCOPE).await?;
    Ok(Db {
        cluster,
        lease: SqlLeaseStore::new(lease, MARGIN),
        resource,
        publisher: Publisher::new(res),
    })
}

async fn pool(cluster: &Cluster, db: Database) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(4)
        .connect_with(cluster.connect_options(db.name(), db.role()))
        .await?)
}

impl Db {
    /// Waits, by polling the database clock, until `name` is free.
    pub async fn until_free(&self, name: &str) -> anyhow::Result<()> {
        harness::wait::until("the lease is free", Duration::from_secs(30), || {
            self.lease.is_free(name)
        })
        .await?;
        Ok(())
    }
}
