//! Change points over the nightly history, and the gate that decides a night by them.
//!
//! A night is a run. For every cell x headline metric, the series holds one value per night (the
//! mean of that night's passed repeats, with its 95% confidence interval) from the nights whose
//! instrument (`compare::provenance`: fio, bonnie++, guest image and kernel, job definitions)
//! matches the newest night's, so a new fio build starts a new series instead of looking like a
//! change. The system under test (QEMU, libvirt, host kernel, storage server, the disk's cap) may
//! change from night to night: that is what
//! the trend is for, and each change point names what changed in it that night.
//!
//! Change points come from E-Divisive with means (`edivisive.rs`). Nights, not repeats, are the
//! unit of evidence: repeats of one night share its host, filer and background load, so only the
//! night-to-night spread can say whether a level moved.
//!
//! The gate (`gate`) fails tonight when a regression change point beyond the minimum magnitude
//! began within the last K nights, against the nights since the previous change point, or when a
//! cell broke. A change point needs two nights after it (one odd night is an outlier until the
//! next one confirms it), so a drop that starts tonight fails tomorrow's gate at the earliest; one
//! the evidence confirms only later fails the night it is confirmed. A change the previous
//! night's gate already reported (same cell, within two nights) does not fail again.

#![warn(missing_docs)]

pub mod edivisive;
mod html;
mod text;

use crate::compare::broken::{self, BrokenCell};
use crate::compare::provenance;
use crate::compare::stats;
use crate::compare::{is_headline_metric, MIX_CHECKS};
use crate::results::{Better, CellResult, Outcome, Provenance, RunRecord, Value};
use edivisive::{Detector, Found, Significance};
use serde::Serialize;
use std::collections::BTreeMap;

/// Fewest nights in a series before the gate decides on it (three before a change, two after).
pub const MIN_NIGHTS: usize = 5;

/// Fewest nights in any segment between change points.
pub const MIN_SEGMENT: usize = 2;

/// How `trend` and its gate decide.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendOptions {
    /// Significance level of a change point (per series).
    pub alpha: f64,
    /// Smallest change kept, in percent of the mean before it.
    pub min_magnitude_pct: f64,
    /// The gate fails on a regression that began within this many last nights (tonight
    /// included) and that the previous night's gate had not already reported.
    pub within_nights: usize,
    /// Significance test of the candidates.
    pub significance: Significance,
    /// Metric keys given a series besides the headline ones ([`is_headline_metric`]).
    pub extra_metrics: Vec<String>,
}

impl Default for TrendOptions {
    /// Otava's default level (0.001), a 5% minimum change (compare's noise threshold), K = 4.
    fn default() -> Self {
        TrendOptions {
            alpha: 0.001,
            min_magnitude_pct: 5.0,
            within_nights: 4,
            significance: Significance::TTest,
            extra_metrics: vec![],
        }
    }
}

impl TrendOptions {
    fn detector(&self) -> Detector {
        Detector {
            alpha: self.alpha,
            min_magnitude_pct: self.min_magnitude_pct,
            min_size: MIN_SEGMENT,
            significance: self.significance,
        }
    }

    fn is_series_metric(&self, key: &str) -> bool {
        !MIX_CHECKS.contains(&key)
            && (is_headline_metric(key) || self.extra_metrics.iter().any(|k| k == key))
    }

    /// One line saying how change points are found.
    pub fn method_line(&self) -> String {
        format!(
            "method: E-Divisive with means over one value per night (mean of its repeats); {}; \
             alpha {} per series; minimum change {}%; segments of at least {MIN_SEGMENT} nights",
            self.significance.name(),
            self.alpha,
            self.min_magnitude_pct
        )
    }
}

/// A night of the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NightInfo {
    /// Its run id.
    pub run_id: String,
    /// When it started (RFC 3339).
    pub started: String,
}

/// One night's value of a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NightValue {
    /// Index into [`Trend::nights`].
    pub night: usize,
    /// Mean of the night's repeats.
    pub mean: f64,
    /// Repeats with a value.
    pub n: usize,
    /// 95% confidence interval of the night's mean (Student t over its repeats; n >= 2).
    pub ci95: Option<(f64, f64)>,
    /// The night's provenance (of its first passed repeat).
    #[serde(skip)]
    pub provenance: Provenance,
}

/// A run of nights between change points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    /// Nights in it.
    pub nights: usize,
    /// Median of their values: the location a change's direction and size are measured from, as
    /// the t-test's is (one odd night barely moves it).
    pub median: f64,
    /// Mean of their values.
    pub mean: f64,
    /// 95% confidence interval of that mean (Student t over the nights' values).
    pub ci95: Option<(f64, f64)>,
}

/// One field of the system under test that differs across a change point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SutChange {
    /// What, e.g. "qemu version".
    pub what: String,
    /// The last night before.
    pub before: String,
    /// The first night after.
    pub after: String,
}

/// A change point of a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePoint {
    /// Index into the series' points of the first night after the change.
    pub point: usize,
    /// Index into [`Trend::nights`] of that night: the night the change began.
    pub night: usize,
    /// That night's run id.
    pub run_id: String,
    /// That night's start.
    pub started: String,
    /// The nights since the previous change point.
    pub before: Segment,
    /// The nights from this one to the next change point.
    pub after: Segment,
    /// (after - before) / before of the segments' medians, in percent. Not their means: one odd
    /// night tonight (the first of a drop) in a segment after an earlier change moved its mean
    /// across the one before and made an improvement a "regression" (`tests/trend_month.rs`:
    /// `an_improvement_then_one_capped_night_is_not_a_regression`).
    pub change_pct: f64,
    /// Whether the change is for the worse in this metric's direction.
    pub regression: bool,
    /// The p-value of the change (t-test between the two segments, or the permutation p).
    pub p_value: f64,
    /// E-Divisive's energy statistic when it was found.
    pub qhat: f64,
    /// What changed in the system under test that night (empty: nothing recorded changed).
    pub sut_changes: Vec<SutChange>,
}

/// One cell x metric over the nights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Cell id.
    pub cell_id: String,
    /// The cell's short label.
    pub label: String,
    /// Metric key.
    pub key: String,
    /// Metric label.
    pub metric_label: String,
    /// Unit.
    pub unit: String,
    /// Direction.
    pub better: Better,
    /// One value per night the cell passed, oldest first.
    pub points: Vec<NightValue>,
    /// Change points, oldest first.
    pub change_points: Vec<ChangePoint>,
    /// Nights left out and why (another instrument).
    pub left_out: Vec<String>,
}

/// The trend of a whole history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// The nights, oldest first.
    pub nights: Vec<NightInfo>,
    /// One per cell x metric.
    pub series: Vec<Series>,
    /// How change points were found.
    pub method: String,
}

/// What changed in the system under test from night `a` to night `b` (the split of the
/// provenance is `compare::provenance`'s, the one place that says which fields measure).
pub fn sut_changes(a: &Provenance, b: &Provenance) -> Vec<SutChange> {
    provenance::system_changes(a, b)
        .into_iter()
        .map(|c| SutChange {
            what: c.what,
            before: c.baseline,
            after: c.candidate,
        })
        .collect()
}

/// The passed repeats of each cell in one run, by cell id, in first-seen order.
fn passed_by_cell(run: &RunRecord) -> Vec<(&str, Vec<&CellResult>)> {
    let mut out: Vec<(&str, Vec<&CellResult>)> = vec![];
    for c in run.cells.iter().filter(|c| c.outcome == Outcome::Passed) {
        match out.iter_mut().find(|(id, _)| *id == c.cell_id) {
            Some((_, v)) => v.push(c),
            None => out.push((&c.cell_id, vec![c])),
        }
    }
    out
}

fn night_value(night: usize, reps: &[&CellResult], key: &str) -> Option<NightValue> {
    let xs: Vec<f64> = reps
        .iter()
        .filter_map(|c| match c.metric(key).map(|m| &m.value) {
            Some(Value::Number(x)) if x.is_finite() => Some(*x),
            _ => None,
        })
        .collect();
    let mean = stats::mean(&xs)?;
    Some(NightValue {
        night,
        mean,
        n: xs.len(),
        ci95: ci95(&xs),
        provenance: reps[0].provenance.clone(),
    })
}

/// The 95% Student t confidence interval of the mean of `xs` (n >= 2).
fn ci95(xs: &[f64]) -> Option<(f64, f64)> {
    let (m, sd) = (stats::mean(xs)?, stats::stddev(xs)?);
    let half = t975(xs.len() - 1) * sd / (xs.len() as f64).sqrt();
    Some((m - half, m + half))
}

/// Student t's 0.975 quantile for `df` degrees of freedom, computed once per df: a trend takes
/// one per night and segment, and the quantile is a bisection over the incomplete beta.
fn t975(df: usize) -> f64 {
    use std::sync::OnceLock;
    const CACHED: usize = 256;
    static TABLE: OnceLock<Vec<f64>> = OnceLock::new();
    if df >= CACHED {
        return stats::student_t_quantile(0.975, df as f64);
    }
    TABLE.get_or_init(|| {
        (0..CACHED)
            .map(|d| stats::student_t_quantile(0.975, d.max(1) as f64))
            .collect()
    })[df]
}

fn segment(values: &[f64]) -> Segment {
    Segment {
        nights: values.len(),
        median: edivisive::median_of(values),
        mean: stats::mean(values).unwrap_or(f64::NAN),
        ci95: ci95(values),
    }
}

/// The series of every cell x metric in `runs` (oldest first), before detection.
fn collect_series(runs: &[RunRecord], opts: &TrendOptions) -> Vec<Series> {
    // The newest night each cell passed sets its instrument.
    let mut reference: BTreeMap<&str, &Provenance> = BTreeMap::new();
    for run in runs.iter().rev() {
        for (id, reps) in passed_by_cell(run) {
            reference.entry(id).or_insert(&reps[0].provenance);
        }
    }
    let mut series: Vec<Series> = vec![];
    let mut index: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (night, run) in runs.iter().enumerate() {
        for (id, reps) in passed_by_cell(run) {
            let mismatch = provenance::instrument_mismatch(&reps[0].provenance, reference[id]);
            for m in reps.iter().flat_map(|c| &c.metrics) {
                if !opts.is_series_metric(&m.key) {
                    continue;
                }
                let k = (id.to_string(), m.key.clone());
                let i = *index.entry(k).or_insert_with(|| {
                    series.push(Series {
                        cell_id: id.to_string(),
                        label: reps[0].cell.label(),
                        key: m.key.clone(),
                        metric_label: m.label.clone(),
                        unit: m.unit.clone(),
                        better: m.better,
                        points: vec![],
                        change_points: vec![],
                        left_out: vec![],
                    });
                    series.len() - 1
                });
                let s = &mut series[i];
                if s.points.last().is_some_and(|p| p.night == night) {
                    continue;
                }
                if let Some(why) = &mismatch {
                    s.left_out.push(format!("{}: {why}", run.run_id));
                    continue;
                }
                s.points.extend(night_value(night, &reps, &m.key));
            }
        }
    }
    series
}

fn change_point(
    s: &Series,
    values: &[f64],
    found: &[Found],
    i: usize,
    nights: &[NightInfo],
) -> ChangePoint {
    let (before, after) = edivisive::sides(values, found, i);
    let (before, after) = (segment(before), segment(after));
    let point = found[i].index;
    let change_pct = (after.median / before.median - 1.0) * 100.0;
    let regression = match s.better {
        Better::Higher => change_pct < 0.0,
        Better::Lower => change_pct > 0.0,
    };
    let (last, first) = (&s.points[point - 1], &s.points[point]);
    let sut_changes = sut_changes(&last.provenance, &first.provenance);
    let night = first.night;
    ChangePoint {
        point,
        night,
        run_id: nights[night].run_id.clone(),
        started: nights[night].started.clone(),
        before,
        after,
        change_pct,
        regression,
        p_value: found[i].p_value,
        qhat: found[i].qhat,
        sut_changes,
    }
}

/// The newest `max` finished runs of `host` in the store, oldest first: the nights.
pub fn nights_from_store(
    store: &crate::results::store::Store,
    host: &str,
    max: usize,
) -> Result<Vec<RunRecord>, crate::results::store::StoreError> {
    let mut runs: Vec<RunRecord> = store
        .runs()?
        .iter()
        .filter(|r| r.host == host && r.status != "running")
        .take(max)
        .map(|r| store.load_run(&r.run_id))
        .collect::<Result<_, _>>()?;
    runs.reverse();
    Ok(runs)
}

/// The trend of `runs` (oldest first): every cell x metric's nightly series and its change points.
pub fn trend(runs: &[RunRecord], opts: &TrendOptions) -> Trend {
    let nights: Vec<NightInfo> = runs
        .iter()
        .map(|r| NightInfo {
            run_id: r.run_id.clone(),
            started: r.started.clone(),
        })
        .collect();
    let detector = opts.detector();
    let mut series = collect_series(runs, opts);
    for s in &mut series {
        let values: Vec<f64> = s.points.iter().map(|p| p.mean).collect();
        let found = detector.detect(&values);
        s.change_points = (0..found.len())
            .map(|i| change_point(s, &values, &found, i, &nights))
            .collect();
    }
    Trend {
        nights,
        series,
        method: opts.method_line(),
    }
}

/// What the gate's exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOutcome {
    /// Exit 0: every series with enough nights was checked, no new regression, nothing broke.
    Pass,
    /// Exit 1: a new regression change point, or a cell broke.
    Fail,
    /// Exit 3: no series has enough nights yet.
    NotEnoughNights,
}

impl GateOutcome {
    /// The process exit code (as `compare`'s: 0, 1, 3).
    pub fn exit_code(self) -> i32 {
        match self {
            GateOutcome::Pass => 0,
            GateOutcome::Fail => 1,
            GateOutcome::NotEnoughNights => 3,
        }
    }
}

/// A change point the gate looked at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Cell id.
    pub cell_id: String,
    /// Cell label.
    pub label: String,
    /// Metric key.
    pub key: String,
    /// The change point.
    pub change: ChangePoint,
}

/// Tonight's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateReport {
    /// Tonight.
    pub tonight: NightInfo,
    /// The verdict.
    pub outcome: GateOutcome,
    /// New regressions that start within the last K nights: they fail tonight.
    pub regressions: Vec<Finding>,
    /// Regressions within the last K nights that the previous night already reported.
    pub already_reported: Vec<Finding>,
    /// Improvements that start within the last K nights (never fail).
    pub improvements: Vec<Finding>,
    /// Cells that broke tonight against the previous night.
    pub broken: Vec<BrokenCell>,
    /// Series with enough nights to decide.
    pub decided_series: usize,
    /// Series tonight with fewer than [`MIN_NIGHTS`] nights.
    pub too_short: usize,
    /// K.
    pub within_nights: usize,
}

/// Change points of series that have tonight (the last night) as their last point and start
/// within the last `k` of their points.
fn recent(t: &Trend, k: usize) -> (Vec<Finding>, usize, usize) {
    let last = t.nights.len().saturating_sub(1);
    let (mut out, mut decided, mut short) = (vec![], 0, 0);
    for s in t
        .series
        .iter()
        .filter(|s| s.points.last().is_some_and(|p| p.night == last))
    {
        if s.points.len() < MIN_NIGHTS {
            short += 1;
            continue;
        }
        decided += 1;
        let from = s.points.len().saturating_sub(k);
        out.extend(
            s.change_points
                .iter()
                .filter(|c| c.point >= from)
                .map(|c| Finding {
                    cell_id: s.cell_id.clone(),
                    label: s.label.clone(),
                    key: s.key.clone(),
                    change: c.clone(),
                }),
        );
    }
    (out, decided, short)
}

/// Cells that broke tonight against the previous night (`compare::broken`'s definition: passed
/// then, failed, missing, unsupported or skipped now).
pub fn broken_cells(runs: &[RunRecord]) -> Vec<BrokenCell> {
    match runs {
        [.., last_night, tonight] => broken::broken_cells(last_night, tonight),
        _ => vec![],
    }
}

/// Level of the gate's two checks on a recent regression (the F-test of its nights' spread).
const CONSISTENCY_ALPHA: f64 = 0.01;

/// Whether a recent regression fails the gate: its p, Bonferroni-adjusted over the `m` series the
/// gate decides on, is under alpha; and the nights since it are no more spread than the nights
/// before it (variance-ratio F-test at [`CONSISTENCY_ALPHA`] against the before segment's robust
/// spread): a level shift moves every night, an odd night next to a normal one is an outlier.
fn confirmed(t: &Trend, f: &Finding, alpha: f64, m: usize) -> bool {
    if f.change.p_value * m.max(1) as f64 > alpha {
        return false;
    }
    let Some(s) = t
        .series
        .iter()
        .find(|s| s.cell_id == f.cell_id && s.key == f.key)
    else {
        return false;
    };
    let start = s
        .change_points
        .iter()
        .map(|c| c.point)
        .filter(|&p| p < f.change.point)
        .max()
        .unwrap_or(0);
    let values = |r: std::ops::Range<usize>| s.points[r].iter().map(|p| p.mean).collect::<Vec<_>>();
    let before = values(start..f.change.point);
    let after = values(f.change.point..s.points.len());
    let (Some(sa), sb) = (stats::stddev(&after), edivisive::robust_sd(&before)) else {
        return true;
    };
    if sb == 0.0 {
        return sa == 0.0;
    }
    let (d1, d2) = ((after.len() - 1) as f64, (before.len() - 1) as f64);
    let ratio = (sa / sb).powi(2);
    let p = stats::regularized_incomplete_beta(d2 / (d2 + d1 * ratio), d2 / 2.0, d1 / 2.0);
    p >= CONSISTENCY_ALPHA
}

/// The gate on the last of `runs` (oldest first): the trend of all of them and tonight's verdict.
pub fn gate(runs: &[RunRecord], opts: &TrendOptions) -> (Trend, Option<GateReport>) {
    let t = trend(runs, opts);
    let Some(tonight) = t.nights.last().cloned() else {
        return (t, None);
    };
    let k = opts.within_nights.max(1);
    let (found, decided, short) = recent(&t, k);
    // What the previous night's gate saw: a change it already reported is not new.
    let yesterday = if runs.len() > 1 {
        let y = trend(&runs[..runs.len() - 1], opts);
        let found = recent(&y, k).0;
        found
            .into_iter()
            .filter(|f| f.change.regression && confirmed(&y, f, opts.alpha, recent(&y, k).1))
            .collect()
    } else {
        vec![]
    };
    // One change of a cell shows in several of its metrics, not always on the same night, and
    // found again it may have moved by a night or two: the cell is the unit reported.
    let known = |f: &Finding| {
        yesterday.iter().any(|y| {
            y.cell_id == f.cell_id && y.change.night.abs_diff(f.change.night) <= MIN_SEGMENT
        })
    };
    let (mut regressions, mut already, mut improvements) = (vec![], vec![], vec![]);
    for f in found {
        if !f.change.regression {
            improvements.push(f);
        } else if !confirmed(&t, &f, opts.alpha, decided) {
            continue;
        } else if known(&f) {
            already.push(f);
        } else {
            regressions.push(f);
        }
    }
    let broken = broken_cells(runs);
    let outcome = if !regressions.is_empty() || !broken.is_empty() {
        GateOutcome::Fail
    } else if decided == 0 {
        GateOutcome::NotEnoughNights
    } else {
        GateOutcome::Pass
    };
    let report = GateReport {
        tonight,
        outcome,
        regressions,
        already_reported: already,
        improvements,
        broken,
        decided_series: decided,
        too_short: short,
        within_nights: k,
    };
    (t, Some(report))
}

impl Trend {
    /// Terminal text: every series with its change points.
    pub fn text(&self) -> String {
        text::trend(self)
    }

    /// One self-contained HTML page: each series as a chart with per-night CIs, change points
    /// and system changes.
    pub fn html(&self, gate: Option<&GateReport>) -> String {
        html::page(self, gate)
    }
}

impl GateReport {
    /// Terminal text of the verdict.
    pub fn text(&self) -> String {
        text::gate(self)
    }
}
