//! Host binaries and the shared libraries they need, placed in a merged-/usr image.

use std::path::{Path, PathBuf};

use super::{run, ImageError};

/// Directories searched for a named host binary.
const BIN_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The host path of binary `name`.
pub fn find_binary(name: &str) -> Result<PathBuf, ImageError> {
    BIN_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            ImageError::Parse(format!(
                "binary {name} not found in {BIN_DIRS:?}; is its package installed?"
            ))
        })
}

/// Parses `ldd` output into the library paths it names (the interpreter included).
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Libraries (and interpreter) of a dynamic binary.
pub fn libraries(bin: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let out = run("ldd", &[&bin.to_string_lossy()], None)?;
    if let Some(l) = out.lines().find(|l| l.contains("not found")) {
        return Err(ImageError::Parse(format!(
            "{}: library {}",
            bin.display(),
            l.trim()
        )));
    }
    Ok(parse_ldd(&out))
}

/// Where a host path goes in the image: the image is merged-/usr (`/lib` -> `usr/lib`), so
/// top-level bin, sbin, lib, lib64 map under `usr/`. Returned without a leading `/`.
pub fn image_path(host: &Path) -> String {
    let s = host.to_string_lossy();
    let s = s.trim_start_matches('/');
    for top in ["bin/", "sbin/", "lib/", "lib64/"] {
        if s.starts_with(top) {
            return format!("usr/{s}");
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_parsed() {
        let t = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n\tlibmissing.so => not found\n";
        assert_eq!(
            parse_ldd(t),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    #[ignore = "host: e2fsprogs"]
    fn real_mke2fs_needs_libc() {
        let libs = libraries(&find_binary("mke2fs").unwrap()).unwrap();
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
    }

    #[test]
    fn paths_map_into_merged_usr() {
        assert_eq!(
            image_path(Path::new("/lib64/ld-linux-x86-64.so.2")),
            "usr/lib64/ld-linux-x86-64.so.2"
        );
        assert_eq!(image_path(Path::new("/usr/sbin/mke2fs")), "usr/sbin/mke2fs");
        assert_eq!(image_path(Path::new("/sbin/mkfs.xfs")), "usr/sbin/mkfs.xfs");
        assert_eq!(image_path(Path::new("/etc/x")), "etc/x");
    }
}
