//! `lab run --step`: the classroom. A reporter that, at each phase of an experiment's timeline
//! (every step but the background renewals), prints what just happened and what it means, the
//! SQL that shows the state and the `psql` command that connects to the running cluster — or, in
//! the U-series, the `mariadb` command that connects to its MariaDB — then asks for a pause before
//! the lab's next action ([`harness::wait::pause_before_next_action`]): the step's checks are made
//! and printed first, then the lab stands still at its next action (a holder started, sent a line,
//! frozen, thawed or killed; a lease acquired, renewed or released; a write; a server crashed; a
//! wait begun — [`harness::wait::before_action`], and `scenarios::testbed::stepped` for the lab's own
//! clients) until Enter. A pause no action took (the next phase or the case's end came first) is
//! taken by [`PauseGate`], first among the reporters, before the next line is printed.
//!
//! While it waits the experiment stands still — the database clock does not: a lease keeps
//! running out. Ctrl-C while it waits ends the wait at once and the run is interrupted as any run
//! is: every holder thawed and stopped, the cluster removed. When stdin closes, it stops pausing
//! and the run goes on. It writes to stderr; the evidence is the same as without it.

use std::io::{self, Write as _};
use std::sync::{Arc, Mutex};

use harness::evidence::{Event, Mark, Reporter, Step};
use harness::server::Cluster;

/// The state of the lease store, for the reader to query.
const LEASE_SQL: &str =
    "SELECT name, holder, token, expires_at, expires_at <= now() AS expired, now() FROM lease";
/// The state of the resource, for the reader to query.
const RESOURCE_SQL: [&str; 3] = [
    "SELECT scope, max_token FROM fence_floor",
    "SELECT scope, part, writer, token, content FROM report_part ORDER BY part",
    "SELECT id, part, writer, token, mode, accepted FROM write_attempt ORDER BY id",
];

/// Terms a step may show, each explained the first time it appears in a run.
const GLOSSARY: [(&str, &str); 8] = [
    (
        "go-line",
        "the lab's go-ahead: one line written to the holder's stdin; the holder takes its next step only then",
    ),
    (
        "AT_WRITE_POINT",
        "the holder's report that it passed its local-deadline check and stands at its write, holding its token",
    ),
    (
        "deadline_left_ms",
        "how long the holder's local deadline (TTL minus the safety margin, by its own monotonic clock) still had to run",
    ),
    (
        "SIGSTOP",
        "the signal that freezes a process at once, every thread; it cannot be caught",
    ),
    (
        "SIGCONT",
        "the signal that lets a frozen process go on where it stopped",
    ),
    (
        "=T",
        "a thread's state in /proc: T is stopped (frozen), S sleeping (alive, waiting), R running",
    ),
    (
        "RENEW_AFTER_WRITE",
        "the holder renews once after its write, to learn whether it still held the lease",
    ),
    (
        "token",
        "the fencing token: a number the lease store gives each grant, greater after every takeover; the resource refuses a write whose token is below one it has accepted",
    ),
];

pub struct StepReporter {
    /// Run once in a terminal, so that the `psql` commands below are short.
    connect: String,
    /// The glossary's terms explained so far in this run.
    explained: Vec<&'static str>,
    /// The `mariadb` command line of the U-series' server, once it runs.
    maria_client: Arc<Mutex<Option<String>>>,
    /// The state of the job lease and its runs (the U-series), for the reader to query.
    jobs_sql: [String; 2],
    /// The case being stepped through and how many steps of it were shown.
    case: String,
    shown: usize,
    /// False once stdin closed or the run was interrupted: no more pauses.
    pausing: bool,
}

impl StepReporter {
    /// Steps through the experiments of the lab whose cluster is `cluster`; the U-series' on
    /// the MariaDB that `maria_client` connects to once it runs, in the tables of `jobs`.
    pub fn new(
        cluster: &Cluster,
        maria_client: Arc<Mutex<Option<String>>>,
        jobs: &fencing::profile::JobProfile,
    ) -> StepReporter {
        let psql = cluster.binaries().bin("psql");
        let path = match psql.parent() {
            Some(dir) if psql.is_file() => format!("PATH={}:$PATH ", dir.display()),
            _ => String::new(),
        };
        StepReporter {
            connect: format!(
                "export {path}PGHOST={} PGPORT={} PGUSER={}",
                cluster.socket_dir().display(),
                cluster.port(),
                harness::server::SUPERUSER
            ),
            explained: Vec::new(),
            maria_client,
            jobs_sql: [
                format!(
                    "SELECT *, CURRENT_TIMESTAMP(3) AS now FROM {}",
                    jobs.lease.table
                ),
                format!("SELECT * FROM {}", jobs.runs.table),
            ],
            case: String::new(),
            shown: 0,
            pausing: true,
        }
    }

    /// The block shown at `step`.
    fn block(&mut self, step: &Step) -> String {
        let token = step
            .token
            .map(|t| format!(" token={t}"))
            .unwrap_or_default();
        let outcome = if step.outcome.is_empty() {
            String::new()
        } else {
            format!(" → {}", step.outcome)
        };
        // The database clock's reading, said once ("lease expired (database clock)" has it).
        let at = step
            .db_clock
            .as_ref()
            .map(|c| {
                if step.action.contains("(database clock)") {
                    format!(" at {c}")
                } else {
                    format!(" (database clock {c})")
                }
            })
            .unwrap_or_default();
        let mut text = format!(
            "\n── {} · step {}: {} {}{token}{outcome}{at}\n",
            step.case, self.shown, step.actor, step.action,
        );
        let on_mariadb = step.case.starts_with('U');
        if let Some(meaning) = meaning(step, on_mariadb) {
            text.push_str(&format!("   {meaning}\n"));
        }
        let said = format!("{} {}{token}{outcome}", step.action, step.actor);
        for (term, means) in GLOSSARY {
            if said.contains(term) && !self.explained.contains(&term) {
                self.explained.push(term);
                text.push_str(&format!("   ({}: {means})\n", term.trim_start_matches('=')));
            }
        }
        text.push_str("   the state now:\n");
        let maria = self.maria_client.lock().ok().and_then(|c| c.clone());
        match maria {
            Some(client) if on_mariadb => {
                text.push_str(&format!(
                    "     {client} -e \"{}; {}\"",
                    self.jobs_sql[0], self.jobs_sql[1]
                ));
            }
            _ => {
                text.push_str(&format!("     {}    # once per terminal\n", self.connect));
                text.push_str(&format!(
                    "     psql -d {} -c \"{LEASE_SQL}\"\n",
                    fencing::schema::LEASE_DB
                ));
                for sql in RESOURCE_SQL {
                    text.push_str(&format!(
                        "     psql -d {} -c \"{sql}\"\n",
                        fencing::schema::RESOURCE_DB
                    ));
                }
                text.pop();
            }
        }
        text.push('\n');
        text
    }
}

/// What the pause says when it is taken, after the step's checks.
pub const PROMPT: &str = "   Enter: go on · Ctrl-C: stop the run (nothing is left behind)";

/// What a step means, in a sentence for the reader (`None` for an experiment's own note: its
/// header line says it). `on_mariadb`: a step of the U-series, whose write is a run's completion
/// joined to the job lease.
fn meaning(step: &Step, on_mariadb: bool) -> Option<String> {
    let who = &step.actor;
    let token = step
        .token
        .map(|t| format!("token {t}"))
        .unwrap_or_else(|| "its token".into());
    Some(match step.mark {
        Mark::Acquired if on_mariadb => format!(
            "{who} holds the job lease with {token}: nobody else can take it until its expiry passes by CURRENT_TIMESTAMP(3), the database's clock."
        ),
        Mark::Acquired => format!(
            "{who} holds the lease with {token}: nobody else can take it until expires_at passes by the database's clock."
        ),
        Mark::Refused => format!("{who} asked for the lease and was refused: someone holds it, unexpired by the database's clock."),
        Mark::Renewed => format!("{who} renewed its lease: expires_at moved forward."),
        Mark::Released => format!(
            "{who} gave the lease up (expires_at = -infinity); the token stays, the next holder gets a greater one."
        ),
        Mark::LeaseExpired if on_mariadb => format!(
            "{who}'s job lease ran out by CURRENT_TIMESTAMP(3), the database's clock: anyone may take it now, with the fence bumped, and {who} does not know."
        ),
        Mark::LeaseExpired => format!(
            "{who}'s lease ran out by the database's clock (expires_at <= now()): anyone may take it now, and {who} does not know."
        ),
        Mark::Frozen => format!(
            "{who} is frozen (SIGSTOP): every thread of it, its renewer too, stands still — its lease keeps running out."
        ),
        Mark::Thawed => format!(
            "{who} resumes (SIGCONT) exactly where it stopped: at its write, believing it still holds the lease."
        ),
        Mark::Write { accepted: true } if on_mariadb => format!(
            "{who}'s completion changed its run: the lease still named its holding ({token}, its owner token), unexpired."
        ),
        Mark::Write { accepted: false } if on_mariadb => format!(
            "{who}'s completion changed no row: the lease no longer names its holding ({token}, its owner token, unexpired) — an answer, never something to retry."
        ),
        Mark::Write { accepted: true } => format!("the resource accepted {who}'s write with {token}."),
        Mark::Write { accepted: false } => format!(
            "the resource rejected {who}'s write with {token}: it has accepted a greater token in this scope (its fence floor)."
        ),
        Mark::Restart => "the database crashed and recovered: an immediate stop, then WAL replay.".into(),
        Mark::Failover => "the lease store failed over: a standby was promoted in its primary's place.".into(),
        Mark::Killed => format!("{who} was killed (SIGKILL): no handler ran; its connections died with it."),
        Mark::Info if step.outcome.contains("AT_WRITE_POINT") => format!(
            "{who} checked its local deadline and found time left: it stands at its write with {token}, waiting for the lab's go-ahead."
        ),
        Mark::Info if step.outcome.contains("RENEW_AFTER_WRITE ok=false") => format!(
            "{who}'s renew after its write was refused: its holding is gone (taken over or expired) — only now does {who} learn it lost the lease."
        ),
        Mark::Info if step.outcome.contains("RENEW_AFTER_WRITE ok=true") => format!(
            "{who}'s renew after its write succeeded: it still held the lease when it wrote."
        ),
        Mark::Info => return None,
    })
}

impl Reporter for StepReporter {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        let Event::Step(step) = event else {
            return Ok(());
        };
        // The background renewals are not phases: they go on all the time.
        if !self.pausing || step.mark == Mark::Renewed {
            return Ok(());
        }
        if step.case != self.case {
            self.case = step.case.clone();
            self.shown = 0;
        }
        self.shown += 1;
        let mut err = io::stderr().lock();
        // Nobody to read the block (stderr gone): no pause either; the run goes on.
        if err
            .write_all(self.block(step).as_bytes())
            .and_then(|()| err.flush())
            .is_err()
        {
            self.pausing = false;
            return Ok(());
        }
        // The pause itself comes before the lab's next action: the step's checks first.
        self.pausing = harness::wait::pause_before_next_action(PROMPT);
        Ok(())
    }
}

/// Goes first among the reporters of a `--step` run: a pause a step asked for that no action
/// took yet (the next phase, or the case's end, came first) is taken here — before the next
/// phase's line is printed, or once the case's last checks are.
pub struct PauseGate;

impl Reporter for PauseGate {
    fn event(&mut self, event: &Event) -> io::Result<()> {
        match event {
            Event::Step(step) if step.mark != Mark::Renewed => harness::wait::take_pending_pause(),
            Event::CaseFinished { .. } => harness::wait::take_pending_pause(),
            _ => {}
        }
        Ok(())
    }
}
