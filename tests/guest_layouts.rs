//! Issue 13's guest layouts on real cells (libvirtd, QEMU under TCG, the vmbench guest): ext4 on
//! one primary partition and on an LVM logical volume, both made in the guest on the virtual
//! disk, and issue 26's split disk (partition 1 and an LV on partition 2, the seed
//! `lvm-vs-partition`'s layouts), each side measured by its own cell. The agent reports the
//! device it mounted, recorded in the cell's params as `guest_mounted_device`: that is what
//! shows the layout was really used.
use crate::common;
use common::*;
use vmbench::results::CellResult;

/// Runs `workload` on each of `layouts` (one matrix, raw image on a local file) and returns the
/// cells in the order given.
fn cells_on(s: &Scratch, layouts: &[&str], workload: &str, extra: &[&str]) -> Vec<CellResult> {
    let layout_arg = layouts.join(",");
    let mut args = vec![
        "--backend",
        "local",
        "--format",
        "raw",
        "--workload",
        workload,
        "--layout",
        &layout_arg,
    ];
    args.extend_from_slice(extra);
    let out = s.matrix(&args);
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    layouts
        .iter()
        .map(|l| {
            rec.cells
                .iter()
                .find(|c| c.cell.layout.as_str() == *l)
                .unwrap_or_else(|| panic!("no {l} cell in {:?}", rec.cells))
                .clone()
        })
        .collect()
}

fn mounted(c: &CellResult) -> Option<&str> {
    c.params.get("guest_mounted_device").map(String::as_str)
}

/// fio on a file in ext4 on /dev/vda1, in ext4 and in XFS on /dev/mapper/vmbench-test (XFS
/// needs 300 MiB); then on the two sides of one split disk: ext4 on partition 1 (vda1) and on the
/// LV on partition 2, each split cell's disk twice the others' (two sides of `--disk-mib`).
#[test]
#[ignore = "host: root libvirtd qemu"]
fn fio_on_a_partition_and_on_an_lvm_volume_made_in_the_guest() {
    let s = Scratch::new();
    let layouts = [
        "part-ext4",
        "lvm-ext4",
        "lvm-xfs",
        "split-part-ext4",
        "split-lvm-ext4",
    ];
    let cells = cells_on(&s, &layouts, "rand-read-4k", &["--disk-mib", "512"]);
    let (part, lv) = ("/dev/vda1", "/dev/mapper/vmbench-test");
    for (c, dev) in cells.iter().zip([part, lv, lv, part, lv]) {
        assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
        assert_eq!(mounted(c), Some(dev), "{}: {:?}", c.cell_id, c.params);
        assert!(num(c, "read_iops") > 0.0, "{}", c.cell_id);
    }
    let disk = |c: &CellResult| c.params.get("disk_bytes").cloned();
    let (whole, split) = (512u64 << 20, 1024u64 << 20);
    for (c, bytes) in cells.iter().zip([whole, whole, whole, split, split]) {
        assert_eq!(disk(c), Some(bytes.to_string()), "{}", c.cell_id);
    }
    s.assert_no_leftovers();
}

// bonnie++ on the LVM volume (the seed's experiment) is tests/matrix_workloads.rs's bonnie cell:
// one bonnie++ cell in the suite, since the layout step is the same whatever runs after it.
