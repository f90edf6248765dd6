//! Helpers the `lab` binary's tests share: a sandbox to run the lab in, and finding leftovers by
//! the lab's own markers.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `DOCKER_HOST` for a `lab clean` of a test that started no container: an engine that does not
/// answer, so that its clean removes its own sandbox's leftovers only. `lab clean` also removes
/// every kept container on the machine, and the container tests run beside the others: a
/// fresh-clone suite saw an embedded test's clean remove the containers a container test had
/// just kept, and that test's check that the next run leaves them failed.
pub const NO_ENGINE: (&str, &str) = (
    "DOCKER_HOST",
    "unix:///nonexistent/fencing-lab-tests-started-no-container.sock",
);

/// The command lines of live processes that mention `path` (a test's private TMPDIR).
pub fn processes_mentioning(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmd| cmd.contains(&needle))
        .collect()
}

/// Polls `probe` every 5 ms until it holds or `timeout` passes; whether it held.
pub fn poll(timeout: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if probe() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    probe()
}

/// Whether the example holder the script `scripts/ensure-NAME-holder.sh` sets up can run here
/// (the script installs what it needs, as root). `Ok(false)` once the test's skip is said — the
/// caller returns having checked nothing more —, an error when `LAB_REQUIRE` names `dep`.
pub fn example_holder_ready(
    name: &str,
    dep: harness::require::Dependency,
    why: &str,
) -> anyhow::Result<bool> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ready = std::process::Command::new(root.join(format!("scripts/ensure-{name}-holder.sh")))
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        harness::require::skip(dep, harness::require::this_test(), why)?;
    }
    Ok(ready)
}

/// [`example_holder_ready`] for the Python holder (Debian's python3-psycopg).
pub fn python_holder_ready() -> anyhow::Result<bool> {
    example_holder_ready(
        "python",
        harness::require::Dependency::Psycopg,
        "Debian's python3-psycopg is not installed (scripts/ensure-python-holder.sh)",
    )
}

/// A directory of a test's own to run the lab in: the lab's temp dir (TMPDIR) points at its `tmp`,
/// so "nothing left behind" is checked by the lab's own marker (the `fencing-lab-*` directory and
/// the postmaster started with `-D` inside it), never by process name.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> anyhow::Result<Sandbox> {
        let dir = tempfile::tempdir()?;
        // The server may run as the unprivileged `postgres` user: it must be able to traverse.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        fs::create_dir(dir.path().join("tmp"))?;
        fs::set_permissions(dir.path().join("tmp"), fs::Permissions::from_mode(0o755))?;
        Ok(Sandbox { dir })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lab clean` of this sandbox's leftovers: its clusters; no container (`NO_ENGINE`).
    pub fn clean(&self) -> anyhow::Result<Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg("clean")
            .env("TMPDIR", self.path("tmp"))
            .env(NO_ENGINE.0, NO_ENGINE.1)
            .output()?)
    }

    pub fn lab(&self, args: &[&str]) -> anyhow::Result<Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(args)
            .env("TMPDIR", self.path("tmp"))
            .output()?)
    }

    /// Asserts that no cluster directory and no process of this sandbox remains.
    pub fn assert_nothing_left(&self) -> anyhow::Result<()> {
        let tmp = self.path("tmp");
        let left: Vec<_> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "left behind in the temp dir: {left:?}");
        assert_eq!(
            processes_mentioning(&tmp),
            Vec::<String>::new(),
            "processes left behind"
        );
        Ok(())
    }
}

/// The lab's stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A stdout whose reader is already gone: every write to it fails with a broken pipe (EPIPE),
/// like `lab list | head -1` once `head` has exited — deterministically, with no race against
/// the pipe's buffer.
pub fn closed_stdout() -> anyhow::Result<std::process::Stdio> {
    let (read, write) = nix::unistd::pipe()?;
    drop(read);
    Ok(std::process::Stdio::from(write))
}
