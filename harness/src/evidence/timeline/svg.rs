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

use super::{spans, CaseTimeline};
use crate::evidence::escape::html as esc;
use crate::evidence::{Mark, Step};

/// One colour per holder lane (eight before one repeats; U1 has five holders).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#e6750f", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];
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

    /// The time at position `p` (0..=1): the inverse of [`Axis::pos`].
    fn time_at(&self, p: f64) -> f64 {
        let k = &self.knots;
        let i = k
            .windows(2)
            .position(|w| p <= w[1].1)
            .unwrap_or(k.len() - 2);
        let ((ta, pa), (tb, pb)) = (k[i], k[i + 1]);
        ta + (p - pa) / (pb - pa) * (tb - ta)
    }

    fn end_ms(&self) -> f64 {
        self.knots.last().map_or(0.0, |k| k.0)
    }
}

/// Where each lane's labels already are (x from, x to, baseline y), by the lane's actor: a new
/// label takes the first of its rows where it overlaps none.
type Placed = std::collections::HashMap<String, Vec<(f64, f64, f64)>>;

/// One case's picture: where its lanes, its axis and its steps go.
struct Picture<'c, 'a> {
    case: &'c CaseTimeline<'a>,
    actors: Vec<&'c str>,
    orchestrator: &'c str,
    /// The lane labels, top to bottom: the holders, the lease store, the resource.
    lanes: Vec<String>,
    lease_lane: usize,
    resource_lane: usize,
    /// The title, wrapped to the picture's width (never cut): the lanes start below its lines.
    title_lines: Vec<String>,
    top: f64,
    first: Duration,
    last: Duration,
    axis: Axis,
    span_ms: f64,
}

impl<'c, 'a> Picture<'c, 'a> {
    fn new(case: &'c CaseTimeline<'a>) -> Self {
        let actors = case.actors();
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
        let title_lines = wrap(&format!("{} — {}", case.id, case.title), TITLE_CHARS);
        let top = TOP + TITLE_LINE * (title_lines.len() - 1) as f64;
        let first = case.steps.first().map_or(Duration::ZERO, |s| s.at);
        let last = case.steps.last().map_or(first, |s| s.at);
        let ms = |at: Duration| (at.as_secs_f64() - first.as_secs_f64()) * 1000.0;
        let axis = Axis::new(&case.steps.iter().map(|s| ms(s.at)).collect::<Vec<_>>());
        let span_ms = axis.end_ms().max(1.0);
        Picture {
            case,
            actors,
            orchestrator: case.lanes.orchestrator.as_str(),
            lanes,
            lease_lane,
            resource_lane,
            title_lines,
            top,
            first,
            last,
            axis,
            span_ms,
        }
    }

    fn lane_y(&self, lane: usize) -> f64 {
        self.top + LANE * lane as f64
    }

    fn actor_y(&self, actor: &str) -> f64 {
        self.lane_y(self.actors.iter().position(|a| *a == actor).unwrap_or(0))
    }

    fn color(&self, actor: &str) -> &'static str {
        PALETTE[self.actors.iter().position(|a| *a == actor).unwrap_or(0) % PALETTE.len()]
    }

    fn ms(&self, at: Duration) -> f64 {
        (at.as_secs_f64() - self.first.as_secs_f64()) * 1000.0
    }

    /// 2 % of margin on each side.
    fn xpos(&self, ms: f64) -> f64 {
        X0 + (0.02 + 0.96 * self.axis.pos(ms)) * (X1 - X0)
    }

    fn x(&self, at: Duration) -> f64 {
        self.xpos(self.ms(at))
    }

    fn axis_y(&self) -> f64 {
        self.top + LANE * self.lanes.len() as f64
    }

    fn head(&self, out: &mut String) {
        let height = self.top + LANE * self.lanes.len() as f64 + 40.0;
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="DejaVu Sans, sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            out,
            r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
        );
        for (i, line) in self.title_lines.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="10" y="{}" font-size="14" font-weight="bold">{}</text>"#,
                20.0 + TITLE_LINE * i as f64,
                esc(line)
            );
        }
    }

    fn lanes(&self, out: &mut String) {
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = self.top + LANE * i as f64;
            let fill = if i % 2 == 0 { "#f6f6f6" } else { "#ffffff" };
            let _ = writeln!(
                out,
                r#"<rect x="{X0}" y="{y}" width="{}" height="{LANE}" fill="{fill}"/>"#,
                X1 - X0
            );
            // Wrapped to the space left of the lane (never over it), the whole label on hover.
            let mut lines = wrap(lane, LANE_LABEL_CHARS);
            if lines.len() > 3 {
                lines.truncate(3);
                lines[2] = short_to(&lines[2], LANE_LABEL_CHARS - 1);
            }
            let first_y = y + LANE / 2.0 + 4.0 - LANE_LABEL_LINE * (lines.len() - 1) as f64 / 2.0;
            let tspans: String = lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    format!(
                        r#"<tspan x="10" y="{}">{}</tspan>"#,
                        first_y + LANE_LABEL_LINE * i as f64,
                        esc(l)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                r#"<text font-weight="bold"><title>{}</title>{tspans}</text>"#,
                esc(lane)
            );
        }
    }

    fn time_axis(&self, out: &mut String) {
        let (top, axis_y) = (self.top, self.axis_y());
        let tick = tick_ms(self.span_ms);
        let _ = writeln!(
            out,
            r##"<line x1="{X0}" y1="{axis_y}" x2="{X1}" y2="{axis_y}" stroke="#444"/>"##
        );
        for t in ticks(&self.axis, self.span_ms, tick, &|ms| self.xpos(ms)) {
            let tx = self.xpos(t);
            let _ = writeln!(
                out,
                r##"<line x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{}" stroke="#ddd"/>"##,
                axis_y + 4.0
            );
            let _ = writeln!(
                out,
                r##"<text x="{tx:.1}" y="{}" text-anchor="middle" fill="#444">+{} ms</text>"##,
                axis_y + 16.0,
                tick_label(t)
            );
        }
        let _ = writeln!(
            out,
            r##"<text x="{X1}" y="{}" text-anchor="end" fill="#666">the lab's monotonic clock, stretched where steps are close (see the ticks); lease holdings as the lease store judged them</text>"##,
            axis_y + 32.0
        );
    }

    /// Frozen intervals, shaded on their actor's lane.
    fn frozen(&self, out: &mut String, frozen: &[super::Span], placed: &mut Placed) {
        for f in frozen {
            let (xa, xb) = (self.x(f.from), self.x(f.to));
            let y = self.actor_y(&f.actor);
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
            placed.entry(f.actor.clone()).or_default().push((
                xa + 4.0,
                xa + 4.0 + text_width("frozen (SIGSTOP)"),
                y + LANE - 10.0,
            ));
        }
    }

    /// Lease holdings on the lease lane.
    fn holdings(&self, out: &mut String, holdings: &[super::Span]) {
        let ly = self.lane_y(self.lease_lane);
        for h in holdings {
            let (xa, xb) = (self.x(h.from), self.x(h.to));
            let token = h.token.map_or_else(String::new, |t| format!(" token={t}"));
            let _ = writeln!(
                out,
                r#"<rect x="{xa:.1}" y="{}" width="{:.1}" height="20" rx="3" fill="{}" fill-opacity="0.75"><title>{} holds the lease{token}</title></rect>"#,
                ly + 16.0,
                (xb - xa).max(2.0),
                self.color(&h.actor),
                esc(&h.actor)
            );
            // White on the bar: as much of "A token=1" as fits in it (the whole on hover).
            let width = (xb - xa).max(2.0) - 6.0;
            let whole = format!("{}{token}", h.actor);
            let label = if text_width(&whole) <= width {
                whole
            } else if text_width(&h.actor) <= width {
                h.actor.clone()
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{}" fill="#fff" font-weight="bold">{}</text>"##,
                xa + 4.0,
                ly + 30.0,
                esc(&label)
            );
        }
    }

    /// Each step: the marks across every lane, the writes on the resource lane, each actor's
    /// own steps on its lane.
    fn steps(&self, out: &mut String, placed: &mut Placed) {
        let orchestrator = self.orchestrator;
        // The write labels' two rows: under the write marks, or, on a lane the holdings share,
        // under the holding bars.
        let write_rows = if self.resource_lane == self.lease_lane {
            [48.0, 58.0]
        } else {
            [30.0, 43.0]
        };
        let mut label_row = 0usize;
        // The marks across every lane (the orchestrator's phases, a crash, a failover) label the
        // strip above the lanes: each label is cut to end before the next mark's (whole on hover).
        let across: Vec<f64> = self
            .case
            .steps
            .iter()
            .filter(|s| {
                matches!(s.mark, Mark::Restart | Mark::Failover)
                    || (s.mark == Mark::Info && s.actor == orchestrator)
            })
            .map(|s| self.x(s.at))
            .collect();
        let room = |sx: f64| {
            let next = across
                .iter()
                .copied()
                .find(|&n| n > sx + 1.0)
                .unwrap_or(WIDTH);
            ((next - sx - 8.0) / 6.3).floor().max(1.0) as usize
        };
        // The greatest token granted so far: an accepted write below it is stale, drawn in a
        // warning colour, not as a success.
        let mut granted: Option<i64> = None;
        for s in &self.case.steps {
            if s.mark == Mark::Acquired {
                granted = granted.max(s.token);
            }
            let sx = self.x(s.at);
            let title = esc(&format!(
                "+{:.1} ms {} {} {}{}{}",
                self.ms(s.at),
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
                    self.across_every_lane(out, s.mark, sx, &title, room(sx));
                }
                Mark::Write { accepted } => {
                    let stale = matches!((s.token, granted), (Some(t), Some(g)) if t < g);
                    let verdict = match (accepted, stale) {
                        (true, true) => ("⚠ stale", "#e37400"),
                        (true, false) => ("✓", "#188038"),
                        (false, _) => ("✗", "#d93025"),
                    };
                    let row = write_rows[label_row % 2];
                    label_row += 1;
                    self.write(out, s, verdict, sx, &title, row);
                }
                // What the orchestrator marks: the start of a phase of the case.
                Mark::Info if s.actor == orchestrator => {
                    let (top, axis_y) = (self.top, self.axis_y());
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
                        esc(&short_to(&s.action, room(sx).min(30)))
                    );
                }
                _ if s.actor == orchestrator => {}
                mark => self.on_its_lane(out, s, mark, sx, &title, placed),
            }
        }
    }

    /// A database crash or a lease store's failover: a line across every lane, labelled above
    /// them in `room` characters.
    fn across_every_lane(&self, out: &mut String, mark: Mark, sx: f64, title: &str, room: usize) {
        let (top, axis_y) = (self.top, self.axis_y());
        let _ = writeln!(
            out,
            r##"<line x1="{sx:.1}" y1="{top}" x2="{sx:.1}" y2="{axis_y}" stroke="#d93025" stroke-width="2" stroke-dasharray="6 3"><title>{title}</title></line>"##
        );
        let label = if mark == Mark::Failover {
            "lease store failover"
        } else {
            "database crash + restart"
        };
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{}" fill="#d93025" font-weight="bold"><title>{label}</title>{}</text>"##,
            sx + 4.0,
            top - 4.0,
            esc(&short_to(label, room))
        );
    }

    /// A write on the resource lane, drawn as its verdict says (`(symbol, colour)`: accepted ✓,
    /// ⚠ stale below a token granted before it, or rejected ✗), its label on `row`, an arrow
    /// from its actor's lane.
    fn write(
        &self,
        out: &mut String,
        s: &Step,
        (sym, fill): (&str, &str),
        sx: f64,
        title: &str,
        row: f64,
    ) {
        let ry = self.lane_y(self.resource_lane);
        let token = s.token.map_or_else(String::new, |t| format!(" t={t}"));
        let y = ry + row;
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
        let ay = self.actor_y(&s.actor) + LANE / 2.0;
        let _ = writeln!(
            out,
            r#"<line x1="{sx:.1}" y1="{ay}" x2="{sx:.1}" y2="{}" stroke="{fill}" stroke-width="1.5" marker-end="url(#arrow)"><title>{title}</title></line>"#,
            ry + 4.0
        );
    }

    /// A step of an actor on its own lane: a dot, and a short label where one says more.
    fn on_its_lane(
        &self,
        out: &mut String,
        s: &Step,
        mark: Mark,
        sx: f64,
        title: &str,
        placed: &mut Placed,
    ) {
        let y = self.actor_y(&s.actor) + LANE / 2.0;
        let r = if mark == Mark::Renewed { 2.5 } else { 4.0 };
        let _ = writeln!(
            out,
            r#"<circle cx="{sx:.1}" cy="{y}" r="{r}" fill="{}"><title>{title}</title></circle>"#,
            self.color(&s.actor)
        );
        let label = match mark {
            Mark::Acquired => s.token.map(|t| format!("acquire → {t}")),
            // What was refused, in its verb: "acquire refused", "renew refused", …
            Mark::Refused => Some(match s.action.split_whitespace().next() {
                Some(verb) => format!("{verb} refused"),
                None => "refused".into(),
            }),
            Mark::Released => Some("release".into()),
            Mark::LeaseExpired => Some("lease expired".into()),
            // The shaded box says it.
            Mark::Frozen => None,
            Mark::Info => Some(short(&s.action)),
            Mark::Thawed => Some("go + SIGCONT".into()),
            Mark::Killed => Some("SIGKILL".into()),
            _ => None,
        };
        let Some(full) = label else {
            return;
        };
        let (lx, anchor) = if sx > X1 - 110.0 {
            (sx - 2.0, r#" text-anchor="end""#)
        } else {
            (sx + 2.0, "")
        };
        let span = |label: &str| {
            let width = text_width(label);
            if anchor.is_empty() {
                (lx, lx + width)
            } else {
                (lx - width, lx)
            }
        };
        // Above, below, high above, low below the dot: the first row where the label overlaps
        // no other label of the lane; where every row is taken, the label cut short (whole on
        // hover) in the least crowded one.
        let lane = placed.entry(s.actor.clone()).or_default();
        let clashes = |row: f64, (from, to): (f64, f64)| {
            lane.iter()
                .filter(|(a, b, r)| (r - row).abs() < 11.0 && *a < to && from < *b)
                .count()
        };
        let rows = [y - 9.0, y + 17.0, y - 20.0, y + 28.0];
        let best = |label: &str| {
            rows.into_iter()
                .map(|row| (clashes(row, span(label)), row))
                .min_by(|a, b| a.0.cmp(&b.0))
                .unwrap_or((0, y - 9.0))
        };
        let (label, ly) = match best(&full) {
            (0, row) => (full.clone(), row),
            (crowd, row) => {
                let cut = short_to(&full, 12);
                match best(&cut) {
                    (fewer, cut_row) if fewer < crowd => (cut, cut_row),
                    _ => (full.clone(), row),
                }
            }
        };
        let (from, to) = span(&label);
        lane.push((from, to, ly));
        // Shortened on the lane, whole on hover (and in the step table beside).
        let _ = writeln!(
            out,
            r#"<text x="{lx:.1}" y="{ly}"{anchor}><title>{title}</title>{}</text>"#,
            esc(&label)
        );
    }
}

/// The SVG timeline of one case.
pub fn svg(case: &CaseTimeline) -> String {
    let picture = Picture::new(case);
    let mut out = String::new();
    picture.head(&mut out);
    picture.lanes(&mut out);
    picture.time_axis(&mut out);
    let (holdings, frozen) = spans(&case.steps, picture.last);
    let mut placed = Placed::default();
    picture.frozen(&mut out, &frozen, &mut placed);
    picture.holdings(&mut out, &holdings);
    picture.steps(&mut out, &mut placed);
    let _ = writeln!(
        out,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>"##
    );
    out.push_str("</svg>\n");
    out
}

/// The times the axis labels: every `tick` ms where there is room (56 px) — fewer where the
/// axis is squeezed — then, where the axis is stretched (steps close in time spread out) and
/// more than 150 px pass without a label, labels at that stretch's own times; and the end.
fn ticks(axis: &Axis, span_ms: f64, tick: f64, xpos: &dyn Fn(f64) -> f64) -> Vec<f64> {
    const ROOM: f64 = 56.0;
    const GAP: f64 = 150.0;
    let mut at: Vec<f64> = Vec::new();
    let mut t = 0.0;
    while t <= span_ms {
        if at.last().is_none_or(|&l| xpos(t) - xpos(l) >= ROOM) {
            at.push(t);
        }
        t += tick;
    }
    if at.last().is_some_and(|&l| xpos(span_ms) - xpos(l) >= ROOM) {
        at.push(span_ms);
    }
    let to_pos = |x: f64| ((x - X0) / (X1 - X0) - 0.02) / 0.96;
    let mut filled = Vec::with_capacity(at.len());
    for w in at.windows(2) {
        filled.push(w[0]);
        let (xa, xb) = (xpos(w[0]), xpos(w[1]));
        let n = ((xb - xa) / (GAP * 0.75)).ceil() as usize;
        if xb - xa > GAP {
            for i in 1..n {
                let x = xa + (xb - xa) * i as f64 / n as f64;
                filled.push(axis.time_at(to_pos(x)));
            }
        }
    }
    filled.extend(at.last());
    filled
}

/// A tick's time: whole milliseconds when it is one, else to a tenth (a hundredth below 1 ms).
fn tick_label(t: f64) -> String {
    if (t - t.round()).abs() < 1e-6 {
        format!("{t:.0}")
    } else if t < 1.0 {
        format!("{t:.2}")
    } else {
        format!("{t:.1}")
    }
}

/// How many characters of a lane's label fit left of the lane, and the line's height.
const LANE_LABEL_CHARS: usize = 18;
const LANE_LABEL_LINE: f64 = 12.0;

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

/// About how wide `text` is drawn at the lanes' 11 px (DejaVu Sans: 6.3 px a character).
fn text_width(text: &str) -> f64 {
    6.3 * text.chars().count() as f64
}

/// A label short enough for a lane.
fn short(text: &str) -> String {
    short_to(text, 30)
}

/// `text` cut to `n` characters and an ellipsis, when longer.
fn short_to(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
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
    fn the_ticks_reach_the_end_of_a_stretched_axis_with_no_long_gap() {
        // U1's shape: two steps half a second apart, then forty within 50 ms — by rank, the
        // last 50 ms take most of the width; the 100 ms ticks alone stop at +500 ms.
        let mut times = vec![0.0, 500.0];
        times.extend((0..40).map(|i| 500.0 + 1.25 * f64::from(i + 1)));
        let axis = Axis::new(&times);
        let span = axis.end_ms();
        let xpos = |ms: f64| X0 + (0.02 + 0.96 * axis.pos(ms)) * (X1 - X0);
        let at = ticks(&axis, span, tick_ms(span), &xpos);
        assert_eq!(at.first(), Some(&0.0));
        assert_eq!(at.last(), Some(&span), "{at:?}");
        let xs: Vec<f64> = at.iter().map(|&t| xpos(t)).collect();
        assert!(
            xs.windows(2)
                .all(|w| w[1] - w[0] <= 150.0 && w[1] - w[0] > 20.0),
            "{xs:?}"
        );
        // The inverse of the axis, at every tick.
        for &t in &at {
            assert!((axis.time_at(axis.pos(t)) - t).abs() < 1e-6, "{t}");
        }
    }

    #[test]
    fn labels_close_together_on_a_lane_take_rows_where_they_do_not_overlap() {
        // The sample run's F4: on A's lane, "lease expired", "go + SIGCONT" and the labels
        // around the frozen box stand close; no two of A's labels may overlap.
        let svg = svg(&cases(&crate::evidence::testing::sample_run())[0]);
        let boxes: Vec<(f64, f64, f64)> = svg.lines().filter_map(label_box).collect();
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                let overlap = (a.2 - b.2).abs() < 11.0 && a.0 < b.1 && b.0 < a.1;
                assert!(!overlap, "{a:?} and {b:?} overlap in {svg}");
            }
        }
        assert!(boxes.len() >= 3, "{svg}");
    }

    /// A step label's box (x from, x to, y) from its `<text>` line, for the lane of holder A.
    fn label_box(line: &str) -> Option<(f64, f64, f64)> {
        let attr = |name: &str| -> Option<f64> {
            let at = line.find(&format!("{name}=\""))? + name.len() + 2;
            line[at..].split('"').next()?.parse().ok()
        };
        if !line.starts_with("<text x=") || !line.contains("</title>") {
            return None;
        }
        let (x, y) = (attr("x")?, attr("y")?);
        // Holder A's lane is the first: y within 44..104.
        if !(44.0..104.0).contains(&y) {
            return None;
        }
        let text = line.split("</title>").nth(1)?.trim_end_matches("</text>");
        let width = text_width(text);
        Some(if line.contains("text-anchor=\"end\"") {
            (x - width, x, y)
        } else {
            (x, x + width, y)
        })
    }

    #[test]
    fn a_long_lane_label_wraps_left_of_the_lane_whole_on_hover() {
        let label = "fencing (MariaDB: job lease and runs)";
        let lines = wrap(label, LANE_LABEL_CHARS);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= LANE_LABEL_CHARS));
        // 6.5 px a character at 11 px bold: the widest line ends before the lane starts.
        assert!(10.0 + 6.5 * LANE_LABEL_CHARS as f64 <= X0);
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
