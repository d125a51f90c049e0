//! `vmbench report RUN --against-seed NAME`: a write-up's published table beside the measured
//! one, in the write-up's own layout, and the write-up's conclusions checked on the measured
//! numbers as ratios and orderings.
//!
//! The published figures are data (`seeds/NAME.toml`, transcribed from the write-ups); they are
//! shown for shape only. Absolute numbers are never compared: the hardware differs. A conclusion
//! is checked only on the measured means, and says "not measured here" when a system it names
//! has no passed cell in the run.

use crate::cell::Cell;
use crate::results::{CellResult, Outcome, RunRecord};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use summary::stats;

use super::summary;

/// The seed tables shipped with vmbench, by name.
const SEED_TABLES: &[(&str, &str)] = &[
    (
        "longhorn-localpv-openebs",
        include_str!("../../seeds/longhorn-localpv-openebs.toml"),
    ),
    (
        "xen-kvm-nfs-iscsi-local",
        include_str!("../../seeds/xen-kvm-nfs-iscsi-local.toml"),
    ),
    (
        "lvm-vs-partition",
        include_str!("../../seeds/lvm-vs-partition.toml"),
    ),
];

/// Why a seed report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// No seed table by that name (exit 2).
    #[error("unknown seed '{got}' (valid: {})", valid.join(", "))]
    Unknown {
        /// What the user wrote.
        got: String,
        /// The valid names.
        valid: Vec<&'static str>,
    },
    /// A shipped seed table does not parse (a bug in `seeds/`).
    #[error("seed table {name}: {source}")]
    Table {
        /// The table.
        name: String,
        /// The parse error.
        #[source]
        source: toml::de::Error,
    },
}

/// How the write-up lays out its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedLayout {
    /// Metrics as rows, one column per system (the fio write-up).
    MetricsAsRows,
    /// One row per system, metrics as columns (bonnie++'s layout).
    SystemsAsRows,
}

/// One column (or row) of the published table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedMetric {
    /// vmbench's metric key.
    pub key: String,
    /// The write-up's heading.
    pub label: String,
    /// Unit.
    pub unit: String,
}

/// A rule matching measured cells: dimension = value pairs, plus a note shown on every row it
/// matched (e.g. "kvm cannot boot the guest here: run on qemu/TCG").
#[derive(Debug, Clone, Deserialize)]
pub struct CellRule {
    /// Shown beside every measured row this alternative supplied.
    #[serde(default)]
    pub note: Option<String>,
    /// Dimension = value pairs (see `matrix::rule_matches`).
    #[serde(flatten)]
    pub dims: BTreeMap<String, String>,
}

/// One system of the write-up.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSystem {
    /// The write-up's row or column name.
    pub label: String,
    /// What vmbench measures for it.
    pub maps_to: String,
    /// Alternatives, first with passed cells wins (e.g. kvm, then qemu where KVM cannot boot).
    #[serde(default)]
    pub cells: Vec<CellRule>,
    /// Why vmbench cannot measure it (then `cells` is empty).
    #[serde(default)]
    pub not_measured: Option<String>,
    /// The published figures by metric key.
    pub figures: BTreeMap<String, f64>,
}

/// A checkable claim of the write-up.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// mean(a) / mean(b) >= min.
    Ratio {
        /// Metric key.
        metric: String,
        /// Numerator system.
        a: String,
        /// Denominator system.
        b: String,
        /// Smallest ratio for "holds".
        min: f64,
    },
    /// |mean(a) / mean(b) - 1| <= pct / 100.
    Within {
        /// Metric key.
        metric: String,
        /// First system.
        a: String,
        /// Reference system.
        b: String,
        /// Tolerance in percent.
        pct: f64,
    },
    /// mean(a) is larger than every other system's that was measured (all must be).
    Highest {
        /// Metric key.
        metric: String,
        /// The system claimed highest.
        a: String,
        /// The others.
        others: Vec<String>,
    },
}

/// A conclusion and its check.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conclusion {
    /// The claim, in the write-up's words as far as possible.
    pub text: String,
    /// How it is checked.
    pub check: Check,
}

/// A write-up as data.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedTable {
    /// Name (also the matrix preset's).
    pub name: String,
    /// File in the shared seeds directory it was transcribed from.
    pub source: String,
    /// The write-up's table layout.
    pub layout: SeedLayout,
    /// Metrics shown, in the write-up's order.
    pub metrics: Vec<SeedMetric>,
    /// Systems, in the write-up's order.
    #[serde(rename = "system")]
    pub systems: Vec<SeedSystem>,
    /// Claims.
    #[serde(rename = "conclusion")]
    pub conclusions: Vec<Conclusion>,
}

/// The seed table with this name.
pub fn seed_table(name: &str) -> Result<SeedTable, SeedError> {
    let (n, text) = SEED_TABLES
        .iter()
        .find(|(n, _)| *n == name.trim())
        .ok_or_else(|| SeedError::Unknown {
            got: name.trim().to_string(),
            valid: SEED_TABLES.iter().map(|(n, _)| *n).collect(),
        })?;
    toml::from_str(text).map_err(|source| SeedError::Table {
        name: n.to_string(),
        source,
    })
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The measured shape agrees.
    Holds(String),
    /// It does not.
    DoesNotHold(String),
    /// A system it needs was not measured in this run.
    NotMeasured(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Holds(_) => "holds",
            Verdict::DoesNotHold(_) => "does not hold",
            Verdict::NotMeasured(_) => "not measured here",
        }
    }
    fn why(&self) -> &str {
        match self {
            Verdict::Holds(w) | Verdict::DoesNotHold(w) | Verdict::NotMeasured(w) => w,
        }
    }
}

/// One system's measured cells: (cell, passed results, note).
struct Measured<'a> {
    rows: Vec<(Cell, Vec<&'a CellResult>, Option<String>)>,
}

impl Measured<'_> {
    /// Mean and n over every passed repeat of every matched cell.
    fn stats(&self, key: &str) -> Option<summary::Stats> {
        let v: Vec<f64> = self
            .rows
            .iter()
            .flat_map(|(_, rs, _)| rs.iter())
            .filter_map(|r| r.metric(key).and_then(|m| m.value.number()))
            .collect();
        stats(&v)
    }
}

/// The cells of `run` a system maps to: the first alternative with passed cells.
fn measure<'a>(sys: &SeedSystem, run: &'a RunRecord) -> Measured<'a> {
    for alt in &sys.cells {
        let mut rows: Vec<(Cell, Vec<&CellResult>, Option<String>)> = Vec::new();
        for r in run.cells.iter().filter(|r| r.outcome == Outcome::Passed) {
            if !crate::matrix::rule_matches(&alt.dims, &r.cell) {
                continue;
            }
            match rows.iter_mut().find(|(c, _, _)| c == &r.cell) {
                Some(row) => row.1.push(r),
                None => rows.push((r.cell.clone(), vec![r], alt.note.clone())),
            }
        }
        if !rows.is_empty() {
            return Measured { rows };
        }
    }
    Measured { rows: vec![] }
}

/// Checks one claim on the measured means.
fn check(c: &Check, measured: &BTreeMap<&str, Measured<'_>>) -> Verdict {
    let mean = |sys: &str, key: &str| measured.get(sys).and_then(|m| m.stats(key)).map(|s| s.mean);
    let missing = |sys: &str| Verdict::NotMeasured(format!("no passed cell for '{sys}'"));
    match c {
        Check::Ratio { metric, a, b, min } => {
            let (Some(x), Some(y)) = (mean(a, metric), mean(b, metric)) else {
                return missing(if mean(a, metric).is_none() { a } else { b });
            };
            let ratio = if y == 0.0 { f64::INFINITY } else { x / y };
            let why = format!("{metric}: {a} / {b} = {ratio:.2} (holds at >= {min})");
            if ratio >= *min {
                Verdict::Holds(why)
            } else {
                Verdict::DoesNotHold(why)
            }
        }
        Check::Within { metric, a, b, pct } => {
            let (Some(x), Some(y)) = (mean(a, metric), mean(b, metric)) else {
                return missing(if mean(a, metric).is_none() { a } else { b });
            };
            let diff = if y == 0.0 {
                f64::INFINITY
            } else {
                (x / y - 1.0) * 100.0
            };
            let why = format!("{metric}: {a} vs {b} {diff:+.1}% (holds within ±{pct}%)");
            if diff.abs() <= *pct {
                Verdict::Holds(why)
            } else {
                Verdict::DoesNotHold(why)
            }
        }
        Check::Highest { metric, a, others } => {
            let Some(x) = mean(a, metric) else {
                return missing(a);
            };
            let mut beaten_by = Vec::new();
            for o in others {
                match mean(o, metric) {
                    None => return missing(o),
                    Some(y) if y >= x => beaten_by.push(format!("{o} ({y:.0})")),
                    Some(_) => {}
                }
            }
            if beaten_by.is_empty() {
                Verdict::Holds(format!("{metric}: {a} = {x:.0}, above every other"))
            } else {
                Verdict::DoesNotHold(format!(
                    "{metric}: {a} = {x:.0}, not above {}",
                    beaten_by.join(", ")
                ))
            }
        }
    }
}

fn fmt_stats(s: Option<summary::Stats>) -> String {
    match s {
        None => "-".into(),
        Some(s) => match s.stddev {
            Some(sd) => format!("{} ± {} (n={})", fmt_num(s.mean), fmt_num(sd), s.n),
            None => format!("{} (n=1)", fmt_num(s.mean)),
        },
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn table(rows: Vec<Vec<String>>) -> String {
    let mut b = tabled::builder::Builder::default();
    for r in rows {
        b.push_record(r);
    }
    let mut t = b.build();
    t.with(tabled::settings::Style::sharp());
    t.to_string()
}

/// The published table in the write-up's layout.
fn published(seed: &SeedTable) -> String {
    let fig = |s: &SeedSystem, k: &str| {
        s.figures
            .get(k)
            .map_or_else(|| "not published".into(), |v| fmt_num(*v))
    };
    table(layout_rows(seed, &seed.systems, |s, m| fig(s, &m.key)))
}

/// Rows of a table of systems x metrics in the seed's layout.
fn layout_rows<S>(
    seed: &SeedTable,
    systems: &[S],
    cell: impl Fn(&S, &SeedMetric) -> String,
) -> Vec<Vec<String>>
where
    S: Labelled,
{
    match seed.layout {
        SeedLayout::MetricsAsRows => {
            let mut rows = vec![std::iter::once("Metric".to_string())
                .chain(systems.iter().map(|s| s.label()))
                .collect::<Vec<_>>()];
            for m in &seed.metrics {
                rows.push(
                    std::iter::once(format!("{} ({})", m.label, m.unit))
                        .chain(systems.iter().map(|s| cell(s, m)))
                        .collect(),
                );
            }
            rows
        }
        SeedLayout::SystemsAsRows => {
            let mut rows = vec![std::iter::once("System".to_string())
                .chain(
                    seed.metrics
                        .iter()
                        .map(|m| format!("{} {}", m.label, m.unit)),
                )
                .collect::<Vec<_>>()];
            for s in systems {
                rows.push(
                    std::iter::once(s.label())
                        .chain(seed.metrics.iter().map(|m| cell(s, m)))
                        .collect(),
                );
            }
            rows
        }
    }
}

/// Something with a row/column label.
trait Labelled {
    fn label(&self) -> String;
}

impl Labelled for SeedSystem {
    fn label(&self) -> String {
        self.label.clone()
    }
}

/// One measured row: the system, the cell and the results.
struct MeasuredRow<'a> {
    label: String,
    results: Vec<&'a CellResult>,
}

impl Labelled for MeasuredRow<'_> {
    fn label(&self) -> String {
        self.label.clone()
    }
}

/// The whole seed report for a run.
pub fn against(run: &RunRecord, name: &str) -> Result<String, SeedError> {
    let seed = seed_table(name)?;
    let measured: BTreeMap<&str, Measured<'_>> = seed
        .systems
        .iter()
        .map(|s| (s.label.as_str(), measure(s, run)))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Seed: {} (transcribed from {})\nRun: {}\n\nPublished (the author's hardware; shown for \
         shape, never compared as absolute numbers):\n{}\n",
        seed.name,
        seed.source,
        run.run_id,
        published(&seed)
    );
    let mut rows = Vec::new();
    for s in &seed.systems {
        let m = &measured[s.label.as_str()];
        for (cell, results, note) in &m.rows {
            let note = note.as_ref().map(|n| format!(" [{n}]")).unwrap_or_default();
            rows.push(MeasuredRow {
                label: format!("{} = {}{note}", s.label, cell.label()),
                results: results.clone(),
            });
        }
    }
    let _ = writeln!(out, "Measured in this run (mean ± sd over passed repeats):");
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "(no passed cell of this run maps to the write-up's systems)\n"
        );
    } else {
        let _ = writeln!(
            out,
            "{}\n",
            table(layout_rows(&seed, &rows, |r, m| {
                let v: Vec<f64> = r
                    .results
                    .iter()
                    .filter_map(|c| c.metric(&m.key).and_then(|x| x.value.number()))
                    .collect();
                fmt_stats(stats(&v))
            }))
        );
    }
    let _ = writeln!(out, "Systems:");
    for s in &seed.systems {
        let status = match (&s.not_measured, measured[s.label.as_str()].rows.is_empty()) {
            (Some(why), _) => format!("not measured here: {why}"),
            (None, true) => "not measured in this run".into(),
            (None, false) => "measured".into(),
        };
        let _ = writeln!(out, "  {}: {} — {status}", s.label, s.maps_to);
    }
    let _ = writeln!(
        out,
        "\nConclusions of the write-up, checked on the measured means:"
    );
    for c in &seed.conclusions {
        let v = check(&c.check, &measured);
        let _ = writeln!(out, "  [{}] {} — {}", v.word(), c.text, v.why());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_run() -> RunRecord {
        let text = include_str!("../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json");
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_seed_table_parses_and_names_its_systems_consistently() {
        for (name, _) in SEED_TABLES {
            let t = seed_table(name).unwrap();
            assert_eq!(&t.name, name);
            let labels: Vec<&str> = t.systems.iter().map(|s| s.label.as_str()).collect();
            for c in &t.conclusions {
                let named: Vec<&String> = match &c.check {
                    Check::Ratio { a, b, .. } | Check::Within { a, b, .. } => vec![a, b],
                    Check::Highest { a, others, .. } => {
                        std::iter::once(a).chain(others.iter()).collect()
                    }
                };
                for n in named {
                    assert!(labels.contains(&n.as_str()), "{name}: '{n}' is no system");
                }
            }
            for s in &t.systems {
                assert!(
                    s.cells.is_empty() == s.not_measured.is_some(),
                    "{}",
                    s.label
                );
                for k in s.figures.keys() {
                    assert!(t.metrics.iter().any(|m| &m.key == k), "{name}: {k}");
                }
            }
        }
    }

    #[test]
    fn published_conclusions_hold_on_the_published_figures() {
        // The checks must agree with the write-ups' own numbers, else they encode a misreading.
        for (name, _) in SEED_TABLES {
            let t = seed_table(name).unwrap();
            for c in &t.conclusions {
                let (metric, names): (&String, Vec<&String>) = match &c.check {
                    Check::Ratio { metric, a, b, .. } | Check::Within { metric, a, b, .. } => {
                        (metric, vec![a, b])
                    }
                    Check::Highest {
                        metric, a, others, ..
                    } => (metric, std::iter::once(a).chain(others.iter()).collect()),
                };
                let fig = |n: &String| {
                    t.systems
                        .iter()
                        .find(|s| &s.label == n)
                        .and_then(|s| s.figures.get(metric))
                        .copied()
                };
                if names.iter().any(|n| fig(n).is_none()) {
                    continue; // the author did not measure it (e.g. KVM over iSCSI)
                }
                let v = check_figures(&c.check, &fig);
                assert!(v, "{name}: '{}' does not hold on its own figures", c.text);
            }
        }
    }

    fn check_figures(c: &Check, fig: &dyn Fn(&String) -> Option<f64>) -> bool {
        let f = |n: &String| fig(n).unwrap();
        match c {
            Check::Ratio { a, b, min, .. } => f(a) / f(b) >= *min,
            Check::Within { a, b, pct, .. } => ((f(a) / f(b) - 1.0) * 100.0).abs() <= *pct,
            Check::Highest { a, others, .. } => others.iter().all(|o| f(o) < f(a)),
        }
    }

    #[test]
    fn a_real_run_fills_the_openebs_column_and_leaves_the_rest_not_measured() {
        let out = against(&fixture_run(), "longhorn-localpv-openebs").unwrap();
        assert!(out.contains("OpenEBS PV = qemu/local/raw"), "{out}");
        assert!(out.contains("(n=1)"), "{out}");
        assert!(out.contains("7757"), "published figure missing:\n{out}");
        assert!(
            out.contains("[not measured here] Local PV is about 10x Longhorn in read IOPS"),
            "{out}"
        );
        assert!(
            !out.contains("[holds]") && !out.contains("[does not hold]"),
            "{out}"
        );
    }

    #[test]
    fn a_real_bonnie_run_maps_to_the_kvm_local_row_on_tcg_with_the_note() {
        let out = against(&fixture_run(), "xen-kvm-nfs-iscsi-local").unwrap();
        assert!(
            out.contains("localdisk-on-nfs-server-cloudtest3 = qemu/local/raw/ext4 [kvm cannot boot the guest here: run on qemu/TCG]"),
            "{out}"
        );
        // The 100 Mbit system is measurable now (--link 100mbit), just not in this run.
        assert!(out.contains("kvm-guest-nfs-qcow-100mb: kvm guest, qcow2 on nfs over a 100 Mbit link (--link 100mbit) — not measured in this run"), "{out}");
        // The fixture's measured block write (K/sec) is in the measured table.
        assert!(out.contains("26827 (n=1)"), "{out}");
        assert!(
            out.contains("[not measured here] KVM over NFS beats Xen over NFS"),
            "{out}"
        );
    }

    #[test]
    fn ratios_and_orderings_are_judged_on_measured_means() {
        let run = fixture_run();
        let mut two = run.clone();
        // The same real cell as two systems: iscsi at a tenth of local's read IOPS.
        let mut slow = run
            .cells
            .iter()
            .find(|c| {
                c.cell.backend == crate::cell::Backend::Local && c.cell.layout.as_str() == "raw"
            })
            .unwrap()
            .clone();
        slow.cell.backend = crate::cell::Backend::Iscsi;
        for m in &mut slow.metrics {
            if let crate::results::Value::Number(v) = &mut m.value {
                if m.key == "read_iops" {
                    *v /= 10.0;
                }
            }
        }
        two.cells.push(slow);
        let seed = seed_table("longhorn-localpv-openebs").unwrap();
        let measured: BTreeMap<&str, Measured<'_>> = seed
            .systems
            .iter()
            .map(|s| (s.label.as_str(), measure(s, &two)))
            .collect();
        let ratio = |min: f64| Check::Ratio {
            metric: "read_iops".into(),
            a: "OpenEBS PV".into(),
            b: "Longhorn PV".into(),
            min,
        };
        assert!(matches!(check(&ratio(5.0), &measured), Verdict::Holds(_)));
        assert!(matches!(
            check(&ratio(20.0), &measured),
            Verdict::DoesNotHold(_)
        ));
        let within = Check::Within {
            metric: "read_iops".into(),
            a: "Longhorn PV".into(),
            b: "OpenEBS PV".into(),
            pct: 5.0,
        };
        assert!(
            matches!(check(&within, &measured), Verdict::DoesNotHold(w) if w.contains("-90.0%"))
        );
    }

    #[test]
    fn unknown_seed_names_the_choices() {
        let e = seed_table("ceph").unwrap_err().to_string();
        assert!(
            e.contains(
                "valid: longhorn-localpv-openebs, xen-kvm-nfs-iscsi-local, lvm-vs-partition"
            ),
            "{e}"
        );
    }
}
