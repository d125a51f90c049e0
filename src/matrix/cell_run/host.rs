//! The host path of a cell (`--hypervisor host`, the write-ups' host rows): no domain. The disk
//! is provisioned on the backend as for a guest, then the same workload runs on the host on that
//! storage (`storage::host_access`: the file, a loop device with the cell's filesystem mounted
//! in its private work directory, the block device, the directory), through the guest's own
//! plan (`workload::host`), parsed by the engine, with the host-side figures over the measured
//! step: the engine's CPU from the kernel's accounting and the storage server's from `/proc`.
//! Every way out (success, failure, timeout, Ctrl-C) unmounts and detaches (`HostFs`'s Drop)
//! before the runner tears the disk down.

use super::{allocated_metric, jobs_hash, CellCtx, Window, WorkPlan};
use crate::matrix::cell_error::CellError;
use crate::matrix::progress::{Output, Phase};
use crate::metrics::{self, Sources};
use crate::storage::host_access::{HostAccess, HostFs, HostFsType, HOST_MOUNT_DIR};
use crate::storage::{ProvisionedDisk, StorageBackend};
use crate::workload::drop_host_caches;
use crate::workload::host::{self as on_host, CpuUsage, Engines, LayoutStep, Stop, Target};
use crate::workload::memcap::MemCap;
use crate::workload::{self, Parsed};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use vmbench_proto::{Filesystem, Step};

/// What the measured job left: the engine's artifacts, the window's figures, its CPU.
struct Measured {
    artifacts: Vec<(String, String)>,
    window: Window,
    cpu: CpuUsage,
}

impl CellCtx<'_, '_> {
    /// provision -> layout (loop, mkfs, mount) -> prep -> measure -> collect -> teardown ->
    /// parse, all on the host.
    pub(super) async fn host_pipeline(
        &mut self,
        backend: &mut dyn StorageBackend,
    ) -> Result<Parsed, CellError> {
        let plan = WorkPlan::new(self.env.cfg, self.cell)?;
        self.prov.jobs = jobs_hash(&plan.steps.job_files);
        let disk = self.provision(backend, &plan)?;
        for (name, text) in &plan.steps.job_files {
            self.write(name, text)?;
        }
        let engines = Engines::find(&self.env.image.engine_binaries());
        self.record_engines(&engines, &plan);
        let cap = self.memory_cap();
        let t = Instant::now();
        let (mut fs, target) = self.host_layout(&plan, &disk)?;
        let job_dir = self.work.join("host-job");
        let layout_done = |s: &&Step| workload::host::layout_step(s).is_none();
        for step in plan.steps.prep.iter().filter(layout_done) {
            self.host_step(step, &engines, &target, &job_dir, cap.as_ref())?;
        }
        tokio::task::block_in_place(drop_host_caches);
        self.timings.prefill_ms = t.elapsed().as_millis() as u64;
        let t = Instant::now();
        let m = self.host_measure(&plan, &engines, &target, &job_dir, cap.as_ref())?;
        self.timings.run_ms = t.elapsed().as_millis() as u64;
        self.env.ui.send(Output::Phase(Phase::Collect));
        for (name, text) in &m.artifacts {
            self.write(name, text)?;
        }
        self.env.ui.send(Output::Phase(Phase::Teardown));
        let t = Instant::now();
        if let Some(fs) = fs.as_mut() {
            tokio::task::block_in_place(|| fs.teardown()).map_err(CellError::HostFs)?;
        }
        let _ = std::fs::remove_dir_all(&job_dir);
        self.timings.teardown_ms = t.elapsed().as_millis() as u64;
        let allocated = tokio::task::block_in_place(|| backend.allocated_bytes());
        let artifacts: BTreeMap<String, String> = m.artifacts.into_iter().collect();
        let mut parsed = plan
            .engine
            .parse(&artifacts)
            .map_err(CellError::BadOutput)?;
        parsed
            .metrics
            .extend(m.window.finish(parsed.measured_secs, self.cell.hypervisor));
        parsed.metrics.extend(on_host::cpu_metrics(m.cpu));
        parsed.metrics.extend(allocated.map(allocated_metric));
        Ok(parsed)
    }

    /// Which binaries run the engine, and the host's kernel, in the params and provenance.
    fn record_engines(&mut self, engines: &Engines, plan: &WorkPlan) {
        let hello = engines.hello();
        self.prov.tools = workload::tool_versions(&hello);
        self.prov.guest_kernel = format!("host {}", hello.kernel);
        self.params.insert("host_kernel".into(), hello.kernel);
        let steps: Vec<Step> = plan.steps.measure.clone();
        self.params.extend(engines.param(&steps));
    }

    /// The cell's layout on the host: a filesystem made and mounted on the disk (its file
    /// through a loop device), the shared directory, or the disk itself (layout raw).
    fn host_layout(
        &mut self,
        plan: &WorkPlan,
        disk: &ProvisionedDisk,
    ) -> Result<(Option<HostFs>, Target), CellError> {
        let access = HostAccess::of(&disk.source);
        let layout = plan.steps.prep.iter().find_map(workload::host::layout_step);
        let layout = layout.transpose().map_err(CellError::HostStep)?;
        match (layout, &access) {
            (Some(LayoutStep::Mkfs(fs)), HostAccess::File(_) | HostAccess::Block(_)) => {
                self.env.ui.send(Output::Phase(Phase::Prefill));
                let dir = self.work.join(HOST_MOUNT_DIR);
                let made = tokio::task::block_in_place(|| HostFs::make(&access, fs_type(fs), &dir))
                    .map_err(CellError::HostFs)?;
                self.params
                    .insert("host_mounted_device".into(), made.device().to_string());
                let target = Target {
                    disk: None,
                    dir: Some(dir),
                };
                Ok((Some(made), target))
            }
            (Some(LayoutStep::SharedDir), HostAccess::Dir(dir)) => Ok((None, dir_target(dir))),
            (None, HostAccess::File(p) | HostAccess::Block(p)) => Ok((
                None,
                Target {
                    disk: Some(p.display().to_string()),
                    dir: None,
                },
            )),
            // The planner skips these (a network disk without the host's client, a raw layout
            // on a directory): reaching here is a planner bug, said as such.
            _ => Err(CellError::HostStep(on_host::HostStepError::NotOnHost(
                "this disk and layout",
            ))),
        }
    }

    /// The memory cgroup the engine runs in, capped at the guest's RAM, named in the params;
    /// or the reason there is none (the row is then not like for like where the workload's file
    /// fits the host's page cache, and says so).
    fn memory_cap(&mut self) -> Option<MemCap> {
        let mib = self.env.cfg.memory_mib;
        let name = format!("{}-{:03}", self.env.run_id, self.seq);
        let (cap, said) = match MemCap::create(&name, mib) {
            Ok(c) => {
                let said = c.describe.clone();
                (Some(c), said)
            }
            Err(why) => (None, format!("none: {why}")),
        };
        self.params.insert("host_memory_cap".into(), said);
        cap
    }

    /// One step on the host, with the run's interrupt, the job's time limit and the memory cap.
    fn host_step(
        &self,
        step: &Step,
        engines: &Engines,
        target: &Target,
        job_dir: &Path,
        memory: Option<&MemCap>,
    ) -> Result<on_host::StepRun, CellError> {
        let cfg = self.env.cfg;
        let limit = Duration::from_secs(cfg.runtime as u64 * 4 + cfg.ramp as u64 + 600);
        let cancel = self.env.cancel;
        let cancelled = || cancel.is_cancelled();
        let stop = Stop {
            cancelled: &cancelled,
            deadline: Instant::now() + limit,
            memory,
        };
        tokio::task::block_in_place(|| on_host::run_step(step, engines, target, job_dir, &stop))
            .map_err(|e| match e {
                on_host::HostStepError::Interrupted => CellError::Interrupted,
                e => CellError::HostStep(e),
            })
    }

    /// The measured steps, with the window's snapshots at the end of `window.0` and of
    /// `window.1` (as a guest cell's), and the engine's CPU over the steps between.
    fn host_measure(
        &self,
        plan: &WorkPlan,
        engines: &Engines,
        target: &Target,
        job_dir: &Path,
        memory: Option<&MemCap>,
    ) -> Result<Measured, CellError> {
        let src = Sources {
            server_pid: self.env.server.map(|s| s.1),
            server_companions: self.env.server_companions.to_vec(),
            server_name: self.env.server.map(|s| s.0),
            ..Sources::default()
        };
        let (from, to) = plan.steps.window;
        let mut m = Measured {
            artifacts: vec![],
            window: Window::default(),
            cpu: CpuUsage::default(),
        };
        self.env.ui.send(Output::Phase(Phase::Run));
        for (i, step) in plan.steps.measure.iter().enumerate() {
            let i = i as u32;
            let run = self.host_step(step, engines, target, job_dir, memory)?;
            m.artifacts.extend(run.artifacts);
            if i > from && i <= to {
                m.cpu = m.cpu.plus(run.cpu.unwrap_or_default());
            }
            if i == from {
                m.window.start = Some(metrics::snapshot(&src, None, None));
            }
            if i == to {
                m.window.end = Some(metrics::snapshot(&src, None, None));
                m.window.peak_rss_kib = metrics::server_rss_kib(&src);
            }
        }
        Ok(m)
    }
}

fn dir_target(dir: &Path) -> Target {
    Target {
        disk: None,
        dir: Some(dir.to_path_buf()),
    }
}

fn fs_type(fs: Filesystem) -> HostFsType {
    match fs {
        Filesystem::Ext4 => HostFsType::Ext4,
        Filesystem::Xfs => HostFsType::Xfs,
    }
}
