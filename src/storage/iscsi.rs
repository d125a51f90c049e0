//! iSCSI storage backend: a LUN QEMU reaches through libiscsi, raw or with a qcow2 formatted
//! onto it by qemu-img.
//!
//! - embedded: our tgtd ([`super::tgt::Tgt`]); per cell a sparse backing file in the work dir,
//!   a new target with a run-unique IQN, LUN 1 on the file, and an ACL for 127.0.0.1 only.
//!   Teardown deletes the target (`--force`) and the file.
//! - external: `iscsi://PORTAL[:PORT]/IQN/LUN`, a LUN the user gives us whole. Its size is the
//!   LUN's. A qcow2 is made as a header file in the work dir and copied onto the LUN's start.
//!   Teardown of a qcow2 zeroes its first MiB over libiscsi (`qemu-io`), so the next run
//!   does not find a stale qcow2 header; a raw LUN keeps what the guest wrote.
//!   With CHAP (`--iscsi-chap-file`, [`super::chap::RunChap`]) QEMU logs in through the run's
//!   libvirt secret, and vmbench's own qemu-img and qemu-io through `--object secret,file=`
//!   ([`LunAccess`]): the secret is never on a command line.

use super::chap::{Chap, RunChap, SecretFile};
use super::cmd;
use super::options::StorageConfig;
use super::tgt::Tgt;
use super::{
    DiskSource, NetAuth, NetProtocol, ProvisionedDisk, StorageBackend, StorageError, Unsupported,
};
use crate::cell::{Cell, Format};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A parsed `iscsi://PORTAL[:PORT]/IQN/LUN` URL (a string in TOML and config.json).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IscsiUrl {
    /// Portal host name or IPv4 address.
    pub host: String,
    /// Portal port, when given (3260 otherwise).
    pub port: Option<u16>,
    /// Target name (iqn., eui. or naa. form).
    pub target: String,
    /// Logical unit number.
    pub lun: u32,
}

impl IscsiUrl {
    /// Parses and validates; errors say what is wrong and what the form is.
    pub fn parse(url: &str) -> Result<IscsiUrl, StorageError> {
        let bad = |why: &str| {
            StorageError::Invalid(format!(
                "bad iSCSI URL '{url}': {why} (expected iscsi://PORTAL[:PORT]/IQN/LUN)"
            ))
        };
        let rest = url
            .strip_prefix("iscsi://")
            .ok_or_else(|| bad("it must start with iscsi://"))?;
        if rest.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if rest.contains('?') {
            return Err(bad("URL options are not supported"));
        }
        let parts: Vec<&str> = rest.split('/').collect();
        let [portal, target, lun] = parts[..] else {
            return Err(bad("it needs exactly a portal, a target name and a LUN"));
        };
        let (host, port) = match portal.split_once(':') {
            Some((h, p)) => {
                let port: u16 = p
                    .parse()
                    .map_err(|_| bad(&format!("port '{p}' is not 1-65535")))?;
                if port == 0 {
                    return Err(bad("port 0 is not valid"));
                }
                (h, Some(port))
            }
            None => (portal, None),
        };
        let host_ok = !host.is_empty()
            && !host.starts_with(['-', '.'])
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !host_ok {
            return Err(bad(&format!(
                "portal host '{host}' is not a host name or IPv4 address"
            )));
        }
        validate_target(target).map_err(|w| bad(&w))?;
        let lun: u32 = lun
            .parse()
            .map_err(|_| bad(&format!("LUN '{lun}' is not a number")))?;
        if lun > 16383 {
            return Err(bad(&format!("LUN {lun} is above 16383")));
        }
        Ok(IscsiUrl {
            host: host.to_string(),
            port,
            target: target.to_string(),
            lun,
        })
    }

    /// The URL QEMU opens.
    pub fn to_url(&self) -> String {
        match self.port {
            Some(p) => format!("iscsi://{}:{p}/{}/{}", self.host, self.target, self.lun),
            None => format!("iscsi://{}/{}/{}", self.host, self.target, self.lun),
        }
    }
}

impl std::fmt::Display for IscsiUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_url())
    }
}

impl std::str::FromStr for IscsiUrl {
    type Err = StorageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IscsiUrl::parse(s)
    }
}

impl TryFrom<String> for IscsiUrl {
    type Error = StorageError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        IscsiUrl::parse(&s)
    }
}

impl From<IscsiUrl> for String {
    fn from(u: IscsiUrl) -> String {
        u.to_url()
    }
}

/// RFC 3720 names: `iqn.YYYY-MM.reverse.domain[:anything]`, `eui.` + 16 hex, or `naa.` + hex;
/// lower case letters, digits, '.', '-', ':'.
pub fn validate_target(t: &str) -> Result<(), String> {
    let ok_chars = t
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-:".contains(c));
    if !ok_chars {
        return Err(format!(
            "target '{t}' may contain only a-z, 0-9, '.', '-', ':'"
        ));
    }
    if t.len() > 223 {
        return Err(format!("target '{t}' is longer than 223 bytes"));
    }
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    let valid = if let Some(r) = t.strip_prefix("iqn.") {
        let date = r.get(..7).unwrap_or("");
        let d: Vec<char> = date.chars().collect();
        d.len() == 7
            && d[..4].iter().all(char::is_ascii_digit)
            && d[4] == '-'
            && d[5..].iter().all(char::is_ascii_digit)
            && r.len() > 8
            && r.as_bytes().get(7) == Some(&b'.')
    } else if let Some(r) = t.strip_prefix("eui.") {
        r.len() == 16 && hex(r)
    } else if let Some(r) = t.strip_prefix("naa.") {
        (r.len() == 16 || r.len() == 32) && hex(r)
    } else {
        false
    };
    if valid {
        Ok(())
    } else {
        Err(format!(
            "target '{t}' is not an iqn.YYYY-MM.domain[:name], eui. or naa. name"
        ))
    }
}

/// What a provision created, for teardown.
#[derive(Debug, Clone)]
enum Created {
    /// An embedded target and its backing file.
    Target { tid: u32, file: PathBuf },
    /// A qcow2 header written onto the external LUN; `confirmed` once qemu-img succeeded (an
    /// unconfirmed one is wiped best-effort: the LUN may be what failed).
    ExternalQcow2 { confirmed: bool },
}

/// Which target the backend uses.
#[derive(Debug, Clone)]
pub enum IscsiMode {
    /// Our own tgtd.
    Embedded(Arc<Tgt>),
    /// A user's LUN, with CHAP when the user gave credentials.
    External(IscsiUrl, Option<Arc<RunChap>>),
}

/// LUNs over iSCSI.
#[derive(Debug)]
pub struct IscsiBackend {
    mode: IscsiMode,
    created: Vec<Created>,
}

impl IscsiBackend {
    /// On the embedded tgtd.
    pub fn embedded(tgt: Arc<Tgt>) -> Self {
        IscsiBackend {
            mode: IscsiMode::Embedded(tgt),
            created: Vec::new(),
        }
    }

    /// On an external LUN, `iscsi://PORTAL[:PORT]/IQN/LUN`; errors on a bad URL.
    pub fn external(url: &str) -> Result<Self, StorageError> {
        Ok(Self::external_url(IscsiUrl::parse(url)?, None))
    }

    /// On an external LUN, by an already parsed URL, logging in with `chap` when given.
    pub fn external_url(url: IscsiUrl, chap: Option<Arc<RunChap>>) -> Self {
        IscsiBackend {
            mode: IscsiMode::External(url, chap),
            created: Vec::new(),
        }
    }

    /// The mode.
    pub fn mode(&self) -> &IscsiMode {
        &self.mode
    }

    fn provision_embedded(
        &mut self,
        tgt: Arc<Tgt>,
        cell: &Cell,
        size_bytes: u64,
        work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        let (tid, iqn) = tgt.next_target();
        // A qcow2 on the LUN needs room for its metadata when the guest fills the disk.
        let lun_bytes = match cell.format {
            Format::Raw => size_bytes,
            Format::Qcow2 => cmd::qcow2_max_size(size_bytes),
        }
        .div_ceil(512)
            * 512;
        let file = work.join(format!(
            "iscsi-{}.lun",
            iqn.rsplit(':').next().unwrap_or("x")
        ));
        self.created.push(Created::Target {
            tid,
            file: file.clone(),
        });
        create_backing(&file, cell.format, size_bytes, lun_bytes)?;
        tgt.add_target(tid, &iqn, &file)?;
        let url = tgt.url_for(&iqn, 1);
        let host = tgt.host().to_string();
        let mut params = base_params(&url, &host, Some(tgt.portal_port()), &iqn, 1);
        params.insert("link".into(), tgt.net().link().to_string());
        params.insert("mode".into(), "embedded".into());
        params.insert("server_software".into(), "tgt (tgtd, user space)".into());
        params.insert("server_pid".into(), tgt.pid().to_string());
        params.insert("tid".into(), tid.to_string());
        params.insert("backing_file".into(), file.display().to_string());
        params.insert("lun_bytes".into(), lun_bytes.to_string());
        Ok(ProvisionedDisk {
            source: network_source(&iqn, 1, &host, Some(tgt.portal_port()), tgt.auth()),
            format: cell.format,
            size_bytes,
            host_path: Some(file),
            params,
        })
    }

    fn provision_external(
        &mut self,
        u: IscsiUrl,
        chap: Option<Arc<RunChap>>,
        cell: &Cell,
        size_bytes: u64,
        work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        let url = u.to_url();
        let lun = LunAccess {
            url: &u,
            chap: chap.as_deref().map(RunChap::chap),
        };
        let lun_bytes = lun.size()?;
        let guest_bytes = match cell.format {
            Format::Raw => lun_bytes,
            Format::Qcow2 => {
                let v = cmd::qcow2_fit(lun_bytes);
                self.created
                    .push(Created::ExternalQcow2 { confirmed: false });
                lun.format_qcow2(v, work)?;
                if let Some(Created::ExternalQcow2 { confirmed }) = self.created.last_mut() {
                    *confirmed = true;
                }
                v
            }
        };
        let mut params = base_params(&url, &u.host, u.port, &u.target, u.lun);
        params.insert("mode".into(), "external".into());
        params.insert("lun_bytes".into(), lun_bytes.to_string());
        params.insert("requested_bytes".into(), size_bytes.to_string());
        if let Some(c) = &chap {
            params.insert("chap_username".into(), c.chap().username().to_string());
        }
        Ok(ProvisionedDisk {
            source: network_source(&u.target, u.lun, &u.host, u.port, chap.map(|c| c.auth())),
            format: cell.format,
            size_bytes: guest_bytes,
            host_path: None,
            params,
        })
    }
}

/// The id of the secret object on vmbench's own qemu-img and qemu-io command lines.
const SECRET_ID: &str = "chap0";

/// How vmbench's own qemu-img and qemu-io reach an external LUN: `--image-opts` for QEMU's
/// iscsi driver (a URL has no place for a secret object), and with CHAP the user name and a
/// `password-secret` read from a [`SecretFile`].
pub struct LunAccess<'a> {
    /// The LUN.
    pub url: &'a IscsiUrl,
    /// The credentials, when the target wants CHAP.
    pub chap: Option<&'a Chap>,
}

impl LunAccess<'_> {
    /// The argv of `PROGRAM pre... [--object secret,...] FLAG post... SPEC`, where FLAG is
    /// `--image-opts` or `--target-image-opts` and SPEC the LUN's driver options. `secret` is
    /// the file holding the secret (required with CHAP).
    pub fn argv(
        &self,
        secret: Option<&Path>,
        pre: &[&str],
        flag: &str,
        post: &[&str],
    ) -> Vec<String> {
        let u = self.url;
        let mut spec = format!(
            "driver=iscsi,transport=tcp,portal={}:{},target={},lun={}",
            u.host,
            u.port.unwrap_or(3260),
            u.target,
            u.lun
        );
        let mut argv: Vec<String> = pre.iter().map(|a| a.to_string()).collect();
        if let (Some(c), Some(file)) = (self.chap, secret) {
            argv.push("--object".into());
            argv.push(format!(
                "secret,id={SECRET_ID},file={}",
                opt_value(&file.to_string_lossy())
            ));
            spec.push_str(&format!(
                ",user={},password-secret={SECRET_ID}",
                opt_value(c.username())
            ));
        }
        argv.push(flag.into());
        argv.extend(post.iter().map(|a| a.to_string()));
        argv.push(spec);
        argv
    }

    /// Runs `program` with [`Self::argv`], the secret in a file for just this call; `what`
    /// names the step in an error.
    fn run(
        &self,
        what: &str,
        program: &str,
        pre: &[&str],
        (flag, post): (&str, &[&str]),
    ) -> Result<String, StorageError> {
        let file = self.chap.map(SecretFile::write).transpose()?;
        let argv = self.argv(file.as_ref().map(SecretFile::path), pre, flag, post);
        cmd::run(program, &argv).map_err(|e| self.context(what, e))
    }

    /// Names the step, the LUN and who logged in instead of the long argv (qemu's own message,
    /// in the detail, repeats the driver options), so an authentication failure reads as one.
    fn context(&self, what: &str, e: StorageError) -> StorageError {
        let StorageError::Command { detail, .. } = e else {
            return e;
        };
        let who = match self.chap {
            Some(c) => format!(" as CHAP user '{}'", c.username()),
            None => " without CHAP".to_string(),
        };
        StorageError::Command {
            command: format!("{what} on LUN {}{who}", self.url),
            detail,
        }
    }

    /// The LUN's size in bytes (the raw device, whatever is on it).
    fn size(&self) -> Result<u64, StorageError> {
        let out = self.run(
            "qemu-img info",
            "qemu-img",
            &["info", "--output=json"],
            ("--image-opts", &[]),
        )?;
        cmd::virtual_size_from_json(&out, &self.url.to_url())
    }

    /// A qcow2 of virtual size `v` onto the LUN: made as a file in `work` (its header and
    /// tables; the rest of the LUN is room to grow, as on the embedded LUN), then copied onto
    /// the LUN's start. `qemu-img create` on the LUN itself would need the secret in its URL.
    fn format_qcow2(&self, v: u64, work: &Path) -> Result<(), StorageError> {
        let header = work.join(format!("iscsi-header-{}.qcow2", cmd::unique_tag()));
        let h = header.to_string_lossy().into_owned();
        let r = cmd::run(
            "qemu-img",
            &["create", "-q", "-f", "qcow2", &h, &v.to_string()],
        )
        .and_then(|_| {
            self.run(
                "qemu-img convert (the qcow2 header onto the LUN)",
                "qemu-img",
                &["convert", "-n", "-f", "raw", &h],
                ("--target-image-opts", &[]),
            )
        });
        let _ = std::fs::remove_file(&header);
        r.map(drop)
    }

    /// Zeroes the first MiB (a qcow2 header) so the next user does not find a stale image.
    fn wipe_header(&self) -> Result<(), StorageError> {
        self.run(
            "qemu-io (wiping the qcow2 header)",
            "qemu-io",
            &[],
            ("--image-opts", &["-c", "write -z 0 1M"]),
        )
        .map(drop)
    }
}

/// A value in QEMU's `key=value,...` option syntax: a comma is written twice.
fn opt_value(v: &str) -> String {
    v.replace(',', ",,")
}

fn base_params(
    url: &str,
    host: &str,
    port: Option<u16>,
    iqn: &str,
    lun: u32,
) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    p.insert("protocol".into(), "iscsi".into());
    p.insert("server".into(), host.to_string());
    p.insert("port".into(), port.unwrap_or(3260).to_string());
    p.insert("iqn".into(), iqn.to_string());
    p.insert("lun".into(), lun.to_string());
    p.insert("url".into(), url.to_string());
    p
}

/// libvirt's view of LUN `lun` of target `iqn` at the portal `host[:port]`, logging in with
/// `auth` (CHAP) when given.
pub fn network_source(
    iqn: &str,
    lun: u32,
    host: &str,
    port: Option<u16>,
    auth: Option<NetAuth>,
) -> DiskSource {
    DiskSource::Network {
        protocol: NetProtocol::Iscsi,
        name: format!("{iqn}/{lun}"),
        host: host.to_string(),
        port,
        auth,
    }
}

/// The LUN's backing file: `lun_bytes` long and sparse; for qcow2, formatted on the host before
/// tgtd sees it (qcow2 finds free clusters by its refcounts, so the zeros after its header are
/// room to grow, as on a fixed-size LUN). Done on the host, not over iSCSI, so that no CHAP
/// secret has to be passed to a qemu-img command line.
fn create_backing(
    path: &Path,
    format: Format,
    size_bytes: u64,
    lun_bytes: u64,
) -> Result<(), StorageError> {
    create_sparse(path, 0)?;
    if format == Format::Qcow2 {
        let p = path.to_string_lossy();
        cmd::run(
            "qemu-img",
            &["create", "-q", "-f", "qcow2", &p, &size_bytes.to_string()],
        )?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(lun_bytes))
        .map_err(|source| StorageError::Io {
            context: format!("sizing {}", path.display()),
            source,
        })
}

/// A sparse file of `bytes` (the LUN's backing store).
fn create_sparse(path: &Path, bytes: u64) -> Result<(), StorageError> {
    let io = |source| StorageError::Io {
        context: format!("creating {}", path.display()),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    f.set_len(bytes).map_err(io)
}

fn undo(c: &Created, mode: &IscsiMode) -> Result<(), StorageError> {
    match c {
        Created::Target { tid, file } => {
            // A tgtd that died (killed mid-run) took its targets with it.
            if let IscsiMode::Embedded(t) = mode {
                if t.running() {
                    t.delete_target(*tid)?;
                }
            }
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StorageError::Io {
                    context: format!("removing {}", file.display()),
                    source: e,
                }),
                _ => Ok(()),
            }
        }
        Created::ExternalQcow2 { confirmed } => {
            let IscsiMode::External(url, chap) = mode else {
                return Ok(());
            };
            let lun = LunAccess {
                url,
                chap: chap.as_deref().map(RunChap::chap),
            };
            let r = lun.wipe_header();
            if *confirmed {
                r?;
            }
            Ok(())
        }
    }
}

impl StorageBackend for IscsiBackend {
    fn check(&self) -> Result<(), Unsupported> {
        cmd::require_qemu_img()?;
        match &self.mode {
            IscsiMode::Embedded(t) if !cmd::pid_alive(t.pid()) => Err(Unsupported::ServerGone {
                server: "tgtd",
                pid: t.pid(),
            }),
            _ => Ok(()),
        }
    }

    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.check()?;
        match self.mode.clone() {
            IscsiMode::Embedded(t) => self.provision_embedded(t, cell, size_bytes, work),
            IscsiMode::External(u, chap) => {
                self.provision_external(u, chap, cell, size_bytes, work)
            }
        }
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        while let Some(c) = self.created.pop() {
            if let Err(e) = undo(&c, &self.mode) {
                self.created.push(c);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A backstop for a path out of a cell that forgot teardown (a panic): nothing stays behind.
impl Drop for IscsiBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `iscsi` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> crate::cell::Backend {
        crate::cell::Backend::Iscsi
    }

    fn net_protocol(&self) -> Option<super::NetProtocol> {
        Some(super::NetProtocol::Iscsi)
    }

    fn embedded_server(&self) -> Option<&'static str> {
        Some(<Tgt as super::servers::EmbeddedServer>::NAME)
    }

    fn in_default_matrix(&self) -> bool {
        true
    }

    fn remote_blocker(&self, opts: &super::options::StorageConfig) -> Option<super::RemoteBlocker> {
        if opts.iscsi_chap_file.is_some() {
            Some(super::RemoteBlocker::ChapSecretHere)
        } else {
            opts.iscsi
                .is_none()
                .then_some(super::RemoteBlocker::EmbeddedServer(self.backend()))
        }
    }

    fn external_flag(&self, opts: &super::options::StorageConfig) -> Option<&'static str> {
        opts.iscsi.is_some().then_some("--iscsi")
    }

    fn plan_source(
        &self,
        opts: &super::options::StorageConfig,
        _cell: &Cell,
        _work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        match &opts.iscsi {
            Some(u) => network_source(
                &u.target,
                u.lun,
                &u.host,
                u.port,
                opts.iscsi_chap_file.as_deref().map(planned_chap),
            ),
            None => network_source(
                &format!("{}:{}", super::tgt::IQN_PREFIX, super::PLANNED_TAG),
                1,
                super::netns::PLANNED_SERVER,
                Some(super::tgt::DEFAULT_PORTAL_PORT),
                None,
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
        let Some(url) = &opts.iscsi else {
            let t = servers.tgt(cell.link)?;
            let server = Some(super::servers::identity(t.as_ref()));
            return Ok(super::Opened {
                backend: Box::new(IscsiBackend::embedded(t)),
                server,
                companions: vec![],
                provenance: None,
            });
        };
        let chap = match &opts.iscsi_chap_file {
            Some(f) => Some(servers.iscsi_chap(f)?),
            None => None,
        };
        Ok(super::Opened::plain(Box::new(IscsiBackend::external_url(
            url.clone(),
            chap,
        ))))
    }

    fn host_support(&self) -> Result<String, String> {
        super::servers::installed::<Tgt>()
    }

    fn leftover_processes(&self) -> &'static [&'static str] {
        &[<Tgt as super::servers::EmbeddedServer>::BINARY]
    }
}

/// The `<auth>` an external LUN with `--iscsi-chap-file` will get: the file's user name (read,
/// not the secret; `USER` if it cannot be read) and a placeholder secret usage.
fn planned_chap(file: &Path) -> NetAuth {
    NetAuth::IscsiChap {
        username: Chap::from_file(file)
            .map(|c| c.username().to_string())
            .unwrap_or_else(|_| "USER".into()),
        secret_usage: format!("{}ext-{}", super::chap::USAGE_PREFIX, super::PLANNED_TAG),
    }
}

/// The iscsi backend's flags of `vmbench matrix` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct IscsiArgs {
    /// External iSCSI LUN iscsi://PORTAL/IQN/LUN. [default: an embedded tgt on 127.0.0.1]
    #[arg(long)]
    pub iscsi: Option<String>,
    /// CHAP credentials for the --iscsi LUN, from a file (never the secret on the command
    /// line): lines `username=NAME` and `secret=VALUE` (`#` comments allowed), mode 0600 or
    /// stricter. QEMU gets the secret through a libvirt secret defined for the run.
    #[arg(long, value_name = "PATH")]
    pub iscsi_chap_file: Option<std::path::PathBuf>,
}

impl IscsiArgs {
    /// Sets the options given on the command line; a bad value names its flag.
    pub fn apply(&self, s: &mut StorageConfig) -> Result<(), String> {
        if let Some(u) = &self.iscsi {
            s.iscsi = Some(u.parse().map_err(|e| format!("--iscsi: {e}"))?);
        }
        if let Some(f) = &self.iscsi_chap_file {
            s.iscsi_chap_file = Some(f.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lun_argv_names_the_secret_file_never_the_secret() {
        let u = IscsiUrl::parse("iscsi://10.0.0.9/iqn.2026-12.dev.x:t/2").unwrap();
        let chap = Chap::random("argv,1");
        let lun = LunAccess {
            url: &u,
            chap: Some(&chap),
        };
        let file = Path::new("/tmp/vmbench-chap-X/secret");
        let argv = lun.argv(Some(file), &["info", "--output=json"], "--image-opts", &[]);
        assert_eq!(
            argv,
            [
                "info",
                "--output=json",
                "--object",
                "secret,id=chap0,file=/tmp/vmbench-chap-X/secret",
                "--image-opts",
                // A comma in the user name is doubled (QEMU's option syntax).
                "driver=iscsi,transport=tcp,portal=10.0.0.9:3260,target=iqn.2026-12.dev.x:t,\
                 lun=2,user=vmbench-argv,,1,password-secret=chap0",
            ]
        );
        assert!(argv.iter().all(|a| !a.contains(chap.secret())), "{argv:?}");
        // qemu-io and qemu-img convert put their own arguments between the flag and the LUN.
        let io = lun.argv(Some(file), &[], "--image-opts", &["-c", "write -z 0 1M"]);
        assert_eq!(io[2..5], ["--image-opts", "-c", "write -z 0 1M"]);
        assert!(io.last().unwrap().starts_with("driver=iscsi,"));
        assert!(io.iter().all(|a| !a.contains(chap.secret())));
        // Without CHAP: no secret object, no user.
        let plain = LunAccess {
            url: &u,
            chap: None,
        };
        let argv = plain.argv(None, &["convert", "-n"], "--target-image-opts", &[]);
        assert_eq!(
            argv,
            [
                "convert",
                "-n",
                "--target-image-opts",
                "driver=iscsi,transport=tcp,portal=10.0.0.9:3260,target=iqn.2026-12.dev.x:t,lun=2"
            ]
        );
    }

    #[test]
    fn a_failed_login_names_the_lun_and_user_not_the_secret() {
        let u = IscsiUrl::parse("iscsi://10.0.0.9:3261/iqn.2026-12.dev.x:t/1").unwrap();
        let chap = Chap::random("ctx");
        let lun = LunAccess {
            url: &u,
            chap: Some(&chap),
        };
        let e = lun
            .context(
                "qemu-img info",
                StorageError::Command {
                    command: "qemu-img info".into(),
                    detail: "exit status: 1: Failed to log in to target. Status: Authentication \
                         failure(514)"
                        .into(),
                },
            )
            .to_string();
        assert!(
            e.starts_with(
                "qemu-img info on LUN iscsi://10.0.0.9:3261/iqn.2026-12.dev.x:t/1 as CHAP user \
                 'vmbench-ctx' failed: exit status: 1:"
            ) && e.contains("Authentication failure"),
            "{e}"
        );
        assert!(!e.contains(chap.secret()), "{e}");
    }

    #[test]
    fn good_urls_parse() {
        let u = IscsiUrl::parse("iscsi://127.0.0.1:3261/iqn.2026-12.dev.vmbench:r-1/1").unwrap();
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, Some(3261));
        assert_eq!(u.target, "iqn.2026-12.dev.vmbench:r-1");
        assert_eq!(u.lun, 1);
        assert_eq!(
            u.to_url(),
            "iscsi://127.0.0.1:3261/iqn.2026-12.dev.vmbench:r-1/1"
        );
        let u = IscsiUrl::parse("iscsi://san.lab/eui.0123456789abcdef/0").unwrap();
        assert_eq!(u.port, None);
        assert_eq!(u.to_url(), "iscsi://san.lab/eui.0123456789abcdef/0");
    }

    #[test]
    fn bad_urls_say_why() {
        let cases = [
            ("nfs://h/iqn.2026-12.a:b/1", "must start with iscsi://"),
            ("iscsi://h/iqn.2026-12.a:b", "exactly a portal"),
            ("iscsi://h/iqn.2026-12.a:b/1/2", "exactly a portal"),
            ("iscsi://h:99999/iqn.2026-12.a:b/1", "port '99999'"),
            ("iscsi://h:0/iqn.2026-12.a:b/1", "port 0"),
            ("iscsi:///iqn.2026-12.a:b/1", "portal host ''"),
            ("iscsi://h/IQN.2026-12.a:b/1", "may contain only"),
            ("iscsi://h/iqn.26-12.a:b/1", "is not an iqn."),
            ("iscsi://h/foo.bar/1", "is not an iqn."),
            ("iscsi://h/iqn.2026-12.a:b/x", "LUN 'x'"),
            ("iscsi://h/iqn.2026-12.a:b/20000", "above 16383"),
            ("iscsi://u:p@h/iqn.2026-12.a:b/1", "credentials"),
        ];
        for (url, want) in cases {
            let e = IscsiUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(want), "{url}: {e}");
            assert!(
                e.contains("expected iscsi://PORTAL[:PORT]/IQN/LUN"),
                "{url}: {e}"
            );
        }
    }
}
