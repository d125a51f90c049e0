//! Pure logic of the agent, kept apart from the syscalls so it can be unit-tested on temp dirs.

use std::fs;
use std::path::{Path, PathBuf};

use vmbench_proto::{BlockDevice, TEST_MOUNTPOINT};

/// Replaces `{disk}` and `{dir}` in a job text or argument.
pub fn substitute(text: &str, disk: &str) -> String {
    text.replace("{disk}", disk)
        .replace("{dir}", TEST_MOUNTPOINT)
}

/// Module paths from a modules.order file: one relative path a line; blanks and `#` comments
/// are skipped, and absolute or `..` paths are refused so a bad file cannot escape the tree.
pub fn parse_modules_order(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = PathBuf::from(line);
        if p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
            return Err(format!(
                "modules.order line {}: path {line:?} must be relative",
                n + 1
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// The value of `key=` on a kernel command line, if present.
pub fn cmdline_value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Finds the virtio-serial port named `name` under `<sysfs>/class/virtio-ports` and returns its
/// device name (`vport0p1`); the node is `/dev/<that>`.
pub fn find_virtio_port(sysfs: &Path, name: &str) -> Option<String> {
    let dir = fs::read_dir(sysfs.join("class/virtio-ports")).ok()?;
    let mut found: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter(|e| fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim_end() == name))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found.into_iter().next()
}

/// True when `<sysfs>/bus/virtio/devices` has a console device (virtio id 3), i.e. a named
/// port may still show up once the driver has talked to the host.
pub fn has_virtio_console(sysfs: &Path) -> bool {
    let Ok(dir) = fs::read_dir(sysfs.join("bus/virtio/devices")) else {
        return false;
    };
    dir.filter_map(|e| e.ok())
        .any(|e| fs::read_to_string(e.path().join("device")).is_ok_and(|d| d.trim() == "0x0003"))
}

/// True when `<sysfs>/bus/pci/devices` has a virtio-scsi controller (vendor 0x1af4, device
/// 0x1004 transitional or 0x1048 modern). PCI enumeration is built into the kernel, so this is
/// known before any module is loaded.
pub fn has_virtio_scsi(sysfs: &Path) -> bool {
    let Ok(dir) = fs::read_dir(sysfs.join("bus/pci/devices")) else {
        return false;
    };
    let id = |p: &Path, f: &str| fs::read_to_string(p.join(f)).map(|s| s.trim().to_string());
    dir.filter_map(|e| e.ok()).any(|e| {
        let p = e.path();
        id(&p, "vendor").is_ok_and(|v| v == "0x1af4")
            && id(&p, "device").is_ok_and(|d| d == "0x1004" || d == "0x1048")
    })
}

/// Block devices under `<sysfs>/block`, sorted by name; loop and ram devices are skipped.
pub fn list_block_devices(sysfs: &Path) -> Vec<BlockDevice> {
    let Ok(dir) = fs::read_dir(sysfs.join("block")) else {
        return Vec::new();
    };
    let mut out: Vec<BlockDevice> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("loop") || name.starts_with("ram") {
                return None;
            }
            let p = e.path();
            let sectors: u64 = fs::read_to_string(p.join("size"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let serial = ["serial", "device/serial"]
                .iter()
                .filter_map(|f| fs::read_to_string(p.join(f)).ok())
                .map(|s| s.trim().to_string())
                .find(|s| !s.is_empty());
            Some(BlockDevice {
                name,
                size_bytes: sectors.saturating_mul(512),
                serial,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Picks the disk under test: the one with `serial`, else the only disk, else an error that
/// lists what the guest sees.
pub fn resolve_disk<'a>(devs: &'a [BlockDevice], serial: &str) -> Result<&'a BlockDevice, String> {
    if let Some(d) = devs.iter().find(|d| d.serial.as_deref() == Some(serial)) {
        return Ok(d);
    }
    if devs.len() == 1 {
        return Ok(&devs[0]);
    }
    let list: Vec<String> = devs
        .iter()
        .map(|d| format!("{} (serial {:?})", d.name, d.serial))
        .collect();
    Err(format!(
        "no block device has serial {serial:?}; the guest sees: [{}]",
        list.join(", ")
    ))
}

/// Keeps the last `n` lines of a growing text, for a stderr tail.
#[derive(Debug)]
pub struct Tail {
    n: usize,
    lines: std::collections::VecDeque<String>,
}

impl Tail {
    /// A tail of at most `n` lines.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            lines: Default::default(),
        }
    }
    /// Adds one line, dropping the oldest beyond `n`.
    pub fn push(&mut self, line: String) {
        if self.lines.len() == self.n {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
    /// The kept lines joined with newlines.
    pub fn text(&self) -> String {
        self.lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> String {
    let mut t = Tail::new(n);
    text.lines().for_each(|l| t.push(l.to_string()));
    t.text()
}

/// Files in `dir` whose names start with `prefix`, sorted.
pub fn files_with_prefix(dir: &Path, prefix: &str) -> std::io::Result<Vec<String>> {
    let mut out: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    out.sort();
    Ok(out)
}

/// Reads `MemTotal` (KiB) from a /proc/meminfo text.
pub fn mem_total_kib(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Counts CPUs in a sysfs `online` list such as `0-1,4`.
pub fn count_cpus(online: &str) -> u32 {
    online
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => u32::from(r.parse::<u32>().is_ok()),
        })
        .sum()
}

/// First sector of the partition: 1 MiB in, as fdisk and parted align.
pub const PARTITION_START_SECTOR: u32 = 2048;

/// MBR partition type of a Linux filesystem.
pub const TYPE_LINUX: u8 = 0x83;
/// MBR partition type of an LVM physical volume.
pub const TYPE_LINUX_LVM: u8 = 0x8e;

/// An MBR with one primary Linux (0x83) partition from sector 2048 to the end of a disk of
/// `sectors` 512-byte sectors (at most 2 TiB: MBR's limit), or why not.
pub fn mbr_one_partition(sectors: u64) -> Result<[u8; 512], String> {
    let start = u64::from(PARTITION_START_SECTOR);
    if sectors <= start + 2048 {
        return Err(format!(
            "disk of {sectors} sectors is too small for a partition"
        ));
    }
    let len = mbr_sectors(sectors, sectors - start)?;
    Ok(mbr(&[(TYPE_LINUX, PARTITION_START_SECTOR, len)]))
}

/// An MBR with two primary partitions of the same size splitting a disk of `sectors` 512-byte
/// sectors in halves: partition 1 (Linux, 0x83) from sector 2048, partition 2 (Linux LVM,
/// 0x8e) right after it. Both start and size are whole MiB (2048 sectors), so the last MiB or
/// two of the disk may be left over; at most 2 TiB (MBR's limit).
pub fn mbr_two_partitions(sectors: u64) -> Result<[u8; 512], String> {
    let start = u64::from(PARTITION_START_SECTOR);
    let half = sectors.saturating_sub(start) / 2 / start * start;
    if half < start {
        return Err(format!(
            "disk of {sectors} sectors is too small for two partitions"
        ));
    }
    let len = mbr_sectors(sectors, half)?;
    let second = mbr_sectors(sectors, start + half)?;
    Ok(mbr(&[
        (TYPE_LINUX, PARTITION_START_SECTOR, len),
        (TYPE_LINUX_LVM, second, len),
    ]))
}

/// A sector count or number as MBR stores it (32 bits), or why a disk of `sectors` is too big.
fn mbr_sectors(sectors: u64, n: u64) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("disk of {sectors} sectors is beyond MBR's 2 TiB"))
}

/// An MBR whose primary partitions are `parts` (type, first sector, sectors), in order.
fn mbr(parts: &[(u8, u32, u32)]) -> [u8; 512] {
    let mut mbr = [0u8; 512];
    mbr[440..444].copy_from_slice(&0x766d_6265u32.to_le_bytes()); // disk signature "vmbe"
    for (i, (kind, start, len)) in parts.iter().enumerate() {
        let e = &mut mbr[446 + 16 * i..462 + 16 * i];
        // Status 0 (not bootable); CHS fields say "use LBA" (0xfe 0xff 0xff), as modern tools
        // do.
        e[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
        e[4] = *kind;
        e[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
        e[8..12].copy_from_slice(&start.to_le_bytes());
        e[12..16].copy_from_slice(&len.to_le_bytes());
    }
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    mbr
}

/// The kernel's name for partition `n` of `disk` (`vda`, 2 -> `vda2`; `nvme0n1`, 1 ->
/// `nvme0n1p1`).
pub fn partition_name(disk: &str, n: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{disk}p{n}")
    } else {
        format!("{disk}{n}")
    }
}

/// sysfs's `dev` file (`MAJOR:MINOR`) as numbers.
pub fn parse_dev_numbers(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("not MAJOR:MINOR: {text:?}");
    let (a, b) = text.trim().split_once(':').ok_or_else(bad)?;
    Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
}

/// lvm.conf for a guest without udev: lvm makes /dev nodes itself and never waits for udev.
pub const LVM_CONF: &str = "devices {\n  obtain_device_list_from_udev = 0\n  \
external_device_info_source = \"none\"\n}\nactivation {\n  udev_sync = 0\n  udev_rules = 0\n  \
monitoring = 0\n}\nglobal {\n  use_lvmlockd = 0\n}\nbackup {\n  backup = 0\n  archive = 0\n}\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_numbers_are_read_from_sysfs_text() {
        assert_eq!(parse_dev_numbers("254:1\n"), Ok((254, 1)));
        assert!(parse_dev_numbers("254").is_err());
        assert!(parse_dev_numbers("a:1").is_err());
    }

    fn write(p: &Path, text: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A temp dir removed on drop, even when the test fails (the agent takes no tempfile dep).
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn tempdir(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("agent-test-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    #[test]
    fn placeholders_are_substituted() {
        assert_eq!(
            substitute("f={disk} d={dir}/x {disk}", "/dev/vdb"),
            "f=/dev/vdb d=/mnt/test/x /dev/vdb"
        );
        assert_eq!(substitute("{other}", "/dev/vda"), "{other}");
    }

    #[test]
    fn modules_order_skips_comments_and_refuses_escapes() {
        let v = parse_modules_order("# x\nkernel/a.ko\n\n  kernel/b/c.ko \n").unwrap();
        assert_eq!(
            v,
            vec![PathBuf::from("kernel/a.ko"), PathBuf::from("kernel/b/c.ko")]
        );
        assert!(parse_modules_order("/etc/passwd\n").is_err());
        assert!(parse_modules_order("kernel/../../x.ko\n").is_err());
    }

    #[test]
    fn cmdline_key_is_found() {
        let c = "console=ttyS0 vmbench.port=/dev/hvc3 quiet";
        assert_eq!(cmdline_value(c, "vmbench.port"), Some("/dev/hvc3"));
        assert_eq!(cmdline_value(c, "vmbench"), None);
        assert_eq!(cmdline_value(c, "rdinit"), None);
    }

    #[test]
    fn virtio_port_found_by_name() {
        let d = tempdir("port");
        assert_eq!(find_virtio_port(&d, "org.vmbench.0"), None);
        write(&d.join("class/virtio-ports/vport0p0/name"), "\n");
        write(
            &d.join("class/virtio-ports/vport1p2/name"),
            "org.vmbench.0\n",
        );
        write(&d.join("class/virtio-ports/vport1p1/name"), "org.other\n");
        assert_eq!(
            find_virtio_port(&d, "org.vmbench.0").as_deref(),
            Some("vport1p2")
        );
        assert!(!has_virtio_console(&d));
        write(&d.join("bus/virtio/devices/virtio0/device"), "0x0002\n");
        assert!(!has_virtio_console(&d));
        write(&d.join("bus/virtio/devices/virtio1/device"), "0x0003\n");
        assert!(has_virtio_console(&d));
    }

    #[test]
    fn virtio_scsi_controller_is_found_by_its_pci_ids() {
        let d = tempdir("pci");
        assert!(!has_virtio_scsi(&d));
        // virtio-blk (transitional) and another vendor's 0x1004.
        write(&d.join("bus/pci/devices/0000:00:03.0/vendor"), "0x1af4\n");
        write(&d.join("bus/pci/devices/0000:00:03.0/device"), "0x1001\n");
        write(&d.join("bus/pci/devices/0000:00:04.0/vendor"), "0x8086\n");
        write(&d.join("bus/pci/devices/0000:00:04.0/device"), "0x1004\n");
        assert!(!has_virtio_scsi(&d));
        write(&d.join("bus/pci/devices/0000:00:05.0/vendor"), "0x1af4\n");
        write(&d.join("bus/pci/devices/0000:00:05.0/device"), "0x1004\n");
        assert!(has_virtio_scsi(&d));
    }

    #[test]
    fn block_devices_listed_with_serials() {
        let d = tempdir("blk");
        write(&d.join("block/vdb/size"), "524288\n");
        write(&d.join("block/vdb/serial"), "vmbench-test\n");
        write(&d.join("block/sda/size"), "8\n");
        write(&d.join("block/sda/device/serial"), "  scsi0  \n");
        write(&d.join("block/loop0/size"), "0\n");
        write(&d.join("block/ram0/size"), "8192\n");
        write(&d.join("block/vda/size"), "100\n");
        write(&d.join("block/vda/serial"), "\n");
        let v = list_block_devices(&d);
        let names: Vec<&str> = v.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["sda", "vda", "vdb"]);
        assert_eq!(v[0].serial.as_deref(), Some("scsi0"));
        assert_eq!(v[1].serial, None);
        assert_eq!(v[2].size_bytes, 256 << 20);
        assert_eq!(resolve_disk(&v, "vmbench-test").unwrap().name, "vdb");
        let err = resolve_disk(&v, "nope").unwrap_err();
        assert!(err.contains("vdb") && err.contains("sda"), "{err}");
        assert_eq!(resolve_disk(&v[2..], "nope").unwrap().name, "vdb");
    }

    #[test]
    fn tail_keeps_last_lines() {
        let text: String = (0..30).map(|i| format!("l{i}\n")).collect();
        let t = tail_lines(&text, 20);
        assert!(t.starts_with("l10\n") && t.ends_with("l29"), "{t}");
        assert_eq!(tail_lines("", 20), "");
    }

    #[test]
    fn prefix_files_sorted() {
        let d = tempdir("prefix");
        for f in ["pg_iops.1.log", "pg_bw.1.log", "other.log", "job.fio"] {
            write(&d.join(f), "x");
        }
        fs::create_dir(d.join("pg_dir")).unwrap();
        assert_eq!(
            files_with_prefix(&d, "pg").unwrap(),
            ["pg_bw.1.log", "pg_iops.1.log"]
        );
    }

    #[test]
    fn meminfo_and_cpus() {
        assert_eq!(
            mem_total_kib("MemTotal:        4026840 kB\nMemFree: 1 kB\n"),
            4026840
        );
        assert_eq!(mem_total_kib("garbage"), 0);
        assert_eq!(count_cpus("0-1\n"), 2);
        assert_eq!(count_cpus("0-3,6,8-9"), 7);
        assert_eq!(count_cpus("0"), 1);
        assert_eq!(count_cpus("x-y"), 0);
    }

    #[test]
    fn mbr_has_one_linux_partition_to_the_end() {
        let mbr = mbr_one_partition(2 * 1024 * 1024).unwrap(); // 1 GiB
        assert_eq!(&mbr[510..], &[0x55, 0xaa]);
        assert_eq!(mbr[446 + 4], 0x83);
        let u = |o: usize| u32::from_le_bytes(mbr[o..o + 4].try_into().unwrap());
        assert_eq!(u(446 + 8), 2048);
        assert_eq!(u(446 + 12), 2 * 1024 * 1024 - 2048);
        assert!(mbr[462..510].iter().all(|b| *b == 0), "only one entry");
        assert!(mbr_one_partition(4096).is_err());
        assert!(mbr_one_partition(1 << 33).unwrap_err().contains("2 TiB"));
        assert_eq!(partition_name("vda", 1), "vda1");
        assert_eq!(partition_name("nvme0n1", 1), "nvme0n1p1");
    }

    /// Type, first sector and sectors of MBR entry `i` (0-based).
    fn entry(mbr: &[u8; 512], i: usize) -> (u8, u64, u64) {
        let e = &mbr[446 + 16 * i..462 + 16 * i];
        let u = |o: usize| u64::from(u32::from_le_bytes(e[o..o + 4].try_into().unwrap()));
        (e[4], u(8), u(12))
    }

    #[test]
    fn mbr_splits_the_disk_in_two_aligned_halves() {
        // 1 GiB, and a size that is no whole number of MiB.
        for sectors in [2 * 1024 * 1024, 2 * 1024 * 1024 + 12_345] {
            let mbr = mbr_two_partitions(sectors).unwrap();
            assert_eq!(&mbr[510..], &[0x55, 0xaa]);
            let (t1, s1, l1) = entry(&mbr, 0);
            let (t2, s2, l2) = entry(&mbr, 1);
            assert_eq!((t1, t2), (0x83, 0x8e), "Linux, then Linux LVM");
            assert_eq!(s1, 2048);
            assert_eq!(l1, l2, "halves of one size");
            assert_eq!(s2, s1 + l1, "partition 2 right after partition 1");
            for n in [s1, l1, s2] {
                assert_eq!(n % 2048, 0, "{n} is not on a MiB");
            }
            assert!(s2 + l2 <= sectors, "inside the disk");
            assert!(
                sectors - (s2 + l2) < 2 * 2048,
                "at most the alignment left over"
            );
            assert!(mbr[478..510].iter().all(|b| *b == 0), "only two entries");
        }
        // 1 GiB less the first MiB, halved and rounded down to a MiB: 511 MiB each.
        assert_eq!(
            entry(&mbr_two_partitions(2 * 1024 * 1024).unwrap(), 0).2,
            511 * 2048
        );
        assert!(mbr_two_partitions(4096).is_err());
        assert!(mbr_two_partitions(6144).is_ok(), "two partitions of 1 MiB");
        assert!(mbr_two_partitions(1 << 34).unwrap_err().contains("2 TiB"));
        assert_eq!(partition_name("vda", 2), "vda2");
        assert_eq!(partition_name("nvme0n1", 2), "nvme0n1p2");
    }
}
