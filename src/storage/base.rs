//! The run's base image: what instance disks start from when a cloud lays them out (Nova keeps
//! it in `_base/`, Ceph as a protected snapshot). One raw file per run and disk size, filled
//! once with known data (every 4 KiB block different, none zero, so a read that falls through
//! to the base returns real data and a copy moves real bytes), shared by every cell and repeat
//! of the run, removed when the run's [`super::servers::Servers`] is dropped.

use super::StorageError;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The cell param that says this cell's provisioning wrote the run's base first (in ms, left
/// out of its `provision_ms`).
pub const WRITTEN_MS: &str = "base_written_ms";

/// The block the pattern repeats in.
pub const BLOCK: usize = 4096;

/// Block `index` of every base image: 8-byte words that name the block and the word, mixed
/// with a constant so no word is zero.
pub fn block(index: u64) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    for (w, chunk) in b.chunks_exact_mut(8).enumerate() {
        let word = (index << 16 | w as u64) ^ 0x5642_454e_4348_0000;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    b
}

/// The run's base images by file: each made on first use and shared; a backend holds a clone
/// while its cell runs, the run's [`super::servers::Servers`] holds one until the run ends, and
/// the files go with the last.
#[derive(Debug, Clone)]
pub struct Bases {
    run: String,
    made: Arc<Mutex<BTreeMap<PathBuf, Arc<BaseImage>>>>,
}

impl Bases {
    /// None made yet; files are named after `run`.
    pub fn new(run: &str) -> Bases {
        Bases {
            run: run.to_string(),
            made: Arc::default(),
        }
    }

    /// The base of `bytes` in `dir` (made there on first use, with the directory, 0711 so QEMU's
    /// user reaches it). Cells of one host run one at a time, but hosts run side by side: the
    /// lock makes one of them write it.
    pub fn get(&self, dir: &Path, bytes: u64) -> Result<Arc<BaseImage>, StorageError> {
        let path = dir.join(format!("vmbench-base-{}-{bytes}.raw", self.run));
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = made.get(&path) {
            return Ok(b.clone());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(dir)
            .map_err(|source| StorageError::Io {
                context: format!("creating {}", dir.display()),
                source,
            })?;
        let b = Arc::new(BaseImage::create(&path, bytes)?);
        made.insert(path, b.clone());
        Ok(b)
    }
}

/// A base image file; removed on drop.
#[derive(Debug)]
pub struct BaseImage {
    path: PathBuf,
    bytes: u64,
    write_ms: u64,
    /// Whether a cell has been given it: the first one is told it paid for the writing.
    handed_out: std::sync::atomic::AtomicBool,
}

impl BaseImage {
    /// Writes a base of `bytes` (rounded up to whole blocks) at `path`, mode 0644 (QEMU's user
    /// reads it through every overlay). A half-written file is removed.
    pub fn create(path: &Path, bytes: u64) -> Result<BaseImage, StorageError> {
        let io = |what: &str| {
            let context = format!("{what} {}", path.display());
            move |source| StorageError::Io { context, source }
        };
        let t = std::time::Instant::now();
        let mut base = BaseImage {
            path: path.to_path_buf(),
            bytes: bytes.div_ceil(BLOCK as u64) * BLOCK as u64,
            write_ms: 0,
            handed_out: Default::default(),
        };
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io("creating"))?;
        // From here on, Drop removes whatever was written.
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        for i in 0..base.bytes / BLOCK as u64 {
            w.write_all(&block(i)).map_err(io("writing"))?;
        }
        let f = w.into_inner().map_err(|e| io("writing")(e.into_error()))?;
        f.sync_all().map_err(io("syncing"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .map_err(io("chmod"))?;
        base.write_ms = t.elapsed().as_millis() as u64;
        Ok(base)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The milliseconds its writing took, to the first caller only (once per run, not per
    /// instance: that cell's provisioning time leaves it out, and records it apart).
    pub fn first_write_ms(&self) -> Option<u64> {
        let first = !self
            .handed_out
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        first.then_some(self.write_ms)
    }
}

impl Drop for BaseImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn blocks_differ_and_are_never_zero() {
        let (a, b) = (block(0), block(1));
        assert_ne!(a, b);
        assert!(a.chunks_exact(8).all(|w| w != [0; 8]));
        assert_eq!(block(7), block(7));
    }

    #[test]
    fn a_base_holds_the_pattern_and_goes_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.raw");
        let base = BaseImage::create(&path, 3 * BLOCK as u64 - 1).unwrap();
        assert_eq!(base.bytes(), 3 * BLOCK as u64);
        let mut data = vec![];
        std::fs::File::open(&path)
            .unwrap()
            .read_to_end(&mut data)
            .unwrap();
        assert_eq!(data.len(), 3 * BLOCK);
        assert_eq!(&data[BLOCK..2 * BLOCK], &block(1)[..]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(
            BaseImage::create(&path, 1).is_err(),
            "never over an existing file"
        );
        drop(base);
        assert!(!path.exists());
    }

    #[test]
    fn one_base_per_size_shared_until_the_last_holder_goes() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("_base");
        let bases = Bases::new("R1");
        let a = bases.get(&sub, 2 * BLOCK as u64).unwrap();
        let b = bases.clone().get(&sub, 2 * BLOCK as u64).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.first_write_ms().is_some());
        assert_eq!(b.first_write_ms(), None, "once per base");
        assert_eq!(a.path(), sub.join("vmbench-base-R1-8192.raw"));
        let c = bases.get(&sub, BLOCK as u64).unwrap();
        assert_ne!(c.path(), a.path());
        let mode = std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o711);
        let path = a.path().to_path_buf();
        drop((a, b, c, bases));
        assert!(!path.exists());
    }
}
