//! `vmbench matrix --dry-run`: the cells, the skipped combinations with their reasons, the
//! estimated duration, and each cell's domain XML as it would be defined, without starting or
//! creating anything.

use super::config::MatrixConfig;
use super::expand;
use crate::cell::Cell;
use crate::hypervisor::{domain_xml, DomainSpec, GuestFiles, Sizing, NAME_PREFIX};
use crate::storage;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// "7 s", or "7-380 s" when the cells' estimates differ.
fn secs_range(est: &[u64]) -> String {
    let (lo, hi) = (
        est.iter().min().copied().unwrap_or(0),
        est.iter().max().copied().unwrap_or(0),
    );
    if lo == hi {
        format!("{lo} s")
    } else {
        format!("{lo}-{hi} s")
    }
}

/// The whole dry-run report.
pub fn render(cfg: &MatrixConfig) -> String {
    let plan = expand(cfg);
    let est: Vec<u64> = plan
        .cells
        .iter()
        .map(|c| cfg.estimated_cell_secs(c))
        .collect();
    let total: u64 = plan.order.iter().map(|(i, _)| est[*i]).sum();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} cell(s) x {} repeat(s) = {} run(s), about {} min in all ({} a run)",
        plan.cells.len(),
        repeat_label(cfg),
        plan.order.len(),
        total.div_ceil(60),
        secs_range(&est)
    );
    if cfg.boot_storm > 0 {
        let _ = writeln!(
            s,
            "boot storm after each cell's job: {} instances, on backends that make disks from a base",
            cfg.boot_storm
        );
    }
    for (cell, reason) in &plan.skipped {
        let _ = writeln!(s, "skipped  {}: {reason}", cell.label());
    }
    for (i, cell) in plan.cells.iter().enumerate() {
        let _ = writeln!(
            s,
            "\n== cell {}: {} ({}), about {} s a run",
            i + 1,
            cell.label(),
            cell.id(),
            est[i]
        );
        if !cell.job.is_empty() {
            let set: Vec<String> = cell
                .job
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
    spec.disk.iotune = cfg.iotune(cell);
    spec.emulator = cfg.emulator_path(&cell.emulator).map(Path::to_path_buf);
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

    /// The seconds-per-run figure of the first line.
    fn each(out: &str) -> u64 {
        let s = out.split("about ").nth(1).unwrap();
        s.split(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_boot_storm_is_named_and_adds_to_the_estimate() {
        let plain = render(&MatrixConfig::default());
        let cfg = MatrixConfig {
            boot_storm: 4,
            ..MatrixConfig::default()
        };
        let out = render(&cfg);
        assert!(
            out.contains("boot storm after each cell's job: 4 instances"),
            "{out}"
        );
        assert!(!plain.contains("boot storm"), "{plain}");
        assert!(each(&out) > each(&plain), "{plain}\n{out}");
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

/// Issue 25's proof by extension: the test-only `toy` backend (`storage/toy.rs`) and `toy`
/// engine (`workload/toy.rs`) go through the planner and the dry run with nothing here naming
/// them beyond this test's configuration.
#[cfg(test)]
mod toy_tests {
    use super::*;
    use crate::cell::{Backend, Layout};
    use crate::workload;
    use vmbench_proto::{Filesystem, Step, Volume};

    /// A user's config file selecting the toys next to a real backend and workload.
    const CONFIG: &str = r#"
backend = ["toy", "local"]
format = ["raw"]
workload = ["toy", "pg-randrw"]
"#;

    /// The config, checked as `vmbench matrix` checks it.
    fn config() -> MatrixConfig {
        let cfg: MatrixConfig = toml::from_str(CONFIG).unwrap();
        cfg.validate().unwrap();
        cfg
    }

    #[test]
    fn the_planner_takes_the_toy_backend_and_engine() {
        let cfg = config();
        let plan = expand(&cfg);
        assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
        let ids: Vec<String> = plan.cells.iter().map(Cell::id).collect();
        // The toy engine writes a file: its cells get ext4 where raw was asked.
        assert_eq!(
            ids,
            [
                "qemu-toy-raw-virtio-blk-none-native-ext4-toy",
                "qemu-toy-raw-virtio-blk-none-native-raw-pg-randrw",
                "qemu-local-raw-virtio-blk-none-native-ext4-toy",
                "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw",
            ]
        );
        let toy = &plan.cells[0];
        let dims: std::collections::BTreeMap<_, _> = toy.dimensions().into_iter().collect();
        assert_eq!(
            (
                dims["backend"].as_str(),
                dims["workload"].as_str(),
                dims["layout"].as_str(),
                dims["link"].as_str()
            ),
            ("toy", "toy", "ext4", "loopback")
        );
        assert!(crate::matrix::rule_matches(
            &crate::matrix::parse_rule("backend=toy,workload=toy").unwrap(),
            toy
        ));
    }

    #[test]
    fn the_dry_run_shows_the_toy_backends_disk() {
        let cfg = config();
        let plan = expand(&cfg);
        let out = render(&cfg);
        assert!(
            out.starts_with("4 cell(s) x 1 repeat(s) = 4 run(s)"),
            "{out}"
        );
        for (i, c) in plan.cells.iter().enumerate() {
            let head = format!("== cell {}: {} ({})", i + 1, c.label(), c.id());
            assert!(out.contains(&head), "{head}\n{out}");
        }
        // The toy backend's disk: a file in the run's scratch directory, no pool, no server.
        for c in plan.cells.iter().filter(|c| c.backend == Backend::Toy) {
            let file = format!("/RUN_DIR/work/toy/vmbench-TAG-{}.raw", c.id());
            assert!(
                out.contains(&format!("<source file=\"{file}\"/>")),
                "{file}\n{out}"
            );
        }
        assert_eq!(out.matches("/RUN_DIR/work/toy/").count(), 2, "{out}");
    }

    #[test]
    fn the_toy_engine_plans_its_steps_as_the_pipeline_asks() {
        let cfg = config();
        let toy = &expand(&cfg).cells[0];
        // The toy engine's steps, as the cell pipeline asks for them (the dry run prints the
        // domain, not the guest's steps): the layout's mkfs, then its own measured fio job.
        assert_eq!(toy.layout, Layout::Ext4);
        let mkfs = workload::layout_step(toy);
        assert_eq!(
            mkfs,
            Some(Step::Mkfs {
                fs: Filesystem::Ext4,
                volume: Volume::Whole
            })
        );
        let engine = workload::engine(&toy.workload).unwrap();
        assert_eq!(engine.name(), "toy");
        let params = cfg.engine_params(
            toy,
            workload::io_target(mkfs.is_some()),
            crate::matrix::config::parse_size(&cfg.size).unwrap(),
        );
        let steps = engine.plan(&params).unwrap();
        assert!(steps.prep.is_empty());
        let [Step::DropCaches, Step::Fio {
            job_text,
            output_name,
            ..
        }] = &steps.measure[..]
        else {
            panic!("{:?}", steps.measure)
        };
        assert_eq!(output_name, "toy.json");
        assert!(
            job_text.contains("[toy-write]\nrw=write")
                && job_text.contains("[toy-read]\nstonewall\nrw=read")
                && job_text.contains("filename={dir}/vmbench.fio"),
            "{job_text}"
        );
        assert_eq!(steps.job_files, [("toy.fio", job_text.clone())]);
        assert_eq!(steps.window, (0, 1));
        let names: Vec<&str> = steps.measure.iter().map(workload::step_name).collect();
        assert_eq!(names, ["drop caches", "fio"]);
    }
}
