//! qemu-img: qcow2 sizing on fixed-size devices, virtual sizes, and its presence.

use super::super::StorageError;
use super::{available, run};

/// qcow2 cluster size we create with (qemu-img's default).
const QCOW2_CLUSTER: u64 = 64 * 1024;

/// An upper bound of the bytes a qcow2 image with virtual size `virtual_bytes` occupies when
/// every cluster is allocated (header, L1, L2, refcount table and blocks, data, plus one spare
/// cluster per table). A qcow2 on a fixed-size device (LUN, LV, partition) must fit this or the
/// guest gets ENOSPC near the end of a full-disk write; `qemu-img measure` gives the exact
/// figure, and a test checks this bound is never below it.
pub fn qcow2_max_size(virtual_bytes: u64) -> u64 {
    let c = QCOW2_CLUSTER;
    let data = virtual_bytes.div_ceil(c);
    let l2 = (data * 8).div_ceil(c);
    let l1 = (l2 * 8).div_ceil(c) + 1;
    let base = 1 + l1 + l2 + 1 + data;
    // Refcounts are 16-bit: one refcount block covers c/2 clusters, including its own.
    let mut total = base;
    loop {
        let blocks = total.div_ceil(c / 2) + 1;
        let table = (blocks * 8).div_ceil(c) + 1;
        let next = base + blocks + table;
        if next <= total {
            return total * c;
        }
        total = next;
    }
}

/// The largest qcow2 virtual size (a multiple of 1 MiB) whose fully allocated image fits in
/// `device_bytes`.
pub fn qcow2_fit(device_bytes: u64) -> u64 {
    const MIB: u64 = 1024 * 1024;
    let overhead = qcow2_max_size(device_bytes).saturating_sub(device_bytes);
    let mut v = device_bytes.saturating_sub(overhead) / MIB * MIB;
    while v > 0 && qcow2_max_size(v) > device_bytes {
        v -= MIB;
    }
    v
}

/// `qemu-img info --output=json TARGET`'s virtual size.
pub fn qemu_img_virtual_size(target: &str) -> Result<u64, StorageError> {
    let out = run("qemu-img", &["info", "--output=json", target])?;
    virtual_size_from_json(&out, target)
}

/// The virtual size in `qemu-img info --output=json` output about `target`.
pub fn virtual_size_from_json(out: &str, target: &str) -> Result<u64, StorageError> {
    let v: serde_json::Value = serde_json::from_str(out)
        .map_err(|e| StorageError::Invalid(format!("qemu-img info {target}: bad JSON: {e}")))?;
    v.get("virtual-size")
        .and_then(|s| s.as_u64())
        .ok_or_else(|| {
            StorageError::Invalid(format!(
                "qemu-img info {target}: no virtual-size in its output"
            ))
        })
}

/// Every backend creates or formats images with qemu-img.
pub fn require_qemu_img() -> Result<(), crate::storage::Unsupported> {
    if available("qemu-img", "--version") {
        Ok(())
    } else {
        Err(crate::storage::Unsupported::NoQemuImg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "host: qemu"]
    fn qcow2_bound_is_never_below_qemu_img_measure() {
        for size in [64u64 << 20, 1 << 30, 10_000_000_000, 100 << 30] {
            let s = size.to_string();
            let out = run("qemu-img", &["measure", "-O", "qcow2", "--size", &s]).unwrap();
            let measured: u64 = out
                .lines()
                .find_map(|l| l.strip_prefix("fully allocated size: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap();
            let ours = qcow2_max_size(size);
            assert!(
                ours >= measured,
                "{size}: ours {ours} < qemu-img {measured}"
            );
            // A loose bound would waste device space: stay within 1 MiB of qemu-img's figure.
            assert!(
                ours - measured <= 1 << 20,
                "{size}: ours {ours} vs {measured}"
            );
        }
    }

    #[test]
    fn qcow2_fit_fits_and_is_close() {
        for dev in [64u64 << 20, 1 << 30, (10 << 30) + 12345] {
            let v = qcow2_fit(dev);
            assert!(qcow2_max_size(v) <= dev);
            assert!(
                v > dev - dev / 500 - (3 << 20),
                "{dev}: {v} wastes too much"
            );
        }
    }
}
