//! What `/proc` shows of a process: the state of each of its threads ([`threads`], what
//! `freeze` and `thaw` wait on), the members of a process group ([`group_members`]: what is
//! left of a killed one), and whether a pid is listed at all ([`exists`]). Reading only: nothing
//! here signals, waits or starts a process.

use std::io;

/// One thread of a process as `/proc/<pid>/task/<tid>/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadState {
    pub tid: i32,
    /// The thread's name (`comm`), e.g. `holder` or `renewer`.
    pub name: String,
    /// The scheduler state letter: `R`, `S`, `D`, `T` (stopped), `Z`, …
    pub state: char,
}

impl std::fmt::Display for ThreadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})={}", self.name, self.tid, self.state)
    }
}

/// The state of the process `pid` and of each of its threads, read from `/proc`.
pub fn threads(pid: u32) -> io::Result<Vec<ThreadState>> {
    let to_io = |e: procfs::ProcError| io::Error::other(e.to_string());
    let process = procfs::process::Process::new(pid as i32).map_err(to_io)?;
    let mut states = Vec::new();
    for task in process.tasks().map_err(to_io)? {
        // A thread may end between listing and reading: skip it.
        let Ok(task) = task else { continue };
        if let Ok(stat) = task.stat() {
            states.push(ThreadState {
                tid: task.tid,
                name: stat.comm,
                state: stat.state,
            });
        }
    }
    Ok(states)
}

/// Every process whose process group is `pgid` (a child of the lab leads its own group, whose
/// id is its pid), as `/proc` lists them now: `(pid, comm, state)`. Empty when the group is gone.
pub fn group_members(pgid: u32) -> Vec<(i32, String, char)> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|stat| stat.pgrp == pgid as i32)
        .map(|stat| (stat.pid, stat.comm, stat.state))
        .collect()
}

/// Whether `/proc` lists the process `pid` now (a zombie counts: it is not reaped yet).
pub fn exists(pid: u32) -> bool {
    procfs::process::Process::new(pid as i32).is_ok_and(|p| p.stat().is_ok())
}

/// The local ports of the TCP connections the process `pid` holds open to `dst:port` (every
/// thread's: they share the descriptors), read from `/proc/<pid>/fd` and the process's
/// network namespace's `/proc/<pid>/net/tcp`, lowest first. What a network hold needs to cut one
/// process off from one server when the server cannot name its clients (a lock service).
pub fn tcp_ports_to(pid: u32, dst: std::net::IpAddr, port: u16) -> io::Result<Vec<u16>> {
    use procfs::process::FDTarget;
    let to_io = |e: procfs::ProcError| io::Error::other(e.to_string());
    let process = procfs::process::Process::new(pid as i32).map_err(to_io)?;
    let sockets: std::collections::HashSet<u64> = process
        .fd()
        .map_err(to_io)?
        .filter_map(Result::ok)
        .filter_map(|fd| match fd.target {
            FDTarget::Socket(inode) => Some(inode),
            _ => None,
        })
        .collect();
    let mut ports: Vec<u16> = process
        .tcp()
        .map_err(to_io)?
        .into_iter()
        .filter(|c| {
            sockets.contains(&c.inode)
                && c.remote_address.ip() == dst
                && c.remote_address.port() == port
        })
        .map(|c| c.local_address.port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// User + system CPU seconds of `root` and every process descended from it, now (`None` when
/// `/proc` cannot be read), with what their exited children spent once reaped (`cutime`,
/// `cstime`): a process that ends during a measurement — a server's backend whose client
/// disconnected — keeps its CPU in the total. What `lab bench` reads a server's cost with.
pub fn tree_cpu_seconds(root: u32) -> Option<f64> {
    let tps = procfs::ticks_per_second() as f64;
    let all: Vec<procfs::process::Stat> = procfs::process::all_processes()
        .ok()?
        .filter_map(|p| p.ok()?.stat().ok())
        .collect();
    let mut tree = vec![i32::try_from(root).ok()?];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|s| s.ppid == parent).map(|s| s.pid));
        i += 1;
    }
    let ticks: u64 = all
        .iter()
        .filter(|s| tree.contains(&s.pid))
        .map(|s| s.utime + s.stime + reaped(s.cutime) + reaped(s.cstime))
        .sum();
    Some(ticks as f64 / tps)
}

/// User + system CPU seconds of the process `pid` alone (every thread of it; not its children),
/// now; `None` when `/proc` cannot be read. What `lab bench` reads a lock client's cost with: the
/// lab's own process for its Rust clients, a library holder's for its Python client.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = procfs::process::Process::new(i32::try_from(pid).ok()?)
        .ok()?
        .stat()
        .ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// A `cutime`/`cstime` field of `/proc/<pid>/stat` as ticks (the kernel reports it signed).
fn reaped(ticks: i64) -> u64 {
    u64::try_from(ticks).unwrap_or(0)
}

/// How many processes `/proc` lists whose parent is `pid` now, zombies (not reaped yet)
/// included: what a caller polls to know that children which ended have been reaped, so that
/// their CPU is in [`tree_cpu_seconds`].
pub fn children(pid: u32) -> usize {
    let Ok(all) = procfs::process::all_processes() else {
        return 0;
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|stat| i64::from(stat.ppid) == i64::from(pid))
        .count()
}
