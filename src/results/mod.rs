//! Results: the typed record of one finished cell, the run directory that holds every artifact,
//! and (in `store.rs`) the SQLite history. A cell's record is written durably the moment the
//! cell ends, before the next one starts.

pub mod rundir;
pub mod store;

use crate::cell::Cell;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Whether a bigger number is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Throughput, IOPS.
    Higher,
    /// Latency, CPU cost.
    Lower,
}

/// A measured value, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Value {
    /// A number.
    Number(f64),
    /// bonnie++'s `+++++`: the test ran too fast to measure. Never shown as 0, never averaged.
    TooFast,
    /// Not measurable in this cell (e.g. "n/a on xen").
    NotAvailable(String),
}

impl Value {
    /// The number, if there is one.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Number(v) => Some(*v),
            _ => None,
        }
    }
}

/// One metric of one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Stable key, e.g. `read_iops`, `write_lat_p99_us`, `host_qemu_cpu_pct`.
    pub key: String,
    /// What a reader sees, e.g. "Read IOPS".
    pub label: String,
    /// Unit, e.g. `IOPS`, `MiB/s`, `µs`, `%`, `K/sec`.
    pub unit: String,
    /// Direction.
    pub better: Better,
    /// The value.
    pub value: Value,
}

impl Metric {
    /// A numeric metric.
    pub fn num(key: &str, label: &str, unit: &str, better: Better, v: f64) -> Metric {
        Metric {
            key: key.into(),
            label: label.into(),
            unit: unit.into(),
            better,
            value: Value::Number(v),
        }
    }
}

/// How a cell ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    /// Ran and produced metrics.
    Passed,
    /// Ran and failed; the reason says where and why.
    Failed(String),
    /// This host cannot run it ("unsupported on this host: REASON").
    Unsupported(String),
    /// Never meant to run (an impossible combination), with the reason.
    Skipped(String),
}

/// Wall-clock phases of a cell, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Creating the disk.
    pub provision_ms: u64,
    /// Domain start to the agent's hello.
    pub boot_to_hello_ms: u64,
    /// Job sent to job done.
    pub run_ms: u64,
    /// Domain destroy + disk teardown.
    pub teardown_ms: u64,
    /// Whole cell.
    pub total_ms: u64,
}

/// Where a result came from: everything that must match for two results to be comparable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Host name.
    pub host: String,
    /// Host kernel release.
    pub host_kernel: String,
    /// Host CPU model.
    pub cpu_model: String,
    /// QEMU version.
    pub qemu: String,
    /// libvirt version.
    pub libvirt: String,
    /// Guest kernel release.
    pub guest_kernel: String,
    /// fio version inside the guest image.
    pub fio: String,
    /// bonnie++ version inside the guest image.
    pub bonnie: String,
    /// Guest image identity (content hash).
    pub image: String,
    /// vmbench's own version and git revision.
    pub vmbench: String,
}

/// The record of one cell (one repeat).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// The matrix point.
    pub cell: Cell,
    /// `cell.id()`, kept for readers of the JSON.
    pub cell_id: String,
    /// Repeat index, from 0.
    pub repeat: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Guest- and host-side metrics (empty unless passed).
    pub metrics: Vec<Metric>,
    /// Backend and datapath parameters (server, protocol, LUN, VG, datapath ...).
    pub params: BTreeMap<String, String>,
    /// Where the numbers came from.
    pub provenance: Provenance,
    /// Phase timings.
    pub timings: Timings,
    /// Per-second samples by series key (e.g. `read_iops`), when logs were shipped.
    #[serde(default)]
    pub samples: BTreeMap<String, Vec<f64>>,
}

impl CellResult {
    /// The metric with this key.
    pub fn metric(&self, key: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.key == key)
    }
}

/// A whole run: what `vmbench report` and `compare` read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Unique run id (`YYYYmmdd-HHMMSS-xxxx`).
    pub run_id: String,
    /// RFC 3339 start time.
    pub started: String,
    /// The command line that started it.
    pub command: Vec<String>,
    /// Every cell's result, in run order.
    pub cells: Vec<CellResult>,
}
