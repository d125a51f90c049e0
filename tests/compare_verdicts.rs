//! A/B verdicts on synthetic sample sets whose answer is known by construction.

use quick_xml::events::Event;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use vmbench::cell::*;
use vmbench::compare::*;
use vmbench::results::*;

fn cell(backend: Backend) -> Cell {
    Cell {
        hypervisor: Hypervisor::Qemu,
        xen_mode: None,
        backend,
        format: Format::Qcow2,
        bus: Bus::VirtioBlk,
        cache: CacheMode::None,
        io: IoMode::Native,
        layout: Layout::Raw,
        workload: WorkloadId::Preset("pg-randrw".into()),
    }
}

fn prov() -> Provenance {
    Provenance {
        host: "bench1".into(),
        cpu_model: "AMD EPYC 7B13".into(),
        qemu: "7.2.9".into(),
        fio: "fio-3.33".into(),
        image: "sha256:ab".into(),
        guest_kernel: "6.1.0-18-amd64".into(),
        ..Provenance::default()
    }
}

fn repeat(backend: Backend, i: u32, metrics: Vec<Metric>) -> CellResult {
    let c = cell(backend);
    CellResult {
        failure_kind: None,
        cell_id: c.id(),
        cell: c,
        repeat: i,
        outcome: Outcome::Passed,
        metrics,
        params: BTreeMap::new(),
        provenance: prov(),
        timings: Timings::default(),
        samples: BTreeMap::new(),
    }
}

fn iops(v: f64) -> Metric {
    Metric::num("read_iops", "Read IOPS", "IOPS", Better::Higher, v)
}

fn p99(v: f64) -> Metric {
    Metric::num("read_lat_p99_us", "Read p99", "µs", Better::Lower, v)
}

fn run(id: &str, cells: Vec<CellResult>) -> RunRecord {
    RunRecord {
        run_id: id.into(),
        started: "2026-12-02T00:00:00Z".into(),
        command: vec![],
        cells,
    }
}

/// One local cell with one metric per repeat.
fn one_metric_run(id: &str, make: fn(f64) -> Metric, values: &[f64]) -> RunRecord {
    let cells = values
        .iter()
        .enumerate()
        .map(|(i, v)| repeat(Backend::Local, i as u32, vec![make(*v)]))
        .collect();
    run(id, cells)
}

/// `n` values around `mean` with relative noise `noise` (uniform +-), from a fixed seed.
fn noisy(seed: u64, n: usize, mean: f64, noise: f64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| mean * (1.0 + rng.gen_range(-noise..noise)))
        .collect()
}

fn only_row(c: &Comparison) -> &MetricComparison {
    assert_eq!(c.rows.len(), 1, "{c:#?}");
    &c.rows[0]
}

#[test]
fn clear_iops_regression() {
    let base = one_metric_run("b", iops, &noisy(1, 10, 2000.0, 0.01));
    let cand = one_metric_run("c", iops, &noisy(2, 10, 1600.0, 0.01));
    let c = compare(&base, &cand, &CompareOptions::default());
    let r = only_row(&c);
    assert_eq!(r.verdict, Verdict::Regression, "{r:#?}");
    assert!(r.p_value.unwrap() < 0.05, "{r:#?}");
    assert!((r.change_pct + 20.0).abs() < 2.0, "{}", r.change_pct);
    assert_eq!((r.n_baseline, r.n_candidate), (10, 10));
    assert_eq!(r.source, SampleSource::Repeats);
    assert!(c.has_regression());
    let t = c.table();
    assert!(
        t.contains("REGRESSION") && t.contains("read_iops") && t.contains("1 regression"),
        "{t}"
    );
}

#[test]
fn pure_noise_is_no_change() {
    let base = one_metric_run("b", iops, &noisy(3, 8, 2000.0, 0.03));
    let cand = one_metric_run("c", iops, &noisy(4, 8, 2000.0, 0.03));
    let c = compare(&base, &cand, &CompareOptions::default());
    assert_eq!(only_row(&c).verdict, Verdict::NoSignificantChange, "{c:#?}");
    assert!(!c.has_regression());
}

#[test]
fn change_beyond_threshold_but_not_significant_is_no_change() {
    // +6 % on the mean, but one baseline outlier makes it insignificant; CV stays under 2x5 %.
    let base = one_metric_run("b", iops, &[1000.0, 1010.0, 990.0, 1000.0, 1300.0]);
    let cand = one_metric_run("c", iops, &[1120.0, 1130.0, 1100.0, 1110.0, 1110.0]);
    let c = compare(&base, &cand, &CompareOptions::default());
    let r = only_row(&c);
    assert!(r.change_pct > 5.0, "{r:#?}");
    assert!(r.p_value.unwrap() >= 0.05, "{r:#?}");
}

#[test]
fn huge_variance_is_reported_as_such() {
    let base = one_metric_run("b", iops, &[100.0, 300.0, 50.0, 250.0, 20.0, 280.0]);
    let cand = one_metric_run("c", iops, &[130.0, 350.0, 60.0, 320.0, 40.0, 300.0]);
    let c = compare(&base, &cand, &CompareOptions::default());
    let r = only_row(&c);
    assert!(r.change_pct.abs() >= 5.0);
    assert_eq!(r.verdict, Verdict::VarianceTooLarge, "{r:#?}");
    assert!(!c.has_regression());
}

#[test]
fn direction_follows_better() {
    let lat_b = one_metric_run("b", p99, &noisy(5, 10, 800.0, 0.01));
    let lat_c = one_metric_run("c", p99, &noisy(6, 10, 1000.0, 0.01));
    let io_b = one_metric_run("b", iops, &noisy(5, 10, 800.0, 0.01));
    let io_c = one_metric_run("c", iops, &noisy(6, 10, 1000.0, 0.01));
    let o = CompareOptions::default();
    assert_eq!(
        only_row(&compare(&lat_b, &lat_c, &o)).verdict,
        Verdict::Regression
    );
    assert_eq!(
        only_row(&compare(&io_b, &io_c, &o)).verdict,
        Verdict::Improvement
    );
    assert_eq!(
        only_row(&compare(&lat_c, &lat_b, &o)).verdict,
        Verdict::Improvement
    );
    assert_eq!(
        only_row(&compare(&io_c, &io_b, &o)).verdict,
        Verdict::Regression
    );
}

#[test]
fn per_metric_threshold_overrides_default() {
    let base = one_metric_run("b", iops, &noisy(1, 10, 2000.0, 0.01));
    let cand = one_metric_run("c", iops, &noisy(2, 10, 1800.0, 0.01));
    let mut o = CompareOptions::default();
    assert_eq!(
        only_row(&compare(&base, &cand, &o)).verdict,
        Verdict::Regression
    );
    o.per_metric_threshold.insert("read_iops".into(), 15.0);
    assert_eq!(
        only_row(&compare(&base, &cand, &o)).verdict,
        Verdict::NoSignificantChange
    );
}

#[test]
fn provenance_mismatch_is_not_comparable_unless_forced() {
    let base = one_metric_run("b", iops, &noisy(1, 10, 2000.0, 0.01));
    let mut cand = one_metric_run("c", iops, &noisy(2, 10, 1600.0, 0.01));
    for c in &mut cand.cells {
        c.provenance.fio = "fio-3.35".into();
    }
    let mut o = CompareOptions::default();
    match &only_row(&compare(&base, &cand, &o)).verdict {
        Verdict::NotComparable(why) => {
            assert!(
                why.contains("fio version") && why.contains("fio-3.35"),
                "{why}"
            )
        }
        v => panic!("expected NotComparable, got {v:?}"),
    }
    // Fields that do not move figures (libvirt, vmbench) do not block.
    let mut cand2 = one_metric_run("c", iops, &noisy(2, 10, 1600.0, 0.01));
    cand2
        .cells
        .iter_mut()
        .for_each(|c| c.provenance.vmbench = "0.2.0".into());
    assert_eq!(
        only_row(&compare(&base, &cand2, &o)).verdict,
        Verdict::Regression
    );
    o.force = true;
    assert_eq!(
        only_row(&compare(&base, &cand, &o)).verdict,
        Verdict::Regression
    );
}

#[test]
fn same_seed_same_answer() {
    // 12 + 12 values: too many splits to enumerate, so the random permutations are used.
    let base = one_metric_run("b", iops, &noisy(7, 12, 2000.0, 0.05));
    let cand = one_metric_run("c", iops, &noisy(8, 12, 1900.0, 0.05));
    let o = CompareOptions {
        noise_threshold_pct: 1.0,
        ..CompareOptions::default()
    };
    let a = compare(&base, &cand, &o);
    assert_eq!(a, compare(&base, &cand, &o));
    let other = compare(
        &base,
        &cand,
        &CompareOptions {
            seed: 99,
            ..o.clone()
        },
    );
    let (pa, po) = (a.rows[0].p_value.unwrap(), other.rows[0].p_value.unwrap());
    assert!(
        pa != po,
        "another seed should move the estimate a little ({pa})"
    );
    assert!((pa - po).abs() < 0.02, "{pa} vs {po}");
}

#[test]
fn too_fast_and_na_are_excluded_and_said_so() {
    let tf = Metric {
        value: Value::TooFast,
        ..iops(0.0)
    };
    let mut base = one_metric_run("b", iops, &noisy(1, 6, 2000.0, 0.01));
    base.cells[0].metrics = vec![tf.clone()];
    let cand = one_metric_run("c", iops, &noisy(2, 6, 1600.0, 0.01));
    let c = compare(&base, &cand, &CompareOptions::default());
    let r = only_row(&c);
    assert_eq!(r.n_baseline, 5);
    assert!(
        r.note.as_deref().unwrap_or("").contains("too fast"),
        "{r:#?}"
    );
    assert!(c.table().contains("excluded"), "{}", c.table());
    // Nothing numeric at all on one side: not comparable, never a 0.
    let all_tf = run(
        "b",
        (0..6)
            .map(|i| repeat(Backend::Local, i, vec![tf.clone()]))
            .collect(),
    );
    let na = Metric {
        value: Value::NotAvailable("n/a on xen".into()),
        ..iops(0.0)
    };
    let all_na = run(
        "c",
        (0..6)
            .map(|i| repeat(Backend::Local, i, vec![na.clone()]))
            .collect(),
    );
    let r = compare(&all_tf, &all_na, &CompareOptions::default());
    assert!(
        matches!(r.rows[0].verdict, Verdict::NotComparable(_)),
        "{r:#?}"
    );
}

#[test]
fn few_repeats_use_per_second_samples() {
    let mk = |id: &str, mean: f64, seed: u64| {
        let mut r = one_metric_run(id, iops, &[mean]);
        r.cells[0]
            .samples
            .insert("read_iops".into(), noisy(seed, 60, mean, 0.05));
        r
    };
    let c = compare(
        &mk("b", 2000.0, 1),
        &mk("c", 1500.0, 2),
        &CompareOptions::default(),
    );
    let r = only_row(&c);
    assert_eq!(r.source, SampleSource::PerSecond);
    assert_eq!((r.n_baseline, r.n_candidate), (60, 60));
    assert_eq!(r.verdict, Verdict::Regression, "{r:#?}");
    // Without samples, 3 + 3 repeats cannot reach p < 0.05: said plainly, not "no change".
    let base = one_metric_run("b", iops, &[2000.0, 2010.0, 1990.0]);
    let cand = one_metric_run("c", iops, &[1500.0, 1510.0, 1490.0]);
    match &only_row(&compare(&base, &cand, &CompareOptions::default())).verdict {
        Verdict::NotComparable(why) => assert!(why.contains("more repeats"), "{why}"),
        v => panic!("{v:?}"),
    }
}

#[test]
fn missing_and_unpassed_cells_are_listed() {
    let mut base = one_metric_run("b", iops, &noisy(1, 5, 2000.0, 0.01));
    base.cells.push(repeat(Backend::Nfs, 0, vec![iops(1.0)]));
    let mut failed = repeat(Backend::Iscsi, 0, vec![]);
    failed.outcome = Outcome::Failed("tgtd <died> & \"left\"\u{1}".into());
    let mut cand = one_metric_run("c", iops, &noisy(2, 5, 2000.0, 0.01));
    cand.cells.push(failed.clone());
    base.cells.push(repeat(Backend::Iscsi, 0, vec![iops(5.0)]));
    let c = compare(&base, &cand, &CompareOptions::default());
    assert_eq!(
        c.missing_cells,
        vec![format!("{} (only in baseline)", cell(Backend::Nfs).id())]
    );
    assert_eq!(c.unpassed_cells.len(), 1);
    assert!(
        c.unpassed_cells[0].contains("candidate failed: tgtd"),
        "{:?}",
        c.unpassed_cells
    );
    assert!(
        !c.table().contains('\u{1}'),
        "control characters reach the terminal"
    );
    let xml = c.junit_xml();
    let parsed = parse_junit(&xml);
    assert_eq!(parsed.testcases, 3);
    assert_eq!(parsed.skipped, 2);
    assert!(
        parsed
            .texts
            .iter()
            .any(|t| t.contains("tgtd <died> & \"left\"")),
        "{xml}"
    );
}

struct Junit {
    testcases: usize,
    failures: usize,
    skipped: usize,
    failures_attr: usize,
    messages: Vec<String>,
    texts: Vec<String>,
}

/// Reads JUnit XML back with a real parser; any malformation fails the test.
fn parse_junit(xml: &str) -> Junit {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut j = Junit {
        testcases: 0,
        failures: 0,
        skipped: 0,
        failures_attr: 0,
        messages: vec![],
        texts: vec![],
    };
    let mut depth = 0i32;
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) | Event::Empty(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                for a in e.attributes() {
                    let a = a.expect("attribute");
                    let v = a.unescape_value().expect("escaped attribute").to_string();
                    match (name.as_str(), a.key.as_ref()) {
                        ("testsuite", b"failures") => j.failures_attr = v.parse().unwrap(),
                        (_, b"message") => j.messages.push(v.clone()),
                        _ => {}
                    }
                    j.texts.push(v);
                }
                match name.as_str() {
                    "testcase" => j.testcases += 1,
                    "failure" => j.failures += 1,
                    "skipped" => j.skipped += 1,
                    _ => {}
                }
                depth += 1;
            }
            Event::Text(t) => j
                .texts
                .push(t.unescape().expect("escaped text").to_string()),
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(depth > 0);
    j
}

#[test]
fn junit_counts_regressions_as_failures() {
    let mut base = one_metric_run("b&<1>", iops, &noisy(1, 10, 2000.0, 0.01));
    let mut cand = one_metric_run("c", iops, &noisy(2, 10, 1600.0, 0.01));
    // A second metric that does not change, and a second cell whose latency regresses.
    for (i, c) in base.cells.iter_mut().enumerate() {
        c.metrics.push(Metric::num(
            "write_iops",
            "Write IOPS",
            "IOPS",
            Better::Higher,
            900.0 + i as f64,
        ));
    }
    for (i, c) in cand.cells.iter_mut().enumerate() {
        c.metrics.push(Metric::num(
            "write_iops",
            "Write IOPS",
            "IOPS",
            Better::Higher,
            900.0 + i as f64,
        ));
    }
    for (i, v) in noisy(3, 10, 500.0, 0.01).into_iter().enumerate() {
        base.cells
            .push(repeat(Backend::Nfs, i as u32, vec![p99(v)]));
    }
    for (i, v) in noisy(4, 10, 700.0, 0.01).into_iter().enumerate() {
        cand.cells
            .push(repeat(Backend::Nfs, i as u32, vec![p99(v)]));
    }
    let c = compare(&base, &cand, &CompareOptions::default());
    assert_eq!(c.rows.len(), 3);
    let j = parse_junit(&c.junit_xml());
    assert_eq!(j.testcases, 3);
    assert_eq!(j.failures, 2);
    assert_eq!(j.failures_attr, 2);
    let regress: Vec<&String> = j
        .messages
        .iter()
        .filter(|m| m.contains("REGRESSION"))
        .collect();
    assert_eq!(regress.len(), 2, "{:?}", j.messages);
    assert!(
        regress
            .iter()
            .any(|m| m.contains("Read IOPS: 2,0") && m.contains("-> 1,59") && m.contains("-20.")),
        "{regress:?}"
    );
    assert!(
        j.texts.iter().any(|t| t.contains("b&<1>")),
        "run id should survive escaping"
    );
}
