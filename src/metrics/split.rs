//! Where the latency comes from: the guest's mean I/O latency (fio's `lat`, submission to
//! completion as the guest application waits for it) split at QEMU's block layer, whose own mean
//! over the same window (QMP `query-blockstats` total time / operations) is the backend + host
//! part. The rest is the guest + virtio part: the guest kernel's block layer, the virtqueue, the
//! vCPU and QEMU's device emulation before the block layer sees the request.

use crate::results::{Better, Metric, Value};

/// The split metrics, per direction: `{read,write}_lat_backend_host_us` and
/// `{read,write}_lat_guest_virtio_us`. A side without a number (no operations in the window,
/// no QMP timings on Xen) makes both NotAvailable with its reason, never 0.
pub fn latency_split(metrics: &[Metric]) -> Vec<Metric> {
    let get = |k: &str| metrics.iter().find(|m| m.key == k).map(|m| &m.value);
    let mut out = vec![];
    for (dir, name) in [("read", "Read"), ("write", "Write")] {
        let guest = get(&format!("{dir}_lat_mean_us"));
        let host = get(&format!("host_{dir}_lat_mean_us"));
        let (Some(guest), Some(host)) = (guest, host) else {
            continue;
        };
        let (host_part, guest_part) = split(guest, host);
        out.push(Metric {
            key: format!("{dir}_lat_backend_host_us"),
            label: format!("{name} latency: backend + host (QEMU block layer)"),
            unit: "µs".into(),
            better: Better::Lower,
            value: host_part,
        });
        out.push(Metric {
            key: format!("{dir}_lat_guest_virtio_us"),
            label: format!("{name} latency: guest + virtio (guest mean - host mean)"),
            unit: "µs".into(),
            better: Better::Lower,
            value: guest_part,
        });
    }
    out
}

fn split(guest: &Value, host: &Value) -> (Value, Value) {
    let na = |why: String| (Value::NotAvailable(why.clone()), Value::NotAvailable(why));
    match (guest, host) {
        (Value::Number(g), Value::Number(h)) if h <= g => (Value::Number(*h), Value::Number(g - h)),
        // The host cannot take longer than the guest waits for the same I/Os; if it seems to,
        // the windows did not hold the same I/Os (a job file's own ramp_time, say).
        (Value::Number(g), Value::Number(h)) => na(format!(
            "host mean {h:.1} µs above the guest's {g:.1} µs: the windows differ"
        )),
        (Value::NotAvailable(why), _) | (_, Value::NotAvailable(why)) => na(why.clone()),
        _ => na("no latency figure".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(key: &str, value: Value) -> Metric {
        Metric {
            key: key.into(),
            label: key.into(),
            unit: "µs".into(),
            better: Better::Lower,
            value,
        }
    }

    #[test]
    fn guest_mean_splits_at_the_host_mean() {
        let split = latency_split(&[
            m("read_lat_mean_us", Value::Number(800.0)),
            m("host_read_lat_mean_us", Value::Number(150.0)),
            m("write_lat_mean_us", Value::Number(900.0)),
            m(
                "host_write_lat_mean_us",
                Value::NotAvailable("no write operations in the window".into()),
            ),
        ]);
        let get = |k: &str| split.iter().find(|x| x.key == k).unwrap().value.clone();
        assert_eq!(get("read_lat_backend_host_us"), Value::Number(150.0));
        assert_eq!(get("read_lat_guest_virtio_us"), Value::Number(650.0));
        for k in ["write_lat_backend_host_us", "write_lat_guest_virtio_us"] {
            match get(k) {
                Value::NotAvailable(r) => assert!(r.contains("no write operations"), "{r}"),
                v => panic!("{k}: a split over zero writes is not a number: {v:?}"),
            }
        }
    }

    #[test]
    fn a_host_mean_above_the_guest_is_not_a_negative_part() {
        let split = latency_split(&[
            m("read_lat_mean_us", Value::Number(100.0)),
            m("host_read_lat_mean_us", Value::Number(120.0)),
        ]);
        assert_eq!(split.len(), 2);
        assert!(split
            .iter()
            .all(|x| matches!(&x.value, Value::NotAvailable(r) if r.contains("windows differ"))));
        // Without the host side (no window), nothing is invented.
        assert!(latency_split(&[m("read_lat_mean_us", Value::Number(1.0))]).is_empty());
    }
}
