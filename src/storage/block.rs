//! Block device backend: a whole local block device (the "native partition" case), raw or with
//! a qcow2 written onto it. Destructive, so it refuses unless told `allow_destroy`, and even then
//! refuses a device in use (mounted, swap, held by dm/md/another device, or one of its
//! partitions is) or one carrying a filesystem/partition-table signature unless `force`.

use super::cmd;
use super::options::StorageConfig;
use super::{DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::{Cell, Format};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Bytes zeroed at teardown.
const WIPE_BYTES: usize = 1024 * 1024;

/// A whole block device.
#[derive(Debug)]
pub struct BlockBackend {
    dev: PathBuf,
    allow_destroy: bool,
    force: bool,
    /// Set once the device passed the signature check in this run: later cells find the
    /// signatures our own guests wrote (a layout=ext4 cell), which must not stop the matrix.
    accepted: bool,
    /// The device holds something we wrote and teardown must wipe.
    dirty: bool,
}

impl BlockBackend {
    /// The device `dev`; nothing is written unless `allow_destroy`; `force` skips the signature
    /// check (never the in-use checks).
    pub fn new(dev: PathBuf, allow_destroy: bool, force: bool) -> Self {
        BlockBackend {
            dev,
            allow_destroy,
            force,
            accepted: false,
            dirty: false,
        }
    }

    /// Every reason the device must not be used, empty when it may.
    pub fn refusals(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.allow_destroy {
            why.push(format!(
                "the block backend destroys everything on {}; it runs only with allow_destroy \
                 (--allow-destroy)",
                self.dev.display()
            ));
        }
        let info = match DeviceInfo::read(&self.dev) {
            Ok(i) => i,
            Err(e) => {
                why.push(e);
                return why;
            }
        };
        why.extend(info.in_use());
        if !self.force && !self.accepted {
            match signatures(&info.path) {
                Ok(sigs) if !sigs.is_empty() => why.push(format!(
                    "{} holds a signature ({}); pass force (--force) to overwrite it",
                    info.path.display(),
                    sigs.join(", ")
                )),
                Ok(_) => {}
                Err(e) => why.push(e.to_string()),
            }
        }
        why
    }

    /// Zeroes the first MiB: the qcow2 header (and the primary superblock or partition table
    /// a guest made), so the next run starts from a clean device and is not refused for
    /// signatures we left.
    fn wipe(&self) -> Result<(), StorageError> {
        let io = |source| StorageError::Io {
            context: format!("wiping {}", self.dev.display()),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.dev)
            .map_err(io)?;
        f.write_all(&vec![0u8; WIPE_BYTES]).map_err(io)?;
        f.sync_all().map_err(io)
    }
}

/// What sysfs and /proc say about a block device and its partitions.
#[derive(Debug)]
struct DeviceInfo {
    /// Canonical /dev path.
    path: PathBuf,
    /// Kernel name (`loop0`, `sdb`).
    name: String,
    /// Size in bytes.
    size: u64,
    /// The device and its partitions: (kernel name, "major:minor").
    nodes: Vec<(String, String)>,
}

impl DeviceInfo {
    fn read(dev: &Path) -> Result<DeviceInfo, String> {
        use std::os::unix::fs::FileTypeExt;
        let path = dev
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dev.display()))?;
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.file_type().is_block_device() {
            return Err(format!("{} is not a block device", path.display()));
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let sys = PathBuf::from("/sys/class/block").join(&name);
        let sectors: u64 = read_trim(&sys.join("size"))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                format!(
                    "cannot read the size of {} from {}",
                    path.display(),
                    sys.display()
                )
            })?;
        let mut nodes = vec![(
            name.clone(),
            read_trim(&sys.join("dev")).unwrap_or_default(),
        )];
        if sys.join("partition").exists() {
            return Err(format!(
                "{} is a partition; give the whole device",
                path.display()
            ));
        }
        for e in std::fs::read_dir(&sys).into_iter().flatten().flatten() {
            let p = e.path();
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(&name) && p.join("partition").exists() {
                nodes.push((n, read_trim(&p.join("dev")).unwrap_or_default()));
            }
        }
        Ok(DeviceInfo {
            path,
            name,
            size: sectors * 512,
            nodes,
        })
    }

    /// Reasons the device (or a partition of it) is in use.
    fn in_use(&self) -> Vec<String> {
        let mut why = Vec::new();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        for (n, majmin) in &self.nodes {
            let devpath = format!("/dev/{n}");
            for l in mountinfo.lines() {
                let f: Vec<&str> = l.split_whitespace().collect();
                let src_is_dev = l
                    .split(" - ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().nth(1))
                    == Some(&devpath);
                if f.len() > 4 && (f[2] == majmin || src_is_dev) {
                    why.push(format!("{devpath} is mounted on {}", f[4]));
                }
            }
            if swaps
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().next() == Some(&devpath))
            {
                why.push(format!("{devpath} is in use as swap"));
            }
            let holders: Vec<String> = std::fs::read_dir(format!("/sys/class/block/{n}/holders"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if !holders.is_empty() {
                why.push(format!("{devpath} is held by {}", holders.join(", ")));
            }
        }
        why
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Filesystem / partition-table signatures on `dev`, from `blkid -p -o export` (low-level
/// probe, no cache): `TYPE=ext4`, `PTTYPE=gpt` ... Exit 2 means none.
pub fn signatures(dev: &Path) -> Result<Vec<String>, StorageError> {
    let out = Command::new("blkid")
        .args(["-p", "-o", "export"])
        .arg(dev)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StorageError::Io {
            context: "running blkid (util-linux)".into(),
            source,
        })?;
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                ["TYPE=", "PTTYPE=", "USAGE="]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(str::to_string)
            .collect()),
        Some(2) => Ok(Vec::new()),
        _ => Err(StorageError::Command {
            command: format!("blkid -p -o export {}", dev.display()),
            detail: format!(
                "{}: {}",
                out.status,
                cmd::tail_text(&String::from_utf8_lossy(&out.stderr), 5)
            ),
        }),
    }
}

impl StorageBackend for BlockBackend {
    fn check(&self) -> Result<(), Unsupported> {
        let why = self.refusals();
        if why.is_empty() {
            Ok(())
        } else {
            Err(Unsupported::DeviceRefused(why))
        }
    }

    fn provision(
        &mut self,
        cell: &Cell,
        _size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        let why = self.refusals();
        if !why.is_empty() {
            return Err(StorageError::Invalid(format!(
                "refusing {}: {}",
                self.dev.display(),
                why.join("; ")
            )));
        }
        self.accepted = true;
        let info = DeviceInfo::read(&self.dev).map_err(StorageError::Invalid)?;
        let dev = info.path.to_string_lossy().into_owned();
        let guest_bytes = match cell.format {
            Format::Raw => info.size,
            Format::Qcow2 => {
                let v = cmd::qcow2_fit(info.size);
                self.dirty = true;
                cmd::run(
                    "qemu-img",
                    &["create", "-q", "-f", "qcow2", &dev, &v.to_string()],
                )?;
                v
            }
        };
        // The guest writes the device either way; teardown wipes it (see `wipe`).
        self.dirty = true;
        let mut params = BTreeMap::new();
        params.insert("device".into(), dev.clone());
        params.insert("kernel_name".into(), info.name.clone());
        params.insert("device_bytes".into(), info.size.to_string());
        params.insert("force".into(), self.force.to_string());
        Ok(ProvisionedDisk {
            source: DiskSource::Block {
                dev: info.path.clone(),
            },
            format: cell.format,
            size_bytes: guest_bytes,
            host_path: Some(info.path),
            params,
        })
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        if self.dirty {
            self.wipe()?;
            self.dirty = false;
        }
        Ok(())
    }
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for BlockBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `block` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Block
    }

    fn local_only(&self) -> Option<&'static str> {
        Some(
            "block cells run on this machine only (the device's safety checks run here; a \
             device on a remote host is not implemented yet)",
        )
    }

    fn validate(
        &self,
        opts: &super::options::StorageConfig,
        selected: bool,
    ) -> Result<(), StorageError> {
        if selected && opts.block_device.is_none() {
            return Err(super::OptionError::Needs {
                backend: self.backend(),
                needs: "--block-device /dev/X (and --allow-destroy)",
            }
            .into());
        }
        if opts.block_device.is_some() && !opts.allow_destroy {
            return Err(super::OptionError::DestroyUnconfirmed.into());
        }
        Ok(())
    }

    fn preset_needs_device(&self, opts: &super::options::StorageConfig) -> bool {
        opts.block_device.is_none()
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        _work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        DiskSource::Block {
            dev: opts.block_device.clone().unwrap_or_default(),
        }
    }

    fn open(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        _servers: &mut super::servers::Servers,
        _work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        Ok(super::Opened::plain(Box::new(BlockBackend::new(
            opts.block_device.clone().unwrap_or_default(),
            opts.allow_destroy,
            opts.force,
        ))))
    }

    fn host_support(&self) -> Result<String, String> {
        Ok("needs --block-device DEV --allow-destroy".into())
    }
}

/// The block backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BlockArgs {
    /// Block device for block cells. Its contents are destroyed.
    #[arg(long)]
    pub block_device: Option<PathBuf>,
    /// Confirm that --block-device may be overwritten.
    #[arg(long)]
    pub allow_destroy: bool,
}

impl BlockArgs {
    /// Sets the options given on the command line.
    pub fn apply(&self, s: &mut StorageConfig) {
        if let Some(d) = &self.block_device {
            s.block_device = Some(d.clone());
        }
        s.allow_destroy |= self.allow_destroy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Backend;
    use crate::storage::testutil;

    /// A loop device on a sparse file, detached (and the file removed) on drop.
    struct Loop {
        dev: PathBuf,
        _file: tempfile::NamedTempFile,
    }

    impl Loop {
        fn new(bytes: u64) -> Loop {
            Self::with_flags(bytes, &[])
        }

        /// `-P` makes the kernel scan partitions, so `loopNp1` nodes appear.
        fn with_flags(bytes: u64, flags: &[&str]) -> Loop {
            let file = tempfile::Builder::new()
                .prefix("vmbench-loop")
                .tempfile_in("/var/tmp")
                .unwrap();
            file.as_file().set_len(bytes).unwrap();
            let path = file.path().to_string_lossy().into_owned();
            let mut args = vec!["-f", "--show"];
            args.extend_from_slice(flags);
            args.push(&path);
            let out = cmd::run("losetup", &args).unwrap();
            Loop {
                dev: PathBuf::from(out.trim()),
                _file: file,
            }
        }
    }

    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = cmd::run("losetup", &["-d", &self.dev.to_string_lossy()]);
        }
    }

    #[test]
    #[ignore = "host: root loop"]
    fn refusal_rules_on_a_real_loop_device() {
        let lo = Loop::new(64 << 20);
        let cell = testutil::cell(Backend::Block, Format::Raw);
        // Without allow_destroy: refused, and nothing is written.
        let mut b = BlockBackend::new(lo.dev.clone(), false, false);
        assert!(b.check().unwrap_err().to_string().contains("allow_destroy"));
        assert!(b.provision(&cell, 0, Path::new("/var/tmp")).is_err());
        // A blank device with allow_destroy: fine.
        let b = BlockBackend::new(lo.dev.clone(), true, false);
        assert_eq!(b.check(), Ok(()));
        // An ext4 signature: refused unless force.
        cmd::run(
            "mke2fs",
            &["-q", "-F", "-t", "ext4", &lo.dev.to_string_lossy()],
        )
        .unwrap();
        let e = b.check().unwrap_err().to_string();
        assert!(e.contains("TYPE=ext4") && e.contains("force"), "{e}");
        let b = BlockBackend::new(lo.dev.clone(), true, true);
        assert_eq!(b.check(), Ok(()));
        // A regular file is not a block device.
        let e = BlockBackend::new("/etc/hostname".into(), true, true)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a block device"), "{e}");
    }

    #[test]
    #[ignore = "host: root loop"]
    fn a_mounted_device_is_refused_even_with_force() {
        let lo = Loop::new(64 << 20);
        let dev = lo.dev.to_string_lossy().into_owned();
        cmd::run("mke2fs", &["-q", "-F", "-t", "ext4", &dev]).unwrap();
        let mnt = tempfile::Builder::new()
            .prefix("vmbench-mnt")
            .tempdir_in("/var/tmp")
            .unwrap();
        let mp = mnt.path().to_string_lossy().into_owned();
        if cmd::run("mount", &[dev.as_str(), mp.as_str()]).is_err() {
            // A host that forbids mount(2) to us cannot show this rule; the others still hold.
            return;
        }
        let e = BlockBackend::new(lo.dev.clone(), true, true)
            .check()
            .err()
            .map(|u| u.to_string())
            .unwrap_or_default();
        // Unmount before asserting, so a failure does not leave the mount (and the loop device).
        let _ = cmd::run("umount", &[mp.as_str()]);
        assert!(e.contains("is mounted on"), "{e}");
    }

    #[test]
    #[ignore = "host: root loop"]
    fn partitions_count_as_signature_and_as_mounts() {
        if !cmd::available("parted", "--version") {
            eprintln!("parted is not installed: partition rules not exercised");
            return;
        }
        let lo = Loop::with_flags(64 << 20, &["-P"]);
        let dev = lo.dev.to_string_lossy().into_owned();
        cmd::run(
            "parted",
            &["-s", &dev, "mklabel", "gpt", "mkpart", "p1", "1MiB", "100%"],
        )
        .unwrap();
        let part = PathBuf::from(format!("{dev}p1"));
        let e = BlockBackend::new(lo.dev.clone(), true, false)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("PTTYPE=gpt"), "{e}");
        let e = BlockBackend::new(part.clone(), true, true)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a partition; give the whole device"), "{e}");
        cmd::run(
            "mke2fs",
            &["-q", "-F", "-t", "ext4", &part.to_string_lossy()],
        )
        .unwrap();
        let mnt = tempfile::Builder::new()
            .prefix("vmbench-mnt")
            .tempdir_in("/var/tmp")
            .unwrap();
        let mp = mnt.path().to_string_lossy().into_owned();
        if cmd::run("mount", &[&part.to_string_lossy(), mp.as_str()]).is_err() {
            return;
        }
        let e = BlockBackend::new(lo.dev.clone(), true, true)
            .check()
            .err()
            .map(|u| u.to_string())
            .unwrap_or_default();
        // Unmount before asserting, so a failure does not leave the mount (and the loop device).
        let _ = cmd::run("umount", &[mp.as_str()]);
        assert!(e.contains(&format!("{}p1 is mounted on {mp}", dev)), "{e}");
    }

    #[test]
    #[ignore = "host: root loop"]
    fn qcow2_on_a_loop_device_fits_and_teardown_wipes_it() {
        let lo = Loop::new(128 << 20);
        let dev = lo.dev.to_string_lossy().into_owned();
        let mut b = BlockBackend::new(lo.dev.clone(), true, false);
        let d = b
            .provision(
                &testutil::cell(Backend::Block, Format::Qcow2),
                0,
                Path::new("/var/tmp"),
            )
            .unwrap();
        assert_eq!(
            d.source,
            DiskSource::Block {
                dev: lo.dev.clone()
            }
        );
        assert!(
            d.size_bytes < 128 << 20 && d.size_bytes > 120 << 20,
            "{}",
            d.size_bytes
        );
        assert_eq!(cmd::qemu_img_virtual_size(&dev).unwrap(), d.size_bytes);
        let info = cmd::run("qemu-img", &["info", &dev]).unwrap();
        assert!(info.contains("file format: qcow2"), "{info}");
        b.teardown().unwrap();
        b.teardown().unwrap();
        let info = cmd::run("qemu-img", &["info", &dev]).unwrap();
        assert!(info.contains("file format: raw"), "{info}");
    }
}
