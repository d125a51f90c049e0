//! Ceph RBD images (`--backend rbd`): the disk layout most OpenStack clouds use. Each cell's
//! disk is a raw RBD image in the pool of the run's embedded single-host cluster
//! ([`super::ceph`]: one monitor, one BlueStore OSD in a sparse file, in the run's network
//! namespace, cephx required). QEMU reaches it with its own librbd (`<source protocol='rbd'>`),
//! as a cephx client whose key lives only in an ephemeral, private libvirt secret of usage type
//! `ceph`, defined for the cell and undefined at its teardown: no other local user gets in
//! without the key, and the key never enters a domain XML or a command line.
//!
//! RBD images are raw: Nova and Cinder refuse a qcow2 on RBD (the copy-on-write is RBD's own,
//! by cloning a protected snapshot), so a qcow2 cell is refused.
//!
//! With `--ceph-conf FILE` the images go on a user's cluster instead ([`Cluster::External`],
//! [`super::ceph_external`]): nothing is started, the same key handling applies, and every
//! image and base of the run is named after it and removed.

use super::base::Bases;
use super::ceph::Ceph;
use super::ceph_external::{CephSpec, ExternalCeph};
use super::chap::{LibvirtSecret, SecretType};
use super::options::StorageConfig;
use super::{ceph_external, Unsupported, PLANNED_TAG};
use super::{DiskSource, NetAuth, NetProtocol, ProvisionedDisk, StorageBackend, StorageError};
use crate::cell::{Cell, Format, InstanceDisk};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The usage names of vmbench's cephx secrets start with this (`vmbench cleanup` undefines
/// only such names).
pub const USAGE_PREFIX: &str = "vmbench-ceph-";

/// The directory (under a run's `servers/`) holding one file per defined secret, named after
/// its usage, so `vmbench cleanup` can undefine it after a kill -9.
pub const SECRETS_DIR: &str = "ceph-secrets";

/// What one cell made: the image, and the libvirt secret QEMU logs in with.
#[derive(Debug)]
struct Made {
    image: String,
    secret: Option<LibvirtSecret>,
    usage_file: PathBuf,
}

/// The cluster a cell's images are on; [`RbdBackend`] asks it everything, whichever it is.
#[derive(Debug, Clone)]
pub enum Cluster {
    /// The run's own single-host cluster, in the run's namespace.
    Embedded(Arc<Ceph>),
    /// A user's cluster (`--ceph-conf`), shared by the run's cells.
    External(Arc<ExternalCeph>),
}

impl Cluster {
    /// Runs `rbd ARGS` against the cluster (as client.admin on the embedded one, as the named
    /// client on a user's); returns stdout.
    fn rbd(&self, args: &[&str]) -> Result<String, StorageError> {
        match self {
            Cluster::Embedded(c) => c.rbd(args),
            Cluster::External(c) => c.rbd(args),
        }
    }

    fn pool(&self) -> &str {
        match self {
            Cluster::Embedded(c) => c.pool(),
            Cluster::External(c) => &c.spec().pool,
        }
    }

    /// The monitor libvirt's `<host>` names.
    fn monitor(&self) -> (String, u16) {
        match self {
            Cluster::Embedded(c) => (c.mon_host().to_string(), c.mon_port()),
            Cluster::External(c) => (c.spec().monitor().host.clone(), c.spec().monitor().port),
        }
    }

    /// The cephx client QEMU logs in as (without `client.`).
    fn client_id(&self) -> &str {
        match self {
            Cluster::Embedded(c) => c.client_id(),
            Cluster::External(c) => &c.spec().user,
        }
    }

    fn client_key(&self) -> &str {
        match self {
            Cluster::Embedded(c) => c.client_key(),
            Cluster::External(c) => c.client_key(),
        }
    }

    /// Whether the cluster can still serve, as far as this machine can tell: a user's has no
    /// process of ours to watch (nor does the storage-lost watchdog get one), so its failures
    /// show as failed `rbd` calls and guest I/O errors.
    fn alive(&self) -> bool {
        match self {
            Cluster::Embedded(c) => c.alive(),
            Cluster::External(_) => true,
        }
    }

    /// The unique part of an image name: on a user's cluster it starts with the run's id, so
    /// `vmbench cleanup` finds a killed run's images by name.
    fn image_tag(&self, tag: &str) -> String {
        match self {
            Cluster::Embedded(_) => tag.to_string(),
            Cluster::External(c) => format!("{}{tag}", c.prefix().trim_start_matches("vmbench-")),
        }
    }

    /// The name of the base image of `bytes` (the embedded cluster is the run's own).
    fn base_name(&self, bytes: u64) -> String {
        match self {
            Cluster::Embedded(_) => format!("vmbench-base-{bytes}"),
            Cluster::External(c) => format!("{}base-{bytes}", c.prefix()),
        }
    }

    /// The cell params that say where the image is.
    fn params(&self) -> Vec<(&'static str, String)> {
        match self {
            Cluster::Embedded(c) => vec![
                ("mode", "embedded".into()),
                ("link", c.net().link().to_string()),
                ("server_software", "ceph (mon + BlueStore osd)".into()),
                ("server_pid", c.pid().to_string()),
                ("ceph_mon_pid", c.mon_pid().to_string()),
            ],
            Cluster::External(c) => vec![
                ("mode", "external".into()),
                ("server_software", c.provenance()),
                ("ceph_conf", c.spec().conf.display().to_string()),
            ],
        }
    }
}

/// RBD images on the run's embedded cluster or a user's.
#[derive(Debug)]
pub struct RbdBackend {
    ceph: Cluster,
    secrets_dir: PathBuf,
    made: Vec<Made>,
    /// The run's base images and where their files go, when the cell's disk is made from one
    /// (clone, copy).
    bases: Option<(Bases, PathBuf)>,
    /// The ms this cell spent writing and importing the base (the first cell of a cluster).
    base_written_ms: Option<u64>,
}

impl RbdBackend {
    /// Images on `ceph`; usage files of the secrets in `secrets_dir`.
    pub fn embedded(ceph: Arc<Ceph>, secrets_dir: PathBuf) -> RbdBackend {
        Self::on(Cluster::Embedded(ceph), secrets_dir)
    }

    /// Images on `cluster`; usage files of the secrets in `secrets_dir`.
    pub fn on(cluster: Cluster, secrets_dir: PathBuf) -> RbdBackend {
        RbdBackend {
            ceph: cluster,
            secrets_dir,
            made: Vec::new(),
            bases: None,
            base_written_ms: None,
        }
    }

    /// Disks made from the run's base images in `bases` (their files in `dir`, imported into
    /// the pool once per cluster).
    pub fn from_bases(mut self, bases: Bases, dir: PathBuf) -> Self {
        self.bases = Some((bases, dir));
        self
    }

    /// The base of `bytes` in the pool, as a protected snapshot `POOL/vmbench-base-N@base`
    /// (`vmbench-RUN-base-N` on a user's cluster, removed at the run's end): imported from the
    /// run's base file by the first cell that needs it (a cluster that was replaced mid-run gets
    /// it again).
    fn base_snapshot(&mut self, bytes: u64) -> Result<String, StorageError> {
        let Some((bases, dir)) = &self.bases else {
            return Err(StorageError::Invalid("no base image for this cell".into()));
        };
        let pool = self.ceph.pool();
        let name = self.ceph.base_name(bytes);
        if let Cluster::External(c) = &self.ceph {
            // Removed at the run's end, tracked before it is made so a half-made one goes too.
            c.track_base(&name);
        }
        let snap = format!("{pool}/{name}@base");
        let listed = self.ceph.rbd(&["ls", pool])?;
        if listed.lines().any(|l| l.trim() == name) {
            return Ok(snap);
        }
        let file = bases.get(dir, bytes)?;
        let t = std::time::Instant::now();
        let image = format!("{pool}/{name}");
        let path = file.path().to_string_lossy();
        let made = self
            .ceph
            .rbd(&["import", "--no-progress", &path, &image])
            .and_then(|_| self.ceph.rbd(&["snap", "create", "--no-progress", &snap]))
            .and_then(|_| self.ceph.rbd(&["snap", "protect", &snap]));
        if let Err(e) = made {
            // A half-made base would pass the `ls` above for the next cell: copies would read
            // a partial image and clones find no snapshot. Best effort; the error is the news.
            let _ = ceph_external::remove_base(|a| self.ceph.rbd(a), pool, &name);
            return Err(e);
        }
        let import_ms = t.elapsed().as_millis() as u64;
        let written = file.first_write_ms().unwrap_or(0) + import_ms;
        self.base_written_ms = Some(written);
        Ok(snap)
    }

    /// Makes `spec` as `cell` asks: empty, a clone of the base's snapshot (Nova's `rbd`), or
    /// a full copy of the base.
    fn make_image(&mut self, cell: &Cell, spec: &str, bytes: u64) -> Result<(), StorageError> {
        match cell.instance {
            InstanceDisk::Flat | InstanceDisk::Overlay => {
                let mib = size_mib(bytes).to_string();
                self.ceph.rbd(&["create", "--size", &mib, spec]).map(drop)
            }
            InstanceDisk::Clone => {
                let snap = self.base_snapshot(size_mib(bytes) << 20)?;
                self.ceph.rbd(&["clone", &snap, spec]).map(drop)
            }
            InstanceDisk::Copy => {
                let snap = self.base_snapshot(size_mib(bytes) << 20)?;
                let image = snap.trim_end_matches("@base");
                self.ceph
                    .rbd(&["cp", "--no-progress", image, spec])
                    .map(drop)
            }
        }
    }

    /// Defines the cell's secret, its usage written first so a kill -9 leaves a trace.
    fn define_secret(&self, tag: &str) -> Result<(LibvirtSecret, PathBuf), StorageError> {
        use base64::Engine;
        let usage = format!("{USAGE_PREFIX}{tag}");
        let io = |what: String| {
            move |source| StorageError::Io {
                context: what,
                source,
            }
        };
        std::fs::create_dir_all(&self.secrets_dir)
            .map_err(io(format!("creating {}", self.secrets_dir.display())))?;
        let file = self.secrets_dir.join(&usage);
        std::fs::write(&file, &usage).map_err(io(format!("writing {}", file.display())))?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(self.ceph.client_key().trim())
            .map_err(|e| StorageError::Invalid(format!("the cluster's client key: {e}")))?;
        match LibvirtSecret::define_value(SecretType::Ceph, &usage, &key) {
            Ok(s) => Ok((s, file)),
            Err(e) => {
                let _ = std::fs::remove_file(&file);
                Err(e)
            }
        }
    }
}

/// The `used_size` of the (only) image in `rbd du --format json`'s output.
pub(super) fn used_size(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["images"].as_array()?.first()?["used_size"].as_u64()
}

/// The image size in MiB (what `rbd create --size` counts in), rounded up.
fn size_mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20).max(1)
}

/// libvirt's view of image `image` in `pool` on the monitor `host:port`, as `auth`'s client.
pub fn network_source(pool: &str, image: &str, host: &str, port: u16, auth: NetAuth) -> DiskSource {
    DiskSource::Network {
        protocol: NetProtocol::Rbd,
        name: format!("{pool}/{image}"),
        host: host.to_string(),
        port: Some(port),
        auth: Some(auth),
    }
}

impl StorageBackend for RbdBackend {
    fn check(&self) -> Result<(), Unsupported> {
        match &self.ceph {
            Cluster::Embedded(c) if !c.alive() => Err(Unsupported::ServerGone {
                server: "ceph-osd",
                pid: c.pid(),
            }),
            _ => Ok(()),
        }
    }

    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.check()?;
        if cell.format != Format::Raw {
            return Err(Unsupported::FormatRefused {
                backend: "rbd",
                only: Format::Raw,
                asked: cell.format,
            }
            .into());
        }
        let tag = super::cmd::unique_tag();
        let image = super::image_name(&self.ceph.image_tag(&tag), cell);
        let pool = self.ceph.pool().to_string();
        let spec = format!("{pool}/{image}");
        if let Err(e) = self.make_image(cell, &spec, size_bytes) {
            // `rbd cp` or `create` may fail after the image exists (a timeout, a full pool);
            // on a user's cluster it would stay. Best effort; the error is the news.
            let _ = self.ceph.rbd(&["rm", "--no-progress", &spec]);
            return Err(e);
        }
        self.made.push(Made {
            image: spec.clone(),
            secret: None,
            usage_file: PathBuf::new(),
        });
        let (secret, usage_file) = self.define_secret(&tag)?;
        let auth = NetAuth::Cephx {
            username: self.ceph.client_id().to_string(),
            secret_usage: secret.usage().to_string(),
        };
        if let Some(m) = self.made.last_mut() {
            m.secret = Some(secret);
            m.usage_file = usage_file;
        }
        let (host, port) = self.ceph.monitor();
        let mut params = BTreeMap::from([
            ("protocol".to_string(), "rbd".to_string()),
            ("server".to_string(), host.clone()),
            ("port".to_string(), port.to_string()),
            ("pool".to_string(), pool.clone()),
            ("image".to_string(), spec),
            (
                "cephx_client".to_string(),
                self.ceph.client_id().to_string(),
            ),
            ("instance_disk".to_string(), cell.instance.to_string()),
        ]);
        params.extend(
            self.ceph
                .params()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        if let Some(ms) = self.base_written_ms.take() {
            params.insert(super::base::WRITTEN_MS.into(), ms.to_string());
        }
        Ok(ProvisionedDisk {
            source: network_source(&pool, &image, &host, port, auth),
            format: Format::Raw,
            size_bytes: size_mib(size_bytes) << 20,
            host_path: None,
            params,
        })
    }

    /// `rbd du`'s used size of the image: a clone's own objects, not its parent's.
    fn allocated_bytes(&self) -> Option<u64> {
        let image = &self.made.last()?.image;
        let out = self.ceph.rbd(&["du", "--format", "json", image]).ok()?;
        used_size(&out)
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        while let Some(m) = self.made.last_mut() {
            // The secret first: it goes even when the image cannot (a cluster killed mid-run
            // took its images with it).
            drop(m.secret.take());
            if !m.usage_file.as_os_str().is_empty() {
                let _ = std::fs::remove_file(&m.usage_file);
            }
            if self.ceph.alive() {
                self.ceph.rbd(&["rm", "--no-progress", &m.image])?;
            }
            self.made.pop();
        }
        Ok(())
    }
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for RbdBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `rbd` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Rbd
    }

    fn net_protocol(&self) -> Option<NetProtocol> {
        Some(NetProtocol::Rbd)
    }

    fn embedded_server(&self) -> Option<&'static str> {
        Some(<Ceph as super::servers::EmbeddedServer>::NAME)
    }

    /// The embedded cluster runs here; a user's cluster is reached from anywhere, but the
    /// client's key goes into a secret of this machine's libvirtd.
    fn remote_blocker(&self, opts: &StorageConfig) -> Option<super::RemoteBlocker> {
        Some(match opts.ceph_conf {
            Some(_) => super::RemoteBlocker::CephKeyHere,
            None => super::RemoteBlocker::EmbeddedServer(self.backend()),
        })
    }

    fn external_flag(&self, opts: &StorageConfig) -> Option<&'static str> {
        opts.ceph_conf.is_some().then_some("--ceph-conf")
    }

    /// `--ceph-*` only with `--ceph-conf`, `--ceph-conf` only with rbd cells, and its files
    /// readable and complete (conf with `mon_host`, keyring with the client's key).
    fn validate(&self, opts: &StorageConfig, selected: bool) -> Result<(), StorageError> {
        let Some(conf) = &opts.ceph_conf else {
            let given = [
                ("--ceph-keyring", opts.ceph_keyring.is_some()),
                ("--ceph-user", opts.ceph_user.is_some()),
                ("--ceph-pool", opts.ceph_pool.is_some()),
            ];
            return match given.iter().find(|(_, set)| *set) {
                Some((flag, _)) => Err(StorageError::Invalid(format!(
                    "{flag} needs --ceph-conf FILE (the cluster it is for); without it rbd \
                     cells use an embedded cluster with its own key"
                ))),
                None => Ok(()),
            };
        };
        if !selected {
            return Err(StorageError::Invalid(format!(
                "--ceph-conf {} is for rbd cells and the matrix has none (add --backend rbd)",
                conf.display()
            )));
        }
        external_spec(opts, conf).map(drop)
    }

    fn plan_source(
        &self,
        opts: &StorageConfig,
        cell: &Cell,
        _work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        let image = super::image_name(PLANNED_TAG, cell);
        let secret_usage = format!("{USAGE_PREFIX}{PLANNED_TAG}");
        let Some(conf) = &opts.ceph_conf else {
            let username = super::ceph::CLIENT_ID.into();
            let (host, port) = (super::netns::PLANNED_SERVER, super::ceph::MON_PORT);
            let auth = NetAuth::Cephx {
                username,
                secret_usage,
            };
            return network_source(super::ceph::POOL, &image, host, port, auth);
        };
        let user = opts
            .ceph_user
            .as_deref()
            .unwrap_or(ceph_external::DEFAULT_USER);
        let pool = opts
            .ceph_pool
            .as_deref()
            .unwrap_or(ceph_external::DEFAULT_POOL);
        // The monitor as the conf names it, when it can be read now (a dry run may come first).
        let mon = std::fs::read_to_string(conf).ok().and_then(|t| {
            let c = ceph_external::ConfFile::parse(&t);
            ceph_external::parse_mon_host(c.get(user, "mon_host")?).ok()
        });
        let (host, port) = mon
            .and_then(|m| m.into_iter().next())
            .map_or(("MON".to_string(), 0), |m| (m.host, m.port));
        let auth = NetAuth::Cephx {
            username: user.into(),
            secret_usage,
        };
        network_source(pool, &image, &host, port, auth)
    }

    fn open(
        &self,
        opts: &StorageConfig,
        cell: &Cell,
        servers: &mut super::servers::Servers,
        _work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        if let Some(conf) = &opts.ceph_conf {
            return open_external(opts, conf, cell, servers);
        }
        super::servers::installed::<Ceph>().map_err(|detail| {
            super::servers::OpenError::Unsupported(Unsupported::NoServer {
                detail,
                install: "--no-install-recommends ceph-mon ceph-osd ceph-common",
            })
        })?;
        let ceph = servers.ceph(cell.link)?;
        let server = Some(super::servers::identity(ceph.as_ref()));
        let secrets = servers.log_dir(SECRETS_DIR);
        let mut b = RbdBackend::embedded(ceph.clone(), secrets);
        if cell.instance.from_base() {
            b = b.from_bases(servers.bases(), servers.log_dir("ceph-base"));
        }
        Ok(super::Opened {
            companions: vec![ceph.mon_pid()],
            backend: Box::new(b),
            server,
            provenance: None,
        })
    }

    fn host_support(&self) -> Result<String, String> {
        super::servers::installed::<Ceph>()
    }

    fn leftover_processes(&self) -> &'static [&'static str] {
        &["ceph-mon", "ceph-osd"]
    }

    /// A clone of the base's protected snapshot (Nova's `rbd`) or a full copy of it.
    fn instances(&self) -> &'static [InstanceDisk] {
        &[InstanceDisk::Flat, InstanceDisk::Clone, InstanceDisk::Copy]
    }

    /// RBD images are raw: the copy-on-write is RBD's own (a clone of a protected snapshot),
    /// and Nova and Cinder refuse a qcow2 on RBD.
    fn formats(&self) -> &'static [Format] {
        &[Format::Raw]
    }
}

/// The user's cluster `--ceph-conf` and the other `--ceph-*` options name.
fn external_spec(opts: &StorageConfig, conf: &Path) -> Result<CephSpec, StorageError> {
    CephSpec::resolve(
        conf,
        opts.ceph_keyring.as_deref(),
        opts.ceph_user.as_deref(),
        opts.ceph_pool.as_deref(),
    )
}

/// A cell on the user's cluster: the run's handle on it (made, and its key checked, by the
/// first cell; a refusal fails every later cell the same way). No server to watch: the results
/// record the cluster by its monitor instead.
fn open_external(
    opts: &StorageConfig,
    conf: &Path,
    cell: &Cell,
    servers: &mut super::servers::Servers,
) -> Result<super::Opened, super::servers::OpenError> {
    let spec =
        external_spec(opts, conf).map_err(|e| super::servers::OpenError::Failed(e.into()))?;
    let ext = servers.ceph_external(spec)?;
    let provenance = Some(ext.provenance());
    let secrets = servers.log_dir(SECRETS_DIR);
    let mut b = RbdBackend::on(Cluster::External(ext), secrets);
    if cell.instance.from_base() {
        b = b.from_bases(servers.bases(), servers.log_dir("ceph-base"));
    }
    Ok(super::Opened {
        backend: Box::new(b),
        server: None,
        companions: vec![],
        provenance,
    })
}

/// The rbd backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CephArgs {
    /// A Ceph cluster's ceph.conf, whose mon_host names its monitors: rbd cells use that
    /// cluster (images and bases named after the run, removed at its end) instead of starting
    /// one. [default: an embedded single-host cluster per run]
    #[arg(long, value_name = "FILE")]
    pub ceph_conf: Option<PathBuf>,
    /// The keyring holding the --ceph-user client's key (only its path is recorded; QEMU gets
    /// the key through a per-cell libvirt secret). [default: the keyring the conf names, else
    /// /etc/ceph/ceph.client.USER.keyring]
    #[arg(long, value_name = "FILE")]
    pub ceph_keyring: Option<PathBuf>,
    /// The cephx client id (without `client.`) on the --ceph-conf cluster. [default: admin]
    #[arg(long, value_name = "NAME")]
    pub ceph_user: Option<String>,
    /// The pool rbd images go in on the --ceph-conf cluster. [default: rbd]
    #[arg(long, value_name = "NAME")]
    pub ceph_pool: Option<String>,
}

impl CephArgs {
    /// Sets the options given on the command line (checked in [`Kind`]'s `validate`).
    pub fn apply(&self, s: &mut StorageConfig) {
        if self.ceph_conf.is_some() {
            s.ceph_conf.clone_from(&self.ceph_conf);
        }
        if self.ceph_keyring.is_some() {
            s.ceph_keyring.clone_from(&self.ceph_keyring);
        }
        if self.ceph_user.is_some() {
            s.ceph_user.clone_from(&self.ceph_user);
        }
        if self.ceph_pool.is_some() {
            s.ceph_pool.clone_from(&self.ceph_pool);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rbd du --format json rbd/t1` of Ceph 16.2.15 (the cluster's host test: a 64 MiB image
    /// after 16 MiB of random 4 KiB writes, which touched every 4 MiB object).
    #[test]
    fn used_size_is_read_from_rbd_du() {
        let out = r#"{"images":[{"name":"t1","id":"1010e7edf4e","provisioned_size":67108864,"used_size":67108864}]}"#;
        assert_eq!(used_size(out), Some(64 << 20));
        assert_eq!(used_size(r#"{"images":[]}"#), None);
        assert_eq!(used_size("not json"), None);
    }

    #[test]
    fn ceph_options_are_checked_before_anything_is_made() {
        use super::super::BackendKind;
        let d = tempfile::tempdir().unwrap();
        let (conf, kr) = (d.path().join("ceph.conf"), d.path().join("kr"));
        std::fs::write(&conf, "[global]\n\tmon_host = [v2:10.9.8.7:3300/0]\n").unwrap();
        std::fs::write(
            &kr,
            "[client.bench]\n\tkey = AQC3vhVruWdUAhAAZgesi4rusus79nLEb272DQ==\n",
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let private = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(&kr, private).unwrap();
        }
        let mut o = StorageConfig {
            ceph_user: Some("bench".into()),
            ..StorageConfig::default()
        };
        let e = KIND.validate(&o, true).unwrap_err().to_string();
        assert!(e.starts_with("--ceph-user needs --ceph-conf FILE"), "{e}");
        o.ceph_conf = Some(conf.clone());
        let e = KIND.validate(&o, false).unwrap_err().to_string();
        assert!(e.contains("the matrix has none (add --backend rbd)"), "{e}");
        let e = KIND.validate(&o, true).unwrap_err().to_string();
        assert!(e.contains("/etc/ceph/ceph.client.bench.keyring"), "{e}");
        o.ceph_keyring = Some(kr);
        KIND.validate(&o, true).unwrap();
        assert_eq!(KIND.external_flag(&o), Some("--ceph-conf"));
        let cell = Cell {
            backend: crate::cell::Backend::Rbd,
            format: Format::Raw,
            ..Cell::default()
        };
        let DiskSource::Network {
            name, host, port, ..
        } = KIND.plan_source(&o, &cell, "/".as_ref(), "/".as_ref())
        else {
            panic!("a network disk")
        };
        assert!(name.starts_with("rbd/vmbench-TAG-"), "{name}");
        assert_eq!((host.as_str(), port), ("10.9.8.7", Some(3300)));
    }

    #[test]
    fn sizes_round_up_to_whole_mib() {
        assert_eq!(size_mib(1), 1);
        assert_eq!(size_mib(1 << 20), 1);
        assert_eq!(size_mib((1 << 20) + 1), 2);
        assert_eq!(size_mib(1024 << 20), 1024);
    }

    #[test]
    fn the_planned_source_names_pool_image_monitor_and_secret_never_the_key() {
        let cell = Cell {
            backend: crate::cell::Backend::Rbd,
            format: Format::Raw,
            ..Cell::default()
        };
        let opts = super::super::options::StorageConfig::default();
        let src =
            super::super::BackendKind::plan_source(&KIND, &opts, &cell, "/".as_ref(), "/".as_ref());
        let DiskSource::Network {
            protocol,
            name,
            port,
            auth,
            ..
        } = src
        else {
            panic!("a network disk: {src:?}")
        };
        assert_eq!(protocol, NetProtocol::Rbd);
        assert!(name.starts_with("rbd/vmbench-"), "{name}");
        assert_eq!(port, Some(3300));
        let Some(NetAuth::Cephx {
            username,
            secret_usage,
        }) = auth
        else {
            panic!("cephx auth")
        };
        assert_eq!(username, "vmbench");
        assert!(secret_usage.starts_with(USAGE_PREFIX));
    }
}
