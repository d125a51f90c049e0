//! Broken cells: a cell that passed in the baseline and, in the candidate, failed, went missing
//! or could no longer be measured. A storage gate exists for exactly these nights (a backend that
//! stops working has no figures left to regress), so `compare` fails on them and `trend` counts
//! them; both use [`broken_cells`], the one definition.

use crate::results::{CellResult, Outcome, RunRecord};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// How a cell that passed in the baseline broke in the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Breakage {
    /// At least one of its candidate repeats failed.
    Failed,
    /// The candidate has no record of the cell at all (the run stopped early, or the cell left
    /// the matrix).
    Missing,
    /// No candidate repeat passed and none failed: this host can no longer run it.
    Unsupported,
    /// No candidate repeat passed and none failed or was unsupported: it was skipped.
    Skipped,
}

impl Breakage {
    /// The word in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Breakage::Failed => "failed",
            Breakage::Missing => "missing",
            Breakage::Unsupported => "unsupported",
            Breakage::Skipped => "skipped",
        }
    }
}

/// A cell that passed in the baseline and broke in the candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BrokenCell {
    /// The cell id.
    pub cell_id: String,
    /// The cell's short label (`qemu/nfs/raw`).
    pub label: String,
    /// How it broke.
    pub breakage: Breakage,
    /// The baseline's repeats of the cell (all passed).
    pub baseline_repeats: usize,
    /// The candidate's repeats of the cell that did not pass (0 when missing).
    pub bad_repeats: usize,
    /// The candidate's repeats of the cell (0 when missing).
    pub repeats: usize,
    /// Why: the failure kinds of the failed repeats (`stalled`), else the first reason given.
    pub why: String,
}

impl fmt::Display for BrokenCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: passed in baseline, ", self.label)?;
        match self.breakage {
            Breakage::Missing => write!(f, "missing in candidate")?,
            b => write!(
                f,
                "{} in candidate {}/{} repeats",
                b.as_str(),
                self.bad_repeats,
                self.repeats
            )?,
        }
        if !self.why.is_empty() {
            write!(f, " ({})", self.why)?;
        }
        Ok(())
    }
}

/// The cells of `baseline` whose every repeat passed that, in `candidate`, have a failed repeat,
/// have no passed repeat (unsupported or skipped), or are absent; in the baseline's order.
/// Cells new in the candidate and cells that did not pass in the baseline are never broken.
pub fn broken_cells(baseline: &RunRecord, candidate: &RunRecord) -> Vec<BrokenCell> {
    let (b, c) = (by_cell(baseline), by_cell(candidate));
    b.order
        .iter()
        .filter_map(|id| {
            let cand = c.repeats.get(id).map(Vec::as_slice).unwrap_or(&[]);
            cell_breakage(&b.repeats[id], cand)
        })
        .collect()
}

/// [`broken_cells`] for one cell: its repeats in the baseline and in the candidate (empty when
/// the candidate has none). `None` when it is not broken.
pub fn cell_breakage(baseline: &[&CellResult], candidate: &[&CellResult]) -> Option<BrokenCell> {
    let first = baseline.first()?;
    if !baseline.iter().all(|r| r.outcome == Outcome::Passed) {
        return None;
    }
    let count = |f: fn(&Outcome) -> bool| candidate.iter().filter(|r| f(&r.outcome)).count();
    let failed = count(|o| matches!(o, Outcome::Failed(_)));
    let passed = count(|o| *o == Outcome::Passed);
    let breakage = if candidate.is_empty() {
        Breakage::Missing
    } else if failed > 0 {
        Breakage::Failed
    } else if passed > 0 {
        return None;
    } else if count(|o| matches!(o, Outcome::Unsupported(_))) > 0 {
        Breakage::Unsupported
    } else {
        Breakage::Skipped
    };
    Some(BrokenCell {
        cell_id: first.cell_id.clone(),
        label: first.cell.label(),
        breakage,
        baseline_repeats: baseline.len(),
        bad_repeats: candidate.len() - passed,
        repeats: candidate.len(),
        why: why(candidate),
    })
}

/// The failure kinds of the failed repeats, or the first reason of a repeat that did not pass.
fn why(candidate: &[&CellResult]) -> String {
    let mut kinds: Vec<&str> = vec![];
    for r in candidate {
        if let (Outcome::Failed(_), Some(k)) = (&r.outcome, r.failure_kind) {
            if !kinds.contains(&k.as_str()) {
                kinds.push(k.as_str());
            }
        }
    }
    if !kinds.is_empty() {
        return kinds.join(", ");
    }
    candidate
        .iter()
        .find_map(|r| match &r.outcome {
            Outcome::Failed(why) | Outcome::Unsupported(why) | Outcome::Skipped(why) => {
                Some(short(why))
            }
            Outcome::Passed => None,
        })
        .unwrap_or_default()
}

/// A reason cut to one line a verdict row can hold (reasons quote guest output).
fn short(why: &str) -> String {
    const MAX: usize = 120;
    let line = why.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

/// A run's repeats by cell id, in first-seen order.
struct ByCell<'a> {
    order: Vec<&'a str>,
    repeats: BTreeMap<&'a str, Vec<&'a CellResult>>,
}

fn by_cell(run: &RunRecord) -> ByCell<'_> {
    let mut out = ByCell {
        order: vec![],
        repeats: BTreeMap::new(),
    };
    for c in &run.cells {
        let id = c.cell_id.as_str();
        if !out.repeats.contains_key(id) {
            out.order.push(id);
        }
        out.repeats.entry(id).or_default().push(c);
    }
    out
}
