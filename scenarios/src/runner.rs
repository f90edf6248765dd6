//! The runner: the preflight, then each selected experiment on freshly emptied tables, on one
//! lab or spread over several (`lab run --jobs`), each fence-dependent one again with every
//! other fence, every case recorded in registry order. It decides what a case that cannot run
//! here says (skip, with why) and what one that cannot complete counts as (a failed check); it
//! must not know any experiment by name.

use std::future::Future;
use std::pin::Pin;

use fencing::profile::Dialect;
use harness::evidence::Recorder;

use crate::{preflight, Backend, Needs, Params, Scenario, Testbed};

/// Runs the preflight and then each scenario on freshly emptied tables; a fence-dependent one
/// that ran (not skipped) runs again with each mode of [`Params::again_with`], as a case of its
/// own (`F4-fenced-single`). A scenario that cannot complete, or completes with another number
/// of checks than it declares, is recorded as a failed check and the run goes on with the next
/// one.
pub async fn run_all(bed: &mut Testbed, rec: &mut Recorder, scenarios: &[&dyn Scenario]) {
    run_all_on(std::slice::from_mut(bed), rec, scenarios).await;
}

/// [`run_all`] on several labs at once (`lab run --jobs`), each on a cluster of its own:
/// experiments run on whichever lab is free, those that must run alone
/// ([`crate::Spec::runs_alone`]) with every other lab idle, and the U-series on the first lab (one
/// MariaDB server). While the images some experiments need are being built
/// ([`Params::images_building`]), those experiments run after all the others. Each experiment
/// records into a recorder of its own (one that runs alone when every experiment before it is
/// recorded: straight into `rec`, as it goes); `rec` takes them over in registry order as they
/// complete, so the output is the sequential run's, whatever finished first. Everything runs on
/// the caller's task: dropping the future drops the labs with it.
pub async fn run_all_on(beds: &mut [Testbed], rec: &mut Recorder, scenarios: &[&dyn Scenario]) {
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
    let order = execution_order(scenarios, &beds[0].params);
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
fn execution_order(scenarios: &[&dyn Scenario], params: &Params) -> Vec<usize> {
    let (now, later): (Vec<usize>, Vec<usize>) =
        (0..scenarios.len()).partition(|&i| !waits_on_images(scenarios[i], params));
    now.into_iter().chain(later).collect()
}

/// Whether `scenario` waits on an image being built: it runs in containers, or again on the
/// lock services.
fn waits_on_images(scenario: &dyn Scenario, params: &Params) -> bool {
    let spec = scenario.spec();
    params.images_building
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
    if ran && spec.again_on_stores && bed.service.is_none() {
        for store in bed.params.again_on.clone() {
            let id = format!("{}-{store}", spec.id);
            let title = format!(
                "{} — again, on the lock service {store} (--lease-store {store})",
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
        if let Err(e) = bed.use_store(fencing::lease::sql::KIND.name).await {
            rec.abort(&format!("{e:#}"));
        }
    }
    if !ran || !spec.fence_dependent {
        return;
    }
    let first = bed.params.sut.clone();
    for profile in bed.params.again_with.clone() {
        let label = Params::fence_label_of(&profile);
        bed.use_sut(profile);
        let id = format!("{}-{label}", spec.id);
        let title = format!("{} — again, with --fenced-mode {label}", spec.title);
        bed.again_with_fence = true;
        run_case(bed, rec, scenario, &id, &title).await;
        bed.again_with_fence = false;
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
        let store = bed.params.store;
        lanes.lease = harness::evidence::Lane::new(store, format!("{store} (lease)"));
    }
    // The U-series runs the job-lease design (MariaDB), every other experiment the PostgreSQL one.
    let on_mariadb = matches!(spec.needs, Needs::MariaDb);
    let (series, claims, sut_name) = if on_mariadb {
        let jobs = &bed.params.jobs;
        (Dialect::Mariadb, jobs.claims, jobs.name.clone())
    } else {
        let sut = &bed.params.sut;
        (Dialect::Postgres, sut.claims, sut.name.clone())
    };
    let store_has_token = fencing::stores::store_kind(bed.params.store).is_none_or(|k| k.has_token);
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
                bed.params.store
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
    let on_containers = !matches!(bed.backend(), Backend::Embedded);
    let applies = spec.applies.to(&bed.params.sut);
    let other_server = bed.params.sut_dialect.filter(|&d| d != series);
    let not_yours = bed.user_holder.as_ref().and_then(|u| u.not_for(spec));
    let outcome = match bed.reset().await {
        Ok(()) if other_server.is_some() => {
            let (named, theirs) = match series {
                Dialect::Mariadb => (
                    bed.params.sut.name.as_str(),
                    "the U-series runs job-lease designs on MariaDB (seed 000's shape)",
                ),
                Dialect::Postgres => (
                    bed.params.jobs.name.as_str(),
                    "this experiment runs lease-and-report designs on PostgreSQL",
                ),
            };
            rec.skip(format!(
                "{} does not apply to {named}: a design on {}; {theirs}",
                spec.id,
                other_server.map_or("", Dialect::server),
            ));
            Ok(())
        }
        Ok(()) if not_yours.is_some() => {
            rec.skip(not_yours.unwrap_or_default());
            Ok(())
        }
        Ok(()) if applies.is_err() => {
            let why = applies.err().unwrap_or_default();
            rec.skip(format!("{} does not apply to {sut_name}: {why}", spec.id,));
            Ok(())
        }
        Ok(()) if bed.lease_on_patroni() && !spec.on_patroni => {
            rec.skip(format!(
                "{} does not run with --lease-store patroni: it crashes and restarts the lease \
                 store's server, and on Patroni a lost leader is replaced, not restarted — F17 \
                 shows that",
                spec.id
            ));
            Ok(())
        }
        Ok(()) if bed.service.is_some() && spec.lock_services.on(bed.params.store).is_err() => {
            rec.skip(format!(
                "{} does not run on the lock service {}: {}",
                spec.id,
                bed.params.store,
                spec.lock_services
                    .on(bed.params.store)
                    .err()
                    .unwrap_or_default()
            ));
            Ok(())
        }
        Ok(()) if on_containers && !spec.on_containers => {
            rec.skip(format!(
                "{} runs in the default run only (./run.sh without --backend containers); \
                 the container backend runs P0 and F1–F9",
                spec.id
            ));
            Ok(())
        }
        Ok(()) => scenario.run(bed, rec).await,
        Err(e) => Err(e),
    };
    let after = rec.summary();
    let made = (after.passed + after.failed) - (before.passed + before.failed)
        + (rec.waived() - waived_before);
    let skipped = after.skipped > before.skipped;
    let declared = if bed.again_with_fence {
        spec.checks_again()
    } else {
        spec.checks_on(bed.params.store)
    };
    match outcome {
        Err(e) => {
            rec.abort(&format!("{e:#}"));
        }
        Ok(()) if !skipped && made != declared => {
            rec.check(
                "the scenario made the number of checks it declares",
                &declared,
                &made,
            );
        }
        Ok(()) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(order: &[usize]) -> Vec<&'static str> {
        order.iter().map(|&i| crate::ALL[i].spec().id).collect()
    }

    #[test]
    fn while_images_are_built_the_experiments_that_wait_on_them_start_last() {
        let all: Vec<usize> = (0..crate::ALL.len()).collect();
        let mut params = Params::default();
        assert_eq!(
            execution_order(crate::ALL, &params),
            all,
            "no build: the registry's order"
        );
        params.again_on = vec!["redis"];
        assert_eq!(execution_order(crate::ALL, &params), all);

        params.images_building = true;
        let order = execution_order(crate::ALL, &params);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all, "every experiment once");
        let first_waiting = order
            .iter()
            .position(|&i| waits_on_images(crate::ALL[i], &params))
            .expect("some experiment needs containers");
        let (now, later) = order.split_at(first_waiting);
        assert!(now.windows(2).all(|w| w[0] < w[1]), "{:?}", ids(now));
        assert!(later.windows(2).all(|w| w[0] < w[1]), "{:?}", ids(later));
        assert!(later
            .iter()
            .all(|&i| waits_on_images(crate::ALL[i], &params)));
        // F4 and F5 run again on the lock services: they wait too; F15 runs in containers.
        for id in ["F4", "F5", "F15", "F17"] {
            assert!(ids(later).contains(&id), "{id} in {:?}", ids(later));
        }
        for id in ["F1", "F3", "F6", "F14"] {
            assert!(ids(now).contains(&id), "{id} in {:?}", ids(now));
        }

        // Without the lock services' cases, F4 and F5 need no image.
        params.again_on.clear();
        let order = execution_order(crate::ALL, &params);
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
