//! One cell, end to end: provision the disk, start a transient domain, wait for the agent's
//! hello, prefill, measure (host-side figures over the same window), collect, power off, tear
//! down. Every way out of a cell (success, failure, timeout, Ctrl-C) destroys the domain (the
//! handle's Drop) and tears the disk down (the caller's guard).

use super::config::{parse_size, MatrixConfig};
use super::faults;
use super::progress::{parse_fio_eta, Output, Phase, Ui};
use crate::cell::{Cell, Hypervisor, WorkloadId};
use crate::guest::{channel::Channel, Guest, JobEvent, JobLimits, JobOutput};
use crate::hypervisor::libvirt::{Libvirt, RunningDomain};
use crate::hypervisor::{domain_xml, DiskSpec, DomainSpec};
use crate::image::ImageInfo;
use crate::metrics::{self, qmp, Sources};
use crate::results::{CellResult, Metric, Outcome, Provenance, Timings};
use crate::storage::{ProvisionedDisk, StorageBackend};
use crate::workload::{self, bonnie, fio, Engine};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use vmbench_proto::{Job, Step, TEST_DISK_SERIAL, TEST_MOUNTPOINT};

/// Set by SIGINT/SIGTERM; every wait in a cell also waits on it.
#[derive(Default)]
pub struct Cancel {
    flag: AtomicBool,
    notify: Notify,
}

impl Cancel {
    /// Requests cancellation.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
    /// Resolves when cancelled.
    pub async fn cancelled(&self) {
        loop {
            let n = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            n.await;
        }
    }
}

/// What a cell needs from the matrix run.
pub struct CellEnv<'a> {
    /// The configuration.
    pub cfg: &'a MatrixConfig,
    /// The connection for this cell's hypervisor.
    pub conn: &'a Libvirt,
    /// The guest image.
    pub image: &'a ImageInfo,
    /// Run id (in domain names and markers).
    pub run_id: &'a str,
    /// Private work directory of the run (disks, sockets).
    pub work_dir: &'a Path,
    /// Progress.
    pub ui: &'a Ui,
    /// Interrupt flag.
    pub cancel: &'a Cancel,
    /// The embedded storage server serving this cell, if any: (name, pid).
    pub server: Option<(&'static str, u32)>,
    /// The host half of the provenance (filled once per run).
    pub provenance: &'a Provenance,
}

/// Why a cell did not pass.
#[derive(Debug)]
struct CellFailure {
    reason: String,
}

impl<E: std::fmt::Display> From<E> for CellFailure {
    fn from(e: E) -> Self {
        CellFailure {
            reason: e.to_string(),
        }
    }
}

/// Runs one cell run. The caller owns `backend` and tears it down after this returns.
pub async fn run_cell(
    env: &CellEnv<'_>,
    backend: &mut dyn StorageBackend,
    cell: &Cell,
    repeat: u32,
    seq: usize,
    dir: &Path,
) -> CellResult {
    let t0 = Instant::now();
    let mut timings = Timings::default();
    let mut params = BTreeMap::new();
    let mut provenance = env.provenance.clone();
    let res = attempt(
        env,
        backend,
        cell,
        seq,
        dir,
        &mut timings,
        &mut params,
        &mut provenance,
    )
    .await;
    timings.total_ms = t0.elapsed().as_millis() as u64;
    let (outcome, metrics, samples) = match res {
        Ok((m, s)) => (Outcome::Passed, m, s),
        Err(f) if env.cancel.is_cancelled() => (
            Outcome::Failed(format!("interrupted: {}", f.reason)),
            vec![],
            BTreeMap::new(),
        ),
        Err(f) => (Outcome::Failed(f.reason), vec![], BTreeMap::new()),
    };
    CellResult {
        cell: cell.clone(),
        cell_id: cell.id(),
        repeat,
        outcome,
        metrics,
        params,
        provenance,
        timings,
        samples,
    }
}

type Measured = (Vec<Metric>, BTreeMap<String, Vec<f64>>);
/// Metrics, per-second samples, and the engine's measured seconds.
type Parsed = (Vec<Metric>, BTreeMap<String, Vec<f64>>, Option<f64>);

#[allow(clippy::too_many_arguments)]
async fn attempt(
    env: &CellEnv<'_>,
    backend: &mut dyn StorageBackend,
    cell: &Cell,
    seq: usize,
    dir: &Path,
    timings: &mut Timings,
    params: &mut BTreeMap<String, String>,
    prov: &mut Provenance,
) -> Result<Measured, CellFailure> {
    let cfg = env.cfg;
    let plan = WorkPlan::new(cfg, cell, env.image)?;
    env.ui.send(Output::Phase(Phase::Provision));
    let t = Instant::now();
    let cell_work = env.work_dir.join(format!("cell-{seq:03}"));
    make_dir(&cell_work, 0o711)?;
    let disk =
        tokio::task::block_in_place(|| backend.provision(cell, plan.disk_bytes, &cell_work))?;
    timings.provision_ms = t.elapsed().as_millis() as u64;
    params.extend(disk.params.clone());
    params.insert("disk_bytes".into(), disk.size_bytes.to_string());
    if cell.hypervisor == Hypervisor::Xen {
        let dp = crate::hypervisor::xen::datapath(
            cell.backend,
            cell.format,
            cfg.storage.nfs_mount.is_some(),
        )?;
        params.insert("datapath".into(), dp.to_string());
    } else {
        params.insert("datapath".into(), "qemu".into());
    }

    let sock_dir = channel_dir(&cell_work)?;
    let spec = domain_spec(env, cell, seq, &disk, dir, &sock_dir);
    let xml = domain_xml::render(&spec)?;
    std::fs::write(dir.join("domain.xml"), &xml)?;
    plan.write_jobs(dir)?;

    env.ui.send(Output::Phase(Phase::Boot));
    let t = Instant::now();
    let dom = Arc::new(env.conn.start_transient(&xml)?);
    let console = spec.console_log.clone();
    let guest = cancellable(env.cancel, async {
        let chan = Channel::connect(&spec.channel_socket, Duration::from_secs(10)).await?;
        Guest::hello(chan, Duration::from_secs(cfg.boot_timeout)).await
    })
    .await
    .map_err(|e| with_console(&format!("boot: {e}"), &console))?;
    let mut guest = guest;
    timings.boot_to_hello_ms = t.elapsed().as_millis() as u64;
    prov.guest_kernel = guest.hello.kernel.clone();
    prov.fio = guest.hello.fio_version.clone().unwrap_or_default();
    prov.bonnie = guest.hello.bonnie_version.clone().unwrap_or_default();
    std::fs::write(
        dir.join("hello.json"),
        serde_json::to_vec_pretty(&guest.hello).unwrap_or_default(),
    )?;

    let t = Instant::now();
    if !plan.prep.is_empty() {
        env.ui.send(Output::Phase(Phase::Prefill));
        let job = Job {
            id: 1,
            disk_serial: TEST_DISK_SERIAL.into(),
            steps: plan.prep.clone(),
        };
        let out = run_job(env, &dom, &mut guest, job, &console, |_| {}).await?;
        check_steps(&out, &plan.prep, &console)?;
        params.extend(workload::mounted_device(
            out.steps.values().map(|e| &*e.stderr_tail),
        ));
    }
    drop_host_caches();

    let sources = Sources {
        qemu_pid: (cell.hypervisor != Hypervisor::Xen)
            .then(|| dom.qemu_pid())
            .flatten(),
        server_pid: env.server.map(|s| s.1),
        server_name: env.server.map(|s| s.0),
    };
    let (ev_tx, ev_rx) = tokio::sync::mpsc::unbounded_channel();
    let sampler = tokio::spawn(sample_window(
        dom.clone(),
        sources,
        plan.window,
        ev_rx,
        cell.hypervisor,
    ));
    let ramp_step = plan.window.0 > 0;
    env.ui.send(Output::Phase(if ramp_step {
        Phase::Ramp
    } else {
        Phase::Run
    }));
    let ui = env.ui.clone();
    let window_from = plan.window.0;
    let job = Job {
        id: 2,
        disk_serial: TEST_DISK_SERIAL.into(),
        steps: cfg.test_hooks.apply(seq, plan.measure.clone()),
    };
    let measured = run_job(env, &dom, &mut guest, job, &console, |e| {
        if let JobEvent::Status { line, .. } = &e {
            if let Some((r, w)) = parse_fio_eta(line) {
                ui.send(Output::Live {
                    read_iops: r,
                    write_iops: w,
                });
            }
        }
        if let JobEvent::StepDone { step } = e {
            let _ = ev_tx.send(step);
            if ramp_step && step == window_from {
                ui.send(Output::Phase(Phase::Run));
            }
        }
    })
    .await;
    drop(ev_tx);
    let window = sampler.await.unwrap_or_default();
    let out = measured?;
    check_steps(&out, &plan.measure, &console)?;
    timings.run_ms = t.elapsed().as_millis() as u64;

    env.ui.send(Output::Phase(Phase::Collect));
    for (name, text) in &out.artifacts {
        // Names were validated by the accumulator (plain file names only).
        std::fs::write(dir.join(name), text)?;
    }
    env.ui.send(Output::Phase(Phase::Teardown));
    let t = Instant::now();
    let _ = guest.power_off().await;
    let d2 = dom.clone();
    tokio::task::spawn_blocking(move || d2.wait_gone(Duration::from_secs(15)))
        .await
        .ok();
    dom.destroy();
    timings.teardown_ms = t.elapsed().as_millis() as u64;
    if !env.conn.is_alive() {
        // The guest's own figures came over QEMU's socket, but the host-side window (QMP,
        // domain CPU) went through the lost connection: an incomplete cell is a failed cell.
        return Err(CellFailure {
            reason: "libvirt connection lost during the cell (libvirtd restarted?): the host-side figures are incomplete".into(),
        });
    }

    let (mut metrics, samples, io_secs) = plan.parse(&out)?;
    metrics.extend(window.finish(io_secs, cell.hypervisor));
    if cfg.host_baseline {
        // The guest is gone and the disk still exists: the backing target is the host's alone.
        let b = tokio::task::block_in_place(|| {
            let prefill = plan.prefill_job.as_deref().filter(|_| cfg.prefill);
            let job = plan.baseline_job.as_deref();
            workload::baseline::run(
                job,
                prefill,
                disk.host_path.as_deref(),
                &metrics,
                &cell_work,
            )
        });
        params.extend(b.params);
        metrics.extend(b.metrics);
    }
    Ok((metrics, samples))
}

/// The steps and sizes a cell's workload needs.
struct WorkPlan {
    engine: Engine,
    disk_bytes: u64,
    prep: Vec<Step>,
    measure: Vec<Step>,
    /// The host-side window: from the end of `measure[.0]` to the end of `measure[.1]`.
    window: (u32, u32),
    /// The measured fio job with `{disk}` for the target and vmbench's ramp in it (the host
    /// baseline runs it as one job), or `None` for bonnie++.
    baseline_job: Option<String>,
    /// The prefill job with `{disk}`.
    prefill_job: Option<String>,
}

const LOG_PREFIX: &str = "vmbench";

impl WorkPlan {
    fn new(cfg: &MatrixConfig, cell: &Cell, _image: &ImageInfo) -> Result<WorkPlan, CellFailure> {
        let engine = workload::engine_of(&cell.workload);
        let mkfs = workload::layout_step(cell.layout);
        let target = if mkfs.is_some() {
            "{dir}/vmbench.fio"
        } else {
            "{disk}"
        };
        let mut prep: Vec<Step> = mkfs.into_iter().collect();
        let mut disk_bytes = cfg.disk_mib << 20;
        let (mut baseline_job, mut prefill_text) = (None, None);
        let mut window = (0, 1);
        let measure = match engine {
            Engine::Fio => {
                if cfg.prefill {
                    prep.push(Step::Fio {
                        job_text: prefill_job(target, &cfg.size),
                        args: vec![],
                        output_name: "prefill.json".into(),
                        log_prefix: None,
                    });
                }
                prefill_text = Some(prefill_job("{disk}", &cfg.size));
                baseline_job = Some(fio_job_text(cfg, &cell.workload, cfg.ramp)?);
                let mut steps = vec![Step::DropCaches];
                if let Some(ramp) = ramp_job(cfg, &cell.workload, target) {
                    steps.push(ramp);
                    window = (1, 2);
                }
                let job = fio_job_text(cfg, &cell.workload, 0)?.replace("{disk}", target);
                steps.push(Step::Fio {
                    job_text: fio::with_log_options(&job, LOG_PREFIX),
                    args: vec![],
                    output_name: "fio.json".into(),
                    log_prefix: Some(LOG_PREFIX.into()),
                });
                steps
            }
            Engine::Bonnie => {
                // bonnie++ needs a file of twice the guest's RAM, plus room for the filesystem.
                disk_bytes = disk_bytes.max((cfg.memory_mib * 3) << 20);
                vec![
                    Step::DropCaches,
                    Step::Bonnie {
                        args: bonnie::default_args(
                            cfg.memory_mib,
                            TEST_MOUNTPOINT,
                            cfg.bonnie_files,
                            "vmbench",
                        ),
                        output_name: "bonnie.txt".into(),
                    },
                ]
            }
        };
        let size = parse_size(&cfg.size).map_err(CellFailure::from)?;
        if engine == Engine::Fio && size > disk_bytes {
            return Err(CellFailure {
                reason: format!(
                    "fio size {} is larger than the disk ({} MiB)",
                    cfg.size, cfg.disk_mib
                ),
            });
        }
        Ok(WorkPlan {
            engine,
            disk_bytes,
            prep,
            measure,
            window,
            baseline_job,
            prefill_job: prefill_text,
        })
    }

    /// The exact job texts the guest runs, as artifacts: `job.fio` (the measured job),
    /// `ramp.fio` (the warm-up), `bonnie.args` (one argument a line).
    fn write_jobs(&self, dir: &Path) -> std::io::Result<()> {
        for step in &self.measure {
            match step {
                Step::Fio {
                    job_text,
                    output_name,
                    ..
                } => {
                    let name = if output_name == "fio.json" {
                        "job.fio"
                    } else {
                        "ramp.fio"
                    };
                    std::fs::write(dir.join(name), job_text)?;
                }
                Step::Bonnie { args, .. } => {
                    std::fs::write(dir.join("bonnie.args"), args.join("\n") + "\n")?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Metrics, per-second samples and the engine's measured seconds (fio's runtime).
    fn parse(&self, out: &JobOutput) -> Result<Parsed, CellFailure> {
        match self.engine {
            Engine::Fio => {
                let text = out
                    .artifacts
                    .get("fio.json")
                    .ok_or("fio produced no JSON output")?;
                let run = fio::parse(text).map_err(|e| format!("fio output: {e}"))?;
                let logs: Vec<(String, String)> = out
                    .artifacts
                    .iter()
                    .filter(|(n, _)| n.starts_with(LOG_PREFIX))
                    .map(|(n, t)| (n.clone(), t.clone()))
                    .collect();
                let ms = run.read.runtime_ms.max(run.write.runtime_ms);
                let secs = (ms > 0).then_some(ms as f64 / 1000.0);
                let mut m = fio::metrics(&run);
                m.push(Metric::num(
                    "read_ios",
                    "Read I/Os (fio)",
                    "ops",
                    crate::results::Better::Higher,
                    run.read.total_ios as f64,
                ));
                m.push(Metric::num(
                    "write_ios",
                    "Write I/Os (fio)",
                    "ops",
                    crate::results::Better::Higher,
                    run.write.total_ios as f64,
                ));
                Ok((m, fio::samples_from_logs(&logs), secs))
            }
            Engine::Bonnie => {
                let text = out
                    .artifacts
                    .get("bonnie.txt")
                    .ok_or("bonnie++ produced no output")?;
                let line = bonnie::find_csv_line(text).ok_or("bonnie++ output has no CSV line")?;
                let run = bonnie::parse_csv(line).map_err(|e| format!("bonnie++ output: {e}"))?;
                Ok((bonnie::metrics(&run), BTreeMap::new(), None))
            }
        }
    }
}

/// The workload's fio job with `{disk}`; a preset gets `ramp` seconds of ramp_time (a job file
/// keeps its own).
fn fio_job_text(cfg: &MatrixConfig, w: &WorkloadId, ramp: u32) -> Result<String, CellFailure> {
    match w {
        WorkloadId::Preset(name) => {
            let p = workload::PRESETS
                .iter()
                .find(|p| p.name == name)
                .ok_or("unknown preset")?;
            Ok(fio::render_preset(p.job, cfg.runtime, ramp, &cfg.size))
        }
        WorkloadId::FioFile(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("job file {}: {e}", path.display()))?;
            Ok(fio::check_user_job(&text)
                .map_err(|e| format!("job file {}: {e}", path.display()))?
                .text)
        }
    }
}

/// A preset's warm-up as its own step: the same job for `ramp` seconds. The host window then
/// starts exactly when the warm-up ends, so QMP's counts match fio's (fio's in-job ramp_time
/// ends at a moment the host cannot see). Job files keep their own ramp_time and get none.
fn ramp_job(cfg: &MatrixConfig, w: &WorkloadId, target: &str) -> Option<Step> {
    let WorkloadId::Preset(name) = w else {
        return None;
    };
    let p = workload::preset(name)?;
    (cfg.ramp > 0 && p.engine == Engine::Fio).then(|| Step::Fio {
        job_text: fio::render_preset(p.job, cfg.ramp, 0, &cfg.size).replace("{disk}", target),
        args: vec![],
        output_name: "ramp.json".into(),
        log_prefix: None,
    })
}

/// One sequential pass over the test area, so the measurement never hits first allocation.
fn prefill_job(target: &str, size: &str) -> String {
    format!(
        "[prefill]\nfilename={target}\nsize={size}\nrw=write\nbs=1M\niodepth=8\nioengine=libaio\ndirect=1\n"
    )
}

/// Runs a job; a lost storage server or an I/O-error pause fails it at once (the guest's I/O
/// would otherwise hang until the total timeout while its heartbeats go on).
async fn run_job(
    env: &CellEnv<'_>,
    dom: &Arc<RunningDomain>,
    guest: &mut Guest,
    job: Job,
    console: &Path,
    on_event: impl FnMut(JobEvent<'_>),
) -> Result<JobOutput, CellFailure> {
    let mut limits = JobLimits {
        total_timeout: Duration::from_secs(env.cfg.runtime as u64 * 4 + env.cfg.ramp as u64 + 600),
        ..JobLimits::default()
    };
    if let Some(hb) = env.cfg.test_hooks.heartbeat_timeout {
        limits.heartbeat_timeout = hb;
    }
    let run = async {
        tokio::select! {
            r = guest.run(job, &limits, on_event) => r.map_err(|e| e.to_string()),
            lost = faults::storage_lost(dom.clone(), env.server) => Err(lost),
        }
    };
    cancellable(env.cancel, run)
        .await
        .map_err(|e| with_console(&describe_guest_error(&e, dom, console), console))
}

fn describe_guest_error(e: &str, dom: &RunningDomain, console: &Path) -> String {
    let tail = read_tail(console, 60);
    if let Some(line) = tail.lines().find(|l| l.contains("Kernel panic")) {
        return format!("guest kernel panic: {}", line.trim());
    }
    if e.contains("channel closed") {
        // libvirt learns of a dead QEMU a moment after its sockets close.
        tokio::task::block_in_place(|| dom.wait_gone(Duration::from_secs(3)));
    }
    match faults::domain_note(dom) {
        Some(note) if !e.starts_with("storage server lost") => format!("{e}; {note}"),
        _ => e.to_string(),
    }
}

fn check_steps(out: &JobOutput, steps: &[Step], console: &Path) -> Result<(), CellFailure> {
    if out.ok {
        return Ok(());
    }
    for (i, step) in steps.iter().enumerate() {
        match out.steps.get(&(i as u32)) {
            Some(end) if end.exit_code == 0 => continue,
            Some(end) => {
                return Err(CellFailure {
                    reason: format!(
                        "{} failed in the guest (exit {}): {}",
                        step_name(step),
                        end.exit_code,
                        end.stderr_tail.trim()
                    ),
                })
            }
            None => {
                return Err(with_console(
                    &format!("{} never finished", step_name(step)),
                    console,
                ))
            }
        }
    }
    Err(CellFailure {
        reason: "job failed".into(),
    })
}

fn step_name(s: &Step) -> &'static str {
    match s {
        Step::DropCaches => "drop caches",
        Step::Mkfs { .. } => "mkfs",
        Step::Fio { .. } => "fio",
        Step::Bonnie { .. } => "bonnie++",
        Step::Sysrq { .. } => "sysrq",
    }
}

async fn cancellable<T, E: std::fmt::Display>(
    cancel: &Cancel,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    tokio::select! {
        r = fut => r.map_err(|e| e.to_string()),
        _ = cancel.cancelled() => Err("interrupted by signal".into()),
    }
}

fn with_console(reason: &str, console: &Path) -> CellFailure {
    let tail = read_tail(console, 15);
    let tail = if tail.trim().is_empty() {
        "(console is empty: the guest printed nothing)".to_string()
    } else {
        tail
    };
    CellFailure {
        reason: format!(
            "{reason}\n  console tail ({}):\n{}",
            console.display(),
            indent(&tail)
        ),
    }
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last `n` lines of a file, lossily decoded (a console may carry any bytes).
pub fn read_tail(path: &Path, n: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(64 * 1024);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn domain_spec(
    env: &CellEnv<'_>,
    cell: &Cell,
    seq: usize,
    disk: &ProvisionedDisk,
    dir: &Path,
    sock_dir: &Path,
) -> DomainSpec {
    let cfg = env.cfg;
    DomainSpec {
        name: format!("{}{}-{seq:03}", crate::hypervisor::NAME_PREFIX, env.run_id),
        hypervisor: cell.hypervisor,
        xen_mode: cell.xen_mode,
        vcpus: cfg.vcpus,
        memory_mib: cfg.memory_mib,
        kernel: env.image.kernel.clone(),
        initrd: env.image.initrd.clone(),
        cmdline: domain_xml::kernel_cmdline(cell.hypervisor, cell.xen_mode)
            + &cfg.test_hooks.cmdline_extra(seq),
        console_log: absolute(&dir.join("console.log")),
        channel_socket: sock_dir.join("agent.sock"),
        disk: DiskSpec {
            source: disk.source.clone(),
            format: disk.format,
            bus: cell.bus,
            cache: cell.cache,
            io: cell.io,
            serial: TEST_DISK_SERIAL.into(),
        },
        run_id: env.run_id.to_string(),
        cell_id: cell.id(),
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn make_dir(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// The agent socket's directory. QEMU runs as `libvirt-qemu` and binds the socket itself, so the
/// directory belongs to that user and is private to it (0700).
fn channel_dir(cell_work: &Path) -> std::io::Result<PathBuf> {
    let d = absolute(&cell_work.join("chan"));
    make_dir(&d, 0o700)?;
    if let Ok(Some(u)) = nix::unistd::User::from_name("libvirt-qemu") {
        nix::unistd::chown(&d, Some(u.uid), Some(u.gid)).map_err(std::io::Error::from)?;
    }
    Ok(d)
}

/// Host page cache out of the way of the next measurement (root only; a no-op otherwise).
fn drop_host_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// Host-side figures of the measured step: start `ramp` seconds after the step before it ends,
/// stop when the measured step ends; the server's RSS is sampled every half second in between.
#[derive(Default)]
struct Window {
    start: Option<metrics::Snapshot>,
    end: Option<metrics::Snapshot>,
    peak_rss_kib: Option<u64>,
}

impl Window {
    fn finish(self, io_secs: Option<f64>, hv: Hypervisor) -> Vec<Metric> {
        let not_on = (hv == Hypervisor::Xen).then_some("n/a on xen");
        match (self.start, self.end) {
            (Some(a), Some(b)) => {
                metrics::window_metrics(&a, &b, self.peak_rss_kib, not_on, io_secs)
            }
            _ => vec![],
        }
    }
}

async fn sample_window(
    dom: Arc<RunningDomain>,
    src: Sources,
    (from, to): (u32, u32),
    mut steps: tokio::sync::mpsc::UnboundedReceiver<u32>,
    hv: Hypervisor,
) -> Window {
    let mut w = Window::default();
    // Xen has no QEMU monitor for a phy disk: libvirt's own block stats (counts, no times).
    let block = |d: &RunningDomain| match hv {
        Hypervisor::Xen => d.block_stats(domain_xml::guest_device_name(
            hv,
            crate::cell::Bus::VirtioBlk,
        )),
        _ => d
            .qmp(qmp::QUERY_BLOCKSTATS)
            .ok()
            .and_then(|a| qmp::parse_blockstats(&a).ok()),
    };
    // The step before the measured one (drop caches, or the warm-up) is done: the engine starts.
    loop {
        match steps.recv().await {
            Some(s) if s == from => break,
            Some(_) => continue,
            None => return w,
        }
    }
    w.start = Some(metrics::snapshot(&src, block(&dom), dom.cpu_time_ns()));
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            s = steps.recv() => match s {
                Some(s) if s == to => break,
                None => break,
                Some(_) => continue,
            },
            _ = tick.tick() => {
                if let Some(kib) = src.server_pid.and_then(metrics::proc::rss_kib) {
                    w.peak_rss_kib = Some(w.peak_rss_kib.unwrap_or(0).max(kib));
                }
            }
        }
    }
    w.end = Some(metrics::snapshot(&src, block(&dom), dom.cpu_time_ns()));
    w
}
