//! Hypervisors: the libvirt connection (`libvirt.rs`), the domain XML built from typed structs
//! (`domain_xml.rs`), Xen's datapath rules (`xen.rs`) and the per-host capability probe.

pub mod descriptor;
pub mod domain_xml;
pub mod domstats;
pub mod libvirt;
pub mod pinning;
pub mod rules;
pub mod watch;
pub mod xen;

pub use descriptor::{BlockLayer, Descriptor, Monitor, Probe};
pub use rules::{check, SkipReason};

use crate::cell::{Bus, CacheMode, Cell, Format, Hypervisor, IoMode, IoThread, XenMode};
use crate::storage::DiskSource;
use std::path::PathBuf;

/// The marker namespace put in every domain vmbench defines, so `vmbench cleanup` can find
/// exactly its own domains.
pub const METADATA_NS: &str = "https://vmbench.dev/xmlns/libvirt/1";
/// Prefix of every libvirt object name vmbench creates.
pub const NAME_PREFIX: &str = "vmbench-";

/// Everything a domain definition needs; rendered by [`domain_xml::render`].
#[derive(Debug, Clone)]
pub struct DomainSpec {
    /// Domain name (`vmbench-<run>-<cell>-<n>`), unique per run.
    pub name: String,
    /// Which hypervisor (decides `<domain type>` and the Xen specifics).
    pub hypervisor: Hypervisor,
    /// Xen only: PVH or HVM.
    pub xen_mode: Option<XenMode>,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Guest kernel (direct kernel boot).
    pub kernel: PathBuf,
    /// Guest initramfs.
    pub initrd: PathBuf,
    /// Kernel command line.
    pub cmdline: String,
    /// Serial console written to this file (kept as an artifact).
    pub console_log: PathBuf,
    /// The serial console is a pty on the libvirt host instead of `console_log`: a host that
    /// is not this machine cannot write this machine's files.
    pub console_pty: bool,
    /// The disk under test.
    pub disk: DiskSpec,
    /// Run id, recorded in the metadata marker.
    pub run_id: String,
    /// Cell id, recorded in the metadata marker.
    pub cell_id: String,
    /// Host CPUs for the vCPUs, emulator and I/O thread (`<cputune>`), or `None` unpinned.
    /// Chosen from the host's topology by the caller ([`pinning::host_plan`]).
    pub pinning: Option<pinning::Pinning>,
    /// The QEMU binary (`<emulator>`), or `None` for the one libvirt picks. QEMU/KVM only.
    pub emulator: Option<PathBuf>,
}

/// The disk under test as the domain sees it.
#[derive(Debug, Clone)]
pub struct DiskSpec {
    /// Where it is.
    pub source: DiskSource,
    /// Image format on it.
    pub format: Format,
    /// Guest bus (ignored for Xen: always the Xen block frontend).
    pub bus: Bus,
    /// Host cache mode.
    pub cache: CacheMode,
    /// Host AIO mode.
    pub io: IoMode,
    /// Serial the agent uses to find it.
    pub serial: String,
    /// Host-side I/O caps (`<iotune>`), or `None` for an uncapped disk.
    pub iotune: Option<IoTune>,
    /// A dedicated QEMU I/O thread (`<iothreads>` and the disk's, or virtio-scsi controller's,
    /// `iothread=`).
    pub iothread: IoThread,
    /// virtio queues (`queues=` on the disk's driver, or the virtio-scsi controller's), or
    /// `None` for QEMU's default.
    pub queues: Option<u32>,
}

/// libvirt's `<iotune>` totals on the disk under test: a deliberate cap, to emulate a cloud
/// disk's limit or to give `compare` a known regression to find. At least one is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoTune {
    /// `total_iops_sec`: read + write operations per second.
    pub total_iops_sec: Option<u64>,
    /// `total_bytes_sec`: read + write bytes per second.
    pub total_bytes_sec: Option<u64>,
}

/// The files a guest boots from and talks through.
#[derive(Debug, Clone)]
pub struct GuestFiles {
    /// Guest kernel.
    pub kernel: PathBuf,
    /// Guest initramfs.
    pub initrd: PathBuf,
    /// Serial console log.
    pub console_log: PathBuf,
}

/// A guest's size.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    /// vCPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
}

impl DiskSpec {
    /// The disk under test for `cell`, on `source`.
    pub fn for_cell(cell: &Cell, source: DiskSource) -> DiskSpec {
        DiskSpec {
            source,
            format: cell.format,
            bus: cell.bus,
            cache: cell.cache,
            io: cell.io,
            serial: vmbench_proto::TEST_DISK_SERIAL.into(),
            iotune: None,
            iothread: cell.tuning.iothread,
            queues: cell.tuning.queues,
        }
    }
}

impl DomainSpec {
    /// The one way a domain is described for a cell (matrix cells, the dry run and the boot
    /// probe alike): `name` must be unique per run; the kernel command line is the base one for
    /// the cell's hypervisor (callers append test hooks to `cmdline`).
    pub fn for_cell(
        name: String,
        run_id: &str,
        cell: &Cell,
        source: DiskSource,
        size: Sizing,
        files: GuestFiles,
    ) -> DomainSpec {
        DomainSpec {
            name,
            hypervisor: cell.hypervisor,
            xen_mode: cell.xen_mode,
            vcpus: size.vcpus,
            memory_mib: size.memory_mib,
            kernel: files.kernel,
            initrd: files.initrd,
            cmdline: domain_xml::kernel_cmdline(cell.hypervisor, cell.xen_mode),
            console_log: files.console_log,
            console_pty: false,
            disk: DiskSpec::for_cell(cell, source),
            run_id: run_id.to_string(),
            cell_id: cell.id(),
            pinning: None,
            emulator: None,
        }
    }
}
