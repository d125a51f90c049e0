//! The one home of every hypervisor rule: which datapath combinations can be expressed, and
//! which the matrix skips. The matrix's skip reasons ([`check`]) and the domain XML builder
//! ([`check_disk`]) both come here, so they cannot drift apart.
//!
//! Adding a rule: add a [`SkipReason`] variant (its message names what to do instead), test it
//! in [`check_disk`] if the domain definition cannot express it, or in [`check`] if it only
//! says what the matrix should not vary; add a case to the tests below.

use super::xen::{self, Datapath, Skip};
use super::DiskSpec;
use crate::cell::{Bus, CacheMode, Cell, Hypervisor, IoMode};
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
    if hv != Hypervisor::Xen {
        aio_rule(disk.cache, disk.io)?;
        return Ok(None);
    }
    xen::datapath(&disk.source, disk.format)
        .map(Some)
        .map_err(SkipReason::XenDatapath)
}

/// Every rule for a matrix cell whose disk will be `source` (see `storage::plan_source`): the
/// domain rules, plus the dimensions the matrix does not vary for Xen because libxl ignores
/// them.
pub fn check(cell: &Cell, source: &DiskSource) -> Result<(), SkipReason> {
    aio_rule(cell.cache, cell.io)?;
    if cell.hypervisor == Hypervisor::Xen {
        if cell.bus != Bus::VirtioBlk {
            return Err(SkipReason::XenBus);
        }
        if cell.cache != CacheMode::None || cell.io != IoMode::Native {
            return Err(SkipReason::XenTuning);
        }
    }
    check_disk(cell.hypervisor, &DiskSpec::for_cell(cell, source.clone())).map(drop)
}

/// The name the guest kernel gives the disk under test (first disk on its bus).
pub fn guest_device_name(hv: Hypervisor, bus: Bus) -> &'static str {
    match (hv, bus) {
        (Hypervisor::Xen, _) => "xvda",
        (_, Bus::VirtioBlk) => "vda",
        (_, Bus::VirtioScsi) => "sda",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Backend, Format, XenMode};
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
        ]
    }

    fn spec(cell: &Cell, source: DiskSource) -> DomainSpec {
        let files = GuestFiles {
            kernel: "/i/vmlinuz".into(),
            initrd: "/i/initrd".into(),
            console_log: "/r/console.log".into(),
            channel_socket: "/r/chan/agent.sock".into(),
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
                            for source in sources() {
                                let cell = Cell {
                                    hypervisor: *hv,
                                    xen_mode: (*hv == Hypervisor::Xen).then_some(XenMode::Pvh),
                                    bus: *bus,
                                    cache: *cache,
                                    io: *io,
                                    ..crate::storage::testutil::cell(Backend::Local, *format)
                                };
                                let rendered = domain_xml::render(&spec(&cell, source.clone()));
                                match (check(&cell, &source), rendered) {
                                    (Ok(()), Ok(_)) => {}
                                    (Ok(()), Err(e)) => panic!("{cell:?} passes but: {e}"),
                                    // What the matrix does not vary for Xen: libxl ignores it,
                                    // so the XML leaves it out instead of refusing.
                                    (Err(SkipReason::XenBus | SkipReason::XenTuning), _) => {}
                                    (Err(SkipReason::NativeAioNeedsDirect(_)), _)
                                        if *hv == Hypervisor::Xen => {}
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

    #[test]
    fn device_names() {
        assert_eq!(guest_device_name(Hypervisor::Kvm, Bus::VirtioBlk), "vda");
        assert_eq!(guest_device_name(Hypervisor::Qemu, Bus::VirtioScsi), "sda");
        assert_eq!(guest_device_name(Hypervisor::Xen, Bus::VirtioScsi), "xvda");
    }
}
