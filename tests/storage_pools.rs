//! Issue 14 item 3 against the real libvirtd (qemu:///system): `local` disks as volumes of a
//! transient `dir` pool with each format and preallocation (checked with `qemu-img info` and the
//! file's allocated blocks), teardown removing volumes and pool, the kernel/initramfs upload
//! through a libvirt stream (bytes read back, reuse by name, a size mismatch re-uploads), the
//! run's disk directory removed through the images pool, and `vmbench cleanup`'s removal of a
//! killed run's pools. The pool directories live in temporary directories under /var/tmp.

use crate::common;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use vmbench::cell::{Backend, Format};
use vmbench::image::upload::{self, Placed};
use vmbench::image::ImageInfo;
use vmbench::storage::local::{LocalBackend, Prealloc};
use vmbench::storage::pool::{self, DirPool, HostConn, PoolPlace};
use vmbench::storage::testutil::cell;
use vmbench::storage::{cmd, DiskSource, StorageBackend};

const URI: &str = "qemu:///system";
const MIB: u64 = 1 << 20;

fn scratch(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

/// A run-like pool prefix unique to this test process.
fn prefix(tag: &str) -> String {
    pool::pool_prefix(&format!("test{}-{tag}", std::process::id()))
}

fn pools_with(prefix: &str) -> Vec<String> {
    HostConn::open(URI).unwrap().pools_named(prefix).unwrap()
}

/// `qemu-img info` as (format, virtual size, actual size).
fn qemu_info(p: &Path) -> (String, u64, u64) {
    let out = cmd::run(
        "qemu-img",
        &["info", "--output=json", "-U", &p.to_string_lossy()],
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    (
        v["format"].as_str().unwrap().to_string(),
        v["virtual-size"].as_u64().unwrap(),
        v["actual-size"].as_u64().unwrap(),
    )
}

#[test]
#[ignore = "host: root libvirtd qemu e2fsprogs"]
fn volumes_with_each_format_and_preallocation_through_libvirt() {
    let dir = scratch("vmbench-pools");
    let images = dir.path().join("local");
    let size = 32 * MIB;
    for p in Prealloc::ALL {
        let place = PoolPlace {
            uri: URI.into(),
            dir: images.clone(),
            prefix: prefix("prealloc"),
        };
        let mut b = LocalBackend::on_host(place.clone(), *p);
        b.check().unwrap();
        let mut made = Vec::new();
        for fmt in [Format::Raw, Format::Qcow2] {
            let d = b
                .provision(&cell(Backend::Local, fmt), size, dir.path())
                .unwrap();
            let DiskSource::File { path } = &d.source else {
                panic!("{:?}", d.source)
            };
            assert_eq!(
                d.host_path.as_ref(),
                Some(path),
                "this machine: a host path"
            );
            let (format, virtual_size, actual) = qemu_info(path);
            assert_eq!(
                (format.as_str(), virtual_size),
                (fmt.as_str(), size),
                "{p}/{fmt}"
            );
            let method = d.params["preallocation_method"].as_str();
            let expect = match (p.effective(fmt), fmt) {
                (Prealloc::Off, _) => "sparse",
                (Prealloc::Metadata, _) => "metadata",
                (Prealloc::Full, Format::Raw) => "zeroed",
                (Prealloc::Full, _) => "falloc",
            };
            assert_eq!(method, expect, "{p}/{fmt}");
            match expect {
                "falloc" => assert!(actual >= size, "{p}/{fmt}: {actual}"),
                // qemu-img's full: every extent written, none merely reserved by fallocate.
                "zeroed" => {
                    assert!(actual >= size, "{p}/{fmt}: {actual}");
                    let frag = std::process::Command::new("filefrag")
                        .arg("-v")
                        .arg(path)
                        .output()
                        .unwrap();
                    let text = String::from_utf8_lossy(&frag.stdout);
                    assert!(frag.status.success() && text.contains("extent"), "{text}");
                    assert!(!text.contains("unwritten"), "{p}/{fmt}: {text}");
                }
                "sparse" => assert!(actual < MIB, "{p}/{fmt}: {actual}"),
                // L2 tables and refcounts written, the file as long as the disk, no data.
                _ => {
                    let len = std::fs::metadata(path).unwrap().len();
                    assert!(len >= size && actual < 4 * MIB, "{p}/{fmt}: {len} {actual}");
                }
            }
            assert_eq!(d.params["preallocation"], p.effective(fmt).as_str());
            assert_eq!(
                d.params["libvirt_allocation"],
                if matches!(expect, "falloc" | "zeroed") {
                    size
                } else {
                    0
                }
                .to_string()
            );
            assert!(
                d.params["pool"].starts_with(&place.prefix),
                "{:?}",
                d.params
            );
            made.push(path.clone());
        }
        assert_eq!(pools_with(&place.prefix).len(), 1, "one pool per backend");
        b.teardown().unwrap();
        b.teardown().unwrap();
        assert!(made.iter().all(|f| !f.exists()), "volumes left: {made:?}");
        assert!(pools_with(&place.prefix).is_empty(), "pool left");
    }
    let mode = std::fs::metadata(&images).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o711,
        "libvirt built the pool directory traversable for QEMU"
    );
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn teardown_after_libvirt_forgot_the_pool_still_removes_the_volume() {
    let dir = scratch("vmbench-pools-lost");
    let place = PoolPlace {
        uri: URI.into(),
        dir: dir.path().join("local"),
        prefix: prefix("lost"),
    };
    let mut b = LocalBackend::on_host(place.clone(), Prealloc::Off);
    let d = b
        .provision(&cell(Backend::Local, Format::Qcow2), MIB, dir.path())
        .unwrap();
    let path = d.host_path.unwrap();
    // What a host reboot does to a transient pool (a libvirtd restart keeps it): gone, files
    // kept.
    let name = d.params["pool"].clone();
    let out = common::output_within(
        std::process::Command::new("virsh").args(["-c", URI, "pool-destroy", &name]),
        common::TOOL_LIMIT,
    );
    assert!(out.status.success(), "virsh pool-destroy {name}: {out:?}");
    assert!(
        pools_with(&place.prefix).is_empty(),
        "libvirt still has the destroyed pool {name}"
    );
    assert!(path.exists());
    b.teardown().unwrap();
    assert!(!path.exists(), "{} left", path.display());
    assert!(pools_with(&place.prefix).is_empty());
}

fn random_file(path: &Path, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn upload_through_a_stream_then_reuse_and_reupload_on_a_size_mismatch() {
    let dir = scratch("vmbench-upload");
    let src = dir.path().join("initrd.zst");
    // Not a multiple of the 1 MiB send buffer: the last chunk is short.
    let bytes = random_file(&src, 3 * MIB as usize + 12345);
    let base = dir.path().join("host-dir");
    let name = upload::volume_name("initramfs", &src).unwrap();
    {
        let pool = DirPool::create(URI, &format!("{}images", prefix("up")), &base).unwrap();
        let first = upload::ensure_file(&pool, &name, &src).unwrap();
        assert!(matches!(first, Placed::Uploaded(_)), "{first:?}");
        assert_eq!(first.path(), base.join(&name));
        assert_eq!(
            pool.download(&name).unwrap(),
            bytes,
            "bytes read back differ"
        );
        assert_eq!(std::fs::read(first.path()).unwrap(), bytes);
    }
    // A new pool (a later run) on the same directory finds it by name.
    let pool = DirPool::create(URI, &format!("{}images", prefix("up2")), &base).unwrap();
    let again = upload::ensure_file(&pool, &name, &src).unwrap();
    assert!(matches!(again, Placed::Reused(_)), "{again:?}");
    // An interrupted upload leaves a wrong-sized volume: it is replaced.
    std::fs::OpenOptions::new()
        .write(true)
        .open(base.join(&name))
        .unwrap()
        .set_len(1000)
        .unwrap();
    pool.refresh().unwrap();
    let fixed = upload::ensure_file(&pool, &name, &src).unwrap();
    assert!(matches!(fixed, Placed::Uploaded(_)), "{fixed:?}");
    assert_eq!(std::fs::read(fixed.path()).unwrap(), bytes);
    drop(pool);
    assert!(pools_with(&prefix("up")).is_empty() && pools_with(&prefix("up2")).is_empty());
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn an_image_goes_to_the_host_once_and_the_run_dir_is_removed() {
    let dir = scratch("vmbench-host-image");
    let (kernel, initrd) = (dir.path().join("vmlinuz"), dir.path().join("initrd.zst"));
    let k = random_file(&kernel, 100_000);
    random_file(&initrd, 200_000);
    let initrd_full = dir.path().join("initrd-full.zst");
    random_file(&initrd_full, 300_000);
    let image = ImageInfo {
        id: "test".into(),
        dir: dir.path().to_path_buf(),
        kernel: kernel.clone(),
        initrd: initrd.clone(),
        initrd_bytes: 200_000,
        initrd_full,
        initrd_full_bytes: 300_000,
        versions: Default::default(),
    };
    let base = dir.path().join("remote-vmbench");
    let run = format!("test{}-img", std::process::id());
    let on_host = upload::ensure_on_host(URI, &base, &run, &image).unwrap();
    assert!(
        on_host.kernel.starts_with(&base),
        "{}",
        on_host.kernel.display()
    );
    assert_eq!(std::fs::read(&on_host.kernel).unwrap(), k);
    common::stamp_untouched(&on_host.kernel);
    common::stamp_untouched(&on_host.initrd);
    common::stamp_untouched(&on_host.initrd_full);
    assert!(on_host.initrd_full.starts_with(&base));
    assert_ne!(on_host.initrd_full, on_host.initrd);
    let second = upload::ensure_on_host(URI, &base, &run, &image).unwrap();
    assert_eq!(second.initrd, on_host.initrd);
    for f in [&second.kernel, &second.initrd, &second.initrd_full] {
        assert!(
            common::is_untouched(f),
            "{} was uploaded again",
            f.display()
        );
    }
    // The run's disk directory beside them: made by a cell's pool, removed at the end.
    let run_dir = base.join(format!("vmbench-{run}-h2"));
    let mut b = LocalBackend::on_host(
        PoolPlace {
            uri: URI.into(),
            dir: run_dir.clone(),
            prefix: pool::pool_prefix(&run),
        },
        Prealloc::Off,
    );
    b.provision(&cell(Backend::Local, Format::Raw), MIB, dir.path())
        .unwrap();
    b.teardown().unwrap();
    assert!(run_dir.is_dir());
    let name = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(upload::remove_run_dir(URI, &base, &run, &name).unwrap());
    assert!(!run_dir.exists());
    assert!(
        on_host.kernel.exists(),
        "the uploaded image is kept for later runs"
    );
    assert!(pools_with(&pool::pool_prefix(&run)).is_empty());
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn cleanup_destroys_a_killed_runs_pools_and_their_disks_only() {
    let dir = scratch("vmbench-pool-cleanup");
    let run = format!("test{}-killed", std::process::id());
    let disks = DirPool::create(
        URI,
        &format!("{}a", pool::pool_prefix(&run)),
        &dir.path().join("d"),
    )
    .unwrap();
    let vol = disks
        .create_volume(&pool::VolumePlan::raw_file("vmbench-x.raw", MIB))
        .unwrap();
    let theirs = dir.path().join("d/not-ours.raw");
    std::fs::write(&theirs, b"x").unwrap();
    // A killed run: nothing destroys the pool.
    std::mem::forget(disks);
    let other =
        DirPool::create(URI, &format!("{}b", prefix("alive")), &dir.path().join("o")).unwrap();
    let lines = pool::remove_leftover_pools(URI, &[pool::pool_prefix(&run)], true).unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(vol.exists(), "a dry run removes nothing");
    let lines = pool::remove_leftover_pools(URI, &[pool::pool_prefix(&run)], false).unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(!vol.exists(), "the run's disk volume stays");
    assert!(theirs.exists(), "a file vmbench did not name was removed");
    assert!(pools_with(&pool::pool_prefix(&run)).is_empty());
    assert_eq!(
        pools_with(other.name()).len(),
        1,
        "another run's pool was touched"
    );
    drop(other);
}
