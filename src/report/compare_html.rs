//! One self-contained HTML page for an A/B comparison (`vmbench compare --format html`).
//!
//! Reading order: how the verdicts were reached (method, correction, alpha, thresholds), the
//! counts per verdict with the regressions listed, then every verdict row with its change and
//! 95% CI drawn as an interval around 0 over the shaded noise band; information rows and cells
//! that could not be compared come last, collapsed.

use super::html::{direction, esc, page, table, TableCell};
use crate::compare::{Comparison, MetricComparison, Verdict};
use std::collections::BTreeSet;
use std::fmt::Write;

const CSS: &str = "<style>.regression{color:#b42318;font-weight:600}.improvement{color:#1a7f37;\
font-weight:600}.nochange{color:#555}.inconclusive{color:#8a6d00}.notcomparable{color:#777;\
font-style:italic}.counts td{font-size:1.1em}tr.regression td{background:#fdecea}\
tr.improvement td{background:#eaf6ec}</style>";

/// CSS class of a verdict (also its colour in the interval chart).
fn class(v: &Verdict) -> &'static str {
    match v {
        Verdict::Regression => "regression",
        Verdict::Improvement => "improvement",
        Verdict::NoSignificantChange => "nochange",
        Verdict::Inconclusive(_) => "inconclusive",
        Verdict::Info => "info",
        Verdict::NotComparable(_) => "notcomparable",
    }
}

fn colour(v: &Verdict) -> &'static str {
    match class(v) {
        "regression" => "#b42318",
        "improvement" => "#1a7f37",
        "inconclusive" => "#b58900",
        _ => "#555",
    }
}

/// The verdict counts in the summary, in a fixed order.
fn counts(cmp: &Comparison) -> [(&'static str, &'static str, usize); 5] {
    let n = |c: &str| {
        cmp.rows
            .iter()
            .filter(|r| r.is_verdict_row() && class(&r.verdict) == c)
            .count()
    };
    [
        ("regression", "regression", n("regression")),
        ("improvement", "improvement", n("improvement")),
        ("no significant change", "nochange", n("nochange")),
        ("inconclusive", "inconclusive", n("inconclusive")),
        (
            "not comparable",
            "notcomparable",
            n("notcomparable") + cmp.missing_cells.len() + cmp.unpassed_cells.len(),
        ),
    ]
}

/// The change and its 95% CI as a horizontal interval around 0; the band is +-threshold.
fn interval_svg(r: &MetricComparison) -> String {
    const W: f64 = 180.0;
    const H: f64 = 20.0;
    let thr = r.threshold_pct;
    let ci = r
        .change_ci_pct
        .filter(|(lo, hi)| lo.is_finite() && hi.is_finite());
    let mut extent = thr.max(r.change_pct.abs());
    if let Some((lo, hi)) = ci {
        extent = extent.max(lo.abs()).max(hi.abs());
    }
    if !extent.is_finite() || extent <= 0.0 {
        extent = 10.0;
    }
    extent *= 1.15;
    let x = |v: f64| W / 2.0 + v / extent * (W / 2.0 - 4.0);
    let col = colour(&r.verdict);
    let mut s = format!(
        "<svg class=\"ci\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\"><title>change {} %, 95% CI {}, noise band \
         ±{thr} %, scale ±{extent:.1} %</title>\
         <rect class=\"band\" x=\"{:.1}\" y=\"2\" width=\"{:.1}\" height=\"16\" fill=\"#e6e6e6\"/>\
         <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"0\" y2=\"{H}\" stroke=\"#999\"/>",
        fmt_pct(r.change_pct),
        ci.map(|(lo, hi)| format!("[{}, {}]", fmt_pct(lo), fmt_pct(hi)))
            .unwrap_or_else(|| "none".into()),
        x(-thr),
        x(thr) - x(-thr),
        x(0.0),
        x(0.0),
    );
    if let Some((lo, hi)) = ci {
        let _ = write!(
            s,
            "<line class=\"interval\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"10\" y2=\"10\" \
             stroke=\"{col}\" stroke-width=\"3\"/>",
            x(lo),
            x(hi)
        );
    }
    if r.change_pct.is_finite() {
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"10\" r=\"4\" fill=\"{col}\"/>",
            x(r.change_pct)
        );
    }
    s.push_str("</svg>");
    s
}

fn fmt_pct(v: f64) -> String {
    if v.is_finite() {
        format!("{v:+.1}%")
    } else {
        "-".into()
    }
}

fn fmt_mean(v: f64, unit: &str, n: usize, cv: Option<f64>) -> String {
    if !v.is_finite() {
        return format!("- (n={n})");
    }
    let cv = cv.map(|c| format!(" ±{c:.1}%")).unwrap_or_default();
    format!("{v:.1} {unit}{cv} (n={n})")
}

/// One side's mean, with CV and n as small print.
fn side(v: f64, unit: &str, n: usize, cv: Option<f64>) -> String {
    let mean = if v.is_finite() {
        format!("{v:.1} {unit}")
    } else {
        "-".into()
    };
    let cv = cv.map(|c| format!("±{c:.1}% CV, ")).unwrap_or_default();
    format!(
        "<td class=\"num\">{}<span class=\"spread\">{}n={n}</span></td>",
        esc(&mean),
        esc(&cv)
    )
}

fn fmt_p(p: Option<f64>) -> String {
    p.map(|p| format!("{p:.4}")).unwrap_or_else(|| "-".into())
}

/// The thresholds in use, each with its source, e.g. "5% (default)".
fn thresholds(cmp: &Comparison) -> String {
    let set: BTreeSet<String> = cmp
        .rows
        .iter()
        .filter(|r| r.is_verdict_row())
        .map(|r| format!("{}% ({})", r.threshold_pct, r.threshold_source))
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.into_iter().collect::<Vec<_>>().join(", ")
    }
}

fn header(cmp: &Comparison) -> String {
    let changed = cmp
        .what_changed_line()
        .map(|l| {
            format!(
                "<p id=\"what-changed\" class=\"changed\"><b>{}</b></p>",
                esc(&l)
            )
        })
        .unwrap_or_default();
    format!(
        "<h1>vmbench compare: {} vs {}</h1>{changed}<section id=\"method\"><p>baseline <b>{}</b>, \
         candidate <b>{}</b></p><p class=\"note\">{}; thresholds: {}; family: {}. A row \
         regresses when its adjusted p &lt; alpha and the change exceeds its threshold (the \
         shaded band).</p></section>",
        esc(&cmp.baseline_run),
        esc(&cmp.candidate_run),
        esc(&cmp.baseline_run),
        esc(&cmp.candidate_run),
        esc(&cmp.method_line()),
        esc(&thresholds(cmp)),
        esc(&cmp.family),
    )
}

fn summary(cmp: &Comparison) -> String {
    let mut s =
        String::from("<section id=\"summary\"><h2>Summary</h2><table class=\"counts\"><tr>");
    let c = counts(cmp);
    for (label, _, _) in &c {
        let _ = write!(s, "<th>{label}</th>");
    }
    s.push_str("</tr><tr>");
    for (_, class, n) in &c {
        let _ = write!(
            s,
            "<td class=\"num {class}\" data-count=\"{class}\">{n}</td>"
        );
    }
    s.push_str("</tr></table>");
    let _ = write!(s, "<p id=\"outcome\">{}</p>", esc(&cmp.summary_line()));
    if !cmp.broken.is_empty() {
        s.push_str("<ul id=\"broken\">");
        for b in &cmp.broken {
            let _ = write!(
                s,
                "<li class=\"regression\">broken: {}</li>",
                esc(&b.to_string())
            );
        }
        s.push_str("</ul>");
    }
    let regressions: Vec<&MetricComparison> = cmp
        .rows
        .iter()
        .filter(|r| r.verdict == Verdict::Regression)
        .collect();
    if regressions.is_empty() {
        s.push_str("<p id=\"regressions\">No regression.</p>");
    } else {
        s.push_str("<ul id=\"regressions\">");
        for r in regressions {
            let _ = write!(
                s,
                "<li class=\"regression\">{} {}: {} [{}, {}], adjusted p {}</li>",
                esc(&r.label),
                esc(&r.metric_label),
                fmt_pct(r.change_pct),
                r.change_ci_pct.map(|c| fmt_pct(c.0)).unwrap_or_default(),
                r.change_ci_pct.map(|c| fmt_pct(c.1)).unwrap_or_default(),
                fmt_p(r.p_adjusted),
            );
        }
        s.push_str("</ul>");
    }
    s.push_str("</section>");
    s
}

fn verdict_table(cmp: &Comparison) -> String {
    let head = [
        "cell",
        "metric",
        "verdict",
        "change [95% CI]",
        "change vs noise band",
        "baseline",
        "candidate",
        "p / p adj",
        "test",
    ];
    let mut s = String::from(
        "<section id=\"verdicts\"><h2>Verdicts per cell and metric</h2>\
         <table id=\"verdict-table\"><tr>",
    );
    for h in head {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr>");
    for r in cmp.rows.iter().filter(|r| r.is_verdict_row()) {
        let class = class(&r.verdict);
        let ci = r
            .change_ci_pct
            .map(|(lo, hi)| format!("[{}, {}]", fmt_pct(lo), fmt_pct(hi)))
            .unwrap_or_default();
        let _ = write!(
            s,
            "<tr class=\"{class}\" data-verdict=\"{class}\"><td title=\"{}\">{}</td>\
             <td title=\"{}\">{} {}</td><td class=\"{class}\">{}{}</td>\
             <td class=\"num\">{}<span class=\"spread\">{}</span></td><td>{}</td>{}{}\
             <td class=\"num\">{} / {}</td><td>{}</td></tr>",
            esc(&r.cell_id),
            esc(&r.label),
            direction(r.better),
            esc(&r.metric_label),
            if r.better == crate::results::Better::Higher {
                "↑"
            } else {
                "↓"
            },
            esc(&r.verdict.to_string()),
            r.note
                .as_ref()
                .map(|n| format!("<span class=\"spread\">{}</span>", esc(n)))
                .unwrap_or_default(),
            fmt_pct(r.change_pct),
            ci,
            interval_svg(r),
            side(r.baseline_mean, &r.unit, r.n_baseline, r.baseline.cv_pct),
            side(r.candidate_mean, &r.unit, r.n_candidate, r.candidate.cv_pct),
            fmt_p(r.p_value),
            fmt_p(r.p_adjusted),
            r.method,
        );
    }
    s.push_str("</table></section>");
    s
}

fn info_rows(cmp: &Comparison) -> String {
    let rows: Vec<Vec<TableCell>> = cmp
        .rows
        .iter()
        .filter(|r| !r.is_verdict_row())
        .map(|r| {
            vec![
                r.label.clone().into(),
                r.metric_label.clone().into(),
                fmt_mean(r.baseline_mean, &r.unit, r.n_baseline, r.baseline.cv_pct).into(),
                fmt_mean(r.candidate_mean, &r.unit, r.n_candidate, r.candidate.cv_pct).into(),
                fmt_pct(r.change_pct).into(),
            ]
        })
        .collect();
    let head: Vec<String> = ["cell", "metric", "baseline", "candidate", "change"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    format!(
        "<section id=\"info\"><h2>Information rows</h2><details><summary>{} row(s) without a \
         verdict</summary>{}</details></section>",
        rows.len(),
        table("info-table", &head, &rows)
    )
}

fn not_compared(cmp: &Comparison) -> String {
    let mut s = String::from("<section id=\"not-compared\"><h2>Cells not compared</h2>");
    if cmp.missing_cells.is_empty() && cmp.unpassed_cells.is_empty() {
        s.push_str("<p>Every cell is in both runs with a passed repeat.</p>");
    } else {
        s.push_str("<ul>");
        for c in cmp.missing_cells.iter().chain(&cmp.unpassed_cells) {
            let _ = write!(s, "<li class=\"notcomparable\">{}</li>", esc(c));
        }
        s.push_str("</ul>");
    }
    s.push_str("</section>");
    s
}

/// The comparison as one HTML page.
pub fn compare_html(cmp: &Comparison) -> String {
    let body = [
        CSS.to_string(),
        header(cmp),
        summary(cmp),
        verdict_table(cmp),
        info_rows(cmp),
        not_compared(cmp),
    ]
    .concat();
    page(
        &format!(
            "vmbench compare {} vs {}",
            cmp.baseline_run, cmp.candidate_run
        ),
        &body,
    )
}
