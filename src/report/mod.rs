//! Reports: the seeds' presentations of a run's [`CellResult`]s.
//!
//! - [`metric_table`]: metrics as rows, one column per cell (the fio seed's layout);
//! - [`cell_table`]: one row per cell with the engine's column groups (the bonnie seeds'
//!   layout);
//! - [`markdown`], [`csv`]: the same for documents and spreadsheets;
//! - [`html`]: one self-contained page with inline SVG charts;
//! - [`openmetrics`]: the figures as an OpenMetrics text exposition, for dashboards.
//!
//! Repeats of a cell are aggregated by [`summary`]. A cell that did not pass shows its outcome,
//! never a number.

pub mod compare_html;
pub mod efficiency;
pub mod html;
pub mod latency_split;
pub mod openmetrics;
pub mod recommend_html;
pub mod seed;
pub mod seed_origin;
pub mod summary;
pub mod sweep;

use crate::results::{CellResult, RunRecord, Value};
use crate::workload::{CellTable, Descriptor, ENGINES};
use summary::{column_titles, fmt_agg, group_by_cell, metric_infos, Agg, CellGroup, MIXED_MARK};
use tabled::builder::Builder;
use tabled::settings::Style;

/// Whether a result's engine lays its figures out one row per cell (bonnie++'s tables) rather
/// than one row per metric; its engine decides.
pub fn cell_rows(r: &CellResult) -> bool {
    engine(r).table.cell_tables().is_some()
}

fn engine(r: &CellResult) -> &'static Descriptor {
    crate::workload::descriptor(&r.cell.workload)
}

/// Which metrics a fio table shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricSet {
    /// The write-ups' rows: IOPS, bandwidth, mean and p99 latency per direction with the
    /// host/backend share of the mean, guest, host and storage-server CPU, server memory. No
    /// figure twice: the host-observed IOPS and latencies, libvirt's domain CPU and the
    /// guest/virtio part of the split repeat or derive from these and are left to `All`.
    #[default]
    Headline,
    /// Every metric the cells recorded.
    All,
}

/// The headline rows in order: (metric key, row label when it differs from the metric's own).
/// A row no cell recorded is left out (the cloud-layout rows at the end exist only for cells
/// from a base image and `--boot-storm`).
const HEADLINE: [(&str, Option<&str>); 19] = [
    ("read_iops", None),
    ("read_bw_mib_s", None),
    ("read_lat_mean_us", None),
    (
        "read_lat_backend_host_us",
        Some("Read Latency (avg): of which host/backend"),
    ),
    ("read_lat_p99_us", None),
    ("write_iops", None),
    ("write_bw_mib_s", None),
    ("write_lat_mean_us", None),
    (
        "write_lat_backend_host_us",
        Some("Write Latency (avg): of which host/backend"),
    ),
    ("write_lat_p99_us", None),
    ("guest_usr_cpu_pct", None),
    ("guest_sys_cpu_pct", None),
    ("host_qemu_cpu_pct", None),
    ("storage_server_cpu_pct", None),
    ("storage_server_peak_rss_mib", None),
    (CLOUD_ROWS[0], None),
    (CLOUD_ROWS[1], None),
    (CLOUD_ROWS[2], None),
    (CLOUD_ROWS[3], None),
];

/// The cloud-layout figures every report shows after the engine's headline ones, where a cell
/// has them: bytes per instance and the boot storm's (`--instance-disk`, `--boot-storm`).
pub(crate) const CLOUD_ROWS: [&str; 4] = [
    "disk_allocated_mib",
    "boot_storm_all_hello_s",
    "boot_storm_all_ready_s",
    "boot_storm_slowest_boot_s",
];

/// The metrics of `set`, in its order, with their row labels.
fn select(infos: Vec<summary::MetricInfo>, set: MetricSet) -> Vec<summary::MetricInfo> {
    match set {
        MetricSet::All => infos,
        MetricSet::Headline => HEADLINE
            .iter()
            .filter_map(|(key, label)| {
                let mut info = infos.iter().find(|i| i.key == *key)?.clone();
                if let Some(l) = label {
                    info.label = (*l).to_string();
                }
                Some(info)
            })
            .collect(),
    }
}

/// Output flavour of a table.
#[derive(Clone, Copy, PartialEq)]
enum Flavour {
    Text,
    Markdown,
}

/// Renders rows with tabled in the flavour's style.
fn render(rows: Vec<Vec<String>>, flavour: Flavour) -> String {
    let mut b = Builder::default();
    for row in rows {
        match flavour {
            Flavour::Text => b.push_record(row),
            Flavour::Markdown => b.push_record(row.into_iter().map(|c| md_escape(&c))),
        }
    }
    let mut t = b.build();
    match flavour {
        Flavour::Text => t.with(Style::sharp()),
        Flavour::Markdown => t.with(Style::markdown()),
    };
    t.to_string()
}

/// Keeps cell text from breaking a markdown table.
fn md_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// Footnotes shared by the tables.
fn footnotes(groups: &[CellGroup<'_>], any_mixed: bool) -> String {
    let mut out = String::new();
    if groups.iter().any(|g| g.passed().count() > 1) {
        out.push_str(
            "With repeats: mean ±sample standard deviation as % of the mean (in points, pt, for \
             figures in %) and n = passed repeats; the HTML report adds 95% confidence intervals.\n",
        );
    }
    if any_mixed {
        out.push_str(&format!(
            "{MIXED_MARK} some repeats were +++++ (too fast to measure); the figure is over the measured ones.\n"
        ));
    }
    out
}

/// The metric-rows table (header first), and whether a mixed-too-fast marker was used.
fn metric_rows(
    results: &[CellResult],
    set: MetricSet,
) -> Option<(Vec<Vec<String>>, Vec<CellGroup<'_>>, bool)> {
    let groups: Vec<CellGroup<'_>> = group_by_cell(results)
        .into_iter()
        .filter(|g| !cell_rows(g.repeats[0]))
        .collect();
    if groups.is_empty() {
        return None;
    }
    let infos = select(metric_infos(groups.iter().flat_map(|g| g.passed())), set);
    let mut rows = vec![std::iter::once("Metric".to_string())
        .chain(column_titles(&groups))
        .collect::<Vec<_>>()];
    let mut mixed = false;
    for info in &infos {
        let mut row = vec![info.label.clone()];
        for g in &groups {
            let agg = g.agg(&info.key);
            mixed |= matches!(agg, Agg::Numbers { too_fast, .. } if too_fast > 0);
            row.push(
                g.status_word()
                    .map_or_else(|| fmt_agg(&agg, &info.unit, true), String::from),
            );
        }
        rows.push(row);
    }
    rows.push(
        std::iter::once("Outcome".to_string())
            .chain(groups.iter().map(|g| g.outcome()))
            .collect(),
    );
    Some((rows, groups, mixed))
}

/// The fio seed's table: the headline metrics as rows, one column per cell, units on every
/// figure, and a final "Outcome" row, for the cells whose engine lays its figures out so.
/// Empty when there are none.
pub fn metric_table(results: &[CellResult]) -> String {
    metric_in(results, Flavour::Text, MetricSet::Headline)
}

/// [`metric_table`] with every metric the cells recorded.
pub fn metric_table_all(results: &[CellResult]) -> String {
    metric_in(results, Flavour::Text, MetricSet::All)
}

fn metric_in(results: &[CellResult], flavour: Flavour, set: MetricSet) -> String {
    match metric_rows(results, set) {
        Some((rows, groups, mixed)) => {
            let mut notes = footnotes(&groups, mixed);
            if set == MetricSet::Headline {
                notes.push_str(
                    "Headline rows; `--all-metrics` (matrix) or `report --metrics all` shows \
                     every metric.\n",
                );
            }
            format!("{}\n\n{}", render(rows, flavour), notes)
        }
        None => String::new(),
    }
}

/// One per-cell table of `engine` (two header rows first), over its cells.
fn per_cell_rows<'a>(
    results: &'a [CellResult],
    engine: &Descriptor,
    table: &CellTable,
) -> Option<(Vec<Vec<String>>, Vec<CellGroup<'a>>, bool)> {
    let groups: Vec<CellGroup<'a>> = group_by_cell(results)
        .into_iter()
        .filter(|g| std::ptr::eq(self::engine(g.repeats[0]), engine))
        .collect();
    if groups.is_empty() {
        return None;
    }
    let (second, second_key, second_fmt) = table.second;
    let mut head1 = vec!["".to_string(), "".to_string()];
    let mut head2 = vec!["Cell".to_string(), second.to_string()];
    for &(group, _, unit) in table.columns {
        head1.push(group.into());
        head2.push(unit.into());
    }
    head1.push("".into());
    head2.push("Outcome".into());
    let mut rows = vec![head1, head2];
    let mut mixed = false;
    for (g, title) in groups.iter().zip(column_titles(&groups)) {
        let shown = match g.agg(second_key) {
            Agg::Numbers { stats, .. } => second_fmt(stats.mean),
            _ => "-".into(),
        };
        let mut row = vec![title, shown];
        for &(_, key, _) in table.columns {
            let agg = g.agg(key);
            mixed |= matches!(agg, Agg::Numbers { too_fast, .. } if too_fast > 0);
            let text = cell_fmt(&agg, key.ends_with("cpu_pct"));
            row.push(g.status_word().map_or(text, String::from));
        }
        row.push(g.outcome());
        rows.push(row);
    }
    Some((rows, groups, mixed))
}

/// A figure as a per-cell engine prints it (bonnie++): integers stay integers, fractions keep
/// one decimal (`118.6` seeks), no thousands separators; `+++` for a too-fast %CP.
fn cell_fmt(agg: &Agg, cpu: bool) -> String {
    let plain = |v: f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    match agg {
        Agg::Numbers { stats, too_fast } => {
            let mark = if *too_fast > 0 { MIXED_MARK } else { "" };
            match stats.rel_sd_pct() {
                Some(rel) => format!("{} ±{rel:.1}% (n={}){mark}", plain(stats.mean), stats.n),
                None => format!("{}{mark}", plain(stats.mean)),
            }
        }
        Agg::TooFast { .. } if cpu => "+++".into(),
        other => fmt_agg(other, "", false),
    }
}

/// The per-cell tables of every engine that has cells in `results`, by engine name, in
/// [`ENGINES`] order; each table with its footnotes.
fn per_cell_tables(results: &[CellResult], flavour: Flavour) -> Vec<(&'static str, Vec<String>)> {
    ENGINES
        .iter()
        .filter_map(|e| Some((*e, e.table.cell_tables()?)))
        .filter_map(|(e, tables)| {
            let shown: Vec<String> = tables
                .iter()
                .filter_map(|t| per_cell_rows(results, e, t))
                .map(|(rows, groups, mixed)| {
                    format!("{}\n\n{}", render(rows, flavour), footnotes(&groups, mixed))
                })
                .collect();
            (!shown.is_empty()).then_some((e.name, shown))
        })
        .collect()
}

/// The `n`th table of the engines laid out one row per cell (bonnie++'s seeds: 0 is Seq Output
/// Per Chr/Block/Rewrite, Seq Input Per Chr/Block, Random Seeks, each K/sec or /sec and %CP,
/// `+++++` where bonnie++ said so; 1 is sequential and random create/read/delete). Empty when
/// there are no such cells.
pub fn cell_table(results: &[CellResult], n: usize) -> String {
    per_cell_tables(results, Flavour::Text)
        .into_iter()
        .filter_map(|(_, mut tables)| (n < tables.len()).then(|| tables.swap_remove(n)))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Both tables as a markdown document.
pub fn markdown(results: &[CellResult]) -> String {
    let mut out = String::new();
    let metrics = metric_in(results, Flavour::Markdown, MetricSet::All);
    if !metrics.is_empty() {
        let names: Vec<&str> = ENGINES
            .iter()
            .filter(|e| e.table.cell_tables().is_none())
            .map(|e| e.name)
            .collect();
        out.push_str(&format!("## {}\n\n", names.join(", ")));
        out.push_str(&metrics);
        out.push('\n');
    }
    for (name, tables) in per_cell_tables(results, Flavour::Markdown) {
        out.push_str(&format!("## {name}\n\n"));
        for t in tables {
            out.push_str(&t);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("No results.\n");
    }
    out
}

/// One CSV row per cell x repeat x metric (a cell without metrics gets one row with its
/// outcome): `run,cell_id,label,repeat,metric,value,unit,better,outcome`. `run` is empty; see
/// [`csv_run`].
pub fn csv(results: &[CellResult]) -> String {
    csv_with_run("", results)
}

/// [`csv`] with the run id filled in.
pub fn csv_run(run: &RunRecord) -> String {
    csv_with_run(&run.run_id, &run.cells)
}

fn csv_with_run(run: &str, results: &[CellResult]) -> String {
    let mut out = String::from("run,cell_id,label,repeat,metric,value,unit,better,outcome\n");
    for r in results {
        let outcome = summary::group_by_cell(std::slice::from_ref(r))[0].outcome();
        let base = [
            run.to_string(),
            r.cell_id.clone(),
            r.cell.label(),
            r.repeat.to_string(),
        ];
        if r.metrics.is_empty() {
            let row: Vec<String> = base
                .iter()
                .cloned()
                .chain(["", "", "", ""].map(String::from))
                .chain([outcome.clone()])
                .collect();
            push_csv_row(&mut out, &row);
        }
        for m in &r.metrics {
            let value = match &m.value {
                Value::Number(v) => v.to_string(),
                Value::TooFast => "+++++".into(),
                Value::NotAvailable(why) => format!("n/a: {why}"),
            };
            let better = match m.better {
                crate::results::Better::Higher => "higher",
                crate::results::Better::Lower => "lower",
            };
            let row: Vec<String> = base
                .iter()
                .cloned()
                .chain([
                    m.key.clone(),
                    value,
                    m.unit.clone(),
                    better.into(),
                    outcome.clone(),
                ])
                .collect();
            push_csv_row(&mut out, &row);
        }
    }
    out
}

/// RFC 4180 quoting where needed.
fn push_csv_row(out: &mut String, fields: &[String]) {
    let quoted: Vec<String> = fields
        .iter()
        .map(|f| {
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.clone()
            }
        })
        .collect();
    out.push_str(&quoted.join(","));
    out.push('\n');
}

/// The terminal report of a run: the metric table (metrics as rows, cells as columns) for the
/// cells of engines laid out so (fio), and the per-cell tables (one row per cell) of the others
/// (bonnie++), each only when such cells exist; which is which is the engine's
/// (`workload::TableKind`). `set` chooses the metric table's rows. A guest cell with a host row
/// on the same storage is followed by its efficiency ([`efficiency`]).
pub fn text(results: &[CellResult], set: MetricSet) -> String {
    let (per_cell, by_metric): (Vec<CellResult>, Vec<CellResult>) =
        results.iter().cloned().partition(cell_rows);
    let mut parts = Vec::new();
    if !by_metric.is_empty() {
        parts.push(metric_in(&by_metric, Flavour::Text, set));
    }
    for (_, tables) in per_cell_tables(&per_cell, Flavour::Text) {
        parts.extend(tables);
    }
    parts.extend(efficiency::text(results));
    parts.join("\n\n")
}

pub use html::html;
