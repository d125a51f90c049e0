//! `vmbench report RUN --against-seed NAME` through the CLI, on a real stored run
//! (tests/fixtures/run-qemu-local-pgrandrw-bonnie.json: a default-matrix run, not a preset's).
//! Pure: no host needed.
use crate::common;
use common::*;
use std::process::Command;

/// The fixture as a run directory (`report DIR` reads DIR/run.json).
fn run_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/run-qemu-local-pgrandrw-bonnie.json"
    );
    std::fs::copy(fixture, dir.path().join("run.json")).unwrap();
    dir
}

fn report(dir: &tempfile::TempDir, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vmbench"));
    c.arg("report")
        .arg(dir.path())
        .args(["--against-seed", "lvm-vs-partition"])
        .args(extra)
        .env("NO_COLOR", "1");
    let o = output_within(&mut c, TOOL_LIMIT);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_run_not_made_by_the_preset_is_refused_with_exit_2_and_judged_with_force() {
    let dir = run_dir();
    let (code, out, err) = report(&dir, &[]);
    assert_eq!(code, Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.is_empty(), "nothing judged on a refused run:\n{out}");
    assert!(
        err.contains("was not made by preset lvm-vs-partition"),
        "{err}"
    );
    assert!(
        err.contains(r#"layout: run ["raw"], preset ["part-ext4","lvm-ext4"]"#),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");

    let (code, out, err) = report(&dir, &["--force"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("WARNING: not made by preset lvm-vs-partition (judged anyway: --force)"),
        "{out}"
    );
    assert!(
        out.contains("ext4 on a primary partition (not measured)"),
        "{out}"
    );
}
