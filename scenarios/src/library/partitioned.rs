//! F16 for a library: A, holding the lock at its write point, is cut off from its lock service
//! — not paused: its library's threads (kazoo's connection, a renewal thread, tooz's heartbeat)
//! keep running and find the service gone. A runs as a user of its own (the servers'), and one
//! iptables rule per server holds every TCP packet that user sends to the service, the
//! connections the library has and those it opens meanwhile (ZooKeeper's client reconnects at
//! once). The lab's own reads of the service's record and B, a second process of the library,
//! run as the lab's user: untouched.
//!
//! The service ends A's holding by its own clock and B takes the lock. A is then told to go on,
//! still cut off: it asks its library the library's own question — answered from the library's
//! memory at once, or waiting on the service it cannot reach (bounded by the lab: the hold is
//! lifted after [`CUT_OFF_ASK`] past the TTL) — and writes unfenced through the resource, which
//! it can still reach. The cell says what the library told A while it was cut off, how long that
//! took, and what the resource did with the write.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::resource::WriteMode;
use harness::docker::Holds;
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, HolderError, EVENT_TIMEOUT};
use holder_protocol::{Event, Request};

use super::{
    b_takes_over, release, says_held, shown, truth, until_ended, up_to_the_write_point, Cell,
    Installed, Library, Verdict,
};
use crate::kit::paused_holder::{lab_step, step};
use crate::testbed::{HOLDER_A, SCOPE};
use crate::Testbed;

/// How long past the TTL the lab waits for A's question to be answered while A is cut off
/// before it lifts the partition: a question that waits on the service would wait for as long as
/// TCP keeps retrying (minutes).
const CUT_OFF_ASK: Duration = Duration::from_secs(5);

/// Every server A's library talks to: the lock service's, or Redlock's N.
fn servers(bed: &Testbed, installed: &Installed) -> anyhow::Result<Vec<(IpAddr, u16)>> {
    if let Some((_, endpoints)) = &installed.servers {
        return endpoints
            .split(',')
            .map(|e| {
                let addr: SocketAddr = e
                    .parse()
                    .with_context(|| format!("the server endpoint {e} is not ip:port"))?;
                Ok((addr.ip(), addr.port()))
            })
            .collect();
    }
    let service = bed
        .service
        .as_ref()
        .context("F16 of a library needs its lock service")?;
    Ok(vec![(service.ip(), service.port())])
}

/// F16 for `lib` (see the module's docs).
pub(super) async fn partitioned(
    bed: &mut Testbed,
    rec: &mut Recorder,
    lib: &Library,
    installed: &Installed,
) -> anyhow::Result<(Cell, Option<bool>)> {
    bed.reset().await?;
    let Some(user) = harness::server::Server::dir(bed.cluster()?).run_as() else {
        let why = "F16 runs A as a user of its own so that one rule by owner holds every connection it opens, and the lab does not run as root here";
        rec.skip(why);
        return Ok((Cell::new(Verdict::NotRun, "not run here", why), None));
    };
    let mut spec = installed.spec(bed, lib, HOLDER_A, "rows=200(A)", WriteMode::Unfenced);
    spec.run_as = Some(user);
    let mut a = Holder::spawn(&spec).await?;
    let (a_token, key, a_owner) = up_to_the_write_point(bed, rec, &mut a, "A").await?;

    let (mut holds, cut_at) = cut_off(bed, rec, installed, user.uid).await?;
    until_ended(bed, installed, rec, &mut a, &key, &a_owner, cut_at).await?;
    let (mut b, b_owner) =
        b_takes_over(bed, rec, lib, installed, WriteMode::Unfenced, &key, a_token).await?;

    // A goes on, still cut off: its question first.
    a.send(Request::Go).await?;
    let asked_at = Instant::now();
    let bound = bed.case().ttl + CUT_OFF_ASK;
    let (answered_cut_off, asked) = match a.next("A's question, cut off", bound).await {
        Ok((at, asked)) => {
            step(bed, rec, at, "A", "asks its library, cut off", &asked).await;
            (true, asked)
        }
        Err(HolderError::Silent { .. }) => {
            rec.note(format!(
                "A's question had no answer within {} ms, cut off: the partition is lifted",
                bound.as_millis()
            ));
            lift(holds).await?;
            holds = Vec::new();
            let (at, asked) = a
                .next("A's question, the partition lifted", EVENT_TIMEOUT * 2)
                .await?;
            step(bed, rec, at, "A", "asks its library, reconnected", &asked).await;
            (false, asked)
        }
        Err(e) => return Err(e.into()),
    };
    let answered_ms = asked_at.elapsed().as_millis();
    let truth_now = truth(bed, installed, &key).await?;
    let Event::Asked { question, answer } = &asked else {
        bail!(a.unexpected("ASKED question=Q answer=A", &asked));
    };
    rec.note(format!(
        "A's library, asked while {}: {question} {answer} after {answered_ms} ms; the service's record: {}",
        if answered_cut_off { "cut off" } else { "cut off, answered once the partition was lifted" },
        shown(&truth_now)
    ));
    let (at, write) = a.next("A's write", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "write (the resource reachable)", &write).await;
    if !matches!(write, Event::Write { .. }) {
        bail!(a.unexpected("WRITE accepted=B token=T", &write));
    }
    let (ok, said) = releases(bed, installed, rec, holds, (&mut a, &mut b), &key, &b_owner).await?;

    // The resource's word on A's write, not A's.
    let accepted = bed
        .resource
        .attempts(SCOPE)
        .await?
        .iter()
        .any(|x| x.writer == HOLDER_A && x.accepted);
    rec.expose(
        "cut off from the service, unfenced, A's stale write is accepted after the service gave the lock to B",
        accepted,
        &write,
    );
    let agrees = says_held(answer).map(|held| held == (truth_now.as_ref() == Some(&a_owner)));
    let cell = cell(
        (question, answer),
        answered_cut_off.then_some(answered_ms),
        (answered_ms, bound),
        &truth_now,
        accepted,
        &write,
        (ok, &said),
    );
    Ok((cell, agrees))
}

/// Cuts A's user off from every server of the service: one DROP rule by owner per server, checked
/// as iptables lists them. Returns the holds and when they began.
async fn cut_off(
    bed: &Testbed,
    rec: &mut Recorder,
    installed: &Installed,
    uid: u32,
) -> anyhow::Result<(Vec<Holds>, Instant)> {
    let targets = servers(bed, installed)?;
    let mut holds = Vec::new();
    for (ip, port) in &targets {
        holds.push(Holds::start_for_owner(*ip, *port, uid, &bed.run_mark).await?);
    }
    let cut_at = Instant::now();
    let rules: Vec<String> = holds.iter().flat_map(|h| h.rules().to_vec()).collect();
    lab_step(
        bed,
        rec,
        Mark::Info,
        "A",
        "cut off from the service",
        rules.join(" | "),
    )
    .await;
    let owner_rule = format!("owner UID match {}", uid);
    rec.check_that(
        "A is cut off from the service: one rule per server drops every packet A's user sends to it",
        rules.len() == targets.len()
            && rules.iter().all(|r| r.contains("DROP") && r.contains(&owner_rule)),
        format_args!("{} server(s); iptables OUTPUT: {}", targets.len(), rules.join(" | ")),
    );
    Ok((holds, cut_at))
}

/// The card's cell: what A's library said while cut off and how soon, and the resource's word.
fn cell(
    (question, answer): (&str, &str),
    cut_off_ms: Option<u128>,
    (answered_ms, bound): (u128, Duration),
    truth_now: &Option<String>,
    accepted: bool,
    write: &Event,
    (ok, said): (bool, &str),
) -> Cell {
    let when = match cut_off_ms {
        Some(ms) => format!("{ms} ms"),
        None => format!(
            "no answer while cut off ({} ms), then after the partition",
            bound.as_millis()
        ),
    };
    let said_write = if accepted {
        "stale write accepted"
    } else {
        "stale write rejected"
    };
    let verdict = Verdict::CutOff {
        answered_cut_off: cut_off_ms.is_some(),
        said_held: says_held(answer) == Some(true),
        stale_accepted: accepted,
    };
    Cell::new(
        verdict,
        format!("cut off, {question} {answer} ({when}); {said_write}"),
        format!(
            "ASKED question={question} answer={answer} after {answered_ms} ms; the service's record: {}; {write}; RELEASE_ENDED ok={ok} said={said}",
            shown(truth_now)
        ),
    )
}

/// After A's write: the partition lifted, A's release (it must leave the lock as it found it),
/// then B's. Returns how A's release ended.
async fn releases(
    bed: &Testbed,
    installed: &Installed,
    rec: &mut Recorder,
    holds: Vec<Holds>,
    (a, b): (&mut Holder, &mut Holder),
    key: &str,
    b_owner: &str,
) -> anyhow::Result<(bool, String)> {
    lift(holds).await?;
    // B has held the lock all this while; a library that renews nothing (redis-py's lock lives
    // for its timeout) may have lost it by its own TTL meanwhile, by the service's record.
    let before = truth(bed, installed, key).await?;
    let b_held = before.as_deref() == Some(b_owner);
    if !b_held {
        rec.note(format!(
            "B's own holding ended by the service while the lab waited (its library renews nothing): {key} held by {}",
            shown(&before)
        ));
    }
    let (ok, said) = release(bed, rec, a, "A").await?;
    let code = a.exit_code(EVENT_TIMEOUT * 2).await?;
    rec.note(format!("A exits: {}", describe(Some(code))));
    let after = truth(bed, installed, key).await?;
    rec.check_that(
        "A's release after the partition leaves the lock as it found it (B's, or nobody's when B's own holding ended)",
        after == before,
        format_args!("{key} held by {} before A's release, by {} after", shown(&before), shown(&after)),
    );
    b.send(Request::Go).await?;
    let b_release = release(bed, rec, b, "B").await?;
    if b_held {
        rec.check_that(
            "B's release ends well",
            b_release.0,
            format_args!("said={}", b_release.1),
        );
    } else {
        rec.note(format!(
            "B's release, its holding already ended: said={}",
            b_release.1
        ));
    }
    let _ = b.exit_code(EVENT_TIMEOUT).await?;

    Ok((ok, said))
}

/// Lifts every hold; returns once each rule is gone.
async fn lift(holds: Vec<Holds>) -> anyhow::Result<()> {
    for h in holds {
        h.lift().await?;
    }
    Ok(())
}
