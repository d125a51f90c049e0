//! Renders the HTML report in a real browser (headless chromium): the SVG charts must be in the
//! DOM and the screenshot must show something. Host tests: scripts/test runs them when chromium is installed and says `skipped:` otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmbench::cell::*;
use vmbench::report;
use vmbench::results::{CellResult, Outcome, Provenance, RunRecord, Timings};
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
            hypervisor: Hypervisor::Qemu,
            xen_mode: None,
            backend,
            format: Format::Qcow2,
            bus: Bus::VirtioBlk,
            cache: CacheMode::None,
            io: IoMode::Native,
            layout: Layout::Raw,
            workload: WorkloadId::Preset("pg-randrw".into()),
        };
        let passed = outcome == Outcome::Passed;
        CellResult {
            cell_id: cell.id(),
            cell,
            repeat,
            outcome,
            metrics: if passed { metrics.clone() } else { vec![] },
            params: BTreeMap::new(),
            provenance: Provenance {
                fio: "fio-3.33".into(),
                ..Provenance::default()
            },
            timings: Timings::default(),
            samples: if passed {
                fio::samples_from_logs(&logs)
            } else {
                BTreeMap::new()
            },
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
