//! fio: job text, and parsing of fio JSON output.
//!
//! The parser reads fio 3.x's `--output-format=json` document (the one the guest agent ships
//! back), aggregates the jobs in it, and turns the result into [`Metric`]s. Everything that comes
//! from fio is untrusted: a missing field, a negative or non-finite number is an error, never a
//! panic and never a silent zero.

use super::engine::{
    Descriptor, EngineError, EngineParams, EnginePlan, Figures, LiveIops, Parsed, RateKind,
    TableKind, TailKind, WorkloadEngine,
};
use crate::cell::WorkloadId;
use crate::results::{Better, Metric, Value};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use vmbench_proto::{Hello, Step};

/// fio as the rest of vmbench knows it (see [`Descriptor`]).
pub static ENGINE: Descriptor = Descriptor {
    name: "fio",
    // Throughput, latency, then what the job's I/O cost the host and the storage server.
    headline: &[
        JOB_FIGURES[0],
        JOB_FIGURES[1],
        JOB_FIGURES[2],
        JOB_FIGURES[3],
        JOB_FIGURES[4],
        JOB_FIGURES[5],
        JOB_FIGURES[6],
        JOB_FIGURES[7],
        "host_qemu_cpu_pct",
        "storage_server_cpu_pct",
        "storage_server_peak_rss_mib",
    ],
    stability: &["read_iops", "write_iops"],
    verdict_family,
    verdict_keys: &[
        RANDOM_FACTS[0],
        RANDOM_FACTS[1],
        SEQUENTIAL_FACTS[0],
        SEQUENTIAL_FACTS[1],
        LATENCY_FACTS[0],
        LATENCY_FACTS[1],
        LATENCY_FACTS[2],
        LATENCY_FACTS[3],
    ],
    table: TableKind::MetricRows,
    version: ("fio", |h: &Hello| h.fio_version.as_deref()),
    step_name: |s| matches!(s, Step::Fio { .. }).then_some("fio"),
    live: |line| parse_eta(line).map(|(read, write)| LiveIops { read, write }),
    figures: Figures {
        rate: (RateKind::Iops, &["read_iops", "write_iops"]),
        bandwidth: &["read_bw_mib_s", "write_bw_mib_s"],
        tail: (TailKind::P99, &["read_lat_p99_us", "write_lat_p99_us"]),
    },
};

/// Prefix of fio's per-second log files (the artifacts `vmbench_iops.1.log`, ...).
pub const LOG_PREFIX: &str = "vmbench";

impl EngineParams<'_> {
    /// fio's extra arguments for a timed step: no status line when nobody reads it.
    pub(super) fn fio_args(&self) -> Vec<String> {
        if self.live_status {
            vec![]
        } else {
            // After the agent's own --eta=always: fio keeps the last one.
            vec!["--eta=never".into()]
        }
    }
}

/// Where a fio job comes from.
#[derive(Debug, Clone)]
pub enum FioJob {
    /// A preset's text with `{runtime}`, `{ramp}`, `{size}`, `{disk}`.
    Preset(&'static str),
    /// A user job file (keeps its own ramp_time; gets no warm-up step).
    File(PathBuf),
}

/// fio with one job.
#[derive(Debug, Clone)]
pub struct Fio {
    /// The job.
    pub job: FioJob,
    /// The job measures the disk as the instance got it: no prefill and no warm-up, whatever
    /// the run's settings (a first write to unallocated space, a read that falls through to the
    /// base, happen once per block).
    pub untouched: bool,
}

impl Fio {
    /// A preset's engine.
    pub const fn preset(job: &'static str) -> Fio {
        Fio {
            job: FioJob::Preset(job),
            untouched: false,
        }
    }

    /// A preset that measures the disk untouched (see [`Fio::untouched`]).
    pub const fn untouched(job: &'static str) -> Fio {
        Fio {
            job: FioJob::Preset(job),
            untouched: true,
        }
    }

    /// The job with `{disk}`; a preset runs `secs` seconds with `ramp` seconds of ramp_time.
    fn job_text(&self, p: &EngineParams<'_>, secs: u32, ramp: u32) -> Result<String, EngineError> {
        match &self.job {
            FioJob::Preset(job) => Ok(p.overrides.apply(&render_preset(job, secs, ramp, p.size))),
            FioJob::File(_) if !p.overrides.is_empty() => {
                Err(EngineError::OverridesRefused("a fio job file"))
            }
            FioJob::File(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| EngineError::JobFileRead {
                        path: path.clone(),
                        source,
                    })?;
                let job = check_user_job(&text).map_err(|source| EngineError::JobFile {
                    path: path.clone(),
                    source,
                })?;
                Ok(job.text)
            }
        }
    }

    /// A preset's warm-up as its own step: the same job for `ramp` seconds. The host window
    /// then starts exactly when the warm-up ends, so QMP's counts match fio's (fio's in-job
    /// ramp_time ends at a moment the host cannot see). Job files keep their own ramp_time.
    fn ramp_step(&self, p: &EngineParams<'_>) -> Option<Step> {
        let FioJob::Preset(job) = &self.job else {
            return None;
        };
        (p.ramp > 0 && !self.untouched).then(|| Step::Fio {
            job_text: p
                .overrides
                .apply(&render_preset(job, p.ramp, 0, p.size))
                .replace("{disk}", p.target),
            args: p.fio_args(),
            output_name: "ramp.json".into(),
            log_prefix: None,
        })
    }
}

/// One sequential pass over the test area, so the measurement never hits first allocation.
pub fn prefill_job(target: &str, size: &str) -> String {
    format!(
        "[prefill]\nfilename={target}\nsize={size}\nrw=write\nbs=1M\niodepth=8\nioengine=libaio\ndirect=1\n"
    )
}

impl WorkloadEngine for Fio {
    fn descriptor(&self) -> &'static Descriptor {
        &ENGINE
    }

    fn plan(&self, p: &EngineParams<'_>) -> Result<EnginePlan, EngineError> {
        let disk_bytes = p.disk_mib << 20;
        if p.size_bytes > disk_bytes {
            return Err(EngineError::SizeTooLarge {
                size: p.size.to_string(),
                disk_mib: p.disk_mib,
            });
        }
        let mut plan = EnginePlan {
            disk_bytes,
            window: (0, 1),
            prefill_job: Some(prefill_job("{disk}", p.size)),
            baseline_job: Some(self.job_text(p, p.runtime, p.ramp)?),
            ..EnginePlan::default()
        };
        if p.prefill && !self.untouched {
            plan.prep.push(Step::Fio {
                job_text: prefill_job(p.target, p.size),
                args: vec![],
                output_name: "prefill.json".into(),
                log_prefix: None,
            });
        }
        plan.measure.push(Step::DropCaches);
        if let Some(ramp) = self.ramp_step(p) {
            if let Step::Fio { job_text, .. } = &ramp {
                plan.job_files.push(("ramp.fio", job_text.clone()));
            }
            plan.measure.push(ramp);
            plan.window = (1, 2);
        }
        let job = self.job_text(p, p.runtime, 0)?.replace("{disk}", p.target);
        let (job_text, log_prefix) = if p.time_series {
            let opts = log_options(LOG_PREFIX, p.latency_series);
            (with_log_options(&job, &opts), Some(LOG_PREFIX.into()))
        } else {
            (job, None)
        };
        plan.job_files.push(("job.fio", job_text.clone()));
        plan.measure.push(Step::Fio {
            job_text,
            args: p.fio_args(),
            output_name: "fio.json".into(),
            log_prefix,
        });
        Ok(plan)
    }

    fn parse(&self, artifacts: &BTreeMap<String, String>) -> Result<Parsed, EngineError> {
        let text = artifacts
            .get("fio.json")
            .ok_or(EngineError::MissingArtifact {
                engine: "fio",
                what: "JSON output",
            })?;
        let run = parse(text).map_err(EngineError::FioOutput)?;
        let logs: Vec<(String, String)> = artifacts
            .iter()
            .filter(|(n, _)| n.starts_with(LOG_PREFIX))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        // The host window also holds the job's own ramp_time, which fio leaves out.
        let ms = run.read.runtime_ms.max(run.write.runtime_ms) + run.ramp_ms;
        let mut metrics = metrics(&run);
        metrics.extend(io_counts(&run));
        Ok(Parsed {
            metrics,
            samples: samples_from_logs(&logs),
            measured_secs: (ms > 0).then_some(ms as f64 / 1000.0),
        })
    }
}

/// The job's own headline figures: throughput and latency per direction, in report order (the
/// host baseline keeps these of the host's run).
pub const JOB_FIGURES: [&str; 8] = [
    "read_iops",
    "write_iops",
    "read_bw_mib_s",
    "write_bw_mib_s",
    "read_lat_mean_us",
    "read_lat_p99_us",
    "write_lat_mean_us",
    "write_lat_p99_us",
];

const LATENCY_FACTS: [&str; 4] = [
    "read_lat_mean_us",
    "write_lat_mean_us",
    "read_lat_p99_us",
    "write_lat_p99_us",
];

/// A random job's facts: IOPS (bandwidth is IOPS x block size, its derived twin) and latency.
const RANDOM_FACTS: [&str; 6] = [
    "read_iops",
    "write_iops",
    LATENCY_FACTS[0],
    LATENCY_FACTS[1],
    LATENCY_FACTS[2],
    LATENCY_FACTS[3],
];

/// A sequential job's facts: bandwidth (IOPS is bandwidth / block, its twin) and latency.
const SEQUENTIAL_FACTS: [&str; 6] = [
    "read_bw_mib_s",
    "write_bw_mib_s",
    LATENCY_FACTS[0],
    LATENCY_FACTS[1],
    LATENCY_FACTS[2],
    LATENCY_FACTS[3],
];

/// Sequential presets (`seq-*`) are judged on bandwidth; the random ones and user job files on
/// IOPS.
fn verdict_family(w: &WorkloadId) -> &'static [&'static str] {
    match w {
        WorkloadId::Preset(p) if p.starts_with("seq-") => &SEQUENTIAL_FACTS,
        _ => &RANDOM_FACTS,
    }
}

/// Why fio output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FioParseError {
    /// No line of the text starts a JSON object.
    #[error("no JSON object found in fio output (expected fio --output-format=json)")]
    NoJson,
    /// A `{` was found but what follows is not valid JSON.
    #[error("fio output is not valid JSON")]
    Json(#[source] serde_json::Error),
    /// A field fio always writes is absent or has the wrong type.
    #[error("fio JSON: missing or non-numeric field '{0}'")]
    Missing(String),
    /// A number that cannot be a measurement (negative, NaN, infinite).
    #[error("fio JSON: field '{field}' has invalid value {value} (must be finite and >= 0)")]
    Invalid {
        /// JSON path of the field.
        field: String,
        /// What was there.
        value: String,
    },
    /// The `jobs` array is empty.
    #[error("fio JSON: 'jobs' is empty")]
    NoJobs,
    /// A job reported an error code.
    #[error("fio job '{job}' reported error {code}")]
    JobError {
        /// Job name.
        job: String,
        /// fio's error number (an errno).
        code: i64,
    },
    /// A per-second log line that is not `msec, value, ddir, bs, offset[, prio]`.
    #[error("fio log line {line}: {problem} in '{text}' (expected 'msec, value, ddir, bs, offset[, prio]')")]
    Log {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
        /// The line.
        text: String,
    },
}

/// One direction's (read or write) figures, aggregated over jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DirStats {
    /// I/O operations per second.
    pub iops: f64,
    /// Bandwidth in MiB/s (fio's `bw_bytes` / 2^20).
    pub bw_mib_s: f64,
    /// Mean total latency (submission + completion, fio's `lat_ns`), in µs.
    pub lat_mean_us: f64,
    /// Median completion latency (`clat_ns` percentile 50), in µs.
    pub lat_p50_us: f64,
    /// 99th percentile completion latency (`clat_ns` percentile 99), in µs.
    pub lat_p99_us: f64,
    /// 99.9th percentile completion latency (`clat_ns` percentile 99.9), in µs.
    pub lat_p999_us: f64,
    /// I/Os completed.
    pub total_ios: u64,
    /// Longest job runtime, in ms.
    pub runtime_ms: u64,
}

/// A parsed fio run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FioRun {
    /// `fio version`, e.g. `fio-3.33`.
    pub fio_version: String,
    /// Job names, in fio's order (one per job instance when numjobs > 1 without group_reporting).
    pub jobs: Vec<String>,
    /// Reads.
    pub read: DirStats,
    /// Writes.
    pub write: DirStats,
    /// User CPU, % of one CPU, summed over jobs.
    pub usr_cpu_pct: f64,
    /// System CPU, % of one CPU, summed over jobs.
    pub sys_cpu_pct: f64,
    /// Reporting groups (`groupid`; `stonewall`/`new_group` start one), in order. Jobs of one
    /// group run together and are summed; groups run one after another, so `read`/`write` above
    /// are then the whole run's (I/Os over the groups' summed runtime), never a sum of rates.
    pub groups: Vec<FioGroup>,
    /// Seconds of the jobs' own `ramp_time` (ms), summed over the groups: fio excludes them from
    /// its figures, but they fall inside a host-side window around the job.
    pub ramp_ms: u64,
}

/// One fio reporting group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FioGroup {
    /// fio's `groupid`.
    pub id: u64,
    /// Its jobs' names.
    pub jobs: Vec<String>,
    /// Reads, summed over its jobs.
    pub read: DirStats,
    /// Writes, summed over its jobs.
    pub write: DirStats,
}

/// Parses fio's JSON output. Leading noise lines (fio prints warnings such as `fio: ...` to the
/// same stream) are skipped: the document starts at the first line that begins with `{`.
pub fn parse(json: &str) -> Result<FioRun, FioParseError> {
    let doc = find_json(json)?;
    let jobs = doc
        .get("jobs")
        .and_then(Json::as_array)
        .ok_or_else(|| FioParseError::Missing("jobs".into()))?;
    if jobs.is_empty() {
        return Err(FioParseError::NoJobs);
    }
    let mut run = FioRun {
        fio_version: doc
            .get("fio version")
            .and_then(Json::as_str)
            .ok_or_else(|| FioParseError::Missing("fio version".into()))?
            .to_string(),
        ..FioRun::default()
    };
    // groupid -> (jobs, reads, writes, longest ramp)
    type Acc = (Vec<String>, Vec<DirStats>, Vec<DirStats>, u64);
    let mut groups: BTreeMap<u64, Acc> = BTreeMap::new();
    let global_ramp = doc.get("global options").and_then(ramp_ms);
    for (i, job) in jobs.iter().enumerate() {
        let name = job
            .get("jobname")
            .and_then(Json::as_str)
            .ok_or_else(|| FioParseError::Missing(format!("jobs[{i}].jobname")))?;
        if let Some(code) = job.get("error").and_then(Json::as_i64).filter(|c| *c != 0) {
            return Err(FioParseError::JobError {
                job: name.into(),
                code,
            });
        }
        run.jobs.push(name.to_string());
        run.usr_cpu_pct += num(job, &format!("jobs[{i}]"), "usr_cpu")?;
        run.sys_cpu_pct += num(job, &format!("jobs[{i}]"), "sys_cpu")?;
        let g = groups
            .entry(job.get("groupid").and_then(Json::as_u64).unwrap_or(0))
            .or_default();
        g.0.push(name.to_string());
        g.1.push(dir_stats(job, &format!("jobs[{i}].read"), "read")?);
        g.2.push(dir_stats(job, &format!("jobs[{i}].write"), "write")?);
        let ramp = job.get("job options").and_then(ramp_ms).or(global_ramp);
        g.3 = g.3.max(ramp.unwrap_or(0));
    }
    for (id, (jobs, reads, writes, ramp)) in groups {
        run.ramp_ms += ramp;
        run.groups.push(FioGroup {
            id,
            jobs,
            read: aggregate(&reads),
            write: aggregate(&writes),
        });
    }
    run.read = sequential(run.groups.iter().map(|g| &g.read));
    run.write = sequential(run.groups.iter().map(|g| &g.write));
    Ok(run)
}

/// A job's or the global `ramp_time` option in ms (fio's time units; bare numbers are seconds).
fn ramp_ms(options: &Json) -> Option<u64> {
    parse_time_ms(options.get("ramp_time")?.as_str()?)
}

/// fio time values: `5`, `5s`, `500ms`, `2m`, `1h`, `100us` (bare numbers are seconds).
pub fn parse_time_ms(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "" | "s" | "sec" => n.checked_mul(1000)?,
        "ms" | "msec" => n,
        "us" | "usec" => n / 1000,
        "m" | "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(ms)
}

/// Groups that ran one after another: I/Os and bytes over the summed runtime, latencies
/// weighted by I/Os. One group is returned as it is.
fn sequential<'a>(groups: impl Iterator<Item = &'a DirStats>) -> DirStats {
    let parts: Vec<&DirStats> = groups.collect();
    if let [one] = parts.as_slice() {
        return (*one).clone();
    }
    let mut out = DirStats::default();
    let mut bytes_ms = 0.0;
    for p in &parts {
        out.total_ios += p.total_ios;
        out.runtime_ms += p.runtime_ms;
        bytes_ms += p.bw_mib_s * p.runtime_ms as f64;
    }
    if out.total_ios == 0 || out.runtime_ms == 0 {
        return out;
    }
    let secs = out.runtime_ms as f64 / 1000.0;
    out.iops = out.total_ios as f64 / secs;
    out.bw_mib_s = bytes_ms / out.runtime_ms as f64;
    let w = |f: fn(&DirStats) -> f64| {
        parts.iter().map(|p| f(p) * p.total_ios as f64).sum::<f64>() / out.total_ios as f64
    };
    out.lat_mean_us = w(|p| p.lat_mean_us);
    out.lat_p50_us = w(|p| p.lat_p50_us);
    out.lat_p99_us = w(|p| p.lat_p99_us);
    out.lat_p999_us = w(|p| p.lat_p999_us);
    out
}

/// Finds the first JSON object that starts a line and parses it (trailing text is ignored).
fn find_json(text: &str) -> Result<Json, FioParseError> {
    let mut offset = 0;
    let mut last_err = None;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('{') {
            let mut stream =
                serde_json::Deserializer::from_str(&text[offset..]).into_iter::<Json>();
            match stream.next() {
                Some(Ok(v)) if v.is_object() => return Ok(v),
                Some(Err(e)) => last_err = Some(e),
                _ => {}
            }
        }
        offset += line.len();
    }
    Err(last_err.map_or(FioParseError::NoJson, FioParseError::Json))
}

/// A finite, non-negative number at `obj[key]`.
fn num(obj: &Json, path: &str, key: &str) -> Result<f64, FioParseError> {
    let field = format!("{path}.{key}");
    let v = obj
        .get(key)
        .ok_or_else(|| FioParseError::Missing(field.clone()))?;
    let n = v
        .as_f64()
        .ok_or_else(|| FioParseError::Missing(field.clone()))?;
    if !n.is_finite() || n < 0.0 {
        return Err(FioParseError::Invalid {
            field,
            value: v.to_string(),
        });
    }
    Ok(n)
}

/// One job's direction.
fn dir_stats(job: &Json, path: &str, key: &str) -> Result<DirStats, FioParseError> {
    let d = job
        .get(key)
        .ok_or_else(|| FioParseError::Missing(path.into()))?;
    let total_ios = num(d, path, "total_ios")?;
    let lat = d
        .get("lat_ns")
        .ok_or_else(|| FioParseError::Missing(format!("{path}.lat_ns")))?;
    let mut s = DirStats {
        iops: num(d, path, "iops")?,
        bw_mib_s: num(d, path, "bw_bytes")? / 1_048_576.0,
        lat_mean_us: num(lat, &format!("{path}.lat_ns"), "mean")? / 1000.0,
        total_ios: total_ios as u64,
        runtime_ms: num(d, path, "runtime")? as u64,
        ..DirStats::default()
    };
    // fio leaves out the percentile table of a direction that did no I/O.
    if s.total_ios > 0 {
        let pp = format!("{path}.clat_ns.percentile");
        let pct = d
            .get("clat_ns")
            .and_then(|c| c.get("percentile"))
            .ok_or_else(|| FioParseError::Missing(pp.clone()))?;
        s.lat_p50_us = num(pct, &pp, "50.000000")? / 1000.0;
        s.lat_p99_us = num(pct, &pp, "99.000000")? / 1000.0;
        s.lat_p999_us = num(pct, &pp, "99.900000")? / 1000.0;
    }
    Ok(s)
}

/// Sums rates and counts over jobs; weights latencies by each job's I/O count. Percentiles of
/// several jobs cannot be merged exactly from fio's summary, so the ios-weighted mean of the jobs'
/// percentiles is an approximation (exact for one job or with group_reporting).
fn aggregate(parts: &[DirStats]) -> DirStats {
    let mut out = DirStats::default();
    for p in parts {
        out.iops += p.iops;
        out.bw_mib_s += p.bw_mib_s;
        out.total_ios += p.total_ios;
        out.runtime_ms = out.runtime_ms.max(p.runtime_ms);
    }
    if out.total_ios == 0 {
        return out;
    }
    let w = |f: fn(&DirStats) -> f64| {
        parts.iter().map(|p| f(p) * p.total_ios as f64).sum::<f64>() / out.total_ios as f64
    };
    out.lat_mean_us = w(|p| p.lat_mean_us);
    out.lat_p50_us = w(|p| p.lat_p50_us);
    out.lat_p99_us = w(|p| p.lat_p99_us);
    out.lat_p999_us = w(|p| p.lat_p999_us);
    out
}

/// The metrics of a run, labelled as in the seed table. A direction without I/O gives
/// `NotAvailable` metrics rather than zeros, so a read-only job does not show a 0 µs write latency.
pub fn metrics(run: &FioRun) -> Vec<Metric> {
    let mut out = Vec::new();
    for (dir, name, s) in [("read", "Read", &run.read), ("write", "Write", &run.write)] {
        let v = |x: f64| {
            if s.total_ios > 0 {
                Value::Number(x)
            } else {
                Value::NotAvailable(format!("no {dir}s in this job"))
            }
        };
        let m = |key: &str, label: &str, unit: &str, better, value| Metric {
            key: format!("{dir}_{key}"),
            label: format!("{name} {label}"),
            unit: unit.into(),
            better,
            value,
        };
        out.push(m("iops", "IOPS", "IOPS", Better::Higher, v(s.iops)));
        out.push(m(
            "bw_mib_s",
            "Bandwidth",
            "MiB/s",
            Better::Higher,
            v(s.bw_mib_s),
        ));
        out.push(m(
            "lat_mean_us",
            "Latency (avg)",
            "µs",
            Better::Lower,
            v(s.lat_mean_us),
        ));
        out.push(m(
            "lat_p99_us",
            "Latency (p99)",
            "µs",
            Better::Lower,
            v(s.lat_p99_us),
        ));
    }
    out.push(Metric::num(
        "guest_usr_cpu_pct",
        "CPU Usage (usr)",
        "%",
        Better::Lower,
        run.usr_cpu_pct,
    ));
    out.push(Metric::num(
        "guest_sys_cpu_pct",
        "CPU Usage (sys)",
        "%",
        Better::Lower,
        run.sys_cpu_pct,
    ));
    if run.groups.len() > 1 {
        out.extend(run.groups.iter().flat_map(group_metrics));
    }
    let ios = run.read.total_ios + run.write.total_ios;
    out.push(Metric {
        key: "read_share_pct".into(),
        label: "Read Share (of I/Os)".into(),
        unit: "%".into(),
        // Not a figure of merit: it checks the mix (70 for pg-randrw). `Higher` is nominal.
        better: Better::Higher,
        value: if ios > 0 {
            Value::Number(100.0 * run.read.total_ios as f64 / ios as f64)
        } else {
            Value::NotAvailable("no I/O".into())
        },
    });
    out
}

/// One reporting group's own IOPS and bandwidth (`g{id}_read_iops` ...), for runs whose groups
/// ran one after another.
fn group_metrics(g: &FioGroup) -> Vec<Metric> {
    let name = format!("Group {} ({})", g.id, g.jobs.join(", "));
    let mut out = Vec::new();
    for (dir, s) in [("read", &g.read), ("write", &g.write)] {
        if s.total_ios == 0 {
            continue;
        }
        let rows = [
            ("iops", "IOPS", "IOPS", s.iops),
            ("bw_mib_s", "bandwidth", "MiB/s", s.bw_mib_s),
        ];
        for (key, label, unit, v) in rows {
            out.push(Metric::num(
                &format!("g{}_{dir}_{key}", g.id),
                &format!("{name} {dir} {label}"),
                unit,
                Better::Higher,
                v,
            ));
        }
    }
    out
}

/// fio's data direction of a log sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ddir {
    /// 0.
    Read,
    /// 1.
    Write,
    /// 2.
    Trim,
}

/// One line of a fio per-interval log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSample {
    /// End of the interval, ms since the job started.
    pub msec: u64,
    /// The value, in the log type's unit (bw: KiB/s, iops: count/s, lat/clat/slat: ns).
    pub value: f64,
    /// Direction.
    pub ddir: Ddir,
    /// Block size (0 in averaged logs).
    pub bs: u64,
}

/// Parses a fio log (`write_bw_log`, `write_iops_log`, `write_lat_log` files). Blank lines are
/// skipped; anything else that is not `msec, value, ddir, bs, offset[, prio]` is an error.
pub fn parse_log(text: &str) -> Result<Vec<LogSample>, FioParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_log_line(line).map_err(|problem| FioParseError::Log {
            line: i + 1,
            problem,
            text: line.chars().take(120).collect(),
        })?);
    }
    Ok(out)
}

/// One log line.
fn parse_log_line(line: &str) -> Result<LogSample, String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if !(5..=6).contains(&f.len()) {
        return Err(format!("{} fields", f.len()));
    }
    let int = |i: usize, what: &str| {
        f[i].parse::<u64>()
            .map_err(|_| format!("{what} '{}' is not a non-negative integer", f[i]))
    };
    let value: f64 = f[1]
        .parse()
        .map_err(|_| format!("value '{}' is not a number", f[1]))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("value '{}' is not finite and >= 0", f[1]));
    }
    let ddir = match int(2, "ddir")? {
        0 => Ddir::Read,
        1 => Ddir::Write,
        2 => Ddir::Trim,
        d => return Err(format!("ddir {d} (valid: 0 read, 1 write, 2 trim)")),
    };
    Ok(LogSample {
        msec: int(0, "msec")?,
        value,
        ddir,
        bs: int(3, "bs")?,
    })
}

/// The log type of a fio log file name (`PREFIX_bw.1.log` -> `bw`).
fn log_kind(name: &str) -> Option<&'static str> {
    let base = name.rsplit('/').next()?.strip_suffix(".log")?;
    // Per-job logs carry a `.N` job index; merged ones may not.
    let base = match base.rsplit_once('.') {
        Some((b, n)) if n.chars().all(|c| c.is_ascii_digit()) => b,
        _ => base,
    };
    ["bw", "iops", "clat", "slat", "lat"]
        .into_iter()
        .find(|k| base.ends_with(&format!("_{k}")))
}

/// Turns fio per-second logs (file name, contents) into series: `read_iops`, `write_iops`,
/// `read_bw_mib_s`, `write_bw_mib_s` (KiB/s / 1024), `read_lat_mean_us`, `write_lat_mean_us`
/// (the `_lat` log, total latency, ns / 1000). Each file is one job's; jobs are aligned per
/// second and merged only over the seconds every job of the series has a sample for (rates
/// summed, latencies averaged): a second in which one job has already stopped, or has a gap,
/// would otherwise show as a false dip. Files of other types (clat, slat) or that do not parse
/// are left out, so one damaged log costs its series, not the cell.
pub fn samples_from_logs(files: &[(String, String)]) -> BTreeMap<String, Vec<f64>> {
    // series -> one map per job (file): second -> that job's values in the second
    let mut acc: BTreeMap<String, Vec<BTreeMap<u64, Vec<f64>>>> = BTreeMap::new();
    for (name, text) in files {
        let (suffix, scale) = match log_kind(name) {
            Some("bw") => ("bw_mib_s", 1.0 / 1024.0),
            Some("iops") => ("iops", 1.0),
            Some("lat") => ("lat_mean_us", 1.0 / 1000.0),
            _ => continue,
        };
        let Ok(samples) = parse_log(text) else {
            continue;
        };
        let mut job: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
        for s in samples {
            let dir = match s.ddir {
                Ddir::Read => "read",
                Ddir::Write => "write",
                Ddir::Trim => continue,
            };
            // log_avg_msec=1000 stamps intervals at ~1000, 2003 ...: round to the second.
            let sec = (s.msec + 500) / 1000;
            job.entry(format!("{dir}_{suffix}"))
                .or_default()
                .entry(sec)
                .or_default()
                .push(s.value * scale);
        }
        for (key, by_sec) in job {
            acc.entry(key).or_default().push(by_sec);
        }
    }
    acc.into_iter()
        .map(|(key, jobs)| {
            let is_lat = key.ends_with("lat_mean_us");
            (key, merge_jobs(&jobs, is_lat))
        })
        .collect()
}

/// One series from several jobs' per-second values, over the seconds all of them cover: each
/// job's value in a second is its mean (two intervals rounded into one second are one rate),
/// then jobs are summed (rates) or averaged (latencies).
fn merge_jobs(jobs: &[BTreeMap<u64, Vec<f64>>], is_lat: bool) -> Vec<f64> {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let Some(first) = jobs.first() else {
        return vec![];
    };
    first
        .keys()
        .filter_map(|sec| {
            let per_job: Option<Vec<f64>> =
                jobs.iter().map(|j| j.get(sec).map(|v| mean(v))).collect();
            let per_job = per_job?;
            let sum: f64 = per_job.iter().sum();
            Some(if is_lat {
                sum / per_job.len() as f64
            } else {
                sum
            })
        })
        .collect()
}

/// Fills a preset's `{runtime}`, `{ramp}` and `{size}`; `{disk}` is left for the agent, which
/// alone knows the guest device name.
pub fn render_preset(job: &str, runtime_s: u32, ramp_s: u32, size: &str) -> String {
    job.replace("{runtime}", &runtime_s.to_string())
        .replace("{ramp}", &ramp_s.to_string())
        .replace("{size}", size)
}

/// The `[global]` lines that make fio write per-second bandwidth, IOPS and (with `latency`)
/// latency logs named `PREFIX_{bw,iops,lat,clat,slat}.N.log`. Characters that could break the
/// job file are replaced. fio takes the bandwidth and IOPS samples once per interval but
/// accounts every I/O into the latency logs (three of them): the one instrument whose work grows
/// with the I/O rate. What each costs: `scripts/bench-fidelity --in-boot` with `VARIANTS=all`.
pub fn log_options(prefix: &str, latency: bool) -> String {
    let p: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_./".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let lat = if latency {
        format!("write_lat_log={p}\n")
    } else {
        String::new()
    };
    format!("write_bw_log={p}\nwrite_iops_log={p}\n{lat}log_avg_msec=1000\n")
}

/// A job text with `opts` ([`log_options`]) added to its first `[global]` section (or a new one
/// on top).
pub fn with_log_options(job: &str, opts: &str) -> String {
    match job.find("[global]\n") {
        Some(i) => {
            let at = i + "[global]\n".len();
            format!("{}{opts}{}", &job[..at], &job[at..])
        }
        None => format!("[global]\n{opts}\n{job}"),
    }
}

/// Why a user job file is refused.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A key that would point fio somewhere other than the disk under test.
    #[error("line {line}: key '{key}' in section [{section}] is not allowed: vmbench points the job at the disk under test (remove filename, directory, filename_format, opendir)")]
    ForbiddenKey {
        /// The key.
        key: String,
        /// Section name.
        section: String,
        /// 1-based line.
        line: usize,
    },
    /// An I/O engine that is not local block I/O.
    #[error("line {line}: ioengine '{engine}' in section [{section}] is not allowed (valid: {})", ALLOWED_ENGINES.join(", "))]
    Engine {
        /// The engine.
        engine: String,
        /// Section name.
        section: String,
        /// 1-based line.
        line: usize,
    },
    /// An option before any `[section]`.
    #[error("line {line}: '{text}' comes before any [section]")]
    OutsideSection {
        /// 1-based line.
        line: usize,
        /// The line.
        text: String,
    },
    /// `include` pulls in files vmbench has not checked.
    #[error("line {line}: 'include' is not allowed (put the options in the job file)")]
    Include {
        /// 1-based line.
        line: usize,
    },
    /// A `[` line without its `]`.
    #[error("line {line}: malformed section header '{text}'")]
    Malformed {
        /// 1-based line.
        line: usize,
        /// The line.
        text: String,
    },
    /// The file has no job section.
    #[error("job file has no job section (only [global] or nothing)")]
    NoJobs,
    /// `fio` could not be started or the file could not be read.
    #[error("cannot run 'fio --parse-only {path}'")]
    FioNotRunnable {
        /// The job file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// fio rejected the file.
    #[error("fio rejected job file {path}: {message}")]
    FioRejected {
        /// The job file.
        path: String,
        /// fio's own message.
        message: String,
    },
}

/// I/O engines that do local I/O on the disk fio is given.
pub const ALLOWED_ENGINES: &[&str] = &[
    "libaio", "io_uring", "psync", "sync", "pvsync", "pvsync2", "posixaio", "mmap", "null",
];

/// Keys that choose fio's target; vmbench sets it.
const FORBIDDEN_KEYS: &[&str] = &["filename", "directory", "filename_format", "opendir"];

/// A checked user job file.
#[derive(Debug, Clone, PartialEq)]
pub struct UserJob {
    /// Section names, in order (including `global`).
    pub sections: Vec<String>,
    /// The job text to run, with `filename={disk}` in a leading `[global]`.
    pub text: String,
}

/// Checks a user fio job file and points it at `{disk}`. The new `[global]` goes on top because
/// fio applies a global section only to the jobs after it; later `[global]`s add to it.
pub fn check_user_job(text: &str) -> Result<UserJob, JobError> {
    let mut sections = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with(';') || l.starts_with('#') {
            continue;
        }
        if l.starts_with('[') {
            let name = l
                .strip_prefix('[')
                .and_then(|r| r.split_once(']'))
                .map(|(n, _)| n.trim().to_string())
                .ok_or_else(|| JobError::Malformed {
                    line,
                    text: l.into(),
                })?;
            sections.push(name);
            continue;
        }
        if l == "include" || l.starts_with("include ") || l.starts_with("include\t") {
            return Err(JobError::Include { line });
        }
        let section = sections.last().ok_or_else(|| JobError::OutsideSection {
            line,
            text: l.into(),
        })?;
        check_option(l, section, line)?;
    }
    if !sections.iter().any(|s| s != "global") {
        return Err(JobError::NoJobs);
    }
    Ok(UserJob {
        sections,
        text: format!("[global]\nfilename={{disk}}\n\n{text}"),
    })
}

/// One `key[=value]` line.
fn check_option(l: &str, section: &str, line: usize) -> Result<(), JobError> {
    let (key, value) = l.split_once('=').unwrap_or((l, ""));
    let key = key.trim().to_ascii_lowercase();
    // `$VAR` is expanded by fio, so a key spelled through the environment cannot be checked.
    if FORBIDDEN_KEYS.contains(&key.as_str()) || key.contains('$') {
        return Err(JobError::ForbiddenKey {
            key,
            section: section.into(),
            line,
        });
    }
    if key == "ioengine" {
        let engine = value.trim();
        if !ALLOWED_ENGINES.contains(&engine.to_ascii_lowercase().as_str()) {
            return Err(JobError::Engine {
                engine: engine.into(),
                section: section.into(),
                line,
            });
        }
    }
    Ok(())
}

/// Runs the host's `fio --parse-only FILE`; fio's message is kept when it refuses.
pub fn parse_only(job_path: &Path) -> Result<(), JobError> {
    let path = job_path.display().to_string();
    let out = std::process::Command::new("fio")
        .arg("--parse-only")
        .arg(job_path)
        .output()
        .map_err(|source| JobError::FioNotRunnable {
            path: path.clone(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let mut message = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.trim().is_empty() {
        message = format!("{message} {}", stdout.trim()).trim().to_string();
    }
    if message.is_empty() {
        message = format!("exit status {}", out.status);
    }
    Err(JobError::FioRejected { path, message })
}

/// Live IOPS from fio's eta line, e.g.
/// `Jobs: 1 (f=1): [m(1)][45.5%][r=5216KiB/s,w=2272KiB/s][r=652,w=284 IOPS][eta 00m:06s]`.
pub fn parse_eta(line: &str) -> Option<(u64, u64)> {
    let seg = line.split('[').find(|s| s.contains(" IOPS]"))?;
    let seg = seg.trim_end_matches(']').trim_end_matches(" IOPS");
    let mut r = 0;
    let mut w = 0;
    for part in seg.split(',') {
        let (k, v) = part.split_once('=')?;
        let n = parse_si(v)?;
        match k.trim() {
            "r" => r = n,
            "w" => w = n,
            _ => {}
        }
    }
    Some((r, w))
}

fn parse_si(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'k' => (&v[..v.len() - 1], 1e3),
        'M' => (&v[..v.len() - 1], 1e6),
        _ => (v, 1.0),
    };
    Some((num.parse::<f64>().ok()? * mult) as u64)
}

/// fio's total I/O counts as metrics (the host window's figures are checked against them).
pub fn io_counts(run: &FioRun) -> [Metric; 2] {
    [
        Metric::num(
            "read_ios",
            "Read I/Os (fio)",
            "ops",
            Better::Higher,
            run.read.total_ios as f64,
        ),
        Metric::num(
            "write_ios",
            "Write I/Os (fio)",
            "ops",
            Better::Higher,
            run.write.total_ios as f64,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_kind_from_names() {
        assert_eq!(log_kind("x/pg_bw.1.log"), Some("bw"));
        assert_eq!(log_kind("pg_clat.2.log"), Some("clat"));
        assert_eq!(log_kind("pg_lat.log"), Some("lat"));
        assert_eq!(log_kind("pg_iops.1.log"), Some("iops"));
        assert_eq!(log_kind("pg.json"), None);
    }

    #[test]
    fn log_options_cannot_inject_lines() {
        let o = log_options("a\nfilename=/etc/passwd", true);
        assert_eq!(o.lines().count(), 4, "{o}");
        assert!(!o.contains("\nfilename"));
    }

    #[test]
    fn fio_eta_lines() {
        let l =
            "Jobs: 1 (f=1): [m(1)][45.5%][r=5216KiB/s,w=2272KiB/s][r=652,w=284 IOPS][eta 00m:06s]";
        assert_eq!(parse_eta(l), Some((652, 284)));
        let l = "Jobs: 1 (f=1): [r(1)][20.0%][r=40.1MiB/s][r=10.3k IOPS][eta 00m:04s]";
        assert_eq!(parse_eta(l), Some((10300, 0)));
        assert_eq!(parse_eta("fio-3.33"), None);
        assert_eq!(parse_eta("[x=1 IOPS]"), Some((0, 0)));
    }
}

pub use crate::cell::JobOverrides;

/// The job-text half of the sweep overrides (the cell half, id and slug, is in `cell.rs`).
impl JobOverrides {
    /// The job text with every set key's lines replaced; a key the job does not have is added
    /// to `[global]` (so it applies to every job section).
    pub fn apply(&self, job: &str) -> String {
        let pairs = self.pairs();
        let mut seen = vec![false; pairs.len()];
        let mut out: Vec<String> = job
            .lines()
            .map(|l| {
                let key = l.split('=').next().unwrap_or("").trim();
                match pairs.iter().position(|(k, _)| *k == key) {
                    Some(i) => {
                        seen[i] = true;
                        format!("{}={}", pairs[i].0, pairs[i].1)
                    }
                    None => l.to_string(),
                }
            })
            .collect();
        let missing: Vec<String> = pairs
            .iter()
            .zip(&seen)
            .filter(|(_, s)| !**s)
            .map(|((k, v), _)| format!("{k}={v}"))
            .collect();
        if !missing.is_empty() {
            match out.iter().position(|l| l.trim() == "[global]") {
                Some(g) => out.splice(g + 1..g + 1, missing).for_each(drop),
                None => {
                    out.insert(0, "[global]".into());
                    out.splice(1..1, missing).for_each(drop);
                }
            }
        }
        let mut s = out.join("\n");
        if job.ends_with('\n') {
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod override_tests {
    use super::*;

    #[test]
    fn no_override_keeps_id_and_job() {
        let o = JobOverrides::default();
        assert_eq!(o.slug(), "");
        let job = "[global]\nbs=8k\n[a]\nrw=randrw\n";
        assert_eq!(o.apply(job), job);
    }

    #[test]
    fn overrides_replace_and_add() {
        let o = JobOverrides {
            bs: Some("4K".parse().unwrap()),
            iodepth: Some(32),
            numjobs: None,
            rwmix: Some(70),
            direct: None,
        };
        assert_eq!(o.slug(), "-bs4k-qd32-rw70");
        let job = "[global]\nbs=8k\niodepth=16\n[a]\nrw=randrw\niodepth=1\n";
        assert_eq!(
            o.apply(job),
            "[global]\nrwmixread=70\nbs=4k\niodepth=32\n[a]\nrw=randrw\niodepth=32\n"
        );
    }

    /// `--direct 0`: the seed job's `direct=1` becomes buffered I/O, nothing else changes.
    #[test]
    fn direct_zero_makes_the_seed_job_buffered() {
        let o = JobOverrides {
            direct: Some(0),
            ..JobOverrides::default()
        };
        assert_eq!(o.slug(), "-direct0");
        let job = o.apply(crate::workload::PG_RANDRW);
        assert!(job.contains("\ndirect=0\n"), "{job}");
        assert!(!job.contains("direct=1"), "{job}");
        assert_eq!(
            job.replace("direct=0", "direct=1"),
            crate::workload::PG_RANDRW
        );
    }
}
