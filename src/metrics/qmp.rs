//! QMP `query-blockstats`, asked through libvirt's monitor passthrough and parsed with the `qapi`
//! crate's generated types: the host's own count of the guest's I/O on the disk under test.

use crate::results::{Better, Metric};
use qapi::qmp::BlockStats;

/// The command text.
pub const QUERY_BLOCKSTATS: &str = r#"{"execute":"query-blockstats"}"#;

/// Cumulative counters of one disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskCounters {
    /// Read operations.
    pub rd_ops: u64,
    /// Write operations.
    pub wr_ops: u64,
    /// Bytes read.
    pub rd_bytes: u64,
    /// Bytes written.
    pub wr_bytes: u64,
    /// Total time spent in reads, ns.
    pub rd_time_ns: u64,
    /// Total time spent in writes, ns.
    pub wr_time_ns: u64,
}

/// Why a QMP answer was refused.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// Not JSON, or not query-blockstats' shape.
    #[error("invalid query-blockstats answer: {0}")]
    Invalid(String),
    /// QMP said error.
    #[error("QMP error: {0}")]
    Qmp(String),
    /// No device attached to a guest-visible frontend.
    #[error("no guest disk in query-blockstats")]
    NoDisk,
}

/// Parses libvirt's passthrough answer (`{"return":[...],"id":...}`) and picks the disk under
/// test: the one entry attached to a guest device (`qdev`), since the domain has one disk.
pub fn parse_blockstats(answer: &str) -> Result<DiskCounters, QmpError> {
    let v: serde_json::Value =
        serde_json::from_str(answer).map_err(|e| QmpError::Invalid(e.to_string()))?;
    if let Some(err) = v.get("error") {
        return Err(QmpError::Qmp(err.to_string()));
    }
    let ret = v
        .get("return")
        .cloned()
        .ok_or_else(|| QmpError::Invalid("no 'return'".into()))?;
    let stats: Vec<BlockStats> =
        serde_json::from_value(ret).map_err(|e| QmpError::Invalid(e.to_string()))?;
    let disk = stats
        .iter()
        .find(|s| s.qdev.is_some())
        .ok_or(QmpError::NoDisk)?;
    let s = &disk.stats;
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    Ok(DiskCounters {
        rd_ops: u(s.rd_operations),
        wr_ops: u(s.wr_operations),
        rd_bytes: u(s.rd_bytes),
        wr_bytes: u(s.wr_bytes),
        rd_time_ns: u(s.rd_total_time_ns),
        wr_time_ns: u(s.wr_total_time_ns),
    })
}

impl DiskCounters {
    /// Host-observed IOPS, bandwidth and mean latency between `earlier` and `self`.
    pub fn since(&self, earlier: &DiskCounters, secs: f64) -> Vec<Metric> {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let (rops, wops) = (
            d(self.rd_ops, earlier.rd_ops),
            d(self.wr_ops, earlier.wr_ops),
        );
        let lat = |t: f64, n: f64| if n > 0.0 { t / n / 1000.0 } else { 0.0 };
        vec![
            Metric::num(
                "host_read_ops",
                "Host-observed read ops",
                "ops",
                Better::Higher,
                rops,
            ),
            Metric::num(
                "host_write_ops",
                "Host-observed write ops",
                "ops",
                Better::Higher,
                wops,
            ),
            Metric::num(
                "host_read_iops",
                "Host-observed read IOPS",
                "IOPS",
                Better::Higher,
                rops / secs,
            ),
            Metric::num(
                "host_write_iops",
                "Host-observed write IOPS",
                "IOPS",
                Better::Higher,
                wops / secs,
            ),
            Metric::num(
                "host_read_bw_mib_s",
                "Host-observed read bandwidth",
                "MiB/s",
                Better::Higher,
                d(self.rd_bytes, earlier.rd_bytes) / secs / 1048576.0,
            ),
            Metric::num(
                "host_write_bw_mib_s",
                "Host-observed write bandwidth",
                "MiB/s",
                Better::Higher,
                d(self.wr_bytes, earlier.wr_bytes) / secs / 1048576.0,
            ),
            Metric::num(
                "host_read_lat_mean_us",
                "Host-observed read latency (avg)",
                "µs",
                Better::Lower,
                lat(d(self.rd_time_ns, earlier.rd_time_ns), rops),
            ),
            Metric::num(
                "host_write_lat_mean_us",
                "Host-observed write latency (avg)",
                "µs",
                Better::Lower,
                lat(d(self.wr_time_ns, earlier.wr_time_ns), wops),
            ),
        ]
    }
}
