//! Issue 4's lifecycle: Ctrl-C mid-cell and `--resume`, `cleanup` after `kill -9`, a live run
//! left alone, and `--dry-run`. Real libvirtd, QEMU under TCG, tgtd. (Two runs at once: the
//! test in matrix_links.rs, with embedded servers, also checks their run ids and domain names.)
use crate::common;
use common::running::Running;
use common::*;
use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmbench::results::RunRecord;

fn vmbench(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vmbench"));
    c.args(args).env("NO_COLOR", "1");
    c
}

fn cleanup(s: &Scratch) -> String {
    let out = vmbench(&["cleanup", "--runs-dir"])
        .arg(s.runs())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- cleanup\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    text
}

/// The run directory, once the runner made it.
fn wait_run_dir(s: &Scratch) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut it) = std::fs::read_dir(s.runs()) {
            if let Some(e) = it.next() {
                return e.unwrap().path();
            }
        }
        assert!(Instant::now() < deadline, "no run dir");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_domains(run_id: &str) -> Vec<String> {
    virsh(&["list", "--all", "--name"])
        .lines()
        .filter(|l| l.starts_with(&format!("vmbench-{run_id}")))
        .map(String::from)
        .collect()
}

fn load(dir: &Path) -> RunRecord {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

fn cell_dirs(run: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn sigint_mid_cell_keeps_finished_cells_and_resume_runs_exactly_the_rest() {
    let s = Scratch::new();
    let mut cmd = s.matrix_cmd(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "local",
        "--format",
        "qcow2,raw",
        "--repeat",
        "2",
        "--no-prefill",
    ]);
    let mut m = Running::spawn(cmd.stdout(Stdio::null()));
    // The middle of the second cell: its guest is up and fio runs.
    m.wait_for(
        "[2/4]",
        &["phase: ramp", "phase: run"],
        Duration::from_secs(180),
    );
    let run = wait_run_dir(&s);
    let run_id = run.file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(run_domains(&run_id).len(), 1, "the second cell's domain");

    // A live run is left alone by cleanup: its domain, work dir and lock stay.
    let out = cleanup(&s);
    assert!(!out.contains("removed"), "{out}");
    assert!(out.contains("left alone: domain"), "{out}");
    assert_eq!(run_domains(&run_id).len(), 1, "cleanup touched a live run");
    assert!(s.work().join(&run_id).is_dir());

    m.signal(Signal::SIGINT);
    let (code, err) = m.wait(Duration::from_secs(60));
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("--resume"), "{err}");
    s.assert_no_leftovers();
    assert!(!s.work().join(&run_id).exists());
    let rec = load(&run);
    assert_eq!(
        rec.cells.len(),
        1,
        "only the finished cell: {:?}",
        rec.cells
    );
    assert_real_randrw(&rec.cells[0]);
    let first = rec.cells[0].clone();
    // The interrupted cell's directory stays (its console log explains it), without a result.
    let dirs = cell_dirs(&run);
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert!(!run
        .join("cells")
        .join(&dirs[1])
        .join("result.json")
        .exists());

    let out = vmbench(&["matrix", "--resume"])
        .arg(&run)
        .arg("--work-dir")
        .arg(s.work())
        .arg("--db")
        .arg(s.db())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- resume\n{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("matrix: 3 cell run(s)"), "{err}");
    let rec = load(&run);
    assert_eq!(rec.cells.len(), 4);
    assert_eq!(rec.cells[0], first, "the kept cell is untouched");
    let keys: BTreeSet<(String, u32)> = rec
        .cells
        .iter()
        .map(|c| (c.cell_id.clone(), c.repeat))
        .collect();
    assert_eq!(keys.len(), 4, "each (cell, repeat) once: {keys:?}");
    assert_eq!(keys.iter().filter(|(_, r)| *r == 1).count(), 2);
    for c in &rec.cells {
        assert_real_randrw(c);
    }
    // Cell directories never reuse a number: 2 from the first attempt, 3 new.
    let dirs = cell_dirs(&run);
    let seqs: BTreeSet<&str> = dirs.iter().map(|d| &d[..3]).collect();
    assert_eq!((dirs.len(), seqs.len()), (5, 5), "{dirs:?}");
    let with_result = dirs
        .iter()
        .filter(|d| run.join("cells").join(d).join("result.json").is_file())
        .count();
    assert_eq!(with_result, 4);
    // The history store has the whole run, finished.
    let store = vmbench::results::store::Store::open(&s.db()).unwrap();
    assert_eq!(store.load_run(&run_id).unwrap().cells.len(), 4);
    let status = store
        .runs()
        .unwrap()
        .into_iter()
        .find(|r| r.run_id == run_id)
        .unwrap()
        .status;
    assert_eq!(status, "finished");
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn cleanup_after_kill_9_removes_domain_tgtd_and_work_dir() {
    let s = Scratch::new();
    let mut cmd = s.matrix_cmd(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "iscsi",
        "--format",
        "raw",
    ]);
    let mut m = Running::spawn(cmd.stdout(Stdio::null()));
    m.wait_for(
        "[1/1]",
        &["phase: prefill", "phase: ramp", "phase: run"],
        Duration::from_secs(120),
    );
    let run = wait_run_dir(&s);
    let run_id = run.file_name().unwrap().to_str().unwrap().to_string();
    m.signal(Signal::SIGKILL);
    let (code, _) = m.wait(Duration::from_secs(10));
    assert_eq!(code, None, "killed by a signal");

    // What a crash leaves: the domain, the orphaned tgtd with its LUN, the work files.
    assert_eq!(run_domains(&run_id).len(), 1);
    let servers = vmbench::cleanup::server_processes(&run.join("servers"));
    assert!(
        servers.iter().any(|(_, c)| c == "tgtd"),
        "orphaned tgtd: {servers:?}"
    );
    assert!(std::fs::read_dir(s.work().join(&run_id)).unwrap().count() > 0);
    // ... and the libvirt secret holding the run's CHAP secret.
    let usage = std::fs::read_to_string(run.join("servers/tgt/libvirt-secret-usage")).unwrap();
    assert!(virsh(&["secret-list"]).contains(&usage), "secret {usage}");
    let namespaces = vmbench::storage::netns::list(Some(&run_id));
    assert_eq!(
        namespaces.len(),
        1,
        "the run's server namespace: {namespaces:?}"
    );
    let firewall = vmbench::storage::firewall::refused;
    assert!(
        firewall(&namespaces[0]).is_some(),
        "the link's nftables table"
    );

    // The orphaned tgtd's control sockets (a SIGKILLed tgtd leaves them in /var/run/tgtd).
    let sockets: Vec<String> = servers
        .iter()
        .filter(|(_, c)| c == "tgtd")
        .filter_map(|(pid, _)| vmbench::cleanup::tgtd_control_port(*pid))
        .map(|port| format!("/var/run/tgtd/socket.{port}"))
        .collect();
    assert_eq!(sockets.len(), 1, "tgtd's -C port: {servers:?}");
    assert!(std::path::Path::new(&sockets[0]).exists(), "{sockets:?}");

    let out = cleanup(&s);
    assert!(out.contains("removed domain vmbench-"), "{out}");
    assert!(out.contains("removed server tgtd"), "{out}");
    for sock in [sockets[0].clone(), format!("{}.lock", sockets[0])] {
        assert!(!std::path::Path::new(&sock).exists(), "{sock} left");
    }
    assert!(
        out.contains(&format!("removed libvirt secret {usage}")),
        "{out}"
    );
    assert!(
        !virsh(&["secret-list"]).contains(&usage),
        "secret {usage} left"
    );
    assert!(
        out.contains(&format!("removed network namespace {}", namespaces[0])),
        "{out}"
    );
    assert!(vmbench::storage::netns::list(Some(&run_id)).is_empty());
    assert!(firewall(&namespaces[0]).is_none(), "nftables table left");
    let (veth, _) = vmbench::storage::netns::veth_names(&namespaces[0]);
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(&veth),
        "{veth} left"
    );
    assert!(run_domains(&run_id).is_empty());
    assert!(vmbench::cleanup::server_processes(&run.join("servers")).is_empty());
    assert!(!s.work().join(&run_id).exists());
    // The logs stay: they explain the crash.
    assert!(run.join("servers/tgt/tgtd.log").is_file());
    assert!(cleanup(&s).contains("nothing to clean up"));
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn dry_run_prints_cells_xml_skips_and_estimate_and_creates_nothing() {
    let s = Scratch::new();
    let before = virsh(&["list", "--all", "--name"]);
    let out = s.matrix(&[
        "--dry-run",
        "--hypervisor",
        "qemu",
        "--backend",
        "local,iscsi",
        "--format",
        "qcow2,raw",
        "--cache",
        "none,writeback",
        "--io",
        "native",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // 2 backends x 2 formats with cache=none run; the 4 with writeback+native are skipped.
    assert!(
        text.starts_with("4 cell(s) x 1 repeat(s) = 4 run(s), about "),
        "{text}"
    );
    assert!(text.contains(" min in all"), "{text}");
    assert_eq!(text.matches("\nskipped  ").count(), 4, "{text}");
    assert!(text.contains("io=native needs cache=none"), "{text}");
    assert_eq!(text.matches("== cell ").count(), 4, "{text}");
    assert_eq!(text.matches("<domain type=").count(), 4, "{text}");
    assert!(text.contains("protocol=\"iscsi\"") || text.contains("protocol='iscsi'"));
    assert!(!s.runs().exists(), "dry run created a run dir");
    assert!(!s.work().exists(), "dry run created a work dir");
    assert!(!s.db().exists(), "dry run created the store");
    assert_eq!(virsh(&["list", "--all", "--name"]), before);
}
