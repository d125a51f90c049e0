//! QMP `query-blockstats`, asked through libvirt's monitor passthrough and parsed with the `qapi`
//! crate's generated types: the host's own count of the guest's I/O on the disk under test.

use crate::results::{Better, Metric, Value};
use qapi::qmp::BlockStats;

/// The command text.
pub const QUERY_BLOCKSTATS: &str = r#"{"execute":"query-blockstats"}"#;

/// Bucket edges (ns) of the host's latency histogram: a 1-2-5 grid from 10 µs to 5 s, fine
/// enough that the host's percentiles can be read at the points fio reports the guest's (p50,
/// p99) by interpolating inside one bucket.
pub const HISTOGRAM_EDGES_NS: [u64; 19] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The QMP command that (re)starts the latency histograms of guest device `qdev` with
/// [`HISTOGRAM_EDGES_NS`]; QEMU empties the bins when it is set, so the histogram read at the
/// end of the window holds exactly the window's I/Os.
pub fn histogram_set_command(qdev: &str) -> String {
    let args = qapi::qmp::block_latency_histogram_set {
        id: qdev.to_string(),
        boundaries: Some(HISTOGRAM_EDGES_NS.to_vec()),
        boundaries_read: None,
        boundaries_write: None,
        boundaries_flush: None,
        boundaries_zap: None,
    };
    serde_json::json!({ "execute": "block-latency-histogram-set", "arguments": args }).to_string()
}

/// A QEMU latency histogram: `bins[i]` counts I/Os in `[edges[i-1], edges[i])` (ns), the first
/// below `edges[0]`, the last at or above the last edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Histogram {
    /// Bucket edges, ns.
    pub edges: Vec<u64>,
    /// Counts, one more than the edges.
    pub bins: Vec<u64>,
}

impl Histogram {
    /// The counts since `earlier` (same edges), or these counts when the edges differ (the
    /// histogram was set in between, which empties it).
    pub fn since(&self, earlier: Option<&Histogram>) -> Histogram {
        let bins = match earlier {
            Some(e) if e.edges == self.edges && e.bins.len() == self.bins.len() => self
                .bins
                .iter()
                .zip(&e.bins)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            _ => self.bins.clone(),
        };
        Histogram {
            edges: self.edges.clone(),
            bins,
        }
    }

    /// The `pct` percentile in µs, interpolated linearly inside its bucket; `None` without
    /// I/Os, or when it falls in the open last bucket (no upper edge to interpolate to).
    pub fn percentile_us(&self, pct: f64) -> Option<f64> {
        let total: u64 = self.bins.iter().sum();
        if total == 0 || self.bins.len() != self.edges.len() + 1 {
            return None;
        }
        let rank = pct / 100.0 * total as f64;
        let mut below = 0.0;
        for (i, &n) in self.bins.iter().enumerate() {
            let n = n as f64;
            if n > 0.0 && below + n >= rank {
                let hi = *self.edges.get(i)? as f64;
                let lo = if i == 0 {
                    0.0
                } else {
                    self.edges[i - 1] as f64
                };
                return Some((lo + (hi - lo) * ((rank - below) / n).clamp(0.0, 1.0)) / 1000.0);
            }
            below += n;
        }
        None
    }
}

/// Cumulative counters of one disk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// Whether the time counters are real (QMP) or absent (libvirt's block stats).
    pub timed: bool,
    /// The guest device's QOM path (`qdev`), which `block-latency-histogram-set` takes.
    pub qdev: Option<String>,
    /// Read latency histogram, once set.
    pub rd_hist: Option<Histogram>,
    /// Write latency histogram, once set.
    pub wr_hist: Option<Histogram>,
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
    let stats = blockstats_with_backfill(ret)?;
    let disk = stats
        .iter()
        .find(|s| s.qdev.is_some())
        .ok_or(QmpError::NoDisk)?;
    let s = &disk.stats;
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    let hist = |h: &Option<qapi::qmp::BlockLatencyHistogramInfo>| {
        h.as_ref().map(|h| Histogram {
            edges: h.boundaries.clone(),
            bins: h.bins.clone(),
        })
    };
    Ok(DiskCounters {
        rd_ops: u(s.rd_operations),
        wr_ops: u(s.wr_operations),
        rd_bytes: u(s.rd_bytes),
        wr_bytes: u(s.wr_bytes),
        rd_time_ns: u(s.rd_total_time_ns),
        wr_time_ns: u(s.wr_total_time_ns),
        timed: true,
        qdev: disk.qdev.clone(),
        rd_hist: hist(&s.rd_latency_histogram),
        wr_hist: hist(&s.wr_latency_histogram),
    })
}

/// The `qapi` crate's schema can be newer than the QEMU answering (QEMU 7.2 has no zone-append
/// counters, added in 8.1, which the generated types require). A counter the running QEMU does
/// not have is a counter that never counted: each missing `stats` field serde names is added as 0
/// and the parse retried, a bounded number of times; any other shape error is an error.
fn blockstats_with_backfill(mut ret: serde_json::Value) -> Result<Vec<BlockStats>, QmpError> {
    for _ in 0..32 {
        match serde_json::from_value::<Vec<BlockStats>>(ret.clone()) {
            Ok(s) => return Ok(s),
            Err(e) => {
                let msg = e.to_string();
                let field = msg
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next())
                    .filter(|f| f.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                    .ok_or_else(|| QmpError::Invalid(msg.clone()))?;
                if !backfill(&mut ret, field) {
                    return Err(QmpError::Invalid(msg));
                }
            }
        }
    }
    Err(QmpError::Invalid(
        "too many missing block stats fields".into(),
    ))
}

/// Adds `field: 0` to every `stats` object that lacks it; false when none did.
fn backfill(v: &mut serde_json::Value, field: &str) -> bool {
    let mut added = false;
    match v {
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| added |= backfill(x, field)),
        serde_json::Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k == "stats" {
                    if let Some(st) = x.as_object_mut() {
                        if !st.contains_key(field) {
                            st.insert(field.to_string(), serde_json::Value::from(0));
                            added = true;
                        }
                    }
                }
                added |= backfill(x, field);
            }
        }
        _ => {}
    }
    added
}

/// A counter's growth since an earlier reading; a counter that went back (a reset) counts as 0.
fn delta(now: u64, before: u64) -> f64 {
    now.saturating_sub(before) as f64
}

impl DiskCounters {
    /// Host-observed IOPS, bandwidth and mean latency between `earlier` and `self`.
    pub fn since(&self, earlier: &DiskCounters, secs: f64) -> Vec<Metric> {
        let mut v = self.throughput_since(earlier, secs);
        v.extend(self.mean_latency_since(earlier));
        v.extend(self.hist_percentiles(earlier));
        v
    }

    /// Read and write ops between `earlier` and `self`.
    fn ops_since(&self, earlier: &DiskCounters) -> (f64, f64) {
        (
            delta(self.rd_ops, earlier.rd_ops),
            delta(self.wr_ops, earlier.wr_ops),
        )
    }

    /// Ops, IOPS and bandwidth in each direction between `earlier` and `self`.
    fn throughput_since(&self, earlier: &DiskCounters, secs: f64) -> Vec<Metric> {
        let (rops, wops) = self.ops_since(earlier);
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
                delta(self.rd_bytes, earlier.rd_bytes) / secs / 1048576.0,
            ),
            Metric::num(
                "host_write_bw_mib_s",
                "Host-observed write bandwidth",
                "MiB/s",
                Better::Higher,
                delta(self.wr_bytes, earlier.wr_bytes) / secs / 1048576.0,
            ),
        ]
    }

    /// Mean read and write latency between `earlier` and `self`, from the summed op times.
    fn mean_latency_since(&self, earlier: &DiskCounters) -> Vec<Metric> {
        let (rops, wops) = self.ops_since(earlier);
        let mean_lat = |t: u64, t0: u64, n: f64, what: &str| {
            if !self.timed {
                Value::NotAvailable("no latency in libvirt's block stats".into())
            } else if n > 0.0 {
                Value::Number(delta(t, t0) / n / 1000.0)
            } else {
                // A mean over no operations is undefined, not 0 µs (which would look fastest).
                Value::NotAvailable(format!("no {what} operations in the window"))
            }
        };
        let lats = [
            (
                "host_read_lat_mean_us",
                "Host-observed read latency (avg)",
                mean_lat(self.rd_time_ns, earlier.rd_time_ns, rops, "read"),
            ),
            (
                "host_write_lat_mean_us",
                "Host-observed write latency (avg)",
                mean_lat(self.wr_time_ns, earlier.wr_time_ns, wops, "write"),
            ),
        ];
        lats.into_iter()
            .map(|(k, l, value)| Metric {
                key: k.into(),
                label: l.into(),
                unit: "µs".into(),
                better: Better::Lower,
                value,
            })
            .collect()
    }

    /// Host p50/p99 from the latency histograms, at the percentiles fio reports for the guest
    /// (`read_lat_p50_us` ... beside `host_read_lat_p50_us`). Only when the histograms were
    /// set (QMP); a window without I/Os in a direction is NotAvailable, never 0.
    fn hist_percentiles(&self, earlier: &DiskCounters) -> Vec<Metric> {
        let mut v = vec![];
        let sides = [
            ("read", &self.rd_hist, &earlier.rd_hist),
            ("write", &self.wr_hist, &earlier.wr_hist),
        ];
        for (dir, now, before) in sides {
            let Some(now) = now else { continue };
            let h = now.since(before.as_ref());
            for pct in [50.0, 99.0] {
                let value = match h.percentile_us(pct) {
                    Some(us) => Value::Number(us),
                    None if h.bins.iter().sum::<u64>() == 0 => {
                        Value::NotAvailable(format!("no {dir} operations in the window"))
                    }
                    None => Value::NotAvailable(format!(
                        "p{pct} is above the histogram's last edge ({} s)",
                        h.edges.last().copied().unwrap_or(0) as f64 / 1e9
                    )),
                };
                v.push(Metric {
                    key: format!("host_{dir}_lat_p{pct}_us"),
                    label: format!("Host-observed {dir} latency (p{pct}, histogram)"),
                    unit: "µs".into(),
                    better: Better::Lower,
                    value,
                });
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from a running vmbench domain through `virsh qemu-monitor-command`.
    const REAL: &str = include_str!("../../tests/fixtures/qmp-query-blockstats.json");

    #[test]
    fn real_answer_parses_to_the_guest_disk() {
        let c = parse_blockstats(REAL).unwrap();
        assert_eq!(c.rd_ops, 1);
        assert_eq!(c.rd_bytes, 512);
        assert_eq!(c.rd_time_ns, 113_112);
        assert_eq!(c.wr_ops, 0);
    }

    #[test]
    fn errors_and_garbage() {
        assert!(matches!(
            parse_blockstats(r#"{"error":{"class":"GenericError","desc":"x"}}"#),
            Err(QmpError::Qmp(_))
        ));
        assert!(matches!(
            parse_blockstats("not json"),
            Err(QmpError::Invalid(_))
        ));
        assert!(matches!(
            parse_blockstats(r#"{"return":[]}"#),
            Err(QmpError::NoDisk)
        ));
    }

    #[test]
    fn untimed_counters_give_no_latency_not_zero() {
        let a = DiskCounters::default();
        let b = DiskCounters {
            rd_ops: 10,
            ..Default::default()
        };
        let m = b.since(&a, 1.0);
        let lat = m.iter().find(|x| x.key == "host_read_lat_mean_us").unwrap();
        assert!(matches!(lat.value, Value::NotAvailable(_)), "{lat:?}");
    }

    #[test]
    fn zero_operations_give_no_mean_latency_not_zero() {
        let a = DiskCounters {
            timed: true,
            rd_ops: 5,
            wr_ops: 7,
            wr_time_ns: 9_000,
            ..Default::default()
        };
        let b = DiskCounters {
            timed: true,
            rd_ops: 105,
            rd_time_ns: 200_000,
            wr_ops: 7,
            wr_time_ns: 9_000,
            ..Default::default()
        };
        let m = b.since(&a, 1.0);
        let get = |k: &str| m.iter().find(|x| x.key == k).unwrap().value.clone();
        assert_eq!(get("host_read_lat_mean_us"), Value::Number(2.0));
        match get("host_write_lat_mean_us") {
            Value::NotAvailable(r) => assert!(r.contains("no write operations"), "{r}"),
            v => panic!("a mean over 0 writes: {v:?}"),
        }
    }

    #[test]
    fn histogram_percentiles_interpolate_inside_a_bucket() {
        let h = Histogram {
            edges: vec![100_000, 200_000, 500_000],
            bins: vec![0, 50, 49, 1],
        };
        // p50: the 50th of 100 I/Os is the last of bucket [100, 200) µs.
        assert_eq!(h.percentile_us(50.0), Some(200.0));
        // p25: half way through the same bucket.
        assert_eq!(h.percentile_us(25.0), Some(150.0));
        // p99: the 99th I/O is the last of [200, 500) µs.
        assert_eq!(h.percentile_us(99.0), Some(500.0));
        // p100 is in the open last bucket: no upper edge, no number.
        assert_eq!(h.percentile_us(100.0), None);
        assert_eq!(Histogram::default().percentile_us(50.0), None);
        let earlier = Histogram {
            edges: h.edges.clone(),
            bins: vec![0, 50, 0, 0],
        };
        assert_eq!(h.since(Some(&earlier)).bins, vec![0, 0, 49, 1]);
    }

    #[test]
    fn histogram_command_and_metrics() {
        let cmd: serde_json::Value =
            serde_json::from_str(&histogram_set_command("/machine/peripheral/vd")).unwrap();
        assert_eq!(cmd["execute"], "block-latency-histogram-set");
        assert_eq!(cmd["arguments"]["id"], "/machine/peripheral/vd");
        assert_eq!(cmd["arguments"]["boundaries"][0], 10_000);
        assert!(cmd["arguments"].get("boundaries-read").is_none());
        let h = |bins: Vec<u64>| {
            Some(Histogram {
                edges: HISTOGRAM_EDGES_NS.to_vec(),
                bins,
            })
        };
        let mut bins = vec![0; HISTOGRAM_EDGES_NS.len() + 1];
        bins[4] = 10; // [100, 200) µs
        let a = DiskCounters {
            timed: true,
            rd_hist: h(vec![0; bins.len()]),
            wr_hist: h(vec![0; bins.len()]),
            ..Default::default()
        };
        let b = DiskCounters {
            timed: true,
            rd_ops: 10,
            rd_hist: h(bins),
            wr_hist: h(vec![0; HISTOGRAM_EDGES_NS.len() + 1]),
            ..Default::default()
        };
        let m = b.since(&a, 1.0);
        let get = |k: &str| m.iter().find(|x| x.key == k).unwrap().value.clone();
        assert_eq!(get("host_read_lat_p50_us"), Value::Number(150.0));
        match get("host_write_lat_p99_us") {
            Value::NotAvailable(r) => assert!(r.contains("no write operations"), "{r}"),
            v => panic!("{v:?}"),
        }
        // Without histograms (Xen's counters), no percentile metrics at all.
        assert!(!DiskCounters::default()
            .since(&DiskCounters::default(), 1.0)
            .iter()
            .any(|x| x.key.contains("p50")));
    }

    #[test]
    fn window_rates() {
        let a = DiskCounters {
            rd_ops: 100,
            wr_ops: 10,
            rd_time_ns: 1_000_000,
            ..Default::default()
        };
        let b = DiskCounters {
            timed: true,
            rd_ops: 1100,
            wr_ops: 410,
            rd_time_ns: 3_000_000,
            ..Default::default()
        };
        let m = b.since(&a, 2.0);
        let get = |k: &str| {
            m.iter()
                .find(|x| x.key == k)
                .unwrap()
                .value
                .number()
                .unwrap()
        };
        assert_eq!(get("host_read_iops"), 500.0);
        assert_eq!(get("host_write_ops"), 400.0);
        assert_eq!(get("host_read_lat_mean_us"), 2.0);
    }
}
