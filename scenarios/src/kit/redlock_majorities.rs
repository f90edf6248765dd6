//! The RL-series' shared timeline (Kleppmann's example against Redlock): two clients, five
//! servers. A cannot reach servers 3 and 4 (they refuse its connections: an iptables rule in
//! each one's namespace) and wins the lock on 0, 1, 2; then server 2 loses A's key — its wall
//! clock jumps forward past the key's TTL (RL2, the published example) or it restarts without
//! persistence (RL3); B cannot reach 0 and 1 and wins on 2, 3, 4. Both now hold a lock granted
//! by a majority, each within its validity — read from the servers' own state (`redis-cli
//! GET`/`PTTL` in each one's container). Then B writes, and A writes again.
//!
//! The lab's own Redlock clients (`lease/redlock.rs`) play A and B: nobody is frozen here, the
//! faults are the servers'. The lock lives 10 s, the published example's TTL, so that both rounds,
//! the fault and the reads fit in A's validity.

use std::time::Instant;

use anyhow::Context as _;
use fencing::lease::{Grant, LeaseStore, StoreId};
use fencing::resource::WriteMode;
use fencing::value_cas::ValueCas;
use harness::docker::RedlockServers;
use harness::evidence::{Mark, Recorder};

use crate::kit::redlock_client::{redlock_client, LONG_TTL};
use crate::kit::regression::{self, regressions, GrantSeen, Kind};
use crate::testbed::{
    acquire_mark, acquired, shown, summary_write, wrote, HOLDER_A, HOLDER_B, SCOPE, SUMMARY,
};
use crate::Testbed;

/// What happens to server 2 between the two rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// It restarts without persistence: the key, and the token counter, are gone.
    Restart,
    /// It restarts without persistence and stays unreachable for a TTL (antirez's remedy:
    /// "delayed restarts").
    DelayedRestart,
    /// Its wall clock jumps forward past the key's TTL (it was started under the clock shim):
    /// A's key expires there early; the token counter, which has no TTL, stays.
    ClockJump,
}

/// The server that loses A's key (the timeline names it "server 2" throughout).
pub(crate) const FAULTY: usize = 2;

/// How far RL2 moves server 2's clock: past the lock's TTL.
const JUMP: std::time::Duration = std::time::Duration::from_millis(11_000);

/// Checks of one run: full, or with a delayed restart (B refused: nothing more to write).
pub(crate) const FULL: usize = 8;
pub(crate) const DELAYED: usize = 4;

/// The servers' own state of `key`: per server, `holder-a PTTL 9512` or `(none)`.
async fn state(servers: &dyn RedlockServers, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..servers.endpoints().len() {
        let value = servers
            .cli(i, &format!("GET {key}"))
            .await
            .unwrap_or_default();
        let pttl = servers
            .cli(i, &format!("PTTL {key}"))
            .await
            .unwrap_or_default();
        out.push(if value.is_empty() {
            format!("s{i}: (none)")
        } else {
            format!(
                "s{i}: {} PTTL {pttl}",
                value.split(' ').next().unwrap_or(&value)
            )
        });
    }
    out
}

/// Which servers hold `holder`'s key in `state`.
fn holding(state: &[String], holder: &str) -> Vec<usize> {
    state
        .iter()
        .enumerate()
        .filter(|(_, s)| s.contains(&format!(": {holder} ")))
        .map(|(i, _)| i)
        .collect()
}

/// One run on `servers` with Redlock store `store` (`redlock`, `redlock-fenced`) and `fault`;
/// `label` prefixes every line, `lock` names the lock (a run of its own).
pub(crate) async fn run(
    bed: &mut Testbed,
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    store: StoreId,
    fault: Fault,
    label: &str,
    lock: &str,
) -> anyhow::Result<()> {
    let key = format!("fencing-lab:redlock:{lock}");
    let a = redlock_client(bed, store, servers).await?;
    let b = redlock_client(bed, store, servers).await?;
    let started = std::time::Instant::now();

    if fault == Fault::ClockJump {
        // A run starts with server 2's clock on the host's (a previous run left it ahead).
        servers.shift_clock(2, 0).await?;
    }
    let (ga, a_sent, a_at) = a_wins_0_1_2(rec, servers, a.as_ref(), lock, &key, label).await?;

    let ga = ga.context("A's lock was refused")?;
    let ok = write(bed, rec, HOLDER_A, "rows=300(A)", &ga, "write").await?;
    rec.check_that(
        format!("[{label}] A writes with token {}", ga.token),
        ok,
        format_args!("accepted={ok}"),
    );
    // Beside the fence, antirez's proposal on its own row: A claims it with its lock's value.
    let cas = ValueCas::new(bed.resource.pool().clone()).await?;
    cas.claim(lock, &ga.handle).await?;
    let a_cas = cas.write(lock, &ga.handle, "rows=300(A)", HOLDER_A).await?;

    // Server 2 loses A's key.
    if fault == Fault::ClockJump {
        jump_clock(rec, servers, &key, label).await?;
    } else {
        restart(rec, servers, &key, label, fault).await?;
    }

    let (gb, b_sent, b_at) = b_acquires_from_2_3_4(rec, servers, b.as_ref(), lock, fault).await?;

    let seen = state(servers, &key).await;
    if fault == Fault::DelayedRestart {
        rec.check_that(
            format!(
                "[{label}] B cannot win a majority while A's lock is valid: only 3 and 4 answer it"
            ),
            gb.is_none() && ga.locally_valid(),
            format_args!(
                "B's lock {}; {}",
                if gb.is_some() { "granted" } else { "refused" },
                seen.join(" · ")
            ),
        );
        return Ok(());
    }
    let both = gb.as_ref().is_some_and(|g| g.locally_valid()) && ga.locally_valid();
    rec.check_that(
        format!("[{label}] negative control exposes: A and B each hold a lock a majority granted, both within their validity (the servers' own state)"),
        both && holding(&seen, HOLDER_B) == [2, 3, 4] && holding(&seen, HOLDER_A) == [0, 1],
        seen.join(" · "),
    );
    let gb = gb.context("B's lock was refused")?;
    let ok = write(bed, rec, HOLDER_B, "rows=301(B)", &gb, "write").await?;
    rec.check_that(
        format!("[{label}] B writes with token {}", gb.token),
        ok,
        format_args!("accepted={ok}"),
    );
    cas.claim(lock, &gb.handle).await?;
    let b_cas = cas.write(lock, &gb.handle, "rows=301(B)", HOLDER_B).await?;
    // When A wrote again, and whether its own validity still said it held the lock then.
    let (a_again_at, a_still_valid) = (std::time::Instant::now(), ga.locally_valid());
    let action = "write again (still valid by its clock)";
    let a_again = write(bed, rec, HOLDER_A, "rows=302(A)", &ga, action).await?;
    let a_cas_again = cas.write(lock, &ga.handle, "rows=302(A)", HOLDER_A).await?;
    let cas_row = cas.state(lock).await?;
    check_and_set_verdict(rec, label, (&ga, &gb), (a_cas, b_cas, a_cas_again), cas_row);
    let summary = bed.resource.part(SCOPE, SUMMARY).await?;
    let part = shown(summary.map(|p| format!("{} by {} token={}", p.content, p.writer, p.token)));
    let (grants, overlap) = in_time(
        started,
        [(&ga, a_sent, a_at), (&gb, b_sent, b_at)],
        a_again_at,
        a_still_valid,
    );
    let tokens = (ga.token, gb.token);
    judge(
        rec, label, store, fault, tokens, a_again, &part, &grants, overlap,
    );
    Ok(())
}

/// The two grants as the token-regression check reads them, timed from `started`, and whether
/// A wrote again while B held the lock and A's own validity said it still held it.
fn in_time(
    started: std::time::Instant,
    granted: [(&Grant, std::time::Instant, std::time::Instant); 2],
    a_again_at: std::time::Instant,
    a_still_valid: bool,
) -> ([GrantSeen; 2], (bool, String)) {
    let ms = |at: std::time::Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    let b_at = granted[1].2;
    let grants = granted.map(|(g, sent, at)| {
        GrantSeen::acknowledged(
            &g.holder,
            g.token,
            ms(sent),
            ms(at),
            format!("{} granted token={} at {:.0} ms", g.holder, g.token, ms(at)),
        )
    });
    let overlap = (
        held_at_once(a_again_at, b_at, a_still_valid),
        format!(
            "B granted at {:.0} ms, A wrote again at {:.0} ms, A's validity then: {}",
            ms(b_at),
            ms(a_again_at),
            if a_still_valid {
                "not passed"
            } else {
                "passed"
            }
        ),
    );
    (grants, overlap)
}

/// antirez's check-and-set beside the fence: A's write after B's claim is rejected — B's
/// random value replaced A's (`wrote`: A's first write, B's, A's again; `row`: the row after).
fn check_and_set_verdict(
    rec: &mut Recorder,
    label: &str,
    (ga, gb): (&Grant, &Grant),
    (a_cas, b_cas, a_cas_again): (bool, bool, bool),
    cas_row: Option<fencing::value_cas::CasState>,
) {
    rec.check_that(
        format!("[{label}] antirez's check-and-set beside it: A's write after B's claim is rejected — B's random value replaced A's"),
        a_cas && b_cas && !a_cas_again && ga.handle != gb.handle,
        format_args!(
            "A's value {}, B's {}; A writes {a_cas}, B claims and writes {b_cas}, A again {a_cas_again}; the row: {}",
            ga.handle,
            gb.handle,
            shown(cas_row.map(|r| format!(
                "lock_value {} content {} by {}",
                r.lock_value,
                r.content.unwrap_or_default(),
                r.writer.unwrap_or_default()
            )))
        ),
    );
}

/// A acquires while servers 3 and 4 refuse it: it must win 0, 1 and 2, a majority. Its grant,
/// and when it was sent and answered.
async fn a_wins_0_1_2(
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    a: &dyn LeaseStore,
    lock: &str,
    key: &str,
    label: &str,
) -> anyhow::Result<(Option<Grant>, Instant, Instant)> {
    // A cannot reach 3 and 4.
    servers.refuse(3).await?;
    servers.refuse(4).await?;
    let a_sent = std::time::Instant::now();
    let granted_a = a.acquire(lock, HOLDER_A, LONG_TTL).await;
    let a_at = std::time::Instant::now();
    servers.admit(3).await?;
    servers.admit(4).await?;
    let ga = granted_a?;
    rec.step(
        acquire_mark(ga.as_ref()),
        "A",
        "acquire (3 and 4 refuse it)",
        ga.as_ref().map(|g| g.token),
        acquired(ga.as_ref()),
        None,
    );
    let seen = state(servers, key).await;
    rec.check_that(
        format!(
            "[{label}] A wins the lock on servers 0, 1, 2 — a majority — while 3 and 4 refuse it"
        ),
        ga.is_some() && holding(&seen, HOLDER_A) == [0, 1, 2],
        seen.join(" · "),
    );
    Ok((ga, a_sent, a_at))
}

/// B acquires while servers 0 and 1 refuse it (after a delayed restart, server 2 answers only
/// now): its grant, if any, and when it was sent and answered.
async fn b_acquires_from_2_3_4(
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    b: &dyn LeaseStore,
    lock: &str,
    fault: Fault,
) -> anyhow::Result<(Option<Grant>, Instant, Instant)> {
    // B cannot reach 0 and 1.
    servers.refuse(0).await?;
    servers.refuse(1).await?;
    let b_sent = std::time::Instant::now();
    let granted_b = b.acquire(lock, HOLDER_B, LONG_TTL).await;
    let b_at = std::time::Instant::now();
    servers.admit(0).await?;
    servers.admit(1).await?;
    if fault == Fault::DelayedRestart {
        servers.admit(2).await?;
    }
    let gb = granted_b?;
    rec.step(
        acquire_mark(gb.as_ref()),
        "B",
        "acquire (0 and 1 refuse it)",
        gb.as_ref().map(|g| g.token),
        acquired(gb.as_ref()),
        None,
    );
    Ok((gb, b_sent, b_at))
}

/// `holder` writes `content` to the summary with `grant`'s token, fenced: its step `action`
/// (A's or B's), and whether the resource accepted it.
async fn write(
    bed: &Testbed,
    rec: &mut Recorder,
    holder: &str,
    content: &str,
    grant: &Grant,
    action: &str,
) -> anyhow::Result<bool> {
    let write = summary_write(holder, content, grant.token);
    let ok = bed.resource.write(&write, WriteMode::Fenced).await?;
    let who = if holder == HOLDER_A { "A" } else { "B" };
    rec.step(
        Mark::Write { accepted: ok },
        who,
        action,
        Some(grant.token),
        wrote(ok, grant.token),
        None,
    );
    Ok(ok)
}

/// The run's verdicts: the fence's answer where the store's token holds, the harm where it does
/// not (the token-regression check; for Redlock without a token, the overlap itself).
#[allow(clippy::too_many_arguments)]
fn judge(
    rec: &mut Recorder,
    label: &str,
    store: StoreId,
    fault: Fault,
    (a_token, b_token): (i64, i64),
    a_again: bool,
    part: &str,
    grants: &[GrantSeen],
    overlap: (bool, String),
) {
    let found = regressions(grants);
    let shown_found = regression::shown(grants, &found);
    if fault == Fault::ClockJump && store == StoreId::RedlockFenced {
        // The counter has no TTL: a clock jump does not touch it.
        rec.check_that(
            format!("[{label}] positive control: the counter outlived the jump, B's token is greater than A's and the fence rejects A's write after B's"),
            !a_again && b_token > a_token,
            format_args!(
                "A {}, B {}; A's write accepted={a_again}; summary {part}",
                a_token, b_token
            ),
        );
        rec.check_that(
            format!("[{label}] the token-regression check finds nothing"),
            found.is_empty(),
            shown_found,
        );
    } else {
        rec.check_that(
            format!(
                "[{label}] negative control exposes: A's write after B's is accepted{}",
                if store == StoreId::RedlockFenced {
                    " — the restarted server forgot its counter, B's token is A's"
                } else {
                    " — no token to tell them apart"
                }
            ),
            a_again && b_token <= a_token,
            format_args!(
                "A {}, B {}; A's write accepted={a_again}; summary {part}",
                a_token, b_token
            ),
        );
        if store == StoreId::Redlock {
            // Every grant answers token 0, so the regression check flags any two grants,
            // overlapping or not: the overlap itself is judged instead, by the lab's clock.
            rec.check_that(
                format!(
                    "[{label}] two holders at once, by the lab's clock: A wrote again after B's \
                     grant was acknowledged, while A's own validity still said it held the lock"
                ),
                overlap.0,
                &overlap.1,
            );
        } else {
            rec.check_that(
                format!("[{label}] the token-regression check catches it"),
                found
                    .iter()
                    .any(|r| matches!(r.kind, Kind::AcknowledgedTwice | Kind::Backwards)),
                shown_found,
            );
        }
    }
}

/// RL3's fault: server 2 restarts without persistence (and, delayed, refuses clients for a TTL).
async fn restart(
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    key: &str,
    label: &str,
    fault: Fault,
) -> anyhow::Result<()> {
    servers.restart(2).await?;
    if fault == Fault::DelayedRestart {
        servers.refuse(2).await?;
    }
    rec.step(
        Mark::Info,
        "lab",
        "server 2 restarted, empty",
        None,
        if fault == Fault::DelayedRestart {
            "SIGKILL; started again, refusing clients for a TTL"
        } else {
            "SIGKILL; started again"
        },
        None,
    );
    let exists = servers.cli(2, &format!("EXISTS {key}")).await?;
    let log = servers.log(2).await;
    let restarted = log
        .lines()
        .rfind(|l| l.contains("starting it again"))
        .unwrap_or("")
        .to_owned();
    rec.check_that(
        format!(
            "[{label}] server 2 restarts without persistence{}: A's key is gone there",
            if fault == Fault::DelayedRestart {
                " and stays unreachable for a TTL (delayed restart)"
            } else {
                ""
            }
        ),
        exists == "0" && !restarted.is_empty(),
        format_args!("EXISTS = {exists}; its log: {restarted}"),
    );
    Ok(())
}

/// RL2's fault: server 2's wall clock jumps [`JUMP`] ahead; A's key expires there by that clock.
/// The skew is read from the servers themselves (`TIME` on server 2 against server 0's).
async fn jump_clock(
    rec: &mut Recorder,
    servers: &dyn RedlockServers,
    key: &str,
    label: &str,
) -> anyhow::Result<()> {
    let skew = || async {
        let zero = servers.time_ms(0).await?;
        let two = servers.time_ms(2).await?;
        Ok::<_, anyhow::Error>(two - zero)
    };
    let pttl_before = servers.cli(2, &format!("PTTL {key}")).await?;
    let before = skew().await?;
    let jump = i64::try_from(JUMP.as_millis()).unwrap_or(i64::MAX);
    servers.shift_clock(2, jump).await?;
    let after = skew().await?;
    rec.step(
        Mark::Info,
        "lab",
        "server 2's clock jumps ahead",
        None,
        format!("+{} s (its TIME against server 0's)", JUMP.as_secs()),
        None,
    );
    let exists = servers.cli(2, &format!("EXISTS {key}")).await?;
    rec.check_that(
        format!(
            "[{label}] server 2's wall clock jumps {} s ahead: A's key expires there early, by that clock",
            JUMP.as_secs()
        ),
        exists == "0" && after - before >= jump - 1000,
        format_args!(
            "server 2's TIME minus server 0's: {before:+} ms before, {after:+} ms after; A's key there had PTTL {pttl_before} ms, now EXISTS = {exists}"
        ),
    );
    Ok(())
}

/// Two holders at once, by the lab's clock: A wrote again after B's grant was acknowledged
/// (`b_at`), while A's own validity still said it held the lock. Equal instants are not after.
fn held_at_once(
    a_again_at: std::time::Instant,
    b_at: std::time::Instant,
    a_still_valid: bool,
) -> bool {
    a_again_at > b_at && a_still_valid
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// Planted runs, instants set by hand: the judgment flips with the instants, never a
    /// constant — A's write before B's grant, or after its own validity, is one holder at a time.
    #[test]
    fn two_holders_at_once_only_when_a_writes_after_b_s_grant_still_valid() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(super::held_at_once(at(30), at(20), true));
        assert!(!super::held_at_once(at(10), at(20), true));
        assert!(!super::held_at_once(at(20), at(20), true));
        assert!(!super::held_at_once(at(30), at(20), false));
    }
}
