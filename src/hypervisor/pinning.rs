//! Host CPUs for `--pin on`, chosen from the host's topology (`/sys/devices/system/cpu`).
//!
//! The rule: the emulator and the I/O thread share the first CPU (the housekeeping one, where
//! the host's own interrupts and daemons tend to run), and every vCPU gets a CPU of its own,
//! one thread per physical core before any hyperthread sibling, so two vCPUs do not share a
//! core while a whole core is free. That needs vcpus + 1 online CPUs; fewer is refused
//! (`MatrixConfig::check_pin`, exit 2) instead of pinning two busy threads to one CPU.

use std::path::{Path, PathBuf};

/// Where Linux describes the CPUs.
pub const SYSFS_CPU: &str = "/sys/devices/system/cpu";

/// One online host CPU and where it sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCpu {
    /// The CPU number (`cpuN`).
    pub id: u32,
    /// `physical_package_id`.
    pub package: u32,
    /// `core_id` (unique within a package).
    pub core: u32,
}

/// Which host CPU each pinned thread runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinning {
    /// Host CPU of vCPU i.
    pub vcpus: Vec<u32>,
    /// Host CPU of the emulator threads and the I/O thread.
    pub emulator: u32,
}

impl Pinning {
    /// One line for params and provenance: `vcpu0=1,vcpu1=2,emulator=0`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, c)| format!("vcpu{i}={c}"))
            .collect();
        parts.push(format!("emulator={}", self.emulator));
        parts.join(",")
    }
}

/// Why no pinning can be chosen.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// Fewer online CPUs than the rule needs.
    #[error(
        "--pin on needs vcpus + 1 = {need} online host CPUs (one per vCPU, one for the emulator \
         and I/O thread); this host has {have}"
    )]
    TooFewCpus {
        /// CPUs needed.
        need: usize,
        /// CPUs online.
        have: usize,
    },
    /// The topology could not be read.
    #[error("reading the host CPU topology at {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A topology file holds something else than a CPU list or number.
    #[error("{}: cannot parse {text:?} as a CPU list", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Its text.
        text: String,
    },
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = vec![];
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn read(path: PathBuf) -> Result<String, PinError> {
    std::fs::read_to_string(&path).map_err(|source| PinError::Read { path, source })
}

fn read_num(path: PathBuf) -> Result<u32, PinError> {
    let text = read(path.clone())?;
    text.trim()
        .parse()
        .map_err(|_| PinError::Parse { path, text })
}

/// The online CPUs under `root` (a sysfs `cpu` directory) with their package and core.
pub fn read_topology(root: &Path) -> Result<Vec<HostCpu>, PinError> {
    let online = root.join("online");
    let text = read(online.clone())?;
    let ids = parse_cpu_list(&text).ok_or(PinError::Parse { path: online, text })?;
    ids.into_iter()
        .map(|id| {
            let topo = root.join(format!("cpu{id}/topology"));
            Ok(HostCpu {
                id,
                package: read_num(topo.join("physical_package_id"))?,
                core: read_num(topo.join("core_id"))?,
            })
        })
        .collect()
}

/// The number of online host CPUs (0 when sysfs cannot say, which refuses `--pin on`).
pub fn online_cpus() -> usize {
    read_topology(Path::new(SYSFS_CPU)).map_or(0, |c| c.len())
}

/// Chooses CPUs for `vcpus` vCPUs by the rule in the module doc.
pub fn plan(cpus: &[HostCpu], vcpus: u32) -> Result<Pinning, PinError> {
    let need = vcpus as usize + 1;
    if cpus.len() < need {
        return Err(PinError::TooFewCpus {
            need,
            have: cpus.len(),
        });
    }
    // Rank each CPU by how many siblings on its core come before it: first threads first.
    let mut ranked: Vec<(usize, u32, u32, u32)> = cpus
        .iter()
        .map(|c| {
            let sibling = cpus
                .iter()
                .filter(|o| o.package == c.package && o.core == c.core && o.id < c.id)
                .count();
            (sibling, c.package, c.core, c.id)
        })
        .collect();
    ranked.sort_unstable();
    let order: Vec<u32> = ranked.into_iter().map(|r| r.3).collect();
    Ok(Pinning {
        emulator: order[0],
        vcpus: order[1..need].to_vec(),
    })
}

/// [`plan`] on this host's topology.
pub fn host_plan(vcpus: u32) -> Result<Pinning, PinError> {
    plan(&read_topology(Path::new(SYSFS_CPU))?, vcpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(id: u32, package: u32, core: u32) -> HostCpu {
        HostCpu { id, package, core }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8\n"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn vcpus_get_whole_cores_before_siblings() {
        // 4 cores x 2 threads, Linux numbering: cpu0-3 first threads, cpu4-7 their siblings.
        let cpus: Vec<HostCpu> = (0..8).map(|i| cpu(i, 0, i % 4)).collect();
        let p = plan(&cpus, 3).unwrap();
        assert_eq!(p.emulator, 0);
        assert_eq!(p.vcpus, vec![1, 2, 3]);
        let p = plan(&cpus, 5).unwrap();
        assert_eq!(p.vcpus, vec![1, 2, 3, 4, 5]);
        assert_eq!(
            p.describe(),
            "vcpu0=1,vcpu1=2,vcpu2=3,vcpu3=4,vcpu4=5,emulator=0"
        );
    }

    #[test]
    fn too_few_cpus_is_refused_with_the_rule() {
        let cpus = [cpu(0, 0, 0), cpu(1, 0, 1)];
        assert_eq!(plan(&cpus, 1).unwrap().vcpus, vec![1]);
        let e = plan(&cpus, 2).unwrap_err().to_string();
        assert!(e.contains("vcpus + 1 = 3") && e.contains("has 2"), "{e}");
    }

    #[test]
    fn topology_is_read_from_sysfs_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("online"), "0-1\n").unwrap();
        for (id, core) in [(0, "0"), (1, "1")] {
            let t = dir.path().join(format!("cpu{id}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("physical_package_id"), "0\n").unwrap();
            std::fs::write(t.join("core_id"), format!("{core}\n")).unwrap();
        }
        let cpus = read_topology(dir.path()).unwrap();
        assert_eq!(cpus, vec![cpu(0, 0, 0), cpu(1, 0, 1)]);
        std::fs::write(dir.path().join("online"), "x").unwrap();
        assert!(matches!(
            read_topology(dir.path()),
            Err(PinError::Parse { .. })
        ));
    }
}
