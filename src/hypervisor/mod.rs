//! Hypervisors: the libvirt connection (`libvirt.rs`), the domain XML built from typed structs
//! (`domain_xml.rs`), Xen's datapath rules (`xen.rs`) and the per-host capability probe.

pub mod domain_xml;
pub mod libvirt;
pub mod xen;

use crate::cell::{Bus, CacheMode, Format, Hypervisor, IoMode, XenMode};
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
    /// The agent channel's unix socket (QEMU listens, vmbench connects).
    pub channel_socket: PathBuf,
    /// The disk under test.
    pub disk: DiskSpec,
    /// Run id, recorded in the metadata marker.
    pub run_id: String,
    /// Cell id, recorded in the metadata marker.
    pub cell_id: String,
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
}
