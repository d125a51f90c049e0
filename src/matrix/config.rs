//! The matrix configuration: a TOML file (`--config`) whose every key has a documented default,
//! overridden key by key by the command line. Unknown keys are an error (exit 2).

use crate::cell::Link;
use crate::cell::{
    Backend, Bus, CacheMode, Format, Hypervisor, IoMode, Layout, UnknownValue, WorkloadId, XenMode,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use super::repeat::Repeat;
pub use crate::storage::options::StorageConfig;

/// Everything a matrix run needs; serialized into the run directory so `--resume` reruns the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatrixConfig {
    /// Hypervisors. Default `["qemu"]` (TCG runs everywhere; add `kvm`, `xen` where they work).
    pub hypervisor: Vec<Hypervisor>,
    /// Xen modes, used only for Xen cells. Default `["pvh"]`.
    pub xen_mode: Vec<XenMode>,
    /// Storage backends. Default `["local", "nfs", "iscsi"]` (NFS and iSCSI servers embedded).
    pub backend: Vec<Backend>,
    /// Image formats. Default `["qcow2", "raw"]`.
    pub format: Vec<Format>,
    /// Guest buses. Default `["virtio-blk"]`.
    pub bus: Vec<Bus>,
    /// Host cache modes. Default `["none"]`.
    pub cache: Vec<CacheMode>,
    /// Host AIO modes. Default `["native"]`.
    pub io: Vec<IoMode>,
    /// Guest disk layouts. Default `["raw"]` (bonnie++ cells use ext4 when raw is asked).
    pub layout: Vec<Layout>,
    /// Workloads. Default `["pg-randrw"]`.
    pub workload: Vec<WorkloadId>,
    /// Repeats of every cell; the order is reversed on every other repeat. A number, or
    /// `"auto"`: repeat each cell until the CV of its headline figures (read/write IOPS;
    /// bonnie++ block output/input) is under `max_cv`, at least 3 and at most `max_repeats`
    /// times, and record `converged` and `cv_pct` on its last repeat. Default 1.
    pub repeat: Repeat,
    /// `repeat = "auto"`: the coefficient of variation (%) under which a cell is stable.
    /// Default 5.
    pub max_cv: f64,
    /// `repeat = "auto"`: the most repeats of a cell (at least 3). Default 8.
    pub max_repeats: u32,
    /// Measured seconds of every fio job. Default 60 (the seed's runtime).
    pub runtime: u32,
    /// Warm-up seconds, excluded from results. Default 5.
    pub ramp: u32,
    /// fio's `size` (the test area). Default "200M" (the seed's).
    pub size: String,
    /// Size of the disk under test, in MiB. Default 1024.
    pub disk_mib: u64,
    /// Cap on the disk under test, read + write operations per second (libvirt `<iotune>`
    /// `total_iops_sec`): emulates a cloud disk's limit, or gives `compare` a known regression.
    /// Recorded in every cell's params and provenance. Default none (uncapped).
    pub iops_limit: Option<u64>,
    /// Cap on the disk under test, read + write MiB per second (`<iotune>` `total_bytes_sec`).
    /// Recorded like `iops_limit`. Default none (uncapped).
    pub bw_limit_mib: Option<u64>,
    /// The cells the caps apply to, as an include rule (`cap_only = { emulator = "b" }`,
    /// `--cap-only emulator=b`): one side of an in-run A/B capped, a known regression for
    /// `compare --within --along` to find. Default empty: every cell.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cap_only: BTreeMap<String, String>,
    /// fio writes per-second bandwidth, IOPS and latency logs (the time series in reports and
    /// the within-run stability figures). `scripts/bench-fidelity` measures what they cost.
    /// Default true.
    pub time_series: bool,
    /// With `time_series`, fio's per-second latency logs too (the latency time series; the
    /// job's mean and percentiles come from its summary either way). fio accounts every I/O
    /// into them, unlike the bandwidth and IOPS logs, so they are the one instrument whose work
    /// grows with the I/O rate; README, "What measuring costs". Default true.
    pub latency_series: bool,
    /// The guest streams fio's once-a-second status line for the live IOPS display. Default
    /// true.
    pub live_status: bool,
    /// Write the test area once before measuring, so qcow2 and thin volumes are not measured on
    /// first allocation. Default true.
    pub prefill: bool,
    /// bonnie++ `-n`: files to create, in thousands. Default 16 (bonnie++'s own default).
    pub bonnie_files: u32,
    /// bonnie++ `-s` as a multiple of the guest's RAM, 2 to 16. Default 2 (the least bonnie++
    /// accepts); the LVM write-up's `-s 8G` with 2 GB of RAM is 4. The disk grows to hold it.
    pub bonnie_size_ratio: u32,
    /// After each fio cell, run the same job with the host's fio directly on the disk's backing
    /// target (image file, LUN file, block device) and add `host_baseline_*` and
    /// `*_efficiency_pct` (guest IOPS / host IOPS). Default false.
    pub host_baseline: bool,
    /// After each cell's job, K more instances from the same base started together (the boot
    /// storm, [`super::storm`]): `boot_storm_*` figures. 0 is off; otherwise 2 to
    /// [`super::storm::MAX_K`]. local and rbd cells (the backends that make instance disks from
    /// a base). Default 0.
    pub boot_storm: u32,
    /// Seconds without progress after which a running job fails with "no I/O progress": the
    /// disk under test completed no I/O (host-side counters) and fio printed no status line with
    /// a non-zero rate, while the guest is alive. Far below the job's total limit, so a stuck
    /// storage path costs a minute, not the whole night. 0 turns the watchdog off. Default 60.
    pub stall_timeout: u64,
    /// Guest vCPUs. Default 2.
    pub vcpus: u32,
    /// Guest memory in MiB. Default 512.
    pub memory_mib: u64,
    /// Seconds to wait for the agent's hello after domain start. Default 60.
    pub boot_timeout: u64,
    /// Boot-probe each hypervisor once before the run and mark its cells unsupported when the
    /// probe fails. Default true.
    pub probe: bool,
    /// libvirt URI per hypervisor (`kvm = "qemu+ssh://host1/system"`). Defaults:
    /// kvm/qemu `qemu:///system`, xen `xen:///system`.
    pub connect: BTreeMap<Hypervisor, String>,
    /// The libvirt hosts cells run on, name = URI (`[hosts]`, `--host NAME=URI`). Empty: one
    /// host, `local`, reached with `connect`'s URIs.
    pub hosts: BTreeMap<crate::cell::HostName, String>,
    /// vmbench's directory on a host, name = absolute path on THAT host (`[host_pool_dirs]`,
    /// `--host-pool-dir NAME=DIR`): the run's disks go in a subdirectory (removed at the end),
    /// the uploaded kernel and initramfs in the directory itself (kept for reuse). Default for
    /// a remote host `/var/lib/libvirt/images/vmbench`; this machine uses the local directory
    /// and the image cache.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_pool_dirs: BTreeMap<crate::cell::HostName, PathBuf>,
    /// QEMU builds every cell runs on, name = absolute path of the binary (`[emulators]`,
    /// `--emulator NAME=PATH`): libvirt's `<emulator>`, one dimension, each side recorded in
    /// provenance, interleaved in one run for `compare --within RUN --along emulator=A,B`.
    /// Empty: libvirt's own binary (`default`). QEMU and KVM cells only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub emulators: BTreeMap<crate::cell::EmulatorName, PathBuf>,
    /// Rules that drop cells: each rule is dimension = value pairs that must all match.
    pub exclude: Vec<BTreeMap<String, String>>,
    /// When non-empty, only cells matching at least one rule run.
    pub include: Vec<BTreeMap<String, String>>,
    /// Backend parameters.
    pub storage: StorageConfig,
    /// fio block sizes swept over the preset's `bs` (`["4k", "64k"]`). Default none (the
    /// preset's). fio presets only: job files and bonnie++ are refused.
    pub bs: Vec<crate::cell::BlockSize>,
    /// fio queue depths swept over the preset's `iodepth`. Default none.
    pub iodepth: Vec<u32>,
    /// fio job counts swept over the preset's `numjobs`. Default none.
    pub numjobs: Vec<u32>,
    /// fio read shares (%) swept over the preset's `rwmixread`. Default none.
    pub rwmix: Vec<u8>,
    /// fio `direct` values swept over the preset's (`[0]`: buffered I/O through the guest's
    /// page cache; every preset says 1). Default none.
    pub direct: Vec<u8>,
    /// A dedicated QEMU I/O thread for the disk under test: `off`, `on`. Default `["off"]`.
    pub iothread: Vec<crate::cell::IoThread>,
    /// virtio queues of the disk under test (virtio-scsi: its controller's). Default none
    /// (QEMU's: one per vCPU).
    pub queues: Vec<u32>,
    /// Pin vCPUs, emulator and I/O thread to host CPUs: `off`, `on`. `on` needs vcpus + 1
    /// online host CPUs. Default `["off"]`.
    pub pin: Vec<crate::cell::Pin>,
    /// Network links between QEMU and the embedded NFS/iSCSI servers: `loopback` (unshaped) or
    /// `RATE[+DELAY]` shaped with tc (`100mbit`, `1gbit+0.5ms`). Only nfs and iscsi cells vary
    /// it. Default `["loopback"]`.
    pub link: Vec<Link>,
    /// How each disk is made from the run's base image: `flat` (empty), `overlay` (qcow2 on
    /// the base), `copy` (the base copied in full), `clone` (an RBD clone). Default `["flat"]`.
    pub instance: Vec<crate::cell::InstanceDisk>,
    /// Test-only hooks (hidden CLI flags); never read from TOML or written to config.json.
    #[serde(skip)]
    pub test_hooks: super::test_hooks::TestHooks,
    /// Benchmark only (hidden `--fidelity-pairs`, [`super::fidelity`]): before its measured
    /// job, each cell runs the job with the instruments on and off, in rounds, inside its one
    /// boot. Never read from TOML or written to config.json. Default none.
    #[serde(skip)]
    pub fidelity: Option<super::fidelity::Plan>,
}

impl Default for MatrixConfig {
    fn default() -> Self {
        MatrixConfig {
            hypervisor: vec![Hypervisor::Qemu],
            xen_mode: vec![XenMode::Pvh],
            backend: crate::storage::kind::default_backends(),
            format: vec![Format::Qcow2, Format::Raw],
            bus: vec![Bus::VirtioBlk],
            cache: vec![CacheMode::None],
            io: vec![IoMode::Native],
            layout: vec![Layout::Raw],
            workload: vec![WorkloadId::Preset("pg-randrw".into())],
            repeat: Repeat::Fixed(1),
            max_cv: 5.0,
            max_repeats: 8,
            runtime: 60,
            ramp: 5,
            size: "200M".into(),
            disk_mib: 1024,
            iops_limit: None,
            bw_limit_mib: None,
            cap_only: BTreeMap::new(),
            time_series: true,
            latency_series: true,
            live_status: true,
            prefill: true,
            bonnie_files: 16,
            bonnie_size_ratio: 2,
            host_baseline: false,
            boot_storm: 0,
            stall_timeout: 60,
            vcpus: 2,
            memory_mib: 512,
            boot_timeout: 60,
            probe: true,
            connect: BTreeMap::new(),
            hosts: BTreeMap::new(),
            host_pool_dirs: BTreeMap::new(),
            emulators: BTreeMap::new(),
            exclude: vec![],
            include: vec![],
            storage: StorageConfig::default(),
            bs: vec![],
            iodepth: vec![],
            numjobs: vec![],
            rwmix: vec![],
            direct: vec![],
            iothread: vec![crate::cell::IoThread::Off],
            queues: vec![],
            pin: vec![crate::cell::Pin::Off],
            link: vec![Link::Loopback],
            instance: vec![crate::cell::InstanceDisk::Flat],
            test_hooks: Default::default(),
            fidelity: None,
        }
    }
}

/// A configuration problem (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML file is unreadable or malformed, or has unknown keys.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong (line and column included by the TOML parser).
        message: String,
    },
    /// A value is not one of the choices.
    #[error(transparent)]
    Unknown(#[from] UnknownValue),
    /// A value is out of range or contradicts another.
    #[error("{0}")]
    Invalid(String),
}

impl MatrixConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<MatrixConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// The libvirt URI for a hypervisor.
    pub fn uri(&self, hv: Hypervisor) -> String {
        self.connect
            .get(&hv)
            .cloned()
            .unwrap_or_else(|| hv.desc().default_uri.into())
    }

    /// The hosts cells run on: the `[hosts]` names, or the default host alone.
    pub fn host_names(&self) -> Vec<crate::cell::HostName> {
        if self.hosts.is_empty() {
            vec![crate::cell::HostName::default()]
        } else {
            self.hosts.keys().cloned().collect()
        }
    }

    /// The QEMU builds cells run on: the `[emulators]` names, or libvirt's own binary alone.
    pub fn emulator_names(&self) -> Vec<crate::cell::EmulatorName> {
        if self.emulators.is_empty() {
            vec![crate::cell::EmulatorName::default()]
        } else {
            self.emulators.keys().cloned().collect()
        }
    }

    /// The binary of a named emulator, `None` for libvirt's own.
    pub fn emulator_path(&self, name: &crate::cell::EmulatorName) -> Option<&Path> {
        self.emulators.get(name).map(PathBuf::as_path)
    }

    /// Each `[emulators]` binary is an absolute path to an executable file on this machine:
    /// a typo is a config error (exit 2) here, not a failed cell after the first boot. A
    /// remote host's binary is found by its libvirtd when the domain is defined.
    fn check_emulators(&self) -> Result<(), ConfigError> {
        use std::os::unix::fs::PermissionsExt;
        if self.emulators.is_empty() {
            return Ok(());
        }
        let remote = self.hosts.values().any(|u| !crate::uri::is_local_uri(u));
        for (name, path) in &self.emulators {
            if name.is_default() {
                return Err(ConfigError::Invalid(format!(
                    "emulator name '{name}' means libvirt's own binary: give the build another \
                     name"
                )));
            }
            if !path.is_absolute() {
                return Err(ConfigError::Invalid(format!(
                    "emulator '{name}': '{}' is not an absolute path (give the QEMU binary, e.g. \
                     /usr/bin/qemu-system-x86_64)",
                    path.display()
                )));
            }
            let meta = std::fs::metadata(path);
            let exec = meta
                .as_ref()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !exec && !remote {
                return Err(ConfigError::Invalid(format!(
                    "emulator '{name}': '{}' is not an executable file on this host",
                    path.display()
                )));
            }
        }
        if let Some(h) = self.hypervisor.iter().find(|h| !h.desc().takes_emulator) {
            return Err(ConfigError::Invalid(format!(
                "--emulator names a QEMU binary; {h} picks its own device model (use it with qemu \
                 or kvm)"
            )));
        }
        Ok(())
    }

    /// The libvirt URI of a hypervisor on a host. A named host's URI serves KVM and QEMU (one
    /// libvirtd); the default host without a `[hosts]` entry uses `connect`.
    pub fn host_uri(&self, host: &crate::cell::HostName, hv: Hypervisor) -> String {
        match self.hosts.get(host) {
            Some(uri) if hv.desc().shares_hosts => uri.clone(),
            _ => self.uri(hv),
        }
    }

    /// Every `host_pool_dirs` entry names a host of the run and an absolute path.
    fn check_host_pool_dirs(&self) -> Result<(), ConfigError> {
        let hosts = self.host_names();
        for (name, dir) in &self.host_pool_dirs {
            if !hosts.contains(name) {
                let valid: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
                return Err(ConfigError::Invalid(format!(
                    "host pool dir for unknown host '{name}' (valid: {})",
                    valid.join(", ")
                )));
            }
            if !dir.is_absolute() {
                return Err(ConfigError::Invalid(format!(
                    "host pool dir of '{name}' must be an absolute path on that host, got '{}'",
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    /// The I/O caps of the run, whatever `cap_only` says: `None` when uncapped.
    fn iotune_all(&self) -> Option<crate::hypervisor::IoTune> {
        let t = crate::hypervisor::IoTune {
            total_iops_sec: self.iops_limit,
            total_bytes_sec: self.bw_limit_mib.map(|m| m.saturating_mul(1 << 20)),
        };
        (t.total_iops_sec.is_some() || t.total_bytes_sec.is_some()).then_some(t)
    }

    /// Whether the caps apply to `cell` (`cap_only`).
    fn capped(&self, cell: &crate::cell::Cell) -> bool {
        self.cap_only.is_empty() || super::rule_matches(&self.cap_only, cell)
    }

    /// The I/O caps put on `cell`'s disk under test, or `None` when it is uncapped.
    pub fn iotune(&self, cell: &crate::cell::Cell) -> Option<crate::hypervisor::IoTune> {
        self.iotune_all().filter(|_| self.capped(cell))
    }

    /// The caps as cell parameters (`iops_limit`, `bw_limit_mib`), so a capped result says so.
    pub fn iotune_params(&self, cell: &crate::cell::Cell) -> Vec<(String, String)> {
        if !self.capped(cell) {
            return vec![];
        }
        [
            ("iops_limit", self.iops_limit),
            ("bw_limit_mib", self.bw_limit_mib),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string())))
        .collect()
    }

    /// The measurement's instrumentation as cell parameters, only where it is switched off
    /// (`time_series = off`), so a lean result says so and a default one stays as before.
    pub fn instrument_params(&self) -> Vec<(String, String)> {
        [
            ("time_series", self.time_series),
            ("latency_series", self.latency_series || !self.time_series),
            ("live_status", self.live_status),
        ]
        .into_iter()
        .filter(|(_, on)| !on)
        .map(|(k, _)| (k.to_string(), "off".to_string()))
        .collect()
    }

    /// `cell`'s caps as one provenance string (`iops=150,bw=8MiB/s`), empty when uncapped.
    pub fn io_limit_provenance(&self, cell: &crate::cell::Cell) -> String {
        if !self.capped(cell) {
            return String::new();
        }
        let iops = self.iops_limit.map(|n| format!("iops={n}"));
        let bw = self.bw_limit_mib.map(|m| format!("bw={m}MiB/s"));
        iops.into_iter().chain(bw).collect::<Vec<_>>().join(",")
    }

    /// A shaped link needs the embedded server on that protocol: vmbench cannot shape a network
    /// between QEMU and someone else's server.
    fn check_links(&self) -> Result<(), ConfigError> {
        let Some(shaped) = self.link.iter().find(|l| l.is_shaped()) else {
            return Ok(());
        };
        crate::storage::kind::check_links(&self.backend, *shaped, &self.storage)
            .map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// Rejects empty dimensions, zero counts and contradictions.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let empty = [
            ("hypervisor", self.hypervisor.is_empty()),
            ("backend", self.backend.is_empty()),
            ("format", self.format.is_empty()),
            ("bus", self.bus.is_empty()),
            ("cache", self.cache.is_empty()),
            ("io", self.io.is_empty()),
            ("layout", self.layout.is_empty()),
            ("workload", self.workload.is_empty()),
            ("xen_mode", self.xen_mode.is_empty()),
            ("iothread", self.iothread.is_empty()),
            ("pin", self.pin.is_empty()),
            ("link", self.link.is_empty()),
            ("instance", self.instance.is_empty()),
        ];
        if let Some((name, _)) = empty.iter().find(|(_, e)| *e) {
            return Err(ConfigError::Invalid(format!(
                "dimension '{name}' is empty: give at least one value"
            )));
        }
        for w in &self.workload {
            crate::workload::check(w)?;
        }
        self.check_host_pool_dirs()?;
        self.check_emulators()?;
        self.check_engine_options()?;
        let positive = [
            ("repeat", self.repeat.upper_bound(self.max_repeats) as u64),
            ("runtime", self.runtime as u64),
            ("vcpus", self.vcpus as u64),
            ("disk_mib", self.disk_mib),
            ("boot_timeout", self.boot_timeout),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("'{name}' must be at least 1")));
        }
        self.check_limits()?;
        self.check_storm()?;
        self.check_base_image()?;
        self.check_layout_sizes()?;
        self.check_auto_repeat()?;
        self.check_sweeps()?;
        self.check_pin(crate::hypervisor::pinning::online_cpus())?;
        self.check_links()?;
        if self.memory_mib < 128 {
            return Err(ConfigError::Invalid(
                "'memory_mib' must be at least 128".into(),
            ));
        }
        crate::storage::kind::validate(&self.backend, &self.storage)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        for rule in self.exclude.iter().chain(&self.include) {
            super::check_rule(rule)?;
        }
        if !self.cap_only.is_empty() {
            super::check_rule(&self.cap_only)?;
            if self.iotune_all().is_none() {
                return Err(ConfigError::Invalid(
                    "cap_only (--cap-only) says which cells --iops-limit/--bw-limit cap: give a \
                     limit too"
                        .into(),
                ));
            }
        }
        parse_size(&self.size).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(())
    }
}

impl MatrixConfig {
    /// Estimated seconds of one run of `cell`, for the plan line and the dry run: about 4 s of
    /// boot to hello, fio's start and end, and teardown under TCG (a fresh clone's default
    /// matrix, 2026-12-07: boot 2.2-3.1 s, fio 0.6 s, teardown 0.3 s; 1 s for a host cell),
    /// the workload's own estimate (its engine's, at the cell's pace), and a boot storm after
    /// the job, which boots K guests on the host's CPUs: about 15 s of one CPU per instance (3
    /// instances on a 2-CPU host were all ready after 22 s).
    pub fn estimated_cell_secs(&self, cell: &crate::cell::Cell) -> u64 {
        let size_bytes = parse_size(&self.size).unwrap_or(200 << 20);
        let in_guest = cell.hypervisor.desc().runs_guest;
        let pace = crate::workload::Pace {
            link_bytes_s: match cell.link {
                Link::Shaped { rate_bps, .. } => Some(rate_bps / 8),
                Link::Loopback => None,
            },
            in_guest,
        };
        let work = crate::workload::engine(&cell.workload)
            .map_or(u64::from(self.ramp) + u64::from(self.runtime), |e| {
                e.estimated_secs(&self.engine_params(cell, "", size_bytes), pace)
            });
        let storm = (self.boot_storm as u64 * 15)
            .div_ceil(crate::hypervisor::pinning::online_cpus().max(1) as u64);
        let boot = if in_guest { 4 } else { 1 };
        boot + work + storm + self.fidelity_secs()
    }

    /// The in-boot fidelity rounds' seconds: each job its ramp and runtime, and about a second
    /// for the cache drop and fio's start under TCG (the plan once said "about 33 s" of a run
    /// that took 14 minutes).
    fn fidelity_secs(&self) -> u64 {
        self.fidelity.map_or(0, |plan| {
            plan.order().len() as u64 * (u64::from(self.ramp) + u64::from(self.runtime) + 1)
        })
    }

    /// What the workload engine is told about `cell`: this config's job parameters with the
    /// cell's sweep values, its I/O `target` and the test area's size in bytes.
    pub fn engine_params<'a>(
        &'a self,
        cell: &'a crate::cell::Cell,
        target: &'a str,
        size_bytes: u64,
    ) -> crate::workload::EngineParams<'a> {
        crate::workload::EngineParams {
            runtime: self.runtime,
            ramp: self.ramp,
            size: &self.size,
            size_bytes,
            prefill: self.prefill,
            memory_mib: self.memory_mib,
            bonnie_files: self.bonnie_files,
            bonnie_size_ratio: self.bonnie_size_ratio,
            disk_mib: self.disk_mib,
            target,
            overrides: &cell.job,
            time_series: self.time_series,
            latency_series: self.latency_series,
            live_status: self.live_status,
        }
    }

    /// Every combination of the QEMU disk tuning dimensions, in config order.
    pub fn tunings(&self) -> Vec<crate::cell::DiskTuning> {
        let queues: Vec<Option<u32>> = if self.queues.is_empty() {
            vec![None]
        } else {
            self.queues.iter().copied().map(Some).collect()
        };
        let mut out = vec![];
        for &iothread in &self.iothread {
            for &q in &queues {
                for &pin in &self.pin {
                    out.push(crate::cell::DiskTuning {
                        iothread,
                        queues: q,
                        pin,
                    });
                }
            }
        }
        out
    }

    /// The fio sweeps override a preset's values: a job file's author owns them, and bonnie++
    /// has none. Values in range (the CLI checks them too; the TOML file is checked here).
    fn check_sweeps(&self) -> Result<(), ConfigError> {
        let set: Vec<&str> = [
            ("--bs", !self.bs.is_empty()),
            ("--iodepth", !self.iodepth.is_empty()),
            ("--numjobs", !self.numjobs.is_empty()),
            ("--rwmix", !self.rwmix.is_empty()),
            ("--direct", !self.direct.is_empty()),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        crate::workload::check_sweeps(set, &self.workload)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let ranges = [
            ("iodepth (--iodepth)", &self.iodepth, 1, 65536),
            ("numjobs (--numjobs)", &self.numjobs, 1, 1024),
            ("queues (--queues)", &self.queues, 1, 256),
        ];
        for (name, vals, lo, hi) in ranges {
            if let Some(v) = vals.iter().find(|v| !(lo..=hi).contains(*v)) {
                return Err(ConfigError::Invalid(format!(
                    "'{name}' must be from {lo} to {hi}, got {v}"
                )));
            }
        }
        if let Some(v) = self.direct.iter().find(|v| **v > 1) {
            return Err(ConfigError::Invalid(format!(
                "'direct (--direct)' is fio's direct flag, 0 (buffered) or 1 (O_DIRECT), got {v}"
            )));
        }
        if let Some(v) = self.rwmix.iter().find(|v| **v > 100) {
            return Err(ConfigError::Invalid(format!(
                "'rwmix (--rwmix)' is a read percentage from 0 to 100, got {v}"
            )));
        }
        Ok(())
    }

    /// `--pin on` gives every vCPU its own host CPU and the emulator and I/O thread one more:
    /// it needs vcpus + 1 online CPUs, or the pinned guest would fight itself for a CPU.
    pub fn check_pin(&self, online: usize) -> Result<(), ConfigError> {
        let need = self.vcpus as usize + 1;
        if self.pin.contains(&crate::cell::Pin::On) && online < need {
            return Err(ConfigError::Invalid(format!(
                "--pin on needs vcpus + 1 = {need} online host CPUs (one per vCPU, one for the \
                 emulator and I/O thread); this host has {online}: lower --vcpus or drop --pin on"
            )));
        }
        Ok(())
    }

    /// `auto` needs room above its minimum and a CV threshold that can be met.
    /// A layout whose mkfs refuses the disk fails every cell in the guest, after a boot, with
    /// mkfs's usage text: say so before the run.
    fn check_layout_sizes(&self) -> Result<(), ConfigError> {
        for l in &self.layout {
            if let Some(min) = l.min_disk_mib().filter(|m| self.disk_mib < *m) {
                return Err(ConfigError::Invalid(format!(
                    "layout {l} needs a disk of at least {min} MiB (its mkfs refuses a smaller \
                     one), got disk_mib {}: raise --disk-mib or drop {l}",
                    self.disk_mib
                )));
            }
        }
        Ok(())
    }

    fn check_auto_repeat(&self) -> Result<(), ConfigError> {
        use super::repeat::MIN_AUTO_REPEATS;
        if self.repeat != Repeat::Auto {
            return Ok(());
        }
        if self.max_repeats < MIN_AUTO_REPEATS {
            return Err(ConfigError::Invalid(format!(
                "'max_repeats' (--max-repeats) must be at least {MIN_AUTO_REPEATS} with repeat = auto"
            )));
        }
        if !(self.max_cv.is_finite() && self.max_cv > 0.0) {
            return Err(ConfigError::Invalid(format!(
                "'max_cv' (--max-cv) must be a percentage above 0, got {}",
                self.max_cv
            )));
        }
        Ok(())
    }

    /// bonnie++'s `-s` ratio: from 2 (the least bonnie++ accepts) to 16.
    fn check_engine_options(&self) -> Result<(), ConfigError> {
        if (2..=16).contains(&self.bonnie_size_ratio) {
            return Ok(());
        }
        Err(ConfigError::Invalid(format!(
            "'bonnie_size_ratio (--bonnie-size-ratio)' is bonnie++'s -s as a multiple of the \
             guest's RAM, from 2 (the least bonnie++ accepts) to 16, got {}",
            self.bonnie_size_ratio
        )))
    }

    /// `--base-image`: a raw or qcow2 file that fits the cells' disk, for a matrix with cells
    /// whose disk starts from a base (else it would be silently unused).
    fn check_base_image(&self) -> Result<(), ConfigError> {
        let Some(path) = &self.storage.base_image else {
            return Ok(());
        };
        if !self.instance.iter().any(|i| i.from_base()) {
            return Err(ConfigError::Invalid(format!(
                "--base-image {} is what instance disks start from, and every cell's disk is \
                 flat: add --instance-disk overlay, copy or clone",
                path.display()
            )));
        }
        let image = crate::storage::base::UserImage::open(path).map_err(ConfigError::Invalid)?;
        if image.virtual_bytes > self.disk_mib << 20 {
            return Err(ConfigError::Invalid(image.too_big(self.disk_mib << 20)));
        }
        Ok(())
    }

    /// A storm of 0 (off) or 2 to [`super::storm::MAX_K`] instances, whose guests fit in this
    /// host's available memory (a storm on another libvirt host is that host's to fit).
    fn check_storm(&self) -> Result<(), ConfigError> {
        let (k, max) = (self.boot_storm, super::storm::MAX_K);
        if k == 0 {
            return Ok(());
        }
        if k == 1 || k > max {
            return Err(ConfigError::Invalid(format!(
                "'boot_storm' is {k}: give 0 (off) or 2 to {max} instances"
            )));
        }
        if let Some(h) = self.hypervisor.iter().find(|h| !h.desc().runs_guest) {
            return Err(ConfigError::Invalid(format!(
                "'boot_storm' boots guests; {h} cells have none: run them in a matrix without \
                 --boot-storm"
            )));
        }
        let need = k as u64 * self.memory_mib;
        match super::storm::mem_available_mib() {
            Some(have) if self.hosts.is_empty() && need > have => {
                Err(ConfigError::Invalid(format!(
                    "'boot_storm' = {k} needs {k} x {} MiB = {need} MiB of guest memory; this \
                     host has {have} MiB available: fewer instances or a smaller --memory",
                    self.memory_mib
                )))
            }
            _ => Ok(()),
        }
    }

    /// A zero cap would stall every I/O (libvirt reads 0 as "no limit", which is not what was
    /// asked either); Xen has no `<iotune>`.
    fn check_limits(&self) -> Result<(), ConfigError> {
        let caps = [
            ("iops_limit (--iops-limit)", self.iops_limit),
            ("bw_limit_mib (--bw-limit)", self.bw_limit_mib),
        ];
        if let Some((name, _)) = caps.iter().find(|(_, v)| *v == Some(0)) {
            return Err(ConfigError::Invalid(format!(
                "'{name}' must be at least 1 (leave it out for no limit)"
            )));
        }
        let no_iotune = self.hypervisor.iter().find_map(|h| h.desc().no_iotune);
        if let (Some(why), Some(_)) = (no_iotune, self.iotune_all()) {
            return Err(ConfigError::Invalid(format!(
                "--iops-limit/--bw-limit {why}"
            )));
        }
        Ok(())
    }
}

/// Parses fio-style sizes (`200M`, `1G`, `4096`, `64k`) to bytes.
/// A `--size` that is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number in front.
    #[error("size '{0}' is not a number with an optional unit (k, M, G, T)")]
    NotANumber(String),
    /// A unit that is not one of k, M, G, T.
    #[error("size '{size}': unknown unit '{unit}' (valid: k, M, G, T)")]
    UnknownUnit {
        /// What was given.
        size: String,
        /// Its unit.
        unit: String,
    },
    /// Zero bytes, or more than 64 bits hold.
    #[error("size '{0}' is zero or too large")]
    OutOfRange(String),
}

pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| SizeError::NotANumber(s.into()))?;
    let mult: u64 = match unit
        .to_ascii_lowercase()
        .trim_end_matches("ib")
        .trim_end_matches('b')
    {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(SizeError::UnknownUnit {
                size: s.into(),
                unit: unit.into(),
            })
        }
    };
    n.checked_mul(mult)
        .filter(|&b| b > 0)
        .ok_or_else(|| SizeError::OutOfRange(s.into()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("200M"), Ok(200 << 20));
        assert_eq!(super::parse_size("1g"), Ok(1 << 30));
        assert_eq!(super::parse_size("4096"), Ok(4096));
        assert!(super::parse_size("12X")
            .unwrap_err()
            .to_string()
            .contains("valid: k, M, G, T"));
        assert!(super::parse_size("0").is_err());
        assert!(super::parse_size("M").is_err());
    }

    /// A fio cell is its job's seconds plus a prefill and the boot's; a bonnie++ cell is not
    /// timed and takes as long as its file at the link's rate (the xen-kvm preset's plan said
    /// "about 70 s each" of cells that took 90 s on 1 Gbit and several minutes on 100 Mbit).
    #[test]
    fn estimates_follow_the_workload_and_the_link() {
        use crate::cell::Cell;
        let cfg = MatrixConfig::default();
        let fio = Cell::default();
        // 4 s of boot and teardown, 1 s of prefill (200 MiB), ramp 5 s, runtime 60 s.
        assert_eq!(cfg.estimated_cell_secs(&fio), 4 + 1 + 5 + 60);
        let slow: Link = "100mbit".parse().unwrap();
        let fio_slow = Cell {
            link: slow,
            ..Cell::default()
        };
        // 200 MiB over 11.9 MiB/s: 17 s of prefill.
        assert_eq!(cfg.estimated_cell_secs(&fio_slow), 4 + 17 + 5 + 60);
        let bonnie = |link: &str| Cell {
            workload: WorkloadId::Preset("bonnie".into()),
            layout: Layout::Ext4,
            link: link.parse().unwrap(),
            ..Cell::default()
        };
        let (local, gbit, mbit) = (
            cfg.estimated_cell_secs(&bonnie("loopback")),
            cfg.estimated_cell_secs(&bonnie("1gbit")),
            cfg.estimated_cell_secs(&bonnie("100mbit")),
        );
        // 512 MiB guest, -s 1 GiB: four passes of 1 GiB (64-70 s measured on a local file,
        // 90 s over 1 Gbit NFS or iSCSI, 383-406 s over 100 Mbit).
        assert!((60..=85).contains(&local), "{local}");
        assert!((80..=100).contains(&gbit), "{gbit}");
        assert!((400..=460).contains(&mbit), "{mbit}");
        // A host row runs on the host's disk, not a TCG guest's: 10-11 s measured.
        let host = Cell {
            hypervisor: crate::cell::Hypervisor::Host,
            format: Format::Raw,
            ..bonnie("loopback")
        };
        let on_host = cfg.estimated_cell_secs(&host);
        assert!((5..=20).contains(&on_host), "{on_host}");
        // In-boot fidelity rounds: 2 rounds x 3 jobs of 5 + 60 s, and a second each.
        let rounds = MatrixConfig {
            fidelity: Some(crate::matrix::fidelity::Plan {
                pairs: 2,
                variants: crate::matrix::fidelity::Variants::Logs,
            }),
            ..MatrixConfig::default()
        };
        assert_eq!(
            rounds.estimated_cell_secs(&fio),
            cfg.estimated_cell_secs(&fio) + 6 * 66
        );
    }

    use super::*;

    fn parse(s: &str) -> Result<MatrixConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.toml");
        std::fs::write(&p, s).unwrap();
        MatrixConfig::from_file(&p).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_readme_matrix() {
        let c = parse("").unwrap();
        assert_eq!(c, MatrixConfig::default());
        assert_eq!(
            c.backend,
            vec![Backend::Local, Backend::Nfs, Backend::Iscsi]
        );
        c.validate().unwrap();
    }

    #[test]
    fn file_values_parse() {
        let c = parse(
            "hypervisor = [\"kvm\", \"xen\"]\nformat = [\"raw\"]\nrepeat = 3\n\
             [connect]\nkvm = \"qemu+ssh://h1/system\"\n[storage]\nlvm_vg = \"vg0\"\n",
        )
        .unwrap();
        assert_eq!(c.hypervisor, vec![Hypervisor::Kvm, Hypervisor::Xen]);
        assert_eq!(c.uri(Hypervisor::Kvm), "qemu+ssh://h1/system");
        assert_eq!(c.uri(Hypervisor::Xen), "xen:///system");
        assert_eq!(c.storage.lvm_vg.as_deref(), Some("vg0"));
    }

    #[test]
    fn hosts_table_parses_and_checks_names() {
        let c = parse("[hosts]\nlocal = \"qemu:///system\"\nh2 = \"qemu+tcp://10.9.0.2/system\"\n")
            .unwrap();
        let names: Vec<String> = c.host_names().iter().map(|h| h.to_string()).collect();
        assert_eq!(names, ["h2", "local"]);
        let e = parse("[hosts]\n\"Bad Name\" = \"qemu:///system\"\n").unwrap_err();
        assert!(e.contains("host name"), "{e}");
    }

    #[test]
    fn host_pool_dirs_name_known_hosts_and_absolute_paths() {
        let hosts = "[hosts]\nh2 = \"qemu+tcp://10.9.0.2/system\"\n";
        let c = parse(&format!("{hosts}[host_pool_dirs]\nh2 = \"/srv/vmbench\"\n")).unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.host_pool_dirs[&"h2".parse().unwrap()],
            PathBuf::from("/srv/vmbench")
        );
        let bad = |t: &str| {
            parse(&format!("{hosts}[host_pool_dirs]\n{t}\n"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        let e = bad("h3 = \"/srv\"");
        assert!(e.contains("unknown host 'h3' (valid: h2)"), "{e}");
        let e = bad("h2 = \"srv\"");
        assert!(e.contains("absolute path on that host"), "{e}");
    }

    #[test]
    fn unknown_keys_and_values_are_named() {
        let e = parse("hypervisors = [\"kvm\"]\n").unwrap_err();
        assert!(e.contains("unknown field `hypervisors`"), "{e}");
        let e = parse("format = [\"vmdk\"]\n").unwrap_err();
        assert!(
            e.contains("unknown format 'vmdk' (valid: qcow2, raw)"),
            "{e}"
        );
        let e = parse("[storage]\nnfs_server = \"x\"\n").unwrap_err();
        assert!(e.contains("nfs_server"), "{e}");
        let e = parse("repeat = \"two\"\n").unwrap_err();
        assert!(e.contains("repeat"), "{e}");
        assert!(parse("format = [\n").is_err());
    }

    #[test]
    fn contradictions_and_empties_are_refused() {
        let mut c = MatrixConfig {
            format: vec![],
            ..Default::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("'format' is empty"));
        c = MatrixConfig {
            backend: vec![Backend::Block],
            ..Default::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--block-device"));
        c.storage.block_device = Some("/dev/loop0".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--allow-destroy"));
        c = MatrixConfig {
            repeat: Repeat::Fixed(0),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("'repeat'"));
        c = MatrixConfig::default();
        c.storage.lvm_vg = Some("-vg".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("starts with '-'"));
        c.storage.lvm_vg = None;
        c.storage.nfs = Some("nfs://h/e".parse().unwrap());
        c.storage.nfs_mount = Some("/mnt".into());
        assert!(c.validate().unwrap_err().to_string().contains("contradict"));
    }

    #[test]
    fn repeat_is_a_number_or_auto_with_its_bounds() {
        assert_eq!(parse("repeat = 3\n").unwrap().repeat, Repeat::Fixed(3));
        let c = parse("repeat = \"auto\"\nmax_cv = 3.5\nmax_repeats = 6\n").unwrap();
        assert_eq!((c.repeat, c.max_cv, c.max_repeats), (Repeat::Auto, 3.5, 6));
        c.validate().unwrap();
        let e = parse("repeat = \"often\"\n").unwrap_err();
        assert!(e.contains("valid: a number >= 1, or auto"), "{e}");
        let e = parse("repeat = \"auto\"\nmax_repeats = 2\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("at least 3"), "{e}");
        let e = parse("repeat = \"auto\"\nmax_cv = 0.0\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("max_cv"), "{e}");
        // A fixed count ignores the auto bounds.
        parse("repeat = 2\nmax_repeats = 1\n")
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn io_limits_parse_render_and_refuse_zero() {
        let c = parse("iops_limit = 150\nbw_limit_mib = 8\n").unwrap();
        c.validate().unwrap();
        let cell = crate::cell::Cell::default();
        let t = c.iotune(&cell).unwrap();
        assert_eq!(t.total_iops_sec, Some(150));
        assert_eq!(t.total_bytes_sec, Some(8 << 20));
        assert_eq!(
            c.iotune_params(&cell),
            vec![
                ("iops_limit".to_string(), "150".to_string()),
                ("bw_limit_mib".to_string(), "8".to_string())
            ]
        );
        assert_eq!(c.io_limit_provenance(&cell), "iops=150,bw=8MiB/s");
        let d = MatrixConfig::default();
        assert_eq!(d.io_limit_provenance(&cell), "");
        assert_eq!(d.iotune(&cell), None);
        assert!(d.iotune_params(&cell).is_empty());
        let e = parse("iops_limit = 0\n").unwrap().validate().unwrap_err();
        assert!(
            e.to_string()
                .contains("'iops_limit (--iops-limit)' must be at least 1"),
            "{e}"
        );
        let e = parse("bw_limit_mib = 0\n").unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("--bw-limit"), "{e}");
        assert!(parse("iops_limit = \"fast\"\n")
            .unwrap_err()
            .contains("iops_limit"));
        assert!(parse("iops_limit = -3\n").is_err());
        let mut c = parse("iops_limit = 150\n").unwrap();
        c.hypervisor.push(Hypervisor::Xen);
        assert!(c.validate().unwrap_err().to_string().contains("<iotune>"));
    }

    #[test]
    fn xfs_layouts_need_a_300_mib_disk() {
        let e = parse("layout = [\"raw\", \"xfs\"]\ndisk_mib = 128\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("layout xfs needs a disk of at least 300 MiB"),
            "{e}"
        );
        let e = parse("layout = [\"lvm-xfs\"]\ndisk_mib = 299\n")
            .unwrap()
            .validate();
        assert!(e.is_err());
        parse("layout = [\"xfs\"]\ndisk_mib = 300\n")
            .unwrap()
            .validate()
            .unwrap();
        parse("layout = [\"ext4\"]\ndisk_mib = 128\n")
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn lvm_and_split_layouts_need_a_16_mib_side() {
        for l in ["lvm-ext4", "split-part-ext4", "split-lvm-ext4"] {
            let e = parse(&format!("layout = [\"{l}\"]\ndisk_mib = 15\n"))
                .unwrap()
                .validate()
                .unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("layout {l} needs a disk of at least 16 MiB")),
                "{e}"
            );
            parse(&format!("layout = [\"{l}\"]\ndisk_mib = 16\n"))
                .unwrap()
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn cap_only_caps_the_matching_cells_and_needs_a_limit() {
        let c = parse("iops_limit = 150\n[cap_only]\nemulator = \"b\"\n").unwrap();
        c.validate().unwrap();
        let a = crate::cell::Cell {
            emulator: "a".parse().unwrap(),
            ..Default::default()
        };
        let b = crate::cell::Cell {
            emulator: "b".parse().unwrap(),
            ..Default::default()
        };
        assert_eq!(c.iotune(&a), None);
        assert!(c.iotune_params(&a).is_empty());
        assert_eq!(c.io_limit_provenance(&a), "");
        assert_eq!(c.iotune(&b).unwrap().total_iops_sec, Some(150));
        assert_eq!(c.io_limit_provenance(&b), "iops=150");
        let e = parse("[cap_only]\nemulator = \"b\"\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("give a limit too"), "{e}");
        let e = parse("iops_limit = 5\n[cap_only]\ncolour = \"b\"\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("unknown dimension 'colour'"), "{e}");
    }

    #[test]
    fn emulators_must_be_executables_and_qemu_only() {
        let ok = parse("[emulators]\na = \"/bin/sh\"\nb = \"/bin/sh\"\n").unwrap();
        ok.validate().unwrap();
        assert_eq!(ok.emulator_names().len(), 2);
        assert_eq!(
            MatrixConfig::default().emulator_names(),
            vec![crate::cell::EmulatorName::default()]
        );
        let e = parse("[emulators]\na = \"qemu\"\n").unwrap().validate();
        assert!(e.unwrap_err().to_string().contains("not an absolute path"));
        let e = parse("[emulators]\na = \"/nonexistent/qemu\"\n")
            .unwrap()
            .validate();
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("not an executable file"));
        let toml = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let e = parse(&format!("[emulators]\na = \"{toml}\"\n"))
            .unwrap()
            .validate();
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("not an executable file"));
        let e = parse("[emulators]\ndefault = \"/bin/sh\"\n")
            .unwrap()
            .validate();
        assert!(e.unwrap_err().to_string().contains("another name"));
        let e = parse("[emulators]\nA = \"/bin/sh\"\n").unwrap_err();
        assert!(e.contains("emulator name"), "{e}");
        let mut xen = ok.clone();
        xen.hypervisor = vec![Hypervisor::Xen];
        let e = xen.validate().unwrap_err().to_string();
        assert!(e.contains("use it with qemu or kvm"), "{e}");
    }

    #[test]
    fn sweep_keys_parse_from_the_file_and_are_checked() {
        let c = parse(
            "backend = [\"local\"]\nbs = [\"4k\", \"64k\"]\niodepth = [1, 32]\n\
             iothread = [\"off\", \"on\"]\nqueues = [2]\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.bs.len(), 2);
        assert_eq!(c.tunings().len(), 2);
        assert_eq!(crate::matrix::expand(&c).cells.len(), 2 * 2 * 2 * 2);
        let e = parse("bs = [\"4q\"]\n").unwrap_err();
        assert!(e.contains("unknown block size (bs) '4q'"), "{e}");
        let e = parse("iodepth = [0]\n").unwrap().validate().unwrap_err();
        assert!(
            e.to_string()
                .contains("'iodepth (--iodepth)' must be from 1"),
            "{e}"
        );
        let e = parse("rwmix = [120]\n").unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("0 to 100"), "{e}");
        let e = parse("direct = [2]\n").unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("0 (buffered) or 1"), "{e}");
        let e = parse("bonnie_size_ratio = 1\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("from 2"), "{e}");
        assert!(parse("bonnie_size_ratio = 4\n").unwrap().validate().is_ok());
    }

    /// `--base-image`: only with cells made from a base, a file that exists, and no larger than
    /// the disk.
    #[test]
    fn a_base_image_needs_base_cells_a_file_and_room_on_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("cloud.raw");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(200 << 20)
            .unwrap();
        let conf = |instance: &str, disk: u64, path: &std::path::Path| {
            parse(&format!(
                "backend = [\"local\"]\nformat = [\"qcow2\"]\ninstance = [\"{instance}\"]\n\
                 disk_mib = {disk}\n[storage]\nbase_image = \"{}\"\n",
                path.display()
            ))
            .unwrap()
            .validate()
        };
        let e = conf("flat", 256, &img).unwrap_err().to_string();
        assert!(e.contains("every cell's disk is flat"), "{e}");
        let e = conf("overlay", 128, &img).unwrap_err().to_string();
        assert!(
            e.contains("200 MiB, larger than the cells' disk (128 MiB)"),
            "{e}"
        );
        let e = conf("overlay", 256, &dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--base-image") && e.contains("none"), "{e}");
        assert!(conf("overlay", 256, &img).is_ok());
        let e = parse("workload = [\"file:/x.fio\"]\nnumjobs = [2]\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("whose author owns those values"),
            "{e}"
        );
        let e = parse("iothread = []\n").unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("'iothread' is empty"), "{e}");
    }
}
