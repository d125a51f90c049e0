//! Local storage backend: a qcow2 or raw image file in a directory, made with `qemu-img create`
//! and removed on teardown.
//!
//! Two host traps shape it: libvirt runs QEMU as `libvirt-qemu` and relabels the image but not
//! its directories, so every directory on the path needs o+x (0711); and cache=none opens with
//! O_DIRECT, which tmpfs refused before Linux 6.6, so [`LocalBackend::check`] probes O_DIRECT in
//! the directory and rejects it (naming tmpfs) when it fails. The filesystem is recorded in the
//! disk's params, since an image on tmpfs benchmarks RAM.

use super::cmd;
use super::{DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::{Cell, Format};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// How much of the image `qemu-img` allocates up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Prealloc {
    /// Nothing: a sparse file (qcow2 grows as the guest writes).
    Off,
    /// qcow2 metadata only (L1/L2/refcounts); for raw, which has no metadata, this is `off`.
    Metadata,
    /// Every byte written (zeros) at creation.
    Full,
}

impl Prealloc {
    /// Every value, in display order.
    pub const ALL: &'static [Prealloc] = &[Prealloc::Off, Prealloc::Metadata, Prealloc::Full];

    /// The CLI spelling (also qemu-img's `preallocation=` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Prealloc::Off => "off",
            Prealloc::Metadata => "metadata",
            Prealloc::Full => "full",
        }
    }

    /// What qemu-img is actually asked for with `format`: raw has no metadata mode.
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

/// Image files in a local directory.
#[derive(Debug)]
pub struct LocalBackend {
    dir: PathBuf,
    prealloc: Prealloc,
    /// Images created and not yet removed (teardown removes them all).
    created: Vec<PathBuf>,
}

impl LocalBackend {
    /// Images go in `dir` (created 0711 if missing), with `prealloc`.
    pub fn new(dir: PathBuf, prealloc: Prealloc) -> Self {
        LocalBackend {
            dir,
            prealloc,
            created: Vec::new(),
        }
    }

    /// The directory images are created in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory if needed; QEMU (user libvirt-qemu) must traverse it, hence 0711.
    fn ensure_dir(&self) -> Result<(), StorageError> {
        if !self.dir.exists() {
            std::fs::create_dir_all(&self.dir).map_err(|source| StorageError::Io {
                context: format!("creating {}", self.dir.display()),
                source,
            })?;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711)).map_err(
                |source| StorageError::Io {
                    context: format!("chmod 0711 {}", self.dir.display()),
                    source,
                },
            )?;
        }
        Ok(())
    }
}

/// The qemu-img argv that creates `path` as `format` with `prealloc`.
pub fn plan_qemu_img_create(
    path: &Path,
    format: Format,
    prealloc: Prealloc,
    size_bytes: u64,
) -> Vec<String> {
    let mut argv = vec![
        "qemu-img".to_string(),
        "create".into(),
        "-f".into(),
        format.as_str().into(),
    ];
    let p = prealloc.effective(format);
    if p != Prealloc::Off {
        argv.push("-o".into());
        argv.push(format!("preallocation={}", p.as_str()));
    }
    argv.push(path.to_string_lossy().into_owned());
    argv.push(size_bytes.to_string());
    argv
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
    fn check(&self) -> Result<(), Unsupported> {
        cmd::require_qemu_img()?;
        match dir_problem(&self.dir) {
            Some(p) => Err(Unsupported(p)),
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
        self.ensure_dir()?;
        let path = self.dir.join(super::image_name(&cmd::unique_tag(), cell));
        let argv = plan_qemu_img_create(&path, cell.format, self.prealloc, size_bytes);
        // Recorded before running: a half-written file is removed by teardown too.
        self.created.push(path.clone());
        cmd::run_plan(&[argv])?;
        let mut params = BTreeMap::new();
        params.insert("dir".into(), self.dir.display().to_string());
        params.insert("filesystem".into(), filesystem_name(&self.dir));
        params.insert("image".into(), path.display().to_string());
        params.insert(
            "preallocation".into(),
            self.prealloc.effective(cell.format).to_string(),
        );
        params.insert("preallocation_requested".into(), self.prealloc.to_string());
        Ok(ProvisionedDisk {
            source: DiskSource::File { path: path.clone() },
            format: cell.format,
            size_bytes,
            host_path: Some(path),
            params,
        })
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        while let Some(path) = self.created.pop() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    let context = format!("removing {}", path.display());
                    self.created.push(path);
                    return Err(StorageError::Io { context, source });
                }
            }
        }
        Ok(())
    }
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for LocalBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
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
    fn raw_has_no_metadata_preallocation() {
        let p = Path::new("/var/tmp/x.raw");
        let argv = plan_qemu_img_create(p, Format::Raw, Prealloc::Metadata, 1024);
        assert_eq!(
            argv,
            ["qemu-img", "create", "-f", "raw", "/var/tmp/x.raw", "1024"]
        );
        let argv = plan_qemu_img_create(p, Format::Qcow2, Prealloc::Full, 1024);
        assert!(argv.contains(&"preallocation=full".to_string()), "{argv:?}");
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
