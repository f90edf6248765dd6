//! The library card (`evidence/library-card.md`, SPEC §10): one row per library@version ×
//! service, every cell read off a run ([`super::Row`]) with the evidence line it came from, and
//! one or two sentences per row that a user can act on — made from the same cells, never typed
//! in by hand.

use std::fmt::Write as _;

use harness::evidence::escape::markdown_cell;

use super::{Cell, Library, Row};

/// One library's row as the card shows it.
pub struct CardRow<'a> {
    pub library: &'a Library,
    pub version: String,
    pub service: String,
    pub row: Row,
}

fn cell(c: &Cell) -> String {
    if c.said.is_empty() {
        return "not run".to_owned();
    }
    // An error's whole text (a usage message) is for output.txt; the card quotes its start.
    let evidence: String = c.evidence.chars().take(240).collect();
    let cut = if evidence.len() < c.evidence.len() {
        "…"
    } else {
        ""
    };
    let said: String = c.said.chars().take(240).collect();
    markdown_cell(&format!("{said} — `{evidence}{cut}`"))
}

/// What a user of `r` should do, from what its runs showed.
pub fn advice(r: &CardRow<'_>) -> String {
    let lib = r.library;
    let row = &r.row;
    let mut said = Vec::new();
    let stale = row.unfenced.said.starts_with("accepted");
    if row.unfenced.said == "could not run" || row.unfenced.said.is_empty() {
        return "The paused run could not complete: its cells say why, output.txt has the whole run.".to_owned();
    }
    match (lib.fence, stale, row.fenced.said.as_str()) {
        (Some(fence), true, "rejected") => said.push(format!(
            "A paused process still writes after losing the lock; fence with {fence}: the resource rejected the stale write with it."
        )),
        (Some(fence), true, _) => said.push(format!(
            "A paused process still writes after losing the lock, and fencing with {fence} did not stop it here: {}.",
            row.fenced.said
        )),
        (None, true, _) => said.push(
            "A paused process still writes after losing the lock, and the library exposes nothing ordered to fence with: take a token from elsewhere (a counter bumped in the lock's own store) and check it at the resource.".to_owned(),
        ),
        (_, false, _) => said.push(format!(
            "The stale write was not accepted unfenced here ({}).",
            row.unfenced.said
        )),
    }
    let f10 = row.f10.said.as_str();
    if f10.starts_with("MISSED") {
        said.push(format!(
            "Its check, `{}`, called before the write as its docs advise, missed a pause that came before it: it still said the lock was held while another process held it, and the write went out. Do not trust it after a pause.",
            lib.question
        ));
    } else if f10.starts_with("caught") {
        said.push(format!(
            "Its check, `{}`, caught a pause that came before it (F10); a pause after the check is F5's, which only a fence stops.",
            lib.question
        ));
    } else if f10.starts_with("no answer") {
        said.push(format!(
            "Its check, `{}`, gives no answer here ({}): the application cannot ask.",
            lib.question, row.f10.evidence
        ));
    }
    let f16 = row.partitioned.said.as_str();
    if f16.starts_with("cut off,") && f16.contains("no answer while cut off") {
        said.push(format!(
            "Cut off from its service, `{}` had no answer for as long as the lab kept the partition (the TTL and 5 s more): it waits on the service it cannot reach, and the application learns nothing meanwhile (F16).",
            lib.question
        ));
    } else if f16.starts_with("cut off,")
        && (f16.contains(" returned True") || f16.contains(" returned true"))
    {
        said.push(format!(
            "Cut off from its service after the service had given the lock to another process, `{}` still said the lock was held (F16): it answers from the library's memory.",
            lib.question
        ));
    }
    if row.release.said.starts_with("returned True") && stale {
        said.push(
            "Its release after the loss returned True: it does not tell the application that the lock was lost.".to_owned(),
        );
    }
    said.join(" ")
}

/// The card as Markdown.
pub fn markdown(rows: &[CardRow<'_>]) -> String {
    let mut out = String::new();
    out.push_str("# The library card\n\n");
    out.push_str(
        "Each published lock library as it ships (`holder/libraries/`, pinned in \
         `holder/libraries/requirements.txt`), on the lab's lock service in a container, through \
         F1 (one holding), F3 (four processes race for the free lock, three rounds), F5 (paused \
         past its lock's end, then writes unfenced), F4 (the same, fenced with the library's \
         token where it has one), F10 (paused before the check its library offers, then asks and \
         writes only if the library says it still holds the lock), F12 (kill -9) and F16 (cut off \
         from its service while holding, not paused: asked and written while its library cannot \
         reach the service, the partition lifted when the question waits on it). Every cell is what \
         a run showed, with the evidence line it was read off (the run's `output.txt` has the \
         whole timeline). \"What it tells the application\" is the library's own question asked \
         after the pause, right before the write, beside the service's own record of who held \
         the lock at that moment.\n\n",
    );
    out.push_str(
        "| library | package@version | service | fence it exposes | F1 | F3 (one winner per round) | stale write unfenced (F5) | stale write fenced (F4) | what it tells the application after the pause | its check, paused before it (F10) | release after the loss | after kill -9 (F12) | cut off from its service (F16) |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {}@{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.library.id,
            r.library.package,
            r.version,
            markdown_cell(&r.service),
            r.library.fence.unwrap_or("none (`token=none`)"),
            cell(&r.row.f1),
            cell(&r.row.f3),
            cell(&r.row.unfenced),
            cell(&r.row.fenced),
            cell(&r.row.told),
            cell(&r.row.f10),
            cell(&r.row.release),
            cell(&r.row.killed),
            cell(&r.row.partitioned),
        );
    }
    out.push_str("\n## What to do, per library\n\n");
    for r in rows {
        let _ = writeln!(
            out,
            "- **{}** ({}): {}",
            r.library.id,
            r.library.store,
            advice(r)
        );
    }
    out
}
