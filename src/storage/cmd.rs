//! Helpers shared by the backends: running a program with arguments (never a shell string),
//! finding processes in /proc, waiting for children, probing ports, and qcow2 sizing.

use super::StorageError;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many stderr/log lines an error quotes.
const TAIL_LINES: usize = 12;

/// Renders a program and its arguments for an error message (not for execution).
pub fn describe<S: AsRef<OsStr>>(program: &str, args: &[S]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

/// Runs `program args...`, returning its stdout; a non-zero exit becomes
/// [`StorageError::Command`] with the status and the tail of stderr.
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String, StorageError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StorageError::Io {
            context: format!("cannot run {program} (is it installed and on PATH?)"),
            source,
        })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    Err(StorageError::Command {
        command: describe(program, args),
        detail: format!("{}: {}", out.status, tail_text(&text, TAIL_LINES)),
    })
}

/// Runs a whole plan (one argv per step), stopping at the first failure.
pub fn run_plan(plan: &[Vec<String>]) -> Result<(), StorageError> {
    for step in plan {
        let (program, args) = step.split_first().ok_or_else(|| {
            StorageError::Invalid("internal: empty command in a plan".to_string())
        })?;
        run(program, args)?;
    }
    Ok(())
}

/// Whether `program` runs at all (found and executable), probed with `arg` (e.g. `--version`).
pub fn available(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The last `n` non-empty lines of `text`, joined with " | " so they fit in one error line.
pub fn tail_text(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join(" | ")
}

/// The last lines of a log file, or a note saying why it cannot be read.
pub fn tail_file(path: &Path) -> String {
    match std::fs::File::open(path) {
        Ok(f) => {
            let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
            tail_text(&lines.join("\n"), TAIL_LINES)
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Live (non-zombie) processes whose command name (`/proc/PID/comm`, 15 chars max) is `comm`.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_comm_state(*pid).is_some_and(|(c, st)| c == comm && st != 'Z'))
        .collect();
    pids.sort_unstable();
    pids
}

/// `(comm, state)` from `/proc/PID/stat`; comm may contain spaces and parens, so split at the
/// last ')'.
fn proc_comm_state(pid: u32) -> Option<(String, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let state = stat.get(close + 1..)?.trim_start().chars().next()?;
    Some((comm, state))
}

/// Whether a process is alive (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    proc_comm_state(pid).is_some_and(|(_, st)| st != 'Z')
}

/// Waits for `child` to exit for up to `timeout`; `true` when it did (and was reaped).
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILLs and reaps. Never leaves the child running.
pub fn terminate(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if !wait_timeout(child, grace) {
        kill_and_reap(child);
    }
}

/// SIGKILL and reap.
pub fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether a TCP port on 127.0.0.1 is free: nobody answers on it and we could bind it (a
/// listener on 0.0.0.0 also makes the bind fail).
pub fn loopback_port_free(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        return false;
    }
    TcpListener::bind(addr).is_ok()
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn loopback_port_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// A port the kernel says is free on 127.0.0.1 right now (bind to port 0 and release it).
pub fn ephemeral_loopback_port() -> Result<u16, StorageError> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| StorageError::Io {
        context: "finding a free port on 127.0.0.1".to_string(),
        source,
    })?;
    let port = l
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| StorageError::Io {
            context: "reading a bound port".to_string(),
            source,
        })?;
    Ok(port)
}

/// qcow2 cluster size we create with (qemu-img's default).
const QCOW2_CLUSTER: u64 = 64 * 1024;

/// An upper bound of the bytes a qcow2 image with virtual size `virtual_bytes` occupies when
/// every cluster is allocated (header, L1, L2, refcount table and blocks, data, plus one spare
/// cluster per table). A qcow2 on a fixed-size device (LUN, LV, partition) must fit this or the
/// guest gets ENOSPC near the end of a full-disk write; `qemu-img measure` gives the exact
/// figure, and a test checks this bound is never below it.
pub fn qcow2_max_size(virtual_bytes: u64) -> u64 {
    let c = QCOW2_CLUSTER;
    let data = virtual_bytes.div_ceil(c);
    let l2 = (data * 8).div_ceil(c);
    let l1 = (l2 * 8).div_ceil(c) + 1;
    let base = 1 + l1 + l2 + 1 + data;
    // Refcounts are 16-bit: one refcount block covers c/2 clusters, including its own.
    let mut total = base;
    loop {
        let blocks = total.div_ceil(c / 2) + 1;
        let table = (blocks * 8).div_ceil(c) + 1;
        let next = base + blocks + table;
        if next <= total {
            return total * c;
        }
        total = next;
    }
}

/// The largest qcow2 virtual size (a multiple of 1 MiB) whose fully allocated image fits in
/// `device_bytes`.
pub fn qcow2_fit(device_bytes: u64) -> u64 {
    const MIB: u64 = 1024 * 1024;
    let overhead = qcow2_max_size(device_bytes).saturating_sub(device_bytes);
    let mut v = device_bytes.saturating_sub(overhead) / MIB * MIB;
    while v > 0 && qcow2_max_size(v) > device_bytes {
        v -= MIB;
    }
    v
}

/// `qemu-img info --output=json TARGET`'s virtual size.
pub fn qemu_img_virtual_size(target: &str) -> Result<u64, StorageError> {
    let out = run("qemu-img", &["info", "--output=json", target])?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| StorageError::Invalid(format!("qemu-img info {target}: bad JSON: {e}")))?;
    v.get("virtual-size")
        .and_then(|s| s.as_u64())
        .ok_or_else(|| {
            StorageError::Invalid(format!(
                "qemu-img info {target}: no virtual-size in its output"
            ))
        })
}

/// A process-unique, run-unique tag (`<pid>-<unix seconds>`) for names that other runs must
/// not reuse (IQNs, LV names).
pub fn run_tag() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{}-{secs}", std::process::id())
}

/// [`run_tag`] plus a process-wide counter: unique across backends and runs, for file and
/// volume names (two backends in the same second must not pick the same name).
pub fn unique_tag() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{}-{n}", run_tag())
}

/// A process's command line as arguments (empty when it is gone or unreadable).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// How a [`wait_until`] ended without success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The process being waited for exited first (its exit status).
    Exited(String),
    /// The deadline passed; the last probe's error.
    TimedOut(String),
}

/// Polls `probe` every `interval` until it succeeds, `exited` reports the process gone, or
/// `timeout` passes: the readiness wait of every embedded server.
pub fn wait_until(
    timeout: Duration,
    interval: Duration,
    exited: impl Fn() -> Option<String>,
    mut probe: impl FnMut() -> Result<(), String>,
) -> Result<(), Waited> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(status) = exited() {
            return Err(Waited::Exited(status));
        }
        match probe() {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(interval);
    }
    Err(Waited::TimedOut(last))
}

/// The exit status of a child kept in a mutex, once it has exited (None while it runs, or when
/// it was already taken).
pub fn child_exited(child: &std::sync::Mutex<Option<Child>>) -> Option<String> {
    let mut guard = child.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .as_mut()?
        .try_wait()
        .ok()
        .flatten()
        .map(|s| s.to_string())
}

/// Every backend creates or formats images with qemu-img.
pub fn require_qemu_img() -> Result<(), super::Unsupported> {
    if available("qemu-img", "--version") {
        Ok(())
    } else {
        Err(super::Unsupported("qemu-img is not installed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_ends_each_way() {
        let ms = Duration::from_millis;
        let mut n = 0;
        let ok = wait_until(
            ms(500),
            ms(1),
            || None,
            || {
                n += 1;
                if n < 3 {
                    Err(format!("try {n}"))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(ok, Ok(()));
        assert_eq!(
            wait_until(ms(500), ms(1), || Some("exit 1".into()), || Ok(())),
            Err(Waited::Exited("exit 1".into()))
        );
        assert_eq!(
            wait_until(ms(20), ms(1), || None, || Err("no".into())),
            Err(Waited::TimedOut("no".into()))
        );
    }

    #[test]
    fn qcow2_bound_is_never_below_qemu_img_measure() {
        for size in [64u64 << 20, 1 << 30, 10_000_000_000, 100 << 30] {
            let s = size.to_string();
            let out = run("qemu-img", &["measure", "-O", "qcow2", "--size", &s]).unwrap();
            let measured: u64 = out
                .lines()
                .find_map(|l| l.strip_prefix("fully allocated size: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap();
            let ours = qcow2_max_size(size);
            assert!(
                ours >= measured,
                "{size}: ours {ours} < qemu-img {measured}"
            );
            // A loose bound would waste device space: stay within 1 MiB of qemu-img's figure.
            assert!(
                ours - measured <= 1 << 20,
                "{size}: ours {ours} vs {measured}"
            );
        }
    }

    #[test]
    fn qcow2_fit_fits_and_is_close() {
        for dev in [64u64 << 20, 1 << 30, (10 << 30) + 12345] {
            let v = qcow2_fit(dev);
            assert!(qcow2_max_size(v) <= dev);
            assert!(
                v > dev - dev / 500 - (3 << 20),
                "{dev}: {v} wastes too much"
            );
        }
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_text("a\n\nb\nc\n", 2), "b | c");
    }

    #[test]
    fn finds_our_own_process() {
        let me = std::process::id();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert!(pids_named(comm.trim()).contains(&me));
        assert!(pid_alive(me));
    }

    #[test]
    fn failed_command_names_it_and_quotes_stderr() {
        let e = run("qemu-img", &["info", "/nonexistent/vmbench-x"]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("qemu-img info /nonexistent/vmbench-x failed"),
            "{s}"
        );
        assert!(s.contains("No such file"), "{s}");
    }
}
