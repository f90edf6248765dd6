//! The SVG timeline of one case. It draws the case's [`Lanes`](crate::evidence::Lanes): a lane per
//! holder, then the lease store's lane and the resource's (one lane when they are one store). The
//! lease lane (`lease26` by default) shows each holding as the database clock judged it: from the
//! grant to the moment the lab's poll saw `expires_at <= now()` (or the release). A frozen
//! interval (SIGSTOP → SIGCONT) is shaded on its actor's lane; each write is marked on the
//! resource lane (`res26` by default), accepted (✓; ⚠ stale, in orange, when a greater token was
//! granted before it) or rejected (✗), with its token; a
//! crash-restart of the database crosses every lane, and the orchestrator's phases are marked
//! across every lane. The x axis is the lab's
//! monotonic clock, but not linear: each step's position is half its share of the elapsed time
//! and half its rank among the steps, so that steps milliseconds apart stay readable beside
//! seconds of waiting. The tick labels give the real times.
//!
//! It draws what the steps say and must not decide anything.

use std::fmt::Write as _;
use std::time::Duration;

use super::{esc, spans, CaseTimeline};
use crate::evidence::Mark;

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
    let orchestrator = case.lanes.orchestrator.as_str();
    // The lane labels, top to bottom: the holders, the lease store, the resource.
    let (lease, resource) = (&case.lanes.lease, &case.lanes.resource);
    // An actor named after its role already ("holder-a") is not called "holder holder-a".
    let mut lanes: Vec<String> = actors
        .iter()
        .map(|a| {
            if a.starts_with("holder") {
                a.to_string()
            } else {
                format!("holder {a}")
            }
        })
        .collect();
    let lease_lane = lanes.len();
    let resource_lane = if case.lanes.one_store() {
        if lease.label != resource.label {
            lanes.push(format!("{} / {}", lease.label, resource.label));
        } else {
            lanes.push(lease.label.clone());
        }
        lease_lane
    } else {
        lanes.push(lease.label.clone());
        lanes.push(resource.label.clone());
        lease_lane + 1
    };
    // The title, wrapped to the picture's width (never cut): the lanes start below its lines.
    let title_lines = wrap(&format!("{} — {}", case.id, case.title), TITLE_CHARS);
    let top = TOP + TITLE_LINE * (title_lines.len() - 1) as f64;
    let lane_y = |lane: usize| top + LANE * lane as f64;
    let actor_y = |actor: &str| lane_y(actors.iter().position(|a| *a == actor).unwrap_or(0));
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
    let height = top + LANE * lanes.len() as f64 + 40.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="DejaVu Sans, sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    for (i, line) in title_lines.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<text x="10" y="{}" font-size="14" font-weight="bold">{}</text>"#,
            20.0 + TITLE_LINE * i as f64,
            esc(line)
        );
    }
    // Lanes.
    for (i, lane) in lanes.iter().enumerate() {
        let y = top + LANE * i as f64;
        let fill = if i % 2 == 0 { "#f6f6f6" } else { "#ffffff" };
        let _ = writeln!(
            out,
            r#"<rect x="{X0}" y="{y}" width="{}" height="{LANE}" fill="{fill}"/>"#,
            X1 - X0
        );
        let _ = writeln!(
            out,
            r#"<text x="10" y="{}" font-weight="bold">{}</text>"#,
            y + LANE / 2.0 + 4.0,
            esc(lane)
        );
    }
    // Time axis.
    let axis_y = top + LANE * lanes.len() as f64;
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
                r##"<line x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{}" stroke="#ddd"/>"##,
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
        r##"<text x="{X1}" y="{}" text-anchor="end" fill="#666">the lab's monotonic clock, stretched where steps are close (see the ticks); lease holdings as the lease store judged them</text>"##,
        axis_y + 32.0
    );
    let (holdings, frozen) = spans(&case.steps, last);
    // Frozen intervals, shaded on their actor's lane.
    for f in &frozen {
        let (xa, xb) = (x(f.from), x(f.to));
        let y = actor_y(&f.actor);
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
    let ly = lane_y(lease_lane);
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
    let ry = lane_y(resource_lane);
    // The write labels' two rows: under the write marks, or, on a lane the holdings share,
    // under the holding bars.
    let write_rows = if resource_lane == lease_lane {
        [48.0, 58.0]
    } else {
        [30.0, 43.0]
    };
    let mut label_row = 0usize;
    let mut lane_rows: std::collections::HashMap<String, usize> = Default::default();
    // The greatest token granted so far: an accepted write below it is stale, drawn in a warning
    // colour, not as a success.
    let mut granted: Option<i64> = None;
    for s in &case.steps {
        if s.mark == Mark::Acquired {
            granted = granted.max(s.token);
        }
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
            Mark::Restart | Mark::Failover => {
                let _ = writeln!(
                    out,
                    r##"<line x1="{sx:.1}" y1="{top}" x2="{sx:.1}" y2="{axis_y}" stroke="#d93025" stroke-width="2" stroke-dasharray="6 3"><title>{title}</title></line>"##
                );
                let _ = writeln!(
                    out,
                    r##"<text x="{:.1}" y="{}" fill="#d93025" font-weight="bold">{}</text>"##,
                    sx + 4.0,
                    top - 4.0,
                    if s.mark == Mark::Failover {
                        "lease store failover"
                    } else {
                        "database crash + restart"
                    }
                );
            }
            Mark::Write { accepted } => {
                let stale = matches!((s.token, granted), (Some(t), Some(g)) if t < g);
                let (sym, fill) = match (accepted, stale) {
                    (true, true) => ("⚠ stale", "#e37400"),
                    (true, false) => ("✓", "#188038"),
                    (false, _) => ("✗", "#d93025"),
                };
                let token = s.token.map_or_else(String::new, |t| format!(" t={t}"));
                let y = ry + write_rows[label_row % 2];
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
                let ay = actor_y(&s.actor) + LANE / 2.0;
                let _ = writeln!(
                    out,
                    r#"<line x1="{sx:.1}" y1="{ay}" x2="{sx:.1}" y2="{}" stroke="{fill}" stroke-width="1.5" marker-end="url(#arrow)"><title>{title}</title></line>"#,
                    ry + 4.0
                );
            }
            // What the orchestrator marks: the start of a phase of the case.
            Mark::Info if s.actor == orchestrator => {
                let _ = writeln!(
                    out,
                    r##"<line x1="{sx:.1}" y1="{top}" x2="{sx:.1}" y2="{axis_y}" stroke="#80868b" stroke-dasharray="2 3"><title>{title}</title></line>"##
                );
                let _ = writeln!(
                    out,
                    r##"<text x="{:.1}" y="{}" fill="#5f6368"><title>{}</title>{}</text>"##,
                    sx + 3.0,
                    top - 4.0,
                    esc(&s.action),
                    esc(&short(&s.action))
                );
            }
            _ if s.actor == orchestrator => {}
            mark => {
                let y = actor_y(&s.actor) + LANE / 2.0;
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
                    Mark::Killed => Some("SIGKILL".into()),
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
                    // Shortened on the lane, whole on hover (and in the step table beside).
                    let _ = writeln!(
                        out,
                        r#"<text x="{lx:.1}" y="{ly}"{anchor}><title>{title}</title>{}</text>"#,
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

/// How many characters of the title fit on one line at its size, and the line's height.
const TITLE_CHARS: usize = 105;
const TITLE_LINE: f64 = 17.0;

/// `text` in lines of at most `width` characters, broken at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// A label short enough for a lane.
fn short(text: &str) -> String {
    match text.char_indices().nth(30) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::model::Event;
    use crate::evidence::timeline::cases;

    #[test]
    fn the_svg_shows_the_frozen_interval_and_each_write_with_its_verdict() {
        let svg = svg(&cases(&crate::evidence::testing::sample_run())[0]);
        assert!(svg.contains("frozen (SIGSTOP)"));
        assert!(svg.contains("✓ B t=2") && svg.contains("✗ A t=1"), "{svg}");
        assert!(svg.contains("holder A") && svg.contains("lease26"));
        assert!(!svg.contains("⚠ stale"), "{svg}");
    }

    #[test]
    fn a_long_title_wraps_whole_and_the_lanes_start_below_it() {
        let lines = wrap(&"word ".repeat(60), TITLE_CHARS);
        assert!(lines.len() > 2 && lines.iter().all(|l| l.chars().count() <= TITLE_CHARS));
        assert_eq!(lines.join(" ").trim(), "word ".repeat(60).trim());
    }

    #[test]
    fn an_accepted_write_below_a_token_granted_before_it_is_drawn_stale() {
        // The sample run with A's late write accepted, as an unfenced resource does (F5).
        let run: Vec<Event> = crate::evidence::testing::sample_run()
            .into_iter()
            .map(|e| match e {
                Event::Step(s) if s.mark == (Mark::Write { accepted: false }) => {
                    Event::Step(crate::evidence::model::Step {
                        mark: Mark::Write { accepted: true },
                        ..s
                    })
                }
                e => e,
            })
            .collect();
        let svg = svg(&cases(&run)[0]);
        assert!(svg.contains("⚠ stale A t=1"), "{svg}");
        assert!(svg.contains("✓ B t=2"), "{svg}");
    }
}
