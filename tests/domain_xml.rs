//! Domain XML: golden files (domains/*.xml, the reference definitions), libvirt's schema via the
//! real `virt-xml-validate`, hostile values, and (when libvirtd runs) libvirt itself accepting
//! the KVM/QEMU definitions. The golden comparison is pure; the schema and libvirt tests are
//! host tests (see tests/README.md). `UPDATE_GOLDEN=1 cargo test --test suite domain_xml::` rewrites the goldens.

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use vmbench::cell::IoThread;
use vmbench::cell::{Backend, Bus, CacheMode, Cell, Format, Hypervisor, IoMode, XenMode};
use vmbench::hypervisor::domain_xml::{self, kernel_cmdline, render, DomainXmlError};
use vmbench::hypervisor::pinning::Pinning;
use vmbench::hypervisor::{DiskSpec, DomainSpec, IoTune, METADATA_NS};
use vmbench::storage::{DiskSource, NetAuth, NetProtocol};

const RUN: &str = "20261202T120000Z-golden";
const ISCSI_IQN: &str = "iqn.2026-12.dev.vmbench:golden";

/// One golden case: the file stem and the cell it stands for.
struct Case {
    stem: &'static str,
    hv: Hypervisor,
    mode: Option<XenMode>,
    backend: Backend,
    format: Format,
    bus: Bus,
    cache: CacheMode,
    io: IoMode,
    source: DiskSource,
}

fn file(p: &str) -> DiskSource {
    DiskSource::File { path: p.into() }
}

fn block(p: &str) -> DiskSource {
    DiskSource::Block { dev: p.into() }
}

fn nfs_url() -> DiskSource {
    DiskSource::Network {
        protocol: NetProtocol::Nfs,
        name: "/export/vmbench/disk.qcow2".into(),
        host: "127.0.0.1".into(),
        port: None,
        auth: Some(NetAuth::NfsIdentity {
            uid: 64049,
            gid: 64049,
        }),
    }
}

fn iscsi_url() -> DiskSource {
    DiskSource::Network {
        protocol: NetProtocol::Iscsi,
        name: format!("{ISCSI_IQN}/1"),
        host: "127.0.0.1".into(),
        port: Some(3260),
        auth: None,
    }
}

/// The dom0 path of the same LUN after `iscsiadm --login` (what Xen's phy datapath opens).
fn iscsi_by_path() -> DiskSource {
    block(&format!(
        "/dev/disk/by-path/ip-127.0.0.1:3260-iscsi-{ISCSI_IQN}-lun-1"
    ))
}

#[allow(clippy::too_many_arguments)]
fn case(
    stem: &'static str,
    hv: Hypervisor,
    mode: Option<XenMode>,
    backend: Backend,
    format: Format,
    bus: Bus,
    (cache, io): (CacheMode, IoMode),
    source: DiskSource,
) -> Case {
    Case {
        stem,
        hv,
        mode,
        backend,
        format,
        bus,
        cache,
        io,
        source,
    }
}

fn cases() -> Vec<Case> {
    use Backend::*;
    use Format::*;
    use Hypervisor::*;
    let direct = (CacheMode::None, IoMode::Native);
    let blk = Bus::VirtioBlk;
    let mut v = vec![
        case(
            "qemu-local-qcow2-virtio-blk",
            Qemu,
            None,
            Local,
            Qcow2,
            blk,
            direct,
            file("/var/lib/vmbench/work/golden/disk.qcow2"),
        ),
        case(
            "kvm-local-raw-virtio-blk",
            Kvm,
            None,
            Local,
            Raw,
            blk,
            direct,
            file("/var/lib/vmbench/work/golden/disk.raw"),
        ),
        // hostdir: no disk; the directory as virtio-fs on vmbench's own virtiofsd, shared memory.
        case(
            "qemu-hostdir-virtiofs",
            Qemu,
            None,
            Hostdir,
            Raw,
            blk,
            direct,
            DiskSource::SharedDir {
                socket: "/var/lib/vmbench/work/golden/virtiofs-1.sock".into(),
                dir: "/var/lib/vmbench/work/local/vmbench-hostdir-1".into(),
            },
        ),
        case(
            "qemu-block-raw-virtio-scsi",
            Qemu,
            None,
            Block,
            Raw,
            Bus::VirtioScsi,
            (CacheMode::Writeback, IoMode::IoUring),
            block("/dev/loop7"),
        ),
        case(
            "qemu-nfs-qcow2-virtio-blk",
            Qemu,
            None,
            Nfs,
            Qcow2,
            blk,
            direct,
            nfs_url(),
        ),
        case(
            "qemu-iscsi-raw-virtio-blk",
            Qemu,
            None,
            Iscsi,
            Raw,
            blk,
            (CacheMode::Writethrough, IoMode::Threads),
            iscsi_url(),
        ),
    ];
    for (mode, pvh) in [(XenMode::Pvh, true), (XenMode::Hvm, false)] {
        let m = Some(mode);
        let x = |pvh_stem, hvm_stem, backend, format, source| {
            case(
                if pvh { pvh_stem } else { hvm_stem },
                Xen,
                m,
                backend,
                format,
                blk,
                direct,
                source,
            )
        };
        v.extend([
            x(
                "xen-pvh-local-raw",
                "xen-hvm-local-raw",
                Local,
                Raw,
                file("/var/lib/vmbench/work/golden/disk.raw"),
            ),
            x(
                "xen-pvh-local-qcow2",
                "xen-hvm-local-qcow2",
                Local,
                Qcow2,
                file("/var/lib/vmbench/work/golden/disk.qcow2"),
            ),
            x(
                "xen-pvh-block-raw",
                "xen-hvm-block-raw",
                Block,
                Raw,
                block("/dev/loop7"),
            ),
            x(
                "xen-pvh-lvm-raw",
                "xen-hvm-lvm-raw",
                Lvm,
                Raw,
                block("/dev/vmbench/golden"),
            ),
            x(
                "xen-pvh-lvm-qcow2",
                "xen-hvm-lvm-qcow2",
                Lvm,
                Qcow2,
                block("/dev/vmbench/golden"),
            ),
            x(
                "xen-pvh-iscsi-raw-phy",
                "xen-hvm-iscsi-raw-phy",
                Iscsi,
                Raw,
                iscsi_by_path(),
            ),
            x(
                "xen-pvh-nfs-mounted-qcow2",
                "xen-hvm-nfs-mounted-qcow2",
                Nfs,
                Qcow2,
                file("/mnt/vmbench-nfs/golden/disk.qcow2"),
            ),
        ]);
    }
    v
}

impl Case {
    fn cell(&self) -> Cell {
        Cell {
            hypervisor: self.hv,
            xen_mode: self.mode,
            backend: self.backend,
            format: self.format,
            bus: self.bus,
            cache: self.cache,
            io: self.io,
            ..Cell::default()
        }
    }

    fn spec(&self, name: &str) -> DomainSpec {
        let cell = self.cell().id();
        let dir = PathBuf::from(format!("/var/lib/vmbench/runs/{RUN}/{cell}"));
        DomainSpec {
            name: name.to_string(),
            hypervisor: self.hv,
            xen_mode: self.mode,
            vcpus: 2,
            memory_mib: 1024,
            kernel: "/var/lib/vmbench/images/0123abcd/vmlinuz".into(),
            initrd: "/var/lib/vmbench/images/0123abcd/initrd.zst".into(),
            cmdline: kernel_cmdline(self.hv, self.mode),
            console_log: dir.join("console.log"),
            console_pty: false,
            disk: DiskSpec {
                source: self.source.clone(),
                format: self.format,
                bus: self.bus,
                cache: self.cache,
                io: self.io,
                serial: vmbench_proto::TEST_DISK_SERIAL.into(),
                iotune: None,
                iothread: Default::default(),
                queues: None,
            },
            run_id: RUN.into(),
            cell_id: cell,
            pinning: None,
            emulator: None,
        }
    }
}

fn domains_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("domains")
}

/// Runs the real `virt-xml-validate FILE domain`; returns its output on failure.
fn validate(path: &Path) -> Result<(), String> {
    let out = Command::new("virt-xml-validate")
        .arg(path)
        .arg("domain")
        .output()
        .map_err(|e| format!("running virt-xml-validate: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}: {}\n{}{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Pure: each case renders exactly its golden file (needs nothing from the machine).
#[test]
fn golden_files_match_the_rendering() {
    let dir = domains_dir();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for c in cases() {
        let xml = render(&c.spec(&format!("vmbench-golden-{}", c.stem)))
            .unwrap_or_else(|e| panic!("{}: {e}", c.stem));
        let path = dir.join(format!("{}.xml", c.stem));
        if update {
            std::fs::write(&path, &xml).unwrap();
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == xml => {}
            Ok(want) => failures.push(format!(
                "{} differs from the rendering (UPDATE_GOLDEN=1 rewrites it):\n{}",
                path.display(),
                first_difference(&want, &xml)
            )),
            Err(e) => failures.push(format!(
                "{}: {e} (UPDATE_GOLDEN=1 creates it)",
                path.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every golden file (the rendering, by the test above) is valid against libvirt's schema.
#[test]
#[ignore = "host: virt-xml-validate"]
fn golden_files_validate_against_libvirts_schema() {
    let failures: Vec<String> = cases()
        .iter()
        .filter_map(|c| validate(&domains_dir().join(format!("{}.xml", c.stem))).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every file in domains/ is a golden case (nothing stale left behind).
#[test]
fn no_stale_golden_files() {
    let stems: Vec<String> = cases().iter().map(|c| format!("{}.xml", c.stem)).collect();
    for entry in std::fs::read_dir(domains_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !name.ends_with(".xml") {
            continue;
        }
        assert!(stems.contains(&name), "domains/{name} is not a golden case");
    }
}

fn first_difference(want: &str, got: &str) -> String {
    for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        if w != g {
            return format!("line {}:\n  file:   {w}\n  render: {g}", i + 1);
        }
    }
    format!(
        "lengths differ: file {} lines, render {} lines",
        want.lines().count(),
        got.lines().count()
    )
}

/// What the parsed XML says: (element local name, namespace, attribute, unescaped value).
type Attrs = Vec<(String, Option<String>, String, String)>;

fn parse(xml: &str) -> Attrs {
    let mut reader = NsReader::from_str(xml);
    let mut out = Vec::new();
    loop {
        let (ns, ev) = reader.read_resolved_event().expect("well-formed XML");
        let e = match ev {
            Event::Start(e) | Event::Empty(e) => e,
            Event::Eof => break,
            _ => continue,
        };
        let ns = match ns {
            ResolveResult::Bound(n) => Some(String::from_utf8(n.as_ref().to_vec()).unwrap()),
            _ => None,
        };
        let local = String::from_utf8(e.local_name().as_ref().to_vec()).unwrap();
        for a in e.attributes() {
            let a = a.unwrap();
            let key = String::from_utf8(a.key.as_ref().to_vec()).unwrap();
            out.push((
                local.clone(),
                ns.clone(),
                key,
                a.unescape_value().unwrap().into_owned(),
            ));
        }
    }
    out
}

fn attr<'a>(attrs: &'a Attrs, elem: &str, key: &str) -> Vec<&'a str> {
    attrs
        .iter()
        .filter(|a| a.0 == elem && a.2 == key)
        .map(|a| a.3.as_str())
        .collect()
}

/// Text of the first `<elem>` (unescaped).
fn text(xml: &str, elem: &str) -> Option<String> {
    let mut reader = NsReader::from_str(xml);
    let mut inside = false;
    loop {
        match reader.read_event().unwrap() {
            Event::Start(e) if e.local_name().as_ref() == elem.as_bytes() => inside = true,
            Event::Text(t) if inside => return Some(t.unescape().unwrap().into_owned()),
            Event::Eof => return None,
            _ => {}
        }
    }
}

const HOSTILE: &str = "/tmp/vm bench <x>&'\"/a&amp;b 'q' \"dq\" <img>.qcow2";

#[test]
#[ignore = "host: virt-xml-validate"]
fn hostile_values_render_validate_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let name = "vmbench-<evil> & 'name' \"quoted\"";
    for c in cases()
        .into_iter()
        .filter(|c| !matches!(c.source, DiskSource::Network { .. }))
    {
        let mut spec = c.spec(name);
        spec.run_id = "run <&> 'x' \"y\"".into();
        spec.cell_id = "cell ]]> & <!-- -->".into();
        spec.cmdline = format!("{} x=\"<&>\" y='1'", spec.cmdline);
        spec.kernel = format!("{HOSTILE}.vmlinuz").into();
        spec.initrd = format!("{HOSTILE}.initrd").into();
        spec.console_log = format!("{HOSTILE}.log").into();
        spec.disk.source = match &c.source {
            DiskSource::File { .. } => DiskSource::File {
                path: HOSTILE.into(),
            },
            _ => DiskSource::Block {
                dev: format!("/dev/disk/by-id/{HOSTILE}").into(),
            },
        };
        let xml = render(&spec).unwrap_or_else(|e| panic!("{}: {e}", c.stem));
        let path = dir.path().join(format!("{}.xml", c.stem));
        std::fs::write(&path, &xml).unwrap();
        validate(&path).unwrap();

        let attrs = parse(&xml);
        let disk_attr = if matches!(c.source, DiskSource::File { .. }) {
            "file"
        } else {
            "dev"
        };
        let want_disk = match &spec.disk.source {
            DiskSource::File { path } | DiskSource::Block { dev: path } => path.to_str().unwrap(),
            DiskSource::Network { .. } | DiskSource::SharedDir { .. } => unreachable!(),
        };
        assert_eq!(
            attr(&attrs, "source", disk_attr),
            vec![want_disk],
            "{}",
            c.stem
        );
        // The agent channel is opened through the libvirt connection: no host path in it.
        let channel = &xml[xml.find("<channel").unwrap()..xml.find("</channel>").unwrap()];
        assert!(!channel.contains("path="), "{}: {channel}", c.stem);
        assert_eq!(text(&xml, "name").as_deref(), Some(name));
        assert_eq!(text(&xml, "kernel").as_deref(), spec.kernel.to_str());
        assert_eq!(
            text(&xml, "cmdline").as_deref(),
            Some(spec.cmdline.as_str())
        );
        let marker: Vec<_> = attrs
            .iter()
            .filter(|a| a.0 == domain_xml::METADATA_ELEMENT)
            .collect();
        assert!(
            marker.iter().all(|a| a.1.as_deref() == Some(METADATA_NS)),
            "{marker:?}"
        );
        assert_eq!(attr(&attrs, "marker", "run"), vec![spec.run_id.as_str()]);
        assert_eq!(attr(&attrs, "marker", "cell"), vec![spec.cell_id.as_str()]);
    }
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn network_names_with_markup_round_trip() {
    let c = &cases()[3];
    let mut spec = c.spec("vmbench-nfs");
    let name = "/export/a b/<x>&'\"y.qcow2";
    spec.disk.source = DiskSource::Network {
        protocol: NetProtocol::Nfs,
        name: name.into(),
        host: "localhost".into(),
        port: Some(2049),
        auth: None,
    };
    let xml = render(&spec).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nfs.xml");
    std::fs::write(&path, &xml).unwrap();
    validate(&path).unwrap();
    let attrs = parse(&xml);
    assert_eq!(attr(&attrs, "source", "name"), vec![name]);
    assert_eq!(attr(&attrs, "host", "port"), vec!["2049"]);
    assert_eq!(attr(&attrs, "identity", "user"), vec!["root"]);
}

/// The embedded servers' disks: NFS as the export owner's numeric uid (`+N`, so libvirt does not
/// look it up as a name), iSCSI with CHAP through a libvirt secret named by usage, no value.
#[test]
fn network_disks_carry_identity_and_chap_by_reference() {
    let c = &cases()[3];
    let mut spec = c.spec("vmbench-auth");
    spec.disk.source = nfs_url();
    let attrs = parse(&render(&spec).unwrap());
    assert_eq!(attr(&attrs, "identity", "user"), vec!["+64049"]);
    assert_eq!(attr(&attrs, "identity", "group"), vec!["+64049"]);
    assert!(attr(&attrs, "auth", "username").is_empty());
    let DiskSource::Network {
        protocol,
        name,
        host,
        port,
        ..
    } = iscsi_url()
    else {
        unreachable!()
    };
    spec.disk.source = DiskSource::Network {
        protocol,
        name,
        host,
        port,
        auth: Some(NetAuth::IscsiChap {
            username: "vmbench-1-2".into(),
            secret_usage: "vmbench-iscsi-1-2".into(),
        }),
    };
    let xml = render(&spec).unwrap();
    assert!(!xml.contains("secret="), "{xml}");
    let attrs = parse(&xml);
    assert_eq!(attr(&attrs, "auth", "username"), vec!["vmbench-1-2"]);
    assert_eq!(attr(&attrs, "secret", "type"), vec!["iscsi"]);
    assert_eq!(attr(&attrs, "secret", "usage"), vec!["vmbench-iscsi-1-2"]);
    assert!(attr(&attrs, "identity", "user").is_empty());
}

/// An RBD image (issue 30): `<source protocol='rbd' name='POOL/IMAGE'>` with the monitor as
/// `<host>` and cephx through a libvirt secret of type ceph named by usage, never the key.
fn rbd_spec() -> DomainSpec {
    let mut spec = base();
    spec.disk.format = Format::Raw;
    spec.disk.source = vmbench::storage::rbd::network_source(
        "rbd",
        "vmbench-1-x.raw",
        "169.254.7.2",
        3300,
        NetAuth::Cephx {
            username: "vmbench".into(),
            secret_usage: "vmbench-ceph-1".into(),
        },
    );
    spec
}

#[test]
fn rbd_disks_name_pool_image_monitor_and_the_ceph_secret() {
    let xml = render(&rbd_spec()).unwrap();
    let attrs = parse(&xml);
    assert_eq!(attr(&attrs, "source", "protocol"), vec!["rbd"], "{xml}");
    assert_eq!(attr(&attrs, "source", "name"), vec!["rbd/vmbench-1-x.raw"]);
    assert_eq!(attr(&attrs, "host", "name"), vec!["169.254.7.2"]);
    assert_eq!(attr(&attrs, "host", "port"), vec!["3300"]);
    assert_eq!(attr(&attrs, "auth", "username"), vec!["vmbench"]);
    assert_eq!(attr(&attrs, "secret", "type"), vec!["ceph"]);
    assert_eq!(attr(&attrs, "secret", "usage"), vec!["vmbench-ceph-1"]);
    assert!(!xml.contains("key"), "{xml}");
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn rbd_disks_validate_against_libvirts_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rbd.xml");
    std::fs::write(&path, render(&rbd_spec()).unwrap()).unwrap();
    validate(&path).unwrap();
}

fn base() -> DomainSpec {
    cases()[0].spec("vmbench-errors")
}

fn capped(iops: Option<u64>, bytes: Option<u64>) -> DomainSpec {
    let mut s = base();
    s.disk.iotune = Some(IoTune {
        total_iops_sec: iops,
        total_bytes_sec: bytes,
    });
    s
}

#[test]
fn iotune_caps_render_on_the_disk_under_test() {
    let xml = render(&capped(Some(150), Some(8 << 20))).unwrap();
    assert_eq!(text(&xml, "total_iops_sec").as_deref(), Some("150"));
    assert_eq!(text(&xml, "total_bytes_sec").as_deref(), Some("8388608"));
    let iotune = xml.find("<iotune>").expect("an <iotune> element");
    let disk = (xml.find("<disk").unwrap(), xml.find("</disk>").unwrap());
    assert!(disk.0 < iotune && iotune < disk.1, "{xml}");

    let xml = render(&capped(Some(150), None)).unwrap();
    assert_eq!(text(&xml, "total_bytes_sec"), None, "{xml}");
    assert!(!render(&base()).unwrap().contains("iotune"));

    let mut s = capped(Some(150), None);
    s.hypervisor = Hypervisor::Xen;
    s.xen_mode = Some(XenMode::Pvh);
    s.disk.source = file("/var/lib/vmbench/x.raw");
    s.disk.format = Format::Raw;
    let e = render(&s).unwrap_err();
    assert!(matches!(e, DomainXmlError::IoTuneOnXen), "{e:?}");
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn iotune_caps_validate_against_libvirts_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iotune.xml");
    std::fs::write(&path, render(&capped(Some(150), Some(8 << 20))).unwrap()).unwrap();
    validate(&path).unwrap();
}

/// `--emulator NAME=PATH`: the side's QEMU binary as `<devices><emulator>`; none by default;
/// refused for Xen (libxl picks its device model) and for a relative path.
#[test]
fn emulator_renders_in_devices_and_only_for_qemu() {
    let mut s = base();
    assert!(!render(&s).unwrap().contains("<emulator"));
    s.emulator = Some("/opt/qemu-9/bin/qemu-system-x86_64".into());
    let xml = render(&s).unwrap();
    assert_eq!(
        text(&xml, "emulator").as_deref(),
        Some("/opt/qemu-9/bin/qemu-system-x86_64")
    );
    let (dev, emu) = (
        xml.find("<devices>").unwrap(),
        xml.find("<emulator>").unwrap(),
    );
    assert!(dev < emu && emu < xml.find("</devices>").unwrap(), "{xml}");
    s.emulator = Some("qemu-system-x86_64".into());
    assert!(matches!(
        render(&s).unwrap_err(),
        DomainXmlError::RelativePath {
            what: "emulator",
            ..
        }
    ));
    let mut x = base();
    x.hypervisor = Hypervisor::Xen;
    x.xen_mode = Some(XenMode::Pvh);
    x.disk.source = file("/var/lib/vmbench/x.raw");
    x.disk.format = Format::Raw;
    x.emulator = Some("/usr/bin/qemu-system-x86_64".into());
    let e = render(&x).unwrap_err();
    assert!(
        matches!(e, DomainXmlError::EmulatorNotTaken(Hypervisor::Xen)),
        "{e:?}"
    );
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn emulator_validates_against_libvirts_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emulator.xml");
    let mut s = base();
    s.emulator = Some("/usr/bin/qemu-system-x86_64".into());
    std::fs::write(&path, render(&s).unwrap()).unwrap();
    validate(&path).unwrap();
}

/// The QEMU disk tuning of issue 16: an I/O thread, queues and pinning, on virtio-blk (on the
/// disk) or virtio-scsi (on the controller).
fn tuned(bus: Bus, pin: bool) -> DomainSpec {
    let mut s = base();
    s.disk.bus = bus;
    s.disk.iothread = IoThread::On;
    s.disk.queues = Some(2);
    s.pinning = pin.then(|| Pinning {
        vcpus: vec![1, 2],
        emulator: 0,
    });
    s
}

#[test]
fn iothread_queues_and_pinning_render_where_libvirt_reads_them() {
    let xml = render(&tuned(Bus::VirtioBlk, true)).unwrap();
    let a = parse(&xml);
    assert_eq!(text(&xml, "iothreads").as_deref(), Some("1"), "{xml}");
    assert_eq!(attr(&a, "driver", "iothread"), vec!["1"]);
    assert_eq!(attr(&a, "driver", "queues"), vec!["2"]);
    assert_eq!(attr(&a, "vcpupin", "vcpu"), vec!["0", "1"]);
    assert_eq!(attr(&a, "vcpupin", "cpuset"), vec!["1", "2"]);
    assert_eq!(attr(&a, "emulatorpin", "cpuset"), vec!["0"]);
    assert_eq!(attr(&a, "iothreadpin", "iothread"), vec!["1"]);
    assert_eq!(attr(&a, "iothreadpin", "cpuset"), vec!["0"]);

    // virtio-scsi: the controller carries them; the disk's driver does not.
    let xml = render(&tuned(Bus::VirtioScsi, false)).unwrap();
    let a = parse(&xml);
    assert_eq!(attr(&a, "driver", "iothread"), vec!["1"], "{xml}");
    let ctl = xml.find("<controller").unwrap();
    assert!(
        xml[ctl..].contains("<driver queues=\"2\" iothread=\"1\"/>"),
        "{xml}"
    );
    assert!(!xml.contains("cputune"));

    // Defaults leave the domain as it was before the tuning dimensions.
    let plain = render(&base()).unwrap();
    for absent in ["iothread", "queues", "cputune"] {
        assert!(!plain.contains(absent), "{absent} in {plain}");
    }

    let mut s = tuned(Bus::VirtioBlk, false);
    s.disk.queues = Some(0);
    assert!(matches!(render(&s), Err(DomainXmlError::Zero("queues"))));
    let mut s = tuned(Bus::VirtioBlk, false);
    s.hypervisor = Hypervisor::Xen;
    s.xen_mode = Some(XenMode::Pvh);
    s.disk.source = file("/var/lib/vmbench/x.raw");
    s.disk.format = Format::Raw;
    let e = render(&s).unwrap_err().to_string();
    assert!(e.contains("use them with qemu or kvm"), "{e}");
    let mut s = base();
    s.hypervisor = Hypervisor::Xen;
    s.xen_mode = Some(XenMode::Pvh);
    s.disk.source = file("/var/lib/vmbench/x.raw");
    s.disk.format = Format::Raw;
    s.pinning = tuned(Bus::VirtioBlk, true).pinning;
    let e = render(&s).unwrap_err().to_string();
    assert!(e.contains("use them with qemu or kvm"), "{e}");
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn iothread_queues_and_pinning_validate_against_libvirts_schema() {
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in [
        ("blk.xml", tuned(Bus::VirtioBlk, true)),
        ("scsi.xml", tuned(Bus::VirtioScsi, true)),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, render(&spec).unwrap()).unwrap();
        validate(&path).unwrap();
    }
}

#[test]
fn xen_rejects_network_urls_with_the_way_out() {
    for (source, fix) in [
        (nfs_url(), "mount the export on dom0"),
        (iscsi_url(), "initiator"),
    ] {
        let mut s = base();
        s.hypervisor = Hypervisor::Xen;
        s.xen_mode = Some(XenMode::Pvh);
        s.disk.source = source;
        let e = render(&s).unwrap_err();
        assert!(matches!(e, DomainXmlError::Xen(_)), "{e:?}");
        assert!(e.to_string().contains(fix), "{e}");
    }
}

#[test]
fn bad_specs_are_refused_with_the_reason() {
    type Edit = fn(&mut DomainSpec);
    let edits: &[(Edit, &str)] = &[
        (
            |s| s.kernel = "boot/vmlinuz".into(),
            "kernel must be an absolute path",
        ),
        (
            |s| s.disk.source = file("disk.qcow2"),
            "disk image path must be an absolute path",
        ),
        (
            |s| s.disk.source = block("loop0"),
            "disk block device must be an absolute path",
        ),
        (|s| s.console_log = "/tmp/a\nb".into(), "control character"),
        (|s| s.name = "a/b".into(), "contain no '/'"),
        (|s| s.name = String::new(), "non-empty"),
        (|s| s.disk.serial = "<x>".into(), "disk serial"),
        (
            |s| s.disk.serial = "a-very-long-serial-number".into(),
            "1-20",
        ),
        (|s| s.vcpus = 0, "vcpus must be at least 1"),
        (|s| s.memory_mib = 0, "memory_mib must be at least 1"),
        (
            |s| s.disk.cache = CacheMode::Writeback,
            "io=native needs cache=none or cache=directsync",
        ),
        (
            |s| s.hypervisor = Hypervisor::Xen,
            "needs a xen mode (valid: pvh, hvm)",
        ),
        (|s| s.xen_mode = Some(XenMode::Hvm), "apply only to xen"),
        (
            |s| {
                s.disk.source = DiskSource::Network {
                    protocol: NetProtocol::Iscsi,
                    name: "iqn/1".into(),
                    host: "evil'host".into(),
                    port: None,
                    auth: None,
                }
            },
            "host \"evil'host\" is invalid",
        ),
    ];
    for (edit, want) in edits {
        let mut s = base();
        edit(&mut s);
        let e = render(&s).expect_err(want);
        assert!(e.to_string().contains(want), "{e} (wanted {want})");
    }
}

#[test]
fn device_names_and_cmdlines() {
    use domain_xml::guest_device_name as dev;
    assert_eq!(dev(Hypervisor::Qemu, Bus::VirtioBlk), "vda");
    assert_eq!(dev(Hypervisor::Kvm, Bus::VirtioScsi), "sda");
    assert_eq!(dev(Hypervisor::Xen, Bus::VirtioScsi), "xvda");
    let q = kernel_cmdline(Hypervisor::Qemu, None);
    assert!(q.contains("console=ttyS0") && q.contains("panic=-1") && q.contains("rdinit=/init"));
    assert!(!q.contains("vmbench.port"), "{q}");
    assert!(kernel_cmdline(Hypervisor::Xen, Some(XenMode::Pvh)).contains("console=hvc0"));
    assert!(kernel_cmdline(Hypervisor::Xen, Some(XenMode::Hvm)).contains("console=ttyS0"));
    // Xen definitions carry no cache/io at all (libxl picks its own).
    let mut s = cases()
        .into_iter()
        .find(|c| c.hv == Hypervisor::Xen)
        .unwrap();
    s.cache = CacheMode::Unsafe;
    let xml = render(&s.spec("vmbench-x")).unwrap();
    assert!(!xml.contains("cache=") && !xml.contains("io="), "{xml}");
}

// ---- libvirt itself (host tests: need libvirtd on qemu:///system; scripts/test gates them) ----

fn virsh(args: &[&str]) -> std::process::Output {
    Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args)
        .output()
        .expect("virsh runs")
}

/// Undefines the domain on drop, so a failed assertion leaves nothing behind.
struct Defined(String);

impl Drop for Defined {
    fn drop(&mut self) {
        let _ = virsh(&["undefine", "--", &self.0]);
    }
}

#[test]
#[ignore = "host: libvirtd qemu"]
fn libvirt_defines_kvm_and_qemu_domains() {
    let dir = tempfile::tempdir().unwrap();
    for c in cases().into_iter().filter(|c| c.hv != Hypervisor::Xen) {
        let name = format!("vmbench-xmltest-{}-{}", std::process::id(), c.stem);
        let spec = c.spec(&name);
        let xml = render(&spec).unwrap();
        let path = dir.path().join(format!("{}.xml", c.stem));
        std::fs::write(&path, &xml).unwrap();

        // The QEMU command line libvirt would run: proves the driver accepts every element.
        let argv = virsh(&["domxml-to-native", "qemu-argv", path.to_str().unwrap()]);
        let argv_text = String::from_utf8_lossy(&argv.stdout).into_owned();
        assert!(
            argv.status.success(),
            "{}: {}",
            c.stem,
            String::from_utf8_lossy(&argv.stderr)
        );
        assert!(argv_text.contains(vmbench_proto::PORT_NAME), "{argv_text}");
        assert!(argv_text.contains("panic=-1"), "{argv_text}");

        let out = virsh(&["define", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            c.stem,
            String::from_utf8_lossy(&out.stderr)
        );
        let _guard = Defined(name.clone());
        let meta = virsh(&["metadata", "--", &name, METADATA_NS]);
        let meta_text = String::from_utf8_lossy(&meta.stdout);
        assert!(
            meta.status.success(),
            "{}",
            String::from_utf8_lossy(&meta.stderr)
        );
        assert!(
            meta_text.contains(&format!("cell=\"{}\"", spec.cell_id)),
            "{meta_text}"
        );
        let dump = virsh(&["dumpxml", "--", &name]);
        let dumped = String::from_utf8_lossy(&dump.stdout);
        assert!(dumped.contains("<acpi/>"), "{dumped}");
        assert!(dumped.contains("<memballoon model='none'/>"), "{dumped}");
        assert!(!dumped.contains("<interface"), "{dumped}");
        assert!(!dumped.contains("<graphics"), "{dumped}");
    }
}

#[test]
#[ignore = "host: libvirtd qemu"]
fn libvirt_defines_a_domain_with_hostile_paths() {
    let name = format!(
        "vmbench-xmltest-{}-hostile <&> 'q' \"dq\"",
        std::process::id()
    );
    let mut spec = cases()[0].spec(&name);
    spec.disk.source = DiskSource::File {
        path: HOSTILE.into(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.xml");
    std::fs::write(&path, render(&spec).unwrap()).unwrap();
    let out = virsh(&["define", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Defined(name.clone());
    let dump = virsh(&["dumpxml", "--", &name]);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let attrs = parse(&String::from_utf8(dump.stdout).unwrap());
    assert!(
        attr(&attrs, "source", "file").contains(&HOSTILE),
        "{attrs:?}"
    );
}

/// A cell on a remote libvirt host (issue 14): kernel, initramfs and disk are volumes on that
/// host, and the serial console is a pty there, so the definition names no path of this
/// machine (the run directory is where `console_log` would be).
fn on_remote_host() -> DomainSpec {
    let mut s = base();
    s.kernel = "/var/lib/libvirt/images/vmbench/vmbench-kernel-0123456789abcdef".into();
    s.initrd = "/var/lib/libvirt/images/vmbench/vmbench-initramfs-0123456789abcdef".into();
    s.disk.source = file("/var/lib/libvirt/images/vmbench/vmbench-R-h2/vmbench-1-2-c.qcow2");
    s.console_pty = true;
    s
}

#[test]
fn a_remote_hosts_domain_names_no_path_of_this_machine() {
    let spec = on_remote_host();
    let xml = render(&spec).unwrap();
    let run_dir = spec
        .console_log
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(!xml.contains(&run_dir), "{run_dir} in\n{xml}");
    assert!(!xml.contains("/var/lib/vmbench"), "{xml}");
    let attrs = parse(&xml);
    assert_eq!(attr(&attrs, "serial", "type"), vec!["pty"]);
    assert_eq!(
        text(&xml, "kernel").as_deref(),
        Some("/var/lib/libvirt/images/vmbench/vmbench-kernel-0123456789abcdef")
    );
    // This machine's cells keep their console in the run directory.
    let local = render(&base()).unwrap();
    assert_eq!(attr(&parse(&local), "serial", "type"), vec!["file"]);
    assert!(local.contains(&run_dir), "{local}");
}

#[test]
#[ignore = "host: virt-xml-validate"]
fn a_remote_hosts_domain_validates_against_libvirts_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote.xml");
    std::fs::write(&path, render(&on_remote_host()).unwrap()).unwrap();
    validate(&path).unwrap();
}
