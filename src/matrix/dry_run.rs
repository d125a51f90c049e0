//! `vmbench matrix --dry-run`: the cells, the skipped combinations with their reasons, the
//! estimated duration, and each cell's domain XML as it would be defined, without starting or
//! creating anything.

use super::config::MatrixConfig;
use super::expand;
use crate::cell::{Backend, Cell, Format};
use crate::hypervisor::{domain_xml, DiskSpec, DomainSpec, NAME_PREFIX};
use crate::storage::{DiskSource, NetProtocol};
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
        cfg.repeat,
        per_cell,
        (runs * per_cell).div_ceil(60)
    );
    for (cell, reason) in &plan.skipped {
        let _ = writeln!(s, "skipped  {}: {reason}", cell.label());
    }
    for (i, cell) in plan.cells.iter().enumerate() {
        let _ = writeln!(s, "\n== cell {}: {} ({})", i + 1, cell.label(), cell.id());
        match domain_xml::render(&spec(cfg, cell, i)) {
            Ok(xml) => s.push_str(&xml),
            Err(e) => {
                let _ = writeln!(s, "(no domain XML: {e})");
            }
        }
        s.push('\n');
    }
    s
}

fn spec(cfg: &MatrixConfig, cell: &Cell, i: usize) -> DomainSpec {
    let run = PathBuf::from("/RUN_DIR");
    let ext = match cell.format {
        Format::Qcow2 => "qcow2",
        Format::Raw => "raw",
    };
    let source = match cell.backend {
        Backend::Local => DiskSource::File {
            path: cfg
                .storage
                .local_dir
                .clone()
                .unwrap_or(run.join("work/local"))
                .join(format!("{}.{ext}", cell.id())),
        },
        Backend::Nfs => match &cfg.storage.nfs_mount {
            Some(m) => DiskSource::File {
                path: m.join(format!("{}.{ext}", cell.id())),
            },
            None => DiskSource::Network {
                protocol: NetProtocol::Nfs,
                name: format!("/vmbench/{}.{ext}", cell.id()),
                host: "127.0.0.1".into(),
                port: None,
            },
        },
        Backend::Iscsi => DiskSource::Network {
            protocol: NetProtocol::Iscsi,
            name: format!("iqn.2026-12.dev.vmbench:run-{i:03}/1"),
            host: "127.0.0.1".into(),
            port: Some(3260),
        },
        Backend::Block => DiskSource::Block {
            dev: cfg.storage.block_device.clone().unwrap_or_default(),
        },
        Backend::Lvm => DiskSource::Block {
            dev: PathBuf::from(format!(
                "/dev/{}/vmbench-{i:03}",
                cfg.storage.lvm_vg.clone().unwrap_or_default()
            )),
        },
    };
    DomainSpec {
        name: format!("{NAME_PREFIX}RUN-{i:03}"),
        hypervisor: cell.hypervisor,
        xen_mode: cell.xen_mode,
        vcpus: cfg.vcpus,
        memory_mib: cfg.memory_mib,
        kernel: PathBuf::from("/IMAGE/vmlinuz"),
        initrd: PathBuf::from("/IMAGE/initrd.zst"),
        cmdline: domain_xml::kernel_cmdline(cell.hypervisor, cell.xen_mode),
        console_log: run.join(format!("cells/{i:03}/console.log")),
        channel_socket: run.join(format!("work/cell-{i:03}/chan/agent.sock")),
        disk: DiskSpec {
            source,
            format: cell.format,
            bus: cell.bus,
            cache: cell.cache,
            io: cell.io,
            serial: vmbench_proto::TEST_DISK_SERIAL.into(),
        },
        run_id: "RUN".into(),
        cell_id: cell.id(),
    }
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
}
