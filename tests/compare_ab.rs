//! The nightly gate on real guests, run as Debian hosts run it: packaging/vmbench-nightly (the
//! script vmbench-nightly.service starts) over a scratch state directory and config, night after
//! night. Each night is one local raw pg-randrw cell with CI-sized jobs (tests/common's sizes).
//!
//! (a) night 1 has nothing to compare with; night 2 is an A/A pair with night 1 (never exit 1);
//! night 3 is capped (`iops_limit`, libvirt `<iotune>`) at a quarter of night 2's measured IOPS:
//! the gate fails on it, and only on it. (b) a night with a different recorded QEMU version and no
//! drop (night 2 exported, its QEMU version edited, imported): not exit 1, `what changed`
//! printed first; it is also night 3's baseline, so night 3 is a QEMU change with a real drop.
//! (c) a night whose cell fails (a boot timeout shorter than any boot): exit 1, the cell broken.
//!
//! The A side is shared: night 2 is both the A/A pair's second side and (through its imported
//! copy) the capped night's baseline. Repeats: 5 on night 2, whose spread sets Welch's df
//! against the nearly constant capped side; 3 on night 3; 2 on night 1 (it only has to be an
//! earlier good night for the A/A pair); 1 on the failing night.
use crate::common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;
use vmbench::results::RunRecord;

/// The matrix every night runs, with CI-sized jobs; `extra` adds keys for one night.
fn config(repeat: u32, extra: &str) -> String {
    format!(
        "hypervisor = [\"qemu\"]\nbackend = [\"local\"]\nformat = [\"raw\"]\n\
         workload = [\"pg-randrw\"]\nrepeat = {repeat}\nruntime = 4\nramp = 1\nsize = \"32M\"\n\
         disk_mib = 128\nmemory_mib = 384\nprobe = false\n{extra}"
    )
}

/// A scratch state directory (database, runs, work, gate outputs) the recipe runs in.
struct Nights {
    s: Scratch,
}

impl Nights {
    fn out(&self, name: &str) -> PathBuf {
        self.s.dir.path().join("nightly").join(name)
    }

    fn db(&self) -> PathBuf {
        self.s.dir.path().join("nightly.db")
    }

    /// Runs the recipe (`mode`: `run` or `gate`) with `conf` as /etc/vmbench/nightly.conf.
    fn recipe(&self, mode: &str, conf: &str) -> Output {
        let t = Instant::now();
        let path = self.s.dir.path().join("nightly.conf");
        std::fs::write(&path, conf).unwrap();
        let out = Command::new("sh")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/vmbench-nightly"))
            .arg(mode)
            .env("VMBENCH", env!("CARGO_BIN_EXE_vmbench"))
            .env("VMBENCH_NIGHTLY_CONFIG", &path)
            .env("VMBENCH_STATE_DIR", self.s.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("JOURNAL_STREAM")
            .output()
            .unwrap();
        eprintln!("recipe {mode}: {:.0} s", t.elapsed().as_secs_f64());
        show(out)
    }

    /// The gate's JSON of the last recipe run (absent on a first night).
    fn verdict(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.out("compare.json")).ok()?;
        Some(serde_json::from_str(&text).unwrap())
    }

    /// The newest run in the runs dir.
    fn newest(&self) -> RunRecord {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.s.runs())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        let last = dirs.last().unwrap();
        serde_json::from_str(&std::fs::read_to_string(last.join("run.json")).unwrap()).unwrap()
    }

    fn vmbench(&self, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_vmbench"))
            .args(args)
            .arg("--db")
            .arg(self.db())
            .output()
            .unwrap();
        show(out)
    }
}

fn mean(rec: &RunRecord, key: &str) -> f64 {
    rec.cells.iter().map(|c| num(c, key)).sum::<f64>() / rec.cells.len() as f64
}

/// The verdict name of the row for `key` (`regression`, `no_significant_change`, ...).
fn row_verdict(cmp: &serde_json::Value, key: &str) -> String {
    let row = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row {key}"));
    row["verdict"]["verdict"].as_str().unwrap().to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn the_nightly_recipe_fails_on_the_slow_night_and_only_then() {
    let t = Instant::now();
    let n = Nights { s: Scratch::new() };

    // Night 1: nothing earlier to compare with; the recipe passes and says so.
    let out = n.recipe("run", &config(2, ""));
    assert_eq!(out.status.code(), Some(0), "night 1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no earlier good run"));
    assert!(n.verdict().is_none(), "no gate output on a first night");
    assert!(n.out("latest.html").exists(), "the report is written");
    let night1 = n.newest();

    // Night 2: an A/A pair with night 1. Never exit 1; every verdict row compared (same
    // instrument, the job hash included).
    let out = n.recipe("run", &config(5, ""));
    let v = n.verdict().expect("night 2 is judged");
    assert_eq!(out.status.code(), Some(0), "night 2:\n{}", stdout(&out));
    assert!(matches!(v["exit_code"].as_i64(), Some(0 | 3)), "A/A: {v}");
    let night2 = n.newest();
    night2.cells.iter().for_each(assert_real_randrw);
    assert_eq!(
        (v["baseline_run"].as_str(), v["candidate_run"].as_str()),
        (Some(night1.run_id.as_str()), Some(night2.run_id.as_str()))
    );
    assert_eq!(v["family_size"], 6, "{v}");
    for r in v["rows"].as_array().unwrap() {
        assert_ne!(r["verdict"]["verdict"], "not_comparable", "{r}");
        assert_ne!(r["verdict"]["verdict"], "regression", "{r}");
    }

    // (b) Night 2 again, with another recorded QEMU version: compared, what changed first.
    let export = n.s.dir.path().join("night2.json");
    let exported = n.vmbench(&["export", &night2.run_id, "-o", export.to_str().unwrap()]);
    assert!(exported.status.success());
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let qemu = night2.cells[0].provenance.qemu.clone();
    let upgraded = if qemu == "8.2.2" { "9.2.0" } else { "8.2.2" };
    for c in doc["run"]["cells"].as_array_mut().unwrap() {
        c["provenance"]["qemu"] = upgraded.into();
    }
    let edited_id = format!("{}-qemu", night2.run_id);
    doc["run"]["run_id"] = edited_id.clone().into();
    std::fs::write(&export, doc.to_string()).unwrap();
    assert!(n
        .vmbench(&["import", export.to_str().unwrap()])
        .status
        .success());
    let out = n.recipe("gate", &config(5, ""));
    let v = n.verdict().unwrap();
    assert_eq!(out.status.code(), Some(0), "QEMU change, no drop");
    assert_ne!(v["exit_code"], 1, "{v}");
    assert_eq!(v["candidate_run"], edited_id.as_str());
    assert_eq!(v["baseline_run"], night2.run_id.as_str());
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("what changed: qemu {qemu} -> {upgraded}")),
        "{text}"
    );

    // Night 3: capped at a quarter of night 2's IOPS. Not half: night 2 has 5 repeats, and on a
    // noisy CI host one of them can put its CV at 25%, where Welch's t for a 50% drop against the
    // nearly constant capped side is about 6 at ~4 df (p ~0.003, times 6 rows under Holm: above
    // 0.01, inconclusive; CI saw exactly that). A 75% drop is t ~12 there (adjusted p ~0.002),
    // and still clears alpha at a 35% CV. The gate fails, on read and write IOPS; its
    // baseline is the newest earlier good night, the imported one, so this is also a QEMU
    // change (back) with a real drop.
    let cap = ((mean(&night2, "read_iops") + mean(&night2, "write_iops")) / 4.0).round() as u64;
    let out = n.recipe("run", &config(3, &format!("iops_limit = {cap}\n")));
    let v = n.verdict().unwrap();
    let night3 = n.newest();
    eprintln!(
        "night 2 read {:.0} write {:.0} IOPS; cap {cap}; night 3 read {:.0} write {:.0}",
        mean(&night2, "read_iops"),
        mean(&night2, "write_iops"),
        mean(&night3, "read_iops"),
        mean(&night3, "write_iops")
    );
    assert_eq!(out.status.code(), Some(1), "night 3:\n{}", stdout(&out));
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["baseline_run"], edited_id.as_str());
    for key in ["read_iops", "write_iops"] {
        assert_eq!(
            row_verdict(&v, key),
            "regression",
            "{key}:\n{}",
            stdout(&out)
        );
    }
    // The matrix's tables come first on the recipe's stdout; the gate's output is its file.
    let text = std::fs::read_to_string(n.out("compare.txt")).unwrap();
    assert!(
        text.starts_with(&format!("what changed: qemu {upgraded} -> {qemu}")),
        "{text}"
    );
    assert!(
        stdout(&out).contains(&text),
        "the recipe prints the gate's output"
    );
    assert!(
        text.contains(&format!("disk cap (none) -> iops={cap}")),
        "{text}"
    );
    let junit = std::fs::read_to_string(n.out("junit.xml")).unwrap();
    assert!(junit.contains("type=\"regression\""), "{junit}");
    let cell = std::fs::read_dir(night3_dir(&n, &night3).join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let xml = std::fs::read_to_string(cell.join("domain.xml")).unwrap();
    assert!(
        xml.contains(&format!("<total_iops_sec>{cap}</total_iops_sec>")),
        "{xml}"
    );

    // (c) Night 4: the cell fails (no guest boots in 1 s). Exit 1 from the matrix and the gate,
    // the cell a broken verdict row of its own.
    let out = n.recipe("run", &config(1, "boot_timeout = 1\n"));
    let v = n.verdict().unwrap();
    assert_eq!(out.status.code(), Some(1), "night 4");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert_eq!(v["baseline_run"], night3.run_id.as_str());
    let broken = v["broken"].as_array().unwrap();
    assert_eq!(broken.len(), 1, "{v}");
    assert_eq!(broken[0]["breakage"], "failed");
    assert!(stdout(&out).contains("BROKEN: qemu/local/raw: passed in baseline, failed in candidate 1/1 repeats (boot_timeout)"), "{}", stdout(&out));
    assert!(std::fs::read_to_string(n.out("junit.xml"))
        .unwrap()
        .contains("type=\"broken\""));

    eprintln!(
        "nightly recipe, 4 nights: {:.0} s",
        t.elapsed().as_secs_f64()
    );
    n.s.assert_no_leftovers();
}

fn night3_dir(n: &Nights, rec: &RunRecord) -> PathBuf {
    n.s.runs().join(&rec.run_id)
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
