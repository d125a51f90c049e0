//! The storage part of the matrix configuration (`[storage]` in TOML, `storage` in
//! config.json). Values are typed as soon as they are read: a bad preallocation or URL is a
//! configuration error (exit 2) before anything is created.

use super::chap::Chap;
use super::iscsi::IscsiUrl;
use super::local::Prealloc;
use super::nfs::NfsUrl;
use super::StorageError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Backend parameters; empty server fields mean "start an embedded server on loopback".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Directory for local images. Default: the run's work directory.
    pub local_dir: Option<PathBuf>,
    /// Preallocation of local images (a libvirt volume): off, metadata, full. Default off.
    pub prealloc: Option<Prealloc>,
    /// External NFS server `nfs://HOST/EXPORT`. Default: embedded nfs-ganesha.
    pub nfs: Option<NfsUrl>,
    /// A host directory where the NFS export is mounted (file disks instead of libnfs).
    pub nfs_mount: Option<PathBuf>,
    /// External iSCSI LUN `iscsi://PORTAL/IQN/LUN`. Default: embedded tgt.
    pub iscsi: Option<IscsiUrl>,
    /// CHAP credentials for the external `iscsi` LUN: a file with `username=NAME` and
    /// `secret=VALUE` lines, mode 0600 or stricter. Only the path is recorded, never the secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iscsi_chap_file: Option<PathBuf>,
    /// LVM volume group for `lvm` cells.
    pub lvm_vg: Option<String>,
    /// Thin pool in that VG (thin volumes instead of thick).
    pub lvm_thin_pool: Option<String>,
    /// Block device for `block` cells (destroyed!).
    pub block_device: Option<PathBuf>,
    /// Required with `block_device`: confirms its contents may be destroyed.
    pub allow_destroy: bool,
    /// Use a block device even if it holds a filesystem signature.
    pub force: bool,
    /// A user's Ceph cluster for `rbd` cells: its ceph.conf, whose `mon_host` names the
    /// monitors. Default: an embedded single-host cluster per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<PathBuf>,
    /// The keyring holding the client's key (only the path is recorded, never the key).
    /// Default: the `keyring` the conf names, else /etc/ceph/ceph.client.USER.keyring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceph_keyring: Option<PathBuf>,
    /// The cephx client id on that cluster, without `client.`. Default `admin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceph_user: Option<String>,
    /// The pool images go in on that cluster. Default `rbd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceph_pool: Option<String>,
    /// A raw or qcow2 image instance disks start from (`overlay`, `copy`, `clone` cells),
    /// converted to raw once per run. Default: a raw base of known data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_image: Option<PathBuf>,
}

impl StorageConfig {
    /// The checks that need more than one field or the filesystem, before anything is created:
    /// a CHAP file only with an external iSCSI LUN, and one that is private and well formed; one
    /// NFS server, not an URL and a mount.
    pub fn validate(&self) -> Result<(), StorageError> {
        if let Some(f) = &self.iscsi_chap_file {
            if self.iscsi.is_none() {
                return Err(StorageError::Invalid(format!(
                    "--iscsi-chap-file {} needs --iscsi iscsi://PORTAL/IQN/LUN: the embedded \
                     target makes its own per-run CHAP account",
                    f.display()
                )));
            }
            Chap::from_file(f)
                .map_err(|e| StorageError::Invalid(format!("--iscsi-chap-file: {e}")))?;
        }
        if self.nfs.is_some() && self.nfs_mount.is_some() {
            return Err(StorageError::Invalid(
                "--nfs and --nfs-mount contradict each other: give one".into(),
            ));
        }
        Ok(())
    }
}

/// Every backend's flags of `vmbench matrix`, each defined in its backend's file and flattened
/// here in the order `--help` lists them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StorageArgs {
    #[command(flatten)]
    local: super::local::LocalArgs,
    #[command(flatten)]
    nfs: super::nfs::NfsArgs,
    #[command(flatten)]
    iscsi: super::iscsi::IscsiArgs,
    #[command(flatten)]
    lvm: super::lvm::LvmArgs,
    #[command(flatten)]
    block: super::block::BlockArgs,
    #[command(flatten)]
    ceph: super::rbd::CephArgs,
    #[command(flatten)]
    base: super::base::BaseArgs,
}

impl StorageArgs {
    /// Sets the options given on the command line over `s` (a config file's or a preset's);
    /// typed values are parsed here, so a bad one is an error before anything is created.
    pub fn apply(&self, s: &mut StorageConfig) -> Result<(), String> {
        self.local.apply(s)?;
        self.nfs.apply(s)?;
        self.iscsi.apply(s)?;
        self.lvm.apply(s);
        self.block.apply(s);
        self.ceph.apply(s);
        self.base.apply(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<StorageConfig, String> {
        toml::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn typed_options_parse_and_round_trip_as_strings() {
        let c = parse(
            "prealloc = \"full\"\nnfs = \"nfs://10.0.0.2/srv/x?uid=0\"\n\
             iscsi = \"iscsi://h:3261/iqn.2026-12.dev.x:t/2\"\n",
        )
        .unwrap();
        assert_eq!(c.prealloc, Some(Prealloc::Full));
        assert_eq!(c.nfs.as_ref().unwrap().host, "10.0.0.2");
        assert_eq!(c.iscsi.as_ref().unwrap().lun, 2);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["prealloc"], "full");
        assert_eq!(json["nfs"], "nfs://10.0.0.2/srv/x?uid=0");
        assert_eq!(json["iscsi"], "iscsi://h:3261/iqn.2026-12.dev.x:t/2");
        let back: StorageConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_chap_file_needs_an_external_lun_and_a_private_well_formed_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("chap");
        std::fs::write(&f, "username=bench\nsecret=hunter22hunter22\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let toml = format!("iscsi_chap_file = \"{}\"\n", f.display());
        let alone = parse(&toml).unwrap();
        let e = alone.validate().unwrap_err().to_string();
        assert!(e.contains("needs --iscsi"), "{e}");
        let with = parse(&format!(
            "iscsi = \"iscsi://h/iqn.2026-12.dev.x:t/1\"\n{toml}"
        ))
        .unwrap();
        with.validate().unwrap();
        // config.json keeps the path, never the secret; without a file, no key at all.
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(&*f.to_string_lossy()) && !json.contains("hunter22"));
        assert!(!serde_json::to_string(&StorageConfig::default())
            .unwrap()
            .contains("iscsi_chap_file"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = with.validate().unwrap_err().to_string();
        assert!(e.contains("mode 0644") && !e.contains("hunter22"), "{e}");
        std::fs::remove_file(&f).unwrap();
        let e = with.validate().unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn bad_values_name_the_valid_forms() {
        let e = parse("prealloc = \"falloc\"\n").unwrap_err();
        assert!(
            e.contains("'falloc'") && e.contains("off, metadata, full"),
            "{e}"
        );
        let e = parse("nfs = \"http://h/x\"\n").unwrap_err();
        assert!(e.contains("nfs://HOST/EXPORT"), "{e}");
        let e = parse("nfs = \"nfs://h/x?foo=1\"\n").unwrap_err();
        assert!(e.contains("valid: uid, gid"), "{e}");
        let e = parse("iscsi = \"iscsi://h/iqn.2026-12.dev.x:t\"\n").unwrap_err();
        assert!(e.contains("iscsi://PORTAL[:PORT]/IQN/LUN"), "{e}");
    }
}
