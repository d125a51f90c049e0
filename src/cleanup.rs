//! `vmbench cleanup`: removes what a crashed run left behind, found by vmbench's own markers and
//! nothing else: domains carrying the metadata marker, embedded servers recorded by pid file in a
//! run's `servers/` directory, and the run's `work/` directory (images, LUN backing files,
//! sockets). A run that is still alive holds its lock file, and is never touched.

use crate::cli::CleanupArgs;
use crate::hypervisor::libvirt::Libvirt;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Held for the whole of a matrix run; cleanup skips runs whose lock it cannot take. The kernel
/// drops the lock when the process dies, SIGKILL included, so a crashed run is always unlocked.
pub struct RunLock {
    _lock: nix::fcntl::Flock<File>,
}

impl RunLock {
    /// Takes the run directory's lock (fails if another process holds it).
    pub fn acquire(run_dir: &Path) -> std::io::Result<RunLock> {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(run_dir.join("lock"))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map(|l| RunLock { _lock: l })
            .map_err(|(_, e)| std::io::Error::from(e))
    }
}

/// True when a live process holds the run's lock.
pub fn run_is_live(run_dir: &Path) -> bool {
    let Ok(f) = File::options().write(true).open(run_dir.join("lock")) else {
        return false;
    };
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
}

/// What cleanup found and did.
#[derive(Debug, Default)]
pub struct Report {
    /// Lines, one per object.
    pub lines: Vec<String>,
}

/// Runs cleanup; returns the exit code.
pub fn run(a: &CleanupArgs) -> anyhow::Result<i32> {
    let mut rep = Report::default();
    let dead = dead_runs(&a.runs_dir, a.run.as_deref());
    let live: Vec<String> = list_runs(&a.runs_dir)
        .into_iter()
        .filter(|d| run_is_live(d))
        .filter_map(|d| name(&d))
        .collect();
    match Libvirt::connect(&a.connect) {
        Ok(conn) => {
            for d in conn.marked_domains(a.run.as_deref())? {
                if live
                    .iter()
                    .any(|r| d.marker.contains(&format!("run=\"{r}\"")))
                {
                    continue;
                }
                rep.lines.push(format!("domain {}", d.name));
                if !a.dry_run {
                    conn.remove_domain(&d.name)?;
                }
            }
        }
        Err(e) => rep
            .lines
            .push(format!("(libvirt not reachable, domains not checked: {e})")),
    }
    for run in &dead {
        clean_run_dir(run, a.dry_run, &mut rep);
    }
    if rep.lines.is_empty() {
        println!("nothing to clean up");
    }
    for l in &rep.lines {
        println!(
            "{}{l}",
            if a.dry_run {
                "would remove "
            } else {
                "removed "
            }
        );
    }
    Ok(0)
}

fn list_runs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("run.json").is_file())
                .collect()
        })
        .unwrap_or_default()
}

fn name(p: &Path) -> Option<String> {
    p.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Run directories whose process is gone but whose work dir or servers remain.
fn dead_runs(root: &Path, only: Option<&str>) -> Vec<PathBuf> {
    list_runs(root)
        .into_iter()
        .filter(|d| only.is_none_or(|r| name(d).as_deref() == Some(r)))
        .filter(|d| !run_is_live(d))
        .filter(|d| d.join("work-dir").exists() || d.join("servers").exists())
        .collect()
}

fn clean_run_dir(run: &Path, dry: bool, rep: &mut Report) {
    for pidfile in pid_files(&run.join("servers")) {
        let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let comm = comm.trim();
        // Only the servers vmbench starts; a recycled pid of another program is left alone.
        if !matches!(comm, "ganesha.nfsd" | "tgtd" | "rpcbind") {
            continue;
        }
        rep.lines
            .push(format!("server {comm} (pid {pid}, {})", pidfile.display()));
        if !dry {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let marker = run.join("work-dir");
    if let Ok(work) = std::fs::read_to_string(&marker) {
        let work = PathBuf::from(work);
        // Only a directory named after this run, so a tampered marker cannot point elsewhere.
        if work.file_name() == run.file_name() && work.exists() {
            rep.lines.push(format!("{}", work.display()));
            if !dry {
                let _ = std::fs::remove_dir_all(&work);
            }
        }
        if !dry {
            let _ = std::fs::remove_file(&marker);
        }
    }
    // Server logs are kept (they explain the crash); their pid files go.
    if !dry {
        for p in pid_files(&run.join("servers")) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn pid_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(it) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in it.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(pid_files(&p));
        } else if p.extension().is_some_and(|x| x == "pid") {
            out.push(p);
        }
    }
    out
}
