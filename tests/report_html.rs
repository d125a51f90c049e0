//! Renders the HTML report in a real browser (headless chromium): the SVG charts must be in the
//! DOM and the screenshot must show something. Host tests: scripts/test runs them when chromium is installed and says `skipped:` otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmbench::cell::*;
use vmbench::report;
use vmbench::results::{CellResult, Outcome, Provenance, RunRecord};
use vmbench::workload::fio;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn run_record() -> RunRecord {
    let metrics = fio::metrics(&fio::parse(&fixture("fio-host-pg-randrw.json")).unwrap());
    let logs: Vec<(String, String)> = ["bw", "iops", "lat"]
        .iter()
        .map(|k| {
            let n = format!("fio-host-pg-randrw_{k}.1.log");
            (n.clone(), fixture(&n))
        })
        .collect();
    let mk = |backend, repeat, outcome: Outcome| {
        let cell = Cell {
            backend,
            ..Cell::default()
        };
        let passed = outcome == Outcome::Passed;
        CellResult {
            metrics: if passed { metrics.clone() } else { vec![] },
            provenance: Provenance {
                tools: [("fio".into(), "fio-3.33".into())].into(),
                ..Provenance::default()
            },
            samples: if passed {
                fio::samples_from_logs(&logs)
            } else {
                BTreeMap::new()
            },
            ..CellResult::new(cell, repeat, outcome)
        }
    };
    RunRecord {
        run_id: "browser-test".into(),
        started: "2026-12-02T15:00:00Z".into(),
        command: vec!["vmbench".into()],
        cells: vec![
            mk(Backend::Local, 0, Outcome::Passed),
            mk(Backend::Nfs, 0, Outcome::Passed),
            mk(Backend::Iscsi, 0, Outcome::Failed("tgtd <down>".into())),
        ],
    }
}

/// A real run (2 local cells x 2 repeats, `vmbench matrix` output) plus cells that did not
/// pass: an unsupported Xen cell, a failed iSCSI cell and a skipped one.
fn real_run_with_outcomes() -> RunRecord {
    let mut run: RunRecord = serde_json::from_str(&fixture("run-local-qcow2-raw-x2.json")).unwrap();
    let base = run.cells[0].clone();
    let mut other = |f: &dyn Fn(&mut Cell), outcome: Outcome| {
        let mut r = base.clone();
        f(&mut r.cell);
        r.cell_id = r.cell.id();
        r.outcome = outcome;
        r.metrics.clear();
        r.samples.clear();
        run.cells.push(r);
    };
    other(
        &|c| {
            c.hypervisor = Hypervisor::Xen;
            c.xen_mode = Some(XenMode::Pvh);
        },
        Outcome::Unsupported("unsupported on this host: no dom0 <xen>".into()),
    );
    other(
        &|c| c.backend = Backend::Iscsi,
        Outcome::Failed("tgtd: login refused".into()),
    );
    other(
        &|c| c.bus = Bus::VirtioScsi,
        Outcome::Skipped("combination not meaningful".into()),
    );
    run
}

/// Position of `needle` in `hay`, or a panic naming it.
fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle} not in the page"))
}

/// Checks the page's reading order and contents; used on our HTML and on chromium's DOM.
fn check_real_page(page: &str) {
    // Summary first, then charts, series, the full list, outcomes and provenance.
    let order = [
        "id=\"summary\"",
        "id=\"charts\"",
        "id=\"series\"",
        "id=\"all\"",
        "id=\"outcomes\"",
        "id=\"provenance\"",
    ];
    let at: Vec<usize> = order.iter().map(|n| pos(page, n)).collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "sections in order: {at:?}"
    );
    assert_eq!(
        pos(page, "<table"),
        pos(page, "<table id=\"summary-table\""),
        "the summary table is the first table"
    );
    assert!(
        pos(page, "summary-table") < pos(page, "<svg"),
        "table before any chart"
    );
    // n and spread under the figures of cells with 2 repeats.
    let summary = &page[at[0]..at[1]];
    assert!(
        summary.contains("n=2") && summary.contains("95% CI"),
        "n and spread shown"
    );
    assert!(summary.contains("Read IOPS") && summary.contains("Write Latency (p99)"));
    // Error bars: each headline chart has one per cell with n > 1 (2 passed cells).
    let charts = &page[at[1]..at[2]];
    let n_charts = charts.matches("<svg").count();
    assert!(n_charts >= 8, "{n_charts} headline charts");
    assert_eq!(charts.matches("class=\"errorbar\"").count(), 2 * n_charts);
    // Time series: one chart per series key, one line per passed cell.
    let series = &page[at[2]..at[3]];
    for key in ["read_iops", "write_iops", "read_lat_mean_us"] {
        let c = &series[pos(series, &format!("data-chart=\"series-{key}\""))..];
        let c = &c[..pos(c, "</figure>")];
        assert_eq!(c.matches("<polyline").count(), 2, "two cells in {key}");
    }
    assert!(
        page[at[3]..at[4]].contains("<details>"),
        "full list collapsed"
    );
    // Cells that did not pass are listed with their reasons, never absent.
    let outcomes = &page[at[4]..at[5]];
    for reason in [
        "unsupported on this host: no dom0 &lt;xen&gt;",
        "failed: tgtd: login refused",
        "skipped: combination not meaningful",
    ] {
        assert!(outcomes.contains(reason), "{reason} in outcomes");
    }
    assert!(!outcomes.contains("unsupported: unsupported"), "said twice");
    assert!(summary.contains("(unsupported)") && summary.contains("(failed)"));
    assert!(page.contains("5 cells: 2 passed, 1 failed, 1 unsupported, 1 skipped"));
}

#[test]
fn real_run_page_reads_summary_first() {
    check_real_page(&report::html(&real_run_with_outcomes()));
}

/// Runs chromium with a deadline; the child is killed (it is ours) if it overruns.
fn chromium(args: &[String], timeout: Duration) -> std::process::Output {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait chromium").is_some() {
            return child.wait_with_output().expect("chromium output");
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write_page(dir: &Path) -> (PathBuf, String) {
    let html = report::html(&run_record());
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    (page, html)
}

#[test]
#[ignore = "host: chromium"]
fn chromium_renders_the_svg_charts() {
    let dir = tempfile::tempdir().unwrap();
    let (page, html) = write_page(dir.path());
    let url = format!("file://{}", page.display());
    let out = chromium(&["--dump-dom".into(), url], Duration::from_secs(120));
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let want = html.matches("<svg").count();
    assert!(want >= 12, "{want} charts in the page");
    assert_eq!(
        dom.matches("<svg").count(),
        want,
        "every chart is in the browser's DOM"
    );
    assert!(dom.contains("<polyline"), "time series drawn");
    assert!(dom.contains("tgtd &lt;down&gt;"), "reason shown as text");
}

#[test]
#[ignore = "host: chromium"]
fn chromium_renders_the_real_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("real.html");
    std::fs::write(&page, report::html(&real_run_with_outcomes())).unwrap();
    let out = chromium(
        &["--dump-dom".into(), format!("file://{}", page.display())],
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_real_page(&String::from_utf8_lossy(&out.stdout));
}

#[test]
#[ignore = "host: chromium"]
fn chromium_screenshot_is_not_blank() {
    let dir = tempfile::tempdir().unwrap();
    let (page, _) = write_page(dir.path());
    let png = dir.path().join("shot.png");
    let args = vec![
        format!("--screenshot={}", png.display()),
        "--window-size=1000,1600".into(),
        format!("file://{}", page.display()),
    ];
    let out = chromium(&args, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (1000, 1600));
    // A blank 1000x1600 page compresses to a few KB; charts and text make it much larger.
    assert!(
        bytes.len() > 30_000,
        "screenshot only {} bytes",
        bytes.len()
    );
}
