//! The results store against a real SQLite file: exact round trips, run specs, export/import.

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use vmbench::cell::*;
use vmbench::results::store::{Store, StoreError};
use vmbench::results::*;

fn cell(backend: Backend) -> Cell {
    Cell {
        backend,
        ..Cell::default()
    }
}

fn provenance(host: &str) -> Provenance {
    Provenance {
        host: host.into(),
        host_kernel: "6.1.0-18-amd64".into(),
        cpu_model: "AMD EPYC 7B13".into(),
        qemu: "7.2.9".into(),
        libvirt: "9.0.0".into(),
        guest_kernel: "6.1.0-18-amd64".into(),
        tools: [
            ("fio".into(), "fio-3.33".into()),
            ("bonnie".into(), "2.00a".into()),
        ]
        .into(),
        image: "sha256:ab12".into(),
        vmbench: "0.1.0 (a32c3da)".into(),
        io_limit: "iops=150,bw=8MiB/s".into(),
        storage_server: "nfs-ganesha 4.3".into(),
        jobs: "0123456789abcdef".into(),
    }
}

/// Awkward floats: values SQLite's REAL would mangle or that print badly.
const AWKWARD: &[f64] = &[
    0.1 + 0.2,
    -0.0,
    5e-324,
    f64::MIN_POSITIVE,
    f64::MAX,
    -f64::MAX,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1.0 / 3.0,
    123_456_789.123_456_79,
    7757.0,
];

fn result(backend: Backend, repeat: u32, outcome: Outcome, host: &str) -> CellResult {
    let c = cell(backend);
    let mut metrics: Vec<Metric> = AWKWARD
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Metric::num(
                &format!("m{i}"),
                &format!("Metric {i} <&>"),
                "µs",
                Better::Lower,
                *v,
            )
        })
        .collect();
    metrics.push(Metric::num(
        "read_iops",
        "Read IOPS",
        "IOPS",
        Better::Higher,
        2000.5,
    ));
    metrics.push(Metric {
        key: "seq_char_write".into(),
        label: "Seq char write".into(),
        unit: "K/sec".into(),
        better: Better::Higher,
        value: Value::TooFast,
    });
    metrics.push(Metric {
        key: "host_qemu_cpu_pct".into(),
        label: "Host QEMU CPU".into(),
        unit: "%".into(),
        better: Better::Lower,
        value: Value::NotAvailable("n/a on xen".into()),
    });
    let mut params = BTreeMap::new();
    params.insert("server".to_string(), "127.0.0.1".to_string());
    params.insert("export".to_string(), "/srv/ünïcode 'quoted'".to_string());
    let mut samples = BTreeMap::new();
    samples.insert("read_iops".to_string(), AWKWARD.to_vec());
    samples.insert("write_iops".to_string(), vec![]);
    // Each kind of not-run cell keeps its typed reason through the store.
    let (failure_kind, skip_kind) = match &outcome {
        Outcome::Failed(_) => (Some(FailureKind::Provision), None),
        Outcome::Unsupported(_) => (None, Some(SkipKind::Backend)),
        Outcome::Skipped(_) => (None, Some(SkipKind::Rule)),
        Outcome::Passed => (None, None),
    };
    CellResult {
        failure_kind,
        skip_kind,
        cell_id: c.id(),
        cell: c,
        repeat,
        outcome,
        metrics,
        params,
        provenance: provenance(host),
        timings: Timings {
            provision_ms: 1,
            boot_to_hello_ms: 8000,
            domain_start_ms: 612,
            prefill_ms: 1234,
            run_ms: u64::MAX,
            teardown_ms: 0,
            total_ms: i64::MAX as u64 + 7,
        },
        samples,
    }
}

fn every_outcome_run(run_id: &str, host: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        started: "2026-12-02T15:00:00Z".into(),
        command: vec![
            "vmbench".into(),
            "run".into(),
            "--backend".into(),
            "local,nfs".into(),
        ],
        cells: vec![
            result(Backend::Local, 0, Outcome::Passed, host),
            result(Backend::Local, 1, Outcome::Passed, host),
            result(
                Backend::Nfs,
                0,
                Outcome::Failed("ganesha: export not mounted\n\"x\"".into()),
                host,
            ),
            result(
                Backend::Lvm,
                0,
                Outcome::Unsupported("unsupported on this host: no dm".into()),
                host,
            ),
            result(
                Backend::Block,
                0,
                Outcome::Skipped("qcow2 on a block device".into()),
                host,
            ),
        ],
    }
}

fn store_run(store: &Store, run: &RunRecord, host: &str, status: Option<&str>) {
    store
        .begin_run(&run.run_id, &run.started, &run.command, host)
        .unwrap();
    for c in &run.cells {
        store.record_cell(&run.run_id, c).unwrap();
    }
    if let Some(s) = status {
        store.finish_run(&run.run_id, s).unwrap();
    }
}

fn only_passing(mut run: RunRecord) -> RunRecord {
    run.cells
        .retain(|c| !matches!(c.outcome, Outcome::Failed(_)));
    run
}

#[test]
fn run_record_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // A nested path: open must create the parents.
    let store = Store::open(&dir.path().join("a/b/vmbench.db")).unwrap();
    let mut run = every_outcome_run("20261202-150000-abcd", "h1");
    // NaN is not equal to itself, so it is checked by bits, then set aside.
    run.cells[0]
        .metrics
        .push(Metric::num("nan", "NaN", "", Better::Higher, f64::NAN));
    store_run(&store, &run, "h1", Some("ok"));
    let mut back = store.load_run(&run.run_id).unwrap();
    let nan = back.cells[0].metrics.pop().unwrap();
    assert_eq!(
        nan.value.number().map(f64::to_bits),
        Some(f64::NAN.to_bits())
    );
    run.cells[0].metrics.pop();
    assert_eq!(back, run);
    // -0.0 == 0.0 under PartialEq, so check the sign bit explicitly.
    let neg_zero = back.cells[0].metric("m1").unwrap().value.number().unwrap();
    assert!(neg_zero.is_sign_negative(), "{neg_zero}");
    for (a, b) in back.cells[0].samples["read_iops"].iter().zip(AWKWARD) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
    // Reopening (schema already present) gives the same record.
    drop(store);
    let store = Store::open(&dir.path().join("a/b/vmbench.db")).unwrap();
    let mut again = store.load_run(&run.run_id).unwrap();
    again.cells[0].metrics.pop();
    assert_eq!(again, back);
}

#[test]
fn runs_lists_counts_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("v.db")).unwrap();
    store_run(&store, &every_outcome_run("r1", "h1"), "h1", None);
    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!((r.passed, r.failed, r.unsupported, r.skipped), (2, 1, 1, 1));
    assert_eq!(r.status, "running");
    assert_eq!(r.host, "h1");
    store.finish_run("r1", "failed").unwrap();
    assert_eq!(store.runs().unwrap()[0].status, "failed");
}

#[test]
fn resolve_last_and_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("v.db")).unwrap();
    let mut good_h1 = only_passing(every_outcome_run("good-h1", "h1"));
    good_h1.started = "2026-12-01T01:00:00Z".into();
    let mut bad_h1 = every_outcome_run("bad-h1", "h1");
    bad_h1.started = "2026-12-01T02:00:00Z".into();
    let mut good_h2 = only_passing(every_outcome_run("good-h2", "h2"));
    good_h2.started = "2026-12-01T03:00:00Z".into();
    let mut running = only_passing(every_outcome_run("running-h1", "h1"));
    running.started = "2026-12-01T04:00:00Z".into();
    store_run(&store, &good_h1, "h1", Some("ok"));
    store_run(&store, &bad_h1, "h1", Some("failed"));
    store_run(&store, &good_h2, "h2", Some("ok"));
    store_run(&store, &running, "h1", None);

    assert_eq!(store.resolve("last", None).unwrap(), "running-h1");
    assert_eq!(store.resolve("last", Some("h2")).unwrap(), "good-h2");
    assert_eq!(store.resolve("last-good", None).unwrap(), "good-h2");
    assert_eq!(store.resolve("last-good", Some("h1")).unwrap(), "good-h1");
    assert_eq!(store.resolve("bad-h1", None).unwrap(), "bad-h1");

    let e = store.resolve("last-good", Some("h3")).unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("h3") && msg.contains("running-h1") && msg.contains("good-h1"),
        "{msg}"
    );
    let msg = store.resolve("nope", None).unwrap_err().to_string();
    assert!(msg.contains("'nope'") && msg.contains("bad-h1"), "{msg}");
}

#[test]
fn export_import_between_databases() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.db")).unwrap();
    let b = Store::open(&dir.path().join("b.db")).unwrap();
    let mut run = every_outcome_run("r-export", "h1");
    // JSON has no infinities; everything finite must survive bit for bit, including values
    // whose shortest decimal form is hard to parse back exactly.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let finite: Vec<f64> = AWKWARD
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .chain(
            (0..5000)
                .map(|_| f64::from_bits(rng.gen::<u64>()))
                .filter(|v| v.is_finite()),
        )
        .collect();
    for c in &mut run.cells {
        c.metrics
            .retain(|m| m.value.number().is_none_or(f64::is_finite));
        c.samples.insert("read_iops".into(), finite.clone());
    }
    store_run(&a, &run, "h1", Some("ok"));
    let json = a.export_json("r-export").unwrap();
    assert_eq!(b.import_json(&json).unwrap(), "r-export");
    let back = b.load_run("r-export").unwrap();
    for (x, y) in back.cells[0].samples["read_iops"].iter().zip(&finite) {
        assert_eq!(x.to_bits(), y.to_bits(), "{x:e} came back from {y:e}");
    }
    assert_eq!(back, run);
    assert_eq!(b.runs().unwrap(), a.runs().unwrap());

    let e = b.import_json(&json).unwrap_err();
    assert!(
        matches!(e, StoreError::DuplicateRun(ref id) if id == "r-export"),
        "{e:?}"
    );
    assert!(e.to_string().contains("already"), "{e}");
    // The refused import left the stored run untouched.
    assert_eq!(b.load_run("r-export").unwrap(), run);

    // A bare RunRecord (e.g. a run directory's results.json) imports too.
    let mut bare = run.clone();
    bare.run_id = "r-bare".into();
    let id = b
        .import_json(&serde_json::to_string(&bare).unwrap())
        .unwrap();
    assert_eq!(b.load_run(&id).unwrap(), bare);
    assert!(b.import_json("{\"not\": \"a run\"}").is_err());
    assert!(b.import_json("garbage").is_err());

    // A run holding an infinity is refused by name rather than exported as null.
    store_run(&a, &every_outcome_run("r-inf", "h1"), "h1", Some("ok"));
    let e = a.export_json("r-inf").unwrap_err().to_string();
    assert!(e.contains("m6") && e.contains("inf"), "{e}");
}

#[test]
fn refuses_newer_schema_and_unknown_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let store = Store::open(&path).unwrap();
    let e = store
        .record_cell(
            "never-begun",
            &result(Backend::Local, 0, Outcome::Passed, "h"),
        )
        .unwrap_err();
    assert!(matches!(e, StoreError::UnknownRun(_)), "{e:?}");
    assert!(matches!(
        store.finish_run("never-begun", "ok"),
        Err(StoreError::UnknownRun(_))
    ));
    store.begin_run("r", "t", &[], "h").unwrap();
    assert!(matches!(
        store.begin_run("r", "t", &[], "h"),
        Err(StoreError::DuplicateRun(_))
    ));
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE schema_version SET version = 99", [])
        .unwrap();
    drop(conn);
    match Store::open(&path) {
        Err(StoreError::SchemaTooNew {
            found: 99,
            supported,
        }) => assert!(supported < 99),
        Err(e) => panic!("wrong error {e:?}"),
        Ok(_) => panic!("opened a newer schema"),
    }
}

#[test]
fn default_path_is_in_the_data_dir() {
    let p = Store::default_path();
    assert!(p.ends_with("vmbench/vmbench.db"), "{}", p.display());
}

#[test]
fn resume_reopens_a_known_run_and_inserts_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("v.db")).unwrap();
    let run = every_outcome_run("20261202-160000-abcd", "h1");
    store_run(&store, &run, "h1", Some("interrupted"));
    let inserted = store
        .resume_run(&run.run_id, &run.started, &run.command, "h1")
        .unwrap();
    assert!(!inserted, "a known run is reopened, not duplicated");
    let status = |s: &Store| {
        s.runs()
            .unwrap()
            .into_iter()
            .find(|r| r.run_id == run.run_id)
            .unwrap()
            .status
    };
    assert_eq!(status(&store), "running");
    assert_eq!(
        store.load_run(&run.run_id).unwrap().cells.len(),
        run.cells.len()
    );
    // Another --db the second time: the run is created there.
    let other = Store::open(&dir.path().join("w.db")).unwrap();
    assert!(other
        .resume_run(&run.run_id, &run.started, &run.command, "h1")
        .unwrap());
    assert_eq!(status(&other), "running");
}
