//! `lab`, the fencing lab's command line, as glue (like ripgrep's and nextest's binaries): clap
//! parses ([`lab::args`]), one command of the `lab` library runs, and how it [`Ended`] becomes
//! the exit status. Everything else — resolving the configuration before any side effect, the
//! run loop, the report card — is the library's.
//!
//! Exit status: 0 every check passed; 1 a check failed; 2 the lab could not run (bad arguments,
//! no PostgreSQL, an unwritable evidence directory, a cluster that would not start); 130 / 143
//! interrupted by SIGINT / SIGTERM (the cluster is stopped on the way out).

use std::process::ExitCode;

use clap::Parser as _;

use lab::args::{Cli, Command};
use lab::{Ended, Interruption};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let ended = match cli.command {
        Command::List(args) => lab::list::list(&args),
        Command::Bench(args) => lab::bench::run(args),
        Command::Clean(args) => lab::clean::run(args),
        Command::Chaos(args) => lab::chaos::run(args),
        Command::Check { history } => lab::chaos::check(&history),
        Command::Profile(args) => lab::profile::run(args.action),
        Command::Holder(args) => match args.action {
            lab::args::HolderAction::Check { cmd, evidence_dir } => {
                lab::holder_check::run(&cmd, evidence_dir)
            }
        },
        Command::Exercise { name, out } => lab::exercise::run(name, out),
        Command::Library(args) => lab::library::run(args),
        Command::Grade {
            sut,
            lease_store,
            holder_cmd,
            evidence_dir,
        } => lab::grade::run(sut, lease_store, holder_cmd, evidence_dir),
        Command::Run(args) => match lab::config::resolve(args) {
            Ok(cfg) => lab::run::run(&cfg),
            Err(e) => {
                eprintln!("lab: {e:#}");
                Ended::CouldNotRun
            }
        },
    };
    exit_status(ended)
}

/// The documented exit statuses.
fn exit_status(ended: Ended) -> ExitCode {
    ExitCode::from(match ended {
        Ended::Passed => 0,
        Ended::Failed => 1,
        Ended::CouldNotRun => 2,
        Ended::Interrupted(Interruption::Sigint) => 130,
        Ended::Interrupted(Interruption::Sigterm) => 143,
    })
}

/// clap's help and version go out as clap prints them; a usage error becomes one line on stderr
/// (the problem and where to look for the fix) and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return exit_status(Ended::Passed);
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return exit_status(Ended::CouldNotRun);
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    let problem = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("lab: {problem}; see `lab --help` or `lab run --help`");
    exit_status(Ended::CouldNotRun)
}
