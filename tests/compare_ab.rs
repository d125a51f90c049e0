//! Issue 12's "a real regression to find": `vmbench compare` on real guests. An A/A pair of
//! identical runs must never be a regression (exit 0 or 3); an A/B pair where B's disk is capped
//! (`--iops-limit`, libvirt `<iotune>`) at half of A's measured IOPS must be one, on read and
//! write IOPS (exit 1). Sized for CI: one local raw cell, 4 s jobs, 5 repeats per side.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use vmbench::results::RunRecord;

/// Repeats per side: the fewest at which Welch on 5 vs 5 can pass Holm's level over the
/// headline rows of one cell.
const REPEATS: &str = "5";

/// One local raw pg-randrw cell, `extra` appended; returns the run directory and its record.
fn run_side(s: &Scratch, extra: &[&str]) -> (PathBuf, RunRecord) {
    let t = Instant::now();
    let mut args = vec![
        "--hypervisor",
        "qemu",
        "--backend",
        "local",
        "--format",
        "raw",
        "--repeat",
        REPEATS,
    ];
    args.extend_from_slice(extra);
    let out = s.matrix(&args);
    eprintln!("side {extra:?}: {:.0} s", t.elapsed().as_secs_f64());
    assert_eq!(out.status.code(), Some(0), "matrix {args:?} failed");
    let rec = s.run_record();
    assert_eq!(rec.1.cells.len(), 5);
    rec.1.cells.iter().for_each(assert_real_randrw);
    rec
}

/// `vmbench compare A B --json`: the exit code, stdout and the parsed JSON.
fn compare(a: &Path, b: &Path, db: &Path, json: &Path) -> (Option<i32>, String, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("compare")
        .arg(a)
        .arg(b)
        .arg("--db")
        .arg(db)
        .arg("--json")
        .arg(json)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- compare stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (out.status.code(), stdout, v)
}

/// The verdict name of the row for `key` (`regression`, `no_significant_change`, ...).
fn verdict(cmp: &serde_json::Value, key: &str) -> String {
    let row = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row {key}"));
    row["verdict"]["verdict"]
        .as_str()
        .unwrap_or_else(|| panic!("row {key}: {row}"))
        .to_string()
}

fn mean(rec: &RunRecord, key: &str) -> f64 {
    rec.cells.iter().map(|c| num(c, key)).sum::<f64>() / rec.cells.len() as f64
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_a_pair_is_never_a_regression() {
    let t = Instant::now();
    let (a, b) = (Scratch::new(), Scratch::new());
    let (dir_a, _) = run_side(&a, &[]);
    let (dir_b, _) = run_side(&b, &[]);
    let (code, stdout, cmp) = compare(&dir_a, &dir_b, &a.db(), &a.dir.path().join("aa.json"));
    assert!(
        matches!(code, Some(0) | Some(3)),
        "A/A exit {code:?}:\n{stdout}"
    );
    for key in ["read_iops", "write_iops"] {
        assert_ne!(verdict(&cmp, key), "regression", "{key}:\n{stdout}");
    }
    eprintln!("A/A: exit {code:?}, {:.0} s", t.elapsed().as_secs_f64());
    a.assert_no_leftovers();
    b.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_b_pair_capped_at_half_the_iops_is_a_regression() {
    let t = Instant::now();
    let (a, b) = (Scratch::new(), Scratch::new());
    let (dir_a, rec_a) = run_side(&a, &[]);
    let (read, write) = (mean(&rec_a, "read_iops"), mean(&rec_a, "write_iops"));
    let cap = (((read + write) / 2.0).round() as u64).max(1).to_string();
    let (dir_b, rec_b) = run_side(&b, &["--iops-limit", &cap]);
    for c in &rec_b.cells {
        assert_eq!(c.params.get("iops_limit"), Some(&cap), "{}", c.cell_id);
        assert_eq!(c.provenance.io_limit, format!("iops={cap}"));
    }
    let first = std::fs::read_dir(dir_b.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let xml = std::fs::read_to_string(first.join("domain.xml")).unwrap();
    assert!(
        xml.contains(&format!("<total_iops_sec>{cap}</total_iops_sec>")),
        "{xml}"
    );
    let (code, stdout, cmp) = compare(&dir_a, &dir_b, &a.db(), &a.dir.path().join("ab.json"));
    eprintln!(
        "A/B: A read {read:.0} write {write:.0} IOPS; cap {cap}; B read {:.0} write {:.0}; \
         exit {code:?}, {:.0} s",
        mean(&rec_b, "read_iops"),
        mean(&rec_b, "write_iops"),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(code, Some(1), "A/B exit:\n{stdout}");
    for key in ["read_iops", "write_iops"] {
        assert_eq!(verdict(&cmp, key), "regression", "{key}:\n{stdout}");
    }
    assert!(stdout.contains("REGRESSION"), "{stdout}");
    a.assert_no_leftovers();
    b.assert_no_leftovers();
}

#[test]
fn zero_or_garbage_limits_are_exit_2_and_create_nothing() {
    let s = Scratch::new();
    for (args, want) in [
        (vec!["--iops-limit", "0"], "must be at least 1"),
        (vec!["--bw-limit", "0"], "--bw-limit"),
        (vec!["--iops-limit", "fast"], "--iops-limit"),
        (vec!["--bw-limit=-5"], "--bw-limit"),
        (
            vec!["--iops-limit", "100", "--hypervisor", "xen"],
            "<iotune>",
        ),
    ] {
        let out = s.matrix(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!s.runs().exists(), "{args:?} created a run dir");
    }
}
