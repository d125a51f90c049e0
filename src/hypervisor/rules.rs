//! The one home of every hypervisor rule: which datapath combinations can be expressed, and
//! which the matrix skips. The matrix's skip reasons ([`check`]) and the domain XML builder
//! ([`check_disk`]) both come here, so they cannot drift apart.
//!
//! Adding a rule: add a [`SkipReason`] variant (its message names what to do instead), test it
//! in [`check_disk`] if the domain definition cannot express it, or in [`check`] if it only
//! says what the matrix should not vary; add a case to the tests below.

use super::xen::{self, Datapath, Skip};
use super::{BlockLayer, DiskSpec};
use crate::cell::{Bus, CacheMode, Cell, Hypervisor, IoMode, IoThread, Pin};
use crate::storage::DiskSource;

/// Why a cell is skipped, or a domain cannot be defined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    /// Linux native AIO without O_DIRECT: QEMU refuses to start.
    #[error(
        "io=native needs cache=none or cache=directsync (O_DIRECT), got cache={0}; \
         use io=threads or io=io_uring with cache={0}"
    )]
    NativeAioNeedsDirect(CacheMode),
    /// Xen guests see the Xen block frontend whatever the bus.
    #[error("xen: disks use Xen's block frontend; the bus dimension applies to KVM/QEMU only")]
    XenBus,
    /// libxl picks its own cache and AIO modes.
    #[error("xen: cache and io modes are QEMU options; libxl sets its own")]
    XenTuning,
    /// A disk Xen cannot reach through libxl.
    #[error("xen: {0}")]
    XenDatapath(Skip),
    /// A dimension that does not apply to a shared host directory (hostdir, virtio-fs).
    #[error("hostdir: {0}")]
    SharedDir(&'static str),
    /// I/O threads, virtio queues and `<cputune>` pinning of the emulator are QEMU's.
    #[error(
        "xen: iothread, queues and pin are QEMU tuning (libvirt's libxl driver has no I/O \
         threads, virtio queues or emulator pinning); use them with qemu or kvm"
    )]
    XenQemuTuning,
    /// What a host cell (no guest, no virtual disk) cannot be.
    #[error("host: {0}")]
    Host(&'static str),
}

/// A shared host directory has no disk: no raw device, no image format, bus or QEMU block
/// options. It runs once per workload, as layout ext4 ("a filesystem"; the directory's own
/// filesystem is recorded as `hostdir_fs`).
fn shared_dir_rule(cell: &Cell) -> Result<(), SkipReason> {
    use crate::cell::{Format, Layout};
    let why = match () {
        _ if cell.layout == Layout::Raw => {
            "a shared directory has no raw block device: use --layout ext4 (the guest mounts the \
             share; the host directory's filesystem is recorded as hostdir_fs)"
        }
        _ if cell.layout != Layout::Ext4 => {
            "the guest makes no filesystem, partition or LV on a shared directory: hostdir runs \
             with --layout ext4 only"
        }
        _ if cell.format != Format::Raw => {
            "a shared directory has no image format: use --format raw"
        }
        _ if cell.bus != Bus::VirtioBlk => "a shared directory is not on a disk bus (virtio-fs)",
        _ if cell.cache != CacheMode::None || cell.io != IoMode::Native => {
            "QEMU's disk cache and io modes do not apply to virtio-fs (virtiofsd's own cache=auto \
             is recorded)"
        }
        _ if cell.tuning.iothread != crate::cell::IoThread::Off || cell.tuning.queues.is_some() => {
            "I/O threads and virtio queues are disk options; virtio-fs has neither"
        }
        _ => return Ok(()),
    };
    Err(SkipReason::SharedDir(why))
}

/// A host cell runs the workload on the storage itself: the guest's disk options, the image
/// container, and the layouts made inside the guest (partition tables, LVM) do not exist there.
fn host_rule(cell: &Cell, source: &DiskSource) -> Result<(), SkipReason> {
    use crate::cell::{Format, InstanceDisk, Layout};
    let why = match () {
        _ if cell.format != Format::Raw => {
            "the host runs on the storage itself, and an image container's bytes are not the \
             guest's disk: use --format raw"
        }
        _ if cell.instance != InstanceDisk::Flat => {
            "an instance disk from a base is a guest's: a host cell runs on a flat disk"
        }
        _ if !matches!(cell.layout, Layout::Raw | Layout::Ext4 | Layout::Xfs) => {
            "the host makes a filesystem on the whole disk only (layouts raw, ext4, xfs); \
             partition tables and LVM volumes are made inside the guest"
        }
        _ if cell.bus != Bus::VirtioBlk
            || cell.cache != CacheMode::None
            || cell.io != IoMode::Native
            || !cell.tuning.is_default() =>
        {
            "bus, cache, io, iothread, queues and pin are a guest disk's options; a host cell \
             has no virtual disk (run it with the defaults)"
        }
        _ if matches!(source, DiskSource::SharedDir { .. }) && cell.layout != Layout::Ext4 => {
            "a shared directory is a filesystem already: use --layout ext4 (\"a filesystem\")"
        }
        _ => return Ok(()),
    };
    Err(SkipReason::Host(why))
}

/// Whether QEMU can open a disk with this cache and io mode.
fn aio_rule(cache: CacheMode, io: IoMode) -> Result<(), SkipReason> {
    if io == IoMode::Native && !matches!(cache, CacheMode::None | CacheMode::Directsync) {
        return Err(SkipReason::NativeAioNeedsDirect(cache));
    }
    Ok(())
}

/// The rules a domain definition needs: what [`domain_xml::render`](super::domain_xml::render)
/// checks. Returns the Xen datapath for Xen (`None` for KVM/QEMU, always QEMU's block layer).
/// For Xen, cache and io are not written at all, so only the datapath matters.
pub fn check_disk(hv: Hypervisor, disk: &DiskSpec) -> Result<Option<Datapath>, SkipReason> {
    match hv.desc().block_layer {
        BlockLayer::Qemu => {
            aio_rule(disk.cache, disk.io)?;
            return Ok(None);
        }
        BlockLayer::Host => {
            return Err(SkipReason::Host(
                "a host cell defines no domain: its workload runs on the host itself",
            ))
        }
        BlockLayer::Libxl => {}
    }
    if disk.iothread == IoThread::On || disk.queues.is_some() {
        return Err(SkipReason::XenQemuTuning);
    }
    xen::datapath(&disk.source, disk.format)
        .map(Some)
        .map_err(SkipReason::XenDatapath)
}

/// Every rule for a matrix cell whose disk will be `source` (see `storage::plan_source`): the
/// domain rules, plus the dimensions the matrix does not vary for Xen because libxl ignores
/// them.
pub fn check(cell: &Cell, source: &DiskSource) -> Result<(), SkipReason> {
    if cell.hypervisor.desc().block_layer == BlockLayer::Host {
        return host_rule(cell, source);
    }
    let qemu = cell.hypervisor.desc().block_layer == BlockLayer::Qemu;
    if matches!(source, DiskSource::SharedDir { .. }) && qemu {
        shared_dir_rule(cell)?;
    }
    aio_rule(cell.cache, cell.io)?;
    if !qemu {
        if cell.bus != Bus::VirtioBlk {
            return Err(SkipReason::XenBus);
        }
        if cell.cache != CacheMode::None || cell.io != IoMode::Native {
            return Err(SkipReason::XenTuning);
        }
        if cell.tuning.pin == Pin::On {
            return Err(SkipReason::XenQemuTuning);
        }
    }
    check_disk(cell.hypervisor, &DiskSpec::for_cell(cell, source.clone())).map(drop)
}

/// The name the guest kernel gives the disk under test (first disk on its bus).
pub fn guest_device_name(hv: Hypervisor, bus: Bus) -> &'static str {
    match (hv.desc().block_layer, bus) {
        (BlockLayer::Libxl, _) => "xvda",
        // No guest: no guest device name (never asked; the host cell names its own target).
        (BlockLayer::Host, _) => "",
        (BlockLayer::Qemu, Bus::VirtioBlk) => "vda",
        (BlockLayer::Qemu, Bus::VirtioScsi) => "sda",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Backend, DiskTuning, Format, XenMode};
    use crate::hypervisor::domain_xml::{self, DomainXmlError};
    use crate::hypervisor::{DomainSpec, GuestFiles, Sizing};
    use crate::storage::NetProtocol;

    fn sources() -> Vec<DiskSource> {
        vec![
            DiskSource::File {
                path: "/var/tmp/x.img".into(),
            },
            DiskSource::Block {
                dev: "/dev/loop0".into(),
            },
            DiskSource::Network {
                protocol: NetProtocol::Nfs,
                name: "/export/x.qcow2".into(),
                host: "127.0.0.1".into(),
                port: None,
                auth: None,
            },
            DiskSource::Network {
                protocol: NetProtocol::Iscsi,
                name: "iqn.2026-12.dev.vmbench:x/1".into(),
                host: "127.0.0.1".into(),
                port: Some(3260),
                auth: None,
            },
            DiskSource::SharedDir {
                socket: "/w/virtiofs-1.sock".into(),
                dir: "/d/vmbench-hostdir-1".into(),
            },
        ]
    }

    /// Default tuning, an I/O thread, queues, both: cycled over the sources.
    fn tunings() -> impl Iterator<Item = DiskTuning> + Clone {
        let t = |iothread, queues| DiskTuning {
            iothread,
            queues,
            pin: crate::cell::Pin::Off,
        };
        [
            t(IoThread::Off, None),
            t(IoThread::On, None),
            t(IoThread::Off, Some(2)),
            t(IoThread::On, Some(4)),
        ]
        .into_iter()
    }

    fn spec(cell: &Cell, source: DiskSource) -> DomainSpec {
        let files = GuestFiles {
            kernel: "/i/vmlinuz".into(),
            initrd: "/i/initrd".into(),
            console_log: "/r/console.log".into(),
        };
        let size = Sizing {
            vcpus: 1,
            memory_mib: 256,
        };
        DomainSpec::for_cell("vmbench-t".into(), "t", cell, source, size, files)
    }

    /// Every cell the matrix lets through renders, and every rule the renderer enforces makes
    /// the matrix skip the cell with the same message.
    #[test]
    fn matrix_rules_agree_with_the_domain_xml() {
        let mut checked = 0;
        for hv in Hypervisor::ALL {
            for cache in CacheMode::ALL {
                for io in IoMode::ALL {
                    for bus in Bus::ALL {
                        for format in Format::ALL {
                            for (source, tuning) in sources().into_iter().zip(tunings().cycle()) {
                                let cell = Cell {
                                    hypervisor: *hv,
                                    xen_mode: hv.desc().modes(&[XenMode::Pvh])[0],
                                    bus: *bus,
                                    cache: *cache,
                                    io: *io,
                                    tuning,
                                    ..crate::storage::testutil::cell(Backend::Local, *format)
                                };
                                let rendered = domain_xml::render(&spec(&cell, source.clone()));
                                match (check(&cell, &source), rendered) {
                                    // A host cell defines no domain (its own test below).
                                    (_, Err(DomainXmlError::Rule(SkipReason::Host(_)))) => {}
                                    (Ok(()), Ok(_)) => {}
                                    (Ok(()), Err(e)) => panic!("{cell:?} passes but: {e}"),
                                    // What the matrix does not vary for Xen: libxl ignores it,
                                    // so the XML leaves it out instead of refusing.
                                    (Err(SkipReason::XenBus | SkipReason::XenTuning), _) => {}
                                    // A shared directory ignores the disk dimensions.
                                    (Err(SkipReason::SharedDir(_)), _) => {}
                                    (Err(SkipReason::NativeAioNeedsDirect(_)), _)
                                        if hv.desc().block_layer != BlockLayer::Qemu => {}
                                    (Err(r), Ok(_)) => panic!("{cell:?} skipped ({r}) but renders"),
                                    (Err(r), Err(e)) => {
                                        let why = r.to_string();
                                        let xml = e.to_string();
                                        assert!(why.ends_with(&xml), "{why} vs {xml}");
                                        assert!(!matches!(e, DomainXmlError::Serialize(_)));
                                    }
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 100, "{checked}");
    }

    /// A host cell: raw format, a whole-disk layout, the guest disk options at their defaults;
    /// anything else is skipped with the reason.
    #[test]
    fn host_cells_run_raw_on_the_whole_disk_with_default_disk_options() {
        use crate::cell::{InstanceDisk, Layout};
        let ok = Cell {
            hypervisor: Hypervisor::Host,
            ..crate::storage::testutil::cell(Backend::Local, Format::Raw)
        };
        let file = &sources()[0];
        for layout in [Layout::Raw, Layout::Ext4, Layout::Xfs] {
            assert_eq!(
                check(
                    &Cell {
                        layout,
                        ..ok.clone()
                    },
                    file
                ),
                Ok(()),
                "{layout}"
            );
        }
        assert_eq!(check(&ok, &sources()[1]), Ok(()), "a block device");
        let skipped = |c: Cell, source: &DiskSource, why: &str| match check(&c, source) {
            Err(SkipReason::Host(w)) => assert!(w.contains(why), "{w}"),
            r => panic!("{c:?}: {r:?}"),
        };
        let qcow2 = Cell {
            format: Format::Qcow2,
            ..ok.clone()
        };
        skipped(qcow2, file, "--format raw");
        for layout in [Layout::PartExt4, Layout::LvmExt4, Layout::SplitLvmExt4] {
            let c = Cell {
                layout,
                ..ok.clone()
            };
            skipped(c, file, "whole disk only");
        }
        let cached = Cell {
            cache: CacheMode::Writeback,
            ..ok.clone()
        };
        skipped(cached, file, "no virtual disk");
        let scsi = Cell {
            bus: Bus::VirtioScsi,
            ..ok.clone()
        };
        skipped(scsi, file, "no virtual disk");
        let copy = Cell {
            instance: InstanceDisk::Copy,
            ..ok.clone()
        };
        skipped(copy, file, "flat disk");
        let shared = &sources()[4];
        skipped(ok.clone(), shared, "--layout ext4");
        let on_dir = Cell {
            layout: Layout::Ext4,
            ..ok
        };
        assert_eq!(check(&on_dir, shared), Ok(()));
    }

    #[test]
    fn native_aio_needs_o_direct_on_every_hypervisor_in_the_matrix() {
        let cell = Cell {
            cache: CacheMode::Writeback,
            ..crate::storage::testutil::cell(Backend::Local, Format::Raw)
        };
        let file = &sources()[0];
        let e = check(&cell, file).unwrap_err();
        assert!(e.to_string().contains("io=native needs cache=none"), "{e}");
        let xen = Cell {
            hypervisor: Hypervisor::Xen,
            xen_mode: Some(XenMode::Pvh),
            ..cell
        };
        assert_eq!(
            check(&xen, file),
            Err(SkipReason::NativeAioNeedsDirect(CacheMode::Writeback))
        );
    }

    /// hostdir runs once per workload (ext4, raw, virtio-blk, cache=none, io=native) and renders
    /// as a virtio-fs share on shared memory; every other value of a disk dimension is skipped
    /// with a reason.
    #[test]
    fn a_shared_directory_runs_once_and_renders_as_virtio_fs() {
        use crate::cell::Layout;
        let shared = sources().pop().unwrap();
        let ok = Cell {
            layout: Layout::Ext4,
            ..crate::storage::testutil::cell(Backend::Hostdir, Format::Raw)
        };
        assert_eq!(check(&ok, &shared), Ok(()));
        let xml = domain_xml::render(&spec(&ok, shared.clone())).unwrap();
        for want in [
            "<memoryBacking><source type=\"memfd\"/><access mode=\"shared\"/></memoryBacking>",
            "<filesystem type=\"mount\">",
            "<driver type=\"virtiofs\"/>",
            "<source socket=\"/w/virtiofs-1.sock\"/>",
            "<target dir=\"vmbench-test\"/>",
        ] {
            assert!(
                xml.replace(['\n', ' '], "")
                    .contains(&want.replace(' ', "")),
                "{want} in\n{xml}"
            );
        }
        assert!(!xml.contains("<disk"), "{xml}");
        let skipped = [
            Cell {
                layout: Layout::Raw,
                ..ok.clone()
            },
            Cell {
                layout: Layout::LvmExt4,
                ..ok.clone()
            },
            Cell {
                layout: Layout::SplitPartExt4,
                ..ok.clone()
            },
            Cell {
                layout: Layout::SplitLvmExt4,
                ..ok.clone()
            },
            Cell {
                format: Format::Qcow2,
                ..ok.clone()
            },
            Cell {
                bus: Bus::VirtioScsi,
                ..ok.clone()
            },
            Cell {
                io: IoMode::Threads,
                ..ok.clone()
            },
        ];
        for c in skipped {
            let e = check(&c, &shared).unwrap_err();
            assert!(matches!(e, SkipReason::SharedDir(_)), "{c:?}: {e}");
        }
        let xen = Cell {
            hypervisor: Hypervisor::Xen,
            xen_mode: Some(XenMode::Pvh),
            ..ok
        };
        assert!(check(&xen, &shared)
            .unwrap_err()
            .to_string()
            .contains("virtio-fs"));
    }

    #[test]
    fn qemu_tuning_is_skipped_on_xen_with_the_reason() {
        let file = &sources()[0];
        let xen = Cell {
            hypervisor: Hypervisor::Xen,
            xen_mode: Some(XenMode::Pvh),
            ..crate::storage::testutil::cell(Backend::Local, Format::Raw)
        };
        assert_eq!(check(&xen, file), Ok(()));
        for tuning in [
            DiskTuning {
                iothread: IoThread::On,
                ..Default::default()
            },
            DiskTuning {
                queues: Some(2),
                ..Default::default()
            },
            DiskTuning {
                pin: Pin::On,
                ..Default::default()
            },
        ] {
            let c = Cell {
                tuning,
                ..xen.clone()
            };
            let e = check(&c, file).unwrap_err();
            assert_eq!(e, SkipReason::XenQemuTuning);
            assert!(e.to_string().contains("use them with qemu or kvm"), "{e}");
            let qemu = Cell {
                hypervisor: Hypervisor::Qemu,
                xen_mode: None,
                ..c
            };
            assert_eq!(check(&qemu, file), Ok(()));
        }
    }

    #[test]
    fn device_names() {
        assert_eq!(guest_device_name(Hypervisor::Kvm, Bus::VirtioBlk), "vda");
        assert_eq!(guest_device_name(Hypervisor::Qemu, Bus::VirtioScsi), "sda");
        assert_eq!(guest_device_name(Hypervisor::Xen, Bus::VirtioScsi), "xvda");
    }
}
