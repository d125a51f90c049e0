//! Issue 13's guest layouts on real cells (libvirtd, QEMU under TCG, the vmbench guest):
//! bonnie++ on ext4 over one primary partition and over an LVM logical volume made in the guest,
//! the seed `lvm-vs-partition`. The mounted device is recorded in the cell's params.
mod common;
use common::*;

/// bonnie++ on `layout` in the smallest guest bonnie++ fits (-s is twice the RAM).
fn bonnie_on(layout: &str) -> (Scratch, vmbench::results::CellResult) {
    let s = Scratch::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("matrix")
        .args(["--runs-dir".as_ref(), s.runs().as_os_str()])
        .args(["--work-dir".as_ref(), s.work().as_os_str()])
        .args(["--db".as_ref(), s.db().as_os_str()])
        .args([
            "--memory",
            "192",
            "--disk-mib",
            "640",
            "--bonnie-files",
            "1",
        ])
        .args([
            "--backend",
            "local",
            "--format",
            "raw",
            "--workload",
            "bonnie",
        ])
        .args(["--layout", layout])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    eprintln!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    let c = rec.cells[0].clone();
    assert!(passed(&c), "{}: {:?}", c.cell_id, c.outcome);
    assert_eq!(c.cell.layout.as_str(), layout);
    assert!(num(&c, "seq_out_block_kps") > 0.0);
    (s, c)
}

#[test]
#[ignore = "unverified: the first real guest run of this layout did not finish within 8 minutes (2026-12-03); by hand as root"]
fn bonnie_on_a_primary_partition() {
    let (s, c) = bonnie_on("part-ext4");
    assert_eq!(
        c.params.get("guest_mounted_device").map(String::as_str),
        Some("/dev/vda1"),
        "{:?}",
        c.params
    );
    s.assert_no_leftovers();
}

#[test]
#[ignore = "unverified: the first real guest run of this layout did not finish within 8 minutes (2026-12-03); by hand as root"]
fn bonnie_on_an_lvm_logical_volume_in_the_guest() {
    let (s, c) = bonnie_on("lvm-ext4");
    assert_eq!(
        c.params.get("guest_mounted_device").map(String::as_str),
        Some("/dev/mapper/vmbench-test"),
        "{:?}",
        c.params
    );
    s.assert_no_leftovers();
}
