//! The container start (feature `containers`): a container that stops before it says it is ready
//! is an error that says how it stopped and shows the end of its log — not a wait on a log stream
//! that may end with nothing in it. The signal verbs for containers (`harness::process::in_container`)
//! hold what they say when they return. Without a Docker engine the test says `skip` and checks nothing
//! (`harness::require`: with `LAB_REQUIRE=docker` it fails).
#![cfg(feature = "containers")]

use std::time::Duration;

use harness::containers::{
    docker, engine, postgres_image, until_logged, Container, ContainerError, Spec,
};
use harness::process::in_container::{signal_processes, stop, ContainerProcessError};
use harness::require::{self, Dependency};
use nix::sys::signal::Signal;

#[tokio::test]
async fn a_container_that_stops_before_it_is_ready_says_how_and_shows_its_log() -> anyhow::Result<()>
{
    if let Err(why) = engine().await {
        require::skip(Dependency::Docker, "the container start test", why)?;
        return Ok(());
    }
    let image = postgres_image(15).await?;
    let spec = |script: &str| Spec {
        image: image.reference.clone(),
        cmd: vec!["sh".into(), "-c".into(), script.into()],
        mark: format!("{}-0", std::process::id()),
        ..Spec::default()
    };
    let container = Container::start(&spec("echo 'lab: about to fail' >&2; exit 3")).await?;
    let err = until_logged(&container, "ready to accept", Duration::from_secs(30))
        .await
        .expect_err("the container stopped: it never logs that it is ready");
    let text = err.to_string();
    assert!(matches!(err, ContainerError::Cli { .. }), "{text}");
    assert!(text.contains("exit code 3"), "{text}");
    assert!(text.contains("lab: about to fail"), "{text}");

    // The message it does log is found.
    let container = Container::start(&spec("echo 'lab: ready' >&2; sleep 30")).await?;
    until_logged(&container, "lab: ready", Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test]
async fn processes_in_a_container_freeze_thaw_and_stop_as_their_verbs_say() -> anyhow::Result<()> {
    if let Err(why) = engine().await {
        require::skip(Dependency::Docker, "the container signal test", why)?;
        return Ok(());
    }
    let image = postgres_image(15).await?;
    let container = Container::start(&Spec {
        image: image.reference.clone(),
        cmd: vec![
            "sh".into(),
            "-c".into(),
            "sleep 300 & sleep 301 & echo 'lab: ready' >&2; wait".into(),
        ],
        user: Some("postgres".into()),
        mark: format!("{}-0", std::process::id()),
        ..Spec::default()
    })
    .await?;
    until_logged(&container, "lab: ready", Duration::from_secs(30)).await?;
    let docker = docker().await?;
    let sleeps = |cmdline: &str| cmdline.starts_with("sleep 30");

    // SIGSTOP returns once every thread of each reads T in the container's /proc.
    let frozen =
        signal_processes(&docker, container.id(), "a sleep", sleeps, Signal::SIGSTOP).await?;
    assert_eq!(frozen.len(), 2, "{frozen:?}");
    assert!(
        frozen.iter().all(|p| p.states.chars().all(|s| s == 'T')),
        "{frozen:?}"
    );
    // SIGCONT once none does.
    let thawed =
        signal_processes(&docker, container.id(), "a sleep", sleeps, Signal::SIGCONT).await?;
    assert_eq!(thawed.len(), 2, "{thawed:?}");
    assert!(thawed.iter().all(|p| !p.states.contains('T')), "{thawed:?}");
    // Nothing matching is an error that says so, not a silent success.
    let err = signal_processes(
        &docker,
        container.id(),
        "a WAL sender",
        |c| c.contains("walsender"),
        Signal::SIGSTOP,
    )
    .await
    .expect_err("no WAL sender runs there");
    assert!(
        matches!(err, ContainerProcessError::NoneMatched { .. }),
        "{err}"
    );

    // The first process ignores SIGTERM (it is the container's init and has no handler): after
    // its grace SIGKILL ends it, and `stop` returns once the engine reports it not running.
    stop(
        &docker,
        container.id(),
        &[(Signal::SIGTERM, Duration::from_millis(500))],
    )
    .await?;
    let (running, code) = container.state().await?;
    assert!(!running);
    assert_eq!(code, Some(137), "killed by SIGKILL");
    // A container that is not running is stopped at once.
    stop(&docker, container.id(), &[]).await?;
    container.remove().await?;
    Ok(())
}
