//! What `recommend` can optimise for: one row of [`DEFS`] per objective (where its figure comes
//! from in one repeat, its direction, how it reads), and the named profiles (`--for`) that pick a
//! workload and weights. A new objective is one [`Objective`] variant and one [`DEFS`] row; when
//! no cell of a run has its figure yet, a profile that asks for it says "not measured in this
//! run" and ranks on the rest.

use super::recommend::RecommendError;
use super::table::fmt_num;
use crate::results::{CellResult, Timings};
use crate::workload::{Figures, RateKind, TailKind};
use std::fmt;
use std::str::FromStr;

/// What a user can optimise for. The order is [`DEFS`]' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Objective {
    /// Total IOPS (read + write), higher is better.
    Iops,
    /// Total bandwidth (read + write), higher is better.
    Bandwidth,
    /// Worst of read and write p99 completion latency, lower is better.
    P99Latency,
    /// Host CPU of QEMU plus the storage server per 1,000 I/Os, lower is better.
    HostCpu,
    /// Peak memory of the storage server stack (ganesha, tgtd), lower is better.
    StorageMemory,
    /// Time to provision the cell's disk, lower is better.
    ProvisionTime,
    /// Domain start to the agent's hello, lower is better.
    BootTime,
    /// Bytes allocated for one instance's disk after its job, lower is better.
    BytesPerInstance,
    /// K instances from one base started together until all said hello, lower is better.
    BootStormTime,
}

/// Where an objective's figure comes from in one repeat.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The sum of the engine's I/O-rate metrics present ([`Figures::rate`]).
    Rate,
    /// The sum of the engine's bandwidth metrics present.
    Bandwidth,
    /// The largest of the engine's tail-latency metrics present.
    Tail,
    /// QEMU plus storage-server CPU per 1,000 I/Os (an engine whose rate counts I/Os).
    CpuPerIo,
    /// A storage server's cost: the metric, and 0 on backends without a server.
    ServerCost(&'static str),
    /// One phase of the cell's wall-clock timings, in ms.
    Timing(fn(&Timings) -> u64),
    /// One metric, whatever the workload.
    Metric(&'static str),
}

/// How a figure reads.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Iops,
    MibPerSec,
    LatencyUs,
    CoreMsPer1k,
    /// MiB, then what of.
    Mib(&'static str),
    Ms,
    Seconds,
}

/// One objective: everything `recommend` knows about it.
struct Def {
    objective: Objective,
    /// The CLI spelling, then other accepted spellings.
    names: &'static [&'static str],
    /// The noun, e.g. "IOPS", "host CPU".
    noun: &'static str,
    /// What the best cell is, e.g. "fastest".
    lead: &'static str,
    higher_is_better: bool,
    source: Source,
    unit: Unit,
    /// The figures it is read from, in words, for "no figure" and "not measured" notes.
    needs: &'static str,
}

const CPU_KEYS: &str = "host_qemu_cpu_pct + storage_server_cpu_pct, and an I/O count \
    (read_iops + write_iops; bonnie++ gives no I/O count)";

/// Every objective, in display order. A new objective is one row here and one variant.
const DEFS: [Def; 9] = [
    Def {
        objective: Objective::Iops,
        names: &["iops"],
        noun: "IOPS",
        lead: "fastest",
        higher_is_better: true,
        source: Source::Rate,
        unit: Unit::Iops,
        needs: "read_iops + write_iops (bonnie++: random_seeks_ps)",
    },
    Def {
        objective: Objective::Bandwidth,
        names: &["bandwidth", "bw"],
        noun: "bandwidth",
        lead: "highest bandwidth",
        higher_is_better: true,
        source: Source::Bandwidth,
        unit: Unit::MibPerSec,
        needs: "read_bw_mib_s + write_bw_mib_s (fio cells)",
    },
    Def {
        objective: Objective::P99Latency,
        names: &["p99", "p99-latency", "latency"],
        noun: "p99",
        lead: "lowest tail latency",
        higher_is_better: false,
        source: Source::Tail,
        unit: Unit::LatencyUs,
        needs: "read_lat_p99_us/write_lat_p99_us (bonnie++: its block and seek latencies)",
    },
    Def {
        objective: Objective::HostCpu,
        names: &["host-cpu", "cpu"],
        noun: "host CPU",
        lead: "lightest on the host",
        higher_is_better: false,
        source: Source::CpuPerIo,
        unit: Unit::CoreMsPer1k,
        needs: CPU_KEYS,
    },
    Def {
        objective: Objective::StorageMemory,
        names: &["memory", "storage-memory", "mem"],
        noun: "storage memory",
        lead: "lightest storage stack",
        higher_is_better: false,
        source: Source::ServerCost("storage_server_peak_rss_mib"),
        unit: Unit::Mib("storage memory"),
        needs: "storage_server_peak_rss_mib",
    },
    Def {
        objective: Objective::ProvisionTime,
        names: &["provision", "provision-time"],
        noun: "provisioning time",
        lead: "quickest to provision",
        higher_is_better: false,
        source: Source::Timing(|t| t.provision_ms),
        unit: Unit::Ms,
        needs: "the cell's provision_ms timing",
    },
    Def {
        objective: Objective::BootTime,
        names: &["boot", "boot-time", "boot-to-hello"],
        noun: "boot-to-hello",
        lead: "quickest to boot",
        higher_is_better: false,
        source: Source::Timing(|t| t.boot_to_hello_ms),
        unit: Unit::Ms,
        needs: "the cell's boot_to_hello_ms timing",
    },
    Def {
        objective: Objective::BytesPerInstance,
        names: &["bytes", "bytes-per-instance", "allocated"],
        noun: "bytes per instance",
        lead: "smallest instance disk",
        higher_is_better: false,
        source: Source::Metric("disk_allocated_mib"),
        unit: Unit::Mib("allocated per instance"),
        needs: "metric disk_allocated_mib (stored by cloud disk layouts, issue 30 item 3)",
    },
    Def {
        objective: Objective::BootStormTime,
        names: &["boot-storm", "storm"],
        noun: "boot-storm time",
        lead: "quickest boot storm",
        higher_is_better: false,
        source: Source::Metric("boot_storm_all_hello_s"),
        unit: Unit::Seconds,
        needs: "metric boot_storm_all_hello_s (vmbench matrix --boot-storm)",
    },
];

/// What kind of cell a repeat belongs to: decides which keys an objective reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellKind {
    /// Where its engine's figures are.
    pub figures: &'static Figures,
    /// No storage server (local, block, lvm): its memory and CPU are 0, the best figures.
    pub serverless: bool,
}

impl Objective {
    /// Every objective, in display order.
    pub fn all() -> impl Iterator<Item = Objective> {
        DEFS.iter().map(|d| d.objective)
    }

    fn def(self) -> &'static Def {
        let d = &DEFS[self as usize];
        debug_assert_eq!(d.objective, self, "DEFS is in the enum's order");
        d
    }

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        self.def().names[0]
    }

    /// The noun, e.g. "IOPS", "p99", "host CPU".
    pub fn noun(self) -> &'static str {
        self.def().noun
    }

    /// What the best cell on it is called, e.g. "fastest".
    pub fn lead(self) -> &'static str {
        self.def().lead
    }

    /// Higher values are better (throughput), else lower (costs, latencies).
    pub fn higher_is_better(self) -> bool {
        self.def().higher_is_better
    }

    /// The figures the objective is read from, in words.
    pub fn needs(self) -> &'static str {
        self.def().needs
    }

    /// The objective's figure in one repeat, if the repeat has it.
    pub fn value(self, r: &CellResult, kind: CellKind) -> Option<f64> {
        let get = |k: &str| {
            r.metric(k)
                .and_then(|m| m.value.number())
                .filter(|v| v.is_finite())
        };
        let pick = |keys: &'static [&'static str]| keys.iter().filter_map(|k| get(k));
        let f = kind.figures;
        let server = |k: &str| get(k).or(kind.serverless.then_some(0.0));
        match self.def().source {
            Source::Rate => pick(f.rate.1).reduce(|a, b| a + b),
            Source::Bandwidth => pick(f.bandwidth).reduce(|a, b| a + b),
            Source::Tail => pick(f.tail.1).reduce(f64::max),
            Source::CpuPerIo if f.rate.0 != RateKind::Iops => None,
            Source::CpuPerIo => {
                let cpu = get("host_qemu_cpu_pct")? + server("storage_server_cpu_pct")?;
                let iops = get("read_iops").unwrap_or(0.0) + get("write_iops").unwrap_or(0.0);
                // % of a core over a second = core-ms per second x 10; per 1,000 I/Os.
                (iops > 0.0).then(|| cpu * 10.0 / iops * 1000.0)
            }
            Source::ServerCost(k) => server(k),
            // A result stored without timings (older runs) has every phase 0: no figure.
            Source::Timing(phase) => (r.timings.total_ms > 0).then(|| phase(&r.timings) as f64),
            Source::Metric(k) => get(k),
        }
    }

    /// How a value reads, e.g. "7,757 IOPS", "p99 14 ms", "232 core-ms host CPU per 1k I/Os".
    pub fn show(self, v: f64, figures: &Figures) -> String {
        match (self.def().unit, figures.rate.0, figures.tail.0) {
            (Unit::Iops, RateKind::Seeks, _) => format!("{} seeks/s", fmt_num(v)),
            (Unit::Iops, RateKind::Iops, _) => format!("{} IOPS", fmt_num(v)),
            (Unit::MibPerSec, ..) => format!("{} MiB/s", fmt_num(v)),
            (Unit::LatencyUs, _, TailKind::Max) if v >= 1000.0 => {
                format!("max latency {:.1} ms", v / 1000.0)
            }
            (Unit::LatencyUs, _, TailKind::Max) => format!("max latency {} µs", fmt_num(v)),
            (Unit::LatencyUs, _, TailKind::P99) if v >= 10_000.0 => {
                format!("p99 {:.0} ms", v / 1000.0)
            }
            (Unit::LatencyUs, _, TailKind::P99) if v >= 1000.0 => {
                format!("p99 {:.1} ms", v / 1000.0)
            }
            (Unit::LatencyUs, _, TailKind::P99) => format!("p99 {} µs", fmt_num(v)),
            (Unit::CoreMsPer1k, ..) => format!("{} core-ms host CPU per 1k I/Os", fmt_num(v)),
            (Unit::Mib(what), ..) => format!("{v:.0} MiB {what}"),
            (Unit::Ms, ..) if v >= 1000.0 => format!("{:.1} s {}", v / 1000.0, self.noun()),
            (Unit::Ms, ..) => format!("{} ms {}", fmt_num(v), self.noun()),
            (Unit::Seconds, ..) => format!("{v:.1} s {}", self.noun()),
        }
    }

    /// The valid spellings, for errors and `--help`.
    pub fn valid_names() -> String {
        Objective::all()
            .map(|o| o.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Objective {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl FromStr for Objective {
    type Err = RecommendError;
    fn from_str(s: &str) -> Result<Self, RecommendError> {
        let s = s.trim().to_ascii_lowercase();
        DEFS.iter()
            .find(|d| d.names.contains(&s.as_str()))
            .map(|d| d.objective)
            .ok_or(RecommendError::UnknownObjective(s))
    }
}

/// A named question (`--for NAME`): the workload to rank and the objectives' weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// The `--for` spelling.
    pub name: &'static str,
    /// What it is for, one line.
    pub about: &'static str,
    /// The workload whose cells it ranks (`None`: the run's one workload, or `--workload`).
    pub workload: Option<&'static str>,
    /// Objectives and weights.
    pub weights: &'static [(Objective, f64)],
}

/// Every profile.
pub const PROFILES: [Profile; 4] = [
    Profile {
        name: "database",
        about: "an OLTP database: pg-randrw (8k random 70/30); IOPS and p99 first, then host CPU",
        workload: Some("pg-randrw"),
        weights: &[
            (Objective::Iops, 2.0),
            (Objective::P99Latency, 2.0),
            (Objective::HostCpu, 1.0),
        ],
    },
    Profile {
        name: "streaming",
        about: "sequential streams: seq-read-1m; bandwidth first, then host CPU and p99",
        workload: Some("seq-read-1m"),
        weights: &[
            (Objective::Bandwidth, 3.0),
            (Objective::HostCpu, 1.0),
            (Objective::P99Latency, 1.0),
        ],
    },
    Profile {
        name: "boot-storm",
        about: "many instances booting from one base: boot-storm time, provisioning time, \
                bytes per instance, boot-to-hello (any one workload)",
        workload: None,
        weights: &[
            (Objective::BootStormTime, 3.0),
            (Objective::ProvisionTime, 2.0),
            (Objective::BytesPerInstance, 1.0),
            (Objective::BootTime, 1.0),
        ],
    },
    Profile {
        name: "cloud-image",
        about: "instance disks from a base image (the cloud-image-backends preset): \
                first-write-4k IOPS and p99, then boot-storm time, provisioning time and bytes \
                per instance",
        workload: Some("first-write-4k"),
        weights: &[
            (Objective::Iops, 2.0),
            (Objective::P99Latency, 1.0),
            (Objective::BootStormTime, 1.0),
            (Objective::ProvisionTime, 1.0),
            (Objective::BytesPerInstance, 1.0),
        ],
    },
];

impl Profile {
    /// The valid names, for errors and `--help`.
    pub fn valid_names() -> String {
        PROFILES
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl FromStr for Profile {
    type Err = RecommendError;
    fn from_str(s: &str) -> Result<Self, RecommendError> {
        let s = s.trim().to_ascii_lowercase();
        PROFILES
            .iter()
            .find(|p| p.name == s)
            .copied()
            .ok_or(RecommendError::UnknownProfile(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defs_are_in_the_enums_order_and_names_are_unique() {
        for (i, d) in DEFS.iter().enumerate() {
            assert_eq!(d.objective as usize, i, "{:?}", d.objective);
        }
        let mut names: Vec<&str> = DEFS.iter().flat_map(|d| d.names.iter().copied()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a spelling names two objectives");
        for o in Objective::all() {
            assert_eq!(o.as_str().parse::<Objective>().unwrap(), o);
        }
    }

    /// `--help` and the README's table say what each profile weighs, as [`PROFILES`] does.
    #[test]
    fn help_and_readme_describe_the_profiles_as_they_are() {
        use clap::CommandFactory;
        let help = crate::cli::Cli::command()
            .find_subcommand_mut("recommend")
            .unwrap()
            .render_long_help()
            .to_string();
        let readme = include_str!("../../README.md");
        for p in PROFILES {
            let w: Vec<String> = p.weights.iter().map(|(o, w)| format!("{o}={w}")).collect();
            let workload = p.workload.unwrap_or("the run's one workload");
            let row = format!("| `{}` | {workload} | {} |", p.name, w.join(", "));
            assert!(readme.contains(&row), "README lacks {row}");
            let flat: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
            let said = match p.workload {
                Some(wl) => format!("{} ({wl}; {})", p.name, w.join(",")),
                None => format!("{} ({})", p.name, w.join(",")),
            };
            assert!(flat.contains(&said), "--help lacks {said}: {flat}");
        }
    }

    #[test]
    fn profiles_parse_and_unknown_names_list_the_valid_ones() {
        assert_eq!("Database".parse::<Profile>().unwrap().name, "database");
        let e = "oltp".parse::<Profile>().unwrap_err().to_string();
        assert!(
            e.contains("'oltp'")
                && e.contains("database")
                && e.contains("streaming")
                && e.contains("boot-storm"),
            "{e}"
        );
    }
}
