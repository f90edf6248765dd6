//! `lab bench`: with a closed stdout it still writes its files and stops its cluster; with
//! `--leases` it measures each cell on the real lease table and names the knee where the store
//! stops keeping up.

mod common;

use common::{closed_stdout, stderr, Sandbox};

use std::fs;
use std::process::Command;

#[test]
fn bench_with_a_closed_stdout_still_writes_its_files_and_stops_its_cluster() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    // The smallest bench: 100 ms per cell, no warm-up, one contention round.
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "bench",
            "--duration-ms",
            "100",
            "--warmup",
            "0",
            "--rounds",
            "1",
        ])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .stdout(closed_stdout()?)
        .stderr(std::process::Stdio::piped())
        .output()?;
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in ["bench.json", "bench.svg", "bench.html"] {
        assert!(
            fs::metadata(ev.join(file))?.len() > 0,
            "{file} written: {}",
            stderr(&out)
        );
    }
    sb.assert_nothing_left()
}

/// `lab bench --leases`: every cell measured on the real lease table, and the knee
/// named where the store stops keeping up — 10 leases renewed every 150 ms by one holder are
/// easy; 3000 by the same one holder (20000 renewals/s from one connection, the leases taken
/// slower than their 450 ms TTL) cannot be, and the table and the knee line say so.
#[test]
fn lease_scaling_measures_each_cell_and_names_the_knee() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "bench",
            "--leases",
            "10,3000",
            "--holders",
            "1",
            "--renew-ms",
            "150",
            "--duration-ms",
            "1050",
        ])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", stderr(&out));
    let row = |leases: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| postgres | {leases} | 1 |")))
            .unwrap_or_else(|| panic!("no row for {leases} leases:\n{table}"))
            .to_owned()
    };
    assert!(row("10").ends_with("| yes |"), "{table}");
    // Not kept up, and the row says what limited it (one holder's one request at a time, or a CPU).
    assert!(row("3000").contains("| NO: "), "{table}");
    assert!(
        table.contains("knee: postgres with 1 holders renewing every 150 ms keeps up with 10 leases, not with 3000"),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ev.join("bench-leases.json"))?)?;
    let kept: Vec<bool> = json["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c["kept_up"].as_bool().expect("kept_up"))
        .collect();
    assert_eq!(kept, [true, false]);
    let first = &json["cells"][0];
    assert!(
        first["renewed_per_s"].as_f64().expect("a rate") >= 63.0,
        "10 leases every 150 ms: about 67 renewals/s: {first}"
    );
    assert!(fs::metadata(ev.join("bench-leases.svg"))?.len() > 0);
    let page = fs::read_to_string(ev.join("bench.html"))?;
    assert!(
        page.contains("<img src=\"bench-leases.svg\"") && page.contains("knee: postgres"),
        "the report page shows the chart and the table: {page}"
    );
    sb.assert_nothing_left()
}

/// `lab bench --fence-cost`: pgbench on the five statements at 16 and 64
/// writers, every cell's server CPU and WAL per transaction read, the floor line written — one
/// round of 2 s cells, the test alone on the machine (a fresh-clone CI saw it starve its
/// neighbours, and a 1 s cell of 64 clients beside them complete nothing). What a
/// run this short can judge beside the figures is the WAL, which the machine's load does not
/// move: fenced-shared's row lock writes WAL per transaction the unchecked write does not, and
/// the advisory-lock fence, which keeps its lock in memory, writes what the unchecked write does.
#[test]
fn fence_cost_measures_each_statement_and_the_row_locks_wal() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let ev = sb.path("ev");
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["bench", "--fence-cost", "1", "--duration-ms", "2000"])
        .arg("--evidence-dir")
        .arg(&ev)
        .env("TMPDIR", sb.path("tmp"))
        .output()?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = String::from_utf8(out.stdout)?;
    assert_eq!(fs::read_to_string(ev.join("bench-fence-cost.txt"))?, table);
    for n in [16, 64] {
        assert!(
            table.contains(&format!("the floor at {n} writers: the check's read costs")),
            "{table}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ev.join("bench-fence-cost.json"))?)?;
    let cells = json["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 10, "{json}");
    let median = |statement: &str, writers: u64, field: &str| -> f64 {
        let cell = cells
            .iter()
            .find(|c| c["statement"] == statement && c["writers"] == writers)
            .unwrap_or_else(|| panic!("no cell {statement} at {writers}: {json}"));
        let mut values: Vec<f64> = cell[field]
            .as_array()
            .unwrap_or_else(|| panic!("{field} of {statement}: {json}"))
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        // The one round's figure: the test runs alone (.config/nextest.toml), so that a cell of
        // 64 clients completes transactions in its 2 s.
        assert_eq!(
            values.len(),
            1,
            "{field} of {statement} at {writers}: the round's figure: {json}"
        );
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    for writers in [16, 64] {
        for c in cells.iter().filter(|c| c["writers"] == writers) {
            let s = c["statement"].as_str().expect("a name");
            assert!(median(s, writers, "server_cpu_us_per_tx") > 0.0, "{json}");
        }
        let write = median("unfenced-single", writers, "wal_bytes_per_tx");
        let shared = median("fenced-shared", writers, "wal_bytes_per_tx");
        let advisory = median("fenced-advisory", writers, "wal_bytes_per_tx");
        assert!(
            shared > write + 20.0,
            "FOR SHARE writes WAL: {shared} against {write}"
        );
        assert!(
            (advisory - write).abs() < 20.0,
            "the advisory lock writes none: {advisory} against {write}"
        );
    }
    sb.assert_nothing_left()
}
