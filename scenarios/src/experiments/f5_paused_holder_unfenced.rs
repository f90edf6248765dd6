//! F5 — negative control for F4: the same timeline, the same lease service, but the resource does
//! not check tokens (unfenced). The flaw that must show: A's stale write is accepted and A's old
//! result overwrites B's. If it does not show, the lab can no longer tell a fenced resource from
//! an unfenced one, and that is a failure. The resource's own `write_attempt` log must show I3
//! broken in so many words: a token accepted after a greater one. (Its `fence_floor` stays 0 —
//! the unfenced mode never touches the floor, so that value could not fail and is only a note.)

use fencing::resource::WriteMode;
use harness::evidence::Recorder;

use crate::kit::paused_holder::{self, part_line, A_CONTENT};
use crate::testbed::HOLDER_A;
use crate::{
    About, Applies, Checks, FaultPoint, LockServices, Needs, Outcome, Part, Scenario, Spec,
    StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "F5",
    title: "negative control: the same timeline as F4 against an unfenced resource (mode=unfenced)",
    about: About {
        fault: "holder A frozen (SIGSTOP) past its lease; no fence",
        shows: "negative control: without a token check at the resource, A's stale write overwrites B's",
        paragraph: "The negative control for F4: the same two holder processes and the same \
                    timeline, but the resource accepts writes without checking their token. A \
                    acquires token 1 and is frozen with SIGSTOP at its write point; its lease \
                    expires by the store's clock; B acquires token 2 and writes; A is thawed \
                    and sends the write it had prepared. Here it lands: the checks require \
                    that A's stale result replaced B's, and that the resource's own write log \
                    shows token 1 accepted after token 2. If this flaw ever failed to show, \
                    the lab could no longer tell a fenced resource from an unfenced one, so \
                    that would count as a failure.",
    },
    // The shared timeline's checks of a session expired by the server (ZooKeeper's).
    checks: Checks::with(15, &[(Part::OnSessions, paused_holder::SESSION_CHECKS)]),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::All,
    fence_dependent: false,
    again_on_stores: true,
    runs_alone: false,
    holder_points: Ok(&[FaultPoint::WritePoint]),
    fault_moments: &["/proc shows state T"],
    lanes: StoreLanes::Default,
};

pub struct F5;

impl Scenario for F5 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let r = paused_holder::run(bed, rec, WriteMode::Unfenced).await?;
            let stale_won = r.a_accepted
                && r.summary.as_ref().is_some_and(|p| {
                    p.writer == HOLDER_A && p.token == r.a_token && p.content == A_CONTENT
                });
            rec.expose(
                "without a token check at the resource, A's stale result overwrote B's",
                stale_won,
                format_args!(
                    "A accepted={}; final summary = {}",
                    r.a_accepted,
                    part_line(&r.summary)
                ),
            );
            let tokens: Vec<String> = r.accepted_tokens.iter().map(|t| t.to_string()).collect();
            rec.expose(
                "I3 broken in the resource's own write_attempt log: it accepted A's token 1 after B's token 2",
                r.accepted_tokens == [bed.token(rec, 2), r.a_token],
                format_args!("accepted tokens in log order: {}", tokens.join(", ")),
            );
            Ok(())
        })
    }
}
