//! Provenance in two parts. The *instrument* is what measures: fio and bonnie++ in the guest
//! image, the image itself, the guest kernel and vmbench's job definitions. When it changed, two
//! figures are not the same measurement, so rows are not comparable (unless `--force`). The
//! *system under test* is what a hypervisor storage gate exists to judge: QEMU, libvirt, the host
//! kernel and CPU, the storage servers, the disk's cap. When it changed, the comparison goes on
//! and says first what changed (`what changed: qemu 7.2.22 -> 8.2.2`).

use crate::results::Provenance;
use serde::Serialize;
use std::fmt;

/// Which part of the provenance a field belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Instrument,
    SystemUnderTest,
}

/// One provenance field as a user reads it.
struct Field {
    name: &'static str,
    part: Part,
    get: fn(&Provenance) -> &str,
    /// Added after results were first stored: empty means "not recorded", never a change.
    recorded_later: bool,
}

const fn field(
    name: &'static str,
    part: Part,
    get: fn(&Provenance) -> &str,
    recorded_later: bool,
) -> Field {
    Field {
        name,
        part,
        get,
        recorded_later,
    }
}

/// The fields besides the engines' versions (instrument, compared first: see [`diffs`]).
const FIELDS: [Field; 10] = [
    field("guest image", Part::Instrument, |p| &p.image, false),
    field("guest kernel", Part::Instrument, |p| &p.guest_kernel, false),
    field("job definitions", Part::Instrument, |p| &p.jobs, true),
    field("qemu", Part::SystemUnderTest, |p| &p.qemu, false),
    field("libvirt", Part::SystemUnderTest, |p| &p.libvirt, false),
    field(
        "host kernel",
        Part::SystemUnderTest,
        |p| &p.host_kernel,
        false,
    ),
    field(
        "host CPU model",
        Part::SystemUnderTest,
        |p| &p.cpu_model,
        false,
    ),
    field("host", Part::SystemUnderTest, |p| &p.host, false),
    field(
        "storage server",
        Part::SystemUnderTest,
        |p| &p.storage_server,
        true,
    ),
    field("disk cap", Part::SystemUnderTest, |p| &p.io_limit, false),
];

/// The fields of `part` that differ between `a` and `b`, as (name, a's value, b's value): the
/// engines' versions (instrument; a version not recorded is empty, and differs) first, then
/// [`FIELDS`].
fn diffs<'a>(
    a: &'a Provenance,
    b: &'a Provenance,
    part: Option<Part>,
) -> impl Iterator<Item = (String, &'a str, &'a str)> {
    let version = |p: &'a Provenance, k: &str| p.tools.get(k).map_or("", String::as_str);
    let keys = if part.is_none_or(|p| p == Part::Instrument) {
        crate::workload::tool_keys([&a.tools, &b.tools])
    } else {
        vec![]
    };
    let tools = keys
        .into_iter()
        .map(move |k| {
            let name = format!("{} version", crate::workload::tool_name(k));
            (name, version(a, k), version(b, k))
        })
        .filter(|(_, x, y)| x != y);
    let fields = FIELDS
        .iter()
        .filter(move |f| part.is_none_or(|p| f.part == p))
        .map(move |f| (f, (f.get)(a), (f.get)(b)))
        .filter(|(f, x, y)| x != y && !(f.recorded_later && (x.is_empty() || y.is_empty())))
        .map(|(f, x, y)| (f.name.to_string(), x, y));
    tools.chain(fields)
}

/// Why two results were not measured with the same instrument, or `None` when they were.
pub fn instrument_mismatch(a: &Provenance, b: &Provenance) -> Option<String> {
    let d: Vec<String> = diffs(a, b, Some(Part::Instrument))
        .map(|(name, x, y)| format!("{name} differs ('{x}' vs '{y}')"))
        .collect();
    (!d.is_empty()).then(|| d.join("; "))
}

/// Why two provenances differ in any field (instrument or system under test), or `None`: earlier
/// runs count towards a cell's run-to-run noise only when nothing at all changed.
pub fn provenance_mismatch(a: &Provenance, b: &Provenance) -> Option<String> {
    let d: Vec<String> = diffs(a, b, None)
        .map(|(name, x, y)| format!("{name} differs ('{x}' vs '{y}')"))
        .collect();
    (!d.is_empty()).then(|| d.join("; "))
}

/// A change of the system under test between baseline and candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemChange {
    /// The field, as a user reads it (`qemu`, `host kernel`, `storage server`).
    pub what: String,
    /// Its value in the baseline (`(none)` when empty).
    pub baseline: String,
    /// Its value in the candidate.
    pub candidate: String,
    /// The compared cells it changed for.
    pub cells: usize,
}

impl fmt::Display for SystemChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.what, self.baseline, self.candidate)
    }
}

/// The system-under-test changes of one cell.
pub fn system_changes(a: &Provenance, b: &Provenance) -> Vec<SystemChange> {
    let shown = |v: &str| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.to_string()
        }
    };
    diffs(a, b, Some(Part::SystemUnderTest))
        .map(|(name, x, y)| SystemChange {
            what: name,
            baseline: shown(x),
            candidate: shown(y),
            cells: 1,
        })
        .collect()
}

/// Adds one cell's changes to a comparison's list: one entry per distinct change, with the
/// number of cells it was seen in.
pub fn merge_changes(into: &mut Vec<SystemChange>, cell: Vec<SystemChange>) {
    for c in cell {
        match into
            .iter_mut()
            .find(|e| e.what == c.what && e.baseline == c.baseline && e.candidate == c.candidate)
        {
            Some(e) => e.cells += 1,
            None => into.push(c),
        }
    }
}

/// `what changed: qemu 7.2.22 -> 8.2.2; host kernel 6.1 -> 6.12`, or `None` when nothing did.
pub fn what_changed_line(changes: &[SystemChange], compared_cells: usize) -> Option<String> {
    if changes.is_empty() {
        return None;
    }
    let parts: Vec<String> = changes
        .iter()
        .map(|c| {
            if c.cells < compared_cells {
                format!("{c} ({} of {compared_cells} cells)", c.cells)
            } else {
                c.to_string()
            }
        })
        .collect();
    Some(format!(
        "what changed: {} (system under test: compared, not refused)",
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prov() -> Provenance {
        Provenance {
            qemu: "7.2.22".into(),
            tools: [("fio".into(), "fio-3.33".into())].into(),
            storage_server: "nfs-ganesha 4.3".into(),
            ..Provenance::default()
        }
    }

    #[test]
    fn instrument_refuses_system_under_test_reports() {
        let a = prov();
        let b = Provenance {
            qemu: "8.2.2".into(),
            host_kernel: "6.12".into(),
            ..prov()
        };
        assert_eq!(instrument_mismatch(&a, &b), None);
        let ch = system_changes(&a, &b);
        let shown: Vec<String> = ch.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            ["qemu 7.2.22 -> 8.2.2", "host kernel (none) -> 6.12"]
        );
        let c = Provenance {
            tools: [("fio".into(), "fio-3.36".into())].into(),
            ..prov()
        };
        let why = instrument_mismatch(&a, &c).unwrap();
        assert!(
            why.contains("fio version differs ('fio-3.33' vs 'fio-3.36')"),
            "{why}"
        );
        assert!(system_changes(&a, &c).is_empty());
    }

    #[test]
    fn fields_recorded_later_are_no_change_when_absent() {
        // A result stored before the storage server or job hash were recorded.
        let old = Provenance {
            storage_server: String::new(),
            ..prov()
        };
        let new = Provenance {
            jobs: "0123abcd".into(),
            ..prov()
        };
        assert!(system_changes(&old, &new).is_empty());
        assert_eq!(instrument_mismatch(&old, &new), None);
        assert_eq!(provenance_mismatch(&old, &new), None);
        // The disk cap was always recorded: uncapped to capped is a change.
        let capped = Provenance {
            io_limit: "iops=500".into(),
            ..prov()
        };
        assert_eq!(
            system_changes(&prov(), &capped)[0].to_string(),
            "disk cap (none) -> iops=500"
        );
    }

    #[test]
    fn changes_merge_by_value_and_count_cells() {
        let a = prov();
        let b = Provenance {
            qemu: "8.2.2".into(),
            ..prov()
        };
        let mut all = vec![];
        merge_changes(&mut all, system_changes(&a, &b));
        merge_changes(&mut all, system_changes(&a, &b));
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].cells, 2);
        let line = what_changed_line(&all, 3).unwrap();
        assert!(
            line.starts_with("what changed: qemu 7.2.22 -> 8.2.2 (2 of 3 cells)"),
            "{line}"
        );
        assert_eq!(what_changed_line(&[], 3), None);
    }
}
