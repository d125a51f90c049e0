//! Issue 13's `hostdir` backend on a real cell (libvirtd, QEMU under TCG, the vmbench guest): a
//! fresh host directory shared with virtio-fs, fio on a file in the guest's mount of it,
//! virtiofsd measured like an embedded server, and nothing left afterwards.
use crate::common;
use common::*;

#[test]
#[ignore = "host: root libvirtd qemu"]
fn fio_runs_on_a_host_directory_shared_with_virtio_fs() {
    if !std::path::Path::new(vmbench::storage::hostdir::VIRTIOFSD).exists() {
        return skip("no /usr/lib/qemu/virtiofsd: hostdir cells are unsupported here");
    }
    let s = Scratch::new();
    let local = s.work().with_file_name("shared");
    std::fs::create_dir_all(&local).unwrap();
    let out = s.matrix(&[
        "--backend",
        "hostdir",
        "--format",
        "raw",
        "--layout",
        "raw,ext4",
        "--workload",
        "rand-read-4k",
        "--local-dir",
        local.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    let ran: Vec<_> = rec.cells.iter().filter(|c| passed(c)).collect();
    assert_eq!(ran.len(), 1, "{:?}", rec.cells);
    let c = ran[0];
    assert_eq!(c.cell.layout.as_str(), "ext4");
    // The guest mounted the share (the agent names the virtio-fs tag), not a disk.
    assert_eq!(
        c.params.get("guest_mounted_device").map(String::as_str),
        Some(vmbench_proto::TEST_FS_TAG),
        "{:?}",
        c.params
    );
    assert!(c.params.contains_key("hostdir_fs"), "{:?}", c.params);
    assert!(num(c, "read_iops") > 0.0);
    // virtiofsd served the I/O: it used CPU and memory during the window.
    assert!(num(c, "storage_server_cpu_pct") > 0.0, "{:?}", c.metrics);
    assert!(num(c, "storage_server_peak_rss_mib") > 0.0);
    // The raw layout is not run on a shared directory, and says why.
    let raw = rec
        .cells
        .iter()
        .find(|c| c.cell.layout.as_str() == "raw")
        .expect("the raw cell is listed");
    assert!(
        format!("{:?}", raw.outcome).contains("no raw block device"),
        "{:?}",
        raw.outcome
    );
    // The directory and the daemon are gone.
    let left: Vec<_> = std::fs::read_dir(&local).unwrap().collect();
    assert!(left.is_empty(), "shared directory not removed: {left:?}");
    let here = local.to_string_lossy().into_owned();
    let daemons: Vec<u32> = pids_named("virtiofsd")
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.contains(&here))
        })
        .collect();
    assert!(daemons.is_empty(), "virtiofsd still running: {daemons:?}");
    s.assert_no_leftovers();
}
