//! The whole report, `report.html`: the environment, the verdict, and per case its picture and its
//! lines. Self-contained: no network, no script. It lays out what the events say and must not
//! decide anything.

use std::fmt::Write as _;

use super::{cases, svg, CaseTimeline};
use crate::evidence::escape::html as esc;
use crate::evidence::{render_text, Event, Lanes, Summary};

/// The whole report: environment, summary, and per case its picture and its lines.
pub fn html(events: &[Event]) -> String {
    html_with_preface(events, "")
}

/// [`html`], with `preface` (a section of HTML the run made, e.g. the library card) after the
/// verdict and before the cases.
pub fn html_with_preface(events: &[Event], preface: &str) -> String {
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
    out.push_str(preface);
    let cases = cases(events);
    let (stores, lease, resource) = legend_stores(&cases);
    let _ = writeln!(
        out,
        "<p>Lanes: one per holder, then {stores}. Coloured bars on \
         {lease}: who held the lease, from its grant until the database clock said it expired (or it was \
         released). Grey dashed boxes: a holder frozen by SIGSTOP. ✓/✗ on {resource}: a write accepted or \
         rejected, with its token. A red dashed line: the database crashed and restarted. Hover for details.</p>"
    );
    let _ = writeln!(out, "<table>{env}</table>");
    for case in cases {
        let _ = writeln!(
            out,
            "<h2 id=\"{0}\">CASE {0} :: {1}</h2>",
            esc(case.id),
            esc(case.title)
        );
        if case.is_multi_actor() {
            out.push_str(&svg(&case));
        }
        let lines: Vec<String> = case
            .said
            .iter()
            .filter_map(|event| {
                let line = render_text(event)?;
                let class = match event {
                    Event::Check(check) if !check.passed => " class=\"fail\"",
                    _ => "",
                };
                Some(format!("<span{class}>{}</span>", esc(&line)))
            })
            .collect();
        let _ = writeln!(out, "<pre>{}</pre>", lines.join("\n"));
    }
    out.push_str("</body></html>\n");
    out
}

/// How the legend names the stores' lanes: by name when every case has the same ones (the default
/// lanes when there is no case), in general terms when the cases differ.
fn legend_stores(cases: &[CaseTimeline]) -> (&'static str, String, String) {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for lanes in cases.iter().map(|c| c.lanes) {
        let pair = (lanes.lease.name.as_str(), lanes.resource.name.as_str());
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    let named = |(lease, resource): (&str, &str)| {
        let stores = if lease == resource {
            "the store that holds both the lease and the resource"
        } else {
            "the lease database and the resource database"
        };
        let italic = |name: &str| format!("<i>{}</i>", esc(name));
        (stores, italic(lease), italic(resource))
    };
    match pairs[..] {
        [] => {
            let default = Lanes::default();
            named((&default.lease.name, &default.resource.name))
        }
        [pair] => named(pair),
        _ => (
            "the lease store and the resource store",
            "the lease lane".into(),
            "the resource lane".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report marks a check red by its verdict (`Check::passed`), never by how it reads.
    #[test]
    fn the_report_marks_exactly_the_failed_checks() {
        let events = crate::evidence::testing::sample_run();
        let failed = events
            .iter()
            .filter(|event| matches!(event, Event::Check(c) if !c.passed))
            .count();
        let report = html(&events);
        assert_eq!(
            report.matches("<span class=\"fail\">  FAIL ").count(),
            failed
        );
        assert_eq!(report.matches("<span class=\"fail\">").count(), failed);
    }
}
