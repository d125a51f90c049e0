//! Workloads: the I/O engine jobs a cell runs in the guest. Presets mirror the seeds' engines and
//! parameters; `file:PATH` takes a user fio job file. Engine output parsers live beside them
//! (`fio.rs`: fio's JSON; `bonnie.rs`: bonnie++'s CSV).

pub mod bonnie;
pub mod fio;

/// Which engine a workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// fio with a job file.
    Fio,
    /// bonnie++ on a filesystem.
    Bonnie,
}

/// A built-in workload.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// CLI name.
    pub name: &'static str,
    /// One line for `--help` and reports.
    pub about: &'static str,
    /// Which engine.
    pub engine: Engine,
    /// For fio presets, the job file (with `{disk}` for the device, `{runtime}`, `{ramp}`,
    /// `{size}` filled from the CLI).
    pub job: &'static str,
}

/// The seed's reference job (fio-longhorn-localpv-openebs.txt), made direct=1 so the guest page
/// cache does not answer the reads.
pub const PG_RANDRW: &str = "[global]
ioengine=libaio
direct=1
time_based
group_reporting
runtime={runtime}
ramp_time={ramp}
size={size}
filename={disk}

[pg-test]
bs=8k
rw=randrw
rwmixread=70
iodepth=16
numjobs=1
";

/// Every preset.
pub const PRESETS: &[Preset] = &[Preset {
    name: "pg-randrw",
    about: "the seed's reference job: 8k random 70/30 read/write, libaio, iodepth 16",
    engine: Engine::Fio,
    job: PG_RANDRW,
}, Preset {
    name: "bonnie",
    about: "bonnie++ full run (per-char included) on ext4, file size 2x guest RAM",
    engine: Engine::Bonnie,
    job: "",
}];

/// The engine a workload runs (a job file is always fio).
pub fn engine_of(w: &crate::cell::WorkloadId) -> Engine {
    match w {
        crate::cell::WorkloadId::Preset(name) => {
            PRESETS.iter().find(|p| p.name == name).map(|p| p.engine).unwrap_or(Engine::Fio)
        }
        crate::cell::WorkloadId::FioFile(_) => Engine::Fio,
    }
}
