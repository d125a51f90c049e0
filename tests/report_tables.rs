//! Report tables, markdown, CSV and HTML from CellResults built from real tool output:
//! fixture -> parser -> metrics -> CellResult -> report. Expected figures are recomputed from
//! the raw fixture (serde_json / the seed CSV), not taken from the parsers.

use serde_json::Value as Json;
use std::path::PathBuf;
use vmbench::cell::*;
use vmbench::report::{self, summary};
use vmbench::results::{CellResult, Outcome, RunRecord};
use vmbench::workload::{bonnie, fio};

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn cell(backend: Backend, format: Format, workload: WorkloadId) -> Cell {
    Cell {
        backend,
        format,
        workload,
        ..Cell::default()
    }
}

fn result(
    cell: Cell,
    repeat: u32,
    outcome: Outcome,
    metrics: Vec<vmbench::results::Metric>,
) -> CellResult {
    CellResult {
        metrics,
        ..CellResult::new(cell, repeat, outcome)
    }
}

fn pg() -> WorkloadId {
    WorkloadId::Preset("pg-randrw".into())
}

fn fio_metrics(name: &str) -> Vec<vmbench::results::Metric> {
    fio::metrics(&fio::parse(&fixture(name)).unwrap())
}

/// Sum over jobs of a read/write field in a raw fio JSON fixture.
fn raw_sum(name: &str, dir: &str, field: &str) -> f64 {
    let j: Json = serde_json::from_str(&fixture(name)).unwrap();
    j["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job[dir][field].as_f64().unwrap())
        .sum()
}

fn fio_results() -> Vec<CellResult> {
    let local = cell(Backend::Local, Format::Qcow2, pg());
    let nfs = cell(Backend::Nfs, Format::Raw, pg());
    let iscsi = cell(Backend::Iscsi, Format::Raw, pg());
    vec![
        result(
            local.clone(),
            0,
            Outcome::Passed,
            fio_metrics("fio-host-pg-randrw.json"),
        ),
        result(
            local,
            1,
            Outcome::Passed,
            fio_metrics("fio-host-2jobs.json"),
        ),
        result(
            nfs,
            0,
            Outcome::Passed,
            fio_metrics("fio-host-pg-randrw.json"),
        ),
        result(
            iscsi,
            0,
            Outcome::Failed("tgtd: login refused".into()),
            vec![],
        ),
        // Captured in the vmbench guest (TCG) by the agent.
        result(
            cell(Backend::Block, Format::Raw, pg()),
            0,
            Outcome::Passed,
            fio_metrics("fio-guest-pg-randrw.json"),
        ),
    ]
}

/// Table lines split on the modern style's vertical bar.
fn cells_of(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| l.contains('│'))
        .map(|l| {
            l.split('│')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .map(|v| v[1..v.len() - 1].to_vec())
        .collect()
}

fn row<'a>(rows: &'a [Vec<String>], first: &str) -> &'a Vec<String> {
    rows.iter()
        .find(|r| r[0] == first)
        .unwrap_or_else(|| panic!("no row {first}"))
}

#[test]
fn fio_table_has_the_seed_layout_and_right_figures() {
    let results = fio_results();
    let t = report::metric_table(&results);
    let rows = cells_of(&t);
    let head = &rows[0];
    assert_eq!(head[0], "Metric");
    let col = |label: &str| {
        head.iter()
            .position(|h| h == label)
            .unwrap_or_else(|| panic!("{label} in {head:?}"))
    };
    let local = col("qemu/local/qcow2");
    let nfs = col("qemu/nfs/raw");
    let iscsi = col("qemu/iscsi/raw");

    // nfs: one repeat -> the host run's read IOPS, with its unit.
    let one = raw_sum("fio-host-pg-randrw.json", "read", "iops");
    assert_eq!(
        row(&rows, "Read IOPS")[nfs],
        summary::with_unit(one, "IOPS")
    );
    // local: two repeats -> mean, sample sd relative to the mean, and n.
    let two = raw_sum("fio-host-2jobs.json", "read", "iops");
    let mean = (one + two) / 2.0;
    let sd = ((one - mean).powi(2) + (two - mean).powi(2)).sqrt();
    let want = format!(
        "{} ±{:.1}% (n=2)",
        summary::with_unit(mean, "IOPS"),
        sd / mean * 100.0
    );
    assert_eq!(row(&rows, "Read IOPS")[local], want);
    let bw = raw_sum("fio-host-pg-randrw.json", "write", "bw_bytes") / 1048576.0;
    assert_eq!(
        row(&rows, "Write Bandwidth")[nfs],
        summary::with_unit(bw, "MiB/s")
    );
    assert!(row(&rows, "Read Latency (avg)")[nfs].ends_with(" µs"));
    assert!(row(&rows, "CPU Usage (sys)")[nfs].ends_with('%'));

    // The failed cell shows its outcome, never numbers.
    for r in &rows[1..rows.len() - 1] {
        assert_eq!(r[iscsi], "(failed)", "row {}", r[0]);
    }
    assert_eq!(row(&rows, "Outcome")[iscsi], "failed: tgtd: login refused");
    assert_eq!(row(&rows, "Outcome")[local], "passed x2");
    let guest = col("qemu/block/raw");
    let g = raw_sum("fio-guest-pg-randrw.json", "read", "iops");
    assert_eq!(
        row(&rows, "Read IOPS")[guest],
        summary::with_unit(g, "IOPS")
    );
    let gs = raw_sum("fio-guest-pg-randrw.json", "write", "iops");
    assert_eq!(
        row(&rows, "Write IOPS")[guest],
        summary::with_unit(gs, "IOPS")
    );
    assert!(t.contains("mean ±sample standard deviation as % of the mean"));
}

fn bonnie_results() -> Vec<CellResult> {
    let b = WorkloadId::Preset("bonnie".into());
    let m = |name: &str| {
        let text = fixture(name);
        bonnie::metrics(&bonnie::parse_csv(bonnie::find_csv_line(&text).unwrap()).unwrap())
    };
    vec![
        result(
            cell(Backend::Block, Format::Raw, b.clone()),
            0,
            Outcome::Passed,
            m("bonnie-1.96-seed-partition.csv"),
        ),
        result(
            cell(Backend::Lvm, Format::Raw, b.clone()),
            0,
            Outcome::Passed,
            m("bonnie-1.96-seed-lvm.csv"),
        ),
        result(
            cell(Backend::Local, Format::Qcow2, b.clone()),
            0,
            Outcome::Passed,
            m("bonnie-2.00-host.stdout"),
        ),
        result(
            cell(Backend::Nfs, Format::Qcow2, b),
            0,
            Outcome::Unsupported("no libnfs in qemu".into()),
            vec![],
        ),
    ]
}

#[test]
fn bonnie_table_has_the_seed_columns() {
    let results = bonnie_results();
    let t = report::cell_table(&results, 0);
    let rows = cells_of(&t);
    for group in [
        "Seq Output Per Chr",
        "Seq Output Block",
        "Seq Output Rewrite",
        "Seq Input Per Chr",
        "Seq Input Block",
        "Random Seeks",
    ] {
        assert!(
            rows[0].iter().any(|h| h == group),
            "{group} in {:?}",
            rows[0]
        );
    }
    assert_eq!(
        rows[1][..4],
        ["Cell", "Size", "K/sec", "%CP"].map(String::from)
    );
    // The seed's partition line, field by field: "8G,,201,99,36450,10,18008,5,1123,98,37637,5,118.6,4".
    let seed = fixture("bonnie-1.96-seed-partition.csv");
    let f: Vec<&str> = seed.trim().split(',').collect();
    let part = row(&rows, "qemu/block/raw");
    assert_eq!(part[1], f[5]);
    assert_eq!(
        part[2..14],
        f[7..19],
        "bonnie++'s own figures, as it printed them"
    );
    // bonnie++ 2.00 on the host: block output too fast to measure.
    let host = row(&rows, "qemu/local/qcow2");
    assert_eq!(host[1], "64M");
    assert_eq!(host[4], "+++++");
    assert_eq!(host[5], "+++");
    let nfs = row(&rows, "qemu/nfs/qcow2");
    assert!(nfs[2..14].iter().all(|c| c == "(unsupported)"), "{nfs:?}");
    assert_eq!(nfs[14], "unsupported: no libnfs in qemu");
}

#[test]
fn bonnie_files_table_matches_the_seed() {
    let results = bonnie_results();
    let rows = cells_of(&report::cell_table(&results, 1));
    assert_eq!(rows[0][2], "Seq Create");
    assert_eq!(rows[1][1], "Files");
    let seed = fixture("bonnie-1.96-seed-lvm.csv");
    let f: Vec<&str> = seed.trim().split(',').collect();
    let lvm = row(&rows, "qemu/lvm/raw");
    assert_eq!(lvm[1], f[19], "file count");
    assert_eq!(
        lvm[2..14],
        f[24..36],
        "create/read/delete as bonnie++ printed them"
    );
    assert_eq!(lvm[4], "+++++");
}

#[test]
fn too_fast_is_never_averaged() {
    let b = WorkloadId::Preset("bonnie".into());
    let c = cell(Backend::Local, Format::Raw, b);
    let seed = fixture("bonnie-1.96-seed-partition.csv");
    let too_fast = seed.replacen(",36450,10,", ",+++++,+++,", 1);
    let rs = vec![
        result(
            c.clone(),
            0,
            Outcome::Passed,
            bonnie::metrics(&bonnie::parse_csv(&seed).unwrap()),
        ),
        result(
            c.clone(),
            1,
            Outcome::Passed,
            bonnie::metrics(&bonnie::parse_csv(&too_fast).unwrap()),
        ),
        result(
            c.clone(),
            2,
            Outcome::Passed,
            bonnie::metrics(&bonnie::parse_csv(&too_fast).unwrap()),
        ),
    ];
    let rows = cells_of(&report::cell_table(&rs, 0));
    let r = row(&rows, "qemu/local/raw");
    assert_eq!(r[4], format!("36450{}", summary::MIXED_MARK));
    let g = summary::group_by_cell(&rs);
    assert_eq!(g[0].agg("seq_read_ps"), summary::Agg::TooFast { n: 3 });
    let rows = cells_of(&report::cell_table(&rs[1..], 0));
    assert_eq!(row(&rows, "qemu/local/raw")[4], "+++++");
}

#[test]
fn markdown_and_csv() {
    let mut all = fio_results();
    all.extend(bonnie_results());
    let md = report::markdown(&all);
    assert!(md.contains("## fio") && md.contains("## bonnie++"));
    let read_line = md.lines().find(|l| l.starts_with("| Read IOPS")).unwrap();
    let one = raw_sum("fio-host-pg-randrw.json", "read", "iops");
    assert!(
        read_line.contains(&summary::with_unit(one, "IOPS")),
        "{read_line}"
    );

    let csv = report::csv(&all);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "run,cell_id,label,repeat,metric,value,unit,better,outcome"
    );
    let want_rows: usize = all.iter().map(|r| r.metrics.len().max(1)).sum();
    assert_eq!(lines.len() - 1, want_rows);
    let iops = lines
        .iter()
        .find(|l| l.contains("qemu-nfs-raw") && l.contains(",read_iops,"))
        .unwrap();
    assert!(
        iops.contains(&format!(",{one},IOPS,higher,passed")),
        "{iops}"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("qemu-iscsi-raw") && l.ends_with("failed: tgtd: login refused")));
    assert!(lines.iter().any(|l| l.contains(",seq_read_ps,+++++,")));
}

fn run_record() -> RunRecord {
    let mut cells = fio_results();
    let files: Vec<(String, String)> = ["bw", "iops", "lat"]
        .iter()
        .map(|k| {
            let n = format!("fio-host-pg-randrw_{k}.1.log");
            (n.clone(), fixture(&n))
        })
        .collect();
    cells[0].samples = fio::samples_from_logs(&files);
    let evil = WorkloadId::JobFile("/jobs/<script>alert(1)</script>.fio".into());
    let mut hostile = result(
        cell(Backend::Local, Format::Raw, evil),
        0,
        Outcome::Passed,
        fio_metrics("fio-host-pg-randrw.json"),
    );
    hostile.provenance.host = "<img src=x onerror=alert(2)>".into();
    cells.push(hostile);
    RunRecord {
        run_id: "20261202-150000-abcd".into(),
        started: "2026-12-02T15:00:00Z".into(),
        command: vec!["vmbench".into(), "run".into(), "--label=\"<b>\"".into()],
        cells,
    }
}

#[test]
fn html_has_one_svg_per_chart_and_escapes() {
    let run = run_record();
    let h = report::html(&run);
    assert!(h.starts_with("<!DOCTYPE html>"));
    let svgs = h.matches("<svg").count();
    assert_eq!(svgs, h.matches("<figure class=\"chart\"").count());
    // one chart per headline metric present, one per sample series; every metric in the
    // collapsed full list
    let keys: std::collections::BTreeSet<&str> = run
        .cells
        .iter()
        .flat_map(|r| r.metrics.iter().map(|m| m.key.as_str()))
        .collect();
    let headline: Vec<&str> = vmbench::workload::headline_metrics()
        .iter()
        .copied()
        .filter(|k| keys.contains(k))
        .collect();
    assert_eq!(headline.len(), 8, "fio's IOPS, bandwidth and latency");
    let series = run.cells[0].samples.len();
    assert_eq!(series, 6);
    assert_eq!(svgs, headline.len() + series);
    for k in &headline {
        assert!(h.contains(&format!("data-chart=\"{k}\"")), "{k}");
    }
    for k in &keys {
        assert!(
            h.contains(&format!("title=\"{k}\"")),
            "{k} in the full list"
        );
    }
    assert!(h.contains("data-chart=\"series-read_iops\""));
    assert!(h.contains("higher is better") && h.contains("lower is better"));
    assert!(
        h.contains("class=\"errorbar\""),
        "the two-repeat cell has error bars"
    );
    assert!(!h.contains("<script") && !h.contains("<img") && !h.contains("<b>"));
    assert!(h.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(h.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert!(
        !h.contains("http://")
            || h.matches("http://").count()
                == h.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    assert!(h.contains("failed: tgtd: login refused"));
}

#[test]
#[ignore = "prints the reports for a human to look at"]
fn show() {
    let mut all = fio_results();
    all.extend(bonnie_results());
    println!("{}", report::metric_table(&all));
    println!("{}", report::cell_table(&all, 0));
    println!("{}", report::markdown(&all));
    std::fs::write("/tmp/pr-report.html", report::html(&run_record())).unwrap();
}

/// A real default matrix (6 cells: local/nfs/iscsi x qcow2/raw), with the latency split each
/// cell records since it was added (computed by the same function the cell runner calls).
fn real_default_matrix() -> Vec<CellResult> {
    let doc: Json = serde_json::from_str(&fixture("export-v1-default-matrix.json")).unwrap();
    let run: RunRecord = serde_json::from_value(doc["run"].clone()).unwrap();
    run.cells
        .into_iter()
        .map(|mut c| {
            let split = vmbench::metrics::split::latency_split(&c.metrics);
            c.metrics.extend(split);
            c
        })
        .collect()
}

/// Issue 27: the default terminal table is the write-ups' headline rows (IOPS, bandwidth, mean
/// and p99 latency per direction, one "of which host/backend" row per direction, guest, host
/// and storage-server cost, outcome), no figure under two names; `MetricSet::All` (`report
/// --metrics all`, `matrix --all-metrics`) shows every recorded metric.
#[test]
fn default_table_has_the_headline_rows_once_and_all_shows_the_rest() {
    let cells = real_default_matrix();
    let headline = report::text(&cells, report::MetricSet::Headline);
    let all = report::text(&cells, report::MetricSet::All);
    let labels =
        |t: &str| -> Vec<String> { cells_of(t)[1..].iter().map(|r| r[0].clone()).collect() };
    assert_eq!(
        labels(&headline),
        [
            "Read IOPS",
            "Read Bandwidth",
            "Read Latency (avg)",
            "Read Latency (avg): of which host/backend",
            "Read Latency (p99)",
            "Write IOPS",
            "Write Bandwidth",
            "Write Latency (avg)",
            "Write Latency (avg): of which host/backend",
            "Write Latency (p99)",
            "CPU Usage (usr)",
            "CPU Usage (sys)",
            "Host QEMU CPU (total)",
            "Storage server CPU",
            "Storage server peak RSS",
            "Outcome",
        ],
        "{headline}"
    );
    assert!(headline.contains("report --metrics all"), "{headline}");

    // Every metric a cell recorded is a row of the full table; the headline leaves out exactly
    // the ones that repeat or derive from its rows, and the guest/virtio half of the split.
    let all_labels = labels(&all);
    let recorded: std::collections::BTreeSet<&str> = cells
        .iter()
        .flat_map(|c| c.metrics.iter().map(|m| m.label.as_str()))
        .collect();
    for label in &recorded {
        assert!(
            all_labels.iter().any(|l| l == label),
            "{label} missing from the full table"
        );
    }
    for dup in [
        "Host-observed read IOPS",
        "Host-observed write IOPS",
        "Host-observed read latency (avg)",
        "Domain CPU (libvirt)",
        "Read latency: backend + host (QEMU block layer)",
        "Read latency: guest + virtio (guest mean - host mean)",
    ] {
        assert!(recorded.contains(dup), "{dup} not recorded by the fixture");
        assert!(
            !labels(&headline).iter().any(|l| l == dup),
            "{dup} in the headline table"
        );
    }
    assert!(all_labels.len() > labels(&headline).len() + 10, "{all}");

    // The split row is the host/backend part, the same figure the full table calls
    // "backend + host"; in no column does a headline figure appear twice.
    let h = cells_of(&headline);
    let a = cells_of(&all);
    let split = row(&h, "Read Latency (avg): of which host/backend");
    assert_eq!(split, &{
        let mut r = row(&a, "Read latency: backend + host (QEMU block layer)").clone();
        r[0] = split[0].clone();
        r
    });
    for col in 1..h[0].len() {
        // "-" (no storage server on a local disk) is no figure.
        let figures: Vec<&String> = h[1..h.len() - 1]
            .iter()
            .map(|r| &r[col])
            .filter(|f| f.chars().any(|c| c.is_ascii_digit()))
            .collect();
        let unique: std::collections::BTreeSet<&&String> = figures.iter().collect();
        assert_eq!(
            unique.len(),
            figures.len(),
            "column {}: {figures:?}",
            h[0][col]
        );
    }
}
