//! What runs leave behind, found by the label [`LABEL`] and removed: the containers and networks
//! of labs that are not running any more, or of one run ([`remove_labelled`]: `lab clean`, the
//! next run, a lab's shutdown), and everything this process's labs made
//! ([`remove_this_process`]: a test process a signal is stopping). It never removes what a
//! running lab owns (its pid is alive) unless asked for that run's mark, nor a kept container
//! unless `lab clean` asks or it is past the bound on what failing runs keep
//! ([`prune_kept_runs`]).

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, ListNetworksOptionsBuilder};

use super::{container, docker, remove_held_rules, ContainerError, KEPT_PREFIX, LABEL, TMP_LABEL};

/// Whether the lab whose run mark is `mark` (`<pid>-<ms>`) is still running.
pub(super) fn lab_alive(mark: &str) -> bool {
    mark.split('-')
        .next()
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| pid != std::process::id() && crate::process::exists(pid))
}

/// Removes every container and network labelled [`LABEL`] with `mark`, or, when `None`, those
/// of every lab that is not running any more (what a lab killed outright left; with
/// `kept_too`, also what a kept or failing run left on purpose: `lab clean` — those of this
/// temp dir, or of one that is gone, never what a lab of another temp dir still there kept for
/// a look, as its cluster directories are never touched either). A network that still has a
/// container is left. Returns how many of each.
pub async fn remove_labelled(
    mark: Option<&str>,
    kept_too: bool,
) -> Result<(usize, usize), ContainerError> {
    let docker = docker().await?;
    let filters = label_filter(mark);
    let listed = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's containers", source))?;
    // (id, name without the engine's leading `/`, the run's mark, whether its temp dir is
    // another that still exists)
    let here = std::env::temp_dir().display().to_string();
    let listed: Vec<(String, String, String, bool)> = listed
        .into_iter()
        .filter_map(|c| {
            let name = c.names?.first()?.trim_start_matches('/').to_owned();
            let labels = c.labels?;
            let elsewhere = labels
                .get(TMP_LABEL)
                .is_some_and(|t| *t != here && std::path::Path::new(t).is_dir());
            Some((c.id?, name, labels.get(LABEL)?.clone(), elsewhere))
        })
        .collect();
    let is_kept = |name: &str, elsewhere: bool| {
        mark.is_none() && name.starts_with(KEPT_PREFIX) && (!kept_too || elsewhere)
    };
    // The runs whose kept containers stay: their networks stay too.
    let kept_marks: Vec<&str> = listed
        .iter()
        .filter(|(_, name, _, elsewhere)| is_kept(name, *elsewhere))
        .map(|(_, _, m, _)| m.as_str())
        .collect();
    let containers: Vec<&str> = listed
        .iter()
        .filter(|(_, name, m, elsewhere)| {
            mark.is_some() || (!lab_alive(m) && !is_kept(name, *elsewhere))
        })
        .map(|(id, ..)| id.as_str())
        .collect();
    for id in &containers {
        container::remove(id).await?;
    }
    let networks = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's networks", source))?;
    let networks: Vec<String> = networks
        .into_iter()
        .filter_map(|n| Some((n.id?, n.labels?.get(LABEL)?.clone())))
        .filter(|(_, m)| mark.is_some() || (!lab_alive(m) && !kept_marks.contains(&m.as_str())))
        .map(|(id, _)| id)
        .collect();
    let mut removed_networks = 0;
    for id in &networks {
        // A network a kept container is on stays (the engine refuses while it has endpoints).
        if docker.remove_network(id).await.is_ok() {
            removed_networks += 1;
        }
    }
    Ok((containers.len(), removed_networks))
}

/// Removes the containers kept by failing runs ([`KEPT_PREFIX`]) of labs not running any more in
/// this temp dir ([`TMP_LABEL`]), but those of the `keep_runs` newest such runs (by their newest
/// container's creation) and this process's own: what failing runs keep stays within a bound, as
/// their cluster directories in the temp dir do.
/// Each run's networks go with its containers. Returns each removed run's mark and how many
/// containers it had.
pub async fn prune_kept_runs(keep_runs: usize) -> Result<Vec<(String, usize)>, ContainerError> {
    let docker = docker().await?;
    let listed = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&label_filter(None))
                .build(),
        ))
        .await
        .map_err(|source| ContainerError::engine("list the lab's containers", source))?;
    let own = format!("{}-", std::process::id());
    let tmp = std::env::temp_dir().display().to_string();
    // (mark, newest creation, containers)
    let mut runs: Vec<(String, i64, usize)> = Vec::new();
    for c in listed {
        let kept = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .is_some_and(|n| n.trim_start_matches('/').starts_with(KEPT_PREFIX));
        let Some(mark) = c.labels.as_ref().and_then(|l| l.get(LABEL)).cloned() else {
            continue;
        };
        let here = c.labels.as_ref().and_then(|l| l.get(TMP_LABEL)) == Some(&tmp);
        if !kept || !here || mark.starts_with(&own) || lab_alive(&mark) {
            continue;
        }
        let created = c.created.unwrap_or(0);
        match runs.iter_mut().find(|(m, ..)| *m == mark) {
            Some((_, newest, n)) => {
                *newest = (*newest).max(created);
                *n += 1;
            }
            None => runs.push((mark, created, 1)),
        }
    }
    runs.sort_by_key(|run| std::cmp::Reverse(run.1));
    let mut removed = Vec::new();
    for (mark, _, n) in runs.into_iter().skip(keep_runs) {
        remove_labelled(Some(&mark), true).await?;
        removed.push((mark, n));
    }
    Ok(removed)
}

/// The engine's filter for what carries [`LABEL`] — with the value `mark`, or any.
fn label_filter(mark: Option<&str>) -> HashMap<String, Vec<String>> {
    let label = match mark {
        Some(m) => format!("{LABEL}={m}"),
        None => LABEL.to_owned(),
    };
    HashMap::from([("label".to_owned(), vec![label])])
}

/// Removes every container, network and network hold that this process's labs made (run marks
/// `<this pid>-…`): for a process a signal is stopping, whose labs will not shut down (a test
/// process at its timeout). How many containers.
pub async fn remove_this_process() -> usize {
    let prefix = format!("{}-", std::process::id());
    let filters = label_filter(None);
    let mut marks: Vec<String> = Vec::new();
    if let Ok(docker) = docker().await {
        let mut labels: Vec<HashMap<String, String>> = Vec::new();
        if let Ok(listed) = docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
        {
            labels.extend(listed.into_iter().filter_map(|c| c.labels));
        }
        if let Ok(listed) = docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::new().filters(&filters).build(),
            ))
            .await
        {
            labels.extend(listed.into_iter().filter_map(|n| n.labels));
        }
        for mark in labels.iter().filter_map(|l| l.get(LABEL)) {
            if mark.starts_with(&prefix) && !marks.contains(mark) {
                marks.push(mark.clone());
            }
        }
    }
    let mut removed = 0;
    for mark in &marks {
        if let Ok((c, _)) = remove_labelled(Some(mark), false).await {
            removed += c;
        }
    }
    // Every hold of this process's labs: the needle is the mark's prefix.
    remove_held_rules(Some(&prefix)).await;
    removed
}
