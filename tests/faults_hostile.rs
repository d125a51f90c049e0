//! Issue 8's hostile guest: the real agent in a hostile mode (`vmbench.hostile=KIND`, set through
//! the hidden `--inject-fault hostile-KIND@N`) answers over a real virtio-serial port with an
//! oversized frame, non-UTF-8 garbage, a result for a job it was not given, and a "successful"
//! fio run with impossible numbers. Each fails its cell with a specific reason; the process stays
//! healthy and the next cell runs; nothing is left.
use crate::common;
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
