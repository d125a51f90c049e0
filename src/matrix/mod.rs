//! The matrix: expansion of the dimensions into cells, the rules that skip impossible
//! combinations (with the reason, listed before the run starts), include/exclude rules, and the
//! run order that interleaves repeats (A B C, C B A, ...) to spread drift over all cells.

pub mod cell_error;
pub mod cell_run;
pub mod config;
pub mod dry_run;
pub mod fidelity;
pub mod presets;
pub mod probe;
pub mod progress;
pub mod repeat;
pub mod runner;
pub mod storm;
pub mod test_hooks;

use crate::cell::{Backend, Bus, CacheMode, Cell, Hypervisor, IoMode, Layout, WorkloadId};
use config::{ConfigError, MatrixConfig};
use std::collections::BTreeMap;

/// The expanded matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Cells that will run, in first-repeat order.
    pub cells: Vec<Cell>,
    /// Cells that cannot exist, with the reason.
    pub skipped: Vec<(Cell, Skip)>,
    /// Run order: (index into `cells`, repeat).
    pub order: Vec<(usize, u32)>,
}

/// Expands the configuration.
pub fn expand(cfg: &MatrixConfig) -> Plan {
    let mut cells: Vec<Cell> = Vec::new();
    let mut skipped: Vec<(Cell, Skip)> = Vec::new();
    for cell in product(cfg) {
        if cells.contains(&cell) || skipped.iter().any(|(c, _)| c == &cell) {
            continue;
        }
        if !cfg.include.is_empty() && !cfg.include.iter().any(|r| rule_matches(r, &cell)) {
            continue;
        }
        if cfg.exclude.iter().any(|r| rule_matches(r, &cell)) {
            continue;
        }
        match skip_reason(&cell, cfg) {
            Some(reason) => skipped.push((cell, reason)),
            None => cells.push(cell),
        }
    }
    let order = schedule(cells.len(), cfg.repeat.upper_bound(cfg.max_repeats));
    Plan {
        cells,
        skipped,
        order,
    }
}

fn product(cfg: &MatrixConfig) -> Vec<Cell> {
    let mut out = Vec::new();
    for &hypervisor in &cfg.hypervisor {
        for xen_mode in hypervisor.desc().modes(&cfg.xen_mode) {
            for &backend in &cfg.backend {
                for &format in &cfg.format {
                    for &bus in &cfg.bus {
                        for &cache in &cfg.cache {
                            for &io in &cfg.io {
                                for &layout in &cfg.layout {
                                    for workload in &cfg.workload {
                                        out.push(Cell {
                                            hypervisor,
                                            xen_mode,
                                            backend,
                                            format,
                                            bus,
                                            cache,
                                            io,
                                            layout: layout_for(workload, layout),
                                            workload: workload.clone(),
                                            job: Default::default(),
                                            tuning: Default::default(),
                                            host: Default::default(),
                                            link: Default::default(),
                                            emulator: Default::default(),
                                            instance: Default::default(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let swept: Vec<Cell> = out.into_iter().flat_map(|c| sweep(c, cfg)).collect();
    let linked = with_links(with_instances(swept, &cfg.instance), &cfg.link);
    on_hosts(
        with_emulators(linked, &cfg.emulator_names()),
        &cfg.host_names(),
    )
}

/// Every cell once per instance disk layout.
fn with_instances(cells: Vec<Cell>, kinds: &[crate::cell::InstanceDisk]) -> Vec<Cell> {
    cells
        .into_iter()
        .flat_map(|c| {
            kinds.iter().map(move |&instance| Cell {
                instance,
                ..c.clone()
            })
        })
        .collect()
}

/// Every cell once per QEMU build, the builds innermost: the A and B cells of an in-run A/B
/// are neighbours in the run order, so drift between them is as small as the run allows.
fn with_emulators(cells: Vec<Cell>, emulators: &[crate::cell::EmulatorName]) -> Vec<Cell> {
    cells
        .into_iter()
        .flat_map(|c| {
            emulators.iter().map(move |e| Cell {
                emulator: e.clone(),
                ..c.clone()
            })
        })
        .collect()
}

/// One cell per combination of the sweep dimensions (fio overrides, QEMU disk tuning); an
/// unset sweep dimension contributes one value, the preset's or QEMU's own.
fn sweep(base: Cell, cfg: &MatrixConfig) -> Vec<Cell> {
    fn or_none<T: Clone>(v: &[T]) -> Vec<Option<T>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().cloned().map(Some).collect()
        }
    }
    let mut out = Vec::new();
    for bs in or_none(&cfg.bs) {
        for iodepth in or_none(&cfg.iodepth) {
            for numjobs in or_none(&cfg.numjobs) {
                for rwmix in or_none(&cfg.rwmix) {
                    for direct in or_none(&cfg.direct) {
                        let job = crate::cell::JobOverrides {
                            bs: bs.clone(),
                            iodepth,
                            numjobs,
                            rwmix,
                            direct,
                        };
                        for tuning in cfg.tunings() {
                            out.push(Cell {
                                job: job.clone(),
                                tuning,
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Multiplies the cells whose disk is reached over the network (nfs, iscsi) by the links; the
/// other backends have no link to shape and stay on the default one.
fn with_links(cells: Vec<Cell>, links: &[crate::cell::Link]) -> Vec<Cell> {
    let networked = |c: &Cell| crate::storage::descriptor(c.backend).networked();
    cells
        .into_iter()
        .flat_map(|c| {
            let links = if networked(&c) {
                links.to_vec()
            } else {
                vec![Default::default()]
            };
            links
                .into_iter()
                .map(move |link| Cell { link, ..c.clone() })
        })
        .collect()
}

/// Every cell once per host, host-major: each host's cells keep the matrix's order.
fn on_hosts(cells: Vec<Cell>, hosts: &[crate::cell::HostName]) -> Vec<Cell> {
    hosts
        .iter()
        .flat_map(|h| {
            cells.iter().map(move |c| Cell {
                host: h.clone(),
                ..c.clone()
            })
        })
        .collect()
}

/// bonnie++ measures a filesystem: a raw layout becomes ext4 (what the seeds measured); the
/// other layouts (ext4, xfs, part-ext4, lvm-ext4, lvm-xfs, split-part-ext4, split-lvm-ext4) are
/// filesystems already.
fn layout_for(w: &WorkloadId, asked: Layout) -> Layout {
    let needs_fs = crate::workload::engine(w).is_ok_and(|e| e.needs_filesystem());
    if !asked.is_filesystem() && needs_fs {
        Layout::Ext4
    } else {
        asked
    }
}

/// Why the plan leaves a cell out, typed until it is printed or stored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Skip {
    /// Its hypervisor runs on the default host only.
    #[error(transparent)]
    DefaultHostOnly(crate::hypervisor::descriptor::DefaultHostOnly),
    /// Its libvirt host is another machine and the backend needs something on this one.
    #[error("{}", .blocker.on_host(.host, .uri))]
    Remote {
        /// What keeps it here.
        blocker: crate::storage::RemoteBlocker,
        /// The named host.
        host: crate::cell::HostName,
        /// That host's libvirt URI.
        uri: String,
    },
    /// QEMU or the hypervisor refuses the combination.
    #[error(transparent)]
    Rule(crate::hypervisor::SkipReason),
    /// The backend cannot make the instance disk this way.
    #[error(
        "the {backend} backend makes instance disks {} only, not {asked}",
        .made.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ")
    )]
    Instance {
        /// The backend.
        backend: Backend,
        /// The kind asked for.
        asked: crate::cell::InstanceDisk,
        /// The kinds it makes.
        made: &'static [crate::cell::InstanceDisk],
    },
    /// A qcow2 overlay asked for with another format.
    #[error("an overlay is a qcow2 image backed by the base: it needs --format qcow2, not {0}")]
    OverlayIsQcow2(crate::cell::Format),
    /// A host cell (`--hypervisor host`) on a network disk: the host's own kernel client
    /// would reach it, and this host has none.
    #[error(transparent)]
    HostClient(crate::storage::host_access::ClientMissing),
    /// A host cell on a network disk where the host has the client: the plan
    /// (`storage::host_access::NetPlan`) is not run yet.
    #[error(
        "host: a host cell on a network disk would run the host's own client (mount, login, \
         map: storage::host_access::NetPlan); vmbench does not run that plan yet"
    )]
    HostClientNotRun,
    /// The backend does not make images of this format.
    #[error(
        "the {backend} backend makes {} images only, not {asked}",
        .made.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ")
    )]
    Format {
        /// The backend.
        backend: Backend,
        /// The format asked for.
        asked: crate::cell::Format,
        /// The formats it makes.
        made: &'static [crate::cell::Format],
    },
}

impl Skip {
    /// The kind stored with the cell.
    pub fn kind(&self) -> crate::results::SkipKind {
        use crate::results::SkipKind;
        match self {
            Skip::DefaultHostOnly(_) | Skip::Remote { .. } => SkipKind::RemoteHost,
            Skip::HostClient(_) => SkipKind::Backend,
            Skip::HostClientNotRun => SkipKind::Rule,
            Skip::Rule(_)
            | Skip::Format { .. }
            | Skip::Instance { .. }
            | Skip::OverlayIsQcow2(_) => SkipKind::Rule,
        }
    }
}

/// Why a cell cannot exist at all (on any host), or `None`.
pub fn skip_reason(cell: &Cell, cfg: &MatrixConfig) -> Option<Skip> {
    if let Some(r) = remote_reason(cell, cfg) {
        return Some(r);
    }
    if let Some(s) = backend_skip(cell) {
        return Some(s);
    }
    // Only the kind of source matters to the rules, not the run's directories.
    let root = std::path::Path::new("/");
    let source = crate::storage::plan_source(&cfg.storage, cell, root, root);
    if let Err(r) = crate::hypervisor::check(cell, &source) {
        return Some(Skip::Rule(r));
    }
    host_client_skip(cell, &source)
}

/// A host cell on a network disk needs the host kernel's client for it (NFS, iSCSI, krbd):
/// decided here, at plan time, like the other hypervisor skips.
fn host_client_skip(cell: &Cell, source: &crate::storage::DiskSource) -> Option<Skip> {
    use crate::storage::host_access;
    let crate::storage::DiskSource::Network { protocol, .. } = source else {
        return None;
    };
    if cell.hypervisor.desc().runs_guest {
        return None;
    }
    Some(match host_access::host_client(*protocol) {
        Err(missing) => Skip::HostClient(missing),
        Ok(()) => Skip::HostClientNotRun,
    })
}

/// What the cell's backend cannot make: its format, or its instance disk from the base.
fn backend_skip(cell: &Cell) -> Option<Skip> {
    let d = crate::storage::descriptor(cell.backend);
    if !d.formats().contains(&cell.format) {
        return Some(Skip::Format {
            backend: cell.backend,
            asked: cell.format,
            made: d.formats(),
        });
    }
    if !d.instances().contains(&cell.instance) {
        return Some(Skip::Instance {
            backend: cell.backend,
            asked: cell.instance,
            made: d.instances(),
        });
    }
    let overlay = cell.instance == crate::cell::InstanceDisk::Overlay;
    (overlay && cell.format != crate::cell::Format::Qcow2)
        .then_some(Skip::OverlayIsQcow2(cell.format))
}

/// What a cell on a remote libvirt host cannot use: the embedded NFS and iSCSI servers run on
/// this machine only, and Xen is reached with its own URI on the default host only.
fn remote_reason(cell: &Cell, cfg: &MatrixConfig) -> Option<Skip> {
    let uri = cfg.host_uri(&cell.host, cell.hypervisor);
    if let Err(e) = cell.hypervisor.desc().check_host(&cell.host) {
        return Some(Skip::DefaultHostOnly(e));
    }
    if crate::uri::is_local_uri(&uri) {
        return None;
    }
    let blocker = crate::storage::descriptor(cell.backend).remote_blocker(&cfg.storage)?;
    Some(Skip::Remote {
        blocker,
        host: cell.host.clone(),
        uri,
    })
}

/// Rule keys and their checks: every key must be a dimension and every value one of its values.
pub fn check_rule(rule: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (k, v) in rule {
        let ok: Result<(), crate::cell::UnknownValue> = match k.as_str() {
            "hypervisor" => v.parse::<Hypervisor>().map(drop),
            "xen_mode" => v.parse::<crate::cell::XenMode>().map(drop),
            "backend" => v.parse::<Backend>().map(drop),
            "format" => v.parse::<crate::cell::Format>().map(drop),
            "bus" => v.parse::<Bus>().map(drop),
            "cache" => v.parse::<CacheMode>().map(drop),
            "io" => v.parse::<IoMode>().map(drop),
            "layout" => v.parse::<Layout>().map(drop),
            "workload" => v
                .parse::<WorkloadId>()
                .and_then(|w| crate::workload::check(&w)),
            "iothread" => v.parse::<crate::cell::IoThread>().map(drop),
            "pin" => v.parse::<crate::cell::Pin>().map(drop),
            "host" => v.parse::<crate::cell::HostName>().map(drop),
            "emulator" => v.parse::<crate::cell::EmulatorName>().map(drop),
            "instance" => v.parse::<crate::cell::InstanceDisk>().map(drop),
            "bs" | "iodepth" | "numjobs" | "rwmix" | "direct" | "queues" => Ok(()),
            "link" => {
                v.parse::<crate::cell::Link>()
                    .map_err(|e| ConfigError::Invalid(e.to_string()))?;
                Ok(())
            }
            other => {
                return Err(ConfigError::Invalid(format!(
                    "unknown dimension '{other}' in an include/exclude rule (valid: {})",
                    Cell::DIMENSION_NAMES.join(", ")
                )))
            }
        };
        ok?;
    }
    if rule.is_empty() {
        return Err(ConfigError::Invalid(
            "an include/exclude rule is empty".into(),
        ));
    }
    Ok(())
}

pub fn rule_matches(rule: &BTreeMap<String, String>, c: &Cell) -> bool {
    rule.iter().all(|(k, v)| {
        let actual = match k.as_str() {
            // Compared as values: `1gbit+0.5ms` and `1gbit+500us` are the same link.
            "link" => return v.parse::<crate::cell::Link>().is_ok_and(|l| l == c.link),
            other => match c.dimensions().into_iter().find(|(k, _)| *k == other) {
                Some((_, v)) => v,
                None => return false,
            },
        };
        actual == v.trim()
    })
}

/// Parses a CLI rule `backend=nfs,format=raw`.
pub fn parse_rule(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut rule = BTreeMap::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!("rule part '{part}' is not DIMENSION=VALUE"))
        })?;
        rule.insert(k.trim().replace('-', "_"), v.trim().to_string());
    }
    check_rule(&rule)?;
    Ok(rule)
}

/// Even repeats run the cells forward, odd repeats backward, so slow drift of the host (thermal,
/// page cache, fragmentation) does not always favour the same cells.
pub fn schedule(ncells: usize, repeats: u32) -> Vec<(usize, u32)> {
    let mut order = Vec::with_capacity(ncells * repeats as usize);
    for r in 0..repeats {
        if r % 2 == 0 {
            order.extend((0..ncells).map(|i| (i, r)));
        } else {
            order.extend((0..ncells).rev().map(|i| (i, r)));
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Format;

    #[test]
    fn default_matrix_is_six_cells() {
        let p = expand(&MatrixConfig::default());
        assert_eq!(p.cells.len(), 6);
        assert!(p.skipped.is_empty());
        assert_eq!(p.order, (0..6).map(|i| (i, 0)).collect::<Vec<_>>());
    }

    /// One list of dimension names: the rules accept exactly the dimensions a cell reports,
    /// and every cell matches a rule made of its own values.
    #[test]
    fn rules_know_every_dimension_of_a_cell() {
        let cfg = MatrixConfig {
            iodepth: vec![4],
            link: vec!["1gbit+0.5ms".parse().unwrap()],
            ..Default::default()
        };
        let c = expand(&cfg).cells.remove(0);
        let names: Vec<_> = c.dimensions().into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, Cell::DIMENSION_NAMES);
        for (k, v) in c.dimensions().into_iter().filter(|(_, v)| !v.is_empty()) {
            let rule = BTreeMap::from([(k.to_string(), v.clone())]);
            check_rule(&rule).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
            assert!(rule_matches(&rule, &c), "{k}={v}");
        }
        let e = check_rule(&BTreeMap::from([("colour".into(), "red".into())])).unwrap_err();
        assert!(
            e.to_string().contains(&Cell::DIMENSION_NAMES.join(", ")),
            "{e}"
        );
    }

    #[test]
    fn repeats_interleave() {
        assert_eq!(
            schedule(3, 3),
            vec![
                (0, 0),
                (1, 0),
                (2, 0),
                (2, 1),
                (1, 1),
                (0, 1),
                (0, 2),
                (1, 2),
                (2, 2)
            ]
        );
    }

    #[test]
    fn impossible_combinations_are_skipped_with_reason() {
        let cfg = MatrixConfig {
            cache: vec![CacheMode::None, CacheMode::Writeback],
            io: vec![IoMode::Native, IoMode::Threads],
            backend: vec![Backend::Local],
            format: vec![Format::Raw],
            ..Default::default()
        };
        let p = expand(&cfg);
        assert_eq!(p.cells.len(), 3);
        assert_eq!(p.skipped.len(), 1);
        let why = &p.skipped[0].1;
        assert!(matches!(why, Skip::Rule(_)), "{why:?}");
        assert_eq!(why.kind(), crate::results::SkipKind::Rule);
        assert!(
            why.to_string().contains("io=native needs cache=none"),
            "{why}"
        );
    }

    /// A backend that makes raw images only (rbd): its qcow2 cells are skipped at plan time,
    /// with the formats it makes, not failed after a boot.
    #[test]
    fn formats_a_backend_does_not_make_are_skipped_with_the_valid_ones() {
        let cfg = MatrixConfig {
            backend: vec![Backend::Rbd, Backend::Local],
            format: vec![Format::Qcow2, Format::Raw],
            ..Default::default()
        };
        let p = expand(&cfg);
        assert_eq!(p.cells.len(), 3);
        assert_eq!(p.skipped.len(), 1);
        let (cell, why) = &p.skipped[0];
        assert_eq!((cell.backend, cell.format), (Backend::Rbd, Format::Qcow2));
        assert_eq!(why.kind(), crate::results::SkipKind::Rule);
        assert_eq!(
            why.to_string(),
            "the rbd backend makes raw images only, not qcow2"
        );
    }

    #[test]
    fn xen_cells_follow_the_datapath_rules() {
        let cfg = MatrixConfig {
            hypervisor: vec![Hypervisor::Qemu, Hypervisor::Xen],
            backend: vec![Backend::Local, Backend::Nfs],
            format: vec![Format::Raw],
            ..Default::default()
        };
        let p = expand(&cfg);
        // xen + NFS over libnfs is not something libxl can do without a mount.
        assert!(p
            .skipped
            .iter()
            .any(|(c, r)| c.hypervisor == Hypervisor::Xen
                && c.backend == Backend::Nfs
                && r.to_string().starts_with("xen:")));
        assert!(p
            .cells
            .iter()
            .any(|c| c.hypervisor == Hypervisor::Xen && c.backend == Backend::Local));
        assert_eq!(
            p.cells
                .iter()
                .filter(|c| c.hypervisor == Hypervisor::Qemu)
                .count(),
            2
        );
    }

    #[test]
    fn include_and_exclude_rules() {
        let mut cfg = MatrixConfig::default();
        cfg.exclude
            .push(parse_rule("backend=nfs,format=raw").unwrap());
        assert_eq!(expand(&cfg).cells.len(), 5);
        cfg.include.push(parse_rule("format=qcow2").unwrap());
        let p = expand(&cfg);
        assert_eq!(p.cells.len(), 3);
        assert!(p.cells.iter().all(|c| c.format == Format::Qcow2));
        assert!(parse_rule("backend=ceph")
            .unwrap_err()
            .to_string()
            .contains("valid: local"));
        assert!(parse_rule("colour=red")
            .unwrap_err()
            .to_string()
            .contains("unknown dimension"));
        assert!(parse_rule("backend").is_err());
    }

    #[test]
    fn bonnie_gets_a_filesystem() {
        let cfg = MatrixConfig {
            workload: vec!["bonnie".parse().unwrap()],
            backend: vec![Backend::Local],
            format: vec![Format::Raw],
            ..Default::default()
        };
        let p = expand(&cfg);
        assert_eq!(p.cells[0].layout, Layout::Ext4);
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;

    /// Every cell runs once per host; a remote host refuses the embedded servers (with the
    /// reason) but takes an external one.
    #[test]
    fn cells_per_host_and_embedded_servers_stay_local() {
        let mut cfg = MatrixConfig {
            backend: vec![Backend::Local, Backend::Nfs],
            format: vec![crate::cell::Format::Raw],
            ..MatrixConfig::default()
        };
        cfg.hosts
            .insert("local".parse().unwrap(), "qemu:///system".into());
        cfg.hosts
            .insert("h2".parse().unwrap(), "qemu+tcp://10.9.0.2/system".into());
        let plan = expand(&cfg);
        let ids: Vec<String> = plan.cells.iter().map(Cell::id).collect();
        assert_eq!(
            ids,
            [
                "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw-on-h2",
                "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw",
                "qemu-nfs-raw-virtio-blk-none-native-raw-pg-randrw",
            ]
        );
        let (skipped, why) = &plan.skipped[0];
        assert_eq!(skipped.host.as_str(), "h2");
        assert_eq!(why.kind(), crate::results::SkipKind::RemoteHost);
        let why = why.to_string();
        assert!(why.contains("embedded nfs server is local-only"), "{why}");
        assert!(why.contains("external server (--nfs)"), "one space: {why}");
        // A mount on this machine is no path on h2.
        cfg.storage.nfs_mount = Some("/mnt/nfs".into());
        let (skipped, why) = &expand(&cfg).skipped[0];
        assert_eq!(skipped.host.as_str(), "h2");
        assert!(
            why.to_string()
                .contains("--nfs-mount names a mount on this machine"),
            "{why}"
        );
        cfg.storage.nfs_mount = None;
        cfg.storage.nfs = Some("nfs://10.9.0.1/export".parse().unwrap());
        assert!(expand(&cfg).skipped.is_empty());
        // An external iSCSI LUN is fine on h2, but not with CHAP: its libvirt secret is local.
        cfg.backend = vec![Backend::Iscsi];
        cfg.storage.iscsi = Some("iscsi://10.9.0.1/iqn.2026-12.dev.x:t/1".parse().unwrap());
        assert!(expand(&cfg).skipped.is_empty());
        cfg.storage.iscsi_chap_file = Some("/etc/vmbench/san.chap".into());
        let plan = expand(&cfg);
        let [(skipped, why)] = &plan.skipped[..] else {
            panic!("{:?}", plan.skipped)
        };
        assert_eq!(skipped.host.as_str(), "h2");
        assert!(
            matches!(why, Skip::Remote { blocker, .. } if *blocker == crate::storage::RemoteBlocker::ChapSecretHere),
            "{why:?}"
        );
        assert!(
            why.to_string().contains("cannot use --iscsi-chap-file"),
            "{why}"
        );
        assert_eq!(plan.cells.len(), 1, "the local host's cell runs");
    }
}
