//! libvirt's bulk domain statistics (`virDomainListGetStats`, what `virsh domstats` prints): the
//! domain's CPU time with its user/system split and every disk's counters *with* their total
//! times. They come over the libvirt connection, so they exist for a remote host and for Xen,
//! where neither `/proc` nor QMP does. The `virt` crate (0.4) has no wrapper for this call, hence
//! the FFI below; everything past the FFI is a pure function of `(name, value)` pairs.

use crate::metrics::qmp::DiskCounters;
use std::ffi::CStr;
use virt::domain::Domain;
use virt::sys;

/// One typed parameter's value, as libvirt sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// Any integer type (libvirt's counters are unsigned; a negative one is clamped to 0).
    Int(u64),
    /// A double.
    Float(f64),
    /// A string (disk names and paths).
    Str(String),
}

/// The statistics vmbench uses, from one domain's record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DomainStats {
    /// `cpu.time`: total CPU time of the domain (QEMU and its vCPU threads), ns.
    pub cpu_time_ns: Option<u64>,
    /// `cpu.user`: the user part, ns (from the domain's cgroup; absent on some drivers).
    pub cpu_user_ns: Option<u64>,
    /// `cpu.system`: the system part, ns.
    pub cpu_system_ns: Option<u64>,
    /// `block.N.*`, in libvirt's order.
    pub disks: Vec<BlockStats>,
}

/// One disk's `block.N.*` counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockStats {
    /// `block.N.name`: the guest target (`vda`, `xvda`).
    pub name: String,
    /// `rd.reqs`, `rd.bytes`, `rd.times` (ns, total).
    pub rd: (u64, u64, Option<u64>),
    /// `wr.reqs`, `wr.bytes`, `wr.times` (ns, total).
    pub wr: (u64, u64, Option<u64>),
}

impl BlockStats {
    /// As the host-side window's counters. `timed` only when libvirt gave both times (the QEMU
    /// driver does; Xen's libxl gives counts only), so mean latencies are never made up.
    pub fn counters(&self) -> DiskCounters {
        let timed = self.rd.2.is_some() && self.wr.2.is_some();
        DiskCounters {
            rd_ops: self.rd.0,
            rd_bytes: self.rd.1,
            rd_time_ns: self.rd.2.unwrap_or(0),
            wr_ops: self.wr.0,
            wr_bytes: self.wr.1,
            wr_time_ns: self.wr.2.unwrap_or(0),
            timed,
            ..Default::default()
        }
    }
}

impl DomainStats {
    /// Builds the record from libvirt's parameters. Unknown names are ignored: libvirt adds
    /// fields in new versions, and only these are used.
    pub fn from_params<I: IntoIterator<Item = (String, Param)>>(params: I) -> DomainStats {
        let mut s = DomainStats::default();
        for (name, value) in params {
            s.set(&name, value);
        }
        s
    }

    /// The disk with guest target `dev`.
    pub fn disk(&self, dev: &str) -> Option<&BlockStats> {
        self.disks.iter().find(|d| d.name == dev)
    }

    fn set(&mut self, name: &str, value: Param) {
        let int = match &value {
            Param::Int(v) => Some(*v),
            _ => None,
        };
        match name {
            "cpu.time" => self.cpu_time_ns = int,
            "cpu.user" => self.cpu_user_ns = int,
            "cpu.system" => self.cpu_system_ns = int,
            _ => self.set_block(name, value, int),
        }
    }

    fn set_block(&mut self, name: &str, value: Param, int: Option<u64>) {
        let Some(rest) = name.strip_prefix("block.") else {
            return;
        };
        let Some((idx, field)) = rest.split_once('.') else {
            return;
        };
        // A disk count far beyond any domain would be a corrupt record, not a reason to
        // allocate: such indexes are ignored.
        let Ok(i) = idx.parse::<usize>() else { return };
        if i >= 256 {
            return;
        }
        if self.disks.len() <= i {
            self.disks.resize_with(i + 1, BlockStats::default);
        }
        let d = &mut self.disks[i];
        let n = int.unwrap_or(0);
        match field {
            "name" => {
                if let Param::Str(s) = value {
                    d.name = s;
                }
            }
            "rd.reqs" => d.rd.0 = n,
            "rd.bytes" => d.rd.1 = n,
            "rd.times" => d.rd.2 = int,
            "wr.reqs" => d.wr.0 = n,
            "wr.bytes" => d.wr.1 = n,
            "wr.times" => d.wr.2 = int,
            _ => {}
        }
    }
}

/// Which statistics to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Groups {
    /// `cpu.*` only: the domain's cgroup, no monitor call, so safe while QEMU is stuck.
    Cpu,
    /// `cpu.*` and `block.*`. For QEMU, libvirt's block group asks the monitor for every node's
    /// allocated size, which on an NFS disk is a synchronous RPC: with the server gone the
    /// monitor, and the call, hang for good (seen with ganesha killed mid-cell). So vmbench
    /// asks for it only where there is no QEMU monitor (Xen); QEMU's block counters come from
    /// QMP `query-blockstats`, which does not stat the image.
    CpuAndBlock,
}

/// Asks libvirt for `dom`'s statistics in `groups`, without waiting for a domain job another
/// call holds (`NOWAIT`: such stats are left out rather than waited for). `Err` carries
/// libvirt's message.
pub fn query(dom: &Domain, groups: Groups) -> Result<DomainStats, String> {
    let stats = match groups {
        Groups::Cpu => sys::VIR_DOMAIN_STATS_CPU_TOTAL,
        Groups::CpuAndBlock => sys::VIR_DOMAIN_STATS_CPU_TOTAL | sys::VIR_DOMAIN_STATS_BLOCK,
    };
    let flags = sys::VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT;
    let mut doms: [sys::virDomainPtr; 2] = [dom.as_ptr(), std::ptr::null_mut()];
    let mut records: *mut sys::virDomainStatsRecordPtr = std::ptr::null_mut();
    // SAFETY: `doms` is a NULL-terminated array holding one live domain pointer (borrowed from
    // `dom` for the call); libvirt allocates `records`, which is freed below on every path.
    let n = unsafe { sys::virDomainListGetStats(doms.as_mut_ptr(), stats, &mut records, flags) };
    if n < 0 || records.is_null() {
        return Err(virt::error::Error::last_error().message().to_string());
    }
    // SAFETY: libvirt returned `n` records in a NULL-terminated array; each record's `params`
    // holds `nparams` initialised typed parameters, read only before the free.
    let out = unsafe {
        let first = *records;
        let params = if n > 0 && !first.is_null() {
            read_params((*first).params, (*first).nparams)
        } else {
            Vec::new()
        };
        sys::virDomainStatsRecordListFree(records);
        params
    };
    Ok(DomainStats::from_params(out))
}

/// Copies libvirt's typed parameters out as `(name, value)` pairs.
///
/// # Safety
/// `params` must point to `n` initialised `virTypedParameter`s.
unsafe fn read_params(params: sys::virTypedParameterPtr, n: i32) -> Vec<(String, Param)> {
    let n = usize::try_from(n).unwrap_or(0);
    if params.is_null() {
        return Vec::new();
    }
    let slice = std::slice::from_raw_parts(params, n);
    slice
        .iter()
        .filter_map(|p| {
            let name = CStr::from_ptr(p.field.as_ptr())
                .to_string_lossy()
                .into_owned();
            let v = match p.type_ as u32 {
                sys::VIR_TYPED_PARAM_INT => Param::Int(u64::try_from(p.value.i).unwrap_or(0)),
                sys::VIR_TYPED_PARAM_UINT => Param::Int(u64::from(p.value.ui)),
                sys::VIR_TYPED_PARAM_LLONG => Param::Int(u64::try_from(p.value.l).unwrap_or(0)),
                sys::VIR_TYPED_PARAM_ULLONG => Param::Int(p.value.ul),
                sys::VIR_TYPED_PARAM_DOUBLE => Param::Float(p.value.d),
                sys::VIR_TYPED_PARAM_BOOLEAN => Param::Int(u64::from(p.value.b != 0)),
                sys::VIR_TYPED_PARAM_STRING if !p.value.s.is_null() => {
                    Param::Str(CStr::from_ptr(p.value.s).to_string_lossy().into_owned())
                }
                _ => return None,
            };
            Some((name, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `virsh domstats --cpu-total --block` of a real vmbench domain (QEMU 7.2, libvirt 9.0)
    /// turned back into the typed pairs libvirt sent: numbers as integers, the rest strings.
    fn real() -> DomainStats {
        let text = include_str!("../../tests/fixtures/virsh-domstats-cpu-block.txt");
        DomainStats::from_params(text.lines().filter_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            let p = v
                .parse::<u64>()
                .map(Param::Int)
                .unwrap_or_else(|_| Param::Str(v.to_string()));
            Some((k.to_string(), p))
        }))
    }

    #[test]
    fn cpu_split_and_disk_times_come_from_the_record() {
        let s = real();
        assert_eq!(s.cpu_time_ns, Some(19_182_478_000));
        assert_eq!(s.cpu_user_ns, Some(14_512_066_000));
        assert_eq!(s.cpu_system_ns, Some(4_670_411_000));
        let d = s.disk("vda").expect("vda");
        assert_eq!(d.rd, (36_045, 295_260_672, Some(4_819_197_463)));
        assert_eq!(d.wr, (15_502, 193_576_960, Some(2_401_943_613)));
        assert!(s.disk("vdb").is_none());
    }

    #[test]
    fn counters_are_timed_only_when_both_times_exist() {
        let c = real().disk("vda").unwrap().counters();
        assert!(c.timed);
        assert_eq!((c.rd_ops, c.wr_time_ns), (36_045, 2_401_943_613));
        // Xen's libxl driver sends counts without times.
        let xen = DomainStats::from_params([
            ("block.0.name".to_string(), Param::Str("xvda".into())),
            ("block.0.rd.reqs".to_string(), Param::Int(7)),
            ("block.0.wr.reqs".to_string(), Param::Int(3)),
        ]);
        let c = xen.disk("xvda").unwrap().counters();
        assert!(!c.timed);
        assert_eq!((c.rd_ops, c.wr_ops, c.rd_time_ns), (7, 3, 0));
    }

    #[test]
    fn hostile_indexes_and_types_do_not_allocate_or_panic() {
        let s = DomainStats::from_params([
            ("block.4294967295.rd.reqs".to_string(), Param::Int(1)),
            ("block.x.rd.reqs".to_string(), Param::Int(1)),
            ("block.0".to_string(), Param::Int(1)),
            ("cpu.time".to_string(), Param::Str("soon".into())),
            ("block.1.name".to_string(), Param::Int(5)),
        ]);
        assert_eq!(s.cpu_time_ns, None);
        assert_eq!(s.disks.len(), 2);
        assert_eq!(s.disks[1].name, "");
    }
}
