//! The OpenMetrics export of a real run (tests/fixtures/run-local-qcow2-raw-x2.json: 2 local
//! cells, qcow2 and raw, 2 repeats each, written by `vmbench matrix`): its structure, and
//! `promtool check metrics` on it where promtool is installed, and `vmbench export --format
//! openmetrics` through the binary.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use vmbench::report::openmetrics::openmetrics;
use vmbench::results::{Outcome, RunRecord};

fn run() -> RunRecord {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/run-local-qcow2-raw-x2.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn one_gauge_family_per_metric_with_base_units_and_labels() {
    let mut rec = run();
    // A failed repeat contributes nothing, and a hostile host name is escaped.
    rec.cells[0].provenance.host = "h\"o\\st\nx".into();
    rec.cells[3].outcome = Outcome::Failed("boom".into());
    let text = openmetrics(&rec);
    assert!(text.ends_with("# EOF\n"), "ends with # EOF");
    assert_eq!(text.matches("# EOF").count(), 1);

    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    assert!(types.iter().all(|t| t.ends_with(" gauge")), "{types:?}");
    let names: Vec<&str> = types.iter().map(|t| t.split(' ').next().unwrap()).collect();
    let mut dedup = names.clone();
    dedup.dedup();
    assert_eq!(names, dedup, "each family once");
    for want in [
        "vmbench_read_iops",
        "vmbench_read_lat_p99_seconds",
        "vmbench_write_bw_bytes_per_second",
        "vmbench_host_qemu_cpu_ratio",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
        assert!(text.contains(&format!("# HELP {want} ")), "HELP for {want}");
    }
    assert!(text.contains("# UNIT vmbench_read_lat_p99_seconds seconds\n"));

    // 3 passed results -> 3 read IOPS samples, with the cell's dimensions and the run id.
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("vmbench_read_iops{"))
        .collect();
    assert_eq!(samples.len(), 3, "{samples:#?}");
    for s in &samples {
        for l in [
            "hypervisor=\"qemu\"",
            "backend=\"local\"",
            "bus=\"virtio-blk\"",
            "workload=\"pg-randrw\"",
            &format!("run_id=\"{}\"", rec.run_id),
        ] {
            assert!(s.contains(l), "{l} in {s}");
        }
    }
    assert!(text.contains("host=\"h\\\"o\\\\st\\nx\""), "host escaped");

    // Values are scaled to base units: µs -> s.
    let p99_us = rec.cells[1]
        .metric("read_lat_p99_us")
        .and_then(|m| m.value.number())
        .unwrap();
    let line = text
        .lines()
        .filter(|l| l.starts_with("vmbench_read_lat_p99_seconds{"))
        .nth(1)
        .unwrap();
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((v - p99_us * 1e-6).abs() < 1e-12, "{v} vs {p99_us} µs");
    // Percent becomes a ratio without float noise: 64.27 -> 0.6427, not 0.6427000000000001.
    for line in text
        .lines()
        .filter(|l| l.starts_with("vmbench_guest_sys_cpu_ratio{"))
    {
        let v = line.rsplit(' ').next().unwrap();
        assert!(v.len() <= 12, "short decimal: {line}");
    }
}

fn have_promtool() -> bool {
    Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
#[ignore = "host: promtool"]
fn promtool_accepts_the_export() {
    assert!(
        have_promtool(),
        "promtool not installed (apt-get install -y prometheus)"
    );
    let text = openmetrics(&run());
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool check metrics: {said}");
    // Lint findings (non-base units, bad names) make promtool exit non-zero too, but say it
    // explicitly: nothing printed means nothing to complain about.
    assert!(said.trim().is_empty(), "promtool said: {said}");
}

/// Runs the vmbench binary.
fn vmbench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn export_command_writes_openmetrics_and_refuses_unknown_formats() {
    let rec = run();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.sqlite");
    let store = vmbench::results::store::Store::open(&db).unwrap();
    store
        .begin_run(&rec.run_id, &rec.started, &rec.command, "vm")
        .unwrap();
    for c in &rec.cells {
        store.record_cell(&rec.run_id, c).unwrap();
    }
    store.finish_run(&rec.run_id, "ok").unwrap();
    drop(store);
    let db = db.to_str().unwrap();

    let out = vmbench(&["export", &rec.run_id, "--format", "openmetrics", "--db", db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# TYPE vmbench_") && text.ends_with("# EOF\n"));
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("vmbench_read_iops{"))
            .count(),
        4
    );

    // JSON stays the default.
    let out = vmbench(&["export", &rec.run_id, "--db", db]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"vmbench_export\""));

    let out = vmbench(&["export", &rec.run_id, "--format", "prom", "--db", db]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("json") && err.contains("openmetrics"), "{err}");
}
