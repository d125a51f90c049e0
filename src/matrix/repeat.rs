//! How many times each cell runs: a fixed count, or `auto` — repeat until the headline figures
//! are stable (coefficient of variation under `max_cv`) or `max_repeats` is reached.

use crate::results::{CellResult, Outcome};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Fewest repeats `auto` runs: two values always look stable, three can show a spread.
pub const MIN_AUTO_REPEATS: u32 = 3;

/// Repeats of every cell (config `repeat`, `--repeat`): a number, or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Exactly this many.
    Fixed(u32),
    /// Until stable (see [`StopRule`]).
    Auto,
}

impl Repeat {
    /// The most repeats a cell can get: the fixed count, or `max_repeats` for `auto`.
    pub fn upper_bound(self, max_repeats: u32) -> u32 {
        match self {
            Repeat::Fixed(n) => n,
            Repeat::Auto => max_repeats,
        }
    }
}

impl fmt::Display for Repeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repeat::Fixed(n) => write!(f, "{n}"),
            Repeat::Auto => f.write_str("auto"),
        }
    }
}

/// A `--repeat` value that is neither a positive number nor `auto`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("repeat '{0}' is not valid (valid: a number >= 1, or auto)")]
pub struct BadRepeat(pub String);

impl std::str::FromStr for Repeat {
    type Err = BadRepeat;
    fn from_str(s: &str) -> Result<Repeat, BadRepeat> {
        match s.trim() {
            "auto" => Ok(Repeat::Auto),
            t => t
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .map(Repeat::Fixed)
                .ok_or_else(|| BadRepeat(s.to_string())),
        }
    }
}

impl Serialize for Repeat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Repeat::Fixed(n) => s.serialize_u32(*n),
            Repeat::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Repeat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Repeat, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Repeat;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of repeats or \"auto\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Repeat, E> {
                // 0 is kept for `validate` to refuse with the key's name.
                u32::try_from(n)
                    .map(Repeat::Fixed)
                    .map_err(|_| E::custom(format!("repeat {n} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Repeat, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(BadRepeat(n.to_string())))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Repeat, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// When `auto` stops repeating a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    /// Stable when every stability metric's CV (in %) is under this.
    pub max_cv_pct: f64,
    /// Give up (not converged) after this many repeats.
    pub max_repeats: u32,
}

/// What to do with a cell after its latest repeat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Run another repeat.
    Continue,
    /// Stable: the largest CV (in %) of the stability metrics.
    Converged(f64),
    /// `max_repeats` reached while still unstable; the largest CV when there was one.
    Exhausted(Option<f64>),
    /// Repeating cannot help (unsupported or skipped here).
    NotRunnable,
}

impl StopRule {
    /// Decides after the repeats in `history` (one cell's results so far, any order).
    pub fn decide(&self, history: &[&CellResult]) -> Stop {
        let not_runnable =
            |c: &&CellResult| matches!(c.outcome, Outcome::Unsupported(_) | Outcome::Skipped(_));
        if history.iter().any(not_runnable) {
            return Stop::NotRunnable;
        }
        let n = history.len() as u32;
        let cv = worst_cv(history);
        match cv {
            _ if n < MIN_AUTO_REPEATS => Stop::Continue,
            Some(cv) if cv < self.max_cv_pct => Stop::Converged(cv),
            _ if n >= self.max_repeats => Stop::Exhausted(cv),
            _ => Stop::Continue,
        }
    }
}

/// The largest coefficient of variation (sample stddev / mean, in %) of the engines' stability
/// metrics (`workload::stability_metrics`; a direction with no I/O, mean 0, is left out) over
/// the passed repeats; `None` with fewer than two passed repeats or no such metric.
pub fn worst_cv(history: &[&CellResult]) -> Option<f64> {
    let passed: Vec<&CellResult> = history
        .iter()
        .copied()
        .filter(|c| c.outcome == Outcome::Passed)
        .collect();
    crate::workload::stability_metrics()
        .filter_map(|key| {
            let v: Vec<f64> = passed
                .iter()
                .filter_map(|c| c.metric(key)?.value.number())
                .collect();
            cv_pct(&v)
        })
        .reduce(f64::max)
}

/// CV in % of `v`, or `None` with fewer than two values or a zero mean.
fn cv_pct(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(var.sqrt() / mean * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Cell, Format};
    use crate::results::{Better, Metric, Value};

    fn result(outcome: Outcome, read: f64, write: f64) -> CellResult {
        let m = |key: &str, v: f64| Metric {
            key: key.into(),
            label: key.into(),
            unit: "IOPS".into(),
            better: Better::Higher,
            value: Value::Number(v),
        };
        let cell = Cell {
            format: Format::Raw,
            ..Cell::default()
        };
        CellResult {
            metrics: vec![m("read_iops", read), m("write_iops", write)],
            ..CellResult::new(cell, 0, outcome)
        }
    }

    fn ok(read: f64, write: f64) -> CellResult {
        result(Outcome::Passed, read, write)
    }

    const RULE: StopRule = StopRule {
        max_cv_pct: 5.0,
        max_repeats: 8,
    };

    fn decide(h: &[CellResult]) -> Stop {
        RULE.decide(&h.iter().collect::<Vec<_>>())
    }

    #[test]
    fn stable_figures_stop_at_the_minimum_not_before() {
        let h = [ok(100.0, 40.0), ok(101.0, 40.5), ok(99.0, 39.8)];
        assert_eq!(decide(&h[..2]), Stop::Continue);
        match decide(&h) {
            Stop::Converged(cv) => assert!(cv < 2.0, "{cv}"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn the_worst_metric_decides() {
        // Reads are steady, writes swing by ~20 %: not converged until the cap.
        let mut h = vec![ok(100.0, 40.0), ok(100.0, 55.0), ok(100.0, 35.0)];
        assert_eq!(decide(&h), Stop::Continue);
        while h.len() < 8 {
            h.push(ok(100.0, if h.len() % 2 == 0 { 35.0 } else { 55.0 }));
            if h.len() < 8 {
                assert_eq!(decide(&h), Stop::Continue, "n={}", h.len());
            }
        }
        match decide(&h) {
            Stop::Exhausted(Some(cv)) => assert!(cv > 5.0, "{cv}"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn a_noisy_start_can_settle_later() {
        let h = [
            ok(100.0, 40.0),
            ok(112.0, 44.0),
            ok(104.0, 41.0),
            ok(105.0, 42.0),
            ok(104.0, 41.5),
            ok(105.0, 41.8),
        ];
        assert_eq!(decide(&h[..3]), Stop::Continue);
        // CV of reads over 6: ~3.7 %; of writes: ~3.2 %.
        assert!(matches!(decide(&h), Stop::Converged(cv) if cv < 5.0));
    }

    #[test]
    fn failures_count_as_attempts_but_not_as_values() {
        let fail = || result(Outcome::Failed("stall".into()), 0.0, 0.0);
        let mut h = vec![fail(), ok(100.0, 40.0), fail()];
        assert_eq!(decide(&h), Stop::Continue, "one value has no spread");
        h.extend([fail(), fail(), fail(), fail(), fail()]);
        assert_eq!(decide(&h), Stop::Exhausted(None));
        h.truncate(3);
        h.push(ok(100.5, 40.1));
        assert!(matches!(decide(&h), Stop::Converged(_)));
    }

    #[test]
    fn unsupported_cells_are_not_repeated_and_idle_directions_ignored() {
        let h = [result(Outcome::Unsupported("no kvm".into()), 0.0, 0.0)];
        assert_eq!(decide(&h), Stop::NotRunnable);
        // A read-only job: write_iops is 0 every time and must not block convergence.
        let h = [ok(100.0, 0.0), ok(101.0, 0.0), ok(100.5, 0.0)];
        assert!(matches!(decide(&h), Stop::Converged(_)));
    }

    #[test]
    fn repeat_parses_numbers_and_auto_only() {
        assert_eq!("5".parse::<Repeat>(), Ok(Repeat::Fixed(5)));
        assert_eq!("auto".parse::<Repeat>(), Ok(Repeat::Auto));
        for bad in ["0", "-1", "many", ""] {
            let e = bad.parse::<Repeat>().unwrap_err().to_string();
            assert!(e.contains("valid: a number >= 1, or auto"), "{e}");
        }
        assert_eq!(Repeat::Auto.upper_bound(8), 8);
        assert_eq!(Repeat::Fixed(3).upper_bound(8), 3);
        assert_eq!(serde_json::to_string(&Repeat::Auto).unwrap(), "\"auto\"");
        assert_eq!(serde_json::to_string(&Repeat::Fixed(4)).unwrap(), "4");
        let back: Repeat = serde_json::from_str("4").unwrap();
        assert_eq!(back, Repeat::Fixed(4));
        let back: Repeat = serde_json::from_str("\"auto\"").unwrap();
        assert_eq!(back, Repeat::Auto);
    }
}
