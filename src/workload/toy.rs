//! toy engine, compiled in tests only (issue 25, "proof by extension"): one sequential write of
//! the test area as a file, then one sequential read of it, in 1 MiB blocks with O_DIRECT,
//! reported as two bandwidths and the MiB written.
//!
//! It was added by touching only `src/workload/`: this file, `#[cfg(test)] pub mod toy;` and a
//! `#[cfg(test)]` row in `PRESETS` (`mod.rs`), a `#[cfg(test)]` entry in `ENGINES`
//! (`engine.rs`); see `docs/architecture.md#adding-a-workload-engine`.
//!
//! What it cannot have without leaving `src/workload/`: a guest step of its own. A `Step::Toy`
//! would be a variant of `vmbench_proto::Step` (`images/proto/src/lib.rs`), code in the agent
//! that runs it (`images/agent/src/steps.rs`) and so a new guest image. The guest's only way to
//! run a job is an existing step, so the toy's measured step is the guest's fio (`Step::Fio`)
//! running the toy's own job file, and the toy reads its two figures from fio's JSON (fio's
//! parser, [`fio::parse`]). Consequently its step goes by fio's name in failures (fio's
//! descriptor claims every `Step::Fio`, and nothing tells the toy's apart but its output
//! name), its status line is fio's, and its version is the guest's fio's.

use super::engine::{
    CellTable, Descriptor, EngineError, EngineParams, EnginePlan, Figures, LiveIops, Parsed,
    RateKind, TableKind, TailKind, WorkloadEngine,
};
use super::fio;
use crate::results::{Better, Metric};
use std::collections::BTreeMap;
use vmbench_proto::{Hello, Step};

/// The artifact its measured step ships back (fio's JSON output).
const OUTPUT: &str = "toy.json";
/// The job file kept in the cell directory.
const JOB_FILE: &str = "toy.fio";
/// Its two jobs, in the order they run (`stonewall`: the read starts when the write is done).
const WRITE_JOB: &str = "toy-write";
const READ_JOB: &str = "toy-read";
/// Room for the filesystem around the test file.
const FS_HEADROOM: u64 = 64 << 20;

/// Its figures: write and read bandwidth, each an independent fact.
const FACTS: &[&str] = &["toy_write_mib_s", "toy_read_mib_s"];

/// The toy as the rest of vmbench knows it (see [`Descriptor`]).
pub static ENGINE: Descriptor = Descriptor {
    name: "toy",
    headline: FACTS,
    stability: FACTS,
    verdict_family: |_| FACTS,
    verdict_keys: FACTS,
    // One row per cell, like bonnie++: the MiB written, then the two bandwidths.
    table: TableKind::CellRows(&[CellTable {
        second: ("Size", "toy_size_mib", |mib| format!("{mib}M")),
        columns: &[
            ("Sequential", "toy_write_mib_s", "write MiB/s"),
            ("", "toy_read_mib_s", "read MiB/s"),
        ],
    }]),
    // The tool that runs its job in the guest.
    version: ("toy", |h: &Hello| h.fio_version.as_deref()),
    // No guest step of its own (see the module's doc): fio's descriptor names its step.
    step_name: |_| None,
    live: |line| fio::parse_eta(line).map(|(read, write)| LiveIops { read, write }),
    // Bandwidth only: no I/O count, no latency.
    figures: Figures {
        rate: (RateKind::Iops, &[]),
        bandwidth: FACTS,
        tail: (TailKind::P99, &[]),
    },
};

/// The toy engine (one preset, `toy`).
#[derive(Debug, Clone, Copy)]
pub struct Toy;

/// Its job: `target` is where the engine's I/O goes in the guest ([`super::io_target`]).
pub fn job_text(target: &str, size: &str) -> String {
    format!(
        "[global]\nioengine=psync\ndirect=1\nbs=1m\nsize={size}\nfilename={target}\n\n\
         [{WRITE_JOB}]\nrw=write\nend_fsync=1\n\n[{READ_JOB}]\nstonewall\nrw=read\n"
    )
}

impl WorkloadEngine for Toy {
    fn descriptor(&self) -> &'static Descriptor {
        &ENGINE
    }

    /// It writes a file.
    fn needs_filesystem(&self) -> bool {
        true
    }

    fn plan(&self, p: &EngineParams<'_>) -> Result<EnginePlan, EngineError> {
        if !p.overrides.is_empty() {
            return Err(EngineError::OverridesRefused("the toy engine"));
        }
        let job = job_text(p.target, p.size);
        Ok(EnginePlan {
            disk_bytes: (p.disk_mib << 20).max(p.size_bytes + FS_HEADROOM),
            prep: vec![],
            job_files: vec![(JOB_FILE, job.clone())],
            measure: vec![
                Step::DropCaches,
                Step::Fio {
                    job_text: job,
                    args: p.fio_args(),
                    output_name: OUTPUT.into(),
                    log_prefix: None,
                },
            ],
            window: (0, 1),
            baseline_job: None,
            prefill_job: None,
        })
    }

    fn parse(&self, artifacts: &BTreeMap<String, String>) -> Result<Parsed, EngineError> {
        let text = artifacts.get(OUTPUT).ok_or(EngineError::MissingArtifact {
            engine: "toy",
            what: "JSON output",
        })?;
        let run = fio::parse(text).map_err(EngineError::FioOutput)?;
        let group = |job: &str| run.groups.iter().find(|g| g.jobs.iter().any(|j| j == job));
        let (Some(w), Some(r)) = (group(WRITE_JOB), group(READ_JOB)) else {
            return Err(EngineError::MissingArtifact {
                engine: "toy",
                what: "toy-write and toy-read jobs in its output",
            });
        };
        let mib_s =
            |key: &str, label: &str, v: f64| Metric::num(key, label, "MiB/s", Better::Higher, v);
        Ok(Parsed {
            metrics: vec![
                // 1 MiB blocks: one I/O is one MiB.
                Metric::num(
                    "toy_size_mib",
                    "MiB written",
                    "MiB",
                    Better::Higher,
                    w.write.total_ios as f64,
                ),
                mib_s("toy_write_mib_s", "Sequential write", w.write.bw_mib_s),
                mib_s("toy_read_mib_s", "Sequential read", r.read.bw_mib_s),
            ],
            samples: BTreeMap::new(),
            measured_secs: Some((w.write.runtime_ms + r.read.runtime_ms) as f64 / 1000.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A direction of a fio job as fio's JSON has it (what [`fio::parse`] reads).
    fn dir(ios: u64, bw_mib_s: f64, runtime_ms: u64) -> serde_json::Value {
        json!({
            "total_ios": ios, "iops": ios as f64 * 1000.0 / runtime_ms.max(1) as f64,
            "bw_bytes": bw_mib_s * 1_048_576.0, "runtime": runtime_ms,
            "lat_ns": {"mean": 1000.0},
            "clat_ns": {"percentile": {"50.000000": 900, "99.000000": 2000, "99.900000": 3000}}
        })
    }

    fn output(jobs: &[(&str, u64, serde_json::Value, serde_json::Value)]) -> String {
        let jobs: Vec<_> = jobs
            .iter()
            .map(|(name, group, read, write)| {
                json!({"jobname": name, "groupid": group, "error": 0, "usr_cpu": 1.0,
                       "sys_cpu": 2.0, "read": read, "write": write})
            })
            .collect();
        json!({"fio version": "fio-3.33", "jobs": jobs}).to_string()
    }

    #[test]
    fn its_output_gives_its_own_figures() {
        let none = dir(0, 0.0, 0);
        let text = output(&[
            (WRITE_JOB, 0, none.clone(), dir(1024, 256.0, 4000)),
            (READ_JOB, 1, dir(1024, 512.0, 2000), none),
        ]);
        let p = Toy
            .parse(&BTreeMap::from([(OUTPUT.to_string(), text)]))
            .unwrap();
        let got: Vec<(&str, Option<f64>)> = p
            .metrics
            .iter()
            .map(|m| (m.key.as_str(), m.value.number()))
            .collect();
        let want = [
            ("toy_size_mib", Some(1024.0)),
            ("toy_write_mib_s", Some(256.0)),
            ("toy_read_mib_s", Some(512.0)),
        ];
        assert_eq!(got, want);
        assert_eq!(p.measured_secs, Some(6.0));
        // Every figure it reports is one its descriptor lists.
        let d = &ENGINE;
        let table = d.table.cell_tables().unwrap();
        assert_eq!(table[0].second.1, "toy_size_mib");
        assert!(d.headline.iter().all(|k| got.iter().any(|(g, _)| g == k)));
    }

    #[test]
    fn missing_or_foreign_output_is_an_engine_error() {
        let e = Toy.parse(&BTreeMap::new()).unwrap_err().to_string();
        assert_eq!(e, "toy produced no JSON output");
        let w = dir(8, 1.0, 1);
        let other = output(&[("pg-test", 0, w.clone(), w)]);
        let e = Toy
            .parse(&BTreeMap::from([(OUTPUT.to_string(), other)]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "toy produced no toy-write and toy-read jobs in its output"
        );
    }

    /// Its progress parser reads the status line its guest step prints (fio's).
    #[test]
    fn its_status_line_gives_live_iops() {
        let line = "Jobs: 1 (f=1): [W(1)][40.0%][w=256MiB/s][w=256 IOPS][eta 00m:03s]";
        assert_eq!(
            Toy.live_iops(line),
            Some(LiveIops {
                read: 0,
                write: 256
            })
        );
        assert_eq!(Toy.live_iops("toy: starting"), None);
    }
}
