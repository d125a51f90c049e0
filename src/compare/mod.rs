//! A/B regression verdicts between two runs. The unit of evidence is a repeat (a fresh boot and
//! a fresh disk): for every cell and headline metric, one value per repeat on each side goes into
//! Welch's t-test on log values, the p-values of all verdict rows of the comparison are adjusted
//! together (Holm-Bonferroni by default), and a change counts only when its adjusted p is under
//! alpha and it is larger than the noise threshold. Per-second samples never decide: they share
//! one boot, one disk and one host state, so run-to-run variance would be missing from the null
//! hypothesis; they are shown as within-run CV, a stability diagnostic.
//!
//! `junit.rs` writes the verdicts as JUnit XML for CI; `recommend.rs` ranks the cells of one run.

#![warn(missing_docs)]

mod junit;
pub mod recommend;
pub mod stats;

pub use stats::Correction;

use crate::results::{Better, CellResult, Metric, Outcome, Provenance, RunRecord, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Metric keys that get a verdict by default: the figures a storage change shows in first.
pub const HEADLINE_METRICS: [&str; 11] = [
    "read_iops",
    "write_iops",
    "read_bw_mib_s",
    "write_bw_mib_s",
    "read_lat_mean_us",
    "write_lat_mean_us",
    "read_lat_p99_us",
    "write_lat_p99_us",
    "seq_out_block_kps",
    "seq_in_block_kps",
    "random_seeks_ps",
];

/// Metric keys that check the workload's mix rather than measure merit: never a verdict.
pub const MIX_CHECKS: [&str; 1] = ["read_share_pct"];

/// The smallest number of repeats per side the t-test needs (a spread needs two values).
pub const MIN_REPEATS: usize = 2;

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
    /// Metric keys given a verdict besides [`HEADLINE_METRICS`] (`--metric`).
    pub extra_verdict_metrics: Vec<String>,
    /// Run-to-run noise seen in earlier runs, by (cell id, metric key) (`--noise-from-history`).
    pub history_noise: BTreeMap<(String, String), HistoryNoise>,
    /// Compare even when provenance (fio, image, QEMU, host, CPU, guest kernel) differs.
    pub force: bool,
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

    fn is_verdict_metric(&self, key: &str) -> bool {
        !MIX_CHECKS.contains(&key)
            && (HEADLINE_METRICS.contains(&key)
                || self.extra_verdict_metrics.iter().any(|k| k == key))
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
    /// Within the threshold, or not significant with a spread that would have shown a
    /// threshold-sized change.
    NoSignificantChange,
    /// Not significant, and the spread is so wide that a change of the threshold's size could not
    /// have been seen: more repeats or a quieter host are needed.
    VarianceTooLarge,
    /// Too few repeats for the test to decide; the reason says how many are needed.
    Inconclusive(String),
    /// Shown for information, without a verdict (not a headline metric, or a mix check).
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
            Verdict::NoSignificantChange => f.write_str("no significant change"),
            Verdict::VarianceTooLarge => f.write_str("inconclusive: variance too large"),
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
    /// What a reader should know, e.g. repeats left out as too fast to measure.
    pub note: Option<String>,
}

impl MetricComparison {
    /// Whether the row is one of the family that decides (not information).
    pub fn is_verdict_row(&self) -> bool {
        self.verdict != Verdict::Info
    }
}

/// The verdicts of a whole A/B comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// One row per cell x metric present in both runs.
    pub rows: Vec<MetricComparison>,
    /// Baseline run id.
    pub baseline_run: String,
    /// Candidate run id.
    pub candidate_run: String,
    /// Cells in only one run, as "`cell-id` (only in baseline|candidate)".
    pub missing_cells: Vec<String>,
    /// Cells in both runs without a passed repeat on one side, with why.
    pub unpassed_cells: Vec<String>,
    /// Family-wise significance level.
    pub alpha: f64,
    /// The multiple-comparison adjustment used.
    pub correction: Correction,
    /// Verdict rows whose p-values were adjusted together.
    pub family_size: usize,
}

/// What `compare`'s exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOutcome {
    /// Exit 0: some verdict rows decided, none a regression.
    NoRegression,
    /// Exit 1: at least one significant regression.
    Regression,
    /// Exit 3: no verdict row could decide (all inconclusive or not comparable, or none).
    Undecided,
}

impl CompareOutcome {
    /// The process exit code.
    pub fn exit_code(self) -> i32 {
        match self {
            CompareOutcome::NoRegression => 0,
            CompareOutcome::Regression => 1,
            CompareOutcome::Undecided => 3,
        }
    }
}

impl Comparison {
    /// Whether any metric regressed.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Regression)
    }

    /// Regression, no regression, or nothing decided.
    pub fn outcome(&self) -> CompareOutcome {
        if self.has_regression() {
            CompareOutcome::Regression
        } else if self.rows.iter().any(|r| r.verdict.is_decided()) {
            CompareOutcome::NoRegression
        } else {
            CompareOutcome::Undecided
        }
    }

    /// The process exit code: 0 no regression, 1 regression, 3 nothing decided.
    pub fn exit_code(&self) -> i32 {
        self.outcome().exit_code()
    }

    /// One line saying how the verdicts were reached.
    pub fn method_line(&self) -> String {
        format!(
            "method: Welch's t-test on log values, one value per repeat (per-second samples never \
             decide); {} over {} verdict row(s), alpha {}",
            self.correction, self.family_size, self.alpha
        )
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

mod table;

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
                Outcome::Failed(r) => drop(s.why_not.insert(id, format!("failed: {r}"))),
                Outcome::Unsupported(r) => drop(s.why_not.insert(id, format!("unsupported: {r}"))),
                Outcome::Skipped(r) => drop(s.why_not.insert(id, format!("skipped: {r}"))),
            }
        }
        s
    }
}

/// Compares every cell and metric of `candidate` against `baseline`.
pub fn compare(baseline: &RunRecord, candidate: &RunRecord, opts: &CompareOptions) -> Comparison {
    let (b, c) = (Side::new(baseline), Side::new(candidate));
    let mut out = Comparison {
        rows: vec![],
        baseline_run: baseline.run_id.clone(),
        candidate_run: candidate.run_id.clone(),
        missing_cells: vec![],
        unpassed_cells: vec![],
        alpha: opts.alpha,
        correction: opts.correction,
        family_size: 0,
    };
    for id in &b.order {
        if !c.order.contains(id) {
            out.missing_cells.push(format!("{id} (only in baseline)"));
            continue;
        }
        match (b.passed.get(id), c.passed.get(id)) {
            (Some(br), Some(cr)) => out.rows.extend(compare_cell(br, cr, opts)),
            (None, _) => out
                .unpassed_cells
                .push(format!("{id}: baseline {}", b.why_not[id])),
            (_, None) => out
                .unpassed_cells
                .push(format!("{id}: candidate {}", c.why_not[id])),
        }
    }
    for id in c.order.iter().filter(|id| !b.order.contains(id)) {
        out.missing_cells.push(format!("{id} (only in candidate)"));
    }
    out.family_size = decide_family(&mut out.rows, opts);
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
    for (&i, p) in family.iter().zip(adjusted) {
        rows[i].p_adjusted = Some(p);
        rows[i].verdict = decide(&rows[i], p, opts.alpha, family.len());
        if rows[i].verdict == Verdict::VarianceTooLarge {
            let level = opts.alpha / family.len().max(1) as f64;
            let need = repeats_needed(&rows[i], level)
                .map_or_else(|| "more than 50".to_string(), |k| format!(">= {k}"));
            let more = format!(
                "n={} vs {} repeats at this spread cannot show a {:.1}% change at the adjusted \
                 level, need {need} per side",
                rows[i].n_baseline, rows[i].n_candidate, rows[i].threshold_pct
            );
            rows[i].note = Some(join_note(rows[i].note.take(), &more));
        }
    }
    family.len()
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

/// The provenance fields that change benchmark figures, by the name a user sees.
fn provenance_fields(p: &Provenance) -> [(&'static str, &str); 7] {
    [
        ("fio version", &p.fio),
        ("bonnie++ version", &p.bonnie),
        ("guest image", &p.image),
        ("qemu version", &p.qemu),
        ("host", &p.host),
        ("host CPU model", &p.cpu_model),
        ("guest kernel", &p.guest_kernel),
    ]
}

/// Why two provenances are not comparable, or `None` when they are.
pub fn provenance_mismatch(a: &Provenance, b: &Provenance) -> Option<String> {
    let diffs: Vec<String> = provenance_fields(a)
        .iter()
        .zip(provenance_fields(b))
        .filter(|((_, x), (_, y))| x != y)
        .map(|((name, x), (_, y))| format!("{name} differs ('{x}' vs '{y}')"))
        .collect();
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

fn compare_cell(
    base: &[&CellResult],
    cand: &[&CellResult],
    opts: &CompareOptions,
) -> Vec<MetricComparison> {
    let mismatch = provenance_mismatch(&base[0].provenance, &cand[0].provenance)
        .filter(|_| !opts.force)
        .map(|m| format!("{m}; use --force to compare anyway"));
    metric_keys(base, cand)
        .into_iter()
        .map(|key| {
            let mut row = compare_metric(base, cand, &key, opts);
            if let Some(m) = &mismatch {
                if row.verdict != Verdict::Info {
                    row.verdict = Verdict::NotComparable(m.clone());
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

/// The row's test: Welch on ln(value) when every value is positive, else on the values.
/// Returns the method, the test, and the 95 % CI of the change in percent.
fn test_values(b: &[f64], c: &[f64]) -> (Method, Option<stats::Welch>, Option<(f64, f64)>) {
    let positive = b.iter().chain(c).all(|x| *x > 0.0);
    if positive {
        let (lb, lc): (Vec<f64>, Vec<f64>) = (
            b.iter().map(|x| x.ln()).collect(),
            c.iter().map(|x| x.ln()).collect(),
        );
        let w = stats::welch(&lb, &lc);
        let ci = w.map(|w| {
            let (lo, hi) = w.ci(0.95);
            ((lo.exp() - 1.0) * 100.0, (hi.exp() - 1.0) * 100.0)
        });
        (
            Method::WelchLog,
            w,
            ci.filter(|(lo, hi)| lo.is_finite() && hi.is_finite()),
        )
    } else {
        let w = stats::welch(b, c);
        let mb = stats::mean(b).unwrap_or(f64::NAN);
        let ci = w
            .map(|w| {
                let (lo, hi) = w.ci(0.95);
                (lo / mb.abs() * 100.0, hi / mb.abs() * 100.0)
            })
            .filter(|(lo, hi)| lo.is_finite() && hi.is_finite());
        (Method::WelchRaw, w, ci)
    }
}

fn compare_metric(
    base: &[&CellResult],
    cand: &[&CellResult],
    key: &str,
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
    let (method, welch, change_ci_pct) = test_values(&bv.numbers, &cv.numbers);
    let (threshold_pct, threshold_source) = opts.threshold_for(&base[0].cell_id, key);
    let verdict = if !opts.is_verdict_metric(key) {
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
        change_ci_pct,
        p_value: welch.map(|w| w.p),
        p_adjusted: None,
        method: if welch.is_some() {
            method
        } else {
            Method::None
        },
        n_baseline: bs.n,
        n_candidate: cs.n,
        threshold_pct,
        threshold_source,
        verdict,
        note,
    }
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
             (run with --repeat 5)",
            base.len(),
            cand.len()
        ));
    }
    Verdict::NoSignificantChange
}

/// The verdict rules of a tested row, in order: significant (adjusted p under alpha) and beyond
/// the threshold gives the direction; within the threshold is no change; otherwise the spread
/// decides whether a threshold-sized change could have been seen at all.
fn decide(r: &MetricComparison, p_adjusted: f64, alpha: f64, family: usize) -> Verdict {
    if r.change_pct.abs() < r.threshold_pct {
        return Verdict::NoSignificantChange;
    }
    if p_adjusted < alpha {
        let rose = r.change_pct > 0.0;
        return match (rose, r.better) {
            (true, Better::Higher) | (false, Better::Lower) => Verdict::Improvement,
            _ => Verdict::Regression,
        };
    }
    if could_see_threshold(r, alpha / family.max(1) as f64) {
        Verdict::NoSignificantChange
    } else {
        Verdict::VarianceTooLarge
    }
}

/// Whether a change of the threshold's size, at the row's spread and n, would pass the
/// strictest per-row level of the family (Bonferroni's alpha / m, Holm's first step).
fn could_see_threshold(r: &MetricComparison, level: f64) -> bool {
    visible_at(r, r.n_baseline, r.n_candidate, level)
}

/// [`could_see_threshold`] with `nb` and `nc` repeats at the row's observed CVs.
fn visible_at(r: &MetricComparison, nb: usize, nc: usize, level: f64) -> bool {
    let (Some(cb), Some(cc)) = (r.baseline.cv_pct, r.candidate.cv_pct) else {
        return false;
    };
    // On the log scale a CV of c% is about a standard deviation of c/100.
    let se = ((cb / 100.0).powi(2) / nb as f64 + (cc / 100.0).powi(2) / nc as f64).sqrt();
    let df = (nb + nc - 2) as f64;
    let t_crit = stats::student_t_quantile(1.0 - level / 2.0, df);
    t_crit * se < (1.0 + r.threshold_pct / 100.0).ln()
}

/// The fewest repeats per side (up to 50) at which a threshold-sized change would show.
fn repeats_needed(r: &MetricComparison, level: f64) -> Option<usize> {
    const MAX: usize = 50;
    if !visible_at(r, MAX, MAX, level) {
        return None;
    }
    // Visibility only grows with n: bisect for the first n that shows the change.
    let (mut lo, mut hi) = (MIN_REPEATS, MAX);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if visible_at(r, mid, mid, level) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}
