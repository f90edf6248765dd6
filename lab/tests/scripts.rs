//! The scripts that `lab` commands stand on, checked without a lab run: `scripts/gate.py`, whose
//! computed gate is what `lab run --gate` runs, and `scripts/render-report.sh`, which renders a
//! run's report whole, in pages.

use std::fs;
use std::path::Path;
use std::process::Command;

/// `scripts/render-report.sh` renders a report taller than one page whole, in pages, and checks
/// it: the pages' heights add up to the report's and its last content is its end marker (with only
/// background after it, which may run onto a page of its own). Rendering one page fewer than the
/// report needs (`RENDER_MAX_PAGES`, the old cut at a fixed height) fails, and so does a page
/// that ends in content.
#[test]
fn a_rendered_report_is_whole_and_a_cut_one_fails() -> anyhow::Result<()> {
    use harness::require::{skip, this_test, Dependency::Chromium};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ev = tempfile::tempdir()?;
    fs::write(
        ev.path().join("report.html"),
        "<!doctype html><html><head><title>tall</title></head><body>\
         <h1>a report taller than a page</h1>\
         <div style=\"height:9000px;background:#eef\">F1 … F17</div>\
         <h2 id=\"U5\">U5 — the last case</h2><p>its table</p></body></html>",
    )?;
    let render = |max_pages: Option<&str>| {
        let mut cmd = Command::new(root.join("scripts/render-report.sh"));
        cmd.arg(ev.path());
        if let Some(n) = max_pages {
            cmd.env("RENDER_MAX_PAGES", n);
        }
        cmd.output()
    };
    let whole = render(None)?;
    let (out, err) = (
        String::from_utf8_lossy(&whole.stdout),
        String::from_utf8_lossy(&whole.stderr),
    );
    if whole.status.code() == Some(2) && err.contains("needs headless Chromium") {
        skip(Chromium, this_test(), err.trim())?;
        return Ok(());
    }
    assert!(whole.status.success(), "{out}{err}");
    assert!(
        out.contains("png-check: whole: 2 page(s)"),
        "two pages, the end on the last: {out}{err}"
    );
    for page in ["report-1.png", "report-2.png"] {
        assert!(ev.path().join(page).is_file(), "{page}: {out}");
    }
    let cut = render(Some("1"))?;
    let err = String::from_utf8_lossy(&cut.stderr);
    assert!(!cut.status.success(), "one page of two must fail: {err}");
    assert!(err.contains("the report is cut"), "{err}");
    // The first page alone, taken for a whole report of its height: what ends it is not the
    // marker, and png-check says so.
    let first = ev.path().join("report-1.png");
    let only = Command::new("python3")
        .arg(root.join("scripts/png-check.py"))
        .arg("8000")
        .arg(&first)
        .output()?;
    let err = String::from_utf8_lossy(&only.stderr);
    assert!(!only.status.success(), "a page that ends in content: {err}");
    assert!(err.contains("is not its end marker"), "{err}");
    // The end marker on the first page and only the background after it, running onto a second
    // page (seen in a run of 2026-12-06: 34 px of white on an eighth page): whole.
    fs::write(
        ev.path().join("report.html"),
        "<!doctype html><html><head><title>tail</title></head>\
         <body style=\"padding-bottom:600px\"><div style=\"height:7700px;background:#eef\">F1</div>\
         </body></html>",
    )?;
    let tail = render(None)?;
    let out = String::from_utf8_lossy(&tail.stdout);
    assert!(
        tail.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    assert!(
        out.contains("png-check: whole: 2 page(s)")
            && out.contains("the end marker on page 1, blank after it"),
        "{out}"
    );
    Ok(())
}

/// `lab run --gate` runs what scripts/gate.py computes from the committed mutation map: a map
/// updated without the gate (or a gate edited by hand) fails here.
#[test]
fn the_gate_is_what_the_mutation_map_computes() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/gate.py"))
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let computed = String::from_utf8(out.stdout)?;
    let committed = fs::read_to_string(root.join("lab/src/gate.txt"))?;
    assert_eq!(
        committed.trim(),
        computed.trim(),
        "scripts/gate.py --write updates lab/src/gate.txt"
    );
    Ok(())
}
