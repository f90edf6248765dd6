//! Evidence: scenarios emit typed [`Event`]s into a [`Recorder`]; separate [`Reporter`]s turn the
//! one stream into the terminal output and the files of the evidence directory.
//!
//! The text format (docs/guide.md, "What you will see"):
//! ```text
//! CASE F4 :: the paused old holder: …
//!   ok   B acquired the lease, token=2 (expected=ACQUIRED token=2, actual=ACQUIRED token=2)
//!   FAIL fence_floor after the run (expected=2, actual=1)
//!   note A resumed: WRITE accepted=false token=1; RENEW_AFTER_WRITE ok=false
//!   ok   negative control exposes: the unfenced resource accepted A's stale write (…)
//! SUMMARY passed=86 failed=0
//! ```
//! A check passes only when `expected == actual` — tokens by their order: an expected `token=n`
//! is the seed's numbering of the case's grants, and the store's tokens must stand in the same
//! order, consistently ([`TokenOrder`]: a takeover's token is greater, gaps allowed). A negative-control check passes only when the
//! flaw it looks for really showed: a control that fails to expose its flaw is a FAIL, because
//! it means the lab could no longer tell a broken resource from a correct one.
//!
//! One file per concern: `model.rs` the events ([`Event`], [`Lanes`]), `recorder.rs` the
//! [`Recorder`] and the [`Reporter`] trait, `text.rs` the text output, `jsonl.rs` the event log
//! and the environment record, [`junit`] the JUnit report, [`timeline`] the pictures.
//!
//! Reporters must not decide outcomes, and none keeps its own copy of the stream (the recorder
//! owns it); the recorder must not format text. Evidence files are written whole, through a temp
//! file and a rename ([`write_atomically`]), so an interrupted run never leaves half a file.

use std::io::{self, Write as _};
use std::path::Path;

pub mod escape;
mod jsonl;
pub mod junit;
mod model;
mod recorder;
#[cfg(test)]
mod testing;
mod text;
pub mod timeline;
mod tokens;

pub use jsonl::{EnvironmentReporter, JsonlReporter};
pub use model::{Check, CheckKind, Event, Lane, Lanes, Mark, Step, Summary};
pub use recorder::{Recorder, Reporter};
pub use text::{render_text, TextReporter};
pub use tokens::TokenOrder;

/// Writes `bytes` to `path` whole: into a temp file beside it, then renamed over it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_files_are_replaced_whole() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("output.txt");
        write_atomically(&path, b"first\n")?;
        write_atomically(&path, b"second\n")?;
        assert_eq!(std::fs::read_to_string(&path)?, "second\n");
        assert_eq!(
            std::fs::read_dir(dir.path())?.count(),
            1,
            "no temp file left beside it"
        );
        Ok(())
    }
}
