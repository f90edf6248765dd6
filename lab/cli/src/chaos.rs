//! `lab chaos`: the seeded fault run (`scenarios::chaos`) on a throwaway cluster of its own,
//! with commit timestamps on (the checker orders writes by commit). The same reporters as
//! `lab run` write its evidence, plus the schedule, the history and the verdict.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use harness::evidence::junit::JunitReporter;
use harness::evidence::timeline::TimelineReporter;
use harness::evidence::{EnvironmentReporter, JsonlReporter, Recorder, Reporter, TextReporter};
use harness::server::{ClusterConfig, PgBinaries};
use scenarios::chaos::{self, ChaosConfig};
use scenarios::{Lab, Params};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::ChaosArgs;

/// Parses a duration as `30s`, `2m`, `1500ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write 30s, 2m or 1500ms"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("{text:?}: the units are ms, s and m")),
    };
    if d < Duration::from_secs(5) {
        return Err(format!(
            "{text:?} is too short: a chaos run lasts at least 5s"
        ));
    }
    Ok(d)
}

/// Runs it; the exit status (0 every check passed, 1 a check failed, 2 could not run,
/// 130/143 interrupted).
pub async fn run(args: ChaosArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lab chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run_inner(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
    });
    eprintln!(
        "lab chaos: seed {seed}{}",
        if args.seed.is_none() {
            " (drawn now; pass --seed to replay this schedule)"
        } else {
            ""
        }
    );
    let cfg = ChaosConfig {
        seed,
        time: args.time,
        holders: args.holders as usize,
        mode: args.mode,
        faults: args.faults.clone(),
    };
    let (mut sigint, mut sigterm) = (
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
    );
    let bins = PgBinaries::locate(args.pg_bindir.as_deref())?;
    let holder_bin = harness::holder::locate_holder_bin().map_err(anyhow::Error::msg)?;
    let params = Params::default();
    let cluster = ClusterConfig {
        max_connections: params.max_connections() + 2 * args.holders as u32,
        track_commit_timestamp: true,
        ..ClusterConfig::new(bins)
    };
    let dir = args.evidence_dir.clone();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("--evidence-dir {}: cannot be made", dir.display()))?;
    let mut lab = tokio::select! {
        lab = Lab::start(cluster, params, holder_bin) => lab?,
        _ = sigint.recv() => return Ok(ExitCode::from(130)),
        _ = sigterm.recv() => return Ok(ExitCode::from(143)),
    };
    let reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TextReporter::new(true, Some(dir.join("output.txt")))),
        Box::new(JsonlReporter::new(Some(dir.join("events.jsonl")), false)),
        Box::new(JunitReporter::new(Some(dir.join("junit.xml")), false)),
        Box::new(EnvironmentReporter::new(dir.join("environment.json"))),
        Box::new(TimelineReporter::new(dir.clone())),
    ];
    let mut rec = Recorder::new(reporters);
    rec.environment(vec![
        (
            "lab".into(),
            format!("fencing lab {}", env!("CARGO_PKG_VERSION")),
        ),
        (
            "command_line".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        ("seed".into(), seed.to_string()),
        ("backend".into(), lab.describe_servers()),
        (
            "chaos".into(),
            format!(
                "time={}ms holders={} mode={} faults={}",
                cfg.time.as_millis(),
                cfg.holders,
                cfg.mode,
                cfg.faults
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
    ]);
    rec.case_with_lanes(chaos::CASE, chaos::TITLE, chaos::lanes(cfg.holders));
    let interrupted = tokio::select! {
        found = chaos::run(&mut lab, &mut rec, &cfg, &dir) => {
            if let Err(e) = found {
                rec.abort(&format!("{e:#}"));
            }
            None
        }
        _ = sigint.recv() => Some(("SIGINT", 130)),
        _ = sigterm.recv() => Some(("SIGTERM", 143)),
    };
    if let Some((name, _)) = interrupted {
        rec.interrupted(name);
    }
    let summary = rec.finish();
    if summary.as_ref().is_ok_and(|s| !s.all_passed()) && interrupted.is_none() {
        for line in lab.keep() {
            eprintln!("lab chaos: {line}; `./run.sh clean` removes it");
        }
    }
    lab.shutdown().await;
    let summary =
        summary.with_context(|| format!("failed to write the evidence into {}", dir.display()))?;
    eprintln!(
        "lab chaos: seed {seed}; evidence in {} (schedule.txt, history.jsonl, verdict.md, report.html)",
        dir.display()
    );
    Ok(match interrupted {
        Some((_, code)) => ExitCode::from(code),
        None if summary.all_passed() => ExitCode::SUCCESS,
        None => ExitCode::from(1),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7500ms"), Ok(Duration::from_millis(7500)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert!(parse_duration("1s").unwrap_err().contains("too short"));
        assert!(parse_duration("3h").unwrap_err().contains("units"));
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("not a duration"));
    }
}
