//! The private home of a throwaway server, whatever the server: a `fencing-lab-*` directory
//! (0700) under the system temp dir, carrying the owner mark, with `sock/` (0700) for the Unix
//! socket, `tmp/` (0700) for the server's temp files, `data/` for the data directory and
//! `server.log`. When the lab runs as root, the
//! directory is handed to the server's unprivileged user (servers refuse to run as root).
//!
//! Removed when dropped, unless kept ([`ServerDir::keep`]: after a failing run or with `--keep`),
//! in which case it is marked `KEPT` and named. A directory whose lab was killed outright is
//! found by its owner mark by the next run ([`remove_leftovers`]) — never by process name.
//!
//! This module holds no server knowledge beyond the pid files it looks for in leftovers; it must
//! not start or stop a server of its own (the server types do, through `crate::process`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;

use super::ServerError;
use crate::process::{self, RunAs};

/// The prefix of every server directory the lab makes; it marks them as the lab's.
pub const DIR_PREFIX: &str = "fencing-lab-";
/// The file in a server directory that names the lab process that made it.
const OWNER_FILE: &str = "lab.owner";
/// The file in a server directory that says it was kept on purpose.
const KEPT_FILE: &str = "KEPT";
/// Where the servers the lab knows keep their pid, relative to the directory.
const PID_FILES: &[&str] = &["data/postmaster.pid", "mariadbd.pid"];
/// How long a leftover server gets for its immediate shutdown before SIGKILL.
const ORPHAN_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A server's private directory. See the module docs.
#[derive(Debug)]
pub struct ServerDir {
    dir: Option<TempDir>,
    root: PathBuf,
    run_as: Option<RunAs>,
    kept: bool,
}

impl ServerDir {
    /// Makes the directory, marks it as this lab's and, when the lab runs as root, hands it to
    /// `server_user`. On error nothing is left.
    pub fn create(server_user: &str) -> Result<ServerDir, ServerError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| ServerError::Io { what, source }
        };
        let run_as = RunAs::unless_root_then(server_user).map_err(|()| ServerError::NoUser {
            user: server_user.to_owned(),
        })?;
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(io("make a temp directory"))?;
        let sock = dir.path().join("sock");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
            .map_err(io("restrict the directory to 0700"))?;
        // The owner mark: which lab process made it, so that a later run can tell a directory
        // whose lab was killed outright from one still in use.
        mark_owner(dir.path()).map_err(io("mark the directory as the lab's"))?;
        let tmp = dir.path().join("tmp");
        for sub in [&sock, &tmp] {
            fs::create_dir(sub).map_err(io("make the socket and temp directories"))?;
            fs::set_permissions(sub, fs::Permissions::from_mode(0o700))
                .map_err(io("restrict the socket and temp directories to 0700"))?;
        }
        if let Some(who) = run_as {
            for path in [dir.path(), sock.as_path(), tmp.as_path()] {
                chown(path, Some(who.uid), Some(who.gid))
                    .map_err(io("hand the directory to the server user"))?;
            }
        }
        Ok(ServerDir {
            root: dir.path().to_owned(),
            dir: Some(dir),
            run_as,
            kept: false,
        })
    }

    /// Keep the directory after the server is dropped. It is marked as kept, so that later runs
    /// leave it alone; `lab clean` removes it.
    pub fn keep(&mut self) {
        self.kept = true;
        let _ = fs::write(
            self.root.join(KEPT_FILE),
            "kept on purpose; `lab clean` removes it\n",
        );
    }

    pub fn is_kept(&self) -> bool {
        self.kept
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The user the server runs as, when it is not the lab's own.
    pub fn run_as(&self) -> Option<RunAs> {
        self.run_as
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.join("server.log")
    }

    /// The server's own temp directory (0700): the lab's TMPDIR may not be writable by the
    /// server's user, and a server's temp files belong with the rest of it.
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The server log, opened for appending (a server's stdout and stderr go there).
    pub fn open_log(&self) -> Result<File, ServerError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|source| ServerError::Io {
                what: "open the server log".into(),
                source,
            })
    }

    /// The server log's current length: pass it to [`ServerDir::log_since`] later.
    pub fn log_len(&self) -> u64 {
        fs::metadata(self.log_path()).map(|m| m.len()).unwrap_or(0)
    }

    /// The server log from byte `offset` on.
    pub fn log_since(&self, offset: u64) -> io::Result<String> {
        let mut file = File::open(self.log_path())?;
        file.seek(SeekFrom::Start(offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(text)
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_since(0).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for ServerDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            if self.kept {
                let _ = dir.keep();
            }
            // else: dropping the TempDir removes it.
        }
    }
}

/// Writes the owner mark of this lab process into `dir`.
fn mark_owner(dir: &Path) -> io::Result<()> {
    // Whole or not at all (temp file + rename): a concurrent run must never read a half mark and
    // take a live lab's directory for a leftover.
    let mark = owner_mark(std::process::id())
        .ok_or_else(|| io::Error::other("cannot read /proc/self/stat"))?;
    crate::evidence::write_atomically(&dir.join(OWNER_FILE), mark.as_bytes())
}

/// `"<pid> <start time>"` of a process: the pair names it even after its pid is reused.
fn owner_mark(pid: u32) -> Option<String> {
    let stat = procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()?;
    Some(format!("{pid} {}", stat.starttime))
}

/// Whether the lab that wrote the owner mark `owner` (`"<pid> <start time>"`) still runs.
fn owner_alive(owner: &str) -> bool {
    owner
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse::<u32>().ok())
        .and_then(owner_mark)
        .is_some_and(|mark| mark == owner.trim())
}

/// Removes `dir`, a server directory whose lab is gone, stopping a server still running from it
/// (identified by its pid file *and* a command line naming its data directory).
fn remove_dir_of_a_gone_lab(dir: &Path, was_kept: bool) -> Option<Removed> {
    let data = dir.join("data").to_string_lossy().into_owned();
    let stopped_server = PID_FILES.iter().find_map(|file| {
        let pid: i32 = fs::read_to_string(dir.join(file))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()?;
        // SIGQUIT: PostgreSQL's immediate shutdown; MariaDB dies of it.
        process::stop_orphan(pid, &data, Signal::SIGQUIT, ORPHAN_STOP_TIMEOUT).then_some(pid)
    });
    fs::remove_dir_all(dir).ok()?;
    Some(Removed {
        dir: dir.to_owned(),
        stopped_server,
        was_kept,
    })
}

/// Why [`remove_leftovers`] removed a server directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub dir: PathBuf,
    /// A server that was still running from it and was stopped.
    pub stopped_server: Option<i32>,
    pub was_kept: bool,
}

/// Finds the lab's server directories (`fencing-lab-*`) in `temp_dir` whose lab is gone —
/// killed outright, so that it could not clean up — stops a server still running from one
/// (identified by its pid file *and* a command line naming its data directory), and removes
/// them. Directories kept on purpose are removed only with `include_kept` (`lab clean`); those
/// of a lab that is still running never are. Blocking: it runs before any runtime starts.
pub fn remove_leftovers(temp_dir: &Path, include_kept: bool) -> Vec<Removed> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(temp_dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_ours = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && dir.join(OWNER_FILE).is_file();
        if !is_ours {
            continue;
        }
        let owner = fs::read_to_string(dir.join(OWNER_FILE)).unwrap_or_default();
        let was_kept = dir.join(KEPT_FILE).is_file();
        if owner_alive(&owner) || (was_kept && !include_kept) {
            continue;
        }
        removed.extend(remove_dir_of_a_gone_lab(&dir, was_kept));
    }
    removed
}

/// The bound on what failing runs keep: of the directories kept by labs no longer running
/// (a failing run's servers, `--keep`'s), those of the `keep_runs` newest runs stay — a run is
/// its lab's owner mark, its age its newest `KEPT` mark — and the older runs' are removed, a
/// server still running from one stopped first. Returns what went. Iterating on a broken
/// fence, 24 failing runs kept 83 directories (6.4 GB) before this bound.
pub fn prune_kept(temp_dir: &Path, keep_runs: usize) -> Vec<Removed> {
    let Ok(entries) = fs::read_dir(temp_dir) else {
        return Vec::new();
    };
    // (owner mark, newest KEPT time, its directories)
    let mut runs: Vec<(String, std::time::SystemTime, Vec<PathBuf>)> = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let kept_at = fs::metadata(dir.join(KEPT_FILE)).and_then(|m| m.modified());
        let is_ours = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX);
        let (Ok(kept_at), true) = (kept_at, is_ours) else {
            continue;
        };
        let owner = fs::read_to_string(dir.join(OWNER_FILE)).unwrap_or_default();
        let alive = owner_alive(&owner);
        if alive {
            continue;
        }
        match runs.iter_mut().find(|(o, ..)| *o == owner) {
            Some((_, newest, dirs)) => {
                *newest = (*newest).max(kept_at);
                dirs.push(dir);
            }
            None => runs.push((owner, kept_at, vec![dir])),
        }
    }
    runs.sort_by_key(|run| std::cmp::Reverse(run.1));
    runs.into_iter()
        .skip(keep_runs)
        .flat_map(|(_, _, dirs)| dirs)
        .filter_map(|dir| remove_dir_of_a_gone_lab(&dir, true))
        .collect()
}
