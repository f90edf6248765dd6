//! `lab grade`: the report card. Each design — the lab's own fence in its three forms, the
//! designs modelled on widely used lock tables and the exercises' planted flaws (designs known to
//! be unsafe: the card must show it, or the lab has lost its teeth), or the profiles named with
//! `--sut` — runs through the experiments that judge a fence, on a cluster of its own, with its
//! evidence in a directory of its own. A cell is read off the events that run's recorder emitted
//! (`harness::evidence::Event`, returned by [`run_lab`]), never assumed and never parsed back
//! from the text output: `safe` when every check of the experiment passed, `UNSAFE` with the
//! first failed check (its line of evidence, worded as the text output words it), `n/a` when the
//! experiment said `skip` (with its reason). The table goes to stdout,
//! `<evidence-dir>/report-card.md` and `report-card.html` (each cell linked to its design's run
//! report), each design's evidence to `<evidence-dir>/grade/<design>/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fencing::lease::{Service, StoreId};
use harness::evidence::{render_text, Event};
use scenarios::Backend;

use crate::args::LeaseStoreArg;
use crate::run::run_lab;
use crate::{config, exercise, print_stdout, Ended};

/// What a row of the card grades, as the run's settings select it.
enum Graded {
    /// A profile (`--sut`): a built-in's name or a file.
    Sut(String),
    /// A lock service as the lease store (`--lease-store`), the lab's own fence at the resource.
    LeaseStore(LeaseStoreArg),
    /// A holder of the user's (`--holder-cmd`): its write is its own fence.
    Holder(String),
}

/// The experiments that judge a fence: on the embedded cluster with nothing else installed (the
/// F-series, PostgreSQL designs) and on a throwaway MariaDB (the U-series, job-lease designs).
pub const EXPERIMENTS: &str = "F1,F2,F3,F4,F6,F7,F8,F10,F11,F12,U1,U2,U3,U4,U5";

/// The seeds' own designs: each must come out safe everywhere.
const OWN: [&str; 4] = ["seed004", "seed004-single", "seed004-shared", "seed000"];

/// Built-in designs modelled on widely used lock tables, none of which checks a token at the
/// resource: each must come out unsafe somewhere.
const MODELLED: [&str; 4] = [
    "shedlock-style",
    "quartz-style",
    "k8s-lease-style",
    "db-scheduler-style",
];

/// One cell of the card, read off a design's run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cell {
    /// Every check of the experiment passed.
    Safe,
    /// A check failed: the first failed check, as the run's text output words it.
    Unsafe(String),
    /// The experiment said skip: why.
    NotApplicable(String),
    /// The experiment did not report (the run stopped before it).
    NotRun,
}

impl Cell {
    /// The cell's word in the table.
    fn word(&self) -> &'static str {
        match self {
            Cell::Safe => "safe",
            Cell::Unsafe(_) => "UNSAFE",
            Cell::NotApplicable(_) => "n/a",
            Cell::NotRun => "not run",
        }
    }
}

/// One row of the card.
#[derive(Clone)]
struct Row {
    design: String,
    /// Where it came from (built in, an exercise's file, the user's file).
    source: String,
    /// Whether the design is expected to hold (the lab's own, the user's) or known to be
    /// flawed (an exercise).
    expected_safe: bool,
    /// The run could not start: every cell says so.
    could_not_run: bool,
    /// What it fences with: the token its lease issues, or `none` — a column of its own, never
    /// a cell's verdict (a check that reads a token the design does not keep is waived).
    token: String,
    cells: Vec<(String, Cell)>,
}

impl Row {
    fn cell(&self, id: &str) -> &Cell {
        self.cells
            .iter()
            .find(|(i, _)| i == id)
            .map_or(&Cell::NotRun, |(_, c)| c)
    }
}

/// What a design fences with, for the card's column: its lease store's token (`none` for a
/// store that issues none), the profile's token at the lease, or a holder's own.
fn token_of(case: &scenarios::Case, holder: bool) -> String {
    let kind = fencing::stores::store_kind(case.store);
    if holder {
        "its holder's own".into()
    } else if !case.sut.claims.token_at_lease || kind.is_some_and(|k| !k.has_token) {
        "none".into()
    } else {
        kind.map_or("the lease's token", |k| k.token).to_owned()
    }
}

/// How to build the lab with the client of the store `store`, for the line that refuses it.
fn build_hint(store: StoreId) -> &'static str {
    match store.service() {
        Some(Service::Mariadb) => {
            " (build with --features lab/mariadb,holder/mariadb: ./run.sh does when MariaDB is installed)"
        }
        Some(_) => {
            " (build with --features lab/lock-services,holder/lock-services: ./run.sh does when a Docker engine answers)"
        }
        None => "",
    }
}

/// Whether the card grades the store `kind` as a design of its own: a lock service in a
/// container, or a lock its session keeps on the lab's own server (the advisory locks, freed when
/// their session's connection closes). Each must be a value of `--lease-store` (checked where it
/// is graded).
fn gradable(kind: &fencing::lease::StoreKind) -> bool {
    kind.service().is_some() || kind.freed_on_disconnect
}

/// The lease stores the card grades as designs of their own ([`gradable`]): into `designs`, or
/// into `not_graded` with why (a lock service where no Docker engine answers). `Err`: the card
/// cannot run.
fn lease_store_designs(
    stores: &[StoreId],
    every: bool,
    designs: &mut Vec<(String, String, bool, Graded)>,
    not_graded: &mut Vec<(String, String)>,
) -> Result<(), Ended> {
    // The lock services of this build (or those named), each in a container of its own, with
    // the token it offers (redis-plain: none, a flawed design): none where no Docker engine
    // answers.
    // Graded by default: the sound ones and the token-less Redis lock most Redis users run.
    // R1's zookeeper-suffix is a specimen, not a design anyone picks, and its first token, 0,
    // fails the card's first check before its real flaw shows (the lab's tokens start above an
    // empty floor's 0): graded only when named.
    // The databases' own locks too: the advisory locks (`pg-advisory`, `pg-advisory-fenced`) on
    // the lab's own server, GET_LOCK (`mariadb-getlock`, `-fenced`) on a local MariaDB.
    let services = fencing::stores::built().filter(|k| {
        gradable(k)
            && if every {
                k.sound || !k.has_token
            } else {
                stores.contains(&k.id)
            }
    });
    let engine = crate::runtime()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(harness::docker::engine()));
    for kind in services {
        let design = if kind.id == StoreId::Redis {
            "redis-fenced"
        } else {
            kind.name()
        };
        let store = <LeaseStoreArg as clap::ValueEnum>::value_variants()
            .iter()
            .find(|v| v.store() == kind.id)
            .copied()
            .ok_or("no value of --lease-store names it");
        // A store on the lab's own lease database needs no engine.
        // Nor does the named locks' MariaDB, a local server the lab starts.
        let ready: Result<(), String> = match kind.service() {
            None | Some(Service::Mariadb) => Ok(()),
            Some(_) => engine.as_ref().map(|_| ()).map_err(|e| e.to_string()),
        };
        match (ready, store) {
            (Ok(_), Ok(store)) => designs.push((
                design.into(),
                format!("--lease-store {}: {}", kind.name(), kind.about),
                kind.sound,
                Graded::LeaseStore(store),
            )),
            (Ok(_), Err(e)) => {
                // A store of the registry that `lab run --lease-store` does not offer: a
                // store added without its value there. The card cannot run it.
                eprintln!("lab grade: {design}: --lease-store {}: {e}", kind.name());
                return Err(Ended::CouldNotRun);
            }
            (Err(why), _) => not_graded.push((
                design.into(),
                format!("the lock service {} in a container — {why}", kind.name()),
            )),
        }
    }
    Ok(())
}

/// The first `--lease-store` this build does not grade, said in one line: `CouldNotRun`.
fn unknown_store(stores: &[StoreId]) -> Option<Ended> {
    for &store in stores {
        let known = fencing::stores::built().any(|k| gradable(k) && k.id == store);
        if !known {
            eprintln!(
                "lab grade: --lease-store {store}: not a lease store of this build the card grades; pass one of: {}{}",
                fencing::stores::built()
                    .filter(|k| gradable(k))
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                build_hint(store)
            );
            return Some(Ended::CouldNotRun);
        }
    }
    None
}

/// The flawed designs of the exercises, written as profiles under `evidence_dir` to be graded
/// (expected unsafe), or — on MariaDB where it cannot run — into `not_graded` with why.
fn flawed_designs(
    evidence_dir: &Path,
    designs: &mut Vec<(String, String, bool, Graded)>,
    not_graded: &mut Vec<(String, String)>,
) -> Result<(), Ended> {
    let sut = |s: &str| Graded::Sut(s.to_owned());
    let dir = evidence_dir.join("grade").join("designs");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("lab grade: cannot make {}: {e}", dir.display());
        return Err(Ended::CouldNotRun);
    }
    let no_mariadb = no_mariadb();
    for (name, text) in exercise::flawed(&dir) {
        let on_mariadb = fencing::profile::Sut::parse(name, &text)
            .is_ok_and(|p| p.dialect() == fencing::profile::Dialect::Mariadb);
        if let (true, Some(why)) = (on_mariadb, &no_mariadb) {
            not_graded.push((
                name.to_owned(),
                format!("a flawed design on MariaDB — {why}"),
            ));
            continue;
        }
        let path = dir.join(format!("{name}.toml"));
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("lab grade: cannot write {}: {e}", path.display());
            return Err(Ended::CouldNotRun);
        }
        let path = path.display().to_string();
        designs.push((name.into(), path.clone(), false, sut(&path)));
    }
    Ok(())
}

/// The report card on stdout and in `evidence_dir` (Markdown and HTML).
fn write_cards(
    evidence_dir: &Path,
    rows: &[Row],
    not_graded: &[(String, String)],
) -> Result<(), Ended> {
    let card = render(rows, not_graded);
    if let Err(e) = print_stdout(&card) {
        eprintln!("lab grade: failed to write the card to stdout: {e}");
    }
    let path = evidence_dir.join("report-card.md");
    if let Err(e) = std::fs::write(&path, &card) {
        eprintln!("lab grade: failed to write {}: {e}", path.display());
        return Err(Ended::CouldNotRun);
    }
    let html_path = evidence_dir.join("report-card.html");
    if let Err(e) = std::fs::write(&html_path, render_html(rows, not_graded)) {
        eprintln!("lab grade: failed to write {}: {e}", html_path.display());
        return Err(Ended::CouldNotRun);
    }
    eprintln!(
        "lab grade: the report card is in {} and {}",
        path.display(),
        html_path.display()
    );
    Ok(())
}

/// The designs the command line names: holders of the user's (expected to hold: the write is
/// its own fence; the experiments that start no holder say skip, n/a on its row) and, when
/// not every design is graded, the profiles named (the modelled ones expected flawed).
fn named_designs(
    holders: &[String],
    suts: Vec<String>,
    every: bool,
    designs: &mut Vec<(String, String, bool, Graded)>,
) {
    // A holder of the user's: its write is its own fence, so it is expected to hold. The
    // experiments that start no holder say skip with --holder-cmd: n/a on its row.
    for (i, cmd) in holders.iter().enumerate() {
        let name = std::path::Path::new(cmd.split_whitespace().last().unwrap_or(cmd))
            .file_name()
            .map_or_else(
                || format!("holder-{}", i + 1),
                |n| n.to_string_lossy().into_owned(),
            );
        designs.push((
            format!("yours-{name}"),
            format!("--holder-cmd {cmd}"),
            true,
            Graded::Holder(cmd.clone()),
        ));
    }
    if !every {
        for sut in suts {
            // The modelled designs are known to be flawed; any other is expected to hold.
            let expected_safe = !MODELLED.contains(&sut.as_str());
            designs.push((
                design_name(&sut),
                sut.clone(),
                expected_safe,
                Graded::Sut(sut),
            ));
        }
    }
}

pub fn run(
    suts: Vec<String>,
    stores: Vec<StoreId>,
    holders: Vec<String>,
    evidence_dir: PathBuf,
) -> Ended {
    if let Some(ended) = unknown_store(&stores) {
        return ended;
    }
    let every = suts.is_empty() && stores.is_empty() && holders.is_empty();
    // Each design: its name, where it came from, whether it is expected to hold, and how a run
    // selects it (`--sut` a profile, or `--lease-store` a lock service).
    let mut designs: Vec<(String, String, bool, Graded)> = Vec::new();
    let sut = |s: &str| Graded::Sut(s.to_owned());
    // Flawed designs the card cannot judge here, and why: an exercise on MariaDB where the
    // U-series cannot run would show n/a everywhere — neither safe nor unsafe.
    let mut not_graded: Vec<(String, String)> = Vec::new();
    if every {
        for name in OWN {
            designs.push((name.into(), name.into(), true, sut(name)));
        }
        for name in MODELLED {
            designs.push((name.into(), name.into(), false, sut(name)));
        }
    }
    if let Err(ended) = lease_store_designs(&stores, every, &mut designs, &mut not_graded) {
        return ended;
    }
    if every {
        if let Err(ended) = flawed_designs(&evidence_dir, &mut designs, &mut not_graded) {
            return ended;
        }
    }

    named_designs(&holders, suts, every, &mut designs);

    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab grade: failed to start the async runtime: {e}");
            return Ended::CouldNotRun;
        }
    };
    let mut rows = Vec::new();
    for (design, source, expected_safe, graded) in designs {
        let dir = evidence_dir.join("grade").join(&design);
        let mut args = config::run_defaults();
        args.only = Some(EXPERIMENTS.split(',').map(str::to_owned).collect());
        args.evidence_dir.clone_from(&dir);
        match graded {
            Graded::Sut(sut) => args.sut = Some(sut),
            Graded::LeaseStore(store) => args.lease_store = store,
            Graded::Holder(cmd) => args.holder_cmd = Some(cmd),
        }
        if args.sut.is_none() {
            // One fence: the store, or the user's holder, is what is graded.
            args.fenced_mode = Some("fenced-scope".to_owned());
        }
        let cfg = match config::inner_run(args) {
            Ok(cfg) => cfg,
            Err(e) => {
                eprintln!("lab grade: {design}: {e:#}");
                return Ended::CouldNotRun;
            }
        };
        eprintln!(
            "lab grade: {design}: running {EXPERIMENTS}; evidence in {}",
            dir.display()
        );
        let run = runtime.block_on(run_lab(&cfg, Backend::Embedded, &dir));
        if let Ended::Interrupted(_) = run.ended {
            return run.ended;
        }
        rows.push(Row {
            design,
            source,
            expected_safe,
            could_not_run: run.ended == Ended::CouldNotRun,
            token: token_of(&cfg.params.case, cfg.holder_cmd.is_some()),
            cells: cells(&run.events),
        });
    }
    for (name, why) in &not_graded {
        eprintln!("lab grade: {name}: not graded here: {why}");
    }
    if let Err(ended) = write_cards(&evidence_dir, &rows, &not_graded) {
        return ended;
    }

    let (ended, why) = gate(&rows);
    for line in why {
        eprintln!("lab grade: {line}");
    }
    ended
}

/// The gate: a design expected to hold that does not, a flawed one the card cannot tell from a
/// sound one, a design no experiment judged (every cell n/a or not run: nothing was shown of it,
/// which is not a pass), or a run that could not start, fails the grade — each with why.
fn gate(rows: &[Row]) -> (Ended, Vec<String>) {
    let mut why = Vec::new();
    for r in rows {
        let unsafe_cells = r.cells.iter().any(|(_, c)| matches!(c, Cell::Unsafe(_)));
        let judged = r
            .cells
            .iter()
            .any(|(_, c)| matches!(c, Cell::Safe | Cell::Unsafe(_)));
        if r.could_not_run {
            why.push(format!("{}: its run could not start", r.design));
        } else if !judged {
            why.push(format!(
                "{}: no experiment judged it (every cell n/a or not run): the card shows \
                 nothing of it, which is not a pass",
                r.design
            ));
        } else if r.expected_safe && unsafe_cells {
            why.push(format!("{}: expected to hold, and UNSAFE", r.design));
        } else if !r.expected_safe && !unsafe_cells {
            why.push(format!(
                "{}: a flawed design the card cannot tell from a sound one",
                r.design
            ));
        }
    }
    let ended = if rows.iter().any(|r| r.could_not_run) {
        Ended::CouldNotRun
    } else if why.is_empty() {
        Ended::Passed
    } else {
        Ended::Failed
    };
    (ended, why)
}

/// Why the U-series cannot run here (`None`: it can): no MariaDB support in this build, or no
/// MariaDB installed.
fn no_mariadb() -> Option<String> {
    #[cfg(feature = "mariadb")]
    let why = harness::server::mariadb::MariaBinaries::locate()
        .err()
        .map(|e| e.to_string().replace('\n', " "));
    #[cfg(not(feature = "mariadb"))]
    let why = Some(
        "this lab was built without MariaDB support (./run.sh builds it when MariaDB is \
         installed: apt-get install -y mariadb-server)"
            .to_owned(),
    );
    why
}

/// A design's name in the card: the profile's file name without `.toml`, or the built-in name.
fn design_name(sut: &str) -> String {
    Path::new(sut)
        .file_stem()
        .map_or_else(|| sut.to_owned(), |s| s.to_string_lossy().into_owned())
}

/// Each experiment's cell, read off a run's events in their order (the preflight P0 is not an
/// experiment): unsafe when one of its checks failed, with the first that did; else n/a when it
/// said skip, with its first reason, or when no check of it judged anything (every one waived:
/// a design without the token they read); else safe — resting on the checks that passed.
fn cells(events: &[Event]) -> Vec<(String, Cell)> {
    /// What one case's events said.
    #[derive(Default)]
    struct Seen {
        first_failed: Option<String>,
        first_skip: Option<String>,
        passed: usize,
        first_waived: Option<String>,
    }
    let mut seen: Vec<(String, Seen)> = Vec::new();
    for event in events {
        match event {
            Event::CaseStarted { id, .. } => seen.push((id.clone(), Seen::default())),
            Event::Check(check) if !check.passed => {
                if let Some((_, s)) = seen.iter_mut().find(|(id, _)| *id == check.case) {
                    s.first_failed.get_or_insert_with(|| evidence_line(event));
                }
            }
            Event::Check(check) => {
                if let Some((_, s)) = seen.iter_mut().find(|(id, _)| *id == check.case) {
                    s.passed += 1;
                }
            }
            Event::Note { case, text } if text.starts_with("n/a  ") => {
                if let Some((_, s)) = seen.iter_mut().find(|(id, _)| id == case) {
                    s.first_waived
                        .get_or_insert_with(|| first_line(&text["n/a  ".len()..]));
                }
            }
            Event::Skipped { case, reason } => {
                if let Some((_, s)) = seen.iter_mut().find(|(id, _)| id == case) {
                    s.first_skip.get_or_insert_with(|| first_line(reason));
                }
            }
            _ => {}
        }
    }
    seen.into_iter()
        .filter(|(id, _)| id != "P0")
        .map(|(id, s)| {
            let cell = match s {
                Seen {
                    first_failed: Some(line),
                    ..
                } => Cell::Unsafe(line),
                Seen {
                    first_skip: Some(why),
                    ..
                } => Cell::NotApplicable(why),
                Seen {
                    passed: 0,
                    first_waived: Some(what),
                    ..
                } => Cell::NotApplicable(format!("every check was waived, e.g. {what}")),
                _ => Cell::Safe,
            };
            (id, cell)
        })
        .collect()
}

/// A failed check's line of evidence: its first line in the text output (`render_text`, the one
/// wording of a check), without the `FAIL` mark — a multi-line check's diff stays in the run's
/// report.
fn evidence_line(check: &Event) -> String {
    let rendered = render_text(check).unwrap_or_default();
    let line = first_line(&rendered);
    line.strip_prefix("FAIL ")
        .unwrap_or(&line)
        .trim()
        .to_owned()
}

/// The first line of `text`, trimmed: what a card's cell or note holds.
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_owned()
}

/// Lines under a card's table: (what they are about, the line).
type Lines = Vec<(String, String)>;

/// What the cards say under the table: every unsafe cell's evidence line, and why each
/// experiment did not apply to a design (a line per reason and set of experiments, naming every
/// design it holds for).
fn notes(rows: &[Row]) -> (Lines, Lines) {
    let ids: Vec<&str> = EXPERIMENTS.split(',').collect();
    let mut evidence = Vec::new();
    let mut merged: Vec<(Vec<&str>, String, &str)> = Vec::new();
    for row in rows.iter().filter(|r| !r.could_not_run) {
        let mut reasons: Vec<(Vec<&str>, &str)> = Vec::new();
        for id in &ids {
            match row.cell(id) {
                Cell::Unsafe(line) => {
                    evidence.push((format!("{} × {id}", row.design), line.clone()))
                }
                Cell::NotApplicable(why) => {
                    // "F6 does not apply to x: why" — the reason after the design's name; any
                    // other skip (a server missing here) says its reason whole.
                    let why = match why.split_once(": ") {
                        Some((head, rest))
                            if head.contains(" does not apply to ")
                                || head.ends_with(" does not judge your holder (--holder-cmd)") =>
                        {
                            rest
                        }
                        _ => why.as_str(),
                    };
                    match reasons.iter_mut().find(|(_, w)| *w == why) {
                        Some((ids, _)) => ids.push(id),
                        None => reasons.push((vec![id], why)),
                    }
                }
                Cell::Safe | Cell::NotRun => {}
            }
        }
        // Designs that skip the same experiments for the same reason share a line (every
        // PostgreSQL design × the U-series).
        for (ids, why) in reasons {
            let ids = ids.join(", ");
            match merged
                .iter_mut()
                .find(|(_, i, w): &&mut (Vec<&str>, String, &str)| *i == ids && *w == why)
            {
                Some((designs, _, _)) => designs.push(&row.design),
                None => merged.push((vec![&row.design], ids, why)),
            }
        }
    }
    let not_applicable = merged
        .into_iter()
        .map(|(designs, ids, why)| (format!("{} × {ids}", designs.join(", ")), why.to_owned()))
        .collect();
    (evidence, not_applicable)
}

const LEGEND: &str =
    "Each cell is read off that design's run: safe — every check of the experiment \
     passed (a check that reads what the design does not keep, a token or a floor, is noted n/a in \
     its run and not counted); UNSAFE — a check failed (its first failed check is listed below): a harm the \
     experiment showed, never the lack of a token, which the token column says; n/a — the \
     experiment does not apply to the design (why: below).";

/// The card as Markdown: a row per design, a column per experiment, then the evidence lines.
fn render(rows: &[Row], not_graded: &[(String, String)]) -> String {
    let ids: Vec<&str> = EXPERIMENTS.split(',').collect();
    let mut text = format!("{LEGEND}\n\n| design | expected | token |");
    for id in &ids {
        let _ = write!(text, " {id} |");
    }
    text.push_str("\n|---|---|---|");
    text.push_str(&"---|".repeat(ids.len()));
    text.push('\n');
    for row in rows {
        let _ = write!(
            text,
            "| {} | {} | {} |",
            row.design,
            if row.expected_safe { "safe" } else { "flawed" },
            row.token
        );
        for id in &ids {
            let cell = match row.cell(id) {
                _ if row.could_not_run => "could not run",
                Cell::Unsafe(_) => "**UNSAFE**",
                c => c.word(),
            };
            let _ = write!(text, " {cell} |");
        }
        text.push('\n');
    }
    text.push_str("\nDesigns: ");
    text.push_str(
        &rows
            .iter()
            .map(|r| format!("{} ({})", r.design, r.source))
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push_str(".\n");
    for (name, why) in not_graded {
        let _ = writeln!(text, "\nNot graded here: {name}, {why}.");
    }
    let (evidence, not_applicable) = notes(rows);
    if !evidence.is_empty() {
        text.push_str("\nThe evidence (each unsafe cell's first failed check):\n\n");
        for (cell, line) in evidence {
            let _ = writeln!(text, "- {cell}: {line}");
        }
    }
    if !not_applicable.is_empty() {
        text.push_str("\nNot applicable:\n\n");
        for (cells, why) in not_applicable {
            let _ = writeln!(text, "- {cells}: {why}");
        }
    }
    text
}

/// The card as a page: the same table, each cell linked to the report of the run it was read
/// off, and the evidence lines.
fn render_html(rows: &[Row], not_graded: &[(String, String)]) -> String {
    let esc = harness::evidence::escape::html;
    let ids: Vec<&str> = EXPERIMENTS.split(',').collect();
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>fencing lab: report card</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #999;padding:.3em .6em;text-align:center}}\
         .safe{{background:#d9f2d9}}.unsafe{{background:#f7c8c8;font-weight:bold}}.na{{color:#777}}\
         li{{margin:.2em 0}}</style></head><body>\n<h1>Report card</h1>\n\
         <p>{} Click a cell for its run's report.</p>\n<table><tr><th>design</th><th>expected</th><th>token</th>",
        esc(LEGEND)
    );
    for id in &ids {
        let _ = write!(html, "<th>{id}</th>");
    }
    html.push_str("</tr>\n");
    for row in rows {
        let report = format!("grade/{}/report.html", esc(&row.design));
        let _ = write!(
            html,
            "<tr><th title=\"{}\">{}</th><td>{}</td><td>{}</td>",
            esc(&row.source),
            esc(&row.design),
            if row.expected_safe { "safe" } else { "flawed" },
            esc(&row.token)
        );
        for id in &ids {
            let cell = row.cell(id);
            let (class, word, title) = match cell {
                _ if row.could_not_run => ("na", "could not run", ""),
                Cell::Safe => ("safe", cell.word(), ""),
                Cell::Unsafe(line) => ("unsafe", cell.word(), line.as_str()),
                Cell::NotApplicable(why) => ("na", cell.word(), why.as_str()),
                Cell::NotRun => ("na", cell.word(), ""),
            };
            let _ = write!(
                html,
                "<td class=\"{class}\" title=\"{}\"><a href=\"{report}\">{word}</a></td>",
                esc(title)
            );
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    for (name, why) in not_graded {
        let _ = writeln!(html, "<p>Not graded here: {}, {}.</p>", esc(name), esc(why));
    }
    let (evidence, not_applicable) = notes(rows);
    for (heading, items) in [
        ("The evidence", evidence),
        ("Not applicable", not_applicable),
    ] {
        if !items.is_empty() {
            let _ = writeln!(html, "<h2>{heading}</h2>\n<ul>");
            for (cell, line) in items {
                let _ = writeln!(html, "<li><b>{}</b>: {}</li>", esc(&cell), esc(&line));
            }
            html.push_str("</ul>\n");
        }
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::evidence::{Check, CheckKind};

    #[test]
    fn a_design_no_experiment_judged_fails_the_gate_and_says_why() {
        let row = |design: &str, expected_safe: bool, cells: Vec<Cell>| Row {
            design: design.into(),
            source: String::new(),
            expected_safe,
            could_not_run: false,
            token: "none".into(),
            cells: cells
                .into_iter()
                .enumerate()
                .map(|(i, c)| (format!("F{i}"), c))
                .collect(),
        };
        let na = || Cell::NotApplicable("no MariaDB here".into());
        let sound = row("sound", true, vec![Cell::Safe, na()]);
        let flawed = row("flawed", false, vec![Cell::Unsafe("x".into()), na()]);
        assert_eq!(gate(&[sound, flawed]), (Ended::Passed, Vec::new()));
        // Expected safe, every cell n/a or not run: nothing was judged.
        let unjudged = row("seed000", true, vec![na(), Cell::NotRun]);
        let sound = row("sound", true, vec![Cell::Safe]);
        let (ended, why) = gate(&[sound, unjudged]);
        assert_eq!(ended, Ended::Failed);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("seed000: no experiment judged it"),
            "{why:?}"
        );
        // The old rules hold.
        let (ended, why) = gate(&[row("s", true, vec![Cell::Unsafe("y".into())])]);
        assert_eq!((ended, why.len()), (Ended::Failed, 1));
        let (ended, why) = gate(&[row("f", false, vec![Cell::Safe])]);
        assert_eq!((ended, why.len()), (Ended::Failed, 1));
    }

    #[test]
    fn a_cell_is_read_off_the_events_first_failure_first_then_skip() {
        let started = |id: &str| Event::CaseStarted {
            id: id.into(),
            title: "t".into(),
            lanes: Default::default(),
        };
        let check = |case: &str, passed: bool, description: &str| {
            Event::Check(Check {
                case: case.into(),
                kind: CheckKind::Value,
                description: description.into(),
                expected: "1".into(),
                actual: if passed { "1" } else { "2" }.into(),
                passed,
            })
        };
        let skipped = |case: &str, reason: &str| Event::Skipped {
            case: case.into(),
            reason: reason.into(),
        };
        let events = [
            started("P0"),
            check("P0", false, "the preflight is no experiment"),
            started("F1"),
            check("F1", true, "fine"),
            started("F2"),
            check("F2", true, "fine"),
            check("F2", false, "the first to fail"),
            check("F2", false, "the second to fail"),
            started("F3"),
            skipped("F3", "F3 does not apply to d: no floor\nmore"),
            skipped("F3", "a second reason"),
            started("F4"),
            skipped("F4", "skipped, but"),
            check("F4", false, "a failure outweighs a skip"),
            started("F5"),
            Event::Note {
                case: "F5".into(),
                text: "n/a  B acquires, token=– — the design issues no token".into(),
            },
            started("F6"),
            Event::Note {
                case: "F6".into(),
                text: "n/a  fence_floor — the design keeps none".into(),
            },
            check("F6", true, "judged"),
        ];
        assert_eq!(
            cells(&events),
            [
                ("F1".to_owned(), Cell::Safe),
                (
                    "F2".to_owned(),
                    Cell::Unsafe("the first to fail (expected=1, actual=2)".into())
                ),
                (
                    "F3".to_owned(),
                    Cell::NotApplicable("F3 does not apply to d: no floor".into())
                ),
                (
                    "F4".to_owned(),
                    Cell::Unsafe("a failure outweighs a skip (expected=1, actual=2)".into())
                ),
                (
                    "F5".to_owned(),
                    Cell::NotApplicable(
                        "every check was waived, e.g. B acquires, token=– — the design issues no token"
                            .into()
                    )
                ),
                ("F6".to_owned(), Cell::Safe),
            ]
        );
    }

    #[test]
    fn a_skip_reason_loses_only_the_does_not_apply_prefix_and_unjudged_designs_are_said() {
        let na = |why: &str| Cell::NotApplicable(why.to_owned());
        let row = Row {
            design: "d".into(),
            source: "d.toml".into(),
            expected_safe: true,
            could_not_run: false,
            token: "token column".into(),
            cells: vec![
                (
                    "F1".into(),
                    na("F1 does not apply to d: a design on MariaDB; why"),
                ),
                (
                    "F2".into(),
                    na("F2 does not apply to d: a design on MariaDB; why"),
                ),
                (
                    "U1".into(),
                    na("needs MariaDB support, which this build lacks: fix"),
                ),
            ],
        };
        let (evidence, not_applicable) = notes(std::slice::from_ref(&row));
        assert!(evidence.is_empty());
        assert_eq!(
            not_applicable,
            [
                (
                    "d × F1, F2".to_owned(),
                    "a design on MariaDB; why".to_owned()
                ),
                (
                    "d × U1".to_owned(),
                    "needs MariaDB support, which this build lacks: fix".to_owned()
                ),
            ]
        );
        // Another design skipping F1 and F2 for the same reason shares the line; one that
        // skips only F1 for it has a line of its own.
        let mut e = row.clone();
        e.design = "e".into();
        let mut f = row.clone();
        f.design = "f".into();
        f.cells.remove(1);
        let (_, merged) = notes(&[row.clone(), e, f]);
        assert_eq!(
            merged.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(),
            ["d, e × F1, F2", "d, e, f × U1", "f × F1"]
        );
        let not_graded = [(
            "x".to_owned(),
            "a flawed design on MariaDB — no MariaDB here".to_owned(),
        )];
        let card = render(std::slice::from_ref(&row), &not_graded);
        assert!(
            card.contains("Not graded here: x, a flawed design on MariaDB — no MariaDB here."),
            "{card}"
        );
        assert!(render_html(&[row], &not_graded).contains("<p>Not graded here: x,"));
    }
}
