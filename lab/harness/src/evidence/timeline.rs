//! Timeline pictures, from the same event stream as every other reporter: an SVG per multi-actor
//! case inside one self-contained `report.html` (no network, no script), and a Mermaid sequence
//! diagram per case (`timeline-<CASE>.mmd`, which code-hosting sites render).
//!
//! The SVG has a lane per actor and one per database. The `lease26` lane shows each holding as
//! the database clock judged it: from the grant to the moment the lab's poll saw `expires_at <=
//! now()` (or the release). A frozen interval (SIGSTOP → SIGCONT) is shaded on its actor's lane;
//! each write is marked on the `res26` lane, accepted (✓) or rejected (✗), with its token; a
//! crash-restart of the database crosses every lane. The x axis is the lab's monotonic clock, but
//! not linear: each step's position is half its share of the elapsed time and half its rank among
//! the steps, so that steps milliseconds apart stay readable beside seconds of waiting. The tick
//! labels give the real times.
//!
//! This module only draws what the steps say; it decides nothing.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{render_text, write_atomically, Event, Mark, Reporter, Step, Summary};

/// One case as the pictures need it.
#[derive(Debug, Clone, Default)]
pub struct CaseTimeline {
    pub id: String,
    pub title: String,
    pub steps: Vec<Step>,
    /// The case's text lines (checks and notes), as the text output shows them.
    pub lines: Vec<String>,
}

impl CaseTimeline {
    /// The actors with a lane of their own, by name. The lab itself is not an actor: what it does
    /// shows on the lanes of those it does it to, or as a phase marker across all lanes.
    pub fn actors(&self) -> Vec<&str> {
        let mut actors: Vec<&str> = Vec::new();
        for s in &self.steps {
            if s.actor != "lab" && !actors.contains(&s.actor.as_str()) {
                actors.push(&s.actor);
            }
        }
        // A before B, whoever spoke first.
        actors.sort_unstable();
        actors
    }

    /// Cases with two actors or more get a picture.
    pub fn is_multi_actor(&self) -> bool {
        self.actors().len() >= 2
    }
}

/// Groups the events by case.
pub fn cases(events: &[Event]) -> Vec<CaseTimeline> {
    let mut cases: Vec<CaseTimeline> = Vec::new();
    for event in events {
        match event {
            Event::CaseStarted { id, title } => cases.push(CaseTimeline {
                id: id.clone(),
                title: title.clone(),
                ..Default::default()
            }),
            Event::Step(step) => {
                if let Some(case) = cases.last_mut() {
                    case.steps.push(step.clone());
                }
            }
            Event::Check(_) | Event::Note { .. } | Event::Skipped { .. } => {
                if let (Some(case), Some(line)) = (cases.last_mut(), render_text(event)) {
                    case.lines.push(line);
                }
            }
            _ => {}
        }
    }
    cases
}

/// An interval on one lane.
#[derive(Debug, Clone, PartialEq)]
struct Span {
    actor: String,
    from: Duration,
    to: Duration,
    token: Option<i64>,
}

/// The lease holdings (Acquired → Released / LeaseExpired / a takeover / the end) and the frozen
/// intervals (Frozen → Thawed / the end), in step order.
fn spans(steps: &[Step], end: Duration) -> (Vec<Span>, Vec<Span>) {
    let (mut holdings, mut frozen) = (Vec::new(), Vec::new());
    let mut open_lease: Option<Span> = None;
    let mut open_frozen: Vec<Span> = Vec::new();
    for s in steps {
        match s.mark {
            Mark::Acquired => {
                if let Some(mut span) = open_lease.take() {
                    span.to = s.at;
                    holdings.push(span);
                }
                open_lease = Some(Span {
                    actor: s.actor.clone(),
                    from: s.at,
                    to: s.at,
                    token: s.token,
                });
            }
            Mark::Released | Mark::LeaseExpired => {
                if let Some(mut span) = open_lease.take_if(|span| span.actor == s.actor) {
                    span.to = s.at;
                    holdings.push(span);
                }
            }
            Mark::Frozen => open_frozen.push(Span {
                actor: s.actor.clone(),
                from: s.at,
                to: s.at,
                token: None,
            }),
            Mark::Thawed => {
                if let Some(i) = open_frozen.iter().position(|f| f.actor == s.actor) {
                    let mut span = open_frozen.remove(i);
                    span.to = s.at;
                    frozen.push(span);
                }
            }
            _ => {}
        }
    }
    holdings.extend(open_lease.map(|span| Span { to: end, ..span }));
    frozen.extend(open_frozen.into_iter().map(|span| Span { to: end, ..span }));
    (holdings, frozen)
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 4] = ["#1f77b4", "#e6750f", "#2ca02c", "#9467bd"];
const X0: f64 = 130.0;
const X1: f64 = 940.0;
const WIDTH: f64 = 960.0;
const TOP: f64 = 44.0;
const LANE: f64 = 60.0;

/// A "nice" tick interval in ms for a span of `span_ms`.
fn tick_ms(span_ms: f64) -> f64 {
    let raw = (span_ms / 8.0).max(0.001);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|t| *t >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Maps a step time to a position in 0..=1: half linear in time, half by rank (see the module
/// docs). Times between steps are interpolated; the map is monotonic.
struct Axis {
    /// (time in ms since the first step, position 0..=1), strictly increasing in both.
    knots: Vec<(f64, f64)>,
}

impl Axis {
    fn new(times_ms: &[f64]) -> Axis {
        let mut t: Vec<f64> = times_ms.to_vec();
        t.sort_by(f64::total_cmp);
        t.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
        if t.len() < 2 {
            return Axis {
                knots: vec![(0.0, 0.0), (1.0, 1.0)],
            };
        }
        let (first, span, n) = (t[0], t[t.len() - 1] - t[0], (t.len() - 1) as f64);
        let knots = t
            .iter()
            .enumerate()
            .map(|(i, ti)| (ti - first, 0.5 * (ti - first) / span + 0.5 * i as f64 / n))
            .collect();
        Axis { knots }
    }

    fn pos(&self, ms: f64) -> f64 {
        let k = &self.knots;
        let i = k
            .windows(2)
            .position(|w| ms <= w[1].0)
            .unwrap_or(k.len() - 2);
        let ((ta, pa), (tb, pb)) = (k[i], k[i + 1]);
        pa + (ms - ta) / (tb - ta) * (pb - pa)
    }

    fn end_ms(&self) -> f64 {
        self.knots.last().map_or(0.0, |k| k.0)
    }
}

/// The SVG timeline of one case.
pub fn svg(case: &CaseTimeline) -> String {
    let actors = case.actors();
    let lanes: Vec<String> = actors
        .iter()
        .map(|a| a.to_string())
        .chain(["lease26".into(), "res26".into()])
        .collect();
    let lane_y = |name: &str| TOP + LANE * lanes.iter().position(|l| l == name).unwrap_or(0) as f64;
    let color =
        |actor: &str| PALETTE[actors.iter().position(|a| *a == actor).unwrap_or(0) % PALETTE.len()];
    let first = case.steps.first().map_or(Duration::ZERO, |s| s.at);
    let last = case.steps.last().map_or(first, |s| s.at);
    let ms = |at: Duration| (at.as_secs_f64() - first.as_secs_f64()) * 1000.0;
    let axis = Axis::new(&case.steps.iter().map(|s| ms(s.at)).collect::<Vec<_>>());
    let span_ms = axis.end_ms().max(1.0);
    // 2 % of margin on each side.
    let xpos = |ms: f64| X0 + (0.02 + 0.96 * axis.pos(ms)) * (X1 - X0);
    let x = |at: Duration| xpos(ms(at));
    let height = TOP + LANE * lanes.len() as f64 + 40.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="DejaVu Sans, sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{} — {}</text>"#,
        esc(&case.id),
        esc(&case.title)
    );
    // Lanes.
    for (i, lane) in lanes.iter().enumerate() {
        let y = TOP + LANE * i as f64;
        let fill = if i % 2 == 0 { "#f6f6f6" } else { "#ffffff" };
        let _ = writeln!(
            out,
            r#"<rect x="{X0}" y="{y}" width="{}" height="{LANE}" fill="{fill}"/>"#,
            X1 - X0
        );
        let label = match lane.as_str() {
            "lease26" => "lease26 (lease)".to_owned(),
            "res26" => "res26 (resource)".to_owned(),
            actor => format!("holder {actor}"),
        };
        let _ = writeln!(
            out,
            r#"<text x="10" y="{}" font-weight="bold">{}</text>"#,
            y + LANE / 2.0 + 4.0,
            esc(&label)
        );
    }
    // Time axis.
    let axis_y = TOP + LANE * lanes.len() as f64;
    let tick = tick_ms(span_ms);
    let _ = writeln!(
        out,
        r##"<line x1="{X0}" y1="{axis_y}" x2="{X1}" y2="{axis_y}" stroke="#444"/>"##
    );
    let (mut t, mut last_label) = (0.0, f64::NEG_INFINITY);
    while t <= span_ms {
        let tx = xpos(t);
        // Ticks where the axis is stretched would crowd: label only those with room.
        if tx - last_label >= 56.0 {
            let _ = writeln!(
                out,
                r##"<line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{}" stroke="#ddd"/>"##,
                axis_y + 4.0
            );
            let _ = writeln!(
                out,
                r##"<text x="{tx:.1}" y="{}" text-anchor="middle" fill="#444">+{t} ms</text>"##,
                axis_y + 16.0
            );
            last_label = tx;
        }
        t += tick;
    }
    let _ = writeln!(
        out,
        r##"<text x="{X1}" y="{}" text-anchor="end" fill="#666">the lab's monotonic clock, stretched where steps are close (see the ticks); lease holdings as the database clock judged them</text>"##,
        axis_y + 32.0
    );
    let (holdings, frozen) = spans(&case.steps, last);
    // Frozen intervals, shaded on their actor's lane.
    for f in &frozen {
        let (xa, xb) = (x(f.from), x(f.to));
        let y = lane_y(&f.actor);
        let _ = writeln!(
            out,
            r##"<rect x="{xa:.1}" y="{}" width="{:.1}" height="{}" fill="#9aa0a6" fill-opacity="0.45" stroke="#5f6368" stroke-dasharray="4 2"><title>frozen: SIGSTOP → SIGCONT, {:.0} ms</title></rect>"##,
            y + 4.0,
            (xb - xa).max(1.0),
            LANE - 8.0,
            (f.to - f.from).as_secs_f64() * 1000.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" font-style="italic">frozen (SIGSTOP)</text>"#,
            xa + 4.0,
            y + LANE - 10.0
        );
    }
    // Lease holdings on the lease lane.
    let ly = lane_y("lease26");
    for h in &holdings {
        let (xa, xb) = (x(h.from), x(h.to));
        let token = h.token.map_or_else(String::new, |t| format!(" token={t}"));
        let _ = writeln!(
            out,
            r#"<rect x="{xa:.1}" y="{}" width="{:.1}" height="20" rx="3" fill="{}" fill-opacity="0.75"><title>{} holds the lease{token}</title></rect>"#,
            ly + 16.0,
            (xb - xa).max(2.0),
            color(&h.actor),
            esc(&h.actor)
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{}" fill="#fff" font-weight="bold">{}{}</text>"##,
            xa + 4.0,
            ly + 30.0,
            esc(&h.actor),
            esc(&token)
        );
    }
    // Steps.
    let ry = lane_y("res26");
    let mut label_row = 0usize;
    let mut lane_rows: std::collections::HashMap<String, usize> = Default::default();
    for s in &case.steps {
        let sx = x(s.at);
        let title = esc(&format!(
            "+{:.1} ms {} {} {}{}{}",
            ms(s.at),
            s.actor,
            s.action,
            s.outcome,
            s.token.map_or_else(String::new, |t| format!(" token={t}")),
            s.db_clock
                .as_ref()
                .map_or_else(String::new, |c| format!(" (db clock {c})"))
        ));
        match s.mark {
            Mark::Restart => {
                let _ = writeln!(
                    out,
                    r##"<line x1="{sx:.1}" y1="{TOP}" x2="{sx:.1}" y2="{axis_y}" stroke="#d93025" stroke-width="2" stroke-dasharray="6 3"><title>{title}</title></line>"##
                );
                let _ = writeln!(
                    out,
                    r##"<text x="{:.1}" y="{}" fill="#d93025" font-weight="bold">database crash + restart</text>"##,
                    sx + 4.0,
                    TOP - 4.0
                );
            }
            Mark::Write { accepted } => {
                let (sym, fill) = if accepted {
                    ("✓", "#188038")
                } else {
                    ("✗", "#d93025")
                };
                let token = s.token.map_or_else(String::new, |t| format!(" t={t}"));
                let y = ry + 30.0 + 13.0 * (label_row % 2) as f64;
                label_row += 1;
                let _ = writeln!(
                    out,
                    r#"<circle cx="{sx:.1}" cy="{}" r="6" fill="{fill}"><title>{title}</title></circle>"#,
                    ry + 10.0
                );
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{}" fill="{fill}" font-weight="bold"{}>{sym} {}{}</text>"#,
                    if sx > X1 - 70.0 { sx - 8.0 } else { sx + 8.0 },
                    y,
                    if sx > X1 - 70.0 {
                        r#" text-anchor="end""#
                    } else {
                        ""
                    },
                    esc(&s.actor),
                    esc(&token)
                );
                let ay = lane_y(&s.actor) + LANE / 2.0;
                let _ = writeln!(
                    out,
                    r#"<line x1="{sx:.1}" y1="{ay}" x2="{sx:.1}" y2="{}" stroke="{fill}" stroke-width="1.5" marker-end="url(#arrow)"><title>{title}</title></line>"#,
                    ry + 4.0
                );
            }
            // What the lab itself marks: the start of a phase of the case.
            Mark::Info if s.actor == "lab" => {
                let _ = writeln!(
                    out,
                    r##"<line x1="{sx:.1}" y1="{TOP}" x2="{sx:.1}" y2="{axis_y}" stroke="#80868b" stroke-dasharray="2 3"><title>{title}</title></line>"##
                );
                let _ = writeln!(
                    out,
                    r##"<text x="{:.1}" y="{}" fill="#5f6368">{}</text>"##,
                    sx + 3.0,
                    TOP - 4.0,
                    esc(&short(&s.action))
                );
            }
            _ if s.actor == "lab" => {}
            mark => {
                let y = lane_y(&s.actor) + LANE / 2.0;
                let r = if mark == Mark::Renewed { 2.5 } else { 4.0 };
                let _ = writeln!(
                    out,
                    r#"<circle cx="{sx:.1}" cy="{y}" r="{r}" fill="{}"><title>{title}</title></circle>"#,
                    color(&s.actor)
                );
                let label = match mark {
                    Mark::Acquired => s.token.map(|t| format!("acquire → {t}")),
                    Mark::Refused => Some("refused".into()),
                    Mark::Released => Some("release".into()),
                    Mark::LeaseExpired => Some("lease expired".into()),
                    // The shaded box says it.
                    Mark::Frozen => None,
                    Mark::Info => Some(short(&s.action)),
                    Mark::Thawed => Some("go + SIGCONT".into()),
                    _ => None,
                };
                if let Some(label) = label {
                    // Cycle above / below / high above the dot so that neighbours do not overwrite each other.
                    let row = lane_rows.entry(s.actor.clone()).or_default();
                    let ly = [y - 9.0, y + 17.0, y - 20.0][*row % 3];
                    *row += 1;
                    let (lx, anchor) = if sx > X1 - 110.0 {
                        (sx - 2.0, r#" text-anchor="end""#)
                    } else {
                        (sx + 2.0, "")
                    };
                    let _ = writeln!(
                        out,
                        r#"<text x="{lx:.1}" y="{ly}"{anchor}>{}</text>"#,
                        esc(&label)
                    );
                }
            }
        }
    }
    let _ = writeln!(
        out,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>"##
    );
    out.push_str("</svg>\n");
    out
}

/// A label short enough for a lane.
fn short(text: &str) -> String {
    match text.char_indices().nth(30) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// A Mermaid participant id for an actor name.
fn pid(actor: &str) -> String {
    let id: String = actor
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    if id.is_empty() {
        "X".into()
    } else {
        id
    }
}

/// Text that is safe inside a Mermaid message or note (`;` and `#` have meanings there).
fn mtext(text: &str) -> String {
    text.replace([';', '#'], ",").replace(['\n', '\r'], " ")
}

/// The Mermaid sequence diagram of one case.
pub fn mermaid(case: &CaseTimeline) -> String {
    let mut out = format!(
        "%% {} :: {}\nsequenceDiagram\n",
        case.id,
        mtext(&case.title)
    );
    for actor in case.actors() {
        let _ = writeln!(out, "    participant {} as {}", pid(actor), mtext(actor));
    }
    out.push_str("    participant L as lease26\n    participant R as res26\n");
    let mut i = 0;
    while i < case.steps.len() {
        let s = &case.steps[i];
        let (a, token) = (
            pid(&s.actor),
            s.token.map_or_else(String::new, |t| format!("token={t}")),
        );
        match s.mark {
            Mark::Acquired => {
                let _ = writeln!(out, "    {a}->>L: acquire\n    L-->>{a}: {token}");
            }
            Mark::Refused => {
                let _ = writeln!(out, "    {a}->>L: acquire\n    L-->>{a}: refused (held)");
            }
            Mark::Renewed => {
                // Consecutive renewals by the same actor collapse into one line.
                let run = case.steps[i..]
                    .iter()
                    .take_while(|n| n.mark == Mark::Renewed && n.actor == s.actor)
                    .count();
                let times = if run > 1 {
                    format!(" ×{run}")
                } else {
                    String::new()
                };
                let _ = writeln!(out, "    {a}->>L: renew{times}\n    L-->>{a}: ok");
                i += run;
                continue;
            }
            Mark::Released => {
                let _ = writeln!(out, "    {a}->>L: release");
            }
            Mark::LeaseExpired => {
                let _ = writeln!(
                    out,
                    "    Note over L: lease of {} expired (database clock)",
                    mtext(&s.actor)
                );
            }
            Mark::Frozen => {
                let _ = writeln!(out, "    Note over {a}: SIGSTOP: frozen, renewer too");
            }
            Mark::Thawed => {
                let _ = writeln!(out, "    Note over {a}: go-line, SIGCONT");
            }
            Mark::Write { accepted } => {
                let verdict = if accepted { "accepted" } else { "rejected" };
                let _ = writeln!(
                    out,
                    "    {a}->>R: {} {token}\n    R-->>{a}: {verdict}",
                    mtext(&s.action)
                );
            }
            Mark::Restart => {
                out.push_str("    Note over L,R: immediate stop (crash), WAL recovery, restart\n");
            }
            Mark::Info if s.actor == "lab" => {
                let _ = writeln!(
                    out,
                    "    Note over L: {} {}",
                    mtext(&s.action),
                    mtext(&s.outcome)
                );
            }
            Mark::Info => {
                let _ = writeln!(
                    out,
                    "    Note over {a}: {} {}",
                    mtext(&s.action),
                    mtext(&s.outcome)
                );
            }
        }
        i += 1;
    }
    out
}

/// The whole report: environment, summary, and per case its picture and its lines.
pub fn html(events: &[Event]) -> String {
    let mut env = String::new();
    let mut summary: Option<Summary> = None;
    for event in events {
        match event {
            Event::Environment { entries } => {
                for (k, v) in entries {
                    let _ = writeln!(env, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
                }
            }
            Event::Finished(s) => summary = Some(*s),
            _ => {}
        }
    }
    let verdict = summary.map_or_else(|| "the run did not finish".to_owned(), |s| s.to_string());
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fencing lab — report</title>\n<style>\n\
         body { font-family: 'DejaVu Sans', sans-serif; margin: 24px; color: #202124; max-width: 1000px; }\n\
         h2 { border-top: 1px solid #ccc; padding-top: 12px; font-size: 16px; }\n\
         pre { background: #f8f8f8; padding: 8px; font-size: 12px; white-space: pre-wrap; }\n\
         table { border-collapse: collapse; font-size: 12px; } th, td { text-align: left; padding: 2px 8px; }\n\
         .fail { color: #d93025; } .pass { color: #188038; }\n</style></head><body>\n<h1>fencing lab — report</h1>\n",
    );
    let class = if summary.is_some_and(|s| s.all_passed()) {
        "pass"
    } else {
        "fail"
    };
    let _ = writeln!(out, "<p class=\"{class}\"><b>{}</b></p>", esc(&verdict));
    let _ = writeln!(
        out,
        "<p>Lanes: one per holder, then the lease database and the resource database. Coloured bars on \
         <i>lease26</i>: who held the lease, from its grant until the database clock said it expired (or it was \
         released). Grey dashed boxes: a holder frozen by SIGSTOP. ✓/✗ on <i>res26</i>: a write accepted or \
         rejected, with its token. A red dashed line: the database crashed and restarted. Hover for details.</p>"
    );
    let _ = writeln!(out, "<table>{env}</table>");
    for case in cases(events) {
        let _ = writeln!(
            out,
            "<h2 id=\"{0}\">CASE {0} :: {1}</h2>",
            esc(&case.id),
            esc(&case.title)
        );
        if case.is_multi_actor() {
            out.push_str(&svg(&case));
        }
        let lines: Vec<String> = case
            .lines
            .iter()
            .map(|l| {
                let class = if l.trim_start().starts_with("FAIL") {
                    " class=\"fail\""
                } else {
                    ""
                };
                format!("<span{class}>{}</span>", esc(l))
            })
            .collect();
        let _ = writeln!(out, "<pre>{}</pre>", lines.join("\n"));
    }
    out.push_str("</body></html>\n");
    out
}

/// Writes `report.html` and one `timeline-<CASE>.mmd` per multi-actor case into `dir`.
pub struct TimelineReporter {
    dir: PathBuf,
    events: Vec<Event>,
}

impl TimelineReporter {
    pub fn new(dir: PathBuf) -> Self {
        TimelineReporter {
            dir,
            events: Vec::new(),
        }
    }
}

impl Reporter for TimelineReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        self.events.push(event.clone());
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        write_atomically(&self.dir.join("report.html"), html(&self.events).as_bytes())?;
        for case in cases(&self.events).iter().filter(|c| c.is_multi_actor()) {
            write_atomically(
                &self.dir.join(format!("timeline-{}.mmd", case.id)),
                mermaid(case).as_bytes(),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at_ms: u64, mark: Mark, actor: &str, token: Option<i64>) -> Step {
        Step {
            case: "F4".into(),
            mark,
            at: Duration::from_millis(at_ms),
            actor: actor.into(),
            action: "act".into(),
            token,
            outcome: String::new(),
            db_clock: None,
        }
    }

    fn f4_like() -> CaseTimeline {
        CaseTimeline {
            id: "F4".into(),
            title: "paused".into(),
            steps: vec![
                step(0, Mark::Acquired, "A", Some(1)),
                step(400, Mark::Renewed, "A", Some(1)),
                step(800, Mark::Renewed, "A", Some(1)),
                step(3000, Mark::Frozen, "A", None),
                step(4300, Mark::LeaseExpired, "A", None),
                step(4400, Mark::Acquired, "B", Some(2)),
                step(4450, Mark::Write { accepted: true }, "B", Some(2)),
                step(4500, Mark::Released, "B", None),
                step(4600, Mark::Thawed, "A", None),
                step(4650, Mark::Write { accepted: false }, "A", Some(1)),
            ],
            lines: Vec::new(),
        }
    }

    #[test]
    fn holdings_and_frozen_intervals_follow_the_marks() {
        let case = f4_like();
        let (holdings, frozen) = spans(&case.steps, Duration::from_millis(4650));
        let ms = |s: &Span| {
            (
                s.actor.clone(),
                s.from.as_millis(),
                s.to.as_millis(),
                s.token,
            )
        };
        assert_eq!(
            holdings.iter().map(ms).collect::<Vec<_>>(),
            [
                ("A".into(), 0, 4300, Some(1)),
                ("B".into(), 4400, 4500, Some(2))
            ]
        );
        assert_eq!(
            frozen.iter().map(ms).collect::<Vec<_>>(),
            [("A".into(), 3000, 4600, None)]
        );
    }

    #[test]
    fn the_svg_shows_the_frozen_interval_and_each_write_with_its_verdict() {
        let svg = svg(&f4_like());
        assert!(svg.contains("frozen (SIGSTOP)"));
        assert!(svg.contains("✓ B t=2") && svg.contains("✗ A t=1"), "{svg}");
        assert!(svg.contains("holder A") && svg.contains("lease26"));
    }

    /// The report and the diagram of a run with every kind of step, as they were drawn before
    /// the lanes were declared: a case with the default lanes draws exactly this.
    #[test]
    fn the_sample_run_draws_the_committed_report_and_diagram() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut reporter = TimelineReporter::new(dir.path().to_owned());
        for event in crate::evidence::sample_run() {
            reporter.event(&event)?;
        }
        reporter.finish()?;
        for name in ["report.html", "timeline-F4.mmd"] {
            let drawn = std::fs::read_to_string(dir.path().join(name))?;
            crate::evidence::assert_snapshot(&format!("sample-{name}"), &drawn)?;
        }
        assert_eq!(
            std::fs::read_dir(dir.path())?.count(),
            2,
            "U1 has no actor: no diagram"
        );
        Ok(())
    }

    #[test]
    fn the_mermaid_diagram_collapses_renewals_and_names_the_verdicts() {
        let m = mermaid(&f4_like());
        assert!(m.starts_with("%% F4 :: paused\nsequenceDiagram\n"), "{m}");
        assert!(m.contains("A->>L: renew ×2"), "{m}");
        assert!(
            m.contains("R-->>A: rejected") && m.contains("R-->>B: accepted"),
            "{m}"
        );
        assert!(m.contains("Note over A: SIGSTOP"), "{m}");
    }
}
