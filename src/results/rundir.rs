//! The run directory: `run.json` (the whole [`RunRecord`], rewritten atomically after every
//! cell), `config.json` (what `--resume` reruns), and one directory per cell run holding its
//! domain XML, console log, raw engine output, parsed result and timings. A crash leaves every
//! finished cell's files complete: each is written to a temp file, fsynced, then renamed.

use super::{CellResult, RunRecord};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory is synced.
    fs::File::open(dir)?.sync_all()
}

/// An open run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Its path.
    pub path: PathBuf,
}

impl RunDir {
    /// Creates `root/<run_id>` (fails if it exists: run ids are unique).
    pub fn create(root: &Path, run_id: &str) -> std::io::Result<RunDir> {
        fs::create_dir_all(root)?;
        let path = root.join(run_id);
        fs::create_dir(&path)?;
        Ok(RunDir { path })
    }

    /// Opens an existing run directory (for `--resume`).
    pub fn open(path: &Path) -> std::io::Result<RunDir> {
        if !path.join("run.json").is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{} is not a vmbench run directory (no run.json)",
                    path.display()
                ),
            ));
        }
        Ok(RunDir {
            path: path.to_path_buf(),
        })
    }

    /// The directory of one cell run, created on demand.
    pub fn cell_dir(&self, seq: usize, cell_id: &str, repeat: u32) -> std::io::Result<PathBuf> {
        let d = self
            .path
            .join("cells")
            .join(format!("{seq:03}-{cell_id}-r{repeat}"));
        fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// The first free cell sequence number: one past the highest `NNN-` directory under
    /// `cells/`. On `--resume` the interrupted cell's directory (no result, but its console log
    /// and domain XML) is still there, so counting results alone would reuse its number.
    pub fn next_seq(&self) -> usize {
        let Ok(it) = fs::read_dir(self.path.join("cells")) else {
            return 0;
        };
        it.flatten()
            .filter_map(|e| {
                let n = e.file_name();
                let n = n.to_str()?;
                n.split_once('-')?.0.parse::<usize>().ok()
            })
            .map(|n| n + 1)
            .max()
            .unwrap_or(0)
    }

    /// Rewrites run.json.
    pub fn save(&self, rec: &RunRecord) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        write_atomic(&self.path.join("run.json"), &json)
    }

    /// Reads run.json.
    pub fn load(&self) -> std::io::Result<RunRecord> {
        let text = fs::read_to_string(self.path.join("run.json"))?;
        serde_json::from_str(&text).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("run.json: {e}"))
        })
    }

    /// Writes a cell's parsed result into its directory.
    pub fn save_cell(dir: &Path, r: &CellResult) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
        write_atomic(&dir.join("result.json"), &json)
    }
}

/// Held for the whole of a matrix run; cleanup skips runs whose lock it cannot take. The kernel
/// drops the lock when the process dies, SIGKILL included, so a crashed run is always unlocked.
pub struct RunLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl RunLock {
    /// Takes the run directory's lock (fails if another process holds it).
    pub fn acquire(run_dir: &Path) -> std::io::Result<RunLock> {
        let f = std::fs::File::options()
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
    let Ok(f) = std::fs::File::options()
        .write(true)
        .open(run_dir.join("lock"))
    else {
        return false;
    };
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_and_load_round_trip() {
        let root = tempfile::tempdir().unwrap();
        let rd = RunDir::create(root.path(), "r1").unwrap();
        assert!(
            RunDir::create(root.path(), "r1").is_err(),
            "run ids must not be reused"
        );
        let rec = RunRecord {
            run_id: "r1".into(),
            started: "t".into(),
            command: vec!["vmbench".into()],
            cells: vec![],
        };
        rd.save(&rec).unwrap();
        assert_eq!(RunDir::open(&rd.path).unwrap().load().unwrap(), rec);
        assert!(RunDir::open(root.path()).is_err());
        let no_tmp = fs::read_dir(&rd.path).unwrap().all(|e| {
            let n = e.unwrap().file_name();
            n == "run.json"
        });
        assert!(no_tmp, "temp files left behind");
    }

    #[test]
    fn next_seq_skips_every_existing_cell_dir() {
        let root = tempfile::tempdir().unwrap();
        let rd = RunDir::create(root.path(), "r1").unwrap();
        assert_eq!(rd.next_seq(), 0);
        rd.cell_dir(0, "a", 0).unwrap();
        // An interrupted cell's directory has no result.json but still holds its number.
        rd.cell_dir(1, "b", 0).unwrap();
        fs::create_dir_all(rd.path.join("cells/junk")).unwrap();
        assert_eq!(rd.next_seq(), 2);
    }
}
