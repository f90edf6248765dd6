//! The lab's images ([`LabImage`]; PostgreSQL 15's are one image with every package): PostgreSQL
//! for a major version ([`postgres_image`]), and that plus Patroni
//! and etcd ([`patroni_image`]), built here from Debian packages with `debootstrap` and imported
//! into the engine as a tar stream of the root (`docker import`'s API call, [`import`]), tagged
//! by the recipe's hash and reused while the tag exists; [`remove_images`] for `lab clean
//! --images`. Nothing here pulls from a registry, runs the `docker` command or starts a
//! container: an image is all this file makes.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
};
use futures_util::StreamExt as _;
use nix::fcntl::{Flock, FlockArg};
use tokio::io::AsyncReadExt as _;

use super::{
    describe_status, docker, docker_with, fnv1a, run, ContainerError, Spawn, BUILD_TIMEOUT,
    IMAGE_REPO,
};
use crate::process::Stream;

/// A locally built image: its reference, and how long building it took (`None`: it was there).
#[derive(Debug, Clone)]
pub struct Image {
    pub reference: String,
    pub major: u32,
    pub built_in: Option<Duration>,
}

/// What goes into the image: bump `RECIPE` when the steps change, and the tag changes with it.
/// (The import through the engine's API makes the same image as `docker import` did: v1 stays.)
const RECIPE: &str = "v1: debootstrap --variant=minbase, docker import";

pub use crate::server::postgres::debian_suite_for as suite_for;

/// The images the lab builds, by what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabImage {
    /// PostgreSQL `major` (F15, F16; `--backend containers`).
    Postgres(u32),
    /// PostgreSQL `major` with Patroni and etcd (Debian's `patroni` and `etcd-server`, and
    /// `procps` to find and signal a server's processes): F17.
    Patroni(u32),
    /// The three lock services — Redis, etcd (with etcdctl, which R3 snapshots and restores a
    /// cluster with), ZooKeeper and its JVM — on PostgreSQL 15's image.
    Services,
}

impl LabImage {
    /// PostgreSQL's major version, the tag's flavour, the packages beside PostgreSQL's.
    /// PostgreSQL 15's three are one image with every package the lab's containers use: a
    /// machine's first run makes one debootstrap instead of three (measured on a fresh machine:
    /// 93, 47 and 74 s one after the other, while the experiments that need them waited).
    fn parts(self) -> (u32, &'static str, &'static [&'static str]) {
        match self {
            LabImage::Services | LabImage::Postgres(15) | LabImage::Patroni(15) => (
                15,
                "all-",
                &[
                    "redis-server",
                    "etcd-server",
                    "etcd-client",
                    "zookeeperd",
                    "openjdk-17-jre-headless",
                    "procps",
                    "patroni",
                ],
            ),
            LabImage::Postgres(major) => (major, "", &[]),
            LabImage::Patroni(major) => (major, "patroni-", &["patroni", "etcd-server", "procps"]),
        }
    }

    /// Whether `self` and `other` are the same image (PostgreSQL 15's are one).
    pub fn is_same_as(self, other: LabImage) -> bool {
        self.parts() == other.parts()
    }

    /// The image, built here from Debian packages if it is not there yet.
    pub async fn image(self) -> Result<Image, ContainerError> {
        let (major, flavour, extra) = self.parts();
        image_with(major, flavour, extra).await
    }

    /// Whether the image is there already (nothing is built).
    pub async fn is_built(self) -> Result<bool, ContainerError> {
        let (major, flavour, extra) = self.parts();
        present(&reference_for(major, flavour, extra)?.0).await
    }
}

/// The image for PostgreSQL `major`, built here from Debian packages if it is not there yet.
pub async fn postgres_image(major: u32) -> Result<Image, ContainerError> {
    LabImage::Postgres(major).image().await
}

/// The image for PostgreSQL `major` with Patroni and etcd, built here if it is not there yet.
pub async fn patroni_image(major: u32) -> Result<Image, ContainerError> {
    LabImage::Patroni(major).image().await
}

/// Whether the engine has the image `reference`.
async fn present(reference: &str) -> Result<bool, ContainerError> {
    Ok(docker().await?.inspect_image(reference).await.is_ok())
}

/// The tag of the image for PostgreSQL `major` and `extra` packages,
/// `<major>-<flavour><suite>-<hash>`; its Debian suite; the packages debootstrap includes.
fn reference_for(
    major: u32,
    flavour: &str,
    extra: &[&str],
) -> Result<(String, &'static str, String), ContainerError> {
    let suite = suite_for(major).ok_or_else(|| ContainerError::Cli {
        what: format!("PostgreSQL {major}"),
        detail: "no Debian suite ships it (13: bullseye, 15: bookworm, 17: trixie)".into(),
    })?;
    let mut packages = format!("postgresql-{major},iproute2");
    for p in extra {
        packages.push(',');
        packages.push_str(p);
    }
    let hash = fnv1a(&format!("{RECIPE}|{suite}|{packages}"));
    let reference = format!("{IMAGE_REPO}:{major}-{flavour}{suite}-{hash:08x}");
    Ok((reference, suite, packages))
}

/// The image for PostgreSQL `major` and `extra` packages, built here if it is not there yet.
async fn image_with(major: u32, flavour: &str, extra: &[&str]) -> Result<Image, ContainerError> {
    let (reference, suite, packages) = reference_for(major, flavour, extra)?;
    // There already (every run but a machine's first): no need to wait for another build.
    if present(&reference).await? {
        return Ok(Image {
            reference,
            major,
            built_in: None,
        });
    }
    // One build at a time on this machine, in this process or another: the test runner starts
    // several container tests at once, each in its own process, and each built the same image
    // beside the others (measured on a fresh machine: four debootstraps at once, 252 s for the
    // one that finished first, while the tests that waited on them ran out of time). A `flock`
    // belongs to an open file, so two tasks of one process take turns on it too.
    let _one_on_this_machine =
        machine_lock(Path::new(MACHINE_LOCK), &format!("{flavour}{major}")).await?;
    // Built by the build this one waited for.
    if present(&reference).await? {
        return Ok(Image {
            reference,
            major,
            built_in: None,
        });
    }
    // Holding the machine's lock, no other build is under way: a root left here is a killed
    // build's (nextest's SIGTERM at a test's timeout exits without destructors; about 1 GB each).
    remove_stale_roots(&std::env::temp_dir());
    let started = Instant::now();
    let root = tempfile::Builder::new()
        .prefix(ROOT_PREFIX)
        .tempdir()
        .map_err(|e| ContainerError::Cli {
            what: "make the image's root directory".into(),
            detail: e.to_string(),
        })?;
    let dir = root.path().join("root");
    let dir_s = dir.to_string_lossy().into_owned();
    let include = format!("--include={packages}");
    eprintln!(
        "lab: image {reference}: building it here (once per machine): debootstrap of Debian {suite} with {packages}"
    );
    crate::wait::with_heartbeat(
        &format!("image {reference}: debootstrap"),
        run(
            "debootstrap",
            "debootstrap",
            &["--variant=minbase", &include, suite, &dir_s, &mirror()],
            BUILD_TIMEOUT,
        ),
    )
    .await
    .inspect_err(|_| detach_mounts_under(root.path()))?;
    eprintln!(
        "lab: image {reference}: debootstrap done in {:.0} s; importing it into the engine",
        started.elapsed().as_secs_f64()
    );
    crate::wait::with_heartbeat(
        &format!("image {reference}: import"),
        import(&dir_s, major, &reference),
    )
    .await?;
    eprintln!(
        "lab: image {reference}: built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(Image {
        reference,
        major,
        built_in: Some(started.elapsed()),
    })
}

/// The prefix of a build's root directory (debootstrap's target) in the temporary directory.
const ROOT_PREFIX: &str = "fencing-lab-image-";

/// Removes the build roots in `temp_dir` (the caller holds [`MACHINE_LOCK`], so none is a build
/// under way); how many. A killed debootstrap leaves its `/proc` mounted inside the root: those
/// mounts are detached first (deepest first), or the removal fails on them.
fn remove_stale_roots(temp_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(ROOT_PREFIX))
        .filter(|e| {
            detach_mounts_under(&e.path());
            std::fs::remove_dir_all(e.path()).is_ok()
        })
        .count()
}

/// Detaches every mount under `root` (deepest first): debootstrap mounts `/proc` inside the root
/// it builds, and one stopped or failed midway leaves it there, where it stops the root's removal.
fn detach_mounts_under(root: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut inside: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| Path::new(m).starts_with(root))
        .collect();
    inside.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in inside {
        let _ = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Removes the root directories that killed image builds left in the temporary directory
/// (`lab clean`), when no build is under way on this machine (else none: the lock is not waited
/// for); how many.
pub fn remove_killed_builds() -> usize {
    let Ok(file) = open_lock_file(Path::new(MACHINE_LOCK)) else {
        return 0;
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_held) => remove_stale_roots(&std::env::temp_dir()),
        Err(_) => 0,
    }
}

/// Where the lab's processes on this machine take turns building images: a fixed path, not the
/// temporary directory (the tests give each lab a `TMPDIR` of its own).
/// Hidden, and not named like a lab's directory (`fencing-lab-*`): it stays, as a lock file
/// must (one removed while a lab waits on it would let two builds in).
const MACHINE_LOCK: &str = "/tmp/.fencing-lab-images.lock";

/// The lock file at `path`: read-only where it exists (a `flock` needs no more, and another
/// user's lab may have made it); made, readable by everyone, where it does not.
fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path).or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o644)
                .open(path)
        }
        _ => Err(e),
    })
}

/// An exclusive `flock` on `path` ([`MACHINE_LOCK`]), held until dropped (the kernel releases it when the
/// process dies, however it dies). Said when another build holds it; polled (never a blocking
/// `flock` a Ctrl-C could not interrupt) until it is free, up to the build's own timeout.
async fn machine_lock(path: &Path, label: &str) -> Result<Flock<std::fs::File>, ContainerError> {
    let failed = |e: String| ContainerError::Cli {
        what: format!("take the image lock {}", path.display()),
        detail: e,
    };
    let file = open_lock_file(path).map_err(|e| failed(e.to_string()))?;
    // Mutexes, not cells: the future stays `Send` (no guard is held across an await).
    let file = std::sync::Mutex::new(Some(file));
    let lock = std::sync::Mutex::new(None);
    let try_lock = || {
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        let taken = match file.take() {
            None => Ok(true),
            Some(f) => match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(l) => {
                    *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
                    Ok(true)
                }
                Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                    *file = Some(f);
                    Ok(false)
                }
                Err((_, e)) => Err(e),
            },
        };
        std::future::ready(taken)
    };
    if !try_lock().await.map_err(|e| failed(e.to_string()))? {
        let waited = Instant::now();
        eprintln!("lab: image {label}: waiting for the image build under way to finish first");
        crate::wait::until_every(
            &format!("the build under way (image {label}) is done"),
            BUILD_TIMEOUT,
            Duration::from_millis(250),
            try_lock,
        )
        .await
        .map_err(|e| failed(e.to_string()))?;
        eprintln!(
            "lab: image {label}: waited {:.0} s for the build under way",
            waited.elapsed().as_secs_f64()
        );
    }
    lock.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .ok_or_else(|| failed("not taken".into()))
}

/// Imports the root file system in `dir` as the image `reference` (`docker import`'s API call,
/// `POST /images/create?fromSrc=-`): `tar` writes the root — owners, modes and device files as
/// debootstrap made them — to a pipe, and its stream goes to the engine as it comes. Returns
/// once the engine has tagged the image.
async fn import(dir: &str, major: u32, reference: &str) -> Result<(), ContainerError> {
    let (repo, tag) = reference.split_once(':').unwrap_or((reference, "latest"));
    let mut tar = Spawn::new("tar of the image's root", "tar")
        .args(["-C", dir, "-c", "."])
        .stdout(Stream::Piped)
        .capture_stderr()
        .spawn()?;
    let out = tar.take_stdout().expect("piped");
    let root = futures_util::stream::unfold(out, |mut out| async move {
        let mut chunk = vec![0u8; 256 * 1024];
        match out.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(bytes::Bytes::from(chunk)), out))
            }
            Err(e) => Some((Err(e), out)),
        }
    });
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec![format!("LABEL fencing-lab.image={major}")])
        .build();
    let docker = docker_with(BUILD_TIMEOUT).await?;
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_try_stream(root)), None);
    let mut imported = Ok(());
    while let Some(step) = progress.next().await {
        if let Err(source) = step {
            imported = Err(ContainerError::engine(
                format!("import the image {reference}"),
                source,
            ));
            break;
        }
    }
    let status = tar.wait_exit(BUILD_TIMEOUT).await;
    let tar_failed = match status {
        Ok(Some(status)) if status.success() => None,
        Ok(Some(status)) => Some(describe_status(&status)),
        Ok(None) | Err(_) => Some("it did not finish".to_owned()),
    };
    if let Some(how) = tar_failed {
        tar.stop(&[]).await;
        return Err(ContainerError::Cli {
            what: format!("tar of the image's root ({how})"),
            detail: tar.stderr(),
        });
    }
    imported
}

/// The Debian mirror this machine's apt uses (not its security or snapshot archive), else
/// deb.debian.org.
fn mirror() -> String {
    let sources = std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources")
        .or_else(|_| std::fs::read_to_string("/etc/apt/sources.list"))
        .unwrap_or_default();
    sources
        .split_whitespace()
        .find(|w| w.starts_with("http") && !w.contains("security") && !w.contains("snapshot"))
        .unwrap_or("http://deb.debian.org/debian")
        .to_owned()
}

/// Removes the lab's images (`lab clean --images`); how many.
pub async fn remove_images() -> Result<usize, ContainerError> {
    let docker = docker().await?;
    let filters = HashMap::from([("reference".to_owned(), vec![IMAGE_REPO.to_owned()])]);
    let images = docker
        .list_images(Some(
            ListImagesOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's images", source))?;
    let mut names: Vec<String> = images
        .into_iter()
        .flat_map(|image| image.repo_tags)
        .filter(|r| r.starts_with(&format!("{IMAGE_REPO}:")))
        .collect();
    // And the lab's images that lost their tag: one built again over it (two builds at once,
    // before builds took turns on a machine) left the older untagged, with its label.
    let filters = HashMap::from([
        ("label".to_owned(), vec!["fencing-lab.image".to_owned()]),
        ("dangling".to_owned(), vec!["true".to_owned()]),
    ]);
    let untagged = docker
        .list_images(Some(
            ListImagesOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's untagged images", source))?;
    names.extend(untagged.into_iter().map(|image| image.id));
    for name in &names {
        docker
            .remove_image(
                name,
                Some(RemoveImageOptionsBuilder::new().force(true).build()),
                None,
            )
            .await
            .map_err(|source| ContainerError::engine(format!("remove the image {name}"), source))?;
    }
    Ok(names.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed build's root is removed, whatever it holds; nothing else in the directory is.
    #[test]
    fn stale_build_roots_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join(format!("{ROOT_PREFIX}abc123"));
        std::fs::create_dir_all(root.join("root/usr/bin")).expect("a root");
        std::fs::write(root.join("root/usr/bin/x"), "x").expect("a file");
        let other = dir.path().join("fencing-lab-Q2iby1");
        std::fs::create_dir(&other).expect("a cluster directory");
        assert_eq!(remove_stale_roots(dir.path()), 1);
        assert!(!root.exists(), "the root is gone");
        assert!(other.exists(), "a cluster directory is not an image root");
    }

    /// Two processes building at once take turns: a second open of the lock file stands for
    /// the other process (`flock` locks belong to an open file, not to a process). The waiter
    /// waits while the lock is held — over a prescribed 300 ms — and takes it once released.
    #[tokio::test]
    async fn a_build_waits_while_another_holds_the_machine_lock_and_goes_on_after() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("images.lock");
        let other = std::fs::File::create(&path).expect("the lock file");
        let held = Flock::lock(other, FlockArg::LockExclusiveNonblock).expect("free at first");
        let waiter = {
            let path = path.clone();
            tokio::spawn(async move { machine_lock(&path, "test").await.map(drop) })
        };
        crate::wait::prescribed(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "took the lock while another held it");
        drop(held);
        let taken = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        assert!(
            matches!(taken, Ok(Ok(Ok(())))),
            "did not take the lock once it was released: {taken:?}"
        );
    }

    #[test]
    fn image_tags_are_stable_and_follow_the_recipe() {
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_ne!(fnv1a("v1|bookworm|a"), fnv1a("v1|bookworm|b"));
        assert_eq!(suite_for(15), Some("bookworm"));
        assert_eq!(suite_for(14), None);
    }
}
