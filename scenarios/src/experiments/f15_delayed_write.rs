//! F15 — the write held in the network. The fault: the resource lives on a host of its own (a
//! PostgreSQL container on the lab's private network, reached over TCP); holder A, which
//! acquired once and relies on its TTL (no renewer), passes its local-deadline check while its
//! lease is valid and sends its write — and the network holds that request: every packet of A's
//! connection to the resource is dropped until the hold is lifted. The lease expires by the
//! database clock, B acquires token 2 and writes; then the hold is lifted and TCP's next
//! retransmission delivers A's request.
//!
//! Property: the request left A while A was valid and reached the resource after B's write (the
//! resource's own statement log says when each arrived). The fenced resource rejects it; the
//! unfenced one accepts it (the negative control). No check in A could have helped: the request
//! was already sent.
//!
//! Needs the `containers` feature and a Docker engine; the image is built here from Debian
//! packages on first use (about a minute). Without them F15 says `skip` with the reason.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fencing::resource::{Resource, Write, WriteMode};
use fencing::schema::{self, Database};
use harness::docker::{tcp_state, Holds, OwnServers, PG_PORT};
use harness::evidence::{Mark, Recorder};
use harness::holder::{describe, Holder, HolderError, EVENT_TIMEOUT};
use harness::observe::client_ports;
use holder_protocol::{Event, Request, Token};
use sqlx::PgPool;

use crate::kit::paused_holder::{lab_step, part_line, step, A_CONTENT, B_CONTENT};
use crate::testbed::{acquired, shown, wrote, HOLDER_A, HOLDER_B, LEASE, SCOPE, SUMMARY};
use crate::{
    About, Applies, Checks, LockServices, Needs, Outcome, Scenario, Spec, StoreLanes, Testbed,
    ON_THE_LEASE_TABLE,
};

const SPEC: Spec = Spec {
    id: "F15",
    title: "the write held in the network (containers): A's request leaves while A is valid and reaches the resource after B's write — fenced rejects, unfenced accepts",
    about: About {
        fault: "A's write request held in the network past its lease",
        shows: "a request sent while A was valid can arrive after the takeover: only the fence stops it",
        paragraph: "The resource runs in a container of its own, reached over TCP. A acquires \
                    once, with no renewal, passes its local-deadline check while its lease is \
                    valid and sends its write, but the lab drops every packet of A's \
                    connection to the resource. Meanwhile the lease expires by the database \
                    clock, and B acquires token 2 and writes. When the hold is lifted, TCP \
                    retransmits and A's request arrives; the resource's own statement log \
                    shows it arriving after B's write. The fenced resource rejects it; the \
                    unfenced one accepts it and A's stale content replaces B's, the negative \
                    control. No check inside A could have helped: the request had already \
                    left.",
    },
    checks: Checks::fixed(13),
    needs: Needs::Containers,
    applies: Applies::Always,
    on_containers: false,
    on_patroni: false,
    lock_services: LockServices::None(ON_THE_LEASE_TABLE),
    fence_dependent: true,
    again_on_stores: false,
    runs_alone: false,
    holder_points: Err("it reaches its holder's servers in containers over TCP (--resource-host, --lease-host), flags a holder of yours may ignore (docs/holder-protocol.md)"),
    fault_moments: &["is held in the network"],
    lanes: StoreLanes::Default,
};

/// F15 as `./run.sh` runs it. `hold: false` sends A's write without holding it: only a
/// deliberately broken variant ([`crate::registry::broken`]) does that.
pub struct F15 {
    pub hold: bool,
}

impl Scenario for F15 {
    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn run<'a>(
        &'a self,
        bed: &'a mut Testbed,
        rec: &'a mut harness::evidence::Recorder,
    ) -> Outcome<'a> {
        Box::pin(async move { run(bed, rec, self.hold).await })
    }
}

/// Starts the resource's host (a server of F15's own), runs both rows on it, removes it.
async fn run(bed: &mut Testbed, rec: &mut Recorder, hold: bool) -> anyhow::Result<()> {
    let Some(host) = bed.own_servers(rec, 1).await? else {
        return Ok(());
    };
    let outcome = with_resource_host(bed, rec, &*host, hold).await;
    host.remove().await;
    outcome
}

/// The resource's host: server 0 of F15's own.
const R: usize = 0;

async fn with_resource_host(
    bed: &mut Testbed,
    rec: &mut Recorder,
    r: &dyn OwnServers,
    hold: bool,
) -> anyhow::Result<()> {
    let admin = r.pool(R, "postgres", "lab").await?;
    schema::provision(&mut *admin.acquire().await?).await?;
    let res_pool = r
        .pool(R, Database::Resource.name(), Database::Resource.role())
        .await?;
    schema::migrate_for(&bed.case().sut, Database::Resource, &res_pool).await?;
    let resource = Resource::with_profile(res_pool.clone(), bed.case().sut.clone());
    let version: String = harness::observe::settings(&admin, &[])
        .await?
        .first()
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    rec.check_that(
        "the resource lives on a host of its own: a PostgreSQL container on the lab's private network, reached over TCP",
        !r.ips()[R].is_loopback(),
        format_args!("res26 at {}:{PG_PORT} (PostgreSQL {version}); the lease store stays on the embedded cluster", r.ips()[R]),
    );
    for (i, mode) in [WriteMode::Fenced, WriteMode::Unfenced]
        .into_iter()
        .enumerate()
    {
        let mode_label = bed.case().mode_label(mode);
        if i > 0 {
            bed.reset().await?;
        }
        schema::reset(&res_pool).await?;
        resource.setup_scope(SCOPE).await?;
        rec.step(
            Mark::Info,
            "lab",
            &format!("resource mode {mode_label}"),
            None,
            "",
            None,
        );
        row(bed, rec, r, &admin, &resource, mode, hold).await?;
    }
    res_pool.close().await;
    admin.close().await;
    Ok(())
}

/// The log line of the resource's server that shows `who`'s first statement on the scope's
/// tables, at or after `from` in the log: its timestamp (the server's clock) and the line.
fn arrival(log: &str, who: &str, from: usize) -> Option<(String, String)> {
    let tag = format!("[{who}]");
    let lines: Vec<&str> = log.get(from..)?.lines().collect();
    // A logged statement runs on over the following lines (a CTE, a long INSERT) until the
    // next line that starts with a timestamp.
    lines.iter().enumerate().find_map(|(i, l)| {
        if !(l.contains(&tag) && (l.contains("execute") || l.contains("statement:"))) {
            return None;
        }
        let statement: String = std::iter::once(*l)
            .chain(
                lines[i + 1..]
                    .iter()
                    .take_while(|n| !n.starts_with("20"))
                    .copied(),
            )
            .collect::<Vec<_>>()
            .join(" ");
        (statement.contains("fence_floor") || statement.contains("report_part")).then(|| {
            let shown = statement.split_whitespace().collect::<Vec<_>>().join(" ");
            let shown: String = shown.chars().take(160).collect();
            (l.get(..23).unwrap_or("").to_owned(), shown)
        })
    })
}

/// How long after the hold is lifted A's write is late: TCP retransmits a held segment after
/// 0.2, 0.6, 1.4, 3.0, 6.2 s (its minimum timeout, doubled each time), so a 1.5 s hold is
/// delivered about 3 s after the send.
const LATE: Duration = Duration::from_secs(8);

#[allow(clippy::too_many_arguments)]
/// A (no renewer, its resource on host R) acquires once and passes its local-deadline check
/// while its lease is valid by the database clock.
async fn a_passes_its_check(
    bed: &Testbed,
    rec: &mut Recorder,
    r: &dyn OwnServers,
    mode: WriteMode,
) -> anyhow::Result<Holder> {
    let mode_label = bed.case().mode_label(mode);
    let mut spec = bed.holder_spec(HOLDER_A, A_CONTENT, mode, false);
    spec.flags.renew_ms = 0;
    spec.flags.resource_host = Some(r.ips()[R].to_string());
    spec.flags.resource_port = Some(PG_PORT);
    let mut a = Holder::spawn(&spec).await?;
    let (at, event) = a.next("A's acquire", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "acquire (once; no renewer)", &event).await;
    if event != (Event::Acquired { token: 1.into() }) {
        bail!(a.unexpected("ACQUIRED token=1", &event));
    }
    let (at, ready) = a.next("A at its write point", EVENT_TIMEOUT).await?;
    step(bed, rec, at, "A", "local-deadline check passed", &ready).await;
    let row = bed.lease.inspect(LEASE).await?;
    rec.check_that(
        format!("{mode_label}: A passes its local-deadline check while its lease is valid by the database clock"),
        matches!(ready, Event::AtWritePoint { token: Token::Value(1), .. })
            && row.as_ref().is_some_and(|r| !r.expired && r.holder == HOLDER_A),
        format_args!(
            "{ready}; lease row {}",
            shown(row.map(|r| format!(
                "{} token={} {:.0} ms left",
                r.holder,
                r.token,
                r.remaining_ms()
            )))
        ),
    );
    Ok(a)
}

/// The lease expires while A's request is in flight; B acquires and writes.
async fn b_takes_over_and_writes(
    bed: &Testbed,
    rec: &mut Recorder,
    resource: &Resource,
    mode: WriteMode,
) -> anyhow::Result<()> {
    let mode_label = bed.case().mode_label(mode);
    let c = bed.case().clone();
    bed.until_lease_expired("A's lease").await?;
    lab_step(
        bed,
        rec,
        Mark::LeaseExpired,
        "A",
        "lease expired (database clock)",
        "",
    )
    .await;
    let b = bed.lease.acquire(LEASE, HOLDER_B, c.ttl).await?;
    rec.step(
        crate::testbed::acquire_mark(b.as_ref()),
        "B",
        "acquire",
        b.as_ref().map(|g| g.token),
        acquired(b.as_ref()),
        None,
    );
    let b_ok = match &b {
        Some(g) => {
            let w = Write {
                scope: SCOPE,
                part: SUMMARY,
                content: B_CONTENT,
                writer: HOLDER_B,
                token: g.token,
            };
            Some(resource.write(&w, mode).await?)
        }
        None => None,
    };
    if let (Some(g), Some(ok)) = (&b, b_ok) {
        rec.step(
            Mark::Write { accepted: ok },
            "B",
            "write",
            Some(g.token),
            wrote(ok, g.token),
            None,
        );
    }
    rec.check(
        format!(
            "{mode_label}: the lease expires while A's request is in flight; B acquires and writes"
        ),
        "ACQUIRED token=2, WRITE accepted=true token=2",
        &format!(
            "{}, {}",
            acquired(b.as_ref()),
            match (&b, b_ok) {
                (Some(g), Some(ok)) => wrote(ok, g.token),
                _ => "no write".into(),
            }
        ),
    );
    Ok(())
}

/// A's late write judged: the resource's statement log shows it arriving after B's; the fence
/// rejects it, or (unfenced, the negative control) it replaces B's part.
async fn late_write_judged(
    bed: &Testbed,
    rec: &mut Recorder,
    r: &dyn OwnServers,
    resource: &Resource,
    mode: WriteMode,
    log_from: usize,
    a_ok: bool,
) -> anyhow::Result<()> {
    let mode_label = bed.case().mode_label(mode);
    // The server logs a statement as it runs it, but the engine copies the container's
    // stderr on its own time: A's line may reach the log a moment after A's answer.
    let _ = harness::wait::until_every(
        "the resource's log shows A's request",
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async {
            Ok::<_, std::convert::Infallible>(
                arrival(&r.log(R).await, HOLDER_A, log_from).is_some(),
            )
        },
    )
    .await;
    let log = r.log(R).await;
    let a_arrived = arrival(&log, HOLDER_A, log_from);
    let b_arrived = arrival(&log, "fencing-lab", log_from);
    let arrived_late = match (&a_arrived, &b_arrived) {
        (Some((a, _)), Some((b, _))) => a > b,
        _ => false,
    };
    rec.check_that(
        format!(
            "{mode_label}: the resource's statement log shows A's request arriving after B's write"
        ),
        arrived_late,
        format_args!(
            "B: {}; A: {}",
            shown(b_arrived.as_ref().map(|(_, l)| l.as_str())),
            shown(a_arrived.as_ref().map(|(_, l)| l.as_str()))
        ),
    );
    let summary = part_line(&resource.part(SCOPE, SUMMARY).await?);
    if mode == WriteMode::Unfenced {
        rec.expose(
            "unfenced: A's late write is accepted",
            a_ok && arrived_late,
            format_args!(
                "{}, {}",
                wrote(a_ok, 1),
                if arrived_late {
                    "arrived after B's"
                } else {
                    "not after B's"
                }
            ),
        );
        rec.expose(
            "unfenced: A's stale content replaced B's",
            summary.starts_with(A_CONTENT),
            format_args!("final summary = {summary}"),
        );
    } else {
        rec.check(
            format!("{mode_label}: the fenced resource rejects A's late write (token 1 < floor 2)"),
            &wrote(false, 1),
            &wrote(a_ok, 1),
        );
        rec.check(
            format!("{mode_label}: B's part stays"),
            &format!("{B_CONTENT} by holder-b token=2"),
            &summary,
        );
    }
    Ok(())
}

async fn row(
    bed: &Testbed,
    rec: &mut Recorder,
    r: &dyn OwnServers,
    admin: &PgPool,
    resource: &Resource,
    mode: WriteMode,
    hold: bool,
) -> anyhow::Result<()> {
    let mode_label = bed.case().mode_label(mode);
    let mut a = a_passes_its_check(bed, rec, r, mode).await?;

    let ports = client_ports(admin, HOLDER_A).await?;
    let port = *ports
        .first()
        .context("A has no connection to the resource")?;
    let log_from = r.log(R).await.len();
    let (held, rule) = if hold {
        let held = Holds::start(r.ips()[R], &[port], &bed.run_mark).await?;
        let rule = held.rules().join("; ");
        (Some(held), rule)
    } else {
        (None, "no rule installed".to_owned())
    };
    rec.check_that(
        format!("{mode_label}: A's connection to the resource (port {port}) is held in the network: its packets are dropped until the hold is lifted"),
        rule.contains("DROP") && rule.contains(&port.to_string()),
        format_args!("iptables OUTPUT: {rule}"),
    );
    lab_step(bed, rec, Mark::Info, "A", "request held in the network", "").await;
    let sent = Instant::now();
    a.send(Request::Go).await?;

    b_takes_over_and_writes(bed, rec, resource, mode).await?;

    let lifted_at = Instant::now();
    if let Some(held) = held {
        let counted = held.listed().await;
        let socket = tcp_state(r.ips()[R], port).await;
        held.lift().await?;
        rec.note(format!(
            "hold lifted {} ms after A sent its write; the rule had counted: {counted}; A's connection as this host's kernel saw it: {}",
            sent.elapsed().as_millis(),
            shown(Some(socket).filter(|s| !s.is_empty()))
        ));
    }
    let (at, write) = match a.next("A's write", LATE).await {
        Err(HolderError::Silent { .. }) => {
            // Later than TCP's backoff explains: say what the kernel holds, then wait on.
            rec.note(format!(
                "no answer to A's write {} ms after the hold was lifted; A's connection: {}",
                lifted_at.elapsed().as_millis(),
                shown(Some(tcp_state(r.ips()[R], port).await).filter(|s| !s.is_empty()))
            ));
            a.next("A's write", Duration::from_secs(30)).await?
        }
        answered => answered?,
    };
    step(bed, rec, at, "A", "write (arrived late)", &write).await;
    rec.note(format!(
        "A's write answered {} ms after it was sent, {} ms after the hold was lifted (TCP's next retransmission)",
        sent.elapsed().as_millis(),
        lifted_at.elapsed().as_millis()
    ));
    let code = a.exit_code(EVENT_TIMEOUT).await?;
    rec.note(format!("A exits: {}", describe(Some(code))));
    let Event::Write {
        accepted: a_ok,
        token: Token::Value(1),
    } = write
    else {
        bail!(a.unexpected("WRITE … token=1", &write));
    };

    late_write_judged(bed, rec, r, resource, mode, log_from, a_ok).await?;

    Ok(())
}
