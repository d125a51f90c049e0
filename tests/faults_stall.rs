//! Issue 15's progress watchdog on real guests: a guest that stays alive (heartbeats) but does
//! no I/O fails in about `--stall-timeout` with "no I/O progress", far below the job's total
//! limit (runtime x 4 + ramp + 600 s); a real fio cell whose measured job runs longer than the
//! same short stall timeout passes, so the watchdog does not fire on work that moves.
use crate::common;
use common::*;
use vmbench::results::Outcome;

const STALL_SECS: u64 = 15;
/// Longer than the stall timeout: the watchdog sees the whole limit pass during real work.
const RUNTIME_SECS: u64 = 20;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_stuck_but_alive_guest_fails_at_the_stall_timeout_and_a_real_fio_cell_passes() {
    let s = Scratch::new();
    let (stall, runtime) = (STALL_SECS.to_string(), RUNTIME_SECS.to_string());
    let out = s.matrix_with(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--workload",
        "pg-randrw",
        "--repeat",
        "2",
        "--runtime",
        &runtime,
        "--ramp",
        "1",
        "--size",
        "32M",
        "--disk-mib",
        "128",
        "--memory",
        "384",
        "--stall-timeout",
        &stall,
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
    // The idle time the watchdog saw: at least the limit, and over it by at most its polling.
    let idle: u64 = reason
        .split_once("no I/O progress for ")
        .and_then(|(_, r)| r.split_once(" s ")?.0.parse().ok())
        .unwrap_or_else(|| panic!("no idle time in {reason}"));
    assert!(
        (STALL_SECS..=STALL_SECS + 5).contains(&idle) && reason.contains("the guest is alive"),
        "{reason}"
    );
    assert_eq!(
        stuck.failure_kind.map(|k| k.as_str()),
        Some("stalled"),
        "{reason}"
    );
    // The job's total limit here is 20 x 4 + 1 + 600 = 681 s; the watchdog fires at 15 s. The
    // cell's whole run (boot, prefill, the stall, teardown) stays far from the total limit.
    let total_s = stuck.timings.total_ms as f64 / 1000.0;
    assert!(
        (STALL_SECS as f64..120.0).contains(&total_s),
        "stuck cell took {total_s:.0} s"
    );
    // The second repeat is real fio under the same watchdog, for longer than its limit.
    let fio = &rec.cells[1];
    assert_eq!(fio.repeat, 1);
    assert_real_randrw(fio);
    let fio_s = fio.timings.run_ms as f64 / 1000.0;
    assert!(
        fio_s > STALL_SECS as f64,
        "the fio job ran {fio_s:.1} s, not past the {STALL_SECS} s stall timeout"
    );
    s.assert_no_leftovers();
}
