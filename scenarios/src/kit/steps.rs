//! The step vocabulary: verbs that act, record their step on the timeline and check the outcome,
//! in one call, with the holders as typed names ([`Who`]). An experiment written with them reads
//! as its timeline: `expect` a holder's line, `freeze` and `thaw` a holder, `acquire` and `write`
//! as the lab's own client. Each verb records its step with the store's clock read when it
//! happened, and each check's words stay the experiment's own.
//!
//! ```text
//! let mut t = Steps::new(bed, rec);
//! t.expect(&mut a, Who::A, "acquire", "A acquires the lease, token=1", "ACQUIRED token=1").await?;
//! let b = t.acquire(Who::B, "B acquires the lease, token=2", "ACQUIRED token=2").await?;
//! t.write(Who::B, &b, WriteMode::Fenced, "B's write is accepted", Wrote::accepted(2)).await?;
//! ```

use std::time::Instant;

use anyhow::Context as _;
use fencing::lease::Grant;
use fencing::resource::{Write, WriteMode};
use harness::evidence::{Mark, Recorder};
use harness::holder::{Holder, EVENT_TIMEOUT};
use harness::process::ThreadState;
use holder_protocol::{Event, Request};

use crate::testbed::{acquire_mark, acquired, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::Testbed;

/// What A's content and B's content are.
pub const A_CONTENT: &str = "rows=200(A)";
pub const B_CONTENT: &str = "rows=201(B)";

/// A holder of a timeline, by one name: the name its steps carry (the timeline's lane, the
/// JSONL's `actor`, the picture's row), with its holder id in the stores and its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    A,
    B,
}

impl Who {
    /// The name on the timeline: `A`.
    pub const fn name(self) -> &'static str {
        match self {
            Who::A => "A",
            Who::B => "B",
        }
    }

    /// The holder id the lease and the resource record: `holder-a`.
    pub const fn id(self) -> &'static str {
        match self {
            Who::A => HOLDER_A,
            Who::B => HOLDER_B,
        }
    }

    /// What the holder writes: `rows=200(A)`.
    pub const fn content(self) -> &'static str {
        match self {
            Who::A => A_CONTENT,
            Who::B => B_CONTENT,
        }
    }
}

/// What a write is expected to come to: accepted or not, with the token in the seed's numbering
/// (`token=n`, judged by order: a later grant's token is greater, gaps allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrote {
    pub accepted: bool,
    pub token: i64,
}

impl Wrote {
    /// Accepted, with the seed's token `n`.
    pub const fn accepted(n: i64) -> Wrote {
        Wrote {
            accepted: true,
            token: n,
        }
    }

    /// Rejected, with the seed's token `n`.
    pub const fn rejected(n: i64) -> Wrote {
        Wrote {
            accepted: false,
            token: n,
        }
    }

    /// The line the evidence shows: `WRITE accepted=BOOL token=n`.
    pub fn line(self) -> String {
        wrote(self.accepted, self.token)
    }
}

/// The mark and token a holder's protocol line gives its step.
fn mark_of(event: &Event) -> (Mark, Option<i64>) {
    let token = match event {
        Event::Acquired { token }
        | Event::BeforeCheck { token, .. }
        | Event::AtWritePoint { token, .. }
        | Event::DeadlinePassed { token, .. }
        | Event::Write { token, .. } => token.value(),
        _ => None,
    };
    let mark = match event {
        Event::Acquired { .. } => Mark::Acquired,
        Event::Refused => Mark::Refused,
        Event::Write { accepted, .. } => Mark::Write {
            accepted: *accepted,
        },
        Event::RenewAfterWrite { ok: true } | Event::Renewed { ok: true, .. } => Mark::Renewed,
        Event::Released { ok: true } | Event::ReleaseEnded { ok: true, .. } => Mark::Released,
        _ => Mark::Info,
    };
    (mark, token)
}

/// Records a holder's line as `actor`'s timeline step, with the store's clock read when it
/// arrived.
pub(crate) async fn step(
    bed: &Testbed,
    rec: &mut Recorder,
    at: Instant,
    actor: &str,
    action: &str,
    event: &Event,
) {
    let (mark, token) = mark_of(event);
    let clock = bed.lease.clock().await.ok().flatten();
    rec.step_at(at, mark, actor, action, token, event.to_string(), clock);
}

/// Records something the lab did to `actor` (or saw happen to its lease) as a timeline step.
pub(crate) async fn lab_step(
    bed: &Testbed,
    rec: &mut Recorder,
    mark: Mark,
    actor: &str,
    action: &str,
    outcome: impl Into<String>,
) {
    let clock = bed.lease.clock().await.ok().flatten();
    rec.step(mark, actor, action, None, outcome, clock);
}

/// Sends A, frozen at a stop, its go-line — it waits in the pipe — and thaws it (SIGCONT): on
/// waking, A goes straight on. A timeline step with A's threads as `/proc` showed them.
pub(crate) async fn go_and_thaw(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
) -> anyhow::Result<()> {
    a.send(Request::Go).await?;
    let thawed = a.thaw().await?;
    lab_step(
        bed,
        rec,
        Mark::Thawed,
        "A",
        "go-line, SIGCONT",
        list(&thawed),
    )
    .await;
    Ok(())
}

/// Freezes A (SIGSTOP) and checks what `/proc`, read again apart from `freeze`'s own
/// post-condition, shows: state T for A and every thread, the renewer among them. `when` follows
/// "after SIGSTOP" in the first check line, `renewer` is the second check. Returns the instant
/// A was frozen.
pub(crate) async fn freeze_and_show(
    bed: &Testbed,
    rec: &mut Recorder,
    a: &mut Holder,
    when: &str,
    renewer: &str,
) -> anyhow::Result<Instant> {
    a.freeze().await?;
    let frozen_at = Instant::now();
    let frozen = a.threads()?;
    lab_step(bed, rec, Mark::Frozen, "A", "SIGSTOP", list(&frozen)).await;
    rec.check(
        format!("after SIGSTOP{when}, /proc shows state T for A and every thread of A"),
        "T",
        &states(&frozen),
    );
    rec.check_that(
        renewer,
        frozen.iter().any(|t| t.name == "renewer" && t.state == 'T'),
        format_args!("pid {}: {}", a.pid(), list(&frozen)),
    );
    Ok(frozen_at)
}

/// The distinct states of the threads, e.g. `T`.
pub(crate) fn states(threads: &[ThreadState]) -> String {
    let mut letters: Vec<String> = threads.iter().map(|t| t.state.to_string()).collect();
    letters.sort();
    letters.dedup();
    letters.join(",")
}

/// Every thread with its state, as `/proc` shows them.
pub(crate) fn list(threads: &[ThreadState]) -> String {
    threads
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A timeline being written: the testbed it acts on and the recorder its steps and checks go to.
pub struct Steps<'a> {
    pub bed: &'a mut Testbed,
    pub rec: &'a mut Recorder,
}

impl<'a> Steps<'a> {
    pub fn new(bed: &'a mut Testbed, rec: &'a mut Recorder) -> Self {
        Steps { bed, rec }
    }

    /// Waits for `holder`'s next line (`who`'s step `action`) and checks that it reads
    /// `expected` (tokens judged by order). Returns when it arrived and the line.
    pub async fn expect(
        &mut self,
        holder: &mut Holder,
        who: Who,
        action: &str,
        check: impl Into<String>,
        expected: &str,
    ) -> anyhow::Result<(Instant, Event)> {
        let (at, event) = self.heard(holder, who, action).await?;
        self.rec.check(check, expected, &event.to_string());
        Ok((at, event))
    }

    /// Waits for `holder`'s next line and records it as `who`'s step `action`, unjudged.
    pub async fn heard(
        &mut self,
        holder: &mut Holder,
        who: Who,
        action: &str,
    ) -> anyhow::Result<(Instant, Event)> {
        let waited = format!("{}'s {action}", who.name());
        let (at, event) = holder.next(&waited, EVENT_TIMEOUT).await?;
        step(self.bed, self.rec, at, who.name(), action, &event).await;
        Ok((at, event))
    }

    /// Freezes `who` (SIGSTOP, every thread) and checks what `/proc` shows: state T for it and
    /// every thread, its renewer among them (`renewer`, the second check's words); `when`
    /// follows "after SIGSTOP" in the first. Returns the instant it was frozen.
    pub async fn freeze(
        &mut self,
        holder: &mut Holder,
        when: &str,
        renewer: &str,
    ) -> anyhow::Result<Instant> {
        freeze_and_show(self.bed, self.rec, holder, when, renewer).await
    }

    /// Sends the frozen holder its go-line (it waits in the pipe) and thaws it: a step.
    pub async fn thaw(&mut self, holder: &mut Holder) -> anyhow::Result<()> {
        go_and_thaw(self.bed, self.rec, holder).await
    }

    /// `who`, through the lab's own lease client (not under test), acquires the lease: its
    /// step, and the check that the answer reads `expected` (`ACQUIRED token=n`, `REFUSED`).
    pub async fn acquire(
        &mut self,
        who: Who,
        check: impl Into<String>,
        expected: &str,
    ) -> anyhow::Result<Option<Grant>> {
        let grant = self
            .bed
            .lease
            .acquire(LEASE, who.id(), self.bed.case().ttl)
            .await?;
        let clock = self.bed.lease.clock().await.ok().flatten();
        let (mark, answer) = (acquire_mark(grant.as_ref()), acquired(grant.as_ref()));
        let token = grant.as_ref().map(|g| g.token);
        self.rec
            .step(mark, who.name(), "acquire", token, answer.clone(), clock);
        self.rec.check(check, expected, &answer);
        Ok(grant)
    }

    /// [`Steps::acquire`] where the experiment cannot go on without the grant.
    pub async fn must_acquire(
        &mut self,
        who: Who,
        check: impl Into<String>,
        expected: &str,
    ) -> anyhow::Result<Grant> {
        let grant = self.acquire(who, check, expected).await?;
        grant.with_context(|| format!("{} could not acquire the lease", who.name()))
    }

    /// `who` writes its content to the summary with `grant`'s token in `mode`, through the lab's
    /// own resource client: its step, and the check that the write came to `expected`. Returns
    /// whether the resource accepted it.
    pub async fn write(
        &mut self,
        who: Who,
        grant: &Grant,
        mode: WriteMode,
        check: impl Into<String>,
        expected: Wrote,
    ) -> anyhow::Result<bool> {
        let write = Write {
            scope: SCOPE,
            part: SUMMARY,
            content: who.content(),
            writer: who.id(),
            token: grant.token,
        };
        let ok = self.bed.resource.write(&write, mode).await?;
        let clock = self.bed.lease.clock().await.ok().flatten();
        let outcome = wrote(ok, grant.token);
        let mark = Mark::Write { accepted: ok };
        let token = Some(grant.token);
        self.rec
            .step(mark, who.name(), "write", token, outcome.clone(), clock);
        self.rec.check(check, &expected.line(), &outcome);
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_holder_has_one_name_one_id_and_one_content() {
        let all = [Who::A, Who::B];
        let names: Vec<_> = all.iter().map(|w| w.name()).collect();
        assert_eq!(names, ["A", "B"]);
        let ids: Vec<_> = all.iter().map(|w| w.id()).collect();
        assert_eq!(ids, ["holder-a", "holder-b"]);
        assert_ne!(Who::A.content(), Who::B.content());
    }

    #[test]
    fn a_holders_line_gives_its_step_the_mark_and_token_it_reports() {
        use holder_protocol::Token;
        let acquired = Event::Acquired {
            token: Token::from(3),
        };
        assert_eq!(mark_of(&acquired), (Mark::Acquired, Some(3)));
        let rejected = Event::Write {
            accepted: false,
            token: Token::from(1),
        };
        assert_eq!(
            mark_of(&rejected),
            (Mark::Write { accepted: false }, Some(1))
        );
        assert_eq!(mark_of(&Event::Refused), (Mark::Refused, None));
        assert_eq!(
            Wrote::rejected(1).line(),
            "WRITE accepted=false token=1",
            "the expected line names the seed's token"
        );
    }
}
