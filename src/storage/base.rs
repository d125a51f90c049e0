//! The run's base image: what instance disks start from when a cloud lays them out (Nova keeps
//! it in `_base/`, Ceph as a protected snapshot). One raw file per run and disk size, filled
//! once with known data (every 4 KiB block different, none zero, so a read that falls through
//! to the base returns real data and a copy moves real bytes), shared by every cell and repeat
//! of the run, removed when the run's [`super::servers::Servers`] is dropped.
//!
//! `--base-image FILE` makes the base from a user's image instead (a cloud image, as Glance
//! holds it): converted to raw once per run and disk size (Nova's `force_raw_images`, its
//! default) and grown to the disk's size (Nova resizes the instance disk to the flavor's); an
//! image larger than the disk is refused before the run, as Nova refuses a flavor whose disk is
//! too small for the image. Its format is read from its header, never probed by QEMU.

use super::StorageError;
use crate::cell::Cell;
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
    /// The user's image the bases are made from (`--base-image`); `None`: the known pattern.
    source: Option<UserImage>,
}

impl Bases {
    /// None made yet; files are named after `run`.
    pub fn new(run: &str) -> Bases {
        Bases {
            run: run.to_string(),
            made: Arc::default(),
            source: None,
        }
    }

    /// Bases made from the user's image (checked by [`UserImage::open`]).
    pub fn from_image(mut self, image: UserImage) -> Bases {
        self.source = Some(image);
        self
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
        let b = match &self.source {
            Some(image) => BaseImage::convert(image, &path, bytes)?,
            None => BaseImage::create(&path, bytes)?,
        };
        let b = Arc::new(b);
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

    /// The user's `image` as a raw base of `bytes` at `path` (converted, then grown to the
    /// disk's size), mode 0644. A half-made file is removed.
    pub fn convert(image: &UserImage, path: &Path, bytes: u64) -> Result<BaseImage, StorageError> {
        if image.virtual_bytes > bytes {
            return Err(StorageError::Invalid(image.too_big(bytes)));
        }
        let t = std::time::Instant::now();
        let mut base = BaseImage {
            path: path.to_path_buf(),
            bytes,
            write_ms: 0,
            handed_out: Default::default(),
        };
        // From here on, Drop removes whatever was written.
        let (src, dst) = (image.path.to_string_lossy(), path.to_string_lossy());
        let args = ["convert", "-f", image.format, "-O", "raw", &*src, &*dst];
        super::cmd::run("qemu-img", &args)?;
        let io = |what: &str| {
            let context = format!("{what} {}", path.display());
            move |source| StorageError::Io { context, source }
        };
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io("opening"))?;
        f.set_len(bytes).map_err(io("growing"))?;
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

/// Says in a cell's `params` that its disk starts from `base`: the instance-disk layout, the
/// base's file, and (for the first cell to get it) the ms its writing took ([`WRITTEN_MS`]).
pub fn record(params: &mut BTreeMap<String, String>, cell: &Cell, base: &BaseImage) {
    params.insert("instance_disk".into(), cell.instance.to_string());
    params.insert("base_image".into(), base.path().display().to_string());
    if let Some(ms) = base.first_write_ms() {
        params.insert(WRITTEN_MS.into(), ms.to_string());
    }
}

/// A user's image for the bases (`--base-image`): raw or qcow2, told apart by the qcow2 magic,
/// with the size the guest sees.
#[derive(Debug, Clone, PartialEq)]
pub struct UserImage {
    /// The file.
    pub path: PathBuf,
    /// `raw` or `qcow2`, as `qemu-img -f` spells it.
    pub format: &'static str,
    /// The disk size the image describes (qcow2: its header's; raw: the file's length).
    pub virtual_bytes: u64,
}

/// The big-endian u64 at `at` in a header (0 past its end).
fn be_u64(head: &[u8], at: usize) -> u64 {
    head.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// A qcow2 that reads nothing but itself: no backing file (header bytes 8..16, its offset) and,
/// in version 3, no external data file (incompatible feature bit 2, bytes 72..80). Converted as
/// root, either would pull a file the image names (`/etc/shadow`, a host disk) into a base
/// every guest reads.
fn check_self_contained(head: &[u8]) -> Result<(), &'static str> {
    if be_u64(head, 8) != 0 {
        return Err("a qcow2 with a backing file: give a self-contained image \
                    (`qemu-img convert -O qcow2 IMAGE NEW` flattens it)");
    }
    let version = head
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes);
    if version >= 3 && be_u64(head, 72) & (1 << 2) != 0 {
        return Err("a qcow2 whose data lives in an external file: give a self-contained image");
    }
    Ok(())
}

/// qcow2's magic, `QFI\xfb`, the first four bytes of every qcow2 file.
const QCOW2_MAGIC: [u8; 4] = *b"QFI\xfb";

impl UserImage {
    /// Reads `path`'s format and virtual size; an error names the file and the problem.
    pub fn open(path: &Path) -> Result<UserImage, String> {
        use std::io::Read;
        let named = |e: &dyn std::fmt::Display| format!("--base-image {}: {e}", path.display());
        let meta = std::fs::metadata(path).map_err(|e| named(&e))?;
        if !meta.is_file() {
            return Err(named(&"not a regular file"));
        }
        let mut head = [0u8; 80];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .map_err(|e| named(&e))?;
        let (format, virtual_bytes) = if n >= 32 && head[..4] == QCOW2_MAGIC {
            check_self_contained(&head[..n]).map_err(|e| named(&e))?;
            // qcow2 header: the virtual size is the big-endian u64 at byte 24.
            ("qcow2", be_u64(&head[..n], 24))
        } else {
            ("raw", meta.len())
        };
        if virtual_bytes == 0 {
            return Err(named(&"an empty image"));
        }
        Ok(UserImage {
            path: path.to_path_buf(),
            format,
            virtual_bytes,
        })
    }

    /// Why a disk of `disk_bytes` cannot start from it.
    pub fn too_big(&self, disk_bytes: u64) -> String {
        format!(
            "--base-image {}: its {} image is {} MiB, larger than the cells' disk ({} MiB): the \
             disk must hold the image, as Nova refuses a flavor whose disk is too small for it \
             (give --disk-mib {} or more)",
            self.path.display(),
            self.format,
            self.virtual_bytes.div_ceil(1 << 20),
            disk_bytes >> 20,
            self.virtual_bytes.div_ceil(1 << 20),
        )
    }
}

/// `--base-image FILE`: the flag of the bases, flattened into `vmbench matrix` with the
/// backends' own.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BaseArgs {
    /// A raw or qcow2 image (a cloud image) that instance disks start from, instead of vmbench's
    /// generated base: converted to raw once per run and grown to the disk's size; it must not
    /// be larger than the disk. Needs --instance-disk overlay, copy or clone. [default: a raw
    /// base of known data]
    #[arg(long, value_name = "FILE")]
    pub base_image: Option<PathBuf>,
}

impl BaseArgs {
    /// Sets the option given on the command line.
    pub fn apply(&self, s: &mut super::options::StorageConfig) {
        if let Some(p) = &self.base_image {
            s.base_image = Some(p.clone());
        }
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

    /// A qcow2 header as qemu-img writes it, as far as [`UserImage::open`] reads: the magic,
    /// version 3, and the virtual size at byte 24.
    fn qcow2_header(size: u64) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..4].copy_from_slice(&QCOW2_MAGIC);
        h[4..8].copy_from_slice(&3u32.to_be_bytes());
        h[24..32].copy_from_slice(&size.to_be_bytes());
        h
    }

    #[test]
    fn a_user_image_is_told_raw_or_qcow2_and_sized_as_the_guest_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let q = dir.path().join("cloud.qcow2");
        std::fs::write(&q, qcow2_header(2 << 30)).unwrap();
        let img = UserImage::open(&q).unwrap();
        assert_eq!((img.format, img.virtual_bytes), ("qcow2", 2 << 30));
        let r = dir.path().join("cloud.raw");
        std::fs::write(&r, vec![7u8; 3 * BLOCK]).unwrap();
        let img = UserImage::open(&r).unwrap();
        assert_eq!((img.format, img.virtual_bytes), ("raw", 3 * BLOCK as u64));
        let e = img.too_big(BLOCK as u64);
        assert!(
            e.contains("larger than the cells' disk") && e.contains("--disk-mib 1"),
            "{e}"
        );
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let e = UserImage::open(&empty).unwrap_err();
        assert!(e.contains("an empty image"), "{e}");
        let e = UserImage::open(&dir.path().join("missing")).unwrap_err();
        assert!(
            e.starts_with("--base-image ") && e.contains("missing"),
            "{e}"
        );
        let e = UserImage::open(dir.path()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A backing file or an external data file would be read (as root) into the base.
        let mut backed = qcow2_header(1 << 20);
        backed[8..16].copy_from_slice(&512u64.to_be_bytes());
        std::fs::write(&q, &backed).unwrap();
        let e = UserImage::open(&q).unwrap_err();
        assert!(e.contains("a qcow2 with a backing file"), "{e}");
        let mut external = qcow2_header(1 << 20);
        external[72..80].copy_from_slice(&4u64.to_be_bytes());
        std::fs::write(&q, &external).unwrap();
        let e = UserImage::open(&q).unwrap_err();
        assert!(e.contains("external file"), "{e}");
    }

    /// A real qcow2 (qemu-img create, 1 MiB of 0xab written with qemu-io) becomes a raw base of
    /// the disk's size: the data where it was, zeros after, mode 0644; one larger than the disk
    /// is refused and leaves no file.
    #[test]
    #[ignore = "host: qemu"]
    fn a_user_qcow2_becomes_a_raw_base_grown_to_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let q = dir.path().join("cloud.qcow2");
        let qs = q.to_string_lossy();
        super::super::cmd::run("qemu-img", &["create", "-f", "qcow2", &qs, "4M"]).unwrap();
        let io = ["-f", "qcow2", "-c", "write -P 0xab 0 1M", &*qs];
        super::super::cmd::run("qemu-io", &io).unwrap();
        let img = UserImage::open(&q).unwrap();
        assert_eq!((img.format, img.virtual_bytes), ("qcow2", 4 << 20));
        let path = dir.path().join("base.raw");
        let base = BaseImage::convert(&img, &path, 8 << 20).unwrap();
        let mut data = vec![];
        std::fs::File::open(&path)
            .unwrap()
            .read_to_end(&mut data)
            .unwrap();
        assert_eq!(data.len(), 8 << 20);
        assert!(data[..1 << 20].iter().all(|b| *b == 0xab));
        assert!(data[1 << 20..].iter().all(|b| *b == 0));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(base.first_write_ms().is_some());
        drop(base);
        assert!(!path.exists());
        let small = dir.path().join("small.raw");
        let e = BaseImage::convert(&img, &small, 2 << 20).unwrap_err();
        assert!(e.to_string().contains("larger than the cells' disk"), "{e}");
        assert!(!small.exists());
        // A real overlay names its backing file in its header: refused before any conversion.
        let child = dir.path().join("child.qcow2");
        let cs = child.to_string_lossy();
        let args = ["create", "-f", "qcow2", "-b", &*qs, "-F", "qcow2", &*cs];
        super::super::cmd::run("qemu-img", &args).unwrap();
        let e = UserImage::open(&child).unwrap_err();
        assert!(e.contains("a qcow2 with a backing file"), "{e}");
    }
}
