//! Presets: one matrix per write-up in `seeds/`, mapping the write-up's systems to cells, and
//! one per decision vmbench is run for (`cloud-image-backends`: Nova's instance-disk layouts,
//! then `recommend`).
//!
//! A preset is an overlay on [`MatrixConfig::default`]; command-line flags still override it key
//! by key. What the write-up measured but vmbench cannot (yet) is listed in [`SeedPreset::not_here`]
//! and printed before the run, so nobody mistakes a partial reproduction for a full one.

use super::config::MatrixConfig;
use crate::cell::{Backend, Format, Hypervisor, Layout, WorkloadId};

/// One write-up's matrix.
#[derive(Debug, Clone, Copy)]
pub struct SeedPreset {
    /// CLI name; also the name of its seed table (`vmbench report RUN --against-seed NAME`).
    pub name: &'static str,
    /// One line for `vmbench presets`.
    pub about: &'static str,
    /// Systems of the write-up that this preset does not measure, with the reason.
    pub not_here: &'static [&'static str],
    /// Sets the preset's dimensions on a configuration.
    apply: fn(&mut MatrixConfig),
    /// What to run on the finished run (`RUN` stands for its id), printed after it.
    pub then: &'static str,
    /// Whether it reproduces a write-up (a seed table of the same name).
    pub seed: bool,
}

impl SeedPreset {
    /// The preset's matrix: the defaults with the preset's dimensions.
    pub fn config(&self) -> MatrixConfig {
        let mut c = MatrixConfig::default();
        (self.apply)(&mut c);
        c
    }
}

/// An include/exclude rule from `dimension=value` pairs.
fn rule(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn longhorn(c: &mut MatrixConfig) {
    // The write-up's pod ran fio buffered (no --direct) on /data/testfile, a file in the
    // volume's filesystem, with 2 CPUs and 512 MiB (the defaults' guest). Longhorn = ext4 on a
    // LUN of a user-space iSCSI target (tgt); Local PV (/mnt/disks/localdisk1) and OpenEBS
    // hostPath (/var/openebs/local) are both directories on the node's disk = one host
    // directory shared with virtio-fs (hostdir), whose guest mount the cell labels ext4.
    c.hypervisor = vec![Hypervisor::Qemu];
    c.backend = vec![Backend::Iscsi, Backend::Hostdir];
    c.format = vec![Format::Raw];
    c.layout = vec![Layout::Ext4];
    c.workload = vec![WorkloadId::Preset("pg-randrw".into())];
    c.direct = vec![0];
    c.runtime = 60;
    c.size = "200M".into();
    c.repeat = super::repeat::Repeat::Fixed(3);
}

fn xen_kvm(c: &mut MatrixConfig) {
    // qemu is in the list so that, where KVM cannot boot the guest, the kvm systems are still
    // measured on TCG; the seed report labels every such row.
    // host: the write-up's host rows (bonnie++ on the hosts themselves); its qcow2 cells are
    // skipped (the host runs on the storage, not in an image).
    c.hypervisor = vec![
        Hypervisor::Xen,
        Hypervisor::Kvm,
        Hypervisor::Qemu,
        Hypervisor::Host,
    ];
    c.backend = vec![Backend::Nfs, Backend::Iscsi, Backend::Local];
    c.format = vec![Format::Qcow2, Format::Raw];
    c.layout = vec![Layout::Ext4];
    c.workload = vec![WorkloadId::Preset("bonnie".into())];
    // The write-up's networks: NFS over 1 Gbit and over 100 Mbit (tc-shaped veth to the
    // embedded servers' namespace; local cells have no link).
    c.link = ["1gbit", "100mbit"]
        .iter()
        .map(|l| l.parse().expect("a valid link spelling"))
        .collect();
    // The write-up ran its 100 Mbit NFS test three times; every cell gets three, which
    // --against-seed needs for an interval.
    c.repeat = super::repeat::Repeat::Fixed(3);
}

fn lvm_vs_partition(c: &mut MatrixConfig) {
    c.hypervisor = vec![Hypervisor::Qemu];
    c.backend = vec![Backend::Local];
    c.format = vec![Format::Raw];
    // The write-up's partition and LV were on one disk: both cells get the same split disk
    // (partition 1, and an LV on partition 2) and each measures its own side.
    c.layout = vec![Layout::SplitPartExt4, Layout::SplitLvmExt4];
    c.workload = vec![WorkloadId::Preset("bonnie".into())];
    // The write-up: `bonnie++ -s 8G` with 2 GB of RAM (4x), on a 10 GB partition and a 10 GB
    // LV (5x RAM): at the default 512 MiB guest, -s 2 GiB on a 2.5 GiB side (a split layout's
    // disk holds two sides of disk_mib: 5 GiB).
    c.bonnie_size_ratio = 4;
    c.disk_mib = c.memory_mib * 5;
    c.repeat = super::repeat::Repeat::Fixed(3);
}

/// OpenStack Nova's `images_type` layouts on this host, each from the run's one base image:
/// `qcow2` (an overlay on the shared base, local and on NFS), `raw`/`flat` (a full copy), `lvm`
/// (a copy into a logical volume, where device-mapper exists) and `rbd` (a clone of a protected
/// snapshot). Cells that cannot exist here are listed as skipped with the reason, not dropped.
fn cloud_image_backends(c: &mut MatrixConfig) {
    use crate::cell::InstanceDisk;
    c.hypervisor = vec![Hypervisor::Qemu];
    c.backend = vec![Backend::Local, Backend::Nfs, Backend::Rbd, Backend::Lvm];
    c.format = vec![Format::Qcow2, Format::Raw];
    c.instance = vec![
        InstanceDisk::Overlay,
        InstanceDisk::Copy,
        InstanceDisk::Clone,
    ];
    c.include = vec![
        rule(&[
            ("backend", "local"),
            ("format", "qcow2"),
            ("instance", "overlay"),
        ]),
        rule(&[
            ("backend", "nfs"),
            ("format", "qcow2"),
            ("instance", "overlay"),
        ]),
        rule(&[
            ("backend", "local"),
            ("format", "raw"),
            ("instance", "copy"),
        ]),
        rule(&[("backend", "lvm"), ("format", "raw"), ("instance", "copy")]),
        rule(&[("backend", "rbd"), ("format", "raw"), ("instance", "clone")]),
    ];
    // The first write to an instance's own blocks (copy-on-write allocation on an overlay or a
    // clone) and reads that fall through to the base: what separates the layouts.
    c.workload = ["first-write-4k", "base-read-4k"]
        .iter()
        .map(|w| WorkloadId::Preset((*w).into()))
        .collect();
    c.repeat = super::repeat::Repeat::Fixed(3);
    c.boot_storm = super::storm::host_default_k(c.memory_mib);
}

/// Every preset.
pub const SEED_PRESETS: &[SeedPreset] = &[
    SeedPreset {
        name: "longhorn-localpv-openebs",
        about: "fio pg-randrw (8k randrw 70/30, qd16) buffered on a file, 3 repeats: \
                Longhorn=ext4 on an iscsi LUN (tgt), Local PV and OpenEBS hostPath=a host \
                directory (hostdir, virtio-fs)",
        not_here: &[
            "Local PV and OpenEBS hostPath are a bind mount of a node directory into a pod; \
             here the host directory reaches the guest through virtio-fs, and one hostdir \
             cell stands for both (the write-up's comparison of the two is not judged)",
            "Longhorn's replicas, its manager and UI: here one user-space iSCSI target (tgt) \
             serves the LUN, with no replica",
        ],
        apply: longhorn,
        then: "vmbench report RUN --against-seed longhorn-localpv-openebs",
        seed: true,
    },
    SeedPreset {
        name: "xen-kvm-nfs-iscsi-local",
        about: "bonnie++ on ext4: {xen, kvm (qemu/TCG where KVM cannot boot)} x {nfs, iscsi over \
                1gbit and 100mbit links, local} x {qcow2, raw}",
        not_here: &[
            "the write-up's physical networks: here a tc-shaped veth (tbf) to the embedded \
             servers' namespace stands in for the 1 Gbit and 100 Mbit links",
            "xenserver-nfsmount and kvmserver-nfs-1G (bonnie++ on the hosts' NFS mounts): their \
             host cells (--hypervisor host) need the host kernel's NFS client, which this kind \
             of machine lacks (skipped with the reason); here the two would be one cell \
             (vmbench's host is one host). localdisk-on-nfs-server is a host cell: ext4 over a \
             loop device on a raw local file",
        ],
        apply: xen_kvm,
        then: "vmbench report RUN --against-seed xen-kvm-nfs-iscsi-local",
        seed: true,
    },
    SeedPreset {
        name: "lvm-vs-partition",
        about: "bonnie++: ext4 on a primary partition vs ext4 on an LVM logical volume, both on \
                one disk split in two partitions in the guest (split-part-ext4: partition 1; \
                split-lvm-ext4: an LV on partition 2)",
        not_here: &[
            "host LVM (backend lvm) runs only with --lvm-vg VG on a host with device-mapper",
            "where on the disk the write-up's partition (/dev/sda3) and its VG (not said) \
             sat: here partition 1 is the disk's first half and the LV's PV its second",
        ],
        apply: lvm_vs_partition,
        then: "vmbench report RUN --against-seed lvm-vs-partition",
        seed: true,
    },
    SeedPreset {
        name: "cloud-image-backends",
        about: "Nova's instance disks from one base: qcow2 overlay (local, nfs), raw copy, lvm \
                copy, rbd clone; first write and base reads, 3 repeats, a boot storm; then \
                recommend",
        not_here: &[
            "Nova's lvm (the base copied into a logical volume): only with --lvm-vg VG on a \
             host with device-mapper; without --lvm-vg its cells are left out",
            "the guest boots from its kernel and initramfs, not from the instance disk: the boot \
             storm's instances read their boot set (16 MiB) from the disk after their hello",
        ],
        apply: cloud_image_backends,
        then: "vmbench recommend RUN --for cloud-image",
        seed: false,
    },
];

/// The preset with this name, or an error naming the valid ones.
pub fn seed_preset(name: &str) -> Result<&'static SeedPreset, String> {
    SEED_PRESETS
        .iter()
        .find(|p| p.name == name.trim())
        .ok_or_else(|| {
            let valid: Vec<&str> = SEED_PRESETS.iter().map(|p| p.name).collect();
            format!(
                "unknown preset '{}' (valid: {})",
                name.trim(),
                valid.join(", ")
            )
        })
}

/// The cloud-image preset's cells here: each layout on the backend that has it, and the
/// others listed with their reason.
#[cfg(test)]
mod cloud_tests {
    use super::*;
    use crate::cell::InstanceDisk;
    use crate::matrix::expand;

    #[test]
    fn cloud_preset_runs_each_layout_where_it_exists_and_lists_the_rest() {
        let p = expand(&seed_preset("cloud-image-backends").unwrap().config());
        let has = |b: Backend, f: Format, i: InstanceDisk| {
            p.cells
                .iter()
                .any(|c| c.backend == b && c.format == f && c.instance == i)
        };
        assert!(has(Backend::Local, Format::Qcow2, InstanceDisk::Overlay));
        assert!(has(Backend::Local, Format::Raw, InstanceDisk::Copy));
        assert!(has(Backend::Rbd, Format::Raw, InstanceDisk::Clone));
        // Every cell is one of the five layouts, both workloads each.
        assert!(p.cells.iter().all(|c| matches!(
            (c.backend, c.format, c.instance),
            (
                Backend::Local | Backend::Nfs,
                Format::Qcow2,
                InstanceDisk::Overlay
            ) | (
                Backend::Local | Backend::Lvm,
                Format::Raw,
                InstanceDisk::Copy
            ) | (Backend::Rbd, Format::Raw, InstanceDisk::Clone)
        )));
        assert_eq!(p.cells.len() % 2, 0);
        let c = seed_preset("cloud-image-backends").unwrap().config();
        assert!(c.boot_storm >= 2 && c.repeat == crate::matrix::repeat::Repeat::Fixed(3));
    }
}

/// `vmbench presets`: one line each.
pub fn listing() -> String {
    SEED_PRESETS
        .iter()
        .map(|p| format!("{:<26} {}\n", p.name, p.about))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::expand;

    #[test]
    fn every_preset_names_a_seed_table_and_validates() {
        for p in SEED_PRESETS {
            assert_eq!(
                crate::report::seed::seed_table(p.name).is_ok(),
                p.seed,
                "{}",
                p.name
            );
            assert!(p.then.contains("RUN"), "{}", p.name);
            let mut c = p.config();
            // As `vmbench matrix --preset` does: backends that need a device the user names
            // are left out without one.
            let storage = c.storage.clone();
            (c.backend).retain(|b| !crate::storage::descriptor(*b).preset_needs_device(&storage));
            c.validate().unwrap();
            assert!(!expand(&c).cells.is_empty(), "{}", p.name);
        }
    }

    #[test]
    fn lvm_preset_runs_bonnie_on_both_sides_of_one_split_disk() {
        let p = expand(&seed_preset("lvm-vs-partition").unwrap().config());
        let layouts: Vec<Layout> = p.cells.iter().map(|c| c.layout).collect();
        assert_eq!(layouts, vec![Layout::SplitPartExt4, Layout::SplitLvmExt4]);
        assert!(p.cells.iter().all(|c| c.layout.volumes_on_disk() == 2));
    }

    #[test]
    fn xen_nfs_qcow2_is_listed_unsupported_with_reason() {
        let p = expand(&seed_preset("xen-kvm-nfs-iscsi-local").unwrap().config());
        assert!(
            p.skipped
                .iter()
                .any(|(c, why)| c.hypervisor == Hypervisor::Xen
                    && why.to_string().starts_with("xen:"))
        );
        assert!(p.cells.iter().any(|c| c.hypervisor == Hypervisor::Kvm));
        assert!(p.cells.iter().any(|c| c.hypervisor == Hypervisor::Qemu));
    }

    /// The host rows: the local one runs (raw only), the NFS ones are listed with the reason
    /// (this kind of machine has no kernel NFS client; one that has it is told the plan does not
    /// run yet).
    #[test]
    fn the_host_rows_run_on_local_and_are_listed_on_nfs() {
        let p = expand(&seed_preset("xen-kvm-nfs-iscsi-local").unwrap().config());
        let host = |c: &crate::cell::Cell| c.hypervisor == Hypervisor::Host;
        let ran: Vec<_> = p.cells.iter().filter(|c| host(c)).collect();
        assert!(!ran.is_empty());
        assert!(ran
            .iter()
            .all(|c| c.backend == Backend::Local && c.format == Format::Raw));
        let nfs = p
            .skipped
            .iter()
            .find(|(c, _)| host(c) && c.backend == Backend::Nfs && c.format == Format::Raw)
            .map(|(_, why)| why.to_string())
            .unwrap();
        assert!(
            nfs.starts_with("unsupported on this host: a host cell on nfs")
                || nfs.starts_with("host:"),
            "{nfs}"
        );
    }

    #[test]
    fn unknown_preset_names_the_choices() {
        let e = seed_preset("ceph").unwrap_err();
        assert!(
            e.contains("valid: longhorn-localpv-openebs, xen-kvm-nfs-iscsi-local"),
            "{e}"
        );
        assert_eq!(listing().lines().count(), SEED_PRESETS.len());
    }
}
