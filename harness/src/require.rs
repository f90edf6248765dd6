//! What a test does when a dependency of the lab is missing on this machine or in this build — a
//! Docker engine, MariaDB, libfaketime: it says `skip` with the reason where the reader of the test
//! run sees it, and it fails instead when `LAB_REQUIRE` names that dependency. A test that returns
//! `Ok` having checked nothing would pass vacuously: a CI machine without Docker would stay green.
//!
//! `LAB_REQUIRE` is a comma list of [`Dependency`] names
//! (`docker,mariadb,faketime,chromium,psycopg,jdbc`); `.ci/run` sets them all. Without it a missing dependency is a skip, so that a developer's machine
//! without Docker still runs the rest.
//!
//! Where the skip shows: test runners keep a passing test's output to themselves (nextest shows
//! it only with `--success-output`), and a skipping test passes. So the line goes to two places:
//! straight to the process's stderr (`std::io::stderr`, not `eprintln!`: `cargo test`'s capture
//! takes only the print macros' output, so it shows the line even for a passing test), and, when
//! [`SKIPPED`] names a file, appended to it — `scripts/test.sh`, the test command, sets it and
//! prints the file's lines after the runner's summary, where the reader of the run looks.

use std::fmt;
use std::io::Write as _;

/// The variable naming the dependencies whose absence fails a test instead of skipping it.
pub const VAR: &str = "LAB_REQUIRE";

/// The variable naming a file each skip's line is appended to (`scripts/test.sh` sets it).
pub const SKIPPED: &str = "LAB_SKIPPED";

/// A dependency some tests need beyond the embedded PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dependency {
    /// A Docker engine answering `docker info`, and the build's `containers` feature.
    Docker,
    /// MariaDB's server binaries, and the build's `mariadb` feature.
    MariaDb,
    /// libfaketime.
    Faketime,
    /// Headless Chromium, which `scripts/render-report.sh` renders the report with (and installs
    /// with apt-get when run as root).
    Chromium,
    /// Debian's python3-psycopg, which the example Python holder runs on
    /// (`scripts/ensure-python-holder.sh`).
    Psycopg,
    /// A JDK 17+ and Debian's PostgreSQL JDBC driver, which the example Java holder runs on
    /// (`scripts/ensure-java-holder.sh`).
    Jdbc,
    /// The lock libraries the library holders use, in their virtual environment
    /// (`scripts/ensure-library-holders.sh`).
    Libraries,
}

impl Dependency {
    /// Its name in `LAB_REQUIRE`.
    pub fn name(self) -> &'static str {
        match self {
            Dependency::Docker => "docker",
            Dependency::MariaDb => "mariadb",
            Dependency::Faketime => "faketime",
            Dependency::Chromium => "chromium",
            Dependency::Psycopg => "psycopg",
            Dependency::Jdbc => "jdbc",
            Dependency::Libraries => "libraries",
        }
    }

    /// Whether `LAB_REQUIRE` names it (names are trimmed and compared without case).
    pub fn required(self) -> bool {
        std::env::var(VAR).is_ok_and(|list| names(&list, self))
    }
}

/// Whether the comma list `list` names `dep`.
fn names(list: &str, dep: Dependency) -> bool {
    list.split(',')
        .any(|name| name.trim().eq_ignore_ascii_case(dep.name()))
}

/// The running test's name, as libtest names the thread it runs a test on (both `cargo test`
/// and nextest); "this test" elsewhere (a task on a runtime's worker thread).
pub fn this_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" && !name.starts_with("tokio-") => name.to_owned(),
        _ => "this test".to_owned(),
    }
}

/// A dependency `LAB_REQUIRE` names is missing: the test fails with this.
#[derive(Debug, thiserror::Error)]
#[error("{} is missing, and {VAR} requires it ({VAR}={list}): {what} cannot be skipped: {why}", .dep.name())]
pub struct Missing {
    pub dep: Dependency,
    pub what: String,
    pub why: String,
    pub list: String,
}

/// `what` (a test, or the part of one) cannot run without `dep`, for the reason `why`: `Ok(())`
/// once the skip is said on stderr — the caller then returns having checked nothing more — or,
/// when `LAB_REQUIRE` names `dep`, [`Missing`], for the test to fail with.
pub fn skip(
    dep: Dependency,
    what: impl fmt::Display,
    why: impl fmt::Display,
) -> Result<(), Missing> {
    let (what, why) = (what.to_string(), why.to_string());
    if dep.required() {
        return Err(Missing {
            dep,
            what,
            why,
            list: std::env::var(VAR).unwrap_or_default(),
        });
    }
    let line = format!(
        "{}: skip {what}: {} is missing: {} ({VAR}={} makes this a failure)\n",
        test_binary(),
        dep.name(),
        one_line(&why),
        dep.name()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(SKIPPED) {
        // One write of one short line, appended: the lines of tests running at once in other
        // processes do not interleave.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
    Ok(())
}

/// The test binary's name without the hash cargo adds (`scenarios`, `cli`, `containers`).
fn test_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_else(|| "test".to_owned())
}

/// `text` on one line: its lines joined with " / ".
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_a_dependency_with_spaces_and_any_case() {
        assert!(names("docker,mariadb,faketime", Dependency::MariaDb));
        assert!(names(" Docker , faketime", Dependency::Docker));
        assert!(!names("docker", Dependency::Faketime));
        assert!(!names("", Dependency::Docker));
        assert!(!names("dockers", Dependency::Docker));
    }

    #[test]
    fn a_required_dependency_is_named_in_the_failure() {
        let e = Missing {
            dep: Dependency::Docker,
            what: "F15".into(),
            why: "no Docker engine answers".into(),
            list: "docker,mariadb".into(),
        };
        assert_eq!(
            e.to_string(),
            "docker is missing, and LAB_REQUIRE requires it (LAB_REQUIRE=docker,mariadb): F15 \
             cannot be skipped: no Docker engine answers"
        );
    }
}
