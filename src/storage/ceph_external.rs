//! A user's Ceph cluster for RBD disks (`--ceph-conf FILE`), instead of the embedded one
//! ([`super::ceph`]): its monitors come from the conf's `mon_host`, the client's key from a
//! keyring. vmbench starts nothing there; it makes images in one pool, every name carrying the
//! run's id (`vmbench-RUN-...`), and removes them: each cell's image at its teardown, the run's
//! base images (a protected snapshot each) when the run ends, and whatever a killed run left
//! through `vmbench cleanup`, which finds the cluster in the run's servers directory
//! ([`RECORD_FILE`]) and the images by their prefix.
//!
//! Every `rbd` call is an argument vector (`-c CONF --keyring KEYRING --id USER`), bounded by
//! the client's mount and operation timeouts, so an unreachable monitor fails a call instead of
//! hanging it; the key itself is read only to go into the cell's libvirt secret.

use super::ceph::run_tool;
use super::StorageError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The cephx user when `--ceph-user` is not given.
pub const DEFAULT_USER: &str = "admin";
/// The pool when `--ceph-pool` is not given.
pub const DEFAULT_POOL: &str = "rbd";
/// The file (in a run's `servers/` directory) naming the external cluster, for `vmbench
/// cleanup`; removed once the run's images and bases are gone.
pub const RECORD_FILE: &str = "ceph-external.json";
/// The monitor's legacy (msgr v1) port: Ceph's default for an address without a port.
const PORT_V1: u16 = 6789;
/// The monitor's msgr v2 port (IANA).
const PORT_V2: u16 = 3300;
/// How long one `rbd` call may wait for the monitors (Ceph's default is 300 s), and for a
/// monitor or OSD operation (the defaults wait forever).
const MOUNT_TIMEOUT: &str = "30";
const MON_OP_TIMEOUT: &str = "60";
const OSD_OP_TIMEOUT: &str = "120";

/// One monitor address as libvirt's `<host name port>` gives it to QEMU's librbd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    /// Address or host name (an IPv6 address without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl std::fmt::Display for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// One address of a `mon_host` entry: `[v1:|v2:]HOST[:PORT][/NONCE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Addr {
    kind: Option<u8>,
    host: String,
    port: Option<u16>,
}

/// The monitors in a `mon_host` value, one per entry: a plain `HOST[:PORT]`, a typed
/// `v2:HOST:PORT`, or an address vector `[v2:HOST:3300/0,v1:HOST:6789/0]`; entries separated by
/// commas, spaces or semicolons (as Ceph's own parser takes them).
///
/// librbd gets `HOST:PORT` from QEMU (libvirt's `<host>`), which it reads as msgr v1 on port
/// 6789, v2 on 3300, and v2 then v1 on any other port (Ceph's `MonMap::_add_ambiguous_addr`).
/// So per entry: its v2 address when it has one on a port other than 6789, else its v1 address,
/// else the plain one; a missing port is the protocol's default, and 6789 for a plain address
/// (a cluster that binds msgr v2 only must say `v2:` or port 3300).
pub fn parse_mon_host(value: &str) -> Result<Vec<Monitor>, String> {
    let mut out = Vec::new();
    for entry in split_entries(value)? {
        let addrs = match entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
            Some(inner) if is_typed(inner) => inner
                .split(',')
                .map(parse_addr)
                .collect::<Result<Vec<_>, _>>()?,
            _ => vec![parse_addr(&entry)?],
        };
        out.push(choose(&addrs).ok_or_else(|| format!("no usable address in '{entry}'"))?);
    }
    if out.is_empty() {
        return Err("mon_host is empty".into());
    }
    Ok(out)
}

fn is_typed(s: &str) -> bool {
    ["v1:", "v2:", "any:"].iter().any(|p| s.starts_with(p))
}

/// The entries of `mon_host`, split at separators outside brackets.
fn split_entries(value: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0u32);
    for c in value.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Err(format!("unbalanced ']' in '{value}'")),
            ']' => depth -= 1,
            ',' | ' ' | ';' | '\t' if depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if depth != 0 {
        return Err(format!("unbalanced '[' in '{value}'"));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// `[v1:|v2:|any:]HOST[:PORT][/NONCE]`, HOST an IPv4 address, a name or `[IPv6]`.
fn parse_addr(s: &str) -> Result<Addr, String> {
    let bad = |why: &str| format!("bad monitor address '{s}': {why}");
    let (kind, rest) = match s.split_once(':') {
        Some(("v1", r)) => (Some(1), r),
        Some(("v2", r)) => (Some(2), r),
        Some(("any", r)) => (None, r),
        _ => (None, s),
    };
    let rest = rest.split_once('/').map_or(rest, |(a, _nonce)| a);
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| bad("no ']'"))?;
        (h, after.strip_prefix(':'))
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let host_ok = |c: char| c.is_ascii_alphanumeric() || ".-:".contains(c);
    if host.is_empty() || !host.chars().all(host_ok) {
        return Err(bad("not an address or host name"));
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().map_err(|_| bad("bad port"))?),
        None => None,
    };
    Ok(Addr {
        kind,
        host: host.to_string(),
        port: port.filter(|p| *p != 0),
    })
}

/// The address QEMU's `HOST:PORT` reaches by the same protocol ([`parse_mon_host`]).
fn choose(addrs: &[Addr]) -> Option<Monitor> {
    let pick = |a: &Addr, default: u16| Monitor {
        host: a.host.clone(),
        port: a.port.unwrap_or(default),
    };
    let v2 = addrs
        .iter()
        .find(|a| a.kind == Some(2) && a.port != Some(PORT_V1))
        .map(|a| pick(a, PORT_V2));
    let v1 = || {
        addrs
            .iter()
            .find(|a| a.kind == Some(1))
            .map(|a| pick(a, PORT_V1))
    };
    let plain = || {
        addrs
            .iter()
            .find(|a| a.kind.is_none())
            .map(|a| pick(a, PORT_V1))
    };
    v2.or_else(v1).or_else(plain)
}

/// A ceph.conf, as `section -> key -> value` with keys normalised the way Ceph does (`mon
/// host`, `mon-host` and `mon_host` are one key); `#` and `;` start comments.
#[derive(Debug, Default)]
pub struct ConfFile {
    sections: Vec<(String, Vec<(String, String)>)>,
}

impl ConfFile {
    /// Parses the text of a ceph.conf.
    pub fn parse(text: &str) -> ConfFile {
        let mut c = ConfFile::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("").trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                c.sections.push((name.trim().to_string(), Vec::new()));
            } else if let Some((k, v)) = line.split_once('=') {
                let key = normalise(k);
                let value = v.trim().trim_matches('"').to_string();
                match c.sections.last_mut() {
                    Some((_, kv)) => kv.push((key, value)),
                    None => c.sections.push((String::new(), vec![(key, value)])),
                }
            }
        }
        c
    }

    /// `key` as client `user` reads it: from `[client.USER]`, then `[client]`, then `[global]`.
    pub fn get(&self, user: &str, key: &str) -> Option<&str> {
        let key = normalise(key);
        let me = format!("client.{user}");
        [me.as_str(), "client", "global"].iter().find_map(|s| {
            self.sections
                .iter()
                .filter(|(name, _)| name == s)
                .flat_map(|(_, kv)| kv.iter().rev())
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        })
    }
}

fn normalise(key: &str) -> String {
    let words: Vec<&str> = key
        .split([' ', '\t', '_', '-'])
        .filter(|w| !w.is_empty())
        .collect();
    words.join("_").to_ascii_lowercase()
}

/// The key of `client.USER` in a keyring's text (`[client.USER]` then `key = BASE64`).
pub fn keyring_key(text: &str, user: &str) -> Option<String> {
    let want = format!("client.{user}");
    let mut in_section = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = name.trim() == want;
        } else if let Some((k, v)) = line.split_once('=') {
            if in_section && normalise(k) == "key" {
                return Some(v.trim().to_string()).filter(|k| !k.is_empty());
            }
        }
    }
    None
}

/// The keyring the conf names for `user` (`keyring`, a comma-separated list with Ceph's `$`
/// variables: the first that exists), else `/etc/ceph/ceph.client.USER.keyring`.
pub fn default_keyring(conf: &ConfFile, user: &str) -> PathBuf {
    let fallback = PathBuf::from(format!("/etc/ceph/ceph.client.{user}.keyring"));
    let Some(list) = conf.get(user, "keyring") else {
        return fallback;
    };
    let paths: Vec<PathBuf> = list
        .split(',')
        .map(|p| {
            let p = p
                .trim()
                .replace("$cluster", "ceph")
                .replace("$name", &format!("client.{user}"))
                .replace("$type", "client")
                .replace("$id", user);
            PathBuf::from(p)
        })
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    paths
        .iter()
        .find(|p| p.exists())
        .or(paths.first())
        .cloned()
        .unwrap_or(fallback)
}

/// A user's cluster as `--ceph-*` name it, resolved and checked before anything is made.
#[derive(Clone, PartialEq, Eq)]
pub struct CephSpec {
    /// The conf file.
    pub conf: PathBuf,
    /// The keyring file.
    pub keyring: PathBuf,
    /// The cephx client id (without `client.`).
    pub user: String,
    /// The pool images go in.
    pub pool: String,
    /// The monitors, in `mon_host`'s order; QEMU is given the first (it learns the others from
    /// the monitor map once connected).
    pub monitors: Vec<Monitor>,
    key: String,
}

/// Not derived: the key must not end up in a debug print.
impl std::fmt::Debug for CephSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CephSpec")
            .field("conf", &self.conf)
            .field("keyring", &self.keyring)
            .field("user", &self.user)
            .field("pool", &self.pool)
            .field("monitors", &self.monitors)
            .finish_non_exhaustive()
    }
}

impl CephSpec {
    /// Reads `conf` and the keyring (`keyring`, else the conf's, else the default path) and
    /// checks names; every error names the file or flag and the problem, never the key.
    pub fn resolve(
        conf: &Path,
        keyring: Option<&Path>,
        user: Option<&str>,
        pool: Option<&str>,
    ) -> Result<CephSpec, StorageError> {
        let invalid = StorageError::Invalid;
        let user = user.unwrap_or(DEFAULT_USER).to_string();
        let pool = pool.unwrap_or(DEFAULT_POOL).to_string();
        check_name("--ceph-user", &user).map_err(invalid)?;
        check_name("--ceph-pool", &pool).map_err(invalid)?;
        let text = std::fs::read_to_string(conf).map_err(|e| {
            invalid(format!(
                "--ceph-conf {}: cannot read it: {e}",
                conf.display()
            ))
        })?;
        let parsed = ConfFile::parse(&text);
        let mon_host = parsed.get(&user, "mon_host").ok_or_else(|| {
            invalid(format!(
                "--ceph-conf {}: no mon_host in it (the monitors' addresses, as `ceph config \
                 generate-minimal-conf` prints them)",
                conf.display()
            ))
        })?;
        let monitors = parse_mon_host(mon_host)
            .map_err(|e| invalid(format!("--ceph-conf {}: mon_host: {e}", conf.display())))?;
        let keyring = keyring.map_or_else(|| default_keyring(&parsed, &user), Path::to_path_buf);
        let key = read_key(&keyring, &user)?;
        Ok(CephSpec {
            conf: conf.to_path_buf(),
            keyring,
            user,
            pool,
            monitors,
            key,
        })
    }

    /// The first monitor: what libvirt's `<host>` names.
    pub fn monitor(&self) -> &Monitor {
        &self.monitors[0]
    }

    /// `-c CONF --keyring KEYRING --id USER` and the timeouts that bound the call, then `args`.
    pub fn rbd_args(&self, args: &[&str]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            "-c".into(),
            self.conf.clone().into(),
            "--keyring".into(),
            self.keyring.clone().into(),
            "--id".into(),
            self.user.clone().into(),
        ];
        for (k, val) in [
            ("--client-mount-timeout", MOUNT_TIMEOUT),
            ("--rados-mon-op-timeout", MON_OP_TIMEOUT),
            ("--rados-osd-op-timeout", OSD_OP_TIMEOUT),
        ] {
            v.extend([k.into(), val.into()]);
        }
        v.extend(args.iter().map(OsString::from));
        v
    }

    /// Runs `rbd ARGS` as this client; returns stdout.
    pub fn rbd(&self, args: &[&str]) -> Result<String, StorageError> {
        run_tool("rbd", &self.rbd_args(args))
    }
}

/// A cephx id or pool name: what goes unquoted into an image spec and a command line.
fn check_name(flag: &str, name: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if name.is_empty() || name.starts_with('-') || !name.chars().all(ok) {
        return Err(format!(
            "{flag} '{name}': use letters, digits, '.', '_' and '-' (not first)"
        ));
    }
    Ok(())
}

/// The key of `client.USER` in `keyring`, checked to be base64; the file must be private (as
/// `ceph-authtool` makes it, 0600), like a CHAP file.
fn read_key(keyring: &Path, user: &str) -> Result<String, StorageError> {
    let k = keyring.display();
    let text = std::fs::read_to_string(keyring).map_err(|e| {
        StorageError::Invalid(format!(
            "--ceph-keyring {k}: cannot read it: {e} (give the keyring holding client.{user}'s \
             key with --ceph-keyring FILE)"
        ))
    })?;
    super::chap::check_private(keyring)
        .map_err(|e| StorageError::Invalid(format!("--ceph-keyring {k}: {e}")))?;
    let key = keyring_key(&text, user).ok_or_else(|| {
        StorageError::Invalid(format!(
            "--ceph-keyring {k}: no key for client.{user} in it (a [client.{user}] section with \
             `key = ...`; --ceph-user names the client)"
        ))
    })?;
    use base64::Engine;
    match base64::engine::general_purpose::STANDARD.decode(&key) {
        Ok(b) if b.len() >= 16 => Ok(key),
        _ => Err(StorageError::Invalid(format!(
            "--ceph-keyring {k}: client.{user}'s key is not a cephx key (base64)"
        ))),
    }
}

/// What the record file says: enough for `vmbench cleanup` to reach the cluster.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    conf: PathBuf,
    keyring: PathBuf,
    user: String,
    pool: String,
    prefix: String,
}

/// A user's cluster as one run uses it: its images are named with [`ExternalCeph::prefix`],
/// its base images are removed when the last holder drops it (the run's end).
pub struct ExternalCeph {
    spec: CephSpec,
    prefix: String,
    record: PathBuf,
    bases: Mutex<Vec<String>>,
}

impl std::fmt::Debug for ExternalCeph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCeph")
            .field("spec", &self.spec)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The name prefix of everything run `run` makes on an external cluster.
pub fn run_prefix(run: &str) -> String {
    format!("vmbench-{run}-")
}

impl ExternalCeph {
    /// Checks that the cluster takes the client's key and has the pool (`rbd ls POOL`), then
    /// writes the record `vmbench cleanup` reads ([`RECORD_FILE`] in `servers`).
    pub fn open(spec: CephSpec, run: &str, servers: &Path) -> Result<ExternalCeph, StorageError> {
        spec.rbd(&["ls", &spec.pool])
            .map_err(|e| refused(&spec, e))?;
        let c = ExternalCeph {
            prefix: run_prefix(run),
            record: servers.join(RECORD_FILE),
            spec,
            bases: Mutex::new(Vec::new()),
        };
        let rec = Record {
            conf: c.spec.conf.clone(),
            keyring: c.spec.keyring.clone(),
            user: c.spec.user.clone(),
            pool: c.spec.pool.clone(),
            prefix: c.prefix.clone(),
        };
        let json = serde_json::to_string_pretty(&rec).unwrap_or_default();
        std::fs::create_dir_all(servers)
            .and_then(|()| std::fs::write(&c.record, json))
            .map_err(|source| StorageError::Io {
                context: format!("writing {}", c.record.display()),
                source,
            })?;
        Ok(c)
    }

    /// The cluster as named.
    pub fn spec(&self) -> &CephSpec {
        &self.spec
    }

    /// `vmbench-RUN-`: the start of every image name of this run.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Runs `rbd ARGS` as the client.
    pub fn rbd(&self, args: &[&str]) -> Result<String, StorageError> {
        self.spec.rbd(args)
    }

    /// The client's key (base64).
    pub fn client_key(&self) -> &str {
        &self.spec.key
    }

    /// Remembers base image `name` (in the pool) for removal at the run's end; before it is
    /// made, so a half-made one goes too.
    pub fn track_base(&self, name: &str) {
        let mut b = self.bases.lock().unwrap_or_else(|e| e.into_inner());
        if !b.iter().any(|n| n == name) {
            b.push(name.to_string());
        }
    }

    /// `ceph (external, MON)`: the storage server of the results.
    pub fn provenance(&self) -> String {
        format!("ceph (external, {})", self.spec.monitor())
    }
}

/// The run's end: each base's snapshot unprotected and removed, then the base (its clones went
/// with their cells). The record stays when something could not be removed, so `vmbench
/// cleanup` tries again.
impl Drop for ExternalCeph {
    fn drop(&mut self) {
        let bases = std::mem::take(&mut *self.bases.lock().unwrap_or_else(|e| e.into_inner()));
        // Every base is tried, even after one fails.
        let results: Vec<_> = bases
            .iter()
            .map(|b| remove_base(|a| self.spec.rbd(a), &self.spec.pool, b))
            .collect();
        // A cell image its teardown could not remove (watchers, a timeout) keeps the record
        // too, or `vmbench cleanup` could never find it.
        let none_left = (self.spec.rbd(&["ls", &self.spec.pool]))
            .map(|ls| !ls.lines().any(|n| n.trim().starts_with(&self.prefix)))
            .unwrap_or(false);
        if none_left && results.iter().all(Result::is_ok) {
            let _ = std::fs::remove_file(&self.record);
        }
    }
}

/// `POOL/NAME`'s snapshot `@base` unprotected, its snapshots purged, then the image, each
/// through `rbd` (runs `rbd ARGS` against the cluster); a missing image is fine. The run's end
/// and `vmbench cleanup` remove bases with it, and [`super::rbd`] a half-imported one.
pub(super) fn remove_base(
    rbd: impl Fn(&[&str]) -> Result<String, StorageError>,
    pool: &str,
    name: &str,
) -> Result<(), StorageError> {
    let image = format!("{pool}/{name}");
    let snap = format!("{image}@base");
    // Not protected, or no snapshot: the purge and the removal below say what matters.
    let _ = rbd(&["snap", "unprotect", &snap]);
    let gone = |r: Result<String, StorageError>| match r {
        Err(e) if e.to_string().contains("(2) No such file or directory") => Ok(()),
        r => r.map(drop),
    };
    gone(rbd(&["snap", "purge", "--no-progress", &image]))?;
    gone(rbd(&["rm", "--no-progress", &image]))
}

/// A failed first call, said plainly when the monitors refused the client's key.
fn refused(spec: &CephSpec, e: StorageError) -> StorageError {
    let text = e.to_string();
    let denied = ["(1) Operation not permitted", "(13) Permission denied"]
        .iter()
        .any(|m| text.contains(m));
    let mons = spec
        .monitors
        .iter()
        .map(Monitor::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let why = if denied {
        format!(
            "the cluster refused client.{}'s key (from {})",
            spec.user,
            spec.keyring.display()
        )
    } else if text.contains("(110) Connection timed out") {
        format!("no monitor of {mons} answered within {MOUNT_TIMEOUT} s")
    } else {
        format!("cannot list pool '{}' as client.{}", spec.pool, spec.user)
    };
    StorageError::Invalid(format!(
        "{why} (--ceph-conf {}, monitors {mons}): {text}",
        spec.conf.display()
    ))
}

/// `vmbench cleanup` for a dead run: every image of the run (`vmbench-RUN-*`) on the cluster
/// its record in `servers` names, clones and copies first, then the bases with their snapshots;
/// the record goes once all are gone. Returns what was (or, with `dry`, would be) removed.
pub fn remove_leftovers(servers: &Path, dry: bool) -> Result<Vec<String>, String> {
    let file = servers.join(RECORD_FILE);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(vec![]);
    };
    let rec: Record =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    if !rec.prefix.starts_with("vmbench-") || rec.prefix.len() < 12 {
        return Err(format!("{}: not a vmbench prefix", file.display()));
    }
    let spec = CephSpec::resolve(
        &rec.conf,
        Some(&rec.keyring),
        Some(&rec.user),
        Some(&rec.pool),
    )
    .map_err(|e| e.to_string())?;
    let listed = spec.rbd(&["ls", &spec.pool]).map_err(|e| e.to_string())?;
    let mut ours: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(&rec.prefix))
        .collect();
    // Clones before the bases they hang from.
    ours.sort_by_key(|n| n.contains(BASE_MARK));
    let mut done = Vec::new();
    for name in ours {
        done.push(format!("rbd image {}/{name}", spec.pool));
        if dry {
            continue;
        }
        if name.contains(BASE_MARK) {
            remove_base(|a| spec.rbd(a), &spec.pool, name).map_err(|e| e.to_string())?;
        } else {
            let image = format!("{}/{name}", spec.pool);
            spec.rbd(&["rm", "--no-progress", &image])
                .map_err(|e| e.to_string())?;
        }
    }
    if !dry {
        let _ = std::fs::remove_file(&file);
    }
    Ok(done)
}

/// What names a base image on an external cluster (`vmbench-RUN-base-BYTES`).
pub const BASE_MARK: &str = "-base-";

#[cfg(test)]
mod tests {
    use super::*;

    /// A keyring file as ceph-authtool writes it: mode 0600.
    fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
    }

    fn mon(host: &str, port: u16) -> Monitor {
        Monitor {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn mon_host_forms_give_the_port_librbd_reads_as_the_same_protocol() {
        let cases: &[(&str, &[Monitor])] = &[
            ("1.2.3.4", &[mon("1.2.3.4", 6789)]),
            ("1.2.3.4:6789", &[mon("1.2.3.4", 6789)]),
            ("1.2.3.4:3300", &[mon("1.2.3.4", 3300)]),
            ("v2:1.2.3.4:3300", &[mon("1.2.3.4", 3300)]),
            ("v2:1.2.3.4", &[mon("1.2.3.4", 3300)]),
            ("v1:1.2.3.4", &[mon("1.2.3.4", 6789)]),
            (
                "[v2:1.2.3.4:3300/0,v1:1.2.3.4:6789/0]",
                &[mon("1.2.3.4", 3300)],
            ),
            // v1 first in the vector: v2 is still chosen.
            (
                "[v1:10.0.0.1:6789/0,v2:10.0.0.1:3300/0]",
                &[mon("10.0.0.1", 3300)],
            ),
            // A v2 address on 6789 would be read as v1: its v1 address is taken.
            (
                "[v2:10.0.0.1:6789/0,v1:10.0.0.1:6790/0]",
                &[mon("10.0.0.1", 6790)],
            ),
            (
                "10.0.0.1,10.0.0.2:6790 10.0.0.3;mon4.example:3300",
                &[
                    mon("10.0.0.1", 6789),
                    mon("10.0.0.2", 6790),
                    mon("10.0.0.3", 6789),
                    mon("mon4.example", 3300),
                ],
            ),
            (
                "[v2:192.168.1.10:3300/0,v1:192.168.1.10:6789/0] \
                 [v2:192.168.1.11:3300/0,v1:192.168.1.11:6789/0],[v2:192.168.1.12:3300/0]",
                &[
                    mon("192.168.1.10", 3300),
                    mon("192.168.1.11", 3300),
                    mon("192.168.1.12", 3300),
                ],
            ),
            ("[::1]:6789", &[mon("::1", 6789)]),
            (
                "[v2:[fd00::2]:3300/0,v1:[fd00::2]:6789/0]",
                &[mon("fd00::2", 3300)],
            ),
        ];
        for (value, want) in cases {
            assert_eq!(parse_mon_host(value).as_deref(), Ok(*want), "{value}");
        }
        assert_eq!(mon("fd00::2", 3300).to_string(), "[fd00::2]:3300");
        for bad in [
            "",
            " , ",
            "[v2:1.2.3.4:3300/0",
            "1.2.3.4:port",
            "v2:1.2.3.4]",
            "a b$c",
        ] {
            assert!(parse_mon_host(bad).is_err(), "{bad:?}");
        }
    }

    /// `ceph config generate-minimal-conf` of the embedded cluster (Ceph 16.2.15, msgr v2 only),
    /// as tests/rbd_external.rs's run printed it: a one-address vector without brackets.
    const MINIMAL_CONF: &str = "# minimal ceph.conf for 5aa9f84a-adf1-4c06-b11f-c0b77f229607\n\
        [global]\n\
        \tfsid = 5aa9f84a-adf1-4c06-b11f-c0b77f229607\n\
        \tmon_host = v2:169.254.220.150:3300/0\n\n";

    /// `ceph-authtool --create-keyring K --gen-key -n client.vmbench --cap mon 'profile rbd'
    /// --cap osd 'profile rbd pool=rbd'`, then the same with `-n client.admin` (Ceph 16.2.15).
    const AUTHTOOL_KEYRING: &str = "[client.admin]\n\
        \tkey = AQC3vhVrdF2WAxAAxbngXGqmGymhV76Ifw/+7w==\n\
        \tcaps mon = \"allow *\"\n\
        [client.vmbench]\n\
        \tkey = AQC3vhVruWdUAhAAZgesi4rusus79nLEb272DQ==\n\
        \tcaps mon = \"profile rbd\"\n\
        \tcaps osd = \"profile rbd pool=rbd\"\n";

    #[test]
    fn a_minimal_conf_names_the_monitors() {
        let c = ConfFile::parse(MINIMAL_CONF);
        let v = c.get("vmbench", "mon host").unwrap();
        assert_eq!(v, "v2:169.254.220.150:3300/0");
        assert_eq!(parse_mon_host(v), Ok(vec![mon("169.254.220.150", 3300)]));
        assert_eq!(c.get("vmbench", "keyring"), None);
        assert_eq!(
            default_keyring(&c, "vmbench"),
            Path::new("/etc/ceph/ceph.client.vmbench.keyring")
        );
        // The classic form: spaces in keys, a client section over global, comments.
        let classic = "[global]\nmon host = 10.0.0.1 ; the old one\n\
                       keyring = /nonexistent/$cluster.$name.keyring,/also/not\n\
                       [client.bench]\n  mon-host = 10.0.0.9:6789  # this one\n";
        let c = ConfFile::parse(classic);
        assert_eq!(c.get("bench", "mon_host"), Some("10.0.0.9:6789"));
        assert_eq!(c.get("other", "mon_host"), Some("10.0.0.1"));
        assert_eq!(
            default_keyring(&c, "bench"),
            Path::new("/nonexistent/ceph.client.bench.keyring")
        );
    }

    #[test]
    fn the_users_key_is_read_from_an_authtool_keyring() {
        assert_eq!(
            keyring_key(AUTHTOOL_KEYRING, "vmbench").as_deref(),
            Some("AQC3vhVruWdUAhAAZgesi4rusus79nLEb272DQ==")
        );
        assert_eq!(
            keyring_key(AUTHTOOL_KEYRING, "admin").as_deref(),
            Some("AQC3vhVrdF2WAxAAxbngXGqmGymhV76Ifw/+7w==")
        );
        assert_eq!(keyring_key(AUTHTOOL_KEYRING, "nobody"), None);
        assert_eq!(
            keyring_key("[client.x]\n\tcaps mon = \"allow r\"\n", "x"),
            None
        );
    }

    #[test]
    fn bad_files_and_names_are_refused_with_the_problem_never_the_key() {
        let d = tempfile::tempdir().unwrap();
        let (conf, kr) = (d.path().join("ceph.conf"), d.path().join("k"));
        let resolve = |user: Option<&str>, pool: Option<&str>| {
            CephSpec::resolve(&conf, Some(&kr), user, pool)
                .map(|s| s.monitor().to_string())
                .map_err(|e| e.to_string())
        };
        let e = resolve(None, None).unwrap_err();
        assert!(
            e.contains("--ceph-conf") && e.contains("cannot read"),
            "{e}"
        );
        std::fs::write(&conf, "[global]\nfsid = x\n").unwrap();
        let e = resolve(None, None).unwrap_err();
        assert!(e.contains("no mon_host"), "{e}");
        std::fs::write(&conf, MINIMAL_CONF).unwrap();
        let e = resolve(Some("vmbench"), None).unwrap_err();
        assert!(
            e.contains("--ceph-keyring") && e.contains("cannot read"),
            "{e}"
        );
        std::fs::write(&kr, AUTHTOOL_KEYRING).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let open = std::fs::Permissions::from_mode(0o644);
            std::fs::set_permissions(&kr, open).unwrap();
        }
        let e = resolve(Some("vmbench"), None).unwrap_err();
        assert!(e.contains("lets other users read"), "an open keyring: {e}");
        write_private(&kr, AUTHTOOL_KEYRING).unwrap();
        let e = resolve(Some("cinder"), None).unwrap_err();
        assert!(e.contains("no key for client.cinder"), "{e}");
        assert_eq!(
            resolve(Some("vmbench"), None),
            Ok("169.254.220.150:3300".into())
        );
        assert_eq!(
            resolve(None, Some("volumes")),
            Ok("169.254.220.150:3300".into())
        );
        let e = resolve(Some("a b"), None).unwrap_err();
        assert!(e.contains("--ceph-user 'a b'"), "{e}");
        let e = resolve(None, Some("rbd/x")).unwrap_err();
        assert!(e.contains("--ceph-pool"), "{e}");
        write_private(&kr, "[client.admin]\n\tkey = not-base64!\n").unwrap();
        let e = resolve(None, None).unwrap_err();
        assert!(
            e.contains("not a cephx key") && !e.contains("not-base64"),
            "{e}"
        );
        let spec = CephSpec::resolve(&conf, None, Some("vmbench"), None);
        let e = spec.unwrap_err().to_string();
        assert!(e.contains("/etc/ceph/ceph.client.vmbench.keyring"), "{e}");
    }

    #[test]
    fn rbd_runs_as_the_named_client_with_bounded_waits() {
        let d = tempfile::tempdir().unwrap();
        let (conf, kr) = (d.path().join("c"), d.path().join("k"));
        std::fs::write(&conf, MINIMAL_CONF).unwrap();
        write_private(&kr, AUTHTOOL_KEYRING).unwrap();
        let s = CephSpec::resolve(&conf, Some(&kr), Some("vmbench"), None).unwrap();
        let argv: Vec<String> = s
            .rbd_args(&["ls", "rbd"])
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let want = format!(
            "-c {} --keyring {} --id vmbench --client-mount-timeout 30 --rados-mon-op-timeout 60 \
             --rados-osd-op-timeout 120 ls rbd",
            conf.display(),
            kr.display()
        );
        assert_eq!(argv.join(" "), want);
        assert!(
            !format!("{s:?}").contains("AQC3"),
            "the key in a debug print"
        );
    }
}
