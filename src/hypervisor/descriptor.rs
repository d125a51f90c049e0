//! One descriptor per hypervisor: every question the rest of vmbench asks about a hypervisor
//! (its libvirt URI and domain type, whether a named host's libvirtd serves it, `<iotune>`, how
//! the host watches the disk, its console, its boot probe, its modes) is answered here, next to
//! the skip rules in [`super::rules`]. Callers ask [`Hypervisor::desc`]; no code outside
//! `src/hypervisor/` matches on a [`Hypervisor`] variant.
//!
//! Adding a hypervisor: a variant in `cell.rs`'s `Hypervisor` and its [`Descriptor`] in
//! [`Hypervisor::desc`] (see docs/architecture.md#adding-a-hypervisor).

use super::domain_xml::XEN_AGENT_PORT;
use super::xen::{self, Skip};
use crate::cell::{Format, HostName, Hypervisor, XenMode};
use crate::storage::DiskSource;

/// How the host reads the disk under test's counters during a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitor {
    /// QEMU's monitor (QMP `query-blockstats`, latency histograms) and the QEMU process's CPU
    /// and memory.
    Qmp,
    /// libvirt's domain block stats only: counts, and times where the driver has them; there is
    /// no QEMU process of the guest on the host to measure.
    DomainStats,
    /// No guest: the workload's own process on the host, its CPU from the kernel's accounting
    /// of the child (`wait4`), and the storage server's `/proc` figures.
    HostProcess,
}

/// What must be true on this machine before a hypervisor's cells run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing beyond the libvirt connection.
    Connect,
    /// A device node, and a guest that really boots (a nested or paravirtual accelerator may
    /// start a domain whose guest never prints a thing). Only this machine is probed; a remote
    /// host's accelerator is tried by its first cell.
    DeviceAndBoot {
        /// The device node (`/dev/kvm`).
        device: &'static str,
        /// Why the device is missing, for the user.
        missing: &'static str,
    },
}

/// How the disk under test reaches the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockLayer {
    /// QEMU's block layer in the guest's own QEMU: cache, io, bus, I/O threads, queues and
    /// pinning apply.
    Qemu,
    /// libxl's backends in dom0 (blkback or qdisk, see [`super::xen::datapath`]): QEMU's disk
    /// options do not apply.
    Libxl,
    /// No virtual disk: the workload runs on the host on the storage itself (the file, a loop
    /// device over it, the block device, the directory). No disk or QEMU option applies.
    Host,
}

/// Everything vmbench knows about one hypervisor.
#[derive(Debug)]
pub struct Descriptor {
    /// Which hypervisor.
    pub hypervisor: Hypervisor,
    /// libvirt's `<domain type=...>`.
    pub domain_type: &'static str,
    /// The libvirt URI used when `--connect` names none for it.
    pub default_uri: &'static str,
    /// A named host's URI (`[hosts]`) and a `--connect` without `hv=` serve it: it runs under
    /// the same libvirtd as the other sharing hypervisors. Otherwise it is reached through its
    /// own URI, on the default host only.
    pub shares_hosts: bool,
    /// Why libvirt cannot cap its disk with `<iotune>` (`--iops-limit`, `--bw-limit`), or
    /// `None` when it can.
    pub no_iotune: Option<&'static str>,
    /// How the host watches the disk under test.
    pub monitor: Monitor,
    /// What this machine must pass before its cells run.
    pub probe: Probe,
    /// Whether it has the `xen_mode` dimension (PVH, HVM).
    pub has_modes: bool,
    /// How the disk under test reaches the guest.
    pub block_layer: BlockLayer,
    /// What to check when its libvirt URI cannot be opened, or `None` for libvirtd's usual
    /// advice.
    pub connect_hint: Option<&'static str>,
    /// The guest's CPU is emulated (QEMU's TCG): its figures are not what a guest on real
    /// hardware sees, and reports say so.
    pub emulated_cpu: bool,
    /// libvirt's `<emulator>` names the QEMU binary that runs it (`--emulator NAME=PATH`);
    /// false where the driver picks its own device model.
    pub takes_emulator: bool,
    /// Its cells boot a guest in a libvirt domain. False for `host`, whose cells run the
    /// workload on the host itself (`matrix/host_cell.rs`); its connection only provisions the
    /// disk (storage pools).
    pub runs_guest: bool,
}

const KVM: Descriptor = Descriptor {
    hypervisor: Hypervisor::Kvm,
    domain_type: "kvm",
    default_uri: "qemu:///system",
    shares_hosts: true,
    no_iotune: None,
    monitor: Monitor::Qmp,
    probe: Probe::DeviceAndBoot {
        device: "/dev/kvm",
        missing: "no /dev/kvm (KVM module not loaded, or no hardware virtualization)",
    },
    has_modes: false,
    block_layer: BlockLayer::Qemu,
    connect_hint: None,
    emulated_cpu: false,
    takes_emulator: true,
    runs_guest: true,
};

const QEMU: Descriptor = Descriptor {
    hypervisor: Hypervisor::Qemu,
    domain_type: "qemu",
    probe: Probe::Connect,
    emulated_cpu: true,
    ..KVM
};

const XEN: Descriptor = Descriptor {
    hypervisor: Hypervisor::Xen,
    domain_type: "xen",
    default_uri: "xen:///system",
    shares_hosts: false,
    no_iotune: Some("need qemu or kvm: libvirt's libxl driver has no <iotune>"),
    monitor: Monitor::DomainStats,
    probe: Probe::Connect,
    has_modes: true,
    block_layer: BlockLayer::Libxl,
    connect_hint: Some("no Xen dom0 with libxl on this host?"),
    takes_emulator: false,
    emulated_cpu: false,
    runs_guest: true,
};

/// The host rows: the same workload on the same storage, run by the host. It runs on this
/// machine only (its workload is a local process), and its libvirt connection is the local
/// QEMU one, which makes the disk (a `local` cell's pool) as for a guest.
const HOST: Descriptor = Descriptor {
    hypervisor: Hypervisor::Host,
    domain_type: "none",
    default_uri: "qemu:///system",
    shares_hosts: false,
    no_iotune: Some("need qemu or kvm: a host cell has no virtual disk to cap"),
    monitor: Monitor::HostProcess,
    probe: Probe::Connect,
    has_modes: false,
    block_layer: BlockLayer::Host,
    connect_hint: None,
    emulated_cpu: false,
    takes_emulator: false,
    runs_guest: false,
};

impl Hypervisor {
    /// This hypervisor's descriptor.
    pub fn desc(self) -> &'static Descriptor {
        match self {
            Hypervisor::Kvm => &KVM,
            Hypervisor::Qemu => &QEMU,
            Hypervisor::Xen => &XEN,
            Hypervisor::Host => &HOST,
        }
    }
}

/// The `datapath` parameter of a host cell: the host's own kernel, no virtual disk.
pub const HOST_DATAPATH: &str = "host (no guest)";

/// A cell of a hypervisor that runs on the default host only, placed on a named host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{hypervisor} cells run on the default host only (host {host} is a QEMU/KVM libvirt host)")]
pub struct DefaultHostOnly {
    /// The hypervisor.
    pub hypervisor: Hypervisor,
    /// The named host.
    pub host: HostName,
}

impl Descriptor {
    /// The modes a cell of this hypervisor runs in, from the `xen_mode` dimension's values;
    /// `[None]` for a hypervisor without modes.
    pub fn modes(&self, wanted: &[XenMode]) -> Vec<Option<XenMode>> {
        match self.has_modes {
            true => wanted.iter().map(|m| Some(*m)).collect(),
            false => vec![None],
        }
    }

    /// Whether `uri` is one of its driver's (`xen+ssh://h` is Xen's, as `xen:///system` is).
    pub fn uri_scheme_of(&self, uri: &str) -> bool {
        let scheme = self.default_uri.split(':').next().unwrap_or_default();
        uri.split([':', '+']).next() == Some(scheme)
    }

    /// Whether its cells may run on `host`.
    pub fn check_host(&self, host: &HostName) -> Result<(), DefaultHostOnly> {
        if self.shares_hosts || host.is_default() {
            return Ok(());
        }
        Err(DefaultHostOnly {
            hypervisor: self.hypervisor,
            host: host.clone(),
        })
    }

    /// The guest's console device: the Xen PV console for PVH, which has no emulated UART.
    pub fn console(&self, mode: Option<XenMode>) -> &'static str {
        match (self.block_layer, mode) {
            (BlockLayer::Libxl, Some(XenMode::Hvm)) | (BlockLayer::Qemu | BlockLayer::Host, _) => {
                "ttyS0"
            }
            (BlockLayer::Libxl, _) => "hvc0",
        }
    }

    /// The device the agent talks through when the guest cannot find it by name: Xen PV
    /// consoles carry their name only in xenstore, so the agent is told on the command line.
    pub fn agent_port(&self) -> Option<&'static str> {
        (self.block_layer == BlockLayer::Libxl).then_some(XEN_AGENT_PORT)
    }

    /// The datapath label recorded with a cell's results (`datapath` parameter).
    pub fn datapath(&self, source: &DiskSource, format: Format) -> Result<String, Skip> {
        match self.block_layer {
            BlockLayer::Qemu => Ok(xen::KVM_DATAPATH.into()),
            BlockLayer::Libxl => xen::datapath(source, format).map(|d| d.to_string()),
            BlockLayer::Host => Ok(HOST_DATAPATH.into()),
        }
    }

    /// Why the figures of the guest's QEMU process are not measured, or `None` when they are.
    pub fn no_qemu_process(&self) -> Option<String> {
        match self.monitor {
            Monitor::Qmp => None,
            Monitor::DomainStats => Some(format!("n/a on {}", self.hypervisor)),
            Monitor::HostProcess => Some("n/a on host: no guest, no QEMU".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hypervisor_has_its_own_descriptor() {
        for hv in Hypervisor::ALL {
            let d = hv.desc();
            assert_eq!(d.hypervisor, *hv);
            if d.runs_guest {
                assert_eq!(d.domain_type, hv.as_str());
            }
            assert!(d.default_uri.contains(":///"), "{}", d.default_uri);
        }
    }

    #[test]
    fn xen_is_its_own_host_with_modes_and_no_qemu() {
        let xen = Hypervisor::Xen.desc();
        let named: HostName = "h2".parse().unwrap();
        assert!(xen.check_host(&HostName::default()).is_ok());
        assert_eq!(
            xen.check_host(&named).unwrap_err().to_string(),
            "xen cells run on the default host only (host h2 is a QEMU/KVM libvirt host)"
        );
        assert!(Hypervisor::Kvm.desc().check_host(&named).is_ok());
        let modes = [XenMode::Pvh, XenMode::Hvm];
        assert_eq!(xen.modes(&modes).len(), 2);
        assert_eq!(Hypervisor::Qemu.desc().modes(&modes), vec![None]);
        assert_eq!(xen.no_qemu_process().as_deref(), Some("n/a on xen"));
        assert_eq!(Hypervisor::Kvm.desc().no_qemu_process(), None);
    }

    #[test]
    fn host_runs_no_guest_on_the_default_host_only() {
        let host = Hypervisor::Host.desc();
        assert!(!host.runs_guest && !host.emulated_cpu && !host.takes_emulator);
        assert!(Hypervisor::ALL
            .iter()
            .filter(|h| **h != Hypervisor::Host)
            .all(|h| h.desc().runs_guest));
        let named: HostName = "h2".parse().unwrap();
        assert!(host.check_host(&HostName::default()).is_ok());
        assert!(host.check_host(&named).is_err());
        assert!(host.no_iotune.is_some());
        assert_eq!(host.modes(&[XenMode::Pvh]), vec![None]);
        let file = DiskSource::File {
            path: "/w/x.raw".into(),
        };
        assert_eq!(host.datapath(&file, Format::Raw).unwrap(), HOST_DATAPATH);
        assert_eq!(
            host.no_qemu_process().as_deref(),
            Some("n/a on host: no guest, no QEMU")
        );
    }

    #[test]
    fn a_uri_names_its_driver() {
        let xen = Hypervisor::Xen.desc();
        assert!(xen.uri_scheme_of("xen:///system"));
        assert!(xen.uri_scheme_of("xen+ssh://h2"));
        assert!(!xen.uri_scheme_of("qemu+ssh://h1/system"));
        assert!(Hypervisor::Kvm
            .desc()
            .uri_scheme_of("qemu+tcp://h3/system?x=1"));
    }
}
