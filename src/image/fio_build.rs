//! A static fio from Debian's source package, built once per (source version, flags).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{run, ImageError};

/// The source version apt would fetch for `pkg` (first `Version:` of `apt-cache showsrc`).
pub fn source_version(pkg: &str) -> Result<String, ImageError> {
    let out = run("apt-cache", &["showsrc", pkg], None)?;
    out.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| {
            ImageError::Parse(format!(
                "apt-cache showsrc {pkg}: no Version (is there a deb-src entry?)"
            ))
        })
}

/// Cache key of a build: source version and configure flags.
pub fn build_key(version: &str, flags: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(version.as_bytes());
    for f in flags {
        h.update(b"\0");
        h.update(f.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// Returns the stripped static fio for this version and flags, building it if not cached.
pub fn ensure_fio(
    cache: &Path,
    pkg: &str,
    version: &str,
    flags: &[String],
    jobs: u32,
    force: bool,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, ImageError> {
    let out_dir = cache.join("fio").join(build_key(version, flags));
    let out = out_dir.join("fio");
    if out.exists() && !force {
        return Ok(out);
    }
    let src_root = cache.join("src").join(format!("{pkg}_{version}"));
    if force || find_tree(&src_root).is_none() {
        let _ = std::fs::remove_dir_all(&src_root);
        std::fs::create_dir_all(&src_root).map_err(|e| ImageError::io(&src_root, e))?;
        progress(&format!("fetching {pkg} {version} source"));
        run(
            "apt-get",
            &["source", "--download-only", &format!("{pkg}={version}")],
            Some(&src_root),
        )?;
        let dsc = std::fs::read_dir(&src_root)
            .map_err(|e| ImageError::io(&src_root, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.ends_with(".dsc"))
            .ok_or_else(|| ImageError::Parse(format!("no .dsc in {}", src_root.display())))?;
        run("dpkg-source", &["-x", &dsc, "tree"], Some(&src_root))?;
    }
    let tree =
        find_tree(&src_root).ok_or_else(|| ImageError::Parse("fio source tree missing".into()))?;
    progress(&format!(
        "building static fio {version} (configure + make -j{jobs})"
    ));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    run("./configure", &flags, Some(&tree))?;
    run("make", &[&format!("-j{jobs}"), "fio"], Some(&tree))?;
    let built = tree.join("fio");
    let bytes = std::fs::read(&built).map_err(|e| ImageError::io(&built, e))?;
    if super::elf::has_interp(&bytes).map_err(|e| ImageError::Parse(e.to_string()))? {
        return Err(ImageError::NotStatic(built));
    }
    let tmp = cache
        .join("fio")
        .join(format!(".tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| ImageError::io(&tmp, e))?;
    std::fs::copy(&built, tmp.join("fio")).map_err(|e| ImageError::io(&built, e))?;
    run("strip", &["fio"], Some(&tmp))?;
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::rename(&tmp, &out_dir).map_err(|e| ImageError::io(&out_dir, e))?;
    Ok(out)
}

fn find_tree(src_root: &Path) -> Option<PathBuf> {
    let t = src_root.join("tree");
    t.join("configure").exists().then_some(t)
}

/// `fio --version` of a binary (runs on the host; it is static).
pub fn version_of(fio: &Path) -> Result<String, ImageError> {
    Ok(run(&fio.to_string_lossy(), &["--version"], None)?
        .trim()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_version_and_flags() {
        let f = vec!["--build-static".to_string()];
        let k = build_key("3.33-3", &f);
        assert_eq!(k.len(), 16);
        assert_ne!(k, build_key("3.33-4", &f));
        assert_ne!(k, build_key("3.33-3", &[]));
        assert_eq!(k, build_key("3.33-3", &f));
    }
}
