//! Issue 15's progress watchdog on real guests: a guest that stays alive (heartbeats) but does
//! no I/O fails in about `--stall-timeout` with "no I/O progress", far below the job's total
//! limit (runtime x 4 + ramp + 600 s); real fio and bonnie++ cells with the same short stall
//! timeout pass, so the watchdog does not fire on work that moves.
mod common;
use common::*;
use vmbench::results::Outcome;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_stuck_but_alive_guest_fails_at_the_stall_timeout_and_real_cells_pass() {
    let s = Scratch::new();
    let out = s.matrix_with(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--workload",
        "pg-randrw,bonnie",
        "--runtime",
        "5",
        "--ramp",
        "1",
        "--size",
        "32M",
        "--disk-mib",
        "256",
        // bonnie++ writes twice the guest RAM: the smallest guest keeps it short.
        "--memory",
        "128",
        "--bonnie-files",
        "1",
        "--stall-timeout",
        "15",
        "--inject-fault",
        "hostile-stuck@0",
    ]);
    assert_eq!(out.status.code(), Some(1), "the stuck cell fails the run");
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2, "every cell ran and was recorded");
    let stuck = &rec.cells[0];
    let Outcome::Failed(reason) = &stuck.outcome else {
        panic!("{}: {:?}", stuck.cell_id, stuck.outcome)
    };
    assert!(
        reason.contains("no I/O progress for 1") && reason.contains("the guest is alive"),
        "{reason}"
    );
    assert_eq!(
        stuck.failure_kind.map(|k| k.as_str()),
        Some("stalled"),
        "{reason}"
    );
    // The job's total limit here is 5 x 4 + 1 + 600 = 621 s; the watchdog fires at 15 s. The
    // cell's whole run (boot, prefill, the stall, teardown) stays far from the total limit.
    let run_s = stuck.timings.run_ms as f64 / 1000.0;
    assert!(run_s < 120.0, "stuck cell ran {run_s:.0} s");
    // The other cell is real work under the same 15 s watchdog and passes.
    let other = &rec.cells[1];
    assert!(passed(other), "{}: {:?}", other.cell_id, other.outcome);
    s.assert_no_leftovers();
}
