//! Xen: datapath (phy, qdisk) per backend and format, and what Xen cannot do.
//!
//! The rules follow libvirt's libxl driver (`libxlMakeDisk`, libvirt 9.0):
//! - `<driver name='phy'>` becomes libxl's PHY backend (dom0's kernel blkback) and accepts only
//!   `type='raw'`, on a block device dom0 can open.
//! - `<driver name='qemu'>` becomes libxl's QDISK backend (QEMU in dom0 as the block backend) and
//!   accepts raw, qcow2 (and qcow, qed, vhd) on a path dom0 can open.
//! - `<disk type='network'>` is only translated for RBD; NFS and iSCSI end in "Unsupported network
//!   block protocol", so QEMU's libnfs/libiscsi are not reachable through libxl. The export must
//!   be mounted on dom0, or the LUN logged in with dom0's initiator, and then used as a path.

use crate::cell::{Backend, Format};
use crate::storage::DiskSource;
use std::fmt;

/// How a Xen guest's disk is served by dom0; recorded with the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Datapath {
    /// blkback in dom0's kernel, straight onto a block device (raw only).
    Phy,
    /// QEMU in dom0 as the block backend (image files, any qcow2).
    Qdisk,
}

impl Datapath {
    /// The libvirt `<driver name=...>` that selects this datapath in the libxl driver.
    pub fn driver_name(self) -> &'static str {
        match self {
            Datapath::Phy => "phy",
            Datapath::Qdisk => "qemu",
        }
    }
}

impl fmt::Display for Datapath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Datapath::Phy => "phy",
            Datapath::Qdisk => "qdisk",
        })
    }
}

/// Why a Xen cell cannot run as asked, and what to do instead (reported as the cell's skip
/// reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Skip(pub String);

/// The datapath label for KVM/QEMU cells, for reports: they always go through QEMU's block layer.
pub const KVM_DATAPATH: &str = "qemu";

/// The Xen datapath for a backend and format.
///
/// `host_attached` says whether the network storage is reachable as a path on dom0: for NFS
/// the export is mounted on dom0 (the image is a file there), for iSCSI the LUN is logged in with
/// dom0's initiator (a `/dev/disk/by-path/...` block device). It is ignored for the local
/// backends, which are always paths on dom0.
pub fn datapath(backend: Backend, format: Format, host_attached: bool) -> Result<Datapath, Skip> {
    match backend {
        Backend::Nfs if !host_attached => Err(Skip(NFS_URL_SKIP.to_string())),
        Backend::Iscsi if !host_attached => Err(Skip(ISCSI_URL_SKIP.to_string())),
        // An image file (local, or on an NFS mount) is never a block device: blkback cannot
        // serve it, QEMU in dom0 can.
        Backend::Local | Backend::Nfs => Ok(Datapath::Qdisk),
        Backend::Block | Backend::Lvm | Backend::Iscsi => Ok(block_datapath(format)),
    }
}

/// The Xen datapath for a libvirt disk source as [`render`](super::domain_xml::render) sees it.
pub fn datapath_for_source(source: &DiskSource, format: Format) -> Result<Datapath, Skip> {
    match source {
        DiskSource::File { .. } => Ok(Datapath::Qdisk),
        DiskSource::Block { .. } => Ok(block_datapath(format)),
        DiskSource::Network { protocol, .. } => Err(Skip(
            match protocol {
                crate::storage::NetProtocol::Nfs => NFS_URL_SKIP,
                crate::storage::NetProtocol::Iscsi => ISCSI_URL_SKIP,
            }
            .to_string(),
        )),
    }
}

/// A block device: raw goes to blkback; qcow2 needs QEMU to interpret the format.
fn block_datapath(format: Format) -> Datapath {
    match format {
        Format::Raw => Datapath::Phy,
        Format::Qcow2 => Datapath::Qdisk,
    }
}

const NFS_URL_SKIP: &str = "Xen (libxl) cannot open an nfs:// network disk: libvirt's libxl \
    driver only passes RBD network disks to libxl, so QEMU's libnfs is not reachable; mount the \
    export on dom0 and use the image file there (qdisk datapath)";

const ISCSI_URL_SKIP: &str = "Xen (libxl) cannot open an iscsi:// network disk: libvirt's libxl \
    driver only passes RBD network disks to libxl, so QEMU's libiscsi is not reachable; log in \
    to the target with dom0's initiator (iscsiadm) and use /dev/disk/by-path/... as a block \
    device (phy datapath for raw)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::NetProtocol;

    /// The whole table: every backend x format x attachment.
    #[test]
    fn datapath_table() {
        use Backend::*;
        use Datapath::*;
        use Format::*;
        let ok = |d| Some(d);
        let table: &[(Backend, Format, bool, Option<Datapath>)] = &[
            (Local, Raw, false, ok(Qdisk)),
            (Local, Qcow2, false, ok(Qdisk)),
            (Local, Raw, true, ok(Qdisk)),
            (Local, Qcow2, true, ok(Qdisk)),
            (Block, Raw, false, ok(Phy)),
            (Block, Qcow2, false, ok(Qdisk)),
            (Block, Raw, true, ok(Phy)),
            (Block, Qcow2, true, ok(Qdisk)),
            (Lvm, Raw, false, ok(Phy)),
            (Lvm, Qcow2, false, ok(Qdisk)),
            (Lvm, Raw, true, ok(Phy)),
            (Lvm, Qcow2, true, ok(Qdisk)),
            (Nfs, Raw, true, ok(Qdisk)),
            (Nfs, Qcow2, true, ok(Qdisk)),
            (Nfs, Raw, false, None),
            (Nfs, Qcow2, false, None),
            (Iscsi, Raw, true, ok(Phy)),
            (Iscsi, Qcow2, true, ok(Qdisk)),
            (Iscsi, Raw, false, None),
            (Iscsi, Qcow2, false, None),
        ];
        // Every combination is in the table exactly once.
        assert_eq!(table.len(), Backend::ALL.len() * Format::ALL.len() * 2);
        for &(b, f, attached, want) in table {
            let got = datapath(b, f, attached);
            match want {
                Some(d) => assert_eq!(got, Ok(d), "{b} {f} attached={attached}"),
                None => {
                    let Skip(reason) = got.expect_err("must skip");
                    assert!(reason.contains("libxl"), "{reason}");
                    let fix = if b == Nfs {
                        "mount the export on dom0"
                    } else {
                        "initiator"
                    };
                    assert!(reason.contains(fix), "{b}: {reason}");
                }
            }
        }
    }

    #[test]
    fn source_rules_agree_with_the_table() {
        let file = DiskSource::File {
            path: "/var/lib/x.img".into(),
        };
        let dev = DiskSource::Block {
            dev: "/dev/loop0".into(),
        };
        for f in Format::ALL {
            assert_eq!(
                datapath_for_source(&file, *f),
                datapath(Backend::Local, *f, false)
            );
            assert_eq!(
                datapath_for_source(&dev, *f),
                datapath(Backend::Block, *f, false)
            );
        }
        for (protocol, backend) in [
            (NetProtocol::Nfs, Backend::Nfs),
            (NetProtocol::Iscsi, Backend::Iscsi),
        ] {
            let net = DiskSource::Network {
                protocol,
                name: "x".into(),
                host: "127.0.0.1".into(),
                port: None,
            };
            assert_eq!(
                datapath_for_source(&net, Format::Raw),
                datapath(backend, Format::Raw, false)
            );
        }
    }

    #[test]
    fn names() {
        assert_eq!(Datapath::Phy.to_string(), "phy");
        assert_eq!(Datapath::Qdisk.to_string(), "qdisk");
        assert_eq!(Datapath::Phy.driver_name(), "phy");
        assert_eq!(Datapath::Qdisk.driver_name(), "qemu");
    }
}
