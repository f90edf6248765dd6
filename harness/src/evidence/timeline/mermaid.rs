//! The Mermaid sequence diagram of one case (`timeline-<CASE>.mmd`): a participant per holder and
//! per store of the case's lanes (`L` the lease, `R` the resource, one participant when they are
//! one store), a message per step, consecutive renewals collapsed; the orchestrator's phases are
//! notes. It draws what the steps say
//! and must not decide anything.

use std::fmt::Write as _;

use super::CaseTimeline;
use crate::evidence::Mark;

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

/// The diagram's participants: the actors, then the stores — L the lease, R the resource, or L
/// alone when they are one store. Who a write goes to, and what a crash stops.
fn participants(case: &CaseTimeline, out: &mut String) -> (&'static str, &'static str) {
    for actor in case.actors() {
        let _ = writeln!(out, "    participant {} as {}", pid(actor), mtext(actor));
    }
    let (lease, resource) = (&case.lanes.lease, &case.lanes.resource);
    let _ = writeln!(out, "    participant L as {}", mtext(&lease.name));
    if case.lanes.one_store() {
        ("L", "L")
    } else {
        let _ = writeln!(out, "    participant R as {}", mtext(&resource.name));
        ("R", "L,R")
    }
}

/// The Mermaid sequence diagram of one case.
pub fn mermaid(case: &CaseTimeline) -> String {
    let mut out = format!("%% {} :: {}\nsequenceDiagram\n", case.id, mtext(case.title));
    let (r, crash_over) = participants(case, &mut out);
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
            Mark::Failover => {
                let _ = writeln!(
                    out,
                    "    Note over L: failover: the primary's host lost, the standby promoted"
                );
            }
            Mark::Killed => {
                let _ = writeln!(out, "    Note over {a}: SIGKILL: the process is gone");
            }
            Mark::Write { accepted } => {
                let verdict = if accepted { "accepted" } else { "rejected" };
                let _ = writeln!(
                    out,
                    "    {a}->>{r}: {} {token}\n    {r}-->>{a}: {verdict}",
                    mtext(&s.action)
                );
            }
            Mark::Restart => {
                let _ = writeln!(
                    out,
                    "    Note over {crash_over}: immediate stop (crash), WAL recovery, restart"
                );
            }
            Mark::Info if s.actor == case.lanes.orchestrator => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::timeline::cases;

    #[test]
    fn the_mermaid_diagram_collapses_renewals_and_names_the_verdicts() {
        let m = mermaid(&cases(&crate::evidence::testing::sample_run())[0]);
        assert!(
            m.starts_with("%% F4 :: the paused old holder & its stale write\nsequenceDiagram\n"),
            "{m}"
        );
        assert!(m.contains("A->>L: renew ×2"), "{m}");
        assert!(
            m.contains("R-->>A: rejected") && m.contains("R-->>B: accepted"),
            "{m}"
        );
        assert!(m.contains("Note over A: SIGSTOP"), "{m}");
    }
}
