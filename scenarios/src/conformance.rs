//! `lab holder check`'s protocol probes: a holder of the user's (`--holder-cmd`) driven through
//! the protocol's plain paths on a lab of its own, each finding one line that says what is wrong
//! (docs/holder-protocol.md). The experiments that judge a holder (F4, F10, F12) run after these,
//! through the ordinary run: what this module checks is what they take for granted.
//!
//! - **the handshake**: `HELLO version=5 pid=P` within 10 s, P its own pid;
//! - **one holding**: `ACQUIRED` with a token above 0, `AT_WRITE_POINT`, a renewer thread named
//!   `renewer` (the freeze check looks for it), and after `GO` the write accepted with that
//!   token — as the resource recorded it, not only as the holder said — the renew after it, the
//!   release, exit 0;
//! - **orphaned at the write point**: stdin closed before `GO` → exit 6 within 5 s, nothing
//!   written;
//! - **an acquire answered late**: the lab locks the lease table before the holder starts, so
//!   that its acquire waits (seen in `pg_blocking_pids`), and lets it go the lease's TTL later.
//!   The lease is granted, but the holder's local deadline — read from its monotonic clock
//!   *before* it sent the acquire, `ttl − margin` on — has passed: `DEADLINE_PASSED`, exit 8,
//!   nothing written, as the resource's `write_attempt` shows. This judges the local deadline
//!   without a fault point of the holder's: F10 needs `--wait-before-check`, and a holder that
//!   refuses it is judged here instead (the verdict says so).

use std::time::Duration;

use fencing::resource::WriteMode;
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request};

use crate::testbed::{Testbed, SCOPE, SUMMARY};

/// How long a holder has for its handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long an orphaned holder has to exit.
const ORPHAN_EXIT: Duration = Duration::from_secs(5);

/// One finding: whether the holder did what the protocol asks, and the line that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub ok: bool,
    pub line: String,
    /// The experiment whose property this finding judges too, by other means: when that
    /// experiment says skip for this holder, the property was still judged here.
    pub judges_for: Option<&'static str>,
}

/// The experiment that judges a holder's local deadline with a fault point of its own
/// (`--wait-before-check`), and which the late-acquire probe stands in for.
pub const LOCAL_DEADLINE_EXPERIMENT: &str = "F10";

fn ok(line: impl Into<String>) -> Finding {
    Finding {
        ok: true,
        line: line.into(),
        judges_for: None,
    }
}

fn fail(line: impl Into<String>) -> Finding {
    Finding {
        ok: false,
        line: line.into(),
        judges_for: None,
    }
}

/// Runs the probes on `lab` (its holder is the user's): every finding, in order. A probe that
/// cannot go on (no handshake) ends the list there.
pub async fn probe(bed: &mut Testbed) -> anyhow::Result<Vec<Finding>> {
    bed.reset().await?;
    let mut found = Vec::new();
    if one_holding(bed, &mut found).await? {
        orphaned(bed, &mut found).await?;
        // The orphan left its lease held until its TTL: a lab of the first state again.
        bed.reset().await?;
        late_answer(bed, &mut found).await?;
    }
    Ok(found)
}

/// The resource's word on a holding's write: one attempt logged, accepted, with the holding's
/// token, and the part holding its content.
async fn the_resource_logged_it(
    bed: &Testbed,
    found: &mut Vec<Finding>,
    name: &str,
    content: &str,
    token: i64,
) -> anyhow::Result<()> {
    // The resource's word on it: one attempt logged, accepted, with the holding's token,
    // and the part holding the content.
    let logged: Vec<(i64, bool)> = harness::observe::attempts(bed.resource.pool())
        .await?
        .into_iter()
        .filter(|a| a.writer == name)
        .map(|a| (a.token, a.accepted))
        .collect();
    if logged == [(token, true)] {
        found.push(ok(format!(
            "the resource logged its write: one write_attempt, accepted, token={token}"
        )));
    } else {
        found.push(fail(format!(
            "the resource's write_attempt rows for writer={name} are {logged:?} (token, \
             accepted), where one ({token}, true) was due: log each attempt after its \
             transaction, with --holder as the writer"
        )));
    }
    let part = harness::observe::final_parts(bed.resource.pool())
        .await?
        .into_iter()
        .find(|(scope, part, _, _)| scope == SCOPE && part == SUMMARY)
        .map(|(_, _, content, token)| (content, token));
    if part == Some((content.to_owned(), token)) {
        found.push(ok(format!(
            "report_part {SCOPE}/{SUMMARY} holds its --content with token={token}"
        )));
    } else {
        found.push(fail(format!(
            "report_part {SCOPE}/{SUMMARY} is {part:?} (content, token), where \
             ({content:?}, {token}) was due: write --content to --part of --scope with the token"
        )));
    }
    Ok(())
}

/// With a renewer asked for, the holder names its background renewer thread `renewer`, so
/// that the freeze check can see it stopped.
fn names_its_renewer(bed: &Testbed, found: &mut Vec<Finding>, h: &Holder) -> anyhow::Result<()> {
    let threads = h.threads()?;
    if bed.params().renew > Duration::ZERO {
        if threads.iter().any(|t| t.name == "renewer") {
            found.push(ok(format!(
                "a thread named renewer among its {} thread(s)",
                threads.len()
            )));
        } else {
            let names: Vec<String> = threads.iter().map(ToString::to_string).collect();
            found.push(fail(format!(
                "no thread named `renewer` (threads: {}): name the background renewer so that \
                 the freeze check can see it stopped (prctl PR_SET_NAME, Thread.setName)",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// After its write, the holder renews (ok) and, with --release, releases (ok).
async fn renews_and_releases(found: &mut Vec<Finding>, h: &mut Holder) {
    match h.next("RENEW_AFTER_WRITE", EVENT_TIMEOUT).await {
        Ok((_, Event::RenewAfterWrite { ok: true })) => found.push(ok("RENEW_AFTER_WRITE ok=true")),
        Ok((_, other)) => found.push(fail(format!(
            "after the write: sent `{other}`, where RENEW_AFTER_WRITE ok=true was due"
        ))),
        Err(e) => found.push(fail(format!("after the write: {e}"))),
    }
    match h.next("RELEASED (--release)", EVENT_TIMEOUT).await {
        Ok((_, Event::Released { ok: true })) => found.push(ok("RELEASED ok=true")),
        Ok((_, other)) => found.push(fail(format!(
            "with --release: sent `{other}`, where RELEASED ok=true was due"
        ))),
        Err(e) => found.push(fail(format!("with --release: {e}"))),
    }
}

/// The handshake and one holding from acquire to release; whether the handshake worked.
async fn one_holding(bed: &Testbed, found: &mut Vec<Finding>) -> anyhow::Result<bool> {
    const NAME: &str = "check-a";
    const CONTENT: &str = "written by check-a";
    let spec = bed.holder_spec(NAME, CONTENT, WriteMode::Fenced, true);
    let started = std::time::Instant::now();
    let mut h = match Holder::spawn_within(&spec, HANDSHAKE).await {
        Ok(h) => h,
        Err(e) => {
            found.push(fail(format!("the handshake: {e}")));
            return Ok(false);
        }
    };
    found.push(ok(format!(
        "the handshake: HELLO version={} pid={} in {} ms",
        holder_protocol::VERSION,
        h.pid(),
        started.elapsed().as_millis()
    )));
    let token = match h.next("ACQUIRED", EVENT_TIMEOUT).await {
        Ok((_, Event::Acquired { token })) if token.value() > Some(0) => {
            found.push(ok(format!(
                "acquired the free lease: ACQUIRED token={token}"
            )));
            token.value().unwrap_or_default() // a number above 0, by the guard
        }
        Ok((_, other)) => {
            found.push(fail(format!(
                "acquiring a free lease: sent `{other}`, where ACQUIRED token=T (T > 0) was due"
            )));
            h.crash().await;
            return Ok(true);
        }
        Err(e) => {
            found.push(fail(format!("acquiring a free lease: {e}")));
            h.crash().await;
            return Ok(true);
        }
    };
    match h.next("AT_WRITE_POINT", EVENT_TIMEOUT).await {
        Ok((_, Event::AtWritePoint { token: t, .. })) if t == token => {
            found.push(ok(format!("stands at AT_WRITE_POINT token={token}")))
        }
        Ok((_, other)) => {
            found.push(fail(format!(
                "the write point: sent `{other}`, where AT_WRITE_POINT token={token} was due"
            )));
            h.crash().await;
            return Ok(true);
        }
        Err(e) => {
            found.push(fail(format!("the write point: {e}")));
            h.crash().await;
            return Ok(true);
        }
    }
    names_its_renewer(bed, found, &h)?;

    h.send(Request::Go).await?;
    let said = match h.next("WRITE", EVENT_TIMEOUT).await {
        Ok((_, Event::Write { accepted, token: t })) => Some((accepted, t)),
        Ok((_, other)) => {
            found.push(fail(format!(
                "the write after GO: sent `{other}`, where WRITE accepted=true token={token} was due"
            )));
            None
        }
        Err(e) => {
            found.push(fail(format!("the write after GO: {e}")));
            None
        }
    };
    if let Some((accepted, t)) = said {
        if accepted && t == token {
            found.push(ok(format!("WRITE accepted=true token={token}")));
        } else {
            found.push(fail(format!(
                "the write of a current holding: said WRITE accepted={accepted} token={t}, \
                 where accepted=true token={token} was due"
            )));
        }
        the_resource_logged_it(bed, found, NAME, CONTENT, token).await?;
        renews_and_releases(found, &mut h).await;
    }
    match h.exit_code(EVENT_TIMEOUT).await {
        Ok(0) => found.push(ok("exit 0 after a holding that wrote and kept its lease")),
        Ok(code) => found.push(fail(format!(
            "exited {} after a holding that wrote and kept its lease, where exit 0 was due",
            describe(Some(code))
        ))),
        Err(e) => found.push(fail(format!("its exit: {e}"))),
    }
    Ok(true)
}

/// A holder whose stdin closes at the write point: exit 6, nothing written.
async fn orphaned(bed: &Testbed, found: &mut Vec<Finding>) -> anyhow::Result<()> {
    const NAME: &str = "check-orphan";
    let spec = bed.holder_spec(NAME, "written by an orphan", WriteMode::Fenced, true);
    let mut h = Holder::spawn_within(&spec, HANDSHAKE).await?;
    loop {
        match h.next("AT_WRITE_POINT", EVENT_TIMEOUT).await {
            Ok((_, Event::AtWritePoint { .. })) => break,
            Ok((_, Event::Acquired { .. })) => {}
            Ok((_, other)) => {
                found.push(fail(format!(
                    "orphaned at the write point: sent `{other}` before it (the lease was free)"
                )));
                h.crash().await;
                return Ok(());
            }
            Err(e) => {
                found.push(fail(format!("orphaned at the write point: {e}")));
                h.crash().await;
                return Ok(());
            }
        }
    }
    // exit_code closes stdin first: the lab going away.
    match h.exit_code(ORPHAN_EXIT).await {
        Ok(exit::ORPHANED) => found.push(ok(format!(
            "its stdin closed at the write point: {}",
            describe(Some(exit::ORPHANED))
        ))),
        Ok(code) => found.push(fail(format!(
            "its stdin closed at the write point: {}, where exit {} (orphaned) was due",
            describe(Some(code)),
            exit::ORPHANED
        ))),
        Err(_) => found.push(fail(format!(
            "kept running {} s after its stdin closed at the write point (killed): exit {} \
             when stdin closes before GO",
            ORPHAN_EXIT.as_secs(),
            exit::ORPHANED
        ))),
    }
    let written = harness::observe::attempts(bed.resource.pool())
        .await?
        .iter()
        .filter(|a| a.writer == NAME)
        .count();
    if written == 0 {
        found.push(ok("orphaned, it wrote nothing"));
    } else {
        found.push(fail(format!(
            "orphaned at the write point, it still wrote ({written} write_attempt row(s)): \
             write nothing once stdin closed before GO"
        )));
    }
    Ok(())
}

/// The lease table locked while a holder's acquire is sent, and let go the lease's TTL later:
/// granted, but past the local deadline that ran from before the acquire was sent — the holder
/// must stop (`DEADLINE_PASSED`, exit 8) and write nothing.
async fn late_answer(bed: &Testbed, found: &mut Vec<Finding>) -> anyhow::Result<()> {
    let judged = |f: Finding| Finding {
        judges_for: Some(LOCAL_DEADLINE_EXPERIMENT),
        ..f
    };
    let ttl = bed.case().ttl;
    let table = bed.lease_table.sql().table.clone();
    let admin = bed.admin_pool(fencing::schema::Database::Lease).await?;
    let mut lock = bed.lease_table.hold_writes().await?;
    let locker = harness::observe::backend_pid(&mut lock).await?;
    let spec = bed.holder_spec(LATE, "written by a late grant", WriteMode::Fenced, false);
    let mut h = match Holder::spawn_within(&spec, HANDSHAKE).await {
        Ok(h) => h,
        Err(e) => {
            found.push(fail(format!("{LATE_WHAT}: the handshake: {e}")));
            return Ok(());
        }
    };
    let waiting = harness::wait::until(
        &format!("{LATE}'s acquire waits on the lease table's lock"),
        bed.params().wait_timeout,
        || async {
            Ok::<_, sqlx::Error>(
                !harness::observe::blocked_by(&admin, locker)
                    .await?
                    .is_empty(),
            )
        },
    )
    .await;
    if let Err(e) = waiting {
        found.push(judged(fail(format!(
            "{LATE_WHAT}: not judged — {e}: acquire on the lab's lease table ({table}), which the \
             lab locked before starting the holder"
        ))));
        h.crash().await;
        return Ok(());
    }
    // The timeline's own duration: the lease's TTL, past the local deadline by the margin.
    let held = std::time::Instant::now();
    harness::wait::prescribed(ttl).await;
    lock.rollback().await?;
    let held_ms = held.elapsed().as_millis();
    let (verdict, said) = after_a_late_grant(&mut h).await?;
    let code = match verdict {
        Ok(()) => h.exit_code(EVENT_TIMEOUT).await.ok(),
        Err(_) => {
            h.crash().await;
            None
        }
    };
    let written = harness::observe::attempts(bed.resource.pool())
        .await?
        .iter()
        .filter(|a| a.writer == LATE)
        .count();
    let finding = match (verdict, code, written) {
        (Ok(()), Some(exit::DEADLINE_PASSED), 0) => ok(format!(
            "{LATE_WHAT} ({held_ms} ms behind the lease table's lock, the TTL {} ms): its local \
             deadline had passed — {said}, {}, nothing written",
            ttl.as_millis(),
            describe(Some(exit::DEADLINE_PASSED))
        )),
        (verdict, code, written) => fail(format!(
            "{LATE_WHAT} ({held_ms} ms behind the lease table's lock, the TTL {} ms): {}; it \
             said {said}; {}; {written} write_attempt row(s) of {LATE}: its local deadline must \
             run from the monotonic clock read before the acquire was sent, ttl − margin on, and \
             stop it (DEADLINE_PASSED, exit {}) without a write",
            ttl.as_millis(),
            verdict.err().unwrap_or("exit or write where none was due"),
            code.map_or_else(
                || "no exit of its own (killed)".to_owned(),
                |c| describe(Some(c))
            ),
            exit::DEADLINE_PASSED
        )),
    };
    found.push(judged(finding));
    Ok(())
}

/// The late-acquire probe's holder.
const LATE: &str = "check-late";
/// How its lines begin.
const LATE_WHAT: &str = "an acquire answered late";

/// What a holder granted past its local deadline said, up to `DEADLINE_PASSED` (`Ok`) or what
/// came instead (`Err`, why). A holder that goes on to its write point is sent `GO`: what it
/// writes is what the resource judges.
async fn after_a_late_grant(h: &mut Holder) -> anyhow::Result<(Result<(), &'static str>, String)> {
    let mut said = Vec::new();
    let verdict = loop {
        match h.next("DEADLINE_PASSED", EVENT_TIMEOUT).await {
            Ok((_, e @ Event::Acquired { .. })) => said.push(e.to_string()),
            Ok((_, e @ Event::DeadlinePassed { .. })) => {
                said.push(e.to_string());
                break Ok(());
            }
            Ok((_, e @ Event::AtWritePoint { .. })) => {
                said.push(e.to_string());
                h.send(Request::Go).await?;
                if let Ok((_, e)) = h.next("WRITE", EVENT_TIMEOUT).await {
                    said.push(e.to_string());
                }
                break Err("it went on to its write point");
            }
            Ok((_, e)) => {
                said.push(e.to_string());
                break Err("an answer where DEADLINE_PASSED was due");
            }
            Err(e) => {
                said.push(e.to_string());
                break Err("no DEADLINE_PASSED");
            }
        }
    };
    Ok((verdict, said.join("; ")))
}
