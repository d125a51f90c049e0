//! Builds the real guest image (needs root, the Debian mirror and a deb-src entry) and checks
//! the size budget and that a second `ensure` is a cache hit.

mod common;
use std::time::{Duration, Instant};

use vmbench::image::{default_cache_dir, ensure, ImageRequest};

#[test]
#[ignore = "host: root qemu"]
fn image_builds_under_budget_and_is_cached() {
    let req = ImageRequest {
        cache_dir: default_cache_dir(),
        agent: None,
        force: false,
    };
    let log = |m: &str| eprintln!("image: {m}");
    let first = ensure(&req, &log).expect("image build");
    assert!(
        first.initrd_bytes < 10 * 1024 * 1024,
        "initrd is {} bytes",
        first.initrd_bytes
    );
    assert_eq!(
        std::fs::metadata(&first.initrd).unwrap().len(),
        first.initrd_bytes
    );
    assert!(first.kernel.exists());
    assert!(
        first
            .versions
            .get("fio")
            .is_some_and(|v| v.starts_with("fio-")),
        "{:?}",
        first.versions
    );
    for k in [
        "kernel",
        "bonnie++",
        "e2fsprogs",
        "xfsprogs",
        "busybox",
        "agent",
    ] {
        assert!(
            first.versions.contains_key(k),
            "versions lack {k}: {:?}",
            first.versions
        );
    }
    let manifest: vmbench::image::ImageInfo =
        serde_json::from_slice(&std::fs::read(first.dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest, first);

    let t = Instant::now();
    let second = ensure(&req, &log).expect("cached ensure");
    let took = t.elapsed();
    assert_eq!(second.id, first.id);
    assert_eq!(second, first);
    assert!(took < Duration::from_secs(30), "warm ensure took {took:?}");
    eprintln!("initrd {} bytes, warm ensure {took:?}", first.initrd_bytes);
}

/// The builder derives dependencies from each module's `.modinfo` (Debian's package has no
/// modules.dep and the build host has no depmod); check that against real depmod output for
/// the same kernel (the fixture), module by module, as transitive sets.
#[test]
#[ignore = "host: root"]
fn modinfo_dependencies_match_depmod() {
    use std::collections::{BTreeMap, BTreeSet};
    use vmbench::image::kernel;

    let fixture = include_str!("fixtures/modules.dep.6.1.0-57-amd64");
    let (pkg, version) = kernel::resolve_package("linux-image-amd64").unwrap();
    if pkg != "linux-image-6.1.0-57-amd64" {
        return common::skip(&format!(
            "fixture is for linux-image-6.1.0-57-amd64, mirror has {pkg}: regenerate it"
        ));
    }
    let deb = kernel::download(&pkg, &version, &default_cache_dir().join("debs"), false).unwrap();
    let root = tempfile::tempdir().unwrap();
    kernel::extract(&deb, root.path()).unwrap();
    let rel = kernel::release(root.path()).unwrap();
    let moddir = root.path().join("lib/modules").join(&rel);
    let builtin =
        kernel::parse_builtin(&std::fs::read_to_string(moddir.join("modules.builtin")).unwrap());
    let wanted = vmbench::image::recipe::Recipe::embedded()
        .unwrap()
        .kernel
        .modules;
    let ours = kernel::collect(&moddir, &wanted, &builtin).unwrap();
    let real = kernel::parse_modules_dep(fixture).unwrap();
    fn closure(n: &str, m: &BTreeMap<String, kernel::ModInfo>, out: &mut BTreeSet<String>) {
        for d in &m[n].depends {
            if out.insert(d.clone()) {
                closure(d, m, out);
            }
        }
    }
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        real.keys().collect::<Vec<_>>()
    );
    for (name, info) in &ours {
        assert_eq!(info.path, real[name].path);
        let mut c = BTreeSet::new();
        closure(name, &ours, &mut c);
        let want: BTreeSet<String> = real[name].depends.iter().cloned().collect();
        assert_eq!(c, want, "dependencies of {name}");
    }
}
