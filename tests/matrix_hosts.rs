//! Issue 14: hosts as a matrix dimension. Two named hosts reach this machine's libvirtd by two
//! URIs (`qemu:///system`, `qemu+unix:///system`): their cells run at the same time, one per host,
//! and carry the host in their id and provenance. A third host that cannot be reached fails
//! only its own cells.
use crate::common;
use common::*;
use vmbench::results::Outcome;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn hosts_run_in_parallel_and_a_down_host_fails_only_its_cells() {
    let s = Scratch::new();
    let t = std::time::Instant::now();
    let out = s.matrix(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "local",
        "--format",
        "raw",
        "--host",
        "local=qemu:///system",
        "--host",
        "h2=qemu+unix:///system",
        // Nothing listens on port 1: the connection is refused at once.
        "--host",
        "down=qemu+tcp://127.0.0.1:1/system",
    ]);
    let wall_ms = t.elapsed().as_millis() as u64;
    // Two cells passed; the down host's cell is unsupported, not failed: the run succeeds.
    assert_eq!(out.status.code(), Some(0), "exit status");
    let (_, rec) = s.run_record();
    let by_id = |id: &str| {
        rec.cells
            .iter()
            .find(|c| c.cell_id == id)
            .unwrap_or_else(|| panic!("no cell {id} in {:?}", rec.cells))
    };
    let base = "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw";
    let local = by_id(base);
    let h2 = by_id(&format!("{base}-on-h2"));
    let down = by_id(&format!("{base}-on-down"));
    for c in [local, h2] {
        assert_real_randrw(c);
    }
    assert!(local.cell.host.is_default());
    assert!(
        h2.provenance.host.starts_with("h2 ("),
        "{:?}",
        h2.provenance
    );
    match &down.outcome {
        Outcome::Unsupported(why) => assert!(why.contains("host down"), "{why}"),
        o => panic!("down host's cell: {o:?}"),
    }
    // One cell at a time per host, hosts at the same time: the run took less than the two
    // cells back to back.
    let serial_ms = local.timings.total_ms + h2.timings.total_ms;
    assert!(
        wall_ms < serial_ms,
        "wall {wall_ms} ms >= the two cells in series {serial_ms} ms"
    );
    s.assert_no_leftovers();
}
