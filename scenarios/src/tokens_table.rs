//! The tokens table (`tokens.md` in a run's evidence): for each lock service's token, the way
//! it goes back, whether this run saw it go back, the remedy, whether the remedy held, and what
//! the remedy costs — every yes/no cell read off a check of the R- and RL-series in this run's
//! own event stream (a row whose experiment did not run says so; a failed check says NO).
//! Written only when one of those experiments ran.

use std::io;
use std::path::PathBuf;

use harness::evidence::{Check, Event, Reporter};

/// One check of the run, found by its case and two pieces of its description (its run's label
/// and its claim).
struct Seen {
    case: &'static str,
    label: &'static str,
    claim: &'static str,
}

/// One row of the table.
struct Row {
    token: &'static str,
    goes_back: &'static str,
    seen: Seen,
    remedy: &'static str,
    held: Seen,
    cost: &'static str,
}

const fn seen(case: &'static str, label: &'static str, claim: &'static str) -> Seen {
    Seen { case, label, claim }
}

const ROWS: [Row; 6] = [
    Row {
        token: "ZooKeeper: the lock node's sequence suffix",
        goes_back: "the empty container parent is deleted; the next parent counts from 0 again",
        seen: seen("R1", "[zookeeper-suffix]", "B is granted A's suffix again"),
        remedy: "the node's czxid as the token",
        held: seen("R1", "[zookeeper]", "B's token is greater than A's"),
        cost: "none: another field of the same node's stat",
    },
    Row {
        token: "Redis (Sentinel): INCR of a counter key",
        goes_back: "the primary is lost before it replicates; Sentinel promotes the replica",
        seen: seen("R2", "[redis, replica cut off]", "grants A's token again"),
        remedy: "WAIT 1 before the token is used",
        held: seen("R2", "[redis-wait]", "A's grant survived the failover"),
        cost: "a replica's round trip per grant; with no replica answering, no grant (WAIT times out); no consensus",
    },
    Row {
        token: "etcd: the key's create revision",
        goes_back: "the cluster is restored from an older snapshot",
        seen: seen("R3", "", "the cluster's revision goes back"),
        remedy: "raise the revision past the one before the restore, before any client",
        held: seen("R3", "", "is greater than A's"),
        cost: "the operator must know the revision before the restore (3.5's --bump-revision)",
    },
    Row {
        token: "Redlock: INCR of a counter on each server",
        goes_back: "a server restarts without persistence and forgets the counter",
        seen: seen("RL3", "[redlock-fenced]", "forgot its counter"),
        remedy: "a restart delayed by a TTL (antirez)",
        held: seen("RL3", "[redlock, delayed restart]", "B cannot win a majority"),
        cost: "a restarted server unavailable for the longest TTL",
    },
    Row {
        token: "Redlock: INCR of a counter on each server",
        goes_back: "never, when a server's clock jumps — but the key expires early there and two clients hold a majority at once",
        seen: seen("RL2", "[redlock]", "A and B each hold a lock a majority granted"),
        remedy: "the counter token (it has no TTL)",
        held: seen("RL2", "[redlock-fenced]", "the counter outlived the jump"),
        cost: "a counter per server, taken in the SET's script",
    },
    Row {
        token: "Redlock: the lock's random value, checked by the resource (antirez's check-and-set)",
        goes_back: "never repeats; but a claim is unconditional — a stale holder's late claim takes the resource back",
        seen: seen("RL1", "[check-and-set beside the fence]", "late claim takes the resource back"),
        remedy: "a monotonic token at the resource",
        held: seen("RL1", "[check-and-set beside the fence]", "the fence rejects A by its token"),
        cost: "a token the lock service must keep monotonic (the rows above)",
    },
];

/// Writes `tokens.md` at the end of a run that ran an R- or RL-experiment.
pub struct TokensTable {
    path: PathBuf,
}

impl TokensTable {
    /// The table goes to `path` (a run's `tokens.md`).
    pub fn new(path: PathBuf) -> Self {
        TokensTable { path }
    }
}

/// The cell of `seen` in `checks`: `yes — …`, `**NO** — …`, or why it is empty.
fn cell(seen: &Seen, checks: &[&Check], ran: &[String]) -> String {
    if !ran.iter().any(|c| c == seen.case) {
        return format!("not run ({} did not run)", seen.case);
    }
    let found = checks.iter().find(|c| {
        c.case == seen.case
            && c.description.contains(seen.label)
            && c.description.contains(seen.claim)
    });
    match found {
        Some(c) if c.passed => format!("yes — {}: {}", seen.case, one_line(&c.description)),
        Some(c) => format!(
            "**NO** — {}: failed: {} ({})",
            seen.case,
            one_line(&c.description),
            one_line(&c.actual)
        ),
        None => format!("**NO** — {} ran without this check", seen.case),
    }
}

fn one_line(s: &str) -> String {
    harness::evidence::escape::markdown_cell(s)
}

/// The table, from a run's events; `None` when none of its experiments ran.
pub fn render(events: &[Event]) -> Option<String> {
    let ran: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::CaseStarted { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    let checks: Vec<&Check> = events
        .iter()
        .filter_map(|e| match e {
            Event::Check(c) => Some(c),
            _ => None,
        })
        .collect();
    let cases = ["R1", "R2", "R3", "RL1", "RL2", "RL3"];
    if !cases.iter().any(|c| ran.iter().any(|r| r == c)) {
        return None;
    }
    let mut out = String::from(
        "# Tokens: how each goes back, and what keeps it monotonic\n\n\
         Each yes/NO is a check of this run (R1–R3, RL1–RL3; the check's words beside it). The \
         SQL lease table's own cases are F11 (the table reset by hand) and F14/F17 (an \
         asynchronous failover).\n\n\
         | token | goes back when | seen in this run | remedy | the remedy held | what the remedy costs |\n\
         |---|---|---|---|---|---|\n",
    );
    for row in &ROWS {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            row.token,
            row.goes_back,
            cell(&row.seen, &checks, &ran),
            row.remedy,
            cell(&row.held, &checks, &ran),
            row.cost
        ));
    }
    Some(out)
}

impl Reporter for TokensTable {
    fn finish(&mut self, events: &[Event]) -> io::Result<()> {
        match render(events) {
            Some(table) => harness::evidence::write_atomically(&self.path, table.as_bytes()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::evidence::CheckKind;

    fn check(case: &str, description: &str, passed: bool) -> Event {
        Event::Check(Check {
            case: case.into(),
            kind: CheckKind::Condition,
            description: description.into(),
            expected: String::new(),
            actual: "what was seen".into(),
            passed,
        })
    }

    fn started(id: &str) -> Event {
        Event::CaseStarted {
            id: id.into(),
            title: String::new(),
            lanes: Default::default(),
        }
    }

    #[test]
    fn nothing_without_the_series() {
        assert!(render(&[started("F1"), check("F1", "x", true)]).is_none());
    }

    #[test]
    fn a_passed_check_says_yes_a_failed_one_no_and_a_missing_case_not_run() {
        let table = render(&[
            started("R1"),
            check(
                "R1",
                "[zookeeper-suffix] negative control exposes: the parent made anew, B is granted A's suffix again",
                true,
            ),
            check("R1", "[zookeeper] B's token is greater than A's: the czxid", false),
        ])
        .expect("R1 ran");
        let zk = table
            .lines()
            .find(|l| l.starts_with("| ZooKeeper"))
            .expect("the ZooKeeper row");
        assert!(zk.contains("| yes — R1: [zookeeper-suffix]"), "{zk}");
        assert!(
            zk.contains("| **NO** — R1: failed: [zookeeper] B's token"),
            "{zk}"
        );
        let etcd = table
            .lines()
            .find(|l| l.starts_with("| etcd"))
            .expect("etcd");
        assert!(etcd.contains("not run (R3 did not run)"), "{etcd}");
    }

    #[test]
    fn a_case_that_ran_without_the_check_says_no() {
        let table = render(&[started("R3"), check("R3", "something else", true)]).expect("R3");
        let etcd = table
            .lines()
            .find(|l| l.starts_with("| etcd"))
            .expect("etcd");
        assert!(
            etcd.contains("**NO** — R3 ran without this check"),
            "{etcd}"
        );
    }
}
