//! Integration tests of the storage backends against real servers and tools: ganesha, tgtd,
//! qemu-img, loop devices. Needs root and the packages of scripts/setup-host. Every test
//! cleans up through Drop guards (servers stop on drop, temp dirs are removed), and checks that
//! no process, file or loop device it started is left.

use crate::common;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use vmbench::cell::{Backend, Format};
use vmbench::storage::cmd;
use vmbench::storage::ganesha::{Ganesha, EXPORT_GID, EXPORT_UID};
use vmbench::storage::iscsi::IscsiBackend;
use vmbench::storage::leftovers::{self, Leftover};
use vmbench::storage::local::{LocalBackend, Prealloc};
use vmbench::storage::netns::NetNs;
use vmbench::storage::nfs::NfsBackend;
use vmbench::storage::testutil::cell;
use vmbench::storage::tgt::{tgt_targets, Tgt};
use vmbench::storage::{DiskSource, NetAuth, NetProtocol, StorageBackend};

/// Ganesha tests assert what rpcbind processes exist: tests that start it take this lock.
static NFS_PORT_LOCK: Mutex<()> = Mutex::new(());

/// A fresh unshaped namespace for one server (as a run's `loopback` link).
fn net(tag: &str) -> Arc<NetNs> {
    let run = format!("test{}-{tag}", std::process::id());
    Arc::new(NetNs::create(&run, vmbench::cell::Link::Loopback).expect("namespace"))
}

/// Whether a TCP listener on `port` exists in this (the host's) network namespace.
fn host_listens(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(3) == Some(&"0A") && f[1].ends_with(&want)
            })
    })
}

const MIB: u64 = 1024 * 1024;

fn work_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

/// `qemu-img info` of a target, as (format, virtual size).
fn qemu_info(target: &str) -> (String, u64) {
    let out = cmd::run("qemu-img", &["info", "--output=json", target]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    (
        v["format"].as_str().unwrap().to_string(),
        v["virtual-size"].as_u64().unwrap(),
    )
}

/// Live processes named `comm` whose parent is this test process: what a test leaves behind.
fn our_children_named(comm: &str) -> Vec<u32> {
    let me = std::process::id().to_string();
    cmd::pids_named(comm)
        .into_iter()
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            after.split_whitespace().nth(1) == Some(me.as_str())
        })
        .collect()
}

/// Writes a pattern and reads it back through QEMU's block layer (`qemu-io`, with `cache`),
/// the path a guest's I/O takes.
fn qemu_io_roundtrip(target: &str, fmt: Format, cache: &str) {
    let args = [
        "-f",
        fmt.as_str(),
        "-t",
        cache,
        "-c",
        "write -P 0xa5 1M 1M",
        "-c",
        "read -P 0xa5 1M 1M",
        target,
    ];
    let out = cmd::run("qemu-io", &args).unwrap();
    assert!(
        !out.contains("Pattern verification failed"),
        "{target}: {out}"
    );
    assert!(
        out.contains("read 1048576/1048576 bytes"),
        "{target}: {out}"
    );
}

#[test]
#[ignore = "host: root qemu ganesha"]
fn ganesha_embedded_and_external_nfs() {
    let _lock = NFS_PORT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let rpcbind_before = cmd::pids_named("rpcbind");
    let work = work_dir("vmbench-nfs");
    let n = net("nfs");
    let ns_name = n.name().to_string();
    let g = Arc::new(Ganesha::start(work.path(), n).expect("ganesha starts"));
    let pid = g.pid();
    assert!(
        g.started_rpcbind(),
        "ganesha gets its own rpcbind in its namespace"
    );
    assert!(cmd::pids_named("ganesha.nfsd").contains(&pid));
    assert!(
        !host_listens(2049),
        "ganesha must not listen in the host's namespace"
    );
    assert!(
        cmd::port_answers(g.host(), 2049),
        "ganesha answers on {}",
        g.host()
    );

    // A second server at the same time gets its own namespace, address and rpcbind.
    let work2 = work_dir("vmbench-nfs2");
    let g2 = Ganesha::start(work2.path(), net("nfs2")).expect("a second ganesha starts");
    assert_ne!(g2.host(), g.host());
    let url2 = g2.url_for("probe2.raw");
    cmd::run("qemu-img", &["create", "-q", "-f", "raw", &url2, "1M"]).unwrap();
    assert_eq!(qemu_info(&url2), ("raw".to_string(), MIB));
    std::fs::remove_file(g2.export_dir().join("probe2.raw")).unwrap();
    let ns2 = g2.net().name().to_string();
    drop(g2);
    assert!(
        !vmbench::storage::netns::list(None).contains(&ns2),
        "{ns2} left"
    );

    embedded_images(&g);
    external_image(&g);
    half_failed_external(&g);

    let g = Arc::try_unwrap(g).expect("backends dropped their handles");
    g.stop();
    g.stop();
    assert!(!cmd::pid_alive(pid), "ganesha {pid} still runs after stop");
    assert!(!cmd::pids_named("ganesha.nfsd").contains(&pid));
    assert_eq!(our_children_named("ganesha.nfsd"), Vec::<u32>::new());
    assert_eq!(our_children_named("rpcbind"), Vec::<u32>::new());
    let left: Vec<_> = std::fs::read_dir(work.path().join("export"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "files left in the export: {left:?}");
    assert_eq!(
        cmd::pids_named("rpcbind"),
        rpcbind_before,
        "our rpcbind is left, or the host's was touched"
    );
    drop(g);
    assert!(
        !vmbench::storage::netns::list(None).contains(&ns_name),
        "namespace {ns_name} left"
    );
}

/// qcow2 and raw on the embedded server: created over NFS, seen by qemu-img, removed by
/// teardown.
fn embedded_images(g: &Arc<Ganesha>) {
    let mut b = NfsBackend::embedded(g.clone());
    b.check().unwrap();
    let mut files = Vec::new();
    for (fmt, size) in [(Format::Qcow2, 256 * MIB), (Format::Raw, 64 * MIB)] {
        let d = b
            .provision(&cell(Backend::Nfs, fmt), size, Path::new("/var/tmp"))
            .unwrap();
        let DiskSource::Network {
            protocol,
            name,
            host,
            port,
            auth,
        } = &d.source
        else {
            panic!("not a network source: {:?}", d.source)
        };
        assert_eq!(
            (*protocol, host.as_str(), *port),
            (NetProtocol::Nfs, g.host().to_string().as_str(), None)
        );
        assert_eq!(
            auth,
            &Some(NetAuth::NfsIdentity {
                uid: EXPORT_UID,
                gid: EXPORT_GID
            })
        );
        assert!(name.starts_with(&g.export_path()), "{name}");
        // Root is squashed: our own qemu-img calls claim the export owner's uid.
        let url = format!("nfs://{}{name}?uid={EXPORT_UID}&gid={EXPORT_GID}", g.host());
        assert_eq!(url, d.params["url"]);
        assert_eq!(qemu_info(&url), (fmt.as_str().to_string(), size));
        qemu_io_roundtrip(&url, fmt, "none");
        assert_eq!(d.params["nfs_version"], "3");
        assert_eq!(d.params["server"], g.host().to_string());
        let local = d.host_path.clone().unwrap();
        assert!(local.starts_with(g.export_dir()) && local.exists());
        files.push(local);
    }
    b.teardown().unwrap();
    b.teardown().unwrap();
    for f in &files {
        assert!(!f.exists(), "{} left after teardown", f.display());
    }
}

/// The same server, used as an "external" one by URL: teardown truncates the image to 0
/// bytes (the documented leftover), over libnfs.
fn external_image(g: &Arc<Ganesha>) {
    let url = format!(
        "nfs://{}{}?uid={EXPORT_UID}&gid={EXPORT_GID}",
        g.host(),
        g.export_path()
    );
    let mut b = NfsBackend::external(&url).unwrap();
    let d = b
        .provision(
            &cell(Backend::Nfs, Format::Qcow2),
            128 * MIB,
            Path::new("/var/tmp"),
        )
        .unwrap();
    assert_eq!(
        qemu_info(&d.params["url"]),
        ("qcow2".to_string(), 128 * MIB)
    );
    assert!(d.host_path.is_none());
    let on_server = g.export_dir().join(&d.params["image"]);
    assert!(std::fs::metadata(&on_server).unwrap().len() > 0);
    b.teardown().unwrap();
    assert_eq!(
        std::fs::metadata(&on_server).unwrap().len(),
        0,
        "external image not truncated"
    );
    std::fs::remove_file(on_server).unwrap();
}

/// A provision that fails (no such export on the server) leaves nothing and tears down cleanly.
fn half_failed_external(g: &Arc<Ganesha>) {
    let url = format!(
        "nfs://{}{}/missing?uid={EXPORT_UID}&gid={EXPORT_GID}",
        g.host(),
        g.export_path()
    );
    let mut b = NfsBackend::external(&url).unwrap();
    let e = b
        .provision(&cell(Backend::Nfs, Format::Raw), MIB, Path::new("/var/tmp"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("qemu-img create"), "{e}");
    b.teardown().unwrap();
    b.teardown().unwrap();
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn tgt_embedded_and_external_iscsi() {
    let work = work_dir("vmbench-iscsi");
    let t = Arc::new(Tgt::start(work.path(), net("iscsi")).expect("tgtd starts"));
    let pid = t.pid();
    assert!(cmd::pids_named("tgtd").contains(&pid));
    assert!(our_children_named("tgtd").contains(&pid));
    assert!(cmd::port_answers(t.host(), t.portal_port()));

    // A second tgtd at the same time gets its own namespace (same portal port, another
    // address) and control port.
    let work2 = work_dir("vmbench-iscsi2");
    let t2 = Tgt::start(work2.path(), net("iscsi2")).expect("a second tgtd starts");
    assert_ne!(t2.host(), t.host());
    assert_ne!(t2.control_port(), t.control_port());
    let pid2 = t2.pid();
    t2.stop();
    assert!(!cmd::pid_alive(pid2));

    let mut b = IscsiBackend::embedded(t.clone());
    let mut files = Vec::new();
    let mine = |l: &Leftover| matches!(l, Leftover::Tgtd { pid: p, .. } if *p == pid);
    for (fmt, size) in [(Format::Raw, 64 * MIB), (Format::Qcow2, 128 * MIB)] {
        let d = b
            .provision(&cell(Backend::Iscsi, fmt), size, work.path())
            .unwrap();
        let DiskSource::Network {
            protocol,
            name,
            host,
            port,
            auth,
        } = &d.source
        else {
            panic!("not a network source: {:?}", d.source)
        };
        assert_eq!(
            (*protocol, host.as_str(), *port),
            (
                NetProtocol::Iscsi,
                t.host().to_string().as_str(),
                Some(t.portal_port())
            )
        );
        assert!(
            matches!(auth, Some(NetAuth::IscsiChap { secret_usage, .. }) if secret_usage.starts_with("vmbench-iscsi-")),
            "{auth:?}"
        );
        assert!(
            name.starts_with("iqn.2026-12.dev.vmbench:") && name.ends_with("/1"),
            "{name}"
        );
        // CHAP is required: a login without it fails.
        let url = format!("iscsi://{}:{}/{name}", t.host(), t.portal_port());
        let e = cmd::run("qemu-img", &["info", &url])
            .unwrap_err()
            .to_string();
        assert!(e.contains("Authentication failure"), "{e}");
        // The LUN's bytes, seen through its backing file.
        let lun = d.host_path.clone().unwrap().to_string_lossy().into_owned();
        assert_eq!(qemu_info(&lun), (fmt.as_str().to_string(), size));
        qemu_io_roundtrip(&lun, fmt, "none");
        let iqn = &d.params["iqn"];
        assert!(tgt_targets(t.control_port())
            .unwrap()
            .iter()
            .any(|(_, n)| n == iqn));
        files.push((d.host_path.clone().unwrap(), iqn.clone()));
    }
    // A killed run would leave these: `vmbench cleanup` finds the server and both targets.
    match leftovers::find().into_iter().find(|l| mine(l)) {
        Some(Leftover::Tgtd { targets, .. }) => assert_eq!(targets.len(), 2, "{targets:?}"),
        other => panic!("our tgtd not found as a leftover: {other:?}"),
    }
    let (a, b_iqn) = (&files[0].1, &files[1].1);
    assert_ne!(a, b_iqn, "IQNs must be unique per cell");
    b.teardown().unwrap();
    b.teardown().unwrap();
    let left = tgt_targets(t.control_port()).unwrap();
    assert!(left.is_empty(), "targets left: {left:?}");
    for (f, _) in &files {
        assert!(!f.exists(), "{} left", f.display());
    }
    drop(b);

    external_lun(&t, work.path());
    teardown_after_stop(work.path());

    let t = Arc::try_unwrap(t).expect("backends dropped their handles");
    t.stop();
    t.stop();
    assert!(!cmd::pid_alive(pid), "tgtd {pid} still runs after stop");
    assert_eq!(our_children_named("tgtd"), Vec::<u32>::new());
    assert!(!leftovers::find().iter().any(mine));
    assert!(!Path::new(&format!("/var/run/tgtd/socket.{}", t.control_port())).exists());
}

/// A LUN made by hand on our tgtd, used by URL: a qcow2 fits in the LUN, teardown wipes it.
fn external_lun(t: &Arc<Tgt>, work: &Path) {
    let (tid, iqn) = t.next_target();
    let file = work.join("external.lun");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(96 * MIB)
        .unwrap();
    t.add_target(tid, &iqn, &file).unwrap();
    // An external target without CHAP: take the run's account off this one.
    let Some(NetAuth::IscsiChap { username, .. }) = t.auth() else {
        panic!("the embedded tgtd has no CHAP account")
    };
    let tid_s = tid.to_string();
    t.tgtadm(&[
        "--lld", "iscsi", "--op", "unbind", "--mode", "account", "--tid", &tid_s, "--user",
        &username,
    ])
    .unwrap();
    let url = t.url_for(&iqn, 1);
    let mut b = IscsiBackend::external(&url).unwrap();
    let d = b
        .provision(&cell(Backend::Iscsi, Format::Qcow2), 1 << 40, work)
        .unwrap();
    assert!(
        d.size_bytes < 96 * MIB && d.size_bytes > 90 * MIB,
        "{}",
        d.size_bytes
    );
    assert_eq!(qemu_info(&url), ("qcow2".to_string(), d.size_bytes));
    b.teardown().unwrap();
    assert_eq!(
        qemu_info(&url),
        ("raw".to_string(), 96 * MIB),
        "qcow2 header not wiped"
    );
    t.delete_target(tid).unwrap();
    std::fs::remove_file(file).unwrap();
}

/// A LUN whose tgtd was stopped first (Ctrl-C ordering): teardown still removes the file.
fn teardown_after_stop(work: &Path) {
    let t = Arc::new(Tgt::start(&work.join("second"), net("second")).unwrap());
    let mut b = IscsiBackend::embedded(t.clone());
    let d = b
        .provision(&cell(Backend::Iscsi, Format::Raw), 8 * MIB, work)
        .unwrap();
    let file = d.host_path.unwrap();
    let pid = t.pid();
    t.stop();
    assert!(!cmd::pid_alive(pid));
    b.teardown().unwrap();
    assert!(!file.exists(), "{} left", file.display());
    let e = b
        .provision(&cell(Backend::Iscsi, Format::Raw), MIB, work)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not running"), "{e}");
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn local_images_with_each_preallocation() {
    let work = work_dir("vmbench-local");
    let dir: PathBuf = work.path().join("images");
    for p in Prealloc::ALL {
        let mut b = LocalBackend::new(dir.clone(), *p);
        b.check().unwrap();
        let mut made = Vec::new();
        for fmt in [Format::Qcow2, Format::Raw] {
            let d = b
                .provision(&cell(Backend::Local, fmt), 32 * MIB, work.path())
                .unwrap();
            let DiskSource::File { path } = &d.source else {
                panic!("{:?}", d.source)
            };
            let p_str = path.to_string_lossy();
            assert_eq!(qemu_info(&p_str), (fmt.as_str().to_string(), 32 * MIB));
            // cache=none is O_DIRECT: proves the directory is not on tmpfs.
            qemu_io_roundtrip(&p_str, fmt, "none");
            let allocated = alloc_bytes(path);
            match p.effective(fmt) {
                Prealloc::Full => assert!(allocated >= 32 * MIB, "{p}/{fmt}: {allocated}"),
                Prealloc::Off => assert!(allocated < 4 * MIB, "{p}/{fmt}: {allocated}"),
                Prealloc::Metadata => assert!(allocated < 32 * MIB, "{p}/{fmt}: {allocated}"),
            }
            assert_eq!(d.params["preallocation"], p.effective(fmt).as_str());
            assert!(
                qemu_can_open(path),
                "libvirt-qemu cannot open {}",
                path.display()
            );
            made.push(path.clone());
        }
        b.teardown().unwrap();
        b.teardown().unwrap();
        assert!(made.iter().all(|f| !f.exists()));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o711, "image dir must be traversable by libvirt-qemu");
}

/// Whether QEMU's user (libvirt-qemu) can reach the image: every directory on the path must
/// let it through (libvirt relabels the file, 0600 as libvirt makes volumes, at domain start;
/// not the directories), so `stat` as that user is the test.
fn qemu_can_open(p: &Path) -> bool {
    let path = p.to_string_lossy();
    let args = ["-u", "libvirt-qemu", "--", "stat", path.as_ref()];
    cmd::run("runuser", &args).is_ok()
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn a_private_work_dir_is_reported_and_does_lock_qemu_out() {
    use std::os::unix::fs::PermissionsExt;
    let work = work_dir("vmbench-local-priv");
    let mut b = LocalBackend::new(work.path().join("images"), Prealloc::Off);
    let d = b
        .provision(&cell(Backend::Local, Format::Raw), MIB, work.path())
        .unwrap();
    let path = d.host_path.clone().unwrap();
    assert!(qemu_can_open(&path));
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(!qemu_can_open(&path), "0700 should lock libvirt-qemu out");
    let e = b.check().unwrap_err();
    assert!(matches!(e, vmbench::storage::Unsupported::Dir(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("without o+x"), "{e}");
    b.teardown().unwrap();
    assert!(!path.exists());
}

fn alloc_bytes(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[test]
#[ignore = "host: root qemu loop"]
fn block_raw_on_a_loop_device() {
    let work = work_dir("vmbench-block");
    let file = work.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(48 * MIB)
        .unwrap();
    let dev = PathBuf::from(
        cmd::run("losetup", &["-f", "--show", &file.to_string_lossy()])
            .unwrap()
            .trim(),
    );
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = cmd::run("losetup", &["-d", &self.0.to_string_lossy()]);
        }
    }
    let guard = Detach(dev.clone());
    let mut b = vmbench::storage::block::BlockBackend::new(dev.clone(), true, false);
    let d = b
        .provision(&cell(Backend::Block, Format::Raw), 0, work.path())
        .unwrap();
    assert_eq!(d.source, DiskSource::Block { dev: dev.clone() });
    assert_eq!(d.size_bytes, 48 * MIB);
    b.teardown().unwrap();
    drop(guard);
    let list = cmd::run("losetup", &["-j", &file.to_string_lossy()]).unwrap();
    assert!(list.trim().is_empty(), "loop device left: {list}");
}

/// With an rpcbind already running on the host (someone else's), ganesha runs its own in its
/// namespace and leaves the host's running and answering.
#[test]
#[ignore = "host: root qemu ganesha"]
fn ganesha_leaves_a_foreign_rpcbind_alone() {
    let _lock = NFS_PORT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    struct Foreign(Option<std::process::Child>);
    impl Drop for Foreign {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                cmd::terminate(c, std::time::Duration::from_secs(5));
            }
        }
    }
    let foreign = if cmd::pids_named("rpcbind").is_empty() {
        let c = std::process::Command::new("rpcbind")
            .args(["-f", "-w"])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cmd::loopback_port_answers(111) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Foreign(Some(c))
    } else {
        Foreign(None)
    };
    let before = cmd::pids_named("rpcbind");
    let work = work_dir("vmbench-nfs-rpc");
    let g = Ganesha::start(work.path(), net("rpc")).expect("ganesha starts");
    assert!(g.started_rpcbind());
    let url = g.url_for("probe.raw");
    cmd::run("qemu-img", &["create", "-q", "-f", "raw", &url, "1M"]).unwrap();
    assert_eq!(qemu_info(&url), ("raw".to_string(), MIB));
    std::fs::remove_file(g.export_dir().join("probe.raw")).unwrap();
    let pid = g.pid();
    drop(g);
    assert!(!cmd::pid_alive(pid), "ganesha {pid} survives its drop");
    assert_eq!(
        cmd::pids_named("rpcbind"),
        before,
        "the foreign rpcbind was touched"
    );
    assert!(
        cmd::loopback_port_answers(111),
        "the host's rpcbind stopped answering"
    );
    assert!(
        cmd::run("rpcinfo", &["-p", "127.0.0.1"]).is_ok_and(|o| !o.contains("nfs")),
        "ganesha registered with the host's rpcbind"
    );
    drop(foreign);
}

/// The trap LocalBackend::check guards against, checked against QEMU itself: check() refuses
/// a tmpfs directory exactly when cache=none (O_DIRECT) really fails there. (tmpfs has O_DIRECT
/// since Linux 6.6, so on newer kernels both succeed.)
#[test]
#[ignore = "host: qemu"]
fn check_agrees_with_qemu_cache_none_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if vmbench::storage::local::filesystem_name(shm) != "tmpfs" {
        return common::skip("/dev/shm is not tmpfs here: nothing to show");
    }
    let dir = tempfile::Builder::new()
        .prefix("vmbench-shm")
        .tempdir_in(shm)
        .unwrap();
    let b = LocalBackend::new(dir.path().to_path_buf(), Prealloc::Off);
    let img = dir.path().join("x.raw");
    let img = img.to_string_lossy();
    cmd::run("qemu-img", &["create", "-q", "-f", "raw", &img, "1M"]).unwrap();
    let qemu = cmd::run(
        "qemu-io",
        &["-f", "raw", "-t", "none", "-c", "read 0 4k", &img],
    );
    assert_eq!(
        b.check().is_ok(),
        qemu.is_ok(),
        "check {:?} vs qemu-io {qemu:?}",
        b.check()
    );
}
