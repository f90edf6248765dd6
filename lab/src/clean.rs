//! `lab clean`: removes what labs that are not running any more left — the cluster directories
//! kept (`--keep`, a failing run) or left by a lab killed outright, stopping a server still
//! running from one, and, built with the feature `containers`, their containers, networks and
//! network holds (with `--images`, the images the lab built); a build without it says plainly
//! that it cannot see them, and which build can. What belongs to a running lab is left alone,
//! and so is what a lab of another temp dir that still exists kept for a look (its cluster
//! directories are not this clean's either).

use crate::args::CleanArgs;
use crate::{print_or_fail, Ended};

pub fn run(args: CleanArgs) -> Ended {
    let removed = harness::server::remove_leftovers(&std::env::temp_dir(), true);
    for r in &removed {
        report_removed(r);
    }
    let mut text = format!(
        "lab clean: removed {} cluster director{}\n",
        removed.len(),
        if removed.len() == 1 { "y" } else { "ies" }
    );
    #[cfg(feature = "containers")]
    match clean_containers(args.images) {
        Ok(line) => text.push_str(&line),
        Err(e) => {
            eprintln!("lab clean: {e}");
            return Ended::CouldNotRun;
        }
    }
    #[cfg(not(feature = "containers"))]
    {
        // Said plainly, whatever was asked: this build has no client for the engine, so the
        // containers, networks and holds of failing container runs are not seen here at all.
        let _ = args.images;
        text.push_str(
            "lab clean: this build cannot see containers (built without the containers \
             feature): the lab's containers, networks, network holds and images, if any, are \
             removed by a build with --features lab/containers (./run.sh clean builds it when a \
             Docker engine answers)\n",
        );
    }
    print_or_fail(&text)
}

/// `lab clean`'s container part: the containers, networks and network holds of labs that are not
/// running any more, and with `images` the images the lab built. One line saying what went.
#[cfg(feature = "containers")]
fn clean_containers(images: bool) -> Result<String, String> {
    use harness::containers;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        if containers::engine().await.is_err() {
            return Ok("lab clean: no Docker engine answers: no containers to remove\n".into());
        }
        let (c, n) = containers::remove_labelled(None, true).await.map_err(|e| e.to_string())?;
        let holds = containers::remove_held_rules(None).await;
        let mut line = format!(
            "lab clean: removed {c} container(s), {n} network(s) and {holds} network hold(s) left by labs no longer running\n"
        );
        let roots = containers::remove_killed_builds();
        if roots > 0 {
            line.push_str(&format!(
                "lab clean: removed {roots} image build root(s) left by killed builds\n"
            ));
        }
        if images {
            let i = containers::remove_images().await.map_err(|e| e.to_string())?;
            line.push_str(&format!("lab clean: removed {i} image(s)\n"));
        }
        Ok(line)
    })
}

/// One line on stderr for a cluster directory removed: why it was there, and the server stopped.
pub(crate) fn report_removed(r: &harness::server::Removed) {
    let server = r.stopped_server.map_or_else(String::new, |pid| {
        format!(", after stopping its server (pid {pid})")
    });
    let why = if r.was_kept {
        "kept"
    } else {
        "left by a lab that was killed outright"
    };
    eprintln!(
        "lab: removed the cluster directory {} ({why}){server}",
        r.dir.display()
    );
}
