//! Keeping the image cache from growing forever: every recipe or agent change publishes a new
//! content-addressed image and nothing removed the old ones. A run holds a shared lock on the
//! image it boots ([`InUse`]); `vmbench image prune` removes the least recently used images
//! beyond `--keep`, never one whose lock a live run holds. The build inputs (`debs/`, `src/`,
//! `fio/`) stay: they make the next build offline and fast.

use super::{ImageError, ImageInfo};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Name of the per-image lock file; its mtime is the image's last use.
const IN_USE: &str = ".in-use";

/// A shared flock on `<image>/.in-use` for as long as a run uses the image. Taking it also
/// stamps the image as just used. Released when dropped (the fd closes, also on kill -9).
#[derive(Debug)]
pub struct InUse(#[allow(dead_code)] File);

impl InUse {
    /// Marks `info`'s image as used by this process.
    pub fn take(info: &ImageInfo) -> Result<InUse, ImageError> {
        let p = info.dir.join(IN_USE);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| ImageError::io(&p, e))?;
        // SAFETY: flock on a valid fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) } != 0 {
            return Err(ImageError::io(&p, std::io::Error::last_os_error()));
        }
        f.set_modified(SystemTime::now())
            .map_err(|e| ImageError::io(&p, e))?;
        Ok(InUse(f))
    }
}

/// One published image in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedImage {
    /// Its id (the directory name).
    pub id: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Bytes on disk.
    pub bytes: u64,
    /// Last use (or build, if never used since this existed).
    pub last_used: SystemTime,
}

/// What a prune did (or would do, with `dry_run`).
#[derive(Debug, Default)]
pub struct PruneReport {
    /// Removed images.
    pub removed: Vec<CachedImage>,
    /// Kept images, each with why.
    pub kept: Vec<(CachedImage, &'static str)>,
}

impl PruneReport {
    /// Bytes freed.
    pub fn freed(&self) -> u64 {
        self.removed.iter().map(|i| i.bytes).sum()
    }
}

/// Whether a directory name is an image id (16 lowercase hex digits).
fn is_image_id(name: &str) -> bool {
    name.len() == 16
        && name
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Total size of the regular files under `p` (not following symlinks).
pub fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// The published images in `cache`, most recently used first.
pub fn list(cache: &Path) -> Vec<CachedImage> {
    let Ok(rd) = std::fs::read_dir(cache) else {
        return vec![];
    };
    let mut out: Vec<CachedImage> = rd
        .flatten()
        .filter_map(|e| {
            let id = e
                .file_name()
                .to_str()
                .filter(|n| is_image_id(n))?
                .to_string();
            let dir = e.path();
            let manifest = std::fs::metadata(dir.join("manifest.json")).ok()?;
            let stamp = std::fs::metadata(dir.join(IN_USE)).and_then(|m| m.modified());
            let built = manifest.modified().ok()?;
            let last_used = stamp.map_or(built, |s| s.max(built));
            Some(CachedImage {
                bytes: dir_bytes(&dir),
                id,
                dir,
                last_used,
            })
        })
        .collect();
    out.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.id.cmp(&b.id)));
    out
}

/// True when a live run holds the image's lock.
fn in_use(img: &CachedImage) -> bool {
    let Ok(f) = File::open(img.dir.join(IN_USE)) else {
        return false;
    };
    // SAFETY: flock on a valid fd we own; an exclusive try-lock fails while anyone shares it.
    let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    !free
}

/// Removes the least recently used images beyond the `keep` newest, never one in use. With
/// `dry_run`, removes nothing and reports what it would remove. Holds the cache's build lock,
/// so no build publishes or reads an image while it runs.
pub fn prune(cache: &Path, keep: usize, dry_run: bool) -> Result<PruneReport, ImageError> {
    let _lock = super::CacheLock::take(cache, &|_| {})?;
    let mut report = PruneReport::default();
    for (i, img) in list(cache).into_iter().enumerate() {
        if i < keep {
            report
                .kept
                .push((img, "among the --keep most recently used"));
        } else if in_use(&img) {
            report.kept.push((img, "in use by a live run"));
        } else {
            if !dry_run {
                std::fs::remove_dir_all(&img.dir).map_err(|e| ImageError::io(&img.dir, e))?;
            }
            report.removed.push(img);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A fake published image: the files prune looks at, with a chosen age.
    fn image(cache: &Path, id: &str, age_s: u64) -> ImageInfo {
        let dir = cache.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("initrd.zst"), vec![0u8; 1000]).unwrap();
        let m = File::create(dir.join("manifest.json")).unwrap();
        m.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .unwrap();
        ImageInfo {
            id: id.into(),
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.zst"),
            initrd_full: dir.join("initrd-full.zst"),
            initrd_full_bytes: 0,
            dir,
            initrd_bytes: 1000,
            versions: Default::default(),
        }
    }

    #[test]
    fn keeps_the_newest_and_the_one_in_use_removes_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let c = t.path();
        image(c, "aaaaaaaaaaaaaaa1", 10);
        image(c, "aaaaaaaaaaaaaaa2", 20);
        let old_live = image(c, "aaaaaaaaaaaaaaa3", 30);
        image(c, "aaaaaaaaaaaaaaa4", 40);
        std::fs::create_dir_all(c.join("debs")).unwrap();
        // A live run took the oldest-built image a moment ago: that counts as its last use.
        let live = InUse::take(&old_live).unwrap();
        // Make it look old again, so only the lock protects it.
        File::options()
            .write(true)
            .open(old_live.dir.join(IN_USE))
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(300))
            .unwrap();
        let dry = prune(c, 1, true).unwrap();
        let ids = |v: &[CachedImage]| v.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&dry.removed), ["aaaaaaaaaaaaaaa2", "aaaaaaaaaaaaaaa4"]);
        assert!(
            c.join("aaaaaaaaaaaaaaa4").exists(),
            "dry run removes nothing"
        );
        let r = prune(c, 1, false).unwrap();
        assert_eq!(ids(&r.removed), ["aaaaaaaaaaaaaaa2", "aaaaaaaaaaaaaaa4"]);
        assert!(r.freed() >= 2000);
        let kept: Vec<_> = r
            .kept
            .iter()
            .map(|(i, why)| (i.id.as_str(), *why))
            .collect();
        assert_eq!(
            kept,
            [
                ("aaaaaaaaaaaaaaa1", "among the --keep most recently used"),
                ("aaaaaaaaaaaaaaa3", "in use by a live run"),
            ]
        );
        assert!(c.join("debs").exists(), "build inputs stay");
        drop(live);
        let r = prune(c, 1, false).unwrap();
        assert_eq!(
            ids(&r.removed),
            ["aaaaaaaaaaaaaaa3"],
            "released: now removable"
        );
    }

    #[test]
    fn only_image_ids_count() {
        assert!(is_image_id("afadcbeb43405fd1"));
        assert!(!is_image_id("debs"));
        assert!(!is_image_id(".staging-x"));
        assert!(!is_image_id("AFADCBEB43405FD1"));
    }
}
