//! Storage backends: where the disk under test lives, how it is provisioned and torn down, and
//! what libvirt `<source>` it becomes. One file per backend; embedded servers (ganesha, tgt) in
//! their own files, started once per matrix and stopped at its end ([`servers::Servers`]).
//!
//! [`open`] is the one place a backend is built from the configuration; [`plan_source`] is the
//! one place that says, without creating anything, where a cell's disk will be (dry run, doctor).

use crate::cell::{Backend, Cell, Format};
use options::StorageConfig;
use servers::{OpenError, Servers};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod base;
pub mod block;
pub mod ceph;
pub mod ceph_external;
pub mod chap;
pub mod cmd;
pub mod firewall;
pub mod ganesha;
pub mod host_access;
pub mod hostdir;
pub mod iscsi;
pub mod kind;
pub mod leftovers;
pub mod local;
pub mod lvm;
pub mod netns;
pub mod nfs;
pub mod options;
pub mod pool;
pub mod rbd;
pub mod servers;
#[doc(hidden)]
pub mod testutil;
pub mod tgt;
pub mod tgt_ipc;
#[cfg(test)]
pub mod toy;

pub use kind::{descriptor, descriptors, BackendKind, OptionError, RemoteBlocker};

/// Why a backend cannot run on this host (reported as "unsupported on this host: REASON").
/// The `detail` fields hold a tool's own message (qemu-img, lvm2, nft, tc): reported, never
/// matched on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// Every backend makes or formats images with qemu-img.
    #[error("qemu-img is not installed")]
    NoQemuImg,
    /// The embedded server this backend's cells use has exited.
    #[error("the embedded {server} (pid {pid}) is not running")]
    ServerGone {
        /// `tgtd`, `ganesha`.
        server: &'static str,
        /// Its pid.
        pid: u32,
    },
    /// The disk directory on this machine cannot serve the cell ([`local::dir_problem`]).
    #[error("{0}")]
    Dir(String),
    /// A disk made from the run's base asked for on a remote libvirt host: the base is written
    /// on this machine and not uploaded.
    #[error(
        "an instance disk from the run's base (overlay, copy) runs on this machine only: the \
         base is not uploaded to {0}"
    )]
    RemoteBase(String),
    /// A disk made from the run's base where this machine cannot write the base (why).
    #[error("{0}")]
    BaseNotHere(&'static str),
    /// The embedded server's programs, or QEMU's driver to reach it, are not installed.
    #[error("{detail} (scripts/setup-host installs it: apt-get install {install})")]
    NoServer {
        /// What is missing ([`servers::installed`]'s answer).
        detail: String,
        /// The Debian packages to install.
        install: &'static str,
    },
    /// The block device may not be destroyed ([`block::BlockBackend::refusals`], joined).
    #[error("{}", .0.join("; "))]
    DeviceRefused(Vec<String>),
    /// No device-mapper on this host.
    #[error(
        "no device-mapper (/dev/mapper/control or 'device-mapper' in /proc/misc is missing), so \
         LVM volumes cannot be activated"
    )]
    NoDeviceMapper,
    /// lvm2 is missing or broken.
    #[error("lvm2 is not usable: {detail}")]
    Lvm2 {
        /// What `lvm version` said.
        detail: String,
    },
    /// The volume group or thin pool name is not a valid LVM name.
    #[error("{detail}")]
    LvmName {
        /// Which name and why.
        detail: String,
    },
    /// The named volume group does not exist.
    #[error("volume group '{vg}' not found: {detail}")]
    NoVolumeGroup {
        /// The name.
        vg: String,
        /// What `vgs` said.
        detail: String,
    },
    /// The named thin pool does not exist.
    #[error("thin pool '{lv}' not found: {detail}")]
    NoThinPool {
        /// `VG/POOL`.
        lv: String,
        /// What `lvs` said.
        detail: String,
    },
    /// No virtiofsd for a shared directory.
    #[error(
        "no {} (install qemu-system-common from the same release as QEMU)",
        hostdir::VIRTIOFSD
    )]
    NoVirtiofsd,
    /// `--nfs-mount` could not be examined.
    #[error("cannot stat {}: {detail}", dir.display())]
    MountUnreadable {
        /// The mount point.
        dir: PathBuf,
        /// The OS error.
        detail: String,
    },
    /// `--nfs-mount` is not an NFS mount.
    #[error(
        "{} is not on an NFS mount (filesystem magic {magic:#x}); mount the export there, or \
         use the embedded server or an nfs:// URL",
        dir.display()
    )]
    NotNfs {
        /// The directory.
        dir: PathBuf,
        /// Its statfs magic.
        magic: i64,
    },
    /// The embedded servers cannot be closed to other local users.
    #[error("cannot close the embedded servers to other local users with nftables: {detail}")]
    NoFirewall {
        /// What nft said.
        detail: String,
    },
    /// The backend makes disks of one image format only.
    #[error("the {backend} backend makes {only} files only, not {asked}")]
    FormatRefused {
        /// The backend's name.
        backend: &'static str,
        /// The format it makes.
        only: Format,
        /// The cell's.
        asked: Format,
    },
    /// The link's qdisc is missing from this kernel (netem, on some).
    #[error("cannot shape link {link}: {detail}")]
    NoShaping {
        /// The link.
        link: crate::cell::Link,
        /// What tc said.
        detail: String,
    },
}

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
    /// A backend's options are wrong (exit 2 before the run).
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The backend is not possible on this host.
    #[error("unsupported on this host: {0}")]
    Unsupported(#[from] Unsupported),
    /// A libvirt storage pool or volume call failed.
    #[error(transparent)]
    Pool(#[from] pool::PoolError),
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
        /// `nfs`, `iscsi` or `rbd`.
        protocol: NetProtocol,
        /// libvirt's `name`: the export path + file for NFS, `IQN/LUN` for iSCSI.
        name: String,
        /// Server host name or address.
        host: String,
        /// Server port, when not the protocol default.
        port: Option<u16>,
        /// Who the client says it is (NFS) or how it logs in (iSCSI CHAP); `None`: NFS as root,
        /// iSCSI without CHAP.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<NetAuth>,
    },
    /// Not a disk: a host directory shared with virtio-fs (`<filesystem>` with an externally
    /// started virtiofsd on `socket`), mounted by the guest under [`vmbench_proto::TEST_FS_TAG`].
    SharedDir {
        /// virtiofsd's vhost-user socket.
        socket: PathBuf,
        /// The shared directory (for the reader; QEMU only sees the socket).
        dir: PathBuf,
    },
}

/// How QEMU identifies itself to a network storage server. Never holds a secret: CHAP's secret
/// lives only in libvirt, named by its usage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NetAuth {
    /// NFS AUTH_SYS: the uid and gid libnfs claims (libvirt `<identity user='+U' group='+G'/>`).
    NfsIdentity {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
    /// iSCSI CHAP: `<auth username=...><secret type='iscsi' usage=.../></auth>`.
    IscsiChap {
        /// The CHAP user name.
        username: String,
        /// The usage name of the libvirt secret that holds the CHAP secret.
        secret_usage: String,
    },
    /// Ceph cephx: `<auth username=...><secret type='ceph' usage=.../></auth>`.
    Cephx {
        /// The client id, without `client.`.
        username: String,
        /// The usage name of the libvirt secret that holds the client's key.
        secret_usage: String,
    },
}

/// Network disk protocols QEMU reaches in user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetProtocol {
    /// NFS through libnfs (`<identity>` from [`NetAuth::NfsIdentity`], else root).
    Nfs,
    /// iSCSI through libiscsi.
    Iscsi,
    /// Ceph RBD through librbd (`name` is `POOL/IMAGE`, the host a monitor).
    Rbd,
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
    /// Bytes the provisioned disk holds of its own now (an overlay's, not its base's), asked
    /// after the job: what one more instance costs. `None` where it cannot be known.
    fn allocated_bytes(&self) -> Option<u64> {
        None
    }
}

/// A cell's backend, ready to provision, and the embedded server behind it (name, pid), if any,
/// for the storage-lost watchdog and the results.
pub struct Opened {
    /// The backend.
    pub backend: Box<dyn StorageBackend>,
    /// The embedded server it uses.
    pub server: Option<(&'static str, u32)>,
    /// The server's other processes (the Ceph monitor beside the OSD): their CPU and memory
    /// are the server's too.
    pub companions: Vec<u32>,
    /// The storage server as results record it when there is no embedded one to ask for its
    /// version: a user's Ceph cluster, `ceph (external, MON)`.
    pub provenance: Option<String>,
}

/// Builds `backend` from the configuration, starting its embedded server on first use. `work` is
/// the run's work directory; `disks` is where `local` images go on the cell's libvirt host
/// ([`disk_place`]).
pub fn open(
    opts: &StorageConfig,
    cell: &Cell,
    servers: &mut Servers,
    work: &Path,
    disks: &pool::PoolPlace,
) -> Result<Opened, OpenError> {
    if let Some(l) = local_only(cell.backend, &disks.uri) {
        return Err(OpenError::LocalOnly(l));
    }
    descriptor(cell.backend).open(opts, cell, servers, work, disks)
}

impl Opened {
    /// A backend without a server to watch.
    pub fn plain(backend: Box<dyn StorageBackend>) -> Opened {
        Opened {
            backend,
            server: None,
            companions: vec![],
            provenance: None,
        }
    }
}

/// A backend that acts on this machine (lvm2 commands, the block device's checks, virtiofsd)
/// asked for on another libvirt host, where it would make or check the wrong disk. A `logical`
/// pool and a device named on the target host are the way there (issue 14), not implemented
/// yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}; host {uri}")]
pub struct LocalOnly {
    /// The backend's reason ([`BackendKind::local_only`]).
    pub why: &'static str,
    /// The libvirt host's URI.
    pub uri: String,
}

/// Why `backend` cannot serve a cell on the libvirt host `uri` when that host is not this
/// machine.
pub fn local_only(backend: Backend, uri: &str) -> Option<LocalOnly> {
    if crate::uri::is_local_uri(uri) {
        return None;
    }
    descriptor(backend).local_only().map(|why| LocalOnly {
        why,
        uri: uri.to_string(),
    })
}

fn local_dir(opts: &StorageConfig, work: &Path) -> PathBuf {
    opts.local_dir.clone().unwrap_or_else(|| work.join("local"))
}

/// A libvirt host as the storage layer sees it: its name in the matrix, its URI, and vmbench's
/// directory there when the configuration names one (`--host-pool-dir NAME=DIR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSite<'a> {
    /// The host's name (the cell's host dimension).
    pub name: &'a str,
    /// Whether it is the default host.
    pub is_default: bool,
    /// Its libvirt URI.
    pub uri: &'a str,
    /// vmbench's directory on it, if configured.
    pub dir: Option<&'a Path>,
}

impl HostSite<'_> {
    /// The libvirt host is this machine (the URI names no host).
    pub fn is_local(&self) -> bool {
        crate::uri::is_local_uri(self.uri)
    }

    /// vmbench's directory on the host, when disks and uploads go under one: the configured one,
    /// else [`pool::DEFAULT_HOST_DIR`] on a remote host; `None` on this machine without one (the
    /// local directory and the image cache are used directly).
    pub fn base_dir(&self) -> Option<PathBuf> {
        match (self.dir, self.is_local()) {
            (Some(d), _) => Some(d.to_path_buf()),
            (None, false) => Some(PathBuf::from(pool::DEFAULT_HOST_DIR)),
            (None, true) => None,
        }
    }

    /// The name of the run's disk directory under [`HostSite::base_dir`].
    pub fn run_dir_name(&self, run_id: &str) -> String {
        format!("vmbench-{run_id}-{}", self.name)
    }
}

/// Where a host's `local` disks go: under its [`HostSite::base_dir`] in a directory of the run
/// (removed at the end of the run); on this machine without one, the local directory (the
/// default host) or a subdirectory per named host (two names may reach the same libvirtd, and
/// two pools cannot share a directory).
pub fn disk_place(
    opts: &StorageConfig,
    site: &HostSite<'_>,
    work: &Path,
    run_id: &str,
) -> pool::PoolPlace {
    let dir = match site.base_dir() {
        Some(base) => base.join(site.run_dir_name(run_id)),
        None if site.is_default => local_dir(opts, work),
        None => local_dir(opts, work).join(format!("host-{}", site.name)),
    };
    pool::PoolPlace {
        uri: site.uri.to_string(),
        dir,
        prefix: pool::pool_prefix(run_id),
    }
}

/// The name of a cell's image file; `tag` makes it unique (a reused name on NFS can be ESTALE).
pub fn image_name(tag: &str, cell: &Cell) -> String {
    format!("vmbench-{tag}-{}.{}", cell.id(), cell.format.as_str())
}

/// Placeholder for the parts of a name only known when the disk is made.
pub const PLANNED_TAG: &str = "TAG";

/// Where `cell`'s disk will be, as [`open`] + `provision` would make it, without creating or
/// starting anything. Run-time parts (unique tags, ports an embedded server picks when the
/// default is taken, LV names) are placeholders. `work` and `servers` are the run's work and
/// server directories.
pub fn plan_source(opts: &StorageConfig, cell: &Cell, work: &Path, servers: &Path) -> DiskSource {
    descriptor(cell.backend).plan_source(opts, cell, work, servers)
}

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::cell::Format;

    fn cell(backend: Backend) -> Cell {
        testutil::cell(backend, Format::Qcow2)
    }

    fn plan(opts: &StorageConfig, b: Backend) -> DiskSource {
        plan_source(
            opts,
            &cell(b),
            Path::new("/R/work"),
            Path::new("/R/servers"),
        )
    }

    #[test]
    fn backends_that_act_on_this_machine_refuse_a_remote_host() {
        let remote = "qemu+tcp://169.254.10.2/system";
        for b in [Backend::Lvm, Backend::Block, Backend::Hostdir] {
            let why = local_only(b, remote)
                .map(|l| l.to_string())
                .unwrap_or_default();
            assert!(
                why.contains("this machine only") && why.contains(remote),
                "{b}: {why}"
            );
            assert_eq!(local_only(b, "qemu:///system"), None);
        }
        for b in [Backend::Local, Backend::Nfs, Backend::Iscsi] {
            assert_eq!(local_only(b, remote), None, "{b}");
        }
    }

    #[test]
    fn disks_go_to_the_local_dir_here_and_under_the_hosts_dir_elsewhere() {
        let o = StorageConfig::default();
        let work = Path::new("/R/work");
        let site = |name, is_default, uri, dir| HostSite {
            name,
            is_default,
            uri,
            dir,
        };
        let here = disk_place(&o, &site("local", true, "qemu:///system", None), work, "R1");
        assert_eq!(here.dir, Path::new("/R/work/local"));
        assert_eq!(here.prefix, "vmbench-R1-");
        let named = disk_place(
            &o,
            &site("h1", false, "qemu+unix:///system", None),
            work,
            "R1",
        );
        assert_eq!(named.dir, Path::new("/R/work/local/host-h1"));
        let remote = site("h2", false, "qemu+tcp://10.0.0.2/system", None);
        assert_eq!(
            disk_place(&o, &remote, work, "R1").dir,
            Path::new("/var/lib/libvirt/images/vmbench/vmbench-R1-h2")
        );
        let mine = site(
            "h2",
            false,
            "qemu+tcp://10.0.0.2/system",
            Some(Path::new("/srv/vb")),
        );
        assert_eq!(
            disk_place(&o, &mine, work, "R1").dir,
            Path::new("/srv/vb/vmbench-R1-h2")
        );
        assert_eq!(mine.base_dir(), Some(PathBuf::from("/srv/vb")));
        assert_eq!(site("local", true, "qemu:///system", None).base_dir(), None);
    }

    #[test]
    fn planned_sources_follow_the_options() {
        let mut o = StorageConfig::default();
        let id = cell(Backend::Local).id();
        assert_eq!(
            plan(&o, Backend::Local),
            DiskSource::File {
                path: format!("/R/work/local/vmbench-TAG-{id}.qcow2").into()
            }
        );
        let DiskSource::Network { name, host, .. } = plan(&o, Backend::Nfs) else {
            panic!("embedded NFS is a network disk")
        };
        assert!(
            name.starts_with("/R/servers/ganesha/export/vmbench-TAG-"),
            "{name}"
        );
        assert_eq!(host, netns::PLANNED_SERVER);
        assert!(matches!(
            plan(&o, Backend::Iscsi),
            DiskSource::Network {
                protocol: NetProtocol::Iscsi,
                port: Some(3260),
                ..
            }
        ));
        o.nfs = Some("nfs://10.1.1.1/srv".parse().unwrap());
        o.iscsi = Some("iscsi://10.1.1.2/iqn.2026-12.dev.x:t/3".parse().unwrap());
        o.lvm_vg = Some("vg0".into());
        o.block_device = Some("/dev/loop7".into());
        let DiskSource::Network { name, host, .. } = plan(&o, Backend::Nfs) else {
            panic!("external NFS is a network disk")
        };
        assert_eq!(
            (host.as_str(), name.starts_with("/srv/vmbench-")),
            ("10.1.1.1", true)
        );
        assert_eq!(
            plan(&o, Backend::Iscsi),
            DiskSource::Network {
                protocol: NetProtocol::Iscsi,
                name: "iqn.2026-12.dev.x:t/3".into(),
                host: "10.1.1.2".into(),
                port: None,
                auth: None
            }
        );
        assert_eq!(
            plan(&o, Backend::Block),
            DiskSource::Block {
                dev: "/dev/loop7".into()
            }
        );
        assert_eq!(
            plan(&o, Backend::Lvm),
            DiskSource::Block {
                dev: "/dev/vg0/vmbench-TAG".into()
            }
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("chap");
        std::fs::write(&f, "username=lab\nsecret=hunter22hunter22\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        o.iscsi_chap_file = Some(f);
        let DiskSource::Network { auth, .. } = plan(&o, Backend::Iscsi) else {
            panic!("external iSCSI is a network disk")
        };
        assert_eq!(
            auth,
            Some(NetAuth::IscsiChap {
                username: "lab".into(),
                secret_usage: "vmbench-iscsi-ext-TAG".into()
            })
        );
        o.nfs = None;
        o.nfs_mount = Some("/mnt/nfs".into());
        assert!(
            matches!(plan(&o, Backend::Nfs), DiskSource::File { path } if path.starts_with("/mnt/nfs"))
        );
    }
}
