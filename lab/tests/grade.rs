//! `lab grade`: the report card — a design with a planted flaw UNSAFE where the experiments catch
//! it, with the failed check as its evidence; a design without a token graded on what it has;
//! seed000, a MariaDB design, graded on the U-series.

mod common;

use common::{stderr, Sandbox};
#[cfg(feature = "mariadb")]
use harness::require::{self, Dependency};

use std::fs;

/// seed000 — seed 000's job lease, a MariaDB profile — graded beside the `stale-completion`
/// exercise (its completion without the fence conditions): the F-series is n/a for both, with
/// why; seed000 is safe in U1–U5; the exercise is UNSAFE in U4 with the failed check as its
/// evidence, and the grade fails (exit 1). A MariaDB profile the server refuses is one line
/// naming the file and the statement, exit 2, and leaves no server behind.
#[cfg(feature = "mariadb")]
#[test]
fn seed000_is_graded_on_the_u_series_and_a_planted_flaw_shows_in_u4() -> anyhow::Result<()> {
    if let Err(why) = harness::server::mariadb::MariaBinaries::locate() {
        // The U-series says `skip` without MariaDB (scenarios' own test checks that).
        require::skip(Dependency::MariaDb, require::this_test(), why)?;
        return Ok(());
    }
    let sb = Sandbox::new()?;
    let file = sb.path("stale-completion.toml");
    let out = sb.lab(&[
        "exercise",
        "stale-completion",
        "--out",
        file.to_str().unwrap(),
    ])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        "seed000",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{card}\n{}", stderr(&out));
    let cells_of = |design: &str| -> Vec<String> {
        let row = card
            .lines()
            .find(|l| l.starts_with(&format!("| {design} |")))
            .unwrap_or_else(|| panic!("no row for {design}: {card}"));
        row.split('|').map(|c| c.trim().to_owned()).collect()
    };
    // "", design, expected, token, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, U1, …, U5, ""
    let seed000 = cells_of("seed000");
    assert_eq!(seed000[2], "safe");
    assert!(seed000[4..14].iter().all(|c| c == "n/a"), "F: {seed000:?}");
    assert!(
        seed000[14..19].iter().all(|c| c == "safe"),
        "U: {seed000:?}"
    );
    let flawed = cells_of("stale-completion");
    assert!(flawed[4..14].iter().all(|c| c == "n/a"), "F: {flawed:?}");
    assert_eq!(flawed[17], "**UNSAFE**", "U4: {flawed:?}");
    assert!(
        card.contains("- stale-completion × U4: the old execution's fenced completion affects 0 rows (expected=false, actual=true)"),
        "{card}"
    );
    assert!(
        card.contains("- seed000, stale-completion × F1, F2, F3, F4, F6, F7, F8, F10, F11, F12: a design on MariaDB; this experiment runs lease-and-report designs on PostgreSQL"),
        "{card}"
    );
    sb.assert_nothing_left()?;

    let bad = sb.path("bad.toml");
    fs::write(
        &bad,
        fs::read_to_string(&file)?.replace("WHERE run_id = :run", "WHERE run = :run"),
    )?;
    let out = sb.lab(&["profile", "check", bad.to_str().unwrap()])?;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("bad.toml: resource.run.status: the server refused it: Unknown column 'run'"),
        "{err}"
    );
    sb.assert_nothing_left()
}

/// A design without a token (ShedLock-style, built in): graded on what it has. Its F4 is UNSAFE
/// with the stale write's evidence, its F1 with a stale handle renewing the holder's next holding, its token and floor checks are noted n/a in its run (never
/// passed), the experiments about a token check at the resource are n/a with why, and the grade
/// passes (exit 0): a modelled design is expected to be flawed.
#[test]
fn a_design_without_a_token_is_graded_on_what_it_has() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        "shedlock-style",
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{card}\n{}", stderr(&out));
    let row = card
        .lines()
        .find(|l| l.starts_with("| shedlock-style |"))
        .unwrap_or_else(|| panic!("no row for the design: {card}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // "", design, expected, token, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, ""
    assert_eq!(cells[2], "flawed", "{row}");
    // What it fences with is a column of its own: ShedLock issues no token.
    assert_eq!(cells[3], "none", "{row}");
    // F1: ShedLock names a holding by its holder alone, so a holder's stale handle reaches
    // its next holding.
    assert_eq!(cells[4], "**UNSAFE**", "F1: {row}");
    assert_eq!(&cells[5..7], ["safe", "safe"], "F2, F3: {row}");
    assert_eq!(cells[7], "**UNSAFE**", "F4: {row}");
    assert_eq!(&cells[8..10], ["n/a", "n/a"], "F6, F7: {row}");
    assert_eq!(cells[10], "**UNSAFE**", "F8: {row}");
    assert_eq!(&cells[12..14], ["n/a", "n/a"], "F11, F12: {row}");
    assert!(
        card.contains("- shedlock-style × F1: holder-b's first holding (token=–) cannot renew the new one, nor move its own local deadline (expected=RENEW ok=false deadline=unchanged, actual=RENEW ok=true deadline=later)"),
        "{card}"
    );
    assert!(
        card.contains("- shedlock-style × F4: A's stale write is rejected by the resource (expected=WRITE accepted=false token=–, actual=WRITE accepted=true token=–)"),
        "{card}"
    );
    assert!(
        card.contains("- shedlock-style × F6: it interleaves two writers' token checks at the resource, and the design checks no token there"),
        "{card}"
    );
    let text = fs::read_to_string(ev.join("grade/shedlock-style/output.txt"))?;
    assert!(
        text.contains("  note n/a  the resource's fence_floor — the design keeps no floor"),
        "{text}"
    );
    assert!(
        text.contains(
            "  note n/a  round 1 (fresh lease): the winner's token — the design issues no token"
        ),
        "{text}"
    );
    assert!(
        !text.contains("token=1") && !text.contains("token=0"),
        "{text}"
    );
    sb.assert_nothing_left()?;
    Ok(())
}

/// `lab grade --sut`: a design with a planted flaw comes out UNSAFE in the experiments that catch
/// it, each cell with the failed check that shows it, and the grade fails (exit 1); the card is
/// in report-card.md and each design's evidence beside it.
#[test]
fn the_report_card_shows_a_flawed_design_unsafe_with_its_evidence() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let file = sb.path("stale-write.toml");
    let out = sb.lab(&["exercise", "stale-write", "--out", file.to_str().unwrap()])?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = sb.path("grade");
    let out = sb.lab(&[
        "grade",
        "--sut",
        file.to_str().unwrap(),
        "--evidence-dir",
        ev.to_str().unwrap(),
    ])?;
    let card = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{card}\n{}", stderr(&out));
    assert_eq!(fs::read_to_string(ev.join("report-card.md"))?, card);
    let row = card
        .lines()
        .find(|l| l.starts_with("| stale-write |"))
        .unwrap_or_else(|| panic!("no row for the design: {card}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // "", design, expected, token, F1, F2, F3, F4, F6, F7, F8, F10, F11, F12, ""
    assert_eq!(cells[7], "**UNSAFE**", "F4: {row}");
    assert_eq!(cells[9], "**UNSAFE**", "F7: {row}");
    assert_eq!(
        cells[4], "**UNSAFE**",
        "F1's stale write to the first scope is rejected only by the floor check: {row}"
    );
    assert!(
        card.contains("- stale-write × F4: A's stale write is rejected by the resource (expected=WRITE accepted=false token=1, actual=WRITE accepted=true token=1)"),
        "{card}"
    );
    assert!(ev.join("grade/stale-write/output.txt").is_file());
    let html = fs::read_to_string(ev.join("report-card.html"))?;
    assert!(
        html.contains("<td class=\"unsafe\" title=\"A's stale write is rejected by the resource"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"grade/stale-write/report.html\">UNSAFE</a></td>"),
        "{html}"
    );
    assert!(ev.join("grade/stale-write/report.html").is_file());
    sb.assert_nothing_left()?;
    Ok(())
}
