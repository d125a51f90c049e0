//! `vmbench report RUN --against-seed NAME` through the CLI, on a real stored run
//! (tests/fixtures/run-qemu-local-pgrandrw-bonnie.json: a default-matrix run, not a preset's).
//! Pure: no host needed.
use crate::common;
use common::*;

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

/// `vmbench report DIR --against-seed lvm-vs-partition`, plus `extra`.
fn report(dir: &tempfile::TempDir, extra: &[&str]) -> (Option<i32>, String, String) {
    report_against_seed(dir.path(), None, "lvm-vs-partition", extra)
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
        err.contains(r#"layout: run ["raw"], preset ["split-part-ext4","split-lvm-ext4"]"#),
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
