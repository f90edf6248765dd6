//! The line protocol between the orchestrator (the lab) and a holder process: the one place it is
//! defined. Both sides encode and decode through these types; nothing else writes protocol text.
//!
//! One message per line, newline-delimited, `TAG key=value …`. The orchestrator speaks first:
//! `HELLO version=N`; the holder answers `HELLO version=N pid=P` or, on a mismatch, reports an
//! `ERROR` and exits with [`exit::PROTOCOL`]. Then the holder reports its progress as [`Event`]s
//! and waits at the write point for [`Request::Go`].
//!
//! ```text
//! lab → holder   HELLO version=5
//! holder → lab   HELLO version=5 pid=4242
//! holder → lab   ACQUIRED token=1
//! holder → lab   AT_WRITE_POINT token=1 deadline_left_ms=1196
//! holder → lab   RENEWED ok=true token=1          (from the background renewer, any time)
//! lab → holder   GO
//! holder → lab   WRITE accepted=false token=1
//! holder → lab   RENEW_AFTER_WRITE ok=false
//! ```
//!
//! A holder started with `--wait-before-check` also stops *before* its local-deadline check: it
//! reports `BEFORE_CHECK` and waits for a first `GO`; then it checks, and either gives up or goes on
//! to the write point as above (a second `GO`). A pause there is judged by the check:
//!
//! ```text
//! holder → lab   ACQUIRED token=1
//! holder → lab   BEFORE_CHECK token=1 deadline_left_ms=1198
//! lab → holder   GO
//! holder → lab   DEADLINE_PASSED token=1 overdue_ms=2310   (exit 8; or AT_WRITE_POINT …, GO, WRITE …)
//! ```
//!
//! A holder started with `--wait-before-commit` (fenced-scope only) stops *inside* its write
//! transaction — after the floor UPDATE, the part's upsert and the attempt record, before COMMIT —
//! reports `BEFORE_COMMIT` and waits for a `GO` to commit; with `--wait-after-write` it waits for a
//! `GO` after reporting `WRITE`, before its renew. Both are places where the lab can kill it (F12).
//!
//! A holder started with `--loop-seed` loops until stdin closes and reports each operation twice:
//! its invocation, then its completion — `ok`, `fail` (known not to have happened: refused,
//! rejected) or `info` (outcome unknown: an error, e.g. the server went away mid-statement).
//!
//! ```text
//! holder → lab   OP id=1 phase=invoke f=acquire token=0 scope=- part=-
//! holder → lab   OP id=1 phase=ok f=acquire token=7 scope=- part=-
//! holder → lab   OP id=2 phase=invoke f=write token=7 scope=daily-report part=p2
//! holder → lab   OP id=2 phase=fail f=write token=7 scope=daily-report part=p2
//! ```
//!
//! The holder's command line is part of the same contract: [`HolderFlags`] (in `flags.rs`) is
//! built into arguments by the lab and parsed by the holder.

use std::fmt;

mod flags;

pub use flags::{HolderFlags, AFTER_HELP};

/// Bumped whenever a message changes shape or a new one may appear. Version 2: `BEFORE_CHECK`,
/// and `DEADLINE_PASSED` says by how much the deadline had passed (`overdue_ms`). Version 3:
/// `BEFORE_COMMIT`. Version 4: `OP` (a looping holder's operations, `--loop-seed`). Version 5:
/// a token may be `none` ([`Token`]: a lock library that exposes nothing to fence with), and a
/// library holder's `HOLDING`, `ASKED` and `RELEASE_ENDED`.
pub const VERSION: u32 = 5;

/// What a holder reports as its token: the number its lease store granted — opaque and ordered,
/// greater after every takeover, gaps allowed — or `none`, a first-class answer: the holder's
/// lease (a published lock library used as it ships) exposes nothing ordered to fence with.
/// The experiments judge a holding without a token as "cannot fence" on every check that
/// needs one: never a pass, and never a token 0 that trips a token check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Token {
    /// No token: `token=none`.
    None,
    /// `token=N`.
    Value(i64),
}

impl Token {
    /// The number, if there is one.
    pub fn value(self) -> Option<i64> {
        match self {
            Token::None => None,
            Token::Value(n) => Some(n),
        }
    }
}

impl From<i64> for Token {
    fn from(n: i64) -> Token {
        Token::Value(n)
    }
}

/// A token compared with a number: equal only when it is that number (`none` equals none).
impl PartialEq<i64> for Token {
    fn eq(&self, other: &i64) -> bool {
        *self == Token::Value(*other)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::None => f.write_str("none"),
            Token::Value(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for Token {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Token, Self::Err> {
        if s == "none" {
            Ok(Token::None)
        } else {
            s.parse().map(Token::Value)
        }
    }
}

/// The start of a stderr line in which a holder quotes what its lease store's client said of a
/// holding it found lost on its renew after the write (a ZooKeeper session the server expired
/// while the process was frozen). Not a protocol message: the lab reads it from the holder's
/// stderr, where a holder that does not write it loses nothing.
pub const LOST_PREFIX: &str = "lease lost: ";

/// The start of a stderr line in which a holder gives, beside a `BEFORE_CHECK`,
/// `AT_WRITE_POINT` or `DEADLINE_PASSED` it emits, the kernel's monotonic clock read at the
/// moment of that event's own clock reading, through a path a time-faking library preloaded
/// into it does not intercept (the raw `clock_gettime` system call): `kernel clock:
/// BEFORE_CHECK ms=123456`. F13 measures the rate its holder's clock runs at from two such
/// pairs — the holder's own clock against the kernel's, read at the same moments — instead of
/// from when the events reached the lab, which a loaded machine delays. Not a protocol message:
/// a holder that does not write it loses nothing (the lab times the events' arrivals instead).
pub const KERNEL_CLOCK_PREFIX: &str = "kernel clock: ";

/// The stderr line giving the kernel's clock, `ms`, read with the clock reading of the event
/// tagged `tag` ([`KERNEL_CLOCK_PREFIX`]).
pub fn kernel_clock_line(tag: &str, ms: u64) -> String {
    format!("{KERNEL_CLOCK_PREFIX}{tag} ms={ms}")
}

/// The kernel's clock in a [`kernel_clock_line`] for the event tagged `tag`; `None` for any
/// other line.
pub fn kernel_clock_reading(line: &str, tag: &str) -> Option<u64> {
    let rest = line.strip_prefix(KERNEL_CLOCK_PREFIX)?.strip_prefix(tag)?;
    rest.strip_prefix(" ms=")?.trim_end().parse().ok()
}

/// The holder's exit statuses (documented in the holder's `--help`).
pub mod exit {
    /// It wrote (accepted) and its lease was still held afterwards.
    pub const WROTE: i32 = 0;
    /// A runtime failure (e.g. the database could not be reached).
    pub const FAILURE: i32 = 1;
    /// Bad command-line arguments.
    pub const USAGE: i32 = 2;
    /// Lease lost: the renew after the write failed (whatever the write's outcome).
    pub const LEASE_LOST: i32 = 3;
    /// The write was rejected although the lease was still held.
    pub const REJECTED: i32 = 4;
    /// The lease was held by someone else: nothing was written.
    pub const NOT_ACQUIRED: i32 = 5;
    /// The orchestrator went away (stdin closed) before the go-line: nothing was written.
    pub const ORPHANED: i32 = 6;
    /// The orchestrator spoke another protocol version or sent an unexpected line.
    pub const PROTOCOL: i32 = 7;
    /// The local deadline had passed at the local-deadline check, before the write point: the
    /// holder gave up by itself; nothing was written.
    pub const DEADLINE_PASSED: i32 = 8;

    /// A name for an exit status, for the evidence.
    pub fn name(code: i32) -> &'static str {
        match code {
            WROTE => "wrote",
            FAILURE => "failure",
            USAGE => "usage",
            LEASE_LOST => "lease lost",
            REJECTED => "rejected",
            NOT_ACQUIRED => "not acquired",
            ORPHANED => "orphaned",
            PROTOCOL => "protocol error",
            DEADLINE_PASSED => "deadline passed",
            _ => "unknown",
        }
    }
}

/// Orchestrator → holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The handshake: the orchestrator's protocol version.
    Hello { version: u32 },
    /// The go-line. At the write point: write now, without re-checking anything. Before the
    /// check (`--wait-before-check`): go on to the local-deadline check.
    Go,
}

/// Holder → orchestrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake's answer.
    Hello { version: u32, pid: u32 },
    /// The lease was granted with this token.
    Acquired { token: Token },
    /// The lease is held by someone else.
    Refused,
    /// A background renewal's result.
    Renewed { ok: bool, token: Token },
    /// (`--wait-before-check` only) The holder stands before its local-deadline check and waits
    /// for [`Request::Go`]; `deadline_left_ms` is what its monotonic clock said as it reported
    /// (the check itself comes after the go-line and reads the clock again).
    BeforeCheck { token: Token, deadline_left_ms: u64 },
    /// The local-deadline check passed; the holder waits for [`Request::Go`].
    AtWritePoint { token: Token, deadline_left_ms: u64 },
    /// The local deadline had passed at the check, by `overdue_ms` on the holder's monotonic
    /// clock; the holder will not write.
    DeadlinePassed { token: Token, overdue_ms: u64 },
    /// (`--wait-before-commit` only) The write's transaction has advanced the floor, upserted the
    /// part and recorded the attempt, and waits for [`Request::Go`] before its COMMIT.
    BeforeCommit { token: Token },
    /// The write's result.
    Write { accepted: bool, token: Token },
    /// The result of the one renew tried after the write.
    RenewAfterWrite { ok: bool },
    /// The result of the release (holders asked to release after writing).
    Released { ok: bool },
    /// (a library holder) Where its holding lives at the lock service, so that the lab can read
    /// the truth there: `key` (a Redis key, an etcd key, a ZooKeeper lock path) and `owner`, what
    /// the library stores there for this holding (the value, or the lock node's data). Neither
    /// holds a space.
    Holding { key: String, owner: String },
    /// (a library holder) After the go-line, before its write: the library's own ownership
    /// question (`lock.owned()`, `lock.is_acquired`, …) and its answer, quoted as the library
    /// gave it (the rest of the line: `returned True`, `raised LockError: …`).
    Asked { question: String, answer: String },
    /// (a library holder) How the library's release ended: `ok` unless it raised or returned
    /// false; `said` quotes it (the rest of the line).
    ReleaseEnded { ok: bool, said: String },
    /// Something went wrong; the holder exits next.
    Error { message: String },
    /// (`--loop-seed` only) An operation's invocation or completion. `token` is the holding's
    /// (for an acquire's `ok`: the token granted; 0 before one is known); `scope` and `part` are
    /// `-` where they do not apply.
    Op {
        id: u64,
        phase: OpPhase,
        f: OpKind,
        token: i64,
        scope: String,
        part: String,
    },
}

/// Where an operation stands: invoked, or completed as ok / fail / info (Jepsen's terms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpPhase {
    Invoke,
    /// It happened: granted, accepted, renewed, released.
    Ok,
    /// It is known not to have happened: refused, rejected, not renewed.
    Fail,
    /// Its outcome is unknown (an error): it may or may not have happened.
    Info,
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Acquire,
    Write,
    Renew,
    Release,
}

/// Names on the wire (and in the lab's history) and back.
macro_rules! wire_names {
    ($ty:ident { $($variant:ident = $name:literal),+ $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = ();

            fn from_str(s: &str) -> Result<Self, ()> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(()),
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_names!(OpPhase {
    Invoke = "invoke",
    Ok = "ok",
    Fail = "fail",
    Info = "info",
});
wire_names!(OpKind {
    Acquire = "acquire",
    Write = "write",
    Renew = "renew",
    Release = "release",
});

/// A line that is not a message of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a protocol line ({reason}): {line:?}")]
pub struct DecodeError {
    pub line: String,
    pub reason: String,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Hello { version } => write!(f, "HELLO version={version}"),
            Request::Go => f.write_str("GO"),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Hello { version, pid } => write!(f, "HELLO version={version} pid={pid}"),
            Event::Acquired { token } => write!(f, "ACQUIRED token={token}"),
            Event::Refused => f.write_str("REFUSED"),
            Event::Renewed { ok, token } => write!(f, "RENEWED ok={ok} token={token}"),
            Event::AtWritePoint {
                token,
                deadline_left_ms,
            } => {
                write!(
                    f,
                    "AT_WRITE_POINT token={token} deadline_left_ms={deadline_left_ms}"
                )
            }
            Event::BeforeCheck {
                token,
                deadline_left_ms,
            } => {
                write!(
                    f,
                    "BEFORE_CHECK token={token} deadline_left_ms={deadline_left_ms}"
                )
            }
            Event::DeadlinePassed { token, overdue_ms } => {
                write!(f, "DEADLINE_PASSED token={token} overdue_ms={overdue_ms}")
            }
            Event::BeforeCommit { token } => write!(f, "BEFORE_COMMIT token={token}"),
            Event::Write { accepted, token } => {
                write!(f, "WRITE accepted={accepted} token={token}")
            }
            Event::RenewAfterWrite { ok } => write!(f, "RENEW_AFTER_WRITE ok={ok}"),
            Event::Released { ok } => write!(f, "RELEASED ok={ok}"),
            Event::Holding { key, owner } => write!(f, "HOLDING key={key} owner={owner}"),
            Event::Asked { question, answer } => {
                write!(f, "ASKED question={question} answer={}", one_line(answer))
            }
            Event::ReleaseEnded { ok, said } => {
                write!(f, "RELEASE_ENDED ok={ok} said={}", one_line(said))
            }
            // The message is the rest of the line, with line breaks flattened.
            Event::Error { message } => write!(f, "ERROR {}", one_line(message)),
            Event::Op {
                id,
                phase,
                f: kind,
                token,
                scope,
                part,
            } => write!(
                f,
                "OP id={id} phase={phase} f={kind} token={token} scope={scope} part={part}"
            ),
        }
    }
}

/// Free text on one line: line breaks flattened.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// The fields of one line: its tag and its `key=value` pairs.
struct Fields<'a> {
    line: &'a str,
    tag: &'a str,
    rest: &'a str,
}

impl<'a> Fields<'a> {
    fn parse(line: &'a str) -> Fields<'a> {
        let line = line.trim_end_matches(['\n', '\r']);
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        Fields { line, tag, rest }
    }

    fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            line: self.line.to_owned(),
            reason: reason.into(),
        }
    }

    fn get<T: std::str::FromStr>(&self, key: &str) -> Result<T, DecodeError> {
        let raw = self
            .rest
            .split(' ')
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| self.err(format!("missing {key}")))?;
        raw.parse().map_err(|_| self.err(format!("bad {key}")))
    }

    /// `first=V rest=TEXT…`: a one-word field, then free text to the end of the line (`ASKED
    /// question=Q answer=…`, `RELEASE_ENDED ok=B said=…`).
    fn word_then_text(&self, first: &str, rest: &str) -> Result<(&'a str, &'a str), DecodeError> {
        let (word, text) = self
            .rest
            .split_once(&format!(" {rest}="))
            .ok_or_else(|| self.err(format!("missing {rest}")))?;
        let word = word
            .strip_prefix(first)
            .and_then(|w| w.strip_prefix('='))
            .filter(|w| !w.is_empty() && !w.contains(' '))
            .ok_or_else(|| self.err(format!("expected {first}=… first")))?;
        Ok((word, text))
    }

    /// Rejects lines with fields beyond `keys`.
    fn only(&self, keys: &[&str]) -> Result<(), DecodeError> {
        let n = self.rest.split(' ').filter(|s| !s.is_empty()).count();
        if n == keys.len() {
            Ok(())
        } else {
            Err(self.err(format!("expected the fields {keys:?}")))
        }
    }
}

impl Request {
    pub fn decode(line: &str) -> Result<Request, DecodeError> {
        let f = Fields::parse(line);
        let req = match f.tag {
            "HELLO" => {
                f.only(&["version"])?;
                Request::Hello {
                    version: f.get("version")?,
                }
            }
            "GO" => {
                f.only(&[])?;
                Request::Go
            }
            _ => return Err(f.err("unknown request")),
        };
        Ok(req)
    }
}

impl Event {
    pub fn decode(line: &str) -> Result<Event, DecodeError> {
        let f = Fields::parse(line);
        let event = match f.tag {
            "HELLO" => {
                f.only(&["version", "pid"])?;
                Event::Hello {
                    version: f.get("version")?,
                    pid: f.get("pid")?,
                }
            }
            "ACQUIRED" => {
                f.only(&["token"])?;
                Event::Acquired {
                    token: f.get("token")?,
                }
            }
            "REFUSED" => {
                f.only(&[])?;
                Event::Refused
            }
            "RENEWED" => {
                f.only(&["ok", "token"])?;
                Event::Renewed {
                    ok: f.get("ok")?,
                    token: f.get("token")?,
                }
            }
            "AT_WRITE_POINT" => {
                f.only(&["token", "deadline_left_ms"])?;
                Event::AtWritePoint {
                    token: f.get("token")?,
                    deadline_left_ms: f.get("deadline_left_ms")?,
                }
            }
            "BEFORE_CHECK" => {
                f.only(&["token", "deadline_left_ms"])?;
                Event::BeforeCheck {
                    token: f.get("token")?,
                    deadline_left_ms: f.get("deadline_left_ms")?,
                }
            }
            "DEADLINE_PASSED" => {
                f.only(&["token", "overdue_ms"])?;
                Event::DeadlinePassed {
                    token: f.get("token")?,
                    overdue_ms: f.get("overdue_ms")?,
                }
            }
            "BEFORE_COMMIT" => {
                f.only(&["token"])?;
                Event::BeforeCommit {
                    token: f.get("token")?,
                }
            }
            "WRITE" => {
                f.only(&["accepted", "token"])?;
                Event::Write {
                    accepted: f.get("accepted")?,
                    token: f.get("token")?,
                }
            }
            "RENEW_AFTER_WRITE" => {
                f.only(&["ok"])?;
                Event::RenewAfterWrite { ok: f.get("ok")? }
            }
            "RELEASED" => {
                f.only(&["ok"])?;
                Event::Released { ok: f.get("ok")? }
            }
            "HOLDING" => {
                f.only(&["key", "owner"])?;
                Event::Holding {
                    key: f.get("key")?,
                    owner: f.get("owner")?,
                }
            }
            "ASKED" => {
                let (question, answer) = f.word_then_text("question", "answer")?;
                Event::Asked {
                    question: question.to_owned(),
                    answer: answer.to_owned(),
                }
            }
            "RELEASE_ENDED" => {
                let (ok, said) = f.word_then_text("ok", "said")?;
                Event::ReleaseEnded {
                    ok: ok.parse().map_err(|_| f.err("bad ok"))?,
                    said: said.to_owned(),
                }
            }
            "ERROR" => Event::Error {
                message: f.rest.to_owned(),
            },
            "OP" => {
                f.only(&["id", "phase", "f", "token", "scope", "part"])?;
                Event::Op {
                    id: f.get("id")?,
                    phase: f.get("phase")?,
                    f: f.get("f")?,
                    token: f.get("token")?,
                    scope: f.get("scope")?,
                    part: f.get("part")?,
                }
            }
            _ => return Err(f.err("unknown event")),
        };
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_clock_line_reads_back_for_its_own_tag_only() {
        let line = kernel_clock_line("AT_WRITE_POINT", 123_456);
        assert_eq!(line, "kernel clock: AT_WRITE_POINT ms=123456");
        assert_eq!(kernel_clock_reading(&line, "AT_WRITE_POINT"), Some(123_456));
        assert_eq!(kernel_clock_reading(&line, "BEFORE_CHECK"), None);
        assert_eq!(
            kernel_clock_reading("AT_WRITE_POINT ms=1", "AT_WRITE_POINT"),
            None
        );
    }

    /// Every event the protocol has, at least once each, with values that read back.
    fn one_of_each_event() -> Vec<Event> {
        vec![
            Event::Hello {
                version: VERSION,
                pid: 4242,
            },
            Event::Acquired {
                token: Token::Value(1),
            },
            Event::Refused,
            Event::Renewed {
                ok: true,
                token: Token::Value(1),
            },
            Event::AtWritePoint {
                token: Token::Value(1),
                deadline_left_ms: 1196,
            },
            Event::BeforeCheck {
                token: Token::Value(2),
                deadline_left_ms: 1198,
            },
            Event::DeadlinePassed {
                token: Token::Value(3),
                overdue_ms: 2310,
            },
            Event::Write {
                accepted: false,
                token: Token::Value(1),
            },
            Event::RenewAfterWrite { ok: false },
            Event::Released { ok: true },
            Event::Error {
                message: "failed to connect: no such file".into(),
            },
            Event::BeforeCommit {
                token: Token::Value(4),
            },
            Event::Acquired { token: Token::None },
            Event::Write {
                accepted: true,
                token: Token::None,
            },
            Event::Holding {
                key: "/lab-locks/report-job".into(),
                owner: "holder-a".into(),
            },
            Event::Asked {
                question: "lock.owned()".into(),
                answer: "returned True".into(),
            },
            Event::ReleaseEnded {
                ok: false,
                said: "raised LockNotOwnedError: Cannot release a lock that's no longer owned"
                    .into(),
            },
            Event::Op {
                id: 2,
                phase: OpPhase::Info,
                f: OpKind::Write,
                token: 7,
                scope: "daily-report".into(),
                part: "p2".into(),
            },
        ]
    }

    #[test]
    fn every_message_survives_a_round_trip() {
        let events = one_of_each_event();
        // Every variant is in the list: a new one does not compile until `variant` names it,
        // and fails here until the list has it.
        let variant = |e: &Event| match e {
            Event::Hello { .. } => 0,
            Event::Acquired { .. } => 1,
            Event::Refused => 2,
            Event::Renewed { .. } => 3,
            Event::BeforeCheck { .. } => 4,
            Event::AtWritePoint { .. } => 5,
            Event::DeadlinePassed { .. } => 6,
            Event::Write { .. } => 7,
            Event::RenewAfterWrite { .. } => 8,
            Event::Released { .. } => 9,
            Event::Error { .. } => 10,
            Event::BeforeCommit { .. } => 11,
            Event::Op { .. } => 12,
            Event::Holding { .. } => 13,
            Event::Asked { .. } => 14,
            Event::ReleaseEnded { .. } => 15,
        };
        let mut seen: Vec<usize> = events.iter().map(variant).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..=15).collect::<Vec<_>>(), "a variant is missing");
        for phase in [OpPhase::Invoke, OpPhase::Ok, OpPhase::Fail, OpPhase::Info] {
            assert_eq!(phase.as_str().parse(), Ok(phase));
        }
        for kind in [
            OpKind::Acquire,
            OpKind::Write,
            OpKind::Renew,
            OpKind::Release,
        ] {
            assert_eq!(kind.as_str().parse(), Ok(kind));
        }
        for e in events {
            assert_eq!(Event::decode(&format!("{e}\n")), Ok(e.clone()), "{e}");
        }
        for r in [Request::Hello { version: VERSION }, Request::Go] {
            assert_eq!(Request::decode(&r.to_string()), Ok(r.clone()), "{r}");
        }
    }

    #[test]
    fn the_lines_read_as_the_evidence_quotes_them() {
        assert_eq!(
            Event::Write {
                accepted: false,
                token: Token::Value(1)
            }
            .to_string(),
            "WRITE accepted=false token=1"
        );
        assert_eq!(
            Event::RenewAfterWrite { ok: false }.to_string(),
            "RENEW_AFTER_WRITE ok=false"
        );
    }

    #[test]
    fn malformed_event_lines_are_errors_not_guesses() {
        for line in [
            "",
            "NOPE",
            "WRITE",
            "WRITE accepted=maybe token=1",
            "WRITE accepted=true",
            "WRITE accepted=true tokens=1",
            "ACQUIRED token=1 extra=2",
            "ACQUIRED token=one",
            "RENEWED ok=true token=1.5",
            "AT_WRITE_POINT token=1 deadline_left_ms=-3",
            "BEFORE_CHECK token=1",
            "BEFORE_COMMIT",
            "BEFORE_COMMIT token=1 accepted=true",
            "BEFORE_CHECK token=1 deadline_left_ms=5 extra=1",
            // Version 1's shape: without how far the deadline had passed.
            "DEADLINE_PASSED token=1",
            "REFUSED now",
            // A token is a number or `none`, nothing else.
            "ACQUIRED token=",
            "ACQUIRED token=None",
            "WRITE accepted=true token=nil",
            "HOLDING key=k",
            "HOLDING key=k owner=o extra=1",
            "ASKED answer=returned True",
            "ASKED question= answer=x",
            "ASKED question=lock.owned()",
            "RELEASE_ENDED said=returned None",
            "RELEASE_ENDED ok=maybe said=returned None",
            // Requests are not events, even where the tag is shared.
            "GO",
            "HELLO version=1",
        ] {
            assert!(Event::decode(line).is_err(), "{line:?} decoded as an event");
        }
    }

    #[test]
    fn malformed_request_lines_are_errors_not_guesses() {
        for line in [
            "",
            "NOPE",
            "GO now",
            "HELLO",
            "HELLO version=x",
            "HELLO version=-1",
            "HELLO versions=1",
            // Events are not requests, even where the tag is shared.
            "HELLO version=1 pid=4242",
            "ACQUIRED token=1",
        ] {
            assert!(
                Request::decode(line).is_err(),
                "{line:?} decoded as a request"
            );
        }
    }

    #[test]
    fn a_token_is_a_number_or_none_and_none_equals_no_number() {
        assert_eq!("none".parse::<Token>(), Ok(Token::None));
        assert_eq!("7".parse::<Token>(), Ok(Token::Value(7)));
        assert_eq!(Token::None.to_string(), "none");
        assert_eq!(Token::None.value(), None);
        assert_ne!(Token::None, 0);
        assert_eq!(Token::Value(0), 0);
        assert_eq!(
            Event::Acquired { token: Token::None }.to_string(),
            "ACQUIRED token=none"
        );
        // Free text keeps its spaces and its `=` signs, and stays on one line.
        let asked = Event::decode("ASKED question=lock.locked() answer=returned 1496 (ms=x)");
        assert_eq!(
            asked,
            Ok(Event::Asked {
                question: "lock.locked()".into(),
                answer: "returned 1496 (ms=x)".into()
            })
        );
        let said = Event::ReleaseEnded {
            ok: false,
            said: "raised X:\nline two".into(),
        };
        assert_eq!(
            said.to_string(),
            "RELEASE_ENDED ok=false said=raised X: line two"
        );
    }

    #[test]
    fn an_error_message_stays_on_one_line() {
        let e = Event::Error {
            message: "line one\nline two".into(),
        };
        assert_eq!(e.to_string(), "ERROR line one line two");
    }
}
