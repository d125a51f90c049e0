//! "Where the latency comes from" in the HTML report: per cell and direction, one stacked bar of
//! the guest's mean latency split at QEMU's block layer (`metrics::split`): backend + host, then
//! guest + virtio. Computed from each passed repeat's own figures (so runs recorded before the
//! split metrics existed show it too), averaged over repeats.

use super::html::{esc, figure, nice_ceiling, PALETTE};
use super::summary::{with_unit, CellGroup};
use crate::metrics::split::latency_split;
use crate::results::Value;
use std::fmt::Write;

/// One bar: label, backend + host part, guest + virtio part (µs).
#[derive(Debug, Clone, PartialEq)]
pub struct SplitBar {
    /// Cell and direction.
    pub label: String,
    /// Backend + host (QEMU block layer) mean, µs.
    pub host_us: f64,
    /// Guest + virtio mean, µs.
    pub guest_us: f64,
}

/// The mean of the parts over a group's passed repeats that have both; `None` when none has.
fn bar(g: &CellGroup<'_>, dir: &str, label: &str) -> Option<SplitBar> {
    let parts: Vec<(f64, f64)> = g
        .passed()
        .filter_map(|r| {
            let split = latency_split(&r.metrics);
            let num = |k: String| match split.iter().find(|m| m.key == k).map(|m| &m.value) {
                Some(Value::Number(v)) => Some(*v),
                _ => None,
            };
            Some((
                num(format!("{dir}_lat_backend_host_us"))?,
                num(format!("{dir}_lat_guest_virtio_us"))?,
            ))
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    let n = parts.len() as f64;
    Some(SplitBar {
        label: format!("{label} · {dir}"),
        host_us: parts.iter().map(|p| p.0).sum::<f64>() / n,
        guest_us: parts.iter().map(|p| p.1).sum::<f64>() / n,
    })
}

/// Every group's bars, reads then writes.
pub fn bars(groups: &[CellGroup<'_>], labels: &[String]) -> Vec<SplitBar> {
    groups
        .iter()
        .zip(labels)
        .flat_map(|(g, l)| ["read", "write"].map(|d| bar(g, d, l)))
        .flatten()
        .collect()
}

/// The stacked bar chart.
pub fn chart(bars: &[SplitBar]) -> String {
    let (label_w, plot_w, note_w, row_h, top) = (190.0, 260.0, 200.0, 20.0, 22.0);
    let max = nice_ceiling(
        bars.iter()
            .fold(0.0f64, |a, b| a.max(b.host_us + b.guest_us)),
    );
    let x = |v: f64| label_w + v / max * plot_w;
    let (host_c, guest_c) = (PALETTE[0], PALETTE[1]);
    let mut inner = format!(
        "<rect x=\"{label_w}\" y=\"4\" width=\"10\" height=\"10\" fill=\"{host_c}\"/>\
         <text x=\"{:.1}\" y=\"13\">backend + host (QEMU block layer)</text>\
         <rect x=\"{:.1}\" y=\"4\" width=\"10\" height=\"10\" fill=\"{guest_c}\"/>\
         <text x=\"{:.1}\" y=\"13\">guest + virtio</text>",
        label_w + 14.0,
        label_w + 230.0,
        label_w + 244.0
    );
    for (i, b) in bars.iter().enumerate() {
        let y = top + i as f64 * row_h;
        let total = b.host_us + b.guest_us;
        let _ = write!(
            inner,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{label_w}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{host_c}\"/>\
             <rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{guest_c}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            label_w - 4.0,
            y + 13.0,
            esc(&b.label),
            x(b.host_us) - label_w,
            row_h - 4.0,
            x(b.host_us),
            x(total) - x(b.host_us),
            row_h - 4.0,
            label_w + plot_w + 6.0,
            y + 13.0,
            esc(&format!(
                "{} = {} + {}",
                with_unit(total, "µs"),
                with_unit(b.host_us, "µs"),
                with_unit(b.guest_us, "µs")
            )),
        );
    }
    let h = top + bars.len() as f64 * row_h + 6.0;
    figure(
        "latency-split",
        "Mean latency, split at QEMU's block layer (µs) — lower is better",
        label_w + plot_w + note_w,
        h,
        &inner,
    )
}

/// The section, or nothing when no cell has both views of its latency.
pub fn section(groups: &[CellGroup<'_>], labels: &[String]) -> String {
    let bars = bars(groups, labels);
    if bars.is_empty() {
        return String::new();
    }
    format!(
        "<h2 id=\"latency-split\">Where the latency comes from</h2><p class=\"note\">The guest's \
         mean I/O latency (fio's submission-to-completion) over the measured window, split at \
         QEMU's block layer: its own mean over the same window (QMP query-blockstats) is the \
         backend + host part, the rest the guest kernel, virtio and device emulation. Cells \
         without both views (no operations in a direction, no QMP timings on Xen) have no \
         bar.</p>{}",
        chart(&bars)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summary::group_by_cell;
    use crate::results::RunRecord;

    #[test]
    fn a_real_run_gets_one_bar_per_cell_and_direction_adding_up_to_the_guest_mean() {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/run-local-qcow2-raw-x2.json"
        );
        let run: RunRecord = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let groups = group_by_cell(&run.cells);
        let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
        let b = bars(&groups, &labels);
        assert_eq!(b.len(), groups.len() * 2, "{b:?}");
        for (bar, g) in b.iter().zip(groups.iter().flat_map(|g| [g, g])) {
            let dir = if bar.label.ends_with("read") {
                "read"
            } else {
                "write"
            };
            let guest: f64 = g
                .passed()
                .map(|r| {
                    r.metric(&format!("{dir}_lat_mean_us"))
                        .unwrap()
                        .value
                        .number()
                        .unwrap()
                })
                .sum::<f64>()
                / g.passed().count() as f64;
            assert!(bar.host_us > 0.0 && bar.guest_us > 0.0, "{bar:?}");
            assert!(
                (bar.host_us + bar.guest_us - guest).abs() < 1e-6,
                "{bar:?} vs {guest}"
            );
        }
        let html = section(&groups, &labels);
        assert!(html.contains("data-chart=\"latency-split\""));
        assert_eq!(html.matches("<rect").count(), 2 + 2 * b.len());
    }
}
