//! Results: the typed record of one finished cell, the run directory that holds every artifact,
//! and (in `store.rs`) the SQLite history. A cell's record is written durably the moment the
//! cell ends, before the next one starts.

pub mod fmt;
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

impl Outcome {
    /// How the cell ended, in one line: `passed`, `failed: REASON`, `unsupported: REASON`
    /// (the reason alone when it already says "unsupported on this host"), `skipped: REASON`.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Passed => "passed".into(),
            Outcome::Failed(r) => format!("failed: {r}"),
            Outcome::Unsupported(r) if r.starts_with("unsupported") => r.clone(),
            Outcome::Unsupported(r) => format!("unsupported: {r}"),
            Outcome::Skipped(r) => format!("skipped: {r}"),
        }
    }
}

/// Wall-clock phases of a cell, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Creating the disk.
    pub provision_ms: u64,
    /// Domain start to the agent's hello.
    pub boot_to_hello_ms: u64,
    /// Of `boot_to_hello_ms`, libvirt's domain start call alone (the QEMU process, its monitor
    /// handshake, libvirt's own setup), so a slow boot says whether libvirt or the guest took
    /// the time. 0 in records made before store schema 8.
    #[serde(default)]
    pub domain_start_ms: u64,
    /// The steps before the measured job (mkfs, mount, the engine's prefill) and dropping the
    /// host's caches. 0 in records made before it was split out (store schema 7), whose `run_ms`
    /// includes it.
    #[serde(default)]
    pub prefill_ms: u64,
    /// The measured job: sent to done (ramp included).
    pub run_ms: u64,
    /// Domain destroy + disk teardown.
    pub teardown_ms: u64,
    /// Whole cell.
    pub total_ms: u64,
}

/// Where a result came from. Two parts (see `compare::provenance`): the *instrument* (fio,
/// bonnie++, guest image and kernel, vmbench's job definitions) must match for two results to be
/// comparable; the *system under test* (QEMU, libvirt, host kernel, CPU model, storage servers,
/// the disk's cap) is what a comparison judges, so a change there is reported, not refused.
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
    /// Guest image identity (content hash).
    pub image: String,
    /// vmbench's own version and git revision.
    pub vmbench: String,
    /// The cap put on the disk under test (`iops=N`, `bw=NMiB/s`, comma-separated), empty when
    /// uncapped; absent in results of versions before the caps existed.
    #[serde(default)]
    pub io_limit: String,
    /// The embedded storage server that served the cell and its version (`nfs-ganesha 4.3`,
    /// `tgt 1.0.85`), empty without one; absent in results older than the field.
    #[serde(default)]
    pub storage_server: String,
    /// Content hash of the exact job files the guest ran (fio job, bonnie++ arguments), empty
    /// in results older than the field.
    #[serde(default)]
    pub jobs: String,
    /// The workload engines' versions inside the guest image, by the engine's provenance key
    /// (`workload::Descriptor::version`); empty when the image lacks the engine. Flattened: each
    /// is a field of its own, as the fixed per-engine fields of older results were, so their
    /// exports load and older builds read these.
    #[serde(flatten)]
    pub tools: BTreeMap<String, String>,
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
    /// What kind of failure a failed cell had (the reason in `outcome` is for humans; this
    /// groups failures in reports and comparisons). Absent in records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// Why a skipped or unsupported cell did not run, as `failure_kind` is for a failed one.
    /// Absent in records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_kind: Option<SkipKind>,
}

/// Why a cell did not run (skipped or unsupported on this host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipKind {
    /// An impossible combination: QEMU or the hypervisor refuses it (skipped on any host).
    Rule,
    /// Its libvirt host is not this machine and it needs something that is only here (an
    /// embedded server, a local mount or secret, lvm2, a device), or a hypervisor that runs on
    /// the default host only.
    RemoteHost,
    /// The hypervisor is unreachable on its host or cannot boot a guest there.
    Hypervisor,
    /// The storage backend cannot work on this host (a missing tool, device or capability).
    Backend,
}

impl SkipKind {
    /// The stable name (as stored and exported).
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::Rule => "rule",
            SkipKind::RemoteHost => "remote_host",
            SkipKind::Hypervisor => "hypervisor",
            SkipKind::Backend => "backend",
        }
    }

    /// The kind with this stable name.
    pub fn parse(s: &str) -> Option<SkipKind> {
        SkipKind::ALL.iter().copied().find(|k| k.as_str() == s)
    }

    /// Every kind.
    pub const ALL: [SkipKind; 4] = [
        SkipKind::Rule,
        SkipKind::RemoteHost,
        SkipKind::Hypervisor,
        SkipKind::Backend,
    ];
}

impl std::fmt::Display for SkipKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure ended a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The configuration cannot make this cell (size, job file, datapath).
    Config,
    /// The disk could not be provisioned (or its backend/server could not be made).
    Provision,
    /// A file or directory on the host could not be written.
    HostIo,
    /// libvirt refused the domain or is unreachable.
    Hypervisor,
    /// The guest never said hello in time.
    BootTimeout,
    /// The guest kernel panicked.
    GuestPanic,
    /// The guest went silent (no heartbeat) or its job outlived its limit.
    Stalled,
    /// The guest stopped (the agent's channel closed: QEMU exited or was killed).
    GuestStopped,
    /// The guest sent bad, oversized or garbage frames, or impossible results.
    HostileGuest,
    /// The guest agent reported an error.
    AgentError,
    /// The storage server died or QEMU paused the domain on an I/O error.
    StorageLost,
    /// The benchmark engine failed in the guest.
    EngineFailed,
    /// The libvirt connection was lost during the cell.
    LibvirtLost,
    /// A signal stopped the cell.
    Interrupted,
}

impl FailureKind {
    /// The stable name (as stored and exported).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Config => "config",
            FailureKind::Provision => "provision",
            FailureKind::HostIo => "host_io",
            FailureKind::Hypervisor => "hypervisor",
            FailureKind::BootTimeout => "boot_timeout",
            FailureKind::GuestPanic => "guest_panic",
            FailureKind::Stalled => "stalled",
            FailureKind::GuestStopped => "guest_stopped",
            FailureKind::HostileGuest => "hostile_guest",
            FailureKind::AgentError => "agent_error",
            FailureKind::StorageLost => "storage_lost",
            FailureKind::EngineFailed => "engine_failed",
            FailureKind::LibvirtLost => "libvirt_lost",
            FailureKind::Interrupted => "interrupted",
        }
    }

    /// The kind with this stable name.
    pub fn parse(s: &str) -> Option<FailureKind> {
        FailureKind::ALL.iter().copied().find(|k| k.as_str() == s)
    }

    /// Every kind.
    pub const ALL: [FailureKind; 14] = [
        FailureKind::Config,
        FailureKind::Provision,
        FailureKind::HostIo,
        FailureKind::Hypervisor,
        FailureKind::BootTimeout,
        FailureKind::GuestPanic,
        FailureKind::Stalled,
        FailureKind::GuestStopped,
        FailureKind::HostileGuest,
        FailureKind::AgentError,
        FailureKind::StorageLost,
        FailureKind::EngineFailed,
        FailureKind::LibvirtLost,
        FailureKind::Interrupted,
    ];
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CellResult {
    /// A result with nothing measured yet: no metrics, parameters, provenance, timings,
    /// samples or kind. Callers (and tests) fill in what they have with struct update syntax,
    /// so a new field touches only this function.
    pub fn new(cell: Cell, repeat: u32, outcome: Outcome) -> CellResult {
        CellResult {
            cell_id: cell.id(),
            cell,
            repeat,
            outcome,
            metrics: Vec::new(),
            params: BTreeMap::new(),
            provenance: Provenance::default(),
            timings: Timings::default(),
            samples: BTreeMap::new(),
            failure_kind: None,
            skip_kind: None,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A run.json cell written before `failure_kind` existed (cut down from a real run).
    const OLD_RUN_JSON: &str = r#"{"run_id": "20261203-095212-499c", "started": "2026-12-03T09:52:12.485128611+00:00", "command": ["vmbench", "matrix", "--runtime", "10", "--ramp", "2"], "cells": [{"cell": {"hypervisor": "qemu", "xen_mode": null, "backend": "local", "format": "qcow2", "bus": "virtio-blk", "cache": "none", "io": "native", "layout": "raw", "workload": "pg-randrw"}, "cell_id": "qemu-local-qcow2-virtio-blk-none-native-raw-pg-randrw", "repeat": 0, "outcome": {"status": "failed", "reason": "storage server lost: the embedded tgtd (pid 7) exited during the job"}, "metrics": [{"key": "read_iops", "label": "Read IOPS", "unit": "IOPS", "better": "higher", "value": {"kind": "number", "value": 3304.069593}}], "params": {"datapath": "qemu"}, "provenance": {"host": "vm", "host_kernel": "6.18.44-fc-v1098", "cpu_model": "AMD EPYC", "qemu": "7.2.22", "libvirt": "9.0.0", "guest_kernel": "6.1.0-57-amd64", "fio": "fio-3.33", "bonnie": "2.00a+nmu1", "image": "c70360541028e85b", "vmbench": "0.1.0 (unknown)"}, "timings": {"provision_ms": 10, "boot_to_hello_ms": 9057, "run_ms": 13327, "teardown_ms": 1261, "total_ms": 23621}, "samples": {"read_iops": [3170.0, 3387.0]}}]}"#;

    #[test]
    fn an_outcome_is_described_in_one_line_without_saying_unsupported_twice() {
        let u = |r: &str| Outcome::Unsupported(r.into()).describe();
        assert_eq!(
            u("unsupported on this host: no dom0"),
            "unsupported on this host: no dom0"
        );
        assert_eq!(u("xen: no libxl"), "unsupported: xen: no libxl");
        assert_eq!(Outcome::Failed("boot".into()).describe(), "failed: boot");
        assert_eq!(
            Outcome::Skipped("raw only".into()).describe(),
            "skipped: raw only"
        );
        assert_eq!(Outcome::Passed.describe(), "passed");
    }

    #[test]
    fn old_run_json_without_failure_kind_loads() {
        let rec: RunRecord = serde_json::from_str(OLD_RUN_JSON).unwrap();
        let c = &rec.cells[0];
        assert_eq!(c.failure_kind, None);
        assert!(matches!(&c.outcome, Outcome::Failed(r) if r.starts_with("storage server lost")));
        // Written back unchanged: no `failure_kind` key while there is none.
        let again = serde_json::to_string(c).unwrap();
        assert!(!again.contains("failure_kind"), "{again}");
    }

    #[test]
    fn failure_kind_is_written_and_read_by_name() {
        let mut rec: RunRecord = serde_json::from_str(OLD_RUN_JSON).unwrap();
        rec.cells[0].failure_kind = Some(FailureKind::StorageLost);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains(r#""failure_kind":"storage_lost""#), "{text}");
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn skip_kind_is_absent_in_old_records_and_written_and_read_by_name() {
        let mut rec: RunRecord = serde_json::from_str(OLD_RUN_JSON).unwrap();
        assert_eq!(rec.cells[0].skip_kind, None);
        assert!(!serde_json::to_string(&rec).unwrap().contains("skip_kind"));
        rec.cells[0].outcome = Outcome::Unsupported("unsupported on this host: no lvm2".into());
        rec.cells[0].skip_kind = Some(SkipKind::Backend);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains(r#""skip_kind":"backend""#), "{text}");
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rec);
        for k in SkipKind::ALL {
            assert_eq!(SkipKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    #[test]
    fn engine_versions_load_from_and_are_written_as_their_own_fields() {
        let rec: RunRecord = serde_json::from_str(OLD_RUN_JSON).unwrap();
        let p = &rec.cells[0].provenance;
        assert_eq!(p.tools["fio"], "fio-3.33");
        assert_eq!(p.tools["bonnie"], "2.00a+nmu1");
        assert_eq!(p.tools.len(), 2);
        // Written back with the same keys an older build reads.
        let again = serde_json::to_value(p).unwrap();
        assert_eq!(again["fio"], "fio-3.33");
        assert_eq!(again["bonnie"], "2.00a+nmu1");
        assert!(again.get("tools").is_none(), "{again}");
        let back: Provenance = serde_json::from_value(again).unwrap();
        assert_eq!(&back, p);
    }
}
