//! The timeline F4 and F5 share (seed 004's F4): two independent holder processes; A is frozen with
//! SIGSTOP between its local check and its write while its lease expires by the database clock;
//! B takes over, writes, renews, releases and exits; then A is given the go-line and continued.
//!
//! The lease service must behave identically in both scenarios; those checks are made here. What
//! differs — the resource's verdict on A's stale write — is returned for the scenario to judge.

use std::time::Instant;

use anyhow::bail;
use fencing::resource::{Part, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, EVENT_TIMEOUT};
use holder_protocol::{exit, Event, Request, LOST_PREFIX};

use crate::testbed::{lease_state, shown, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::Testbed;

pub(crate) use super::steps::{
    freeze_and_show, go_and_thaw, lab_step, list, step, A_CONTENT, B_CONTENT,
};

/// What the resource made of the timeline.
pub struct Resumed {
    /// A's write after it resumed: accepted?
    pub a_accepted: bool,
    /// The token A wrote with (its first grant's).
    pub a_token: i64,
    /// The final summary part.
    pub summary: Option<Part>,
    pub floor: Option<i64>,
    /// Rejected attempts by holder-a in `write_attempt`.
    pub a_rejections: usize,
    /// The tokens of the accepted attempts in `write_attempt`, in the order they were logged.
    pub accepted_tokens: Vec<i64>,
}

/// The summary part as the evidence shows it: `content by writer token=N`.
pub fn part_line(part: &Option<Part>) -> String {
    shown(
        part.as_ref()
            .map(|p| format!("{} by {} token={}", p.content, p.writer, p.token)),
    )
}

/// Records the background renewals `holder` reported so far as timeline steps of `actor` (with
/// `token`); returns them (when each was reported, and whether it succeeded).
pub(crate) fn record_renewals(
    rec: &mut Recorder,
    holder: &mut Holder,
    actor: &str,
    token: i64,
) -> Vec<(Instant, bool)> {
    let renewals = holder.drain_renewals().to_vec();
    for (at, ok) in &renewals {
        let mark = if *ok { Mark::Renewed } else { Mark::Info };
        rec.step_at(
            *at,
            mark,
            actor,
            "background renew",
            Some(token),
            format!("ok={ok}"),
            None,
        );
    }
    renewals
}

/// Whether there were renewals and every one succeeded.
pub(crate) fn renewed_every_time(renewals: &[(Instant, bool)]) -> bool {
    !renewals.is_empty() && renewals.iter().all(|(_, ok)| *ok)
}

/// How the evidence counts renewals: `N renewals, M ok`.
pub(crate) fn renewal_count(renewals: &[(Instant, bool)]) -> String {
    let ok = renewals.iter().filter(|(_, ok)| *ok).count();
    format!("{} renewals, {ok} ok", renewals.len())
}

/// A's exit code after its local-deadline check. A holder that was to stop there but stands at
/// its write point instead (`verdict` is `AT_WRITE_POINT`: a holder with no deadline check) is
/// sent the go-line first, so that it writes, as such a holder would, and its write is shown:
/// the checks after it then judge what A did — "write_attempt has no row of A" fails on a holder
/// that wrote — rather than what a closed stdin kept it from doing.
pub(crate) async fn exit_after_check(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    verdict: &Event,
) -> anyhow::Result<i32> {
    if matches!(verdict, Event::AtWritePoint { .. }) {
        a.send(Request::Go).await?;
        let (at, wrote) = a.next("A's write after its check", EVENT_TIMEOUT).await?;
        let what = "write (its check did not stop it)";
        step(bed, rec, at, "A", what, &wrote).await;
    }
    Ok(a.exit_code(EVENT_TIMEOUT).await?)
}

/// Marks A's lease expired on A's timeline (under `--step`, the pause is here).
async fn mark_lease_expired(bed: &Testbed, rec: &mut Recorder) {
    lab_step(
        bed,
        rec,
        Mark::LeaseExpired,
        "A",
        &format!(
            "lease expired ({})",
            bed.expiry_clock().trim_start_matches("the ")
        ),
        "",
    )
    .await;
}

/// Waits until A's lease is expired by the database clock and marks it on A's timeline.
pub(crate) async fn until_lease_expired(bed: &Testbed, rec: &mut Recorder) -> anyhow::Result<()> {
    bed.until_lease_expired("A's lease").await?;
    mark_lease_expired(bed, rec).await;
    Ok(())
}

/// Waits until A's lease is expired by the database clock, and records when, counted from
/// `frozen_at`.
pub(crate) async fn until_expired_while_frozen(
    bed: &Testbed,
    rec: &mut Recorder,
    frozen_at: Instant,
) -> anyhow::Result<()> {
    bed.until_lease_expired("A's lease").await?;
    // When it expired, from the store's own record (its expiry against its clock), counted from
    // the freeze — measured before the step's pause (`--step` waits for Enter in `lab_step`), so
    // that it is the lease's figure, not the reader's. A store with no expiry per holding (a
    // ZooKeeper session) is counted to the moment the lab saw it gone.
    let seen_ms = frozen_at.elapsed().as_secs_f64() * 1000.0;
    let row = bed.lease.inspect(crate::testbed::LEASE).await?;
    let read_ms = frozen_at.elapsed().as_secs_f64() * 1000.0;
    let (after_ms, how) = match row.as_ref().map(|r| -r.remaining_ms()) {
        Some(late) if late.is_finite() && late >= 0.0 => (
            read_ms - late,
            format!(
                "expires_at {} — read {late:.0} ms later",
                row.as_ref().map_or("", |r| r.expires_at.as_str())
            ),
        ),
        _ => (seen_ms, "when the lab saw it gone".to_owned()),
    };
    rec.note(format!(
        "the lease expired by {} {after_ms:.0} ms after A was frozen ({how})",
        bed.expiry_clock(),
    ));
    mark_lease_expired(bed, rec).await;
    Ok(())
}

/// The checks the shared timeline adds on a store that holds by session (ZooKeeper's, every one
/// whose kind says `session_holdings`): the server's log expiring A's session, and what A's client
/// heard of it on waking.
pub(crate) const SESSION_CHECKS: usize = 2;

/// The session A's holding lives by, on a store that holds by session: one datum — the store's
/// kind (`session_holdings`, read as [`crate::Part::OnSessions`]) — decides the two session
/// checks and how many the run declares.
/// A store that says it holds by session must show the session.
fn held_by_session(
    bed: &Testbed,
    row: Option<&fencing::lease::Holding>,
) -> anyhow::Result<Option<String>> {
    let store = bed.case().store;
    if !bed.makes(crate::Part::OnSessions) {
        return Ok(None);
    }
    let shown = row.map(|h| h.expires_at.clone()).unwrap_or_default();
    match zk_session(&shown) {
        Some(session) => Ok(Some(session)),
        None => bail!("{store} holds its leases by session, but its holding shows none: {shown:?}"),
    }
}

/// The session of a ZooKeeper holding (`0x…`), from the way the store shows it (`while session
/// 0x… lives`); `None` on every other store.
fn zk_session(expires_at: &str) -> Option<String> {
    let rest = expires_at.strip_prefix("while session ")?;
    Some(rest.split_whitespace().next()?.to_owned())
}

/// On ZooKeeper: the server's own log line that expired A's session while A was frozen — the
/// ephemeral node the lab saw go went with it — quoted and checked.
async fn expired_by_the_server(
    bed: &Testbed,
    rec: &mut Recorder,
    session: &str,
) -> anyhow::Result<()> {
    let Some(service) = bed.service.as_ref() else {
        return Ok(());
    };
    let wanted = format!("Expiring session {session},");
    // The line reaches the container's log a moment after the server acted on it.
    let seen = harness::wait::until_every(
        "ZooKeeper's log line expiring A's session",
        std::time::Duration::from_secs(3),
        std::time::Duration::from_millis(200),
        || async { Ok::<_, std::io::Error>(service.log().await.contains(&wanted)) },
    )
    .await
    .is_ok();
    let log = service.log().await;
    let line = log.lines().find(|l| l.contains(&wanted)).map(|l| {
        l.rsplit_once("] - ")
            .map_or(l, |(_, said)| said)
            .trim()
            .to_owned()
    });
    rec.check_that(
        format!("ZooKeeper expired A's session {session} while A was frozen (the server's log)"),
        seen,
        shown(line),
    );
    Ok(())
}

/// B, the lab's own lease client (not under test), takes the lease over and writes `content` to
/// `part` in `mode`; the acquire and the write become timeline steps. Returns the acquire's
/// answer and, when it was granted, whether the write was accepted.
pub(crate) async fn lab_client_takes_over(
    bed: &Testbed,
    rec: &mut Recorder,
    part: &str,
    content: &str,
    mode: WriteMode,
) -> anyhow::Result<(Option<fencing::lease::Grant>, Option<bool>)> {
    let b = bed.lease.acquire(LEASE, HOLDER_B, bed.case().ttl).await?;
    let clock = bed.lease.clock().await.ok().flatten();
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire",
        b.as_ref().map(|g| g.token),
        crate::testbed::acquired(b.as_ref()),
        clock,
    );
    let Some(grant) = b else {
        return Ok((None, None));
    };
    let write = fencing::resource::Write {
        scope: SCOPE,
        part,
        content,
        writer: HOLDER_B,
        token: grant.token,
    };
    let ok = bed.resource.write(&write, mode).await?;
    let clock = bed.lease.clock().await.ok().flatten();
    rec.step(
        Mark::Write { accepted: ok },
        "B",
        &format!("write {part}"),
        Some(grant.token),
        crate::testbed::wrote(ok, grant.token),
        clock,
    );
    Ok((Some(grant), Some(ok)))
}

/// A starts, acquires (token 1), passes its local-deadline check and waits at its write point.
async fn a_waits_at_its_write_point(
    bed: &mut Testbed,
    rec: &mut Recorder,
    mode: WriteMode,
) -> anyhow::Result<Holder> {
    let mode_label = bed.case().mode_label(mode);
    let mut a = Holder::spawn(&bed.holder_spec(HOLDER_A, A_CONTENT, mode, false)).await?;
    let (at, acquired) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire", &acquired).await;
    rec.check(
        format!("A (pid {}) acquires the lease, token=1", a.pid()),
        "ACQUIRED token=1",
        &acquired.to_string(),
    );
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(
        bed,
        rec,
        at,
        "A",
        "local-deadline check passed, waits at the write point",
        &ready,
    )
    .await;
    let Event::AtWritePoint {
        token,
        deadline_left_ms,
    } = ready
    else {
        bail!(a.unexpected("AT_WRITE_POINT token=1", &ready));
    };
    if token != bed.token(rec, 1) {
        bail!(a.unexpected("AT_WRITE_POINT token=1", &ready));
    }
    rec.note(format!(
        "A passed its local-deadline check ({deadline_left_ms} ms left) and waits at the write point, resource mode={mode_label}"
    ));
    Ok(a)
}

/// A keeps its lease by renewing for 2×TTL, then is frozen (every thread, its renewer too) until
/// its lease expired by the store's clock: the ZooKeeper session that held it, if one did.
async fn a_renews_then_is_frozen_past_expiry(
    bed: &mut Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
) -> anyhow::Result<Option<String>> {
    let c = bed.case().clone();
    // The timeline prescribes this duration: 2×TTL of renewing in the background.
    let hold = c.ttl * 2;
    harness::wait::prescribed(hold).await;
    let row = bed.lease.inspect(LEASE).await?;
    let renewals = record_renewals(rec, a, "A", 1);
    rec.check(
        format!(
            "A kept the lease by renewing while not paused (waited {} ms, TTL={} ms)",
            hold.as_millis(),
            c.ttl.as_millis()
        ),
        "holder-a token=1 unexpired",
        &shown(row.as_ref().map(lease_state)),
    );
    rec.check_that(
        "A's background renewer renewed, every time with success",
        renewed_every_time(&renewals),
        renewal_count(&renewals),
    );

    let session = held_by_session(bed, row.as_ref())?;
    let frozen_at =
        freeze_and_show(bed, rec, a, "", "A's renewer thread is frozen with it").await?;
    until_expired_while_frozen(bed, rec, frozen_at).await?;
    if let Some(session) = &session {
        expired_by_the_server(bed, rec, session).await?;
    }
    Ok(session)
}

/// B starts, acquires (token 2), writes, renews, releases and exits, A frozen all along.
async fn b_takes_over_and_writes(
    bed: &mut Testbed,
    rec: &mut Recorder,
    mode: WriteMode,
    a: &Holder,
) -> anyhow::Result<()> {
    let mut b = Holder::spawn(&bed.holder_spec(HOLDER_B, B_CONTENT, mode, true)).await?;
    rec.note(format!(
        "A (pid {}) and B (pid {}) are two independent processes",
        a.pid(),
        b.pid()
    ));
    let (at, acquired) = b.next("B's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "B", "acquire", &acquired).await;
    rec.check(
        "B acquires the lease, token=2",
        "ACQUIRED token=2",
        &acquired.to_string(),
    );
    let (_, ready) = b.next("B at its write point", EVENT_TIMEOUT).await?;
    if !matches!(ready, Event::AtWritePoint { token, .. } if token == bed.token(rec, 2)) {
        bail!(b.unexpected("AT_WRITE_POINT token=2", &ready));
    }
    b.send(Request::Go).await?;
    for (action, what, expected) in [
        (
            "write",
            "B's write is accepted",
            "WRITE accepted=true token=2",
        ),
        (
            "renew after the write",
            "B renews after its write",
            "RENEW_AFTER_WRITE ok=true",
        ),
        ("release", "B releases the lease", "RELEASED ok=true"),
    ] {
        let (at, event) = b.next(what, EVENT_TIMEOUT).await?;
        step(bed, rec, at, "B", action, &event).await;
        rec.check(what, expected, &event.to_string());
    }
    let code = b.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        "B exits",
        &describe(Some(exit::WROTE)),
        &describe(Some(code)),
    );
    Ok(())
}

/// On ZooKeeper: A's client, on waking, says that its session expired (a line on A's stderr).
async fn a_hears_its_session_expired(rec: &mut Recorder, a: &Holder, session: &Option<String>) {
    if let Some(session) = &session {
        // A's stderr is read apart from its events: the line may come a moment after the
        // renew's event. Polled with a deadline; a line that never comes fails the check below.
        let _ = harness::wait::until("A's lease-lost line on stderr", EVENT_TIMEOUT, || {
            let seen = a.stderr().lines().any(|l| l.starts_with(LOST_PREFIX));
            async move { Ok::<bool, std::io::Error>(seen) }
        })
        .await;
        let heard = a
            .stderr()
            .lines()
            .find_map(|l| l.strip_prefix(LOST_PREFIX).map(str::to_owned));
        rec.check_that(
            format!("A's ZooKeeper client, on waking, learns that its session {session} expired"),
            heard
                .as_deref()
                .is_some_and(|h| h.contains("SessionExpired") && h.contains(session.as_str())),
            shown(heard),
        );
    }
}

/// What the resource kept: the summary, its floor, A's rejected attempts and every accepted
/// token.
async fn what_the_resource_kept(
    bed: &Testbed,
    rec: &mut Recorder,
) -> anyhow::Result<(Option<Part>, Option<i64>, usize, Vec<i64>)> {
    let summary = bed.resource.part(SCOPE, SUMMARY).await?;
    let floor = bed.resource.floor(SCOPE).await?;
    let attempts = bed.resource.attempts(SCOPE).await?;
    rec.note(format!(
        "final summary = {}; fence_floor={}",
        part_line(&summary),
        shown(floor)
    ));
    let a_rejections = attempts
        .iter()
        .filter(|x| x.writer == HOLDER_A && !x.accepted)
        .count();
    let accepted_tokens = attempts
        .iter()
        .filter(|x| x.accepted)
        .map(|x| x.token)
        .collect();
    Ok((summary, floor, a_rejections, accepted_tokens))
}

/// Runs the shared timeline with both holders writing in `mode`.
pub async fn run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    mode: WriteMode,
) -> anyhow::Result<Resumed> {
    let mut a = a_waits_at_its_write_point(bed, rec, mode).await?;
    let session = a_renews_then_is_frozen_past_expiry(bed, rec, &mut a).await?;
    b_takes_over_and_writes(bed, rec, mode, &a).await?;
    let row = bed.lease.inspect(LEASE).await?;
    go_and_thaw(bed, rec, &mut a).await?;
    let (at, write) = a.next("A's write after it resumed", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (after resuming)", &write).await;
    let (at, renew) = a.next("A's renew after its write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "renew after the write", &renew).await;
    rec.note(format!("A resumed: {write}; {renew}"));
    let Event::Write {
        accepted: a_accepted,
        token,
    } = write
    else {
        bail!(a.unexpected("WRITE … token=1", &write));
    };
    let Some(token) = token.value().filter(|t| *t == bed.token(rec, 1)) else {
        bail!(a.unexpected("WRITE … token=1", &write));
    };
    rec.check(
        "A's renew after its write fails: its holding was superseded",
        "RENEW_AFTER_WRITE ok=false",
        &renew.to_string(),
    );
    a_hears_its_session_expired(rec, &a, &session).await;

    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.check(
        "A exits with its lease-lost status",
        &describe(Some(exit::LEASE_LOST)),
        &describe(Some(code)),
    );
    rec.check_that(
        "the lease was free (released by B) when A resumed",
        bed.shows_released(row.as_ref()),
        format_args!(
            "{}: {}",
            if bed.service.is_some() {
                "holding"
            } else {
                "lease row"
            },
            shown(
                row.map(|r| format!("{} token={} expires_at={}", r.holder, r.token, r.expires_at))
            )
        ),
    );

    let (summary, floor, a_rejections, accepted_tokens) = what_the_resource_kept(bed, rec).await?;

    Ok(Resumed {
        a_accepted,
        a_token: token,
        summary,
        floor,
        a_rejections,
        accepted_tokens,
    })
}
