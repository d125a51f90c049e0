//! Running a job's steps and reporting each one.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmbench_proto::{Filesystem, GuestMsg, Job, Step, Volume, TEST_MOUNTPOINT};

use crate::logic::{self, Tail};
use crate::port::Writer;
use crate::{log, sys};

/// fio's working directory inside the guest.
const JOB_DIR: &str = "/run/job";
/// Lines of stderr kept for StepDone.
const TAIL_LINES: usize = 20;
/// Status lines are forwarded at most this often.
const STATUS_EVERY: Duration = Duration::from_millis(500);

/// What a step ended with.
struct Outcome {
    exit_code: i32,
    stderr_tail: String,
}

impl Outcome {
    fn ok() -> Self {
        Self {
            exit_code: 0,
            stderr_tail: String::new(),
        }
    }
}

/// Runs every step in order, stopping at the first failure; always ends with JobDone.
pub fn run_job(job: &Job, w: &Writer) {
    // A job on a shared host directory (virtio-fs) has no disk under test: the disk is only
    // looked up, and its absence only an error, for the steps that use it.
    let devs = logic::list_block_devices(Path::new("/sys"));
    let disk: Disk =
        logic::resolve_disk(&devs, &job.disk_serial).map(|d| format!("/dev/{}", d.name));
    let mut ok = true;
    for (i, step) in job.steps.iter().enumerate() {
        let idx = i as u32;
        let start = Instant::now();
        let out = run_step(job.id, idx, step, &disk, w).unwrap_or_else(|message| {
            log(&format!("job {} step {idx}: {message}", job.id));
            let _ = w.send(&GuestMsg::Error {
                job: Some(job.id),
                message: message.clone(),
            });
            Outcome {
                exit_code: -1,
                stderr_tail: message,
            }
        });
        let _ = w.send(&GuestMsg::StepDone {
            job: job.id,
            step: idx,
            exit_code: out.exit_code,
            stderr_tail: out.stderr_tail,
            duration_ms: start.elapsed().as_millis() as u64,
        });
        if out.exit_code != 0 {
            ok = false;
            break;
        }
    }
    let _ = w.send(&GuestMsg::JobDone { job: job.id, ok });
}

/// The disk under test's device path, or why there is none.
type Disk = Result<String, String>;

/// Substitutes `{disk}` (and `{dir}`) in `text`; `{disk}` without a disk is an error.
fn substitute(text: &str, disk: &Disk) -> Result<String, String> {
    match disk {
        Ok(d) => Ok(logic::substitute(text, d)),
        Err(e) if text.contains("{disk}") => Err(e.clone()),
        Err(_) => Ok(logic::substitute(text, "")),
    }
}

fn run_step(job: u64, idx: u32, step: &Step, disk: &Disk, w: &Writer) -> Result<Outcome, String> {
    match step {
        Step::DropCaches => {
            sys::sync();
            write_proc("/proc/sys/vm/drop_caches", "3")?;
            Ok(Outcome::ok())
        }
        Step::Mkfs { fs, volume } => {
            let disk = disk.as_deref().map_err(Clone::clone)?;
            crate::load_on_demand_modules()?;
            let target = match volume {
                Volume::Whole => disk.to_string(),
                Volume::Partition => partition(disk)?,
                Volume::Lvm => lvm_volume(disk)?,
                Volume::SplitPartition | Volume::SplitLvm => {
                    return mkfs_split(*fs, disk, *volume == Volume::SplitLvm)
                }
            };
            mkfs(*fs, &target)
        }
        Step::Fio {
            job_text,
            args,
            output_name,
            log_prefix,
        } => {
            let args = args
                .iter()
                .map(|a| substitute(a, disk))
                .collect::<Result<Vec<_>, _>>()?;
            fio(
                job,
                idx,
                &substitute(job_text, disk)?,
                &args,
                output_name,
                log_prefix.as_deref(),
                w,
            )
        }
        Step::Bonnie { args, output_name } => {
            let args = args
                .iter()
                .map(|a| substitute(a, disk))
                .collect::<Result<Vec<_>, _>>()?;
            bonnie(job, &args, output_name, w)
        }
        Step::MountVirtiofs { tag } => {
            crate::load_on_demand_modules()?;
            mount_virtiofs(tag)
        }
        Step::Sysrq { key } => {
            write_proc("/proc/sys/kernel/sysrq", "1")?;
            write_proc("/proc/sysrq-trigger", &key.to_string())?;
            Ok(Outcome::ok())
        }
    }
}

fn write_proc(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {path}: {e}"))
}

fn mkfs(fs: Filesystem, disk: &str) -> Result<Outcome, String> {
    let made = make_fs(fs, disk)?;
    if made.exit_code != 0 {
        return Ok(made);
    }
    mount_made(fs, disk, &made.stderr_tail)
}

/// The split disk ([`Volume::SplitPartition`], [`Volume::SplitLvm`]): two partitions, a PV, VG
/// and LV on partition 2, the filesystem made on partition 1 and on the LV, in that order,
/// whichever side is measured, so both layouts leave the same disk; only the measured side
/// (the LV when `on_lvm`) is mounted.
fn mkfs_split(fs: Filesystem, disk: &str, on_lvm: bool) -> Result<Outcome, String> {
    let (first, second) = split_partitions(disk)?;
    let lv = lvm_volume(&second)?;
    let mut tails = String::new();
    for dev in [&first, &lv] {
        let made = make_fs(fs, dev)?;
        if made.exit_code != 0 {
            return Ok(made);
        }
        if !made.stderr_tail.is_empty() {
            tails.push_str(&made.stderr_tail);
            tails.push('\n');
        }
    }
    mount_made(fs, if on_lvm { &lv } else { &first }, &tails)
}

/// Runs the filesystem's mkfs on `disk`: a non-zero exit code is an outcome, not an error.
fn make_fs(fs: Filesystem, disk: &str) -> Result<Outcome, String> {
    let (prog, args): (&str, Vec<&str>) = match fs {
        Filesystem::Ext4 => ("mke2fs", vec!["-F", "-q", "-t", "ext4", disk]),
        Filesystem::Xfs => ("mkfs.xfs", vec!["-f", "-q", disk]),
    };
    let out = Command::new(prog)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting {prog}: {e}"))?;
    Ok(Outcome {
        exit_code: out.status.code().unwrap_or(-1),
        stderr_tail: logic::tail_lines(&String::from_utf8_lossy(&out.stderr), TAIL_LINES),
    })
}

/// Mounts the filesystem just made on `disk` on the test mountpoint; the outcome's tail is
/// mkfs's `tail` and the line naming the device.
fn mount_made(fs: Filesystem, disk: &str, tail: &str) -> Result<Outcome, String> {
    let fstype = match fs {
        Filesystem::Ext4 => "ext4",
        Filesystem::Xfs => "xfs",
    };
    sys::mount(disk, TEST_MOUNTPOINT, fstype, None).map_err(|e| e.to_string())?;
    // The host records this line: which device the filesystem went on.
    Ok(Outcome {
        exit_code: 0,
        stderr_tail: format!("{tail}{MOUNTED_PREFIX}{disk} ({fstype})")
            .trim()
            .to_string(),
    })
}

/// Mounts the host directory shared under `tag` (virtio-fs) on the test mountpoint.
fn mount_virtiofs(tag: &str) -> Result<Outcome, String> {
    sys::mount(tag, TEST_MOUNTPOINT, "virtiofs", None).map_err(|e| {
        format!("{e} (is the virtiofs module in the image, and the tag {tag:?} in the domain?)")
    })?;
    Ok(Outcome {
        exit_code: 0,
        stderr_tail: format!("{}{tag} (virtiofs)", MOUNTED_PREFIX.trim_start()),
    })
}

/// Start of the line naming the device the filesystem was mounted from.
const MOUNTED_PREFIX: &str = "\nvmbench-agent: mounted ";

/// Writes an MBR with one primary partition over `disk`, has the kernel re-read it and returns
/// the partition's device path.
fn partition(disk: &str) -> Result<String, String> {
    write_table(disk, &logic::mbr_one_partition(disk_sectors(disk)?)?)?;
    partition_node(disk, 1)
}

/// Writes an MBR splitting `disk` in two primary partitions of one size (Linux, then Linux
/// LVM), has the kernel re-read it and returns the two partitions' device paths.
fn split_partitions(disk: &str) -> Result<(String, String), String> {
    write_table(disk, &logic::mbr_two_partitions(disk_sectors(disk)?)?)?;
    Ok((partition_node(disk, 1)?, partition_node(disk, 2)?))
}

/// The size of `disk` in 512-byte sectors, from sysfs.
fn disk_sectors(disk: &str) -> Result<u64, String> {
    let name = disk.trim_start_matches("/dev/");
    std::fs::read_to_string(format!("/sys/block/{name}/size"))
        .map_err(|e| format!("size of {disk}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("size of {disk}: {e}"))
}

/// Writes `mbr` as the first sector of `disk` and has the kernel re-read the partition table.
fn write_table(disk: &str, mbr: &[u8; 512]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .map_err(|e| format!("opening {disk}: {e}"))?;
    f.write_all(mbr)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("writing the partition table of {disk}: {e}"))?;
    const BLKRRPART: libc::c_ulong = 0x125f;
    // SAFETY: fd is open for the call; BLKRRPART takes no argument.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKRRPART) } != 0 {
        return Err(format!(
            "re-reading the partition table of {disk}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The device path of partition `n` of `disk`, once the kernel knows it.
fn partition_node(disk: &str, n: u32) -> Result<String, String> {
    let name = disk.trim_start_matches("/dev/");
    let part_name = logic::partition_name(name, n);
    let part = format!("/dev/{part_name}");
    // The kernel knows the partition once its sysfs entry exists; devtmpfs normally makes the
    // node too, but nothing else would (no udev), so make it from sysfs if it is missing.
    let sys_dev = format!("/sys/block/{name}/{part_name}/dev");
    wait_for(Path::new(&sys_dev))?;
    ensure_node(&sys_dev, &part)?;
    Ok(part)
}

/// The kernel registers devices asynchronously: waits up to 5 s for a path to exist.
fn wait_for(node: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !node.exists() {
        if Instant::now() > deadline {
            return Err(format!("{} did not appear within 5 s", node.display()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Makes the block device node `node` from sysfs's `MAJOR:MINOR` in `sys_dev`, unless devtmpfs
/// made it within a second.
fn ensure_node(sys_dev: &str, node: &str) -> Result<(), String> {
    if wait_for_short(Path::new(node)) {
        return Ok(());
    }
    let text = std::fs::read_to_string(sys_dev).map_err(|e| format!("reading {sys_dev}: {e}"))?;
    let (major, minor) = logic::parse_dev_numbers(&text)?;
    sys::mknod_block(node, major, minor).map_err(|e| format!("mknod {node}: {e}"))
}

fn wait_for_short(node: &Path) -> bool {
    for _ in 0..20 {
        if node.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    node.exists()
}

/// Volume group and logical volume the agent makes on the disk under test.
const VG: &str = "vmbench";
const LV: &str = "test";

/// Makes a PV on `disk`, a VG on it and one LV over all of it with lvm2; returns the LV's path.
fn lvm_volume(disk: &str) -> Result<String, String> {
    // No udev in the guest: lvm makes the /dev nodes and must not wait for udev.
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    std::fs::create_dir_all("/etc/lvm").map_err(|e| io("/etc/lvm", e))?;
    std::fs::write("/etc/lvm/lvm.conf", logic::LVM_CONF).map_err(|e| io("lvm.conf", e))?;
    for d in ["/run/lock/lvm", "/run/lvm"] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    lvm(&["pvcreate", "-ff", "-y", disk])?;
    lvm(&["vgcreate", VG, disk])?;
    lvm(&["lvcreate", "-y", "-Wn", "-n", LV, "-l", "100%FREE", VG])?;
    lvm(&["vgmknodes", VG])?;
    let path = format!("/dev/mapper/{VG}-{LV}");
    wait_for(Path::new(&path))?;
    Ok(path)
}

/// Runs one `lvm` subcommand; a failure carries its stderr tail.
fn lvm(args: &[&str]) -> Result<(), String> {
    let out = Command::new("lvm")
        .args(args)
        .env("LVM_SUPPRESS_FD_WARNINGS", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting lvm {} (is lvm2 in the image?): {e}", args[0]))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "lvm {} failed ({}): {}",
        args.join(" "),
        out.status,
        logic::tail_lines(&String::from_utf8_lossy(&out.stderr), TAIL_LINES)
    ))
}

/// Collects the tail of a child's stderr on its own thread.
fn tail_thread(stderr: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut t = Tail::new(TAIL_LINES);
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            t.push(String::from_utf8_lossy(&line).into_owned());
        }
        t.text()
    })
}

fn fio(
    job: u64,
    idx: u32,
    text: &str,
    args: &[String],
    output_name: &str,
    log_prefix: Option<&str>,
    w: &Writer,
) -> Result<Outcome, String> {
    let dir = Path::new(JOB_DIR);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {JOB_DIR}: {e}"))?;
    std::fs::write(dir.join("job.fio"), text).map_err(|e| format!("writing job.fio: {e}"))?;
    let mut child = Command::new("fio")
        .current_dir(dir)
        .arg("--output-format=json")
        .arg(format!("--output={output_name}"))
        .args(["--eta=always", "--eta-newline=1"])
        .args(args)
        .arg("job.fio")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting fio: {e}"))?;
    let stderr = tail_thread(child.stderr.take().ok_or("fio stderr missing")?);
    let stdout = child.stdout.take().ok_or("fio stdout missing")?;
    forward_status(job, idx, stdout, w);
    let status = child.wait().map_err(|e| format!("waiting for fio: {e}"))?;
    let stderr_tail = stderr.join().unwrap_or_default();
    let code = status.code().unwrap_or(-1);
    let out_path = dir.join(output_name);
    if out_path.exists() {
        ship(job, output_name, &out_path, w)?;
    } else if code == 0 {
        return Err(format!("fio exited 0 but wrote no {output_name}"));
    }
    if let Some(prefix) = log_prefix.filter(|p| !p.is_empty()) {
        let files = logic::files_with_prefix(dir, prefix).map_err(|e| e.to_string())?;
        for f in files.iter().filter(|f| f.as_str() != output_name) {
            ship(job, f, &dir.join(f), w)?;
        }
    }
    Ok(Outcome {
        exit_code: code,
        stderr_tail,
    })
}

/// Sends fio's eta lines (split on CR or LF) as Status, at most one per [`STATUS_EVERY`].
fn forward_status(job: u64, step: u32, stdout: impl Read, w: &Writer) {
    let mut last: Option<Instant> = None;
    let mut r = BufReader::new(stdout);
    let mut line = Vec::new();
    let mut byte = [0u8; 4096];
    let mut emit = |raw: &[u8]| {
        let s = String::from_utf8_lossy(raw).trim().to_string();
        if s.is_empty() || last.is_some_and(|t| t.elapsed() < STATUS_EVERY) {
            return;
        }
        last = Some(Instant::now());
        let _ = w.send(&GuestMsg::Status { job, step, line: s });
    };
    while let Ok(n) = r.read(&mut byte) {
        if n == 0 {
            break;
        }
        for &b in &byte[..n] {
            if b == b'\n' || b == b'\r' {
                emit(&line);
                line.clear();
            } else if line.len() < 4096 {
                line.push(b);
            }
        }
    }
    emit(&line);
}

/// Sends a file as Blob chunks; it must be UTF-8 text.
fn ship(job: u64, name: &str, path: &Path, w: &Writer) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{name} is not UTF-8 text"))?;
    send_text(job, name, &text, w)
}

fn send_text(job: u64, name: &str, text: &str, w: &Writer) -> Result<(), String> {
    let chunks = vmbench_proto::chunk_text(text);
    let n = chunks.len();
    for (seq, data) in chunks.into_iter().enumerate() {
        let msg = GuestMsg::Blob {
            job,
            name: name.to_string(),
            seq: seq as u32,
            last: seq + 1 == n,
            data: data.to_string(),
        };
        w.send(&msg)
            .map_err(|e| format!("sending blob {name}: {e}"))?;
    }
    Ok(())
}

fn bonnie(job: u64, args: &[String], output_name: &str, w: &Writer) -> Result<Outcome, String> {
    let out = Command::new("bonnie++")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting bonnie++: {e}"))?;
    let text =
        String::from_utf8(out.stdout).map_err(|_| "bonnie++ output is not UTF-8".to_string())?;
    send_text(job, output_name, &text, w)?;
    Ok(Outcome {
        exit_code: out.status.code().unwrap_or(-1),
        stderr_tail: logic::tail_lines(&String::from_utf8_lossy(&out.stderr), TAIL_LINES),
    })
}
