//! bonnie++: arguments, and parsing of its CSV line.
//!
//! Two CSV layouts exist. bonnie++ 1.96/1.97 write format `1.96`/`1.97` (48 fields); bonnie++
//! 2.00 writes format `1.98` (50 fields), which adds the seek count and seek process count after
//! the chunk size (see bon_csv2txt). Rates are K/sec (per-char, block, rewrite) or /sec (seeks,
//! file operations); `+++++`/`+++` mean "too fast to measure"; latencies carry a unit suffix.

use super::engine::{
    CellTable, Descriptor, EngineError, EngineParams, EnginePlan, Figures, Pace, Parsed, RateKind,
    TableKind, TailKind, WorkloadEngine,
};
use crate::results::{Better, Metric, Value};
use std::collections::BTreeMap;
use vmbench_proto::{Hello, Step, TEST_MOUNTPOINT};

/// bonnie++ as the rest of vmbench knows it (see [`Descriptor`]).
pub static ENGINE: Descriptor = Descriptor {
    name: "bonnie++",
    headline: &[
        "seq_out_block_kps",
        "seq_in_block_kps",
        "seq_out_rewrite_kps",
        "random_seeks_ps",
    ],
    stability: &["seq_out_block_kps", "seq_in_block_kps"],
    verdict_family: |_| FACTS,
    verdict_keys: FACTS,
    table: TableKind::CellRows(&[
        CellTable {
            second: ("Size", "file_size_mib", size_as_printed),
            columns: &BLOCK_COLUMNS,
        },
        CellTable {
            second: ("Files", "file_count_k", |k| format!("{k}")),
            columns: &FILE_COLUMNS,
        },
    ]),
    version: ("bonnie", |h: &Hello| h.bonnie_version.as_deref()),
    step_name: |s| matches!(s, Step::Bonnie { .. }).then_some("bonnie++"),
    // It prints no status line while it runs.
    live: |_| None,
    figures: Figures {
        rate: (RateKind::Seeks, &["random_seeks_ps"]),
        bandwidth: &[],
        tail: (
            TailKind::Max,
            &[
                "lat_seq_out_block_us",
                "lat_seq_in_block_us",
                "lat_random_seeks_us",
            ],
        ),
    },
};

/// bonnie++ on the test filesystem.
#[derive(Debug, Clone, Copy)]
pub struct Bonnie;

impl WorkloadEngine for Bonnie {
    fn descriptor(&self) -> &'static Descriptor {
        &ENGINE
    }

    fn needs_filesystem(&self) -> bool {
        true
    }

    fn plan(&self, p: &EngineParams<'_>) -> Result<EnginePlan, EngineError> {
        if !p.overrides.is_empty() {
            return Err(EngineError::OverridesRefused("bonnie++"));
        }
        let ratio = p.bonnie_size_ratio.max(2);
        let args = default_args(
            p.memory_mib,
            ratio,
            TEST_MOUNTPOINT,
            p.bonnie_files,
            "vmbench",
        );
        Ok(EnginePlan {
            // The file (ratio x RAM) plus room for the filesystem: one more RAM's worth.
            disk_bytes: (p.disk_mib << 20).max((p.memory_mib * (ratio as u64 + 1)) << 20),
            prep: vec![],
            job_files: vec![("bonnie.args", args.join("\n") + "\n")],
            measure: vec![
                Step::DropCaches,
                Step::Bonnie {
                    args,
                    output_name: "bonnie.txt".into(),
                },
            ],
            window: (0, 1),
            baseline_job: None,
            prefill_job: None,
        })
    }

    fn parse(&self, artifacts: &BTreeMap<String, String>) -> Result<Parsed, EngineError> {
        let text = artifacts
            .get("bonnie.txt")
            .ok_or(EngineError::MissingArtifact {
                engine: "bonnie++",
                what: "output",
            })?;
        let line = find_csv_line(text).ok_or(EngineError::BonnieNoCsv)?;
        let run = parse_csv(line).map_err(EngineError::BonnieOutput)?;
        Ok(Parsed {
            metrics: metrics(&run),
            samples: BTreeMap::new(),
            measured_secs: None,
        })
    }

    /// bonnie++ is not timed: it writes its file (`-s`, ratio x RAM) once, rewrites it (reads
    /// and writes it again) and reads it once, at the storage's rate, and spends a fixed time
    /// on the rest. In a guest: the rest `GUEST_OTHER_SECS`, the block phases at about
    /// `LINK_SHARE` of a shaped link's rate, elsewhere about `GUEST_MIB_S`; on the host itself
    /// (a host row) `HOST_OTHER_SECS` and `HOST_MIB_S`.
    fn estimated_secs(&self, p: &EngineParams<'_>, pace: Pace) -> u64 {
        let file_mib = (p.bonnie_size_ratio.max(2) as u64 * p.memory_mib.max(1)) as f64;
        let (other, unshaped) = if pace.in_guest {
            (GUEST_OTHER_SECS, GUEST_MIB_S)
        } else {
            (HOST_OTHER_SECS, HOST_MIB_S)
        };
        let link_mib_s = pace.link_bytes_s.map(|b| b as f64 / 1048576.0 * LINK_SHARE);
        let mib_s = link_mib_s.map_or(unshaped, |l| l.min(unshaped));
        other + (4.0 * file_mib / mib_s).ceil() as u64
    }
}

/// What a bonnie++ cell spends besides its block phases under TCG (the filesystem's mkfs, the
/// per-character tests on a part of the file, the random seeks, the small files), and the rate
/// of its block phases (write, rewrite, read; the rewrite counts twice) on an unshaped link or
/// a local disk, and over a shaped link as a share of its rate: a 512 MiB guest, `-s` 1 GiB,
/// `-n` 16, over NFS on a 1 Gbit link, 2026-12-07: mkfs 5.6 s, then block write 104 MB/s,
/// rewrite 47, read 113, 81 s (the cell 90 s); on a 100 Mbit link: block write 11.3 MB/s, read
/// 11.7, 398 s (the cell 406 s, of 11.9 MiB/s: 0.96 of the link in its block phases); on a
/// local raw file block write 165 MB/s, read 182-205, 55-62 s (the cell 64-70 s).
const GUEST_OTHER_SECS: u64 = 45;
const GUEST_MIB_S: f64 = 150.0;
const LINK_SHARE: f64 = 0.95;
/// The same on the host itself (a host row, its page cache capped at the guest's RAM, the same
/// `-s`): ext4 on a loop device over a local raw file, 10.3 s and 11.3 s; block write about
/// 1 GB/s, block read 1.9 GB/s.
const HOST_OTHER_SECS: u64 = 5;
const HOST_MIB_S: f64 = 1000.0;

/// The seeds' first table: Seq Output Per Chr/Block/Rewrite, Seq Input Per Chr/Block, Random
/// Seeks, each K/sec (or /sec) and %CP.
const BLOCK_COLUMNS: [(&str, &str, &str); 12] = [
    ("Seq Output Per Chr", "seq_out_char_kps", "K/sec"),
    ("", "seq_out_char_cpu_pct", "%CP"),
    ("Seq Output Block", "seq_out_block_kps", "K/sec"),
    ("", "seq_out_block_cpu_pct", "%CP"),
    ("Seq Output Rewrite", "seq_out_rewrite_kps", "K/sec"),
    ("", "seq_out_rewrite_cpu_pct", "%CP"),
    ("Seq Input Per Chr", "seq_in_char_kps", "K/sec"),
    ("", "seq_in_char_cpu_pct", "%CP"),
    ("Seq Input Block", "seq_in_block_kps", "K/sec"),
    ("", "seq_in_block_cpu_pct", "%CP"),
    ("Random Seeks", "random_seeks_ps", "/sec"),
    ("", "random_seeks_cpu_pct", "%CP"),
];

/// The seeds' second table: sequential and random create/read/delete, /sec and %CP (the
/// second column is the file count, in units of 1024).
const FILE_COLUMNS: [(&str, &str, &str); 12] = [
    ("Seq Create", "seq_create_ps", "/sec"),
    ("", "seq_create_cpu_pct", "%CP"),
    ("Seq Read", "seq_read_ps", "/sec"),
    ("", "seq_read_cpu_pct", "%CP"),
    ("Seq Delete", "seq_delete_ps", "/sec"),
    ("", "seq_delete_cpu_pct", "%CP"),
    ("Random Create", "random_create_ps", "/sec"),
    ("", "random_create_cpu_pct", "%CP"),
    ("Random Read", "random_read_ps", "/sec"),
    ("", "random_read_cpu_pct", "%CP"),
    ("Random Delete", "random_delete_ps", "/sec"),
    ("", "random_delete_cpu_pct", "%CP"),
];

/// The file size as bonnie++ prints it (`8G`, `64M`), from MiB.
fn size_as_printed(mib: f64) -> String {
    if mib >= 1024.0 && mib % 1024.0 == 0.0 {
        format!("{}G", mib / 1024.0)
    } else {
        format!("{}M", mib.round())
    }
}

/// Its facts: block output, block input and seek rates.
const FACTS: &[&str] = &["seq_out_block_kps", "seq_in_block_kps", "random_seeks_ps"];

/// Why a bonnie++ CSV line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BonnieParseError {
    /// The first field is not a known CSV format version.
    #[error("unknown bonnie++ CSV format '{0}' (valid: 1.96, 1.97 from bonnie++ 1.96/1.97; 1.98 from bonnie++ 2.00)")]
    Format(String),
    /// The line does not have the layout's field count.
    #[error("bonnie++ CSV format {format}: {got} fields, expected {expected}")]
    FieldCount {
        /// Format version.
        format: String,
        /// Fields found.
        got: usize,
        /// Fields the layout has.
        expected: usize,
    },
    /// A field that should be a number, `+++++`, or empty.
    #[error("bonnie++ CSV field '{field}' has invalid value '{value}' (expected a number >= 0, +++++ or empty)")]
    Number {
        /// Field name.
        field: &'static str,
        /// What was there.
        value: String,
    },
    /// A latency without a known unit.
    #[error("bonnie++ CSV latency '{field}' has invalid value '{value}' (expected NUMBER followed by ns, us, ms or s)")]
    Latency {
        /// Field name.
        field: &'static str,
        /// What was there.
        value: String,
    },
}

/// A rate and the CPU it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// K/sec or /sec, or `TooFast`, or `NotAvailable` when the test did not run.
    pub value: Value,
    /// %CP.
    pub cpu_pct: Value,
}

/// Names of the twelve latencies, in CSV order; metric keys are `lat_{name}_us`.
pub const LATENCY_NAMES: [&str; 12] = [
    "seq_out_char",
    "seq_out_block",
    "seq_out_rewrite",
    "seq_in_char",
    "seq_in_block",
    "random_seeks",
    "seq_create",
    "seq_read",
    "seq_delete",
    "random_create",
    "random_read",
    "random_delete",
];

/// One parsed bonnie++ CSV line.
#[derive(Debug, Clone, PartialEq)]
pub struct BonnieRun {
    /// CSV format version (`1.96`, `1.98`).
    pub format: String,
    /// bonnie++ version (`1.96`, `2.00a`).
    pub version: String,
    /// Machine name (`-m`, or the host name).
    pub machine: String,
    /// File size as bonnie++ wrote it (`8G`, `64M`); empty when the I/O tests were skipped.
    pub size: String,
    /// The size in MiB, when it parses.
    pub size_mib: Option<f64>,
    /// Sequential output, per character (K/sec).
    pub seq_out_char: Rate,
    /// Sequential output, block (K/sec).
    pub seq_out_block: Rate,
    /// Sequential output, rewrite (K/sec).
    pub seq_out_rewrite: Rate,
    /// Sequential input, per character (K/sec).
    pub seq_in_char: Rate,
    /// Sequential input, block (K/sec).
    pub seq_in_block: Rate,
    /// Random seeks (/sec).
    pub random_seeks: Rate,
    /// File count field as written (`16` means 16*1024 files; may carry `:max:min`).
    pub files: String,
    /// Sequential create (/sec).
    pub seq_create: Rate,
    /// Sequential read, i.e. stat (/sec).
    pub seq_read: Rate,
    /// Sequential delete (/sec).
    pub seq_delete: Rate,
    /// Random create (/sec).
    pub random_create: Rate,
    /// Random read, i.e. stat (/sec).
    pub random_read: Rate,
    /// Random delete (/sec).
    pub random_delete: Rate,
    /// The latencies in µs, in [`LATENCY_NAMES`] order.
    pub latency_us: [Value; 12],
}

/// Field positions of one layout.
struct Layout {
    fields: usize,
    /// Index of the per-char output K/sec.
    io: usize,
}

/// Parses one bonnie++ CSV line (format 1.96, 1.97 or 1.98).
pub fn parse_csv(line: &str) -> Result<BonnieRun, BonnieParseError> {
    let f: Vec<&str> = line.trim().split(',').collect();
    let layout = match f[0] {
        "1.96" | "1.97" => Layout { fields: 48, io: 7 },
        "1.98" => Layout { fields: 50, io: 9 },
        other => return Err(BonnieParseError::Format(other.chars().take(40).collect())),
    };
    if f.len() != layout.fields {
        return Err(BonnieParseError::FieldCount {
            format: f[0].into(),
            got: f.len(),
            expected: layout.fields,
        });
    }
    let io = layout.io;
    let rate =
        |i: usize, name: &'static str, cpu: &'static str| -> Result<Rate, BonnieParseError> {
            Ok(Rate {
                value: value(f[i], name)?,
                cpu_pct: value(f[i + 1], cpu)?,
            })
        };
    let fs = io + 12; // num_files
    let ops = fs + 5; // seq create
    let lat = ops + 12;
    let lats = LATENCY_NAMES
        .iter()
        .enumerate()
        .map(|(k, name)| latency(f[lat + k], name))
        .collect::<Result<Vec<_>, _>>()?;
    let latency_us: [Value; 12] = lats.try_into().expect("12 names give 12 latencies");
    Ok(BonnieRun {
        format: f[0].into(),
        version: f[1].into(),
        machine: f[2].into(),
        size: f[5].into(),
        size_mib: size_mib(f[5]),
        seq_out_char: rate(io, "seq_out_char", "seq_out_char_cpu")?,
        seq_out_block: rate(io + 2, "seq_out_block", "seq_out_block_cpu")?,
        seq_out_rewrite: rate(io + 4, "seq_out_rewrite", "seq_out_rewrite_cpu")?,
        seq_in_char: rate(io + 6, "seq_in_char", "seq_in_char_cpu")?,
        seq_in_block: rate(io + 8, "seq_in_block", "seq_in_block_cpu")?,
        random_seeks: rate(io + 10, "random_seeks", "random_seeks_cpu")?,
        files: f[fs].into(),
        seq_create: rate(ops, "seq_create", "seq_create_cpu")?,
        seq_read: rate(ops + 2, "seq_read", "seq_read_cpu")?,
        seq_delete: rate(ops + 4, "seq_delete", "seq_delete_cpu")?,
        random_create: rate(ops + 6, "random_create", "random_create_cpu")?,
        random_read: rate(ops + 8, "random_read", "random_read_cpu")?,
        random_delete: rate(ops + 10, "random_delete", "random_delete_cpu")?,
        latency_us,
    })
}

/// A rate or %CP field.
fn value(s: &str, field: &'static str) -> Result<Value, BonnieParseError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Value::NotAvailable("not run".into()));
    }
    if !s.is_empty() && s.chars().all(|c| c == '+') {
        return Ok(Value::TooFast);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Value::Number(v)),
        _ => Err(BonnieParseError::Number {
            field,
            value: s.chars().take(40).collect(),
        }),
    }
}

/// A latency (`40369us`, `1955ms`, `2s`) in µs.
fn latency(s: &str, field: &'static str) -> Result<Value, BonnieParseError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Value::NotAvailable("not run".into()));
    }
    if s.chars().all(|c| c == '+') {
        return Ok(Value::TooFast);
    }
    let bad = || BonnieParseError::Latency {
        field,
        value: s.chars().take(40).collect(),
    };
    let split = s.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 0.001,
        "us" => 1.0,
        "ms" => 1000.0,
        "s" => 1_000_000.0,
        _ => return Err(bad()),
    };
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Value::Number(v * scale)),
        _ => Err(bad()),
    }
}

/// `8G` / `64M` / `1T` / `512K` in MiB.
fn size_mib(s: &str) -> Option<f64> {
    let (n, scale) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1.0 / 1024.0),
        'M' | 'm' => (&s[..s.len() - 1], 1.0),
        'G' | 'g' => (&s[..s.len() - 1], 1024.0),
        'T' | 't' => (&s[..s.len() - 1], 1024.0 * 1024.0),
        _ => (s, 1.0),
    };
    n.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v * scale)
}

/// The CSV line in bonnie++'s stdout (the last line with a known format and field count).
pub fn find_csv_line(stdout: &str) -> Option<&str> {
    stdout.lines().rev().map(str::trim).find(|l| {
        let n = l.split(',').count();
        matches!(
            (l.split(',').next(), n),
            (Some("1.96" | "1.97"), 48) | (Some("1.98"), 50)
        )
    })
}

/// The metrics of a run. Keys: `{test}_kps` (K/sec) for the per-char/block/rewrite tests,
/// `{test}_ps` (/sec) for seeks and file operations, `{test}_cpu_pct`, `lat_{test}_us`,
/// `file_size_mib` and `file_count_k` (bonnie++'s `-n`, in units of 1024 files).
pub fn metrics(run: &BonnieRun) -> Vec<Metric> {
    let mut out = shape_metrics(run);
    let tests = tests(run);
    for (key, label, unit, r) in tests {
        let suffix = if unit == "K/sec" { "kps" } else { "ps" };
        out.push(metric(
            &format!("{key}_{suffix}"),
            label,
            unit,
            Better::Higher,
            &r.value,
        ));
        out.push(metric(
            &format!("{key}_cpu_pct"),
            &format!("{label} %CP"),
            "%",
            Better::Lower,
            &r.cpu_pct,
        ));
    }
    for ((key, label, _, _), v) in tests.iter().zip(&run.latency_us) {
        out.push(metric(
            &format!("lat_{key}_us"),
            &format!("{label} Latency"),
            "µs",
            Better::Lower,
            v,
        ));
    }
    out
}

/// What the run worked on: the file size and the `-n` file count, when bonnie++ reported them.
fn shape_metrics(run: &BonnieRun) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Some(mib) = run.size_mib {
        out.push(Metric::num(
            "file_size_mib",
            "File Size",
            "MiB",
            Better::Higher,
            mib,
        ));
    }
    let files = run
        .files
        .split(':')
        .next()
        .and_then(|n| n.parse::<f64>().ok());
    if let Some(k) = files.filter(|k| k.is_finite() && *k >= 0.0) {
        out.push(Metric::num(
            "file_count_k",
            "File Count",
            "x1024 files",
            Better::Higher,
            k,
        ));
    }
    out
}

/// One bonnie++ test: key, label, unit and its rate.
type Test<'a> = (&'static str, &'static str, &'static str, &'a Rate);

/// bonnie++'s tests in [`LATENCY_NAMES`] order, so they pair with `BonnieRun::latency_us`.
fn tests(run: &BonnieRun) -> [Test<'_>; 12] {
    [
        (
            "seq_out_char",
            "Seq Output Per Chr",
            "K/sec",
            &run.seq_out_char,
        ),
        (
            "seq_out_block",
            "Seq Output Block",
            "K/sec",
            &run.seq_out_block,
        ),
        (
            "seq_out_rewrite",
            "Seq Output Rewrite",
            "K/sec",
            &run.seq_out_rewrite,
        ),
        (
            "seq_in_char",
            "Seq Input Per Chr",
            "K/sec",
            &run.seq_in_char,
        ),
        (
            "seq_in_block",
            "Seq Input Block",
            "K/sec",
            &run.seq_in_block,
        ),
        ("random_seeks", "Random Seeks", "/sec", &run.random_seeks),
        ("seq_create", "Seq Create", "/sec", &run.seq_create),
        ("seq_read", "Seq Read", "/sec", &run.seq_read),
        ("seq_delete", "Seq Delete", "/sec", &run.seq_delete),
        ("random_create", "Random Create", "/sec", &run.random_create),
        ("random_read", "Random Read", "/sec", &run.random_read),
        ("random_delete", "Random Delete", "/sec", &run.random_delete),
    ]
}

/// A metric with any [`Value`].
fn metric(key: &str, label: &str, unit: &str, better: Better, v: &Value) -> Metric {
    Metric {
        key: key.into(),
        label: label.into(),
        unit: unit.into(),
        better,
        value: v.clone(),
    }
}

/// bonnie++ arguments for a full run (all tests; no `-f`) in `dir`: file size `ratio` times the
/// guest RAM (`-s`; bonnie++ refuses less than twice), `-r` the RAM, `-n` `files_k`*1024 files, as root
/// (`-u 0:0`), `-m machine`, and `-q` so that stdout carries only the CSV line (the text report
/// goes to stderr).
pub fn default_args(
    mem_mib: u64,
    ratio: u32,
    dir: &str,
    files_k: u32,
    machine: &str,
) -> Vec<String> {
    let mem = mem_mib.max(1);
    [
        "-d",
        dir,
        "-s",
        &(ratio.max(2) as u64 * mem).to_string(),
        "-r",
        &mem.to_string(),
        "-n",
        &files_k.to_string(),
        "-m",
        machine,
        "-u",
        "0:0",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
