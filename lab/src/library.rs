//! `lab library`: the published lock libraries, frozen as they ship. Each library
//! holder (`holder/libraries/`, its package pinned and installed into a virtual environment by
//! `scripts/ensure-library-holders.sh`) runs F1, F5, F4 and F12 on the lab's lock service in a
//! container (`scenarios::library`); the evidence goes to `<evidence-dir>/library/output.txt`
//! and the card to `<evidence-dir>/library-card.md`.
//!
//! Exit 0 when every run completed and every check held, 1 when one did not, 2 when the lab
//! could not run (a package missing, no Docker engine under `LAB_REQUIRE=docker`, a library
//! holder that speaks another protocol version).

use crate::args::LibraryArgs;
use crate::Ended;

/// Runs `lab library`.
pub fn run(args: LibraryArgs) -> Ended {
    #[cfg(feature = "lock-services")]
    {
        on_services::run(args)
    }
    #[cfg(not(feature = "lock-services"))]
    {
        let _ = args;
        eprintln!(
            "lab library: skip: this lab is built without the feature lock-services \
             (the library holders run on lock services in containers; ./run.sh builds it in)"
        );
        if harness::require::Dependency::Docker.required() {
            Ended::CouldNotRun
        } else {
            Ended::Passed
        }
    }
}

#[cfg(feature = "lock-services")]
mod on_services {
    use anyhow::Context as _;
    use fencing::lease::StoreId;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use harness::evidence::timeline::TimelineReporter;
    use harness::evidence::{Recorder, TextReporter};
    use harness::server::{ClusterConfig, PgBinaries};
    use scenarios::library::{self, card, Installed, Library, LIBRARIES};
    use scenarios::{Params, Testbed};

    use super::LibraryArgs;
    use crate::{Ended, Signals};

    pub(super) fn run(args: LibraryArgs) -> Ended {
        let runtime = match crate::runtime() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("lab library: failed to start the async runtime: {e}");
                return Ended::CouldNotRun;
            }
        };
        match runtime.block_on(run_inner(args)) {
            Ok(ended) => ended,
            Err(e) => {
                eprintln!("lab library: {e:#}");
                Ended::CouldNotRun
            }
        }
    }

    /// The libraries asked for, each checked before anything starts: its package installed
    /// (its version), its holder file there.
    fn chosen(
        args: &LibraryArgs,
        installed: &Installed,
    ) -> anyhow::Result<Vec<(&'static Library, String)>> {
        let unbuilt = LIBRARIES
            .iter()
            .find(|lib| fencing::stores::store_kind(lib.store).is_none());
        if let (true, Some(lib)) = (harness::require::Dependency::MariaDb.required(), unbuilt) {
            anyhow::bail!(
                "{} needs the store {}, which this build lacks, and LAB_REQUIRE names mariadb: \
                 build with --features lab/mariadb,holder/mariadb",
                lib.id,
                lib.store
            );
        }
        let libs: Vec<&'static Library> = if args.only.is_empty() {
            // Every library whose store this build has a client for; the others say skip.
            LIBRARIES
                .iter()
                .filter(|lib| {
                    let built = fencing::stores::store_kind(lib.store).is_some();
                    if !built {
                        eprintln!(
                            "lab library: skip {}: this build has no client for its store, {} \
                             (build with --features lab/mariadb,holder/mariadb: ./run.sh does \
                             when MariaDB is installed)",
                            lib.id, lib.store
                        );
                    }
                    built
                })
                .collect()
        } else {
            args.only
                .iter()
                .map(|id| library::library(id))
                .collect::<anyhow::Result<_>>()?
        };
        if !installed.python.is_file() {
            anyhow::bail!(
                "{} is not there: scripts/ensure-library-holders.sh installs the libraries into it",
                installed.python.display()
            );
        }
        libs.into_iter()
            .map(|lib| {
                let file = installed.dir.join(lib.file);
                anyhow::ensure!(
                    file.is_file(),
                    "the library holder {} is missing",
                    file.display()
                );
                Ok((lib, installed.version(lib.package)?))
            })
            .collect()
    }

    async fn run_inner(args: LibraryArgs) -> anyhow::Result<Ended> {
        let installed = Installed {
            python: args.python.clone(),
            dir: args.holders.clone(),
            servers: None,
        };
        let libs = chosen(&args, &installed)?;
        if let Err(why) = harness::docker::engine().await {
            let line = format!("the library card runs on lock services in containers, and there is no Docker engine: {why}");
            if harness::require::Dependency::Docker.required() {
                anyhow::bail!("{line} (LAB_REQUIRE names docker)");
            }
            eprintln!("lab library: skip: {line}");
            return Ok(Ended::Passed);
        }
        let mut signals = Signals::install()?;
        let dir = args.evidence_dir.join("library");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
        let mut params = Params::default();
        params.case.store = StoreId::Postgres;
        // A JVM library holder writes over JDBC, which cannot use the Unix socket: TCP too, on a
        // free port.
        let cluster = ClusterConfig {
            listen_tcp: true,
            port: crate::config::free_port().unwrap_or(harness::server::postgres::DEFAULT_PORT),
            ..ClusterConfig::new(PgBinaries::locate(None)?)
        };
        let mut bed = tokio::select! {
            bed = Testbed::start(cluster, params, installed.python.clone()) => bed?,
            signal = signals.recv() => return Ok(Ended::Interrupted(signal)),
        };
        // The runs' own report (library/report.html): the card first, then every case's
        // timeline; the card is set once the runs have made it.
        let preface = Arc::new(Mutex::new(String::new()));
        let mut rec = Recorder::new(vec![
            Box::new(TextReporter::new(true, Some(dir.join("output.txt")))),
            Box::new(TimelineReporter::with_preface(dir.clone(), preface.clone())),
        ]);
        let outcome = tokio::select! {
            rows = all(&mut bed, &mut rec, &libs, &installed) => Ok(rows),
            signal = signals.recv() => Err(signal),
        };
        bed.shutdown().await;
        let rows = match outcome {
            Ok(rows) => rows,
            Err(signal) => {
                rec.interrupted(signal.name());
                let _ = rec.finish();
                return Ok(Ended::Interrupted(signal));
            }
        };
        if let Ok(mut p) = preface.lock() {
            *p = card::html(&rows, "output.txt");
        }
        let summary = rec.finish()?;
        // A holder that cannot start or speaks another protocol version: one line, exit 2.
        if let Some(why) = rows.iter().find_map(|r| r.row.unstartable.clone()) {
            eprintln!("lab library: {why}");
            return Ok(Ended::CouldNotRun);
        }
        let card_path = args.evidence_dir.join("library-card.md");
        std::fs::write(&card_path, card::markdown(&rows))
            .with_context(|| format!("failed to write {}", card_path.display()))?;
        println!("{}", card::markdown(&rows));
        report_section(
            &args.evidence_dir,
            &card::html(&rows, "library/report.html"),
        )?;
        eprintln!(
            "lab library: {} librar{}; the card in {}, the runs in {}",
            rows.len(),
            if rows.len() == 1 { "y" } else { "ies" },
            card_path.display(),
            dir.join("output.txt").display()
        );
        Ok(if summary.failed == 0 {
            Ended::Passed
        } else {
            Ended::Failed
        })
    }

    /// The card as a section of the full run's report (`<evidence-dir>/report.html`, written by
    /// `lab run` before it), in place of the section an earlier `lab library` put there; no
    /// report there, nothing to do (the card has its own page, `library/report.html`).
    fn report_section(evidence_dir: &Path, section: &str) -> anyhow::Result<()> {
        const BEGIN: &str = "<!-- library card: lab library -->";
        const END: &str = "<!-- /library card -->";
        let path = evidence_dir.join("report.html");
        let Ok(report) = std::fs::read_to_string(&path) else {
            return Ok(());
        };
        let kept = match (report.find(BEGIN), report.find(END)) {
            (Some(b), Some(e)) if b < e => format!("{}{}", &report[..b], &report[e + END.len()..]),
            _ => report,
        };
        let Some(at) = kept.rfind("</body>") else {
            anyhow::bail!(
                "{} has no </body>: not a report of the lab's",
                path.display()
            );
        };
        let whole = format!("{}{BEGIN}\n{section}{END}\n{}", &kept[..at], &kept[at..]);
        harness::evidence::write_atomically(&path, whole.as_bytes())
            .with_context(|| format!("failed to write {}", path.display()))
    }

    async fn all<'a>(
        bed: &mut Testbed,
        rec: &mut Recorder,
        libs: &[(&'a Library, String)],
        installed: &Installed,
    ) -> Vec<card::CardRow<'a>> {
        let mut rows = Vec::new();
        for (lib, version) in libs {
            let (row, service) = if lib.store == StoreId::Redlock {
                on_redlock_servers(bed, rec, lib, installed).await
            } else {
                let row = match bed.use_store(lib.store).await {
                    Ok(()) => library::run(bed, rec, lib, installed).await,
                    Err(e) => could_not_start(rec, lib, &e),
                };
                // The service and its version, as the lab describes it up to its address; the
                // lab's own PostgreSQL for an advisory lock.
                let service = if library::on_the_lab_database(lib) {
                    postgres_version(bed).await
                } else {
                    None
                };
                let service = service.or_else(|| bed.describe_service()).map_or_else(
                    || lib.store.name().to_owned(),
                    // (Redis's own version line goes on with its build: cut at its sha.)
                    |d| {
                        let d = d.split(" at ").next().unwrap_or(&d);
                        let cut = d.split(" sha=").next().unwrap_or(d);
                        let open = cut.matches('(').count() > cut.matches(')').count();
                        format!("{cut}{}", if open { ")" } else { "" })
                    },
                );
                (row, service)
            };
            rows.push(card::CardRow {
                library: lib,
                version: version.clone(),
                service,
                docs: library::docs::read(installed, lib).await,
                row,
            });
        }
        rows
    }

    /// The lab's lease database, `PostgreSQL 15.10 (the lab's lease database)`, as its server
    /// says; `None` when it cannot be asked.
    async fn postgres_version(bed: &Testbed) -> Option<String> {
        let version: String = sqlx::query_scalar("SELECT current_setting('server_version')")
            .fetch_one(bed.lease_table.pool())
            .await
            .ok()?;
        Some(format!("PostgreSQL {version} (the lab's lease database)"))
    }

    /// A library whose lock service could not be started: its first case fails, saying why.
    fn could_not_start(rec: &mut Recorder, lib: &Library, e: &anyhow::Error) -> library::Row {
        rec.case(&format!("{}/F1", lib.id), "the lock service");
        rec.abort(e);
        rec.end_case();
        library::Row::default()
    }

    /// A Redlock library (pottery) on five Redis servers of its own, as RL1–RL3 use, removed
    /// after its runs.
    async fn on_redlock_servers(
        bed: &mut Testbed,
        rec: &mut Recorder,
        lib: &Library,
        installed: &Installed,
    ) -> (library::Row, String) {
        const SERVERS: usize = 5;
        let service = format!("{SERVERS} Redis servers (Redlock)");
        let servers = match harness::docker::redlock_servers(&bed.run_mark, SERVERS, None).await {
            Ok(servers) => servers,
            Err(e) => return (could_not_start(rec, lib, &e), service),
        };
        let on_them = Installed {
            servers: Some((StoreId::Redlock, servers.endpoints().join(","))),
            ..installed.clone()
        };
        let row = library::run(bed, rec, lib, &on_them).await;
        servers.remove().await;
        (row, service)
    }
}
