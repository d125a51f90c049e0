//! One self-contained HTML page for a run: inline CSS and SVG only (no scripts, fonts or
//! links), so it opens offline and can be mailed. Every piece of text from the results is
//! escaped: cell labels, reasons and provenance come from the host and the guest.
//!
//! Reading order, for someone who has ten seconds: the summary table (headline metrics x cells,
//! with n and spread), headline charts as small multiples grouped by the dimensions that vary
//! (whiskers: 95% confidence intervals over repeats), per-second time series (stability), the
//! sweeps (`sweep.rs`, when a sweep dimension varies) and where the latency comes from
//! (`latency_split.rs`), then the full metric list (collapsed), outcomes and provenance.
//!
//! The building blocks ([`page`], [`table`], [`BarChart`], [`LineChart`]) know nothing about
//! runs, so other pages (a comparison, say) can reuse them.

use super::summary::{fmt_agg, group_by_cell, metric_infos, with_unit, Agg, CellGroup};
use crate::cell::Cell;
use crate::results::{Better, CellResult, Outcome, Provenance, RunRecord};
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

/// Colour-blind-safe categorical palette (Tableau 10).
pub const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}\
h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;\
text-align:left;vertical-align:top}th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}\
.spread{display:block;color:#666;font-size:.8em}.note{color:#555;font-size:.9em}\
.grid{display:flex;flex-wrap:wrap;gap:.5em 1em}figure{margin:.4em 0}\
figcaption{font-weight:600;font-size:.9em;margin-bottom:.2em}svg text{font-size:11px;fill:#222}\
.passed{color:#1a7f37}.failed{color:#b42318;font-weight:600}.unsupported,.skipped{color:#8a6d00}\
.banner{padding:.5em .8em;background:#fff4e5;border-left:4px solid #f28e2b}\
details summary{cursor:pointer;font-weight:600}";

/// A complete page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{CSS}</style></head><body>{body}</body></html>\n",
        esc(title)
    )
}

/// One table cell: text (escaped here), an optional second line of small print, and a class.
#[derive(Debug, Clone, Default)]
pub struct TableCell {
    /// Main text.
    pub text: String,
    /// Small print under it (spread, reasons).
    pub sub: Option<String>,
    /// CSS class (`num`, `failed` ...).
    pub class: Option<&'static str>,
    /// Tooltip.
    pub title: Option<String>,
}

impl From<String> for TableCell {
    fn from(text: String) -> Self {
        TableCell {
            text,
            ..Default::default()
        }
    }
}

/// A table with a header row; every text is escaped.
pub fn table(id: &str, head: &[String], rows: &[Vec<TableCell>]) -> String {
    let mut s = format!("<table id=\"{}\"><tr>", esc(id));
    for h in head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr>");
    for row in rows {
        s.push_str("<tr>");
        for c in row {
            s.push_str("<td");
            if let Some(class) = c.class {
                let _ = write!(s, " class=\"{class}\"");
            }
            if let Some(t) = &c.title {
                let _ = write!(s, " title=\"{}\"", esc(t));
            }
            let _ = write!(s, ">{}", esc(&c.text));
            if let Some(sub) = &c.sub {
                let _ = write!(s, "<span class=\"spread\">{}</span>", esc(sub));
            }
            s.push_str("</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

/// A figure around one SVG.
pub(crate) fn figure(id: &str, caption: &str, width: f64, height: f64, inner: &str) -> String {
    format!(
        "<figure class=\"chart\" data-chart=\"{id}\"><figcaption>{cap}</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\"><title>{cap}</title>{inner}</svg></figure>",
        id = esc(id),
        cap = esc(caption),
    )
}

/// "higher is better" / "lower is better".
pub fn direction(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    }
}

/// One bar of a [`BarChart`].
#[derive(Debug, Clone)]
pub struct Bar {
    /// Cluster the bar belongs to (empty: none); consecutive bars of one cluster share a heading.
    pub group: String,
    /// The bar's own label.
    pub label: String,
    /// Length; `None` draws no bar and shows `note` instead.
    pub value: Option<f64>,
    /// Whisker half-width (a confidence interval) around `value`.
    pub err: Option<f64>,
    /// Text right of the bar.
    pub note: String,
    /// Colour index into [`PALETTE`].
    pub colour: usize,
}

/// A small horizontal bar chart with optional whiskers.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Stable id (`data-chart`).
    pub id: String,
    /// Caption.
    pub caption: String,
    /// Bars, in drawing order.
    pub bars: Vec<Bar>,
}

const BAR_LABEL_W: f64 = 150.0;
const BAR_PLOT_W: f64 = 170.0;
const BAR_NOTE_W: f64 = 110.0;
const BAR_ROW_H: f64 = 18.0;

impl BarChart {
    /// The chart as a `<figure>`.
    pub fn render(&self) -> String {
        // With few repeats a 95% interval can be many times the mean (t = 12.7 at n = 2);
        // scaling to it would squash every bar, so whiskers past 1.6x the largest bar are cut
        // at the edge and marked with an arrow.
        let top_mean = self
            .bars
            .iter()
            .filter_map(|b| b.value)
            .fold(0.0f64, f64::max);
        let limit = top_mean * 1.6;
        let max = self
            .bars
            .iter()
            .filter_map(|b| b.value.map(|v| (v + b.err.unwrap_or(0.0)).min(limit)))
            .fold(0.0f64, f64::max)
            .max(f64::MIN_POSITIVE);
        let scale = |v: f64| BAR_LABEL_W + (v.clamp(0.0, max) / max * BAR_PLOT_W);
        let mut inner = String::new();
        let mut y = 4.0;
        let mut last_group: Option<&str> = None;
        for b in &self.bars {
            if !b.group.is_empty() && last_group != Some(b.group.as_str()) {
                let _ = write!(
                    inner,
                    "<text x=\"2\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
                    y + 12.0,
                    esc(&shorten(&b.group, 40))
                );
                y += BAR_ROW_H;
            }
            last_group = Some(b.group.as_str());
            let indent = if b.group.is_empty() { 2.0 } else { 12.0 };
            let _ = write!(
                inner,
                "<text x=\"{indent}\" y=\"{:.1}\"><title>{}</title>{}</text>",
                y + 12.0,
                esc(&b.label),
                esc(&shorten(&b.label, 24))
            );
            if let Some(v) = b.value {
                let _ = write!(
                    inner,
                    "<rect x=\"{BAR_LABEL_W}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                    y + 3.0,
                    scale(v) - BAR_LABEL_W,
                    BAR_ROW_H - 6.0,
                    PALETTE[b.colour % PALETTE.len()]
                );
                if let Some(e) = b.err {
                    let cut = v + e > max;
                    inner.push_str(&whisker(
                        scale(v - e),
                        scale(v + e),
                        y + BAR_ROW_H / 2.0,
                        cut,
                    ));
                }
            }
            let _ = write!(
                inner,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                BAR_LABEL_W + BAR_PLOT_W + 6.0,
                y + 12.0,
                esc(&b.note)
            );
            y += BAR_ROW_H;
        }
        let w = BAR_LABEL_W + BAR_PLOT_W + BAR_NOTE_W;
        figure(&self.id, &self.caption, w, y + 4.0, &inner)
    }
}

/// A horizontal whisker from `x0` to `x1` at height `y`; `cut` ends it in an arrow (the
/// interval goes on past the plot).
fn whisker(x0: f64, x1: f64, y: f64, cut: bool) -> String {
    let end = if cut {
        format!("<path d=\"M{x1:.1},{y:.1} l-6,-4 v8 z\" fill=\"#222\" stroke=\"none\"/>")
    } else {
        format!(
            "<line x1=\"{x1:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\"/>",
            y - 4.0,
            y + 4.0
        )
    };
    format!(
        "<g class=\"errorbar\" stroke=\"#222\" stroke-width=\"1.2\"><line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\"/>\
         <line x1=\"{x0:.1}\" y1=\"{:.1}\" x2=\"{x0:.1}\" y2=\"{:.1}\"/>{end}</g>",
        y - 4.0,
        y + 4.0,
    )
}

/// Shortens text to `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        s.chars().take(max - 1).chain(['…']).collect()
    } else {
        s.to_string()
    }
}

/// A line chart: x is the sample index (seconds), one line per series.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Stable id (`data-chart`).
    pub id: String,
    /// Caption.
    pub caption: String,
    /// Unit of the y axis.
    pub unit: String,
    /// (name, values, colour index).
    pub series: Vec<(String, Vec<f64>, usize)>,
}

impl LineChart {
    /// The chart as a `<figure>`.
    pub fn render(&self) -> String {
        let (left, top, pw, ph) = (64.0, 8.0, 330.0, 130.0);
        let legend_top = top + ph + 28.0;
        let h = legend_top + self.series.len() as f64 * 14.0 + 4.0;
        let w = left + pw + 16.0;
        let n = self.series.iter().map(|s| s.1.len()).max().unwrap_or(0);
        let ymax = nice_ceiling(
            self.series
                .iter()
                .flat_map(|s| s.1.iter())
                .fold(0.0f64, |a, b| a.max(*b)),
        );
        let xs = |i: usize| left + i as f64 / (n.max(2) - 1) as f64 * pw;
        let ys = |v: f64| top + ph - v / ymax * ph;
        let mut inner = String::new();
        for k in 0..=2 {
            let v = ymax * k as f64 / 2.0;
            let _ =
                write!(
                inner,
                "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left + pw,
                left - 4.0,
                ys(v) + 4.0,
                esc(&if k == 0 { "0".to_string() } else { with_unit(v, &self.unit) }),
                y = ys(v),
            );
        }
        let _ = write!(
            inner,
            "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{:.1}\" stroke=\"#444\"/>\
             <text x=\"{left}\" y=\"{:.1}\">0 s</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} s</text>",
            top + ph,
            top + ph + 14.0,
            left + pw,
            top + ph + 14.0,
            n.saturating_sub(1)
        );
        for (i, (name, values, colour)) in self.series.iter().enumerate() {
            let c = PALETTE[colour % PALETTE.len()];
            let pts: Vec<String> = values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(x, v)| format!("{:.1},{:.1}", xs(x), ys(*v)))
                .collect();
            let ly = legend_top + i as f64 * 14.0;
            let _ = write!(
                inner,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.6\" points=\"{}\"/>\
                 <line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"3\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                pts.join(" "),
                ly - 4.0,
                left + 14.0,
                ly - 4.0,
                left + 18.0,
                ly,
                esc(&shorten(name, 56))
            );
        }
        figure(&self.id, &self.caption, w, h, &inner)
    }
}

/// A round number at or above `v` (1, 2, 2.5, 5 x 10^k) so axis labels read well.
pub(crate) fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// The dimensions of a cell, by display name (`xen mode`, not `xen_mode`).
fn dimensions(c: &Cell) -> Vec<(String, String)> {
    c.dimensions()
        .into_iter()
        .map(|(k, v)| (k.replace('_', " "), v))
        .collect()
}

/// Which dimensions vary across the groups (indices into [`dimensions`]), and the fixed ones
/// with their single value.
fn varying(groups: &[CellGroup<'_>]) -> (Vec<usize>, Vec<(String, String)>) {
    let dims: Vec<_> = groups
        .iter()
        .map(|g| dimensions(&g.repeats[0].cell))
        .collect();
    let mut vary = Vec::new();
    let mut fixed = Vec::new();
    let n = dims.first().map_or(0, Vec::len);
    for i in 0..n {
        let first = dims.first().map(|d| d[i].1.clone()).unwrap_or_default();
        if dims.iter().any(|d| d[i].1 != first) {
            vary.push(i);
        } else if !first.is_empty() {
            fixed.push((dims[0][i].0.clone(), first));
        }
    }
    (vary, fixed)
}

/// Per group: (cluster, short label). Clusters by the first varying dimension when two or more
/// vary; the label names the remaining varying dimensions' values.
fn short_labels(groups: &[CellGroup<'_>], vary: &[usize]) -> Vec<(String, String)> {
    groups
        .iter()
        .map(|g| {
            let d = dimensions(&g.repeats[0].cell);
            let (cluster, label) = match vary {
                [] => (String::new(), g.label.clone()),
                [one] => (String::new(), d[*one].1.clone()),
                [first, rest @ ..] => (
                    format!("{} {}", d[*first].0, d[*first].1),
                    rest.iter()
                        .map(|i| d[*i].1.as_str())
                        // KVM cells have no Xen mode: nothing to show, not an empty slot.
                        .filter(|v| !v.is_empty())
                        .collect::<Vec<_>>()
                        .join(" / "),
                ),
            };
            // A label left empty (only a blank dimension differs) falls back to the cell's.
            if label.is_empty() {
                (cluster, g.label.clone())
            } else {
                (cluster, label)
            }
        })
        .collect()
}

/// Groups in cluster order (stable within a cluster), so a cluster's bars sit together.
fn clustered<'a, 'b>(
    groups: &'b [CellGroup<'a>],
    labels: &'b [(String, String)],
) -> Vec<(usize, &'b CellGroup<'a>)> {
    let mut order: Vec<&str> = Vec::new();
    for (c, _) in labels {
        if !order.contains(&c.as_str()) {
            order.push(c);
        }
    }
    let mut out: Vec<(usize, &CellGroup<'a>)> = groups.iter().enumerate().collect();
    out.sort_by_key(|(i, _)| order.iter().position(|c| *c == labels[*i].0));
    out
}

/// `±3.1% sd · 95% CI ±75 IOPS · n=5`, or `n=1`.
fn spread_line(agg: &Agg, unit: &str) -> Option<String> {
    let Agg::Numbers { stats, .. } = agg else {
        return None;
    };
    match (stats.rel_sd_pct(), stats.ci95_half()) {
        (_, Some(ci)) if unit == "%" => Some(format!(
            "sd ±{:.2} pt · 95% CI ±{ci:.2} pt · n={}",
            stats.stddev.unwrap_or(0.0),
            stats.n
        )),
        (Some(rel), Some(ci)) => Some(format!(
            "sd ±{rel:.1}% · 95% CI ±{} · n={}",
            with_unit(ci, unit),
            stats.n
        )),
        _ => Some(format!("n={}", stats.n)),
    }
}

/// The page's context: groups with display titles, and what varies.
struct View<'a> {
    groups: Vec<CellGroup<'a>>,
    labels: Vec<(String, String)>,
    fixed: Vec<(String, String)>,
}

impl<'a> View<'a> {
    fn new(cells: &'a [CellResult]) -> Self {
        let mut groups = group_by_cell(cells);
        let titles = super::summary::column_titles(&groups);
        for (g, t) in groups.iter_mut().zip(titles) {
            g.label = t;
        }
        let (vary, fixed) = varying(&groups);
        let labels = short_labels(&groups, &vary);
        View {
            groups,
            labels,
            fixed,
        }
    }

    /// A column head for group `i`: cluster and label together.
    fn head(&self, i: usize) -> String {
        match &self.labels[i] {
            (c, l) if c.is_empty() => l.clone(),
            (c, l) => format!("{c} · {l}"),
        }
    }
}

/// The whole page.
pub fn html(run: &RunRecord) -> String {
    let view = View::new(&run.cells);
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>vmbench run {}</h1><p class=\"note\">Started {} &mdash; <code>{}</code></p>",
        esc(&run.run_id),
        esc(&run.started),
        esc(&run.command.join(" "))
    );
    body.push_str(&banner(&view));
    body.push_str(&summary_section(&view));
    body.push_str(&headline_charts(&view));
    body.push_str(&series_section(&view));
    body.push_str(&super::sweep::section(&view.groups));
    let heads: Vec<String> = (0..view.groups.len()).map(|i| view.head(i)).collect();
    body.push_str(&super::latency_split::section(&view.groups, &heads));
    body.push_str(&full_metrics(&view));
    body.push_str(&outcomes_section(&view));
    body.push_str(&provenance_section(&view));
    page(&format!("vmbench {}", run.run_id), &body)
}

/// How many cells ended how; a warning colour when any did not pass.
fn banner(view: &View<'_>) -> String {
    let mut counts = [0usize; 4];
    for g in &view.groups {
        let k = match g.repeats.iter().find(|r| r.outcome != Outcome::Passed) {
            None => 0,
            Some(r) => match r.outcome {
                Outcome::Failed(_) => 1,
                Outcome::Unsupported(_) => 2,
                _ => 3,
            },
        };
        counts[k] += 1;
    }
    let parts: Vec<String> = ["passed", "failed", "unsupported", "skipped"]
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(w, n)| format!("{n} {w}"))
        .collect();
    let text = format!("{} cells: {}", view.groups.len(), parts.join(", "));
    if counts[0] == view.groups.len() {
        format!("<p>{}.</p>", esc(&text))
    } else {
        format!(
            "<p class=\"banner\">{}; the reasons are under <a href=\"#outcomes\">Outcomes</a>.</p>",
            esc(&text)
        )
    }
}

/// Headline keys present in the run, with their metric info.
fn headline_infos(view: &View<'_>) -> Vec<super::summary::MetricInfo> {
    let infos = metric_infos(view.groups.iter().flat_map(|g| g.passed()));
    crate::workload::headline_metrics()
        .into_iter()
        .chain(super::CLOUD_ROWS)
        .filter_map(|k| infos.iter().find(|i| i.key == k).cloned())
        .collect()
}

/// The seed-style table: headline metrics as rows, cells as columns, n and spread under each
/// figure, and the outcome as the last row.
fn summary_section(view: &View<'_>) -> String {
    let head: Vec<String> = std::iter::once("Metric".to_string())
        .chain((0..view.groups.len()).map(|i| view.head(i)))
        .collect();
    let mut rows: Vec<Vec<TableCell>> = Vec::new();
    for info in headline_infos(view) {
        let mut row = vec![TableCell {
            text: info.label.clone(),
            sub: Some(direction(info.better).into()),
            ..Default::default()
        }];
        for g in &view.groups {
            let agg = g.agg(&info.key);
            row.push(match g.status_word() {
                Some(w) => TableCell {
                    text: w.into(),
                    class: Some(outcome_class(g)),
                    ..Default::default()
                },
                None => TableCell {
                    text: fmt_agg(&first_line(&agg), &info.unit, true),
                    sub: spread_line(&agg, &info.unit),
                    class: Some("num"),
                    title: None,
                },
            });
        }
        rows.push(row);
    }
    rows.push(
        std::iter::once(TableCell::from("Outcome".to_string()))
            .chain(view.groups.iter().map(|g| TableCell {
                text: g.outcome(),
                class: Some(outcome_class(g)),
                ..Default::default()
            }))
            .collect(),
    );
    let fixed: Vec<String> = view.fixed.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "<h2 id=\"summary\">Summary</h2><p class=\"note\">All cells: {}. Figures are means over \
         the passed repeats; under each, the sample standard deviation relative to the mean, the \
         95% confidence interval of the mean (Student's t) and n.</p>{}",
        esc(&fixed.join(", ")),
        table("summary-table", &head, &rows)
    )
}

/// The mean alone (the spread goes on its own line in the summary).
fn first_line(agg: &Agg) -> Agg {
    match agg {
        Agg::Numbers { stats, too_fast } => Agg::Numbers {
            stats: super::summary::Stats {
                stddev: None,
                ..*stats
            },
            too_fast: *too_fast,
        },
        other => other.clone(),
    }
}

/// CSS class of a group's outcome.
fn outcome_class(g: &CellGroup<'_>) -> &'static str {
    match g.repeats.iter().find(|r| r.outcome != Outcome::Passed) {
        None => "passed",
        Some(r) => match r.outcome {
            Outcome::Failed(_) => "failed",
            Outcome::Unsupported(_) => "unsupported",
            _ => "skipped",
        },
    }
}

/// One small chart per headline metric; bars grouped by the varying dimensions.
fn headline_charts(view: &View<'_>) -> String {
    let mut s = String::from(
        "<h2 id=\"charts\">Headline charts</h2><p class=\"note\">Bars are means over repeats; \
         whiskers the 95% confidence interval of the mean where a cell has n &gt; 1 (an arrow: \
         the interval runs on past the plot).</p><div class=\"grid\">",
    );
    for info in headline_infos(view) {
        let bars = clustered(&view.groups, &view.labels)
            .into_iter()
            .map(|(i, g)| {
                let agg = g.agg(&info.key);
                let (value, err) = match &agg {
                    Agg::Numbers { stats, .. } if g.status_word().is_none() => {
                        (Some(stats.mean), stats.ci95_half())
                    }
                    _ => (None, None),
                };
                let note = match g.status_word() {
                    Some(w) => w.to_string(),
                    None => fmt_agg(&first_line(&agg), &info.unit, true),
                };
                Bar {
                    group: view.labels[i].0.clone(),
                    label: view.labels[i].1.clone(),
                    value,
                    err,
                    note,
                    colour: i,
                }
            })
            .collect();
        let chart = BarChart {
            id: info.key.clone(),
            caption: format!(
                "{} ({}) — {}",
                info.label,
                info.unit,
                direction(info.better)
            ),
            bars,
        };
        s.push_str(&chart.render());
    }
    s.push_str("</div>");
    s
}

/// Unit and direction of a per-second series key.
fn series_meta(key: &str) -> (&'static str, &'static str) {
    if key.ends_with("_iops") {
        ("IOPS", "higher is better")
    } else if key.ends_with("_mib_s") {
        ("MiB/s", "higher is better")
    } else if key.ends_with("_us") {
        ("µs", "lower is better")
    } else if key.ends_with("_pct") {
        ("%", "lower is better")
    } else {
        ("", "")
    }
}

/// Per second, the mean over a group's passed repeats that have that second.
fn mean_series(g: &CellGroup<'_>, key: &str) -> Option<(Vec<f64>, usize)> {
    let runs: Vec<&Vec<f64>> = g.passed().filter_map(|r| r.samples.get(key)).collect();
    let len = runs.iter().map(|s| s.len()).max()?;
    let mean = (0..len)
        .map(|i| {
            let vals: Vec<f64> = runs.iter().filter_map(|s| s.get(i).copied()).collect();
            vals.iter().sum::<f64>() / vals.len() as f64
        })
        .collect();
    Some((mean, runs.len()))
}

/// One line chart per series key, one line per cell.
fn series_section(view: &View<'_>) -> String {
    let mut keys: Vec<&String> = view
        .groups
        .iter()
        .flat_map(|g| g.passed().flat_map(|r| r.samples.keys()))
        .collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return "<h2 id=\"series\">Per-second samples</h2><p class=\"note\">No per-second \
                samples in this run.</p>"
            .into();
    }
    let mut s = String::from(
        "<h2 id=\"series\">Per-second samples</h2><p class=\"note\">Within-run stability: one \
         line per cell, the mean over its repeats for each second of the measured window. \
         Diagnostic only; verdicts use whole repeats.</p><div class=\"grid\">",
    );
    for key in keys {
        let series = view
            .groups
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                mean_series(g, key).map(|(v, n)| (format!("{} (n={n})", view.head(i)), v, i))
            })
            .collect();
        let (unit, dir) = series_meta(key);
        let chart = LineChart {
            id: format!("series-{key}"),
            caption: format!("{key} per second ({unit}) — {dir}"),
            unit: unit.into(),
            series,
        };
        s.push_str(&chart.render());
    }
    s.push_str("</div>");
    s
}

/// Every metric, collapsed.
fn full_metrics(view: &View<'_>) -> String {
    let infos = metric_infos(view.groups.iter().flat_map(|g| g.passed()));
    let head: Vec<String> = ["Metric".to_string(), "Unit".to_string()]
        .into_iter()
        .chain((0..view.groups.len()).map(|i| view.head(i)))
        .collect();
    let rows: Vec<Vec<TableCell>> = infos
        .iter()
        .map(|info| {
            let mut row = vec![
                TableCell {
                    text: info.label.clone(),
                    title: Some(info.key.clone()),
                    ..Default::default()
                },
                TableCell::from(info.unit.clone()),
            ];
            row.extend(view.groups.iter().map(|g| TableCell {
                text: g.status_word().map_or_else(
                    || fmt_agg(&g.agg(&info.key), &info.unit, false),
                    String::from,
                ),
                class: Some("num"),
                ..Default::default()
            }));
            row
        })
        .collect();
    format!(
        "<h2 id=\"all\">All metrics</h2><details><summary>{} metrics (mean, ±sd as % of the \
         mean, n)</summary>{}</details>",
        infos.len(),
        table("all-metrics", &head, &rows)
    )
}

/// Every cell with how it ended; cells that did not pass come first, with their reasons.
fn outcomes_section(view: &View<'_>) -> String {
    let mut order: Vec<&CellGroup<'_>> = view.groups.iter().collect();
    order.sort_by_key(|g| outcome_class(g) == "passed");
    let rows: Vec<Vec<TableCell>> = order
        .iter()
        .map(|g| {
            vec![
                TableCell::from(g.label.clone()),
                TableCell::from(g.cell_id.clone()),
                TableCell {
                    text: g.repeats.len().to_string(),
                    class: Some("num"),
                    ..Default::default()
                },
                TableCell {
                    text: g.outcome(),
                    class: Some(outcome_class(g)),
                    ..Default::default()
                },
            ]
        })
        .collect();
    let head = ["Cell", "Id", "Repeats", "Outcome"].map(String::from);
    format!(
        "<h2 id=\"outcomes\">Outcomes</h2>{}",
        table("outcomes-table", &head, &rows)
    )
}

/// Provenance fields by name; `tools` are the engines' keys shown (`workload::tool_keys`).
fn provenance_fields<'a>(p: &'a Provenance, tools: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    let mut fields: Vec<(&str, &str)> = vec![
        ("Host", &p.host),
        ("Kernel", &p.host_kernel),
        ("CPU", &p.cpu_model),
        ("QEMU", &p.qemu),
        ("libvirt", &p.libvirt),
        ("Guest kernel", &p.guest_kernel),
    ];
    fields.extend(tools.iter().map(|k| {
        let version = p.tools.get(*k).map_or("", String::as_str);
        (crate::workload::tool_name(k), version)
    }));
    fields.extend([("Image", p.image.as_str()), ("vmbench", &p.vmbench)]);
    fields
}

/// Where the numbers came from: one table when every cell agrees, else one row per cell.
fn provenance_section(view: &View<'_>) -> String {
    let provs: Vec<&Provenance> = view
        .groups
        .iter()
        .map(|g| &g.repeats[0].provenance)
        .collect();
    let tools = crate::workload::tool_keys(provs.iter().map(|p| &p.tools));
    let head: Vec<String>;
    let rows: Vec<Vec<TableCell>>;
    if provs.windows(2).all(|w| w[0] == w[1]) {
        head = vec!["What".into(), "Version (every cell)".into()];
        rows = provs
            .first()
            .map(|p| {
                provenance_fields(p, &tools)
                    .iter()
                    .map(|(k, v)| {
                        vec![
                            TableCell::from(k.to_string()),
                            TableCell::from(v.to_string()),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default();
    } else {
        head = std::iter::once("Cell".to_string())
            .chain(
                provenance_fields(provs[0], &tools)
                    .iter()
                    .map(|(k, _)| k.to_string()),
            )
            .collect();
        rows = view
            .groups
            .iter()
            .zip(&provs)
            .map(|(g, p)| {
                std::iter::once(TableCell::from(g.label.clone()))
                    .chain(
                        provenance_fields(p, &tools)
                            .iter()
                            .map(|(_, v)| TableCell::from(v.to_string())),
                    )
                    .collect()
            })
            .collect();
    }
    format!(
        "<h2 id=\"provenance\">Provenance</h2>{}",
        table("provenance-table", &head, &rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_what_varies() {
        use crate::cell::{Backend, Hypervisor, XenMode};
        use crate::results::Outcome;
        let run: RunRecord = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/run-local-qcow2-raw-x2.json"
        )))
        .unwrap();
        let r = run.cells[0].clone();
        let mut xen = r.clone();
        xen.cell.hypervisor = Hypervisor::Xen;
        xen.cell.xen_mode = Some(XenMode::Pvh);
        xen.cell_id = xen.cell.id();
        xen.outcome = Outcome::Unsupported("no dom0".into());
        let mut nfs = r.clone();
        nfs.cell.backend = Backend::Nfs;
        nfs.cell_id = nfs.cell.id();
        let cells = [r, nfs, xen];
        let view = View::new(&cells);
        assert_eq!(
            view.labels,
            vec![
                ("hypervisor qemu".into(), "local".into()),
                ("hypervisor qemu".into(), "nfs".into()),
                ("hypervisor xen".into(), "pvh / local".into()),
            ]
        );
        assert!(view.fixed.contains(&("format".to_string(), "qcow2".into())));
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(2410.0), 2500.0);
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(101.0), 200.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }

    #[test]
    fn table_escapes_everything() {
        let t = table(
            "t",
            &["<h>".into()],
            &[vec![TableCell {
                text: "a&b".into(),
                sub: Some("\"q\"".into()),
                ..Default::default()
            }]],
        );
        assert!(t.contains("&lt;h&gt;") && t.contains("a&amp;b") && t.contains("&quot;q&quot;"));
    }
}
