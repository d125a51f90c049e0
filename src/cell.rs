//! The benchmark matrix's vocabulary: one enum per dimension, and a [`Cell`] as one point of
//! their product. Every enum parses from the CLI spelling and lists the valid spellings when it
//! does not, so a typo is an exit-2 error that names the choices.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares a dimension enum with its CLI spellings, `Display`, `FromStr` and `ALL`.
///
/// A variant's attributes are its own (docs, `#[default]`), except `#[cfg(...)]`: a variant
/// compiled only under a cfg (`#[cfg(test)] Toy => "toy"`) carries it to every place it
/// appears: the variant, its `ALL` entry and its `as_str` arm. Parsing and the valid spellings
/// are read from `ALL`, so they follow.
macro_rules! dimension {
    // A variant's cfg: kept apart, it goes wherever the variant appears.
    (@munch $head:tt [$($done:tt)*] [$($cfg:tt)*] [$($attr:tt)*]
        #[cfg $c:tt] $($rest:tt)*) => {
        dimension!(@munch $head [$($done)*] [$($cfg)* #[cfg $c]] [$($attr)*] $($rest)*);
    };
    // Any other attribute is the variant's own.
    (@munch $head:tt [$($done:tt)*] [$($cfg:tt)*] [$($attr:tt)*]
        #[$($a:tt)*] $($rest:tt)*) => {
        dimension!(@munch $head [$($done)*] [$($cfg)*] [$($attr)* #[$($a)*]] $($rest)*);
    };
    (@munch $head:tt [$($done:tt)*] [$($cfg:tt)*] [$($attr:tt)*]
        $var:ident => $s:literal $(, $($rest:tt)*)?) => {
        dimension!(@munch $head [$($done)* ([$($cfg)*] [$($attr)*] $var $s)] [] []
            $($($rest)*)?);
    };
    (@munch [$(#[$m:meta])* $name:ident, $what:literal]
        [$(([$($cfg:tt)*] [$($attr:tt)*] $var:ident $s:literal))+] [] []) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum $name { $($($attr)* $($cfg)* $var),+ }

        impl $name {
            /// Every value, in display order.
            pub const ALL: &'static [$name] = &[$($($cfg)* $name::$var),+];
            /// The CLI spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($($cfg)* $name::$var => $s),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl std::str::FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                let s = s.trim();
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| UnknownValue {
                    what: $what,
                    got: s.to_string(),
                    valid: Self::ALL.iter().map(|v| v.as_str()).collect(),
                })
            }
        }
        impl TryFrom<String> for $name {
            type Error = UnknownValue;
            fn try_from(s: String) -> Result<Self, UnknownValue> { s.parse() }
        }
        impl From<$name> for String {
            fn from(v: $name) -> String { v.as_str().to_string() }
        }
    };
    ($(#[$m:meta])* $name:ident, $what:literal { $($variants:tt)+ }) => {
        dimension!(@munch [$(#[$m])* $name, $what] [] [] [] $($variants)+);
    };
}

/// A value that is not one of a dimension's spellings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown {what} '{got}' (valid: {})", valid.join(", "))]
pub struct UnknownValue {
    /// The dimension.
    pub what: &'static str,
    /// What the user wrote.
    pub got: String,
    /// The valid spellings.
    pub valid: Vec<&'static str>,
}

dimension!(
    /// Which hypervisor runs the guest.
    Hypervisor, "hypervisor" {
        /// QEMU with KVM acceleration (`<domain type='kvm'>`).
        Kvm => "kvm",
        /// QEMU with TCG, no acceleration (`<domain type='qemu'>`).
        Qemu => "qemu",
        /// Xen through libvirt's libxl driver.
        Xen => "xen",
        /// No guest: the workload runs on the host itself, on the same storage (the host rows
        /// of the write-ups; `src/matrix/host_cell.rs`).
        Host => "host",
    }
);

dimension!(
    /// Where the disk under test lives.
    Backend, "backend" {
        /// An image file in a local directory.
        Local => "local",
        /// A whole local block device (the "native partition" case).
        Block => "block",
        /// An image file on an NFS export.
        Nfs => "nfs",
        /// An iSCSI LUN.
        Iscsi => "iscsi",
        /// An LVM logical volume.
        Lvm => "lvm",
        /// A host directory shared with virtio-fs (no disk; the guest mounts the share).
        Hostdir => "hostdir",
        /// A Ceph RBD image (the run's embedded single-host cluster, cephx).
        Rbd => "rbd",
        /// Tests only: a raw file in a scratch directory (`storage/toy.rs`, issue 25's proof).
        #[cfg(test)] Toy => "toy",
    }
);

dimension!(
    /// The disk image format.
    Format, "format" {
        /// QEMU copy-on-write v2.
        Qcow2 => "qcow2",
        /// Raw bytes.
        Raw => "raw",
    }
);

dimension!(
    /// The guest-visible disk bus.
    Bus, "bus" {
        /// virtio-blk (`vdX`).
        VirtioBlk => "virtio-blk",
        /// virtio-scsi (`sdX`).
        VirtioScsi => "virtio-scsi",
    }
);

dimension!(
    /// QEMU's host cache mode for the disk.
    CacheMode, "cache mode" {
        /// O_DIRECT, no host page cache.
        None => "none",
        /// Host page cache, write-back.
        Writeback => "writeback",
        /// Host page cache, write-through.
        Writethrough => "writethrough",
        /// O_DIRECT plus no flushes.
        Directsync => "directsync",
        /// Flushes ignored (unsafe).
        Unsafe => "unsafe",
    }
);

dimension!(
    /// QEMU's AIO mode for the disk.
    IoMode, "io mode" {
        /// Linux native AIO (needs cache=none or directsync).
        Native => "native",
        /// A thread pool.
        Threads => "threads",
        /// io_uring.
        IoUring => "io_uring",
    }
);

dimension!(
    /// How the Xen guest is virtualized (ignored for KVM/QEMU).
    XenMode, "xen mode" {
        /// PVH: paravirtualized, hardware-assisted.
        Pvh => "pvh",
        /// Fully virtualized.
        Hvm => "hvm",
    }
);

dimension!(
    /// What the guest puts on the disk under test before the engine runs.
    Layout, "layout" {
        /// The raw device.
        Raw => "raw",
        /// An ext4 filesystem made in the guest.
        Ext4 => "ext4",
        /// An XFS filesystem made in the guest.
        Xfs => "xfs",
        /// ext4 on one primary partition (MBR) of the disk, made in the guest.
        PartExt4 => "part-ext4",
        /// ext4 on an LVM logical volume (PV, VG, one LV over the whole disk), made in the guest.
        LvmExt4 => "lvm-ext4",
        /// XFS on an LVM logical volume made in the guest (XFS needs a disk of 300 MiB or more).
        LvmXfs => "lvm-xfs",
        /// ext4 on partition 1 of a disk split in two (MBR, two primary partitions of one size;
        /// a PV, VG and LV on partition 2), made in the guest. Its disk is laid out exactly as
        /// split-lvm-ext4's: the same partitions and LVM objects, and ext4 made on both
        /// partition 1 and the LV; only partition 1's is mounted (an unmounted filesystem does
        /// no I/O). The disk is twice the engine's, so each half is what the engine asked for.
        SplitPartExt4 => "split-part-ext4",
        /// ext4 on the LV on partition 2 of the same split disk as split-part-ext4 (the same
        /// partitions, LVM objects and filesystems); only the LV's filesystem is mounted.
        SplitLvmExt4 => "split-lvm-ext4",
    }
);

impl Layout {
    /// The smallest disk (`disk_mib`, one side of a split disk), in MiB, its filesystem can be
    /// made on: mkfs.xfs (xfsprogs 6) refuses a filesystem under 300 MB; an LV needs the PV's
    /// metadata (1 MiB) and whole 4 MiB extents, and a split side under about 8 MiB failed in
    /// the guest, so the LVM and split layouts ask for 16. `None` where any disk will do.
    pub fn min_disk_mib(self) -> Option<u64> {
        match self {
            Layout::Xfs | Layout::LvmXfs => Some(300),
            Layout::LvmExt4 | Layout::SplitPartExt4 | Layout::SplitLvmExt4 => Some(16),
            Layout::Raw | Layout::Ext4 | Layout::PartExt4 => None,
        }
    }

    /// Whether the engine sees a mounted filesystem (everything but `raw`).
    pub fn is_filesystem(self) -> bool {
        self != Layout::Raw
    }

    /// How many volumes of the engine's size the disk holds: 2 for the split layouts (the disk
    /// is made twice the size the engine asks for, so the side a cell measures gets all of it),
    /// 1 for the rest.
    pub fn volumes_on_disk(self) -> u64 {
        match self {
            Layout::SplitPartExt4 | Layout::SplitLvmExt4 => 2,
            _ => 1,
        }
    }
}

impl IoMode {
    /// libvirt spells io_uring as `io_uring` too; kept as a method so the mapping has one place.
    pub fn libvirt_name(self) -> &'static str {
        self.as_str()
    }
}

/// The network between QEMU and an embedded storage server.
///
/// `loopback` (the default) is an unshaped link; `RATE[+DELAY]` (e.g. `100mbit`, `1gbit+0.5ms`)
/// is shaped with `tc` in both directions: RATE with tbf, DELAY (one way, so the round trip
/// gains twice it) with netem. Only embedded servers can be shaped.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub enum Link {
    /// No shaping.
    #[default]
    Loopback,
    /// Shaped to a rate and an optional one-way delay.
    Shaped {
        /// Bits per second, each direction.
        rate_bps: u64,
        /// Added one-way delay in microseconds (0: none).
        delay_us: u32,
    },
}

/// The spellings `--link` accepts, for error messages.
const LINK_FORMS: &str = "loopback, or RATE[+DELAY] with RATE a number and one of \
    bit/kbit/mbit/gbit (e.g. 100mbit, 1gbit) and DELAY a number and us/ms (e.g. 0.5ms)";

/// A `--link` value that is not `loopback` or `RATE[+DELAY]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad link '{got}': {why} (valid: {LINK_FORMS})")]
pub struct BadLink {
    /// What the user wrote.
    pub got: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Link {
    /// Whether traffic is shaped (not `loopback`).
    pub fn is_shaped(self) -> bool {
        self != Link::Loopback
    }

    /// The default, unshaped link (serde's skip test takes a reference).
    pub fn is_loopback(&self) -> bool {
        *self == Link::Loopback
    }

    /// The rate in bytes per second, if shaped.
    pub fn rate_bytes_per_sec(self) -> Option<f64> {
        match self {
            Link::Loopback => None,
            Link::Shaped { rate_bps, .. } => Some(rate_bps as f64 / 8.0),
        }
    }

    /// A name-safe form for cell ids (`net100mbit`, `net1gbit-500us`).
    fn slug(self) -> String {
        format!(
            "net{}",
            self.to_string().replace('+', "-").replace('.', "_")
        )
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Link::Shaped { rate_bps, delay_us } = *self else {
            return f.write_str("loopback");
        };
        let (n, unit) = [
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
        ]
        .into_iter()
        .find(|(d, _)| rate_bps % d == 0)
        .map(|(d, u)| (rate_bps / d, u))
        .unwrap_or((rate_bps, "bit"));
        write!(f, "{n}{unit}")?;
        match delay_us {
            0 => Ok(()),
            d if d % 1000 == 0 => write!(f, "+{}ms", d / 1000),
            d => write!(f, "+{d}us"),
        }
    }
}

impl std::str::FromStr for Link {
    type Err = BadLink;
    fn from_str(s: &str) -> Result<Self, BadLink> {
        let s = s.trim();
        let bad = |why| BadLink {
            got: s.to_string(),
            why,
        };
        if s == "loopback" {
            return Ok(Link::Loopback);
        }
        let (rate, delay) = match s.split_once('+') {
            Some((r, d)) => (r, Some(d)),
            None => (s, None),
        };
        let rate_bps = parse_scaled(
            rate,
            &[("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)],
        )
        .ok_or_else(|| bad("the rate is not a number with bit, kbit, mbit or gbit"))?;
        if !(1_000.0..=100e9).contains(&rate_bps) {
            return Err(bad("the rate must be between 1kbit and 100gbit"));
        }
        let delay_us = match delay {
            None => 0.0,
            Some(d) => parse_scaled(d, &[("ms", 1e3), ("us", 1.0)])
                .ok_or_else(|| bad("the delay is not a number with us or ms"))?,
        };
        if !(0.0..=10e6).contains(&delay_us) || (delay.is_some() && delay_us < 1.0) {
            return Err(bad("the delay must be between 1us and 10s"));
        }
        Ok(Link::Shaped {
            rate_bps: rate_bps.round() as u64,
            delay_us: delay_us.round() as u32,
        })
    }
}

/// `NUMBERunit` with one of `units` (name, factor) to a plain number; `None` when malformed.
fn parse_scaled(s: &str, units: &[(&str, f64)]) -> Option<f64> {
    let s = s.trim().to_ascii_lowercase();
    let (num, factor) = units
        .iter()
        .find_map(|(u, f)| s.strip_suffix(u).map(|n| (n.to_string(), *f)))?;
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * factor)
}

impl TryFrom<String> for Link {
    type Error = BadLink;
    fn try_from(s: String) -> Result<Self, BadLink> {
        s.parse()
    }
}
impl From<Link> for String {
    fn from(v: Link) -> String {
        v.to_string()
    }
}

/// A workload as named on the CLI: a preset or a user fio job file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum WorkloadId {
    /// A built-in preset, by name (the workload module's preset table).
    Preset(String),
    /// `file:PATH`: a user fio job file.
    JobFile(std::path::PathBuf),
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadId::Preset(n) => f.write_str(n),
            WorkloadId::JobFile(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// Parses the spelling only: `file:PATH` or a preset name. Which names exist is the workload
/// module's table (`crate::workload::check` names the valid ones); the dimension types do not
/// depend on it, and a record naming a preset this build lacks still loads.
impl std::str::FromStr for WorkloadId {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        let s = s.trim();
        if let Some(path) = s.strip_prefix("file:") {
            return Ok(WorkloadId::JobFile(path.into()));
        }
        if s.is_empty() {
            return Err(UnknownValue {
                what: "workload",
                got: String::new(),
                valid: vec!["a preset name", "file:PATH"],
            });
        }
        Ok(WorkloadId::Preset(s.to_string()))
    }
}

impl TryFrom<String> for WorkloadId {
    type Error = UnknownValue;
    fn try_from(s: String) -> Result<Self, UnknownValue> {
        s.parse()
    }
}
impl From<WorkloadId> for String {
    fn from(v: WorkloadId) -> String {
        v.to_string()
    }
}

/// One point of the matrix: everything that decides how the disk under test is built and used.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Cell {
    /// Which hypervisor.
    pub hypervisor: Hypervisor,
    /// Xen virtualization mode; `None` for KVM/QEMU.
    pub xen_mode: Option<XenMode>,
    /// Where the disk lives.
    pub backend: Backend,
    /// Image format.
    pub format: Format,
    /// Guest disk bus.
    pub bus: Bus,
    /// Host cache mode.
    pub cache: CacheMode,
    /// Host AIO mode.
    pub io: IoMode,
    /// What the guest puts on the disk.
    pub layout: Layout,
    /// The I/O engine job.
    pub workload: WorkloadId,
    /// fio parameters swept over the preset's own (`--bs`, `--iodepth` ...); empty = the
    /// preset's values. Absent in records older than the sweeps.
    #[serde(
        default,
        rename = "fio",
        skip_serializing_if = "JobOverrides::is_empty"
    )]
    pub job: JobOverrides,
    /// QEMU disk tuning (`--iothread`, `--queues`, `--pin`); default = none of it. Absent in
    /// records older than the tuning dimensions.
    #[serde(default, skip_serializing_if = "DiskTuning::is_default")]
    pub tuning: DiskTuning,
    /// The libvirt host it runs on (`--host NAME=URI`); cells stored before hosts existed load
    /// as the default host, and the default host is left out of the JSON (stored cells of one
    /// host read as before).
    #[serde(default, skip_serializing_if = "HostName::is_default")]
    pub host: HostName,
    /// The network to the embedded storage server (stored cells without it were `loopback`;
    /// loopback is left out of the JSON, so stored cells read as before).
    #[serde(default, skip_serializing_if = "Link::is_loopback")]
    pub link: Link,
    /// The QEMU build that runs it (`--emulator NAME=PATH`); cells stored before the dimension
    /// load as the default (libvirt's own binary), which is left out of the JSON.
    #[serde(default, skip_serializing_if = "EmulatorName::is_default")]
    pub emulator: EmulatorName,
    /// How the disk is made from the run's base image (`--instance-disk`); cells stored before
    /// the dimension were `flat`, which is left out of the JSON.
    #[serde(default, skip_serializing_if = "InstanceDisk::is_flat")]
    pub instance: InstanceDisk,
}

/// A short user-given name that enters cell ids, file names and metric labels: lowercase
/// letters, digits and '-', starting with a letter. `$default` is the value a run uses when the
/// user names none; it stays out of ids and labels, so stored cells read as before.
macro_rules! short_name {
    ($(#[$m:meta])* $name:ident, $what:literal, $default:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The value a run uses when none is named.
            pub const DEFAULT: &'static str = $default;

            /// True for the default, which stays out of cell ids and labels (old ids keep
            /// matching).
            pub fn is_default(&self) -> bool {
                self.0 == Self::DEFAULT
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name(Self::DEFAULT.into())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                let ok = !s.is_empty()
                    && s.len() <= 32
                    && s.starts_with(|c: char| c.is_ascii_lowercase())
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if ok {
                    Ok($name(s.to_string()))
                } else {
                    Err(UnknownValue {
                        what: $what,
                        got: s.to_string(),
                        valid: vec!["1-32 of a-z, 0-9 and '-', starting with a letter"],
                    })
                }
            }
        }
        impl TryFrom<String> for $name {
            type Error = UnknownValue;
            fn try_from(s: String) -> Result<Self, UnknownValue> {
                s.parse()
            }
        }
        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }
    };
}

short_name!(
    /// The name of a libvirt host (`--host NAME=URI`). The default host is `local`.
    HostName,
    "host name",
    "local"
);

short_name!(
    /// The name of a QEMU build (`--emulator NAME=PATH`, libvirt's `<emulator>`): the system
    /// under test of an in-run A/B. The default, `default`, is the binary libvirt picks itself.
    EmulatorName,
    "emulator name",
    "default"
);

/// The first value of each dimension's default list (`vmbench matrix` with no options, on the
/// local backend): a QEMU/TCG cell, local qcow2 on virtio-blk, cache none, io native, the raw
/// device, pg-randrw, no sweeps or tuning, the default host over loopback. Tests and callers
/// name only the dimensions they vary (`Cell { backend, ..Cell::default() }`), so a new
/// dimension touches none of them.
impl Default for Cell {
    fn default() -> Cell {
        Cell {
            hypervisor: Hypervisor::Qemu,
            xen_mode: None,
            backend: Backend::Local,
            format: Format::Qcow2,
            bus: Bus::VirtioBlk,
            cache: CacheMode::None,
            io: IoMode::Native,
            layout: Layout::Raw,
            workload: WorkloadId::Preset("pg-randrw".into()),
            job: JobOverrides::default(),
            tuning: DiskTuning::default(),
            host: HostName::default(),
            link: Link::default(),
            emulator: EmulatorName::default(),
            instance: InstanceDisk::Flat,
        }
    }
}

impl Cell {
    /// A stable, filesystem- and libvirt-name-safe identifier, e.g.
    /// `qemu-local-qcow2-virtio-blk-none-native-raw-pg-randrw`.
    pub fn id(&self) -> String {
        let mut parts = vec![self.hypervisor.as_str().to_string()];
        if let Some(m) = self.xen_mode {
            parts.push(m.as_str().to_string());
        }
        parts.extend([
            self.backend.as_str().into(),
            self.format.as_str().into(),
            self.bus.as_str().into(),
            self.cache.as_str().into(),
            self.io.as_str().replace('_', ""),
            self.layout.as_str().into(),
            workload_slug(&self.workload),
        ]);
        // Only a shaped link enters the id, so ids from before the link dimension still match.
        if self.link.is_shaped() {
            parts.push(self.link.slug());
        }
        let mut id = parts.join("-") + &self.job.slug() + &self.tuning.slug();
        if self.instance.from_base() {
            id.push_str(&format!("-from-{}", self.instance));
        }
        if !self.emulator.is_default() {
            id.push_str(&format!("-emu-{}", self.emulator));
        }
        if !self.host.is_default() {
            id.push_str(&format!("-on-{}", self.host));
        }
        id
    }

    /// Every dimension's name, in [`Cell::dimensions`]' order: the keys of include/exclude
    /// rules and of the HTML and OpenMetrics labels.
    pub const DIMENSION_NAMES: &'static [&'static str] = &[
        "hypervisor",
        "xen_mode",
        "backend",
        "format",
        "bus",
        "cache",
        "io",
        "layout",
        "workload",
        "bs",
        "iodepth",
        "numjobs",
        "rwmix",
        "direct",
        "iothread",
        "queues",
        "pin",
        "host",
        "link",
        "emulator",
        "instance",
    ];

    /// The cell's dimensions by name (snake_case, usable as a metric label), in cell-id order.
    /// Every view that lists dimensions (report grouping, OpenMetrics labels) reads this one list,
    /// so a new dimension appears everywhere once it is added here.
    pub fn dimensions(&self) -> Vec<(&'static str, String)> {
        vec![
            ("hypervisor", self.hypervisor.to_string()),
            (
                "xen_mode",
                self.xen_mode.map(|m| m.to_string()).unwrap_or_default(),
            ),
            ("backend", self.backend.to_string()),
            ("format", self.format.to_string()),
            ("bus", self.bus.to_string()),
            ("cache", self.cache.to_string()),
            ("io", self.io.to_string()),
            ("layout", self.layout.to_string()),
            ("workload", self.workload.to_string()),
            (
                "bs",
                self.job
                    .bs
                    .as_ref()
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
            ),
            ("iodepth", opt_string(self.job.iodepth)),
            ("numjobs", opt_string(self.job.numjobs)),
            ("rwmix", opt_string(self.job.rwmix)),
            ("direct", opt_string(self.job.direct)),
            ("iothread", self.tuning.iothread.to_string()),
            ("queues", opt_string(self.tuning.queues)),
            ("pin", self.tuning.pin.to_string()),
            ("host", self.host.to_string()),
            ("link", self.link.to_string()),
            ("emulator", self.emulator.to_string()),
            ("instance", self.instance.to_string()),
        ]
    }

    /// A short label for table headers: only hypervisor, backend, format (and the datapath
    /// dimensions when they differ from the defaults).
    pub fn label(&self) -> String {
        let mut s = format!("{}/{}/{}", self.hypervisor, self.backend, self.format);
        if let Some(m) = self.xen_mode {
            s = format!("{}-{m}/{}/{}", self.hypervisor, self.backend, self.format);
        }
        if self.bus != Bus::VirtioBlk {
            s.push_str(&format!("/{}", self.bus));
        }
        if self.cache != CacheMode::None || self.io != IoMode::Native {
            s.push_str(&format!("/{}+{}", self.cache, self.io));
        }
        if self.layout != Layout::Raw {
            s.push_str(&format!("/{}", self.layout));
        }
        if self.link.is_shaped() {
            s.push_str(&format!("/{}", self.link));
        }
        if self.instance.from_base() {
            s.push_str(&format!("/{}", self.instance));
        }
        if !self.emulator.is_default() {
            s.push_str(&format!("@{}", self.emulator));
        }
        if !self.host.is_default() {
            s = format!("{}:{s}", self.host);
        }
        s
    }
}

fn opt_string<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// File-name-safe slug of a workload (a job file becomes `file-<stem>`).
fn workload_slug(w: &WorkloadId) -> String {
    match w {
        WorkloadId::Preset(n) => n.clone(),
        WorkloadId::JobFile(p) => {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("job");
            let safe: String = stem
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("file-{safe}")
        }
    }
}

/// Parses a comma list of a dimension (`"qcow2,raw"`), rejecting empty lists and duplicates.
pub fn parse_list<T>(s: &str) -> Result<Vec<T>, UnknownValue>
where
    T: std::str::FromStr<Err = UnknownValue> + PartialEq,
{
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let v: T = part.parse()?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// A fio block size as fio reads it: a whole number of bytes with an optional k, m or g
/// suffix (`4k`, `64k`, `1m`, `512`). Kept as written, lower-cased, so it goes into the job text
/// and the cell id unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlockSize(String);

impl BlockSize {
    /// Bytes.
    pub fn bytes(&self) -> u64 {
        let (num, _) = self.0.split_at(self.0.len() - self.unit().len());
        let mult = match self.unit() {
            "k" => 1 << 10,
            "m" => 1 << 20,
            "g" => 1 << 30,
            _ => 1,
        };
        num.parse::<u64>().unwrap_or(0).saturating_mul(mult)
    }

    fn unit(&self) -> &str {
        self.0.trim_start_matches(|c: char| c.is_ascii_digit())
    }
}

impl fmt::Display for BlockSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for BlockSize {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        let t = s.trim().to_ascii_lowercase();
        let digits = t.trim_end_matches(['k', 'm', 'g']);
        let suffix_len = t.len() - digits.len();
        let ok = suffix_len <= 1
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && digits.parse::<u64>().is_ok_and(|n| n > 0);
        if !ok {
            return Err(UnknownValue {
                what: "block size (bs)",
                got: s.trim().to_string(),
                valid: vec!["a whole number of bytes with an optional k, m or g, e.g. 4k, 64k, 1m"],
            });
        }
        Ok(BlockSize(t))
    }
}

impl TryFrom<String> for BlockSize {
    type Error = UnknownValue;
    fn try_from(s: String) -> Result<Self, UnknownValue> {
        s.parse()
    }
}
impl From<BlockSize> for String {
    fn from(v: BlockSize) -> String {
        v.0
    }
}

/// fio parameters a sweep (`--bs`, `--iodepth`, `--numjobs`, `--rwmix`, `--direct`) sets over a fio
/// preset's own values; `None` keeps the preset's. The job text is rewritten by
/// `workload::fio` (`JobOverrides::apply`); job files and bonnie++ refuse them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default)]
pub struct JobOverrides {
    /// Block size.
    pub bs: Option<BlockSize>,
    /// Queue depth per job.
    pub iodepth: Option<u32>,
    /// Parallel jobs.
    pub numjobs: Option<u32>,
    /// Read share of a mixed workload, in percent (fio `rwmixread`).
    pub rwmix: Option<u8>,
    /// fio `direct`: 1 bypasses the guest's page cache (every preset's own value), 0 is
    /// buffered I/O through it (the Longhorn write-up's pod ran fio buffered, on a file).
    pub direct: Option<u8>,
}

impl JobOverrides {
    /// Nothing set: the preset runs as written.
    pub fn is_empty(&self) -> bool {
        self == &JobOverrides::default()
    }

    /// The set keys as fio spells them, in cell-id order.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![];
        if let Some(b) = &self.bs {
            v.push(("bs", b.to_string()));
        }
        if let Some(d) = self.iodepth {
            v.push(("iodepth", d.to_string()));
        }
        if let Some(n) = self.numjobs {
            v.push(("numjobs", n.to_string()));
        }
        if let Some(r) = self.rwmix {
            v.push(("rwmixread", r.to_string()));
        }
        if let Some(d) = self.direct {
            v.push(("direct", d.to_string()));
        }
        v
    }

    /// The cell id suffix (`-bs4k-qd32-rw70`): empty when nothing is set, so ids without a
    /// sweep do not change.
    pub fn slug(&self) -> String {
        fn short(k: &str) -> &str {
            match k {
                "iodepth" => "qd",
                "numjobs" => "nj",
                "rwmixread" => "rw",
                k => k,
            }
        }
        self.pairs()
            .iter()
            .map(|(k, v)| format!("-{}{}", short(k), v.to_lowercase()))
            .collect()
    }
}

dimension!(
    /// How the instance's disk is made from the run's base image, as a cloud lays out instance
    /// disks (OpenStack Nova's `images_type`).
    #[derive(Default)]
    InstanceDisk, "instance disk" {
        /// An empty disk of its own, no base (vmbench's first layout).
        #[default]
        Flat => "flat",
        /// A qcow2 whose backing file is the shared base (Nova's `qcow2`, its default).
        Overlay => "overlay",
        /// The base copied in full into the disk (Nova's `raw`/`flat`, and `lvm`).
        Copy => "copy",
        /// A copy-on-write clone of a protected snapshot of the base (Nova's `rbd`).
        Clone => "clone",
    }
);

impl InstanceDisk {
    /// `flat`, the default (left out of ids and the JSON).
    pub fn is_flat(&self) -> bool {
        *self == InstanceDisk::Flat
    }

    /// Whether the disk starts from the run's base image.
    pub fn from_base(self) -> bool {
        self != InstanceDisk::Flat
    }
}

dimension!(
    /// Whether the disk under test gets a dedicated QEMU I/O thread (libvirt `<iothreads>`).
    #[derive(Default)]
    IoThread, "iothread" {
        /// The disk's I/O runs in QEMU's main loop.
        #[default]
        Off => "off",
        /// One I/O thread, given to the disk (virtio-scsi: to its controller).
        On => "on",
    }
);

dimension!(
    /// Whether vCPUs, the emulator and the I/O thread are pinned to host CPUs (`<cputune>`).
    #[derive(Default)]
    Pin, "pin" {
        /// The host scheduler places them.
        #[default]
        Off => "off",
        /// One host CPU per vCPU, one more shared by the emulator and the I/O thread.
        On => "on",
    }
);

/// QEMU disk tuning a sweep sets (`--iothread`, `--queues`, `--pin`); the default is QEMU's
/// and libvirt's own behaviour, and leaves the cell id as it was.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(default)]
pub struct DiskTuning {
    /// A dedicated I/O thread for the disk.
    pub iothread: IoThread,
    /// virtio queues of the disk (virtio-scsi: of its controller); `None` = QEMU's default
    /// (one per vCPU for virtio-blk since QEMU 5.2).
    pub queues: Option<u32>,
    /// CPU pinning.
    pub pin: Pin,
}

impl DiskTuning {
    /// Nothing asked: the domain is what it was before the tuning dimensions.
    pub fn is_default(&self) -> bool {
        self == &DiskTuning::default()
    }

    /// The cell id suffix (`-iothread-q2-pin`), empty by default.
    pub fn slug(&self) -> String {
        let mut s = String::new();
        if self.iothread == IoThread::On {
            s.push_str("-iothread");
        }
        if let Some(q) = self.queues {
            s.push_str(&format!("-q{q}"));
        }
        if self.pin == Pin::On {
            s.push_str("-pin");
        }
        s
    }
}

/// Parses a comma list of whole numbers in `min..=max` (`"1,4,16"`) for a numeric sweep
/// dimension, rejecting anything else with the valid range.
pub fn parse_numbers<T>(
    s: &str,
    what: &'static str,
    min: u32,
    max: u32,
) -> Result<Vec<T>, UnknownValue>
where
    T: TryFrom<u32> + PartialEq,
{
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || UnknownValue {
            what,
            got: part.to_string(),
            valid: vec![range_text(min, max)],
        };
        let n: u32 = part.parse().map_err(|_| bad())?;
        if !(min..=max).contains(&n) {
            return Err(bad());
        }
        let v = T::try_from(n).map_err(|_| bad())?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The valid-range text of a numeric dimension, for the ranges the sweeps use (`UnknownValue`
/// lists `&'static str` choices).
fn range_text(min: u32, max: u32) -> &'static str {
    match (min, max) {
        (0, 100) => "a whole number from 0 to 100",
        (1, 65536) => "a whole number from 1 to 65536",
        (1, 1024) => "a whole number from 1 to 1024",
        (1, 256) => "a whole number from 1 to 256",
        (0, 1) => "0 or 1",
        _ => "a whole number in range",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cell_is_the_first_of_each_default_list() {
        let c = Cell::default();
        assert_eq!(
            c.id(),
            "qemu-local-qcow2-virtio-blk-none-native-raw-pg-randrw"
        );
        // The defaults stay out of stored JSON, so a default cell reads back as itself.
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("host") && !json.contains("link"), "{json}");
        assert_eq!(serde_json::from_str::<Cell>(&json).unwrap(), c);
    }

    #[test]
    fn unknown_value_lists_the_valid_ones() {
        let e = "vmware".parse::<Hypervisor>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown hypervisor 'vmware' (valid: kvm, qemu, xen, host)"
        );
        assert!("".parse::<WorkloadId>().is_err());
    }

    dimension!(
        /// A dimension whose variants carry cfgs, for the macro's test.
        Probe, "probe" {
            /// Always there.
            Plain => "plain",
            /// Never compiled.
            #[cfg(any())]
            Never => "never",
            /// A cfg that holds, after a doc line.
            #[cfg(all())]
            Kept => "kept",
        }
    );

    /// A variant's cfg reaches its `ALL` entry, its spelling, its parsing and the valid list.
    #[test]
    fn a_variants_cfg_applies_wherever_it_appears() {
        assert_eq!(Probe::ALL, [Probe::Plain, Probe::Kept]);
        assert_eq!("kept".parse::<Probe>().unwrap().as_str(), "kept");
        let e = "never".parse::<Probe>().unwrap_err();
        assert_eq!(e.to_string(), "unknown probe 'never' (valid: plain, kept)");
    }

    #[test]
    fn layout_names_round_trip() {
        for l in Layout::ALL {
            assert_eq!(l.as_str().parse::<Layout>().unwrap(), *l);
            let json = serde_json::to_string(l).unwrap();
            assert_eq!(json, format!("\"{}\"", l.as_str()));
            assert_eq!(serde_json::from_str::<Layout>(&json).unwrap(), *l);
        }
        assert_eq!(
            "split-part-ext4".parse::<Layout>().unwrap(),
            Layout::SplitPartExt4
        );
        assert_eq!(
            "split-lvm-ext4".parse::<Layout>().unwrap(),
            Layout::SplitLvmExt4
        );
        let e = "split".parse::<Layout>().unwrap_err().to_string();
        assert!(
            e.ends_with(
                "(valid: raw, ext4, xfs, part-ext4, lvm-ext4, lvm-xfs, split-part-ext4, \
                 split-lvm-ext4)"
            ),
            "{e}"
        );
        let split = [Layout::SplitPartExt4, Layout::SplitLvmExt4];
        for l in Layout::ALL {
            let want = if split.contains(l) { 2 } else { 1 };
            assert_eq!(l.volumes_on_disk(), want, "{l}");
        }
        assert!(split.iter().all(|l| l.is_filesystem()));
    }

    #[test]
    fn lists_parse_and_dedupe() {
        let v: Vec<Format> = parse_list("qcow2, raw,qcow2").unwrap();
        assert_eq!(v, vec![Format::Qcow2, Format::Raw]);
        assert!(parse_list::<Format>("qcow2,vmdk").is_err());
    }

    #[test]
    fn cell_id_is_name_safe() {
        let c = Cell {
            io: IoMode::IoUring,
            workload: WorkloadId::JobFile("/x/my job<1>.fio".into()),
            ..Cell::default()
        };
        let id = c.id();
        assert!(
            id.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'),
            "{id}"
        );
        assert_eq!(
            id,
            "qemu-local-qcow2-virtio-blk-none-iouring-raw-file-my_job_1_"
        );
        let on_h2 = Cell {
            host: "h2".parse().unwrap(),
            ..c.clone()
        };
        assert_eq!(on_h2.id(), format!("{id}-on-h2"));
        assert!(on_h2.label().starts_with("h2:"), "{}", on_h2.label());
        assert!(on_h2.dimensions().contains(&("host", "h2".into())));
        assert!("H2".parse::<HostName>().is_err() && "a/b".parse::<HostName>().is_err());
    }

    /// A cell stored before hosts existed has no `host`: it loads as the default host and
    /// keeps its id.
    #[test]
    fn old_cells_load_as_the_default_host() {
        let old = r#"{"hypervisor":"qemu","xen_mode":null,"backend":"local","format":"raw",
            "bus":"virtio-blk","cache":"none","io":"native","layout":"raw","workload":"pg-randrw"}"#;
        let c: Cell = serde_json::from_str(old).unwrap();
        assert!(c.host.is_default());
        assert_eq!(
            c.id(),
            "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw"
        );
    }
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    fn cell() -> Cell {
        Cell {
            format: Format::Raw,
            ..Cell::default()
        }
    }

    const OLD_JSON: &str = r#"{"hypervisor":"qemu","xen_mode":null,"backend":"local","format":"raw","bus":"virtio-blk","cache":"none","io":"native","layout":"raw","workload":"pg-randrw"}"#;

    #[test]
    fn records_older_than_the_sweeps_load_and_keep_their_id_and_json() {
        let old: Cell = serde_json::from_str(OLD_JSON).unwrap();
        assert_eq!(old, cell());
        assert_eq!(
            old.id(),
            "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw"
        );
        assert_eq!(serde_json::to_string(&old).unwrap(), OLD_JSON);
    }

    #[test]
    fn set_sweeps_enter_the_id_dimensions_and_json() {
        let c = Cell {
            job: JobOverrides {
                bs: Some("64K".parse().unwrap()),
                numjobs: Some(2),
                ..Default::default()
            },
            tuning: DiskTuning {
                iothread: IoThread::On,
                queues: Some(4),
                pin: Pin::On,
            },
            ..cell()
        };
        assert_eq!(
            c.id(),
            "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw-bs64k-nj2-iothread-q4-pin"
        );
        let dims: std::collections::BTreeMap<_, _> = c.dimensions().into_iter().collect();
        assert_eq!(dims["bs"], "64k");
        assert_eq!(dims["numjobs"], "2");
        assert_eq!(dims["iodepth"], "");
        assert_eq!(
            (dims["iothread"].as_str(), dims["queues"].as_str()),
            ("on", "4")
        );
        assert_eq!(dims["pin"], "on");
        let back: Cell = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let off = Cell {
            tuning: DiskTuning {
                queues: Some(1),
                ..Default::default()
            },
            ..cell()
        };
        // An explicit single queue is not QEMU's default (one per vCPU): its own cell.
        assert_ne!(off.id(), cell().id());
    }

    #[test]
    fn block_sizes_and_numbers_parse_or_name_the_valid_form() {
        let b: BlockSize = " 64K ".parse().unwrap();
        assert_eq!((b.to_string(), b.bytes()), ("64k".to_string(), 65536));
        assert_eq!("512".parse::<BlockSize>().unwrap().bytes(), 512);
        assert_eq!("1m".parse::<BlockSize>().unwrap().bytes(), 1 << 20);
        for bad in ["", "k", "0", "4kk", "4 k", "-4k", "4t"] {
            let e = bad.parse::<BlockSize>().unwrap_err().to_string();
            assert!(e.contains("e.g. 4k, 64k, 1m"), "{bad}: {e}");
        }
        let v: Vec<u32> = parse_numbers("1, 4,4,16", "iodepth", 1, 65536).unwrap();
        assert_eq!(v, vec![1, 4, 16]);
        let e = parse_numbers::<u8>("70,101", "rwmix", 0, 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown rwmix '101' (valid: a whole number from 0 to 100)"
        );
    }

    #[test]
    fn links_parse_print_and_refuse_bad_spellings() {
        assert_eq!("loopback".parse::<Link>().unwrap(), Link::Loopback);
        let l: Link = "1gbit+0.5ms".parse().unwrap();
        assert_eq!(
            l,
            Link::Shaped {
                rate_bps: 1_000_000_000,
                delay_us: 500
            }
        );
        assert_eq!(l.to_string(), "1gbit+500us");
        assert_eq!("100Mbit".parse::<Link>().unwrap().to_string(), "100mbit");
        assert_eq!(
            "1.5gbit+2ms".parse::<Link>().unwrap().to_string(),
            "1500mbit+2ms"
        );
        assert_eq!(
            "100mbit".parse::<Link>().unwrap().rate_bytes_per_sec(),
            Some(12.5e6)
        );
        for bad in [
            "100",
            "100mb",
            "fast",
            "1gbit+",
            "1gbit+5",
            "0mbit",
            "-1gbit",
            "1gbit+0ms",
        ] {
            let e = bad.parse::<Link>().unwrap_err().to_string();
            assert!(e.contains("valid: loopback, or RATE[+DELAY]"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_a_shaped_link_enters_the_cell_id() {
        let mut c = crate::storage::testutil::cell(Backend::Nfs, Format::Raw);
        let old = c.id();
        assert!(!old.contains("net"), "{old}");
        c.link = "1gbit+0.5ms".parse().unwrap();
        assert_eq!(c.id(), format!("{old}-net1gbit-500us"));
        let stored = serde_json::to_value(&c).unwrap();
        assert_eq!(stored["link"], "1gbit+500us");
        let mut v = stored.clone();
        v.as_object_mut().unwrap().remove("link");
        let back: Cell = serde_json::from_value(v).unwrap();
        assert_eq!(
            back.link,
            Link::Loopback,
            "a cell stored before links loads"
        );
    }
}
