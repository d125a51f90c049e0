//! The one descriptor per storage backend: everything outside `src/storage/` that depends on
//! which backend a cell uses asks [`descriptor`] instead of matching on [`Backend`]. Each
//! backend's answers live in its own file (`local.rs`, `block.rs`, `nfs.rs`, `iscsi.rs`,
//! `lvm.rs`, `hostdir.rs`); this file holds the trait, the typed reasons and the one lookup.

use super::options::StorageConfig;
use super::pool::PoolPlace;
use super::servers::{OpenError, Servers};
use super::{DiskSource, NetProtocol, Opened, StorageError};
use crate::cell::{Backend, Cell, Link};
use std::path::Path;

/// What a storage backend is and does, answered by the backend's own file.
pub trait BackendKind: Sync {
    /// The dimension value it serves.
    fn backend(&self) -> Backend;

    /// Its name in the matrix (`local`, `nfs` ...).
    fn name(&self) -> &'static str {
        self.backend().as_str()
    }

    /// The protocol QEMU reaches its disk with when that disk is on the network (such cells are
    /// multiplied by the links); `None` for a disk on this host.
    fn net_protocol(&self) -> Option<NetProtocol> {
        None
    }

    /// Whether its disk is reached over the network.
    fn networked(&self) -> bool {
        self.net_protocol().is_some()
    }

    /// The embedded server it starts when no external one is named
    /// ([`super::servers::EmbeddedServer::NAME`]), if it has one.
    fn embedded_server(&self) -> Option<&'static str> {
        None
    }

    /// Whether a server process stands between QEMU and the bytes (its memory and CPU are
    /// running costs of the cell, for `compare --recommend`).
    fn has_server(&self) -> bool {
        self.networked()
    }

    /// Why it acts on this machine only (lvm2 commands, a device's safety checks, virtiofsd), so
    /// a remote libvirt host would get the wrong disk; `None` when any host will do.
    fn local_only(&self) -> Option<&'static str> {
        None
    }

    /// What in the configuration keeps it off a remote libvirt host (a server or a secret on
    /// this machine only); `None` when nothing does.
    fn remote_blocker(&self, _opts: &StorageConfig) -> Option<RemoteBlocker> {
        None
    }

    /// The flag that names an external server for it, when one is given (a shaped link cannot
    /// reach someone else's server).
    fn external_flag(&self, _opts: &StorageConfig) -> Option<&'static str> {
        None
    }

    /// Checks its options before anything is created; `selected`: the matrix has its cells.
    fn validate(&self, _opts: &StorageConfig, _selected: bool) -> Result<(), StorageError> {
        Ok(())
    }

    /// Whether a preset's cells of this backend are left out (listed as not measured) rather
    /// than refused: the device it would destroy is one the user must name.
    fn preset_needs_device(&self, _opts: &StorageConfig) -> bool {
        false
    }

    /// Whether its disks are volumes in the host's disk directory ([`super::disk_place`]),
    /// which the run removes at its end.
    fn uses_disk_place(&self) -> bool {
        false
    }

    /// Whether its cells are in the default matrix (`--backend` not given).
    fn in_default_matrix(&self) -> bool {
        false
    }

    /// The image formats it makes (a cell of another format is skipped at plan time, with
    /// these as the valid ones). Default: every format.
    fn formats(&self) -> &'static [crate::cell::Format] {
        crate::cell::Format::ALL
    }

    /// How it can make an instance's disk from the run's base image (`flat`, an empty disk,
    /// always). A cell of another kind is skipped at plan time with these as the valid ones.
    fn instances(&self) -> &'static [crate::cell::InstanceDisk] {
        &[crate::cell::InstanceDisk::Flat]
    }

    /// Whether the guest gets a shared host directory to mount instead of a disk.
    fn shares_directory(&self) -> bool {
        false
    }

    /// Where `cell`'s disk will be, without creating anything ([`super::plan_source`]).
    fn plan_source(
        &self,
        opts: &StorageConfig,
        cell: &Cell,
        work: &Path,
        servers: &Path,
    ) -> DiskSource;

    /// Builds it for `cell` (its link, its instance disk), starting its embedded server (and
    /// the run's base image) on first use ([`super::open`]).
    fn open(
        &self,
        opts: &StorageConfig,
        cell: &Cell,
        servers: &mut Servers,
        work: &Path,
        disks: &PoolPlace,
    ) -> Result<Opened, OpenError>;

    /// Whether this host can run it at all, without creating or starting anything (for
    /// `vmbench doctor`): Ok with a note, or the reason.
    fn host_support(&self) -> Result<String, String>;

    /// The process names ([`crate::storage::cmd::pids_named`]) of servers it starts that a
    /// killed run can leave behind, for `vmbench cleanup`.
    fn leftover_processes(&self) -> &'static [&'static str] {
        &[]
    }
}

/// The descriptor of `backend`: the one place a variant is mapped to its file.
pub fn descriptor(backend: Backend) -> &'static dyn BackendKind {
    match backend {
        Backend::Local => &super::local::KIND,
        Backend::Block => &super::block::KIND,
        Backend::Nfs => &super::nfs::KIND,
        Backend::Iscsi => &super::iscsi::KIND,
        Backend::Lvm => &super::lvm::KIND,
        Backend::Hostdir => &super::hostdir::KIND,
        Backend::Rbd => &super::rbd::KIND,
        #[cfg(test)]
        Backend::Toy => &super::toy::KIND,
    }
}

/// Every backend's descriptor, in the dimension's order.
pub fn descriptors() -> impl Iterator<Item = &'static dyn BackendKind> {
    Backend::ALL.iter().map(|b| descriptor(*b))
}

/// What keeps a backend's cells off a remote libvirt host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteBlocker {
    /// `--iscsi-chap-file`: the secret is defined on this machine's libvirtd.
    ChapSecretHere,
    /// `--nfs-mount`: the mount is on this machine.
    NfsMountHere,
    /// `--ceph-conf`: the client's key goes into a secret of this machine's libvirtd.
    CephKeyHere,
    /// The embedded server of this backend runs on this machine.
    EmbeddedServer(Backend),
}

impl RemoteBlocker {
    /// The reason, for the cell on `host` (libvirt URI `uri`).
    pub fn on_host(self, host: &dyn std::fmt::Display, uri: &str) -> String {
        match self {
            RemoteBlocker::ChapSecretHere => format!(
                "the iSCSI CHAP secret is defined on this machine's libvirtd only; host {host} \
                 ({uri}) cannot use --iscsi-chap-file"
            ),
            RemoteBlocker::NfsMountHere => format!(
                "--nfs-mount names a mount on this machine; host {host} ({uri}) cannot open \
                 files there (give it --nfs URL, which QEMU on that host reaches itself)"
            ),
            RemoteBlocker::CephKeyHere => format!(
                "the cephx key's libvirt secret is defined on this machine's libvirtd only; \
                 host {host} ({uri}) cannot use --ceph-conf's cluster"
            ),
            RemoteBlocker::EmbeddedServer(b) => format!(
                "the embedded {b} server is local-only; host {host} ({uri}) needs an external \
                 server (--{b})"
            ),
        }
    }
}

/// A backend's options that are wrong before the run (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// A shaped link with an external server named by `flag`.
    #[error(
        "link '{link}' with an external {flag} server: vmbench cannot shape someone else's \
         network (use --link loopback, or the embedded server)"
    )]
    ShapedExternal {
        /// The shaped link.
        link: Link,
        /// The flag naming the external server.
        flag: &'static str,
    },
    /// The backend's cells are asked for, but what they need is not named.
    #[error("backend '{backend}' needs {needs}")]
    Needs {
        /// The backend.
        backend: Backend,
        /// The flags it needs, as the user would write them.
        needs: &'static str,
    },
    /// `--block-device` without `--allow-destroy`.
    #[error("--block-device destroys the device's contents: add --allow-destroy to confirm")]
    DestroyUnconfirmed,
}

/// A shaped `link` needs every networked backend of the matrix on its embedded server.
pub fn check_links(
    backends: &[Backend],
    link: Link,
    opts: &StorageConfig,
) -> Result<(), OptionError> {
    let external = descriptors()
        .filter(|d| backends.contains(&d.backend()))
        .find_map(|d| d.external_flag(opts));
    match external {
        Some(flag) => Err(OptionError::ShapedExternal { link, flag }),
        None => Ok(()),
    }
}

/// Every backend's option checks (those of `backends` as selected), then the checks across
/// backends ([`StorageConfig::validate`]).
pub fn validate(backends: &[Backend], opts: &StorageConfig) -> Result<(), StorageError> {
    for d in descriptors() {
        d.validate(opts, backends.contains(&d.backend()))?;
    }
    opts.validate()
}

/// The process names of every embedded server a killed run can leave behind.
pub fn leftover_processes() -> Vec<&'static str> {
    descriptors()
        .flat_map(|d| d.leftover_processes().iter().copied())
        .collect()
}

/// The backend of a scratch disk outside the matrix (the hypervisor probe): an image file on
/// this host, the gentlest datapath.
pub fn scratch_backend() -> Backend {
    super::local::KIND.backend()
}

/// The backends of the default matrix.
pub fn default_backends() -> Vec<Backend> {
    descriptors()
        .filter(|d| d.in_default_matrix())
        .map(|d| d.backend())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Format;

    #[test]
    fn each_backend_has_its_own_descriptor_and_its_answers_agree() {
        let opts = StorageConfig::default();
        for b in Backend::ALL {
            let d = descriptor(*b);
            assert_eq!((d.backend(), d.name()), (*b, b.as_str()));
            let cell = super::super::testutil::cell(*b, Format::Raw);
            let planned = d.plan_source(&opts, &cell, Path::new("/w"), Path::new("/s"));
            // Networked means the planned disk is a network disk of that protocol.
            let protocol = match planned {
                DiskSource::Network { protocol, .. } => Some(protocol),
                _ => None,
            };
            assert_eq!(d.net_protocol(), protocol, "{b}");
            assert_eq!(
                d.shares_directory(),
                matches!(planned, DiskSource::SharedDir { .. }),
                "{b}"
            );
            // An embedded server is one cleanup can find.
            if let Some(name) = d.embedded_server() {
                assert!(
                    d.has_server() && !d.leftover_processes().is_empty(),
                    "{name}"
                );
            }
        }
        assert_eq!(
            default_backends(),
            [Backend::Local, Backend::Nfs, Backend::Iscsi]
        );
    }

    #[test]
    fn option_checks_are_typed_and_keep_their_wording() {
        let mut o = StorageConfig::default();
        let e = validate(&[Backend::Block], &o).unwrap_err();
        assert!(matches!(
            e,
            StorageError::Option(OptionError::Needs {
                backend: Backend::Block,
                ..
            })
        ));
        assert_eq!(
            e.to_string(),
            "backend 'block' needs --block-device /dev/X (and --allow-destroy)"
        );
        o.block_device = Some("/dev/loop7".into());
        assert!(matches!(
            validate(&[Backend::Local], &o),
            Err(StorageError::Option(OptionError::DestroyUnconfirmed))
        ));
        o.allow_destroy = true;
        assert_eq!(
            validate(&[Backend::Lvm], &o).unwrap_err().to_string(),
            "backend 'lvm' needs --lvm-vg VG"
        );
        o.lvm_thin_pool = Some("snapshot0".into());
        let e = validate(&[Backend::Local], &o).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid LVM thin pool name 'snapshot0'"),
            "{e}"
        );
        o.nfs = Some("nfs://10.1.1.1/srv".parse().unwrap());
        let shaped: Link = "100mbit".parse().unwrap();
        assert_eq!(check_links(&[Backend::Iscsi], shaped, &o), Ok(()));
        assert_eq!(
            check_links(&[Backend::Nfs, Backend::Iscsi], shaped, &o),
            Err(OptionError::ShapedExternal {
                link: shaped,
                flag: "--nfs"
            })
        );
    }
}
