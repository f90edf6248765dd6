//! The library card (`evidence/library-card.md`): one row per library@version ×
//! service, every cell read off a run ([`super::Row`]) with the evidence line it came from, and
//! one or two sentences per row that a user can act on — made from the same cells, never typed
//! in by hand.

use std::fmt::Write as _;

use harness::evidence::escape::{html as esc, markdown_cell};

use super::{Cell, Library, Row, Verdict};

/// One library's row as the card shows it.
pub struct CardRow<'a> {
    pub library: &'a Library,
    pub version: String,
    pub service: String,
    /// What its docs or source say its question answers, read from the installed package
    /// ([`super::docs::read`]).
    pub docs: String,
    pub row: Row,
}

/// The library's answers (after the pause, and cut off) set against what its docs or source say
/// the question answers: where an answer said the lock was held while the service's record named
/// another holder (or the reverse), the run disagrees with the docs, and the card says why, by the
/// library's source.
pub fn against_docs(r: &CardRow<'_>) -> (Tone, String) {
    let row = &r.row;
    let asked = [
        ("after the pause", row.told_agrees, &row.told),
        ("cut off (F16)", row.cut_off_agrees, &row.partitioned),
    ];
    let wrong: Vec<&str> = asked
        .iter()
        .filter(|(_, agrees, _)| *agrees == Some(false))
        .map(|(when, _, _)| *when)
        .collect();
    let judged = asked
        .iter()
        .filter(|(_, agrees, _)| agrees.is_some())
        .count();
    let (tone, verdict) = if !wrong.is_empty() {
        let why = if r.library.why.is_empty() {
            "the lab has no reading of its source that explains it: see output.txt".to_owned()
        } else {
            format!("why, by its source: {}", r.library.why)
        };
        let said = format!(
            "DISAGREES: its answer {} did not match the service's record of who held the lock; {why}",
            wrong.join(" and ")
        );
        (Tone::Bad, said)
    } else if judged > 0 {
        let said = format!(
            "agrees: its answer{} matched the service's record",
            asked
                .iter()
                .filter(|(_, agrees, _)| agrees.is_some())
                .map(|(when, _, _)| format!(" {when}"))
                .collect::<Vec<_>>()
                .join(" and")
        );
        (Tone::Good, said)
    } else if row.told.said.contains("NotImplemented") && r.docs.contains("NotImplemented") {
        let said =
            "agrees: it raised NotImplemented, which its docs allow — the application cannot ask";
        (Tone::Good, said.to_owned())
    } else if row.told.verdict == Verdict::NotRun {
        (Tone::Plain, "not run".to_owned())
    } else {
        (Tone::Plain, format!("not judged: {}", row.told.said))
    };
    (tone, format!("{verdict} — {}", r.docs))
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
    let stale = row.unfenced.verdict == Verdict::StaleAccepted;
    if matches!(row.unfenced.verdict, Verdict::CouldNotRun | Verdict::NotRun) {
        return "The paused run could not complete: its cells say why, output.txt has the whole run.".to_owned();
    }
    match (lib.fence, stale, row.fenced.verdict) {
        (Some(fence), true, Verdict::StaleRejected) => said.push(format!(
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
    match row.f10.verdict {
        Verdict::Missed => said.push(format!(
            "Its check, `{}`, called before the write as its docs advise, missed a pause that came before it: it still said the lock was held while another process held it, and the write went out. Do not trust it after a pause.",
            lib.question
        )),
        Verdict::Caught => said.push(format!(
            "Its check, `{}`, caught a pause that came before it (F10); a pause after the check is F5's, which only a fence stops.",
            lib.question
        )),
        Verdict::Raised {
            not_implemented: true,
        } => said.push(format!(
            "Its check, `{}`, gives no answer here ({}): the application cannot ask.",
            lib.question, row.f10.evidence
        )),
        // An error from the session itself (the server ended it): an answer in all but name.
        Verdict::Raised {
            not_implemented: false,
        } => said.push(format!(
            "Its check, `{}`, raised instead of answering ({}): the error says the locking \
             session is gone, and with it the lock — an application that takes such an error \
             as \"not held\" stops; one that retries on a new connection asks a session that \
             never held the lock.",
            lib.question, row.f10.evidence
        )),
        _ => {}
    }
    match row.partitioned.verdict {
        Verdict::CutOff {
            answered_cut_off: false,
            ..
        } => said.push(format!(
            "Cut off from its service, `{}` had no answer for as long as the lab kept the partition (the TTL and 5 s more): it waits on the service it cannot reach, and the application learns nothing meanwhile (F16).",
            lib.question
        )),
        Verdict::CutOff {
            said_held: true, ..
        } => said.push(format!(
            "Cut off from its service after the service had given the lock to another process, `{}` still said the lock was held (F16): it answers from the library's memory.",
            lib.question
        )),
        _ => {}
    }
    if against_docs(r).0 == Tone::Bad && !lib.why.is_empty() {
        said.push(format!("Its source explains the answer: {}.", lib.why));
    }
    if row.release.verdict == Verdict::ReleaseReturnedTrue && stale {
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
         `holder/libraries/requirements.txt`), on the lab's lock service in a container (an advisory lock: on the lab's own PostgreSQL), through \
         F1 (one holding), F3 (four processes race for the free lock, three rounds), F5 (paused \
         past its lock's end, then writes unfenced), F4 (the same, fenced with the library's \
         token where it has one), F10 (paused before the check its library offers, then asks and \
         writes only if the library says it still holds the lock), F12 (kill -9) and F16 (cut off \
         from its service while holding, not paused: asked and written while its library cannot \
         reach the service, the partition lifted when the question waits on it). Every cell is what \
         a run showed, with the evidence line it was read off (the run's `output.txt` has the \
         whole timeline). \"What it tells the application\" is the library's own question asked \
         after the pause, right before the write, beside the service's own record of who held \
         the lock at that moment; the last column sets those answers against what the library's \
         docstring (or, without one, its source) says the question answers, read from the \
         installed package.\n\n",
    );
    out.push_str("| library | package@version | service | fence it exposes |");
    for c in COLUMNS {
        let _ = write!(out, " {} |", c.name);
    }
    out.push_str("\n|---|---|---|---|");
    out.push_str(&"---|".repeat(COLUMNS.len()));
    out.push('\n');
    for r in rows {
        let _ = write!(
            out,
            "| {} | {}@{} | {} | {} |",
            r.library.id,
            r.library.package,
            r.version,
            markdown_cell(&r.service),
            r.library.fence.unwrap_or("none (`token=none`)"),
        );
        for c in COLUMNS {
            let _ = write!(out, " {} |", (c.markdown)(r));
        }
        out.push('\n');
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

/// A column of the card, in the Markdown card and the HTML one alike: its header, its cell's
/// words with the evidence line they were read off (the HTML cell, its colour and its hover),
/// and its Markdown cell.
struct Column {
    name: &'static str,
    read: fn(&CardRow<'_>) -> (String, String),
    tone: fn(&CardRow<'_>) -> Tone,
    markdown: fn(&CardRow<'_>) -> String,
}

/// The column of the library's answer after the pause.
const TOLD: &str = "what it tells the application after the pause";

/// A column read off one cell of the row.
macro_rules! of_cell {
    ($name:expr, $field:ident) => {
        Column {
            name: $name,
            read: |r| said(&r.row.$field),
            tone: |r| tone(&r.row.$field),
            markdown: |r| cell(&r.row.$field),
        }
    };
}

/// The card's columns after the library's own (its name, package, service and fence), in order.
const COLUMNS: &[Column] = &[
    of_cell!("F1", f1),
    of_cell!("F3 (one winner at a time)", f3),
    of_cell!("stale write unfenced (F5)", unfenced),
    of_cell!("stale write fenced (F4)", fenced),
    // The answer after the pause: by its agreement with the service's record, not its words.
    Column {
        name: TOLD,
        read: |r| said(&r.row.told),
        tone: |r| match r.row.told_agrees {
            Some(false) => Tone::Bad,
            Some(true) => Tone::Good,
            None => Tone::Plain,
        },
        markdown: |r| cell(&r.row.told),
    },
    of_cell!("its check, paused before it (F10)", f10),
    of_cell!("release after the loss", release),
    of_cell!("after kill -9 (F12)", killed),
    of_cell!("cut off from its service (F16)", partitioned),
    Column {
        name: "its docs or source, against the run",
        read: |r| {
            let (_, all) = against_docs(r);
            let verdict = all.split(" — ").next().unwrap_or(&all).to_owned();
            (verdict, all)
        },
        tone: |r| against_docs(r).0,
        markdown: |r| markdown_cell(&against_docs(r).1),
    },
];

fn said(c: &Cell) -> (String, String) {
    if c.said.is_empty() {
        ("not run".to_owned(), String::new())
    } else {
        (c.said.clone(), c.evidence.clone())
    }
}

/// A cell's colour: red where the lock did not protect the write or the library's answer was
/// wrong, green where a fence, a check or an answer held, grey otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Bad,
    Good,
    Plain,
}

impl Tone {
    /// Its class in the HTML card.
    fn class(self) -> &'static str {
        match self {
            Tone::Bad => "bad",
            Tone::Good => "good",
            Tone::Plain => "plain",
        }
    }
}

/// How a cell is coloured, by what its run concluded ([`Verdict`]), never by its words.
fn tone(cell: &Cell) -> Tone {
    match cell.verdict {
        Verdict::CouldNotRun
        | Verdict::Fails
        | Verdict::SeveralWinners
        | Verdict::StaleAccepted
        | Verdict::Missed
        | Verdict::NotFreed
        | Verdict::CutOff {
            stale_accepted: true,
            ..
        } => Tone::Bad,
        Verdict::Passes | Verdict::OneWinner | Verdict::StaleRejected | Verdict::Caught => {
            Tone::Good
        }
        Verdict::NotRun
        | Verdict::CannotFence
        | Verdict::Raised { .. }
        | Verdict::Wrote
        | Verdict::Freed
        | Verdict::CutOff { .. }
        | Verdict::Answered
        | Verdict::ReleaseReturnedTrue => Tone::Plain,
    }
}

/// The card as a section of a report page: the table (each cell's evidence line on hover, its
/// colour by [`tone`]) and the advice per library.
pub fn html(rows: &[CardRow<'_>], runs: &str) -> String {
    let mut out = String::from(
        "<section id=\"library-card\">\n<h2>The library card</h2>\n<style>\n\
         #library-card table { table-layout: fixed; width: 100%; border-collapse: collapse; font-size: 11px; }\n\
         #library-card th, #library-card td { vertical-align: top; border: 1px solid #ddd; padding: 3px; overflow-wrap: anywhere; }\n\
         #library-card td.bad { background: #fce8e6; } #library-card td.good { background: #e6f4ea; }\n\
         #library-card td.plain { background: #f8f9fa; }\n</style>\n",
    );
    let _ = writeln!(
        out,
        "<p>Each published lock library as it ships, on the lab's lock service in a container (an advisory lock: on the lab's own PostgreSQL). \
         Red: the lock did not protect the write, or the library's answer did not match the \
         service's record; green: a fence, a check or an answer held. Hover a cell for the \
         evidence line it was read off; <a href=\"{}\">the runs</a> have each case's timeline.</p>",
        esc(runs)
    );
    out.push_str("<table>\n<tr><th>library</th><th>service</th><th>fence it exposes</th>");
    for c in COLUMNS {
        let _ = write!(out, "<th>{}</th>", esc(c.name));
    }
    out.push_str("</tr>\n");
    for r in rows {
        let _ = write!(
            out,
            "<tr><th>{}<br><small>{}@{}</small></th><td class=\"plain\" title=\"{}\">{}</td><td class=\"plain\">{}</td>",
            esc(r.library.id),
            esc(r.library.package),
            esc(&r.version),
            esc(&r.service),
            esc(r.service.split(" (").next().unwrap_or(&r.service)),
            esc(r.library.fence.unwrap_or("none")),
        );
        for c in COLUMNS {
            let (said, evidence) = (c.read)(r);
            let short: String = said.chars().take(100).collect();
            let cut = if short.len() < said.len() { "…" } else { "" };
            let _ = write!(
                out,
                "<td class=\"{}\" title=\"{}\">{}{cut}</td>",
                (c.tone)(r).class(),
                esc(&evidence),
                esc(&short)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n<h3>What to do, per library</h3>\n<ul>\n");
    for r in rows {
        let _ = writeln!(
            out,
            "<li><b>{}</b> ({}): {}</li>",
            esc(r.library.id),
            esc(r.library.store.name()),
            esc(&advice(r))
        );
    }
    out.push_str("</ul>\n</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Markdown card and the HTML card head the same columns, from the one list: the
    /// Markdown header and its rule have as many cells as the list and the library's own four,
    /// and every name of the list heads an HTML column.
    #[test]
    fn both_cards_head_the_columns_of_the_one_list() {
        let md = markdown(&[]);
        let header = md
            .lines()
            .find(|l| l.starts_with("| library |"))
            .expect("the Markdown header");
        let rule = md
            .lines()
            .find(|l| l.starts_with("|---|"))
            .expect("the rule");
        let cells = |line: &str| line.matches('|').count() - 1;
        assert_eq!(cells(header), COLUMNS.len() + 4, "{header}");
        assert_eq!(cells(rule), cells(header), "{rule}");
        let page = html(&[], "runs/");
        for c in COLUMNS {
            assert!(header.contains(&format!(" {} |", c.name)), "{}", c.name);
            assert!(
                page.contains(&format!("<th>{}</th>", esc(c.name))),
                "{}",
                c.name
            );
        }
        assert!(header.ends_with("| its docs or source, against the run |"));
    }
}
