//! The holder's command line, defined once: the lab builds it with [`HolderFlags::to_args`] and
//! the holder parses it with clap from the same type, so the two cannot drift apart (a flag
//! renamed on one side fails the round-trip test below, a field added without its flag fails
//! `every_field_has_its_flag`).
//!
//! It holds no knowledge of the fencing implementation: the write mode is a *name* here; the
//! holder binary turns it into its `WriteMode` and answers an unknown name with
//! [`exit::USAGE`](crate::exit::USAGE).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// The holder's `--help` epilogue: the protocol in one line and the exit-status table
/// (the statuses are [`crate::exit`]).
pub const AFTER_HELP: &str = "Protocol: the orchestrator sends `HELLO version=5`; the holder \
answers `HELLO version=5 pid=P`, then reports ACQUIRED / AT_WRITE_POINT / RENEWED … and waits for \
`GO`. With --wait-before-check it first reports BEFORE_CHECK and waits for a `GO` before its \
local-deadline check; a deadline found passed there is reported as DEADLINE_PASSED. With \
--wait-before-commit it reports BEFORE_COMMIT inside its write transaction and waits for a `GO` to \
commit; with --wait-after-write it waits for a `GO` after WRITE, before its renew. --renew-ms 0: \
no background renewer (the holder acquires once and relies on the TTL). --loop-seed: the holder \
loops (acquire, work, check, write parts, renew, release) until stdin closes and reports every \
operation as `OP id=N phase=invoke|ok|fail|info f=acquire|write|renew|release token=T scope=S \
part=P` (`lab chaos`).

Exit status:
  0  wrote (accepted) and the lease was still held afterwards
  1  runtime failure (e.g. the database could not be reached)
  2  bad arguments
  3  lease lost: the renew after the write failed (whatever the write's outcome)
  4  the write was rejected although the lease was still held
  5  not acquired: the lease was held by someone else; nothing written
  6  orphaned: stdin closed before the go-line; nothing written
  7  protocol error: another version, or an unexpected line
  8  the local deadline had passed at its check, before the write point; nothing written";

/// One holder's parameters: everything a holder process is started with.
///
/// Durations are whole milliseconds, as they travel, so that what the lab builds is exactly what
/// the holder reads.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(
    name = "holder",
    about = "One lease holder process of the fencing lab.",
    after_help = AFTER_HELP
)]
pub struct HolderFlags {
    /// Where the lease lives: `postgres` (seed 004's lease table and fenced resource),
    /// `mariadb` (seed 000's fenced job lease and its runs; needs a holder built with the
    /// feature `mariadb`), or a lock service — `redis`, `redis-plain`, `etcd`, `zookeeper` — at
    /// `--store-endpoint` (the feature `lock-services`), the resource still on PostgreSQL.
    #[arg(long, value_name = "STORE", default_value = "postgres")]
    pub store: String,
    /// The directory of the server's Unix socket (PostgreSQL: `.s.PGSQL.<port>`; MariaDB:
    /// `mysqld.sock`).
    #[arg(long, value_name = "DIR")]
    pub socket_dir: PathBuf,
    /// The server's port number (names the socket file).
    #[arg(long)]
    pub port: u16,
    /// The lease to hold.
    #[arg(long, value_name = "NAME")]
    pub lease: String,
    /// This holder's id, e.g. holder-a.
    #[arg(long, value_name = "ID")]
    pub holder: String,
    /// The lease's time to live.
    #[arg(long, value_name = "MS")]
    pub ttl_ms: u64,
    /// The background renewer's interval; 0: no background renewer (the holder acquires once
    /// and relies on the TTL).
    #[arg(long, value_name = "MS")]
    pub renew_ms: u64,
    /// The local deadline is ttl minus this.
    #[arg(long, value_name = "MS")]
    pub margin_ms: u64,
    /// The resource's scope (its fence floor).
    #[arg(long)]
    pub scope: String,
    /// The part of the scope to write.
    #[arg(long)]
    pub part: String,
    /// What to write.
    #[arg(long)]
    pub content: String,
    /// How the write checks the token. postgres: fenced-scope, fenced-single, fenced-row,
    /// check-then-write, unfenced. mariadb: fenced-completion (the join on the lease),
    /// run-id-only (the negative control).
    #[arg(long)]
    pub mode: String,
    /// The system under test's profile (`lab run --sut`): a built-in profile's name or a
    /// file's path, whose lease statements the holder runs and whose write `--mode sut` runs.
    /// Default: the lab's own design (seed004). mariadb: a job-lease design (dialect mariadb),
    /// whose statements the holder runs and whose completion `fenced-completion` is; default
    /// seed000.
    #[arg(long, value_name = "PROFILE")]
    pub sut: Option<String>,
    /// mariadb: the run the holder starts after acquiring and completes at its write point.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Release the lease after the renew that follows the write.
    #[arg(long)]
    pub release: bool,
    /// Before the local-deadline check, report BEFORE_CHECK and wait for GO: a place where the
    /// holder can be paused so that its own check judges the pause.
    #[arg(long)]
    pub wait_before_check: bool,
    /// (postgres, fenced-scope) Inside the write transaction — after the floor UPDATE, the part's
    /// upsert and the attempt record, before COMMIT — report BEFORE_COMMIT and wait for GO: a
    /// place where the holder can be killed with its transaction open.
    #[arg(long)]
    pub wait_before_commit: bool,
    /// A lock service's server (`--store redis|redis-plain|etcd|zookeeper`): `host:port`.
    #[arg(long, value_name = "HOST:PORT")]
    pub store_endpoint: Option<String>,
    /// The lease store's server over TCP at this host (its `lease26`), instead of the Unix
    /// socket — when the lease store lives on a host of its own (F16). Several, comma-separated
    /// (a Patroni cluster's nodes): the holder connects to the one that is read-write, as libpq's
    /// `target_session_attrs=read-write` would, and the looping holder looks again after a
    /// failed lease operation.
    #[arg(long, value_name = "HOST[,HOST…]")]
    pub lease_host: Option<String>,
    /// The lease store's TCP port (with --lease-host).
    #[arg(long, value_name = "PORT", requires = "lease_host")]
    pub lease_port: Option<u16>,
    /// The resource's server over TCP at this host (its `res26`), instead of the Unix socket —
    /// when the resource lives on a host of its own (F15).
    #[arg(long, value_name = "HOST")]
    pub resource_host: Option<String>,
    /// The resource's TCP port (with --resource-host).
    #[arg(long, value_name = "PORT", requires = "resource_host")]
    pub resource_port: Option<u16>,
    /// After reporting WRITE, wait for GO before the renew: a place where the holder can be
    /// killed right after its write committed.
    #[arg(long)]
    pub wait_after_write: bool,
    /// (postgres) Loop instead of one timeline, with this seed for its own random choices:
    /// acquire (or wait and try again) → work → local-deadline check → write `--loop-parts` parts
    /// of `--scope`, each after more work → renew → release, until stdin closes. Every operation
    /// is reported as an `OP` invocation and its completion (`lab chaos`). `--part`, `--content`
    /// and the wait flags are not used.
    #[arg(long, value_name = "SEED")]
    pub loop_seed: Option<u64>,
    /// (with --loop-seed) How many parts each holding writes.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub loop_parts: u32,
    /// (with --loop-seed) Also write each part to this scope with the unfenced mode, right after
    /// the write under test: the run's built-in negative control.
    #[arg(long, value_name = "SCOPE")]
    pub control_scope: Option<String>,
}

impl HolderFlags {
    /// The command-line arguments (without the program name) that parse back into `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        // Destructured without `..`: a new field does not compile until it has its flag here.
        let HolderFlags {
            store,
            socket_dir,
            port,
            lease,
            holder,
            ttl_ms,
            renew_ms,
            margin_ms,
            scope,
            part,
            content,
            mode,
            sut,
            run_id,
            release,
            wait_before_check,
            wait_before_commit,
            wait_after_write,
            resource_host,
            resource_port,
            lease_host,
            lease_port,
            store_endpoint,
            loop_seed,
            loop_parts,
            control_scope,
        } = self;
        let mut args: Vec<OsString> = Vec::with_capacity(15);
        // `--name=value`, one argument each: a value that starts with `-` stays a value.
        let mut flag = |name: &str, value: OsString| {
            let mut arg = OsString::from(name);
            arg.push("=");
            arg.push(value);
            args.push(arg);
        };
        flag("--store", store.into());
        flag("--socket-dir", socket_dir.clone().into());
        flag("--port", port.to_string().into());
        flag("--lease", lease.into());
        flag("--holder", holder.into());
        flag("--ttl-ms", ttl_ms.to_string().into());
        flag("--renew-ms", renew_ms.to_string().into());
        flag("--margin-ms", margin_ms.to_string().into());
        flag("--scope", scope.into());
        flag("--part", part.into());
        flag("--content", content.into());
        flag("--mode", mode.into());
        if let Some(sut) = sut {
            flag("--sut", sut.into());
        }
        if let Some(run_id) = run_id {
            flag("--run-id", run_id.into());
        }
        if let Some(host) = lease_host {
            flag("--lease-host", host.into());
        }
        if let Some(port) = lease_port {
            flag("--lease-port", port.to_string().into());
        }
        if let Some(endpoint) = store_endpoint {
            flag("--store-endpoint", endpoint.into());
        }
        if let Some(host) = resource_host {
            flag("--resource-host", host.into());
        }
        if let Some(port) = resource_port {
            flag("--resource-port", port.to_string().into());
        }
        if let Some(seed) = loop_seed {
            flag("--loop-seed", seed.to_string().into());
        }
        flag("--loop-parts", loop_parts.to_string().into());
        if let Some(scope) = control_scope {
            flag("--control-scope", scope.into());
        }
        for (on, switch) in [
            (release, "--release"),
            (wait_before_check, "--wait-before-check"),
            (wait_before_commit, "--wait-before-commit"),
            (wait_after_write, "--wait-after-write"),
        ] {
            if *on {
                args.push(switch.into());
            }
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `switch` sets both switches, so that each is seen on and off.
    fn example(switch: bool) -> HolderFlags {
        HolderFlags {
            store: "postgres".into(),
            socket_dir: "/tmp/lab sockets/.s".into(),
            port: 54321,
            lease: "job".into(),
            holder: "holder-a".into(),
            ttl_ms: 1500,
            renew_ms: 400,
            margin_ms: 300,
            scope: "s".into(),
            part: "summary".into(),
            // A value that looks like a flag and one with spaces must survive as values.
            content: "--by holder a".into(),
            mode: "fenced-scope".into(),
            sut: switch.then(|| "my profile.toml".into()),
            run_id: switch.then(|| "run-a".into()),
            release: switch,
            wait_before_check: switch,
            wait_before_commit: switch,
            wait_after_write: switch,
            resource_host: switch.then(|| "172.18.0.2".into()),
            resource_port: switch.then_some(5432),
            lease_host: switch.then(|| "172.18.0.3".into()),
            lease_port: switch.then_some(5433),
            store_endpoint: switch.then(|| "10.0.0.9:2379".into()),
            loop_seed: switch.then_some(7),
            loop_parts: 3,
            control_scope: switch.then(|| "control".into()),
        }
    }

    fn parse(flags: &HolderFlags) -> Result<HolderFlags, clap::Error> {
        HolderFlags::try_parse_from(
            std::iter::once(OsString::from("holder")).chain(flags.to_args()),
        )
    }

    #[test]
    fn the_flags_the_lab_builds_are_the_flags_the_holder_parses() -> Result<(), clap::Error> {
        for switch in [false, true] {
            let flags = example(switch);
            assert_eq!(parse(&flags)?, flags);
        }
        // Each switch alone, so that neither rides on the other.
        for switch in 0..4 {
            let flags = HolderFlags {
                release: switch == 0,
                wait_before_check: switch == 1,
                wait_before_commit: switch == 2,
                wait_after_write: switch == 3,
                ..example(false)
            };
            assert_eq!(parse(&flags)?, flags);
        }
        // Every field changed at once, so that no value is a default that parses by accident.
        let other = HolderFlags {
            store: "mariadb".into(),
            socket_dir: "/run/other".into(),
            port: 1,
            lease: "other-lease".into(),
            holder: "holder-b".into(),
            ttl_ms: 1,
            renew_ms: 2,
            margin_ms: 0,
            scope: "t".into(),
            part: "p2".into(),
            content: String::new(),
            mode: "unfenced".into(),
            sut: None,
            run_id: Some("--run b".into()),
            release: true,
            wait_before_check: true,
            wait_before_commit: true,
            wait_after_write: true,
            resource_host: Some("db".into()),
            resource_port: Some(1),
            lease_host: Some("ls".into()),
            lease_port: Some(2),
            store_endpoint: Some("-x:1".into()),
            loop_seed: Some(u64::MAX),
            loop_parts: 1,
            control_scope: Some("--c".into()),
        };
        assert_eq!(parse(&other)?, other);
        Ok(())
    }

    #[test]
    fn every_field_has_its_flag() {
        let args: Vec<String> = example(true)
            .to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let command = HolderFlags::command();
        let longs: Vec<&str> = command
            .get_arguments()
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .map(|a| a.get_long().expect("every holder flag is a long flag"))
            .collect();
        for long in longs {
            let flag = format!("--{long}");
            assert!(
                args.iter()
                    .any(|a| *a == flag || a.starts_with(&format!("{flag}="))),
                "--{long} is missing from to_args: {args:?}"
            );
        }
        for switch in [
            "--release",
            "--wait-before-check",
            "--wait-before-commit",
            "--wait-after-write",
        ] {
            assert!(
                !example(false).to_args().iter().any(|a| a == switch),
                "{switch} is a switch: absent when off"
            );
        }
    }

    #[test]
    fn the_help_keeps_the_exit_status_table() {
        let help = HolderFlags::command().render_long_help().to_string();
        assert!(help.contains("Exit status:"), "{help}");
        assert!(help.contains("8  the local deadline had passed"), "{help}");
        // The handshake the help teaches is this protocol's.
        let hello = format!("HELLO version={}", crate::VERSION);
        assert!(help.contains(&hello), "{hello} missing from: {help}");
        assert!(help.contains("BEFORE_CHECK"), "{help}");
        assert!(help.contains("BEFORE_COMMIT"), "{help}");
    }

    #[test]
    fn clap_accepts_the_definition() {
        HolderFlags::command().debug_assert();
    }
}
