//! `lab list` and `lab clean` whose reader went away (a stdout that is a closed pipe, like
//! `lab list | head -1` once `head` has exited): each ends quietly, exit status 0, no panic.

mod common;

use common::{closed_stdout, stderr, Sandbox};

use std::process::Command;

#[test]
fn list_and_clean_end_quietly_when_their_reader_went_away() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    for command in ["list", "clean"] {
        let out = Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg(command)
            .env("TMPDIR", sb.path("tmp"))
            .env(common::NO_ENGINE.0, common::NO_ENGINE.1)
            .stdout(closed_stdout()?)
            .stderr(std::process::Stdio::piped())
            .output()?;
        assert!(
            !stderr(&out).contains("panicked"),
            "lab {command}: {}",
            stderr(&out)
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "lab {command}: {}",
            stderr(&out)
        );
    }
    sb.assert_nothing_left()
}
