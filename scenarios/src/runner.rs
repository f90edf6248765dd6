//! The runner: the preflight, then each selected experiment on freshly emptied tables, on one
//! lab or spread over several (`lab run --jobs`), each fence-dependent one again with every
//! other fence, every case recorded in registry order. It decides what a case that cannot run
//! here says (skip, with why) and what one that cannot complete counts as (a failed check); it
//! must not know any experiment by name.

use std::future::Future;
use std::pin::Pin;

use fencing::lease::StoreId;
use fencing::profile::Dialect;
use harness::evidence::Recorder;

use crate::experiments::preflight;
use crate::testbed::UserHolder;
use crate::{Backend, Case, Needs, Params, Scenario, Spec, Testbed};

/// Runs the preflight and then each scenario on freshly emptied tables; a fence-dependent one
/// that ran (not skipped) runs again with each mode of [`Params::again_with`], as a case of its
/// own (`F4-fenced-single`). A scenario that cannot complete, or completes with another number
/// of checks than it declares, is recorded as a failed check and the run goes on with the next
/// one.
pub async fn run_all(bed: &mut Testbed, rec: &mut Recorder, scenarios: &[&dyn Scenario]) {
    run_all_on(std::slice::from_mut(bed), rec, scenarios, Images::Ready).await;
}

/// Whether the images the container experiments need (and the lock services' cases of F4 and
/// F5) are there when the run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Images {
    /// Built, or not needed: the experiments run in the registry's order.
    Ready,
    /// Being built in the background (a machine's first run): the runner runs the experiments
    /// that wait on them after the rest, which need no image, instead of holding a job on each
    /// while it waits. The output keeps the registry's order.
    Building,
}

/// [`run_all`] on several labs at once (`lab run --jobs`), each on a cluster of its own:
/// experiments run on whichever lab is free, those that must run alone
/// ([`crate::Spec::runs_alone`]) with every other lab idle, and the U-series on the first lab (one
/// MariaDB server). While the images some experiments need are being built
/// ([`Images::Building`]), those experiments run after all the others. Each experiment
/// records into a recorder of its own (one that runs alone when every experiment before it is
/// recorded: straight into `rec`, as it goes); `rec` takes them over in registry order as they
/// complete, so the output is the sequential run's, whatever finished first. Everything runs on
/// the caller's task: dropping the future drops the labs with it.
pub async fn run_all_on(
    beds: &mut [Testbed],
    rec: &mut Recorder,
    scenarios: &[&dyn Scenario],
    images: Images,
) {
    assert!(!beds.is_empty(), "at least one lab");
    let preflight = match beds[0].backend() {
        Backend::Embedded => preflight::P0 {
            separate_hosts: false,
        },
        Backend::Containers { .. } => preflight::P0 {
            separate_hosts: true,
        },
    };
    run_scenario(&mut beds[0], rec, &preflight).await;
    if beds.len() == 1 {
        for scenario in scenarios {
            run_scenario(&mut beds[0], rec, *scenario).await;
        }
        return;
    }
    let order = execution_order(scenarios, beds[0].params(), images);
    let mut absorber = Absorber::default();
    let mut k = 0;
    while k < order.len() {
        let i = order[k];
        if scenarios[i].spec().runs_alone {
            if absorber.next == i {
                run_scenario(&mut beds[0], rec, scenarios[i]).await;
                absorber.next += 1;
                absorber.flush(rec);
            } else {
                let mut own = Recorder::new(Vec::new());
                run_scenario(&mut beds[0], &mut own, scenarios[i]).await;
                absorber.take(i, own, rec);
            }
            k += 1;
            continue;
        }
        let end = order[k..]
            .iter()
            .position(|&i| scenarios[i].spec().runs_alone)
            .map_or(order.len(), |p| k + p);
        run_together(beds, rec, &mut absorber, scenarios, &order[k..end]).await;
        k = end;
    }
}

/// The order the experiments start in (indices into `scenarios`): those waiting on an image
/// last while it is built, each part in the registry's order.
fn execution_order(scenarios: &[&dyn Scenario], params: &Params, images: Images) -> Vec<usize> {
    let (now, later): (Vec<usize>, Vec<usize>) =
        (0..scenarios.len()).partition(|&i| !waits_on_images(scenarios[i], params, images));
    now.into_iter().chain(later).collect()
}

/// Whether `scenario` waits on an image being built: it runs in containers, or again on the
/// lock services.
fn waits_on_images(scenario: &dyn Scenario, params: &Params, images: Images) -> bool {
    let spec = scenario.spec();
    images == Images::Building
        && (spec.needs == Needs::Containers
            || (spec.again_on_stores && !params.again_on.is_empty()))
}

/// The experiments' own recorders, handed to the run's recorder in registry order: `next` is the
/// index of the first not yet handed over.
#[derive(Default)]
struct Absorber {
    finished: std::collections::BTreeMap<usize, Recorder>,
    next: usize,
}

impl Absorber {
    fn take(&mut self, i: usize, own: Recorder, rec: &mut Recorder) {
        self.finished.insert(i, own);
        self.flush(rec);
    }

    fn flush(&mut self, rec: &mut Recorder) {
        while let Some(own) = self.finished.remove(&self.next) {
            rec.absorb(own);
            self.next += 1;
        }
    }
}

/// One stretch of experiments (`stretch`: their indices in `scenarios`) none of which must run
/// alone, spread over `beds`.
async fn run_together(
    beds: &mut [Testbed],
    rec: &mut Recorder,
    absorber: &mut Absorber,
    scenarios: &[&dyn Scenario],
    stretch: &[usize],
) {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    let queue = Mutex::new(stretch.iter().copied().collect::<VecDeque<usize>>());
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let workers: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = beds
        .iter_mut()
        .enumerate()
        .map(|(k, bed)| {
            let (queue, done_tx) = (&queue, done_tx.clone());
            Box::pin(async move {
                loop {
                    // The first lab takes anything; the others leave the U-series to it.
                    let next = {
                        let mut queue = queue.lock().expect("no panic while held");
                        queue
                            .iter()
                            .position(|&i| k == 0 || scenarios[i].spec().needs != Needs::MariaDb)
                            .and_then(|p| queue.remove(p))
                    };
                    let Some(i) = next else { break };
                    let mut own = Recorder::new(Vec::new());
                    run_scenario(bed, &mut own, scenarios[i]).await;
                    let _ = done_tx.send((i, own));
                }
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    drop(done_tx);
    let absorb = async {
        while let Some((i, own)) = done_rx.recv().await {
            absorber.take(i, own, rec);
        }
    };
    tokio::join!(join_all(workers.into_iter()), absorb);
}

/// Awaits every future together on this task (no spawn: the spawning thread of every child
/// process stays this one); their outputs in order.
pub async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.map(|f| Some(Box::pin(f))).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(f) = slot {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                    *out = Some(v);
                    *slot = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// One experiment: its case, and — when it is fence-dependent and ran — one more case per mode
/// of [`Params::again_with`].
async fn run_scenario(bed: &mut Testbed, rec: &mut Recorder, scenario: &dyn Scenario) {
    let spec = scenario.spec();
    let ran = run_case(bed, rec, scenario, spec.id, spec.title).await;
    if ran && spec.again_on_stores && bed.lease_is_the_table() {
        for store in bed.params().again_on.clone() {
            let id = format!("{}-{store}", spec.id);
            let what = match store.service() {
                Some(_) => "the lock service",
                None => "the lease store",
            };
            let title = format!(
                "{} — again, on {what} {store} (--lease-store {store})",
                spec.title
            );
            match bed.use_store(store).await {
                Ok(()) => {
                    run_case(bed, rec, scenario, &id, &title).await;
                }
                Err(e) => {
                    rec.case_with_lanes(&id, &title, spec.lanes());
                    rec.skip(format!("{e:#}"));
                    rec.end_case();
                }
            }
        }
        if let Err(e) = bed.use_store(StoreId::Postgres).await {
            rec.abort(&format!("{e:#}"));
        }
    }
    if !ran || !spec.fence_dependent {
        return;
    }
    let first = bed.case().sut.clone();
    for profile in bed.params().again_with.clone() {
        let label = Params::fence_label_of(&profile);
        bed.use_sut(profile);
        let id = format!("{}-{label}", spec.id);
        let title = format!("{} — again, with --fenced-mode {label}", spec.title);
        bed.set_again_with_fence(true);
        run_case(bed, rec, scenario, &id, &title).await;
        bed.set_again_with_fence(false);
    }
    bed.use_sut(first);
}

/// One case: `scenario` on freshly emptied tables, recorded as `id`; whether it ran (was not
/// skipped).
async fn run_case(
    bed: &mut Testbed,
    rec: &mut Recorder,
    scenario: &dyn Scenario,
    id: &str,
    title: &str,
) -> bool {
    let spec = scenario.spec();
    let mut lanes = spec.lanes();
    if bed.service.is_some() && lanes.lease == harness::evidence::Lanes::default().lease {
        // The lease lives on the lock service, not in lease26.
        let store = bed.case().store;
        lanes.lease = harness::evidence::Lane::new(store.name(), format!("{store} (lease)"));
    }
    // The U-series runs the job-lease design (MariaDB), every other experiment the PostgreSQL one.
    let on_mariadb = matches!(spec.needs, Needs::MariaDb);
    let (claims, sut_name) = if on_mariadb {
        (bed.params().jobs.claims, bed.params().jobs.name.clone())
    } else {
        (bed.case().sut.claims, bed.case().sut.name.clone())
    };
    let store_has_token = fencing::stores::store_kind(bed.case().store).is_none_or(|k| k.has_token);
    // A title that says "(fenced)" of a design whose write checks no token says what it runs.
    let title = if on_mariadb {
        title.to_owned()
    } else if !claims.token_at_resource {
        title.replace(
            " (fenced)",
            &format!(" ({sut_name}'s write, which checks no token)"),
        )
    } else if !store_has_token {
        title.replace(
            " (fenced)",
            &format!(
                " (the fence fed no token: {} issues none)",
                bed.case().store
            ),
        )
    } else {
        title.to_owned()
    };
    rec.case_with_lanes(id, &title, lanes);
    if let Some(service) = bed.describe_service() {
        rec.note(format!("lease store: {service}"));
    }
    rec.blind_tokens(!claims.token_at_lease || (!on_mariadb && !store_has_token));
    let before = rec.summary();
    let waived_before = rec.waived();
    let adopted_before = bed.adopted.len();
    let skip = skip_reason(spec, &Here::of(bed));
    let outcome = match (bed.reset().await, skip) {
        (Err(e), _) => Err(e),
        (Ok(()), Some(why)) => {
            rec.skip(why);
            Ok(())
        }
        (Ok(()), None) => scenario.run(bed, rec).await,
    };
    let after = rec.summary();
    let made = (after.passed + after.failed) - (before.passed + before.failed)
        + (rec.waived() - waived_before);
    let skipped = after.skipped > before.skipped;
    let declared = spec.checks_in(bed.case().store, bed.case().again_with_fence);
    match outcome {
        Err(e) => rec.abort(&format!("{e:#}")),
        Ok(()) => check_the_count(rec, skipped, made, declared),
    }
    // What a failing run keeps is the servers of the experiments that failed: a passing case's
    // extra clusters go now; a failing one marks its lab.
    if rec.summary().failed > before.failed {
        bed.failed_here = true;
    } else if !bed.keep_all {
        let passed: Vec<_> = bed.adopted.drain(adopted_before..).collect();
        for other in passed {
            other.shutdown().await;
        }
    }
    rec.end_case();
    !skipped
}

/// The check a completed case adds about its own checks: as many as it declares, or — a skip
/// being decided before the first check — none at all before a skip (one said after checks
/// began would switch the count off and leave the rest, its controls among it, unrun).
fn check_the_count(rec: &mut Recorder, skipped: bool, made: usize, declared: usize) {
    if skipped && made > 0 {
        rec.check_that(
            "a skip is decided before the first check",
            false,
            format_args!("the scenario said skip after {made} of its {declared} checks"),
        );
    } else if !skipped && made != declared {
        rec.check(
            "the scenario made the number of checks it declares",
            &declared,
            &made,
        );
    }
}

/// Where a case is about to run, as its skip decisions see it: the run's parameters and what
/// this lab stands on.
struct Here<'a> {
    params: &'a Params,
    /// The case about to run: its lease store and fence.
    case: &'a Case,
    /// The container backend (`--backend containers`), not the embedded cluster.
    on_containers: bool,
    /// The lease store on Patroni (`--lease-store patroni`).
    lease_on_patroni: bool,
    /// A lock service is the lease store (`--lease-store redis|etcd|zookeeper`, or one of the
    /// default run's `F4-redis` cases): `case.store` names it.
    lock_service: bool,
    /// A holder of the user's (`--holder-cmd`), with the fault points it refused.
    user_holder: Option<&'a UserHolder>,
}

impl<'a> Here<'a> {
    fn of(bed: &'a Testbed) -> Here<'a> {
        Here {
            params: bed.params(),
            case: bed.case(),
            on_containers: !matches!(bed.backend(), Backend::Embedded),
            lease_on_patroni: bed.lease_on_patroni(),
            lock_service: !bed.lease_is_the_table(),
            user_holder: bed.user_holder.as_ref(),
        }
    }
}

/// Why the experiment `spec` says `skip` `here`, read from its spec alone; `None`: it runs. The
/// first reason in this order: a design on the other series' server (`--sut`), a holder of the
/// user's it does not judge, a design it does not apply to, the lease store on Patroni, a lock
/// service it does not run on, the container backend.
fn skip_reason(spec: &Spec, here: &Here) -> Option<String> {
    let (id, params, case) = (spec.id, here.params, here.case);
    // The U-series runs the job-lease design (MariaDB), every other experiment the PostgreSQL one.
    let (series, sut_name) = match spec.needs {
        Needs::MariaDb => (Dialect::Mariadb, &params.jobs.name),
        _ => (Dialect::Postgres, &case.sut.name),
    };
    if let Some(other) = params.sut_dialect.filter(|&d| d != series) {
        let (named, theirs) = match series {
            Dialect::Mariadb => (
                &case.sut.name,
                "the U-series runs job-lease designs on MariaDB (seed 000's shape)",
            ),
            Dialect::Postgres => (
                &params.jobs.name,
                "this experiment runs lease-and-report designs on PostgreSQL",
            ),
        };
        return Some(format!(
            "{id} does not apply to {named}: a design on {}; {theirs}",
            other.server()
        ));
    }
    if let Some(why) = here.user_holder.and_then(|u| u.not_for(spec)) {
        return Some(why);
    }
    if let Err(why) = spec.applies.to(&case.sut) {
        return Some(format!("{id} does not apply to {sut_name}: {why}"));
    }
    if here.lease_on_patroni && !spec.on_patroni {
        return Some(format!(
            "{id} does not run with --lease-store patroni: it crashes and restarts the lease \
             store's server, and on Patroni a lost leader is replaced, not restarted — F17 \
             shows that"
        ));
    }
    if here.lock_service {
        if let Err(why) = spec.lock_services.on(case.store) {
            let what = match case.store.service() {
                Some(_) => "the lock service",
                None => "the lease store",
            };
            return Some(format!("{id} does not run on {what} {}: {why}", case.store));
        }
    }
    if here.on_containers && !spec.on_containers {
        return Some(format!(
            "{id} runs in the default run only (./run.sh without --backend containers); the \
             container backend runs P0 and F1–F9"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{About, Applies, Checks, FaultPoint, LockServices, StoreLanes, NO_HOLDER};

    /// An experiment that runs anywhere: each test takes away what it tests.
    const ANYWHERE: Spec = Spec {
        id: "X1",
        title: "an experiment of the tests",
        about: About {
            fault: "none",
            shows: "nothing",
            paragraph: "none",
        },
        checks: Checks::fixed(1),
        needs: Needs::Nothing,
        applies: Applies::Always,
        on_containers: true,
        on_patroni: true,
        lock_services: LockServices::All,
        fence_dependent: false,
        again_on_stores: false,
        runs_alone: false,
        holder_points: Ok(&[]),
        fault_moments: &[],
        lanes: StoreLanes::Default,
    };

    /// The default run's lab: the embedded cluster, the lease table, the lab's own holder.
    fn embedded(params: &Params) -> Here<'_> {
        Here {
            params,
            case: &params.case,
            on_containers: false,
            lease_on_patroni: false,
            lock_service: false,
            user_holder: None,
        }
    }

    /// The run's parameters with the lease store `store` (`--lease-store`).
    fn on_store(store: StoreId) -> Params {
        Params {
            case: Case {
                store,
                ..Case::default()
            },
            ..Params::default()
        }
    }

    #[test]
    fn an_experiment_that_runs_anywhere_is_never_skipped() {
        let params = on_store(StoreId::Zookeeper);
        let yours = UserHolder {
            refused: vec![(FaultPoint::BeforeCheck, "no such flag".into())],
        };
        let everything = Here {
            on_containers: true,
            lease_on_patroni: true,
            lock_service: true,
            user_holder: Some(&yours),
            ..embedded(&params)
        };
        assert_eq!(skip_reason(&ANYWHERE, &embedded(&params)), None);
        assert_eq!(skip_reason(&ANYWHERE, &everything), None);
    }

    #[test]
    fn each_place_an_experiment_does_not_run_says_so_in_its_words() {
        let params = Params::default();
        let here = embedded(&params);
        let containers = Here {
            on_containers: true,
            ..embedded(&params)
        };
        let default_only = Spec {
            on_containers: false,
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&default_only, &here), None);
        assert_eq!(
            skip_reason(&default_only, &containers).as_deref(),
            Some(
                "X1 runs in the default run only (./run.sh without --backend containers); the \
                 container backend runs P0 and F1–F9"
            )
        );

        let patroni = Here {
            lease_on_patroni: true,
            ..containers
        };
        let restarts = Spec {
            on_patroni: false,
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&restarts, &containers), None);
        assert_eq!(
            skip_reason(&restarts, &patroni).as_deref(),
            Some(
                "X1 does not run with --lease-store patroni: it crashes and restarts the lease \
                 store's server, and on Patroni a lost leader is replaced, not restarted — F17 \
                 shows that"
            )
        );

        let (on_zookeeper, on_redis) = (on_store(StoreId::Zookeeper), on_store(StoreId::Redis));
        let service = |params| Here {
            lock_service: true,
            ..embedded(params)
        };
        let but_zookeeper = Spec {
            lock_services: LockServices::AllBut(&[(StoreId::Zookeeper, "its sessions live on")]),
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&but_zookeeper, &service(&on_redis)), None);
        assert_eq!(
            skip_reason(&but_zookeeper, &service(&on_zookeeper)).as_deref(),
            Some("X1 does not run on the lock service zookeeper: its sessions live on")
        );
        let table_only = Spec {
            lock_services: LockServices::None("it truncates the table"),
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&table_only, &here), None);
        assert_eq!(
            skip_reason(&table_only, &service(&on_redis)).as_deref(),
            Some("X1 does not run on the lock service redis: it truncates the table")
        );
    }

    #[test]
    fn a_design_it_does_not_apply_to_is_named_with_why() {
        let params = Params::default();
        let here = embedded(&params);
        let never = Spec {
            applies: Applies::When(|_| false, "the design lacks it"),
            ..ANYWHERE
        };
        let seed004_only = Spec {
            applies: Applies::When(|sut| sut.name == "seed004", "the design lacks it"),
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&seed004_only, &here), None);
        assert_eq!(
            skip_reason(&never, &here).as_deref(),
            Some("X1 does not apply to seed004: the design lacks it")
        );
        // The U-series names the job-lease design it runs.
        let on_mariadb = Spec {
            needs: Needs::MariaDb,
            ..never
        };
        assert_eq!(
            skip_reason(&on_mariadb, &here).as_deref(),
            Some("X1 does not apply to seed000: the design lacks it")
        );

        // A design on the other series' server: the series says so first.
        let maria_sut = Params {
            sut_dialect: Some(Dialect::Mariadb),
            ..Params::default()
        };
        assert_eq!(
            skip_reason(&never, &embedded(&maria_sut)).as_deref(),
            Some(
                "X1 does not apply to seed000: a design on MariaDB; this experiment runs \
                 lease-and-report designs on PostgreSQL"
            )
        );
        let postgres_sut = Params {
            sut_dialect: Some(Dialect::Postgres),
            ..Params::default()
        };
        assert_eq!(
            skip_reason(&on_mariadb, &embedded(&postgres_sut)).as_deref(),
            Some(
                "X1 does not apply to seed004: a design on PostgreSQL; the U-series runs \
                 job-lease designs on MariaDB (seed 000's shape)"
            )
        );
    }

    #[test]
    fn a_holder_of_the_users_is_judged_only_where_it_stops_where_asked() {
        let params = Params::default();
        let yours = UserHolder {
            refused: vec![(FaultPoint::BeforeCheck, "unknown flag".into())],
        };
        let here = Here {
            user_holder: Some(&yours),
            ..embedded(&params)
        };
        let at = |points| Spec {
            holder_points: Ok(points),
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&at(&[FaultPoint::WritePoint]), &here), None);
        assert_eq!(
            skip_reason(
                &at(&[FaultPoint::WritePoint, FaultPoint::BeforeCheck]),
                &here
            )
            .as_deref(),
            Some(
                "X1 stops its holder at BEFORE_CHECK (--wait-before-check), which your holder \
                 refused (a holder without a fault point exits 2 on its flag): unknown flag"
            )
        );
        let none = Spec {
            holder_points: Err(NO_HOLDER),
            ..ANYWHERE
        };
        assert_eq!(skip_reason(&none, &embedded(&params)), None);
        assert_eq!(
            skip_reason(&none, &here).as_deref(),
            Some(
                "X1 does not judge your holder (--holder-cmd): it starts no holder process (it \
                 drives the lease and the resource through the lab's own clients), so a holder \
                 of yours is not what it judges"
            )
        );
    }

    #[test]
    fn the_first_reason_is_the_one_given() {
        let plain = on_store(StoreId::Redis);
        let other_series = Params {
            sut_dialect: Some(Dialect::Mariadb),
            ..on_store(StoreId::Redis)
        };
        let yours = UserHolder { refused: vec![] };
        let everywhere = |params| Here {
            on_containers: true,
            lease_on_patroni: true,
            lock_service: true,
            user_holder: Some(&yours),
            ..embedded(params)
        };
        let lab_holder = Here {
            user_holder: None,
            ..everywhere(&plain)
        };
        // Each step takes the first reason away; the next one is said.
        let nowhere = Spec {
            applies: Applies::When(|_| false, "never"),
            on_containers: false,
            on_patroni: false,
            lock_services: LockServices::None("no service"),
            holder_points: Err("no holder"),
            ..ANYWHERE
        };
        let applies = Spec {
            applies: Applies::Always,
            ..nowhere
        };
        let patroni = Spec {
            on_patroni: true,
            ..applies
        };
        let service = Spec {
            lock_services: LockServices::All,
            ..patroni
        };
        let said = [
            (&nowhere, &everywhere(&other_series)),
            (&nowhere, &everywhere(&plain)),
            (&nowhere, &lab_holder),
            (&applies, &lab_holder),
            (&patroni, &lab_holder),
            (&service, &lab_holder),
        ]
        .map(|(spec, here)| skip_reason(spec, here).unwrap_or_default());
        let starts = [
            "X1 does not apply to seed000: a design on MariaDB",
            "X1 does not judge your holder (--holder-cmd): no holder",
            "X1 does not apply to seed004: never",
            "X1 does not run with --lease-store patroni",
            "X1 does not run on the lock service redis: no service",
            "X1 runs in the default run only",
        ];
        for (line, start) in said.iter().zip(starts) {
            assert!(line.starts_with(start), "{line:?} does not start {start:?}");
        }
        let anywhere = Spec {
            on_containers: true,
            ..service
        };
        assert_eq!(skip_reason(&anywhere, &lab_holder), None);
    }

    fn ids(order: &[usize]) -> Vec<&'static str> {
        order.iter().map(|&i| crate::ALL[i].spec().id).collect()
    }

    #[test]
    fn while_images_are_built_the_experiments_that_wait_on_them_start_last() {
        let all: Vec<usize> = (0..crate::ALL.len()).collect();
        let mut params = Params::default();
        let mut images = Images::Ready;
        assert_eq!(
            execution_order(crate::ALL, &params, images),
            all,
            "no build: the registry's order"
        );
        params.again_on = vec![StoreId::Redis];
        assert_eq!(execution_order(crate::ALL, &params, images), all);

        images = Images::Building;
        let order = execution_order(crate::ALL, &params, images);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all, "every experiment once");
        let first_waiting = order
            .iter()
            .position(|&i| waits_on_images(crate::ALL[i], &params, images))
            .expect("some experiment needs containers");
        let (now, later) = order.split_at(first_waiting);
        assert!(now.windows(2).all(|w| w[0] < w[1]), "{:?}", ids(now));
        assert!(later.windows(2).all(|w| w[0] < w[1]), "{:?}", ids(later));
        assert!(later
            .iter()
            .all(|&i| waits_on_images(crate::ALL[i], &params, images)));
        // F4 and F5 run again on the lock services: they wait too; F15 runs in containers.
        for id in ["F4", "F5", "F15", "F17"] {
            assert!(ids(later).contains(&id), "{id} in {:?}", ids(later));
        }
        for id in ["F1", "F3", "F6", "F14"] {
            assert!(ids(now).contains(&id), "{id} in {:?}", ids(now));
        }

        // Without the lock services' cases, F4 and F5 need no image.
        params.again_on.clear();
        let order = execution_order(crate::ALL, &params, images);
        let f4 = crate::ALL
            .iter()
            .position(|s| s.spec().id == "F4")
            .expect("F4");
        let f15 = crate::ALL
            .iter()
            .position(|s| s.spec().id == "F15")
            .expect("F15");
        let at = |i| order.iter().position(|&k| k == i).expect("there");
        assert!(at(f4) < at(f15));
    }
}
