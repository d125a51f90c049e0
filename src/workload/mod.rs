//! Workloads: the I/O engine jobs a cell runs in the guest. Presets mirror the seeds' engines and
//! parameters; `file:PATH` takes a user fio job file. Each engine is one file (`fio.rs`,
//! `bonnie.rs`): its descriptor, its [`WorkloadEngine`] and its output parser; `engine.rs` holds
//! the trait, the descriptor type and the table of engines. Everything outside this folder asks
//! the functions below (or a [`Descriptor`]) instead of naming an engine.

pub mod baseline;
pub mod bonnie;
pub mod engine;
pub mod fio;
pub mod host;
pub mod memcap;
#[cfg(test)]
pub mod toy;

use crate::cell::{UnknownValue, WorkloadId};
pub use bonnie::Bonnie;
pub use engine::{
    CellTable, Descriptor, EngineError, EngineHandle, EngineParams, EnginePlan, Figures, LiveIops,
    Pace, Parsed, RateKind, TableKind, TailKind, WorkloadEngine, ENGINES,
};
pub use fio::{Fio, FioJob};
use std::collections::BTreeMap;

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

/// Builds a single-job fio preset that touches each block of the test area once (no
/// `time_based`, fio's random map): `{runtime}` only bounds it.
macro_rules! once_job {
    ($name:literal, $rw:literal) => {
        concat!(
            "[global]\nioengine=libaio\ndirect=1\ngroup_reporting\n",
            "runtime={runtime}\nsize={size}\nfilename={disk}\n\n",
            "[",
            $name,
            "]\nbs=4k\nrw=",
            $rw,
            "\niodepth=32\nnumjobs=1\n"
        )
    };
}

/// Random 4 KiB writes to space the instance has not written, each block once: the
/// copy-on-write allocation a new instance pays (compare with `rand-write-4k`, a rewrite).
pub const FIRST_WRITE_4K: &str = once_job!("first-write-4k", "randwrite");
/// Random 4 KiB reads of what the instance has not written, each block once: reads that fall
/// through to the base (compare with `rand-read-4k`, reads of the instance's own data).
pub const BASE_READ_4K: &str = once_job!("base-read-4k", "randread");

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
static FIRST_WRITE_4K_FIO: Fio = Fio::untouched(FIRST_WRITE_4K);
static BASE_READ_4K_FIO: Fio = Fio::untouched(BASE_READ_4K);
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
        name: "first-write-4k",
        about: "random 4 KiB writes, each block once, no prefill: first allocation (copy-on-write)",
        engine: &FIRST_WRITE_4K_FIO,
    },
    Preset {
        name: "base-read-4k",
        about: "random 4 KiB reads, each block once, no prefill: reads served by the base",
        engine: &BASE_READ_4K_FIO,
    },
    Preset {
        name: "bonnie",
        about: "bonnie++ full run on a filesystem (file size twice the guest RAM)",
        engine: &BONNIE,
    },
    #[cfg(test)]
    Preset {
        name: "toy",
        about: "tests only: a sequential write then read of the test area as a file",
        engine: &toy::Toy,
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
        Layout::SplitPartExt4 => (Filesystem::Ext4, Volume::SplitPartition),
        Layout::SplitLvmExt4 => (Filesystem::Ext4, Volume::SplitLvm),
    };
    Some(Step::Mkfs { fs, volume })
}

/// The boot read of a storm instance ([`crate::matrix::storm`]): fio reads the first `size` of
/// the disk under test once, direct, in 64 KiB requests (what a cloud image's boot reads).
pub fn boot_read_step(size: &str) -> vmbench_proto::Step {
    let job_text = format!(
        "[boot-read]\nfilename={{disk}}\nrw=read\nbs=64k\nsize={size}\ndirect=1\n\
         ioengine=psync\n"
    );
    vmbench_proto::Step::Fio {
        job_text,
        args: vec![],
        output_name: "boot-read.json".into(),
        log_prefix: None,
    }
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

/// Where a cell's engine does its I/O: the raw device (`{disk}`), or a file in the test
/// filesystem the layout step mounted (`{dir}`).
pub fn io_target(mounted: bool) -> &'static str {
    if mounted {
        "{dir}/vmbench.fio"
    } else {
        "{disk}"
    }
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

/// A user's job file (`file:PATH`) checked before the run: readable, only the options vmbench
/// allows, and accepted by the engine itself; a preset has nothing to check. The error names
/// the file.
pub fn check_job_file(w: &WorkloadId) -> Result<(), String> {
    let WorkloadId::JobFile(p) = w else {
        return Ok(());
    };
    let named = |e: &dyn std::fmt::Display| format!("workload file:{}: {e}", p.display());
    let text = std::fs::read_to_string(p).map_err(|e| named(&e))?;
    fio::check_user_job(&text).map_err(|e| named(&e))?;
    fio::parse_only(p).map_err(|e| named(&e))?;
    Ok(())
}

/// Whether `w` is a built-in fio preset, the only workload whose fio parameters a sweep
/// (`--bs`, `--iodepth`, `--numjobs`, `--rwmix`) may override.
pub fn is_fio_preset(w: &WorkloadId) -> bool {
    matches!(w, WorkloadId::Preset(n)
        if preset(n).is_some_and(|p| std::ptr::eq(p.engine.descriptor(), &fio::ENGINE)))
}

/// The engine a workload runs: its preset's, or fio with the user's job file.
pub fn engine(w: &WorkloadId) -> Result<EngineHandle, EngineError> {
    match w {
        WorkloadId::Preset(name) => preset(name)
            .map(|p| EngineHandle::Preset(p.engine))
            .ok_or_else(|| EngineError::UnknownPreset(name.clone())),
        WorkloadId::JobFile(path) => Ok(EngineHandle::Owned(Box::new(Fio {
            job: FioJob::File(path.clone()),
            untouched: false,
        }))),
    }
}

/// Sweep values (`--bs`, `--iodepth`, `--numjobs`, `--rwmix`) for a workload that takes none:
/// a job file's author owns them, and only fio has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepsRefused {
    /// The sweep flags given.
    pub flags: Vec<&'static str>,
    /// The first workload that refuses them.
    pub workload: WorkloadId,
}

impl std::fmt::Display for SweepsRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = &self.workload;
        let what = match w {
            WorkloadId::JobFile(_) => "a fio job file, whose author owns those values",
            WorkloadId::Preset(_) => "not a fio job (bonnie++ has no such parameters)",
        };
        write!(
            f,
            "{} override a fio preset's parameters, but workload '{w}' is {what}: sweep presets \
             only ({}), or put the values in your job file",
            self.flags.join("/"),
            presets_of(&fio::ENGINE).join(", "),
        )
    }
}

impl std::error::Error for SweepsRefused {}

/// Refuses sweep `flags` (none given: nothing to refuse) unless every workload is a built-in
/// fio preset.
pub fn check_sweeps(
    flags: Vec<&'static str>,
    workloads: &[WorkloadId],
) -> Result<(), SweepsRefused> {
    match workloads.iter().find(|w| !is_fio_preset(w)) {
        Some(w) if !flags.is_empty() => Err(SweepsRefused {
            flags,
            workload: w.clone(),
        }),
        _ => Ok(()),
    }
}

/// The engine of user job files (`file:PATH`).
const JOB_FILE_ENGINE: &Descriptor = &fio::ENGINE;

/// The descriptor of a workload's engine. A preset this build does not know (a result from an
/// older build) reads as a job file, as it always has.
pub fn descriptor(w: &WorkloadId) -> &'static Descriptor {
    match w {
        WorkloadId::Preset(name) => preset(name).map_or(JOB_FILE_ENGINE, |p| p.engine.descriptor()),
        WorkloadId::JobFile(_) => JOB_FILE_ENGINE,
    }
}

/// The name of a guest step, as failures quote it.
pub fn step_name(s: &vmbench_proto::Step) -> &'static str {
    use vmbench_proto::Step;
    match s {
        Step::DropCaches => "drop caches",
        Step::Mkfs { .. } => "mkfs",
        Step::MountVirtiofs { .. } => "mount virtiofs",
        Step::Sysrq { .. } => "sysrq",
        engine_step => ENGINES
            .iter()
            .find_map(|e| (e.step_name)(engine_step))
            .unwrap_or("engine"),
    }
}

/// Whether a status line shows the engine moving (the stall watchdog's sign of life): an
/// engine's status line with a non-zero rate. A line that is no engine's status line is new
/// output, so it counts too.
pub fn shows_progress(line: &str) -> bool {
    ENGINES
        .iter()
        .find_map(|e| (e.live)(line))
        .is_none_or(|l| l.read + l.write > 0)
}

/// The engines' versions the guest reported, by provenance key (a result's `tools`); an engine
/// missing from the image has an empty version.
pub fn tool_versions(hello: &vmbench_proto::Hello) -> BTreeMap<String, String> {
    ENGINES
        .iter()
        .map(|e| {
            let (key, version) = e.version;
            (
                key.to_string(),
                version(hello).unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The tool keys to show for some provenances: this build's engines always (empty where not
/// recorded), in [`ENGINES`] order, then any other key they hold (an engine of another build),
/// by key.
pub fn tool_keys<'a>(
    tools: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> Vec<&'a str> {
    let mut keys: Vec<&'a str> = ENGINES.iter().map(|e| e.version.0).collect();
    let mut other: Vec<&'a str> = tools
        .into_iter()
        .flat_map(|t| t.keys().map(String::as_str))
        .filter(|k| !keys.contains(k))
        .collect();
    other.sort_unstable();
    other.dedup();
    keys.extend(other);
    keys
}

/// The engine name of a tool key, as users read it (`bonnie` is bonnie++); a key of an engine
/// this build does not know is its own name.
pub fn tool_name(key: &str) -> &str {
    ENGINES
        .iter()
        .find(|e| e.version.0 == key)
        .map_or(key, |e| e.name)
}

/// Every engine's headline metrics, in report order, each once.
pub fn headline_metrics() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = vec![];
    for k in ENGINES.iter().flat_map(|e| e.headline) {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    keys
}

/// Whether `key` is in a verdict family of any engine (the series `trend` keeps).
pub fn is_verdict_key(key: &str) -> bool {
    ENGINES.iter().any(|e| e.verdict_keys.contains(&key))
}

/// Every engine's stability metrics (`--repeat auto`).
pub fn stability_metrics() -> impl Iterator<Item = &'static str> {
    ENGINES.iter().flat_map(|e| e.stability.iter().copied())
}

/// The built-in presets of `engine`, by name.
pub fn presets_of(engine: &Descriptor) -> Vec<&'static str> {
    PRESETS
        .iter()
        .filter(|p| std::ptr::eq(p.engine.descriptor(), engine))
        .map(|p| p.name)
        .collect()
}

/// Writes back and drops the host's page cache (before a measured step, so that it reads the
/// storage and not the host's memory). Best effort: without root nothing is dropped.
pub fn drop_host_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// `path` as a fio file name: fio splits file names on ':', so a colon is escaped.
pub fn fio_escape(path: &str) -> String {
    path.replace(':', "\\:")
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

    #[test]
    fn the_split_layouts_lay_ext4_on_their_own_side_of_one_split_disk() {
        use crate::cell::{Cell, Layout};
        use vmbench_proto::{Filesystem, Step, Volume};
        let step = |layout| {
            super::layout_step(&Cell {
                layout,
                ..Cell::default()
            })
        };
        for (layout, volume) in [
            (Layout::SplitPartExt4, Volume::SplitPartition),
            (Layout::SplitLvmExt4, Volume::SplitLvm),
        ] {
            let fs = Filesystem::Ext4;
            assert_eq!(step(layout), Some(Step::Mkfs { fs, volume }), "{layout}");
        }
    }
}

#[cfg(test)]
mod descriptor_tests {
    use super::*;
    use vmbench_proto::Step;

    #[test]
    fn each_workload_has_its_engines_descriptor() {
        let d = |w: &str| descriptor(&w.parse().unwrap()).name;
        assert_eq!(d("pg-randrw"), "fio");
        assert_eq!(d("bonnie"), "bonnie++");
        assert_eq!(d("file:/x.fio"), "fio");
        // A preset of an older build reads as a job file, as it always has.
        assert_eq!(d("gone-preset"), "fio");
        let b = descriptor(&"bonnie".parse().unwrap());
        assert_eq!(b.table.cell_tables().map(<[_]>::len), Some(2));
        assert!(fio::ENGINE.table.cell_tables().is_none());
    }

    #[test]
    fn step_names_come_from_the_engines() {
        let fio_step = Step::Fio {
            job_text: String::new(),
            args: vec![],
            output_name: "fio.json".into(),
            log_prefix: None,
        };
        let bonnie_step = Step::Bonnie {
            args: vec![],
            output_name: "bonnie.txt".into(),
        };
        assert_eq!(step_name(&fio_step), "fio");
        assert_eq!(step_name(&bonnie_step), "bonnie++");
        assert_eq!(step_name(&Step::DropCaches), "drop caches");
    }

    #[test]
    fn only_a_moving_status_line_is_no_sign_of_a_stall() {
        assert!(shows_progress(
            "Jobs: 1 (f=1): [r(1)][20.0%][r=40.1MiB/s][r=10.3k IOPS][eta 00m:04s]"
        ));
        assert!(!shows_progress(
            "Jobs: 1 (f=1): [r(1)][20.0%][r=0KiB/s][r=0 IOPS][eta 00m:04s]"
        ));
        assert!(shows_progress("Writing intelligently...done"));
    }

    /// The lists are this build's engines' in [`ENGINES`] order: fio's and bonnie++'s are the
    /// ones compare, repeat and the reports kept; in tests the toy engine (`toy.rs`) is last,
    /// and its keys join the lists with no other change.
    #[test]
    fn the_lists_are_the_ones_compare_repeat_and_report_kept() {
        assert_eq!(
            headline_metrics(),
            [
                "read_iops",
                "write_iops",
                "read_bw_mib_s",
                "write_bw_mib_s",
                "read_lat_mean_us",
                "read_lat_p99_us",
                "write_lat_mean_us",
                "write_lat_p99_us",
                "host_qemu_cpu_pct",
                "storage_server_cpu_pct",
                "storage_server_peak_rss_mib",
                "seq_out_block_kps",
                "seq_in_block_kps",
                "seq_out_rewrite_kps",
                "random_seeks_ps",
                "toy_write_mib_s",
                "toy_read_mib_s",
            ]
        );
        let stable: Vec<_> = stability_metrics().collect();
        assert_eq!(
            stable,
            [
                "read_iops",
                "write_iops",
                "seq_out_block_kps",
                "seq_in_block_kps",
                "toy_write_mib_s",
                "toy_read_mib_s",
            ]
        );
        let verdict: Vec<&str> = ENGINES
            .iter()
            .flat_map(|e| e.verdict_keys.iter().copied())
            .collect();
        assert_eq!(verdict.len(), 11 + 2);
        assert!(is_verdict_key("read_bw_mib_s") && is_verdict_key("random_seeks_ps"));
        assert!(is_verdict_key("toy_read_mib_s"));
        assert!(!is_verdict_key("seq_out_rewrite_kps") && !is_verdict_key("host_qemu_cpu_pct"));
        let fam = |w: &str| {
            let w: WorkloadId = w.parse().unwrap();
            (descriptor(&w).verdict_family)(&w)
        };
        assert_eq!(fam("seq-read-1m")[0], "read_bw_mib_s");
        assert_eq!(fam("file:/j.fio")[0], "read_iops");
        assert_eq!(fam("bonnie").len(), 3);
        assert_eq!(fam("toy"), ["toy_write_mib_s", "toy_read_mib_s"]);
    }

    #[test]
    fn sweeps_are_refused_with_the_fio_presets_named() {
        let w: Vec<WorkloadId> = vec!["pg-randrw".parse().unwrap(), "bonnie".parse().unwrap()];
        assert!(check_sweeps(vec![], &w).is_ok());
        assert!(check_sweeps(vec!["--bs"], &w[..1]).is_ok());
        let e = check_sweeps(vec!["--bs", "--iodepth"], &w).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--bs/--iodepth override a fio preset's parameters, but workload 'bonnie' is not a \
             fio job (bonnie++ has no such parameters): sweep presets only (pg-randrw, \
             seq-read-1m, seq-write-1m, rand-read-4k, rand-write-4k, first-write-4k, \
             base-read-4k), or put the values in your job file"
        );
    }

    #[test]
    fn versions_are_keyed_as_the_provenance_columns_were() {
        let hello: vmbench_proto::Hello = serde_json::from_value(serde_json::json!({
            "protocol": 1, "agent_version": "x", "kernel": "k", "fio_version": "fio-3.33",
            "bonnie_version": null, "cpus": 1, "mem_kib": 1, "block_devices": [], "uptime_ms": 1
        }))
        .unwrap();
        let tools = tool_versions(&hello);
        assert_eq!(tools["fio"], "fio-3.33");
        assert_eq!(tools["bonnie"], "");
        // In tests, the toy engine (last in ENGINES) runs its job with the guest's fio.
        assert_eq!(tools["toy"], "fio-3.33");
        let mut other = tools.clone();
        other.insert("dd".into(), "9.4".into());
        assert_eq!(tool_keys([&tools, &other]), ["fio", "bonnie", "toy", "dd"]);
        assert_eq!(tool_keys([]), ["fio", "bonnie", "toy"]);
        assert_eq!(tool_name("bonnie"), "bonnie++");
        assert_eq!(tool_name("dd"), "dd");
    }
}
