//! `lab run --step`: the classroom. A reporter that, at each phase of an experiment's timeline
//! (every step but the background renewals), prints what just happened and what it means, the
//! SQL that shows the state and the `psql` command that connects to the running cluster — or, in
//! the U-series, the `mariadb` command that connects to its MariaDB — then waits for Enter
//! ([`harness::wait::for_enter`]).
//!
//! It waits inside the recorder, so the experiment stands still while the reader looks — the
//! database clock does not: a lease keeps running out. Ctrl-C while it waits ends the wait at once
//! and the run is interrupted as any run is: every holder thawed and stopped, the cluster removed.
//! When stdin closes, it stops pausing and the run goes on. It writes to stderr; the evidence is
//! the same as without it.

use std::io::{self, Write as _};
use std::sync::{Arc, Mutex};

use harness::evidence::{Event, Mark, Reporter, Step};
use harness::server::Cluster;
use harness::wait::{for_enter, Reader};

/// The state of the lease store, for the reader to query.
const LEASE_SQL: &str =
    "SELECT name, holder, token, expires_at, expires_at <= now() AS expired, now() FROM lease";
/// The state of the resource, for the reader to query.
const RESOURCE_SQL: [&str; 3] = [
    "SELECT scope, max_token FROM fence_floor",
    "SELECT scope, part, writer, token, content FROM report_part ORDER BY part",
    "SELECT id, part, writer, token, mode, accepted FROM write_attempt ORDER BY id",
];

pub struct StepReporter {
    psql: String,
    lease_conn: String,
    resource_conn: String,
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
        let psql = if psql.is_file() {
            psql.display().to_string()
        } else {
            "psql".to_owned()
        };
        let conn = |db: &str| {
            format!(
                "host={} port={} user={} dbname={db}",
                cluster.socket_dir().display(),
                cluster.port(),
                harness::server::SUPERUSER
            )
        };
        StepReporter {
            psql,
            lease_conn: conn(fencing::schema::LEASE_DB),
            resource_conn: conn(fencing::schema::RESOURCE_DB),
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
    fn block(&self, step: &Step) -> String {
        let token = step
            .token
            .map(|t| format!(" token={t}"))
            .unwrap_or_default();
        let outcome = if step.outcome.is_empty() {
            String::new()
        } else {
            format!(" → {}", step.outcome)
        };
        let at = step
            .db_clock
            .as_ref()
            .map(|c| format!(" (database clock {c})"))
            .unwrap_or_default();
        let mut text = format!(
            "\n── {} · step {}: {} {}{token}{outcome}{at}\n",
            step.case, self.shown, step.actor, step.action,
        );
        let on_mariadb = step.case.starts_with('U');
        if let Some(meaning) = meaning(step, on_mariadb) {
            text.push_str(&format!("   {meaning}\n"));
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
                text.push_str(&format!(
                    "     {} \"{}\" -c \"{LEASE_SQL}\"\n",
                    self.psql, self.lease_conn
                ));
                text.push_str(&format!("     {} \"{}\"", self.psql, self.resource_conn));
                for sql in RESOURCE_SQL {
                    text.push_str(&format!(" -c \"{sql}\""));
                }
            }
        }
        text.push_str("\n   Enter: go on · Ctrl-C: stop the run (nothing is left behind)\n");
        text
    }
}

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
        match for_enter() {
            Reader::Enter => {}
            Reader::Closed => {
                self.pausing = false;
                let _ = writeln!(err, "   (stdin closed: going on without stopping)");
            }
            Reader::Interrupted => self.pausing = false,
        }
        Ok(())
    }
}
