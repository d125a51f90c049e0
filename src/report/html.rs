//! One self-contained HTML page for a run: inline CSS and SVG only (no scripts, fonts or
//! links), so it opens offline and can be mailed. Every piece of text from the results is
//! escaped: cell labels, reasons and provenance come from the host and the guest.

use super::summary::{group_by_cell, metric_infos, Agg, CellGroup, MetricInfo};
use crate::results::{Better, CellResult, RunRecord};
use std::fmt::Write;

/// Escapes text for HTML and SVG element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];
const LABEL_W: f64 = 300.0;
const PLOT_W: f64 = 420.0;
const ROW_H: f64 = 22.0;

/// "higher is better" / "lower is better".
fn direction(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    }
}

/// The whole page.
pub fn html(run: &RunRecord) -> String {
    let mut groups = group_by_cell(&run.cells);
    for (g, t) in groups
        .iter_mut()
        .zip(super::summary::column_titles(&group_by_cell(&run.cells)))
    {
        g.label = t;
    }
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>vmbench run {}</h1><p>Started {} &mdash; <code>{}</code></p>",
        esc(&run.run_id),
        esc(&run.started),
        esc(&run.command.join(" "))
    );
    body.push_str("<h2>Metrics</h2>");
    let infos = metric_infos(groups.iter().flat_map(|g| g.passed()));
    for info in &infos {
        if groups
            .iter()
            .any(|g| g.status_word().is_none() && !matches!(g.agg(&info.key), Agg::Missing))
        {
            body.push_str(&bar_chart(info, &groups));
        }
    }
    body.push_str(&latency_chart(&groups));
    body.push_str("<h2>Per-second samples</h2>");
    for key in series_keys(&run.cells) {
        body.push_str(&series_chart(&key, &groups));
    }
    body.push_str(&outcomes_table(&groups));
    body.push_str(&provenance_table(&groups));
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vmbench {}</title>\
         <style>{CSS}</style></head><body>{body}</body></html>\n",
        esc(&run.run_id)
    )
}

const CSS: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}figure{margin:1em 0}\
figcaption{font-weight:bold;margin-bottom:.3em}table{border-collapse:collapse}\
td,th{border:1px solid #bbb;padding:.2em .5em;text-align:left}svg text{font-size:12px}";

/// A figure around one chart.
fn figure(id: &str, caption: &str, width: f64, height: f64, inner: &str) -> String {
    format!(
        "<figure class=\"chart\" data-chart=\"{id}\"><figcaption>{cap}</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\"><title>{cap}</title>{inner}</svg></figure>",
        id = esc(id),
        cap = esc(caption),
    )
}

/// A horizontal bar per cell (mean over repeats) with a ±1 sd error bar when n > 1.
fn bar_chart(info: &MetricInfo, groups: &[CellGroup<'_>]) -> String {
    let aggs: Vec<Agg> = groups.iter().map(|g| g.agg(&info.key)).collect();
    let max = aggs
        .iter()
        .filter_map(agg_top)
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut inner = String::new();
    for (i, (g, agg)) in groups.iter().zip(&aggs).enumerate() {
        let y = 8.0 + i as f64 * ROW_H;
        inner.push_str(&row_label(&g.label, y + 14.0));
        let text = match (g.status_word(), agg) {
            (Some(w), _) => w.to_string(),
            (None, Agg::Numbers { stats, .. }) => {
                let w = stats.mean / max * PLOT_W;
                let _ = write!(
                    inner,
                    "<rect x=\"{LABEL_W}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                    y + 3.0,
                    ROW_H - 6.0,
                    PALETTE[i % PALETTE.len()]
                );
                if let Some(sd) = stats.stddev {
                    inner.push_str(&error_bar(stats.mean, sd, max, y + ROW_H / 2.0));
                }
                super::summary::fmt_agg(agg, &info.unit, true)
            }
            (None, other) => super::summary::fmt_agg(other, &info.unit, true),
        };
        let tx = LABEL_W + PLOT_W + 8.0;
        let _ = write!(
            inner,
            "<text x=\"{tx}\" y=\"{:.1}\">{}</text>",
            y + 14.0,
            esc(&text)
        );
    }
    // The read share checks the job's mix; neither direction is better.
    let dir = if info.key == "read_share_pct" {
        "mix check, not a figure of merit"
    } else {
        direction(info.better)
    };
    let caption = format!("{} ({}) — {dir}", info.label, info.unit);
    let h = 16.0 + groups.len() as f64 * ROW_H;
    figure(&info.key, &caption, LABEL_W + PLOT_W + 200.0, h, &inner)
}

/// A cell label left of the bars, shortened to fit (the full label stays in a tooltip).
fn row_label(label: &str, y: f64) -> String {
    const MAX: usize = 46;
    let shown: String = if label.chars().count() > MAX {
        label.chars().take(MAX - 1).chain(['…']).collect()
    } else {
        label.to_string()
    };
    format!(
        "<text x=\"4\" y=\"{y:.1}\"><title>{}</title>{}</text>",
        esc(label),
        esc(&shown)
    )
}

/// The right end of a bar with its error bar.
fn agg_top(a: &Agg) -> Option<f64> {
    match a {
        Agg::Numbers { stats, .. } => Some(stats.mean + stats.stddev.unwrap_or(0.0)),
        _ => None,
    }
}

/// A ±sd whisker at height `y`.
fn error_bar(mean: f64, sd: f64, max: f64, y: f64) -> String {
    let x0 = LABEL_W + ((mean - sd).max(0.0) / max * PLOT_W);
    let x1 = LABEL_W + ((mean + sd) / max * PLOT_W);
    format!(
        "<g class=\"errorbar\" stroke=\"#000\"><line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\"/>\
         <line x1=\"{x0:.1}\" y1=\"{:.1}\" x2=\"{x0:.1}\" y2=\"{:.1}\"/><line x1=\"{x1:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\"/></g>",
        y - 4.0,
        y + 4.0,
        y - 4.0,
        y + 4.0
    )
}

const LAT_KEYS: [(&str, &str); 4] = [
    ("read_lat_mean_us", "read avg"),
    ("read_lat_p99_us", "read p99"),
    ("write_lat_mean_us", "write avg"),
    ("write_lat_p99_us", "write p99"),
];

/// Mean and p99 latency, read and write, grouped per cell.
fn latency_chart(groups: &[CellGroup<'_>]) -> String {
    let rows: Vec<(&CellGroup<'_>, Vec<Option<f64>>)> = groups
        .iter()
        .filter(|g| g.status_word().is_none())
        .map(|g| (g, LAT_KEYS.iter().map(|(k, _)| mean_of(g, k)).collect()))
        .filter(|(_, v): &(_, Vec<Option<f64>>)| v.iter().any(Option::is_some))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b))
        .max(f64::MIN_POSITIVE);
    let bar_h = 12.0;
    let group_h = bar_h * 4.0 + 10.0;
    let mut inner = String::new();
    for (k, (_, name)) in LAT_KEYS.iter().enumerate() {
        let x = LABEL_W + k as f64 * 100.0;
        let _ = write!(inner, "<rect x=\"{x}\" y=\"4\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"13\">{name}</text>", PALETTE[k], x + 14.0);
    }
    for (i, (g, vals)) in rows.iter().enumerate() {
        let y0 = 24.0 + i as f64 * group_h;
        inner.push_str(&row_label(&g.label, y0 + group_h / 2.0));
        for (k, v) in vals.iter().enumerate() {
            let Some(v) = v else { continue };
            let y = y0 + k as f64 * bar_h;
            let w = v / max * PLOT_W;
            let _ = write!(
                inner,
                "<rect x=\"{LABEL_W}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{} µs</text>",
                bar_h - 2.0,
                PALETTE[k],
                LABEL_W + w + 4.0,
                y + 9.0,
                esc(&super::summary::fmt_number(*v, "µs"))
            );
        }
    }
    let h = 30.0 + rows.len() as f64 * group_h;
    figure(
        "latency",
        "Latency, mean and p99 (µs) — lower is better",
        LABEL_W + PLOT_W + 120.0,
        h,
        &inner,
    )
}

/// Mean over passed repeats of a numeric metric.
fn mean_of(g: &CellGroup<'_>, key: &str) -> Option<f64> {
    match g.agg(key) {
        Agg::Numbers { stats, .. } => Some(stats.mean),
        _ => None,
    }
}

/// Every series key in the results, sorted.
fn series_keys(results: &[CellResult]) -> Vec<String> {
    let mut keys: Vec<String> = results
        .iter()
        .flat_map(|r| r.samples.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Unit and direction of a series key.
fn series_meta(key: &str) -> (&'static str, Better) {
    if key.ends_with("_iops") {
        ("IOPS", Better::Higher)
    } else if key.ends_with("_mib_s") {
        ("MiB/s", Better::Higher)
    } else if key.ends_with("_us") {
        ("µs", Better::Lower)
    } else if key.ends_with("_pct") {
        ("%", Better::Lower)
    } else {
        ("", Better::Higher)
    }
}

/// One line per cell and repeat, x in seconds.
fn series_chart(key: &str, groups: &[CellGroup<'_>]) -> String {
    let lines: Vec<(String, &Vec<f64>)> = groups
        .iter()
        .flat_map(|g| {
            g.passed().filter_map(move |r| {
                r.samples
                    .get(key)
                    .map(|s| (format!("{} #{}", g.label, r.repeat), s))
            })
        })
        .filter(|(_, s)| s.iter().all(|v| v.is_finite()))
        .collect();
    let (w, h, left, top, bottom) = (PLOT_W + 240.0, 220.0, 70.0, 10.0, 30.0);
    let pw = PLOT_W;
    let ph = h - top - bottom;
    let n = lines.iter().map(|(_, s)| s.len()).max().unwrap_or(0).max(2);
    let ymax = lines
        .iter()
        .flat_map(|(_, s)| s.iter())
        .fold(0.0f64, |a, b| a.max(*b))
        .max(f64::MIN_POSITIVE);
    let (unit, better) = series_meta(key);
    let mut inner = format!(
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{:.1}\" stroke=\"#000\"/><line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\"/>\
         <text x=\"2\" y=\"{:.1}\">{}</text><text x=\"2\" y=\"{:.1}\">0</text><text x=\"{:.1}\" y=\"{:.1}\">{} s</text>",
        top + ph,
        top + ph,
        left + pw,
        top + ph,
        top + 10.0,
        esc(&super::summary::with_unit(ymax, unit)),
        top + ph,
        left + pw - 20.0,
        h - 8.0,
        n
    );
    for (i, (name, s)) in lines.iter().enumerate() {
        let pts: Vec<String> = s
            .iter()
            .enumerate()
            .map(|(x, v)| {
                format!(
                    "{:.1},{:.1}",
                    left + x as f64 / (n - 1) as f64 * pw,
                    top + ph - v / ymax * ph
                )
            })
            .collect();
        let c = PALETTE[i % PALETTE.len()];
        let _ = write!(
            inner,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{c}\">{}</text>",
            pts.join(" "),
            left + pw + 8.0,
            top + 12.0 + i as f64 * 14.0,
            esc(name)
        );
    }
    let caption = format!("{key} per second ({unit}) — {}", direction(better));
    figure(&format!("series-{key}"), &caption, w, h, &inner)
}

/// Outcome of every cell.
fn outcomes_table(groups: &[CellGroup<'_>]) -> String {
    let mut s = String::from(
        "<h2>Outcomes</h2><table><tr><th>Cell</th><th>Id</th><th>Repeats</th><th>Outcome</th></tr>",
    );
    for g in groups {
        let _ = write!(
            s,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            esc(&g.label),
            esc(&g.cell_id),
            g.repeats.len(),
            esc(&g.outcome())
        );
    }
    s.push_str("</table>");
    s
}

/// Where each cell's numbers came from (first repeat's provenance).
fn provenance_table(groups: &[CellGroup<'_>]) -> String {
    let mut s = String::from(
        "<h2>Provenance</h2><table><tr><th>Cell</th><th>Host</th><th>Kernel</th><th>CPU</th><th>QEMU</th>\
         <th>libvirt</th><th>Guest kernel</th><th>fio</th><th>bonnie++</th><th>Image</th><th>vmbench</th></tr>",
    );
    for g in groups {
        let p = &g.repeats[0].provenance;
        let _ = write!(s, "<tr><td>{}</td>", esc(&g.label));
        for v in [
            &p.host,
            &p.host_kernel,
            &p.cpu_model,
            &p.qemu,
            &p.libvirt,
            &p.guest_kernel,
            &p.fio,
            &p.bonnie,
            &p.image,
            &p.vmbench,
        ] {
            let _ = write!(s, "<td>{}</td>", esc(v));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}
