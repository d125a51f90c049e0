//! Terminal text of a trend and of the gate's verdict.

use super::{ChangePoint, GateOutcome, GateReport, Segment, Series, Trend};
use crate::results::Better;
use std::fmt::Write;

fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn ci(c: Option<(f64, f64)>) -> String {
    c.map_or_else(
        || "[no CI]".into(),
        |(lo, hi)| format!("[{}, {}]", num(lo), num(hi)),
    )
}

fn seg(s: &Segment, unit: &str) -> String {
    format!(
        "median {} {unit} (mean {}, 95% CI {}) over {} night(s)",
        num(s.median),
        num(s.mean),
        ci(s.ci95),
        s.nights
    )
}

/// One change point on one line (plus what changed in the system under test).
pub fn change(c: &ChangePoint, unit: &str) -> String {
    let verdict = if c.regression {
        "REGRESSION"
    } else {
        "improvement"
    };
    let mut line = format!(
        "began on night {} ({}): before {} -> after {}: {:+.1}% {verdict}, p {:.2e}",
        c.run_id,
        c.started,
        seg(&c.before, unit),
        seg(&c.after, unit),
        c.change_pct,
        c.p_value
    );
    if c.sut_changes.is_empty() {
        line.push_str("; no recorded change in the system under test that night");
    } else {
        let what: Vec<String> = c
            .sut_changes
            .iter()
            .map(|s| format!("{} '{}' -> '{}'", s.what, s.before, s.after))
            .collect();
        let _ = write!(line, "; system under test that night: {}", what.join(", "));
    }
    line
}

fn direction(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    }
}

fn series(out: &mut String, s: &Series) {
    let last = s.points.last();
    let _ = writeln!(
        out,
        "{} ({}) {} [{}, {}]: {} night(s){}",
        s.label,
        s.cell_id,
        s.metric_label,
        s.unit,
        direction(s.better),
        s.points.len(),
        last.map_or(String::new(), |p| format!(
            ", last {} {} 95% CI {} (n={})",
            num(p.mean),
            s.unit,
            ci(p.ci95),
            p.n
        ))
    );
    if s.change_points.is_empty() {
        let _ = writeln!(out, "  no change point");
    }
    for c in &s.change_points {
        let _ = writeln!(out, "  change point {}", change(c, &s.unit));
    }
    if !s.left_out.is_empty() {
        let _ = writeln!(
            out,
            "  {} night(s) left out, another instrument: {}",
            s.left_out.len(),
            s.left_out.join("; ")
        );
    }
}

/// The whole trend.
pub fn trend(t: &Trend) -> String {
    let mut out = String::new();
    match (t.nights.first(), t.nights.last()) {
        (Some(a), Some(b)) => {
            let _ = writeln!(
                out,
                "trend over {} night(s), {} .. {}",
                t.nights.len(),
                a.run_id,
                b.run_id
            );
        }
        _ => out.push_str("trend: no nights in the store\n"),
    }
    let _ = writeln!(out, "{}", t.method);
    for s in &t.series {
        series(&mut out, s);
    }
    out
}

/// The gate's verdict.
pub fn gate(g: &GateReport) -> String {
    let mut out = String::new();
    let verdict = match g.outcome {
        GateOutcome::Pass => "pass",
        GateOutcome::Fail => "FAIL",
        GateOutcome::NotEnoughNights => "not enough nights yet",
    };
    let _ = writeln!(
        out,
        "gate on tonight {} ({}): {verdict} (exit {})",
        g.tonight.run_id,
        g.tonight.started,
        g.outcome.exit_code()
    );
    for (what, list) in [
        ("REGRESSION", &g.regressions),
        ("already reported", &g.already_reported),
        ("improvement", &g.improvements),
    ] {
        for f in list {
            let _ = writeln!(
                out,
                "  {what}: {} ({}) {}: {}",
                f.label,
                f.cell_id,
                f.key,
                change(&f.change, "")
            );
        }
    }
    for b in &g.broken {
        let _ = writeln!(out, "  BROKEN: {b}");
    }
    let _ = writeln!(
        out,
        "  {} series checked, {} with fewer than {} nights; a regression fails the gate when it \
         begins within the last {} night(s), two nights show it, its p x {} (Bonferroni over the \
         series checked) is under alpha, and its nights are no more spread than the nights \
         before (F-test, 0.01)",
        g.decided_series,
        g.too_short,
        super::MIN_NIGHTS,
        g.within_nights,
        g.decided_series
    );
    out
}
