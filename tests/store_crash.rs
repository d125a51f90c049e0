//! A harness SIGKILLed in the middle of writing cells leaves a database that opens and holds
//! every finished cell complete. The writer is this test binary itself, re-run with
//! `VMBENCH_STORE_WRITER=<db path>` selecting the writer test.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use vmbench::cell::*;
use vmbench::results::store::Store;
use vmbench::results::*;

const ENV: &str = "VMBENCH_STORE_WRITER";
const RUN: &str = "20261202-000000-kill";
/// Cells the parent waits to see committed before it kills the writer (first round).
const BEFORE_KILL: usize = 25;
const METRICS_PER_CELL: usize = 40;

/// Kills the writer if the test fails before it does.
struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn big_cell(i: usize) -> CellResult {
    let c = Cell {
        format: Format::Raw,
        ..Cell::default()
    };
    let metrics = (0..METRICS_PER_CELL)
        .map(|k| {
            Metric::num(
                &format!("k{k}"),
                "K",
                "IOPS",
                Better::Higher,
                (i * 1000 + k) as f64,
            )
        })
        .collect();
    let samples = BTreeMap::from([("read_iops".to_string(), vec![i as f64; 2000])]);
    CellResult {
        metrics,
        params: BTreeMap::from([("n".to_string(), i.to_string())]),
        samples,
        ..CellResult::new(c, i as u32, Outcome::Passed)
    }
}

/// Records `big_cell(0..)` into the store at `path`, one transaction each, printing
/// "committed N" after each: `limit` cells, or until killed.
fn write_cells(path: &std::path::Path, limit: Option<usize>) {
    let store = Store::open(path).unwrap();
    store
        .begin_run(RUN, "2026-12-02T00:00:00Z", &["vmbench".into()], "h")
        .unwrap();
    for i in (0..).take_while(|i| limit.is_none_or(|n| *i < n)) {
        store.record_cell(RUN, &big_cell(i)).unwrap();
        println!("committed {i}");
    }
}

/// The writer the crash test kills: as its child (`VMBENCH_STORE_WRITER=<db path>`) it writes
/// until killed. On its own it checks that same writer: a few cells, each loaded back whole, so
/// a writer that commits nothing (which would make the crash test vacuous) fails here.
#[test]
fn writer_child_mode() {
    if let Ok(path) = std::env::var(ENV) {
        write_cells(path.as_ref(), None);
        unreachable!("the writer writes until killed");
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("writer.db");
    write_cells(&db, Some(3));
    let run = Store::open(&db).unwrap().load_run(RUN).unwrap();
    assert_eq!(run.cells.len(), 3, "cells committed by the writer");
    for (i, c) in run.cells.iter().enumerate() {
        assert_eq!(c, &big_cell(i), "cell {i} as written");
    }
}

#[test]
fn killed_writer_leaves_complete_cells() {
    // Kill at a few moments not tied to a commit boundary: right after a commit was reported,
    // and a little later, when the writer is inside its next transaction.
    for (n, delay_us) in [(BEFORE_KILL, 0), (5, 300), (40, 1_500)] {
        kill_after(n, delay_us);
    }
}

fn kill_after(before_kill: usize, delay_us: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store_crash::writer_child_mode",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, &db)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let out = child.0.stdout.take().unwrap();
    let mut committed = 0;
    // Kept open until after the kill: a closed pipe would end the writer by itself.
    let mut lines = BufReader::new(out).lines();
    for line in &mut lines {
        if line.unwrap().starts_with("committed ") {
            committed += 1;
            if committed == before_kill {
                break;
            }
        }
    }
    assert_eq!(committed, before_kill, "writer stopped early");
    std::thread::sleep(std::time::Duration::from_micros(delay_us));
    // SIGKILL while it is busy writing the next cells.
    child.0.kill().unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "writer ended by itself: {status}"
    );
    drop(lines);

    let store = Store::open(&db).unwrap();
    let run = store.load_run(RUN).unwrap();
    eprintln!(
        "{} cells survived the SIGKILL (parent saw {before_kill})",
        run.cells.len()
    );
    assert!(
        run.cells.len() >= before_kill,
        "only {} cells survived",
        run.cells.len()
    );
    for (i, c) in run.cells.iter().enumerate() {
        assert_eq!(c, &big_cell(i), "cell {i} incomplete");
        assert_eq!(c.metrics.len(), METRICS_PER_CELL);
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    // No metric row belongs to a missing cell, and every cell has all of its rows.
    let short: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM cells c WHERE c.metric_count !=
               (SELECT COUNT(*) FROM metrics m WHERE m.cell_row = c.id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(short, 0);
}
