//! Local storage backend: a qcow2 or raw image file in a directory of the cell's libvirt host,
//! made as a volume of a transient libvirt `dir` pool ([`super::pool`]) and removed on teardown.
//!
//! Two host traps shape it: libvirt runs QEMU as `libvirt-qemu` and relabels the image but not
//! its directories, so every directory on the path needs o+x (0711); and cache=none opens with
//! O_DIRECT, which tmpfs refused before Linux 6.6, so [`LocalBackend::check`] probes O_DIRECT in
//! the directory and rejects it (naming tmpfs) when it fails. The filesystem is recorded in the
//! disk's params, since an image on tmpfs benchmarks RAM.

use super::base::{BaseImage, Bases};
use super::cmd;
use super::options::StorageConfig;
use super::pool::{pool_prefix, DirPool, PoolError, PoolPlace, VolumePlan};
use super::{DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::{Cell, Format, InstanceDisk};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How much of the image is allocated up front (libvirt's mapping: [`super::pool`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Prealloc {
    /// Nothing: a sparse file (qcow2 grows as the guest writes).
    Off,
    /// qcow2 metadata only (L1/L2/refcounts); for raw, which has no metadata, this is `off`.
    Metadata,
    /// Every byte allocated at creation: raw is fallocated, then zeros are written over it (as
    /// qemu-img's `full`); qcow2 gets `preallocation=falloc`, the most libvirt can ask for.
    Full,
}

impl Prealloc {
    /// Every value, in display order.
    pub const ALL: &'static [Prealloc] = &[Prealloc::Off, Prealloc::Metadata, Prealloc::Full];

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Prealloc::Off => "off",
            Prealloc::Metadata => "metadata",
            Prealloc::Full => "full",
        }
    }

    /// What is actually asked for with `format`: raw has no metadata mode.
    pub fn effective(self, format: Format) -> Prealloc {
        match (self, format) {
            (Prealloc::Metadata, Format::Raw) => Prealloc::Off,
            (p, _) => p,
        }
    }
}

impl std::fmt::Display for Prealloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for Prealloc {
    type Error = crate::cell::UnknownValue;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Prealloc> for String {
    fn from(p: Prealloc) -> String {
        p.as_str().to_string()
    }
}

impl std::str::FromStr for Prealloc {
    type Err = crate::cell::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Prealloc::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| crate::cell::UnknownValue {
                what: "preallocation",
                got: s.to_string(),
                valid: Prealloc::ALL.iter().map(|p| p.as_str()).collect(),
            })
    }
}

/// Disk images as volumes of a transient `dir` pool on the cell's libvirt host
/// ([`super::pool`]): one code path for this machine and a remote host. On this machine the
/// pool's directory is the local directory (the run's `work/local`, or `local_dir`), so the
/// O_DIRECT and o+x checks apply and the image's path is the host path the baseline and
/// `/proc/diskstats` use; on a remote host the directory is a path on that host and there is no
/// host path here.
#[derive(Debug)]
pub struct LocalBackend {
    place: PoolPlace,
    /// The libvirt host is this machine.
    local: bool,
    prealloc: Prealloc,
    /// The cell's pool, made by `provision`, destroyed by `teardown`.
    pool: Option<DirPool>,
    /// Volumes created and not yet removed (teardown removes them all).
    created: Vec<String>,
    /// The run's base images, when the cell's disk is made from one (overlay, copy).
    bases: Option<Bases>,
    /// The disk made by `provision`, for [`StorageBackend::allocated_bytes`].
    made: Option<PathBuf>,
}

impl LocalBackend {
    /// Images in `dir` of this machine's libvirtd (`qemu:///system`), with `prealloc`.
    pub fn new(dir: PathBuf, prealloc: Prealloc) -> Self {
        let place = PoolPlace {
            uri: crate::storage::chap::LIBVIRT_URI.to_string(),
            dir,
            prefix: pool_prefix(&cmd::run_tag()),
        };
        LocalBackend::on_host(place, prealloc)
    }

    /// Images in `place.dir` of the libvirt host `place.uri` (a path on that host).
    pub fn on_host(place: PoolPlace, prealloc: Prealloc) -> Self {
        LocalBackend {
            local: crate::uri::is_local_uri(&place.uri),
            place,
            prealloc,
            pool: None,
            created: Vec::new(),
            bases: None,
            made: None,
        }
    }

    /// Disks made from the run's base images in `bases` (cells with `--instance-disk` overlay
    /// or copy).
    pub fn from_bases(mut self, bases: Bases) -> Self {
        self.bases = Some(bases);
        self
    }

    /// The volume for `cell`: empty, an overlay on the base, or empty to be filled with a copy
    /// of it (returned with the plan).
    fn plan(
        &self,
        cell: &Cell,
        name: &str,
        size_bytes: u64,
    ) -> Result<(VolumePlan, Option<Arc<BaseImage>>), StorageError> {
        let flat = VolumePlan::new(name, cell.format, self.prealloc, size_bytes);
        let (Some(bases), true) = (&self.bases, cell.instance.from_base()) else {
            return Ok((flat, None));
        };
        if !self.local {
            return Err(Unsupported::RemoteBase(self.place.uri.clone()).into());
        }
        let base = bases.get(&self.place.dir.join("_base"), size_bytes)?;
        Ok(match cell.instance {
            InstanceDisk::Overlay => (
                VolumePlan::overlay(name, size_bytes, base.path()),
                Some(base),
            ),
            _ => (flat, Some(base)),
        })
    }

    /// The directory images are created in (on the libvirt host).
    pub fn dir(&self) -> &Path {
        &self.place.dir
    }

    /// The cell's pool, created on first use.
    fn pool(&mut self) -> Result<&DirPool, StorageError> {
        if self.pool.is_none() {
            let name = format!("{}{}", self.place.prefix, cmd::unique_tag());
            self.pool = Some(DirPool::create(&self.place.uri, &name, &self.place.dir)?);
        }
        Ok(self.pool.as_ref().expect("set above"))
    }

    /// What the cell records about its disk.
    fn params(&self, path: &Path, plan: &VolumePlan) -> BTreeMap<String, String> {
        let mut params = BTreeMap::new();
        params.insert("dir".into(), self.place.dir.display().to_string());
        let fs = if self.local {
            filesystem_name(&self.place.dir)
        } else {
            format!("unknown (on {})", self.place.uri)
        };
        params.insert("filesystem".into(), fs);
        params.insert("image".into(), path.display().to_string());
        if let Some(p) = &self.pool {
            params.insert("pool".into(), p.name().to_string());
        }
        params.insert(
            "preallocation".into(),
            self.prealloc.effective(plan.format).to_string(),
        );
        params.insert("preallocation_requested".into(), self.prealloc.to_string());
        params.extend(plan.params());
        params
    }

    /// Deletes the created volumes and destroys the pool through `pool`.
    fn remove_through(pool: &mut DirPool, created: &mut Vec<String>) -> Result<(), PoolError> {
        while let Some(name) = created.last() {
            pool.delete_volume(name)?;
            created.pop();
        }
        pool.destroy()
    }
}

/// Why `dir` cannot hold images QEMU opens with cache=none, if it cannot: a filesystem that
/// refuses O_DIRECT (tmpfs before Linux 6.6; this is probed, not assumed, because tmpfs has
/// O_DIRECT since 6.6), or an ancestor directory without o+x (QEMU runs as libvirt-qemu).
pub fn dir_problem(dir: &Path) -> Option<String> {
    let existing = dir.ancestors().find(|a| a.exists())?;
    if !o_direct_works(existing) {
        let fs = filesystem_name(existing);
        return Some(format!(
            "{} is on {fs}, which refuses O_DIRECT here, so cache=none/directsync fail; choose a \
             directory on ext4 or xfs (e.g. /var/tmp)",
            existing.display()
        ));
    }
    for a in existing.ancestors() {
        let mode = std::fs::metadata(a)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o711);
        if mode & 0o001 == 0 {
            return Some(format!(
                "{} is mode {:o} without o+x, so QEMU (user libvirt-qemu) cannot reach images \
                 under it; chmod o+x it (0711 keeps it unlistable)",
                a.display(),
                mode & 0o7777
            ));
        }
    }
    None
}

/// Opens a probe file in `dir` with O_DIRECT: EINVAL means the filesystem has none. Any other
/// failure (read-only, permissions) is not this problem and is left to qemu-img to report.
pub fn o_direct_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(format!(".vmbench-odirect-{}", cmd::unique_tag()));
    let r = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    !matches!(r, Err(e) if e.raw_os_error() == Some(libc::EINVAL))
}

/// The filesystem `path` is on, by statfs magic (recorded with results: tmpfs is RAM).
pub fn filesystem_name(path: &Path) -> String {
    use nix::sys::statfs as sf;
    let Ok(st) = sf::statfs(path) else {
        return "unknown".into();
    };
    let t = st.filesystem_type();
    let known = [
        (sf::TMPFS_MAGIC, "tmpfs"),
        (sf::EXT4_SUPER_MAGIC, "ext4"),
        (sf::XFS_SUPER_MAGIC, "xfs"),
        (sf::BTRFS_SUPER_MAGIC, "btrfs"),
        (sf::OVERLAYFS_SUPER_MAGIC, "overlayfs"),
        (sf::NFS_SUPER_MAGIC, "nfs"),
    ];
    known
        .iter()
        .find(|(m, _)| *m == t)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("filesystem {:#x}", t.0))
}

impl StorageBackend for LocalBackend {
    /// On this machine: the directory (O_DIRECT, o+x) and qemu-img (libvirt makes qcow2
    /// volumes with it). A remote host's directory is checked by libvirt when the pool is made.
    fn check(&self) -> Result<(), Unsupported> {
        if !self.local {
            return Ok(());
        }
        cmd::require_qemu_img()?;
        match dir_problem(&self.place.dir) {
            Some(p) => Err(Unsupported::Dir(p)),
            None => Ok(()),
        }
    }

    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.check()?;
        let name = super::image_name(&cmd::unique_tag(), cell);
        let (plan, base) = self.plan(cell, &name, size_bytes)?;
        // Recorded before creating: a half-made volume is removed by teardown too.
        self.created.push(name);
        let path = self.pool()?.create_volume(&plan)?;
        let mut params = self.params(&path, &plan);
        if let Some(base) = &base {
            if cell.instance == InstanceDisk::Copy {
                copy_base(base, &path, cell.format)?;
            }
            super::base::record(&mut params, cell, base);
        }
        self.made = self.local.then(|| path.clone());
        Ok(ProvisionedDisk {
            source: DiskSource::File { path: path.clone() },
            format: cell.format,
            size_bytes,
            params,
            host_path: self.local.then_some(path),
        })
    }

    /// Volumes deleted, pool destroyed. When the pool's connection died (libvirtd restarted),
    /// a fresh connection finds the pool again (libvirtd keeps an active transient pool across
    /// its restart; after a reboot, a new pool on the directory finds the files) and finishes.
    fn allocated_bytes(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.made.as_ref()?).ok()?;
        Some(meta.blocks() * 512)
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        self.made = None;
        let Some(mut pool) = self.pool.take() else {
            if self.created.is_empty() {
                return Ok(());
            }
            let name = format!("{}{}", self.place.prefix, cmd::unique_tag());
            let mut again = DirPool::reopen(&self.place.uri, &name, &self.place.dir)?;
            return Ok(Self::remove_through(&mut again, &mut self.created)?);
        };
        if Self::remove_through(&mut pool, &mut self.created).is_ok() {
            return Ok(());
        }
        let name = pool.name().to_string();
        // Its connection is dead: dropping it frees the handles only.
        drop(pool);
        let mut again = DirPool::reopen(&self.place.uri, &name, &self.place.dir)?;
        Ok(Self::remove_through(&mut again, &mut self.created)?)
    }
}

/// Nova's `raw`/`flat`: every byte of the base written into the new disk (`-n`: the volume
/// libvirt made, of the base's size, is the target).
pub(super) fn copy_base(base: &BaseImage, dest: &Path, format: Format) -> Result<(), StorageError> {
    let (src, dst) = (base.path().to_string_lossy(), dest.to_string_lossy());
    let args = [
        "convert",
        "-n",
        "-f",
        "raw",
        "-O",
        format.as_str(),
        &*src,
        &*dst,
    ];
    cmd::run("qemu-img", &args).map(drop)
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for LocalBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `local` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Local
    }

    fn in_default_matrix(&self) -> bool {
        true
    }

    fn uses_disk_place(&self) -> bool {
        true
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        cell: &Cell,
        work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        DiskSource::File {
            path: super::local_dir(opts, work).join(super::image_name(super::PLANNED_TAG, cell)),
        }
    }

    fn open(
        &self,
        opts: &super::options::StorageConfig,
        cell: &Cell,
        servers: &mut super::servers::Servers,
        _work: &Path,
        disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        let b = LocalBackend::on_host(disks.clone(), opts.prealloc.unwrap_or(Prealloc::Off));
        let b = match cell.instance.from_base() {
            true => b.from_bases(servers.bases()),
            false => b,
        };
        Ok(super::Opened::plain(Box::new(b)))
    }

    /// An overlay on the run's base (Nova's `qcow2`) or a full copy of it (Nova's `raw`).
    fn instances(&self) -> &'static [InstanceDisk] {
        &[
            InstanceDisk::Flat,
            InstanceDisk::Overlay,
            InstanceDisk::Copy,
        ]
    }

    fn host_support(&self) -> Result<String, String> {
        let probe = LocalBackend::new(std::env::temp_dir(), Prealloc::Off);
        match probe.check() {
            Ok(()) => Ok("available".into()),
            Err(u) => Err(u.to_string()),
        }
    }
}

/// The local backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LocalArgs {
    /// Directory for local images (the disk you want to measure). [default: the run's work dir]
    #[arg(long)]
    pub local_dir: Option<PathBuf>,
    /// Preallocation of local images: off, metadata, full. [default: off]
    #[arg(long)]
    pub prealloc: Option<String>,
}

impl LocalArgs {
    /// Sets the options given on the command line; a bad value names its flag.
    pub fn apply(&self, s: &mut StorageConfig) -> Result<(), String> {
        if let Some(d) = &self.local_dir {
            s.local_dir = Some(d.clone());
        }
        if let Some(p) = &self.prealloc {
            s.prealloc = Some(p.parse().map_err(|e| format!("--prealloc: {e}"))?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prealloc_parses_and_lists_choices() {
        assert_eq!("metadata".parse::<Prealloc>().unwrap(), Prealloc::Metadata);
        assert_eq!(" full ".parse::<Prealloc>().unwrap(), Prealloc::Full);
        let e = "falloc".parse::<Prealloc>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown preallocation 'falloc' (valid: off, metadata, full)"
        );
    }

    #[test]
    fn o_direct_probe_decides_and_names_the_filesystem() {
        // /dev/shm is tmpfs: refused exactly when this kernel's tmpfs refuses O_DIRECT.
        let shm = Path::new("/dev/shm");
        if filesystem_name(shm) == "tmpfs" {
            let p = dir_problem(&shm.join("vmbench"));
            assert_eq!(p.is_some(), !o_direct_works(shm), "{p:?}");
            if let Some(p) = p {
                assert!(p.contains("tmpfs") && p.contains("O_DIRECT"), "{p}");
            }
        }
        assert!(o_direct_works(Path::new("/var/tmp")));
        assert_eq!(dir_problem(Path::new("/var/tmp")), None);
        assert_eq!(filesystem_name(Path::new("/proc")), "filesystem 0x9fa0");
    }

    #[test]
    fn a_0700_ancestor_is_named() {
        let t = tempfile::Builder::new()
            .prefix("vmbench-perm")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let p = dir_problem(&t.path().join("images")).expect("0700 must be refused");
        assert!(
            p.contains(&t.path().display().to_string()) && p.contains("o+x"),
            "{p}"
        );
    }
}
