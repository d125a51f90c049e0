//! What apt and dpkg say about the image's inputs (the kernel package and its version, each
//! binary package's installed version, fio's source version), cached beside the images and
//! reused while apt's and dpkg's state is unchanged.
//!
//! Why: every `vmbench matrix` resolves the image id, and where apt keeps no binary cache
//! (Debian's container images) each apt-cache call rebuilds it: 0.7 s per call here. The facts
//! change only when apt's lists, its configuration or dpkg's database change, so their files'
//! sizes and modification times are the cache key (a stat each, well under a millisecond).

use super::{dpkg_version, fio_build, kernel, recipe, ImageError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file the facts are kept in, under the image cache.
const FILE: &str = "apt-facts.json";
/// Where apt's and dpkg's answers come from: a change to any file here may change them.
const STATE: [&str; 3] = ["/var/lib/apt/lists", "/etc/apt", "/var/lib/dpkg/status"];

/// The answers, and the state they were read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AptFacts {
    /// The apt/dpkg state and recipe these answers belong to.
    pub key: String,
    /// The versioned kernel package behind the recipe's meta package.
    pub kernel_pkg: String,
    /// Its candidate version.
    pub kernel_version: String,
    /// Installed version of each binary package the image copies from.
    pub packages: BTreeMap<String, String>,
    /// fio's source package version.
    pub fio_version: String,
}

/// The facts for `recipe`: from `cache/apt-facts.json` when apt's and dpkg's state is what it
/// was, else asked again (and kept; a cache that cannot be written is only slower).
pub fn facts(cache: &Path, recipe: &recipe::Recipe) -> Result<AptFacts, ImageError> {
    let key = state_key(&STATE.map(PathBuf::from));
    let file = cache.join(FILE);
    let kept = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice::<AptFacts>(&b).ok());
    if let Some(f) = kept.filter(|f| f.key == key) {
        return Ok(f);
    }
    let f = ask(recipe, key)?;
    let _ = write_atomic(&file, &f);
    Ok(f)
}

fn ask(recipe: &recipe::Recipe, key: String) -> Result<AptFacts, ImageError> {
    let (kernel_pkg, kernel_version) = kernel::resolve_package(&recipe.kernel.package)?;
    let mut packages = BTreeMap::new();
    for p in recipe
        .binaries
        .iter()
        .map(|b| &b.package)
        .chain([&recipe.busybox.package])
    {
        packages.insert(p.clone(), dpkg_version(p)?);
    }
    let fio_version = fio_build::source_version(&recipe.fio.source_package)?;
    Ok(AptFacts {
        key,
        kernel_pkg,
        kernel_version,
        packages,
        fio_version,
    })
}

/// A hash of the recipe and of every file under `roots`: path, size, modification time.
fn state_key(roots: &[PathBuf]) -> String {
    let mut h = Sha256::new();
    h.update(recipe::RECIPE_TEXT.as_bytes());
    let mut files = Vec::new();
    for r in roots {
        walk(r, &mut files);
    }
    files.sort();
    for f in files {
        let Ok(m) = std::fs::metadata(&f) else {
            continue;
        };
        let mtime = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.update(f.as_os_str().as_encoded_bytes());
        h.update(format!("\0{}\0{mtime}\n", m.len()).as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Every file under `p` (or `p` itself), without following symlinked directories.
fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                walk(&e.path(), out);
            }
        }
        Ok(_) => out.push(p.to_path_buf()),
        Err(_) => {}
    }
}

fn write_atomic(file: &Path, f: &AptFacts) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&tmp, f)?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_every_file_of_the_state() {
        let d = tempfile::tempdir().unwrap();
        let lists = d.path().join("lists");
        std::fs::create_dir_all(lists.join("partial")).unwrap();
        std::fs::write(lists.join("a_Packages"), "x").unwrap();
        let roots = [lists.clone(), d.path().join("status")];
        let k1 = state_key(&roots);
        assert_eq!(state_key(&roots), k1, "stable");
        std::fs::write(lists.join("partial/b"), "y").unwrap();
        let k2 = state_key(&roots);
        assert_ne!(k2, k1, "a new file in a subdirectory");
        std::fs::write(lists.join("a_Packages"), "xx").unwrap();
        let k3 = state_key(&roots);
        assert_ne!(k3, k2, "a file that changed size");
        std::fs::write(d.path().join("status"), "").unwrap();
        assert_ne!(state_key(&roots), k3, "a state file that appeared");
    }

    #[test]
    fn kept_facts_are_used_only_under_their_key() {
        let d = tempfile::tempdir().unwrap();
        let kept = AptFacts {
            key: "stale".into(),
            kernel_pkg: "linux-image-0-amd64".into(),
            kernel_version: "0".into(),
            packages: BTreeMap::new(),
            fio_version: "0".into(),
        };
        write_atomic(&d.path().join(FILE), &kept).unwrap();
        let back: AptFacts =
            serde_json::from_slice(&std::fs::read(d.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(back, kept);
        // The live key is never "stale", so `facts` would ask apt again.
        assert_ne!(state_key(&STATE.map(PathBuf::from)), kept.key);
    }
}
