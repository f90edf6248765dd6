//! RL3's timeline (Kleppmann's example against Redlock, with a restart where he has a clock jump —
//! RL2, the clock jump itself, waits for a libfaketime that runs under Debian's jemalloc-linked
//! redis-server: see LIMITS.md): two clients, five servers. A cannot reach servers 3 and 4 (they
//! refuse its connections: an iptables rule in each one's namespace) and wins the lock on 0, 1,
//! 2; server 2 restarts without persistence and A's key there is gone; B cannot reach 0 and 1
//! and wins on 2, 3, 4. Both now hold a lock granted by a majority, each within
//! its validity — read from the servers' own state (`redis-cli GET`/`PTTL` in each one's
//! container). Then B writes, and A writes again.
//!
//! The lab's own Redlock clients (`lease/redlock.rs`) play A and B: nobody is frozen here, the
//! faults are the servers'. The lock lives 10 s, the published example's TTL, so that both rounds,
//! the fault and the reads fit in A's validity.

use anyhow::Context as _;
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::hosts::RedlockServers;

use crate::chaos::regression::{self, regressions, GrantSeen, Kind};
use crate::lab::{acquire_mark, acquired, shown, wrote, HOLDER_A, HOLDER_B, SCOPE, SUMMARY};
use crate::rl1_redlock_paused_client::{redlock_client, LONG_TTL};
use crate::Lab;

/// What happens to server 2 between the two rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// It restarts without persistence: the key, and the token counter, are gone.
    Restart,
    /// It restarts without persistence and stays unreachable for a TTL (antirez's remedy:
    /// "delayed restarts").
    DelayedRestart,
}

/// Checks of one run: full, or with a delayed restart (B refused: nothing more to write).
pub(crate) const FULL: usize = 7;
pub(crate) const DELAYED: usize = 4;

/// The servers' own state of `key`: per server, `holder-a PTTL 9512` or `(none)`.
async fn state(servers: &RedlockServers, key: &str) -> Vec<String> {
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
    lab: &mut Lab,
    rec: &mut Recorder,
    servers: &RedlockServers,
    store: &str,
    fault: Fault,
    label: &str,
    lock: &str,
) -> anyhow::Result<()> {
    let key = format!("fencing-lab:redlock:{lock}");
    let a = redlock_client(lab, store, servers).await?;
    let b = redlock_client(lab, store, servers).await?;
    let started = std::time::Instant::now();
    let ms = |at: std::time::Instant| at.duration_since(started).as_secs_f64() * 1000.0;

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
    let seen = state(servers, &key).await;
    rec.check_that(
        format!(
            "[{label}] A wins the lock on servers 0, 1, 2 — a majority — while 3 and 4 refuse it"
        ),
        ga.is_some() && holding(&seen, HOLDER_A) == [0, 1, 2],
        seen.join(" · "),
    );
    let ga = ga.context("A's lock was refused")?;
    let write = |writer, content, token| Write {
        scope: SCOPE,
        part: SUMMARY,
        content,
        writer,
        token,
    };
    let ok = lab
        .resource
        .write(&write(HOLDER_A, "rows=300(A)", ga.token), WriteMode::Fenced)
        .await?;
    rec.step(
        Mark::Write { accepted: ok },
        "A",
        "write",
        Some(ga.token),
        wrote(ok, ga.token),
        None,
    );
    rec.check_that(
        format!("[{label}] A writes with token {}", ga.token),
        ok,
        format_args!("accepted={ok}"),
    );

    // Server 2 loses A's key.
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
    let ok = lab
        .resource
        .write(&write(HOLDER_B, "rows=301(B)", gb.token), WriteMode::Fenced)
        .await?;
    rec.step(
        Mark::Write { accepted: ok },
        "B",
        "write",
        Some(gb.token),
        wrote(ok, gb.token),
        None,
    );
    rec.check_that(
        format!("[{label}] B writes with token {}", gb.token),
        ok,
        format_args!("accepted={ok}"),
    );
    let a_again = lab
        .resource
        .write(&write(HOLDER_A, "rows=302(A)", ga.token), WriteMode::Fenced)
        .await?;
    rec.step(
        Mark::Write { accepted: a_again },
        "A",
        "write again (still valid by its clock)",
        Some(ga.token),
        wrote(a_again, ga.token),
        None,
    );
    let summary = lab.resource.part(SCOPE, SUMMARY).await?;
    let part = shown(summary.map(|p| format!("{} by {} token={}", p.content, p.writer, p.token)));
    let grants = [
        GrantSeen::acknowledged(
            HOLDER_A,
            ga.token,
            ms(a_sent),
            ms(a_at),
            format!(
                "{HOLDER_A} granted token={} at {:.0} ms",
                ga.token,
                ms(a_at)
            ),
        ),
        GrantSeen::acknowledged(
            HOLDER_B,
            gb.token,
            ms(b_sent),
            ms(b_at),
            format!(
                "{HOLDER_B} granted token={} at {:.0} ms",
                gb.token,
                ms(b_at)
            ),
        ),
    ];
    let found = regressions(&grants);
    let shown_found = regression::shown(&grants, &found);
    {
        rec.check_that(
            format!(
                "[{label}] negative control exposes: A's write after B's is accepted{}",
                if store == "redlock-fenced" {
                    " — the restarted server forgot its counter, B's token is A's"
                } else {
                    " — no token to tell them apart"
                }
            ),
            a_again && gb.token <= ga.token,
            format_args!(
                "A {}, B {}; A's write accepted={a_again}; summary {part}",
                ga.token, gb.token
            ),
        );
        rec.check_that(
            format!("[{label}] the token-regression check catches it"),
            found
                .iter()
                .any(|r| matches!(r.kind, Kind::AcknowledgedTwice | Kind::Backwards)),
            shown_found,
        );
    }
    Ok(())
}
