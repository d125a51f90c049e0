//! Embedded storage servers (nfs-ganesha, tgtd): started on the first cell that needs one,
//! shared by every later cell, replaced when one died, and stopped when [`Servers`] is dropped.
//!
//! A server that could not start fails every later cell that needs it with the same reason,
//! without retrying each time (a missing binary or a busy port will not fix itself mid-run).

use super::ganesha::Ganesha;
use super::tgt::Tgt;
use super::StorageError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Starts it with its files under `dir` and waits until it is ready.
    fn start(dir: &Path) -> Result<Self, StorageError>;
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
    fn start(dir: &Path) -> Result<Self, StorageError> {
        Ganesha::start(dir)
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
    fn start(dir: &Path) -> Result<Self, StorageError> {
        Tgt::start(dir)
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

/// Why a cell's storage cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not possible on this host; the text starts with "unsupported on this host:".
    #[error("{0}")]
    Unsupported(String),
    /// Something failed (a server did not start, or an earlier start failed with this reason).
    #[error("{0}")]
    Failed(String),
}

/// One server kind: the running instance, or the reason it could not start.
struct Slot<T> {
    dir: PathBuf,
    running: Option<Arc<T>>,
    broken: Option<String>,
}

impl<T: EmbeddedServer> Slot<T> {
    fn new(dir: PathBuf) -> Self {
        Slot {
            dir,
            running: None,
            broken: None,
        }
    }

    /// The running server, or a new one (a dead one is replaced; a failed start is sticky).
    fn get(&mut self) -> Result<Arc<T>, OpenError> {
        if let Some(s) = self.running.as_ref().filter(|s| s.alive()) {
            return Ok(s.clone());
        }
        self.running = None;
        if let Some(r) = &self.broken {
            return Err(OpenError::Failed(r.clone()));
        }
        match T::start(&self.dir) {
            Ok(s) => Ok(self.running.insert(Arc::new(s)).clone()),
            Err(StorageError::Unsupported(u)) => Err(OpenError::Unsupported(format!(
                "unsupported on this host: {u}"
            ))),
            Err(e) => {
                self.broken = Some(e.to_string());
                Err(OpenError::Failed(e.to_string()))
            }
        }
    }
}

/// The matrix's embedded servers, one of each kind at most; stopped when dropped (each server
/// stops itself on drop once the last cell's handle is gone).
pub struct Servers {
    ganesha: Slot<Ganesha>,
    tgt: Slot<Tgt>,
}

impl Servers {
    /// Nothing started yet; servers keep their files under `dir/<name>`.
    pub fn new(dir: PathBuf) -> Servers {
        Servers {
            ganesha: Slot::new(dir.join("ganesha")),
            tgt: Slot::new(dir.join("tgt")),
        }
    }

    /// The embedded NFS server.
    /// The log directory of a server started outside these slots (hostdir's per-cell virtiofsd),
    /// beside ganesha's and tgt's, where `vmbench cleanup` looks for a killed run's servers.
    pub fn log_dir(&self, name: &str) -> PathBuf {
        self.ganesha.dir.with_file_name(name)
    }

    pub fn ganesha(&mut self) -> Result<Arc<Ganesha>, OpenError> {
        self.ganesha.get()
    }

    /// The embedded iSCSI target.
    pub fn tgt(&mut self) -> Result<Arc<Tgt>, OpenError> {
        self.tgt.get()
    }
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
        "embedded {} on 127.0.0.1 (or an external server)",
        T::PACKAGE
    ))
}

/// `(name, pid)` of a server, as cells record and watch it.
pub fn identity<T: EmbeddedServer>(s: &T) -> (&'static str, u32) {
    (T::NAME, s.pid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    static STARTS: AtomicU32 = AtomicU32::new(0);

    struct Flaky;
    impl EmbeddedServer for Flaky {
        const NAME: &'static str = "flaky";
        const PACKAGE: &'static str = "flaky";
        const BINARY: &'static str = "flaky";
        const QEMU_MODULE: &'static str = "flaky.so";
        fn start(_: &Path) -> Result<Self, StorageError> {
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
        let first = slot.get().err().unwrap();
        let second = slot.get().err().unwrap();
        assert_eq!(first, OpenError::Failed("port 2049 is taken".into()));
        assert_eq!(first, second);
        assert_eq!(STARTS.load(Ordering::SeqCst), 1);
    }
}
