//! Issue 8: faults and hostile input against real domains under TCG. Each case breaks one cell
//! run of a matrix (from inside, via a hidden `--inject-fault`, or from outside: virsh suspend,
//! kill -9 of QEMU or of the embedded tgtd) and checks that the cell ends with its specific
//! reason, the rest of the matrix runs, finished results are kept and nothing is left behind.
//! Two matrices (7 cell runs) keep the suite inside the CI budget; bad input costs no VM.
//! The last line printed is the suite's summary (docs/faults.md lists the cases).
use crate::common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmbench::results::{CellResult, Outcome, RunRecord};

/// What the test does to a cell run once its measured job starts.
#[derive(Clone, Copy, Debug)]
enum Outside {
    Nothing,
    Suspend,
    KillQemu,
    KillTgtd,
    KillGanesha,
    KillCephMon,
}

/// One case: which cell run, what is done to it, and what its reason must contain.
struct Case {
    name: &'static str,
    seq: usize,
    action: Outside,
    want: &'static [&'static str],
}

#[derive(Default)]
struct Summary {
    tried: usize,
    expected: usize,
    leftovers: usize,
    lost: usize,
    failures: Vec<String>,
}

impl Summary {
    fn check(&mut self, name: &str, ok: bool, detail: String) {
        self.tried += 1;
        if ok {
            self.expected += 1;
        } else {
            self.failures.push(format!("{name}: {detail}"));
        }
    }
}

/// Runs `vmbench matrix`, doing each case's action when its cell reaches the measured job.
/// Returns the exit code and the seconds from each cell's measured-job start to its end.
fn run_with_actions(s: &Scratch, args: &[&str], cases: &[Case]) -> (Option<i32>, Vec<f64>) {
    let mut child = spawn_within(
        s.matrix_cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        MATRIX_LIMIT,
    );
    let vmbench_pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let out_thread = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let mut cell = 0usize;
    let mut started: Option<Instant> = None;
    let mut secs = vec![];
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        eprintln!("{line}");
        if line.starts_with('[') && line.ends_with(": start") {
            cell = line[1..line.find('/').unwrap()].parse().unwrap();
            started = None;
        } else if line.starts_with('[') && started.is_some() {
            secs.push(started.take().unwrap().elapsed().as_secs_f64());
        }
        let measured = line.trim() == "phase: ramp" || line.trim() == "phase: run";
        if measured && started.is_none() {
            started = Some(Instant::now());
            if let Some(c) = cases.iter().find(|c| c.seq + 1 == cell) {
                act(s, c.action, c.seq, vmbench_pid);
            }
        }
    }
    let status = child.wait().unwrap();
    eprintln!("--- stdout\n{}", out_thread.join().unwrap());
    (status.code(), secs)
}

fn act(s: &Scratch, a: Outside, seq: usize, vmbench_pid: u32) {
    if matches!(a, Outside::Nothing) {
        return;
    }
    let (_, rec) = s.run_record();
    let dom = format!("vmbench-{}-{seq:03}", rec.run_id);
    wait_io_moves(&dom);
    match a {
        Outside::Nothing => {}
        Outside::Suspend => {
            let o = output_within(
                Command::new("virsh").args(["-c", "qemu:///system", "suspend", &dom]),
                TOOL_LIMIT,
            );
            assert!(o.status.success(), "virsh suspend {dom}: {o:?}");
        }
        Outside::KillQemu => {
            let pid = std::fs::read_to_string(format!("/run/libvirt/qemu/{dom}.pid")).unwrap();
            sigkill(pid.trim().parse().unwrap());
        }
        Outside::KillTgtd => {
            // Only our run's tgtd (other runs may have their own): the child of this vmbench.
            let ours: Vec<u32> = pids_named("tgtd")
                .into_iter()
                .filter(|p| parent_of(*p) == Some(vmbench_pid))
                .collect();
            assert_eq!(ours.len(), 1, "tgtd children of vmbench: {ours:?}");
            sigkill(ours[0]);
        }
        Outside::KillGanesha => {
            let ours: Vec<u32> = pids_named("ganesha.nfsd")
                .into_iter()
                .filter(|p| parent_of(*p) == Some(vmbench_pid))
                .collect();
            assert_eq!(ours.len(), 1, "ganesha children of vmbench: {ours:?}");
            sigkill(ours[0]);
        }
        Outside::KillCephMon => {
            // The monitor, not the OSD the watchdog's main pid is: its companion.
            let ours: Vec<u32> = pids_named("ceph-mon")
                .into_iter()
                .filter(|p| parent_of(*p) == Some(vmbench_pid))
                .collect();
            assert_eq!(ours.len(), 1, "ceph-mon children of vmbench: {ours:?}");
            sigkill(ours[0]);
        }
    }
    eprintln!("test: {a:?} on {dom}");
}

/// The domain's read and write requests, summed over its disks (`virsh domblkstat`: QEMU's
/// own block-layer counters).
fn io_requests(dom: &str) -> u64 {
    let o = output_within(
        Command::new("virsh").args(["-c", "qemu:///system", "domblkstat", dom]),
        TOOL_LIMIT,
    );
    assert!(o.status.success(), "virsh domblkstat {dom}: {o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().rev();
            let (n, key) = (w.next()?, w.next()?);
            ["rd_req", "wr_req"]
                .contains(&key)
                .then(|| n.parse::<u64>().ok())?
        })
        .sum()
}

/// Waits (at most 30 s) until the domain's disks see new requests: fio is running.
fn wait_io_moves(dom: &str) {
    let before = io_requests(dom);
    let deadline = Instant::now() + Duration::from_secs(30);
    while io_requests(dom) <= before {
        assert!(
            Instant::now() < deadline,
            "{dom}: no I/O within 30 s of the measured job"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigkill(pid: u32) {
    let r = unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {pid}");
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn reason(c: &CellResult) -> String {
    match &c.outcome {
        Outcome::Failed(r) => r.clone(),
        o => format!("(not failed: {o:?})"),
    }
}

/// Checks each case's cell and the passing ones; counts results lost (a cell run of the plan
/// with no result) and leftovers.
fn judge(sum: &mut Summary, s: &Scratch, rec: &RunRecord, cells: usize, cases: &[Case]) {
    sum.lost += cells.saturating_sub(rec.cells.len());
    for c in cases {
        let Some(cell) = rec.cells.get(c.seq) else {
            sum.check(c.name, false, "no result".into());
            continue;
        };
        let r = reason(cell);
        let ok = c.want.iter().all(|w| r.contains(w));
        eprintln!("case {}: {}", c.name, r.lines().next().unwrap_or(""));
        sum.check(c.name, ok, format!("reason {r:?} lacks {:?}", c.want));
    }
    for (i, cell) in rec.cells.iter().enumerate() {
        if !cases.iter().any(|c| c.seq == i) {
            sum.check(
                &format!("cell {i} after the faults"),
                passed(cell),
                format!("{:?}", cell.outcome),
            );
        }
    }
    sum.leftovers += leftovers(s, Some(&rec.run_id));
}

/// What this scratch's runs left: domains of its run (other engineers' runs share the host, so
/// not every `vmbench-*` domain is ours), files in its work dir, and any process (QEMU, tgtd,
/// ganesha) that still holds a file under the scratch dir or names it on its command line.
fn leftovers(s: &Scratch, run_id: Option<&str>) -> usize {
    let mut found = vec![];
    if let Some(id) = run_id {
        let doms = virsh(&["list", "--all", "--name"]);
        found.extend(
            doms.lines()
                .filter(|l| l.starts_with(&format!("vmbench-{id}")))
                .map(|l| format!("domain {l}")),
        );
    }
    if let Ok(rd) = std::fs::read_dir(s.work()) {
        found.extend(rd.map(|e| format!("work file {:?}", e.unwrap().path())));
    }
    let root = s.dir.path().to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut holds = String::from_utf8_lossy(&cmdline).contains(&root);
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            holds |= fds
                .flatten()
                .filter_map(|f| std::fs::read_link(f.path()).ok())
                .any(|l| l.to_string_lossy().contains(&root));
        }
        if holds {
            found.push(format!(
                "process {pid} {:?}",
                String::from_utf8_lossy(&cmdline)
            ));
        }
    }
    for f in &found {
        eprintln!("LEFTOVER {f}");
    }
    found.len()
}

/// A directory whose name carries XML metacharacters and spaces, reachable by QEMU's user.
fn hostile_dir(s: &Scratch, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = s.dir.path().join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

fn local_matrix(sum: &mut Summary) {
    let s = Scratch::new();
    let local = hostile_dir(&s, "local a&b <c> 'd\"");
    let cases = [
        Case {
            name: "guest kernel panic",
            seq: 0,
            action: Outside::Nothing,
            want: &["guest kernel panic", "Kernel panic", "sysrq"],
        },
        Case {
            name: "guest stops talking (virsh suspend)",
            seq: 1,
            action: Outside::Suspend,
            want: &["timed out after 4 s", "heartbeat", "paused", "console tail"],
        },
        Case {
            name: "QEMU killed (kill -9)",
            seq: 2,
            action: Outside::KillQemu,
            want: &["channel closed", "QEMU exited or was killed"],
        },
    ];
    let (code, secs) = run_with_actions(
        &s,
        &[
            "--backend",
            "local",
            "--format",
            "qcow2,raw",
            "--repeat",
            "2",
            "--no-probe",
            "--local-dir",
            local.to_str().unwrap(),
            "--inject-fault",
            "panic@0",
            "--heartbeat-timeout",
            "4",
        ],
        &cases,
    );
    let (_, rec) = s.run_record();
    judge(sum, &s, &rec, 4, &cases);
    // The panic closed the channel at once: well under the heartbeat timeout, not through it.
    let panic_secs = secs.first().copied().unwrap_or(f64::MAX);
    eprintln!("panic cell: {panic_secs:.1} s from the measured job's start to the cell's end");
    sum.check(
        "panic is seen within seconds",
        panic_secs < 15.0 && !reason(&rec.cells[0]).contains("timed out"),
        format!("{panic_secs} s"),
    );
    sum.check(
        "exit 1 after failed cells",
        code == Some(1),
        format!("{code:?}"),
    );
    let left: Vec<_> = std::fs::read_dir(&local).unwrap().collect();
    sum.check(
        "local dir with metacharacters left empty",
        left.is_empty(),
        format!("{left:?}"),
    );
}

fn iscsi_matrix(sum: &mut Summary) {
    let s = Scratch::new();
    let jobs = hostile_dir(&s, "jobs & <x>");
    let job = jobs.join("unaligned direct.fio");
    // O_DIRECT reads of 1000 bytes: the kernel refuses every I/O (EINVAL), fio says so itself.
    std::fs::write(
        &job,
        "[unaligned]\nrw=read\nbs=1000\nsize=16M\nioengine=libaio\ndirect=1\n",
    )
    .unwrap();
    let file_w = format!("file:{}", job.display());
    let excl = format!("backend=local,workload={file_w}");
    let cases = [
        Case {
            name: "embedded tgtd killed mid-run",
            seq: 1,
            action: Outside::KillTgtd,
            want: &["storage server lost", "tgtd"],
        },
        Case {
            name: "fio fails in the guest (on a restarted tgtd)",
            seq: 2,
            action: Outside::Nothing,
            want: &["fio failed in the guest", "fio:"],
        },
    ];
    let (code, _) = run_with_actions(
        &s,
        &[
            "--backend",
            "local,iscsi",
            "--format",
            "raw",
            "--workload",
            &format!("pg-randrw,{file_w}"),
            "--exclude",
            &excl,
            "--no-probe",
        ],
        &cases,
    );
    let (_, rec) = s.run_record();
    judge(sum, &s, &rec, 3, &cases);
    sum.check(
        "exit 1 after failed cells",
        code == Some(1),
        format!("{code:?}"),
    );
}

fn bad_input(sum: &mut Summary) {
    let s = Scratch::new();
    let toml = s.dir.path().join("bad & <m>.toml");
    std::fs::write(&toml, "backend = [\"local\"\nformat = ").unwrap();
    let toml = toml.to_str().unwrap().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("malformed TOML", vec!["--config", &toml], "bad & <m>.toml"),
        (
            "contradictory --nfs and --nfs-mount",
            vec!["--nfs", "nfs://127.0.0.1/x", "--nfs-mount", "/mnt/x y"],
            "contradict",
        ),
        (
            "unknown fault",
            vec!["--inject-fault", "reboot"],
            "valid: panic",
        ),
        (
            "zero heartbeat timeout",
            vec!["--heartbeat-timeout", "0"],
            "at least 1",
        ),
        (
            "zero fidelity rounds",
            vec!["--fidelity-pairs", "0"],
            "--fidelity-pairs must be at least 1",
        ),
        (
            "unknown fidelity variants",
            vec!["--fidelity-pairs", "1", "--fidelity-variants", "some"],
            "valid: pair, all",
        ),
        (
            "fidelity variants without rounds",
            vec!["--fidelity-variants", "all"],
            "needs --fidelity-pairs",
        ),
        (
            "job file path with .. and metacharacters",
            vec!["--workload", "file:/nonexistent/../a b&<c>.fio"],
            "a b&<c>.fio",
        ),
        (
            "workload name with XML metacharacters",
            vec!["--workload", "<pg>&'"],
            "pg-randrw",
        ),
    ];
    for (name, args, want) in cases {
        let out = s.matrix(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let ok = out.status.code() == Some(2) && err.contains(want) && !s.runs().exists();
        sum.check(name, ok, format!("exit {:?}: {err}", out.status.code()));
    }
    // Hidden options stay out of --help.
    let help = output_within(
        Command::new(env!("CARGO_BIN_EXE_vmbench")).args(["matrix", "--help"]),
        TOOL_LIMIT,
    );
    let help = String::from_utf8_lossy(&help.stdout);
    sum.check(
        "test-only options hidden from --help",
        !help.contains("inject-fault")
            && !help.contains("heartbeat-timeout")
            && !help.contains("fidelity"),
        help.to_string(),
    );
    sum.leftovers += leftovers(&s, None);
}

/// The case docs/faults.md listed as not exercised: the embedded ganesha killed while the guest
/// measures. The same storage watch as for tgtd fails the cell at once; the next NFS cell gets a
/// new ganesha and passes; nothing is left.
#[test]
#[ignore = "host: root libvirtd qemu ganesha"]
fn ganesha_killed_mid_cell() {
    let s = Scratch::new();
    let mut sum = Summary::default();
    let cases = [Case {
        name: "embedded ganesha killed mid-run",
        seq: 0,
        action: Outside::KillGanesha,
        want: &["storage server lost", "ganesha"],
    }];
    let (code, _) = run_with_actions(
        &s,
        &[
            "--backend",
            "nfs",
            "--format",
            "raw",
            "--repeat",
            "2",
            "--no-probe",
        ],
        &cases,
    );
    two_repeats_one_failed(&mut sum, &s, code, &cases);
}

/// The end of a two-repeat run whose first cell a fault failed: each case judged, exit 1,
/// nothing left or lost, every case tried.
fn two_repeats_one_failed(sum: &mut Summary, s: &Scratch, code: Option<i32>, cases: &[Case]) {
    let (_, rec) = s.run_record();
    judge(sum, s, &rec, 2, cases);
    sum.check(
        "exit 1 after a failed cell",
        code == Some(1),
        format!("{code:?}"),
    );
    assert!(sum.failures.is_empty(), "{:#?}", sum.failures);
    assert_eq!((sum.leftovers, sum.lost), (0, 0));
    assert_eq!(sum.tried, sum.expected);
}

/// Issue 30: the Ceph monitor (the OSD's companion) killed in the middle of an RBD cell's job:
/// that cell fails with the reason, the next repeat gets a new cluster and passes; nothing is
/// left.
#[test]
#[ignore = "host: root libvirtd qemu ceph"]
fn ceph_monitor_killed_mid_cell() {
    let s = Scratch::new();
    let mut sum = Summary::default();
    let cases = [Case {
        name: "embedded ceph-mon killed mid-run",
        seq: 0,
        action: Outside::KillCephMon,
        want: &[
            "storage server lost",
            "embedded ceph's stack",
            "Ceph monitor",
        ],
    }];
    let (code, _) = run_with_actions(
        &s,
        &[
            "--backend",
            "rbd",
            "--format",
            "raw",
            "--repeat",
            "2",
            "--no-probe",
        ],
        &cases,
    );
    two_repeats_one_failed(&mut sum, &s, code, &cases);
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn fault_suite() {
    assert!(
        Path::new("/run/libvirt").exists(),
        "libvirtd is not running"
    );
    let mut sum = Summary::default();
    let t = Instant::now();
    bad_input(&mut sum);
    local_matrix(&mut sum);
    iscsi_matrix(&mut sum);
    eprintln!(
        "fault suite: {} cases tried, {} ended as expected, {} leftovers, {} results lost ({:.0} s)",
        sum.tried,
        sum.expected,
        sum.leftovers,
        sum.lost,
        t.elapsed().as_secs_f64()
    );
    for f in &sum.failures {
        eprintln!("  FAILED {f}");
    }
    assert!(sum.failures.is_empty(), "{:#?}", sum.failures);
    assert_eq!(sum.leftovers, 0);
    assert_eq!(sum.lost, 0);
    assert_eq!(sum.tried, sum.expected);
}

/// Hostile numbers in a guest's fio JSON (the guest is untrusted): each is refused with the
/// field named, never turned into a metric. No VM needed.
#[test]
fn impossible_fio_numbers_are_refused() {
    use vmbench::workload::fio;
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fio-host-pg-randrw.json");
    let good = std::fs::read_to_string(p).unwrap();
    assert!(fio::parse(&good).is_ok());
    let j: serde_json::Value = serde_json::from_str(&good).unwrap();
    let iops = j["jobs"][0]["write"]["iops"].to_string();
    for bad in ["-1", "-0.5", "\"NaN\"", "1e999", "null", "\"12\"", "[]"] {
        let text = good.replacen(
            &format!("\"iops\" : {iops}"),
            &format!("\"iops\" : {bad}"),
            2,
        );
        assert_ne!(text, good, "substitution must hit");
        let e = fio::parse(&text).expect_err(bad).to_string();
        assert!(
            e.contains("iops") || e.contains("number") || e.contains("JSON"),
            "{bad}: {e}"
        );
    }
}
