//! hostdir backend: a fresh directory on the host, shared into the guest with virtio-fs (the VM
//! counterpart of a Kubernetes hostPath volume). There is no disk image: the guest mounts the
//! share and the workload runs on a file in it.
//!
//! vmbench starts QEMU's C virtiofsd itself (libvirt's `<source socket>` for an externally
//! launched daemon) rather than letting libvirt spawn it, so that its pid is known before the
//! guest boots: its CPU time and peak RSS are measured like ganesha's and tgtd's, and the
//! storage-lost watchdog sees it die. `-o sandbox=chroot` keeps it one process (the default
//! namespace sandbox forks after the guest connects, and the parent would measure as idle);
//! `-o allow_direct_io` passes the guest's O_DIRECT on to the host file, as a hostPath volume
//! would (virtiofsd drops it by default).

use super::cmd;
use super::{DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Where Debian 12's QEMU 7.2 ships virtiofsd (package qemu-system-common).
pub const VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";
/// Its name in results (`server_*` figures) and messages.
pub const NAME: &str = "virtiofsd";
/// virtiofsd's cache mode: its default, written out so the results say it.
const CACHE: &str = "auto";
/// How long virtiofsd may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The argv that serves `dir` on `socket` (the socket's group is QEMU's, when given).
pub fn plan_virtiofsd(socket: &Path, dir: &Path, group: Option<&str>) -> Vec<String> {
    let mut argv = vec![
        VIRTIOFSD.to_string(),
        format!("--socket-path={}", socket.display()),
    ];
    if let Some(g) = group {
        argv.push(format!("--socket-group={g}"));
    }
    for o in [
        format!("source={}", dir.display()),
        format!("cache={CACHE}"),
        "sandbox=chroot".into(),
        "allow_direct_io".into(),
    ] {
        argv.push("-o".into());
        argv.push(o);
    }
    argv
}

/// Why this host cannot share a directory with virtio-fs, if it cannot.
pub fn host_check() -> Result<(), Unsupported> {
    if !Path::new(VIRTIOFSD).exists() {
        return Err(Unsupported::NoVirtiofsd);
    }
    Ok(())
}

/// virtiofsd's version line, for `doctor`.
pub fn version() -> Result<String, String> {
    host_check().map_err(|u| u.to_string())?;
    let out = Command::new(VIRTIOFSD)
        .arg("--version")
        .output()
        .map_err(|e| format!("{VIRTIOFSD} --version: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(format!("{VIRTIOFSD} --version printed nothing"));
    }
    Ok(format!("{line} ({VIRTIOFSD})"))
}

/// One cell's shared directory and the virtiofsd serving it. The daemon starts when the backend
/// is opened (its pid is watched for the whole cell); `teardown` stops it and removes the
/// directory and its socket.
pub struct HostdirBackend {
    dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    daemon: Mutex<Option<Child>>,
    pid: u32,
}

impl HostdirBackend {
    /// Makes a fresh directory under `root` and starts virtiofsd on it, with its socket in
    /// `work` and its log in `logs` (the run's servers directory, where `vmbench cleanup` finds
    /// the daemon of a killed run); returns once the socket exists.
    pub fn start(root: &Path, work: &Path, logs: &Path) -> Result<HostdirBackend, StorageError> {
        host_check()?;
        let tag = cmd::unique_tag();
        let dir = root.join(format!("vmbench-hostdir-{tag}"));
        let io = |what: String| {
            move |source| StorageError::Io {
                context: what,
                source,
            }
        };
        std::fs::create_dir_all(work).map_err(io(format!("creating {}", work.display())))?;
        std::fs::create_dir_all(root).map_err(io(format!("creating {}", root.display())))?;
        std::fs::create_dir_all(logs).map_err(io(format!("creating {}", logs.display())))?;
        std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let socket = work.join(format!("virtiofs-{tag}.sock"));
        let log = logs.join(format!("virtiofsd-{tag}.log"));
        let mut b = HostdirBackend {
            dir,
            socket,
            log,
            daemon: Mutex::new(None),
            pid: 0,
        };
        // On any failure below, dropping `b` removes the directory and stops the daemon.
        b.spawn()?;
        Ok(b)
    }

    fn spawn(&mut self) -> Result<(), StorageError> {
        let group = qemu_group();
        let argv = plan_virtiofsd(&self.socket, &self.dir, group.as_deref());
        let log = std::fs::File::create(&self.log).map_err(|source| StorageError::Io {
            context: format!("creating {}", self.log.display()),
            source,
        })?;
        let err = log.try_clone().map_err(|source| StorageError::Io {
            context: "duplicating the log handle".into(),
            source,
        })?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|source| StorageError::Io {
                context: format!("starting {}", cmd::describe(&argv[0], &argv[1..])),
                source,
            })?;
        self.pid = child.id();
        *self.daemon.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let socket = self.socket.clone();
        cmd::wait_until(
            READY_TIMEOUT,
            Duration::from_millis(50),
            || cmd::child_exited(&self.daemon),
            || match socket.exists() {
                true => Ok(()),
                false => Err(format!("{} not created", socket.display())),
            },
        )
        .map_err(|w| StorageError::Server {
            server: NAME,
            detail: format!("did not start: {w:?}"),
            log: self.log.clone(),
            tail: tail(&self.log),
        })
    }

    /// virtiofsd's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The shared directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The group QEMU runs in (Debian: libvirt-qemu), so it may connect to the socket; `None` where
/// there is no such group (then only root can, as with a root QEMU).
fn qemu_group() -> Option<String> {
    nix::unistd::Group::from_name("libvirt-qemu")
        .ok()
        .flatten()
        .map(|g| g.name)
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

impl StorageBackend for HostdirBackend {
    fn check(&self) -> Result<(), Unsupported> {
        host_check()
    }

    fn provision(
        &mut self,
        _cell: &Cell,
        size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        if let Some(why) = cmd::child_exited(&self.daemon) {
            return Err(StorageError::Server {
                server: NAME,
                detail: format!("exited before the guest started: {why}"),
                log: self.log.clone(),
                tail: tail(&self.log),
            });
        }
        let params = BTreeMap::from([
            ("hostdir".to_string(), self.dir.display().to_string()),
            (
                "hostdir_fs".to_string(),
                super::local::filesystem_name(&self.dir),
            ),
            ("virtiofsd_cache".to_string(), CACHE.to_string()),
            ("virtiofsd_direct_io".to_string(), "allowed".to_string()),
        ]);
        Ok(ProvisionedDisk {
            source: DiskSource::SharedDir {
                socket: self.socket.clone(),
                dir: self.dir.clone(),
            },
            format: crate::cell::Format::Raw,
            size_bytes,
            // A directory is not "the same bytes" a host fio could run on (no host baseline).
            host_path: None,
            params,
        })
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        if let Some(mut child) = self.daemon.lock().unwrap_or_else(|p| p.into_inner()).take() {
            cmd::terminate(&mut child, Duration::from_secs(5));
        }
        let _ = std::fs::remove_file(&self.socket);
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StorageError::Io {
                context: format!("removing {}", self.dir.display()),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for HostdirBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `hostdir` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Hostdir
    }

    fn local_only(&self) -> Option<&'static str> {
        Some("hostdir cells run on this machine only (virtiofsd runs here)")
    }

    fn has_server(&self) -> bool {
        true
    }

    fn shares_directory(&self) -> bool {
        true
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        DiskSource::SharedDir {
            socket: work.join(format!("virtiofs-{}.sock", super::PLANNED_TAG)),
            dir: super::local_dir(opts, work)
                .join(format!("vmbench-hostdir-{}", super::PLANNED_TAG)),
        }
    }

    /// Its virtiofsd runs from here on, so the cell watches and measures it like an embedded
    /// server.
    fn open(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        servers: &mut super::servers::Servers,
        work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        use super::servers::OpenError;
        let logs = servers.log_dir(NAME);
        let b =
            HostdirBackend::start(&super::local_dir(opts, work), work, &logs).map_err(
                |e| match e {
                    StorageError::Unsupported(u) => OpenError::Unsupported(u),
                    e => OpenError::Failed(std::sync::Arc::new(e)),
                },
            )?;
        let server = Some((NAME, b.pid()));
        Ok(super::Opened {
            backend: Box::new(b),
            server,
            companions: vec![],
            provenance: None,
        })
    }

    fn host_support(&self) -> Result<String, String> {
        host_check()
            .map(|()| "available (virtio-fs; runs with --layout ext4)".into())
            .map_err(|u| u.to_string())
    }

    fn leftover_processes(&self) -> &'static [&'static str] {
        &[NAME]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real virtiofsd starts on a fresh directory, waits on its socket (QEMU's group may
    /// connect), and teardown leaves neither the daemon, the socket nor the directory.
    #[test]
    #[ignore = "host: root qemu"]
    fn virtiofsd_starts_and_teardown_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, work) = (tmp.path().join("local"), tmp.path().join("work"));
        let logs = tmp.path().join("servers/virtiofsd");
        let mut b = HostdirBackend::start(&root, &work, &logs).unwrap();
        // stdout/stderr in the servers directory: how `vmbench cleanup` finds it.
        let out = std::fs::read_link(format!("/proc/{}/fd/2", b.pid())).unwrap();
        assert!(out.starts_with(&logs), "{}", out.display());
        let (pid, dir, socket) = (b.pid(), b.dir().to_path_buf(), b.socket.clone());
        assert!(cmd::pid_alive(pid));
        assert!(dir.is_dir() && dir.starts_with(&root));
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = std::fs::metadata(&socket).unwrap();
        assert!(meta.file_type().is_socket());
        if let Some(g) = qemu_group() {
            let gid = nix::unistd::Group::from_name(&g).unwrap().unwrap().gid;
            assert_eq!(meta.gid(), gid.as_raw(), "socket group");
            assert_eq!(
                meta.mode() & 0o060,
                0o060,
                "group may connect: {:o}",
                meta.mode()
            );
        }
        std::fs::write(dir.join("f"), b"x").unwrap();
        let disk = b
            .provision(
                &crate::storage::testutil::cell(
                    crate::cell::Backend::Hostdir,
                    crate::cell::Format::Raw,
                ),
                1 << 20,
                &work,
            )
            .unwrap();
        assert_eq!(disk.params["virtiofsd_cache"], "auto");
        assert!(matches!(disk.source, DiskSource::SharedDir { .. }));
        b.teardown().unwrap();
        assert!(!cmd::pid_alive(pid), "virtiofsd {pid} still runs");
        assert!(!dir.exists() && !socket.exists());
        b.teardown().unwrap();
    }

    #[test]
    fn virtiofsd_is_one_process_that_keeps_o_direct() {
        let argv = plan_virtiofsd(
            Path::new("/w/v.sock"),
            Path::new("/d/vmbench-hostdir-1"),
            Some("libvirt-qemu"),
        );
        assert_eq!(
            argv,
            [
                VIRTIOFSD,
                "--socket-path=/w/v.sock",
                "--socket-group=libvirt-qemu",
                "-o",
                "source=/d/vmbench-hostdir-1",
                "-o",
                "cache=auto",
                "-o",
                "sandbox=chroot",
                "-o",
                "allow_direct_io",
            ]
        );
        assert!(!plan_virtiofsd(Path::new("/s"), Path::new("/d"), None)
            .iter()
            .any(|a| a.starts_with("--socket-group")));
    }
}
