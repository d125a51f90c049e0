//! Host rows (`--hypervisor host`): how the host itself reaches the storage a guest's disk is
//! on, so the same workload runs on the same storage without a guest.
//!
//! - a file (`local`) or a block device (`block`): the workload's target as is (layout raw);
//!   for a filesystem layout the file is attached to a loop device (`losetup`, direct I/O, as the
//!   guest's cache=none reads it) and the filesystem is made on it and mounted in the cell's
//!   private work directory ([`HostFs`]), torn down on every way out of the cell;
//! - a shared directory (`hostdir`): the directory itself;
//! - a network disk (NFS, iSCSI, RBD): the host's kernel client would mount the export, log in
//!   to the LUN or map the image. [`NetPlan`] is that plan, as argv; [`client_missing`] says why
//!   this host cannot (no NFS client in its kernel, no `iscsiadm`, no krbd), and the planner
//!   skips the cell with that reason.

use super::cmd::run;
use super::{DiskSource, NetProtocol, StorageError};
use std::path::{Path, PathBuf};

/// Where a host cell's workload goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostAccess {
    /// The disk's file.
    File(PathBuf),
    /// The disk's block device.
    Block(PathBuf),
    /// A directory: the filesystem under test is the directory's own.
    Dir(PathBuf),
    /// A network disk, reached through the host kernel's client.
    Network(NetPlan),
}

impl HostAccess {
    /// How the host reaches `source`.
    pub fn of(source: &DiskSource) -> HostAccess {
        match source {
            DiskSource::File { path } => HostAccess::File(path.clone()),
            DiskSource::Block { dev } => HostAccess::Block(dev.clone()),
            DiskSource::SharedDir { dir, .. } => HostAccess::Dir(dir.clone()),
            DiskSource::Network {
                protocol,
                name,
                host,
                port,
                ..
            } => HostAccess::Network(NetPlan::new(*protocol, name, host, *port)),
        }
    }
}

/// The host's own client for a network disk: what it would run, as argv. The plan is pure (and
/// unit-tested); it runs only where [`client_missing`] finds the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    /// The protocol.
    pub protocol: NetProtocol,
    /// Before the workload: mount the export (`{dir}` is the mountpoint), log in, map.
    pub attach: Vec<Vec<String>>,
    /// After it, always: unmount, log out, unmap (`{dev}` is the device the attach made).
    pub detach: Vec<Vec<String>>,
    /// What the workload then runs on: the mountpoint (`{dir}`) or the device's path.
    pub target: String,
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

impl NetPlan {
    /// The plan for a network disk at `host[:port]` named `name` (libvirt's `name`).
    pub fn new(protocol: NetProtocol, name: &str, host: &str, port: Option<u16>) -> NetPlan {
        match protocol {
            NetProtocol::Nfs => nfs_plan(name, host, port),
            NetProtocol::Iscsi => iscsi_plan(name, host, port),
            NetProtocol::Rbd => rbd_plan(name, host, port),
        }
    }
}

/// NFSv3 (what the embedded ganesha serves): the export (the image's directory) mounted on the
/// cell's mountpoint; the host row runs in it, as the write-ups' hosts ran on their NFS mounts.
/// `nolock`: no lockd/statd on the host side. The port is the server's when not 2049.
fn nfs_plan(name: &str, host: &str, port: Option<u16>) -> NetPlan {
    let export = Path::new(name)
        .parent()
        .map_or("/".to_string(), |p| p.display().to_string());
    let mut opts = "vers=3,proto=tcp,nolock".to_string();
    if let Some(p) = port {
        opts.push_str(&format!(",port={p}"));
    }
    NetPlan {
        protocol: NetProtocol::Nfs,
        attach: vec![argv(&[
            "mount",
            "-t",
            "nfs",
            "-o",
            &opts,
            &format!("{host}:{export}"),
            "{dir}",
        ])],
        detach: vec![argv(&["umount", "{dir}"])],
        target: "{dir}".into(),
    }
}

/// open-iscsi: discovery, login to the one target, the LUN by its stable by-path name; logout
/// after. (A CHAP LUN would need its secret in the node record, never on a command line: not
/// planned.)
fn iscsi_plan(name: &str, host: &str, port: Option<u16>) -> NetPlan {
    let (iqn, lun) = name.rsplit_once('/').unwrap_or((name, "0"));
    let portal = format!("{host}:{}", port.unwrap_or(3260));
    let node = |op: &str| argv(&["iscsiadm", "-m", "node", "-T", iqn, "-p", &portal, op]);
    NetPlan {
        protocol: NetProtocol::Iscsi,
        attach: vec![
            argv(&[
                "iscsiadm",
                "-m",
                "discovery",
                "-t",
                "sendtargets",
                "-p",
                &portal,
            ]),
            node("--login"),
        ],
        detach: vec![node("--logout")],
        target: format!("/dev/disk/by-path/ip-{portal}-iscsi-{iqn}-lun-{lun}"),
    }
}

/// krbd: `rbd map` gives `/dev/rbdN` (`{dev}`), unmapped after.
fn rbd_plan(name: &str, host: &str, port: Option<u16>) -> NetPlan {
    let mon = format!("{host}:{}", port.unwrap_or(3300));
    NetPlan {
        protocol: NetProtocol::Rbd,
        attach: vec![argv(&["rbd", "map", name, "-m", &mon])],
        detach: vec![argv(&["rbd", "unmap", "{dev}"])],
        target: "{dev}".into(),
    }
}

/// What this host has of a kernel storage client, read once per question.
#[derive(Debug, Clone, Default)]
pub struct ClientFacts {
    /// `/proc/filesystems`.
    pub filesystems: String,
    /// Kernel modules loaded (`/sys/module`) or loadable (`modprobe -n`), by name.
    pub modules: Vec<String>,
    /// Programs found on `PATH`.
    pub programs: Vec<String>,
}

impl ClientFacts {
    /// This machine's facts for `protocol`'s client.
    pub fn probe(protocol: NetProtocol) -> ClientFacts {
        let (modules, programs) = needs(protocol);
        ClientFacts {
            filesystems: std::fs::read_to_string("/proc/filesystems").unwrap_or_default(),
            modules: (modules.iter())
                .filter(|m| module_present(m))
                .map(|m| m.to_string())
                .collect(),
            programs: (programs.iter())
                .filter(|p| on_path(p))
                .map(|p| p.to_string())
                .collect(),
        }
    }
}

/// The kernel modules and programs each client needs.
fn needs(protocol: NetProtocol) -> (&'static [&'static str], &'static [&'static str]) {
    match protocol {
        NetProtocol::Nfs => (&["nfs"], &["mount.nfs"]),
        NetProtocol::Iscsi => (&["iscsi_tcp"], &["iscsiadm"]),
        NetProtocol::Rbd => (&["rbd"], &["rbd"]),
    }
}

fn module_present(name: &str) -> bool {
    Path::new("/sys/module").join(name).exists()
        || std::process::Command::new("modprobe")
            .args(["-n", "-q", name])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .any(|d| d.join(program).is_file())
}

/// Why the host has no kernel client for `protocol`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported on this host: a host cell on {} needs the host kernel's client: {why}",
    proto_name(*.protocol)
)]
pub struct ClientMissing {
    /// The protocol.
    pub protocol: NetProtocol,
    /// What is missing.
    pub why: String,
}

fn proto_name(p: NetProtocol) -> &'static str {
    match p {
        NetProtocol::Nfs => "nfs",
        NetProtocol::Iscsi => "iscsi",
        NetProtocol::Rbd => "rbd",
    }
}

/// Why this host cannot reach `protocol`'s storage itself, from `facts`; `None` when it can.
pub fn client_missing(protocol: NetProtocol, facts: &ClientFacts) -> Option<ClientMissing> {
    let (modules, programs) = needs(protocol);
    let mut missing: Vec<String> = Vec::new();
    let fs_known = protocol == NetProtocol::Nfs
        && facts
            .filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some("nfs"));
    for m in modules
        .iter()
        .filter(|m| !facts.modules.iter().any(|f| f == *m))
    {
        if !fs_known {
            missing.push(format!("no {m} kernel module (loaded or loadable)"));
        }
    }
    for p in programs
        .iter()
        .filter(|p| !facts.programs.iter().any(|f| f == *p))
    {
        missing.push(format!("no {p} on PATH"));
    }
    (!missing.is_empty()).then(|| ClientMissing {
        protocol,
        why: missing.join(", "),
    })
}

/// This machine's answer for `protocol` (the planner asks it once per cell; it reads `/proc`
/// and `/sys`, and asks `modprobe -n`).
pub fn host_client(protocol: NetProtocol) -> Result<(), ClientMissing> {
    client_missing(protocol, &ClientFacts::probe(protocol)).map_or(Ok(()), Err)
}

/// `vmbench doctor`'s row for host cells: loop devices for a file's filesystem, and which
/// network disks the host's own clients reach (none here is still a working row: those cells
/// are skipped with the reason).
pub fn host_support() -> Result<String, String> {
    if !on_path("losetup") || !Path::new("/dev/loop-control").exists() {
        return Err(
            "no loop devices (losetup, /dev/loop-control): host cells on a file with \
                    a filesystem layout cannot run"
                .into(),
        );
    }
    let nets: Vec<String> = [NetProtocol::Nfs, NetProtocol::Iscsi, NetProtocol::Rbd]
        .into_iter()
        .map(|p| match host_client(p) {
            Ok(()) => format!("{}: client found (plan not run yet)", proto_name(p)),
            Err(e) => format!("{}: skipped ({})", proto_name(p), e.why),
        })
        .collect();
    Ok(format!(
        "local, block, hostdir on this host (loop devices); {}",
        nets.join("; ")
    ))
}

/// The filesystem a host cell makes on a file or device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFsType {
    /// ext4, with the same `mke2fs` arguments as the guest's agent.
    Ext4,
    /// xfs, with the same `mkfs.xfs` arguments as the guest's agent.
    Xfs,
}

impl HostFsType {
    fn mkfs(self, dev: &str) -> Vec<String> {
        match self {
            HostFsType::Ext4 => argv(&["mke2fs", "-F", "-q", "-t", "ext4", dev]),
            HostFsType::Xfs => argv(&["mkfs.xfs", "-f", "-q", dev]),
        }
    }
    fn name(self) -> &'static str {
        match self {
            HostFsType::Ext4 => "ext4",
            HostFsType::Xfs => "xfs",
        }
    }
}

/// A filesystem made and mounted by the host for one cell: the loop device over the disk's
/// file (if it is a file), and the mount on a directory in the cell's private work directory.
/// [`HostFs::teardown`] unmounts and detaches; dropping it does the same, so an early return,
/// a timeout or an interrupt leaves neither behind.
#[derive(Debug)]
pub struct HostFs {
    loop_dev: Option<String>,
    device: String,
    mount_dir: PathBuf,
    mounted: bool,
}

/// The directory name a host cell mounts on, in its work directory. `vmbench cleanup` looks for
/// it in `/proc/mounts` after a killed run.
pub const HOST_MOUNT_DIR: &str = "vmbench-hostfs";

impl HostFs {
    /// Makes `fs` on `access` (a file, through a loop device, or a block device) and mounts it
    /// on `mount_dir` (created, inside the cell's work directory).
    pub fn make(
        access: &HostAccess,
        fs: HostFsType,
        mount_dir: &Path,
    ) -> Result<Self, StorageError> {
        let mut me = HostFs {
            loop_dev: None,
            device: String::new(),
            mount_dir: mount_dir.to_path_buf(),
            mounted: false,
        };
        me.device = match access {
            HostAccess::File(path) => {
                let dev = attach_loop(path)?;
                me.loop_dev = Some(dev.clone());
                dev
            }
            HostAccess::Block(dev) => dev.display().to_string(),
            HostAccess::Dir(_) | HostAccess::Network(_) => {
                return Err(StorageError::Invalid(
                    "internal: a host filesystem is made on a file or a block device only".into(),
                ))
            }
        };
        let mkfs = fs.mkfs(&me.device);
        run(&mkfs[0], &mkfs[1..])?;
        std::fs::create_dir_all(mount_dir).map_err(|source| StorageError::Io {
            context: format!("creating {}", mount_dir.display()),
            source,
        })?;
        let dir = mount_dir.display().to_string();
        run("mount", &["-t", fs.name(), &me.device, &dir])?;
        me.mounted = true;
        Ok(me)
    }

    /// The device the filesystem is on (`/dev/loopN` for a file).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The loop device, when the disk is a file.
    pub fn loop_device(&self) -> Option<&str> {
        self.loop_dev.as_deref()
    }

    /// Unmounts and detaches (idempotent). A busy mount is retried, then detached lazily, so
    /// the loop device still goes.
    pub fn teardown(&mut self) -> Result<(), StorageError> {
        let mut first_err = None;
        if self.mounted {
            let dir = self.mount_dir.display().to_string();
            if let Err(e) = unmount(&dir) {
                first_err.get_or_insert(e);
            }
            self.mounted = false;
            let _ = std::fs::remove_dir(&self.mount_dir);
        }
        if let Some(dev) = self.loop_dev.take() {
            if let Err(e) = run("losetup", &["-d", &dev]) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for HostFs {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// `losetup -f --show --direct-io=on FILE`: the loop device reads the file with O_DIRECT, as
/// a guest's disk with cache=none does, so the host page cache does not hold the file twice.
fn attach_loop(path: &Path) -> Result<String, StorageError> {
    let file = path.display().to_string();
    let out = run("losetup", &["-f", "--show", "--direct-io=on", &file])?;
    let dev = out.trim().to_string();
    if !dev.starts_with("/dev/loop") {
        return Err(StorageError::Invalid(format!(
            "losetup -f --show {file} printed {dev:?}, not a loop device"
        )));
    }
    Ok(dev)
}

/// `umount DIR`, retried while busy (a just-exited engine), then `umount -l`.
fn unmount(dir: &str) -> Result<(), StorageError> {
    for _ in 0..5 {
        if run("umount", &[dir]).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    run("umount", &["-l", dir]).map(drop)
}

/// Mountpoints under `root` named [`HOST_MOUNT_DIR`], from `/proc/mounts`'s text: what a
/// killed run's host cells left mounted.
pub fn leftover_mounts(proc_mounts: &str, root: &Path) -> Vec<PathBuf> {
    proc_mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(root))
        .filter(|m| m.file_name().is_some_and(|n| n == HOST_MOUNT_DIR))
        .collect()
}

/// Loop devices whose backing file is under `root` (`losetup -n -O NAME,BACK-FILE -l`'s text):
/// what a killed run's host cells left attached.
pub fn leftover_loops(losetup_list: &str, root: &Path) -> Vec<String> {
    losetup_list
        .lines()
        .filter_map(|l| l.trim().split_once(char::is_whitespace))
        .filter(|(_, back)| Path::new(back.trim().trim_end_matches(" (deleted)")).starts_with(root))
        .map(|(dev, _)| dev.to_string())
        .collect()
}

/// What a killed run's host cells left under `root` (its work directory): mountpoints and
/// loop devices, from `/proc/mounts` and `losetup`.
pub fn find_leftovers(root: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let list = run("losetup", &["-n", "-O", "NAME,BACK-FILE", "-l"]).unwrap_or_default();
    (leftover_mounts(&mounts, root), leftover_loops(&list, root))
}

/// Unmounts and detaches what [`find_leftovers`] found, mounts first (the loop device is
/// busy while mounted); returns what it removed.
pub fn remove_leftovers(mounts: &[PathBuf], loops: &[String]) -> Vec<String> {
    let mut done = Vec::new();
    for m in mounts {
        let dir = m.display().to_string();
        if unmount(&dir).is_ok() {
            done.push(format!("unmounted {dir}"));
        }
    }
    for dev in loops {
        if run("losetup", &["-d", dev]).is_ok() {
            done.push(format!("detached {dev}"));
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nfs_host_cell_mounts_the_images_export() {
        let p = NetPlan::new(
            NetProtocol::Nfs,
            "/export/vmbench-r-1.raw",
            "169.254.7.2",
            Some(2049),
        );
        assert_eq!(
            p.attach,
            vec![argv(&[
                "mount",
                "-t",
                "nfs",
                "-o",
                "vers=3,proto=tcp,nolock,port=2049",
                "169.254.7.2:/export",
                "{dir}"
            ])]
        );
        assert_eq!(p.detach, vec![argv(&["umount", "{dir}"])]);
        assert_eq!(p.target, "{dir}");
    }

    #[test]
    fn an_iscsi_host_cell_logs_in_and_out_of_the_one_target() {
        let p = NetPlan::new(
            NetProtocol::Iscsi,
            "iqn.2026-12.dev.vmbench:r/1",
            "10.0.0.2",
            None,
        );
        assert_eq!(p.attach.len(), 2);
        assert_eq!(p.attach[0][..3], argv(&["iscsiadm", "-m", "discovery"])[..]);
        assert!(p.attach[1].ends_with(&argv(&["-p", "10.0.0.2:3260", "--login"])));
        assert!(p.detach[0].ends_with(&argv(&["--logout"])));
        assert_eq!(
            p.target,
            "/dev/disk/by-path/ip-10.0.0.2:3260-iscsi-iqn.2026-12.dev.vmbench:r-lun-1"
        );
        let r = NetPlan::new(NetProtocol::Rbd, "rbd/img", "127.0.0.1", None);
        assert_eq!(
            r.attach,
            vec![argv(&["rbd", "map", "rbd/img", "-m", "127.0.0.1:3300"])]
        );
    }

    #[test]
    fn a_client_is_missing_without_its_module_or_program() {
        let none = ClientFacts::default();
        let e = client_missing(NetProtocol::Nfs, &none).unwrap();
        assert_eq!(
            e.to_string(),
            "unsupported on this host: a host cell on nfs needs the host kernel's client: no nfs \
             kernel module (loaded or loadable), no mount.nfs on PATH"
        );
        let built_in = ClientFacts {
            filesystems: "nodev\tsysfs\n\text4\nnodev\tnfs\n".into(),
            programs: vec!["mount.nfs".into()],
            ..ClientFacts::default()
        };
        assert_eq!(client_missing(NetProtocol::Nfs, &built_in), None);
        let iscsi = ClientFacts {
            modules: vec!["iscsi_tcp".into()],
            ..ClientFacts::default()
        };
        let e = client_missing(NetProtocol::Iscsi, &iscsi).unwrap();
        assert_eq!(e.why, "no iscsiadm on PATH");
    }

    #[test]
    fn a_killed_runs_mounts_and_loops_are_found_under_its_work_dir() {
        let root = Path::new("/var/tmp/vmbench-work/r1");
        let mounts = "/dev/loop3 /var/tmp/vmbench-work/r1/cell-001/vmbench-hostfs ext4 rw 0 0\n\
                      /dev/loop4 /mnt/other ext4 rw 0 0\n\
                      /dev/loop5 /var/tmp/vmbench-work/r2/cell-001/vmbench-hostfs ext4 rw 0 0\n";
        assert_eq!(
            leftover_mounts(mounts, root),
            vec![PathBuf::from(
                "/var/tmp/vmbench-work/r1/cell-001/vmbench-hostfs"
            )]
        );
        let loops = "/dev/loop3 /var/tmp/vmbench-work/r1/pool-1/vmbench-r1-1.raw (deleted)\n\
                     /dev/loop4 /srv/disk.img\n";
        assert_eq!(leftover_loops(loops, root), vec!["/dev/loop3".to_string()]);
    }
}
