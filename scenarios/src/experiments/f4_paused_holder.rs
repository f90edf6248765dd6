//! F4 — the paused old holder, fenced. The fault: holder A, a separate process, is frozen with
//! SIGSTOP after its local-deadline check and before its write; its lease expires by the database
//! clock; holder B takes over with token 2 and writes. A resumes and writes with token 1.
//! Property (I2 + I3): the fenced-scope resource rejects A's stale write by its own floor, even
//! though the lease was free when A resumed.

use fencing::resource::WriteMode;
use harness::evidence::Recorder;

use crate::kit::paused_holder::{self, part_line, B_CONTENT};
use crate::kit::steps::Wrote;
use crate::testbed::wrote;
use crate::{
    About, Applies, Checks, FaultPoint, LockServices, Needs, Outcome, Part, Scenario, Spec,
    StoreLanes, Testbed,
};

const SPEC: Spec = Spec {
    id: "F4",
    title:
        "the paused old holder: lease expires while A is frozen, B takes over, A resumes (fenced)",
    about: About {
        fault: "holder A frozen (SIGSTOP) past its lease",
        shows: "the lease alone lets A write after B took over; the fence rejects the stale write",
        paragraph: "The experiment at the heart of the lab (Kleppmann's figure). A acquires \
                    token 1 and reaches its write point; the lab freezes its whole process \
                    with SIGSTOP, waits until the store's own clock expires the lease, lets \
                    B acquire token 2 and write, then thaws A, which sends the write it had \
                    prepared while it was valid. The fenced resource has seen token 2, so \
                    it rejects token 1, logs the rejected attempt and keeps B's data. F5 is \
                    the same timeline against an unfenced resource, where A's write lands.",
    },
    // The shared timeline's checks of a session expired by the server (ZooKeeper's).
    checks: Checks::with(17, &[(Part::OnSessions, paused_holder::SESSION_CHECKS)]),
    needs: Needs::Nothing,
    applies: Applies::Always,
    on_containers: true,
    on_patroni: true,
    lock_services: LockServices::All,
    fence_dependent: true,
    again_on_stores: true,
    runs_alone: false,
    holder_points: Ok(&[FaultPoint::WritePoint]),
    fault_moments: &["/proc shows state T"],
    lanes: StoreLanes::Default,
};

pub struct F4;

impl Scenario for F4 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(&'a self, bed: &'a mut Testbed, rec: &'a mut Recorder) -> Outcome<'a> {
        Box::pin(async move {
            let r = paused_holder::run(bed, rec, WriteMode::Fenced).await?;
            rec.check(
                "A's stale write is rejected by the resource",
                &Wrote::rejected(1).line(),
                &wrote(r.a_accepted, r.a_token),
            );
            rec.check(
                "the final summary is B's",
                &format!("{B_CONTENT} by holder-b token=2"),
                &part_line(&r.summary),
            );
            bed.check_floor_is(rec, "fence_floor after the run", 2, r.floor);
            rec.check(
                "write_attempt holds exactly one rejected attempt by A",
                &1,
                &r.a_rejections,
            );
            Ok(())
        })
    }
}
