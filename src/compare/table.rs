//! The terminal rendering of a comparison: what changed in the system under test first, then
//! aligned columns with regressions and broken cells flagged, the cells that could not be
//! compared below, and one summary line saying what the exit code means.

use super::{Comparison, MetricComparison, SideStats, Verdict};
use crate::results::Better;

const HEADERS: [&str; 11] = [
    "cell",
    "metric",
    "baseline (mean ±CV, n)",
    "candidate (mean ±CV, n)",
    "change [95% CI]",
    "p",
    "p adj",
    "test",
    "threshold",
    "within-run CV b/c",
    "verdict",
];

/// Columns whose contents are numbers, right-aligned so their digits line up.
const NUMERIC: [usize; 6] = [2, 3, 4, 5, 6, 8];

/// Renders what changed, the method, every row, then missing and unpassed cells and the outcome.
pub(super) fn render(c: &Comparison) -> String {
    let mut rows: Vec<Vec<String>> = c.broken.iter().map(|b| broken_row(b, c)).collect();
    rows.extend(c.rows.iter().map(row));
    let header: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = c
        .what_changed_line()
        .map(|l| format!("{l}\n"))
        .unwrap_or_default();
    out.push_str(&format!(
        "baseline {}  vs  candidate {}\n{}\nfamily: {}\n",
        c.baseline_run,
        c.candidate_run,
        c.method_line(),
        c.family
    ));
    out.push_str("direction: ↑ higher is better, ↓ lower is better; CV and n are across repeats\n");
    out.push_str(&line(&header, &widths));
    for r in &rows {
        out.push_str(&line(r, &widths));
    }
    for r in c.rows.iter().filter(|r| r.note.is_some()) {
        out.push_str(&format!(
            "note: {} {}: {}\n",
            r.label,
            r.key,
            r.note.as_deref().unwrap_or("")
        ));
    }
    for r in c
        .rows
        .iter()
        .filter(|r| r.threshold_source.starts_with("history"))
    {
        out.push_str(&format!(
            "threshold: {} {}: {:.1}% from {}\n",
            r.label, r.key, r.threshold_pct, r.threshold_source
        ));
    }
    for m in &c.missing_cells {
        out.push_str(&format!("missing: {m}\n"));
    }
    for u in &c.unpassed_cells {
        out.push_str(&format!("not compared: {u}\n"));
    }
    out.push_str(&summary(c));
    out.push('\n');
    // Failure reasons carry guest output; escape sequences must not reach the terminal.
    out.chars()
        .map(|ch| {
            if ch.is_control() && ch != '\n' {
                '?'
            } else {
                ch
            }
        })
        .collect()
}

/// The last line: counts and what the exit code means; for exit 3, the smallest drop the
/// comparison could have seen.
pub(super) fn summary(c: &Comparison) -> String {
    let count = |f: &dyn Fn(&Verdict) -> bool| c.rows.iter().filter(|r| f(&r.verdict)).count();
    let verdict_rows = c.rows.iter().filter(|r| r.is_verdict_row()).count();
    let regressions = count(&|v| *v == Verdict::Regression);
    let improvements = count(&|v| *v == Verdict::Improvement);
    let undecided = count(&|v| matches!(v, Verdict::Inconclusive(_) | Verdict::NotComparable(_)));
    let info = c.rows.len() - verdict_rows;
    let broken = if c.broken.is_empty() {
        String::new()
    } else if c.allow_missing {
        format!(
            "{} broken cell(s) (allowed: --allow-missing); ",
            c.broken.len()
        )
    } else {
        format!("{} BROKEN cell(s); ", c.broken.len())
    };
    let meaning = match c.outcome() {
        super::CompareOutcome::Regression => "exit 1: significant regression".to_string(),
        super::CompareOutcome::Broken => {
            "exit 1: a cell that passed in the baseline broke in the candidate".to_string()
        }
        super::CompareOutcome::NoRegression => {
            "exit 0: no regression, every verdict row decided".to_string()
        }
        super::CompareOutcome::Undecided => format!("exit 3: not proven: {}", not_proven(c)),
    };
    format!(
        "{broken}{verdict_rows} verdict row(s): {regressions} regression(s), {improvements} \
         improvement(s), {undecided} undecided; {info} information row(s) without verdict; \
         {meaning}"
    )
}

/// Why exit 3: how little the comparison could have seen.
fn not_proven(c: &Comparison) -> String {
    match &c.smallest_visible_drop {
        _ if c.family_size == 0 => {
            "no verdict row could be tested (too few repeats, or nothing comparable)".into()
        }
        Some(super::VisibleDrop { pct: Some(p), row }) => format!(
            "the smallest drop this comparison could have seen in every verdict row is {p:.1}% \
             (set by {row})"
        ),
        Some(super::VisibleDrop { pct: None, row }) => {
            format!("no drop of any size could have been seen in {row}")
        }
        None => "nothing could be decided".into(),
    }
}

/// A broken cell as a verdict row of its own.
fn broken_row(b: &super::BrokenCell, c: &Comparison) -> Vec<String> {
    let dash = || "-".to_string();
    let verdict = if c.allow_missing {
        format!("broken (allowed): {b}")
    } else {
        format!("BROKEN: {b}")
    };
    vec![
        b.label.clone(),
        "cell".into(),
        format!("passed n={}", b.baseline_repeats),
        match b.breakage {
            super::Breakage::Missing => "missing".into(),
            k => format!("{} {}/{}", k.as_str(), b.bad_repeats, b.repeats),
        },
        dash(),
        dash(),
        dash(),
        dash(),
        dash(),
        dash(),
        verdict,
    ]
}

fn line(cells: &[String], widths: &[usize]) -> String {
    let mut s = String::new();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        let pad = w.saturating_sub(cell.chars().count());
        if NUMERIC.contains(&i) {
            s.push_str(&" ".repeat(pad));
            s.push_str(cell);
        } else {
            s.push_str(cell);
            if i + 1 < cells.len() {
                s.push_str(&" ".repeat(pad));
            }
        }
        if i + 1 < cells.len() {
            s.push_str("  ");
        }
    }
    s.push('\n');
    s
}

/// "2,000 IOPS ±1.2% n=5".
fn side(s: &SideStats, unit: &str) -> String {
    let cv = s.cv_pct.map(|cv| format!(" ±{cv:.1}%")).unwrap_or_default();
    format!("{} {unit}{cv} n={}", fmt_num(s.mean), s.n)
}

fn fmt_p(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.0001 => format!("{p:.1e}"),
        Some(p) => format!("{p:.4}"),
        None => "-".into(),
    }
}

fn row(r: &MetricComparison) -> Vec<String> {
    let arrow = match r.better {
        Better::Higher => "↑",
        Better::Lower => "↓",
    };
    let ci = r
        .change_ci_pct
        .map(|(lo, hi)| format!(" [{lo:+.1}, {hi:+.1}]"))
        .unwrap_or_default();
    let within = |s: &SideStats| {
        s.within_run_cv_pct
            .map(|v| format!("{v:.1}%"))
            .unwrap_or_else(|| "-".into())
    };
    vec![
        r.label.clone(),
        format!("{} {arrow}", r.key),
        side(&r.baseline, &r.unit),
        side(&r.candidate, &r.unit),
        format!("{}{ci}", fmt_pct(r.change_pct)),
        fmt_p(r.p_value),
        fmt_p(r.p_adjusted),
        r.method.to_string(),
        if r.is_verdict_row() {
            format!("{:.1}%", r.threshold_pct)
        } else {
            "-".into()
        },
        format!("{}/{}", within(&r.baseline), within(&r.candidate)),
        r.verdict.to_string(),
    ]
}

/// A signed percentage, or `-` when undefined.
pub(crate) fn fmt_pct(v: f64) -> String {
    if v.is_finite() {
        format!("{v:+.1}%")
    } else {
        "-".into()
    }
}

/// A number for people: thousands separators, fewer decimals the bigger it is.
pub(crate) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let decimals = match v.abs() {
        a if a >= 1000.0 => 0,
        a if a >= 10.0 => 1,
        _ => 2,
    };
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(fmt_num(7757.4), "7,757");
        assert_eq!(fmt_num(-1234567.0), "-1,234,567");
        assert_eq!(fmt_num(14.04), "14.0");
        assert_eq!(fmt_num(0.5), "0.50");
        assert_eq!(fmt_num(f64::NAN), "-");
    }
}
