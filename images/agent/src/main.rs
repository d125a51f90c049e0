//! vmbench-agent: the guest's init. Mounts the basics, loads modules, finds its port, says
//! hello, runs jobs from the host and powers off. As PID 1 it must never panic out: every error
//! is printed on the console, sent to the host when possible, and followed by a power off.

mod hostile;
mod logic;
mod port;
mod steps;
mod sys;

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vmbench_proto::{GuestMsg, Hello, HostMsg, LineDecoder, PROTOCOL_VERSION};

use port::{Port, Writer};

/// Printed before every console line so the host can tell the agent from the kernel.
const LOG_PREFIX: &str = "vmbench-agent: ";
/// How long the host may stay away after a job before the agent gives up and powers off.
const HOST_GONE_AFTER_JOB: Duration = Duration::from_secs(30);
/// How long the agent waits for a host that never connects at all.
const HOST_NEVER_CAME: Duration = Duration::from_secs(600);

/// Prints one line on the console.
fn log(msg: &str) {
    println!("{LOG_PREFIX}{msg}");
}

fn main() {
    let writer: Arc<std::sync::Mutex<Option<Writer>>> = Default::default();
    let w2 = writer.clone();
    let outcome = std::panic::catch_unwind(move || run(&w2));
    let message = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(p) => Some(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    };
    if let Some(m) = message {
        log(&format!("error: {m}"));
        if let Ok(g) = writer.lock() {
            if let Some(w) = g.as_ref() {
                let _ = w.send(&GuestMsg::Error {
                    job: None,
                    message: m,
                });
            }
        }
    }
    log("powering off");
    sys::power_off();
}

/// Everything the agent does; an `Err` ends in a power off.
fn run(slot: &std::sync::Mutex<Option<Writer>>) -> Result<(), String> {
    std::env::set_var("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    early_mounts()?;
    load_modules()?;
    let hello = build_hello();
    let Port {
        mut reader,
        writer,
        pending,
    } = port::open(&hello)?;
    log(&format!("port open: {}", writer.name()));
    if let Ok(mut g) = slot.lock() {
        *g = Some(writer.clone());
    }
    if pending.is_none() {
        writer
            .send(&GuestMsg::Hello(hello))
            .map_err(|e| format!("sending hello: {e}"))?;
    }
    let job = Arc::new(AtomicU64::new(0));
    start_heartbeat(writer.clone(), job.clone());
    serve(&mut reader, &writer, &job, pending)
}

fn early_mounts() -> Result<(), String> {
    let m = |s, t, f, d| sys::mount(s, t, f, d).map_err(|e| e.to_string());
    m("proc", "/proc", "proc", None)?;
    m("sysfs", "/sys", "sysfs", None)?;
    m("devtmpfs", "/dev", "devtmpfs", None)?;
    m("tmpfs", "/run", "tmpfs", Some("mode=0755"))?;
    m("tmpfs", "/tmp", "tmpfs", Some("mode=1777"))?;
    Ok(())
}

fn load_modules() -> Result<(), String> {
    load_module_list("/etc/vmbench/modules.order")?;
    // The SCSI stack only for a guest with a virtio-scsi controller: it cost every other boot
    // about 0.3 s under TCG.
    if logic::has_virtio_scsi(Path::new("/sys")) {
        load_module_list("/etc/vmbench/modules.scsi")?;
    }
    Ok(())
}

/// Loads the modules listed (in order) in `list`; a missing list loads nothing.
fn load_module_list(list: &str) -> Result<(), String> {
    let order = match std::fs::read_to_string(list) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("reading {list}: {e}")),
    };
    let base = Path::new("/lib/modules").join(sys::kernel_release());
    // A module that fails (hardware absent, CPU feature missing) is reported but not fatal:
    // the port search (or the step) that follows says whether the guest can still work.
    for rel in logic::parse_modules_order(&order)? {
        if let Err(e) = sys::load_module(&base.join(&rel)) {
            log(&format!("warning: {e}"));
        }
    }
    Ok(())
}

/// Loads the filesystem, device-mapper and virtio-fs modules, once, before the first step that
/// needs one (boots that only run fio on the raw disk never pay for them).
fn load_on_demand_modules() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| load_module_list("/etc/vmbench/modules.ondemand"))
        .clone()
}

fn build_hello() -> Hello {
    let versions: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string("/etc/vmbench/versions.json")
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    Hello {
        protocol: PROTOCOL_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: sys::kernel_release(),
        fio_version: versions.get("fio").cloned(),
        bonnie_version: versions.get("bonnie++").cloned(),
        cpus: logic::count_cpus(&read("/sys/devices/system/cpu/online")),
        mem_kib: logic::mem_total_kib(&read("/proc/meminfo")),
        block_devices: logic::list_block_devices(Path::new("/sys")),
        uptime_ms: sys::uptime_ms(),
    }
}

fn start_heartbeat(writer: Writer, job: Arc<AtomicU64>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let j = job.load(Ordering::Relaxed);
        let msg = GuestMsg::Heartbeat {
            job: (j != 0).then_some(j),
            uptime_ms: sys::uptime_ms(),
        };
        if writer.send(&msg).is_err() {
            // The port is gone; the main loop will notice and power off.
            return;
        }
    });
}

/// Reads host frames and acts on them until PowerOff or a host that is gone for good.
fn serve(
    reader: &mut std::fs::File,
    writer: &Writer,
    job: &AtomicU64,
    pending: Option<Vec<HostMsg>>,
) -> Result<(), String> {
    let mut decoder = LineDecoder::new();
    let mut jobs_done = 0u32;
    for msg in pending.unwrap_or_default() {
        if handle(msg, writer, job, &mut jobs_done) {
            return Ok(());
        }
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut eof_since: Option<Instant> = None;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(format!("reading the port: {e}")),
        };
        if n == 0 {
            let since = *eof_since.get_or_insert_with(Instant::now);
            let limit = if jobs_done > 0 {
                HOST_GONE_AFTER_JOB
            } else {
                HOST_NEVER_CAME
            };
            if since.elapsed() > limit {
                log("host gone; giving up");
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        eof_since = None;
        let frames = decoder
            .push(&buf[..n])
            .map_err(|e| format!("bad frame from host: {e}"))?;
        for f in frames {
            match vmbench_proto::decode::<HostMsg>(&f) {
                Ok(msg) => {
                    if handle(msg, writer, job, &mut jobs_done) {
                        return Ok(());
                    }
                }
                Err(e) => {
                    let _ = writer.send(&GuestMsg::Error {
                        job: None,
                        message: format!("refused host frame: {e}"),
                    });
                }
            }
        }
    }
}

/// `vmbench.hostile=KIND` from the kernel command line (fault tests only).
fn hostile_kind() -> Option<hostile::Kind> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    logic::cmdline_value(&cmdline, "vmbench.hostile").and_then(hostile::kind)
}

/// Acts on one host message; true means power off now.
fn handle(msg: HostMsg, writer: &Writer, job: &AtomicU64, jobs_done: &mut u32) -> bool {
    match msg {
        HostMsg::PowerOff => {
            log("power off requested");
            true
        }
        HostMsg::Job(j) => {
            log(&format!("job {} with {} steps", j.id, j.steps.len()));
            job.store(j.id, Ordering::Relaxed);
            match hostile_kind() {
                // The measuring job (the one with an engine step) gets the broken answer.
                Some(k)
                    if j.steps
                        .iter()
                        .any(|s| matches!(s, vmbench_proto::Step::Fio { .. }))
                        && j.id > 1 =>
                {
                    log(&format!(
                        "hostile mode {k:?}: answering job {} with broken output",
                        j.id
                    ));
                    let _ = hostile::answer(k, &j, writer);
                }
                _ => steps::run_job(&j, writer),
            }
            job.store(0, Ordering::Relaxed);
            *jobs_done += 1;
            false
        }
    }
}
