//! Boots the real image under plain QEMU (TCG, no libvirt) and talks to the agent over a
//! virtio-serial port, then over a hvc console found by handshake. Needs root and a built image
//! (the first test run builds it through `ensure`).

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use vmbench::image::{default_cache_dir, ensure, ImageInfo, ImageRequest};
use vmbench_proto::{
    Filesystem, GuestMsg, Hello, HostMsg, Job, LineDecoder, Step, PORT_NAME, TEST_DISK_SERIAL,
};

/// Two TCG guests at once on two cores would only slow each other down.
static SERIAL: Mutex<()> = Mutex::new(());

const DISK_BYTES: u64 = 256 << 20;

fn image() -> ImageInfo {
    let req = ImageRequest {
        cache_dir: default_cache_dir(),
        agent: None,
        force: false,
    };
    ensure(&req, &|m| eprintln!("image: {m}")).expect("image")
}

/// The kernel command line a vmbench cell boots with (so "bare" differs from a cell only in
/// libvirt and the harness), plus `BENCH_APPEND`'s words: scripts/bench-boot --cmdline times a
/// candidate addition against the current line.
fn cmdline() -> String {
    let mut s =
        vmbench::hypervisor::domain_xml::kernel_cmdline(vmbench::cell::Hypervisor::Qemu, None);
    if let Ok(extra) = std::env::var("BENCH_APPEND") {
        if !extra.trim().is_empty() {
            s.push(' ');
            s.push_str(extra.trim());
        }
    }
    s
}

/// Kills QEMU when the test ends, however it ends.
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Guest {
    qemu: Qemu,
    sock: UnixStream,
    dec: LineDecoder,
    queue: VecDeque<GuestMsg>,
    console: PathBuf,
    _dir: tempfile::TempDir,
}

/// How the host channel is wired.
enum Channel {
    /// A virtserialport named org.vmbench.0.
    NamedPort,
    /// An unnamed virtconsole (after a dummy one that takes hvc0), found by handshake.
    Hvc,
}

fn boot(img: &ImageInfo, channel: Channel, disk_bytes: u64) -> Guest {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let disk = dir.path().join("disk.raw");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(disk_bytes)
        .unwrap();
    let sock = dir.path().join("agent.sock");
    let console = dir.path().join("console.log");
    let mut args: Vec<String> = [
        "-machine",
        "accel=tcg",
        "-m",
        "512",
        "-smp",
        "2",
        "-nographic",
        "-no-reboot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["-append".into(), cmdline()]);
    args.extend([
        "-kernel".into(),
        img.kernel.display().to_string(),
        "-initrd".into(),
        img.initrd.display().to_string(),
    ]);
    args.push("-chardev".into());
    args.push(format!(
        "socket,id=ch0,path={},server=on,wait=off",
        sock.display()
    ));
    args.extend(["-device".into(), "virtio-serial".into()]);
    match channel {
        Channel::NamedPort => {
            args.extend([
                "-device".into(),
                format!("virtserialport,chardev=ch0,name={PORT_NAME}"),
            ]);
        }
        Channel::Hvc => {
            args.extend(["-chardev".into(), "null,id=dummy".into()]);
            args.extend(["-device".into(), "virtconsole,chardev=dummy".into()]);
            args.extend(["-device".into(), "virtconsole,chardev=ch0".into()]);
        }
    }
    args.push("-drive".into());
    args.push(format!(
        "file={},format=raw,if=none,id=d0,cache=none,aio=native",
        disk.display()
    ));
    args.extend([
        "-device".into(),
        format!("virtio-blk-pci,drive=d0,serial={TEST_DISK_SERIAL}"),
    ]);
    let log = std::fs::File::create(&console).unwrap();
    let child = Command::new("qemu-system-x86_64")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("qemu-system-x86_64");
    let qemu = Qemu(child);
    let t = Instant::now();
    let sock = loop {
        if let Ok(s) = UnixStream::connect(&sock) {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "QEMU made no socket");
        std::thread::sleep(Duration::from_millis(20));
    };
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    Guest {
        qemu,
        sock,
        dec: LineDecoder::new(),
        queue: VecDeque::new(),
        console,
        _dir: dir,
    }
}

impl Guest {
    fn console_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.console).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn recv(&mut self, within: Duration) -> GuestMsg {
        let t = Instant::now();
        let mut buf = [0u8; 65536];
        loop {
            if let Some(m) = self.queue.pop_front() {
                return m;
            }
            assert!(
                t.elapsed() < within,
                "no guest message within {within:?}; console:\n{}",
                self.console_tail()
            );
            match self.sock.read(&mut buf) {
                Ok(0) => panic!("socket closed; console:\n{}", self.console_tail()),
                Ok(n) => {
                    for f in self.dec.push(&buf[..n]).unwrap() {
                        self.queue.push_back(vmbench_proto::decode(&f).unwrap());
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("socket read: {e}"),
            }
        }
    }

    fn hello(&mut self) -> Hello {
        match self.recv(Duration::from_secs(180)) {
            GuestMsg::Hello(h) => h,
            other => panic!("first message was not hello: {other:?}"),
        }
    }

    fn send(&mut self, msg: &HostMsg) {
        self.sock
            .write_all(&vmbench_proto::encode(msg).unwrap())
            .unwrap();
    }

    /// Sends PowerOff and waits for QEMU to exit by itself.
    fn power_off(mut self) -> String {
        self.send(&HostMsg::PowerOff);
        let t = Instant::now();
        loop {
            if let Some(st) = self.qemu.0.try_wait().unwrap() {
                assert!(st.success(), "qemu exit status {st}");
                return std::fs::read_to_string(&self.console).unwrap_or_default();
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "QEMU still running 30 s after PowerOff:\n{}",
                self.console_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct JobResult {
    statuses: Vec<String>,
    blobs: BTreeMap<String, String>,
    steps: Vec<(u32, i32, String)>,
    ok: bool,
}

fn run_job(g: &mut Guest, job: Job) -> JobResult {
    let id = job.id;
    g.send(&HostMsg::Job(job));
    let mut r = JobResult {
        statuses: vec![],
        blobs: BTreeMap::new(),
        steps: vec![],
        ok: false,
    };
    let mut next_seq: BTreeMap<String, u32> = BTreeMap::new();
    loop {
        match g.recv(Duration::from_secs(180)) {
            GuestMsg::Status { job, line, .. } if job == id => r.statuses.push(line),
            GuestMsg::Blob {
                job,
                name,
                seq,
                data,
                ..
            } if job == id => {
                let want = next_seq.entry(name.clone()).or_default();
                assert_eq!(seq, *want, "blob {name} chunk out of order");
                *want += 1;
                r.blobs.entry(name).or_default().push_str(&data);
            }
            GuestMsg::StepDone {
                job,
                step,
                exit_code,
                stderr_tail,
                ..
            } if job == id => r.steps.push((step, exit_code, stderr_tail)),
            GuestMsg::JobDone { job, ok } if job == id => {
                r.ok = ok;
                return r;
            }
            GuestMsg::Error { message, .. } => {
                panic!("agent error: {message}\n{}", g.console_tail())
            }
            GuestMsg::Heartbeat { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

const PG_RANDRW: &str = "[global]
ioengine=libaio
direct=1
filename={disk}
size=64M
runtime=3
time_based=1
ramp_time=0
group_reporting=1
log_avg_msec=1000

[pg-randrw]
rw=randrw
rwmixread=70
bs=8k
iodepth=16
numjobs=1
write_iops_log=pg
write_bw_log=pg
write_lat_log=pg
";

fn save_fixture(name: &str, text: &str) {
    if std::env::var_os("VMBENCH_UPDATE_FIXTURES").is_some() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        std::fs::write(p, text).unwrap();
    }
}

#[test]
#[ignore = "host: root qemu"]
fn agent_runs_fio_over_virtio_serial_and_powers_off() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let img = image();
    let mut g = boot(&img, Channel::NamedPort, DISK_BYTES);
    let h = g.hello();
    assert_eq!(h.protocol, vmbench_proto::PROTOCOL_VERSION);
    assert!(
        h.fio_version
            .as_deref()
            .is_some_and(|v| v.starts_with("fio-")),
        "{h:?}"
    );
    assert_eq!(h.kernel, img.versions["kernel_release"]);
    assert_eq!(h.cpus, 2);
    assert!(h.mem_kib > 400_000, "{h:?}");
    let disk = h
        .block_devices
        .iter()
        .find(|d| d.serial.as_deref() == Some(TEST_DISK_SERIAL));
    assert_eq!(
        disk.map(|d| d.size_bytes),
        Some(DISK_BYTES),
        "{:?}",
        h.block_devices
    );

    let job = Job {
        id: 7,
        disk_serial: TEST_DISK_SERIAL.into(),
        steps: vec![
            Step::DropCaches,
            Step::Fio {
                job_text: PG_RANDRW.into(),
                args: vec![],
                output_name: "fio.json".into(),
                log_prefix: Some("pg".into()),
            },
        ],
    };
    let r = run_job(&mut g, job);
    assert!(r.ok, "job failed: {:?}", r.steps);
    assert_eq!(
        r.steps.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        [(0, 0), (1, 0)]
    );
    assert!(!r.statuses.is_empty(), "no fio status lines");
    let json = &r.blobs["fio.json"];
    let v: serde_json::Value = serde_json::from_str(json).expect("fio JSON");
    let jobs = v["jobs"].as_array().expect("jobs array");
    assert_eq!(jobs[0]["jobname"], "pg-randrw");
    assert!(jobs[0]["read"]["io_bytes"].as_u64().unwrap() > 0);
    assert!(jobs[0]["write"]["io_bytes"].as_u64().unwrap() > 0);
    assert!(
        r.blobs.keys().any(|k| k.starts_with("pg_iops")),
        "logs: {:?}",
        r.blobs.keys()
    );
    let console = g.power_off();
    assert!(
        console.contains("vmbench-agent: port open: /dev/vport"),
        "{console}"
    );
    save_fixture("fio-guest-pg-randrw.json", json);
    save_fixture("console-agent-boot.log", &console);
    eprintln!("statuses: {:?}", &r.statuses[..r.statuses.len().min(3)]);
}

#[test]
#[ignore = "host: root qemu"]
fn agent_finds_hvc_console_by_handshake() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let img = image();
    let mut g = boot(&img, Channel::Hvc, DISK_BYTES);
    let h = g.hello();
    assert!(h
        .block_devices
        .iter()
        .any(|d| d.serial.as_deref() == Some(TEST_DISK_SERIAL)));
    let job = Job {
        id: 1,
        disk_serial: TEST_DISK_SERIAL.into(),
        steps: vec![
            Step::Mkfs {
                fs: Filesystem::Ext4,
                volume: Default::default(),
            },
            Step::DropCaches,
        ],
    };
    let r = run_job(&mut g, job);
    assert!(r.ok && r.steps.len() == 2, "{:?}", r.steps);
    let console = g.power_off();
    let line = console
        .lines()
        .find(|l| l.contains("port open:"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("/dev/hvc"), "{console}");
    save_fixture("console-agent-hvc.log", &console);
    eprintln!("hvc handshake: {line}");
}

/// The agent alone making XFS and running bonnie++: it refreshes the fixture
/// tests/fixtures/bonnie-guest-xfs.csv. Not in the suite: its steps run end to end there
/// (tests/matrix_workloads.rs: the xfs layout cell, and the bonnie++ cell on an LVM volume).
#[test]
#[ignore = "fixture: VMBENCH_UPDATE_FIXTURES=1 refreshes tests/fixtures/bonnie-guest-xfs.csv; its Mkfs xfs and bonnie++ steps run in matrix_workloads' cells"]
fn agent_makes_xfs_and_runs_bonnie() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // xfsprogs and bonnie++ are in the extra archive (Initrd::Full), as for a matrix cell.
    let mut img = image();
    img.initrd = img.initrd_full.clone();
    // mkfs.xfs refuses filesystems under 300 MB.
    let mut g = boot(&img, Channel::NamedPort, 512 << 20);
    let h = g.hello();
    assert!(h.bonnie_version.is_some(), "{h:?}");
    let bonnie = [
        "-d", "{dir}", "-u", "root", "-s", "64", "-r", "32", "-n", "1", "-q",
    ];
    let job = Job {
        id: 3,
        disk_serial: TEST_DISK_SERIAL.into(),
        steps: vec![
            Step::Mkfs {
                fs: Filesystem::Xfs,
                volume: Default::default(),
            },
            Step::Bonnie {
                args: bonnie.iter().map(|s| s.to_string()).collect(),
                output_name: "bonnie.txt".into(),
            },
        ],
    };
    let r = run_job(&mut g, job);
    assert!(r.ok, "{:?}", r.steps);
    let out = &r.blobs["bonnie.txt"];
    // -q: one CSV record; its first field is the format version, the third the host name.
    let rec: Vec<&str> = out
        .lines()
        .find(|l| l.matches(',').count() > 20)
        .unwrap_or_else(|| panic!("{out}"))
        .split(',')
        .collect();
    assert!(rec[0].starts_with('1'), "{out}");
    save_fixture("bonnie-guest-xfs.csv", out);
    g.power_off();
}

/// Boot latency: QEMU start to the agent's first byte on the socket, `BENCH_BOOTS` runs (5).
/// Run by scripts/bench-boot, one boot at a time between vmbench cells (ignored in the normal
/// test run: it takes about a minute).
#[test]
#[ignore = "benchmark: timing only (its checks are agent_runs_fio_over_virtio_serial_and_powers_off's); scripts/bench-boot runs it"]
fn bench_boot_to_first_byte() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let img = image();
    let boots: usize = std::env::var("BENCH_BOOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut times = Vec::new();
    for run in 0..boots {
        let t0 = Instant::now();
        let mut g = boot(&img, Channel::NamedPort, DISK_BYTES);
        g.sock
            .set_read_timeout(Some(Duration::from_secs(180)))
            .unwrap();
        let mut first = [0u8; 1];
        assert_eq!(
            g.sock.read(&mut first).unwrap(),
            1,
            "no byte; console:\n{}",
            g.console_tail()
        );
        let dt = t0.elapsed();
        g.sock
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        g.dec.push(&first).unwrap();
        let h = g.hello();
        eprintln!(
            "run {run}: first byte after {:.3} s (guest uptime at hello {} ms)",
            dt.as_secs_f64(),
            h.uptime_ms
        );
        times.push(dt);
        g.power_off();
    }
    times.sort();
    println!(
        "boot-to-first-byte over {} runs: min {:.3} s, median {:.3} s; initrd {} bytes ({:.2} MiB)",
        times.len(),
        times[0].as_secs_f64(),
        times[times.len() / 2].as_secs_f64(),
        img.initrd_bytes,
        img.initrd_bytes as f64 / (1 << 20) as f64
    );
}
