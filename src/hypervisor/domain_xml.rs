//! Domain XML from typed structs; every value escaped by the serializer.
//!
//! [`render`] checks a [`DomainSpec`] (absolute paths, names libvirt accepts, combinations the
//! hypervisor can express), maps it onto private serde structs that mirror libvirt's domain
//! schema, and serializes them with `quick_xml::se` at full quoting, so no value is ever pasted
//! into markup by hand.
//!
//! KVM/QEMU: direct kernel boot, the disk under test on virtio-blk (`vda`) or virtio-scsi
//! (`sda`), serial console to a file, the agent on a virtio-serial port bound to a unix socket,
//! no balloon, no NIC, no graphics.
//!
//! Xen (libvirt's libxl driver): PVH (`xenpvh`) or HVM, the disk on the Xen block frontend
//! (`xvda`) with the datapath from [`super::xen`], the agent on a Xen PV console channel. libxl
//! ignores `cache`/`io` on disks (QEMU's qdisk and blkback pick their own), so they are not
//! written for Xen. A PVH guest has no emulated UART: its console is the PV console (`hvc0`), a
//! pty libxl hands to xenconsoled, so `console_log` cannot be a libvirt file there; capture it
//! with xenconsoled's `--log=guest` (`/var/log/xen/console/guest-NAME.log`). An HVM guest gets
//! its serial port written to `console_log` (libxl's `serial = "file:PATH"`).

use super::rules::{self, SkipReason};
use super::xen::{Datapath, Skip};
use super::{descriptor::BlockLayer, DiskSpec, DomainSpec, METADATA_NS};
use crate::cell::{Bus, CacheMode, Format, Hypervisor, IoThread, XenMode};
use crate::storage::{DiskSource, NetAuth, NetProtocol};
use quick_xml::se::{QuoteLevel, SeError, Serializer};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Local name of the marker element in `<metadata>` (attributes `run` and `cell`).
pub const METADATA_ELEMENT: &str = "marker";
/// The guest device a Xen guest's second PV console (the agent channel) appears as; the first
/// (`hvc0`) is the Xen console. Xen PV consoles carry their name only in xenstore, not in the
/// guest's sysfs, so the agent is told the device on the command line.
pub const XEN_AGENT_PORT: &str = "/dev/hvc1";

/// A [`DomainSpec`] that cannot be turned into a domain definition.
#[derive(Debug, thiserror::Error)]
pub enum DomainXmlError {
    /// A path that must be absolute is relative.
    #[error("{what} must be an absolute path, got '{}'", path.display())]
    RelativePath {
        /// Which field.
        what: &'static str,
        /// The value given.
        path: PathBuf,
    },
    /// A path is not UTF-8 (libvirt's XML is UTF-8).
    #[error("{what} is not valid UTF-8: '{}'", path.display())]
    NonUtf8Path {
        /// Which field.
        what: &'static str,
        /// The value given.
        path: PathBuf,
    },
    /// A value has a control character; XML cannot carry most of them and attribute
    /// normalization would change the rest.
    #[error("{what} contains a control character (newline, tab, NUL ...): {value:?}")]
    ControlChar {
        /// Which field.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// A domain name libvirt rejects.
    #[error("domain name {0:?} is invalid: it must be non-empty and contain no '/'")]
    BadName(String),
    /// A disk serial outside libvirt's schema.
    #[error("disk serial {0:?} is invalid: use 1-20 of letters, digits, space and _ . + -")]
    BadSerial(String),
    /// A network disk host that is neither a DNS name nor an IP address.
    #[error("network disk host {0:?} is invalid: use a DNS name or an IP address")]
    BadHost(String),
    /// A network disk without a name (export path + file, or IQN/LUN).
    #[error("network disk name is empty: give the export path and file (NFS) or IQN/LUN (iSCSI)")]
    EmptyNetworkName,
    /// A count that must be positive is zero.
    #[error("{0} must be at least 1, got 0")]
    Zero(&'static str),
    /// Linux native AIO without O_DIRECT: QEMU refuses to start.
    #[error("{}", SkipReason::NativeAioNeedsDirect(*.0))]
    NativeAioNeedsDirect(CacheMode),
    /// An I/O cap on a Xen disk: libxl has no `<iotune>`.
    #[error("--iops-limit/--bw-limit need qemu or kvm: libvirt's libxl driver has no <iotune>")]
    IoTuneOnXen,
    /// A QEMU binary for a hypervisor whose driver picks its own device model.
    #[error("<emulator> names a QEMU binary: {0} picks its own device model")]
    EmulatorNotTaken(Hypervisor),
    /// Xen without PVH/HVM.
    #[error("hypervisor xen needs a xen mode (valid: pvh, hvm)")]
    MissingXenMode,
    /// A Xen mode on a non-Xen hypervisor.
    #[error("xen mode {mode} given for hypervisor {hypervisor}; xen modes apply only to xen")]
    XenModeWithoutXen {
        /// The hypervisor.
        hypervisor: Hypervisor,
        /// The mode given.
        mode: XenMode,
    },
    /// A disk Xen cannot reach through libxl, with what to do instead.
    #[error(transparent)]
    Xen(#[from] Skip),
    /// Another hypervisor rule (see [`rules`]).
    #[error(transparent)]
    Rule(SkipReason),
    /// A shared host directory where a disk was expected (a bug: callers render it as a
    /// `<filesystem>`).
    #[error("a shared host directory (virtio-fs) is not a disk")]
    SharedDirIsNotADisk,
    /// The serializer failed (a bug: the structs are fixed).
    #[error("serializing the domain XML")]
    Serialize(#[source] SeError),
}

impl From<SkipReason> for DomainXmlError {
    fn from(r: SkipReason) -> Self {
        match r {
            SkipReason::NativeAioNeedsDirect(c) => DomainXmlError::NativeAioNeedsDirect(c),
            SkipReason::XenDatapath(s) => DomainXmlError::Xen(s),
            other => DomainXmlError::Rule(other),
        }
    }
}

/// The base kernel command line for a guest: console on the serial port (the Xen PV console for
/// PVH), the agent as init, an immediate reboot on panic (which ends the domain, since every
/// `on_*` is `destroy`), and only warnings on the console so the log stays small; then
/// [`BOOT_ONLY`].
pub fn kernel_cmdline(hv: Hypervisor, xen_mode: Option<XenMode>) -> String {
    let d = hv.desc();
    let console = d.console(xen_mode);
    let mut s = format!("console={console} rdinit=/init panic=-1 loglevel=4 {BOOT_ONLY}");
    if d.block_layer == BlockLayer::Qemu {
        s.push(' ');
        s.push_str(QEMU_BOOT_ONLY);
    }
    if let Some(port) = d.agent_port() {
        s.push_str(" vmbench.port=");
        s.push_str(port);
    }
    s
}

/// Work the stock kernel does at every boot that this guest never uses, skipped: the crypto
/// self-tests (about 0.6 s of a TCG boot: `crypto_algapi_init` and `crypto_kdf108_init` were
/// the two longest initcalls), the PS/2 keyboard/mouse probe, the IO-APIC timer check, IPv6
/// (the guest has no network), audit, three of the four legacy UARTs (the console is ttyS0) and
/// kprobe trace events. None of them is on the I/O path a cell measures (mitigations and the
/// clocksource are left as they are, since those are). `scripts/bench-boot --cmdline WORDS`
/// times a word against the line without it: these, together, 0.76x (bare boots, 6 pairs).
pub const BOOT_ONLY: &str = "cryptomgr.notests i8042.noaux i8042.nomux i8042.nopnp \
    i8042.dumbkbd no_timer_check ipv6.disable=1 audit=0 8250.nr_uarts=1 \
    initcall_blacklist=init_kprobe_trace";

/// [`BOOT_ONLY`]'s words for a QEMU/KVM guest only: no ACPI PCI interrupt routing. Its every
/// virtio device interrupts through MSI-X (the guest's /proc/interrupts: `PCI-MSI
/// virtio1-req.1`, the same with and without it), so the legacy INTx links the kernel enables
/// through ACPI at each device's probe (about 0.2 s of AML each under TCG: "ACPI: \_SB_.LNKB:
/// Enabled at IRQ 10") are never used. Not for Xen: an HVM guest's platform device may take
/// its event-channel interrupt on INTx.
pub const QEMU_BOOT_ONLY: &str = "acpi=noirq";

pub use super::rules::guest_device_name;

/// Renders the libvirt domain XML for `spec`, or says why it cannot be expressed.
pub fn render(spec: &DomainSpec) -> Result<String, DomainXmlError> {
    let domain = build(spec)?;
    let mut out = String::new();
    let mut ser =
        Serializer::with_root(&mut out, Some("domain")).map_err(DomainXmlError::Serialize)?;
    ser.indent(' ', 2);
    ser.set_quote_level(QuoteLevel::Full);
    domain.serialize(ser).map_err(DomainXmlError::Serialize)?;
    out.push('\n');
    Ok(out)
}

/// Checks `spec` and maps it onto the schema structs.
fn build(spec: &DomainSpec) -> Result<Domain<'_>, DomainXmlError> {
    check_name(&spec.name)?;
    no_control("run id", &spec.run_id)?;
    no_control("cell id", &spec.cell_id)?;
    no_control("kernel command line", &spec.cmdline)?;
    if spec.vcpus == 0 {
        return Err(DomainXmlError::Zero("vcpus"));
    }
    if spec.memory_mib == 0 {
        return Err(DomainXmlError::Zero("memory_mib"));
    }
    let hypervisor = spec.hypervisor;
    if !hypervisor.desc().runs_guest {
        return Err(DomainXmlError::Rule(SkipReason::Host(
            "a host cell defines no domain: its workload runs on the host itself",
        )));
    }
    let xen_mode = match (hypervisor.desc().has_modes, spec.xen_mode) {
        (true, Some(m)) => Some(m),
        (true, None) => return Err(DomainXmlError::MissingXenMode),
        (false, Some(mode)) => return Err(DomainXmlError::XenModeWithoutXen { hypervisor, mode }),
        (false, None) => None,
    };
    if xen_mode.is_some() && spec.pinning.is_some() {
        return Err(DomainXmlError::Rule(SkipReason::XenQemuTuning));
    }
    let console_log = match spec.console_pty {
        true => None,
        false => Some(abs_path("console_log", &spec.console_log)?),
    };
    let mut devices = match xen_mode {
        Some(mode) => xen_devices(&spec.disk, mode, console_log)?,
        None => qemu_devices(&spec.disk, console_log)?,
    };
    devices.emulator = emulator(spec)?;
    Ok(Domain {
        kind: spec.hypervisor.desc().domain_type,
        name: &spec.name,
        metadata: Metadata {
            marker: Marker {
                xmlns: METADATA_NS,
                run: &spec.run_id,
                cell: &spec.cell_id,
            },
        },
        memory: Memory {
            unit: "MiB",
            value: spec.memory_mib,
        },
        memory_backing: shared_memory_backing(&spec.disk.source),
        vcpu: spec.vcpus,
        iothreads: iothreads(&spec.disk),
        cputune: spec
            .pinning
            .as_ref()
            .map(|p| cputune(p, iothreads(&spec.disk))),
        os: Os {
            os_type: os_type(xen_mode),
            kernel: abs_path("kernel", &spec.kernel)?,
            initrd: abs_path("initrd", &spec.initrd)?,
            cmdline: &spec.cmdline,
        },
        features: features(xen_mode),
        clock: Clock { offset: "utc" },
        on_poweroff: "destroy",
        on_reboot: "destroy",
        on_crash: "destroy",
        devices,
    })
}

/// The I/O thread id the disk under test uses (libvirt numbers them from 1).
const DISK_IOTHREAD: u32 = 1;

/// `<iothreads>`: one when the disk asks for a dedicated I/O thread.
fn iothreads(disk: &DiskSpec) -> Option<u32> {
    (disk.iothread == IoThread::On).then_some(DISK_IOTHREAD)
}

/// `<cputune>`: each vCPU on its own host CPU, the emulator and the I/O thread (if any) on the
/// remaining one (see [`super::pinning`]).
fn cputune(p: &super::pinning::Pinning, iothreads: Option<u32>) -> Cputune {
    Cputune {
        vcpupin: p
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, cpu)| VcpuPin {
                vcpu: i as u32,
                cpuset: cpu.to_string(),
            })
            .collect(),
        emulatorpin: CpuSet {
            cpuset: p.emulator.to_string(),
        },
        iothreadpin: iothreads.map(|id| IoThreadPin {
            iothread: id,
            cpuset: p.emulator.to_string(),
        }),
    }
}

/// `<os><type>`: HVM for KVM/QEMU and Xen HVM, `xenpvh` for Xen PVH.
fn os_type(xen_mode: Option<XenMode>) -> OsType {
    match xen_mode {
        Some(XenMode::Pvh) => OsType {
            arch: "x86_64",
            machine: Some("xenpvh"),
            value: "xenpvh",
        },
        Some(XenMode::Hvm) | None => OsType {
            arch: "x86_64",
            machine: None,
            value: "hvm",
        },
    }
}

/// ACPI is what lets an HVM guest power off; PVH powers off by hypercall and has no features.
fn features(xen_mode: Option<XenMode>) -> Option<Features> {
    match xen_mode {
        Some(XenMode::Pvh) => None,
        Some(XenMode::Hvm) => Some(Features {
            pae: Some(()),
            acpi: (),
            apic: Some(()),
        }),
        None => Some(Features {
            pae: None,
            acpi: (),
            apic: None,
        }),
    }
}

/// No USB controller on a KVM/QEMU guest. libvirt otherwise adds a PIIX3 UHCI one (the guest
/// has no USB device), and the guest kernel's USB early-handoff quirk for it alone took 0.41 s
/// of a TCG boot ("quirk_usb_early_handoff took 414915 usecs"); a bare `qemu-system-x86_64`
/// boot has none, so it was part of the gap between a cell's boot and the bare one.
const NO_USB: Controller = Controller {
    kind: "usb",
    index: 0,
    model: "none",
    driver: None,
};

/// KVM/QEMU devices: the disk on virtio, serial to a file, the agent on virtio-serial.
fn qemu_devices<'a>(
    disk: &'a DiskSpec,
    console_log: Option<&'a str>,
) -> Result<Devices<'a>, DomainXmlError> {
    rules::check_disk(Hypervisor::Qemu, disk)?;
    if let DiskSource::SharedDir { socket, .. } = &disk.source {
        return shared_dir_devices(socket, console_log);
    }
    check_serial(&disk.serial)?;
    let (kind, source) = source(&disk.source)?;
    let dev = guest_device_name(Hypervisor::Qemu, disk.bus);
    let bus = match disk.bus {
        Bus::VirtioBlk => "virtio",
        Bus::VirtioScsi => "scsi",
    };
    if disk.queues == Some(0) {
        return Err(DomainXmlError::Zero("queues"));
    }
    // virtio-blk takes the I/O thread and queues on the disk; virtio-scsi on its controller.
    let iothread = iothreads(disk);
    let on_disk = disk.bus == Bus::VirtioBlk;
    Ok(Devices {
        emulator: None,
        disk: Some(Disk {
            kind,
            device: "disk",
            driver: Driver {
                name: "qemu",
                format: format_name(disk.format),
                cache: Some(disk.cache.as_str()),
                io: Some(disk.io.libvirt_name()),
                queues: disk.queues.filter(|_| on_disk),
                iothread: iothread.filter(|_| on_disk),
            },
            source,
            target: Target { dev, bus },
            iotune: disk.iotune.map(Iotune::from),
            serial: Some(&disk.serial),
        }),
        filesystem: None,
        controller: [
            Some(NO_USB),
            (!on_disk).then_some(Controller {
                kind: "scsi",
                index: 0,
                model: "virtio-scsi",
                driver: (disk.queues.is_some() || iothread.is_some()).then_some(ControllerDriver {
                    queues: disk.queues,
                    iothread,
                }),
            }),
        ]
        .into_iter()
        .flatten()
        .collect(),
        serial: Some(file_serial(console_log)),
        console: None,
        channel: agent_channel("virtio"),
        memballoon: Some(Memballoon { model: "none" }),
    })
}

/// Xen devices: the disk on the Xen block frontend with the libxl datapath, the console (PV
/// console for PVH, serial file for HVM), the agent on a Xen PV console channel.
fn xen_devices<'a>(
    disk: &'a DiskSpec,
    mode: XenMode,
    console_log: Option<&'a str>,
) -> Result<Devices<'a>, DomainXmlError> {
    let datapath = rules::check_disk(Hypervisor::Xen, disk)?.unwrap_or(Datapath::Qdisk);
    if disk.iotune.is_some() {
        return Err(DomainXmlError::IoTuneOnXen);
    }
    let (kind, source) = source(&disk.source)?;
    let (serial, console) = match mode {
        XenMode::Hvm => (Some(file_serial(console_log)), None),
        XenMode::Pvh => (
            None,
            Some(Console {
                kind: "pty",
                target: ConsoleTarget {
                    kind: "xen",
                    port: 0,
                },
            }),
        ),
    };
    Ok(Devices {
        emulator: None,
        disk: Some(Disk {
            kind,
            device: "disk",
            driver: Driver {
                name: datapath.driver_name(),
                format: format_name(disk.format),
                cache: None,
                io: None,
                queues: None,
                iothread: None,
            },
            source,
            target: Target {
                dev: guest_device_name(Hypervisor::Xen, disk.bus),
                bus: "xen",
            },
            iotune: None,
            // libxl drops disk serials; the guest finds the disk as xvda.
            serial: None,
        }),
        filesystem: None,
        controller: Vec::new(),
        serial,
        console,
        channel: agent_channel("xen"),
        // libvirt adds the Xen balloon itself; `none` is a QEMU notion.
        memballoon: None,
    })
}

/// KVM/QEMU devices for a shared host directory: no disk, the directory as a virtio-fs
/// `<filesystem>` on an externally started virtiofsd's socket, serial and agent as usual.
fn shared_dir_devices<'a>(
    socket: &'a Path,
    console_log: Option<&'a str>,
) -> Result<Devices<'a>, DomainXmlError> {
    Ok(Devices {
        emulator: None,
        disk: None,
        controller: vec![NO_USB],
        filesystem: Some(FsDevice {
            kind: "mount",
            driver: FsDriver { kind: "virtiofs" },
            source: FsSource {
                socket: abs_path("virtiofsd socket", socket)?,
            },
            target: FsTarget {
                dir: vmbench_proto::TEST_FS_TAG,
            },
        }),
        serial: Some(file_serial(console_log)),
        console: None,
        channel: agent_channel("virtio"),
        memballoon: Some(Memballoon { model: "none" }),
    })
}

/// vhost-user (virtiofsd) maps the guest's RAM: it must be shared memory (memfd).
fn shared_memory_backing(source: &DiskSource) -> Option<MemoryBacking> {
    matches!(source, DiskSource::SharedDir { .. }).then_some(MemoryBacking {
        source: KindAttr { kind: "memfd" },
        access: AccessMode { mode: "shared" },
    })
}

/// The serial port (port 0, the guest's ttyS0) written to `path`, or a pty on the libvirt host
/// when there is no path (a remote host).
fn file_serial(path: Option<&str>) -> Serial<'_> {
    Serial {
        kind: if path.is_some() { "file" } else { "pty" },
        source: path.map(|path| PathSource { path }),
        target: Port { port: 0 },
    }
}

/// The agent's channel, reached through the libvirt connection (`virDomainOpenChannel`), so it
/// names no path vmbench connects to. QEMU: a unix socket whose path libvirt picks on the
/// libvirt host; libxl opens only pty channels.
fn agent_channel(target: &'static str) -> Channel {
    let (kind, mode) = match target {
        "xen" => ("pty", None),
        _ => ("unix", Some("bind")),
    };
    Channel {
        kind,
        source: ChannelSource { mode },
        target: ChannelTarget {
            kind: target,
            name: vmbench_proto::PORT_NAME,
        },
    }
}

/// libvirt's `<driver type>` for a format.
fn format_name(f: Format) -> &'static str {
    match f {
        Format::Qcow2 => "qcow2",
        Format::Raw => "raw",
    }
}

/// The `<disk type>` and `<source>` for a disk source.
fn source(src: &DiskSource) -> Result<(&'static str, Source<'_>), DomainXmlError> {
    let empty = Source {
        file: None,
        dev: None,
        protocol: None,
        name: None,
        host: None,
        identity: None,
        auth: None,
    };
    Ok(match src {
        DiskSource::File { path } => (
            "file",
            Source {
                file: Some(abs_path("disk image path", path)?),
                ..empty
            },
        ),
        DiskSource::Block { dev } => (
            "block",
            Source {
                dev: Some(abs_path("disk block device", dev)?),
                ..empty
            },
        ),
        DiskSource::SharedDir { .. } => return Err(DomainXmlError::SharedDirIsNotADisk),
        DiskSource::Network {
            protocol,
            name,
            host,
            port,
            auth,
        } => {
            if name.is_empty() {
                return Err(DomainXmlError::EmptyNetworkName);
            }
            no_control("network disk name", name)?;
            check_host(host)?;
            let (identity, auth) = net_auth(*protocol, auth.as_ref());
            let protocol = match protocol {
                NetProtocol::Nfs => "nfs",
                NetProtocol::Iscsi => "iscsi",
                NetProtocol::Rbd => "rbd",
            };
            let host = Some(Host {
                name: host,
                port: *port,
            });
            (
                "network",
                Source {
                    protocol: Some(protocol),
                    name: Some(name),
                    host,
                    identity,
                    auth,
                    ..empty
                },
            )
        }
    })
}

/// The NFS `<identity>` and the iSCSI `<auth>` of a network disk. libnfs connects as the QEMU
/// user unless told otherwise: an NFS disk without an identity claims root (an external export
/// without root squash); the embedded export names its owner's uid. CHAP names the libvirt
/// secret by usage, never its value.
fn net_auth(protocol: NetProtocol, auth: Option<&NetAuth>) -> (Option<Identity>, Option<Auth>) {
    match (protocol, auth) {
        (NetProtocol::Nfs, Some(NetAuth::NfsIdentity { uid, gid })) => (
            Some(Identity {
                user: format!("+{uid}"),
                group: format!("+{gid}"),
            }),
            None,
        ),
        (NetProtocol::Nfs, _) => (
            Some(Identity {
                user: "root".into(),
                group: "root".into(),
            }),
            None,
        ),
        (
            NetProtocol::Iscsi,
            Some(NetAuth::IscsiChap {
                username,
                secret_usage,
            }),
        ) => (None, Some(secret_auth("iscsi", username, secret_usage))),
        (
            NetProtocol::Rbd,
            Some(NetAuth::Cephx {
                username,
                secret_usage,
            }),
        ) => (None, Some(secret_auth("ceph", username, secret_usage))),
        (NetProtocol::Iscsi | NetProtocol::Rbd, _) => (None, None),
    }
}

/// `<auth username=...><secret type=KIND usage=.../></auth>`: the secret by its usage, never
/// its value.
fn secret_auth(kind: &'static str, username: &str, usage: &str) -> Auth {
    Auth {
        username: username.to_string(),
        secret: AuthSecret {
            kind,
            usage: usage.to_string(),
        },
    }
}

/// `<emulator>`: the QEMU binary of an in-run A/B side, for the hypervisors that take one.
fn emulator(spec: &DomainSpec) -> Result<Option<&str>, DomainXmlError> {
    let Some(path) = &spec.emulator else {
        return Ok(None);
    };
    if !spec.hypervisor.desc().takes_emulator {
        return Err(DomainXmlError::EmulatorNotTaken(spec.hypervisor));
    }
    abs_path("emulator", path).map(Some)
}

/// An absolute, UTF-8, control-character-free path as a string.
fn abs_path<'a>(what: &'static str, path: &'a Path) -> Result<&'a str, DomainXmlError> {
    let s = path.to_str().ok_or_else(|| DomainXmlError::NonUtf8Path {
        what,
        path: path.to_path_buf(),
    })?;
    // libvirt's schema wants a leading '/' and at least one more character for file paths.
    if !path.is_absolute() || s.len() < 2 {
        return Err(DomainXmlError::RelativePath {
            what,
            path: path.to_path_buf(),
        });
    }
    no_control(what, s)?;
    Ok(s)
}

/// Rejects control characters: XML 1.0 cannot carry most, and attribute-value normalization
/// turns tab and newline into spaces, so the value would not round-trip.
fn no_control(what: &'static str, s: &str) -> Result<(), DomainXmlError> {
    if s.chars().any(char::is_control) {
        return Err(DomainXmlError::ControlChar {
            what,
            value: s.to_string(),
        });
    }
    Ok(())
}

/// libvirt refuses names with '/' (they become file names) and empty names.
fn check_name(name: &str) -> Result<(), DomainXmlError> {
    no_control("domain name", name)?;
    if name.is_empty() || name.contains('/') {
        return Err(DomainXmlError::BadName(name.to_string()));
    }
    Ok(())
}

/// libvirt's `diskSerial` pattern; QEMU truncates serials to 20 bytes (virtio-blk's ID field),
/// so a longer one would not be what the agent sees.
fn check_serial(serial: &str) -> Result<(), DomainXmlError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "_.+- ".contains(c);
    if serial.is_empty() || serial.len() > 20 || !serial.chars().all(ok) {
        return Err(DomainXmlError::BadSerial(serial.to_string()));
    }
    Ok(())
}

/// libvirt's `dnsName` or an IPv4/IPv6 address.
fn check_host(host: &str) -> Result<(), DomainXmlError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || ".-:".contains(c);
    if host.is_empty() || !host.chars().all(ok) {
        return Err(DomainXmlError::BadHost(host.to_string()));
    }
    Ok(())
}

// ---- schema structs: field order is element order; `@x` is an attribute, `$text` the text ----

#[derive(Serialize)]
struct Domain<'a> {
    #[serde(rename = "@type")]
    kind: &'static str,
    name: &'a str,
    metadata: Metadata<'a>,
    memory: Memory,
    #[serde(rename = "memoryBacking", skip_serializing_if = "Option::is_none")]
    memory_backing: Option<MemoryBacking>,
    vcpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    iothreads: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cputune: Option<Cputune>,
    os: Os<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    features: Option<Features>,
    clock: Clock,
    on_poweroff: &'static str,
    on_reboot: &'static str,
    on_crash: &'static str,
    devices: Devices<'a>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    #[serde(rename = "vmbench:marker")]
    marker: Marker<'a>,
}

#[derive(Serialize)]
struct Marker<'a> {
    #[serde(rename = "@xmlns:vmbench")]
    xmlns: &'static str,
    #[serde(rename = "@run")]
    run: &'a str,
    #[serde(rename = "@cell")]
    cell: &'a str,
}

#[derive(Serialize)]
struct Memory {
    #[serde(rename = "@unit")]
    unit: &'static str,
    #[serde(rename = "$text")]
    value: u64,
}

#[derive(Serialize)]
struct Os<'a> {
    #[serde(rename = "type")]
    os_type: OsType,
    kernel: &'a str,
    initrd: &'a str,
    cmdline: &'a str,
}

#[derive(Serialize)]
struct OsType {
    #[serde(rename = "@arch")]
    arch: &'static str,
    #[serde(rename = "@machine", skip_serializing_if = "Option::is_none")]
    machine: Option<&'static str>,
    #[serde(rename = "$text")]
    value: &'static str,
}

#[derive(Serialize)]
struct Features {
    #[serde(skip_serializing_if = "Option::is_none")]
    pae: Option<()>,
    acpi: (),
    #[serde(skip_serializing_if = "Option::is_none")]
    apic: Option<()>,
}

#[derive(Serialize)]
struct MemoryBacking {
    source: KindAttr,
    access: AccessMode,
}

#[derive(Serialize)]
struct KindAttr {
    #[serde(rename = "@type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct AccessMode {
    #[serde(rename = "@mode")]
    mode: &'static str,
}

/// `<filesystem type='mount'>` with the virtiofs driver.
#[derive(Serialize)]
struct FsDevice<'a> {
    #[serde(rename = "@type")]
    kind: &'static str,
    driver: FsDriver,
    source: FsSource<'a>,
    target: FsTarget,
}

#[derive(Serialize)]
struct FsDriver {
    #[serde(rename = "@type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct FsSource<'a> {
    #[serde(rename = "@socket")]
    socket: &'a str,
}

#[derive(Serialize)]
struct FsTarget {
    #[serde(rename = "@dir")]
    dir: &'static str,
}

#[derive(Serialize)]
struct Clock {
    #[serde(rename = "@offset")]
    offset: &'static str,
}

#[derive(Serialize)]
struct Devices<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    emulator: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<Disk<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    controller: Vec<Controller>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filesystem: Option<FsDevice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serial: Option<Serial<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    console: Option<Console>,
    channel: Channel,
    #[serde(skip_serializing_if = "Option::is_none")]
    memballoon: Option<Memballoon>,
}

#[derive(Serialize)]
struct Disk<'a> {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@device")]
    device: &'static str,
    driver: Driver,
    source: Source<'a>,
    target: Target,
    #[serde(skip_serializing_if = "Option::is_none")]
    iotune: Option<Iotune>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serial: Option<&'a str>,
}

#[derive(Serialize)]
struct Iotune {
    #[serde(skip_serializing_if = "Option::is_none")]
    total_bytes_sec: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_iops_sec: Option<u64>,
}

impl From<super::IoTune> for Iotune {
    fn from(t: super::IoTune) -> Self {
        Iotune {
            total_bytes_sec: t.total_bytes_sec,
            total_iops_sec: t.total_iops_sec,
        }
    }
}

#[derive(Serialize)]
struct Driver {
    #[serde(rename = "@name")]
    name: &'static str,
    #[serde(rename = "@type")]
    format: &'static str,
    #[serde(rename = "@cache", skip_serializing_if = "Option::is_none")]
    cache: Option<&'static str>,
    #[serde(rename = "@io", skip_serializing_if = "Option::is_none")]
    io: Option<&'static str>,
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    queues: Option<u32>,
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    iothread: Option<u32>,
}

#[derive(Serialize)]
struct Cputune {
    vcpupin: Vec<VcpuPin>,
    emulatorpin: CpuSet,
    #[serde(skip_serializing_if = "Option::is_none")]
    iothreadpin: Option<IoThreadPin>,
}

#[derive(Serialize)]
struct VcpuPin {
    #[serde(rename = "@vcpu")]
    vcpu: u32,
    #[serde(rename = "@cpuset")]
    cpuset: String,
}

#[derive(Serialize)]
struct CpuSet {
    #[serde(rename = "@cpuset")]
    cpuset: String,
}

#[derive(Serialize)]
struct IoThreadPin {
    #[serde(rename = "@iothread")]
    iothread: u32,
    #[serde(rename = "@cpuset")]
    cpuset: String,
}

#[derive(Serialize)]
struct ControllerDriver {
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    queues: Option<u32>,
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    iothread: Option<u32>,
}

#[derive(Serialize)]
struct Source<'a> {
    #[serde(rename = "@file", skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    dev: Option<&'a str>,
    #[serde(rename = "@protocol", skip_serializing_if = "Option::is_none")]
    protocol: Option<&'static str>,
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<Host<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<Auth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    identity: Option<Identity>,
}

#[derive(Serialize)]
struct Auth {
    #[serde(rename = "@username")]
    username: String,
    secret: AuthSecret,
}

#[derive(Serialize)]
struct AuthSecret {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@usage")]
    usage: String,
}

#[derive(Serialize)]
struct Host<'a> {
    #[serde(rename = "@name")]
    name: &'a str,
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
}

#[derive(Serialize)]
struct Identity {
    #[serde(rename = "@user")]
    user: String,
    #[serde(rename = "@group")]
    group: String,
}

#[derive(Serialize)]
struct Target {
    #[serde(rename = "@dev")]
    dev: &'static str,
    #[serde(rename = "@bus")]
    bus: &'static str,
}

#[derive(Serialize)]
struct Controller {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@index")]
    index: u32,
    #[serde(rename = "@model")]
    model: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver: Option<ControllerDriver>,
}

#[derive(Serialize)]
struct Serial<'a> {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<PathSource<'a>>,
    target: Port,
}

#[derive(Serialize)]
struct PathSource<'a> {
    #[serde(rename = "@path")]
    path: &'a str,
}

#[derive(Serialize)]
struct Port {
    #[serde(rename = "@port")]
    port: u32,
}

#[derive(Serialize)]
struct Console {
    #[serde(rename = "@type")]
    kind: &'static str,
    target: ConsoleTarget,
}

#[derive(Serialize)]
struct ConsoleTarget {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@port")]
    port: u32,
}

#[derive(Serialize)]
struct Channel {
    #[serde(rename = "@type")]
    kind: &'static str,
    source: ChannelSource,
    target: ChannelTarget,
}

#[derive(Serialize)]
struct ChannelSource {
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
}

#[derive(Serialize)]
struct ChannelTarget {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@name")]
    name: &'static str,
}

#[derive(Serialize)]
struct Memballoon {
    #[serde(rename = "@model")]
    model: &'static str,
}
