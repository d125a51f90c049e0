//! `vmbench recommend`: ranks the passed cells of one run (one workload) by a weighted sum of
//! objectives, each normalised across the cells so the best cell scores 1 on it, and says why in
//! numbers. Backends without a storage server (local, block, lvm) use 0 MiB of storage-stack
//! memory and 0 % storage-server CPU: real figures, the best ones, not missing ones. bonnie++
//! cells are ranked on bonnie++'s figures (seeks/s, block and seek latency). Scores within
//! [`TIE_PCT`] of each other are a tie, said as such.

use super::table::fmt_num;
use crate::cell::Backend;
use crate::results::{CellResult, Outcome, RunRecord};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// What a user can optimise for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Objective {
    /// Total IOPS (read + write), higher is better.
    Iops,
    /// Worst of read and write p99 completion latency, lower is better.
    P99Latency,
    /// Host CPU of QEMU plus the storage server per 1,000 I/Os, lower is better.
    HostCpu,
    /// Peak memory of the storage server stack (ganesha, tgtd), lower is better.
    StorageMemory,
}

impl Objective {
    /// Every objective, in display order.
    pub const ALL: [Objective; 4] = [
        Objective::Iops,
        Objective::P99Latency,
        Objective::HostCpu,
        Objective::StorageMemory,
    ];

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Iops => "iops",
            Objective::P99Latency => "p99",
            Objective::HostCpu => "host-cpu",
            Objective::StorageMemory => "memory",
        }
    }

    /// The metric keys the objective is computed from (fio cells).
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Objective::Iops => &["read_iops", "write_iops"],
            Objective::P99Latency => &["read_lat_p99_us", "write_lat_p99_us"],
            Objective::HostCpu => &[
                "host_qemu_cpu_pct",
                "storage_server_cpu_pct",
                "read_iops",
                "write_iops",
            ],
            Objective::StorageMemory => &["storage_server_peak_rss_mib"],
        }
    }

    /// The metric keys the objective is computed from in bonnie++ cells.
    pub fn bonnie_keys(self) -> &'static [&'static str] {
        match self {
            Objective::Iops => &["random_seeks_ps"],
            Objective::P99Latency => &[
                "lat_seq_out_block_us",
                "lat_seq_in_block_us",
                "lat_random_seeks_us",
            ],
            // CPU per I/O needs an I/O count; bonnie++ reports none for its whole run.
            Objective::HostCpu => &["host_qemu_cpu_pct", "storage_server_cpu_pct", "(I/O count)"],
            Objective::StorageMemory => &["storage_server_peak_rss_mib"],
        }
    }

    fn higher_is_better(self) -> bool {
        self == Objective::Iops
    }

    /// The objective's value for one cell (averaged metrics), if its metrics are there.
    fn value(self, c: &Candidate) -> Option<f64> {
        let m = &c.metrics;
        let get = |k: &str| m.get(k).copied();
        let keys = if c.bonnie {
            self.bonnie_keys()
        } else {
            self.keys()
        };
        let present = keys.iter().filter_map(|k| get(k));
        // A backend without a storage server has none of its cost: 0, the best figure.
        let server = |k: &str| get(k).or(c.serverless.then_some(0.0));
        match self {
            Objective::Iops => present.reduce(|a, b| a + b),
            Objective::P99Latency => present.reduce(f64::max),
            Objective::HostCpu if c.bonnie => None,
            Objective::HostCpu => {
                let cpu = get("host_qemu_cpu_pct")? + server("storage_server_cpu_pct")?;
                let iops = get("read_iops").unwrap_or(0.0) + get("write_iops").unwrap_or(0.0);
                // % of a core over a second = core-ms per second x 10; per 1,000 I/Os.
                (iops > 0.0).then(|| cpu * 10.0 / iops * 1000.0)
            }
            Objective::StorageMemory => server("storage_server_peak_rss_mib"),
        }
    }

    /// How a value reads, e.g. "7,757 IOPS", "p99 14 ms", "232 core-ms per 1k I/Os".
    fn show(self, v: f64, bonnie: bool) -> String {
        match self {
            Objective::Iops if bonnie => format!("{} seeks/s", fmt_num(v)),
            Objective::Iops => format!("{} IOPS", fmt_num(v)),
            Objective::P99Latency if bonnie && v >= 1000.0 => {
                format!("max latency {:.1} ms", v / 1000.0)
            }
            Objective::P99Latency if bonnie => format!("max latency {} µs", fmt_num(v)),
            Objective::P99Latency if v >= 10_000.0 => format!("p99 {:.0} ms", v / 1000.0),
            Objective::P99Latency if v >= 1000.0 => format!("p99 {:.1} ms", v / 1000.0),
            Objective::P99Latency => format!("p99 {} µs", fmt_num(v)),
            Objective::HostCpu => format!("{} core-ms host CPU per 1k I/Os", fmt_num(v)),
            Objective::StorageMemory => format!("{v:.0} MiB storage memory"),
        }
    }

    /// The noun, e.g. "IOPS", "p99", "host CPU".
    fn noun(self) -> &'static str {
        match self {
            Objective::Iops => "IOPS",
            Objective::P99Latency => "p99",
            Objective::HostCpu => "host CPU",
            Objective::StorageMemory => "storage memory",
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Objective {
    type Err = RecommendError;
    fn from_str(s: &str) -> Result<Self, RecommendError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "iops" => Ok(Objective::Iops),
            "p99" | "p99-latency" | "latency" => Ok(Objective::P99Latency),
            "host-cpu" | "cpu" => Ok(Objective::HostCpu),
            "memory" | "storage-memory" | "mem" => Ok(Objective::StorageMemory),
            other => Err(RecommendError::UnknownObjective(other.to_string())),
        }
    }
}

/// Weight per objective; objectives not named weigh 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights(pub BTreeMap<Objective, f64>);

impl Default for Weights {
    /// IOPS alone, the question the seeds asked first.
    fn default() -> Self {
        Weights(BTreeMap::from([(Objective::Iops, 1.0)]))
    }
}

impl FromStr for Weights {
    type Err = RecommendError;
    /// Parses `iops=2,p99=1`; a bare name weighs 1.
    fn from_str(s: &str) -> Result<Self, RecommendError> {
        let mut map = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part.split_once('=').unwrap_or((part, "1"));
            let obj: Objective = name.parse()?;
            let w: f64 = w
                .trim()
                .parse()
                .map_err(|_| RecommendError::BadWeight(part.into()))?;
            if !w.is_finite() || w < 0.0 {
                return Err(RecommendError::BadWeight(part.into()));
            }
            if map.insert(obj, w).is_some() {
                return Err(RecommendError::DuplicateObjective(obj));
            }
        }
        if map.values().all(|w| *w == 0.0) {
            return Err(RecommendError::NoWeights(s.into()));
        }
        Ok(Weights(map))
    }
}

/// One line of the recommendation.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// 1 is best.
    pub rank: usize,
    /// The cell.
    pub cell_id: String,
    /// The cell's short label.
    pub label: String,
    /// Weighted score in 0..=1 (1: best on every weighted objective).
    pub score: f64,
    /// The rank of the cell this one ties with (scores within [`TIE_PCT`]), if any.
    pub tied_with: Option<usize>,
    /// Why, in numbers, one line.
    pub reason: String,
}

/// Why no ranking could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecommendError {
    /// Not an objective name.
    #[error("unknown objective '{0}' (valid: iops, p99, host-cpu, memory)")]
    UnknownObjective(String),
    /// `name=weight` with a weight that is not a non-negative number.
    #[error(
        "bad weight '{0}': expected NAME=WEIGHT with a non-negative number, e.g. iops=2,p99=1"
    )]
    BadWeight(String),
    /// The same objective twice.
    #[error("objective '{0}' is weighted twice")]
    DuplicateObjective(Objective),
    /// Every weight is zero or none was given.
    #[error("no objective has a positive weight in '{0}' (e.g. iops=2,p99=1)")]
    NoWeights(String),
    /// No passed cell (for this workload).
    #[error("no passed cell{} in run {run}; workloads with passed cells: {}", workload_note(.workload), list(.available))]
    NoCells {
        /// The run.
        run: String,
        /// The workload asked for.
        workload: Option<String>,
        /// Workloads that do have passed cells.
        available: Vec<String>,
    },
    /// Cells of several workloads and none chosen: rankings across workloads mean nothing.
    #[error("run {run} has cells of several workloads ({}); rank one at a time with --workload NAME", .workloads.join(", "))]
    MixedWorkloads {
        /// The run.
        run: String,
        /// Workloads with passed cells.
        workloads: Vec<String>,
    },
    /// A weighted objective's metrics exist in no cell.
    #[error("objective '{objective}' needs metric {} but no passed cell has it; drop it from the weights", .keys.join(" or "))]
    MissingMetric {
        /// The objective.
        objective: Objective,
        /// The keys looked for.
        keys: Vec<String>,
    },
}

fn workload_note(w: &Option<String>) -> String {
    w.as_ref()
        .map(|w| format!(" for workload '{w}'"))
        .unwrap_or_default()
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Scores closer than this, in percent of the higher one, are a tie: the same noise threshold
/// `compare` uses by default.
pub const TIE_PCT: f64 = 5.0;

/// One cell's averaged metrics.
struct Candidate {
    cell_id: String,
    label: String,
    metrics: BTreeMap<String, f64>,
    /// No storage server: storage-stack memory and server CPU are 0.
    serverless: bool,
    /// A bonnie++ cell, ranked on bonnie++'s figures.
    bonnie: bool,
}

/// Ranks the passed cells of `run` (of one workload, if given) by `weights`.
pub fn recommend(
    run: &RunRecord,
    workload: Option<&str>,
    weights: &Weights,
) -> Result<Vec<Ranked>, RecommendError> {
    let cands = candidates(run, workload)?;
    let objectives: Vec<(Objective, f64)> = weights
        .0
        .iter()
        .filter(|(_, w)| **w > 0.0)
        .map(|(o, w)| (*o, *w))
        .collect();
    if objectives.is_empty() {
        return Err(RecommendError::NoWeights(String::new()));
    }
    let table = ObjectiveTable::build(&cands, &objectives)?;
    let total_w: f64 = objectives.iter().map(|(_, w)| w).sum();
    let mut scored: Vec<(usize, f64)> = (0..cands.len())
        .map(|i| {
            (
                i,
                objectives
                    .iter()
                    .map(|(o, w)| w * table.norm(*o, i))
                    .sum::<f64>()
                    / total_w,
            )
        })
        .collect();
    scored.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| cands[a.0].cell_id.cmp(&cands[b.0].cell_id))
    });
    let top = scored[0].0;
    let mut out: Vec<Ranked> = Vec::with_capacity(scored.len());
    for (pos, &(i, score)) in scored.iter().enumerate() {
        let mut reason = table.reason(i, top, &objectives);
        // Ties are measured against the first cell of the tied group, so a chain of near
        // scores cannot stretch a tie beyond the threshold.
        let leader = out
            .last()
            .map(|prev: &Ranked| prev.tied_with.unwrap_or(prev.rank))
            .and_then(|r| out.iter().find(|x| x.rank == r));
        let tie = leader.filter(|l| l.score > 0.0 && (l.score - score) / l.score * 100.0 < TIE_PCT);
        let (rank, tied_with) = match tie {
            Some(l) => {
                reason.push_str(&format!(
                    "; tied with #{} {} (scores within the {TIE_PCT}% noise threshold)",
                    l.rank, l.label
                ));
                (l.rank, Some(l.rank))
            }
            None => (pos + 1, None),
        };
        out.push(Ranked {
            rank,
            cell_id: cands[i].cell_id.clone(),
            label: cands[i].label.clone(),
            score,
            tied_with,
            reason,
        });
    }
    Ok(out)
}

fn candidates(run: &RunRecord, workload: Option<&str>) -> Result<Vec<Candidate>, RecommendError> {
    let passed: Vec<&CellResult> = run
        .cells
        .iter()
        .filter(|c| c.outcome == Outcome::Passed)
        .collect();
    let chosen: Vec<&CellResult> = passed
        .iter()
        .copied()
        .filter(|c| workload.is_none_or(|w| c.cell.workload.to_string() == w))
        .collect();
    if workload.is_none() {
        let mut workloads: Vec<String> =
            passed.iter().map(|c| c.cell.workload.to_string()).collect();
        workloads.sort();
        workloads.dedup();
        if workloads.len() > 1 {
            return Err(RecommendError::MixedWorkloads {
                run: run.run_id.clone(),
                workloads,
            });
        }
    }
    if chosen.is_empty() {
        let mut available: Vec<String> =
            passed.iter().map(|c| c.cell.workload.to_string()).collect();
        available.dedup();
        available.sort();
        available.dedup();
        return Err(RecommendError::NoCells {
            run: run.run_id.clone(),
            workload: workload.map(Into::into),
            available,
        });
    }
    let mut by_id: BTreeMap<&str, Vec<&CellResult>> = BTreeMap::new();
    chosen
        .iter()
        .for_each(|c| by_id.entry(c.cell_id.as_str()).or_default().push(c));
    Ok(by_id
        .into_iter()
        .map(|(id, reps)| average(id, &reps))
        .collect())
}

/// Means of each numeric metric over the repeats (too-fast and n/a values left out).
fn average(id: &str, reps: &[&CellResult]) -> Candidate {
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for m in reps.iter().flat_map(|c| &c.metrics) {
        if let Some(v) = m.value.number().filter(|v| v.is_finite()) {
            let e = sums.entry(m.key.clone()).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    let metrics: BTreeMap<String, f64> = sums
        .into_iter()
        .map(|(k, (s, n))| (k, s / n as f64))
        .collect();
    Candidate {
        cell_id: id.into(),
        label: reps[0].cell.label(),
        serverless: matches!(
            reps[0].cell.backend,
            Backend::Local | Backend::Block | Backend::Lvm
        ),
        bonnie: metrics.contains_key("seq_in_block_kps") || metrics.contains_key("random_seeks_ps"),
        metrics,
    }
}

/// Raw and normalised objective values, per objective then per candidate.
struct ObjectiveTable {
    raw: BTreeMap<Objective, Vec<Option<f64>>>,
    best: BTreeMap<Objective, f64>,
    worst: BTreeMap<Objective, f64>,
    bonnie: bool,
}

impl ObjectiveTable {
    /// Every objective with a figure in some cell (unweighted ones give context to reasons);
    /// a weighted objective without any figure is an error.
    fn build(cands: &[Candidate], objectives: &[(Objective, f64)]) -> Result<Self, RecommendError> {
        let mut t = ObjectiveTable {
            raw: BTreeMap::new(),
            best: BTreeMap::new(),
            worst: BTreeMap::new(),
            bonnie: cands.iter().all(|c| c.bonnie),
        };
        for o in Objective::ALL {
            let vals: Vec<Option<f64>> = cands.iter().map(|c| o.value(c)).collect();
            let present = vals.iter().flatten().copied();
            let (lo, hi) = (present.clone().reduce(f64::min), present.reduce(f64::max));
            let (best, worst) = if o.higher_is_better() {
                (hi, lo)
            } else {
                (lo, hi)
            };
            match (best, worst) {
                (Some(best), Some(worst)) => {
                    t.raw.insert(o, vals);
                    t.best.insert(o, best);
                    t.worst.insert(o, worst);
                }
                _ if objectives.iter().any(|(w, _)| *w == o) => {
                    let keys = if t.bonnie { o.bonnie_keys() } else { o.keys() };
                    return Err(RecommendError::MissingMetric {
                        objective: o,
                        keys: keys.iter().map(|k| k.to_string()).collect(),
                    });
                }
                _ => {}
            }
        }
        Ok(t)
    }

    fn raw(&self, o: Objective, i: usize) -> Option<f64> {
        self.raw.get(&o).and_then(|v| v[i])
    }

    /// How a value reads in this ranking's workload.
    fn show(&self, o: Objective, v: f64) -> String {
        o.show(v, self.bonnie)
    }

    /// 1 for the best cell, proportionally less for the others, 0 without a figure. A cost
    /// whose best is 0 (no storage server) has no ratio to it: linear from best (1) to worst (0).
    fn norm(&self, o: Objective, i: usize) -> f64 {
        let (Some(v), best) = (self.raw(o, i), self.best[&o]) else {
            return 0.0;
        };
        let worst = self.worst[&o];
        let n = if !o.higher_is_better() && best == 0.0 {
            if worst > 0.0 {
                1.0 - v / worst
            } else {
                1.0
            }
        } else if o.higher_is_better() {
            if best > 0.0 {
                v / best
            } else {
                1.0
            }
        } else if v > 0.0 {
            best / v
        } else {
            1.0
        };
        n.clamp(0.0, 1.0)
    }

    /// The runner-up value of an objective, excluding cell `i`.
    fn next_best(&self, o: Objective, i: usize) -> Option<f64> {
        let others = self.raw[&o]
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, v)| *v);
        if o.higher_is_better() {
            others.reduce(f64::max)
        } else {
            others.reduce(f64::min)
        }
    }

    /// One line: strengths, then the price paid, heaviest objectives first.
    fn reason(&self, i: usize, top: usize, objectives: &[(Objective, f64)]) -> String {
        let mut order = objectives.to_vec();
        order.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (mut good, mut bad) = (vec![], vec![]);
        for (o, _) in order {
            let Some(v) = self.raw(o, i) else {
                let keys = if self.bonnie {
                    o.bonnie_keys()
                } else {
                    o.keys()
                };
                bad.push(format!("no {} figure ({})", o.noun(), keys.join("/")));
                continue;
            };
            let n = self.norm(o, i);
            if n >= 0.999 {
                good.push(self.best_phrase(o, i, v));
            } else if n >= 0.95 {
                good.push(format!(
                    "within {:.0}% of the best {} ({})",
                    ((1.0 - n) * 100.0).ceil(),
                    o.noun(),
                    self.show(o, v)
                ));
            } else if n < 0.5 {
                bad.push(self.weak_phrase(o, v));
            } else if o.higher_is_better() {
                good.push(format!(
                    "{} ({:.0}% of the best)",
                    self.show(o, v),
                    n * 100.0
                ));
            } else {
                good.push(format!("{}, {:.1}x the lowest", self.show(o, v), 1.0 / n));
            }
            if i != top && !o.higher_is_better() {
                if let Some(p) = self.versus_top(o, top, v) {
                    good.push(p);
                }
            }
        }
        // Unweighted costs still tell the reader what the choice saves against #1.
        let weighted: Vec<Objective> = objectives.iter().map(|(o, _)| *o).collect();
        for o in Objective::ALL.into_iter().filter(|o| !weighted.contains(o)) {
            let Some(v) = self.raw(o, i) else { continue };
            if o.higher_is_better() && self.norm(o, i) >= 0.999 {
                good.push(self.best_phrase(o, i, v));
            } else if i != top && !o.higher_is_better() {
                good.extend(self.versus_top(o, top, v));
            }
        }
        match (good.is_empty(), bad.is_empty()) {
            (false, false) => format!("{}; but {}", good.join(", "), bad.join(", ")),
            (false, true) => good.join(", "),
            (true, _) => bad.join(", "),
        }
    }

    fn best_phrase(&self, o: Objective, i: usize, v: f64) -> String {
        let lead = match o {
            Objective::Iops => "fastest",
            Objective::P99Latency => "lowest tail latency",
            Objective::HostCpu => "lightest on the host",
            Objective::StorageMemory => "lightest storage stack",
        };
        match self.next_best(o, i) {
            Some(next) if next > 0.0 && v > 0.0 => {
                let ratio = if o.higher_is_better() {
                    v / next
                } else {
                    next / v
                };
                let rel = if o.higher_is_better() {
                    "the next"
                } else {
                    "less than the next"
                };
                if ratio >= 1.05 {
                    if o.higher_is_better() {
                        format!("{lead}: {}, {ratio:.1}x {rel}", self.show(o, v))
                    } else {
                        format!("{lead}: {}, {ratio:.1}x {rel}", self.show(o, v))
                            .replace("x less than", "x below")
                    }
                } else if ratio == 1.0 {
                    format!("{lead}: {} (tied)", self.show(o, v))
                } else {
                    format!("{lead}: {} (the next is within 5%)", self.show(o, v))
                }
            }
            _ => format!("{lead}: {}", self.show(o, v)),
        }
    }

    fn weak_phrase(&self, o: Objective, v: f64) -> String {
        let best = self.best[&o];
        if !o.higher_is_better() && best == 0.0 {
            return format!("{}, where the best needs none", self.show(o, v));
        }
        if o.higher_is_better() {
            format!(
                "only {}, {:.1}x below the best",
                self.show(o, v),
                best / v.max(f64::MIN_POSITIVE)
            )
        } else {
            format!(
                "{}, {:.1}x the lowest",
                self.show(o, v),
                v / best.max(f64::MIN_POSITIVE)
            )
        }
    }

    /// "at half the host CPU of #1" when this cell is cheaper than the winner on a cost.
    fn versus_top(&self, o: Objective, top: usize, v: f64) -> Option<String> {
        let t = self.raw(o, top)?;
        if t <= 0.0 || v >= t * 0.9 {
            return None;
        }
        let r = v / t;
        let words = if (r - 0.5).abs() < 0.05 {
            "half".to_string()
        } else if (r - 1.0 / 3.0).abs() < 0.03 {
            "a third of".to_string()
        } else {
            format!("{:.0}% of", r * 100.0)
        };
        Some(format!("at {words} the {} of #1", o.noun()))
    }
}
