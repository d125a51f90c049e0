//! One cell, end to end: provision the disk, start a transient domain, wait for the agent's
//! hello, prefill, measure (host-side figures over the same window), collect, power off, tear
//! down. Every way out of a cell (success, failure, timeout, Ctrl-C) destroys the domain (the
//! handle's Drop) and tears the disk down (the caller's guard).

mod host;

use super::cell_error::{CellError, ConsoleTail, DomainNote};
use super::config::{parse_size, MatrixConfig};
use super::fidelity;
use super::progress::{Output, Phase, Ui};
use super::storm;
use crate::cell::{Cell, Hypervisor};
use crate::guest::boot::{boot_and_hello, BootError};
use crate::guest::{Guest, GuestError, JobEvent, JobLimits, JobOutput};
use crate::hypervisor::libvirt::{Libvirt, RunningDomain};
use crate::hypervisor::watch;
use crate::hypervisor::{domain_xml, DomainSpec, GuestFiles, Monitor, Sizing};
use crate::image::{ImageInfo, Initrd};
use crate::metrics::{self, qmp, Sources};
use crate::results::{CellResult, FailureKind, Metric, Outcome, Provenance, Timings};
use crate::storage::{ProvisionedDisk, StorageBackend};
use crate::workload::{self, EngineHandle, EnginePlan, Parsed};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use vmbench_proto::{Job, Step, TEST_DISK_SERIAL};

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
    /// Resolves when cancelled, as a boot's stop (`boot_and_hello`).
    pub async fn interrupted(&self) -> crate::guest::boot::Stop {
        self.cancelled().await;
        crate::guest::boot::Stop::Cancelled
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
    /// The server's other processes ([`storage::Opened::companions`]).
    pub server_companions: &'a [u32],
    /// The host half of the provenance (filled once per run).
    pub provenance: &'a Provenance,
}

/// One cell run as it moves through its stages: what it was given, and what it has recorded so
/// far (timings, parameters, provenance).
struct CellCtx<'e, 'a> {
    env: &'e CellEnv<'a>,
    cell: &'e Cell,
    seq: usize,
    /// The cell's result directory (artifacts).
    dir: &'e Path,
    /// The cell's private work directory (disk, agent socket).
    work: PathBuf,
    timings: Timings,
    params: BTreeMap<String, String>,
    prov: Provenance,
}

/// A running guest that said hello.
struct Booted {
    dom: Arc<RunningDomain>,
    guest: Guest,
    console: PathBuf,
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
    let mut ctx = CellCtx {
        env,
        cell,
        seq,
        dir,
        work: env.work_dir.join(format!("cell-{seq:03}")),
        timings: Timings::default(),
        params: BTreeMap::new(),
        prov: env.provenance.clone(),
    };
    let res = ctx.pipeline(backend).await;
    ctx.timings.total_ms = t0.elapsed().as_millis() as u64;
    ctx.into_result(repeat, res)
}

impl CellCtx<'_, '_> {
    /// provision -> boot -> prefill -> measure -> collect -> teardown -> parse -> baseline. Every
    /// early return drops the domain handle, which destroys the domain.
    async fn pipeline(&mut self, backend: &mut dyn StorageBackend) -> Result<Parsed, CellError> {
        if !self.cell.hypervisor.desc().runs_guest {
            return self.host_pipeline(backend).await;
        }
        let plan = WorkPlan::new(self.env.cfg, self.cell)?;
        self.prov.jobs = jobs_hash(&plan.steps.job_files);
        let disk = self.provision(backend, &plan)?;
        let spec = self.define(&disk, &plan)?;
        let mut booted = self.boot(&spec).await?;
        let t = Instant::now();
        self.prefill(&mut booted, &plan).await?;
        self.timings.prefill_ms = t.elapsed().as_millis() as u64;
        if let Some(f) = self.env.cfg.fidelity {
            self.fidelity(&mut booted, f).await?;
        }
        let t = Instant::now();
        let stall = self.env.cfg.stall_timeout;
        let (out, window) = self.measure(&mut booted, &plan, 2, stall).await?;
        self.timings.run_ms = t.elapsed().as_millis() as u64;
        self.collect(&out)?;
        self.teardown(booted).await?;
        let allocated = tokio::task::block_in_place(|| backend.allocated_bytes());
        let storm = self.storm(backend, &plan).await?;
        let mut parsed = plan
            .engine
            .parse(&out.artifacts)
            .map_err(CellError::BadOutput)?;
        parsed
            .metrics
            .extend(window.finish(parsed.measured_secs, self.cell.hypervisor));
        let split = metrics::split::latency_split(&parsed.metrics);
        parsed.metrics.extend(split);
        parsed.metrics.extend(allocated.map(allocated_metric));
        parsed.metrics.extend(storm);
        self.baseline(&plan, &disk, &mut parsed.metrics);
        Ok(parsed)
    }

    /// The disk, and the parameters that say how it is reached.
    fn provision(
        &mut self,
        backend: &mut dyn StorageBackend,
        plan: &WorkPlan,
    ) -> Result<ProvisionedDisk, CellError> {
        self.env.ui.send(Output::Phase(Phase::Provision));
        let t = Instant::now();
        crate::guest::dirs::make_work_dir(&self.work).map_err(CellError::host_io(format!(
            "creating {}",
            self.work.display()
        )))?;
        let disk = tokio::task::block_in_place(|| {
            backend.provision(self.cell, plan.steps.disk_bytes, &self.work)
        })
        .map_err(CellError::Provision)?;
        // The run's base, written once, is not one instance's provisioning.
        let base_ms = (disk.params.get(crate::storage::base::WRITTEN_MS))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        self.timings.provision_ms = (t.elapsed().as_millis() as u64).saturating_sub(base_ms);
        self.params.extend(disk.params.clone());
        self.params
            .insert("disk_bytes".into(), disk.size_bytes.to_string());
        let datapath = (self.cell.hypervisor.desc())
            .datapath(&disk.source, self.cell.format)
            .map_err(CellError::Datapath)?;
        self.params.insert("datapath".into(), datapath);
        self.params.extend(self.env.cfg.iotune_params(self.cell));
        self.params.extend(self.env.cfg.instrument_params());
        Ok(disk)
    }

    /// The domain's definition, written with the job files into the cell directory.
    fn define(&mut self, disk: &ProvisionedDisk, plan: &WorkPlan) -> Result<DomainSpec, CellError> {
        let mut spec = domain_spec(self.env, self.cell, self.seq, disk, self.dir);
        let steps = plan.steps.prep.iter().chain(&plan.steps.measure);
        spec.initrd = self
            .env
            .image
            .initrd_for(Initrd::for_steps(steps))
            .to_path_buf();
        if self.cell.tuning.pin == crate::cell::Pin::On {
            let pinning =
                crate::hypervisor::pinning::host_plan(spec.vcpus).map_err(CellError::Pinning)?;
            spec.pinning = Some(pinning);
        }
        self.params.extend(sweep_params(self.cell, &spec));
        let xml = domain_xml::render(&spec).map_err(CellError::DomainXml)?;
        self.write("domain.xml", &xml)?;
        if spec.console_pty {
            // What a console tail then shows, instead of "the guest printed nothing".
            let note = format!(
                "(console not captured: the guest runs on libvirt host {}, where its serial \
                 console is a pty)\n",
                self.env.conn.uri()
            );
            self.write("console.log", &note)?;
        }
        for (name, text) in &plan.steps.job_files {
            self.write(name, text)?;
        }
        Ok(spec)
    }

    /// Starts the domain and waits for the agent's hello.
    async fn boot(&mut self, spec: &DomainSpec) -> Result<Booted, CellError> {
        self.env.ui.send(Output::Phase(Phase::Boot));
        let t = Instant::now();
        let boot_timeout = Duration::from_secs(self.env.cfg.boot_timeout);
        let console = spec.console_log.clone();
        let cancelled = self.env.cancel.interrupted();
        let booted = boot_and_hello(self.env.conn, spec, boot_timeout, cancelled).await;
        let (dom, guest) = match booted {
            Ok(b) => {
                self.timings.domain_start_ms = b.domain_start.as_millis() as u64;
                (Arc::new(b.domain), b.guest)
            }
            // GaveUp comes only from a stop that gives up; `interrupted` only cancels.
            Err(BootError::Cancelled | BootError::GaveUp { .. }) => {
                return Err(CellError::Interrupted)
            }
            Err(BootError::Start(e)) => return Err(CellError::Hypervisor(e)),
            Err(BootError::Xml(e)) => return Err(CellError::DomainXml(e)),
            // The cell quotes more of the console than the probe does.
            Err(BootError::NoHello { source, at, .. }) => {
                return Err(CellError::from_boot(
                    source,
                    at,
                    ConsoleTail::read(&console, 15),
                ))
            }
        };
        self.timings.boot_to_hello_ms = t.elapsed().as_millis() as u64;
        self.prov.guest_kernel = guest.hello.kernel.clone();
        self.prov.tools = workload::tool_versions(&guest.hello);
        let hello_json = serde_json::to_string_pretty(&guest.hello).unwrap_or_default();
        self.write("hello.json", &hello_json)?;
        Ok(Booted {
            dom,
            guest,
            console,
        })
    }

    /// mkfs and the engine's prefill, then the host's page cache out of the way.
    async fn prefill(&mut self, b: &mut Booted, plan: &WorkPlan) -> Result<(), CellError> {
        let prep = &plan.steps.prep;
        if !prep.is_empty() {
            self.env.ui.send(Output::Phase(Phase::Prefill));
            let job = Job {
                id: 1,
                disk_serial: TEST_DISK_SERIAL.into(),
                steps: prep.clone(),
            };
            let out = self
                .run_job(b, job, self.env.cfg.stall_timeout, |_| {})
                .await?;
            check_steps(&out, prep, &b.console)?;
            let tails = out.steps.values().map(|e| &*e.stderr_tail);
            self.params.extend(workload::mounted_device(tails));
        }
        crate::workload::drop_host_caches();
        Ok(())
    }

    /// The measured job, with the host-side window sampled around its measured step; the
    /// progress watchdog fails it after `stall` seconds without I/O (0: no watchdog).
    async fn measure(
        &self,
        b: &mut Booted,
        plan: &WorkPlan,
        job_id: u64,
        stall: u64,
    ) -> Result<(JobOutput, Window), CellError> {
        let hv = self.cell.hypervisor;
        let sources = Sources {
            qemu_pid: (hv.desc().monitor == Monitor::Qmp)
                .then(|| b.dom.qemu_pid())
                .flatten(),
            server_pid: self.env.server.map(|s| s.1),
            server_companions: self.env.server_companions.to_vec(),
            server_name: self.env.server.map(|s| s.0),
            not_local: b.dom.not_local(),
        };
        let window = plan.steps.window;
        let (ev_tx, ev_rx) = tokio::sync::mpsc::unbounded_channel();
        let sampler = tokio::spawn(sample_window(b.dom.clone(), sources, window, ev_rx, hv));
        let ramp_step = window.0 > 0;
        let first = if ramp_step { Phase::Ramp } else { Phase::Run };
        self.env.ui.send(Output::Phase(first));
        let ui = self.env.ui.clone();
        let engine = &*plan.engine;
        let job = Job {
            id: job_id,
            disk_serial: TEST_DISK_SERIAL.into(),
            steps: (self.env.cfg.test_hooks).apply(self.seq, plan.steps.measure.clone()),
        };
        let measured = self
            .run_job(b, job, stall, |e| match e {
                JobEvent::Status { line, .. } => {
                    if let Some(live) = engine.live_iops(line) {
                        ui.send(Output::Live {
                            read_iops: live.read,
                            write_iops: live.write,
                        });
                    }
                }
                JobEvent::StepDone { step } => {
                    let _ = ev_tx.send(step);
                    if ramp_step && step == window.0 {
                        ui.send(Output::Phase(Phase::Run));
                    }
                }
            })
            .await;
        drop(ev_tx);
        let sampled = sampler.await.unwrap_or_default();
        let out = measured?;
        check_steps(&out, &plan.steps.measure, &b.console)?;
        Ok((out, sampled))
    }

    /// The guest's artifacts into the cell directory.
    fn collect(&self, out: &JobOutput) -> Result<(), CellError> {
        self.env.ui.send(Output::Phase(Phase::Collect));
        for (name, text) in &out.artifacts {
            // Names were validated by the accumulator (plain file names only).
            self.write(name, text)?;
        }
        Ok(())
    }

    /// Powers the guest off (destroying it if it does not go) and checks that the host-side
    /// figures came through a live connection.
    async fn teardown(&mut self, b: Booted) -> Result<(), CellError> {
        self.env.ui.send(Output::Phase(Phase::Teardown));
        let t = Instant::now();
        let Booted { dom, mut guest, .. } = b;
        let _ = guest.power_off().await;
        let d2 = dom.clone();
        tokio::task::spawn_blocking(move || d2.wait_gone(Duration::from_secs(15)))
            .await
            .ok();
        dom.destroy();
        self.timings.teardown_ms = t.elapsed().as_millis() as u64;
        if !self.env.conn.is_alive() {
            // The guest's own figures came over QEMU's socket, but the host-side window (QMP,
            // domain CPU) went through the lost connection: an incomplete cell is a failed cell.
            return Err(CellError::LibvirtLost);
        }
        Ok(())
    }

    /// The in-boot instrument comparison ([`fidelity`]): the measured job, round by round, once
    /// per variant, each parsed for its IOPS; written to fidelity.json. Job ids from 10, so
    /// none is the prefill's or the measured job's.
    async fn fidelity(&mut self, b: &mut Booted, f: fidelity::Plan) -> Result<(), CellError> {
        let mut jobs = Vec::new();
        for (i, (round, variant)) in f.order().into_iter().enumerate() {
            let mut cfg = self.env.cfg.clone();
            cfg.time_series = variant.time_series();
            cfg.latency_series = variant.latency_series();
            cfg.live_status = variant.live_status();
            let stall = if variant.watchdog() {
                cfg.stall_timeout
            } else {
                0
            };
            let plan = WorkPlan::new(&cfg, self.cell)?;
            let (out, _) = self.measure(b, &plan, 10 + i as u64, stall).await?;
            let parsed = plan
                .engine
                .parse(&out.artifacts)
                .map_err(CellError::BadOutput)?;
            let iops = ["read_iops", "write_iops"]
                .iter()
                .filter_map(|k| parsed.metrics.iter().find(|m| m.key == *k))
                .filter_map(|m| m.value.number())
                .sum();
            jobs.push(fidelity::JobFigure {
                round,
                variant,
                iops,
            });
        }
        let record = fidelity::Record {
            pairs: f.pairs,
            jobs,
        };
        let json = serde_json::to_string_pretty(&record).unwrap_or_default();
        self.params.insert(
            "fidelity".into(),
            format!("{} rounds before the measured job (fidelity.json)", f.pairs),
        );
        self.write("fidelity.json", &json)
    }

    /// The boot storm (`--boot-storm K`, [`storm`]): K more instance disks made as this cell's
    /// was, K guests started together. Their disks go with the cell's at its teardown.
    async fn storm(
        &mut self,
        backend: &mut dyn StorageBackend,
        plan: &WorkPlan,
    ) -> Result<Vec<Metric>, CellError> {
        let k = self.env.cfg.boot_storm;
        if k < 2 {
            return Ok(vec![]);
        }
        if crate::storage::kind::descriptor(self.cell.backend)
            .instances()
            .len()
            < 2
        {
            // One disk per cell (a device, a LUN file, a host directory): no base to start many
            // instances from. Said with the cell, not run.
            self.params.insert(
                "boot_storm".into(),
                format!(
                    "not run: backend {} makes no instance disks from a base image",
                    self.cell.backend
                ),
            );
            return Ok(vec![]);
        }
        self.env.ui.send(Output::Phase(Phase::Storm));
        let t = Instant::now();
        let mut specs = Vec::with_capacity(k as usize);
        for i in 1..=k {
            let work = self.work.join(format!("storm-{i}"));
            crate::guest::dirs::make_work_dir(&work)
                .map_err(CellError::host_io(format!("creating {}", work.display())))?;
            let disk = tokio::task::block_in_place(|| {
                backend.provision(self.cell, plan.steps.disk_bytes, &work)
            })
            .map_err(CellError::Provision)?;
            let mut spec = domain_spec(self.env, self.cell, self.seq, &disk, self.dir);
            spec.name = format!("{}-s{i}", spec.name);
            spec.console_log = absolute(&self.dir.join(format!("storm-{i}-console.log")));
            specs.push(spec);
        }
        let provision = t.elapsed();
        let boot_timeout = Duration::from_secs(self.env.cfg.boot_timeout);
        let instances = storm::run(self.env.conn, &specs, boot_timeout, self.env.cancel).await?;
        self.params.insert(
            "boot_storm".into(),
            format!("{k} instances, boot read {}", storm::BOOT_READ),
        );
        Ok(storm::StormTimes {
            instances,
            provision,
        }
        .metrics())
    }

    /// The host baseline (`--host-baseline`): the guest is gone and the disk still exists, so
    /// the backing target is the host's alone.
    fn baseline(&mut self, plan: &WorkPlan, disk: &ProvisionedDisk, metrics: &mut Vec<Metric>) {
        let cfg = self.env.cfg;
        if !cfg.host_baseline {
            return;
        }
        let b = tokio::task::block_in_place(|| {
            let prefill = plan.steps.prefill_job.as_deref().filter(|_| cfg.prefill);
            let job = plan.steps.baseline_job.as_deref();
            let host_path = disk.host_path.as_deref();
            workload::baseline::run(self.cell, job, prefill, host_path, metrics, &self.work)
        });
        self.params.extend(b.params);
        metrics.extend(b.metrics);
    }

    /// Runs a job; a lost storage server or an I/O-error pause fails it at once (the guest's I/O
    /// would otherwise hang until the total timeout while its heartbeats go on).
    async fn run_job(
        &self,
        b: &mut Booted,
        job: Job,
        stall_timeout: u64,
        on_event: impl FnMut(JobEvent<'_>),
    ) -> Result<JobOutput, CellError> {
        let cfg = self.env.cfg;
        let mut limits = JobLimits {
            total_timeout: Duration::from_secs(cfg.runtime as u64 * 4 + cfg.ramp as u64 + 600),
            ..JobLimits::default()
        };
        if let Some(hb) = cfg.test_hooks.heartbeat_timeout {
            limits.heartbeat_timeout = hb;
        }
        let dom = &b.dom;
        let progress = Arc::new(watch::Progress::default());
        let seen = progress.clone();
        let mut on_event = on_event;
        let on_event = move |e: JobEvent<'_>| {
            if let JobEvent::Status { line, .. } = &e {
                if workload::shows_progress(line) {
                    seen.touch();
                }
            }
            on_event(e)
        };
        let hv = self.cell.hypervisor;
        let d = dom.clone();
        let stall = (stall_timeout > 0).then(|| Duration::from_secs(stall_timeout));
        let stalled = async move {
            match stall {
                Some(limit) => {
                    let read = move || disk_counters(&d, hv);
                    watch::io_stalled(read, limit, progress).await
                }
                None => std::future::pending().await,
            }
        };
        let run = async {
            tokio::select! {
                r = b.guest.run(job, &limits, on_event) => r.map_err(JobStop::Guest),
                lost = watch::storage_lost(
                    dom.clone(),
                    self.env.server,
                    self.env.server_companions.to_vec(),
                ) => {
                    Err(JobStop::StorageLost(lost))
                }
                idle = stalled => Err(JobStop::Stalled(idle)),
            }
        };
        match cancellable(self.env.cancel, run).await {
            Ok(out) => Ok(out),
            Err(Halt::Interrupted) => Err(CellError::Interrupted),
            // The agent's channel is a stream through libvirtd: when the connection died, that
            // is why the guest went quiet, whatever the channel itself reported.
            Err(Halt::Failed(JobStop::Guest(_))) if !self.env.conn.is_alive() => {
                Err(CellError::LibvirtLost)
            }
            Err(Halt::Failed(stop)) => Err(describe_stop(stop, dom, &b.console)),
        }
    }

    /// Writes a file into the cell directory.
    fn write(&self, name: &str, text: &str) -> Result<(), CellError> {
        let path = self.dir.join(name);
        std::fs::write(&path, text)
            .map_err(CellError::host_io(format!("writing {}", path.display())))
    }

    /// The result: the text of a failure for humans, its kind for grouping.
    fn into_result(self, repeat: u32, res: Result<Parsed, CellError>) -> CellResult {
        let (outcome, parsed, failure_kind) = match res {
            Ok(p) => (Outcome::Passed, p, None),
            Err(e) if self.env.cancel.is_cancelled() => (
                Outcome::Failed(format!("interrupted: {e}")),
                Parsed::default(),
                Some(FailureKind::Interrupted),
            ),
            Err(e) => (
                Outcome::Failed(e.to_string()),
                Parsed::default(),
                Some(e.kind()),
            ),
        };
        CellResult {
            metrics: parsed.metrics,
            params: self.params,
            provenance: self.prov,
            timings: self.timings,
            samples: parsed.samples,
            failure_kind,
            ..CellResult::new(self.cell.clone(), repeat, outcome)
        }
    }
}

/// What stopped a job before it finished.
enum JobStop {
    Guest(GuestError),
    StorageLost(watch::StorageLoss),
    /// The watchdog saw no I/O progress for this long while the guest kept its heartbeat.
    Stalled(Duration),
}

/// A wait that failed, or was cut short by a signal.
enum Halt<E> {
    Failed(E),
    Interrupted,
}

/// A stopped job as the cell's error. The console's kernel panic explains a closed channel or a
/// stall better than the channel can, and the domain's state (gone, paused) better than a
/// timeout.
fn describe_stop(stop: JobStop, dom: &RunningDomain, console: &Path) -> CellError {
    let tail = read_tail(console, 60);
    if let Some(line) = tail.lines().find(|l| l.contains("Kernel panic")) {
        return CellError::GuestPanic {
            line: line.trim().to_string(),
            console: ConsoleTail::read(console, 15),
        };
    }
    match stop {
        JobStop::StorageLost(reason) => CellError::StorageLost {
            reason,
            console: ConsoleTail::read(console, 15),
        },
        JobStop::Stalled(idle) => CellError::NoIoProgress {
            secs: idle.as_secs(),
            console: ConsoleTail::read(console, 15),
        },
        JobStop::Guest(e) => {
            if matches!(e, GuestError::Closed { .. }) {
                // libvirt learns of a dead QEMU a moment after its sockets close.
                tokio::task::block_in_place(|| dom.wait_gone(Duration::from_secs(3)));
            }
            let note = DomainNote(watch::domain_note(dom));
            CellError::from_guest(e, note, ConsoleTail::read(console, 15))
        }
    }
}

/// The steps and sizes a cell's workload needs: the engine's plan, after the cell's own mkfs.
struct WorkPlan {
    engine: EngineHandle,
    steps: EnginePlan,
}

impl WorkPlan {
    fn new(cfg: &MatrixConfig, cell: &Cell) -> Result<WorkPlan, CellError> {
        let engine = workload::engine(&cell.workload).map_err(CellError::Plan)?;
        let mkfs = workload::layout_step(cell);
        let target = workload::io_target(mkfs.is_some());
        let size_bytes = parse_size(&cfg.size).map_err(CellError::Size)?;
        let params = cfg.engine_params(cell, target, size_bytes);
        let mut steps = engine.plan(&params).map_err(CellError::Plan)?;
        // A split layout's measured side is half the disk: the disk holds two of what the
        // engine asked for.
        steps.disk_bytes = steps
            .disk_bytes
            .saturating_mul(cell.layout.volumes_on_disk());
        if let Some(mkfs) = mkfs {
            steps.prep.insert(0, mkfs);
        }
        Ok(WorkPlan { engine, steps })
    }
}

/// A short content hash of the job files the guest runs: the instrument's job definitions in
/// the provenance, so a changed job (another preset text, runtime or size) is not compared as
/// if it were the same measurement.
fn jobs_hash(files: &[(&'static str, String)]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, text) in files {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

fn check_steps(out: &JobOutput, steps: &[Step], console: &Path) -> Result<(), CellError> {
    if out.ok {
        return Ok(());
    }
    for (i, step) in steps.iter().enumerate() {
        match out.steps.get(&(i as u32)) {
            Some(end) if end.exit_code == 0 => continue,
            Some(end) => {
                return Err(CellError::EngineFailed {
                    step: workload::step_name(step),
                    exit_code: end.exit_code,
                    stderr: end.stderr_tail.trim().to_string(),
                })
            }
            None => {
                return Err(CellError::StepUnfinished {
                    step: workload::step_name(step),
                    console: ConsoleTail::read(console, 15),
                })
            }
        }
    }
    Err(CellError::JobFailed)
}

async fn cancellable<T, E>(
    cancel: &Cancel,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, Halt<E>> {
    tokio::select! {
        r = fut => r.map_err(Halt::Failed),
        _ = cancel.cancelled() => Err(Halt::Interrupted),
    }
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
) -> DomainSpec {
    let cfg = env.cfg;
    let files = GuestFiles {
        kernel: env.image.kernel.clone(),
        initrd: env.image.initrd.clone(),
        console_log: absolute(&dir.join("console.log")),
    };
    let size = Sizing {
        vcpus: cfg.vcpus,
        memory_mib: cfg.memory_mib,
    };
    let name = format!("{}{}-{seq:03}", crate::hypervisor::NAME_PREFIX, env.run_id);
    let mut spec = DomainSpec::for_cell(name, env.run_id, cell, disk.source.clone(), size, files);
    spec.cmdline += &cfg.test_hooks.cmdline_extra(seq);
    spec.disk.iotune = cfg.iotune(cell);
    spec.emulator = cfg.emulator_path(&cell.emulator).map(Path::to_path_buf);
    spec.console_pty = !env.conn.is_local();
    spec
}

/// The disk's own allocation after the job (an overlay's, not its base's): what one more
/// instance costs in bytes (`recommend`'s `bytes` objective).
fn allocated_metric(bytes: u64) -> crate::results::Metric {
    crate::results::Metric::num(
        "disk_allocated_mib",
        "Disk allocated",
        "MiB",
        crate::results::Better::Lower,
        bytes as f64 / (1u64 << 20) as f64,
    )
}

/// What the sweep dimensions put into this cell, as params (kept with the result and shown
/// with its provenance): the fio values over the preset's, and the QEMU tuning with the host
/// CPUs chosen for pinning (they depend on the host, not only on the cell).
fn sweep_params(cell: &Cell, spec: &DomainSpec) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = cell
        .job
        .pairs()
        .into_iter()
        .map(|(k, val)| (format!("fio_{k}"), val))
        .collect();
    if !cell.tuning.is_default() {
        v.push(("qemu_iothread".into(), cell.tuning.iothread.to_string()));
        let queues = cell
            .tuning
            .queues
            .map_or("default".into(), |q| q.to_string());
        v.push(("qemu_queues".into(), queues));
    }
    if let Some(p) = &spec.pinning {
        v.push(("qemu_pinning".into(), p.describe()));
    }
    v
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
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
        let not_on = hv.desc().no_qemu_process();
        match (self.start, self.end) {
            (Some(a), Some(b)) => {
                metrics::window_metrics(&a, &b, self.peak_rss_kib, not_on.as_deref(), io_secs)
            }
            _ => vec![],
        }
    }
}

/// The host's counters of the disk under test. Xen has no QEMU monitor for a phy disk: libvirt's
/// domain stats there (counts, and times where the driver has them).
fn disk_counters(d: &RunningDomain, hv: Hypervisor) -> Option<qmp::DiskCounters> {
    match hv.desc().monitor {
        Monitor::DomainStats => d.block_stats(domain_xml::guest_device_name(
            hv,
            crate::cell::Bus::VirtioBlk,
        )),
        Monitor::Qmp => d
            .qmp(qmp::QUERY_BLOCKSTATS)
            .ok()
            .and_then(|a| qmp::parse_blockstats(&a).ok()),
        // No domain (host cells never get here: their path has no domain to ask).
        Monitor::HostProcess => None,
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
    let block = |d: &RunningDomain| disk_counters(d, hv);
    // The step before the measured one (drop caches, or the warm-up) is done: the engine starts.
    loop {
        match steps.recv().await {
            Some(s) if s == from => break,
            Some(_) => continue,
            None => return w,
        }
    }
    // QEMU's latency histograms restart empty here, so the end's bins are the window's.
    let qdev = (hv.desc().monitor == Monitor::Qmp)
        .then(|| block(&dom).and_then(|b| b.qdev))
        .flatten();
    if let Some(q) = qdev {
        let _ = dom.qmp(&qmp::histogram_set_command(&q));
    }
    w.start = Some(metrics::snapshot(&src, block(&dom), dom.cpu()));
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            s = steps.recv() => match s {
                Some(s) if s == to => break,
                None => break,
                Some(_) => continue,
            },
            _ = tick.tick() => {
                if let Some(kib) = metrics::server_rss_kib(&src) {
                    w.peak_rss_kib = Some(w.peak_rss_kib.unwrap_or(0).max(kib));
                }
            }
        }
    }
    w.end = Some(metrics::snapshot(&src, block(&dom), dom.cpu()));
    w
}

#[cfg(test)]
mod work_plan_tests {
    use super::*;
    use crate::cell::Layout;

    #[test]
    fn a_split_layouts_disk_holds_two_of_what_the_engine_asks_for() {
        let cfg = MatrixConfig::default();
        let plan = |layout| {
            let cell = Cell {
                layout,
                ..Cell::default()
            };
            WorkPlan::new(&cfg, &cell).unwrap().steps
        };
        assert_eq!(plan(Layout::PartExt4).disk_bytes, cfg.disk_mib << 20);
        assert_eq!(plan(Layout::LvmExt4).disk_bytes, cfg.disk_mib << 20);
        for layout in [Layout::SplitPartExt4, Layout::SplitLvmExt4] {
            let p = plan(layout);
            assert_eq!(p.disk_bytes, 2 * (cfg.disk_mib << 20), "{layout}");
            assert!(matches!(p.prep[0], Step::Mkfs { .. }), "{layout}");
        }
    }
}
