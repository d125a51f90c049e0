//! Issue 5's workloads and measurements on real cells (libvirtd, QEMU under TCG, the vmbench
//! guest): a user fio job file, the xfs layout, the host baseline, QMP block stats against fio's
//! own counts, and the provenance of every passed result. bonnie++'s columns are checked on the
//! lvm-vs-partition preset's cells (tests/seed_presets.rs), which run it anyway.
use crate::common;
use common::*;
use vmbench::results::CellResult;

const USER_JOB: &str = "tests/fixtures/jobs/user-randrw.fio";

/// Every field a passed result must carry to be comparable with another.
fn assert_provenance(c: &CellResult) {
    let p = &c.provenance;
    for (name, v) in [
        ("host_kernel", &p.host_kernel),
        ("qemu", &p.qemu),
        ("libvirt", &p.libvirt),
        ("guest_kernel", &p.guest_kernel),
        ("cpu_model", &p.cpu_model),
        ("image", &p.image),
        ("bonnie", &p.tools["bonnie"]),
    ] {
        assert!(
            !v.trim().is_empty(),
            "{}: provenance {name} empty: {p:?}",
            c.cell_id
        );
    }
    assert!(p.tools["fio"].starts_with("fio-"), "{}: {p:?}", c.cell_id);
}

/// The cell directory of the `n`th cell of the only run.
fn cell_dir(s: &Scratch, n: usize) -> std::path::PathBuf {
    let (dir, _) = s.run_record();
    let mut cells: Vec<_> = std::fs::read_dir(dir.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cells.sort();
    cells[n].clone()
}

/// Host-observed ops over the window against fio's own I/O counts, per direction.
fn assert_qmp_matches_fio(c: &CellResult) {
    for (host, guest) in [
        ("host_read_ops", "read_ios"),
        ("host_write_ops", "write_ios"),
    ] {
        let (h, g) = (num(c, host), num(c, guest));
        assert!(g > 100.0, "{}: {guest} = {g}", c.cell_id);
        let off = (h - g).abs() / g;
        eprintln!(
            "{}: {host} {h} vs {guest} {g}: {:.2}%",
            c.cell_id,
            off * 100.0
        );
        assert!(
            off <= 0.05,
            "{}: {host} {h} vs {guest} {g} ({:.1}% apart)",
            c.cell_id,
            off * 100.0
        );
    }
}

/// `vmbench matrix` with tests/common's CI timings (the 1 s ramp kept) but this test's disk and
/// memory sizes.
fn matrix_sized(s: &Scratch, sizes: &[&str], args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("matrix")
        .args(["--runs-dir".as_ref(), s.runs().as_os_str()])
        .args(["--work-dir".as_ref(), s.work().as_os_str()])
        .args(["--db".as_ref(), s.db().as_os_str()])
        .args(["--runtime", "4", "--ramp", "1", "--size", "32M"])
        .args(sizes)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    eprintln!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
#[ignore = "host: root libvirtd qemu fio"]
fn preset_and_job_file_cells_with_host_baseline_qmp_and_provenance() {
    let s = Scratch::new();
    let job = format!(
        "file:{}",
        std::fs::canonicalize(USER_JOB).unwrap().display()
    );
    let out = s.matrix(&[
        "--backend",
        "local",
        "--format",
        "raw",
        "--workload",
        &format!("pg-randrw,{job}"),
        "--host-baseline",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2);
    for (i, c) in rec.cells.iter().enumerate() {
        assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
        assert!(num(c, "read_iops") > 0.0 && num(c, "write_iops") > 0.0);
        assert!(num(c, "host_baseline_read_iops") > 0.0, "{}", c.cell_id);
        assert!(num(c, "host_baseline_write_iops") > 0.0, "{}", c.cell_id);
        let eff = num(c, "read_efficiency_pct");
        let want = 100.0 * num(c, "read_iops") / num(c, "host_baseline_read_iops");
        assert!(
            (eff - want).abs() < 1e-9 && eff > 0.0,
            "{}: {eff}",
            c.cell_id
        );
        assert!(num(c, "write_efficiency_pct") > 0.0);
        assert!(c
            .params
            .get("host_fio")
            .is_some_and(|v| v.starts_with("fio-")));
        let target = c
            .params
            .get("host_baseline_target")
            .expect("target recorded");
        assert!(
            target.ends_with(".raw") || target.ends_with(".img"),
            "{target}"
        );
        assert_qmp_matches_fio(c);
        assert_provenance(c);
        let d = cell_dir(&s, i);
        let job_text = std::fs::read_to_string(d.join("job.fio")).unwrap();
        assert!(job_text.contains("filename="), "{job_text}");
        assert!(d.join("domain.xml").is_file());
    }
    let user = rec
        .cells
        .iter()
        .find(|c| c.cell_id.contains("file"))
        .unwrap();
    let text = std::fs::read_to_string(cell_dir(&s, 1).join("job.fio")).unwrap();
    assert!(text.contains("[user-randrw]"), "{text}");
    // 50/50 mix in the job file, so not the preset's 70/30.
    let share = num(user, "read_share_pct");
    assert!((40.0..=60.0).contains(&share), "{share}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("user-randrw") || stdout.contains("file:"),
        "{stdout}"
    );
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn xfs_layout_cell_passes() {
    let s = Scratch::new();
    // mkfs.xfs refuses filesystems under 300 MB.
    let out = matrix_sized(
        &s,
        &["--disk-mib", "320", "--memory", "384"],
        &["--backend", "local", "--format", "raw", "--layout", "xfs"],
    );
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    let c = &rec.cells[0];
    assert_eq!(c.cell.layout, vmbench::cell::Layout::Xfs);
    assert_real_randrw(c);
    assert_provenance(c);
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu fio"]
fn bad_job_files_are_exit_2_before_any_domain() {
    let s = Scratch::new();
    for (file, want) in [
        ("tests/fixtures/jobs/names-filename.fio", "filename"),
        (
            "tests/fixtures/jobs/unknown-option.fio",
            "no_such_option_vmbench",
        ),
    ] {
        let w = format!("file:{}", std::fs::canonicalize(file).unwrap().display());
        let out = s.matrix(&["--backend", "local", "--format", "raw", "--workload", &w]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{file}: {err}");
        assert!(
            !s.runs().exists() && !s.work().exists(),
            "{file} created files"
        );
    }
    s.assert_no_leftovers();
}
