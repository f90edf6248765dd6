//! The embedded cluster's security defaults and fault verbs, against real PostgreSQL: private
//! directories, no TCP listener unless asked, and an immediate restart that recovers.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use harness::server::{Cluster, ClusterConfig, PgBinaries, Server};

/// Whether some socket listens on TCP `port` (IPv4 or IPv6), from `/proc/net/tcp*`.
fn tcp_listener_on(port: u16) -> bool {
    let hex = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&hex) && cols[3] == "0A"
            })
    })
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test]
async fn a_cluster_is_private_and_listens_on_no_tcp_port_unless_asked() -> anyhow::Result<()> {
    let port = free_port()?;
    let cfg = ClusterConfig {
        port,
        ..ClusterConfig::new(PgBinaries::locate(None)?)
    };
    let cluster = Cluster::create(cfg.clone()).await?;
    for dir in [
        cluster.root().to_path_buf(),
        cluster.socket_dir(),
        cluster.data_dir(),
    ] {
        let mode = fs::metadata(&dir)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", dir.display());
    }
    assert!(
        cluster
            .socket_dir()
            .join(format!(".s.PGSQL.{port}"))
            .exists(),
        "the Unix socket"
    );
    assert!(!tcp_listener_on(port), "no TCP listener by default");
    let mut cluster = cluster;
    cluster.stop().await;
    drop(cluster);

    // The positive control: asked for, the listener is there (so the check above can fail).
    let tcp = Cluster::create(ClusterConfig {
        listen_tcp: true,
        ..cfg
    })
    .await?;
    assert!(tcp_listener_on(port), "--tcp listens on 127.0.0.1:{port}");
    let mut tcp = tcp;
    tcp.stop().await;
    assert!(
        !tcp_listener_on(port),
        "and stops listening with the cluster"
    );
    Ok(())
}

#[tokio::test]
async fn restart_immediate_recovers_from_the_wal_and_drop_removes_everything() -> anyhow::Result<()>
{
    let mut cluster = Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?;
    let root = cluster.root().to_path_buf();
    let offset = cluster.log_len();
    let before = cluster.postmaster_pid();
    cluster.restart_immediate().await?;
    assert_ne!(cluster.postmaster_pid(), before, "a new postmaster");
    let log = cluster.log_since(offset)?;
    assert!(log.contains("automatic recovery in progress"), "{log}");
    cluster.admin().await?; // it accepts connections again
    let pid = cluster.postmaster_pid().expect("running");
    cluster.stop().await;
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the server has exited when stop returns"
    );
    assert!(root.exists(), "stopped, the directory is still there");
    drop(cluster);
    assert!(!root.exists(), "the cluster directory is removed on drop");
    Ok(())
}

/// The last resort: a cluster dropped while it runs (a panic) is still stopped and removed.
#[tokio::test]
async fn a_running_cluster_dropped_by_a_panic_is_stopped_and_removed() -> anyhow::Result<()> {
    let cluster = Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?;
    let (root, pid) = (
        cluster.root().to_path_buf(),
        cluster.postmaster_pid().expect("running"),
    );
    drop(cluster);
    assert!(!root.exists(), "the cluster directory is removed on drop");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the server is stopped on drop"
    );
    Ok(())
}

/// A kept cluster's directory survives the stop and the drop, marked as kept.
#[tokio::test]
async fn a_kept_cluster_stays_on_disk_marked_kept() -> anyhow::Result<()> {
    let mut cluster = Cluster::create(ClusterConfig::new(PgBinaries::locate(None)?)).await?;
    let root = cluster.root().to_path_buf();
    cluster.keep_on_drop();
    cluster.stop().await;
    drop(cluster);
    assert!(root.join("KEPT").is_file() && root.join("data").is_dir());
    // Its owner (this test) is alive, so no leftover sweep may take it: remove it by hand.
    fs::remove_dir_all(&root)?;
    Ok(())
}
