//! Embedded storage servers (nfs-ganesha, tgtd): started on the first cell that needs one,
//! shared by every later cell, replaced when one died, and stopped when [`Servers`] is dropped.
//!
//! Every server runs in a network namespace of the run, one per link ([`super::netns`]): the
//! `loopback` link is an unshaped veth, a shaped link the same with tc. The namespace is made
//! with the first server on that link and removed after the last one stops.
//!
//! A server that could not start fails every later cell that needs it with the same reason,
//! without retrying each time (a missing binary or a busy port will not fix itself mid-run).

use super::base::Bases;
use super::ceph::Ceph;
use super::ceph_external::{CephSpec, ExternalCeph};
use super::chap::RunChap;
use super::ganesha::Ganesha;
use super::netns::NetNs;
use super::tgt::Tgt;
use super::StorageError;
use crate::cell::Link;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// What the matrix needs from an embedded server. `start` returns once the server answers (or
/// with the reason it did not, including its log tail); dropping the value stops it.
pub trait EmbeddedServer: Send + Sync + Sized {
    /// Its name in results and messages (`ganesha`, `tgtd`).
    const NAME: &'static str;
    /// The Debian package that provides it (named when it is missing).
    const PACKAGE: &'static str;
    /// Its program.
    const BINARY: &'static str;
    /// The QEMU block driver module clients reach it with.
    const QEMU_MODULE: &'static str;
    /// The argument that makes its program print its version and exit.
    const VERSION_ARG: &'static str = "--version";
    /// The version number in that output (by default its first word: tgtd prints `1.0.85`).
    fn parse_version(out: &str) -> Option<String> {
        out.split_whitespace().next().map(str::to_string)
    }
    /// Starts it in `net` with its files under `dir` and waits until it is ready.
    fn start(dir: &Path, net: Arc<NetNs>) -> Result<Self, StorageError>;
    /// Its process id, watched while a cell runs.
    fn pid(&self) -> u32;
    /// Whether it still runs (a dead one is replaced before the next cell).
    fn alive(&self) -> bool;
    /// Its log file (kept with the run).
    fn log_path(&self) -> &Path;
    /// Stops it; idempotent.
    fn stop(&self);
}

impl EmbeddedServer for Ganesha {
    const NAME: &'static str = "ganesha";
    const PACKAGE: &'static str = "nfs-ganesha";
    const BINARY: &'static str = "ganesha.nfsd";
    const QEMU_MODULE: &'static str = "block-nfs.so";
    const VERSION_ARG: &'static str = "-v";
    /// `NFS-Ganesha Release = V4.3` gives `4.3`.
    fn parse_version(out: &str) -> Option<String> {
        let v = out.split_once("Release =")?.1.split_whitespace().next()?;
        Some(v.trim_start_matches('V').to_string())
    }
    fn start(dir: &Path, net: Arc<NetNs>) -> Result<Self, StorageError> {
        Ganesha::start(dir, net)
    }
    fn pid(&self) -> u32 {
        Ganesha::pid(self)
    }
    fn alive(&self) -> bool {
        super::cmd::pid_alive(Ganesha::pid(self))
    }
    fn log_path(&self) -> &Path {
        Ganesha::log_path(self)
    }
    fn stop(&self) {
        Ganesha::stop(self)
    }
}

impl EmbeddedServer for Tgt {
    const NAME: &'static str = "tgtd";
    const PACKAGE: &'static str = "tgt";
    const BINARY: &'static str = "tgtd";
    const QEMU_MODULE: &'static str = "block-iscsi.so";
    fn start(dir: &Path, net: Arc<NetNs>) -> Result<Self, StorageError> {
        Tgt::start(dir, net)
    }
    fn pid(&self) -> u32 {
        Tgt::pid(self)
    }
    fn alive(&self) -> bool {
        self.running()
    }
    fn log_path(&self) -> &Path {
        Tgt::log_path(self)
    }
    fn stop(&self) {
        Tgt::stop(self)
    }
}

/// Named by path: the `use` lines are left to whoever adds Ceph's slot.
impl EmbeddedServer for Ceph {
    const NAME: &'static str = "ceph";
    /// The OSD's package; ceph-mon and ceph-common (the `ceph` and `rbd` tools) come with it
    /// in scripts/setup-host.
    const PACKAGE: &'static str = "ceph-osd";
    const BINARY: &'static str = "ceph-osd";
    const QEMU_MODULE: &'static str = "block-rbd.so";
    /// `ceph version 16.2.15 (618f...) pacific (stable)` gives `16.2.15`.
    fn parse_version(out: &str) -> Option<String> {
        let v = out
            .split_once("ceph version ")?
            .1
            .split_whitespace()
            .next()?;
        Some(v.to_string())
    }
    fn start(dir: &Path, net: Arc<NetNs>) -> Result<Self, StorageError> {
        super::ceph::Ceph::start(dir, net)
    }
    fn pid(&self) -> u32 {
        super::ceph::Ceph::pid(self)
    }
    fn alive(&self) -> bool {
        super::ceph::Ceph::alive(self)
    }
    fn log_path(&self) -> &Path {
        super::ceph::Ceph::log_path(self)
    }
    fn stop(&self) {
        super::ceph::Ceph::stop(self)
    }
}

/// Why a cell's storage cannot be opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    /// The backend acts on this machine only and the cell's libvirt host is another.
    #[error("unsupported on this host: {0}")]
    LocalOnly(super::LocalOnly),
    /// Not possible on this host.
    #[error("unsupported on this host: {0}")]
    Unsupported(super::Unsupported),
    /// Something failed (a server did not start, or an earlier start failed with this cause:
    /// the same error, shared).
    #[error(transparent)]
    Failed(Arc<StorageError>),
}

/// The directory (under a run's `servers/`) that keeps the usage name of the external iSCSI
/// target's libvirt CHAP secret, for `vmbench cleanup`.
pub const ISCSI_CHAP_DIR: &str = "iscsi-chap";

/// One server kind: the running instance, or the reason it could not start.
struct Slot<T> {
    dir: PathBuf,
    running: Option<Arc<T>>,
    broken: Option<Arc<StorageError>>,
}

impl<T: EmbeddedServer> Slot<T> {
    fn new(dir: PathBuf) -> Self {
        Slot {
            dir,
            running: None,
            broken: None,
        }
    }

    /// The running server, or a new one in the namespace `net` gives (a dead one is replaced;
    /// a failed start is sticky).
    fn get(
        &mut self,
        net: impl FnOnce() -> Result<Arc<NetNs>, StorageError>,
    ) -> Result<Arc<T>, OpenError> {
        if let Some(s) = self.running.as_ref().filter(|s| s.alive()) {
            return Ok(s.clone());
        }
        self.running = None;
        if let Some(e) = &self.broken {
            return Err(OpenError::Failed(e.clone()));
        }
        match net().and_then(|n| T::start(&self.dir, n)) {
            Ok(s) => Ok(self.running.insert(Arc::new(s)).clone()),
            Err(StorageError::Unsupported(u)) => Err(OpenError::Unsupported(u)),
            Err(e) => Err(OpenError::Failed(self.broken.insert(Arc::new(e)).clone())),
        }
    }
}

/// The servers on one link.
struct OnLink {
    ganesha: Slot<Ganesha>,
    tgt: Slot<Tgt>,
    ceph: Slot<Ceph>,
}

/// The matrix's embedded servers, one of each kind per link at most; stopped when dropped (each
/// server stops itself on drop once the last cell's handle is gone, then its namespace goes).
pub struct Servers {
    dir: PathBuf,
    run: String,
    links: BTreeMap<Link, OnLink>,
    /// Each link's namespace while a server holds it.
    nets: BTreeMap<Link, Weak<NetNs>>,
    /// The external iSCSI target's CHAP (defined on first use), or why it could not be.
    iscsi_chap: Option<Result<Arc<RunChap>, Arc<StorageError>>>,
    /// The run's base images, made on first use, removed with the run.
    bases: Bases,
    /// The user's Ceph cluster (`--ceph-conf`), checked on first use, or why it refused.
    ceph_external: Option<Result<Arc<ExternalCeph>, Arc<StorageError>>>,
}

impl Servers {
    /// Nothing started yet; servers keep their files under `dir/<name>` (`dir/<name>-<link>`
    /// on a shaped link); namespaces are named after `run`, the run id.
    pub fn new(dir: PathBuf, run: &str) -> Servers {
        Servers {
            dir,
            run: run.to_string(),
            links: BTreeMap::new(),
            nets: BTreeMap::new(),
            iscsi_chap: None,
            bases: Bases::new(run),
            ceph_external: None,
        }
    }

    /// The run's CHAP for the external iSCSI target, from `file`: read and defined as a libvirt
    /// secret on first use (usage file in `DIR/`[`ISCSI_CHAP_DIR`]), shared by every later cell,
    /// undefined when the last holder drops it. A failure is sticky, like a server's.
    pub fn iscsi_chap(&mut self, file: &Path) -> Result<Arc<RunChap>, OpenError> {
        let dir = self.dir.join(ISCSI_CHAP_DIR);
        self.iscsi_chap
            .get_or_insert_with(|| RunChap::define(file, &dir).map(Arc::new).map_err(Arc::new))
            .clone()
            .map_err(OpenError::Failed)
    }

    /// The user's Ceph cluster `spec` names: its key checked and the record `vmbench cleanup`
    /// reads written on first use ([`ExternalCeph::open`]), shared by every later cell, its base
    /// images removed when the last holder drops it. A failure is sticky, like a server's.
    pub fn ceph_external(&mut self, spec: CephSpec) -> Result<Arc<ExternalCeph>, OpenError> {
        let (run, dir) = (&self.run, &self.dir);
        self.ceph_external
            .get_or_insert_with(|| {
                ExternalCeph::open(spec, run, dir)
                    .map(Arc::new)
                    .map_err(Arc::new)
            })
            .clone()
            .map_err(OpenError::Failed)
    }

    /// The run's bases made from the user's `image` (`--base-image`) instead of known data.
    pub fn with_base_image(mut self, image: super::base::UserImage) -> Servers {
        self.bases = Bases::new(&self.run).from_image(image);
        self
    }

    /// The run's base images (made on first use, shared by every cell, removed with the run).
    pub fn bases(&self) -> Bases {
        self.bases.clone()
    }

    /// The log directory of a server started outside these slots (hostdir's per-cell virtiofsd),
    /// beside ganesha's and tgt's, where `vmbench cleanup` looks for a killed run's servers.
    pub fn log_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The embedded NFS server on `link`.
    pub fn ganesha(&mut self, link: Link) -> Result<Arc<Ganesha>, OpenError> {
        let net = net_of(&mut self.nets, &self.run, link);
        slots(&mut self.links, &self.dir, link).ganesha.get(net)
    }

    /// The embedded iSCSI target on `link`.
    pub fn tgt(&mut self, link: Link) -> Result<Arc<Tgt>, OpenError> {
        let net = net_of(&mut self.nets, &self.run, link);
        slots(&mut self.links, &self.dir, link).tgt.get(net)
    }

    /// The embedded Ceph cluster (monitor and OSD) on `link`.
    pub fn ceph(&mut self, link: Link) -> Result<Arc<Ceph>, OpenError> {
        let net = net_of(&mut self.nets, &self.run, link);
        slots(&mut self.links, &self.dir, link).ceph.get(net)
    }
}

/// A maker of `link`'s namespace: the live one, or a new one.
fn net_of<'a>(
    nets: &'a mut BTreeMap<Link, Weak<NetNs>>,
    run: &'a str,
    link: Link,
) -> impl FnOnce() -> Result<Arc<NetNs>, StorageError> + 'a {
    move || {
        let weak = nets.entry(link).or_default();
        if let Some(n) = weak.upgrade() {
            return Ok(n);
        }
        let n = Arc::new(NetNs::create(run, link)?);
        *weak = Arc::downgrade(&n);
        Ok(n)
    }
}

/// The slots of `link`; a shaped link's servers keep their files in `DIR/<name>-<link>`.
fn slots<'a>(links: &'a mut BTreeMap<Link, OnLink>, dir: &Path, link: Link) -> &'a mut OnLink {
    links.entry(link).or_insert_with(|| {
        let sub = |name: &str| match link {
            Link::Loopback => dir.join(name),
            l => dir.join(format!("{name}-{}", l.to_string().replace(['+', '.'], "_"))),
        };
        OnLink {
            ganesha: Slot::new(sub("ganesha")),
            tgt: Slot::new(sub("tgt")),
            ceph: Slot::new(sub("ceph")),
        }
    })
}

/// Whether server `T` could start here, without starting it: its program is installed and QEMU
/// has the block driver to reach it (for `vmbench doctor`).
pub fn installed<T: EmbeddedServer>() -> Result<String, String> {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain([Path::new("/usr/sbin").into()])
                .any(|d| d.join(T::BINARY).exists())
        })
        .unwrap_or(false);
    if !on_path {
        return Err(format!("{} not found (install {})", T::BINARY, T::PACKAGE));
    }
    let module = Path::new("/usr/lib/x86_64-linux-gnu/qemu").join(T::QEMU_MODULE);
    if !module.exists() {
        return Err(format!(
            "QEMU has no {} (install qemu-block-extra)",
            T::QEMU_MODULE
        ));
    }
    Ok(format!(
        "embedded {} in a per-run network namespace (or an external server)",
        T::PACKAGE
    ))
}

/// `PACKAGE VERSION` of server `T` as installed here (`nfs-ganesha 4.3`, `tgt 1.0.85`), for
/// the provenance of the cells it serves (a storage server upgrade is a change of the system
/// under test); `PACKAGE (version unknown)` when its program does not say.
pub fn version<T: EmbeddedServer>() -> String {
    let out = std::process::Command::new(T::BINARY)
        .arg(T::VERSION_ARG)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
    match out.as_deref().and_then(T::parse_version) {
        Some(v) => format!("{} {v}", T::PACKAGE),
        None => format!("{} (version unknown)", T::PACKAGE),
    }
}

/// [`version`] of the embedded server called `name` ([`EmbeddedServer::NAME`]), asked once per
/// process.
pub fn version_of(name: &str) -> Option<String> {
    use std::sync::OnceLock;
    static GANESHA: OnceLock<String> = OnceLock::new();
    static TGT: OnceLock<String> = OnceLock::new();
    static CEPH: OnceLock<String> = OnceLock::new();
    match name {
        Ganesha::NAME => Some(GANESHA.get_or_init(version::<Ganesha>).clone()),
        Tgt::NAME => Some(TGT.get_or_init(version::<Tgt>).clone()),
        Ceph::NAME => Some(CEPH.get_or_init(version::<Ceph>).clone()),
        _ => None,
    }
}

/// `(name, pid)` of a server, as cells record and watch it.
pub fn identity<T: EmbeddedServer>(s: &T) -> (&'static str, u32) {
    (T::NAME, s.pid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_versions_are_read_from_their_own_output() {
        // Debian 12's nfs-ganesha 4.3 (`ganesha.nfsd -v`) and tgt 1.0.85 (`tgtd --version`).
        assert_eq!(
            Ganesha::parse_version("NFS-Ganesha Release = V4.3\n").as_deref(),
            Some("4.3")
        );
        assert_eq!(Tgt::parse_version("1.0.85\n").as_deref(), Some("1.0.85"));
        assert_eq!(Ganesha::parse_version("usage: ganesha.nfsd ..."), None);
    }
    use std::sync::atomic::{AtomicU32, Ordering};

    static STARTS: AtomicU32 = AtomicU32::new(0);

    struct Flaky;
    impl EmbeddedServer for Flaky {
        const NAME: &'static str = "flaky";
        const PACKAGE: &'static str = "flaky";
        const BINARY: &'static str = "flaky";
        const QEMU_MODULE: &'static str = "flaky.so";
        fn start(_: &Path, _: Arc<NetNs>) -> Result<Self, StorageError> {
            STARTS.fetch_add(1, Ordering::SeqCst);
            Err(StorageError::Invalid("port 2049 is taken".into()))
        }
        fn pid(&self) -> u32 {
            0
        }
        fn alive(&self) -> bool {
            false
        }
        fn log_path(&self) -> &Path {
            Path::new("/nonexistent")
        }
        fn stop(&self) {}
    }

    #[test]
    fn a_failed_start_fails_later_cells_with_the_same_reason_without_retrying() {
        let mut slot: Slot<Flaky> = Slot::new("/nonexistent".into());
        // The namespace cannot be made: the first try fails, later ones do not try again.
        let tries = AtomicU32::new(0);
        let no_net = || -> Result<Arc<NetNs>, StorageError> {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(StorageError::Invalid("port 2049 is taken".into()))
        };
        let first = slot.get(no_net).err().unwrap();
        let second = slot.get(no_net).err().unwrap();
        assert_eq!(first.to_string(), "port 2049 is taken");
        let (OpenError::Failed(a), OpenError::Failed(b)) = (&first, &second) else {
            panic!("a failed start is a failure: {first:?}, {second:?}")
        };
        assert!(Arc::ptr_eq(a, b), "the same cause, not a copy");
        assert_eq!(tries.load(Ordering::SeqCst), 1);
        assert_eq!(STARTS.load(Ordering::SeqCst), 0);
    }
}
