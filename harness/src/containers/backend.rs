//! The container backend as the lab asks for it: [`Engine`] implements `harness::docker::Docker`
//! with the parts of this module, and each part's value is the handle the trait answers
//! (`ServiceContainer` a `LockService`, `SentinelGroup` a `RedisFailover`, …), its errors worded
//! for the experiment that asked. Only this file knows both sides.

use std::net::IpAddr;

use sqlx::postgres::PgConnectOptions;

use super::pg_hosts::{image_note, image_or_skip, ContainerServers, PgHosts};
use super::{
    engine, remove_held_rules, remove_labelled, services_image, tcp_state, ContainerError,
    EtcdCluster, Hold, Image, RedisServers, SentinelGroup, ServiceContainer,
};
use crate::docker::{self, Docker};
use crate::hosts::{Answer, Hosts, HostsFuture};
use crate::replication::Replication;

/// The Docker engine on this host, reached through its API.
pub struct Engine;

/// The lock services' image for `what`, or why it cannot be had: no engine, or no way to build
/// it here.
async fn services_image_for(what: &str) -> anyhow::Result<Image> {
    engine()
        .await
        .map_err(|reason| anyhow::anyhow!("{what}: {reason}"))?;
    services_image().await.map_err(|e| {
        anyhow::anyhow!(
            "{what}: no way to build the lock services' image here ({e}); building needs root, \
             debootstrap and the Debian archive"
        )
    })
}

impl Docker for Engine {
    fn engine(&self) -> Answer<'_, Result<String, String>> {
        Box::pin(engine())
    }

    fn start_hosts<'a>(
        &'a self,
        mark: &'a str,
        pg_major: u32,
        patroni: Option<Replication>,
    ) -> HostsFuture<'a, Box<dyn Hosts>> {
        Box::pin(async move {
            let hosts = ContainerServers::start(mark, pg_major, patroni).await?;
            Ok(Box::new(hosts) as Box<dyn Hosts>)
        })
    }

    fn own_servers<'a>(
        &'a self,
        mark: &'a str,
        n: usize,
    ) -> Answer<'a, Result<anyhow::Result<Box<dyn docker::OwnServers>>, String>> {
        Box::pin(async move {
            let image = image_or_skip(false).await?;
            Ok(PgHosts::start(&image, mark, n).await.map(|hosts| {
                Box::new(Started {
                    image_note: image_note(&image),
                    handle: hosts,
                }) as Box<dyn docker::OwnServers>
            }))
        })
    }

    fn lock_service<'a>(
        &'a self,
        service: docker::ContainedService,
        mark: &'a str,
    ) -> HostsFuture<'a, Box<dyn docker::LockService>> {
        Box::pin(async move {
            let image = services_image_for(&format!("--lease-store {service}")).await?;
            let server = ServiceContainer::start(service, &image, mark).await?;
            Ok(Box::new(Started {
                image_note: image_note(&image),
                handle: (service.name().to_owned(), server),
            }) as Box<dyn docker::LockService>)
        })
    }

    fn redis_failover<'a>(
        &'a self,
        mark: &'a str,
    ) -> HostsFuture<'a, Box<dyn docker::RedisFailover>> {
        Box::pin(async move {
            let image = services_image_for("Redis with Sentinel").await?;
            let group = SentinelGroup::start(&image, mark).await?;
            Ok(Box::new(Started {
                image_note: image_note(&image),
                handle: group,
            }) as Box<dyn docker::RedisFailover>)
        })
    }

    fn redlock_servers<'a>(
        &'a self,
        mark: &'a str,
        n: usize,
        shifted_clock: Option<usize>,
    ) -> HostsFuture<'a, Box<dyn docker::RedlockServers>> {
        Box::pin(async move {
            let image = services_image_for("Redis servers for Redlock").await?;
            let servers = RedisServers::start(&image, mark, n, shifted_clock)
                .await
                .map_err(anyhow::Error::new)?;
            Ok(Box::new(Started {
                image_note: image_note(&image),
                handle: servers,
            }) as Box<dyn docker::RedlockServers>)
        })
    }

    fn etcd_members<'a>(&'a self, mark: &'a str) -> HostsFuture<'a, Box<dyn docker::EtcdMembers>> {
        Box::pin(async move {
            let image = services_image_for("a three-member etcd cluster").await?;
            let cluster = EtcdCluster::start(&image, mark).await?;
            Ok(Box::new(Started {
                image_note: image_note(&image),
                handle: cluster,
            }) as Box<dyn docker::EtcdMembers>)
        })
    }

    fn hold<'a>(
        &'a self,
        ip: IpAddr,
        port: u16,
        mark: &'a str,
    ) -> HostsFuture<'a, (Box<dyn docker::Hold>, String)> {
        Box::pin(async move {
            let (hold, rule) = Hold::start(ip, port, mark).await?;
            Ok((Box::new(hold) as Box<dyn docker::Hold>, rule))
        })
    }

    fn hold_owner<'a>(
        &'a self,
        ip: IpAddr,
        port: u16,
        uid: u32,
        mark: &'a str,
    ) -> HostsFuture<'a, (Box<dyn docker::Hold>, String)> {
        Box::pin(async move {
            let (hold, rule) = Hold::start_for_owner(ip, port, uid, mark).await?;
            Ok((Box::new(hold) as Box<dyn docker::Hold>, rule))
        })
    }

    fn tcp_state(&self, dst: IpAddr, sport: u16) -> Answer<'_, String> {
        Box::pin(tcp_state(dst, sport))
    }

    fn remove_marked<'a>(&'a self, mark: &'a str) -> Answer<'a, ()> {
        Box::pin(async move {
            let _ = remove_labelled(Some(mark), false).await;
            remove_held_rules(Some(mark)).await;
        })
    }
}

/// A part started for the lab, with the note on where its image came from.
struct Started<T> {
    image_note: String,
    handle: T,
}

impl docker::LockService for Started<(String, ServiceContainer)> {
    fn service(&self) -> &str {
        &self.handle.0
    }
    fn image_note(&self) -> &str {
        &self.image_note
    }
    fn pid(&self) -> Answer<'_, Option<u32>> {
        Box::pin(self.handle.1.pid())
    }
    fn endpoint(&self) -> String {
        self.handle.1.endpoint()
    }
    fn port(&self) -> u16 {
        self.handle.1.port
    }
    fn ip(&self) -> IpAddr {
        self.handle.1.ip
    }
    fn version(&self) -> &str {
        &self.handle.1.version
    }
    fn settings(&self) -> &[(String, String)] {
        &self.handle.1.settings
    }
    fn log(&self) -> Answer<'_, String> {
        Box::pin(self.handle.1.log())
    }
    fn remove(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(self.handle.1.remove())
    }
    fn stop_and_keep(self: Box<Self>) -> Answer<'static, String> {
        Box::pin(self.handle.1.stop_and_keep())
    }
    fn pause(&self) -> Answer<'_, anyhow::Result<()>> {
        Box::pin(async { Ok(self.handle.1.pause().await?) })
    }
    fn unpause(&self) -> Answer<'_, anyhow::Result<()>> {
        Box::pin(async { Ok(self.handle.1.unpause().await?) })
    }
}

impl docker::RedisFailover for Started<SentinelGroup> {
    fn image_note(&self) -> &str {
        &self.image_note
    }
    fn primary_endpoint(&self) -> String {
        self.handle.primary_endpoint()
    }
    fn replica_endpoint(&self) -> String {
        self.handle.replica_endpoint()
    }
    fn ips(&self) -> (IpAddr, IpAddr) {
        (self.handle.primary_ip, self.handle.replica_ip)
    }
    fn version(&self) -> &str {
        &self.handle.version
    }
    fn cli<'a>(&'a self, args: &'a str) -> HostsFuture<'a, String> {
        Box::pin(async move { Ok(self.handle.cli(args).await?) })
    }
    fn whole(&self) -> HostsFuture<'_, bool> {
        Box::pin(async move { Ok(self.handle.whole().await?) })
    }
    fn cut_replica(&self) -> HostsFuture<'_, String> {
        Box::pin(async move { Ok(self.handle.cut_replica().await?) })
    }
    fn lose_primary(&mut self) -> HostsFuture<'_, ()> {
        Box::pin(async move { Ok(self.handle.lose_primary().await?) })
    }
    fn master_now(&self) -> Answer<'_, Option<IpAddr>> {
        Box::pin(self.handle.master_now())
    }
    fn failover_log(&self) -> Answer<'_, Vec<String>> {
        Box::pin(self.handle.failover_log())
    }
    fn remove(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(self.handle.remove())
    }
}

/// The error of a Redlock server's verb: the container layer's, as `anyhow`.
fn redlock<T>(answer: Result<T, ContainerError>) -> anyhow::Result<T> {
    answer.map_err(anyhow::Error::new)
}

impl docker::RedlockServers for Started<RedisServers> {
    fn image_note(&self) -> &str {
        &self.image_note
    }
    fn endpoints(&self) -> Vec<String> {
        self.handle.endpoints()
    }
    fn cli<'a>(&'a self, i: usize, args: &'a str) -> HostsFuture<'a, String> {
        Box::pin(async move { redlock(self.handle.cli(i, args).await) })
    }
    fn log(&self, i: usize) -> Answer<'_, String> {
        Box::pin(self.handle.log(i))
    }
    fn refuse(&self, i: usize) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.refuse(i).await) })
    }
    fn admit(&self, i: usize) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.admit(i).await) })
    }
    fn stall(&self, i: usize) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.stall(i).await) })
    }
    fn unstall(&self, i: usize) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.unstall(i).await) })
    }
    fn time_ms(&self, i: usize) -> HostsFuture<'_, i64> {
        Box::pin(async move { redlock(self.handle.time_ms(i).await) })
    }
    fn shift_clock(&self, i: usize, ms: i64) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.shift_clock(i, ms).await) })
    }
    fn restart(&self, i: usize) -> HostsFuture<'_, ()> {
        Box::pin(async move { redlock(self.handle.restart(i).await) })
    }
    fn remove(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(self.handle.remove())
    }
}

impl docker::EtcdMembers for Started<EtcdCluster> {
    fn image_note(&self) -> &str {
        &self.image_note
    }
    fn endpoints(&self) -> String {
        self.handle.endpoints()
    }
    fn version(&self) -> &str {
        &self.handle.version
    }
    fn revision(&self) -> HostsFuture<'_, i64> {
        Box::pin(async move { Ok(self.handle.revision().await?) })
    }
    fn snapshot(&self) -> HostsFuture<'_, String> {
        Box::pin(async move { Ok(self.handle.snapshot().await?) })
    }
    fn restore(&self) -> HostsFuture<'_, Vec<String>> {
        Box::pin(async move { Ok(self.handle.restore().await?) })
    }
    fn bump(&self, n: i64) -> HostsFuture<'_, ()> {
        Box::pin(async move { Ok(self.handle.bump(n).await?) })
    }
    fn remove(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(self.handle.remove())
    }
}

impl docker::OwnServers for Started<PgHosts> {
    fn ips(&self) -> Vec<IpAddr> {
        self.handle.servers.iter().map(|s| s.ip).collect()
    }
    fn image_note(&self) -> &str {
        &self.image_note
    }
    fn connect_options(&self, i: usize, database: &str, user: &str) -> PgConnectOptions {
        self.handle.servers[i].connect_options(database, user)
    }
    fn log(&self, i: usize) -> Answer<'_, String> {
        Box::pin(self.handle.servers[i].log())
    }
    fn remove(self: Box<Self>) -> Answer<'static, ()> {
        Box::pin(self.handle.remove())
    }
}

impl docker::Hold for Hold {
    fn listed(&self) -> Answer<'_, String> {
        Box::pin(Hold::listed(self))
    }
    fn lift(self: Box<Self>) -> HostsFuture<'static, ()> {
        Box::pin(async move { Ok(Hold::lift(*self).await?) })
    }
}
