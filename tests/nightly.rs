//! The nightly job as Debian hosts run it: packaging/systemd's service and timer are what
//! `systemd-analyze verify` accepts without a word, with the recipe script where the service
//! looks for it. (tests/compare_ab.rs runs the recipe itself over real nights.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging")
}

/// A scratch root with the units in /etc/systemd/system, the script as /usr/bin/vmbench-nightly
/// (the service's ExecStart) and this host's system units (timers.target, libvirtd.service ...).
fn root_with_units() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let units = root.path().join("etc/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    for u in ["vmbench-nightly.service", "vmbench-nightly.timer"] {
        std::fs::copy(packaging().join("systemd").join(u), units.join(u)).unwrap();
    }
    let bin = root.path().join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(
        packaging().join("vmbench-nightly"),
        bin.join("vmbench-nightly"),
    )
    .unwrap();
    let lib = root.path().join("usr/lib/systemd");
    std::fs::create_dir_all(&lib).unwrap();
    let out = Command::new("cp")
        .arg("-r")
        .arg("/usr/lib/systemd/system")
        .arg(&lib)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    root
}

fn verify(root: &Path) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(["vmbench-nightly.service", "vmbench-nightly.timer"])
        .output()
        .expect("systemd-analyze (scripts/setup-host installs systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn units_verify_clean() {
    let root = root_with_units();
    let (ok, text) = verify(root.path());
    assert!(
        ok && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );
    // The check can fail: a misspelt key is reported (with exit 0, hence the empty-output
    // assertion), and a service without its script fails.
    let service = root
        .path()
        .join("etc/systemd/system/vmbench-nightly.service");
    let text = std::fs::read_to_string(&service).unwrap();
    std::fs::write(&service, text.replace("TimeoutStopSec=", "TimeoutStpSec=")).unwrap();
    let (_, said) = verify(root.path());
    assert!(said.contains("Unknown key 'TimeoutStpSec'"), "{said}");
    std::fs::write(&service, text).unwrap();
    std::fs::remove_file(root.path().join("usr/bin/vmbench-nightly")).unwrap();
    let (ok, said) = verify(root.path());
    assert!(!ok && said.contains("/usr/bin/vmbench-nightly"), "{said}");
}

#[test]
fn timer_runs_the_service_nightly_and_the_service_runs_the_script() {
    let timer = std::fs::read_to_string(packaging().join("systemd/vmbench-nightly.timer")).unwrap();
    assert!(timer.contains("\nOnCalendar=*-*-* 02:00:00\n"), "{timer}");
    assert!(
        timer.contains("\nUnit=vmbench-nightly.service\n"),
        "{timer}"
    );
    assert!(timer.contains("\nWantedBy=timers.target\n"), "{timer}");
    let service =
        std::fs::read_to_string(packaging().join("systemd/vmbench-nightly.service")).unwrap();
    assert!(
        service.contains("\nExecStart=/usr/bin/vmbench-nightly\n"),
        "{service}"
    );
    assert!(service.contains("\nType=oneshot\n"), "{service}");
}

#[test]
fn the_script_refuses_an_unknown_mode_and_checks_its_config() {
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str], conf: &Path| {
        Command::new("sh")
            .arg(packaging().join("vmbench-nightly"))
            .args(args)
            .env("VMBENCH", env!("CARGO_BIN_EXE_vmbench"))
            .env("VMBENCH_NIGHTLY_CONFIG", conf)
            .env("VMBENCH_STATE_DIR", state.path())
            .env_remove("JOURNAL_STREAM")
            .output()
            .unwrap()
    };
    let out = run(&["tonight"], &packaging().join("nightly.conf"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("valid: run, gate"));
    // A config with a typo is the matrix's exit 2, passed through, and no gate runs on an old
    // night as if it were tonight's.
    let bad = state.path().join("bad.conf");
    std::fs::write(&bad, "repeats = 8\n").unwrap();
    let out = run(&[], &bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("repeats") && err.contains("matrix exited 2"),
        "{err}"
    );
    assert!(!state.path().join("nightly/compare.txt").exists());
    // The gate runs without the per-second latency logs (about 7% of a TCG guest's IOPS),
    // keeping the bandwidth and IOPS series.
    let shipped =
        vmbench::matrix::config::MatrixConfig::from_file(&packaging().join("nightly.conf"))
            .unwrap();
    assert!(!shipped.latency_series && shipped.time_series && shipped.live_status);
    // The shipped config is one `vmbench matrix --config` accepts.
    let out = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(["matrix", "--dry-run", "--config"])
        .arg(packaging().join("nightly.conf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
