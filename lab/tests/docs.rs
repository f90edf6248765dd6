//! The documents a reader meets first hold to what the lab is: the README's table of experiments
//! and docs/experiments.md are what `lab list --markdown [--long]` makes from the registry (a
//! changed experiment fails here until they are regenerated), the README stays a front door (at
//! most 250 lines, no commit hash, no path outside the repository), every relative link in the
//! README and docs/ reaches a file, and `lab --help` gives each command one line.
//!
//! ```sh
//! UPDATE_DOCS=1 cargo test -p lab --test docs   # regenerates both, then read `git diff`
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// The README's generated block, as in `lab::list`.
const BEGIN: &str = lab::list::README_BEGIN;
const END: &str = lab::list::README_END;
/// The README's length, at most.
const README_LINES: usize = 250;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn lab(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "lab {} exited with {}: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The README with its generated block replaced by `table`; `None` when a marker is missing.
fn with_table(readme: &str, table: &str) -> Option<String> {
    let begin = readme.find(BEGIN)? + BEGIN.len();
    let end = readme[begin..].find(END)? + begin;
    Some(format!("{}\n{table}{}", &readme[..begin], &readme[end..]))
}

#[test]
fn the_readme_table_and_the_experiments_page_are_generated_from_the_registry() -> anyhow::Result<()>
{
    let readme_path = root().join("README.md");
    let readme = fs::read_to_string(&readme_path)?;
    let fresh = with_table(&readme, &lab(&["list", "--markdown"])?).unwrap_or_else(|| {
        panic!("README.md carries the generated table between `{BEGIN}` and `{END}`")
    });
    let page_path = root().join("docs/experiments.md");
    let fresh_page = lab(&["list", "--markdown", "--long"])?;
    if std::env::var_os("UPDATE_DOCS").is_some() {
        fs::write(&readme_path, &fresh)?;
        fs::write(&page_path, &fresh_page)?;
    }
    let (readme, page) = (
        fs::read_to_string(&readme_path)?,
        fs::read_to_string(&page_path).unwrap_or_default(),
    );
    similar_asserts::assert_eq!(readme: readme, generated: fresh, "README.md's table of experiments is stale: UPDATE_DOCS=1 cargo test -p lab --test docs, and review the diff");
    similar_asserts::assert_eq!(page: page, generated: fresh_page, "docs/experiments.md is stale: UPDATE_DOCS=1 cargo test -p lab --test docs, and review the diff");
    Ok(())
}

#[test]
fn every_experiment_is_described() {
    for s in scenarios::ALL.iter().map(|s| s.spec()) {
        let about = s.about;
        for (field, text) in [
            ("fault", about.fault),
            ("shows", about.shows),
            ("paragraph", about.paragraph),
        ] {
            assert!(
                !text.trim().is_empty(),
                "{}'s spec has no about.{field}",
                s.id
            );
        }
        assert!(
            about.paragraph.split_whitespace().count() >= 30,
            "{}'s paragraph is a paragraph, not a line: {:?}",
            s.id,
            about.paragraph
        );
    }
}

/// A commit hash: seven to forty hex digits with at least one digit and one letter.
fn commit_hashes(text: &str) -> Vec<String> {
    let hex = Regex::new(r"\b[0-9a-f]{7,40}\b").expect("a valid pattern");
    hex.find_iter(text)
        .map(|m| m.as_str().to_owned())
        .filter(|w| w.bytes().any(|b| b.is_ascii_digit()) && w.bytes().any(|b| b > b'9'))
        .collect()
}

#[test]
fn the_readme_is_a_front_door() -> anyhow::Result<()> {
    let readme = fs::read_to_string(root().join("README.md"))?;
    let lines = readme.lines().count();
    assert!(
        lines <= README_LINES,
        "README.md has {lines} lines, over {README_LINES}: the rest belongs in docs/"
    );
    let hashes = commit_hashes(&readme);
    assert!(
        hashes.is_empty(),
        "README.md names commits (dated results go to docs/measurements.md): {hashes:?}"
    );
    let absolute =
        Regex::new(r"\]\(/|(^|[\s`(])/(work|root|home|tmp|usr)/").expect("a valid pattern");
    let outside: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("../") || absolute.is_match(l))
        .collect();
    assert!(
        outside.is_empty(),
        "README.md points outside the repository: {outside:?}"
    );
    assert!(
        readme.contains("scripts/test.sh"),
        "README.md names the test command (CI runs it)"
    );
    Ok(())
}

#[test]
fn the_front_door_checks_can_fail() {
    assert_eq!(
        commit_hashes("at 3e32501, then 1d6009a4; deadbeef and 1234567 are not"),
        ["3e32501", "1d6009a4"]
    );
    let readme = format!("intro\n{BEGIN}\nold table\n{END}\nmore\n");
    assert_eq!(
        with_table(&readme, "| new |\n").as_deref(),
        Some(format!("intro\n{BEGIN}\n| new |\n{END}\nmore\n").as_str())
    );
    assert_eq!(with_table("no markers", "x"), None);
}

/// Every relative link of the Markdown files a reader opens (README, ARCHITECTURE, docs/,
/// examples/, evidence/README.md) reaches a file or directory of the repository.
#[test]
fn every_relative_link_reaches_a_file() -> anyhow::Result<()> {
    let root = root();
    let link = Regex::new(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")?;
    let mut pages = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("evidence/README.md"),
    ];
    for dir in ["docs", "examples/holders/python", "examples/holders/java"] {
        for entry in fs::read_dir(root.join(dir))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = fs::read_to_string(page)?;
        for c in link.captures_iter(&text) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = page.parent().expect("a file's directory").join(target);
            if !resolved.exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(&root)?.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
    Ok(())
}

/// `lab --help` lists each command in one line; the details are in each command's own help.
#[test]
fn lab_help_gives_each_command_one_line() -> anyhow::Result<()> {
    let help = lab(&["--help"])?;
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        commands.len() >= 10,
        "the commands are listed: {commands:?}"
    );
    let long: Vec<&&str> = commands
        .iter()
        .filter(|l| l.chars().count() > 100)
        .collect();
    assert!(
        long.is_empty(),
        "commands whose line runs over 100 characters: {long:#?}"
    );
    for command in ["run", "list", "chaos", "grade", "holder"] {
        let own = lab(&[command, "--help"])?;
        assert!(
            own.lines().count() > 5,
            "`lab {command} --help` carries the details: {own}"
        );
    }
    Ok(())
}
