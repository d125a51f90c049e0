//! The directories a guest's files live in. libvirt runs QEMU as `libvirt-qemu`, which must
//! reach disk images through every directory of their path (o+x) and must own the directory it
//! binds the agent socket in.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// `parent/chan`, the agent socket's directory: QEMU binds the socket itself, so the directory
/// belongs to `libvirt-qemu` (when that user exists) and is private to it (0700).
pub fn make_channel_dir(parent: &Path) -> std::io::Result<PathBuf> {
    let d = std::path::absolute(parent.join("chan"))?;
    make_dir(&d, 0o700)?;
    if let Ok(Some(u)) = nix::unistd::User::from_name("libvirt-qemu") {
        nix::unistd::chown(&d, Some(u.uid), Some(u.gid)).map_err(std::io::Error::from)?;
    }
    Ok(d)
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
        let c = make_channel_dir(&w).unwrap();
        assert_eq!(c, w.join("chan"));
        assert_eq!(mode(&c), 0o700);
    }
}
