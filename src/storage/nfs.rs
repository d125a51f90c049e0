//! NFS storage backend: an image file on an NFS export, in one of three modes.
//!
//! - embedded: our own ganesha ([`super::ganesha::Ganesha`]); images are created over
//!   `nfs://127.0.0.1/...` by qemu-img (QEMU's libnfs, no kernel mount) and removed by deleting
//!   the file in the exported directory.
//! - external: a user's server, `nfs://HOST/EXPORT[?options]`. qemu-img cannot delete and this
//!   host has no kernel NFS client, so teardown truncates the image to 0 bytes over libnfs
//!   (`qemu-img create -f raw URL 0`): the space is returned, but an empty file named
//!   `vmbench-*` stays in the export. This is recorded in the disk's params (`leftover`).
//! - mounted: an export already mounted on the host (kernel client); the image is a plain file
//!   there and libvirt gets a file disk.

use super::base::{BaseImage, Bases};
use super::cmd;
use super::ganesha::{self, Ganesha};
use super::options::StorageConfig;
use super::{
    DiskSource, NetAuth, NetProtocol, ProvisionedDisk, StorageBackend, StorageError, Unsupported,
};
use crate::cell::{Cell, InstanceDisk};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The query options QEMU 7.2's nfs driver accepts in an `nfs://` URL (all numeric).
pub const NFS_URL_OPTIONS: &[&str] = &[
    "uid",
    "gid",
    "tcp-syncnt",
    "readahead",
    "page-cache",
    "debug",
];

/// A parsed `nfs://HOST/EXPORT[?options]` URL (a string in TOML and config.json).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NfsUrl {
    /// Server host name or IPv4 address.
    pub host: String,
    /// Export path, absolute, without a trailing '/'.
    pub export: String,
    /// `key=value` options, in the order given.
    pub options: Vec<(String, String)>,
}

impl NfsUrl {
    /// Parses and validates; errors say what is wrong and what the form is.
    pub fn parse(url: &str) -> Result<NfsUrl, StorageError> {
        let bad = |why: &str| {
            StorageError::Invalid(format!(
                "bad NFS URL '{url}': {why} (expected nfs://HOST/EXPORT[?uid=N&gid=N...])"
            ))
        };
        let rest = url
            .strip_prefix("nfs://")
            .ok_or_else(|| bad("it must start with nfs://"))?;
        let (main, query) = match rest.split_once('?') {
            Some((m, q)) => (m, Some(q)),
            None => (rest, None),
        };
        let (host, path) = main.split_once('/').ok_or_else(|| bad("no export path"))?;
        validate_host(host).map_err(|w| bad(&w))?;
        let export = format!("/{}", path.trim_end_matches('/'));
        validate_export(&export).map_err(|w| bad(&w))?;
        let options = parse_options(query.unwrap_or("")).map_err(|w| bad(&w))?;
        Ok(NfsUrl {
            host: host.to_string(),
            export,
            options,
        })
    }

    /// The `?uid=&gid=` the URL claims, as QEMU's identity (both, or none: root).
    pub fn identity(&self) -> Option<NetAuth> {
        let get = |k: &str| {
            self.options
                .iter()
                .find(|(o, _)| o == k)
                .and_then(|(_, v)| v.parse().ok())
        };
        Some(NetAuth::NfsIdentity {
            uid: get("uid")?,
            gid: get("gid")?,
        })
    }

    /// The URL of file `name` directly in the export (libnfs mounts everything up to the last
    /// '/', so images must sit in the export's root).
    pub fn image_url(&self, name: &str) -> String {
        let mut s = format!("nfs://{}{}/{name}", self.host, self.export);
        if !self.options.is_empty() {
            let q: Vec<String> = self
                .options
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            s.push('?');
            s.push_str(&q.join("&"));
        }
        s
    }
}

impl std::fmt::Display for NfsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nfs://{}{}", self.host, self.export)?;
        for (i, (k, v)) in self.options.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl std::str::FromStr for NfsUrl {
    type Err = StorageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NfsUrl::parse(s)
    }
}

impl TryFrom<String> for NfsUrl {
    type Error = StorageError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        NfsUrl::parse(&s)
    }
}

impl From<NfsUrl> for String {
    fn from(u: NfsUrl) -> String {
        u.to_string()
    }
}

fn validate_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host".into());
    }
    if host.contains(':') {
        return Err("a port cannot be given (QEMU's nfs driver asks the portmapper)".into());
    }
    if host.contains('@') {
        return Err("user@ is not supported; use ?uid=N&gid=N".into());
    }
    let ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    if !ok || host.starts_with(['-', '.']) {
        return Err(format!("host '{host}' is not a host name or IPv4 address"));
    }
    Ok(())
}

fn validate_export(export: &str) -> Result<(), String> {
    if export == "/" {
        return Err("no export path".into());
    }
    if export.contains("//") || export.split('/').any(|c| c == "." || c == "..") {
        return Err(format!(
            "export '{export}' has empty, '.' or '..' components"
        ));
    }
    let ok = export
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
    if !ok {
        return Err(format!(
            "export '{export}' may contain only letters, digits, '/', '.', '_', '-'"
        ));
    }
    Ok(())
}

fn parse_options(q: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("option '{part}' has no '='"))?;
        if !NFS_URL_OPTIONS.contains(&k) {
            return Err(format!(
                "unknown option '{k}' (valid: {})",
                NFS_URL_OPTIONS.join(", ")
            ));
        }
        if v.is_empty() || !v.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("option {k} needs a number, got '{v}'"));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// libvirt's view of image `name` in `export` on `host` (libnfs, NFSv3, portmapper ports), as
/// `identity` (`None`: root).
pub fn network_source(
    host: &str,
    export: &str,
    name: &str,
    identity: Option<NetAuth>,
) -> DiskSource {
    DiskSource::Network {
        protocol: NetProtocol::Nfs,
        name: format!("{export}/{name}"),
        host: host.to_string(),
        port: None,
        auth: identity,
    }
}

/// The identity QEMU claims on the embedded ganesha: the export's owner.
pub fn embedded_identity() -> NetAuth {
    NetAuth::NfsIdentity {
        uid: ganesha::EXPORT_UID,
        gid: ganesha::EXPORT_GID,
    }
}

/// Which NFS server the backend uses.
#[derive(Debug, Clone)]
pub enum NfsMode {
    /// Our own ganesha.
    Embedded(Arc<Ganesha>),
    /// A user's server, by URL.
    External(NfsUrl),
    /// An export mounted on the host at this directory.
    Mounted(PathBuf),
}

/// One image created by [`NfsBackend::provision`], for teardown.
#[derive(Debug, Clone)]
struct Created {
    url: Option<String>,
    local: Option<PathBuf>,
    /// qemu-img create succeeded. An unconfirmed external image is truncated best-effort: the
    /// server may be the very thing that failed.
    confirmed: bool,
}

/// Image files on NFS.
#[derive(Debug)]
pub struct NfsBackend {
    mode: NfsMode,
    created: Vec<Created>,
    /// The run's bases, for instance disks made from one (embedded server only).
    bases: Option<Bases>,
    /// The newest image's file on this machine, for [`StorageBackend::allocated_bytes`].
    made: Option<PathBuf>,
}

impl NfsBackend {
    fn with(mode: NfsMode) -> Self {
        NfsBackend {
            mode,
            created: Vec::new(),
            bases: None,
            made: None,
        }
    }

    /// Disks made from the run's base images in `bases` (cells with `--instance-disk` overlay
    /// or copy): the base is written into the embedded server's export, beside the instances.
    pub fn from_bases(mut self, bases: Bases) -> Self {
        self.bases = Some(bases);
        self
    }

    /// The embedded server's URL of `base` (in its export's `_base/`).
    fn base_url(&self, base: &BaseImage) -> Result<String, StorageError> {
        let name = base
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        match &self.mode {
            NfsMode::Embedded(g) => Ok(g.url_for(&format!("{BASE_DIR}/{name}"))),
            _ => Err(Unsupported::BaseNotHere("a base on NFS: embedded server only").into()),
        }
    }

    /// The base `cell`'s disk starts from, written into the export on first use; `None` for a
    /// flat disk. Only the embedded server's export is a directory of this machine.
    fn base_for(
        &self,
        cell: &Cell,
        size_bytes: u64,
    ) -> Result<Option<Arc<BaseImage>>, StorageError> {
        if !cell.instance.from_base() {
            return Ok(None);
        }
        match (&self.mode, &self.bases) {
            (NfsMode::Embedded(g), Some(bases)) => {
                Ok(Some(bases.get(&g.export_dir().join(BASE_DIR), size_bytes)?))
            }
            _ => Err(Unsupported::BaseNotHere(
                "an instance disk from the run's base on NFS needs the embedded server (the \
                 base is written into its export); --nfs and --nfs-mount take flat disks",
            )
            .into()),
        }
    }

    /// On the embedded ganesha.
    pub fn embedded(server: Arc<Ganesha>) -> Self {
        Self::with(NfsMode::Embedded(server))
    }

    /// On an external server, `nfs://HOST/EXPORT[?options]`; errors on a bad URL.
    pub fn external(url: &str) -> Result<Self, StorageError> {
        Ok(Self::external_url(NfsUrl::parse(url)?))
    }

    /// On an external server, by an already parsed URL.
    pub fn external_url(url: NfsUrl) -> Self {
        Self::with(NfsMode::External(url))
    }

    /// On an export already mounted at `dir` on the host (a file disk).
    pub fn mounted(dir: PathBuf) -> Self {
        Self::with(NfsMode::Mounted(dir))
    }

    /// The mode.
    pub fn mode(&self) -> &NfsMode {
        &self.mode
    }

    fn confirm_last(&mut self) {
        if let Some(c) = self.created.last_mut() {
            c.confirmed = true;
        }
    }

    fn image_name(&mut self, cell: &Cell) -> String {
        super::image_name(&cmd::unique_tag(), cell)
    }

    fn provision_net(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
    ) -> Result<ProvisionedDisk, StorageError> {
        let name = self.image_name(cell);
        let (host, export, url, local, identity, mut params) = match &self.mode {
            NfsMode::Embedded(g) => {
                let mut p = BTreeMap::new();
                p.insert("mode".into(), "embedded".into());
                p.insert("server_pid".into(), g.pid().to_string());
                p.insert("server_software".into(), "nfs-ganesha (FSAL VFS)".into());
                p.insert("link".into(), g.net().link().to_string());
                let local = g.export_dir().join(&name);
                (
                    g.host().to_string(),
                    g.export_path(),
                    g.url_for(&name),
                    Some(local),
                    Some(embedded_identity()),
                    p,
                )
            }
            NfsMode::External(u) => {
                let mut p = BTreeMap::new();
                p.insert("mode".into(), "external".into());
                p.insert(
                    "leftover".into(),
                    "an empty file stays after teardown".into(),
                );
                for (k, v) in &u.options {
                    p.insert(format!("option_{k}"), v.clone());
                }
                (
                    u.host.clone(),
                    u.export.clone(),
                    u.image_url(&name),
                    None,
                    u.identity(),
                    p,
                )
            }
            NfsMode::Mounted(_) => unreachable!("provision_net is for network modes"),
        };
        self.created.push(Created {
            url: Some(url.clone()),
            local: local.clone(),
            confirmed: false,
        });
        self.make_image(cell, size_bytes, &url, local.as_deref(), &mut params)?;
        self.confirm_last();
        self.made = local.clone();
        if let Some(local) = &local {
            ganesha::restrict_image(local)?;
        }
        params.insert("server".into(), host.clone());
        params.insert("protocol".into(), "nfs".into());
        // QEMU 7.2's nfs driver (libnfs) mounts with NFSv3; there is no version option.
        params.insert("nfs_version".into(), "3".into());
        params.insert("export".into(), export.clone());
        params.insert("url".into(), url);
        params.insert("image".into(), name.clone());
        Ok(ProvisionedDisk {
            source: network_source(&host, &export, &name, identity),
            format: cell.format,
            size_bytes,
            host_path: local,
            params,
        })
    }

    /// The image at `url`: empty, an overlay on the run's base, or a copy of it (through its
    /// file on this machine, `local`), with the base's params.
    fn make_image(
        &self,
        cell: &Cell,
        size_bytes: u64,
        url: &str,
        local: Option<&Path>,
        params: &mut BTreeMap<String, String>,
    ) -> Result<(), StorageError> {
        let base = self.base_for(cell, size_bytes)?;
        match &base {
            Some(b) if cell.instance == InstanceDisk::Overlay => {
                overlay_on(&self.base_url(b)?, url, size_bytes)?
            }
            _ => {
                let size = size_bytes.to_string();
                cmd::run(
                    "qemu-img",
                    &["create", "-q", "-f", cell.format.as_str(), url, &size],
                )?;
            }
        }
        if let (Some(b), Some(file)) = (&base, local) {
            if cell.instance == InstanceDisk::Copy {
                super::local::copy_base(b, file, cell.format)?;
            }
            super::base::record(params, cell, b);
        }
        Ok(())
    }

    fn provision_mounted(
        &mut self,
        dir: PathBuf,
        cell: &Cell,
        size_bytes: u64,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.base_for(cell, size_bytes)?;
        let name = self.image_name(cell);
        let path = dir.join(&name);
        self.created.push(Created {
            url: None,
            local: Some(path.clone()),
            confirmed: false,
        });
        let p = path.to_string_lossy().into_owned();
        cmd::run(
            "qemu-img",
            &[
                "create",
                "-q",
                "-f",
                cell.format.as_str(),
                &p,
                &size_bytes.to_string(),
            ],
        )?;
        let mut params = BTreeMap::new();
        params.insert("mode".into(), "mounted".into());
        params.insert("protocol".into(), "nfs".into());
        params.insert("mount".into(), dir.display().to_string());
        params.insert("image".into(), p);
        if let Some((src, fstype)) = mount_source(&dir) {
            params.insert("server".into(), src);
            params.insert("nfs_version".into(), fstype);
        }
        Ok(ProvisionedDisk {
            source: DiskSource::File { path: path.clone() },
            format: cell.format,
            size_bytes,
            host_path: Some(path),
            params,
        })
    }
}

/// `(source, fstype)` of the mount that holds `dir`, from /proc/self/mounts (longest prefix).
fn mount_source(dir: &Path) -> Option<(String, String)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let dir = dir.canonicalize().ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3).then(|| (f[0].to_string(), PathBuf::from(f[1]), f[2].to_string()))
        })
        .filter(|(_, mp, _)| dir.starts_with(mp))
        .max_by_key(|(_, mp, _)| mp.as_os_str().len())
        .map(|(src, _, fs)| (src, fs))
}

/// The run's bases in an export: a subdirectory, as Nova's `_base/`.
const BASE_DIR: &str = "_base";

/// A qcow2 overlay at `url` whose backing file is the base at `base_url`, through the same
/// server and identity. The full URL goes in the overlay's header: QEMU 7.2's nfs driver
/// cannot resolve a relative backing name ("Cannot generate a base directory for NFS node").
/// Made through the server, as QEMU's identity, like every image on the export.
fn overlay_on(base_url: &str, url: &str, size_bytes: u64) -> Result<(), StorageError> {
    let size = size_bytes.to_string();
    let args = [
        "create", "-q", "-f", "qcow2", "-b", base_url, "-F", "raw", url, &*size,
    ];
    cmd::run("qemu-img", &args).map(drop)
}

/// Removes one created image; missing is fine.
fn remove(c: &Created, embedded_or_mounted: bool) -> Result<(), StorageError> {
    if let (true, Some(local)) = (embedded_or_mounted, &c.local) {
        return match std::fs::remove_file(local) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StorageError::Io {
                context: format!("removing {}", local.display()),
                source: e,
            }),
            _ => Ok(()),
        };
    }
    if let Some(url) = &c.url {
        // External server: truncate (see the module doc). A file that was never created is
        // created empty here, which is the same leftover.
        let r = cmd::run("qemu-img", &["create", "-q", "-f", "raw", url, "0"]);
        if c.confirmed {
            r?;
        }
    }
    Ok(())
}

impl StorageBackend for NfsBackend {
    fn check(&self) -> Result<(), Unsupported> {
        cmd::require_qemu_img()?;
        match &self.mode {
            NfsMode::Embedded(g) if !cmd::pid_alive(g.pid()) => Err(Unsupported::ServerGone {
                server: "ganesha",
                pid: g.pid(),
            }),
            NfsMode::Mounted(dir) => check_mounted(dir),
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
        match &self.mode {
            NfsMode::Mounted(dir) => {
                let dir = dir.clone();
                self.provision_mounted(dir, cell, size_bytes)
            }
            _ => self.provision_net(cell, size_bytes),
        }
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        let local = !matches!(self.mode, NfsMode::External(_));
        while let Some(c) = self.created.pop() {
            if let Err(e) = remove(&c, local) {
                self.created.push(c);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The image file's blocks in the embedded server's export (an overlay's own, not its
    /// base's); `None` on an external server.
    fn allocated_bytes(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.made.as_ref()?).ok()?;
        Some(meta.blocks() * 512)
    }
}

/// A mounted export must be a real NFS mount (statfs says NFS), else it is just a directory.
fn check_mounted(dir: &Path) -> Result<(), Unsupported> {
    const NFS_SUPER_MAGIC: i64 = 0x6969;
    let st = nix::sys::statfs::statfs(dir).map_err(|e| Unsupported::MountUnreadable {
        dir: dir.to_path_buf(),
        detail: e.to_string(),
    })?;
    #[allow(clippy::unnecessary_cast)]
    let magic = st.filesystem_type().0 as i64;
    if magic != NFS_SUPER_MAGIC {
        return Err(Unsupported::NotNfs {
            dir: dir.to_path_buf(),
            magic,
        });
    }
    Ok(())
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for NfsBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `nfs` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Nfs
    }

    /// An overlay on the run's base in the export (Nova's `qcow2` on shared storage, the
    /// base in `_base/` beside the instances) or a full copy of it; embedded server only.
    fn instances(&self) -> &'static [InstanceDisk] {
        &[
            InstanceDisk::Flat,
            InstanceDisk::Overlay,
            InstanceDisk::Copy,
        ]
    }

    fn net_protocol(&self) -> Option<super::NetProtocol> {
        Some(super::NetProtocol::Nfs)
    }

    fn embedded_server(&self) -> Option<&'static str> {
        Some(<Ganesha as super::servers::EmbeddedServer>::NAME)
    }

    fn in_default_matrix(&self) -> bool {
        true
    }

    fn remote_blocker(&self, opts: &super::options::StorageConfig) -> Option<super::RemoteBlocker> {
        if opts.nfs_mount.is_some() {
            Some(super::RemoteBlocker::NfsMountHere)
        } else {
            opts.nfs
                .is_none()
                .then_some(super::RemoteBlocker::EmbeddedServer(self.backend()))
        }
    }

    fn external_flag(&self, opts: &super::options::StorageConfig) -> Option<&'static str> {
        if opts.nfs.is_some() {
            Some("--nfs")
        } else {
            opts.nfs_mount.is_some().then_some("--nfs-mount")
        }
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        cell: &Cell,
        _work: &Path,
        servers: &Path,
    ) -> DiskSource {
        let image = super::image_name(super::PLANNED_TAG, cell);
        match (&opts.nfs_mount, &opts.nfs) {
            (Some(m), _) => DiskSource::File {
                path: m.join(image),
            },
            (None, Some(url)) => network_source(&url.host, &url.export, &image, None),
            (None, None) => network_source(
                super::netns::PLANNED_SERVER,
                &servers.join("ganesha/export").to_string_lossy(),
                &image,
                Some(embedded_identity()),
            ),
        }
    }

    fn open(
        &self,
        opts: &super::options::StorageConfig,
        cell: &Cell,
        servers: &mut super::servers::Servers,
        _work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        let plain = super::Opened::plain;
        Ok(match (&opts.nfs_mount, &opts.nfs) {
            (Some(m), _) => plain(Box::new(NfsBackend::mounted(m.clone()))),
            (None, Some(url)) => plain(Box::new(NfsBackend::external_url(url.clone()))),
            (None, None) => {
                let g = servers.ganesha(cell.link)?;
                let server = Some(super::servers::identity(g.as_ref()));
                let b = NfsBackend::embedded(g);
                let b = match cell.instance.from_base() {
                    true => b.from_bases(servers.bases()),
                    false => b,
                };
                super::Opened {
                    backend: Box::new(b),
                    server,
                    companions: vec![],
                    provenance: None,
                }
            }
        })
    }

    fn host_support(&self) -> Result<String, String> {
        super::servers::installed::<Ganesha>()
    }

    fn leftover_processes(&self) -> &'static [&'static str] {
        &[
            <Ganesha as super::servers::EmbeddedServer>::BINARY,
            "rpcbind",
        ]
    }
}

/// The nfs backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NfsArgs {
    /// External NFS server nfs://HOST/EXPORT. [default: an embedded nfs-ganesha on 127.0.0.1]
    #[arg(long)]
    pub nfs: Option<String>,
    /// An NFS export already mounted on this host (file disks instead of libnfs).
    #[arg(long)]
    pub nfs_mount: Option<PathBuf>,
}

impl NfsArgs {
    /// Sets the options given on the command line; a bad value names its flag.
    pub fn apply(&self, s: &mut StorageConfig) -> Result<(), String> {
        if let Some(m) = &self.nfs_mount {
            s.nfs_mount = Some(m.clone());
        }
        if let Some(u) = &self.nfs {
            s.nfs = Some(u.parse().map_err(|e| format!("--nfs: {e}"))?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls_parse() {
        let u = NfsUrl::parse("nfs://nas.example/srv/vm/").unwrap();
        assert_eq!(u.host, "nas.example");
        assert_eq!(u.export, "/srv/vm");
        assert!(u.options.is_empty());
        assert_eq!(u.image_url("a.qcow2"), "nfs://nas.example/srv/vm/a.qcow2");
        let u = NfsUrl::parse("nfs://10.0.0.2/export?uid=0&gid=0").unwrap();
        assert_eq!(
            u.options,
            vec![("uid".into(), "0".into()), ("gid".into(), "0".into())]
        );
        assert_eq!(u.image_url("x"), "nfs://10.0.0.2/export/x?uid=0&gid=0");
        assert_eq!(u.identity(), Some(NetAuth::NfsIdentity { uid: 0, gid: 0 }));
        let u = NfsUrl::parse("nfs://10.0.0.2/export?uid=7").unwrap();
        assert_eq!(u.identity(), None);
    }

    #[test]
    fn bad_urls_say_why() {
        let cases = [
            ("http://h/x", "must start with nfs://"),
            ("nfs://host", "no export path"),
            ("nfs://host/", "no export path"),
            ("nfs:///export", "no host"),
            ("nfs://h:2049/export", "a port cannot be given"),
            ("nfs://h/ex port", "may contain only"),
            ("nfs://h/a/../b", "'..'"),
            (
                "nfs://h/e?version=4",
                "unknown option 'version' (valid: uid, gid",
            ),
            ("nfs://h/e?uid=root", "needs a number"),
            ("nfs://h/e?uid", "has no '='"),
            ("nfs://h_x/e", "not a host name"),
        ];
        for (url, want) in cases {
            let e = NfsUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(want), "{url}: {e}");
            assert!(e.contains("expected nfs://HOST/EXPORT"), "{url}: {e}");
        }
    }

    #[test]
    #[ignore = "host: root"]
    fn mounted_mode_refuses_a_non_nfs_dir() {
        let b = NfsBackend::mounted("/var/tmp".into());
        let e = b.check().unwrap_err();
        assert!(matches!(e, Unsupported::NotNfs { .. }), "{e:?}");
        assert!(e.to_string().contains("not on an NFS mount"), "{e}");
    }
}
