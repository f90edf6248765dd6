//! Tokens are judged by what fencing needs, not by seed 004's numbering: a design whose tokens
//! start at 2, go up by 2 at a takeover and by 1 at a release (db-scheduler's `version`) passes
//! the experiments seed 004 passes, and a design whose takeover keeps the old token fails them.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn profile(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/profiles")
        .join(name)
}

/// `lab run --only <only> --sut <sut>` in a temp dir of its own; its exit code and output.
fn run(only: &str, sut: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let dir = tempfile::tempdir()?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    let tmp = dir.path().join("tmp");
    fs::create_dir(&tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    let ev = dir.path().join("ev");
    let out: Output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["run", "--only", only, "--sut"])
        .arg(sut)
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", &tmp)
        .output()?;
    let text = fs::read_to_string(ev.join("output.txt")).unwrap_or_else(|e| {
        format!(
            "no output.txt ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    if out.status.code() == Some(1) {
        // a failing run keeps its clusters: remove them with the lab's own sweep
        let _ = Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg("clean")
            .env("TMPDIR", &tmp)
            .env(common::NO_ENGINE.0, common::NO_ENGINE.1)
            .output()?;
    }
    assert!(
        common::processes_mentioning(&tmp).is_empty(),
        "processes left behind"
    );
    Ok((out.status.code(), text))
}

#[test]
fn tokens_that_start_at_2_and_grow_by_2_pass_like_seed004() -> anyhow::Result<()> {
    let (code, text) = run("F1,F2,F3,F4,F10", &profile("even-tokens.toml"))?;
    assert_eq!(code, Some(0), "{text}");
    // The evidence names the tokens that were granted, and says what order was expected.
    for line in [
        "ok   holder-a acquires the lease, token=2 (expected=ACQUIRED token=(any token), actual=ACQUIRED token=2)",
        "ok   holder-a releases: ok, expires_at = -infinity, the token not moved back (expected=RELEASE ok=true expires_at=-infinity token≥2, actual=RELEASE ok=true expires_at=-infinity token=3)",
        "ok   holder-b acquires at once after the release, token=5 (expected=ACQUIRED token=(a token >2), actual=ACQUIRED token=5)",
        "ok   A's stale write is rejected by the resource (expected=WRITE accepted=false token=2, actual=WRITE accepted=false token=2)",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    Ok(())
}

#[test]
fn a_takeover_that_keeps_the_old_token_fails_f1_and_f4() -> anyhow::Result<()> {
    let (code, text) = run("F1,F4", &profile("same-token.toml"))?;
    assert_eq!(code, Some(1), "{text}");
    for line in [
        "FAIL holder-b acquires at once after the release, token=2 (expected=ACQUIRED token=(a token >1), actual=ACQUIRED token=1)",
        "FAIL B acquires the lease, token=2 (expected=ACQUIRED token=(a token >1), actual=ACQUIRED token=1)",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    Ok(())
}
