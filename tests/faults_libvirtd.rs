//! Issue 8, fault 5: libvirtd restarted in the middle of a cell. The cell fails with the reason,
//! the connection is reopened for the next cell, which passes, and nothing is left.
use crate::common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vmbench::results::Outcome;

/// Whatever happens in the test, libvirtd runs again afterwards (the rest of the suite needs it).
struct LibvirtdBack;
impl Drop for LibvirtdBack {
    fn drop(&mut self) {
        if pids_named("libvirtd").is_empty() {
            let _ = deadline::try_output_within(&mut libvirtd_daemon(), TOOL_LIMIT);
        }
        wait_libvirt_up();
    }
}

/// The daemon started the way scripts/setup-host starts it (scripts/start-libvirtd: under tini
/// where systemd is not PID 1, holding none of this process's descriptors, answering before it
/// returns).
fn libvirtd_daemon() -> Command {
    Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/start-libvirtd"
    ))
}

fn wait_libvirt_up() {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        // Not output_within: this runs in a drop guard, which must not panic.
        let ok = deadline::try_output_within(
            Command::new("virsh").args(["-c", "qemu:///system", "version"]),
            Duration::from_secs(10),
        )
        .map(|o| o.status.success());
        if ok.unwrap_or(false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("libvirtd did not come back");
}

/// The system libvirtd this test restarts: the pid in its pid file (libvirtd writes
/// /run/libvirtd.pid, daemonized or not), checked to be a running libvirtd.
fn system_libvirtd() -> u32 {
    let text = std::fs::read_to_string("/run/libvirtd.pid").expect("libvirtd's pid file");
    let pid: u32 = text.trim().parse().expect("a pid in /run/libvirtd.pid");
    assert!(
        pids_named("libvirtd").contains(&pid),
        "/run/libvirtd.pid names {pid}, which is not a running libvirtd"
    );
    pid
}

/// Stops exactly that libvirtd (SIGTERM to its pid, waiting for it to go) and starts the
/// daemon again the way scripts/setup-host does.
fn restart_libvirtd() {
    let pid = system_libvirtd();
    let r = unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert_eq!(r, 0, "kill -TERM {pid}");
    let end = Instant::now() + Duration::from_secs(20);
    while pids_named("libvirtd").contains(&pid) {
        assert!(
            Instant::now() < end,
            "libvirtd {pid} did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(output_within(&mut libvirtd_daemon(), TOOL_LIMIT)
        .status
        .success());
    wait_libvirt_up();
    let new = system_libvirtd();
    assert_ne!(new, pid, "a new libvirtd");
    eprintln!("test: libvirtd {pid} stopped, {new} started");
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn libvirtd_restart_mid_cell_fails_that_cell_and_the_next_one_runs() {
    let _back = LibvirtdBack;
    let s = Scratch::new();
    let mut cmd = s.matrix_cmd(&[
        "--backend",
        "local",
        "--format",
        "raw,qcow2",
        "--runtime",
        "8",
    ]);
    cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    let mut child = spawn_within(&mut cmd, MATRIX_LIMIT);
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Restart libvirtd once the first cell measures.
    let end = Instant::now() + Duration::from_secs(180);
    loop {
        let line = rx
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .expect("cell 1 never reached its run phase");
        if line.contains("phase: run") {
            break;
        }
    }
    restart_libvirtd();
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    eprintln!("{stderr}");
    assert_eq!(status.code(), Some(1), "a failed cell");
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2);
    let Outcome::Failed(r) = &rec.cells[0].outcome else {
        panic!("{:?}", rec.cells[0].outcome)
    };
    assert!(r.contains("libvirt"), "{r}");
    assert_real_randrw(&rec.cells[1]);
    assert!(
        stderr.contains("reconnecting"),
        "the connection was reopened"
    );
    s.assert_no_leftovers();
}
