//! A/B regression verdicts between two runs, in the manner of Firecracker's A/B tests: for every
//! cell and metric, the repeats (or, with too few repeats, the per-second samples) of a baseline
//! and a candidate run are compared with a permutation test, and a change counts only when it is
//! both larger than the noise threshold and statistically significant.
//!
//! `junit.rs` writes the verdicts as JUnit XML for CI; `recommend.rs` ranks the cells of one run.

#![warn(missing_docs)]

mod junit;
pub mod recommend;
pub mod stats;

use crate::results::{Better, CellResult, Metric, Outcome, Provenance, RunRecord, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// How `compare` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    /// Changes smaller than this, in percent of the baseline mean, are noise.
    pub noise_threshold_pct: f64,
    /// Per metric key overrides of `noise_threshold_pct` (e.g. latency tails are noisier).
    pub per_metric_threshold: BTreeMap<String, f64>,
    /// Significance level of the permutation test.
    pub alpha: f64,
    /// Random relabellings when the exact test would need more.
    pub permutations: usize,
    /// RNG seed, so the same inputs always give the same verdicts.
    pub seed: u64,
    /// Compare even when provenance (fio, image, QEMU, host, CPU, guest kernel) differs.
    pub force: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            noise_threshold_pct: 5.0,
            per_metric_threshold: BTreeMap::new(),
            alpha: 0.05,
            permutations: 10_000,
            seed: 0x0076_6d62_656e_6368, // "vmbench"
            force: false,
        }
    }
}

impl CompareOptions {
    /// The noise threshold that applies to a metric key.
    pub fn threshold(&self, key: &str) -> f64 {
        self.per_metric_threshold
            .get(key)
            .copied()
            .unwrap_or(self.noise_threshold_pct)
    }
}

/// What a metric's change amounts to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly better, beyond the threshold.
    Improvement,
    /// Significantly worse, beyond the threshold.
    Regression,
    /// Within the threshold, or not significant.
    NoSignificantChange,
    /// Not significant, and the spread is so wide that a change of the threshold's size could not
    /// have been seen: more repeats or a quieter host are needed.
    VarianceTooLarge,
    /// The two sides cannot be compared; the reason names why.
    NotComparable(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Improvement => f.write_str("improvement"),
            Verdict::Regression => f.write_str("REGRESSION"),
            Verdict::NoSignificantChange => f.write_str("no significant change"),
            Verdict::VarianceTooLarge => f.write_str("variance too large"),
            Verdict::NotComparable(why) => write!(f, "not comparable: {why}"),
        }
    }
}

/// Which values were tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleSource {
    /// One value per repeat.
    Repeats,
    /// The per-second samples of all repeats (used when the repeats are too few for the test to
    /// reach alpha; seconds are correlated, so read such p-values as optimistic).
    PerSecond,
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
    /// (candidate - baseline) / |baseline|, in percent (NaN when undefined).
    pub change_pct: f64,
    /// Permutation-test p-value, when a test was possible.
    pub p_value: Option<f64>,
    /// Values on the baseline side.
    pub n_baseline: usize,
    /// Values on the candidate side.
    pub n_candidate: usize,
    /// Which values were tested.
    pub source: SampleSource,
    /// The verdict.
    pub verdict: Verdict,
    /// What a reader should know, e.g. repeats left out as too fast to measure.
    pub note: Option<String>,
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
}

impl Comparison {
    /// Whether any metric regressed.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Regression)
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
    out
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
        .map(|m| format!("{m}; use force to compare anyway"));
    metric_keys(base, cand)
        .into_iter()
        .map(|key| {
            let mut row = compare_metric(base, cand, &key, opts);
            if let Some(m) = &mismatch {
                row.verdict = Verdict::NotComparable(m.clone());
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

/// One side's values of a metric: the numbers, how many repeats had a non-number, and the
/// per-second samples when every repeat has them.
struct Values {
    numbers: Vec<f64>,
    excluded: Vec<String>,
    samples: Option<Vec<f64>>,
}

fn values(side: &[&CellResult], key: &str) -> Values {
    let mut v = Values {
        numbers: vec![],
        excluded: vec![],
        samples: Some(vec![]),
    };
    for c in side {
        match c.metric(key).map(|m| &m.value) {
            Some(Value::Number(x)) if x.is_finite() => v.numbers.push(*x),
            Some(Value::TooFast) => v.excluded.push("too fast to measure (+++++)".into()),
            Some(Value::NotAvailable(why)) => v.excluded.push(format!("n/a ({why})")),
            Some(Value::Number(_)) => v.excluded.push("not finite".into()),
            None => {}
        }
        match (c.samples.get(key), v.samples.as_mut()) {
            (Some(s), Some(all)) if !s.is_empty() => all.extend(s.iter().filter(|x| x.is_finite())),
            _ => v.samples = None,
        }
    }
    v
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
    let note = exclusion_note(&bv, &cv);
    let use_samples = stats::min_p_value(bv.numbers.len(), cv.numbers.len()) >= opts.alpha
        && bv.samples.as_ref().is_some_and(|s| s.len() >= 2)
        && cv.samples.as_ref().is_some_and(|s| s.len() >= 2);
    let (source, bs, cs) = if use_samples {
        (
            SampleSource::PerSecond,
            bv.samples.unwrap(),
            cv.samples.unwrap(),
        )
    } else {
        (SampleSource::Repeats, bv.numbers, cv.numbers)
    };
    let (bm, cm) = (
        stats::mean(&bs).unwrap_or(f64::NAN),
        stats::mean(&cs).unwrap_or(f64::NAN),
    );
    let change_pct = (cm - bm) / bm.abs() * 100.0;
    let p_value = stats::permutation_p_value(&bs, &cs, opts.permutations, opts.seed);
    let verdict = decide(
        meta.better,
        &bs,
        &cs,
        change_pct,
        p_value,
        opts.threshold(key),
        opts.alpha,
    );
    MetricComparison {
        cell_id: base[0].cell_id.clone(),
        label: base[0].cell.label(),
        key: key.into(),
        metric_label: meta.label.clone(),
        unit: meta.unit.clone(),
        better: meta.better,
        baseline_mean: bm,
        candidate_mean: cm,
        change_pct,
        p_value,
        n_baseline: bs.len(),
        n_candidate: cs.len(),
        source,
        verdict,
        note,
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

/// The verdict rules, in order: nothing to test; within the noise threshold; not significant
/// (split by whether the spread could hide a threshold-sized change); else the direction.
fn decide(
    better: Better,
    base: &[f64],
    cand: &[f64],
    change_pct: f64,
    p: Option<f64>,
    threshold: f64,
    alpha: f64,
) -> Verdict {
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
    if change_pct.abs() < threshold {
        return Verdict::NoSignificantChange;
    }
    let floor = stats::min_p_value(base.len(), cand.len());
    let Some(p) = p.filter(|_| floor < alpha) else {
        return Verdict::NotComparable(format!(
            "{} baseline and {} candidate value(s) cannot reach p < {alpha} (smallest possible \
             p is {floor:.2}) and there are no per-second samples: run more repeats",
            base.len(),
            cand.len()
        ));
    };
    if p >= alpha {
        let noisy = |xs: &[f64]| stats::cv_pct(xs).is_some_and(|cv| cv > 2.0 * threshold);
        return if noisy(base) || noisy(cand) {
            Verdict::VarianceTooLarge
        } else {
            Verdict::NoSignificantChange
        };
    }
    let rose = change_pct > 0.0;
    match (rose, better) {
        (true, Better::Higher) | (false, Better::Lower) => Verdict::Improvement,
        _ => Verdict::Regression,
    }
}
