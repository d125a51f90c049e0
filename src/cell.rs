//! The benchmark matrix's vocabulary: one enum per dimension, and a [`Cell`] as one point of
//! their product. Every enum parses from the CLI spelling and lists the valid spellings when it
//! does not, so a typo is an exit-2 error that names the choices.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares a dimension enum with its CLI spellings, `Display`, `FromStr` and `ALL`.
macro_rules! dimension {
    ($(#[$m:meta])* $name:ident, $what:literal { $($(#[$vm:meta])* $var:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum $name { $($(#[$vm])* $var),+ }

        impl $name {
            /// Every value, in display order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// The CLI spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$var => $s),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl std::str::FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s.trim() {
                    $($s => Ok($name::$var),)+
                    other => Err(UnknownValue {
                        what: $what,
                        got: other.to_string(),
                        valid: vec![$($s),+],
                    }),
                }
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
    }
);

impl Layout {
    /// Whether the engine sees a mounted filesystem (everything but `raw`).
    pub fn is_filesystem(self) -> bool {
        self != Layout::Raw
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
    FioFile(std::path::PathBuf),
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadId::Preset(n) => f.write_str(n),
            WorkloadId::FioFile(p) => write!(f, "file:{}", p.display()),
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
            return Ok(WorkloadId::FioFile(path.into()));
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
    /// The network to the embedded storage server (stored cells without it were `loopback`).
    #[serde(default)]
    pub link: Link,
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
        parts.join("-")
    }

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
            ("link", self.link.to_string()),
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
        s
    }
}

/// File-name-safe slug of a workload (a job file becomes `file-<stem>`).
fn workload_slug(w: &WorkloadId) -> String {
    match w {
        WorkloadId::Preset(n) => n.clone(),
        WorkloadId::FioFile(p) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_value_lists_the_valid_ones() {
        let e = "vmware".parse::<Hypervisor>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown hypervisor 'vmware' (valid: kvm, qemu, xen)"
        );
        assert!("".parse::<WorkloadId>().is_err());
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
            hypervisor: Hypervisor::Qemu,
            xen_mode: None,
            backend: Backend::Local,
            format: Format::Qcow2,
            bus: Bus::VirtioBlk,
            cache: CacheMode::None,
            io: IoMode::IoUring,
            layout: Layout::Raw,
            workload: WorkloadId::FioFile("/x/my job<1>.fio".into()),
            link: Default::default(),
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
