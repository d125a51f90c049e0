//! Reports: the seeds' presentations of a run's [`CellResult`]s.
//!
//! - [`fio_table`]: metrics as rows, one column per cell (the fio seed's layout);
//! - [`bonnie_table`]: one row per cell with bonnie++'s column groups (the bonnie seeds' layout);
//! - [`markdown`], [`csv`]: the same for documents and spreadsheets;
//! - [`html`]: one self-contained page with inline SVG charts;
//! - [`openmetrics`]: the figures as an OpenMetrics text exposition, for dashboards.
//!
//! Repeats of a cell are aggregated by [`summary`]. A cell that did not pass shows its outcome,
//! never a number.

pub mod compare_html;
pub mod html;
pub mod latency_split;
pub mod openmetrics;
pub mod seed;
pub mod seed_origin;
pub mod summary;
pub mod sweep;

use crate::results::{CellResult, RunRecord, Value};
use summary::{column_titles, fmt_agg, group_by_cell, metric_infos, Agg, CellGroup, MIXED_MARK};
use tabled::builder::Builder;
use tabled::settings::Style;

/// Whether a result's engine lays its figures out one row per cell (bonnie++'s tables) rather
/// than one row per metric; its engine decides.
pub fn cell_rows(r: &CellResult) -> bool {
    crate::workload::descriptor(&r.cell.workload).table == crate::workload::TableKind::CellRows
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
const HEADLINE: [(&str, Option<&str>); 15] = [
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

/// The fio table rows (header first), and whether a mixed-too-fast marker was used.
fn fio_rows(
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
/// figure, and a final "Outcome" row. Empty when there are no fio cells.
pub fn fio_table(results: &[CellResult]) -> String {
    fio_in(results, Flavour::Text, MetricSet::Headline)
}

/// [`fio_table`] with every metric the cells recorded.
pub fn fio_table_all(results: &[CellResult]) -> String {
    fio_in(results, Flavour::Text, MetricSet::All)
}

fn fio_in(results: &[CellResult], flavour: Flavour, set: MetricSet) -> String {
    match fio_rows(results, set) {
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

/// bonnie++'s column groups: (title, [(metric key, column head)]).
const BONNIE_COLUMNS: [(&str, &str, &str); 12] = [
    ("Seq Output Per Chr", "seq_out_char_kps", "K/sec"),
    ("", "seq_out_char_cpu_pct", "%CP"),
    ("Seq Output Block", "seq_out_block_kps", "K/sec"),
    ("", "seq_out_block_cpu_pct", "%CP"),
    ("Seq Output Rewrite", "seq_out_rewrite_kps", "K/sec"),
    ("", "seq_out_rewrite_cpu_pct", "%CP"),
    ("Seq Input Per Chr", "seq_in_char_kps", "K/sec"),
    ("", "seq_in_char_cpu_pct", "%CP"),
    ("Seq Input Block", "seq_in_block_kps", "K/sec"),
    ("", "seq_in_block_cpu_pct", "%CP"),
    ("Random Seeks", "random_seeks_ps", "/sec"),
    ("", "random_seeks_cpu_pct", "%CP"),
];

/// bonnie++ table rows (two header rows first).
fn bonnie_rows<'a>(
    results: &'a [CellResult],
    columns: &[(&str, &str, &str)],
    second: (&str, fn(&CellGroup<'_>) -> String),
) -> Option<(Vec<Vec<String>>, Vec<CellGroup<'a>>, bool)> {
    let groups: Vec<CellGroup<'a>> = group_by_cell(results)
        .into_iter()
        .filter(|g| cell_rows(g.repeats[0]))
        .collect();
    if groups.is_empty() {
        return None;
    }
    let mut head1 = vec!["".to_string(), "".to_string()];
    let mut head2 = vec!["Cell".to_string(), second.0.to_string()];
    for &(group, _, unit) in columns {
        head1.push(group.into());
        head2.push(unit.into());
    }
    head1.push("".into());
    head2.push("Outcome".into());
    let mut rows = vec![head1, head2];
    let mut mixed = false;
    for (g, title) in groups.iter().zip(column_titles(&groups)) {
        let mut row = vec![title, (second.1)(g)];
        for &(_, key, _) in columns {
            let agg = g.agg(key);
            mixed |= matches!(agg, Agg::Numbers { too_fast, .. } if too_fast > 0);
            let text = bonnie_fmt(&agg, key.ends_with("cpu_pct"));
            row.push(g.status_word().map_or(text, String::from));
        }
        row.push(g.outcome());
        rows.push(row);
    }
    Some((rows, groups, mixed))
}

/// A figure as bonnie++ prints it: integers stay integers, fractions keep one decimal
/// (`118.6` seeks), no thousands separators; `+++` for a too-fast %CP.
fn bonnie_fmt(agg: &Agg, cpu: bool) -> String {
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

/// bonnie++'s `files` column (count in units of 1024), from the `file_count_k` metric.
fn bonnie_files(g: &CellGroup<'_>) -> String {
    match g.agg("file_count_k") {
        Agg::Numbers { stats, .. } => format!("{}", stats.mean),
        _ => "-".into(),
    }
}

/// The file size as bonnie++ prints it (`8G`, `64M`), from the `file_size_mib` metric.
fn bonnie_size(g: &CellGroup<'_>) -> String {
    match g.agg("file_size_mib") {
        Agg::Numbers { stats, .. } if stats.mean >= 1024.0 && stats.mean % 1024.0 == 0.0 => {
            format!("{}G", stats.mean / 1024.0)
        }
        Agg::Numbers { stats, .. } => format!("{}M", stats.mean.round()),
        _ => "-".into(),
    }
}

/// The bonnie++ seeds' table: one row per cell; Seq Output Per Chr/Block/Rewrite, Seq Input Per
/// Chr/Block, Random Seeks, each K/sec (or /sec) and %CP; `+++++` where bonnie++ said so.
pub fn bonnie_table(results: &[CellResult]) -> String {
    bonnie_in(results, Flavour::Text)
}

/// bonnie++'s file-operation columns: (group title, metric key, column head).
const BONNIE_FILE_COLUMNS: [(&str, &str, &str); 12] = [
    ("Seq Create", "seq_create_ps", "/sec"),
    ("", "seq_create_cpu_pct", "%CP"),
    ("Seq Read", "seq_read_ps", "/sec"),
    ("", "seq_read_cpu_pct", "%CP"),
    ("Seq Delete", "seq_delete_ps", "/sec"),
    ("", "seq_delete_cpu_pct", "%CP"),
    ("Random Create", "random_create_ps", "/sec"),
    ("", "random_create_cpu_pct", "%CP"),
    ("Random Read", "random_read_ps", "/sec"),
    ("", "random_read_cpu_pct", "%CP"),
    ("Random Delete", "random_delete_ps", "/sec"),
    ("", "random_delete_cpu_pct", "%CP"),
];

/// bonnie++'s second table: sequential and random create/read/delete, /sec and %CP.
pub fn bonnie_files_table(results: &[CellResult]) -> String {
    bonnie_files_in(results, Flavour::Text)
}

fn bonnie_files_in(results: &[CellResult], flavour: Flavour) -> String {
    match bonnie_rows(results, &BONNIE_FILE_COLUMNS, ("Files", bonnie_files)) {
        Some((rows, groups, mixed)) => {
            format!("{}\n\n{}", render(rows, flavour), footnotes(&groups, mixed))
        }
        None => String::new(),
    }
}

fn bonnie_in(results: &[CellResult], flavour: Flavour) -> String {
    match bonnie_rows(results, &BONNIE_COLUMNS, ("Size", bonnie_size)) {
        Some((rows, groups, mixed)) => {
            format!("{}\n\n{}", render(rows, flavour), footnotes(&groups, mixed))
        }
        None => String::new(),
    }
}

/// Both tables as a markdown document.
pub fn markdown(results: &[CellResult]) -> String {
    let mut out = String::new();
    let fio = fio_in(results, Flavour::Markdown, MetricSet::All);
    if !fio.is_empty() {
        out.push_str("## fio\n\n");
        out.push_str(&fio);
        out.push('\n');
    }
    let bonnie = bonnie_in(results, Flavour::Markdown);
    if !bonnie.is_empty() {
        out.push_str("## bonnie++\n\n");
        out.push_str(&bonnie);
        out.push('\n');
        out.push_str(&bonnie_files_in(results, Flavour::Markdown));
        out.push('\n');
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

/// The terminal report of a run: the fio table (metrics as rows, cells as columns) for fio cells,
/// and bonnie++'s tables (one row per cell) for bonnie++ cells, each only when such cells exist.
/// `set` chooses the fio table's rows.
pub fn text(results: &[CellResult], set: MetricSet) -> String {
    let (bonnie, fio): (Vec<CellResult>, Vec<CellResult>) =
        results.iter().cloned().partition(cell_rows);
    let mut parts = Vec::new();
    if !fio.is_empty() {
        parts.push(fio_in(&fio, Flavour::Text, set));
    }
    if !bonnie.is_empty() {
        parts.push(bonnie_table(&bonnie));
        parts.push(bonnie_files_table(&bonnie));
    }
    parts.join("\n\n")
}

pub use html::html;
