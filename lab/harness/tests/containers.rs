//! The container start (feature `containers`): a container that stops before it says it is ready
//! is an error that says how it stopped and shows the end of its log — not a wait on a log stream
//! that may end with nothing in it. Without a Docker engine the test says `skip` and checks nothing
//! (`harness::require`: with `LAB_REQUIRE=docker` it fails).
#![cfg(feature = "containers")]

use std::time::Duration;

use harness::containers::{engine, postgres_image, until_logged, ContainerError, LABEL};
use harness::require::{self, Dependency};
use testcontainers::runners::AsyncRunner as _;
use testcontainers::{GenericImage, ImageExt as _};

#[tokio::test]
async fn a_container_that_stops_before_it_is_ready_says_how_and_shows_its_log() -> anyhow::Result<()>
{
    if let Err(why) = engine().await {
        require::skip(Dependency::Docker, "the container start test", why)?;
        return Ok(());
    }
    let image = postgres_image(15).await?;
    let (repo, tag) = image.reference.split_once(':').expect("a tagged image");
    let container = GenericImage::new(repo, tag)
        .with_cmd(["sh", "-c", "echo 'lab: about to fail' >&2; exit 3"])
        .with_label(LABEL, format!("{}-0", std::process::id()))
        .start()
        .await?;
    let err = until_logged(&container, "ready to accept", Duration::from_secs(30))
        .await
        .expect_err("the container stopped: it never logs that it is ready");
    let text = err.to_string();
    assert!(matches!(err, ContainerError::Cli { .. }), "{text}");
    assert!(text.contains("exit code 3"), "{text}");
    assert!(text.contains("lab: about to fail"), "{text}");

    // The message it does log is found.
    let container = GenericImage::new(repo, tag)
        .with_cmd(["sh", "-c", "echo 'lab: ready' >&2; sleep 30"])
        .with_label(LABEL, format!("{}-0", std::process::id()))
        .start()
        .await?;
    until_logged(&container, "lab: ready", Duration::from_secs(30)).await?;
    Ok(())
}
