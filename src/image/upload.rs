//! The guest kernel and initramfs on a libvirt host that is not this machine: uploaded through
//! the libvirt connection (`virStorageVolUpload` on a stream) into a transient `dir` pool over
//! vmbench's directory on that host, as content-addressed volumes (`vmbench-kernel-<sha256
//! prefix>`, `vmbench-initramfs-<...>`). A later run finds them by name and uploads again only
//! when the size differs (a half-finished upload) or the content, hence the name, changed.
//!
//! This machine's libvirtd is not served from here: its domains name the image cache's files
//! directly, which is the same bytes without a copy per run (and the cache is kept from
//! `image prune` by the run's shared lock, so the paths stay valid).

use super::ImageInfo;
use crate::storage::pool::{pool_prefix, DirPool, PoolError, IMAGES_POOL_SUFFIX};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Hex digits of the SHA-256 in a volume name (64 bits: collisions are not a concern for a
/// handful of images per host).
const HASH_CHARS: usize = 16;

/// Name of the run's images pool on a host (a `vmbench cleanup` of a killed run destroys it and
/// keeps its volumes, [`IMAGES_POOL_SUFFIX`]).
pub fn images_pool_name(run_id: &str) -> String {
    format!("{}{IMAGES_POOL_SUFFIX}", pool_prefix(run_id))
}

/// The content-addressed volume name of `file` as `kind` (`kernel`, `initramfs`).
pub fn volume_name(kind: &str, file: &Path) -> Result<String, PoolError> {
    let read = |source| PoolError::Read {
        path: file.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(file).map_err(read)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(read)?;
    let hex = hex::encode(h.finalize());
    Ok(format!("vmbench-{kind}-{}", &hex[..HASH_CHARS]))
}

/// What [`ensure_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// The volume was there with the right size: reused.
    Reused(PathBuf),
    /// Uploaded now.
    Uploaded(PathBuf),
}

impl Placed {
    /// The volume's path on the libvirt host.
    pub fn path(&self) -> &Path {
        match self {
            Placed::Reused(p) | Placed::Uploaded(p) => p,
        }
    }
}

/// `src` as the volume `name` in `pool`: the existing one when its size matches, else uploaded
/// (a wrong-sized one, from an interrupted upload, is replaced).
pub fn ensure_file(pool: &DirPool, name: &str, src: &Path) -> Result<Placed, PoolError> {
    let len = std::fs::metadata(src)
        .map_err(|source| PoolError::Read {
            path: src.to_path_buf(),
            source,
        })?
        .len();
    match pool.volume(name)? {
        Some((path, cap)) if cap == len => return Ok(Placed::Reused(path)),
        Some(_) => {
            pool.delete_volume(name)?;
        }
        None => {}
    }
    pool.upload(name, src).map(Placed::Uploaded)
}

/// `image` as the libvirt host `uri` sees it: kernel and both initramfs files uploaded (or reused) under
/// `base`, a directory on that host; everything else as given.
pub fn ensure_on_host(
    uri: &str,
    base: &Path,
    run_id: &str,
    image: &ImageInfo,
) -> Result<ImageInfo, PoolError> {
    let pool = DirPool::create_or_borrow(uri, &images_pool_name(run_id), base)?;
    let kernel = ensure_file(&pool, &volume_name("kernel", &image.kernel)?, &image.kernel)?;
    let initrd = ensure_file(
        &pool,
        &volume_name("initramfs", &image.initrd)?,
        &image.initrd,
    )?;
    let initrd_full = ensure_file(
        &pool,
        &volume_name("initramfs", &image.initrd_full)?,
        &image.initrd_full,
    )?;
    Ok(ImageInfo {
        kernel: kernel.path().to_path_buf(),
        initrd: initrd.path().to_path_buf(),
        initrd_full: initrd_full.path().to_path_buf(),
        ..image.clone()
    })
}

/// Removes the run's (empty) disk directory `dir_name` under `base` on `uri`, as a `dir`
/// volume of the images pool (libvirt rmdirs it); false when it is not there.
pub fn remove_run_dir(
    uri: &str,
    base: &Path,
    run_id: &str,
    dir_name: &str,
) -> Result<bool, PoolError> {
    let pool = DirPool::create_or_borrow(uri, &images_pool_name(run_id), base)?;
    pool.refresh()?;
    pool.delete_volume(dir_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_are_content_addressed() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"abc").unwrap();
        std::fs::write(&b, b"abc").unwrap();
        let na = volume_name("kernel", &a).unwrap();
        // sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(na, "vmbench-kernel-ba7816bf8f01cfea");
        assert_eq!(volume_name("kernel", &b).unwrap(), na);
        std::fs::write(&b, b"abd").unwrap();
        assert_ne!(volume_name("kernel", &b).unwrap(), na);
        let e = volume_name("kernel", &d.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
    }

    #[test]
    fn the_images_pool_is_one_of_the_runs_pools() {
        let n = images_pool_name("r1");
        assert!(
            n.starts_with(&pool_prefix("r1")) && n.ends_with(IMAGES_POOL_SUFFIX),
            "{n}"
        );
    }
}
