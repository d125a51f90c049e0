//! Issue 8's hostile guest: the real agent in a hostile mode (`vmbench.hostile=KIND`, set through
//! the hidden `--inject-fault hostile-KIND@N`) answers over a real virtio-serial port with an
//! oversized frame, non-UTF-8 garbage, a result for a job it was not given, and a "successful"
//! fio run with impossible numbers. Each fails its cell with a specific reason; the process stays
//! healthy and the next cell runs; nothing is left.
use crate::common;
use common::running::Running;
use common::*;
use vmbench::results::Outcome;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn hostile_guest_output_fails_each_cell_and_nothing_else() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--repeat",
        "5",
        "--no-prefill",
        "--inject-fault",
        "hostile-oversized@0",
        "--inject-fault",
        "hostile-garbage@1",
        "--inject-fault",
        "hostile-wrong-job@2",
        "--inject-fault",
        "hostile-impossible@3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 5, "every cell ran and was recorded");
    let want = ["larger than", "not UTF-8", "job 1002", "fio output"];
    for (c, w) in rec.cells.iter().zip(want) {
        let Outcome::Failed(r) = &c.outcome else {
            panic!("{}: {:?}", c.cell_id, c.outcome)
        };
        assert!(r.contains(w), "repeat {}: want {w:?} in {r}", c.repeat);
    }
    // The fifth cell run had no fault: the harness is healthy after four hostile guests.
    assert_real_randrw(&rec.cells[4]);
    s.assert_no_leftovers();
}

/// Issue 27's bounded memory: a guest sending valid status frames as fast as its port takes them
/// (`hostile-flood`, each a fio status line the live display parses) is failed by rate within
/// seconds ("message flood"), not after millions of messages; vmbench's peak RSS stays under
/// 50 MB; the next cell runs.
#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_flooding_guest_is_failed_by_rate_within_seconds_with_memory_bounded() {
    let s = Scratch::new();
    let mut cmd = s.matrix_cmd(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--repeat",
        "2",
        "--no-prefill",
        "--inject-fault",
        "hostile-flood@0",
    ]);
    let mut m = Running::spawn(cmd.stdout(std::process::Stdio::null()));
    // What the guests cost, not the image check before them (a rebuilt image is read whole):
    // once the first cell starts, the peak is reset to the current RSS (clear_refs 5).
    m.wait_until(
        "the first cell",
        std::time::Duration::from_secs(600),
        |lines| lines.iter().any(|l| l.contains("[1/2]")),
    );
    std::fs::write(format!("/proc/{}/clear_refs", m.pid()), "5").unwrap();
    // VmHWM is the process's peak RSS since: sampled until it exits, the last value is its
    // peak over the cells (sampling only reads the figure; nothing waits on it).
    let mut peak_kib = 0u64;
    while m.is_running() {
        if let Some(k) = vm_hwm_kib(m.pid()) {
            peak_kib = peak_kib.max(k);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, _) = m.wait(std::time::Duration::from_secs(10));
    assert_eq!(code, Some(1), "the flooded cell fails the run");
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2, "every cell ran and was recorded");
    let flooded = &rec.cells[0];
    let Outcome::Failed(reason) = &flooded.outcome else {
        panic!("{}: {:?}", flooded.cell_id, flooded.outcome)
    };
    assert!(reason.contains("message flood"), "{reason}");
    assert!(
        reason.contains("status and heartbeat messages within"),
        "{reason}"
    );
    assert_eq!(
        flooded.failure_kind.map(|k| k.as_str()),
        Some("hostile_guest"),
        "{reason}"
    );
    let run_s = flooded.timings.run_ms as f64 / 1000.0;
    eprintln!(
        "flood: failed {run_s:.1} s into the measured job; vmbench peak RSS {:.1} MiB",
        peak_kib as f64 / 1024.0
    );
    assert!(
        run_s < 10.0,
        "the flood ran {run_s:.1} s before it was failed"
    );
    assert!(peak_kib > 0, "no VmHWM read from /proc/{}/status", m.pid());
    assert!(
        peak_kib < 50 * 1000,
        "vmbench's peak RSS {peak_kib} KiB is over 50 MB"
    );
    assert_real_randrw(&rec.cells[1]);
    s.assert_no_leftovers();
}

/// The `VmHWM` (peak resident set) of `pid` in KiB, while it runs.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
