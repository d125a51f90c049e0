//! An embedded, user-space NFS server: nfs-ganesha with the VFS FSAL, inside the run's network
//! namespace ([`super::netns`]), bound to the namespace's address and exporting one directory
//! under the run's work dir to the host end of the link only.
//!
//! Closed to other local users (docs/security.md): the export grants access only in its CLIENT
//! block, for the address QEMU connects from; root is squashed, so a client that claims uid 0
//! over AUTH_SYS becomes `nobody`; the export directory and its images belong to
//! [`EXPORT_UID`]:[`EXPORT_GID`] with mode 0700/0600, and its parent is root's 0700, so nobody else
//! reaches them through the host filesystem. QEMU (through `<identity>` in the disk XML) and our
//! own qemu-img calls (through `?uid=&gid=` in the URL) claim that uid.
//!
//! QEMU reaches it through its own libnfs driver (no kernel client). libnfs speaks NFSv3 and asks
//! the portmapper for mountd, so rpcbind must run next to ganesha: we start our own
//! (`rpcbind -f`, our child) in the namespace, with ganesha and rpcbind sharing a private /run
//! (rpcbind's lock and socket live there; the host's rpcbind, if any, is never touched).
//! ganesha runs in the foreground (`-F`) as our child, so stopping it is SIGTERM + wait on a
//! pid we own.
//!
//! The export's Pseudo path (NFSv4) is the same as its real path, so `nfs://ADDR/PATH/NAME`
//! names the same file for NFSv3 (mount by path) and v4.

use super::cmd;
use super::netns::{LinkAddrs, NetNs};
use super::StorageError;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The NFS port ganesha binds (libnfs assumes it).
pub const NFS_PORT: u16 = 2049;
/// The portmapper's port.
const RPCBIND_PORT: u16 = 111;
/// How long ganesha may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Name of the file the readiness probe creates (and removes) in the export.
const PROBE: &str = ".vmbench-probe";

/// A running ganesha (and maybe the rpcbind we started for it). Stopped by [`Ganesha::stop`] or
/// on drop.
#[derive(Debug)]
pub struct Ganesha {
    export_dir: PathBuf,
    log: PathBuf,
    conf: PathBuf,
    pid: u32,
    child: Mutex<Option<Child>>,
    rpcbind: Mutex<Option<Child>>,
    /// Dropped after the servers stop (field order): the namespace outlives its processes.
    net: Arc<NetNs>,
}

/// The address ganesha binds and clients use (loopback only).
pub const HOST: &str = "127.0.0.1";

/// The uid that owns the export and its images, and that QEMU's libnfs and our qemu-img calls
/// claim over AUTH_SYS. No account has it on a Debian host (system accounts stop at 999, users
/// at 59999, Debian's reserved range starts at 60000 and libvirt-qemu is 64055), so no local
/// user owns these files through the host filesystem.
pub const EXPORT_UID: u32 = 64049;
/// The gid that goes with [`EXPORT_UID`].
pub const EXPORT_GID: u32 = 64049;

impl Ganesha {
    /// Writes `work_dir/ganesha.conf`, creates `work_dir/export` (0711 path), starts rpcbind and
    /// `ganesha.nfsd -F` in `net`, and waits until a probe file can be created over
    /// `nfs://ADDR/...` with qemu-img from the host. Fails with the log's tail if ganesha dies or
    /// does not answer in time.
    pub fn start(work_dir: &Path, net: Arc<NetNs>) -> Result<Ganesha, StorageError> {
        let work_dir = std::path::absolute(work_dir).map_err(|source| StorageError::Io {
            context: format!("resolving {}", work_dir.display()),
            source,
        })?;
        let export_dir = work_dir.join("export");
        check_nfs_safe(&export_dir)?;
        let run_dir = super::netns::private_run_dir(&work_dir);
        make_dirs(&work_dir, &export_dir)?;
        std::fs::create_dir_all(&run_dir).map_err(|source| StorageError::Io {
            context: format!("creating {}", run_dir.display()),
            source,
        })?;
        let conf = work_dir.join("ganesha.conf");
        let log = work_dir.join("ganesha.log");
        let pid_file = work_dir.join("ganesha.pid");
        cmd::write_file(&conf, &config_text(&export_dir, net.addrs()))?;
        let rpcbind = start_rpcbind(&net, &run_dir, &log)?;
        let mut g = Ganesha {
            export_dir,
            log,
            conf,
            pid: 0,
            child: Mutex::new(None),
            rpcbind: Mutex::new(Some(rpcbind)),
            net,
        };
        // From here on, Drop cleans up whatever was started.
        let child = spawn_ganesha(&g.net, &run_dir, &g.conf, &g.log, &pid_file)?;
        g.pid = child.id();
        *g.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        g.wait_ready()?;
        Ok(g)
    }

    /// ganesha's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exported directory on the host (images created over NFS appear here).
    pub fn export_dir(&self) -> &Path {
        &self.export_dir
    }

    /// The export as NFS clients name it (same as the host path, see the module doc).
    pub fn export_path(&self) -> String {
        self.export_dir.to_string_lossy().into_owned()
    }

    /// The server address clients use.
    pub fn host(&self) -> Ipv4Addr {
        self.net.addrs().server
    }

    /// The namespace it runs in (its link is recorded with every cell).
    pub fn net(&self) -> &NetNs {
        &self.net
    }

    /// ganesha's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `nfs://ADDR/EXPORT/NAME?uid=U&gid=G` for a file `name` directly in the export, as the
    /// export's owner (root is squashed, see the module doc).
    pub fn url_for(&self, name: &str) -> String {
        format!(
            "nfs://{}{}/{name}?uid={EXPORT_UID}&gid={EXPORT_GID}",
            self.host(),
            self.export_path()
        )
    }

    /// Whether rpcbind was started by us (and will be stopped with ganesha).
    pub fn started_rpcbind(&self) -> bool {
        self.rpcbind
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Stops ganesha (SIGTERM, then SIGKILL after 10 s) and the rpcbind we started, if any.
    /// Idempotent.
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            cmd::terminate(&mut c, Duration::from_secs(10));
        }
        if let Some(mut r) = self
            .rpcbind
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            cmd::terminate(&mut r, Duration::from_secs(5));
        }
    }

    /// Polls until a probe file can be created over NFS, the child dies, or time runs out.
    fn wait_ready(&self) -> Result<(), StorageError> {
        let url = self.url_for(PROBE);
        let probe = || {
            cmd::run("qemu-img", &["create", "-q", "-f", "raw", &url, "0"])
                .map(drop)
                .map_err(|e| e.to_string())
        };
        match cmd::wait_until(
            START_TIMEOUT,
            Duration::from_millis(250),
            || self.exited(),
            probe,
        ) {
            Ok(()) => {
                let _ = std::fs::remove_file(self.export_dir.join(PROBE));
                Ok(())
            }
            Err(cmd::Waited::Exited(status)) => {
                Err(self.failure(format!("ganesha.nfsd exited during start ({status})")))
            }
            Err(cmd::Waited::TimedOut(last)) => Err(self.failure(format!(
                "ganesha.nfsd did not answer on {} within {}s (last probe: {last})",
                self.host(),
                START_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The child's exit status, if it has exited.
    fn exited(&self) -> Option<String> {
        cmd::child_exited(&self.child)
    }

    fn failure(&self, detail: String) -> StorageError {
        StorageError::Server {
            server: "ganesha",
            detail,
            log: self.log.clone(),
            tail: cmd::tail_file(&self.log),
        }
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The ganesha configuration: bound to the namespace's (server) address, NFSv3+4, one export
/// that grants nothing at EXPORT level (a client matching no CLIENT block gets the EXPORT's
/// permissions, ganesha-export-config(8)) and RW with root squashed in the CLIENT block for the
/// host end of the link only.
/// NLM and RQUOTA are off: QEMU's libnfs uses neither, and rquotad's fixed port 875 would
/// collide with a second server. `Attr_Expiration_Time = 0`: teardown deletes images from the
/// host side, behind ganesha's back; with its attribute cache a later CREATE of the same name
/// fails with NFS3ERR_STALE (seen).
fn config_text(export_dir: &Path, addrs: LinkAddrs) -> String {
    let p = export_dir.display();
    let (bind, client) = (addrs.server, addrs.client);
    format!(
        r#"# Written by vmbench for one run; do not edit.
NFS_CORE_PARAM {{
    Bind_addr = {bind};
    NFS_Port = {NFS_PORT};
    Protocols = 3, 4;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}}
NFSV4 {{
    Graceless = true;
}}
EXPORT {{
    Export_Id = 1;
    Path = "{p}";
    Pseudo = "{p}";
    Access_Type = None;
    Squash = Root_Squash;
    Anonymous_Uid = 65534;
    Anonymous_Gid = 65534;
    Protocols = 3, 4;
    Transports = TCP;
    SecType = sys;
    Attr_Expiration_Time = 0;
    CLIENT {{
        Clients = {client};
        Access_Type = RW;
        Squash = Root_Squash;
    }}
    FSAL {{
        Name = VFS;
    }}
}}
"#
    )
}

/// The export path goes into a config file and into URLs unescaped, so keep it to characters
/// that need no quoting in either.
fn check_nfs_safe(dir: &Path) -> Result<(), StorageError> {
    let s = dir.to_string_lossy();
    let ok = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
    if ok && !s.contains("//") {
        return Ok(());
    }
    Err(StorageError::Invalid(format!(
        "NFS export directory '{s}' may contain only letters, digits, '/', '.', '_' and '-' \
         (it becomes part of nfs:// URLs and ganesha's config); choose another work directory"
    )))
}

/// `work_dir` root's and 0700 (config, log, and the way to the export: other local users cannot
/// traverse it; ganesha runs as root); `export_dir` the export owner's and 0700. QEMU reaches
/// the images only over NFS, so it needs no traversal here.
fn make_dirs(work_dir: &Path, export_dir: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &str, d: &Path| {
        let context = format!("{what} {}", d.display());
        move |source| StorageError::Io { context, source }
    };
    for d in [work_dir, export_dir] {
        std::fs::create_dir_all(d).map_err(io("creating", d))?;
    }
    std::os::unix::fs::chown(work_dir, Some(0), Some(0)).map_err(io("chown", work_dir))?;
    std::fs::set_permissions(work_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("chmod", work_dir))?;
    std::os::unix::fs::chown(export_dir, Some(EXPORT_UID), Some(EXPORT_GID))
        .map_err(io("chown", export_dir))?;
    std::fs::set_permissions(export_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("chmod", export_dir))
}

/// Makes an image in the export readable and writable by the export's owner only (libnfs
/// creates files with the mode its caller asks for, which need not be 0600).
pub fn restrict_image(path: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        StorageError::Io {
            context: format!("chmod {}", path.display()),
            source,
        }
    })
}

/// Starts `rpcbind -f` in `net` with the private /run `run_dir`, and waits until it listens on
/// the namespace's address.
fn start_rpcbind(net: &NetNs, run_dir: &Path, log: &Path) -> Result<Child, StorageError> {
    let err = cmd::open_log(log)?;
    let mut child = net
        .command("rpcbind", Some(run_dir))?
        .arg("-f")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|source| StorageError::Io {
            context: format!("starting rpcbind in {} (is it installed?)", net.name()),
            source,
        })?;
    let addr = net.addrs().server;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cmd::port_answers(addr, RPCBIND_PORT) {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(StorageError::Server {
                server: "rpcbind",
                detail: format!("rpcbind -f exited ({status})"),
                log: log.to_path_buf(),
                tail: cmd::tail_file(log),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cmd::terminate(&mut child, Duration::from_secs(2));
    Err(StorageError::Server {
        server: "rpcbind",
        detail: format!("rpcbind did not listen on {addr}:{RPCBIND_PORT} within 10s"),
        log: log.to_path_buf(),
        tail: cmd::tail_file(log),
    })
}

fn spawn_ganesha(
    net: &NetNs,
    run_dir: &Path,
    conf: &Path,
    log: &Path,
    pid_file: &Path,
) -> Result<Child, StorageError> {
    let err = cmd::open_log(log)?;
    net.command("ganesha.nfsd", Some(run_dir))?
        .arg("-F")
        .arg("-f")
        .arg(conf)
        .arg("-L")
        .arg(log)
        .arg("-p")
        .arg(pid_file)
        .args(["-N", "NIV_EVENT"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|source| StorageError::Io {
            context: "starting ganesha.nfsd (is nfs-ganesha installed?)".to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_grants_access_only_to_the_client_with_root_squashed() {
        let addrs = LinkAddrs {
            server: Ipv4Addr::new(169, 254, 7, 2),
            client: Ipv4Addr::new(169, 254, 7, 1),
        };
        let c = config_text(Path::new("/var/tmp/run/export"), addrs);
        assert!(c.contains("Bind_addr = 169.254.7.2;"));
        let (export_level, client) = c.split_once("CLIENT {").unwrap();
        assert!(export_level.contains("Access_Type = None;"), "{c}");
        assert!(export_level.contains("Squash = Root_Squash;"), "{c}");
        assert!(client.contains("Clients = 169.254.7.1;"), "{c}");
        assert!(client.contains("Access_Type = RW;"), "{c}");
        assert!(client.contains("Squash = Root_Squash;"), "{c}");
        assert!(!c.contains("No_Root_Squash"), "{c}");
        assert!(!c.contains("127.0.0.1"), "{c}");
        assert!(c.contains("Path = \"/var/tmp/run/export\";"));
        assert!(c.contains("Pseudo = \"/var/tmp/run/export\";"));
        assert!(c.contains("Name = VFS;"));
        assert!(c.contains("Attr_Expiration_Time = 0;"));
    }

    #[test]
    fn unsafe_export_paths_are_refused() {
        assert!(check_nfs_safe(Path::new("/var/tmp/a b/export")).is_err());
        assert!(check_nfs_safe(Path::new("/var/tmp/a\"b")).is_err());
        assert!(check_nfs_safe(Path::new("/var/tmp/run-1/export")).is_ok());
    }
}
