//! The directories a guest's files live in. libvirt runs QEMU as `libvirt-qemu`, which must
//! reach disk images through every directory of their path (o+x).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Creates `p` (and its parents) with `mode`.
pub fn make_dir(p: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// A work directory: reachable by QEMU's user (o+x, 0711) but not listable by others. A 0700
/// directory would lock QEMU out of the images in it.
pub fn make_work_dir(p: &Path) -> std::io::Result<()> {
    make_dir(p, 0o711)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path().join("a/work");
        make_work_dir(&w).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&w), 0o711);
    }
}
