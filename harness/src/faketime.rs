//! A process's clock, faked: libfaketime (Debian package `faketime`) preloaded into a child
//! changes what its clock calls return — an offset, a rate — without touching the machine's
//! clock or the database's. The lab uses it to give one process a really skewed clock (U3) and
//! to run a holder's clock slow (F13). Started through [`crate::process::Spawn`] like every
//! child; this module only finds the library and names the environment it needs.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::process::Spawn;

/// How to install it, for a `skip` line.
pub const INSTALL_HINT: &str =
    "install libfaketime (Debian: apt-get install -y faketime; ./run.sh and scripts/test.sh do \
     when run as root)";

/// The located libfaketime.
#[derive(Debug, Clone)]
pub struct Faketime {
    pub library: PathBuf,
}

impl Faketime {
    /// Finds `libfaketime.so.1` where Debian and a source build put it; the reason and the
    /// install hint when it is not there.
    pub fn locate() -> Result<Faketime, String> {
        let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("faketime/libfaketime.so.1"))
            .collect();
        candidates.extend(
            [
                "/usr/lib/faketime/libfaketime.so.1",
                "/usr/local/lib/faketime/libfaketime.so.1",
            ]
            .map(PathBuf::from),
        );
        candidates
            .into_iter()
            .find(|p| p.is_file())
            .map(|library| Faketime { library })
            .ok_or_else(|| format!("libfaketime is not installed: {INSTALL_HINT}"))
    }

    /// `spawn` with its clock faked by `spec`, in libfaketime's own notation: `"-3"` runs 3 s
    /// behind, `"+0 x0.5"` runs at half speed from now.
    pub fn apply(&self, spawn: Spawn, spec: &str) -> Spawn {
        self.env(spec)
            .into_iter()
            .fold(spawn, |spawn, (key, value)| spawn.env(key, value))
    }

    /// The environment that fakes a process's clock by `spec` (see [`Faketime::apply`]), for a
    /// child started elsewhere (a holder: `crate::holder::HolderSpec::env`).
    pub fn env(&self, spec: &str) -> Vec<(OsString, OsString)> {
        vec![
            ("LD_PRELOAD".into(), self.library.clone().into()),
            ("FAKETIME".into(), spec.into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_under_libfaketime_reads_a_clock_that_lags_and_the_lab_does_not() {
        let faketime = match Faketime::locate() {
            Ok(f) => f,
            Err(reason) => {
                // Not installed here: the reason must say how to install it.
                assert!(reason.contains("apt-get install -y faketime"), "{reason}");
                return;
            }
        };
        let epoch = |out: std::process::Output| -> f64 {
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("seconds")
        };
        let timeout = std::time::Duration::from_secs(10);
        let faked = faketime
            .apply(Spawn::new("date", "date"), "-100")
            .arg("+%s")
            .output(timeout)
            .await
            .expect("date runs");
        let real = Spawn::new("date", "date")
            .arg("+%s")
            .output(timeout)
            .await
            .expect("date runs");
        let lag = epoch(real) - epoch(faked);
        assert!((99.0..=101.0).contains(&lag), "lag {lag} s");
    }
}
