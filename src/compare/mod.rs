//! A/B regression verdicts between two runs. The unit of evidence is a repeat (a fresh boot and
//! a fresh disk): for every cell and fact of its verdict family, one value per repeat on each
//! side goes into Welch's t-test on log values, the p-values of all verdict rows of the
//! comparison are adjusted together (Holm-Bonferroni by default), and a change counts only when
//! its adjusted p is under alpha and it is larger than the noise threshold. "No change" is shown,
//! not assumed: the 95% confidence interval of the change must lie inside +-threshold (an
//! equivalence test); a row that is neither is inconclusive and says what it could not rule out.
//! Per-second samples never decide: they share one boot, one disk and one host state, so
//! run-to-run variance would be missing from the null hypothesis; they are shown as within-run
//! CV, a stability diagnostic.
//!
//! `provenance.rs` splits what measured (the instrument: a change makes rows not comparable)
//! from what is judged (the system under test: a change is reported first, and compared);
//! `broken.rs` finds cells that passed in the baseline and broke in the candidate; `junit.rs`
//! writes the verdicts as JUnit XML for CI; `recommend.rs` ranks the cells of one run with
//! confidence intervals, on the objectives and profiles of `objective.rs`.

#![warn(missing_docs)]

pub mod along;
pub mod broken;
mod junit;
pub mod objective;
pub mod provenance;
pub mod recommend;
pub mod stats;

pub use along::{Along, AlongError};
pub use broken::{broken_cells, Breakage, BrokenCell};
pub use provenance::{instrument_mismatch, provenance_mismatch, SystemChange};
pub use stats::Correction;

use crate::results::{Better, CellResult, Metric, Outcome, RunRecord, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Whether a metric key may get a verdict by default: the figures a storage change shows in
/// first, every engine's verdict facts. Which of them do in a cell is [`family_keys`].
pub fn is_headline_metric(key: &str) -> bool {
    crate::workload::is_verdict_key(key)
}

/// The default verdict family of a cell: one key per independent fact, as its engine says. The
/// derived twin (bandwidth of a random job, IOPS of a sequential one) repeats its fact with the
/// same p, and counting it twice would halve every row's share of alpha; it is shown as
/// information.
pub fn family_keys(cell: &crate::cell::Cell) -> &'static [&'static str] {
    (crate::workload::descriptor(&cell.workload).verdict_family)(&cell.workload)
}

/// A cell's verdict family (see [`family_keys`]).
type Family = &'static [&'static str];

/// The verdict family in words, as every output states it.
pub const FAMILY: &str = "one verdict per fact and cell: IOPS (random jobs) or bandwidth \
    (sequential jobs), mean and p99 latency, bonnie++ block output, block input and seeks; \
    the derived twin (bandwidth of random jobs, IOPS of sequential jobs) is information";

/// Metric keys that check the workload's mix rather than measure merit: never a verdict.
pub const MIX_CHECKS: [&str; 1] = ["read_share_pct"];

/// The smallest number of repeats per side the t-test needs (a spread needs two values).
pub const MIN_REPEATS: usize = 2;

/// The most repeats per side a "repeats needed" estimate names before saying "more than".
pub const MAX_REPEATS_NEEDED: usize = 50;

/// How `compare` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    /// Changes smaller than this, in percent of the baseline mean, are noise.
    pub noise_threshold_pct: f64,
    /// Per metric key overrides of `noise_threshold_pct` (e.g. latency tails are noisier).
    pub per_metric_threshold: BTreeMap<String, f64>,
    /// Family-wise significance level (after `correction`).
    pub alpha: f64,
    /// How the p-values of the verdict rows are adjusted for their number.
    pub correction: Correction,
    /// Metric keys given a verdict besides the cell's family (`--metric`).
    pub extra_verdict_metrics: Vec<String>,
    /// Run-to-run noise seen in earlier runs, by (cell id, metric key) (`--noise-from-history`).
    pub history_noise: BTreeMap<(String, String), HistoryNoise>,
    /// Compare even when the instrument (fio, bonnie++, image, guest kernel, jobs) differs.
    pub force: bool,
    /// Cells that passed in the baseline and broke in the candidate are information, not a
    /// failure (`--allow-missing`).
    pub allow_missing: bool,
}

impl Default for CompareOptions {
    /// Firecracker's A/B defaults: alpha 0.01, 5 % noise threshold; Holm over the family.
    fn default() -> Self {
        CompareOptions {
            noise_threshold_pct: 5.0,
            per_metric_threshold: BTreeMap::new(),
            alpha: 0.01,
            correction: Correction::Holm,
            extra_verdict_metrics: vec![],
            history_noise: BTreeMap::new(),
            force: false,
            allow_missing: false,
        }
    }
}

/// The spread of a cell x metric's per-run means over earlier runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HistoryNoise {
    /// Coefficient of variation of the per-run means, in percent.
    pub cv_pct: f64,
    /// How many earlier runs it is computed from.
    pub runs: usize,
}

/// Earlier runs needed before their spread sets a threshold.
pub const HISTORY_MIN_RUNS: usize = 3;

/// A history threshold is this multiple of the run-to-run CV (most A/A changes stay within it).
pub const HISTORY_CV_FACTOR: f64 = 2.0;

impl CompareOptions {
    /// The noise threshold that applies to a metric key (without history).
    pub fn threshold(&self, key: &str) -> f64 {
        self.per_metric_threshold
            .get(key)
            .copied()
            .unwrap_or(self.noise_threshold_pct)
    }

    /// The threshold of one cell x metric and why: the configured one, raised to
    /// [`HISTORY_CV_FACTOR`] x the run-to-run CV when history says the runs vary more.
    fn threshold_for(&self, cell_id: &str, key: &str) -> (f64, String) {
        let base = self.threshold(key);
        let why = if self.per_metric_threshold.contains_key(key) {
            format!("--metric-threshold {key}")
        } else {
            "default".to_string()
        };
        match self.history_noise.get(&(cell_id.to_string(), key.to_string())) {
            Some(h) if HISTORY_CV_FACTOR * h.cv_pct > base => (
                HISTORY_CV_FACTOR * h.cv_pct,
                format!(
                    "history: {HISTORY_CV_FACTOR}x the {:.1}% CV of per-run means over {} earlier runs (above the {why} {base}%)",
                    h.cv_pct, h.runs
                ),
            ),
            Some(h) => (
                base,
                format!(
                    "{why} (history: {HISTORY_CV_FACTOR}x the {:.1}% CV over {} earlier runs is below it)",
                    h.cv_pct, h.runs
                ),
            ),
            None => (base, why),
        }
    }

    fn is_verdict_metric(&self, key: &str, family: Family) -> bool {
        !MIX_CHECKS.contains(&key)
            && (family.contains(&key) || self.extra_verdict_metrics.iter().any(|k| k == key))
    }
}

/// What a metric's change amounts to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly better (adjusted p under alpha), beyond the threshold.
    Improvement,
    /// Significantly worse (adjusted p under alpha), beyond the threshold.
    Regression,
    /// Shown to be within the threshold: the 95% CI of the change lies inside +-threshold.
    NoSignificantChange,
    /// Not decided; the reason says what could not be ruled out, or why no test ran.
    Inconclusive(String),
    /// Shown for information, without a verdict (a derived twin, not a headline metric, a mix
    /// check).
    Info,
    /// The two sides cannot be compared; the reason names why.
    NotComparable(String),
}

impl Verdict {
    /// Whether the row decided something (a direction, or that nothing changed).
    pub fn is_decided(&self) -> bool {
        matches!(
            self,
            Verdict::Improvement | Verdict::Regression | Verdict::NoSignificantChange
        )
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Improvement => f.write_str("improvement"),
            Verdict::Regression => f.write_str("REGRESSION"),
            Verdict::NoSignificantChange => f.write_str("no change (95% CI inside ±threshold)"),
            Verdict::Inconclusive(why) => write!(f, "inconclusive: {why}"),
            Verdict::Info => f.write_str("info (no verdict)"),
            Verdict::NotComparable(why) => write!(f, "not comparable: {why}"),
        }
    }
}

/// How a row's p-value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Welch's t-test on ln(value), one value per repeat.
    WelchLog,
    /// Welch's t-test on the values themselves (some value was 0 or negative, no logarithm).
    WelchRaw,
    /// No test (too few values, or nothing to compare).
    None,
}

impl Method {
    /// A change on the test's scale as a percentage of the baseline.
    pub(crate) fn to_pct(self, d: f64) -> f64 {
        match self {
            Method::WelchLog => (d.exp() - 1.0) * 100.0,
            _ => d * 100.0,
        }
    }

    /// A percentage of the baseline on the test's scale.
    pub(crate) fn scale_of_pct(self, pct: f64) -> f64 {
        match self {
            Method::WelchLog => (1.0 + pct / 100.0).ln(),
            _ => pct / 100.0,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::WelchLog => "welch-log",
            Method::WelchRaw => "welch",
            Method::None => "-",
        })
    }
}

/// One side's figures of a row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SideStats {
    /// Mean of one value per repeat (NaN when there is none).
    pub mean: f64,
    /// Repeats with a value.
    pub n: usize,
    /// Sample standard deviation across repeats (n >= 2).
    pub stddev: Option<f64>,
    /// Coefficient of variation across repeats, in percent (n >= 2).
    pub cv_pct: Option<f64>,
    /// Mean within-run CV of the per-second samples, in percent: a stability diagnostic only.
    pub within_run_cv_pct: Option<f64>,
}

/// The spread a row's test saw, on the scale it tested: what "repeats needed" and the smallest
/// visible change are computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    /// Sample variances of each side (of ln values for welch-log, else relative to the
    /// baseline mean, so both scales are "fractions of the baseline").
    pub(crate) var_b: f64,
    pub(crate) var_c: f64,
    /// The test's estimate of the change on that scale.
    pub(crate) diff: f64,
    /// The test's standard error and Welch df at the row's own n.
    pub(crate) se: f64,
    pub(crate) df: f64,
}

/// The verdict on one metric of one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricComparison {
    /// The cell.
    pub cell_id: String,
    /// The cell's short label.
    pub label: String,
    /// Metric key, e.g. `read_iops`.
    pub key: String,
    /// Metric label, e.g. "Read IOPS".
    pub metric_label: String,
    /// Unit.
    pub unit: String,
    /// Direction.
    pub better: Better,
    /// Mean of the baseline values (NaN when there are none).
    pub baseline_mean: f64,
    /// Mean of the candidate values (NaN when there are none).
    pub candidate_mean: f64,
    /// Baseline figures: n, spread, within-run CV.
    pub baseline: SideStats,
    /// Candidate figures: n, spread, within-run CV.
    pub candidate: SideStats,
    /// (candidate - baseline) / |baseline|, in percent (NaN when undefined).
    pub change_pct: f64,
    /// 95 % confidence interval of the change, in percent (Welch, on the log ratio).
    pub change_ci_pct: Option<(f64, f64)>,
    /// Raw p-value of the row's test.
    pub p_value: Option<f64>,
    /// p-value adjusted over the comparison's verdict rows (verdict rows only).
    pub p_adjusted: Option<f64>,
    /// Welch-Satterthwaite degrees of freedom of the test.
    pub df: Option<f64>,
    /// The test used.
    pub method: Method,
    /// Values (repeats) on the baseline side.
    pub n_baseline: usize,
    /// Values (repeats) on the candidate side.
    pub n_candidate: usize,
    /// Noise threshold applied, in percent.
    pub threshold_pct: f64,
    /// Where the threshold comes from (default, --metric-threshold, history).
    pub threshold_source: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Inconclusive rows: the change furthest from 0 the 95% CI still allows, in percent.
    pub could_not_rule_out_pct: Option<f64>,
    /// Inconclusive rows: repeats per side that would decide the row at the observed spread and
    /// change (Welch df at that n); `None` when more than [`MAX_REPEATS_NEEDED`] or unknown.
    pub repeats_needed: Option<usize>,
    /// Verdict rows: the smallest drop (in percent, as a loss of performance) that this row
    /// would have called a regression: the threshold, or what the spread, n and the family's
    /// strictest level allow, whichever is larger. `None` without a test.
    pub smallest_visible_drop_pct: Option<f64>,
    /// What a reader should know, e.g. repeats left out as too fast to measure.
    pub note: Option<String>,
    #[serde(skip)]
    spread: Option<Spread>,
}

impl MetricComparison {
    /// Whether the row is one of the family that decides (not information).
    pub fn is_verdict_row(&self) -> bool {
        self.verdict != Verdict::Info
    }
}

/// The smallest drop a whole comparison could have seen: the largest of its verdict rows'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VisibleDrop {
    /// In percent; `None` when some verdict row had no test at all (no drop could be seen).
    pub pct: Option<f64>,
    /// The row that sets it: `LABEL KEY (n=B vs C)`.
    pub row: String,
}

/// The verdicts of a whole A/B comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// System-under-test changes (QEMU, libvirt, host kernel ...), printed before anything.
    pub what_changed: Vec<SystemChange>,
    /// One row per cell x metric present in both runs.
    pub rows: Vec<MetricComparison>,
    /// Cells that passed in the baseline and broke in the candidate: each a verdict of its own.
    pub broken: Vec<BrokenCell>,
    /// Whether broken cells are information only (`--allow-missing`).
    pub allow_missing: bool,
    /// Baseline run id.
    pub baseline_run: String,
    /// Candidate run id.
    pub candidate_run: String,
    /// Cells in only one run and not broken, as "`cell-id` (only in baseline|candidate)".
    pub missing_cells: Vec<String>,
    /// Cells in both runs without a passed repeat on one side and not broken, with why.
    pub unpassed_cells: Vec<String>,
    /// Family-wise significance level.
    pub alpha: f64,
    /// The multiple-comparison adjustment used.
    pub correction: Correction,
    /// Verdict rows whose p-values were adjusted together.
    pub family_size: usize,
    /// The verdict family, in words.
    pub family: String,
    /// The smallest drop the comparison could have seen in every verdict row.
    pub smallest_visible_drop: Option<VisibleDrop>,
    /// What the exit code says.
    pub outcome: CompareOutcome,
    /// The process exit code.
    pub exit_code: i32,
}

/// What `compare`'s exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOutcome {
    /// Exit 0: every verdict row decided, none a regression, no cell broke.
    NoRegression,
    /// Exit 1: at least one significant regression.
    Regression,
    /// Exit 1: a cell passed in the baseline and failed, went missing or became unsupported.
    Broken,
    /// Exit 3: nothing regressed or broke, but some verdict row (or all) is undecided.
    Undecided,
}

impl CompareOutcome {
    /// The process exit code.
    pub fn exit_code(self) -> i32 {
        match self {
            CompareOutcome::NoRegression => 0,
            CompareOutcome::Regression | CompareOutcome::Broken => 1,
            CompareOutcome::Undecided => 3,
        }
    }
}

impl Comparison {
    /// Whether any metric regressed.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Regression)
    }

    /// Whether a broken cell fails the comparison.
    pub fn fails_on_broken(&self) -> bool {
        !self.broken.is_empty() && !self.allow_missing
    }

    /// Regression or broken cell (exit 1), all decided (0), or not proven (3).
    pub fn outcome(&self) -> CompareOutcome {
        let verdict_rows = self.rows.iter().filter(|r| r.is_verdict_row());
        if self.has_regression() {
            CompareOutcome::Regression
        } else if self.fails_on_broken() {
            CompareOutcome::Broken
        } else if self.family_size > 0 && verdict_rows.clone().all(|r| r.verdict.is_decided()) {
            CompareOutcome::NoRegression
        } else {
            CompareOutcome::Undecided
        }
    }

    /// The process exit code: 0 no regression shown, 1 regression or broken cell, 3 not proven.
    pub fn exit_code(&self) -> i32 {
        self.outcome().exit_code()
    }

    /// One line saying how the verdicts were reached.
    pub fn method_line(&self) -> String {
        format!(
            "method: Welch's t-test on log values, one value per repeat (per-second samples never \
             decide); {} over {} verdict row(s), alpha {}; no change only when the 95% CI of the \
             change lies inside ±threshold",
            self.correction, self.family_size, self.alpha
        )
    }

    /// `what changed: ...`, or `None` when the system under test did not change.
    pub fn what_changed_line(&self) -> Option<String> {
        let compared: std::collections::BTreeSet<&str> =
            self.rows.iter().map(|r| r.cell_id.as_str()).collect();
        provenance::what_changed_line(&self.what_changed, compared.len())
    }

    /// The last line: counts, and what the exit code means.
    pub fn summary_line(&self) -> String {
        table::summary(self)
    }

    /// A terminal table of every row, regressions marked.
    pub fn table(&self) -> String {
        table::render(self)
    }

    /// JUnit XML: one testcase per cell x metric, a regression is a failure.
    pub fn junit_xml(&self) -> String {
        junit::render(self)
    }
}

pub(crate) mod table;

/// Passed repeats of each cell, by cell id, in first-seen order.
struct Side<'a> {
    order: Vec<&'a str>,
    passed: BTreeMap<&'a str, Vec<&'a CellResult>>,
    /// Why a cell has no passed repeat (its last non-passed outcome).
    why_not: BTreeMap<&'a str, String>,
}

impl<'a> Side<'a> {
    fn new(run: &'a RunRecord) -> Side<'a> {
        let mut s = Side {
            order: vec![],
            passed: BTreeMap::new(),
            why_not: BTreeMap::new(),
        };
        for c in &run.cells {
            let id = c.cell_id.as_str();
            if !s.order.contains(&id) {
                s.order.push(id);
            }
            match &c.outcome {
                Outcome::Passed => s.passed.entry(id).or_default().push(c),
                o => drop(s.why_not.insert(id, o.describe())),
            }
        }
        s
    }
}

/// Compares every cell and metric of `candidate` against `baseline`.
pub fn compare(baseline: &RunRecord, candidate: &RunRecord, opts: &CompareOptions) -> Comparison {
    let (b, c) = (Side::new(baseline), Side::new(candidate));
    let broken = broken_cells(baseline, candidate);
    let is_broken = |id: &str| broken.iter().any(|x| x.cell_id == id);
    let mut out = Comparison {
        what_changed: vec![],
        rows: vec![],
        broken: vec![],
        allow_missing: opts.allow_missing,
        baseline_run: baseline.run_id.clone(),
        candidate_run: candidate.run_id.clone(),
        missing_cells: vec![],
        unpassed_cells: vec![],
        alpha: opts.alpha,
        correction: opts.correction,
        family_size: 0,
        family: FAMILY.to_string(),
        smallest_visible_drop: None,
        outcome: CompareOutcome::Undecided,
        exit_code: CompareOutcome::Undecided.exit_code(),
    };
    for id in &b.order {
        if !c.order.contains(id) {
            if !is_broken(id) {
                out.missing_cells.push(format!("{id} (only in baseline)"));
            }
            continue;
        }
        match (b.passed.get(id), c.passed.get(id)) {
            (Some(br), Some(cr)) => {
                provenance::merge_changes(
                    &mut out.what_changed,
                    provenance::system_changes(&br[0].provenance, &cr[0].provenance),
                );
                out.rows.extend(compare_cell(br, cr, opts));
            }
            (None, _) => out
                .unpassed_cells
                .push(format!("{id}: baseline {}", b.why_not[id])),
            (_, None) if is_broken(id) => {}
            (_, None) => out
                .unpassed_cells
                .push(format!("{id}: candidate {}", c.why_not[id])),
        }
    }
    for id in c.order.iter().filter(|id| !b.order.contains(id)) {
        out.missing_cells.push(format!("{id} (only in candidate)"));
    }
    out.broken = broken;
    out.family_size = decide_family(&mut out.rows, opts);
    out.smallest_visible_drop = smallest_visible_drop(&out.rows);
    out.outcome = out.outcome();
    out.exit_code = out.outcome.exit_code();
    out
}

/// Adjusts the p-values of every tested verdict row together, then decides each of them;
/// returns the family size. Rows within the threshold stay in the family: leaving them out
/// because of their observed change would pick the family from the data.
fn decide_family(rows: &mut [MetricComparison], opts: &CompareOptions) -> usize {
    let family: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.verdict == Verdict::NoSignificantChange && r.p_value.is_some())
        .map(|(i, _)| i)
        .collect();
    let raw: Vec<f64> = family
        .iter()
        .map(|&i| rows[i].p_value.unwrap_or(1.0))
        .collect();
    let adjusted = opts.correction.adjust(&raw);
    // Holm's first step (and Bonferroni): the level the strictest row must pass.
    let level = opts.alpha / family.len().max(1) as f64;
    for (&i, p) in family.iter().zip(adjusted) {
        let r = &mut rows[i];
        r.p_adjusted = Some(p);
        r.smallest_visible_drop_pct = r
            .spread
            .map(|s| visible_drop_pct(&s, level, r.threshold_pct));
        r.verdict = decide(r, p, opts.alpha);
        if let Verdict::Inconclusive(_) = r.verdict {
            r.could_not_rule_out_pct =
                r.change_ci_pct
                    .map(|(lo, hi)| if lo.abs() >= hi.abs() { lo } else { hi });
            r.repeats_needed = r
                .spread
                .and_then(|s| repeats_needed(&s, level, r.threshold_pct));
            let need = match r.repeats_needed {
                Some(k) => format!("about {k} repeats per side would decide it"),
                None => format!("more than {MAX_REPEATS_NEEDED} repeats per side would be needed"),
            };
            let more = format!(
                "n={} vs {} at this spread: {need} (Welch df {:.1})",
                r.n_baseline,
                r.n_candidate,
                r.df.unwrap_or(f64::NAN)
            );
            r.note = Some(join_note(r.note.take(), &more));
        }
    }
    family.len()
}

/// The verdict rules of a tested row, in order: significant (adjusted p under alpha) and beyond
/// the threshold gives the direction; a 95% CI inside +-threshold is no change (equivalence);
/// anything else is inconclusive, with the change the interval could not rule out.
fn decide(r: &MetricComparison, p_adjusted: f64, alpha: f64) -> Verdict {
    let thr = r.threshold_pct;
    if p_adjusted < alpha && r.change_pct.abs() >= thr {
        let rose = r.change_pct > 0.0;
        return match (rose, r.better) {
            (true, Better::Higher) | (false, Better::Lower) => Verdict::Improvement,
            _ => Verdict::Regression,
        };
    }
    let Some((lo, hi)) = r.change_ci_pct else {
        return Verdict::Inconclusive("no confidence interval of the change".into());
    };
    if lo > -thr && hi < thr {
        return Verdict::NoSignificantChange;
    }
    let ci = format!("95% CI [{lo:+.1}%, {hi:+.1}%], threshold ±{thr:.1}%");
    if lo > 0.0 || hi < 0.0 {
        return Verdict::Inconclusive(format!(
            "a change of {:+.1}% ({ci}) is not significant at the adjusted level (adjusted p \
             {p_adjusted:.4}, alpha {alpha})",
            r.change_pct
        ));
    }
    let x = if lo.abs() >= hi.abs() { lo } else { hi };
    Verdict::Inconclusive(format!("could not rule out a change of {x:+.1}% ({ci})"))
}

/// Welch-Satterthwaite degrees of freedom of two sides of `n` values with these variances.
pub(crate) fn welch_df(var_b: f64, var_c: f64, n: usize) -> f64 {
    let (vb, vc) = (var_b / n as f64, var_c / n as f64);
    let nm1 = (n - 1) as f64;
    let denom = vb * vb / nm1 + vc * vc / nm1;
    if denom == 0.0 {
        (2 * n - 2) as f64
    } else {
        (vb + vc).powi(2) / denom
    }
}

/// The half-width of a two-sided `1 - level` interval with `n` repeats per side.
fn half_width(s: &Spread, n: usize, level: f64) -> f64 {
    let se = (s.var_b / n as f64 + s.var_c / n as f64).sqrt();
    stats::student_t_quantile(1.0 - level / 2.0, welch_df(s.var_b, s.var_c, n)) * se
}

/// The fewest repeats per side (up to [`MAX_REPEATS_NEEDED`]) that would decide the row at its
/// observed spread and change: its 95% CI inside the threshold when the change is within it,
/// else the change significant at `level`. Welch's df at that n, never the optimistic n+m-2.
fn repeats_needed(s: &Spread, level: f64, threshold_pct: f64) -> Option<usize> {
    let (lo, hi) = (
        (1.0 - threshold_pct / 100.0).ln(),
        (1.0 + threshold_pct / 100.0).ln(),
    );
    let within = s.diff > lo && s.diff < hi;
    let decided = |n: usize| {
        if within {
            let h = half_width(s, n, 0.05);
            s.diff - h > lo && s.diff + h < hi
        } else {
            half_width(s, n, level) < s.diff.abs()
        }
    };
    (MIN_REPEATS..=MAX_REPEATS_NEEDED).find(|&n| decided(n))
}

/// The smallest drop (percent of the baseline, as a loss) the row would have called a
/// regression: the threshold, or the change whose interval at `level` just excludes 0.
fn visible_drop_pct(s: &Spread, level: f64, threshold_pct: f64) -> f64 {
    let h = s.half_width_observed(level);
    let drop = (1.0 - (-h).exp()) * 100.0;
    drop.max(threshold_pct)
}

impl Spread {
    /// The half-width of the `1 - level` interval at the row's own n and Welch df.
    fn half_width_observed(&self, level: f64) -> f64 {
        stats::student_t_quantile(1.0 - level / 2.0, self.df) * self.se
    }

    /// The smallest true change (on the test's scale) that a two-sided test at `alpha` finds
    /// with probability `power`, at the row's own n and Welch df: (t(1 - alpha/2) + t(power)) x se.
    pub(crate) fn detectable(&self, alpha: f64, power: f64) -> f64 {
        detectable_at(self.se, self.df, alpha, power)
    }

    /// The fewest repeats per side, from `from` up to `max`, at which a change of `effect` (on
    /// the test's scale) is detectable at this spread; `None` when even `max` is not enough.
    pub(crate) fn repeats_to_detect(
        &self,
        effect: f64,
        (alpha, power): (f64, f64),
        from: usize,
        max: usize,
    ) -> Option<usize> {
        let enough = |n: usize| {
            let se = ((self.var_b + self.var_c) / n as f64).sqrt();
            detectable_at(se, welch_df(self.var_b, self.var_c, n), alpha, power) <= effect
        };
        let (mut lo, mut hi) = (from.max(MIN_REPEATS), max);
        if lo > hi || !enough(hi) {
            return None;
        }
        // The detectable change shrinks as n grows: bisect for the first n that is enough.
        while lo < hi {
            let mid = (lo + hi) / 2;
            if enough(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }
}

fn detectable_at(se: f64, df: f64, alpha: f64, power: f64) -> f64 {
    if se == 0.0 {
        return 0.0;
    }
    (stats::student_t_quantile(1.0 - alpha / 2.0, df) + stats::student_t_quantile(power, df)) * se
}

/// The smallest drop every verdict row could have seen: the largest row value.
fn smallest_visible_drop(rows: &[MetricComparison]) -> Option<VisibleDrop> {
    let name = |r: &MetricComparison| {
        format!(
            "{} {} (n={} vs {})",
            r.label, r.key, r.n_baseline, r.n_candidate
        )
    };
    let verdict_rows: Vec<&MetricComparison> = rows.iter().filter(|r| r.is_verdict_row()).collect();
    if let Some(r) = verdict_rows
        .iter()
        .find(|r| r.smallest_visible_drop_pct.is_none() && r.verdict != Verdict::Info)
    {
        if !matches!(r.verdict, Verdict::NotComparable(_)) {
            return Some(VisibleDrop {
                pct: None,
                row: name(r),
            });
        }
    }
    verdict_rows
        .iter()
        .filter_map(|r| Some((r.smallest_visible_drop_pct?, *r)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(pct, r)| VisibleDrop {
            pct: Some(pct),
            row: name(r),
        })
}

/// Earlier runs' spread, per (cell id, metric key): the CV of per-run means over the runs in
/// `history` whose cell has the same provenance as in `reference`; kept when at least
/// [`HISTORY_MIN_RUNS`] runs have the cell.
pub fn history_noise(
    reference: &RunRecord,
    history: &[RunRecord],
) -> BTreeMap<(String, String), HistoryNoise> {
    let refs = Side::new(reference);
    let mut means: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for run in history.iter().filter(|r| r.run_id != reference.run_id) {
        let side = Side::new(run);
        for (id, reps) in &side.passed {
            let Some(ours) = refs.passed.get(id) else {
                continue;
            };
            if provenance_mismatch(&ours[0].provenance, &reps[0].provenance).is_some() {
                continue;
            }
            for key in metric_keys(reps, &[]) {
                if let Some(m) = stats::mean(&values(reps, &key).numbers) {
                    means.entry((id.to_string(), key)).or_default().push(m);
                }
            }
        }
    }
    means
        .into_iter()
        .filter(|(_, v)| v.len() >= HISTORY_MIN_RUNS)
        .filter_map(|(k, v)| {
            let cv = stats::cv_pct(&v)?;
            Some((
                k,
                HistoryNoise {
                    cv_pct: cv,
                    runs: v.len(),
                },
            ))
        })
        .collect()
}

fn compare_cell(
    base: &[&CellResult],
    cand: &[&CellResult],
    opts: &CompareOptions,
) -> Vec<MetricComparison> {
    let mismatch = instrument_mismatch(&base[0].provenance, &cand[0].provenance);
    let (refuse, forced) = match mismatch {
        Some(m) if opts.force => (None, Some(format!("compared despite: {m} (--force)"))),
        Some(m) => (Some(format!("{m}; use --force to compare anyway")), None),
        None => (None, None),
    };
    let family = family_keys(&base[0].cell);
    metric_keys(base, cand)
        .into_iter()
        .map(|key| {
            let mut row = compare_metric(base, cand, &key, family, opts);
            if row.verdict != Verdict::Info {
                if let Some(m) = &refuse {
                    row.verdict = Verdict::NotComparable(m.clone());
                } else if let Some(f) = &forced {
                    row.note = Some(join_note(row.note.take(), f));
                }
            }
            row
        })
        .collect()
}

/// Keys of either side, baseline order first.
fn metric_keys(base: &[&CellResult], cand: &[&CellResult]) -> Vec<String> {
    let mut keys: Vec<String> = vec![];
    for m in base.iter().chain(cand).flat_map(|c| &c.metrics) {
        if !keys.contains(&m.key) {
            keys.push(m.key.clone());
        }
    }
    keys
}

/// One side's values of a metric: one number per repeat, why some repeats had none, and the
/// within-run CV of each repeat's per-second samples.
struct Values {
    numbers: Vec<f64>,
    excluded: Vec<String>,
    within_cvs: Vec<f64>,
}

fn values(side: &[&CellResult], key: &str) -> Values {
    let mut v = Values {
        numbers: vec![],
        excluded: vec![],
        within_cvs: vec![],
    };
    for c in side {
        match c.metric(key).map(|m| &m.value) {
            Some(Value::Number(x)) if x.is_finite() => v.numbers.push(*x),
            Some(Value::TooFast) => v.excluded.push("too fast to measure (+++++)".into()),
            Some(Value::NotAvailable(why)) => v.excluded.push(format!("n/a ({why})")),
            Some(Value::Number(_)) => v.excluded.push("not finite".into()),
            None => {}
        }
        let finite: Vec<f64> = c
            .samples
            .get(key)
            .map(|s| s.iter().copied().filter(|x| x.is_finite()).collect())
            .unwrap_or_default();
        v.within_cvs.extend(stats::cv_pct(&finite));
    }
    v
}

impl Values {
    fn side_stats(&self) -> SideStats {
        SideStats {
            mean: stats::mean(&self.numbers).unwrap_or(f64::NAN),
            n: self.numbers.len(),
            stddev: stats::stddev(&self.numbers),
            cv_pct: stats::cv_pct(&self.numbers),
            within_run_cv_pct: stats::mean(&self.within_cvs),
        }
    }
}

/// The result of a row's test (also `recommend`'s test of two cells).
pub(crate) struct Tested {
    pub(crate) method: Method,
    pub(crate) welch: Option<stats::Welch>,
    /// 95 % CI of the change, in percent.
    pub(crate) ci: Option<(f64, f64)>,
    pub(crate) spread: Option<Spread>,
}

/// The row's test: Welch on ln(value) when every value is positive, else on the values (scaled
/// by the baseline mean, so the spread is in fractions of the baseline either way).
pub(crate) fn test_values(b: &[f64], c: &[f64]) -> Tested {
    let positive = b.iter().chain(c).all(|x| *x > 0.0);
    let mb = stats::mean(b).unwrap_or(f64::NAN).abs();
    let (method, scale): (Method, fn(f64, f64) -> f64) = if positive {
        (Method::WelchLog, |x, _| x.ln())
    } else {
        (Method::WelchRaw, |x, mb| x / mb)
    };
    let to_pct = |d: f64| method.to_pct(d);
    let lb: Vec<f64> = b.iter().map(|x| scale(*x, mb)).collect();
    let lc: Vec<f64> = c.iter().map(|x| scale(*x, mb)).collect();
    let welch = stats::welch(&lb, &lc);
    let ci = welch
        .map(|w| {
            let (lo, hi) = w.ci(0.95);
            (to_pct(lo), to_pct(hi))
        })
        .filter(|(lo, hi)| lo.is_finite() && hi.is_finite());
    let spread = welch.and_then(|w| {
        let s = Spread {
            var_b: stats::stddev(&lb)?.powi(2),
            var_c: stats::stddev(&lc)?.powi(2),
            diff: w.diff,
            se: w.se,
            df: w.df,
        };
        [s.var_b, s.var_c, s.diff, s.se, s.df]
            .iter()
            .all(|v| v.is_finite())
            .then_some(s)
    });
    Tested {
        method,
        welch,
        ci,
        spread,
    }
}

fn compare_metric(
    base: &[&CellResult],
    cand: &[&CellResult],
    key: &str,
    family: Family,
    opts: &CompareOptions,
) -> MetricComparison {
    let meta: &Metric = base
        .iter()
        .chain(cand)
        .find_map(|c| c.metric(key))
        .expect("key from metrics");
    let (bv, cv) = (values(base, key), values(cand, key));
    let mut note = exclusion_note(&bv, &cv);
    if MIX_CHECKS.contains(&key) && opts.extra_verdict_metrics.iter().any(|k| k == key) {
        note = Some(join_note(
            note,
            "a mix check, not a figure of merit: never a verdict",
        ));
    }
    let (bs, cs) = (bv.side_stats(), cv.side_stats());
    let change_pct = (cs.mean - bs.mean) / bs.mean.abs() * 100.0;
    let tested = test_values(&bv.numbers, &cv.numbers);
    let welch = tested.welch;
    let (threshold_pct, threshold_source) = opts.threshold_for(&base[0].cell_id, key);
    let verdict = if !opts.is_verdict_metric(key, family) {
        if family.iter().any(|k| twin(k) == Some(key)) {
            note = Some(join_note(
                note,
                "derived twin of a family fact (same p): information",
            ));
        }
        Verdict::Info
    } else {
        precheck(&bv.numbers, &cv.numbers, change_pct)
    };
    MetricComparison {
        cell_id: base[0].cell_id.clone(),
        label: base[0].cell.label(),
        key: key.into(),
        metric_label: meta.label.clone(),
        unit: meta.unit.clone(),
        better: meta.better,
        baseline_mean: bs.mean,
        candidate_mean: cs.mean,
        baseline: bs,
        candidate: cs,
        change_pct,
        change_ci_pct: tested.ci,
        p_value: welch.map(|w| w.p),
        p_adjusted: None,
        df: welch.map(|w| w.df),
        method: if welch.is_some() {
            tested.method
        } else {
            Method::None
        },
        n_baseline: bs.n,
        n_candidate: cs.n,
        threshold_pct,
        threshold_source,
        verdict,
        could_not_rule_out_pct: None,
        repeats_needed: None,
        smallest_visible_drop_pct: None,
        note,
        spread: tested.spread,
    }
}

/// The derived twin of a throughput fact: the same figure in the other unit.
fn twin(key: &str) -> Option<&'static str> {
    Some(match key {
        "read_iops" => "read_bw_mib_s",
        "write_iops" => "write_bw_mib_s",
        "read_bw_mib_s" => "read_iops",
        "write_bw_mib_s" => "write_iops",
        _ => return None,
    })
}

fn join_note(note: Option<String>, more: &str) -> String {
    match note {
        Some(n) => format!("{n}; {more}"),
        None => more.to_string(),
    }
}

fn exclusion_note(b: &Values, c: &Values) -> Option<String> {
    let part = |side: &str, v: &Values| {
        (!v.excluded.is_empty()).then(|| {
            format!(
                "{side}: {} repeat(s) excluded, {}",
                v.excluded.len(),
                v.excluded[0]
            )
        })
    };
    let parts: Vec<String> = [part("baseline", b), part("candidate", c)]
        .into_iter()
        .flatten()
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// What can be said before the family is adjusted: nothing to compare, too few repeats, or
/// (provisionally, `NoSignificantChange`) a row that goes into the family.
fn precheck(base: &[f64], cand: &[f64], change_pct: f64) -> Verdict {
    if base.is_empty() || cand.is_empty() {
        let side = if base.is_empty() {
            "baseline"
        } else {
            "candidate"
        };
        return Verdict::NotComparable(format!("no measured value in the {side}"));
    }
    if !change_pct.is_finite() {
        return Verdict::NotComparable("baseline mean is 0, no relative change".into());
    }
    if base.len() < MIN_REPEATS || cand.len() < MIN_REPEATS {
        return Verdict::Inconclusive(format!(
            "n={} vs {} repeats cannot reach the adjusted level, need >= {MIN_REPEATS} per side \
             (run with --repeat 8)",
            base.len(),
            cand.len()
        ));
    }
    Verdict::NoSignificantChange
}
