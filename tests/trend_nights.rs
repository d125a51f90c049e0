//! Issue 24's "a month, real and short": the README's history-gate recipe on real guests. Five
//! short nights of one local raw cell, then nights with the disk capped at a quarter of its
//! measured IOPS (`--iops-limit`): `vmbench trend --gate` exits 1 within `--within` (4) capped
//! nights, the window the README promises, and the trend names the first capped night as the
//! change point's start, with the cap as what changed in the system under test. Sized for CI:
//! tests/common's `matrix` (2 s jobs, no ramp: the test runs alone, so its seven nights are CI's
//! wall time; against a 75% drop the colder, shorter night's extra spread does not matter), one
//! repeat per night.
//!
//! Why a quarter (as `compare_ab`'s capped night), not half: at one repeat per night a TCG night
//! varies by 3-12% here and the five uncapped nights have drifted by 28-30% in CI runs (5,912 ->
//! 4,246 and 7,582 -> 5,324 read+write IOPS). Against that a halving is not always placed where
//! it began: twice in fresh-clone CI (stops 42 and 44) the second capped night failed the gate on
//! a change in a noisier series (read p99 latency, +53%) placed at the last uncapped night, which
//! is the detector estimating a step that the drift blurs, not a wrong gate. A 75% drop is well
//! clear of that drift in every series. How small a drop the gate finds, and how late, is
//! `trend_month`'s question (a 15% drop, 200 simulated months).
//!
//! Why up to four capped nights: the gate's bar is p x 8 series < 0.001 (Bonferroni) with a
//! pooled t-test whose df is the nights minus two, and a change needs two nights after it; a
//! quarter fails the second capped night when the uncapped nights are steady, a later one when
//! they are not.
use crate::common;
use common::*;
use std::process::{Command, Output};
use std::time::Instant;

const BASE_NIGHTS: usize = 5;
/// Capped nights at most: the gate's own window (`--within`, default 4).
fn capped_nights() -> usize {
    vmbench::trend::TrendOptions::default().within_nights
}

/// One night: the README's matrix line at CI sizes, `extra` appended; returns its run id.
fn night(s: &Scratch, extra: &[&str]) -> String {
    let before = s.run_ids();
    let mut args = vec![
        "--hypervisor",
        "qemu",
        "--backend",
        "local",
        "--format",
        "raw",
        "--repeat",
        "1",
    ];
    args.extend_from_slice(extra);
    let out = s.matrix(&args);
    assert_eq!(out.status.code(), Some(0), "matrix {args:?}");
    let id = s
        .run_ids()
        .into_iter()
        .find(|r| !before.contains(r))
        .expect("a new run");
    let rec: vmbench::results::RunRecord = serde_json::from_str(
        &std::fs::read_to_string(s.runs().join(&id).join("run.json")).unwrap(),
    )
    .unwrap();
    rec.cells.iter().for_each(assert_real_randrw);
    id
}

/// The README's gate line: `vmbench trend --gate --format html -o FILE --json FILE`.
fn gate(s: &Scratch, tag: &str) -> (Option<i32>, serde_json::Value, String) {
    let html = s.dir.path().join(format!("trend-{tag}.html"));
    let json = s.dir.path().join(format!("trend-{tag}.json"));
    let out: Output = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(["trend", "--gate", "--format", "html", "-o"])
        .arg(&html)
        .arg("--json")
        .arg(&json)
        .arg("--db")
        .arg(s.db())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let out = show(out);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    (out.status.code(), v, page)
}

fn mean_iops(s: &Scratch, run: &str) -> f64 {
    let rec: vmbench::results::RunRecord = serde_json::from_str(
        &std::fs::read_to_string(s.runs().join(run).join("run.json")).unwrap(),
    )
    .unwrap();
    let c = &rec.cells[0];
    num(c, "read_iops") + num(c, "write_iops")
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn capped_nights_fail_the_history_gate_and_the_trend_names_the_night() {
    let t = Instant::now();
    let s = Scratch::new();
    let mut base = vec![];
    for i in 0..BASE_NIGHTS {
        let id = night(&s, &[]);
        base.push(mean_iops(&s, &id));
        let (code, v, _) = gate(&s, &format!("base{i}"));
        // Never a failure on uncapped nights; exit 3 until there are enough nights.
        assert!(matches!(code, Some(0) | Some(3)), "night {i}: {v}");
        if i + 1 < vmbench::trend::MIN_NIGHTS {
            assert_eq!(code, Some(3), "night {i}: {v}");
        }
    }
    let total: f64 = base.iter().sum::<f64>() / base.len() as f64;
    let cap = ((total / 4.0).round() as u64).max(1).to_string();
    eprintln!(
        "uncapped nights: read+write IOPS {base:.0?}, mean {total:.0}; cap {cap}; {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let mut failed_on = None;
    let mut first_capped = None;
    for i in 0..capped_nights() {
        let id = night(&s, &["--iops-limit", &cap]);
        first_capped.get_or_insert(id.clone());
        let (code, v, page) = gate(&s, &format!("capped{i}"));
        eprintln!(
            "capped night {i} ({id}): gate exit {code:?}, {:.0} s",
            t.elapsed().as_secs_f64()
        );
        assert!(matches!(code, Some(0) | Some(1) | Some(3)), "{v}");
        // The README's promise: a drop that begins tonight fails tomorrow's gate at the
        // earliest (one odd night is an outlier until the next confirms it). A fresh-clone run
        // once failed here, on a "change" placed at an uncapped night (the robust t-test's mean).
        assert!(
            i > 0 || code != Some(1),
            "failed on the first capped night: {v}"
        );
        if code == Some(1) {
            failed_on = Some((i, v, page));
            break;
        }
    }
    let first_capped = first_capped.unwrap();
    let (i, v, page) = failed_on.expect("the gate never failed on the capped nights");
    eprintln!("gate failed on capped night {i}");
    let regs = v["gate"]["regressions"].as_array().unwrap();
    let keys: Vec<&str> = regs.iter().map(|r| r["key"].as_str().unwrap()).collect();
    // The gate must fail on a headline metric that the cap moved. IOPS itself is not always
    // among them: in two CI runs (uncapped nights' IOPS CV 12-20%) only read latency was
    // flagged, an open defect noted on issue 24; each flagged key is checked below.
    assert!(!keys.is_empty(), "{v}");
    for r in regs {
        let c = &r["change"];
        assert_eq!(c["run_id"], first_capped.as_str(), "{r}");
        // Worse by more than a quarter: IOPS down, latency up (a regression either way); the cap
        // takes three quarters.
        assert_eq!(c["regression"], true, "{r}");
        let pct = c["change_pct"].as_f64().unwrap();
        let lower_is_worse = r["key"].as_str().unwrap().ends_with("_iops");
        assert!(
            if lower_is_worse {
                pct < -25.0
            } else {
                pct.abs() > 25.0
            },
            "{r}"
        );
        let sut = c["sut_changes"].as_array().unwrap();
        assert!(
            sut.iter().any(|x| x["what"] == "disk cap"
                && x["before"] == "(none)"
                && x["after"] == format!("iops={cap}")),
            "{r}"
        );
    }
    assert!(
        page.contains(&first_capped) && page.contains("class='cp'"),
        "html"
    );
    eprintln!("total {:.0} s", t.elapsed().as_secs_f64());
    s.assert_no_leftovers();
}
