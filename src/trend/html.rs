//! The trend as one self-contained HTML page: per cell x metric, an SVG chart of the nightly
//! values with each night's 95% CI, the segment medians between change points, the change points
//! marked, and the nights where the system under test changed annotated.

use super::{GateOutcome, GateReport, Series, Trend};
use crate::report::html::esc;
use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 230.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 30.0;

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
h2{font-size:1.05em;margin:1.6em 0 .3em}table{border-collapse:collapse;font-size:.85em}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.fail{color:#b00;font-weight:bold}\
.pass{color:#070;font-weight:bold}.note{color:#555;font-size:.85em}pre{white-space:pre-wrap}svg{background:#fafafa;border:1px solid #ddd}";

/// Maps nights and values to the chart's pixels.
struct Scale {
    nights: usize,
    lo: f64,
    hi: f64,
}

impl Scale {
    fn new(s: &Series, nights: usize) -> Scale {
        let vals = s.points.iter().flat_map(|p| {
            let (a, b) = p.ci95.unwrap_or((p.mean, p.mean));
            [a, b, p.mean]
        });
        let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.01).max(1e-9);
        Scale {
            nights,
            lo: (lo - pad).min(0.0f64.max(lo - pad)),
            hi: hi + pad,
        }
    }
    fn x(&self, night: usize) -> f64 {
        let span = (self.nights.max(2) - 1) as f64;
        LEFT + (W - LEFT - RIGHT) * night as f64 / span
    }
    fn y(&self, v: f64) -> f64 {
        TOP + (H - TOP - BOTTOM) * (1.0 - (v - self.lo) / (self.hi - self.lo))
    }
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn axes(out: &mut String, sc: &Scale, s: &Series, t: &Trend) {
    for i in 0..=4 {
        let v = sc.lo + (sc.hi - sc.lo) * i as f64 / 4.0;
        let y = sc.y(v);
        let _ = write!(
            out,
            "<line x1='{LEFT}' x2='{}' y1='{y:.1}' y2='{y:.1}' stroke='#e4e4e4'/>\
             <text x='{}' y='{:.1}' font-size='10' text-anchor='end'>{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            y + 3.0,
            fmt(v)
        );
    }
    let _ = write!(
        out,
        "<text x='8' y='14' font-size='10'>{} [{}]</text>",
        esc(&s.metric_label),
        esc(&s.unit)
    );
    let step = (t.nights.len() / 8).max(1);
    for n in (0..t.nights.len()).step_by(step) {
        let _ = write!(
            out,
            "<text x='{:.1}' y='{}' font-size='9' text-anchor='middle'>{}</text>",
            sc.x(n),
            H - 12.0,
            n + 1
        );
    }
    let _ = write!(
        out,
        "<text x='{}' y='{}' font-size='9' text-anchor='end'>night</text>",
        W - RIGHT,
        H - 2.0
    );
}

fn segments(out: &mut String, sc: &Scale, s: &Series) {
    let mut bounds: Vec<usize> = vec![0];
    bounds.extend(s.change_points.iter().map(|c| c.point));
    bounds.push(s.points.len());
    for w in bounds.windows(2) {
        let pts = &s.points[w[0]..w[1]];
        let (Some(a), Some(b)) = (pts.first(), pts.last()) else {
            continue;
        };
        // The median, where the change's direction and size are measured from: a mean line
        // lifted by one odd night would draw an improvement as a step up.
        let values: Vec<f64> = pts.iter().map(|p| p.mean).collect();
        let m = super::edivisive::median_of(&values);
        let _ = write!(
            out,
            "<line x1='{:.1}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#2a7' stroke-width='2' \
             stroke-dasharray='6,3'><title>segment median {} over {} nights</title></line>",
            sc.x(a.night),
            sc.x(b.night),
            sc.y(m),
            sc.y(m),
            fmt(m),
            pts.len()
        );
    }
}

fn nights(out: &mut String, sc: &Scale, s: &Series, t: &Trend) {
    for (i, p) in s.points.iter().enumerate() {
        let x = sc.x(p.night);
        if let Some((lo, hi)) = p.ci95 {
            let _ = write!(
                out,
                "<line x1='{x:.1}' x2='{x:.1}' y1='{:.1}' y2='{:.1}' stroke='#79a'/>",
                sc.y(lo),
                sc.y(hi)
            );
        }
        let ci = p.ci95.map_or("no CI".into(), |(a, b)| {
            format!("95% CI [{}, {}]", fmt(a), fmt(b))
        });
        let _ = write!(
            out,
            "<circle cx='{x:.1}' cy='{:.1}' r='3' fill='#246'><title>night {} {}: {} {} ({ci}, n={})</title></circle>",
            sc.y(p.mean),
            p.night + 1,
            esc(&t.nights[p.night].run_id),
            fmt(p.mean),
            esc(&s.unit),
            p.n
        );
        // The system under test changed since the series' previous night.
        let Some(prev) = i.checked_sub(1).map(|j| &s.points[j]) else {
            continue;
        };
        let changed: Vec<String> = super::sut_changes(&prev.provenance, &p.provenance)
            .iter()
            .map(|c| format!("{}: {} -> {}", c.what, c.before, c.after))
            .collect();
        if !changed.is_empty() {
            let text = changed.join("; ");
            let _ = write!(
                out,
                "<g class='sut'><path d='M{:.1},{} l-5,-8 l10,0 z' fill='#e80'/>\
                 <text x='{:.1}' y='{}' font-size='9' fill='#a50'>{}</text><title>system under test changed: {}</title></g>",
                x,
                TOP - 2.0,
                x + 6.0,
                TOP - 4.0,
                esc(&text),
                esc(&text)
            );
        }
    }
}

fn change_marks(out: &mut String, sc: &Scale, s: &Series) {
    for c in &s.change_points {
        // Between the last night before and the first after.
        let x = (sc.x(s.points[c.point - 1].night) + sc.x(c.night)) / 2.0;
        let colour = if c.regression { "#c00" } else { "#070" };
        let _ = write!(
            out,
            "<line class='cp' x1='{x:.1}' x2='{x:.1}' y1='{TOP}' y2='{}' stroke='{colour}' \
             stroke-width='2'/><text x='{:.1}' y='{}' font-size='10' fill='{colour}'>{:+.1}%</text>",
            H - BOTTOM,
            x + 3.0,
            TOP + 10.0,
            c.change_pct
        );
    }
}

fn chart(s: &Series, t: &Trend) -> String {
    let sc = Scale::new(s, t.nights.len());
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}'>"
    );
    axes(&mut out, &sc, s, t);
    segments(&mut out, &sc, s);
    nights(&mut out, &sc, s, t);
    change_marks(&mut out, &sc, s);
    out.push_str("</svg>");
    out
}

fn table(s: &Series) -> String {
    if s.change_points.is_empty() {
        return "<p class='note'>no change point</p>".into();
    }
    let mut out = String::from(
        "<table><tr><th>began on night</th><th>before (median; mean, 95% CI; nights)</th>\
         <th>after</th><th>change of the median</th><th>p</th><th>system under test that night</th></tr>",
    );
    for c in &s.change_points {
        let seg = |g: &super::Segment| {
            let ci = g
                .ci95
                .map_or("no CI".into(), |(a, b)| format!("[{}, {}]", fmt(a), fmt(b)));
            format!("{}; {} {ci}; {}", fmt(g.median), fmt(g.mean), g.nights)
        };
        let sut = if c.sut_changes.is_empty() {
            "no recorded change".to_string()
        } else {
            c.sut_changes
                .iter()
                .map(|x| format!("{}: {} -> {}", x.what, x.before, x.after))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = write!(
            out,
            "<tr><td>{} ({})</td><td>{}</td><td>{}</td><td class='{}'>{:+.1}%</td><td>{:.2e}</td><td>{}</td></tr>",
            c.night + 1,
            esc(&c.run_id),
            seg(&c.before),
            seg(&c.after),
            if c.regression { "fail" } else { "pass" },
            c.change_pct,
            c.p_value,
            esc(&sut)
        );
    }
    out.push_str("</table>");
    out
}

fn verdict(g: &GateReport) -> String {
    let (class, word) = match g.outcome {
        GateOutcome::Pass => ("pass", "pass"),
        GateOutcome::Fail => ("fail", "FAIL"),
        GateOutcome::NotEnoughNights => ("note", "not enough nights yet"),
    };
    format!(
        "<p>Gate on tonight {}: <span class='{class}'>{word}</span> (exit {})</p><pre>{}</pre>",
        esc(&g.tonight.run_id),
        g.outcome.exit_code(),
        esc(&g.text())
    )
}

/// The page.
pub fn page(t: &Trend, gate: Option<&GateReport>) -> String {
    let mut out = format!(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>vmbench trend</title>\
         <style>{STYLE}</style></head><body><h1>vmbench trend: {} night(s)</h1><p class='note'>{}</p>",
        t.nights.len(),
        esc(&t.method)
    );
    if let Some(g) = gate {
        out.push_str(&verdict(g));
    }
    for s in &t.series {
        let _ = write!(
            out,
            "<h2>{} &mdash; {}</h2><div class='note'>{}</div>{}{}",
            esc(&s.label),
            esc(&s.metric_label),
            esc(&s.cell_id),
            chart(s, t),
            table(s)
        );
    }
    out.push_str("</body></html>\n");
    out
}
