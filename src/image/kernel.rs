//! The guest kernel: resolve Debian's versioned kernel package, download and unpack it, and
//! order the wanted modules by their dependencies.
//!
//! Debian's package ships no modules.dep (depmod makes it at install time, and kmod is not on
//! the build host), so dependencies come from each module's own `.modinfo` `depends=` field,
//! which is what modpost wrote when the kernel was built. [`modules_dep_text`] renders them in
//! modules.dep form, and [`parse_modules_dep`] reads that form back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::{elf, run, ImageError};

/// A module's place in the tree and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModInfo {
    /// Path relative to /lib/modules/<release>/.
    pub path: String,
    /// Names of the modules it depends on.
    pub depends: Vec<String>,
}

/// The name the kernel uses for a module file or name: basename without `.ko*`, `-` as `_`.
pub fn mod_name(path_or_name: &str) -> String {
    let base = path_or_name.rsplit('/').next().unwrap_or(path_or_name);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

/// META's candidate -> the versioned package behind it and its version, from one `apt-cache
/// show` (Debian's meta package depends on exactly one `linux-image-ABI (= VERSION)`). One call,
/// not `depends` then `show`: where apt keeps no binary cache (Debian's container images),
/// every apt-cache call rebuilds it, about 0.7 s here, and every `vmbench matrix` resolves this.
pub fn resolve_package(meta: &str) -> Result<(String, String), ImageError> {
    let show = run("apt-cache", &["show", "--no-all-versions", meta], None)?;
    if let Some(found) = pinned_image_dependency(&show) {
        return Ok(found);
    }
    // A meta package without an exact pin (not Debian's): its dependency's own candidate.
    let deps = run("apt-cache", &["depends", meta], None)?;
    let pkg = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| p.trim().to_string())
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            ImageError::Parse(format!(
                "apt-cache depends {meta}: no linux-image-* dependency"
            ))
        })?;
    let version = package_version(&pkg)?;
    Ok((pkg, version))
}

/// `linux-image-X (= V)` in the `Depends:` field of an `apt-cache show` record.
fn pinned_image_dependency(show: &str) -> Option<(String, String)> {
    let deps = show.lines().find_map(|l| l.strip_prefix("Depends:"))?;
    deps.split(',').find_map(|d| {
        let (name, rest) = d.trim().split_once(' ')?;
        let version = rest.trim().strip_prefix("(=")?.strip_suffix(')')?.trim();
        (name.starts_with("linux-image-") && !version.is_empty())
            .then(|| (name.to_string(), version.to_string()))
    })
}

/// The candidate version apt would download for `pkg`.
pub fn package_version(pkg: &str) -> Result<String, ImageError> {
    let show = run("apt-cache", &["show", "--no-all-versions", pkg], None)?;
    show.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| ImageError::Parse(format!("apt-cache show {pkg}: no Version")))
}

/// Downloads `pkg=version` into `debs` unless it is there already; returns the .deb path.
pub fn download(pkg: &str, version: &str, debs: &Path, force: bool) -> Result<PathBuf, ImageError> {
    std::fs::create_dir_all(debs).map_err(|e| ImageError::io(debs, e))?;
    let file = debs.join(format!("{pkg}_{}_amd64.deb", version.replace(':', "%3a")));
    if file.exists() && !force {
        return Ok(file);
    }
    run(
        "apt-get",
        &["download", &format!("{pkg}={version}")],
        Some(debs),
    )?;
    if !file.exists() {
        return Err(ImageError::Parse(format!(
            "apt-get download did not produce {}",
            file.display()
        )));
    }
    Ok(file)
}

/// Unpacks a .deb into `dest` with dpkg-deb.
pub fn extract(deb: &Path, dest: &Path) -> Result<(), ImageError> {
    let (d, t) = (deb.to_string_lossy(), dest.to_string_lossy());
    run("dpkg-deb", &["-x", &d, &t], None).map(|_| ())
}

/// The single kernel release under `<root>/lib/modules`.
pub fn release(root: &Path) -> Result<String, ImageError> {
    let dir = root.join("lib/modules");
    let rd = std::fs::read_dir(&dir).map_err(|e| ImageError::io(&dir, e))?;
    let mut rels: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("modules.builtin").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    rels.sort();
    match rels.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(ImageError::Parse(format!(
            "expected one kernel release in {}, found {rels:?}",
            dir.display()
        ))),
    }
}

/// Names listed in modules.builtin (built into the kernel, never loaded).
pub fn parse_builtin(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(mod_name)
        .collect()
}

/// Parses modules.dep text (`path: dep-path dep-path`) into name -> info.
pub fn parse_modules_dep(text: &str) -> Result<BTreeMap<String, ModInfo>, ImageError> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (path, deps) = line.split_once(':').ok_or_else(|| {
            ImageError::Parse(format!("modules.dep line {}: no ':' in {line:?}", n + 1))
        })?;
        let depends = deps.split_whitespace().map(mod_name).collect();
        out.insert(
            mod_name(path),
            ModInfo {
                path: path.trim().to_string(),
                depends,
            },
        );
    }
    Ok(out)
}

/// Renders name -> info as modules.dep text (dependencies by path).
pub fn modules_dep_text(mods: &BTreeMap<String, ModInfo>) -> String {
    let mut s = String::new();
    for m in mods.values() {
        let deps: Vec<&str> = m
            .depends
            .iter()
            .filter_map(|d| mods.get(d).map(|i| i.path.as_str()))
            .collect();
        s.push_str(&format!("{}: {}\n", m.path, deps.join(" ")).replace(": \n", ":\n"));
    }
    s
}

/// Module name -> relative path, for every module file under `moddir/kernel`.
pub fn index_tree(moddir: &Path) -> Result<HashMap<String, String>, ImageError> {
    let mut out = HashMap::new();
    let mut stack = vec![moddir.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| ImageError::io(&d, e))? {
            let e = e.map_err(|e| ImageError::io(&d, e))?;
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains(".ko") {
                let rel = p
                    .strip_prefix(moddir)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                out.insert(mod_name(&rel), rel);
            }
        }
    }
    Ok(out)
}

/// Reads a module file, decompressing `.ko.xz` (finit_module wants a plain ELF here).
pub fn read_module(path: &Path) -> Result<Vec<u8>, ImageError> {
    if path.extension().is_some_and(|e| e == "xz") {
        let p = path.to_string_lossy();
        return super::run_bytes("xz", &["-dc", &p]);
    }
    std::fs::read(path).map_err(|e| ImageError::io(path, e))
}

/// The compressed kernel inside a bzImage (boot protocol >= 2.08: `payload_offset` and
/// `payload_length`, from the start of the protected-mode code).
pub fn bzimage_payload(bz: &[u8]) -> Option<&[u8]> {
    let u16_at = |o: usize| bz.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        bz.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
    };
    if bz.get(0x202..0x206)? != b"HdrS" || u16_at(0x206)? < 0x208 {
        return None;
    }
    let setup_sects = match *bz.get(0x1F1)? {
        0 => 4,
        n => n as usize,
    };
    let start = (setup_sects + 1) * 512 + u32_at(0x248)?;
    bz.get(start..start.checked_add(u32_at(0x24C)?)?)
}

/// The uncompressed kernel ELF of a bzImage when it can boot through PVH (QEMU then loads it
/// directly: under TCG the firmware and the decompression took about 4 s of every boot), or
/// `None` when the payload is not xz or the kernel has no PVH entry. `scratch` holds the
/// payload while `xz` decompresses it.
pub fn pvh_vmlinux(bz: &[u8], scratch: &Path) -> Result<Option<Vec<u8>>, ImageError> {
    let Some(payload) = bzimage_payload(bz) else {
        return Ok(None);
    };
    if !payload.starts_with(b"\xfd7zXZ\x00") {
        return Ok(None);
    }
    let file = scratch.join("vmlinux.xz");
    std::fs::write(&file, payload).map_err(|e| ImageError::io(&file, e))?;
    // The kernel's build appends the uncompressed size after the xz stream.
    let elf = super::run_bytes("xz", &["-dc", "--single-stream", &file.to_string_lossy()])?;
    let _ = std::fs::remove_file(&file);
    let pvh = super::elf::has_pvh_entry(&elf).map_err(|e| ImageError::Parse(e.to_string()))?;
    Ok(pvh.then_some(elf))
}

/// The `depends=` list of a module's `.modinfo` section.
pub fn modinfo_depends(module: &[u8]) -> Result<Vec<String>, ImageError> {
    let info = elf::section(module, ".modinfo")
        .map_err(|e| ImageError::Parse(e.to_string()))?
        .unwrap_or_default();
    Ok(info
        .split(|&b| b == 0)
        .filter_map(|f| f.strip_prefix(b"depends="))
        .flat_map(|d| {
            String::from_utf8_lossy(d)
                .split(',')
                .map(mod_name)
                .collect::<Vec<_>>()
        })
        .filter(|d| !d.is_empty())
        .collect())
}

/// Collects `wanted` and everything they need from the module tree (reading `.modinfo`),
/// skipping built-ins. Errors name modules that are neither in the tree nor built in.
pub fn collect(
    moddir: &Path,
    wanted: &[String],
    builtin: &BTreeSet<String>,
) -> Result<BTreeMap<String, ModInfo>, ImageError> {
    let index = index_tree(moddir)?;
    let mut out = BTreeMap::new();
    let mut todo: Vec<String> = wanted.iter().map(|w| mod_name(w)).collect();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) || builtin.contains(&name) {
            continue;
        }
        let path = index
            .get(&name)
            .ok_or_else(|| ImageError::UnknownModule(name.clone()))?;
        let depends = modinfo_depends(&read_module(&moddir.join(path))?)?;
        todo.extend(depends.iter().cloned());
        out.insert(
            name,
            ModInfo {
                path: path.clone(),
                depends,
            },
        );
    }
    Ok(out)
}

/// Load order for `wanted`: every module after its dependencies (depth-first), built-ins
/// skipped, each once. Fails on an unknown module or a dependency cycle.
pub fn load_order(
    wanted: &[String],
    mods: &BTreeMap<String, ModInfo>,
    builtin: &BTreeSet<String>,
) -> Result<Vec<String>, ImageError> {
    fn visit(
        n: &str,
        mods: &BTreeMap<String, ModInfo>,
        builtin: &BTreeSet<String>,
        state: &mut HashMap<String, bool>,
        out: &mut Vec<String>,
    ) -> Result<(), ImageError> {
        if builtin.contains(n) {
            return Ok(());
        }
        match state.get(n) {
            Some(true) => return Ok(()),
            Some(false) => {
                return Err(ImageError::Parse(format!(
                    "module dependency cycle through {n}"
                )))
            }
            None => {}
        }
        let m = mods
            .get(n)
            .ok_or_else(|| ImageError::UnknownModule(n.to_string()))?;
        state.insert(n.to_string(), false);
        for d in &m.depends {
            visit(d, mods, builtin, state, out)?;
        }
        state.insert(n.to_string(), true);
        out.push(m.path.clone());
        Ok(())
    }
    let mut state = HashMap::new();
    let mut out = Vec::new();
    for w in wanted {
        visit(&mod_name(w), mods, builtin, &mut state, &mut out)?;
    }
    Ok(out)
}

/// Load orders for the modules loaded at boot and for those loaded on demand later: each list
/// has every module after its dependencies, and the second leaves out what boot loaded.
pub fn boot_and_on_demand_order(
    boot: &[String],
    on_demand: &[String],
    mods: &BTreeMap<String, ModInfo>,
    builtin: &BTreeSet<String>,
) -> Result<(Vec<String>, Vec<String>), ImageError> {
    let at_boot = load_order(boot, mods, builtin)?;
    let every: Vec<String> = boot.iter().chain(on_demand).cloned().collect();
    let later = load_order(&every, mods, builtin)?
        .into_iter()
        .filter(|m| !at_boot.contains(m))
        .collect();
    Ok((at_boot, later))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_packages_pinned_dependency_is_the_image() {
        // `apt-cache show --no-all-versions linux-image-amd64`, Debian 12.
        let show = include_str!("../../tests/fixtures/apt-cache-show-linux-image-amd64.txt");
        let (pkg, version) = pinned_image_dependency(show).unwrap();
        assert!(
            pkg.starts_with("linux-image-6.1.0-") && pkg.ends_with("-amd64"),
            "{pkg}"
        );
        assert!(
            show.contains(&format!("Depends: {pkg} (= {version})")),
            "{version}"
        );
        assert_eq!(
            pinned_image_dependency("Depends: linux-image-6.1.0-1-amd64\n"),
            None
        );
        assert_eq!(pinned_image_dependency("Package: x\n"), None);
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            mod_name("kernel/drivers/block/xen-blkfront.ko"),
            "xen_blkfront"
        );
        assert_eq!(mod_name("kernel/fs/xfs/xfs.ko.xz"), "xfs");
        assert_eq!(mod_name("virtio_pci"), "virtio_pci");
    }

    #[test]
    fn order_puts_dependencies_first_and_skips_builtins() {
        let dep = "kernel/a.ko: kernel/b.ko kernel/c.ko\nkernel/b.ko: kernel/c.ko\nkernel/c.ko:\nkernel/d.ko: kernel/e.ko\n";
        let mods = parse_modules_dep(dep).unwrap();
        let builtin: BTreeSet<String> = ["e".to_string()].into();
        let o = load_order(&["a".into(), "d".into(), "b".into()], &mods, &builtin).unwrap();
        assert_eq!(
            o,
            ["kernel/c.ko", "kernel/b.ko", "kernel/a.ko", "kernel/d.ko"]
        );
        assert!(matches!(
            load_order(&["zz".into()], &mods, &builtin),
            Err(ImageError::UnknownModule(_))
        ));
    }

    #[test]
    fn cycles_are_errors() {
        let mods = parse_modules_dep("x.ko: y.ko\ny.ko: x.ko\n").unwrap();
        assert!(load_order(&["x".into()], &mods, &BTreeSet::new()).is_err());
    }

    #[test]
    fn modules_dep_round_trips() {
        let dep = "kernel/a.ko: kernel/b.ko\nkernel/b.ko:\n";
        let mods = parse_modules_dep(dep).unwrap();
        assert_eq!(modules_dep_text(&mods), dep);
        assert!(parse_modules_dep("garbage line\n").is_err());
    }
}
