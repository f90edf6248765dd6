//! The databases' own locks as the lease store: `--lease-store pg-advisory-fenced` and
//! `pg-advisory`, PostgreSQL's session-level advisory lock on the embedded cluster, and
//! `mariadb-getlock-fenced` and `mariadb-getlock`, MariaDB's GET_LOCK on a local MariaDB the lab
//! starts (feature `mariadb`) — no Docker. The experiments that act on a holder (F1, F3, F4, F5,
//! F10, F12, F13) pass on the fenced forms, a kill -9 frees the lock at once
//! (the server ends the session with its socket, before the TTL), and with no server timeout
//! (S1) a frozen holder keeps the lock for the lab's whole bound, and a crash of the server
//! (S2) takes the lock from a frozen holder, whose write only the counter then fences; the plain
//! locks, with nothing
//! to fence with, let the paused holder's stale write through where the fence should have
//! stopped it (F4 fails, on the very check). The lease table renewed in batches
//! (`postgres-batched`), the other store on the lab's own database, passes the same experiments.
//! Nothing is left behind.

mod common;

use std::fs;

use common::{stderr, Sandbox};

/// Runs `lab run --lease-store <store> --only <only>` in `sb`, the fence-dependent experiments in
/// every fenced mode; its exit code and output.txt.
fn run_on(sb: &Sandbox, store: &str, only: &str) -> anyhow::Result<(Option<i32>, String)> {
    let ev = sb.path(&format!("ev-{store}"));
    let out = sb.lab(&[
        "run",
        "--lease-store",
        store,
        "--only",
        only,
        "--evidence-dir",
        ev.to_str().expect("a UTF-8 path"),
    ])?;
    let text = fs::read_to_string(ev.join("output.txt")).unwrap_or_else(|_| stderr(&out));
    Ok((out.status.code(), text))
}

#[test]
fn the_fenced_advisory_lock_passes_the_holder_experiments_and_a_kill_frees_it_at_once(
) -> anyhow::Result<()> {
    the_fenced_lock_passes(
        "pg-advisory-fenced",
        "F1,F3,F4,F5,F10,F12,F13,S1,S2,S3,S4",
        "lease store: pg-advisory-fenced on the lab's lease database",
    )
}

#[cfg(feature = "mariadb")]
#[test]
fn the_fenced_getlock_passes_the_holder_experiments_and_a_kill_frees_it_at_once(
) -> anyhow::Result<()> {
    the_fenced_lock_passes(
        "mariadb-getlock-fenced",
        "F1,F3,F4,F5,F10,F12,F13,S1,S2,S3",
        "a local server of its own; token: the lock row's counter",
    )
}

/// The lease table renewed in batches (`postgres-batched`): the experiments every lease store
/// runs pass, the fence-dependent ones in every fenced mode. F13 is among them: its row below
/// the boundary runs on every store that is not a lock service, so its count must hold on this
/// store as on the lease table.
#[test]
fn the_batched_lease_table_passes_the_store_experiments_in_every_fenced_mode() -> anyhow::Result<()>
{
    let sb = Sandbox::new()?;
    let only = "F1,F3,F4,F5,F10,F12,F13";
    let (code, out) = run_on(&sb, "postgres-batched", only)?;
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("  FAIL"), "{out}");
    for id in only
        .split(',')
        .chain(["F4-fenced-single", "F4-fenced-shared"])
    {
        assert!(
            out.contains(&format!("CASE {id} ")),
            "{id} did not run:\n{out}"
        );
    }
    sb.assert_nothing_left()
}

#[test]
fn the_plain_advisory_lock_lets_the_paused_holders_stale_write_through() -> anyhow::Result<()> {
    the_plain_lock_fails_f4("pg-advisory")
}

#[cfg(feature = "mariadb")]
#[test]
fn the_plain_getlock_lets_the_paused_holders_stale_write_through() -> anyhow::Result<()> {
    the_plain_lock_fails_f4("mariadb-getlock")
}

fn the_fenced_lock_passes(store: &str, only: &str, described: &str) -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let (code, out) = run_on(&sb, store, only)?;
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("  FAIL"), "{out}");
    for id in only.split(',') {
        assert!(
            out.contains(&format!("CASE {id} ")),
            "{id} did not run:\n{out}"
        );
    }
    assert!(out.contains(described), "{out}");
    // F12, both of its kills: freed as the connection closed, measured against the TTL.
    let freed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("the server freed A's lock as soon as A's connection closed"))
        .collect();
    assert_eq!(freed.len(), 2, "{out}");
    assert!(freed.iter().all(|l| l.starts_with("  ok ")), "{freed:?}");
    // S1: with no server timeout, B is refused for the lab's whole bound (liveness lost), and
    // gets the lock once A released it.
    let s1 = out.split("CASE S1 ").nth(1).expect("S1 ran");
    assert!(
        s1.contains("ok   B, asking for the lock for") && s1.contains("ok   once A released"),
        "{s1}"
    );
    // S2: the lock vanished in the server's crash, B took it at once; A's write, prepared
    // under it, is rejected by the counter the crash kept, and accepted unfenced.
    let s2 = out.split("CASE S2 ").nth(1).expect("S2 ran");
    for line in [
        "ok   fenced-scope: the fenced resource rejects A's write by B's greater token",
        "ok   negative control exposes: unfenced: A's write, under the lock the crash took",
    ] {
        assert!(s2.contains(line), "{line}:\n{s2}");
    }
    // S3: the failover carried the counter, not the lock — PostgreSQL's standby, or MariaDB's
    // replica.
    if let Some(s3) = out.split("CASE S3 ").nth(1) {
        assert!(
            (s3.contains("1 on the primary, 0 on the standby")
                || s3.contains("on the primary, none on the replica"))
                && s3.contains("ok   negative control exposes: unfenced: A's write after B's"),
            "{s3}"
        );
    }
    // F4: the paused holder's stale write, fenced with the lock row's counter, is rejected.
    assert!(
        out.contains("ok   A's stale write is rejected by the resource"),
        "{out}"
    );
    sb.assert_nothing_left()
}

fn the_plain_lock_fails_f4(store: &str) -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let (code, out) = run_on(&sb, store, "F4,F5")?;
    assert_eq!(code, Some(1), "the plain lock must fail F4:\n{out}");
    assert!(
        out.contains(&format!("(the fence fed no token: {store} issues none)")),
        "{out}"
    );
    // The harm itself, on F4's own check: the server ended A's session while A was frozen, B
    // took the lock, and A's write went through — there was nothing to fence it with.
    assert!(
        out.lines().any(
            |l| l.starts_with("  FAIL A's stale write is rejected by the resource")
                && l.contains("actual=WRITE accepted=true")
        ),
        "{out}"
    );
    // F5 (unfenced) shows the same write accepted, as its control must.
    let f5 = out.split("CASE F5 ").nth(1).expect("F5 ran");
    assert!(!f5.contains("  FAIL"), "{f5}");
    // A failing run keeps its failing experiment's cluster, stopped; `lab clean` removes it.
    let cleaned = sb.clean()?;
    assert_eq!(cleaned.status.code(), Some(0), "{}", stderr(&cleaned));
    sb.assert_nothing_left()
}
