//! Issue 16's sweep dimensions on a real guest: fio's block size over a preset's, and QEMU's
//! I/O thread and virtio queues on the disk under test.
use crate::common;
use common::*;

/// The cell directory whose result.json is `cell_id`'s.
fn cell_dir(run: &std::path::Path, cell_id: &str) -> std::path::PathBuf {
    std::fs::read_dir(run.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|d| {
            std::fs::read_to_string(d.join("result.json"))
                .is_ok_and(|t| t.contains(&format!("\"cell_id\": \"{cell_id}\"")))
        })
        .unwrap_or_else(|| panic!("no cell dir for {cell_id}"))
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn bs_sweep_makes_two_cells_and_fio_runs_the_swept_block_size() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--workload",
        "rand-read-4k",
        "--bs",
        "4k,64k",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (dir, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2);
    let ids: Vec<&str> = rec.cells.iter().map(|c| c.cell_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "qemu-local-raw-virtio-blk-none-native-raw-rand-read-4k-bs4k",
            "qemu-local-raw-virtio-blk-none-native-raw-rand-read-4k-bs64k"
        ]
    );
    let mut ratio = vec![];
    for (c, bs) in rec.cells.iter().zip([4096.0, 65536.0]) {
        assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
        assert_eq!(c.params["fio_bs"], if bs < 8192.0 { "4k" } else { "64k" });
        let job = std::fs::read_to_string(cell_dir(&dir, &c.cell_id).join("job.fio")).unwrap();
        assert_eq!(job.matches("\nbs=").count(), 1, "{job}");
        assert!(
            job.contains(&format!("\nbs={}\n", c.params["fio_bs"])),
            "{job}"
        );
        // Bytes per I/O from fio's own figures: the block size it really used.
        let bytes = num(c, "read_bw_mib_s") * 1048576.0 / num(c, "read_iops");
        eprintln!("{}: {bytes:.0} bytes per read", c.cell_id);
        assert!(
            (bytes / bs - 1.0).abs() < 0.05,
            "{}: {bytes} vs {bs}",
            c.cell_id
        );
        ratio.push(bytes);
    }
    assert!(ratio[1] > ratio[0] * 8.0, "{ratio:?}");
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn iothread_and_two_queues_boot_and_pass() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--iothread",
        "on",
        "--queues",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (dir, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 1);
    let c = &rec.cells[0];
    assert_eq!(
        c.cell_id,
        "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw-iothread-q2"
    );
    assert_real_randrw(c);
    assert_eq!(c.params["qemu_iothread"], "on");
    assert_eq!(c.params["qemu_queues"], "2");
    // Where the latency comes from (issue 16 item 2): the guest's mean split at QEMU's block
    // layer, and the host's percentiles from QEMU's latency histogram over the same window.
    // Checked against figures the split does not use: the guest mean is fio's own (its JSON in
    // the cell dir), and Little's law ties each side's mean latency to its own count of I/Os
    // (IOPS x mean = I/Os in flight): fio keeps at most iodepth 16 in flight, and QEMU's block
    // layer cannot hold more than the guest has submitted.
    let fio: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cell_dir(&dir, &c.cell_id).join("fio.json")).unwrap(),
    )
    .unwrap();
    let (mut in_guest, mut in_host) = (0.0, 0.0);
    for dir in ["read", "write"] {
        let host = num(c, &format!("{dir}_lat_backend_host_us"));
        let guest = num(c, &format!("{dir}_lat_guest_virtio_us"));
        let total = num(c, &format!("{dir}_lat_mean_us"));
        eprintln!("{dir}: {total:.0} µs = host {host:.0} + guest/virtio {guest:.0}");
        let fio_mean = fio["jobs"][0][dir]["lat_ns"]["mean"].as_f64().unwrap() / 1000.0;
        assert!(
            (total - fio_mean).abs() <= 1e-9 * fio_mean,
            "{dir}: mean {total} µs, fio.json says {fio_mean} µs"
        );
        assert!(host > 0.0 && guest > 0.0 && (host + guest - total).abs() < 1e-6);
        in_guest += num(c, &format!("{dir}_iops")) * total / 1e6;
        in_host += num(c, &format!("host_{dir}_iops")) * host / 1e6;
        let p50 = num(c, &format!("host_{dir}_lat_p50_us"));
        let p99 = num(c, &format!("host_{dir}_lat_p99_us"));
        eprintln!(
            "{dir}: host p50 {p50:.0} µs, p99 {p99:.0} µs (guest p99 {:.0})",
            num(c, &format!("{dir}_lat_p99_us"))
        );
        assert!(0.0 < p50 && p50 <= p99, "{p50} {p99}");
    }
    eprintln!(
        "I/Os in flight (IOPS x mean latency): guest {in_guest:.2}, QEMU block layer {in_host:.2}"
    );
    assert!(
        (1.0..=16.0 * 1.05).contains(&in_guest),
        "guest: {in_guest:.2} I/Os in flight at iodepth 16"
    );
    assert!(
        0.0 < in_host && in_host <= in_guest * 1.05,
        "QEMU's block layer held {in_host:.2} I/Os in flight, the guest {in_guest:.2}"
    );
    let xml = std::fs::read_to_string(cell_dir(&dir, &c.cell_id).join("domain.xml")).unwrap();
    assert!(xml.contains("<iothreads>1</iothreads>"), "{xml}");
    assert!(xml.contains("queues=\"2\" iothread=\"1\""), "{xml}");
    s.assert_no_leftovers();
}
