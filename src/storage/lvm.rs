//! LVM storage backend: a logical volume per cell in an existing volume group, thick or thin.
//!
//! We run lvm2's commands rather than libvirt's `logical` storage pool: the pool cannot create
//! thin LVs in a thin pool, and it activates and deactivates volumes on its own schedule, where
//! a benchmark wants exact control (create, activate, format, remove, nothing else). The
//! commands are a pure plan ([`plan_create`], [`plan_remove`]) so they can be checked without
//! device-mapper, which LVM needs to activate anything and which some hosts (this CI) lack.
//!
//! `--instance-disk copy` is Nova's `lvm` images_type: the run's base image copied in full into
//! the cell's new LV (`qemu-img convert -n`, as the local backend copies it into a file).

use super::base::Bases;
use super::cmd;
use super::options::StorageConfig;
use super::{DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::{Cell, Format, InstanceDisk};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Substrings lvm reserves for its internal volumes (lvm(8), "VALID NAMES").
const RESERVED_PARTS: &[&str] = &[
    "_cdata", "_cmeta", "_corig", "_iorig", "_mimage", "_mlog", "_pmspare", "_rimage", "_rmeta",
    "_tdata", "_tmeta", "_vdata", "_vorigin", "_wcorig",
];

/// Checks a VG or LV name against lvm's rules: 1-127 of `a-zA-Z0-9+_.-`, not starting with
/// '-', not `.` or `..`; LV names also must not start with `snapshot`/`pvmove` nor contain
/// reserved suffixes.
pub fn validate_name(what: &str, name: &str, is_lv: bool) -> Result<(), StorageError> {
    let bad = |why: String| {
        StorageError::Invalid(format!(
            "invalid LVM {what} name '{name}': {why} (allowed: 1-127 of a-z A-Z 0-9 + _ . -, \
             not starting with '-')"
        ))
    };
    if name.is_empty() || name.len() > 127 {
        return Err(bad("length must be 1 to 127".into()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "+_.-".contains(*c)))
    {
        return Err(bad(format!("character '{c}' is not allowed")));
    }
    if name.starts_with('-') {
        return Err(bad("it starts with '-'".into()));
    }
    if name == "." || name == ".." {
        return Err(bad("'.' and '..' are reserved".into()));
    }
    if is_lv {
        if name.starts_with("snapshot") || name.starts_with("pvmove") {
            return Err(bad(
                "names starting with 'snapshot' or 'pvmove' are reserved".into(),
            ));
        }
        if let Some(r) = RESERVED_PARTS.iter().find(|r| name.contains(*r)) {
            return Err(bad(format!("'{r}' is reserved for lvm's internal volumes")));
        }
    }
    Ok(())
}

/// The LV's device node.
pub fn lv_device(vg: &str, lv: &str) -> PathBuf {
    PathBuf::from(format!("/dev/{vg}/{lv}"))
}

/// The bytes the LV needs for a guest disk of `size_bytes` in `format` (qcow2 metadata
/// included, so a full-disk write does not hit ENOSPC).
pub fn lv_bytes(format: Format, size_bytes: u64) -> u64 {
    match format {
        Format::Raw => size_bytes,
        Format::Qcow2 => cmd::qcow2_max_size(size_bytes),
    }
}

/// The commands that create LV `lv` in `vg` for a guest disk of `size_bytes` in `format`:
/// `lvcreate` (thick with `-L`, or thin in `thin_pool` with `-V`; `-a y` activates it now, `-y`
/// answers lvm's wipe-signature prompt), then for qcow2 a `qemu-img create` on the device.
pub fn plan_create(
    vg: &str,
    lv: &str,
    thin_pool: Option<&str>,
    format: Format,
    size_bytes: u64,
) -> Vec<Vec<String>> {
    let size = format!("{}b", lv_bytes(format, size_bytes));
    let mut lvcreate: Vec<String> = ["lvcreate", "-y", "-a", "y", "-n", lv]
        .map(String::from)
        .to_vec();
    match thin_pool {
        None => lvcreate.extend(["-L".into(), size, vg.into()]),
        Some(pool) => lvcreate.extend([
            "-V".into(),
            size,
            "--thinpool".into(),
            pool.into(),
            vg.into(),
        ]),
    }
    let mut plan = vec![lvcreate];
    if format == Format::Qcow2 {
        let dev = lv_device(vg, lv).to_string_lossy().into_owned();
        plan.push(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                &dev,
                &size_bytes.to_string(),
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    plan
}

/// The commands that remove LV `lv` from `vg`.
pub fn plan_remove(vg: &str, lv: &str) -> Vec<Vec<String>> {
    vec![vec!["lvremove".into(), "-y".into(), format!("{vg}/{lv}")]]
}

/// Whether the kernel offers device-mapper: the control node and the misc device both.
pub fn device_mapper_present() -> bool {
    let misc = std::fs::read_to_string("/proc/misc").unwrap_or_default();
    Path::new("/dev/mapper/control").exists()
        && misc
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("device-mapper"))
}

/// Logical volumes in a volume group.
#[derive(Debug)]
pub struct LvmBackend {
    vg: String,
    thin_pool: Option<String>,
    /// LVs created and not yet removed.
    created: Vec<String>,
    /// The run's base images and the directory their files go in, for `copy` cells.
    bases: Option<(Bases, PathBuf)>,
}

impl LvmBackend {
    /// LVs in `vg`, thin in `thin_pool` when given. Names are validated by [`Self::check`] and
    /// [`StorageBackend::provision`].
    pub fn new(vg: String, thin_pool: Option<String>) -> Self {
        LvmBackend {
            vg,
            thin_pool,
            created: Vec::new(),
            bases: None,
        }
    }

    /// Cells whose LV starts as a copy of the run's base image (its file in `dir`).
    pub fn from_bases(mut self, bases: Bases, dir: PathBuf) -> Self {
        self.bases = Some((bases, dir));
        self
    }

    /// Copies the run's base of `size_bytes` into the new LV `dev` (Nova's `lvm`) and says so
    /// in `params`.
    fn copy_base(
        &self,
        cell: &Cell,
        dev: &Path,
        size_bytes: u64,
        params: &mut BTreeMap<String, String>,
    ) -> Result<(), StorageError> {
        let (Some((bases, dir)), InstanceDisk::Copy) = (&self.bases, cell.instance) else {
            return Ok(());
        };
        let base = bases.get(dir, size_bytes)?;
        super::local::copy_base(&base, dev, cell.format)?;
        super::base::record(params, cell, &base);
        Ok(())
    }

    /// The LV name for the next cell: run-unique, so leftovers of a killed run never clash.
    fn next_lv_name(&mut self) -> String {
        format!("vmbench-{}", cmd::unique_tag())
    }

    fn validate(&self) -> Result<(), StorageError> {
        validate_name("volume group", &self.vg, false)?;
        if let Some(p) = &self.thin_pool {
            validate_name("thin pool", p, true)?;
        }
        Ok(())
    }
}

/// What any LVM cell needs from the host before a volume group is named: device-mapper and a
/// working lvm2 (for `vmbench doctor`, and the first half of [`LvmBackend::check`]).
pub fn host_check() -> Result<(), Unsupported> {
    if !device_mapper_present() {
        return Err(Unsupported::NoDeviceMapper);
    }
    cmd::run("lvm", &["version"]).map_err(|e| Unsupported::Lvm2 {
        detail: e.to_string(),
    })?;
    Ok(())
}

impl StorageBackend for LvmBackend {
    fn check(&self) -> Result<(), Unsupported> {
        self.validate().map_err(|e| Unsupported::LvmName {
            detail: e.to_string(),
        })?;
        host_check()?;
        cmd::run("vgs", &[self.vg.as_str()]).map_err(|e| Unsupported::NoVolumeGroup {
            vg: self.vg.clone(),
            detail: e.to_string(),
        })?;
        if let Some(p) = &self.thin_pool {
            let lv = format!("{}/{p}", self.vg);
            cmd::run("lvs", &[lv.as_str()]).map_err(|e| Unsupported::NoThinPool {
                lv: lv.clone(),
                detail: e.to_string(),
            })?;
        }
        Ok(())
    }

    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.validate()?;
        self.check()?;
        let lv = self.next_lv_name();
        validate_name("logical volume", &lv, true)?;
        let plan = plan_create(
            &self.vg,
            &lv,
            self.thin_pool.as_deref(),
            cell.format,
            size_bytes,
        );
        self.created.push(lv.clone());
        cmd::run_plan(&plan)?;
        let dev = lv_device(&self.vg, &lv);
        let mut params = BTreeMap::new();
        params.insert("vg".into(), self.vg.clone());
        params.insert("lv".into(), lv.clone());
        params.insert(
            "lv_type".into(),
            if self.thin_pool.is_some() {
                "thin"
            } else {
                "thick"
            }
            .into(),
        );
        if let Some(p) = &self.thin_pool {
            params.insert("thin_pool".into(), p.clone());
        }
        params.insert(
            "lv_bytes".into(),
            lv_bytes(cell.format, size_bytes).to_string(),
        );
        self.copy_base(cell, &dev, size_bytes, &mut params)?;
        Ok(ProvisionedDisk {
            source: DiskSource::Block { dev: dev.clone() },
            format: cell.format,
            size_bytes,
            host_path: Some(dev),
            params,
        })
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        while let Some(lv) = self.created.pop() {
            // An LV that lvcreate never made (a half-failed provision) is not an error.
            let full = format!("{}/{lv}", self.vg);
            if cmd::run("lvs", &[full.as_str()]).is_err() {
                continue;
            }
            if let Err(e) = cmd::run_plan(&plan_remove(&self.vg, &lv)) {
                self.created.push(lv);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for LvmBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `lvm` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Lvm
    }

    fn local_only(&self) -> Option<&'static str> {
        Some(
            "lvm cells run on this machine only (LVM on a remote host would need a libvirt \
             logical pool there, not implemented yet)",
        )
    }

    /// A preset's LVM cells need a volume group the user names (`--lvm-vg`).
    fn preset_needs_device(&self, opts: &super::options::StorageConfig) -> bool {
        opts.lvm_vg.is_none()
    }

    fn validate(
        &self,
        opts: &super::options::StorageConfig,
        selected: bool,
    ) -> Result<(), StorageError> {
        if selected && opts.lvm_vg.is_none() {
            return Err(super::OptionError::Needs {
                backend: self.backend(),
                needs: "--lvm-vg VG",
            }
            .into());
        }
        if let Some(vg) = &opts.lvm_vg {
            validate_name("volume group", vg, false)?;
        }
        if let Some(pool) = &opts.lvm_thin_pool {
            validate_name("thin pool", pool, true)?;
        }
        Ok(())
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        _work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        DiskSource::Block {
            dev: lv_device(
                opts.lvm_vg.as_deref().unwrap_or_default(),
                &format!("vmbench-{}", super::PLANNED_TAG),
            ),
        }
    }

    fn open(
        &self,
        opts: &super::options::StorageConfig,
        cell: &Cell,
        servers: &mut super::servers::Servers,
        work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        let b = LvmBackend::new(
            opts.lvm_vg.clone().unwrap_or_default(),
            opts.lvm_thin_pool.clone(),
        );
        let b = match cell.instance.from_base() {
            // The base file lives in the run's work dir, removed with the run.
            true => b.from_bases(servers.bases(), work.join("_base")),
            false => b,
        };
        Ok(super::Opened::plain(Box::new(b)))
    }

    /// An empty LV, or the base copied into it (Nova's `lvm`).
    fn instances(&self) -> &'static [InstanceDisk] {
        &[InstanceDisk::Flat, InstanceDisk::Copy]
    }

    fn host_support(&self) -> Result<String, String> {
        if !device_mapper_present() {
            return Err("no device-mapper (LVM volumes cannot be activated)".into());
        }
        host_check()
            .map(|()| "device-mapper and lvm2 present; needs --lvm-vg".into())
            .map_err(|u| u.to_string())
    }
}

/// The lvm backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LvmArgs {
    /// LVM volume group for lvm cells.
    #[arg(long)]
    pub lvm_vg: Option<String>,
    /// LVM thin pool (thin volumes instead of thick).
    #[arg(long)]
    pub lvm_thin_pool: Option<String>,
}

impl LvmArgs {
    /// Sets the options given on the command line.
    pub fn apply(&self, s: &mut StorageConfig) {
        if let Some(vg) = &self.lvm_vg {
            s.lvm_vg = Some(vg.clone());
        }
        if let Some(p) = &self.lvm_thin_pool {
            s.lvm_thin_pool = Some(p.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Backend;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn thick_raw_plan() {
        let p = plan_create("vg0", "lv1", None, Format::Raw, 1 << 30);
        assert_eq!(
            p,
            vec![s(&[
                "lvcreate",
                "-y",
                "-a",
                "y",
                "-n",
                "lv1",
                "-L",
                "1073741824b",
                "vg0"
            ])]
        );
    }

    #[test]
    fn thin_qcow2_plan_leaves_room_for_metadata() {
        let p = plan_create("vg0", "lv1", Some("pool"), Format::Qcow2, 1 << 30);
        assert_eq!(p.len(), 2);
        assert_eq!(
            &p[0][..8],
            &s(&["lvcreate", "-y", "-a", "y", "-n", "lv1", "-V", &p[0][7]])[..]
        );
        let lv: u64 = p[0][7].trim_end_matches('b').parse().unwrap();
        assert!(lv > 1 << 30 && lv < (1 << 30) + (4 << 20), "{lv}");
        assert_eq!(&p[0][8..], &s(&["--thinpool", "pool", "vg0"])[..]);
        assert_eq!(
            p[1],
            s(&[
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "/dev/vg0/lv1",
                "1073741824"
            ])
        );
        assert_eq!(
            plan_remove("vg0", "lv1"),
            vec![s(&["lvremove", "-y", "vg0/lv1"])]
        );
    }

    /// Nova's `lvm` is a copy of the base in an LV; an overlay or a clone is not LVM's to make
    /// (the planner skips those cells with the valid kinds).
    #[test]
    fn lvm_makes_flat_and_copied_volumes_only() {
        use super::super::BackendKind;
        assert_eq!(
            KIND.instances(),
            &[InstanceDisk::Flat, InstanceDisk::Copy][..]
        );
    }

    #[test]
    fn names_follow_lvm_rules() {
        for ok in ["vg0", "my-vg.1", "a+b_c", "vmbench-123-1700000000-1"] {
            validate_name("volume group", ok, true).unwrap();
        }
        let cases = [
            ("", "length"),
            ("-vg", "starts with '-'"),
            ("vg 0", "character ' '"),
            ("vg/0", "character '/'"),
            ("..", "reserved"),
            ("snapshot1", "'snapshot'"),
            ("data_tmeta", "'_tmeta'"),
        ];
        for (name, want) in cases {
            let e = validate_name("logical volume", name, true)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{name}: {e}");
        }
        assert!(validate_name("vg", &"a".repeat(128), false).is_err());
    }

    #[test]
    fn check_reports_no_device_mapper_on_this_host() {
        let e = LvmBackend::new("vg0".into(), None).check().unwrap_err();
        // With device-mapper, the next refusal is lvm2 or the (absent) volume group.
        if device_mapper_present() {
            assert!(
                matches!(
                    e,
                    Unsupported::Lvm2 { .. } | Unsupported::NoVolumeGroup { .. }
                ),
                "{e:?}"
            );
            return;
        }
        assert_eq!(e, Unsupported::NoDeviceMapper);
        assert!(e.to_string().contains("no device-mapper"), "{e}");
        let mut b = LvmBackend::new("vg0".into(), None);
        let cell = crate::storage::testutil::cell(Backend::Lvm, Format::Raw);
        let e = b
            .provision(&cell, 1 << 20, Path::new("/var/tmp"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unsupported on this host: no device-mapper"),
            "{e}"
        );
        b.teardown().unwrap();
    }

    #[test]
    fn bad_vg_is_refused_before_anything_runs() {
        let e = LvmBackend::new("bad vg".into(), None)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid LVM volume group name 'bad vg'"), "{e}");
    }
}
