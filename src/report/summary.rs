//! Aggregation over the repeats of a cell: mean, sample standard deviation, n, min, max.
//! bonnie++'s `+++++` (too fast) is never averaged: a cell whose repeats are all too fast stays
//! too fast; with a mix, the numbers of the measured repeats are summarised and flagged.

use crate::results::{Better, CellResult, Outcome, Value};

/// Statistics of a set of numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// How many.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1); `None` for one value.
    pub stddev: Option<f64>,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// Half-width of the two-sided 95% confidence interval of the mean (Student's t with n - 1
    /// degrees of freedom); `None` for one value.
    pub fn ci95_half(&self) -> Option<f64> {
        let sd = self.stddev?;
        Some(t975(self.n - 1) * sd / (self.n as f64).sqrt())
    }

    /// Sample standard deviation as a percentage of the mean; `None` for one value or a zero
    /// mean.
    pub fn rel_sd_pct(&self) -> Option<f64> {
        let sd = self.stddev?;
        (self.mean != 0.0).then(|| sd / self.mean.abs() * 100.0)
    }
}

/// Student's t 0.975 quantile: exact table to 30 degrees of freedom, then the Cornish-Fisher
/// expansion around the normal quantile (within 0.001 of the exact value from 30 on).
pub fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df - 1],
        _ => {
            let z: f64 = 1.959_964;
            let d = df as f64;
            z + (z.powi(3) + z) / (4.0 * d)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
        }
    }
}

/// The numbers of a metric over the repeats (bonnie++'s `+++++` and an n/a have none).
pub fn metric_numbers(results: &[&CellResult], key: &str) -> Vec<f64> {
    results
        .iter()
        .filter_map(|r| r.metric(key).and_then(|m| m.value.number()))
        .collect()
}

/// Mean, sample stddev, min, max of `values`; `None` when empty.
pub fn stats(values: &[f64]) -> Option<Stats> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let stddev = (n > 1).then(|| {
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Stats {
        n,
        mean,
        stddev,
        min,
        max,
    })
}

/// One metric of one cell over its passed repeats.
#[derive(Debug, Clone, PartialEq)]
pub enum Agg {
    /// Numbers; `too_fast` repeats were `+++++` and are not in the statistics.
    Numbers {
        /// Statistics of the numeric repeats.
        stats: Stats,
        /// Repeats that were too fast to measure.
        too_fast: usize,
    },
    /// Every repeat was too fast to measure.
    TooFast {
        /// Repeats.
        n: usize,
    },
    /// Not available, with the (first) reason.
    NotAvailable(String),
    /// No passed repeat has this metric.
    Missing,
}

/// The repeats of one cell, in run order.
#[derive(Debug, Clone)]
pub struct CellGroup<'a> {
    /// `cell.id()`.
    pub cell_id: String,
    /// `cell.label()`.
    pub label: String,
    /// Every repeat, passed or not.
    pub repeats: Vec<&'a CellResult>,
}

impl<'a> CellGroup<'a> {
    /// Repeats that passed.
    pub fn passed(&self) -> impl Iterator<Item = &'a CellResult> + '_ {
        self.repeats
            .iter()
            .copied()
            .filter(|r| r.outcome == Outcome::Passed)
    }

    /// The metric `key` aggregated over passed repeats.
    pub fn agg(&self, key: &str) -> Agg {
        let mut nums = Vec::new();
        let mut too_fast = 0;
        let mut na = None;
        for m in self.passed().filter_map(|r| r.metric(key)) {
            match &m.value {
                Value::Number(v) => nums.push(*v),
                Value::TooFast => too_fast += 1,
                Value::NotAvailable(why) => na = na.or(Some(why.clone())),
            }
        }
        match (stats(&nums), too_fast, na) {
            (Some(stats), _, _) => Agg::Numbers { stats, too_fast },
            (None, n, _) if n > 0 => Agg::TooFast { n },
            (None, _, Some(why)) => Agg::NotAvailable(why),
            _ => Agg::Missing,
        }
    }

    /// One line on how the cell ended: `passed`, `passed x3`, `failed: REASON`,
    /// `2/3 passed; failed: REASON`, `unsupported: REASON`, `skipped: REASON`.
    pub fn outcome(&self) -> String {
        let n = self.repeats.len();
        let ok = self.passed().count();
        let bad = self
            .repeats
            .iter()
            .find(|r| r.outcome != Outcome::Passed)
            .map(|r| r.outcome.describe());
        match (ok, bad) {
            (_, None) if n == 1 => "passed".into(),
            (_, None) => format!("passed x{n}"),
            (0, Some(b)) => b,
            (ok, Some(b)) => format!("{ok}/{n} passed; {b}"),
        }
    }

    /// A short word for metric cells of a cell without passed repeats.
    pub fn status_word(&self) -> Option<&'static str> {
        if self.passed().next().is_some() {
            return None;
        }
        self.repeats.first().map(|r| match r.outcome {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "(failed)",
            Outcome::Unsupported(_) => "(unsupported)",
            Outcome::Skipped(_) => "(skipped)",
        })
    }
}

/// Groups results by cell id, in order of first appearance.
pub fn group_by_cell(results: &[CellResult]) -> Vec<CellGroup<'_>> {
    let mut groups: Vec<CellGroup<'_>> = Vec::new();
    for r in results {
        match groups.iter_mut().find(|g| g.cell_id == r.cell_id) {
            Some(g) => g.repeats.push(r),
            None => groups.push(CellGroup {
                cell_id: r.cell_id.clone(),
                label: r.cell.label(),
                repeats: vec![r],
            }),
        }
    }
    groups
}

/// Titles for groups: the cell label, plus the workload when the groups mix workloads (the
/// label leaves the workload out, so two workloads of one cell would look alike).
pub fn column_titles(groups: &[CellGroup<'_>]) -> Vec<String> {
    let first = groups.first().map(|g| &g.repeats[0].cell.workload);
    let mixed = groups
        .iter()
        .any(|g| Some(&g.repeats[0].cell.workload) != first);
    groups
        .iter()
        .map(|g| {
            if mixed {
                format!("{} [{}]", g.label, g.repeats[0].cell.workload)
            } else {
                g.label.clone()
            }
        })
        .collect()
}

/// A metric's identity across cells: key, label, unit, direction.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricInfo {
    /// Key.
    pub key: String,
    /// Label.
    pub label: String,
    /// Unit.
    pub unit: String,
    /// Direction.
    pub better: Better,
}

/// Every metric key in `results`, in order of first appearance.
pub fn metric_infos<'a>(results: impl IntoIterator<Item = &'a CellResult>) -> Vec<MetricInfo> {
    let mut out: Vec<MetricInfo> = Vec::new();
    for m in results.into_iter().flat_map(|r| &r.metrics) {
        if !out.iter().any(|i| i.key == m.key) {
            out.push(MetricInfo {
                key: m.key.clone(),
                label: m.label.clone(),
                unit: m.unit.clone(),
                better: m.better,
            });
        }
    }
    out
}

pub use crate::results::fmt::{fmt_number, with_unit};

/// Marker after a mean that leaves out `+++++` repeats.
pub const MIXED_MARK: &str = "*";

/// An aggregate as table text: `mean unit`, or with repeats `mean unit ±sd% (n=N)` (the sample
/// standard deviation relative to the mean; for figures in % the standard deviation in
/// percentage points, `±3.61 pt`), `+++++`, `n/a (why)`, `-`.
pub fn fmt_agg(agg: &Agg, unit: &str, with_units: bool) -> String {
    match agg {
        Agg::Numbers { stats, too_fast } => {
            let mark = if *too_fast > 0 { MIXED_MARK } else { "" };
            let u = if with_units { unit } else { "" };
            let mean = with_unit(stats.mean, u);
            match (stats.stddev, stats.rel_sd_pct()) {
                // A relative spread of a percentage reads as points: say points.
                (Some(sd), _) if unit == "%" => format!("{mean} ±{sd:.2} pt (n={}){mark}", stats.n),
                (_, Some(rel)) => format!("{mean} ±{rel:.1}% (n={}){mark}", stats.n),
                (Some(sd), None) => format!("{mean} ±{} (n={}){mark}", with_unit(sd, u), stats.n),
                (None, _) => format!("{mean}{mark}"),
            }
        }
        Agg::TooFast { .. } => "+++++".into(),
        Agg::NotAvailable(why) => format!("n/a ({why})"),
        Agg::Missing => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_stddev() {
        let s = stats(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.mean, 5.0);
        assert!((s.stddev.unwrap() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.n), (2.0, 9.0, 8));
        assert_eq!(stats(&[3.0]).unwrap().stddev, None);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn ci_uses_student_t() {
        // Two values 10 and 20: mean 15, sd 7.071, t(1) = 12.706, half-width 12.706 * 5.
        let s = stats(&[10.0, 20.0]).unwrap();
        assert!((s.ci95_half().unwrap() - 12.706 * 5.0).abs() < 1e-9);
        assert!((s.rel_sd_pct().unwrap() - 7.0710678 / 15.0 * 100.0).abs() < 1e-4);
        assert_eq!(stats(&[1.0]).unwrap().ci95_half(), None);
        // The expansion continues the table smoothly: t(31) just under t(30), t(120) ~ 1.980.
        assert!(t975(31) < t975(30) && t975(31) > 2.035);
        assert!((t975(120) - 1.980).abs() < 0.001);
    }

    #[test]
    fn repeats_show_n_and_spread() {
        let agg = Agg::Numbers {
            stats: stats(&[2400.0, 2500.0, 2330.0, 2410.0, 2410.0]).unwrap(),
            too_fast: 0,
        };
        assert_eq!(fmt_agg(&agg, "IOPS", true), "2,410 IOPS ±2.5% (n=5)");
        assert_eq!(fmt_agg(&agg, "IOPS", false), "2,410 ±2.5% (n=5)");
        let cpu = Agg::Numbers {
            stats: stats(&[64.27, 69.42]).unwrap(),
            too_fast: 0,
        };
        assert_eq!(fmt_agg(&cpu, "%", true), "66.84% ±3.64 pt (n=2)");
    }

    #[test]
    fn numbers_read_like_the_seed() {
        assert_eq!(with_unit(14189.2, "µs"), "14,189 µs");
        assert_eq!(with_unit(6.3, "MiB/s"), "6.30 MiB/s");
        assert_eq!(with_unit(60.64, "MiB/s"), "60.6 MiB/s");
        assert_eq!(with_unit(4.712, "%"), "4.71%");
        assert_eq!(with_unit(1234567.0, "K/sec"), "1,234,567 K/sec");
        assert_eq!(with_unit(-1500.0, ""), "-1,500");
    }
}
