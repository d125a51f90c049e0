//! `vmbench recommend`: ranks the passed cells of one run (one workload) with the confidence the
//! repeats allow. A cell needs [`MIN_REPEATS`] passed repeats to be ranked: below that there is
//! no spread to judge a difference by, and a run where no two cells have them is refused
//! ([`RecommendError::NotEnoughRepeats`], exit [`EXIT_NOT_ENOUGH_DATA`]).
//!
//! The answer comes in three parts. First the non-dominated set: the cells that no other cell
//! matches or beats on every chosen objective (by means). Then the weighted score (each
//! objective normalised so the best cell scores 1 on it), and, between each pair of neighbours in
//! that order, each objective's difference with its 95% interval over the repeats (Welch's t on
//! ln of one value per repeat, the test `compare` uses) or, when the interval holds 0, "not
//! separable" with the smallest difference the run could have seen (alpha 0.05, power 0.8) and
//! the repeats that would see 5%. Neighbours that no weighted objective separates share a rank.
//! Backends without a storage server (local, block, lvm) use 0 MiB of storage-stack memory and
//! 0 % storage-server CPU: real figures, the best ones, not missing ones. bonnie++ cells are
//! ranked on bonnie++'s figures (seeks/s, block and seek latency).

pub use super::objective::{CellKind, Objective, Profile, PROFILES};
use super::{test_values, Method, Spread};
use crate::results::{CellResult, Outcome, RunRecord};
use crate::workload::Figures;
use serde::Serialize;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The fewest passed repeats a cell needs to be ranked: two give a spread with one degree of
/// freedom, whose 95% interval is 12.7 standard errors wide either side; three is the least
/// that says anything.
pub const MIN_REPEATS: usize = 3;

/// Exit code when nothing could be ranked for want of data (as `compare`'s "not proven").
pub const EXIT_NOT_ENOUGH_DATA: i32 = 3;

/// The level of every interval.
pub const LEVEL: f64 = 0.95;
/// The power at which the smallest visible difference is stated.
pub const POWER: f64 = 0.8;
/// The difference whose repeats needed are stated, in percent.
pub const TARGET_PCT: f64 = 5.0;
/// The most repeats per cell a "repeats needed" estimate names before saying "more than".
pub const MAX_REPEATS_NAMED: usize = 1000;

/// How the intervals are made, as every output states it.
pub const METHOD: &str = "95% interval of each difference by Welch's t on ln(value), one value \
    per repeat (a ratio of geometric means; on the values relative to the cell behind when a \
    figure is 0), each pair alone, not adjusted for the number of pairs; smallest visible \
    difference at alpha 0.05 and power 0.8";

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

impl From<&Profile> for Weights {
    fn from(p: &Profile) -> Self {
        Weights(p.weights.iter().copied().collect())
    }
}

/// What the user asked: a workload, weights, and whether they came from a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Only cells of this workload.
    pub workload: Option<String>,
    /// Objectives and weights.
    pub weights: Weights,
    /// The profile the weights (and workload) came from.
    pub profile: Option<Profile>,
    /// The weights were named by the user: an objective without figures is an error, not a
    /// "not measured" note.
    pub explicit: bool,
}

impl Ask {
    /// From the command line: `--workload`, `--objective`, `--for`. The profile's workload and
    /// weights apply unless `--workload` or `--objective` name others; neither: IOPS alone.
    pub fn parse(
        workload: Option<&str>,
        objective: Option<&str>,
        profile: Option<&str>,
    ) -> Result<Ask, RecommendError> {
        let profile: Option<Profile> = profile.map(str::parse).transpose()?;
        let weights = match (objective, &profile) {
            (Some(o), _) => o.parse()?,
            (None, Some(p)) => p.into(),
            (None, None) => Weights::default(),
        };
        Ok(Ask {
            workload: workload
                .map(str::to_string)
                .or_else(|| profile.and_then(|p| p.workload.map(str::to_string))),
            weights,
            profile,
            explicit: objective.is_some() || profile.is_none(),
        })
    }

    /// Weights alone, every one required (the library's plain question).
    pub fn weights(workload: Option<&str>, weights: &Weights) -> Ask {
        Ask {
            workload: workload.map(str::to_string),
            weights: weights.clone(),
            profile: None,
            explicit: true,
        }
    }
}

/// Why no ranking could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecommendError {
    /// Not an objective name.
    #[error("unknown objective '{0}' (valid: {valid})", valid = Objective::valid_names())]
    UnknownObjective(String),
    /// Not a profile name.
    #[error("unknown profile '{0}' for --for (valid: {valid})", valid = Profile::valid_names())]
    UnknownProfile(String),
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
    /// A weighted objective's figures exist in no cell.
    #[error(
        "objective '{objective}' needs {needs} but no passed cell has it; drop it from the weights"
    )]
    MissingMetric {
        /// The objective.
        objective: Objective,
        /// What it is read from.
        needs: String,
    },
    /// Fewer than two cells have enough passed repeats to judge a difference.
    #[error("cannot rank run {run}: a ranking needs at least {MIN_REPEATS} passed repeats per cell \
             to see the spread a difference must beat, and {}; rerun with --repeat 5 or more \
             (exit 3: not enough data)", short_cells(.cells))]
    NotEnoughRepeats {
        /// The run.
        run: String,
        /// Every cell considered, with its passed repeats.
        cells: Vec<(String, usize)>,
    },
    /// A profile's objectives all lack figures in this run.
    #[error("nothing to rank run {run} on: not measured in this run: {}; (exit 3: not enough data)", .missing.join("; "))]
    NothingMeasured {
        /// The run.
        run: String,
        /// Each objective and what it needs.
        missing: Vec<String>,
    },
}

impl RecommendError {
    /// The process exit code: 3 when the data cannot support a ranking, 2 for bad input.
    pub fn exit_code(&self) -> i32 {
        match self {
            RecommendError::NotEnoughRepeats { .. } | RecommendError::NothingMeasured { .. } => {
                EXIT_NOT_ENOUGH_DATA
            }
            _ => crate::error::EXIT_USAGE,
        }
    }
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

fn short_cells(cells: &[(String, usize)]) -> String {
    let short: Vec<String> = cells
        .iter()
        .filter(|(_, n)| *n < MIN_REPEATS)
        .map(|(l, n)| format!("{l} has n = {n}"))
        .collect();
    let ok = cells.len() - short.len();
    format!(
        "{} ({ok} of {} cells have {MIN_REPEATS} or more)",
        short.join(", "),
        cells.len()
    )
}

/// An objective and its weight in this ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Weighted {
    /// The objective.
    pub objective: Objective,
    /// Its weight.
    pub weight: f64,
    /// Direction.
    pub higher_is_better: bool,
}

/// An objective the question asked for that no cell of the run has a figure for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotMeasured {
    /// The objective.
    pub objective: Objective,
    /// What it is read from.
    pub needs: String,
}

/// One objective's figure of one cell over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// The objective.
    pub objective: Objective,
    /// Mean over the repeats with the figure.
    pub mean: f64,
    /// Sample standard deviation over them.
    pub stddev: Option<f64>,
    /// Repeats with the figure.
    pub n: usize,
    /// The mean as it reads, with its unit.
    pub shown: String,
}

/// A cell of the ranking with its figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellFigures {
    /// The cell.
    pub cell_id: String,
    /// Its short label.
    pub label: String,
    /// Passed repeats.
    pub n: usize,
    /// One per objective the ranking weighs.
    pub figures: Vec<Figure>,
}

/// A cell left out of the ranking for want of repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotRanked {
    /// The cell.
    pub cell_id: String,
    /// Its short label.
    pub label: String,
    /// Passed repeats (fewer than [`MIN_REPEATS`]).
    pub n: usize,
}

/// A cell outside the non-dominated set and one cell that dominates it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dominated {
    /// The dominated cell's label.
    pub label: String,
    /// The best-ranked cell at least as good on every objective and better on one.
    pub by: String,
    /// Some objective separates the two at 95% (else the domination is by means only).
    pub separable: bool,
}

/// What the repeats say about one objective between two cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Separation {
    /// The 95% interval excludes no difference: `ahead` is better.
    Ahead,
    /// The interval holds 0.
    NotSeparable,
    /// The same value in every repeat of both cells.
    Equal,
    /// No interval: a cell has fewer than two repeats with the figure.
    NoInterval,
}

/// One objective between two neighbours of the ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFinding {
    /// The objective.
    pub objective: Objective,
    /// What the repeats say.
    pub separation: Separation,
    /// The cell with the better mean (the first of the pair when equal).
    pub ahead: String,
    /// The other cell.
    pub behind: String,
    /// How far `ahead` is ahead, in percent of `behind` (less for costs, more for throughput).
    pub ahead_by_pct: f64,
    /// 95% interval of `ahead_by_pct`.
    pub ci_pct: Option<(f64, f64)>,
    /// Welch's two-sided p-value, unadjusted.
    pub p: Option<f64>,
    /// Repeats with the figure: ahead, behind.
    pub n: (usize, usize),
    /// The test: welch_log (ln values) or welch (values, when a figure is 0).
    pub method: Method,
    /// The smallest difference (percent) this pair's repeats could see at alpha 0.05, power 0.8.
    pub detectable_pct: Option<f64>,
    /// Repeats per cell that would see [`TARGET_PCT`] at this spread (`None`: more than
    /// [`MAX_REPEATS_NAMED`], or no spread to judge by).
    pub repeats_for_target: Option<usize>,
    /// The finding in words.
    pub text: String,
}

/// One line of the ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    /// 1 is best; neighbours no weighted objective separates share a rank.
    pub rank: usize,
    /// The cell.
    pub cell_id: String,
    /// The cell's short label.
    pub label: String,
    /// Weighted score in 0..=1 (1: best on every weighted objective), from the means.
    pub score: f64,
    /// The rank of the cell this one is not separable from, if any.
    pub tied_with: Option<usize>,
    /// Why, in numbers, one line.
    pub reason: String,
    /// Each weighted objective against the next cell of the ranking (empty for the last).
    pub versus_next: Vec<PairFinding>,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// The run.
    pub run_id: String,
    /// The workload of the ranked cells.
    pub workload: String,
    /// The profile asked for, if any.
    pub profile: Option<String>,
    /// The objectives ranked on, with weights.
    pub objectives: Vec<Weighted>,
    /// Objectives asked for that no cell has: left out of the ranking.
    pub not_measured: Vec<NotMeasured>,
    /// How the intervals were made.
    pub method: String,
    /// The ranked cells' figures, in ranking order.
    pub cells: Vec<CellFigures>,
    /// Cells with fewer than [`MIN_REPEATS`] passed repeats: not ranked.
    pub not_ranked: Vec<NotRanked>,
    /// Labels of the run's host rows (`--hypervisor host`, of the workload): the host's own
    /// figures on the storage, a guest's baseline and not a choice, so never ranked.
    pub baselines: Vec<String>,
    /// Labels of the cells no other cell matches or beats on every objective, ranking order.
    pub non_dominated: Vec<String>,
    /// The others, each with a cell that dominates it.
    pub dominated: Vec<Dominated>,
    /// The ranking.
    pub ranking: Vec<Ranked>,
}

/// One cell's per-repeat figures.
struct Candidate {
    cell_id: String,
    label: String,
    n: usize,
    kind: CellKind,
    /// Per objective, one value per repeat that has it.
    values: BTreeMap<Objective, Vec<f64>>,
}

impl Candidate {
    fn values(&self, o: Objective) -> &[f64] {
        self.values.get(&o).map(Vec::as_slice).unwrap_or(&[])
    }

    fn mean(&self, o: Objective) -> Option<f64> {
        super::stats::mean(self.values(o))
    }
}

/// Ranks the passed cells of `run` as `ask` says.
pub fn recommend(run: &RunRecord, ask: &Ask) -> Result<Recommendation, RecommendError> {
    let (workload, all, baselines) = candidates(run, ask.workload.as_deref())?;
    let (cands, short): (Vec<Candidate>, Vec<Candidate>) =
        all.into_iter().partition(|c| c.n >= MIN_REPEATS);
    if cands.is_empty() || (cands.len() == 1 && !short.is_empty()) {
        let mut cells: Vec<(String, usize)> = cands
            .iter()
            .chain(&short)
            .map(|c| (c.label.clone(), c.n))
            .collect();
        cells.sort();
        return Err(RecommendError::NotEnoughRepeats {
            run: run.run_id.clone(),
            cells,
        });
    }
    let (objectives, not_measured) = measured_objectives(run, ask, &cands)?;
    let table = ObjectiveTable::build(&cands);
    let order = score_order(&cands, &table, &objectives);
    let weighted: Vec<Objective> = objectives.iter().map(|(o, _)| *o).collect();
    let ranking = rank(&cands, &table, &order, &objectives);
    let (non_dominated, dominated) = pareto(&cands, &order, &weighted);
    Ok(Recommendation {
        run_id: run.run_id.clone(),
        workload,
        profile: ask.profile.map(|p| p.name.to_string()),
        objectives: objectives
            .iter()
            .map(|(o, w)| Weighted {
                objective: *o,
                weight: *w,
                higher_is_better: o.higher_is_better(),
            })
            .collect(),
        not_measured,
        method: METHOD.into(),
        cells: order
            .iter()
            .map(|(i, _)| figures(&cands[*i], &weighted, table.figures))
            .collect(),
        not_ranked: short
            .iter()
            .map(|c| NotRanked {
                cell_id: c.cell_id.clone(),
                label: c.label.clone(),
                n: c.n,
            })
            .collect(),
        baselines,
        non_dominated,
        dominated,
        ranking,
    })
}

/// Objectives with their weights, heaviest first or in the table's order.
type WeightList = Vec<(Objective, f64)>;

/// The weighted objectives with a figure in some cell; the profile's others are "not measured"
/// (the user's own are an error).
fn measured_objectives(
    run: &RunRecord,
    ask: &Ask,
    cands: &[Candidate],
) -> Result<(WeightList, Vec<NotMeasured>), RecommendError> {
    let mut objectives = vec![];
    let mut not_measured = vec![];
    for (&o, &w) in ask.weights.0.iter().filter(|(_, w)| **w > 0.0) {
        if cands.iter().any(|c| !c.values(o).is_empty()) {
            objectives.push((o, w));
        } else if ask.explicit {
            return Err(RecommendError::MissingMetric {
                objective: o,
                needs: o.needs().into(),
            });
        } else {
            not_measured.push(NotMeasured {
                objective: o,
                needs: o.needs().into(),
            });
        }
    }
    if objectives.is_empty() {
        return Err(RecommendError::NothingMeasured {
            run: run.run_id.clone(),
            missing: not_measured
                .iter()
                .map(|m| format!("{} (needs {})", m.objective.noun(), m.needs))
                .collect(),
        });
    }
    Ok((objectives, not_measured))
}

/// Candidates by descending weighted score (ties by cell id), with their scores.
fn score_order(
    cands: &[Candidate],
    table: &ObjectiveTable,
    objectives: &[(Objective, f64)],
) -> Vec<(usize, f64)> {
    let total_w: f64 = objectives.iter().map(|(_, w)| w).sum();
    let mut scored: Vec<(usize, f64)> = (0..cands.len())
        .map(|i| {
            let s: f64 = objectives.iter().map(|(o, w)| w * table.norm(*o, i)).sum();
            (i, s / total_w)
        })
        .collect();
    scored.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| cands[a.0].cell_id.cmp(&cands[b.0].cell_id))
    });
    scored
}

/// The ranking: ranks shared by neighbours no weighted objective separates, measured against
/// the first cell of the shared rank too, so a chain of near cells cannot stretch a rank.
fn rank(
    cands: &[Candidate],
    table: &ObjectiveTable,
    order: &[(usize, f64)],
    objectives: &[(Objective, f64)],
) -> Vec<Ranked> {
    let top = order[0].0;
    let mut out: Vec<Ranked> = Vec::with_capacity(order.len());
    for (pos, &(i, score)) in order.iter().enumerate() {
        let mut reason = table.reason(i, top, objectives);
        let mut rank = pos + 1;
        let mut tied_with = None;
        if let Some(prev) = out.last() {
            let leader_rank = prev.rank;
            let leader = order[leader_rank - 1].0;
            let prev_i = order[pos - 1].0;
            let separated = |a: usize| {
                pair_findings(&cands[a], &cands[i], objectives)
                    .iter()
                    .any(|f| f.separation == Separation::Ahead)
            };
            if !separated(prev_i) && !separated(leader) {
                rank = leader_rank;
                tied_with = Some(leader_rank);
                reason.push_str(&format!(
                    "; not separable from #{leader_rank} {} on any weighted objective at these \
                     repeats",
                    cands[leader].label
                ));
            }
        }
        let versus_next = order
            .get(pos + 1)
            .map(|&(j, _)| pair_findings(&cands[i], &cands[j], objectives))
            .unwrap_or_default();
        out.push(Ranked {
            rank,
            cell_id: cands[i].cell_id.clone(),
            label: cands[i].label.clone(),
            score,
            tied_with,
            reason,
            versus_next,
        });
    }
    out
}

/// Each weighted objective between cells `a` (ranked first) and `b`.
fn pair_findings(
    a: &Candidate,
    b: &Candidate,
    objectives: &[(Objective, f64)],
) -> Vec<PairFinding> {
    objectives
        .iter()
        .map(|(o, _)| pair_finding(*o, a, b))
        .collect()
}

/// `a` against `b` on `o`: who is ahead, by how much, with what interval, or what the run could
/// have seen. `figures` are the pair's engine's (a value is shown in its units: seeks/s for
/// bonnie++, IOPS for fio).
pub fn pair_finding_values(
    o: Objective,
    figures: &Figures,
    (a_label, a): (&str, &[f64]),
    (b_label, b): (&str, &[f64]),
) -> PairFinding {
    let ((ahead, av), (behind, bv)) = ahead_first(o, (a_label, a), (b_label, b));
    let mut f = PairFinding {
        objective: o,
        separation: Separation::NoInterval,
        ahead: ahead.into(),
        behind: behind.into(),
        ahead_by_pct: f64::NAN,
        ci_pct: None,
        p: None,
        n: (av.len(), bv.len()),
        method: Method::None,
        detectable_pct: None,
        repeats_for_target: None,
        text: String::new(),
    };
    if let Some(value) = same_in_every_repeat(av, bv) {
        f.separation = Separation::Equal;
        f.ahead_by_pct = 0.0;
        f.text = format!(
            "{}: {ahead} and {behind} equal ({} in every repeat)",
            o.noun(),
            o.show(value, figures)
        );
        return f;
    }
    measure_difference(&mut f, av, bv);
    f.separation = match f.ci_pct {
        Some((lo, _)) if lo > 0.0 => Separation::Ahead,
        Some(_) => Separation::NotSeparable,
        None => Separation::NoInterval,
    };
    f.text = finding_text(&f);
    f
}

/// A cell's label with its values on one objective.
type Labelled<'a> = (&'a str, &'a [f64]);

/// The two labelled samples, the one with the better mean on `o` first (`a` on a tie).
fn ahead_first<'a>(
    o: Objective,
    (a_label, a): Labelled<'a>,
    (b_label, b): Labelled<'a>,
) -> (Labelled<'a>, Labelled<'a>) {
    let mean = |v: &[f64]| super::stats::mean(v).unwrap_or(f64::NAN);
    let a_better = if o.higher_is_better() {
        mean(a) >= mean(b)
    } else {
        mean(a) <= mean(b)
    };
    if a_better {
        ((a_label, a), (b_label, b))
    } else {
        ((b_label, b), (a_label, a))
    }
}

/// The one value both samples repeat throughout, if both are non-empty and nothing varies: no
/// test can say anything then, and "equal" is the honest answer.
fn same_in_every_repeat(av: &[f64], bv: &[f64]) -> Option<f64> {
    let first = av.first().or(bv.first()).copied();
    if !av.is_empty() && !bv.is_empty() && av.iter().chain(bv).all(|x| Some(*x) == first) {
        Some(first.unwrap_or(0.0))
    } else {
        None
    }
}

/// Fills `f`'s test figures: method, p, how far ahead with its interval, and what the spread
/// would let a run see.
fn measure_difference(f: &mut PairFinding, av: &[f64], bv: &[f64]) {
    // The test's change is `ahead` relative to `behind`; for a cost, being ahead is being lower.
    let t = test_values(bv, av);
    let sign = if f.objective.higher_is_better() {
        1.0
    } else {
        -1.0
    };
    f.method = t.method;
    f.p = t.welch.map(|w| w.p);
    if let Some(w) = t.welch {
        f.ahead_by_pct = sign * t.method.to_pct(w.diff);
    }
    f.ci_pct =
        t.ci.map(|(lo, hi)| if sign > 0.0 { (lo, hi) } else { (-hi, -lo) });
    if let Some(s) = t.spread {
        f.detectable_pct = Some(detectable_pct(&s, t.method));
        f.repeats_for_target = s.repeats_to_detect(
            t.method.scale_of_pct(TARGET_PCT),
            (1.0 - LEVEL, POWER),
            MIN_REPEATS,
            MAX_REPEATS_NAMED,
        );
    }
}

/// The finding's sentence, from its separation and figures.
fn finding_text(f: &PairFinding) -> String {
    let (o, ahead, behind) = (f.objective, &f.ahead, &f.behind);
    let n = if f.n.0 == f.n.1 {
        format!("n = {}", f.n.0)
    } else {
        format!("n = {} vs {}", f.n.0, f.n.1)
    };
    match (f.separation, f.ci_pct) {
        (Separation::Ahead, Some((lo, hi))) => format!(
            "{}: {ahead} ahead of {behind} by {} [{}, {}]",
            o.noun(),
            pct(f.ahead_by_pct),
            pct(lo),
            pct(hi)
        ),
        (Separation::NotSeparable, _) => format!(
            "{}: {ahead} and {behind} not separable at {n} (smallest difference this run could \
             see: {}; {})",
            o.noun(),
            f.detectable_pct.map(pct).unwrap_or_else(|| "?".into()),
            match f.repeats_for_target {
                Some(k) => format!("about {k} repeats would see {TARGET_PCT}%"),
                None => format!(
                    "more than {MAX_REPEATS_NAMED} repeats would be needed to see {TARGET_PCT}%"
                ),
            }
        ),
        _ => format!(
            "{}: {ahead} and {behind}: no interval at {n} repeats with the figure",
            o.noun()
        ),
    }
}

fn pair_finding(o: Objective, a: &Candidate, b: &Candidate) -> PairFinding {
    // Ranked cells share one workload (`Ask`), so one engine: a's figures are b's.
    pair_finding_values(
        o,
        a.kind.figures,
        (&a.label, a.values(o)),
        (&b.label, b.values(o)),
    )
}

/// The smallest visible difference as a percentage of the cell behind: a ratio of
/// `1 + d` on the log scale, whichever side is ahead.
fn detectable_pct(s: &Spread, method: Method) -> f64 {
    method.to_pct(s.detectable(1.0 - LEVEL, POWER))
}

/// A percentage as the findings print it: whole percent from 10 up, one decimal below.
fn pct(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}%")
    } else {
        format!("{v:.1}%")
    }
}

/// The non-dominated set (labels, ranking order) and, for every other cell, the best-ranked
/// cell that is at least as good on every objective and better on one (by means; a missing
/// figure is worse than any).
fn pareto(
    cands: &[Candidate],
    order: &[(usize, f64)],
    objectives: &[Objective],
) -> (Vec<String>, Vec<Dominated>) {
    let at_least = |a: &Candidate, b: &Candidate, o: Objective| -> (bool, bool) {
        match (a.mean(o), b.mean(o)) {
            (Some(x), Some(y)) => {
                let (ge, gt) = if o.higher_is_better() {
                    (x >= y, x > y)
                } else {
                    (x <= y, x < y)
                };
                (ge, gt)
            }
            (Some(_), None) => (true, true),
            (None, None) => (true, false),
            (None, Some(_)) => (false, false),
        }
    };
    let dominates = |a: &Candidate, b: &Candidate| {
        let cmp: Vec<(bool, bool)> = objectives.iter().map(|&o| at_least(a, b, o)).collect();
        cmp.iter().all(|c| c.0) && cmp.iter().any(|c| c.1)
    };
    let (mut front, mut dominated) = (vec![], vec![]);
    for &(i, _) in order {
        match order
            .iter()
            .find(|&&(j, _)| j != i && dominates(&cands[j], &cands[i]))
        {
            Some(&(j, _)) => dominated.push(Dominated {
                label: cands[i].label.clone(),
                by: cands[j].label.clone(),
                separable: objectives.iter().any(|&o| {
                    pair_finding(o, &cands[j], &cands[i]).separation == Separation::Ahead
                }),
            }),
            None => front.push(cands[i].label.clone()),
        }
    }
    (front, dominated)
}

fn figures(c: &Candidate, objectives: &[Objective], units: &Figures) -> CellFigures {
    CellFigures {
        cell_id: c.cell_id.clone(),
        label: c.label.clone(),
        n: c.n,
        figures: objectives
            .iter()
            .filter_map(|&o| {
                let mean = c.mean(o)?;
                Some(Figure {
                    objective: o,
                    mean,
                    stddev: super::stats::stddev(c.values(o)),
                    n: c.values(o).len(),
                    shown: o.show(mean, units),
                })
            })
            .collect(),
    }
}

/// The workload's guest cells, one candidate per cell with its repeats, and the labels of its
/// host rows (left out: see [`Recommendation::baselines`]).
fn candidates(
    run: &RunRecord,
    workload: Option<&str>,
) -> Result<(String, Vec<Candidate>, Vec<String>), RecommendError> {
    let passed: Vec<&CellResult> = run
        .cells
        .iter()
        .filter(|c| c.outcome == Outcome::Passed)
        .collect();
    let mut workloads: Vec<String> = passed.iter().map(|c| c.cell.workload.to_string()).collect();
    workloads.sort();
    workloads.dedup();
    let chosen: Vec<&CellResult> = passed
        .iter()
        .copied()
        .filter(|c| workload.is_none_or(|w| c.cell.workload.to_string() == w))
        .collect();
    let (chosen, host): (Vec<&CellResult>, Vec<&CellResult>) = chosen
        .into_iter()
        .partition(|c| c.cell.hypervisor.desc().runs_guest);
    let mut baselines: Vec<String> = host.iter().map(|c| c.cell.label()).collect();
    baselines.sort();
    baselines.dedup();
    if workload.is_none() && workloads.len() > 1 {
        return Err(RecommendError::MixedWorkloads {
            run: run.run_id.clone(),
            workloads,
        });
    }
    if chosen.is_empty() {
        return Err(RecommendError::NoCells {
            run: run.run_id.clone(),
            workload: workload.map(Into::into),
            available: workloads,
        });
    }
    let mut by_id: BTreeMap<&str, Vec<&CellResult>> = BTreeMap::new();
    chosen
        .iter()
        .for_each(|c| by_id.entry(c.cell_id.as_str()).or_default().push(c));
    Ok((
        chosen[0].cell.workload.to_string(),
        by_id
            .into_iter()
            .map(|(id, reps)| candidate(id, &reps))
            .collect(),
        baselines,
    ))
}

/// One value per repeat of every objective (too-fast and n/a figures left out).
fn candidate(id: &str, reps: &[&CellResult]) -> Candidate {
    let engine = crate::workload::descriptor(&reps[0].cell.workload);
    let kind = CellKind {
        figures: &engine.figures,
        serverless: !crate::storage::descriptor(reps[0].cell.backend).has_server(),
    };
    let values = Objective::all()
        .map(|o| (o, reps.iter().filter_map(|r| o.value(r, kind)).collect()))
        .collect();
    Candidate {
        cell_id: id.into(),
        label: reps[0].cell.label(),
        n: reps.len(),
        kind,
        values,
    }
}

/// The candidates' engine's figures when they share one, else the default engine's.
fn common_figures(cands: &[Candidate]) -> &'static Figures {
    match cands.first() {
        Some(c) if cands.iter().all(|d| d.kind.figures == c.kind.figures) => c.kind.figures,
        _ => &crate::workload::ENGINES[0].figures,
    }
}

/// Objectives a reason mentions even when unweighted: the fastest cell, and the running costs.
const CONTEXT: [Objective; 3] = [
    Objective::Iops,
    Objective::HostCpu,
    Objective::StorageMemory,
];

/// Mean objective values and their normalisation, per objective then per candidate.
struct ObjectiveTable {
    raw: BTreeMap<Objective, Vec<Option<f64>>>,
    best: BTreeMap<Objective, f64>,
    worst: BTreeMap<Objective, f64>,
    /// The units values read in: the candidates' engine's, or the default engine's when they
    /// mix engines.
    figures: &'static Figures,
}

impl ObjectiveTable {
    /// Every objective with a figure in some cell (unweighted ones give context to reasons).
    fn build(cands: &[Candidate]) -> Self {
        let mut t = ObjectiveTable {
            raw: BTreeMap::new(),
            best: BTreeMap::new(),
            worst: BTreeMap::new(),
            figures: common_figures(cands),
        };
        for o in Objective::all() {
            let vals: Vec<Option<f64>> = cands.iter().map(|c| c.mean(o)).collect();
            let present = vals.iter().flatten().copied();
            let (lo, hi) = (present.clone().reduce(f64::min), present.reduce(f64::max));
            let (best, worst) = if o.higher_is_better() {
                (hi, lo)
            } else {
                (lo, hi)
            };
            if let (Some(best), Some(worst)) = (best, worst) {
                t.raw.insert(o, vals);
                t.best.insert(o, best);
                t.worst.insert(o, worst);
            }
        }
        t
    }

    fn raw(&self, o: Objective, i: usize) -> Option<f64> {
        self.raw.get(&o).and_then(|v| v[i])
    }

    /// How a value reads in this ranking's workload.
    fn show(&self, o: Objective, v: f64) -> String {
        o.show(v, self.figures)
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

    /// One line: strengths, then the price paid, heaviest objectives first. Means only: how
    /// sure each difference is, is the pair findings' job.
    fn reason(&self, i: usize, top: usize, objectives: &[(Objective, f64)]) -> String {
        let mut order = objectives.to_vec();
        order.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (mut good, mut bad) = (vec![], vec![]);
        for (o, _) in order {
            let Some(v) = self.raw(o, i) else {
                bad.push(format!("no {} figure ({})", o.noun(), o.needs()));
                continue;
            };
            let n = self.norm(o, i);
            if n >= 0.999 {
                good.push(format!("{}: {}", o.lead(), self.show(o, v)));
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
                good.extend(self.versus_top(o, top, v));
            }
        }
        // Unweighted costs of running it still tell the reader what the choice saves
        // against #1.
        let weighted: Vec<Objective> = objectives.iter().map(|(o, _)| *o).collect();
        for o in CONTEXT.into_iter().filter(|o| !weighted.contains(o)) {
            let Some(v) = self.raw(o, i) else { continue };
            if o == Objective::Iops && self.norm(o, i) >= 0.999 {
                good.push(format!("{}: {}", o.lead(), self.show(o, v)));
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

/// The recommendation as the terminal shows it: the question, the figures, the non-dominated
/// set, then the ranking with each pair of neighbours' findings, then the method.
pub fn render_text(r: &Recommendation) -> String {
    let mut out = String::new();
    // Figures and ranking line their labels up in one column.
    let width = r.cells.iter().map(|c| c.label.len()).max().unwrap_or(0);
    push_question(&mut out, r);
    push_figures(&mut out, r, width);
    push_dominance(&mut out, r);
    push_ranking(&mut out, r, width);
    out.push_str(&format!("\nmethod: {}\n", r.method));
    out
}

/// The question answered: run, workload, repeats, objectives, and what was left out and why.
fn push_question(out: &mut String, r: &Recommendation) {
    let n: Vec<usize> = r.cells.iter().map(|c| c.n).collect();
    let (lo, hi) = (
        n.iter().min().copied().unwrap_or(0),
        n.iter().max().copied().unwrap_or(0),
    );
    let reps = if lo == hi {
        format!("n = {lo}")
    } else {
        format!("n = {lo} to {hi}")
    };
    out.push_str(&format!(
        "run {}, workload {}: {} cells ranked at {reps} passed repeats each{}\n",
        r.run_id,
        r.workload,
        r.cells.len(),
        r.profile
            .as_ref()
            .map(|p| format!(" (profile {p})"))
            .unwrap_or_default()
    ));
    let objs: Vec<String> = r
        .objectives
        .iter()
        .map(|w| {
            format!(
                "{} x{} ({} is better)",
                w.objective,
                w.weight,
                if w.higher_is_better {
                    "higher"
                } else {
                    "lower"
                }
            )
        })
        .collect();
    out.push_str(&format!("objectives: {}\n", objs.join(", ")));
    for m in &r.not_measured {
        out.push_str(&format!(
            "not measured in this run: {} (needs {}): left out of the ranking\n",
            m.objective.noun(),
            m.needs
        ));
    }
    for c in &r.not_ranked {
        out.push_str(&format!(
            "not ranked: {} has n = {} passed repeats (a ranking needs {MIN_REPEATS})\n",
            c.label, c.n
        ));
    }
    for label in &r.baselines {
        out.push_str(&format!(
            "not ranked: {label} is a host row (no guest): a baseline, not a choice\n"
        ));
    }
}

/// Each cell's figures, mean with its spread as a percentage of the mean.
fn push_figures(out: &mut String, r: &Recommendation, width: usize) {
    out.push_str("\nfigures (mean, sd over the repeats):\n");
    for c in &r.cells {
        let figs: Vec<String> = c
            .figures
            .iter()
            .map(|f| match f.stddev {
                Some(sd) if f.mean != 0.0 => {
                    format!("{} ±{:.1}%", f.shown, sd / f.mean.abs() * 100.0)
                }
                _ => f.shown.clone(),
            })
            .collect();
        out.push_str(&format!(
            "  {:<width$}  n = {}  {}\n",
            c.label,
            c.n,
            figs.join(", ")
        ));
    }
}

/// The non-dominated set, then each dominated cell with the cell that beats it.
fn push_dominance(out: &mut String, r: &Recommendation) {
    out.push_str(&format!(
        "\nnon-dominated (no other cell at least as good on every objective, by means): {}\n",
        r.non_dominated.join(", ")
    ));
    for d in &r.dominated {
        let how = if d.separable {
            ""
        } else {
            " (by means only: no objective separates them at these repeats)"
        };
        out.push_str(&format!("  {}: dominated by {}{how}\n", d.label, d.by));
    }
}

/// The ranking, each cell followed by its findings against the next one.
fn push_ranking(out: &mut String, r: &Recommendation, width: usize) {
    out.push_str("\nranking by weighted score (neighbours no objective separates share a rank):\n");
    for x in &r.ranking {
        out.push_str(&format!(
            "{}. {:<width$}  score {:.2}  {}\n",
            x.rank, x.label, x.score, x.reason
        ));
        for f in &x.versus_next {
            out.push_str(&format!("     {}\n", f.text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair equal in every repeat is shown in its engine's units: seeks/s for bonnie++.
    #[test]
    fn an_equal_pair_is_shown_in_its_engines_units() {
        let same = [120.0, 120.0, 120.0];
        let bonnie = &crate::workload::bonnie::ENGINE.figures;
        let f = pair_finding_values(Objective::Iops, bonnie, ("a", &same), ("b", &same));
        assert_eq!(f.separation, Separation::Equal);
        assert!(
            f.text.contains("120.0 seeks/s in every repeat"),
            "{}",
            f.text
        );
        let fio = &crate::workload::ENGINES[0].figures;
        let f = pair_finding_values(Objective::Iops, fio, ("a", &same), ("b", &same));
        assert!(f.text.contains("120.0 IOPS in every repeat"), "{}", f.text);
    }
}
