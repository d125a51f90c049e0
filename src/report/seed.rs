//! `vmbench report RUN --against-seed NAME`: a write-up's published table beside the measured
//! one, and the write-up's conclusions judged on the run, honestly.
//!
//! The published figures are data (`seeds/NAME.toml`, every published row transcribed from the
//! write-up); they are shown for shape only, absolute numbers are never compared (the hardware
//! differs). A conclusion is judged only when:
//! - the run came from the write-up's preset (`seed_origin`; else refused, exit 2, unless
//!   `--force`);
//! - each side has at least 3 passed repeats (else `inconclusive (n = K < 3)`);
//! - the two cells are like for like: they agree on every dimension except those the two
//!   systems' rules set to different values (a link applies to nfs and iscsi cells only). Each
//!   such pair is its own conclusion: nothing is pooled across links, formats or layouts.
//!
//! Our ratio a/b is the ratio of geometric means over the repeats with its 95% CI (Welch's t on
//! ln values, `compare::stats::ratio_ci`), printed beside the write-up's own ratio: `holds` when
//! the CI supports the finding, `does not hold` when it excludes it, `inconclusive` otherwise.

use crate::cell::Cell;
use crate::compare::stats::{ratio_ci, RatioCi};
use crate::results::{CellResult, Outcome, RunRecord};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use summary::{metric_numbers, stats};

use super::seed_origin::{self, Origin};
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

/// Fewest passed repeats a side for a judged conclusion.
pub const MIN_REPEATS: usize = 3;

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
    /// The run was not made by the seed's preset, and `--force` was not given (exit 2).
    #[error(
        "run {run_id} was not made by preset {seed}, so the write-up's conclusions are not judged \
         on it:\n{why}\nRun `vmbench matrix --preset {seed}` (then `vmbench report last \
         --against-seed {seed}`), or add --force to judge this run anyway (the report then says \
         what differs)"
    )]
    NotFromPreset {
        /// The seed (and preset) name.
        seed: String,
        /// The run.
        run_id: String,
        /// The differing parameters, one per line, or why the origin is unknown.
        why: String,
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

/// A published figure: a number in the metric's unit, or the write-up's own text where it has
/// no number (bonnie++'s `+++++`, "about 1.5 GB").
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Figure {
    /// A number.
    Number(f64),
    /// Text as published.
    Text(String),
}

impl Figure {
    fn number(&self) -> Option<f64> {
        match self {
            Figure::Number(v) => Some(*v),
            Figure::Text(_) => None,
        }
    }
    fn show(&self) -> String {
        match self {
            // As published: 706.3 stays 706.3, 36450 stays 36450.
            Figure::Number(v) => format!("{v}"),
            Figure::Text(t) => t.clone(),
        }
    }
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

/// One system (a row or column) of the write-up.
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
    /// This row is a further published run of that system (the write-up's "-2nd", "-3rd"): its
    /// figures join the system's in the published ratio; it has no cells of its own.
    #[serde(default)]
    pub repeat_of: Option<String>,
    /// The published figures by metric key.
    pub figures: BTreeMap<String, Figure>,
}

/// A checkable claim of the write-up: always system `a` against system `b` on one metric.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// The write-up's magnitude: a/b is the published ratio (from its figures), within
    /// `about_pct` either way (log-symmetric) when the write-up says "about".
    Ratio {
        /// Metric key.
        metric: String,
        /// Numerator system.
        a: String,
        /// Denominator system.
        b: String,
        /// "About": the published ratio times or divided by (1 + about_pct/100). Default 0.
        #[serde(default)]
        about_pct: f64,
    },
    /// A direction only: a is above b (a/b > 1).
    Higher {
        /// Metric key.
        metric: String,
        /// The system claimed higher.
        a: String,
        /// The other.
        b: String,
    },
    /// No difference beyond `pct`: a/b within 1 ± pct/100.
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
}

impl Check {
    /// (metric, a, b).
    pub fn parts(&self) -> (&str, &str, &str) {
        match self {
            Check::Ratio { metric, a, b, .. }
            | Check::Higher { metric, a, b }
            | Check::Within { metric, a, b, .. } => (metric, a, b),
        }
    }
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

impl SeedTable {
    /// Published numbers of a system and of its further runs (`repeat_of`).
    fn published(&self, system: &str, metric: &str) -> Vec<f64> {
        self.systems
            .iter()
            .filter(|s| s.label == system || s.repeat_of.as_deref() == Some(system))
            .filter_map(|s| s.figures.get(metric).and_then(Figure::number))
            .collect()
    }

    /// The write-up's own a/b (means over its published runs), and how many runs each side.
    pub fn published_ratio(&self, c: &Check) -> Option<(f64, usize, usize)> {
        let (metric, a, b) = c.parts();
        let (pa, pb) = (self.published(a, metric), self.published(b, metric));
        let (ma, mb) = (stats(&pa)?.mean, stats(&pb)?.mean);
        (mb != 0.0).then(|| (ma / mb, pa.len(), pb.len()))
    }
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
    /// The CI supports the finding.
    Holds,
    /// The CI excludes it.
    DoesNotHold,
    /// Neither, with the reason (too few repeats, a CI too wide, no logarithm).
    Inconclusive(Undecided),
    /// A system it needs has no passed cell, or no like-for-like pair exists.
    NotMeasured,
    /// Both systems are the same cell here (one data path stands for two of the write-up's
    /// systems): a cell compared with itself would only show its own noise.
    SameCell,
}

/// Why a finding is neither upheld nor refuted.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum Undecided {
    /// Fewer passed repeats a side than a CI needs.
    #[error("n = {n} < {MIN_REPEATS}")]
    FewRepeats {
        /// The smaller side's repeats.
        n: usize,
    },
    /// A repeat measured 0 or less: no ratio on logarithms.
    #[error("a value is 0")]
    ZeroValue,
    /// The write-up gives no figure to check against.
    #[error("no published ratio")]
    NoPublishedRatio,
    /// The ratio's CI includes 1: no direction.
    #[error("CI includes 1")]
    CiIncludesOne,
    /// The CI lies partly inside and partly outside the band.
    #[error("CI crosses the band")]
    CiCrossesBand,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Holds => f.write_str("holds"),
            Verdict::DoesNotHold => f.write_str("does not hold"),
            // Too few repeats is the one reason the reader can act on from the table.
            Verdict::Inconclusive(why @ Undecided::FewRepeats { .. }) => {
                write!(f, "inconclusive ({why})")
            }
            Verdict::Inconclusive(_) => f.write_str("inconclusive"),
            Verdict::NotMeasured => f.write_str("not measured here"),
            Verdict::SameCell => f.write_str("not judged (one cell stands for both)"),
        }
    }
}

/// One measured cell of a system: its passed repeats and the note of the rule that matched.
struct Row<'a> {
    cell: Cell,
    results: Vec<&'a CellResult>,
    note: Option<String>,
}

/// A system's measured cells and the rule that found them; without any, why not.
struct Measured<'a> {
    rule: Option<&'a CellRule>,
    rows: Vec<Row<'a>>,
    /// Why the system has no passed cell in the run (see [`why_not_measured`]); empty when it
    /// has one.
    why_not: String,
}

/// The cells of `run` a system maps to: the first alternative with passed cells.
fn measure<'a>(sys: &'a SeedSystem, run: &'a RunRecord) -> Measured<'a> {
    for alt in &sys.cells {
        let mut rows: Vec<Row<'a>> = Vec::new();
        for r in run.cells.iter().filter(|r| r.outcome == Outcome::Passed) {
            if !crate::matrix::rule_matches(&alt.dims, &r.cell) {
                continue;
            }
            match rows.iter_mut().find(|row| row.cell == r.cell) {
                Some(row) => row.results.push(r),
                None => rows.push(Row {
                    cell: r.cell.clone(),
                    results: vec![r],
                    note: alt.note.clone(),
                }),
            }
        }
        if !rows.is_empty() {
            return Measured {
                rule: Some(alt),
                rows,
                why_not: String::new(),
            };
        }
    }
    Measured {
        rule: None,
        rows: vec![],
        why_not: why_not_measured(sys, run),
    }
}

/// Why a system has no passed cell in `run`, in one line: the seed's own reason for a system
/// vmbench cannot measure; else what became of the run's cells it maps to (unsupported on this
/// host, skipped, failed: each distinct reason once, with its cells); else that the run has no
/// such cell (its matrix left it out).
fn why_not_measured(sys: &SeedSystem, run: &RunRecord) -> String {
    if let Some(why) = &sys.not_measured {
        return format!("not measured here: {why}");
    }
    // Each distinct reason with the labels of the cells that gave it, in the run's order.
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    let tried = run.cells.iter().filter(|r| {
        r.outcome != Outcome::Passed
            && (sys.cells.iter()).any(|alt| crate::matrix::rule_matches(&alt.dims, &r.cell))
    });
    for r in tried {
        let reason = match &r.outcome {
            Outcome::Passed => continue,
            Outcome::Unsupported(why) => why.clone(),
            Outcome::Skipped(why) => format!("skipped: {why}"),
            Outcome::Failed(why) => format!("failed: {why}"),
        };
        // The first line: a failure's console tail follows on the next ones.
        let reason = reason.lines().next().unwrap_or_default().trim().to_string();
        let label = r.cell.label();
        match reasons.iter_mut().find(|(w, _)| *w == reason) {
            Some((_, labels)) if !labels.contains(&label) => labels.push(label),
            Some(_) => {}
            None => reasons.push((reason, vec![label])),
        }
    }
    if reasons.is_empty() {
        return format!("this run has no cell for it ({})", sys.maps_to);
    }
    let mut parts: Vec<String> = reasons
        .into_iter()
        .map(|(why, labels)| format!("{}: {why}", labels.join(", ")))
        .collect();
    // The alternatives the run has no cell for (its matrix left them out): else the reasons
    // above would read as the whole story (kvm cannot boot, when the qemu cells were excluded).
    let absent: Vec<String> = (sys.cells.iter())
        .filter(|alt| !(run.cells.iter()).any(|r| crate::matrix::rule_matches(&alt.dims, &r.cell)))
        .map(|alt| {
            (alt.dims.iter())
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    if !absent.is_empty() {
        parts.push(format!("no cell in this run for {}", absent.join(" nor ")));
    }
    parts.join("; ")
}

/// Which of a row's repeats bonnie++ found too fast to time (`+++++`): they count in no ratio,
/// and the reader must see why a side has fewer repeats than ran.
fn too_fast_note(row: &Row<'_>, key: &str) -> Option<String> {
    let fast = too_fast(&row.results, key);
    (fast > 0).then(|| {
        format!(
            "\n{}: {fast} of {} repeats too fast to time (bonnie++ printed +++++: the pass \
             ended before it could be timed, its file served from a page cache or a disk too \
             fast for its size)",
            row.cell.label(),
            row.results.len()
        )
    })
}

/// How many of the repeats bonnie++ found too fast to time (`+++++`) for `key`.
fn too_fast(results: &[&CellResult], key: &str) -> usize {
    (results.iter())
        .filter(|r| {
            r.metric(key)
                .is_some_and(|m| m.value == crate::results::Value::TooFast)
        })
        .count()
}

/// The dimensions the two systems are told apart by: set by both rules to different values.
fn contrast(a: &CellRule, b: &CellRule) -> BTreeSet<String> {
    a.dims
        .iter()
        .filter(|(k, v)| b.dims.get(*k).is_some_and(|w| w.trim() != v.trim()))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Like for like: equal in every dimension but the contrast. An empty value (xen_mode of a KVM
/// cell) does not apply; a link applies only when both disks are reached over the network.
fn like_for_like(x: &Cell, y: &Cell, contrast: &BTreeSet<String>) -> bool {
    let networked = |c: &Cell| crate::storage::descriptor(c.backend).networked();
    x.dimensions()
        .into_iter()
        .zip(y.dimensions())
        .all(|((k, v), (_, w))| {
            contrast.contains(k)
                || v.is_empty()
                || w.is_empty()
                || (k == "link" && !(networked(x) && networked(y)))
                || v == w
        })
}

/// One judged pair of cells.
struct Judged {
    verdict: Verdict,
    /// "A-cell vs B-cell", or what is missing.
    pair: String,
    detail: String,
}

/// Judges one claim on the numbers of one like-for-like pair (a's and b's repeats).
fn judge(check: &Check, published: Option<f64>, xa: &[f64], xb: &[f64]) -> (Verdict, String) {
    let pubs = published.map_or_else(
        || "the write-up has no figure for it".to_string(),
        |p| format!("published {p:.2}x"),
    );
    let n = xa.len().min(xb.len());
    if n < MIN_REPEATS {
        let ours = match (stats(xa), stats(xb)) {
            (Some(a), Some(b)) if b.mean != 0.0 => format!("{:.2}x", a.mean / b.mean),
            _ => "-".into(),
        };
        return (
            Verdict::Inconclusive(Undecided::FewRepeats { n }),
            format!(
                "ours {ours} (ratio of means; no CI below {MIN_REPEATS} repeats a side) vs \
                 {pubs}; n = {} + {}",
                xa.len(),
                xb.len()
            ),
        );
    }
    let Some(ci) = ratio_ci(xb, xa, 0.95) else {
        return (
            Verdict::Inconclusive(Undecided::ZeroValue),
            format!(
                "a repeat measured 0 (or less): no ratio on logarithms; {pubs}; n = {} + {}",
                xa.len(),
                xb.len()
            ),
        );
    };
    let d = decimals(&ci, &marks(check, published));
    let (verdict, test) = decide(check, published, &ci, d);
    let pubs = published.map_or(pubs, |p| format!("published {p:.d$}x"));
    let detail = format!(
        "ours {:.d$}x (95% CI {:.d$}-{:.d$}) vs {pubs}; {test}; Welch's t on ln values, \
         df {:.1}, n = {} + {}",
        ci.ratio,
        ci.lo,
        ci.hi,
        ci.df,
        xa.len(),
        xb.len()
    );
    (verdict, detail)
}

/// The band a claim's CI is judged against: a published ratio within its "about" (the ratio
/// itself when exact), or 1 within "within N%"; none for a direction-only claim.
fn band(check: &Check, published: Option<f64>) -> Option<(f64, f64)> {
    match check {
        Check::Ratio { about_pct, .. } => published.map(|p| ratio_band(p, *about_pct)),
        Check::Higher { .. } => None,
        Check::Within { pct, .. } => Some(within_band(*pct)),
    }
}

/// A published ratio `p` give or take `about_pct` percent (as a factor, either way).
fn ratio_band(p: f64, about_pct: f64) -> (f64, f64) {
    let f = 1.0 + about_pct / 100.0;
    (p / f, p * f)
}

/// 1 give or take `pct` percent.
fn within_band(pct: f64) -> (f64, f64) {
    (1.0 - pct / 100.0, 1.0 + pct / 100.0)
}

/// What a CI is judged against: 1, the band's edges and the published ratio.
fn marks(check: &Check, published: Option<f64>) -> Vec<f64> {
    let mut m = vec![1.0];
    m.extend(band(check, published).map_or(vec![], |(lo, hi)| vec![lo, hi]));
    m.extend(published.filter(|_| matches!(check, Check::Ratio { .. })));
    m
}

/// Decimals to print a CI with (2 to 4), so that each end reads apart from every mark it is
/// judged against unless the two are equal: at 2 decimals a CI ending at 1.547 and a published
/// 1.551 both read "1.55", and "CI excludes it" looks like a mistake.
fn decimals(ci: &RatioCi, marks: &[f64]) -> usize {
    let apart = |d: usize| {
        [ci.lo, ci.hi].iter().all(|e| {
            marks
                .iter()
                .all(|m| e == m || format!("{e:.d$}") != format!("{m:.d$}"))
        })
    };
    (2..4).find(|&d| apart(d)).unwrap_or(4)
}

/// The verdict of a CI against a claim, and the rule applied in words.
/// `d`: the decimals of the band's edges (as the CI's).
fn decide(check: &Check, published: Option<f64>, ci: &RatioCi, d: usize) -> (Verdict, String) {
    let inside = |lo: f64, hi: f64| ci.lo >= lo && ci.hi <= hi;
    let apart = |lo: f64, hi: f64| ci.hi < lo || ci.lo > hi;
    match check {
        Check::Ratio { about_pct, .. } => {
            let Some(p) = published else {
                return (
                    Verdict::Inconclusive(Undecided::NoPublishedRatio),
                    "no published ratio to check".into(),
                );
            };
            let (lo, hi) = ratio_band(p, *about_pct);
            let band = if *about_pct > 0.0 {
                format!("finding {lo:.d$}-{hi:.d$}x (about: ±{about_pct}%)")
            } else {
                format!("finding {p:.d$}x")
            };
            let direction = if p > 1.0 {
                ci.lo > 1.0
            } else if p < 1.0 {
                ci.hi < 1.0
            } else {
                true
            };
            if apart(lo, hi) {
                let how = miss(p, (lo, hi), ci);
                (
                    Verdict::DoesNotHold,
                    format!("{band}, CI excludes it ({how})"),
                )
            } else if direction {
                (
                    Verdict::Holds,
                    format!("{band}, CI reaches it and excludes 1"),
                )
            } else {
                (
                    Verdict::Inconclusive(Undecided::CiIncludesOne),
                    format!("{band}, CI includes it and also 1"),
                )
            }
        }
        Check::Higher { .. } => {
            if ci.lo > 1.0 {
                (Verdict::Holds, "finding a/b > 1, CI above 1".into())
            } else if ci.hi < 1.0 {
                (Verdict::DoesNotHold, "finding a/b > 1, CI below 1".into())
            } else {
                (
                    Verdict::Inconclusive(Undecided::CiIncludesOne),
                    "finding a/b > 1, CI includes 1".into(),
                )
            }
        }
        Check::Within { pct, .. } => {
            let (lo, hi) = within_band(*pct);
            let band = format!("finding {lo:.d$}-{hi:.d$}x (within ±{pct}%)");
            if inside(lo, hi) {
                (Verdict::Holds, format!("{band}, CI inside"))
            } else if apart(lo, hi) {
                (Verdict::DoesNotHold, format!("{band}, CI outside"))
            } else {
                (
                    Verdict::Inconclusive(Undecided::CiCrossesBand),
                    format!("{band}, CI crosses its edge"),
                )
            }
        }
    }
}

/// How a CI that excludes the published band misses it.
fn miss(p: f64, (lo, hi): (f64, f64), ci: &RatioCi) -> &'static str {
    let up = p >= 1.0;
    let toward_one = if up { ci.hi < lo } else { ci.lo > hi };
    if !toward_one {
        return "same direction, larger";
    }
    match (up, ci.lo > 1.0, ci.hi < 1.0) {
        (true, true, _) | (false, _, true) => "same direction, smaller",
        (true, _, true) | (false, true, _) => "opposite direction",
        _ => "no difference shown",
    }
}

/// The verdict of a conclusion a side of which has no passed cell: each such side named, with
/// the reason the run gives, one line each.
fn not_measured(sides: &[(&str, &Measured<'_>)]) -> Judged {
    let missing: Vec<&(&str, &Measured<'_>)> =
        sides.iter().filter(|(_, m)| m.rule.is_none()).collect();
    let names: Vec<String> = missing.iter().map(|(n, _)| format!("'{n}'")).collect();
    Judged {
        verdict: Verdict::NotMeasured,
        pair: format!("no passed cell for {}", names.join(", nor for ")),
        detail: missing
            .iter()
            .map(|(n, m)| format!("'{n}': {}", m.why_not))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Every like-for-like pair of a conclusion, judged; or one line saying what is missing.
fn judge_conclusion(
    seed: &SeedTable,
    c: &Conclusion,
    measured: &BTreeMap<&str, Measured<'_>>,
) -> Vec<Judged> {
    let (metric, a, b) = c.check.parts();
    let published = seed.published_ratio(&c.check).map(|(r, _, _)| r);
    let (ma, mb) = (&measured[a], &measured[b]);
    let (Some(ra), Some(rb)) = (ma.rule, mb.rule) else {
        return vec![not_measured(&[(a, ma), (b, mb)])];
    };
    let apart = contrast(ra, rb);
    let mut out = Vec::new();
    let mut paired_b = BTreeSet::new();
    let mut unpaired = Vec::new();
    for x in &ma.rows {
        let partners: Vec<(usize, &Row<'_>)> = mb
            .rows
            .iter()
            .enumerate()
            .filter(|(_, y)| like_for_like(&x.cell, &y.cell, &apart))
            .collect();
        if partners.is_empty() {
            unpaired.push(x.cell.label());
        }
        for (i, y) in partners {
            paired_b.insert(i);
            if x.cell == y.cell {
                out.push(Judged {
                    verdict: Verdict::SameCell,
                    pair: x.cell.label(),
                    detail: format!("'{a}' and '{b}' are this one cell here"),
                });
                continue;
            }
            let (verdict, mut detail) = judge(
                &c.check,
                published,
                &metric_numbers(&x.results, metric),
                &metric_numbers(&y.results, metric),
            );
            for row in [x, y] {
                if let Some(note) = too_fast_note(row, metric) {
                    detail.push_str(&note);
                }
            }
            out.push(Judged {
                verdict,
                pair: format!("{} vs {}", x.cell.label(), y.cell.label()),
                detail,
            });
        }
    }
    unpaired.extend(
        mb.rows
            .iter()
            .enumerate()
            .filter(|(i, _)| !paired_b.contains(i))
            .map(|(_, y)| y.cell.label()),
    );
    if out.is_empty() {
        out.push(Judged {
            verdict: Verdict::NotMeasured,
            pair: format!("no like-for-like cells of '{a}' and '{b}'"),
            detail: format!("cells differ beyond {apart:?}: {}", unpaired.join(", ")),
        });
    } else if !unpaired.is_empty() {
        out.push(Judged {
            verdict: Verdict::NotMeasured,
            pair: "without a like-for-like partner, not compared".into(),
            detail: unpaired.join(", "),
        });
    }
    out
}

/// "mean ±sd%" of one metric over a row's repeats, "+++++" when bonnie++ was too fast every
/// time, "not measured" without a value.
fn fmt_measured(results: &[&CellResult], key: &str) -> String {
    let v = metric_numbers(results, key);
    match stats(&v) {
        None if too_fast(results, key) > 0 => "+++++".into(),
        None => "not measured".into(),
        Some(s) => {
            let sd = s
                .rel_sd_pct()
                .map(|p| format!(" ±{p:.0}%"))
                .unwrap_or_default();
            let n = if s.n == results.len() {
                String::new()
            } else {
                format!(" (n={})", s.n)
            };
            format!("{}{sd}{n}", fmt_num(s.mean))
        }
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

/// Rows of a table of systems x metrics in the seed's layout.
fn layout_rows<S>(
    seed: &SeedTable,
    systems: &[S],
    label: impl Fn(&S) -> String,
    cell: impl Fn(&S, &SeedMetric) -> String,
) -> Vec<Vec<String>> {
    match seed.layout {
        SeedLayout::MetricsAsRows => {
            let mut rows = vec![std::iter::once("Metric".to_string())
                .chain(systems.iter().map(&label))
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
                        .map(|m| format!("{} {}", m.label, m.unit).trim().to_string()),
                )
                .collect::<Vec<_>>()];
            for s in systems {
                rows.push(
                    std::iter::once(label(s))
                        .chain(seed.metrics.iter().map(|m| cell(s, m)))
                        .collect(),
                );
            }
            rows
        }
    }
}

/// The published table in the write-up's layout, every published row.
fn published_table(seed: &SeedTable) -> String {
    table(layout_rows(
        seed,
        &seed.systems,
        |s| s.label.clone(),
        |s, m| {
            s.figures
                .get(&m.key)
                .map_or_else(|| "not published".into(), Figure::show)
        },
    ))
}

/// One row of the measured table: a measured cell, or a system with none.
struct MeasuredRow<'a> {
    label: String,
    results: Option<&'a [&'a CellResult]>,
}

/// The measured table: a row per measured cell of every system, and a "(not measured)" row for
/// each system without one (further published runs are the system's own repeats here). Rule
/// notes are footnotes, so the label column stays narrow.
fn measured_table(seed: &SeedTable, measured: &BTreeMap<&str, Measured<'_>>) -> String {
    let mut rows = Vec::new();
    let mut notes: Vec<&str> = Vec::new();
    for s in seed.systems.iter().filter(|s| s.repeat_of.is_none()) {
        let m = &measured[s.label.as_str()];
        if m.rows.is_empty() {
            rows.push(MeasuredRow {
                label: format!("{} (not measured)", s.label),
                results: None,
            });
        }
        for r in &m.rows {
            let mark = r.note.as_deref().map_or_else(String::new, |n| {
                let i = notes.iter().position(|x| *x == n).unwrap_or_else(|| {
                    notes.push(n);
                    notes.len() - 1
                });
                format!(" [{}]", i + 1)
            });
            rows.push(MeasuredRow {
                label: format!(
                    "{} = {} (n={}){mark}",
                    s.label,
                    r.cell.label(),
                    r.results.len()
                ),
                results: Some(&r.results),
            });
        }
    }
    let mut out = table(layout_rows(
        seed,
        &rows,
        |r| r.label.clone(),
        |r, m| {
            r.results
                .map_or_else(|| "-".into(), |rs| fmt_measured(rs, &m.key))
        },
    ));
    for (i, n) in notes.iter().enumerate() {
        let _ = write!(out, "\n[{}] {n}", i + 1);
    }
    out
}

/// The TCG banner: how many measured cells ran with an emulated CPU.
fn tcg_banner(measured: &BTreeMap<&str, Measured<'_>>) -> Option<String> {
    // A set: one cell may stand for two systems (Local PV and OpenEBS on one hostdir).
    let cells: BTreeSet<&Cell> = measured
        .values()
        .flat_map(|m| m.rows.iter().map(|r| &r.cell))
        .collect();
    let tcg = cells
        .iter()
        .filter(|c| c.hypervisor.desc().emulated_cpu)
        .count();
    (tcg > 0).then(|| {
        format!(
            "NOTE: {tcg} of {} measured cells ran under TCG (hypervisor qemu: QEMU emulates the \
             guest's CPU). A TCG guest is CPU-bound, which compresses the differences between \
             storage paths: ratios lean toward 1, so a write-up's magnitude can fail here for that \
             reason alone.",
            cells.len()
        )
    })
}

/// The whole seed report for a run. `ran` is the configuration the run's recorded command gives
/// (`cli::recorded_matrix_config`) or why there is none. Refused (exit 2) when the run was not
/// made by the seed's preset, unless `force`.
pub fn against(
    run: &RunRecord,
    ran: &Result<crate::matrix::config::MatrixConfig, String>,
    name: &str,
    force: bool,
) -> Result<String, SeedError> {
    let seed = seed_table(name)?;
    let differs = differences_from_preset(&seed, ran);
    if let (Some(why), false) = (&differs, force) {
        return Err(SeedError::NotFromPreset {
            seed: seed.name.clone(),
            run_id: run.run_id.clone(),
            why: why.clone(),
        });
    }
    let measured: BTreeMap<&str, Measured<'_>> = seed
        .systems
        .iter()
        .map(|s| (s.label.as_str(), measure(s, run)))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Seed: {} (transcribed from {})\nRun: {}",
        seed.name, seed.source, run.run_id
    );
    match &differs {
        None => {
            let _ = writeln!(out, "Made by preset {}: yes", seed.name);
        }
        Some(why) => {
            let _ = writeln!(
                out,
                "WARNING: not made by preset {} (judged anyway: --force). It differs in:\n{why}",
                seed.name
            );
        }
    }
    if let Some(b) = tcg_banner(&measured) {
        let _ = writeln!(out, "{b}");
    }
    let _ = writeln!(
        out,
        "\nPublished (the author's hardware; shown for shape, never compared as absolute \
         numbers):\n{}\n",
        published_table(&seed)
    );
    let _ = writeln!(
        out,
        "Measured in this run (mean ±sd% over passed repeats; n per cell in its label):\n{}\n",
        measured_table(&seed, &measured)
    );
    push_systems(&mut out, &seed, &measured);
    push_conclusions(&mut out, &seed, &measured);
    Ok(out)
}

/// How the run's configuration differs from the seed's preset, one indented line each, or
/// `None` when the preset made it.
fn differences_from_preset(
    seed: &SeedTable,
    ran: &Result<crate::matrix::config::MatrixConfig, String>,
) -> Option<String> {
    let origin = match crate::matrix::presets::seed_preset(&seed.name) {
        Ok(p) => seed_origin::origin(ran, p),
        Err(e) => Origin::Unknown(e),
    };
    match &origin {
        Origin::Preset => None,
        Origin::Differs(d) => Some(
            d.iter()
                .map(|d| format!("  {d}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Origin::Unknown(why) => Some(format!("  {why}")),
    }
}

/// Each published system with what this run did with it.
fn push_systems(out: &mut String, seed: &SeedTable, measured: &BTreeMap<&str, Measured<'_>>) {
    let _ = writeln!(out, "Systems:");
    for s in &seed.systems {
        let status = match (&s.repeat_of, &s.not_measured) {
            (Some(of), _) => format!("a further published run of {of}: here, its repeats"),
            (None, Some(why)) => format!("not measured here: {why}"),
            (None, None) if measured[s.label.as_str()].rows.is_empty() => {
                format!(
                    "not measured in this run: {}",
                    measured[s.label.as_str()].why_not
                )
            }
            (None, None) => "measured".into(),
        };
        let _ = writeln!(out, "  {}: {} — {status}", s.label, s.maps_to);
    }
}

/// Each conclusion of the write-up with its verdict on every like-for-like pair of cells.
fn push_conclusions(out: &mut String, seed: &SeedTable, measured: &BTreeMap<&str, Measured<'_>>) {
    let _ = writeln!(
        out,
        "\nConclusions of the write-up, judged per like-for-like pair of cells (nothing pooled): \
         our ratio a/b of geometric means with its 95% CI (not adjusted for the number of \
         checks) beside the write-up's; at least {MIN_REPEATS} passed repeats a side:"
    );
    for c in &seed.conclusions {
        let _ = writeln!(out, "  {}", c.text);
        for j in judge_conclusion(seed, c, measured) {
            let _ = writeln!(out, "    [{}] {}", j.verdict, j.pair);
            for line in j.detail.lines() {
                let _ = writeln!(out, "        {line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Backend, Format, Hypervisor, Link};

    /// A real stored run: a run.json, or the run inside a `vmbench export` file.
    fn real(text: &str) -> RunRecord {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        serde_json::from_value(v.get("run").cloned().unwrap_or(v)).unwrap()
    }

    fn fixture_run() -> RunRecord {
        real(include_str!(
            "../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json"
        ))
    }

    /// The fixture run's bonnie++ cell.
    fn fixture_bonnie(run: &RunRecord) -> CellResult {
        (run.cells.iter())
            .find(|c| c.cell.workload.to_string() == "bonnie")
            .expect("the fixture run has a bonnie++ cell")
            .clone()
    }

    /// `against` with the configuration the run's recorded command gives.
    fn against_(run: &RunRecord, name: &str, force: bool) -> Result<String, SeedError> {
        against(
            run,
            &crate::cli::recorded_matrix_config(&run.command),
            name,
            force,
        )
    }

    const LONGHORN_CMD: &[&str] = &["vmbench", "matrix", "--preset", "longhorn-localpv-openebs"];

    /// Real local qcow2 and raw repeats as the Longhorn preset's systems (the figures are the
    /// measured ones; only the labels move): qcow2 cells as Longhorn (ext4 on iscsi), raw cells
    /// as Local PV and OpenEBS (hostdir), all buffered, and the run's command the preset's.
    fn as_longhorn(mut run: RunRecord) -> RunRecord {
        for c in &mut run.cells {
            c.cell.backend = if c.cell.format == Format::Qcow2 {
                Backend::Iscsi
            } else {
                Backend::Hostdir
            };
            c.cell.format = Format::Raw;
            c.cell.layout = crate::cell::Layout::Ext4;
            c.cell.job.direct = Some(0);
        }
        run.command = LONGHORN_CMD.iter().map(|s| s.to_string()).collect();
        run
    }

    /// The verdict lines under the conclusion whose text starts with `text`.
    fn verdicts<'a>(out: &'a str, text: &str) -> Vec<&'a str> {
        out.lines()
            .skip_while(|l| !l.trim_start().starts_with(text))
            .skip(1)
            .take_while(|l| l.starts_with("    "))
            .filter(|l| l.trim_start().starts_with('['))
            .collect()
    }

    #[test]
    fn every_seed_table_parses_and_names_its_systems_consistently() {
        for (name, _) in SEED_TABLES {
            let t = seed_table(name).unwrap();
            assert_eq!(&t.name, name);
            let labels: Vec<&str> = t.systems.iter().map(|s| s.label.as_str()).collect();
            for c in &t.conclusions {
                let (metric, a, b) = c.check.parts();
                for n in [a, b] {
                    assert!(labels.contains(&n), "{name}: '{n}' is no system");
                }
                assert!(
                    t.metrics.iter().any(|m| m.key == metric),
                    "{name}: {metric}"
                );
                if let Check::Ratio { .. } = c.check {
                    assert!(t.published_ratio(&c.check).is_some(), "{name}: {}", c.text);
                }
            }
            for s in &t.systems {
                let kinds = [
                    !s.cells.is_empty(),
                    s.not_measured.is_some(),
                    s.repeat_of.is_some(),
                ];
                assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{}", s.label);
                if let Some(of) = &s.repeat_of {
                    assert!(labels.contains(&of.as_str()), "{name}: {of}");
                }
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
                let Some((r, _, _)) = t.published_ratio(&c.check) else {
                    continue; // the author did not measure it (KVM over iSCSI)
                };
                let ok = match &c.check {
                    Check::Ratio { .. } => true,
                    Check::Higher { .. } => r > 1.0,
                    Check::Within { pct, .. } => (r - 1.0).abs() * 100.0 <= *pct,
                };
                assert!(
                    ok,
                    "{name}: '{}' does not hold on its own figures ({r})",
                    c.text
                );
            }
        }
        // The write-ups' magnitudes, computed from the transcribed figures.
        let lvm = seed_table("lvm-vs-partition").unwrap();
        let r = |t: &SeedTable, i: usize| t.published_ratio(&t.conclusions[i].check).unwrap().0;
        assert_eq!(format!("{:.2} {:.2}", r(&lvm, 0), r(&lvm, 1)), "1.52 1.58");
        let lh = seed_table("longhorn-localpv-openebs").unwrap();
        assert_eq!(format!("{:.2}", r(&lh, 0)), "9.56");
        // The three published 100 Mbit runs are one system's: 71711 / mean(10441, 10463, 10512).
        let xen = seed_table("xen-kvm-nfs-iscsi-local").unwrap();
        let last = xen.conclusions.len() - 1;
        let (ratio, na, nb) = xen.published_ratio(&xen.conclusions[last].check).unwrap();
        assert_eq!((na, nb), (1, 3));
        assert!((ratio - 71711.0 / ((10441.0 + 10463.0 + 10512.0) / 3.0)).abs() < 1e-9);
    }

    #[test]
    fn every_published_row_is_carried_and_unmeasured_rows_say_so() {
        let lvm = seed_table("lvm-vs-partition").unwrap();
        let part = &lvm.systems[0].figures;
        assert_eq!(part["lat_seq_out_block_us"], Figure::Number(1_955_000.0));
        assert_eq!(part["seq_read_ps"], Figure::Text("+++++".into()));
        assert_eq!(part["random_delete_ps"], Figure::Number(20320.0));
        assert_eq!(
            lvm.systems[1].figures["lat_random_delete_us"],
            Figure::Number(189.0)
        );
        assert_eq!(lvm.metrics.len(), 38);
        let xen = seed_table("xen-kvm-nfs-iscsi-local").unwrap();
        let row = |l: &str| xen.systems.iter().find(|s| s.label == l).unwrap();
        assert_eq!(
            row("kvm-guest-nfs-qcow-100mb-2nd").figures["seq_out_block_kps"],
            Figure::Number(2039.0)
        );
        assert_eq!(
            row("kvm-guest-nfs-qcow-100mb-3rd").figures["random_seeks_ps"],
            Figure::Number(706.3)
        );
        assert_eq!(
            row("xenserver-nfsmount").cells[0].dims["hypervisor"],
            "host"
        );
        assert_eq!(
            row("localdisk-on-nfs-server-cloudtest3").cells[0].dims["hypervisor"],
            "host"
        );
        assert_eq!(
            row("kvmserver-nfs-1G").figures["file_size_mib"],
            Figure::Number(20480.0)
        );
        let lh = seed_table("longhorn-localpv-openebs").unwrap();
        assert!(
            matches!(&lh.systems[0].figures["storage_server_peak_rss_mib"], Figure::Text(t) if t.starts_with("about 1.5 GB"))
        );

        let out = against_(&fixture_run(), "xen-kvm-nfs-iscsi-local", true).unwrap();
        for want in [
            "kvm-guest-nfs-qcow-100mb-3rd",
            "706.3",
            "xenserver-nfsmount (not measured)",
            "kvm-guest-nfs-qcow-100mb (not measured)",
            "a further published run of kvm-guest-nfs-qcow-100mb",
        ] {
            assert!(out.contains(want), "{want}:\n{out}");
        }
        let out = against_(&fixture_run(), "longhorn-localpv-openebs", true).unwrap();
        assert!(out.contains("about 1.5 GB"), "{out}");
        assert!(out.contains("Local PV (not measured)"), "{out}");
    }

    /// A host row whose cell was skipped says why in the Systems section.
    #[test]
    fn a_skipped_host_row_says_why() {
        let mut run = fixture_run();
        let cell = crate::cell::Cell {
            hypervisor: Hypervisor::Host,
            backend: Backend::Nfs,
            format: Format::Raw,
            layout: crate::cell::Layout::Ext4,
            link: "1gbit".parse::<Link>().unwrap(),
            workload: crate::cell::WorkloadId::Preset("bonnie".into()),
            ..crate::cell::Cell::default()
        };
        let why = "unsupported on this host: a host cell on nfs needs the host kernel's client";
        run.cells
            .push(CellResult::new(cell, 0, Outcome::Skipped(why.into())));
        let out = against_(&run, "xen-kvm-nfs-iscsi-local", true).unwrap();
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with("xenserver-nfsmount:"))
            .unwrap();
        assert!(
            line.contains("not measured in this run: host/nfs/raw/ext4") && line.contains(why),
            "{line}"
        );
    }

    /// lvm-vs-partition's systems are the two sides of one split disk; a run of the older
    /// preset (a disk per layout) is still read, its rows marked.
    #[test]
    fn lvm_vs_partition_reads_the_split_disk_and_older_runs_with_a_note() {
        use crate::cell::Layout;
        let mut run = fixture_run();
        let bonnie = fixture_bonnie(&run);
        let on = |layout| {
            let mut c = bonnie.clone();
            c.cell.layout = layout;
            c
        };
        for (part, lvm, older) in [
            (Layout::SplitPartExt4, Layout::SplitLvmExt4, false),
            (Layout::PartExt4, Layout::LvmExt4, true),
        ] {
            run.cells = vec![on(part), on(lvm)];
            let out = against_(&run, "lvm-vs-partition", true).unwrap();
            let v = verdicts(&out, "LVM gives 1.52x the partition's block write");
            assert_eq!(v.len(), 1, "{out}");
            let (a, b) = v[0].split_once(" vs ").unwrap();
            assert!(a.ends_with(&format!("qemu/local/raw/{lvm}")), "{out}");
            assert!(b.starts_with(&format!("qemu/local/raw/{part}")), "{out}");
            assert_eq!(out.contains("(the older preset)"), older, "{out}");
        }
    }

    const KVM_NO_BOOT: &str =
        "unsupported on this host: kvm: probe boot failed: the guest never said hello";

    /// A real bonnie++ cell as the xen-kvm preset's cells: Xen skipped (nfs) and unsupported
    /// (local), KVM unsupported (nfs, local) and failed (iscsi), qemu passed (nfs 1 Gbit, local).
    fn xen_kvm_run() -> RunRecord {
        use crate::results::Outcome;
        let mut run = fixture_run();
        let bonnie = fixture_bonnie(&run);
        let cell = |hv: Hypervisor, backend: Backend, link: &str, outcome: Outcome| {
            let mut c = bonnie.clone();
            c.cell.hypervisor = hv;
            c.cell.backend = backend;
            c.cell.format = Format::Qcow2;
            c.cell.layout = crate::cell::Layout::Ext4;
            c.cell.link = link.parse::<Link>().unwrap();
            c.outcome = outcome;
            c
        };
        let xen = "unsupported on this host: xen: cannot connect to libvirt at xen:///system";
        run.cells = vec![
            cell(
                Hypervisor::Xen,
                Backend::Nfs,
                "1gbit",
                Outcome::Skipped("xen: Xen (libxl) cannot open an nfs:// network disk".into()),
            ),
            cell(
                Hypervisor::Xen,
                Backend::Local,
                "loopback",
                Outcome::Unsupported(xen.into()),
            ),
            cell(
                Hypervisor::Kvm,
                Backend::Nfs,
                "1gbit",
                Outcome::Unsupported(KVM_NO_BOOT.into()),
            ),
            cell(
                Hypervisor::Kvm,
                Backend::Local,
                "loopback",
                Outcome::Unsupported(KVM_NO_BOOT.into()),
            ),
            cell(Hypervisor::Qemu, Backend::Nfs, "1gbit", Outcome::Passed),
            cell(
                Hypervisor::Qemu,
                Backend::Local,
                "loopback",
                Outcome::Passed,
            ),
            // A second repeat failed, with a console tail on the lines after the reason.
            cell(
                Hypervisor::Kvm,
                Backend::Iscsi,
                "1gbit",
                Outcome::Failed("boot: no hello\nconsole tail: [ 0.1] ...".into()),
            ),
        ];
        run
    }

    /// A system without a passed cell says why: its cells' outcomes in this run (unsupported,
    /// skipped, failed: each reason once, first line only), or that the run has no cell for it.
    #[test]
    fn a_system_without_a_passed_cell_says_why_from_the_run() {
        let out = against_(&xen_kvm_run(), "xen-kvm-nfs-iscsi-local", true).unwrap();
        let v = verdicts(
            &out,
            "KVM with NFS runs significantly better than Xen with NFS",
        );
        assert_eq!(
            v,
            vec!["    [not measured here] no passed cell for 'Xen-guest-via-nfs-tapaio'"],
            "{out}"
        );
        assert!(
            out.contains("        'Xen-guest-via-nfs-tapaio': xen/nfs/qcow2/ext4/1gbit: skipped: xen: Xen (libxl) cannot open an nfs:// network disk\n"),
            "{out}"
        );
        // The iSCSI system's only cell failed: the reason's first line, not its console tail.
        let v = verdicts(&out, "KVM over iSCSI performs better than KVM over NFS");
        assert_eq!(
            v,
            vec!["    [not measured here] no passed cell for 'kvm-guest-iscsi'"],
            "{out}"
        );
        assert!(
            out.contains("'kvm-guest-iscsi': kvm/iscsi/qcow2/ext4/1gbit: failed: boot: no hello; no cell in \
             this run for backend=iscsi,hypervisor=qemu,workload=bonnie\n"),
            "{out}"
        );
        assert!(!out.contains("console tail: [ 0.1]"), "{out}");
        // The 100 Mbit system has no cell in this run at all: said so, with what it maps to.
        let v = verdicts(&out, "KVM over NFS on 100 Mbit is slower than on 1 Gbit");
        assert_eq!(v.len(), 1, "{out}");
        assert!(
            out.contains("'kvm-guest-nfs-qcow-100mb': this run has no cell for it (kvm guest, qcow2 on nfs over a 100 Mbit link (--link 100mbit))"),
            "{out}"
        );
        // The systems list gives the same reasons; a reason shared by cells is said once.
        assert!(
            out.contains(
                "xen-guest-via-iscsi: xen guest, iscsi LUN over a 1 Gbit link — not measured in \
                 this run: this run has no cell for it"
            ),
            "{out}"
        );
        // The measured pair is judged, and only once.
        let v = verdicts(
            &out,
            "Local storage is fastest (block write): above kvm-guest-nfs-1gb-net",
        );
        assert_eq!(v.len(), 1, "{out}");
        assert!(
            v[0].contains(
                "[inconclusive (n = 1 < 3)] qemu/local/qcow2/ext4 vs qemu/nfs/qcow2/ext4/1gbit"
            ),
            "{out}"
        );
    }

    /// A repeat bonnie++ printed `+++++` for is named as too fast, not silently dropped.
    #[test]
    fn too_fast_repeats_are_named_in_the_judgement() {
        let run = fixture_run();
        let bonnie: Vec<&CellResult> = (run.cells.iter())
            .filter(|c| c.cell.workload.to_string() == "bonnie")
            .collect();
        let row = Row {
            cell: bonnie[0].cell.clone(),
            results: bonnie.clone(),
            note: None,
        };
        let note = too_fast_note(&row, "seq_create_ps").unwrap();
        assert!(
            note.contains("qemu/local/raw/ext4: 1 of 1 repeats too fast to time"),
            "{note}"
        );
        assert_eq!(too_fast_note(&row, "seq_out_block_kps"), None);
    }

    /// Both sides missing: both named, each with its reason on a line of its own.
    #[test]
    fn both_missing_sides_are_named_each_with_its_reason() {
        let mut run = xen_kvm_run();
        run.cells.retain(|c| c.cell.hypervisor != Hypervisor::Qemu);
        let out = against_(&run, "xen-kvm-nfs-iscsi-local", true).unwrap();
        let v = verdicts(
            &out,
            "Local storage is fastest (block write): above Xen-guest-via-nfs-tapaio",
        );
        assert_eq!(v, vec!["    [not measured here] no passed cell for 'localdisk-on-nfs-server-cloudtest3', nor for 'Xen-guest-via-nfs-tapaio'"], "{out}");
        assert!(
            out.contains(&format!(
                "'localdisk-on-nfs-server-cloudtest3': kvm/local/qcow2/ext4: {KVM_NO_BOOT}; no cell in this \
             run for backend=local,format=raw,hypervisor=host,workload=bonnie nor \
             backend=local,hypervisor=qemu,workload=bonnie\n"
            )),
            "{out}"
        );
    }

    #[test]
    fn below_three_repeats_every_judged_pair_is_inconclusive() {
        // 2 real repeats of each cell.
        let run = as_longhorn(real(include_str!(
            "../../tests/fixtures/run-local-qcow2-raw-x2.json"
        )));
        let out = against_(&run, "longhorn-localpv-openebs", false).unwrap();
        let v = verdicts(&out, "Local PV is about 10x Longhorn in read IOPS");
        assert_eq!(v.len(), 1, "{out}");
        assert!(
            v[0].contains(
                "[inconclusive (n = 2 < 3)] qemu/hostdir/raw/ext4 vs qemu/iscsi/raw/ext4"
            ),
            "{out}"
        );
        // Local PV and OpenEBS are one hostdir cell: their comparison is not judged.
        let same = verdicts(&out, "OpenEBS performs within a few percent of Local PV");
        assert_eq!(same.len(), 1, "{out}");
        assert!(
            same[0].contains("[not judged (one cell stands for both)] qemu/hostdir/raw/ext4"),
            "{out}"
        );
        assert!(
            !out.contains("[holds]") && !out.contains("[does not hold]"),
            "{out}"
        );
        assert!(out.contains("no CI below 3 repeats a side"), "{out}");
    }

    #[test]
    fn a_ci_that_excludes_the_published_ratio_does_not_hold_and_one_that_reaches_it_holds() {
        // 5 real repeats a side of two local images: about 1x, nowhere near the published 9.56x.
        let run = as_longhorn(real(include_str!(
            "../../tests/fixtures/export-aa-rep5-a.json"
        )));
        let out = against_(&run, "longhorn-localpv-openebs", false).unwrap();
        let v = verdicts(&out, "Local PV is about 10x Longhorn in read IOPS");
        assert_eq!(v.len(), 1, "{out}");
        assert!(v[0].contains("[does not hold]"), "{out}");
        let detail = out
            .lines()
            .skip_while(|l| !l.contains(v[0]))
            .nth(1)
            .unwrap();
        assert!(
            detail.contains("published 9.56x") && detail.contains("n = 5 + 5"),
            "{detail}"
        );
        assert!(
            detail.contains("95% CI") && detail.contains("Welch's t on ln values"),
            "{detail}"
        );
        assert!(
            out.contains("Made by preset longhorn-localpv-openebs: yes"),
            "{out}"
        );
        assert!(
            out.contains("NOTE: 2 of 2 measured cells ran under TCG"),
            "{out}"
        );

        // The same repeats with Longhorn's read IOPS at a tenth: the CI reaches 9.56x.
        let mut tenth = run.clone();
        for c in tenth
            .cells
            .iter_mut()
            .filter(|c| c.cell.backend == Backend::Iscsi)
        {
            for m in c.metrics.iter_mut().filter(|m| m.key == "read_iops") {
                if let crate::results::Value::Number(v) = &mut m.value {
                    *v /= 10.0;
                }
            }
        }
        let out = against_(&tenth, "longhorn-localpv-openebs", false).unwrap();
        let v = verdicts(&out, "Local PV is about 10x Longhorn in read IOPS");
        assert!(v[0].contains("[holds]"), "{out}");
        // Write IOPS were not touched: still about 1x.
        let v = verdicts(&out, "Local PV is about 10x Longhorn in write IOPS");
        assert!(v[0].contains("[does not hold]"), "{out}");

        // Not TCG: no banner.
        let mut kvm = run.clone();
        kvm.cells
            .iter_mut()
            .for_each(|c| c.cell.hypervisor = Hypervisor::Kvm);
        let out = against_(&kvm, "longhorn-localpv-openebs", true).unwrap();
        assert!(!out.contains("TCG"), "{out}");
    }

    #[test]
    fn a_run_not_made_by_the_preset_is_refused_unless_forced() {
        // The fixture's recorded command is a default matrix run (local raw, 10 s).
        let e = against_(&fixture_run(), "lvm-vs-partition", false).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, SeedError::NotFromPreset { .. }), "{msg}");
        assert!(
            msg.contains("was not made by preset lvm-vs-partition"),
            "{msg}"
        );
        assert!(
            msg.contains("layout: run [\"raw\"], preset [\"split-part-ext4\",\"split-lvm-ext4\"]"),
            "{msg}"
        );
        assert!(
            msg.contains("runtime: run 10, preset 60") && msg.contains("--force"),
            "{msg}"
        );
        let out = against_(&fixture_run(), "lvm-vs-partition", true).unwrap();
        assert!(
            out.contains("WARNING: not made by preset lvm-vs-partition (judged anyway: --force)"),
            "{out}"
        );
        assert!(out.contains("runtime: run 10, preset 60"), "{out}");
    }

    /// Three systems, one of them on a named link, and two conclusions that chain them.
    fn linked_seed() -> SeedTable {
        toml::from_str(
            r#"
            name = "t"
            source = "t"
            layout = "metrics_as_rows"
            metrics = [{ key = "read_iops", label = "Read IOPS", unit = "IOPS" }]
            [[system]]
            label = "local"
            maps_to = "local"
            cells = [{ backend = "local" }]
            figures = { read_iops = 2 }
            [[system]]
            label = "iscsi"
            maps_to = "iscsi, any link"
            cells = [{ backend = "iscsi" }]
            figures = { read_iops = 1 }
            [[system]]
            label = "nfs-1g"
            maps_to = "nfs over 1 Gbit"
            cells = [{ backend = "nfs", link = "1gbit" }]
            figures = { read_iops = 1 }
            [[conclusion]]
            text = "local above iscsi"
            check = { kind = "higher", metric = "read_iops", a = "local", b = "iscsi" }
            [[conclusion]]
            text = "iscsi above nfs"
            check = { kind = "higher", metric = "read_iops", a = "iscsi", b = "nfs-1g" }
            "#,
        )
        .unwrap()
    }

    /// The two real five-repeat runs as one run with local, iSCSI over two links and NFS cells.
    fn linked_run() -> RunRecord {
        // Real repeats: run a's raw cells stay local; run b's raw cells become iscsi over 1gbit,
        // its qcow2 cells iscsi over 100mbit, and a's qcow2 cells nfs over 1gbit (all raw).
        let a = real(include_str!("../../tests/fixtures/export-aa-rep5-a.json"));
        let b = real(include_str!("../../tests/fixtures/export-aa-rep5-b.json"));
        let mut run = a.clone();
        run.cells.clear();
        for c in a.cells.iter().chain(&b.cells) {
            let mut c = c.clone();
            let from_a = a.cells.iter().any(|x| x == &c);
            let (backend, link) = match (from_a, c.cell.format) {
                (true, Format::Raw) => (Backend::Local, "loopback"),
                (true, Format::Qcow2) => (Backend::Nfs, "1gbit"),
                (false, Format::Raw) => (Backend::Iscsi, "1gbit"),
                (false, Format::Qcow2) => (Backend::Iscsi, "100mbit"),
            };
            c.cell.backend = backend;
            c.cell.link = link.parse::<Link>().unwrap();
            c.cell.format = Format::Raw;
            run.cells.push(c);
        }
        run
    }

    #[test]
    fn two_links_give_two_conclusions_never_one_pooled() {
        let seed = linked_seed();
        let run = linked_run();
        let measured: BTreeMap<&str, Measured<'_>> = seed
            .systems
            .iter()
            .map(|s| (s.label.as_str(), measure(s, &run)))
            .collect();
        // Local has no link: it pairs with each iscsi link separately.
        let j = judge_conclusion(&seed, &seed.conclusions[0], &measured);
        let mut pairs: Vec<&str> = j.iter().map(|j| j.pair.as_str()).collect();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                "qemu/local/raw vs qemu/iscsi/raw/100mbit",
                "qemu/local/raw vs qemu/iscsi/raw/1gbit"
            ]
        );
        assert!(
            j.iter().all(|j| j.detail.contains("n = 5 + 5")),
            "pooled: {:?}",
            j.iter().map(|j| &j.detail).collect::<Vec<_>>()
        );
        // iscsi against nfs: only the 1 Gbit iscsi cell is like for like; 100 Mbit is named as
        // not compared, not pooled in.
        let j = judge_conclusion(&seed, &seed.conclusions[1], &measured);
        assert_eq!(j.len(), 2);
        assert_eq!(j[0].pair, "qemu/iscsi/raw/1gbit vs qemu/nfs/raw/1gbit");
        assert!(j[0].detail.contains("n = 5 + 5"), "{}", j[0].detail);
        assert_eq!(j[1].verdict, Verdict::NotMeasured);
        assert_eq!(j[1].detail, "qemu/iscsi/raw/100mbit");
    }

    /// A CI from its ends (centred on their geometric mean).
    fn ci(lo: f64, hi: f64) -> RatioCi {
        RatioCi {
            ratio: (lo * hi).sqrt(),
            lo,
            hi,
            df: 4.0,
        }
    }

    /// The LVM write-up's rewrite (published 27928 / 18008 = 1.5508x) against a CI ending at
    /// 1.547: "does not hold", which at 2 decimals read "CI 0.62-1.55 vs published 1.55x".
    #[test]
    fn a_ci_edge_next_to_the_published_ratio_gets_the_digits_that_tell_them_apart() {
        let check = Check::Ratio {
            metric: "seq_out_rewrite_kps".into(),
            a: "lvm".into(),
            b: "part".into(),
            about_pct: 0.0,
        };
        let p = 27928.0 / 18008.0;
        let marks = marks(&check, Some(p));
        assert_eq!(decimals(&ci(0.62, 1.547), &marks), 3);
        assert_eq!(decimals(&ci(0.62, 1.40), &marks), 2);
        assert_eq!(decimals(&ci(0.62, 1.5506), &marks), 4);
        let (v, detail) = judge(&check, Some(p), &[0.9, 1.0, 1.1], &[0.95, 1.0, 1.05]);
        assert!(
            detail.contains("published 1.55x") && detail.contains("finding 1.55x"),
            "{v:?}: {detail}"
        );
    }

    #[test]
    fn verdict_rules_at_their_edges() {
        let ratio = |about_pct| Check::Ratio {
            metric: "m".into(),
            a: "a".into(),
            b: "b".into(),
            about_pct,
        };
        let v = |c: &Check, p: Option<f64>, lo, hi| decide(c, p, &ci(lo, hi), 2).0;
        assert_eq!(v(&ratio(0.0), Some(1.52), 1.3, 1.6), Verdict::Holds);
        assert_eq!(v(&ratio(0.0), Some(1.52), 1.1, 1.4), Verdict::DoesNotHold);
        assert!(decide(&ratio(0.0), Some(1.52), &ci(1.1, 1.4), 2)
            .1
            .contains("same direction, smaller"));
        assert!(matches!(
            v(&ratio(0.0), Some(1.52), 0.9, 1.7),
            Verdict::Inconclusive(_)
        ));
        // "About 10x" within 25%: 8.0 reaches 9.56 / 1.25 = 7.65.
        assert_eq!(v(&ratio(25.0), Some(9.56), 7.0, 8.0), Verdict::Holds);
        assert_eq!(v(&ratio(0.0), Some(9.56), 7.0, 8.0), Verdict::DoesNotHold);
        // A published ratio below 1 (latency better on LVM).
        assert_eq!(v(&ratio(0.0), Some(0.5), 0.4, 0.6), Verdict::Holds);
        assert_eq!(v(&ratio(0.0), Some(0.5), 1.1, 1.3), Verdict::DoesNotHold);
        let higher = Check::Higher {
            metric: "m".into(),
            a: "a".into(),
            b: "b".into(),
        };
        assert_eq!(v(&higher, None, 1.01, 2.0), Verdict::Holds);
        assert_eq!(v(&higher, None, 0.5, 0.99), Verdict::DoesNotHold);
        assert!(matches!(
            v(&higher, None, 0.9, 1.1),
            Verdict::Inconclusive(_)
        ));
        let within = Check::Within {
            metric: "m".into(),
            a: "a".into(),
            b: "b".into(),
            pct: 5.0,
        };
        assert_eq!(v(&within, Some(1.005), 0.97, 1.04), Verdict::Holds);
        assert_eq!(v(&within, Some(1.005), 1.06, 1.2), Verdict::DoesNotHold);
        assert!(matches!(
            v(&within, Some(1.005), 0.9, 1.0),
            Verdict::Inconclusive(_)
        ));
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
