//! Host-side figures over exactly the measurement window: the QEMU process's CPU (from /proc),
//! QMP `query-blockstats` for the disk under test (host-observed operations and mean latency),
//! and the embedded storage server's CPU and peak RSS. Guest-side figures come from the engine
//! parsers in `workload`.

pub mod proc;
pub mod qmp;
pub mod split;

use crate::results::{Better, Metric, Value};
use std::time::Instant;

/// A snapshot at one end of the window.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    qemu: Option<proc::CpuTicks>,
    server: Option<proc::CpuTicks>,
    block: Option<qmp::DiskCounters>,
    domain_cpu: Option<DomainCpu>,
    not_local: Option<String>,
}

/// The domain's CPU time as libvirt counts it (domain stats `cpu.*`), in ns. It comes over the
/// libvirt connection, so a remote host has it too; the user/system split comes from the
/// domain's cgroup and is absent where the driver has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DomainCpu {
    /// `cpu.time`.
    pub total_ns: u64,
    /// `cpu.user`.
    pub user_ns: Option<u64>,
    /// `cpu.system`.
    pub system_ns: Option<u64>,
}

/// Host-side sources for one cell.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// QEMU's pid.
    pub qemu_pid: Option<u32>,
    /// The embedded storage server's pid (ganesha or tgtd), when one serves this cell.
    pub server_pid: Option<u32>,
    /// The server's other processes (the Ceph monitor beside the OSD): their CPU and memory
    /// count as the server's.
    pub server_companions: Vec<u32>,
    /// Name of the server, for labels.
    pub server_name: Option<&'static str>,
    /// Why QEMU's `/proc` figures cannot be read here (QEMU runs on a remote libvirt host).
    pub not_local: Option<String>,
}

/// Takes a snapshot now. `block` comes from QMP (the caller owns the domain handle).
/// `domain_cpu` is libvirt's CPU time of the domain (every hypervisor has it).
pub fn snapshot(
    src: &Sources,
    block: Option<qmp::DiskCounters>,
    domain_cpu: Option<DomainCpu>,
) -> Snapshot {
    Snapshot {
        at: Instant::now(),
        domain_cpu,
        not_local: src.not_local.clone(),
        qemu: src.qemu_pid.and_then(proc::cpu_ticks),
        server: server_ticks(src),
        block,
    }
}

/// The server's CPU ticks, its companions' added (one that is gone adds nothing); `None`
/// without a server or when the server itself is gone.
fn server_ticks(src: &Sources) -> Option<proc::CpuTicks> {
    let mut t = src.server_pid.and_then(proc::cpu_ticks)?;
    for c in src
        .server_companions
        .iter()
        .filter_map(|p| proc::cpu_ticks(*p))
    {
        t.utime += c.utime;
        t.stime += c.stime;
    }
    Some(t)
}

/// The server's resident memory now, its companions' added, in KiB.
pub fn server_rss_kib(src: &Sources) -> Option<u64> {
    let main = src.server_pid.and_then(proc::rss_kib)?;
    let more: u64 = src
        .server_companions
        .iter()
        .filter_map(|p| proc::rss_kib(*p))
        .sum();
    Some(main + more)
}

/// The host-side metrics between two snapshots, plus the server's peak RSS seen by `rss`.
/// `io_secs`, when known, is the engine's own measured time: block-stat rates are taken over it,
/// since the window also holds the collect phase, when the guest does no I/O.
pub fn window_metrics(
    start: &Snapshot,
    end: &Snapshot,
    server_peak_rss_kib: Option<u64>,
    not_on: Option<&str>,
    io_secs: Option<f64>,
) -> Vec<Metric> {
    let secs = end.at.duration_since(start.at).as_secs_f64().max(1e-3);
    let mut out = Vec::new();
    let na = |why: &str| Value::NotAvailable(why.to_string());
    // A remote QEMU's reason wins: its pid means nothing in this machine's /proc.
    let qemu_na = start
        .not_local
        .as_deref()
        .or(not_on)
        .unwrap_or("no QEMU process");
    let cpu = |a: &Option<proc::CpuTicks>, b: &Option<proc::CpuTicks>| match (a, b) {
        (Some(a), Some(b)) => Some(b.since(a, secs)),
        _ => None,
    };
    let qemu = cpu(&start.qemu, &end.qemu);
    out.push(metric(
        "host_qemu_usr_cpu_pct",
        "Host QEMU CPU (usr)",
        "%",
        Better::Lower,
        qemu.map(|c| Value::Number(c.0))
            .unwrap_or_else(|| na(qemu_na)),
    ));
    out.push(metric(
        "host_qemu_sys_cpu_pct",
        "Host QEMU CPU (sys)",
        "%",
        Better::Lower,
        qemu.map(|c| Value::Number(c.1))
            .unwrap_or_else(|| na(qemu_na)),
    ));
    out.push(metric(
        "host_qemu_cpu_pct",
        "Host QEMU CPU (total)",
        "%",
        Better::Lower,
        qemu.map(|c| Value::Number(c.0 + c.1))
            .unwrap_or_else(|| na(qemu_na)),
    ));
    if let (Some(a), Some(b)) = (start.domain_cpu, end.domain_cpu) {
        out.extend(domain_cpu_metrics(a, b, secs));
    }
    if let Some(srv) = cpu(&start.server, &end.server) {
        out.push(Metric::num(
            "storage_server_cpu_pct",
            "Storage server CPU",
            "%",
            Better::Lower,
            srv.0 + srv.1,
        ));
    }
    if let Some(kib) = server_peak_rss_kib {
        out.push(Metric::num(
            "storage_server_peak_rss_mib",
            "Storage server peak RSS",
            "MiB",
            Better::Lower,
            kib as f64 / 1024.0,
        ));
    }
    match (&start.block, &end.block) {
        (Some(a), Some(b)) => out.extend(b.since(a, io_secs.unwrap_or(secs))),
        _ => out.push(metric(
            "host_read_iops",
            "Host-observed read IOPS",
            "IOPS",
            Better::Higher,
            na(not_on.unwrap_or("no QMP block stats")),
        )),
    }
    out
}

/// libvirt's domain CPU over the window: the total, and its user/system split when both ends
/// have one (the remote host's counterpart of the `/proc` figures of QEMU).
fn domain_cpu_metrics(a: DomainCpu, b: DomainCpu, secs: f64) -> Vec<Metric> {
    let pct = |x: u64, y: u64| y.saturating_sub(x) as f64 / 1e9 / secs * 100.0;
    let mut out = vec![Metric::num(
        "host_domain_cpu_pct",
        "Domain CPU (libvirt)",
        "%",
        Better::Lower,
        pct(a.total_ns, b.total_ns),
    )];
    let parts = [
        (
            "host_domain_usr_cpu_pct",
            "Domain CPU (usr, libvirt)",
            a.user_ns,
            b.user_ns,
        ),
        (
            "host_domain_sys_cpu_pct",
            "Domain CPU (sys, libvirt)",
            a.system_ns,
            b.system_ns,
        ),
    ];
    for (key, label, x, y) in parts {
        if let (Some(x), Some(y)) = (x, y) {
            out.push(Metric::num(key, label, "%", Better::Lower, pct(x, y)));
        }
    }
    out
}

fn metric(key: &str, label: &str, unit: &str, better: Better, value: Value) -> Metric {
    Metric {
        key: key.into(),
        label: label.into(),
        unit: unit.into(),
        better,
        value,
    }
}

#[cfg(test)]
mod remote_tests {
    use super::*;

    /// A remote QEMU: no /proc figures, each says why; libvirt's domain CPU still counts.
    #[test]
    fn remote_qemu_figures_say_why_they_are_missing() {
        let src = Sources {
            qemu_pid: None,
            not_local: Some("QEMU runs on the libvirt host qemu+tcp://h2/system, not here".into()),
            ..Sources::default()
        };
        let cpu = |total_ns, user_ns, system_ns| DomainCpu {
            total_ns,
            user_ns,
            system_ns,
        };
        let a = snapshot(&src, None, Some(cpu(0, Some(0), Some(0))));
        let mut b = snapshot(
            &src,
            None,
            Some(cpu(1_000_000_000, Some(600_000_000), Some(400_000_000))),
        );
        b.at = a.at + std::time::Duration::from_secs(2);
        let m = window_metrics(&a, &b, None, None, None);
        let get = |k: &str| m.iter().find(|x| x.key == k).unwrap().value.clone();
        for k in [
            "host_qemu_usr_cpu_pct",
            "host_qemu_sys_cpu_pct",
            "host_qemu_cpu_pct",
        ] {
            match get(k) {
                Value::NotAvailable(why) => assert!(why.contains("qemu+tcp://h2"), "{k}: {why}"),
                v => panic!("{k}: {v:?}"),
            }
        }
        assert_eq!(get("host_domain_cpu_pct"), Value::Number(50.0));
        assert_eq!(get("host_domain_usr_cpu_pct"), Value::Number(30.0));
        assert_eq!(get("host_domain_sys_cpu_pct"), Value::Number(20.0));
    }

    /// A driver without the cgroup split (Xen's libxl) gives the total only, no made-up parts.
    #[test]
    fn no_split_means_no_split_metrics() {
        let total = |total_ns| DomainCpu {
            total_ns,
            ..DomainCpu::default()
        };
        let a = snapshot(&Sources::default(), None, Some(total(0)));
        let mut b = snapshot(&Sources::default(), None, Some(total(2_000_000_000)));
        b.at = a.at + std::time::Duration::from_secs(2);
        let m = window_metrics(&a, &b, None, None, None);
        assert!(m.iter().any(|x| x.key == "host_domain_cpu_pct"));
        assert!(!m.iter().any(|x| x.key.starts_with("host_domain_usr")));
        assert!(!m.iter().any(|x| x.key.starts_with("host_domain_sys")));
    }
}
