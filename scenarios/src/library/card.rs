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
    markdown_cell(&format!("{} — `{evidence}{cut}`", c.said))
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
    match row.told_agrees {
        Some(true) => said.push(format!(
            "Asking `{}` right before the write answered the truth, but the pause can come after the question: the write still needs a fence.",
            lib.question
        )),
        Some(false) => said.push(format!(
            "`{}` still said the lock was held while another process held it: do not trust it after a pause.",
            lib.question
        )),
        None if !row.told.said.is_empty() => said.push(format!(
            "`{}` gave no yes or no ({}).",
            lib.question, row.told.said
        )),
        None => {}
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
         F1 (one holding), F5 (paused past its lock's end, then writes unfenced), F4 (the same, \
         fenced with the library's token where it has one) and F12 (kill -9). Every cell is what \
         a run showed, with the evidence line it was read off (the run's `output.txt` has the \
         whole timeline). \"What it tells the application\" is the library's own question asked \
         after the pause, right before the write, beside the service's own record of who held \
         the lock at that moment.\n\n",
    );
    out.push_str(
        "| library@version | service | fence it exposes | F1 | stale write unfenced (F5) | stale write fenced (F4) | what it tells the application after the pause | release after the loss | after kill -9 (F12) |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {}@{} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.library.package,
            r.version,
            markdown_cell(&r.service),
            r.library.fence.unwrap_or("none (`token=none`)"),
            cell(&r.row.f1),
            cell(&r.row.unfenced),
            cell(&r.row.fenced),
            cell(&r.row.told),
            cell(&r.row.release),
            cell(&r.row.killed),
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
