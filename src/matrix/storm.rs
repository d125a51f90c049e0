//! The boot storm (`--boot-storm K`, issue 30): after a cell's measured job, K more instance
//! disks made the way the cell's was (same backend, format and instance layout: K overlays of
//! the run's one base, K copies, K RBD clones), K domains started one right after the other, and
//! each guest, once its agent said hello, reads its boot set (the first [`BOOT_READ`] of its disk,
//! what a cloud image's boot reads: on an overlay or a clone, reads that fall through to the
//! base). What a cloud operator asks of a layout when many instances start from one image: how
//! long until all of them are up, and how slow the slowest was.
//!
//! Our guest boots from its kernel and initramfs, not from the disk, so without the boot read a
//! storm would only measure QEMU and the kernel; with it, the storage shared by the K instances
//! is in the figure. Under TCG the boots themselves are CPU-bound: the host's CPUs, not the
//! storage, set most of `boot_storm_all_hello_s` here (the README says so).

use super::cell_error::{CellError, ConsoleTail, DomainNote};
use super::cell_run::Cancel;
use crate::guest::boot::{boot_and_hello, BootError};
use crate::guest::JobLimits;
use crate::hypervisor::libvirt::Libvirt;
use crate::hypervisor::DomainSpec;
use crate::results::{Better, Metric};
use std::time::{Duration, Instant};
use vmbench_proto::{Job, TEST_DISK_SERIAL};

/// How much of its disk each storm instance reads after its hello: its boot set.
pub const BOOT_READ: &str = "16M";

/// Most instances in one storm: beyond it a 2-core TCG host measures only its own queue.
pub const MAX_K: u32 = 32;

/// The storm size `--boot-storm` with no value picks for this host: two instances per host CPU,
/// at most what half the available memory holds at `guest_mib` each, between 2 and 8.
pub fn default_k(cpus: u32, mem_available_mib: u64, guest_mib: u64) -> u32 {
    let by_mem = (mem_available_mib / 2 / guest_mib.max(1)).min(u32::MAX as u64) as u32;
    (cpus.saturating_mul(2)).min(by_mem).clamp(2, 8)
}

/// This host's [`default_k`] (online CPUs, MemAvailable).
pub fn host_default_k(guest_mib: u64) -> u32 {
    let cpus = crate::hypervisor::pinning::online_cpus() as u32;
    default_k(cpus.max(1), mem_available_mib().unwrap_or(0), guest_mib)
}

/// MemAvailable from /proc/meminfo, in MiB.
pub fn mem_available_mib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// The job each instance runs after its hello: read the boot set.
pub fn boot_read_job(id: u64) -> Job {
    Job {
        id,
        disk_serial: TEST_DISK_SERIAL.into(),
        steps: vec![crate::workload::boot_read_step(BOOT_READ)],
    }
}

/// One instance's times, from the storm's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceTimes {
    /// Its domain's start call returned (the others before it were started first).
    pub started: Duration,
    /// Its agent said hello.
    pub hello: Duration,
    /// It finished reading its boot set.
    pub ready: Duration,
}

/// A finished storm: every instance's times and the disks' provisioning.
#[derive(Debug, Clone, PartialEq)]
pub struct StormTimes {
    /// Per instance, in start order.
    pub instances: Vec<InstanceTimes>,
    /// Making the K instance disks from the base, one after the other.
    pub provision: Duration,
}

impl StormTimes {
    /// The storm's figures, as stored with the cell (seconds, lower is better).
    pub fn metrics(&self) -> Vec<Metric> {
        let secs = |d: Duration| d.as_secs_f64();
        let last = |f: fn(&InstanceTimes) -> Duration| {
            self.instances.iter().map(f).max().map(secs).unwrap_or(0.0)
        };
        let own_boot = self.instances.iter().map(|t| secs(t.hello - t.started));
        let slowest = own_boot.clone().fold(0.0, f64::max);
        let s = |key: &str, label: &str, v: f64| Metric::num(key, label, "s", Better::Lower, v);
        vec![
            Metric::num(
                "boot_storm_instances",
                "Boot storm instances",
                "instances",
                Better::Higher,
                self.instances.len() as f64,
            ),
            s(
                "boot_storm_all_hello_s",
                "Boot storm: all said hello",
                last(|t| t.hello),
            ),
            s(
                "boot_storm_all_ready_s",
                "Boot storm: all read their boot set",
                last(|t| t.ready),
            ),
            s(
                "boot_storm_slowest_boot_s",
                "Boot storm: slowest start-to-hello",
                slowest,
            ),
            s(
                "boot_storm_provision_s",
                "Boot storm: instance disks provisioned",
                secs(self.provision),
            ),
        ]
    }
}

/// Starts every spec, one call right after the other, and waits for all of them: hello, then
/// the boot read, then power-off. The first instance that fails fails the storm (its error
/// says which); the others are destroyed with their handles.
pub async fn run(
    conn: &Libvirt,
    specs: &[DomainSpec],
    boot_timeout: Duration,
    cancel: &Cancel,
) -> Result<Vec<InstanceTimes>, CellError> {
    let t0 = Instant::now();
    let k = specs.len() as u32;
    let one = |i: usize| async move {
        let spec = &specs[i];
        let tagged = |e: CellError| CellError::Storm {
            instance: i as u32 + 1,
            k,
            source: Box::new(e),
        };
        let started_at = t0.elapsed();
        let b = boot_and_hello(conn, spec, boot_timeout, cancel.interrupted())
            .await
            .map_err(|e| tagged(boot_error(e, spec)))?;
        let started = started_at;
        let hello = t0.elapsed();
        let mut guest = b.guest;
        let limits = JobLimits {
            total_timeout: boot_timeout,
            ..JobLimits::default()
        };
        let out = guest
            .run(boot_read_job(1), &limits, |_| {})
            .await
            .map_err(|e| tagged(CellError::from_guest(e, DomainNote(None), tail(spec))))?;
        if !out.ok {
            return Err(tagged(CellError::JobFailed));
        }
        let ready = t0.elapsed();
        let _ = guest.power_off().await;
        b.domain.destroy();
        Ok(InstanceTimes {
            started,
            hello,
            ready,
        })
    };
    let all = futures_util::future::join_all((0..specs.len()).map(one)).await;
    all.into_iter().collect()
}

fn tail(spec: &DomainSpec) -> ConsoleTail {
    ConsoleTail::read(&spec.console_log, 15)
}

fn boot_error(e: BootError, spec: &DomainSpec) -> CellError {
    match e {
        // GaveUp comes only from a stop that gives up; `interrupted` only cancels.
        BootError::Cancelled | BootError::GaveUp { .. } => CellError::Interrupted,
        BootError::Start(e) => CellError::Hypervisor(e),
        BootError::Xml(e) => CellError::DomainXml(e),
        BootError::NoHello { source, at, .. } => CellError::from_boot(source, at, tail(spec)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_storm_is_sized_by_cpus_and_memory_within_two_and_eight() {
        // 2 CPUs, plenty of memory: two per CPU.
        assert_eq!(default_k(2, 20_000, 512), 4);
        // Memory-bound: half of 2 GiB holds two 512 MiB guests.
        assert_eq!(default_k(16, 2048, 512), 2);
        // Never below 2 (a storm of one is a boot), never above 8.
        assert_eq!(default_k(1, 100, 512), 2);
        assert_eq!(default_k(64, 1 << 20, 256), 8);
    }

    #[test]
    fn figures_are_from_the_storm_start_and_the_slowest_own_boot() {
        let ms = Duration::from_millis;
        let t = StormTimes {
            instances: vec![
                InstanceTimes {
                    started: ms(100),
                    hello: ms(5_100),
                    ready: ms(6_000),
                },
                InstanceTimes {
                    started: ms(900),
                    hello: ms(7_900),
                    ready: ms(7_950),
                },
            ],
            provision: ms(250),
        };
        let m = t.metrics();
        let get = |k: &str| {
            m.iter()
                .find(|x| x.key == k)
                .unwrap()
                .value
                .number()
                .unwrap()
        };
        assert_eq!(get("boot_storm_instances"), 2.0);
        assert_eq!(get("boot_storm_all_hello_s"), 7.9);
        assert_eq!(get("boot_storm_all_ready_s"), 7.95);
        assert_eq!(get("boot_storm_slowest_boot_s"), 7.0);
        assert_eq!(get("boot_storm_provision_s"), 0.25);
        assert!(m
            .iter()
            .filter(|x| x.key != "boot_storm_instances")
            .all(|x| x.unit == "s" && x.better == Better::Lower));
    }

    #[test]
    fn the_boot_read_reads_the_boot_set_of_the_disk_under_test() {
        let j = boot_read_job(7);
        assert_eq!(j.disk_serial, TEST_DISK_SERIAL);
        let vmbench_proto::Step::Fio { job_text, .. } = &j.steps[0] else {
            panic!("{j:?}")
        };
        assert!(job_text.contains("filename={disk}") && job_text.contains("rw=read"));
        assert!(job_text.contains(&format!("size={BOOT_READ}")));
    }
}
