//! `vmbench matrix --dry-run`: the cells, the skipped combinations with their reasons, the
//! estimated duration, and each cell's domain XML as it would be defined, without starting or
//! creating anything.

use super::config::MatrixConfig;
use super::expand;
use crate::cell::Cell;
use crate::hypervisor::{domain_xml, DomainSpec, GuestFiles, Sizing, NAME_PREFIX};
use crate::storage;
use std::fmt::Write;
use std::path::PathBuf;

/// The whole dry-run report.
pub fn render(cfg: &MatrixConfig) -> String {
    let plan = expand(cfg);
    let per_cell = 15 + if cfg.prefill { 10 } else { 0 } + cfg.ramp as u64 + cfg.runtime as u64;
    let mut s = String::new();
    let runs = plan.order.len() as u64;
    let _ = writeln!(
        s,
        "{} cell(s) x {} repeat(s) = {runs} run(s), about {} s each, {} min in all",
        plan.cells.len(),
        repeat_label(cfg),
        per_cell,
        (runs * per_cell).div_ceil(60)
    );
    for (cell, reason) in &plan.skipped {
        let _ = writeln!(s, "skipped  {}: {reason}", cell.label());
    }
    for (i, cell) in plan.cells.iter().enumerate() {
        let _ = writeln!(s, "\n== cell {}: {} ({})", i + 1, cell.label(), cell.id());
        if !cell.fio.is_empty() {
            let set: Vec<String> = cell
                .fio
                .pairs()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(s, "fio over the preset: {}", set.join(" "));
        }
        let rendered =
            spec(cfg, cell, i).and_then(|sp| domain_xml::render(&sp).map_err(|e| e.to_string()));
        match rendered {
            Ok(xml) => s.push_str(&xml),
            Err(e) => {
                let _ = writeln!(s, "(no domain XML: {e})");
            }
        }
        s.push('\n');
    }
    s
}

/// `auto` runs between 3 and `max_repeats` times; the estimate is for the most.
fn repeat_label(cfg: &MatrixConfig) -> String {
    match cfg.repeat {
        crate::matrix::repeat::Repeat::Auto => format!(
            "auto ({}-{}, until CV < {}%), at most {}",
            crate::matrix::repeat::MIN_AUTO_REPEATS,
            cfg.max_repeats,
            cfg.max_cv,
            cfg.max_repeats
        ),
        fixed => fixed.to_string(),
    }
}

fn spec(cfg: &MatrixConfig, cell: &Cell, i: usize) -> Result<DomainSpec, String> {
    let run = PathBuf::from("/RUN_DIR");
    let source = storage::plan_source(&cfg.storage, cell, &run.join("work"), &run.join("servers"));
    let files = GuestFiles {
        kernel: PathBuf::from("/IMAGE/vmlinuz"),
        initrd: PathBuf::from("/IMAGE/initrd.zst"),
        console_log: run.join(format!("cells/{i:03}/console.log")),
    };
    let size = Sizing {
        vcpus: cfg.vcpus,
        memory_mib: cfg.memory_mib,
    };
    let name = format!("{NAME_PREFIX}RUN-{i:03}");
    let mut spec = DomainSpec::for_cell(name, "RUN", cell, source, size, files);
    spec.disk.iotune = cfg.iotune();
    if cell.tuning.pin == crate::cell::Pin::On {
        // The CPUs this host would give the cell.
        let p = crate::hypervisor::pinning::host_plan(cfg.vcpus).map_err(|e| e.to_string())?;
        spec.pinning = Some(p);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_lists_cells_and_their_xml() {
        let out = render(&MatrixConfig::default());
        assert!(
            out.starts_with("6 cell(s) x 1 repeat(s) = 6 run(s)"),
            "{out}"
        );
        assert_eq!(
            out.matches("<domain type=\"qemu\"").count()
                + out.matches("<domain type='qemu'").count(),
            6,
            "{out}"
        );
        assert!(out.contains("protocol=\"nfs\"") || out.contains("protocol='nfs'"));
        assert!(out.contains("protocol=\"iscsi\"") || out.contains("protocol='iscsi'"));
    }

    #[test]
    fn auto_repeat_and_caps_show_in_the_dry_run() {
        let cfg = MatrixConfig {
            repeat: crate::matrix::repeat::Repeat::Auto,
            iops_limit: Some(150),
            ..MatrixConfig::default()
        };
        let out = render(&cfg);
        assert!(
            out.starts_with(
                "6 cell(s) x auto (3-8, until CV < 5%), at most 8 repeat(s) = 48 run(s)"
            ),
            "{out}"
        );
        assert_eq!(
            out.matches("<total_iops_sec>150</total_iops_sec>").count(),
            6,
            "{out}"
        );
    }
}

#[cfg(test)]
mod sweep_tests {
    use super::*;
    use crate::cell::{Backend, Format, IoThread};

    #[test]
    fn sweeps_show_in_the_dry_run() {
        let cfg = MatrixConfig {
            backend: vec![Backend::Local],
            format: vec![Format::Raw],
            bs: vec!["4k".parse().unwrap(), "64k".parse().unwrap()],
            iothread: vec![IoThread::On],
            queues: vec![2],
            ..MatrixConfig::default()
        };
        let out = render(&cfg);
        assert!(out.starts_with("2 cell(s)"), "{out}");
        assert!(out.contains("-pg-randrw-bs4k-iothread-q2)"), "{out}");
        assert!(out.contains("fio over the preset: bs=64k"), "{out}");
        assert_eq!(out.matches("<iothreads>1</iothreads>").count(), 2, "{out}");
        assert_eq!(
            out.matches("queues=\"2\" iothread=\"1\"").count(),
            2,
            "{out}"
        );
    }
}
