//! The host engine's page cache, capped at the guest's RAM (`--hypervisor host`).
//!
//! A host cell runs the guest's workload with the guest's sizes: bonnie++'s `-s` is twice (or
//! the preset's ratio times) the guest's RAM so that the guest cannot cache its file. On the
//! host, whose RAM is many times larger, the same file sat in the page cache and bonnie++'s
//! block figures came out as reads from memory or `+++++` (too fast to time). The engine
//! therefore runs in a memory cgroup whose limit is the guest's RAM: its page cache is
//! reclaimed at the guest's size. Measured here (`bonnie++ -s 2048 -r 512 -f` on ext4, host
//! 23 GB): block read 4,168,501 K/s uncapped (the page cache), 1,698,057 K/s capped at 512 MiB;
//! random seeks `+++++` uncapped, 13,234/s capped.
//!
//! cgroup v2 (`memory` in the root's `cgroup.controllers`) takes `memory.max`; a hybrid or v1
//! host (this one: the v1 `memory` hierarchy, and the unified mount without controllers) takes
//! `memory.limit_in_bytes`. The cgroup is named after the run (`vmbench-RUN-SEQ`), so that
//! `vmbench cleanup` finds a killed run's; it is removed when the cell ends.

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// The cgroup roots tried, in order: v2 (unified at the usual mount point), then v1's memory
/// hierarchy.
const ROOTS: [(&str, Version); 2] = [
    ("/sys/fs/cgroup", Version::V2),
    ("/sys/fs/cgroup/memory", Version::V1),
];

/// Which cgroup interface a root speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl Version {
    fn name(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    /// The limit's file.
    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }
}

/// A memory cgroup that exists while this value lives.
#[derive(Debug)]
pub struct MemCap {
    dir: PathBuf,
    procs: CString,
    /// What the report says: the limit and the interface (`512 MiB (memory cgroup v1)`).
    pub describe: String,
}

impl MemCap {
    /// Makes `vmbench-<name>` capped at `mib`, or says why there is no memory controller to
    /// make it in (the caller records that the host row is uncapped).
    pub fn create(name: &str, mib: u64) -> Result<MemCap, String> {
        let (root, version) =
            root().ok_or("no cgroup memory controller (neither v2's nor v1's)")?;
        let dir = Path::new(root).join(format!("vmbench-{name}"));
        let made = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir(&dir).map_err(made)?;
        let cap = MemCap {
            procs: CString::new(
                dir.join("cgroup.procs")
                    .into_os_string()
                    .into_encoded_bytes(),
            )
            .map_err(|e| e.to_string())?,
            describe: format!("{mib} MiB (memory cgroup {})", version.name()),
            dir,
        };
        let limit = cap.dir.join(version.limit_file());
        std::fs::write(&limit, (mib << 20).to_string())
            .map_err(|e| format!("{}: {e}", limit.display()))?;
        Ok(cap)
    }

    /// `cgroup.procs` of the cgroup, for a child to write `0` into (itself) between fork and
    /// exec: see [`join_self`].
    pub fn procs(&self) -> &CString {
        &self.procs
    }
}

impl Drop for MemCap {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`. Only
/// async-signal-safe calls: it runs in a forked child before exec.
pub fn join_self(procs: &CString) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a static buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != 1 {
            return Err(err);
        }
    }
    Ok(())
}

/// Where host cells' caps would be made, for `vmbench doctor`; or why there is nowhere.
pub fn available() -> Result<String, String> {
    root()
        .map(|(root, v)| {
            let v = v.name();
            format!("memory cgroup {v} under {root}: the engine's page cache at the guest's RAM")
        })
        .ok_or_else(|| {
            "no cgroup memory controller: a host row's page cache is the host's, not the \
             guest's (bonnie++ block figures may be the cache's)"
                .into()
        })
}

/// The first root with a memory controller.
fn root() -> Option<(&'static str, Version)> {
    ROOTS
        .iter()
        .copied()
        .find(|(root, v)| has_memory(Path::new(root), *v))
}

fn has_memory(root: &Path, v: Version) -> bool {
    match v {
        Version::V2 => std::fs::read_to_string(root.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")),
        Version::V1 => root.join(v.limit_file()).exists(),
    }
}

/// Removes a cgroup directory (only an empty one can go: its engine has been reaped). The
/// kernel may take a moment to let go of a just-exited task.
fn remove(dir: &Path) {
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => return,
        }
    }
}

/// A killed run's cgroups (`vmbench-RUN-*`), for `vmbench cleanup`.
pub fn leftovers(run_id: &str) -> Vec<PathBuf> {
    let prefix = format!("vmbench-{run_id}-");
    ROOTS
        .iter()
        .filter_map(|(root, _)| std::fs::read_dir(root).ok())
        .flat_map(|rd| rd.flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Removes what [`leftovers`] found. Their engines died with vmbench (`PR_SET_PDEATHSIG`).
pub fn remove_leftovers(dirs: &[PathBuf]) {
    for d in dirs {
        remove(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "host: root"]
    fn a_child_joins_the_cap_and_the_cap_goes_with_its_value() {
        let run = format!("unit{}", std::process::id());
        let name = format!("{run}-001");
        let cap = MemCap::create(&name, 64).expect("a memory cgroup (root, a memory controller)");
        assert!(cap.describe.starts_with("64 MiB (memory cgroup v"));
        let procs = cap.procs().clone();
        let mut cmd = std::process::Command::new("cat");
        cmd.arg("/proc/self/cgroup");
        // SAFETY: join_self is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || join_self(&procs));
        }
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        assert!(out.contains(&format!("vmbench-{name}")), "{out}");
        let dir = cap.dir.clone();
        assert_eq!(leftovers(&run), vec![dir.clone()]);
        drop(cap);
        assert!(!dir.exists(), "{} left", dir.display());
    }
}
