//! Guest efficiency: a guest cell's figures over the host row's (`--hypervisor host`) on the
//! same storage, in the same run. The host row runs the guest's own job on the same backend,
//! format, layout and link with the engine's page cache capped at the guest's RAM, so the ratio
//! is what the virtual disk path (and, under TCG, the emulated CPU) costs. The kernels differ
//! by design (the host's against the guest's): the ratio says so, and it is a ratio of means
//! with each side's n, not a test.

use super::summary::metric_numbers;
use crate::compare::stats::mean;
use crate::results::CellResult;
use crate::workload;
use std::collections::BTreeMap;

/// The dimensions a guest cell and its host row share: everything but the hypervisor and the
/// guest-only disk options (bus, cache, AIO, tuning, emulator), which a host row cannot have.
fn storage_key(r: &CellResult) -> String {
    let c = &r.cell;
    format!(
        "{:?}",
        (
            c.backend,
            c.format,
            c.layout,
            &c.workload,
            &c.job,
            &c.host,
            &c.link,
            &c.instance
        )
    )
}

/// The ratio lines, or `None` when the run has no guest cell with a host row beside it.
pub fn text(results: &[CellResult]) -> Option<String> {
    let passed = results
        .iter()
        .filter(|r| r.outcome == crate::results::Outcome::Passed);
    let mut host: BTreeMap<String, Vec<&CellResult>> = BTreeMap::new();
    let mut guests: BTreeMap<(String, String), Vec<&CellResult>> = BTreeMap::new();
    for r in passed {
        if r.cell.hypervisor.desc().runs_guest {
            (guests.entry((r.cell.label(), storage_key(r))).or_default()).push(r);
        } else {
            host.entry(storage_key(r)).or_default().push(r);
        }
    }
    let lines: Vec<String> = guests
        .iter()
        .filter_map(|((label, key), g)| Some(pair_line(label, g, host.get(key)?)))
        .collect();
    (!lines.is_empty()).then(|| {
        format!(
            "Guest efficiency (guest mean / host row mean on the same storage, this run; the host \
             row runs the same job on the host's kernel, its page cache capped at the guest's \
             RAM: a ratio of means, not a test):\n{}",
            lines.join("\n")
        )
    })
}

/// One guest cell against its host row, metric by metric (the engine's rate and bandwidth).
fn pair_line(label: &str, guest: &[&CellResult], host: &[&CellResult]) -> String {
    let engine = workload::descriptor(&guest[0].cell.workload);
    let keys = engine.figures.rate.1.iter().chain(engine.figures.bandwidth);
    let parts: Vec<String> = keys.map(|k| ratio(k, guest, host)).collect();
    format!(
        "  {label} vs {}: {}",
        host[0].cell.label(),
        parts.join("; ")
    )
}

/// `key`: the ratio of means with both means, their unit and n; or why there is none.
fn ratio(key: &str, guest: &[&CellResult], host: &[&CellResult]) -> String {
    let (g, h) = (metric_numbers(guest, key), metric_numbers(host, key));
    let (name, unit) = (guest.iter().chain(host))
        .find_map(|r| r.metric(key).map(|m| (m.label.clone(), m.unit.clone())))
        .unwrap_or_else(|| (key.to_string(), String::new()));
    let (Some(gm), Some(hm)) = (mean(&g), mean(&h)) else {
        let which = if g.is_empty() { "guest" } else { "host" };
        return format!("{name}: no figure on the {which} side (too fast to time, or n/a)");
    };
    if hm <= 0.0 {
        return format!("{name}: the host row measured 0");
    }
    format!(
        "{name} {:.1}% ({} / {} {unit}, n = {} / {})",
        100.0 * gm / hm,
        super::summary::fmt_number(gm, &unit),
        super::summary::fmt_number(hm, &unit),
        g.len(),
        h.len()
    )
}

#[cfg(test)]
mod tests {
    use crate::cell::Hypervisor;
    use crate::results::RunRecord;

    /// A real run's qemu local cell, and the same cell as a host row with its figures scaled:
    /// the ratio is the scale, with both means and n.
    #[test]
    fn a_guest_cell_is_divided_by_its_host_row_and_others_are_left_alone() {
        let v: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json"
        ))
        .unwrap();
        let run: RunRecord = serde_json::from_value(v.get("run").cloned().unwrap_or(v)).unwrap();
        let guest = (run.cells.iter())
            .find(|c| c.cell.workload.to_string() == "pg-randrw")
            .unwrap()
            .clone();
        assert_eq!(super::text(std::slice::from_ref(&guest)), None);
        let mut host = guest.clone();
        host.cell.hypervisor = Hypervisor::Host;
        for m in host.metrics.iter_mut() {
            if let crate::results::Value::Number(x) = &mut m.value {
                *x *= 4.0;
            }
        }
        let text = super::text(&[guest.clone(), host]).unwrap();
        assert!(text.starts_with("Guest efficiency"), "{text}");
        assert!(
            text.contains(&format!("{} vs host/", guest.cell.label())),
            "{text}"
        );
        assert!(text.contains("Read IOPS 25.0% ("), "{text}");
        assert!(text.contains("n = 1 / 1"), "{text}");
    }
}
