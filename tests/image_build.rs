//! Builds the real guest image (needs root, the Debian mirror and a deb-src entry) and checks
//! the size budget and that a second `ensure` is a cache hit.

use std::time::{Duration, Instant};

use vmbench::image::{default_cache_dir, ensure, ImageRequest};

#[test]
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
