//! Module load order computed from a real modules.dep excerpt of the guest kernel.

use std::collections::BTreeSet;

use vmbench::image::kernel::{boot_and_on_demand_order, load_order, parse_modules_dep};
use vmbench::image::recipe::Recipe;

const DEP: &str = include_str!("fixtures/modules.dep.6.1.0-57-amd64");

#[test]
fn recipe_modules_load_after_all_their_dependencies() {
    let mods = parse_modules_dep(DEP).unwrap();
    let k = Recipe::embedded().unwrap().kernel;
    let wanted: Vec<String> = k
        .modules
        .iter()
        .chain(&k.on_demand_all())
        .cloned()
        .collect();
    let order = load_order(&wanted, &mods, &BTreeSet::new()).unwrap();
    let pos = |p: &str| {
        order
            .iter()
            .position(|o| o == p)
            .unwrap_or_else(|| panic!("{p} not in {order:?}"))
    };
    // Every module comes after every module its modules.dep line names (depmod lists the
    // transitive closure, so this checks the whole chain).
    for m in mods.values() {
        let Some(me) = order.iter().position(|o| *o == m.path) else {
            continue;
        };
        for d in &m.depends {
            assert!(
                pos(&mods[d].path) < me,
                "{} loads before its dependency {d}",
                m.path
            );
        }
    }
    assert!(pos("kernel/drivers/virtio/virtio_ring.ko") < pos("kernel/drivers/virtio/virtio.ko"));
    assert!(pos("kernel/fs/jbd2/jbd2.ko") < pos("kernel/fs/ext4/ext4.ko"));
    assert!(pos("kernel/crypto/crc32c_generic.ko") < pos("kernel/lib/libcrc32c.ko"));
    assert!(pos("kernel/lib/libcrc32c.ko") < pos("kernel/fs/xfs/xfs.ko"));
    let unique: BTreeSet<&String> = order.iter().collect();
    assert_eq!(unique.len(), order.len(), "a module is listed twice");
    assert!(order.iter().any(|o| o.ends_with("xen-blkfront.ko")));
}

/// Boot loads the virtio drivers and nothing of the filesystems; the on-demand list (with the
/// extra archive's) has the filesystems after their dependencies and repeats nothing boot
/// loaded; the base archive's list has ext4 and none of xfs, device-mapper or virtio-fs.
#[test]
fn on_demand_modules_wait_and_keep_their_order() {
    let mods = parse_modules_dep(DEP).unwrap();
    let k = Recipe::embedded().unwrap().kernel;
    let (_, base) =
        boot_and_on_demand_order(&k.modules, &k.on_demand, &mods, &BTreeSet::new()).unwrap();
    assert!(base.iter().any(|m| m.ends_with("/ext4.ko")), "{base:?}");
    for m in ["/xfs.ko", "/dm-mod.ko", "/virtiofs.ko", "/fuse.ko"] {
        assert!(!base.iter().any(|b| b.ends_with(m)), "{m} in {base:?}");
    }
    let (boot, later) =
        boot_and_on_demand_order(&k.modules, &k.on_demand_all(), &mods, &BTreeSet::new()).unwrap();
    assert!(
        boot.iter().any(|m| m.ends_with("virtio_console.ko")),
        "{boot:?}"
    );
    assert!(
        !boot.iter().any(|m| m.starts_with("kernel/fs/")),
        "{boot:?}"
    );
    assert!(!later.iter().any(|m| boot.contains(m)), "{later:?}");
    // crc32c_generic is loaded at boot, so the on-demand list must not load it again, yet
    // libcrc32c (xfs's dependency) is there, before xfs.
    assert!(!later.iter().any(|m| m.ends_with("crc32c_generic.ko")));
    let pos = |p: &str| later.iter().position(|o| o == p).unwrap();
    assert!(pos("kernel/fs/jbd2/jbd2.ko") < pos("kernel/fs/ext4/ext4.ko"));
    assert!(pos("kernel/lib/libcrc32c.ko") < pos("kernel/fs/xfs/xfs.ko"));
    assert!(pos("kernel/fs/fuse/fuse.ko") < pos("kernel/fs/fuse/virtiofs.ko"));
    assert!(later.iter().any(|m| m.ends_with("dm-mod.ko")));
}

#[test]
fn builtin_modules_are_skipped() {
    let mods = parse_modules_dep(DEP).unwrap();
    let builtin: BTreeSet<String> = ["virtio_ring".to_string()].into();
    let order = load_order(&["virtio_blk".to_string()], &mods, &builtin).unwrap();
    assert!(
        !order.iter().any(|o| o.contains("virtio_ring")),
        "{order:?}"
    );
    assert_eq!(
        order.last().map(String::as_str),
        Some("kernel/drivers/block/virtio_blk.ko")
    );
}
