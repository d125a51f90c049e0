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

use crate::cell::Format;
use crate::storage::{DiskSource, NetProtocol};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// An `nfs://` network disk.
    #[error("{}", NFS_URL_SKIP)]
    NfsUrl,
    /// An `iscsi://` network disk.
    #[error("{}", ISCSI_URL_SKIP)]
    IscsiUrl,
    /// A shared host directory (virtio-fs).
    #[error("{}", SHARED_DIR_SKIP)]
    SharedDir,
}

/// The datapath label for KVM/QEMU cells, for reports: they always go through QEMU's block layer.
pub const KVM_DATAPATH: &str = "qemu";

/// The Xen datapath for a disk source and format: the one place the libxl rules are written.
///
/// Network storage works only when it is reachable as a path on dom0: an NFS export mounted on
/// dom0 is a `File` source (an image file there), an iSCSI LUN logged in with dom0's initiator is
/// a `Block` source (`/dev/disk/by-path/...`). QEMU's own `nfs://`/`iscsi://` clients are not
/// reachable through libxl.
pub fn datapath(source: &DiskSource, format: Format) -> Result<Datapath, Skip> {
    match source {
        // An image file is never a block device: blkback cannot serve it, QEMU in dom0 can.
        DiskSource::File { .. } => Ok(Datapath::Qdisk),
        DiskSource::Block { .. } => Ok(block_datapath(format)),
        DiskSource::Network { protocol, .. } => match protocol {
            NetProtocol::Nfs => Err(Skip::NfsUrl),
            NetProtocol::Iscsi => Err(Skip::IscsiUrl),
            // libvirt's libxl driver hands an RBD source (with its cephx secret) to QEMU's
            // qdisk in dom0, whose librbd reaches the monitors itself.
            NetProtocol::Rbd => Ok(Datapath::Qdisk),
        },
        DiskSource::SharedDir { .. } => Err(Skip::SharedDir),
    }
}

const SHARED_DIR_SKIP: &str = "Xen (libxl) has no virtio-fs: a shared host directory needs \
    qemu or kvm";

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

    fn net(protocol: NetProtocol) -> DiskSource {
        DiskSource::Network {
            protocol,
            name: "x".into(),
            host: "127.0.0.1".into(),
            port: None,
            auth: None,
        }
    }

    /// The whole table: every kind of source x format. Local images and NFS mounted on dom0 are
    /// files; block devices, LVs and iSCSI LUNs logged in on dom0 are block devices.
    #[test]
    fn datapath_table() {
        use Datapath::*;
        use Format::*;
        let file = DiskSource::File {
            path: "/var/lib/x.img".into(),
        };
        let dev = DiskSource::Block {
            dev: "/dev/loop0".into(),
        };
        let table: &[(&DiskSource, Format, Datapath)] = &[
            (&file, Raw, Qdisk),
            (&file, Qcow2, Qdisk),
            (&dev, Raw, Phy),
            (&dev, Qcow2, Qdisk),
        ];
        for &(src, f, want) in table {
            assert_eq!(datapath(src, f), Ok(want), "{src:?} {f}");
        }
        for (p, fix) in [
            (NetProtocol::Nfs, "mount the export on dom0"),
            (NetProtocol::Iscsi, "initiator"),
        ] {
            for f in Format::ALL {
                let reason = datapath(&net(p), *f).expect_err("must skip").to_string();
                assert!(reason.contains("libxl") && reason.contains(fix), "{reason}");
            }
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
