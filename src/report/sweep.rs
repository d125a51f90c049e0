//! The sweep charts of the HTML report: when a sweep dimension (fio's `bs`, `iodepth`,
//! `numjobs`, `rwmix`, or QEMU's `queues`) varies across a run's cells, IOPS against that
//! parameter, and mean latency against IOPS, one line per cell (the cell being
//! everything but the swept parameter). These are the shapes a backend study reads: where IOPS
//! stop growing with queue depth, and the knee where latency climbs without more IOPS.

use super::html::{esc, figure, nice_ceiling, PALETTE};
use super::summary::{Agg, CellGroup};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The dimensions a sweep varies, in `Cell::dimensions()` spelling.
pub const SWEEP_DIMENSIONS: [&str; 5] = ["bs", "iodepth", "numjobs", "rwmix", "queues"];

/// One point of a series: x, y, and the text put beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// x value.
    pub x: f64,
    /// y value.
    pub y: f64,
    /// Label beside the marker (the swept value on a latency curve), or empty.
    pub label: String,
}

/// An x-y chart with markers joined by lines; x may be on a log2 scale (queue depths and block
/// sizes double from point to point).
#[derive(Debug, Clone)]
pub struct XyChart {
    /// Stable id (`data-chart`).
    pub id: String,
    /// Caption.
    pub caption: String,
    /// x axis title.
    pub x_title: String,
    /// y unit.
    pub y_unit: String,
    /// log2 x axis.
    pub log_x: bool,
    /// Tick labels at these x values (none: 0, half and the top of the axis).
    pub x_ticks: Vec<(f64, String)>,
    /// (name, points sorted by x, colour index).
    pub series: Vec<(String, Vec<Point>, usize)>,
}

impl XyChart {
    /// The chart as a `<figure>`.
    pub fn render(&self) -> String {
        let p = self.plot_area();
        let legend_top = p.top + p.ph + 40.0;
        let h = legend_top + self.series.len() as f64 * 14.0 + 4.0;
        let w = p.left + p.pw + 40.0;
        let mut inner = String::new();
        self.push_y_grid(&p, &mut inner);
        self.push_x_axis(&p, &mut inner);
        for (i, (name, points, colour)) in self.series.iter().enumerate() {
            let c = PALETTE[colour % PALETTE.len()];
            push_series(&p, &mut inner, points, c);
            push_legend_entry(&p, &mut inner, legend_top + i as f64 * 14.0, name, c);
        }
        figure(&self.id, &self.caption, w, h, &inner)
    }

    /// The plot area's place in the SVG and the ranges its axes span: x from the points (0 to a
    /// round number, or the points' own span on a log axis), y from 0 to a round number.
    fn plot_area(&self) -> PlotArea {
        let mut p = PlotArea {
            left: 64.0,
            top: 8.0,
            pw: 330.0,
            ph: 150.0,
            log_x: self.log_x,
            xmin: 0.0,
            xmax: 1.0,
            ymax: 0.0,
        };
        let pts = || self.series.iter().flat_map(|s| s.1.iter());
        let (xmin, xmax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), pt| {
            (a.min(p.fx(pt.x)), b.max(p.fx(pt.x)))
        });
        (p.xmin, p.xmax) = match (self.log_x, xmin.is_finite()) {
            (_, false) => (0.0, 1.0),
            (true, true) if xmax > xmin => (xmin, xmax),
            (true, true) => (xmin - 1.0, xmax + 1.0),
            (false, true) => (0.0, nice_ceiling(xmax)),
        };
        p.ymax = nice_ceiling(pts().fold(0.0f64, |a, pt| a.max(pt.y)));
        p
    }

    /// Horizontal grid lines at 0, half and the top of the y axis, with their values.
    fn push_y_grid(&self, p: &PlotArea, inner: &mut String) {
        let left = p.left;
        for k in 0..=2 {
            let v = p.ymax * k as f64 / 2.0;
            let _ = write!(
                inner,
                "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left + p.pw,
                left - 4.0,
                p.ys(v) + 4.0,
                esc(&if k == 0 {
                    "0".to_string()
                } else {
                    super::summary::with_unit(v, &self.y_unit)
                }),
                y = p.ys(v),
            );
        }
    }

    /// The x tick labels, then the x axis line and its title.
    fn push_x_axis(&self, p: &PlotArea, inner: &mut String) {
        let (left, top, pw, ph) = (p.left, p.top, p.pw, p.ph);
        for (x, label) in self.x_tick_labels(p.xmax) {
            let _ = write!(
                inner,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                p.xs(x),
                top + ph + 14.0,
                esc(&label)
            );
        }
        let _ = write!(
            inner,
            "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            top + ph,
            left + pw,
            top + ph,
            left + pw / 2.0,
            top + ph + 30.0,
            esc(&self.x_title)
        );
    }

    /// The chart's own x ticks, or 0, half and the top of the axis when it names none.
    fn x_tick_labels(&self, xmax: f64) -> Vec<(f64, String)> {
        if !self.x_ticks.is_empty() {
            return self.x_ticks.clone();
        }
        (0..=2)
            .map(|k| xmax * k as f64 / 2.0)
            .map(|v| {
                (
                    v,
                    if v == 0.0 {
                        "0".into()
                    } else {
                        super::summary::with_unit(v, "")
                    },
                )
            })
            .collect()
    }
}

/// Where a chart's plot area sits in the SVG and the values its axes span.
struct PlotArea {
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    log_x: bool,
    xmin: f64,
    xmax: f64,
    ymax: f64,
}

impl PlotArea {
    /// An x value as the axis measures it: its log2 on a log axis.
    fn fx(&self, x: f64) -> f64 {
        if self.log_x {
            x.max(1e-9).log2()
        } else {
            x
        }
    }

    /// The SVG x coordinate of an x value.
    fn xs(&self, x: f64) -> f64 {
        self.left + (self.fx(x) - self.xmin) / (self.xmax - self.xmin) * self.pw
    }

    /// The SVG y coordinate of a y value.
    fn ys(&self, v: f64) -> f64 {
        self.top + self.ph - v / self.ymax * self.ph
    }
}

/// One series: its points joined by a line, each marked and, when it has one, labelled.
fn push_series(p: &PlotArea, inner: &mut String, points: &[Point], c: &str) {
    let line: Vec<String> = points
        .iter()
        .map(|pt| format!("{:.1},{:.1}", p.xs(pt.x), p.ys(pt.y)))
        .collect();
    let _ = write!(
        inner,
        "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.6\" points=\"{}\"/>",
        line.join(" ")
    );
    for pt in points {
        let _ = write!(
            inner,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"/>",
            p.xs(pt.x),
            p.ys(pt.y)
        );
        if !pt.label.is_empty() {
            let _ = write!(
                inner,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                p.xs(pt.x) + 4.0,
                p.ys(pt.y) - 4.0,
                esc(&pt.label)
            );
        }
    }
}

/// A series' legend line: a stroke in its colour and its name, at height `ly`.
fn push_legend_entry(p: &PlotArea, inner: &mut String, ly: f64, name: &str, c: &str) {
    let left = p.left;
    let _ = write!(
        inner,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" \
         stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
        ly - 4.0,
        left + 14.0,
        ly - 4.0,
        left + 18.0,
        ly,
        esc(name)
    );
}

/// The numeric value of a swept parameter (`64k` is 65536).
fn numeric(dim: &str, value: &str) -> Option<f64> {
    match dim {
        "bs" => value
            .parse::<crate::cell::BlockSize>()
            .ok()
            .map(|b| b.bytes() as f64),
        _ => value.parse().ok(),
    }
}

/// Mean over passed repeats, or `None` when the cell has no number for `key`.
fn mean(g: &CellGroup<'_>, key: &str) -> Option<f64> {
    match g.agg(key) {
        Agg::Numbers { stats, .. } => Some(stats.mean),
        _ => None,
    }
}

/// One cell's figures at one swept value.
struct SweepPoint {
    x: f64,
    value: String,
    iops: f64,
    lat_us: Option<f64>,
}

/// Read + write IOPS, and the mean latency (submission to completion) of both weighted by their IOPS.
fn point(g: &CellGroup<'_>, x: f64, value: &str) -> Option<SweepPoint> {
    let r = mean(g, "read_iops").unwrap_or(0.0);
    let w = mean(g, "write_iops").unwrap_or(0.0);
    let iops = r + w;
    if iops <= 0.0 {
        return None;
    }
    let rl = mean(g, "read_lat_mean_us").filter(|_| r > 0.0);
    let wl = mean(g, "write_lat_mean_us").filter(|_| w > 0.0);
    let lat_us = match (rl, wl) {
        (None, None) => None,
        (rl, wl) => Some((rl.unwrap_or(0.0) * r + wl.unwrap_or(0.0) * w) / iops),
    };
    Some(SweepPoint {
        x,
        value: value.to_string(),
        iops,
        lat_us,
    })
}

/// Per series (the cell minus `dim`): its points, sorted by the swept value.
fn series_for(groups: &[CellGroup<'_>], dim: &str) -> BTreeMap<String, Vec<SweepPoint>> {
    let dims: Vec<BTreeMap<&str, String>> = groups
        .iter()
        .map(|g| g.repeats[0].cell.dimensions().into_iter().collect())
        .collect();
    // Name a series by the other dimensions that vary; one series alone is "all cells".
    let others: Vec<&str> = dims
        .first()
        .map(|d| d.keys().copied().filter(|k| *k != dim).collect())
        .unwrap_or_default();
    let varying: Vec<&str> = others
        .into_iter()
        .filter(|k| dims.iter().any(|d| d[k] != dims[0][k]))
        .collect();
    let mut out: BTreeMap<String, Vec<SweepPoint>> = BTreeMap::new();
    for (g, d) in groups.iter().zip(&dims) {
        let Some(x) = numeric(dim, &d[dim]) else {
            continue;
        };
        let name: Vec<String> = varying.iter().map(|k| format!("{k} {}", d[k])).collect();
        let name = if name.is_empty() {
            "all cells".to_string()
        } else {
            name.join(", ")
        };
        if let Some(p) = point(g, x, &d[dim]) {
            out.entry(name).or_default().push(p);
        }
    }
    for pts in out.values_mut() {
        pts.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    out
}

/// The sweep dimensions that take more than one value across the groups.
pub fn varying_sweeps(groups: &[CellGroup<'_>]) -> Vec<&'static str> {
    SWEEP_DIMENSIONS
        .into_iter()
        .filter(|dim| {
            let mut seen: Vec<String> = groups
                .iter()
                .filter_map(|g| {
                    g.repeats[0]
                        .cell
                        .dimensions()
                        .into_iter()
                        .find(|(k, _)| k == dim)
                        .map(|(_, v)| v)
                })
                .collect();
            seen.sort();
            seen.dedup();
            seen.len() > 1
        })
        .collect()
}

/// The two charts for one swept dimension.
fn charts_for(groups: &[CellGroup<'_>], dim: &str) -> String {
    let series = series_for(groups, dim);
    let mut ticks: Vec<(f64, String)> = series
        .values()
        .flatten()
        .map(|p| (p.x, p.value.clone()))
        .collect();
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    ticks.dedup_by(|a, b| a.1 == b.1);
    let iops = XyChart {
        id: format!("sweep-{dim}-iops"),
        caption: format!("IOPS (read + write) against {dim} — higher is better"),
        x_title: dim.to_string(),
        y_unit: "IOPS".into(),
        log_x: dim != "rwmix",
        x_ticks: ticks,
        series: series
            .iter()
            .enumerate()
            .map(|(i, (name, pts))| {
                let pts = pts
                    .iter()
                    .map(|p| Point {
                        x: p.x,
                        y: p.iops,
                        label: String::new(),
                    })
                    .collect();
                (name.clone(), pts, i)
            })
            .collect(),
    };
    let latency = XyChart {
        id: format!("sweep-{dim}-latency"),
        caption: format!(
            "Mean latency against IOPS as {dim} varies (points labelled by {dim}) \
             — lower and further right is better"
        ),
        x_title: "IOPS (read + write)".into(),
        y_unit: "µs".into(),
        log_x: false,
        x_ticks: vec![],
        series: series
            .iter()
            .enumerate()
            .map(|(i, (name, pts))| {
                let pts = pts
                    .iter()
                    .filter_map(|p| {
                        Some(Point {
                            x: p.iops,
                            y: p.lat_us?,
                            label: format!("{dim}={}", p.value),
                        })
                    })
                    .collect();
                (name.clone(), pts, i)
            })
            .collect(),
    };
    iops.render() + &latency.render()
}

/// The sweep section, or nothing when no sweep dimension varies.
pub fn section(groups: &[CellGroup<'_>]) -> String {
    let dims = varying_sweeps(groups);
    if dims.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h2 id=\"sweeps\">Sweeps</h2><p class=\"note\">One line per cell (every dimension but \
         the swept one); points are means over passed repeats. Latency is fio's mean latency \
         (submission to completion), reads and writes weighted by their IOPS.</p><div class=\"grid\">",
    );
    for dim in dims {
        s.push_str(&charts_for(groups, dim));
    }
    s.push_str("</div>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summary::group_by_cell;
    use crate::results::RunRecord;

    fn fixture_run() -> RunRecord {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/run-local-qcow2-raw-x2.json"
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    /// The real run's two cells relabelled as one cell at two queue depths (the figures are
    /// the run's own; only the labels change).
    fn as_iodepth_sweep(mut run: RunRecord) -> RunRecord {
        use crate::cell::Format;
        for r in &mut run.cells {
            r.cell.job.iodepth = Some(if r.cell.format == Format::Raw { 4 } else { 16 });
            r.cell.format = Format::Raw;
            r.cell_id = r.cell.id();
        }
        run
    }

    #[test]
    fn no_sweep_no_section() {
        let run = fixture_run();
        assert_eq!(section(&group_by_cell(&run.cells)), "");
    }

    #[test]
    fn a_varying_sweep_draws_iops_against_it_and_latency_against_iops() {
        let run = as_iodepth_sweep(fixture_run());
        let groups = group_by_cell(&run.cells);
        assert_eq!(groups.len(), 2);
        assert_eq!(varying_sweeps(&groups), ["iodepth"]);
        let series = series_for(&groups, "iodepth");
        let pts = &series["all cells"];
        assert_eq!(pts.iter().map(|p| p.x).collect::<Vec<_>>(), [4.0, 16.0]);
        for p in pts {
            let g = groups
                .iter()
                .find(|g| g.repeats[0].cell.job.iodepth == Some(p.x as u32))
                .unwrap();
            let want = mean(g, "read_iops").unwrap() + mean(g, "write_iops").unwrap();
            assert!(
                p.iops > 0.0 && (p.iops - want).abs() < 1e-9,
                "{} vs {want}",
                p.iops
            );
            let (rl, wl) = (mean(g, "read_lat_mean_us"), mean(g, "write_lat_mean_us"));
            let lat = p.lat_us.unwrap();
            // Weighted between the read and the write latency.
            let (lo, hi) = (rl.unwrap().min(wl.unwrap()), rl.unwrap().max(wl.unwrap()));
            assert!(lo <= lat && lat <= hi, "{lat} not in [{lo}, {hi}]");
        }
        let html = section(&groups);
        assert!(html.contains("data-chart=\"sweep-iodepth-iops\""), "{html}");
        assert!(
            html.contains("data-chart=\"sweep-iodepth-latency\""),
            "{html}"
        );
        assert_eq!(html.matches("<circle").count(), 4, "{html}");
        assert!(html.contains(">iodepth=16<"), "{html}");
        assert!(html.contains(">all cells<"), "{html}");
    }

    #[test]
    fn block_sizes_are_placed_by_bytes() {
        assert_eq!(numeric("bs", "64k"), Some(65536.0));
        assert_eq!(numeric("iodepth", "32"), Some(32.0));
        assert_eq!(numeric("iodepth", ""), None);
    }
}
