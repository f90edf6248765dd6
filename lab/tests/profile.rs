//! `lab profile`: `show` prints a built-in's file as it is; `check` passes a good profile against
//! a real server and gives a bad one one line naming the file and the statement, exit status 2,
//! leaving nothing behind.

mod common;

use common::{stderr, Sandbox};

use std::fs;
use std::path::Path;

/// `lab profile show` prints a built-in's file; `lab profile check`: a good profile passes against
/// a real server; a bad one — a TOML syntax
/// error, an unknown parameter, a missing statement, a statement the server refuses — gets one
/// line naming the file and the statement, exit 2, and leaves no cluster and no process.
#[test]
fn a_bad_profile_is_one_line_naming_the_file_and_the_statement_exit_2() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let good = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fencing/profiles/seed004.toml"),
    )?;
    // `lab profile show` prints the built-in's file as it is, comments and all.
    let shown = sb.lab(&["profile", "show", "seed004"])?;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert_eq!(String::from_utf8_lossy(&shown.stdout), good);
    let unknown = sb.lab(&["profile", "show", "no-such-design"])?;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("seed004, seed004-single"),
        "{}",
        stderr(&unknown)
    );
    let ok = sb.lab(&["profile", "check", "seed004"])?;
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("8 statements prepared"));
    sb.assert_nothing_left()?;

    // The renew statement cut out, whole.
    let start = good.find("renew = \"\"\"").expect("renew");
    let end = start + 12 + good[start + 12..].find("\"\"\"").expect("its end") + 3;
    let cases = [
        (
            "syntax.toml",
            good.replacen("[lease]", "[lease", 1),
            "syntax.toml: line ",
        ),
        (
            "param.toml",
            good.replacen(
                "WHERE name = :name AND holder",
                "WHERE name = :nmae AND holder",
                1,
            ),
            "param.toml: lease.renew: unknown parameter :nmae",
        ),
        (
            "missing.toml",
            format!("{}{}", &good[..start], &good[end..]),
            "missing field `renew`",
        ),
        (
            "server.toml",
            good.replacen("AND expires_at > now()", "AND expires_on > now()", 1),
            "server.toml: lease.renew: the server refused it: column \"expires_on\" does not exist",
        ),
    ];
    for (file, text, expected) in cases {
        let path = sb.path(file);
        fs::write(&path, text)?;
        let out = sb.lab(&["profile", "check", path.to_str().unwrap()])?;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert_eq!(err.lines().count(), 1, "{file}: one line: {err}");
        assert!(err.contains(file), "{file}: names the file: {err}");
        assert!(err.contains(expected), "{file}: {expected:?} not in {err}");
        sb.assert_nothing_left()?;
    }
    Ok(())
}
