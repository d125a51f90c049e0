//! The test harness's own promises, each shown failing on purpose: a child past its deadline is
//! killed and fails its test with the report; a leftover check against a libvirtd that does not
//! answer fails instead of finding nothing; a test that hangs is killed by nextest and reported
//! failed (`hangs_on_purpose`, run only by scripts/test's self-check under the `selftest`
//! profile of .config/nextest.toml).
use crate::common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// Nothing listens on port 1: libvirt's client gets "connection refused" at once.
const DEAD_URI: &str = "qemu+tcp://127.0.0.1:1/system";

#[test]
fn a_child_past_its_deadline_is_killed_and_fails_with_its_console_tail() {
    // A runs dir as vmbench leaves it, so the report shows the cell's console.
    let dir = tempfile::tempdir().unwrap();
    let cell = dir.path().join("run-1/cells/000");
    std::fs::create_dir_all(&cell).unwrap();
    std::fs::write(
        cell.join("console.log"),
        "[ 1.0] booting\n[ 2.0] stuck here\n",
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo started; sleep 600", "sh", "--runs-dir"])
        .arg(dir.path());
    let t = Instant::now();
    let report = deadline::try_output_within(&mut cmd, Duration::from_secs(1))
        .expect_err("a child that sleeps 600 s must not pass a 1 s deadline");
    // Killed at the deadline (SIGTERM ends sleep), not after it finished.
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(report.contains("did not finish within 1 s"), "{report}");
    assert!(report.contains("started"), "stdout tail: {report}");
    assert!(report.contains("stuck here"), "console tail: {report}");
    assert!(report.contains("virsh list --all"), "{report}");
}

#[test]
fn a_child_within_its_deadline_gives_its_output() {
    let o = output_within(
        Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(o.stdout, b"out\n");
    assert_eq!(o.stderr, b"err\n");
}

#[test]
fn a_server_left_holding_the_pipe_does_not_hold_the_test() {
    // The child exits at once; its background grandchild keeps stdout open for 600 s.
    let t = Instant::now();
    let o = output_within(
        Command::new("sh").args(["-c", "sleep 600 & echo parent done"]),
        Duration::from_secs(60),
    );
    assert!(o.status.success());
    assert_eq!(o.stdout, b"parent done\n");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
#[ignore = "host: libvirtd"]
#[should_panic(expected = "virsh -c qemu+tcp://127.0.0.1:1/system list --all --name")]
fn virsh_fails_the_test_when_libvirtd_does_not_answer() {
    virsh_at(DEAD_URI, &["list", "--all", "--name"]);
}

#[test]
#[ignore = "host: libvirtd"]
#[should_panic(expected = "failed to connect")]
fn a_leftover_check_against_a_dead_libvirtd_fails() {
    Scratch::new().assert_no_leftovers_on(DEAD_URI);
}

#[test]
fn a_skip_is_logged_with_its_file_and_test_for_scripts_test_to_count() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips");
    // This process's own log (nextest: one process per test; no other test here skips).
    std::env::set_var("VMBENCH_SKIP_LOG", &log);
    skip("nothing to show here");
    skip("a second part");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "skipped: harness_selftest::a_skip_is_logged_with_its_file_and_test_for_scripts_test_to_count: nothing to show here\n\
         skipped: harness_selftest::a_skip_is_logged_with_its_file_and_test_for_scripts_test_to_count: a second part\n"
    );
}

/// Hangs (a child it waits for without bound) so that scripts/test can show nextest kills it,
/// and its child, and reports it failed. Writes the child's pid to `$VMBENCH_SELFTEST_PID`.
#[test]
#[ignore = "selftest: hangs on purpose; scripts/test's self-check runs it under the selftest profile"]
fn hangs_on_purpose() {
    let mut child = Command::new("sleep").arg("3600").spawn().unwrap();
    if let Some(p) = std::env::var_os("VMBENCH_SELFTEST_PID") {
        std::fs::write(p, child.id().to_string()).unwrap();
    }
    child.wait().unwrap();
}
