//! Storage backends: where the disk under test lives, how it is provisioned and torn down, and
//! what libvirt `<source>` it becomes. One file per backend; embedded servers (ganesha, tgt) in
//! their own files, started once per matrix and stopped at its end.

use crate::cell::{Backend, Cell, Format};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod block;
pub mod cmd;
pub mod ganesha;
pub mod iscsi;
pub mod leftovers;
pub mod local;
pub mod lvm;
pub mod nfs;
#[doc(hidden)]
pub mod testutil;
pub mod tgt;

/// Why a backend cannot run on this host (reported as "unsupported on this host: REASON").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

/// A storage backend failure, with its cause.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A helper command failed (qemu-img, tgtadm, lvcreate ...).
    #[error("{command} failed: {detail}")]
    Command {
        /// The program and its arguments, for the reader.
        command: String,
        /// Exit status and stderr tail.
        detail: String,
    },
    /// An embedded server did not start or died.
    #[error("{server} failed: {detail} (log: {log}): {tail}")]
    Server {
        /// Which server.
        server: &'static str,
        /// What happened.
        detail: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// The user's parameters are wrong (exit 2 when found before the run).
    #[error("{0}")]
    Invalid(String),
    /// The backend is not possible on this host.
    #[error("unsupported on this host: {0}")]
    Unsupported(#[from] Unsupported),
    /// Filesystem or process I/O.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Where libvirt finds the disk: the `<disk type=...>` and its `<source>`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiskSource {
    /// `<disk type='file'><source file=.../>`.
    File {
        /// Absolute path of the image.
        path: PathBuf,
    },
    /// `<disk type='block'><source dev=.../>`.
    Block {
        /// Absolute path of the block device.
        dev: PathBuf,
    },
    /// `<disk type='network'><source protocol=... name=...><host .../></source>`.
    Network {
        /// `nfs` or `iscsi`.
        protocol: NetProtocol,
        /// libvirt's `name`: the export path + file for NFS, `IQN/LUN` for iSCSI.
        name: String,
        /// Server host name or address.
        host: String,
        /// Server port, when not the protocol default.
        port: Option<u16>,
    },
}

/// Network disk protocols QEMU reaches in user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetProtocol {
    /// NFS through libnfs (`<identity user='root' group='root'/>` is added for it).
    Nfs,
    /// iSCSI through libiscsi.
    Iscsi,
}

/// A provisioned disk, ready to be put in a domain.
#[derive(Debug, Clone)]
pub struct ProvisionedDisk {
    /// libvirt's view of it.
    pub source: DiskSource,
    /// The format on it (the `<driver type=...>`).
    pub format: Format,
    /// Size the guest sees, in bytes.
    pub size_bytes: u64,
    /// A path on the host where the same bytes are reachable (image file, block device), for the
    /// host baseline and /proc/diskstats; `None` when only a network URL exists.
    pub host_path: Option<PathBuf>,
    /// The backend's parameters, recorded with the cell's results (server, protocol, LUN ...).
    pub params: BTreeMap<String, String>,
}

/// What every backend does for a cell. `teardown` is idempotent and is called on every path out
/// of a cell (success, failure, timeout, Ctrl-C), even when `provision` failed half way.
pub trait StorageBackend: Send {
    /// Which backend this is.
    fn kind(&self) -> Backend;
    /// Whether this host can run it at all; `Err` carries the reason.
    fn check(&self) -> Result<(), Unsupported>;
    /// Create the disk for `cell` (size `size_bytes`), using `work` for any local files.
    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        work: &Path,
    ) -> Result<ProvisionedDisk, StorageError>;
    /// Remove what `provision` created. Safe to call twice or without a provision.
    fn teardown(&mut self) -> Result<(), StorageError>;
}
