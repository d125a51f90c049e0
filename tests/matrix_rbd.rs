//! Issue 30 item 1: an RBD cell end to end on the run's embedded Ceph cluster (one monitor, one
//! BlueStore OSD, cephx, in the run's network namespace), with CI-sized jobs (tests/common): a
//! raw RBD image reached by QEMU's librbd as a cephx client whose key is only in a libvirt
//! secret; the cluster's memory and CPU in the results; afterwards no daemon, secret, namespace
//! or file of the run is left. A qcow2 cell on RBD is refused with the reason.
use crate::common;
use common::*;

fn ceph_secrets() -> Vec<String> {
    virsh(&["secret-list"])
        .lines()
        .filter(|l| l.contains(vmbench::storage::rbd::USAGE_PREFIX))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "host: root libvirtd qemu ceph"]
fn an_rbd_cell_runs_on_the_embedded_cluster_and_leaves_nothing() {
    let before = ceph_secrets();
    let s = Scratch::new();
    let out = s.matrix(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "rbd",
        "--format",
        "raw,qcow2",
        "--no-probe",
    ]);
    // The qcow2 cell is not measured (refused), the raw one passes: exit 0.
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2, "{:?}", rec.cells);
    let raw = rec
        .cells
        .iter()
        .find(|c| c.cell.format == vmbench::cell::Format::Raw)
        .unwrap();
    assert_real_randrw(raw);
    assert_eq!(raw.params["protocol"], "rbd", "{:?}", raw.params);
    assert!(
        raw.params["image"].starts_with("rbd/vmbench-"),
        "{:?}",
        raw.params
    );
    assert_eq!(raw.params["cephx_client"], "vmbench");
    assert!(
        raw.provenance.storage_server.starts_with("ceph-osd "),
        "{}",
        raw.provenance.storage_server
    );
    // The OSD's CPU and peak memory over the job, like ganesha's and tgtd's.
    assert!(num(raw, "storage_server_cpu_pct") > 0.0);
    assert!(num(raw, "storage_server_peak_rss_mib") > 10.0);
    let qcow2 = rec
        .cells
        .iter()
        .find(|c| c.cell.format == vmbench::cell::Format::Qcow2)
        .unwrap();
    let why = vmbench::matrix::runner::outcome_line(&qcow2.outcome);
    assert!(why.contains("rbd") && why.contains("raw"), "{why}");
    s.assert_no_leftovers();
    assert_eq!(ceph_secrets(), before, "cephx secrets left");
}
