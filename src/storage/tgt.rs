//! An embedded, user-space iSCSI target: tgtd in the foreground as our child, inside the run's
//! network namespace ([`super::netns`]) with its portal on the namespace's address and its
//! targets bound to the host end of the link, with its own management control port (`-C N`, socket
//! `/var/run/tgtd/socket.N`) so that a system tgtd or another vmbench run does not collide.
//! Every `tgtadm` call passes the same `-C N`. The CHAP account alone is created by speaking
//! that socket's protocol directly ([`super::tgt_ipc`]), so its secret is on no command line.
//!
//! Every target requires CHAP with one random per-run account ([`super::chap`]); QEMU gets the
//! secret through a libvirt secret that lives as long as this tgtd. The initiator ACL is the
//! loopback address QEMU connects from.
//!
//! tgtd ignores SIGTERM: [`Tgt::stop`] deletes the targets (`--force`), then asks it to exit
//! with `tgtadm --op delete --mode system`, and SIGKILLs it only if it is still there.

use super::chap::{self, Chap, LibvirtSecret};
use super::cmd;
use super::netns::NetNs;
use super::StorageError;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// The iSCSI default port, used when free.
pub const DEFAULT_PORTAL_PORT: u16 = 3260;
/// Where tgtd keeps its control sockets.
/// Where tgtd keeps its control sockets (a SIGKILLed tgtd leaves them behind).
pub const SOCKET_DIR: &str = "/var/run/tgtd";
/// How long tgtd may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// The IQN prefix; the suffix is `<run>-<tid>`.
pub const IQN_PREFIX: &str = "iqn.2026-12.dev.vmbench";

/// A running tgtd.
#[derive(Debug)]
pub struct Tgt {
    ctl_port: u16,
    portal_port: u16,
    pid: u32,
    log: PathBuf,
    run: String,
    next_tid: AtomicU32,
    /// Live targets: tid -> IQN.
    targets: Mutex<BTreeMap<u32, String>>,
    child: Mutex<Option<Child>>,
    /// The per-run CHAP account every target is bound to.
    chap: Chap,
    /// The libvirt secret holding the CHAP secret; undefined by `stop`.
    secret: Mutex<Option<LibvirtSecret>>,
    /// Dropped after tgtd stops (field order): the namespace outlives its processes.
    net: Arc<NetNs>,
}

impl Tgt {
    /// Starts `tgtd -f -C N --iscsi portal=ADDR:3260` in `net` with its log in
    /// `work_dir/tgtd.log` (the namespace is ours, so 3260 is free there); N is a control port no
    /// other tgtd uses (its socket is a host path, so host-side `tgtadm` reaches it). Waits until
    /// `tgtadm -C N` answers and the portal accepts connections.
    pub fn start(work_dir: &Path, net: Arc<NetNs>) -> Result<Tgt, StorageError> {
        std::fs::create_dir_all(work_dir).map_err(|source| StorageError::Io {
            context: format!("creating {}", work_dir.display()),
            source,
        })?;
        std::fs::create_dir_all(SOCKET_DIR).map_err(|source| StorageError::Io {
            context: format!("creating {SOCKET_DIR}"),
            source,
        })?;
        let portal_port = DEFAULT_PORTAL_PORT;
        let ctl_port = free_control_port()?;
        let log = work_dir.join("tgtd.log");
        let run = cmd::run_tag();
        let portal = format!("{}:{portal_port}", net.addrs().server);
        let child = spawn_tgtd(&net, ctl_port, &portal, &log)?;
        let t = Tgt {
            ctl_port,
            portal_port,
            pid: child.id(),
            log,
            chap: Chap::random(&cmd::unique_tag()),
            run,
            next_tid: AtomicU32::new(1),
            targets: Mutex::new(BTreeMap::new()),
            child: Mutex::new(Some(child)),
            secret: Mutex::new(None),
            net,
        };
        // From here on, Drop stops tgtd and undefines the secret.
        t.wait_ready()?;
        t.add_account()?;
        t.define_secret(work_dir)?;
        Ok(t)
    }

    /// Creates the CHAP account in tgtd over its control socket ([`super::tgt_ipc`]), not with
    /// `tgtadm --password`, whose argv any local user could read; a failure names the step and
    /// the user, never the secret.
    fn add_account(&self) -> Result<(), StorageError> {
        let socket = super::tgt_ipc::socket_path(self.ctl_port);
        super::tgt_ipc::new_account(&socket, self.chap.username(), self.chap.secret()).map_err(
            |e| {
                self.failure(format!(
                    "creating CHAP account {} over {}: {e}",
                    self.chap.username(),
                    socket.display()
                ))
            },
        )
    }

    /// Defines the libvirt secret QEMU logs in with, and records its usage name (not its value)
    /// in `work_dir` so that `vmbench cleanup` can undefine it after a kill -9.
    fn define_secret(&self, work_dir: &Path) -> Result<(), StorageError> {
        let usage = format!(
            "{}{}",
            chap::USAGE_PREFIX,
            self.chap.username().trim_start_matches("vmbench-")
        );
        let file = work_dir.join(chap::USAGE_FILE);
        std::fs::write(&file, &usage).map_err(|source| StorageError::Io {
            context: format!("writing {}", file.display()),
            source,
        })?;
        let s = LibvirtSecret::define(&usage, &self.chap)?;
        *self.secret.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
        Ok(())
    }

    /// How QEMU logs in: the CHAP user name and the libvirt secret's usage name.
    pub fn auth(&self) -> Option<super::NetAuth> {
        let guard = self.secret.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|s| super::NetAuth::IscsiChap {
            username: self.chap.username().to_string(),
            secret_usage: s.usage().to_string(),
        })
    }

    /// tgtd's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The portal's TCP port.
    pub fn portal_port(&self) -> u16 {
        self.portal_port
    }

    /// The portal's address (the namespace end of the link).
    pub fn host(&self) -> Ipv4Addr {
        self.net.addrs().server
    }

    /// The namespace it runs in.
    pub fn net(&self) -> &NetNs {
        &self.net
    }

    /// The management control port (`tgtadm -C`).
    pub fn control_port(&self) -> u16 {
        self.ctl_port
    }

    /// tgtd's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `iscsi://ADDR:PORT/IQN/LUN`.
    pub fn url_for(&self, iqn: &str, lun: u32) -> String {
        format!("iscsi://{}:{}/{iqn}/{lun}", self.host(), self.portal_port)
    }

    /// Reserves a target id and its run-unique IQN (`iqn.2026-12.dev.vmbench:<run>-<tid>`).
    pub fn next_target(&self) -> (u32, String) {
        let tid = self.next_tid.fetch_add(1, Ordering::SeqCst);
        (tid, format!("{IQN_PREFIX}:{}-{tid}", self.run))
    }

    /// `tgtadm -C N ARGS...`.
    pub fn tgtadm(&self, args: &[&str]) -> Result<String, StorageError> {
        let port = self.ctl_port.to_string();
        let mut argv = vec!["-C", port.as_str()];
        argv.extend_from_slice(args);
        cmd::run("tgtadm", &argv)
    }

    /// Creates target `tid` named `iqn` with LUN 1 backed by `backing`, reachable only from the
    /// host end of the link and only with the run's CHAP account. On a failure half way the
    /// target is deleted again.
    pub fn add_target(&self, tid: u32, iqn: &str, backing: &Path) -> Result<(), StorageError> {
        let t = tid.to_string();
        let file = backing.to_string_lossy();
        self.tgtadm(&[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", &t, "-T", iqn,
        ])?;
        self.lock_targets().insert(tid, iqn.to_string());
        let rest = self
            .tgtadm(&[
                "--lld",
                "iscsi",
                "--op",
                "new",
                "--mode",
                "logicalunit",
                "--tid",
                &t,
                "--lun",
                "1",
                "-b",
                &file,
            ])
            .and_then(|_| {
                let client = self.net.addrs().client.to_string();
                self.tgtadm(&[
                    "--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", &t, "-I",
                    &client,
                ])
            })
            .and_then(|_| {
                self.tgtadm(&[
                    "--lld",
                    "iscsi",
                    "--op",
                    "bind",
                    "--mode",
                    "account",
                    "--tid",
                    &t,
                    "--user",
                    self.chap.username(),
                ])
            });
        if let Err(e) = rest {
            let _ = self.delete_target(tid);
            return Err(e);
        }
        Ok(())
    }

    /// Deletes target `tid` and its LUNs (`--force` closes sessions). Idempotent, and a no-op
    /// once tgtd is stopped (its targets went with it).
    pub fn delete_target(&self, tid: u32) -> Result<(), StorageError> {
        if !self.lock_targets().contains_key(&tid) {
            return Ok(());
        }
        if !self.running() {
            self.lock_targets().remove(&tid);
            return Ok(());
        }
        let t = tid.to_string();
        self.tgtadm(&[
            "--lld", "iscsi", "--op", "delete", "--mode", "target", "--tid", &t, "--force",
        ])?;
        self.lock_targets().remove(&tid);
        Ok(())
    }

    /// Deletes every target, asks tgtd to exit, and SIGKILLs it after 5 s if it did not.
    /// Removes its control socket files. Idempotent.
    pub fn stop(&self) {
        // Dropping it undefines it.
        drop(self.secret.lock().unwrap_or_else(|e| e.into_inner()).take());
        let tids: Vec<u32> = self.lock_targets().keys().copied().collect();
        for tid in tids {
            let _ = self.delete_target(tid);
        }
        let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let _ = self.tgtadm(&["--op", "delete", "--mode", "system"]);
        if !cmd::wait_timeout(&mut child, Duration::from_secs(5)) {
            cmd::kill_and_reap(&mut child);
        }
        for suffix in ["", ".lock"] {
            let _ = std::fs::remove_file(format!("{SOCKET_DIR}/socket.{}{suffix}", self.ctl_port));
        }
        self.lock_targets().clear();
    }

    /// Whether our tgtd still runs (not stopped, not exited).
    pub fn running(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn lock_targets(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, String>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_ready(&self) -> Result<(), StorageError> {
        let probe = || match self.tgtadm(&["--op", "show", "--mode", "sys"]) {
            Ok(_) if cmd::port_answers(self.host(), self.portal_port) => Ok(()),
            Ok(_) => Err(format!(
                "portal {}:{} not listening yet",
                self.host(),
                self.portal_port
            )),
            Err(e) => Err(e.to_string()),
        };
        match cmd::wait_until(
            START_TIMEOUT,
            Duration::from_millis(100),
            || self.exited(),
            probe,
        ) {
            Ok(()) => Ok(()),
            Err(cmd::Waited::Exited(status)) => {
                Err(self.failure(format!("tgtd exited during start ({status})")))
            }
            Err(cmd::Waited::TimedOut(last)) => Err(self.failure(format!(
                "tgtd did not answer within {}s: {last}",
                START_TIMEOUT.as_secs()
            ))),
        }
    }

    fn exited(&self) -> Option<String> {
        cmd::child_exited(&self.child)
    }

    fn failure(&self, detail: String) -> StorageError {
        StorageError::Server {
            server: "tgtd",
            detail,
            log: self.log.clone(),
            tail: cmd::tail_file(&self.log),
        }
    }
}

impl Drop for Tgt {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A control port whose socket does not exist yet, starting from a pid-derived number so two
/// runs rarely probe the same one.
/// tgtd and tgtadm refuse a control port (`-C`) above this ("out of range").
const MAX_CONTROL_PORT: u32 = 32767;
const MIN_CONTROL_PORT: u32 = 1000;

/// The control ports tried for process `pid`, in order: 2000 of them from a pid-derived start,
/// wrapping inside tgt's valid range, so concurrent runs rarely probe the same ones.
fn control_port_candidates(pid: u32) -> impl Iterator<Item = u16> {
    let span = MAX_CONTROL_PORT - MIN_CONTROL_PORT + 1;
    (0..2000u32).map(move |i| (MIN_CONTROL_PORT + (pid % span + i) % span) as u16)
}

fn free_control_port() -> Result<u16, StorageError> {
    control_port_candidates(std::process::id())
        .find(|p| !Path::new(&format!("{SOCKET_DIR}/socket.{p}")).exists())
        .ok_or_else(|| {
            StorageError::Invalid(format!("no free tgtd control port under {SOCKET_DIR}"))
        })
}

fn spawn_tgtd(net: &NetNs, ctl_port: u16, portal: &str, log: &Path) -> Result<Child, StorageError> {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|source| StorageError::Io {
            context: format!("opening {}", log.display()),
            source,
        })?;
    net.command("tgtd", None)?
        .arg("-f")
        .arg("-C")
        .arg(ctl_port.to_string())
        .arg("--iscsi")
        .arg(format!("portal={portal}"))
        .stdin(Stdio::null())
        .stdout(err.try_clone().map_err(|source| StorageError::Io {
            context: format!("opening {}", log.display()),
            source,
        })?)
        .stderr(err)
        .spawn()
        .map_err(|source| StorageError::Io {
            context: "starting tgtd (is tgt installed?)".to_string(),
            source,
        })
}

/// Targets a tgtd on control port `ctl_port` has, as `(tid, IQN)`, from `tgtadm --op show`;
/// for `vmbench cleanup` to find leftovers of a run that was killed.
pub fn tgt_targets(ctl_port: u16) -> Result<Vec<(u32, String)>, StorageError> {
    let port = ctl_port.to_string();
    let out = cmd::run(
        "tgtadm",
        &[
            "-C", &port, "--lld", "iscsi", "--op", "show", "--mode", "target",
        ],
    )?;
    Ok(parse_targets(&out))
}

/// Control ports with a tgtd socket in /var/run/tgtd (any tgtd, ours or not).
pub fn tgt_control_ports() -> Vec<u16> {
    let Ok(dir) = std::fs::read_dir(SOCKET_DIR) else {
        return Vec::new();
    };
    let mut v: Vec<u16> = dir
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("socket.")?
                .parse()
                .ok()
        })
        .collect();
    v.sort_unstable();
    v
}

/// Parses `Target 1: iqn...` lines.
fn parse_targets(show: &str) -> Vec<(u32, String)> {
    show.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("Target ")?;
            let (tid, iqn) = rest.split_once(": ")?;
            Some((tid.trim().parse().ok()?, iqn.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tgtd refuses `-C` above 32767: no pid may lead to such a port (47123 was seen).
    #[test]
    fn control_ports_stay_in_tgts_range() {
        for pid in [
            0,
            1,
            29_767,
            29_999,
            31_767,
            31_768,
            46_123,
            4_194_303,
            u32::MAX,
        ] {
            let ports: Vec<u16> = control_port_candidates(pid).collect();
            assert_eq!(ports.len(), 2000);
            assert!(
                ports.iter().all(|&p| (1000..=32767).contains(&p)),
                "pid {pid}"
            );
            let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
            assert_eq!(distinct.len(), 2000, "pid {pid}");
        }
    }

    #[test]
    fn parses_tgtadm_show() {
        // Captured from tgtadm 1.0.85 (`--op show --mode target`), trimmed.
        let show = "Target 1: iqn.2026-12.dev.vmbench:t-1\n    System information:\n        \
                    Driver: iscsi\n        State: ready\n    LUN information:\n        LUN: 0\n\
                    Target 12: iqn.2026-12.dev.vmbench:t-12\n";
        assert_eq!(
            parse_targets(show),
            vec![
                (1, "iqn.2026-12.dev.vmbench:t-1".into()),
                (12, "iqn.2026-12.dev.vmbench:t-12".into())
            ]
        );
    }
}
