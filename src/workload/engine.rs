//! What a cell asks of its workload's engine: the guest steps, the job files kept with the
//! result, the artifacts to parse, the live status line, the host-baseline job
//! ([`WorkloadEngine`], one value per preset); and what the rest of vmbench knows about an
//! engine whatever job it runs ([`Descriptor`], one static per engine in its own file, listed
//! in [`ENGINES`]): step names, the status-line parser, tool versions, headline and stability
//! metrics, verdict facts, report table. The cell pipeline, compare, repeat and the reports ask
//! these; adding an engine means a file here, a row in [`ENGINES`] and rows in the preset table
//! (`super::PRESETS`).

use super::{bonnie, fio};
use crate::cell::WorkloadId;
use crate::results::Metric;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::PathBuf;
use vmbench_proto::{Hello, Step};

/// What an engine needs from the run's configuration and the cell.
#[derive(Debug, Clone)]
pub struct EngineParams<'a> {
    /// Seconds of measurement.
    pub runtime: u32,
    /// Seconds of warm-up before the measurement.
    pub ramp: u32,
    /// The test area as the user wrote it (fio's `size=`).
    pub size: &'a str,
    /// The same in bytes.
    pub size_bytes: u64,
    /// Whether the test area is written once before the measurement.
    pub prefill: bool,
    /// Guest RAM.
    pub memory_mib: u64,
    /// bonnie++'s `-n` (thousands of files).
    pub bonnie_files: u32,
    /// bonnie++'s `-s` as a multiple of the guest's RAM.
    pub bonnie_size_ratio: u32,
    /// The configured disk size.
    pub disk_mib: u64,
    /// Where the engine's I/O goes in the guest: `{disk}` (the raw device) or a file in the
    /// mounted test filesystem.
    pub target: &'a str,
    /// The cell's fio sweep values over a preset's own (empty: the preset as written).
    pub overrides: &'a fio::JobOverrides,
    /// Per-second logs of the measured job (the report's time series).
    pub time_series: bool,
    /// With `time_series`, the per-second latency log too (fio accounts it per I/O).
    pub latency_series: bool,
    /// The engine's once-a-second status line, for the live display.
    pub live_status: bool,
}

/// The engine's part of a cell: steps, sizes, host window, files.
#[derive(Debug, Clone, Default)]
pub struct EnginePlan {
    /// The disk size the engine needs (at least the configured one).
    pub disk_bytes: u64,
    /// Steps before the measurement (the prefill), after the cell's own (mkfs).
    pub prep: Vec<Step>,
    /// The measured job's steps.
    pub measure: Vec<Step>,
    /// The host-side window: from the end of `measure[.0]` to the end of `measure[.1]`.
    pub window: (u32, u32),
    /// Files kept in the cell directory: the exact job texts the guest runs (`job.fio`,
    /// `ramp.fio`, `bonnie.args`).
    pub job_files: Vec<(&'static str, String)>,
    /// The measured job with `{disk}` and the ramp in it, for the host baseline; `None` when
    /// the engine has no host baseline.
    pub baseline_job: Option<String>,
    /// The prefill job with `{disk}`, for the host baseline.
    pub prefill_job: Option<String>,
}

/// The parsed result of a measurement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// The engine's metrics.
    pub metrics: Vec<Metric>,
    /// Per-second series by metric key.
    pub samples: BTreeMap<String, Vec<f64>>,
    /// The seconds the engine itself measured over (fio's runtime), if it says.
    pub measured_secs: Option<f64>,
}

/// Live figures from an engine's status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveIops {
    /// Read IOPS.
    pub read: u64,
    /// Write IOPS.
    pub write: u64,
}

/// How a report lays out an engine's results.
#[derive(Debug, Clone, Copy)]
pub enum TableKind {
    /// Metrics as rows, one column per cell (the fio seed's layout).
    MetricRows,
    /// One row per cell, the engine's figures as column groups (the bonnie++ seeds' layout):
    /// these tables, in order.
    CellRows(&'static [CellTable]),
}

impl TableKind {
    /// The per-cell tables, or `None` for metrics as rows.
    pub fn cell_tables(self) -> Option<&'static [CellTable]> {
        match self {
            TableKind::MetricRows => None,
            TableKind::CellRows(t) => Some(t),
        }
    }
}

/// One table of an engine laid out one row per cell.
#[derive(Debug)]
pub struct CellTable {
    /// The column after the cell's name: its head, the metric it shows, and how that metric's
    /// mean is printed.
    pub second: (&'static str, &'static str, fn(f64) -> String),
    /// The figures' columns: (group title, empty for the group's further columns; metric key;
    /// column head).
    pub columns: &'static [(&'static str, &'static str, &'static str)],
}

/// What vmbench knows about an engine whatever job it runs: one static per engine (in the
/// engine's own file), listed in [`ENGINES`]. Compare, repeat, the reports and the cell
/// pipeline read these lists instead of keeping their own.
pub struct Descriptor {
    /// The engine's name as users know it ("fio", "bonnie++").
    pub name: &'static str,
    /// The metrics a reader looks at first, in report order.
    pub headline: &'static [&'static str],
    /// The figures whose spread decides `--repeat auto` (a direction with no I/O is left out).
    pub stability: &'static [&'static str],
    /// The verdict family of a workload: one key per independent fact (see
    /// `compare::family_keys`).
    pub verdict_family: fn(&WorkloadId) -> &'static [&'static str],
    /// Every key of any of its verdict families (the series `trend` keeps).
    pub verdict_keys: &'static [&'static str],
    /// How reports lay out its results.
    pub table: TableKind,
    /// The key of its version in a result's provenance, and the version the guest reported.
    pub version: (&'static str, fn(&Hello) -> Option<&str>),
    /// The name of one of its guest steps, `None` for a step that is not its own.
    pub step_name: fn(&Step) -> Option<&'static str>,
    /// Live IOPS from a status line it printed, `None` for a line that is not its status line.
    pub live: fn(&str) -> Option<LiveIops>,
    /// The figures `compare --recommend` ranks its cells on.
    pub figures: Figures,
}

/// Where `compare --recommend`'s engine-dependent objectives (I/O rate, bandwidth, tail
/// latency) find their figure in an engine's results.
#[derive(Debug, PartialEq, Eq)]
pub struct Figures {
    /// What the I/O-rate figure counts, and the metrics summed for it.
    pub rate: (RateKind, &'static [&'static str]),
    /// The metrics summed for bandwidth (empty: the engine reports none).
    pub bandwidth: &'static [&'static str],
    /// What the tail-latency figure is, and the metrics whose largest it is.
    pub tail: (TailKind, &'static [&'static str]),
}

/// What an engine's I/O-rate figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateKind {
    /// I/Os per second: host CPU per 1,000 I/Os can be computed from it.
    Iops,
    /// Seeks per second: no I/O count.
    Seeks,
}

/// What an engine's tail-latency figure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailKind {
    /// The 99th percentile of completion latency.
    P99,
    /// The largest latency of an operation.
    Max,
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every engine this build runs.
pub static ENGINES: &[&Descriptor] = &[
    &fio::ENGINE,
    &bonnie::ENGINE,
    #[cfg(test)]
    &super::toy::ENGINE,
];

/// Why an engine could not plan or parse.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A required artifact did not come back from the guest.
    #[error("{engine} produced no {what}")]
    MissingArtifact {
        /// Engine name as users know it.
        engine: &'static str,
        /// What is missing.
        what: &'static str,
    },
    /// fio's JSON did not parse.
    #[error("fio output: {0}")]
    FioOutput(#[source] fio::FioParseError),
    /// bonnie++ printed no CSV line.
    #[error("bonnie++ output has no CSV line")]
    BonnieNoCsv,
    /// bonnie++'s CSV did not parse.
    #[error("bonnie++ output: {0}")]
    BonnieOutput(#[source] bonnie::BonnieParseError),
    /// A user job file could not be read.
    #[error("job file {}: {source}", path.display())]
    JobFileRead {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A user job file was refused.
    #[error("job file {}: {source}", path.display())]
    JobFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: fio::JobError,
    },
    /// Sweep values for an engine or job that does not take them (the matrix refuses these
    /// before the run; this guards the engine itself).
    #[error("{0} does not take --bs/--iodepth/--numjobs/--rwmix/--direct: they override fio presets only")]
    OverridesRefused(&'static str),
    /// The test area does not fit on the disk.
    #[error("fio size {size} is larger than the disk ({disk_mib} MiB)")]
    SizeTooLarge {
        /// `size` as given.
        size: String,
        /// The disk.
        disk_mib: u64,
    },
    /// A preset name that is not in the table.
    #[error("unknown preset '{0}'")]
    UnknownPreset(String),
}

/// An I/O engine as the cell pipeline uses it.
pub trait WorkloadEngine: Send + Sync {
    /// What vmbench knows about the engine whatever the job.
    fn descriptor(&self) -> &'static Descriptor;
    /// The engine's name ("fio", "bonnie++").
    fn name(&self) -> &'static str {
        self.descriptor().name
    }
    /// Steps, sizes, window and job files for one cell.
    fn plan(&self, p: &EngineParams<'_>) -> Result<EnginePlan, EngineError>;
    /// Metrics, per-second samples and measured seconds from the measurement's artifacts.
    fn parse(&self, artifacts: &BTreeMap<String, String>) -> Result<Parsed, EngineError>;
    /// Live IOPS from a status line the engine printed while running, if it prints any.
    fn live_iops(&self, line: &str) -> Option<LiveIops> {
        (self.descriptor().live)(line)
    }
    /// True when the engine measures a filesystem (a raw layout then gets ext4).
    fn needs_filesystem(&self) -> bool {
        false
    }
    /// Seconds the workload should take (prefill, warm-up, measurement) at `pace`, for the
    /// plan's estimate. The default is a timed job's (fio): its warm-up and runtime after a
    /// prefill, which under TCG writes about 256 MiB/s (0.7-1.3 s at 200 MiB, 2026-12-07) or
    /// the link's rate if slower.
    fn estimated_secs(&self, p: &EngineParams<'_>, pace: Pace) -> u64 {
        let prefill = if p.prefill {
            let mib = p.size_bytes >> 20;
            let over_link = pace
                .link_bytes_s
                .map_or(0, |b| (p.size_bytes / b.max(1)) + 1);
            (1 + mib / 256).max(over_link)
        } else {
            0
        };
        prefill + u64::from(p.ramp) + u64::from(p.runtime)
    }
}

/// What sets the pace of a cell's untimed work, for [`WorkloadEngine::estimated_secs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// The cell's shaped link rate in bytes/s, where it has one.
    pub link_bytes_s: Option<u64>,
    /// The workload runs in a guest (under TCG here), not on the host itself.
    pub in_guest: bool,
}

/// A resolved engine: a preset's (static) or one built for a user job file.
pub enum EngineHandle {
    /// From the preset table.
    Preset(&'static dyn WorkloadEngine),
    /// Built for this workload.
    Owned(Box<dyn WorkloadEngine>),
}

impl Deref for EngineHandle {
    type Target = dyn WorkloadEngine;
    fn deref(&self) -> &Self::Target {
        match self {
            EngineHandle::Preset(e) => *e,
            EngineHandle::Owned(e) => e.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bonnie::Bonnie;
    use fio::{Fio, FioJob, LOG_PREFIX};
    use vmbench_proto::TEST_MOUNTPOINT;

    static NO_OVERRIDES: fio::JobOverrides = fio::JobOverrides {
        bs: None,
        iodepth: None,
        numjobs: None,
        rwmix: None,
        direct: None,
    };

    fn fixture(name: &str) -> String {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
        std::fs::read_to_string(format!("{p}{name}")).unwrap()
    }

    fn params(target: &str) -> EngineParams<'_> {
        EngineParams {
            runtime: 30,
            ramp: 5,
            size: "1G",
            size_bytes: 1 << 30,
            prefill: true,
            memory_mib: 512,
            bonnie_files: 4,
            bonnie_size_ratio: 2,
            disk_mib: 2048,
            target,
            overrides: &NO_OVERRIDES,
            time_series: true,
            latency_series: true,
            live_status: true,
        }
    }

    /// The untouched presets measure the disk as the instance got it: no prefill step and no
    /// warm-up even when the run asks for both, and a job that touches each block once.
    #[test]
    fn untouched_presets_have_no_prefill_no_warm_up_and_no_time_loop() {
        for job in [super::super::FIRST_WRITE_4K, super::super::BASE_READ_4K] {
            let plan = Fio::untouched(job).plan(&params("/dev/vdb")).unwrap();
            assert!(plan.prep.is_empty(), "{:?}", plan.prep);
            let fio: Vec<&str> = plan
                .measure
                .iter()
                .filter_map(|s| match s {
                    Step::Fio { job_text, .. } => Some(job_text.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(fio.len(), 1, "one measured job, no ramp step");
            assert!(!fio[0].contains("time_based") && !fio[0].contains("ramp_time"));
            assert!(
                fio[0].contains("runtime=30") && fio[0].contains("size=1G"),
                "{}",
                fio[0]
            );
        }
        let touched = Fio::preset(super::super::RAND_WRITE_4K).plan(&params("/dev/vdb"));
        assert_eq!(
            touched.unwrap().prep.len(),
            1,
            "rand-write-4k is a rewrite: prefilled"
        );
    }

    #[test]
    fn without_the_latency_series_fio_keeps_its_rate_logs_only() {
        let e = Fio::preset(super::super::PG_RANDRW);
        let mut p = params("{disk}");
        p.latency_series = false;
        let plan = e.plan(&p).unwrap();
        let job = &plan
            .job_files
            .iter()
            .find(|(n, _)| *n == "job.fio")
            .unwrap()
            .1;
        assert!(
            job.contains("write_iops_log=") && job.contains("write_bw_log="),
            "{job}"
        );
        assert!(!job.contains("write_lat_log"), "{job}");
    }

    #[test]
    fn lean_fio_plan_has_no_logs_and_no_status_line() {
        let e = Fio::preset(super::super::PG_RANDRW);
        let full = e.plan(&params("{disk}")).unwrap();
        let mut p = params("{disk}");
        p.time_series = false;
        p.live_status = false;
        let lean = e.plan(&p).unwrap();
        let fio_steps = |plan: &EnginePlan| -> Vec<(Vec<String>, Option<String>, String)> {
            plan.measure
                .iter()
                .filter_map(|s| match s {
                    Step::Fio {
                        args,
                        log_prefix,
                        job_text,
                        ..
                    } => Some((args.clone(), log_prefix.clone(), job_text.clone())),
                    _ => None,
                })
                .collect()
        };
        let (f, l) = (fio_steps(&full), fio_steps(&lean));
        assert_eq!(f.len(), 2, "warm-up and measured job");
        assert_eq!(l.len(), 2);
        assert!(f.iter().all(|(a, _, _)| a.is_empty()));
        assert!(l.iter().all(|(a, _, _)| a == &["--eta=never"]), "{l:?}");
        assert!(f[1].1.is_some() && f[1].2.contains("write_iops_log"));
        assert!(l[1].1.is_none() && !l[1].2.contains("_log="), "{}", l[1].2);
        // The job itself is unchanged apart from the log lines.
        assert_eq!(
            l[1].2,
            f[1].2.replace(&fio::log_options(LOG_PREFIX, true), "")
        );
    }

    #[test]
    fn fio_preset_plan_has_warmup_window_and_job_files() {
        let e = Fio::preset(super::super::PG_RANDRW);
        let plan = e.plan(&params("{disk}")).unwrap();
        assert_eq!(plan.disk_bytes, 2048 << 20);
        assert_eq!(plan.prep.len(), 1, "prefill");
        assert_eq!(plan.window, (1, 2));
        assert!(matches!(plan.measure[0], Step::DropCaches));
        let names: Vec<_> = plan.job_files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["ramp.fio", "job.fio"]);
        let job = &plan.job_files[1].1;
        assert!(job.contains("runtime=30\nramp_time=0\n"), "{job}");
        assert!(job.contains("write_iops_log=vmbench"), "{job}");
        let base = plan.baseline_job.unwrap();
        assert!(base.contains("ramp_time=5") && base.contains("filename={disk}"));
    }

    #[test]
    fn sweep_overrides_reach_every_preset_job_and_are_refused_elsewhere() {
        let o = fio::JobOverrides {
            bs: Some("64k".parse().unwrap()),
            iodepth: Some(4),
            ..Default::default()
        };
        let mut p = params("{disk}");
        p.overrides = &o;
        let plan = Fio::preset(super::super::PG_RANDRW).plan(&p).unwrap();
        for (name, job) in &plan.job_files {
            assert!(
                job.contains("bs=64k\n") && !job.contains("bs=8k"),
                "{name}: {job}"
            );
            assert!(
                job.contains("iodepth=4\n") && !job.contains("iodepth=16"),
                "{job}"
            );
        }
        assert!(plan.baseline_job.unwrap().contains("bs=64k"));
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jobs/");
        let file = Fio {
            job: FioJob::File(format!("{dir}user-randrw.fio").into()),
            untouched: false,
        };
        let e = file.plan(&p).unwrap_err();
        assert!(matches!(e, EngineError::OverridesRefused(_)), "{e}");
        let e = Bonnie.plan(&p).unwrap_err().to_string();
        assert!(e.starts_with("bonnie++ does not take --bs"), "{e}");
    }

    #[test]
    fn fio_refuses_a_test_area_larger_than_the_disk() {
        let mut p = params("{disk}");
        p.size_bytes = 4 << 30;
        let e = Fio::preset(super::super::PG_RANDRW).plan(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fio size 1G is larger than the disk (2048 MiB)"
        );
    }

    #[test]
    fn fio_job_file_gets_no_warmup_and_bad_files_name_the_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jobs/");
        let e = Fio {
            job: FioJob::File(format!("{dir}user-randrw.fio").into()),
            untouched: false,
        };
        let plan = e.plan(&params("{dir}/vmbench.fio")).unwrap();
        assert_eq!(plan.window, (0, 1));
        assert_eq!(plan.job_files.len(), 1);
        let bad = Fio {
            job: FioJob::File(format!("{dir}names-filename.fio").into()),
            untouched: false,
        };
        let err = bad.plan(&params("{disk}")).unwrap_err();
        assert!(matches!(err, EngineError::JobFile { .. }), "{err}");
        assert!(err.to_string().contains("names-filename.fio"), "{err}");
    }

    #[test]
    fn fio_parses_real_json_and_per_second_logs() {
        let mut a = BTreeMap::new();
        a.insert("fio.json".into(), fixture("fio-host-pg-randrw.json"));
        for kind in ["bw", "iops", "lat", "clat", "slat"] {
            a.insert(
                format!("vmbench_{kind}.1.log"),
                fixture(&format!("fio-host-pg-randrw_{kind}.1.log")),
            );
        }
        let p = Fio::preset(super::super::PG_RANDRW).parse(&a).unwrap();
        let key = |k: &str| {
            p.metrics
                .iter()
                .find(|m| m.key == k)
                .map(|m| m.value.clone())
        };
        assert!(key("read_iops").is_some());
        assert!(key("read_ios").is_some() && key("write_ios").is_some());
        assert!(p.measured_secs.unwrap() > 0.0);
        assert!(!p.samples.is_empty(), "per-second samples from the logs");
        assert!(p.samples.values().all(|s| !s.is_empty()));
    }

    #[test]
    fn a_jobs_own_ramp_time_counts_in_the_measured_seconds() {
        // The job file has ramp_time=1 and runtime=3 (fio reports 3001 ms): the host window
        // around it holds ~4 s of I/O, and QMP's counts must be divided by that, not by 3.
        let mut a = BTreeMap::new();
        a.insert("fio.json".into(), fixture("fio-host-2jobs.json"));
        let p = Fio::preset(super::super::PG_RANDRW).parse(&a).unwrap();
        assert_eq!(p.measured_secs, Some(4.001));
        // No ramp_time; two groups that ran one after another (2001 ms each).
        a.insert("fio.json".into(), fixture("fio-host-stonewall.json"));
        let p = Fio::preset(super::super::PG_RANDRW).parse(&a).unwrap();
        assert_eq!(p.measured_secs, Some(4.002));
    }

    #[test]
    fn missing_or_broken_output_is_an_engine_error() {
        let e = Fio::preset(super::super::PG_RANDRW);
        let err = e.parse(&BTreeMap::new()).unwrap_err();
        assert_eq!(err.to_string(), "fio produced no JSON output");
        let mut a = BTreeMap::new();
        a.insert("fio.json".to_string(), "{not json".to_string());
        assert!(matches!(e.parse(&a), Err(EngineError::FioOutput(_))));
        let err = Bonnie.parse(&BTreeMap::new()).unwrap_err();
        assert_eq!(err.to_string(), "bonnie++ produced no output");
        a.insert("bonnie.txt".into(), "Using uid:0, gid:0.\n".into());
        assert!(matches!(Bonnie.parse(&a), Err(EngineError::BonnieNoCsv)));
    }

    #[test]
    fn bonnie_parses_real_csv_and_plans_room_for_its_file() {
        let mut a = BTreeMap::new();
        a.insert("bonnie.txt".to_string(), fixture("bonnie-guest-xfs.csv"));
        let p = Bonnie.parse(&a).unwrap();
        assert!(!p.metrics.is_empty());
        assert!(p.samples.is_empty() && p.measured_secs.is_none());
        let plan = Bonnie.plan(&params(TEST_MOUNTPOINT)).unwrap();
        assert_eq!(plan.disk_bytes, 2048 << 20);
        let mut big = params(TEST_MOUNTPOINT);
        big.memory_mib = 1024;
        assert_eq!(Bonnie.plan(&big).unwrap().disk_bytes, 3072 << 20);
        assert_eq!(plan.job_files[0].0, "bonnie.args");
        assert!(plan.job_files[0].1.contains("-s\n1024\n"));
        assert!(plan.baseline_job.is_none());
        assert_eq!(Bonnie.live_iops("Jobs: 1 [r=1k IOPS]"), None);
    }

    #[test]
    fn fio_status_line_gives_live_iops() {
        let e = Fio::preset(super::super::PG_RANDRW);
        let l = "Jobs: 1 (f=1): [r(1)][20.0%][r=40.1MiB/s][r=10.3k IOPS][eta 00m:04s]";
        assert_eq!(
            e.live_iops(l),
            Some(LiveIops {
                read: 10300,
                write: 0
            })
        );
        assert_eq!(e.live_iops("fio-3.33"), None);
    }
}
