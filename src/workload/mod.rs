//! Workloads: the I/O engine jobs a cell runs in the guest. Presets mirror the seeds' engines and
//! parameters; `file:PATH` takes a user fio job file. Engine output parsers live beside them
//! (`fio.rs`: fio's JSON; `bonnie.rs`: bonnie++'s CSV).

pub mod baseline;
pub mod bonnie;
pub mod engine;
pub mod fio;

use crate::cell::{UnknownValue, WorkloadId};
pub use engine::{
    Bonnie, EngineError, EngineHandle, EngineParams, EnginePlan, Fio, FioJob, LiveIops, Parsed,
    WorkloadEngine,
};

/// A built-in workload.
#[derive(Clone, Copy)]
pub struct Preset {
    /// CLI name.
    pub name: &'static str,
    /// One line for `--help` and reports.
    pub about: &'static str,
    /// The engine that runs it, with the preset's job in it.
    pub engine: &'static dyn WorkloadEngine,
}

impl std::fmt::Debug for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preset")
            .field("name", &self.name)
            .field("engine", &self.engine.name())
            .finish()
    }
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

/// Builds a single-job fio preset at iodepth 32 with PG_RANDRW's placeholders.
macro_rules! qd32_job {
    ($name:literal, $rw:literal, $bs:literal) => {
        concat!(
            "[global]\nioengine=libaio\ndirect=1\ntime_based\ngroup_reporting\n",
            "runtime={runtime}\nramp_time={ramp}\nsize={size}\nfilename={disk}\n\n",
            "[",
            $name,
            "]\nbs=",
            $bs,
            "\nrw=",
            $rw,
            "\niodepth=32\nnumjobs=1\n"
        )
    };
}

/// Sequential 1 MiB reads, iodepth 32: streaming read bandwidth.
pub const SEQ_READ_1M: &str = qd32_job!("seq-read-1m", "read", "1m");
/// Sequential 1 MiB writes, iodepth 32: streaming write bandwidth.
pub const SEQ_WRITE_1M: &str = qd32_job!("seq-write-1m", "write", "1m");
/// Random 4 KiB reads, iodepth 32: read IOPS.
pub const RAND_READ_4K: &str = qd32_job!("rand-read-4k", "randread", "4k");
/// Random 4 KiB writes, iodepth 32: write IOPS.
pub const RAND_WRITE_4K: &str = qd32_job!("rand-write-4k", "randwrite", "4k");

static PG_RANDRW_FIO: Fio = Fio::preset(PG_RANDRW);
static SEQ_READ_1M_FIO: Fio = Fio::preset(SEQ_READ_1M);
static SEQ_WRITE_1M_FIO: Fio = Fio::preset(SEQ_WRITE_1M);
static RAND_READ_4K_FIO: Fio = Fio::preset(RAND_READ_4K);
static RAND_WRITE_4K_FIO: Fio = Fio::preset(RAND_WRITE_4K);
static BONNIE: Bonnie = Bonnie;

/// Every preset.
pub static PRESETS: &[Preset] = &[
    Preset {
        name: "pg-randrw",
        about: "the seed's reference job: 8k random 70/30 read/write, libaio, iodepth 16",
        engine: &PG_RANDRW_FIO,
    },
    Preset {
        name: "seq-read-1m",
        about: "sequential 1 MiB reads, libaio, iodepth 32",
        engine: &SEQ_READ_1M_FIO,
    },
    Preset {
        name: "seq-write-1m",
        about: "sequential 1 MiB writes, libaio, iodepth 32",
        engine: &SEQ_WRITE_1M_FIO,
    },
    Preset {
        name: "rand-read-4k",
        about: "random 4 KiB reads, libaio, iodepth 32",
        engine: &RAND_READ_4K_FIO,
    },
    Preset {
        name: "rand-write-4k",
        about: "random 4 KiB writes, libaio, iodepth 32",
        engine: &RAND_WRITE_4K_FIO,
    },
    Preset {
        name: "bonnie",
        about: "bonnie++ full run on a filesystem (file size twice the guest RAM)",
        engine: &BONNIE,
    },
];

/// The guest step that lays a cell's layout on the disk under test and mounts it, or `None` for
/// the raw device. A shared host directory (hostdir) is mounted, not made: the guest mounts the
/// virtio-fs share whatever the layout (the matrix only lets ext4 through).
pub fn layout_step(cell: &crate::cell::Cell) -> Option<vmbench_proto::Step> {
    use crate::cell::Layout;
    use vmbench_proto::{Filesystem, Step, Volume};
    if crate::storage::descriptor(cell.backend).shares_directory() {
        return Some(Step::MountVirtiofs {
            tag: vmbench_proto::TEST_FS_TAG.to_string(),
        });
    }
    let (fs, volume) = match cell.layout {
        Layout::Raw => return None,
        Layout::Ext4 => (Filesystem::Ext4, Volume::Whole),
        Layout::Xfs => (Filesystem::Xfs, Volume::Whole),
        Layout::PartExt4 => (Filesystem::Ext4, Volume::Partition),
        Layout::LvmExt4 => (Filesystem::Ext4, Volume::Lvm),
        Layout::LvmXfs => (Filesystem::Xfs, Volume::Lvm),
    };
    Some(Step::Mkfs { fs, volume })
}

/// The agent's "mounted DEVICE (FSTYPE)" line in a step's stderr tail, as the param
/// `guest_mounted_device` = DEVICE: which device (disk, partition, LV) the filesystem went on.
pub fn mounted_device<'a>(tails: impl IntoIterator<Item = &'a str>) -> Option<(String, String)> {
    tails.into_iter().flat_map(str::lines).find_map(|l| {
        let rest = l.strip_prefix("vmbench-agent: mounted ")?;
        let dev = rest.split_whitespace().next()?;
        Some(("guest_mounted_device".to_string(), dev.to_string()))
    })
}

/// The preset with this name.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Accepts a workload this build can run: a preset in the table, or a job file. The error names
/// the valid choices.
pub fn check(w: &WorkloadId) -> Result<(), UnknownValue> {
    match w {
        WorkloadId::Preset(name) if preset(name).is_none() => {
            let mut valid: Vec<&'static str> = PRESETS.iter().map(|p| p.name).collect();
            valid.push("file:PATH");
            Err(UnknownValue {
                what: "workload",
                got: name.clone(),
                valid,
            })
        }
        _ => Ok(()),
    }
}

/// Whether `w` is a built-in fio preset, the only workload whose fio parameters a sweep
/// (`--bs`, `--iodepth`, `--numjobs`, `--rwmix`) may override.
pub fn is_fio_preset(w: &WorkloadId) -> bool {
    matches!(w, WorkloadId::Preset(n) if preset(n).is_some_and(|p| p.engine.name() == "fio"))
}

/// The engine a workload runs: its preset's, or fio with the user's job file.
pub fn engine(w: &WorkloadId) -> Result<EngineHandle, EngineError> {
    match w {
        WorkloadId::Preset(name) => preset(name)
            .map(|p| EngineHandle::Preset(p.engine))
            .ok_or_else(|| EngineError::UnknownPreset(name.clone())),
        WorkloadId::FioFile(path) => Ok(EngineHandle::Owned(Box::new(Fio {
            job: FioJob::File(path.clone()),
        }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_presets_list_the_valid_ones() {
        let w: WorkloadId = "pg".parse().unwrap();
        let e = check(&w).unwrap_err().to_string();
        assert!(e.starts_with("unknown workload 'pg'"), "{e}");
        assert!(e.contains("pg-randrw") && e.contains("bonnie") && e.contains("file:PATH"));
        assert!(check(&"bonnie".parse().unwrap()).is_ok());
        assert!(check(&"file:/x.fio".parse().unwrap()).is_ok());
        assert!(matches!(engine(&w), Err(EngineError::UnknownPreset(_))));
    }
}

#[cfg(test)]
mod layout_tests {
    #[test]
    fn mounted_device_is_read_from_the_agent_line() {
        let tails = ["mke2fs 1.47\nvmbench-agent: mounted /dev/mapper/vmbench-test (ext4)"];
        assert_eq!(
            super::mounted_device(tails).unwrap().1,
            "/dev/mapper/vmbench-test"
        );
        assert_eq!(super::mounted_device(["no such line"]), None);
    }
}
