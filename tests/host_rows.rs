//! Issue 26 item 2, host rows (`--hypervisor host`): the same workload run by the host itself on
//! the same storage, beside a guest's cell; what it leaves behind (nothing); a network disk's
//! host cell skipped with the missing kernel client; and the combinations refused up front.
use crate::common;
use common::*;
use vmbench::results::{Outcome, SkipKind};

/// Loop devices backed by a file under `dir`, and mounts under it.
fn leftovers(dir: &std::path::Path) -> (String, Vec<String>) {
    let loops = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .unwrap();
    let loops = String::from_utf8_lossy(&loops.stdout)
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .collect::<Vec<_>>()
        .join("\n");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mounts = mounts
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_string)
        .collect();
    (loops, mounts)
}

#[test]
#[ignore = "host: root libvirtd qemu loop"]
fn host_cells_run_the_guests_workload_on_the_same_storage_and_leave_nothing() {
    let s = Scratch::new();
    // Cells: the host's bonnie++ on ext4 on a local file (-s 256 MiB: the smallest RAM, as
    // tests/matrix_workloads.rs, whose guest bonnie++ cell takes a minute and a half under TCG:
    // not repeated here); the host's fio on the raw file beside a qemu guest's on its own raw
    // file (the like-for-like pair); host cells on NFS (no kernel NFS client here: skipped at
    // plan time). Every other combination is excluded.
    let out = s.matrix_with(&[
        "--runtime",
        "3",
        "--ramp",
        "1",
        "--size",
        "32M",
        "--disk-mib",
        "512",
        "--memory",
        "128",
        "--hypervisor",
        "host,qemu",
        "--backend",
        "local,nfs",
        "--format",
        "raw",
        "--layout",
        "ext4,raw",
        "--workload",
        "bonnie,pg-randrw",
        "--bonnie-files",
        "1",
        "--exclude",
        "hypervisor=qemu,backend=nfs",
        "--exclude",
        "hypervisor=qemu,layout=ext4",
        "--exclude",
        "layout=raw,workload=bonnie",
        "--exclude",
        "layout=ext4,workload=pg-randrw",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    let find = |hv: &str, backend: &str, workload: &str| {
        rec.cells
            .iter()
            .find(|c| {
                c.cell.hypervisor.as_str() == hv
                    && c.cell.backend.as_str() == backend
                    && c.cell.workload.to_string() == workload
            })
            .unwrap_or_else(|| panic!("no {hv}/{backend}/{workload} cell"))
    };
    let host_bonnie = find("host", "local", "bonnie");
    let host_fio = find("host", "local", "pg-randrw");
    let guest_fio = find("qemu", "local", "pg-randrw");
    for c in [host_bonnie, host_fio, guest_fio] {
        assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
    }
    // The guest's engine, arguments and parse.
    for key in ["seq_out_char_kps", "seq_in_char_kps"] {
        assert!(num(host_bonnie, key) > 0.0, "{key}");
    }
    assert_eq!(
        num(host_bonnie, "file_size_mib"),
        256.0,
        "-s as the guest's"
    );
    assert_real_randrw(host_fio);
    assert_real_randrw(guest_fio);
    eprintln!(
        "read IOPS: host {:.0}, guest {:.0} (guest/host {:.1}%)",
        num(host_fio, "read_iops"),
        num(guest_fio, "read_iops"),
        100.0 * num(guest_fio, "read_iops") / num(host_fio, "read_iops")
    );
    assert_eq!(
        host_fio.provenance.jobs, guest_fio.provenance.jobs,
        "the same job files"
    );
    // The report divides the guest's figures by the host row's on the same storage.
    let report = String::from_utf8_lossy(&out.stdout);
    let line = format!(
        "  {} vs {}: Read IOPS ",
        guest_fio.cell.label(),
        host_fio.cell.label()
    );
    assert!(
        report.contains("Guest efficiency (guest mean / host row mean") && report.contains(&line),
        "{report}"
    );
    // Which binaries ran, the host's figures, and no boot.
    let engine = |c: &vmbench::results::CellResult| c.params["host_engine"].clone();
    assert!(
        engine(host_fio).contains("the image's static build"),
        "{}",
        engine(host_fio)
    );
    assert!(
        engine(host_bonnie).starts_with("bonnie++ ("),
        "{}",
        engine(host_bonnie)
    );
    assert!(host_bonnie.params["host_mounted_device"].starts_with("/dev/loop"));
    assert_eq!(
        host_fio.provenance.tools["fio"],
        guest_fio.provenance.tools["fio"]
    );
    for c in [host_bonnie, host_fio] {
        // The engine's page cache capped at the guest's RAM (--memory 128).
        let cap = &c.params["host_memory_cap"];
        assert!(cap.starts_with("128 MiB (memory cgroup v"), "{cap}");
        assert_eq!(c.timings.boot_to_hello_ms, 0);
        assert_eq!(c.params["datapath"], "host (no guest)");
        assert!(num(c, "host_engine_cpu_pct") > 0.0, "{}", c.cell_id);
    }
    // Host cells on NFS: recorded, skipped, with the reason.
    let nfs: Vec<_> = rec
        .cells
        .iter()
        .filter(|c| c.cell.backend.as_str() == "nfs")
        .collect();
    assert!(!nfs.is_empty());
    for c in nfs {
        match &c.outcome {
            Outcome::Skipped(why) => assert!(
                why.starts_with("unsupported on this host: a host cell on nfs"),
                "{why}"
            ),
            o => panic!("{}: {o:?}", c.cell_id),
        }
        assert_eq!(c.skip_kind, Some(SkipKind::Backend));
    }
    // Nothing left: no loop device on the run's files, no mount under its work dir, no cgroup.
    let cgroups = vmbench::workload::memcap::leftovers(&rec.run_id);
    assert!(cgroups.is_empty(), "memory cgroups left: {cgroups:?}");
    let (loops, mounts) = leftovers(&s.work());
    assert!(loops.is_empty(), "loop devices left: {loops}");
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
}

/// What a host cell cannot be is refused before anything runs (exit 2), naming why.
#[test]
fn host_cells_with_guest_only_options_are_refused() {
    let s = Scratch::new();
    for (flag, value, why) in [
        (
            "--iops-limit",
            "100",
            "a host cell has no virtual disk to cap",
        ),
        ("--boot-storm", "2", "host cells have none"),
    ] {
        let out = s
            .matrix_cmd_unsized(&["--hypervisor", "host", flag, value, "--dry-run"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(why), "{flag}: {err}");
    }
}

/// A run killed with SIGKILL in the middle of a host cell: its engine dies with it, and
/// `vmbench cleanup` unmounts the cell's filesystem, detaches its loop device and removes its
/// memory cgroup.
#[test]
#[ignore = "host: root libvirtd qemu loop"]
fn a_killed_host_cell_is_cleaned_up() {
    use std::time::{Duration, Instant};
    let s = Scratch::new();
    // bonnie++ with -s 2 GiB (-r 1 GiB): long enough to be killed in the middle.
    let mut cmd = s.matrix_cmd_unsized(&[
        "--disk-mib",
        "4096",
        "--memory",
        "1024",
        "--hypervisor",
        "host",
        "--backend",
        "local",
        "--format",
        "raw",
        "--layout",
        "ext4",
        "--workload",
        "bonnie",
    ]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut run = spawn_within(&mut cmd, Duration::from_secs(120));
    let deadline = Instant::now() + Duration::from_secs(60);
    while leftovers(&s.work()).1.is_empty() {
        assert!(Instant::now() < deadline, "the host cell never mounted");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill on the pid of the child this test started, not yet reaped.
    let r = unsafe { libc::kill(run.id() as i32, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 vmbench");
    let _ = run.wait();
    let (loops, mounts) = leftovers(&s.work());
    assert!(
        !loops.is_empty() && !mounts.is_empty(),
        "{loops} {mounts:?}"
    );
    let run_id = s.run_ids().pop().expect("the killed run's directory");
    let cgroups = || vmbench::workload::memcap::leftovers(&run_id);
    assert_eq!(cgroups().len(), 1, "the killed cell's memory cgroup");
    let out = output_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_vmbench"))
            .arg("cleanup")
            .arg("--runs-dir")
            .arg(s.runs()),
        TOOL_LIMIT,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("host cell mount"), "{said}");
    assert!(said.contains("host cell loop device"), "{said}");
    assert!(said.contains("host cell memory cgroup"), "{said}");
    assert!(cgroups().is_empty(), "memory cgroups left: {:?}", cgroups());
    let (loops, mounts) = leftovers(&s.work());
    assert!(loops.is_empty(), "loop devices left: {loops}");
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
}
