//! The terminal rendering of a comparison: aligned columns, regressions flagged, and the cells
//! that could not be compared listed below.

use super::{Comparison, MetricComparison, SampleSource, Verdict};

const HEADERS: [&str; 8] = [
    "cell",
    "metric",
    "baseline",
    "candidate",
    "change",
    "p",
    "n (b/c)",
    "verdict",
];

/// Renders every row, then missing and unpassed cells.
pub(super) fn render(c: &Comparison) -> String {
    let rows: Vec<[String; 8]> = c.rows.iter().map(row).collect();
    let mut widths = HEADERS.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = format!(
        "baseline {}  vs  candidate {}\n",
        c.baseline_run, c.candidate_run
    );
    out.push_str(&line(&HEADERS.map(String::from), &widths));
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
    for m in &c.missing_cells {
        out.push_str(&format!("missing: {m}\n"));
    }
    for u in &c.unpassed_cells {
        out.push_str(&format!("not compared: {u}\n"));
    }
    let regressions = c
        .rows
        .iter()
        .filter(|r| r.verdict == Verdict::Regression)
        .count();
    out.push_str(&format!(
        "{} metric(s) compared, {regressions} regression(s)\n",
        c.rows.len()
    ));
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

fn line(cells: &[String; 8], widths: &[usize; 8]) -> String {
    let mut s = String::new();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        let pad = w.saturating_sub(cell.chars().count());
        // Numbers right-aligned so their digits line up.
        if (2..=6).contains(&i) {
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

fn row(r: &MetricComparison) -> [String; 8] {
    let per_second = if r.source == SampleSource::PerSecond {
        " (per-s)"
    } else {
        ""
    };
    [
        r.label.clone(),
        r.key.clone(),
        format!("{} {}", fmt_num(r.baseline_mean), r.unit),
        format!("{} {}", fmt_num(r.candidate_mean), r.unit),
        fmt_pct(r.change_pct),
        r.p_value
            .map(|p| format!("{p:.4}"))
            .unwrap_or_else(|| "-".into()),
        format!("{}/{}{per_second}", r.n_baseline, r.n_candidate),
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
