//! Issue 7 on a host without Xen: a real `--hypervisor qemu,xen` run completes the QEMU cells and
//! reports the Xen cells as unsupported, with libvirt's own reason; impossible Xen combinations
//! are skipped with theirs.
use crate::common;
use common::*;
use vmbench::cell::Hypervisor;
use vmbench::results::Outcome;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn xen_cells_are_unsupported_here_and_qemu_cells_run() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--hypervisor",
        "qemu,xen",
        "--xen-mode",
        "pvh,hvm",
        "--backend",
        "local,nfs",
        "--format",
        "raw",
    ]);
    let (_, rec) = s.run_record();
    let xen: Vec<_> = rec
        .cells
        .iter()
        .filter(|c| c.cell.hypervisor == Hypervisor::Xen)
        .collect();
    let qemu: Vec<_> = rec
        .cells
        .iter()
        .filter(|c| c.cell.hypervisor == Hypervisor::Qemu)
        .collect();
    assert_eq!(qemu.len(), 2);
    qemu.iter().for_each(|c| assert_real_randrw(c));
    // pvh and hvm on local: unsupported here; on NFS over libnfs: skipped (libxl cannot).
    assert_eq!(xen.len(), 4, "{xen:#?}");
    for c in xen {
        match (&c.outcome, c.cell.backend) {
            (Outcome::Unsupported(r), vmbench::cell::Backend::Local) => {
                assert!(r.contains("unsupported on this host: xen"), "{r}")
            }
            (Outcome::Skipped(r), vmbench::cell::Backend::Nfs) => {
                assert!(r.starts_with("xen:"), "{r}")
            }
            other => panic!("{}: {other:?}", c.cell_id),
        }
    }
    assert_eq!(out.status.code(), Some(0));
    s.assert_no_leftovers();
}
