//! iSCSI CHAP credentials: a random per-run account for the embedded tgtd, credentials read from
//! a file for an external target, and the libvirt secret (usage type `iscsi`) through which QEMU
//! gets the secret. The secret value is never formatted into a message, a log, a URL, a result or
//! the domain XML: the XML names the libvirt secret by its usage ([`super::NetAuth::IscsiChap`]).
//!
//! The libvirt secret is ephemeral (never written to disk by libvirt) and private (its value
//! cannot be read back through the API). It is undefined when [`LibvirtSecret`] is dropped; a run
//! killed with SIGKILL leaves it defined, and `vmbench cleanup` finds it by the usage name kept in
//! the run's servers directory ([`USAGE_FILE`]).

use super::StorageError;
use rand::distributions::{Alphanumeric, DistString};
use std::path::{Path, PathBuf};

/// The libvirt connection the secret is defined on (the embedded servers are local; so is QEMU).
pub const LIBVIRT_URI: &str = "qemu:///system";
/// Usage names of vmbench's libvirt secrets start with this.
pub const USAGE_PREFIX: &str = "vmbench-iscsi-";
/// File (in the tgt server directory) holding the usage name of the run's secret, for cleanup.
pub const USAGE_FILE: &str = "libvirt-secret-usage";
/// Length of a generated secret (tgtd accepts up to 255; RFC 3720 wants at least 12 bytes).
const SECRET_LEN: usize = 32;
/// The longest user name or secret libiscsi and tgtd keep.
const MAX_FIELD: usize = 255;
/// What a CHAP file holds, for error messages and `--help`.
pub const FILE_FORMAT: &str =
    "expected lines username=NAME and secret=VALUE, mode 0600 or stricter";

/// CHAP credentials. `Debug` does not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Chap {
    username: String,
    secret: String,
}

impl std::fmt::Debug for Chap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chap")
            .field("username", &self.username)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl Chap {
    /// A fresh random account for one run: `vmbench-TAG` and 32 random letters and digits.
    pub fn random(tag: &str) -> Chap {
        Chap {
            username: format!("vmbench-{tag}"),
            secret: Alphanumeric.sample_string(&mut rand::thread_rng(), SECRET_LEN),
        }
    }

    /// Reads `username=NAME` and `secret=VALUE` lines (`#` comments and blank lines allowed)
    /// from `path`, a regular file that no group or other user may read or write (like an ssh
    /// key: a secret others can read is no secret). Errors name the file and the problem, never
    /// the secret.
    pub fn from_file(path: &Path) -> Result<Chap, StorageError> {
        let bad = |why: String| {
            StorageError::Invalid(format!(
                "iSCSI CHAP file {}: {why} ({FILE_FORMAT})",
                path.display()
            ))
        };
        check_private(path).map_err(bad)?;
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Chap::parse(&text).map_err(bad)
    }

    /// The `username=`/`secret=` lines of a CHAP file; the error never holds the secret.
    fn parse(text: &str) -> Result<Chap, String> {
        let (mut username, mut secret) = (None, None);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once('=').map(|(k, v)| (k.trim(), v)) {
                Some(("username", v)) => username = Some(v.trim().to_string()),
                Some(("secret", v)) => secret = Some(v.trim().to_string()),
                Some((k, _)) => {
                    return Err(format!(
                        "line {}: unknown key '{}' (valid: username, secret)",
                        i + 1,
                        k
                    ))
                }
                None => return Err(format!("line {}: no '='", i + 1)),
            }
        }
        let username = username.filter(|u| !u.is_empty()).ok_or("no username")?;
        let secret = secret.filter(|s| !s.is_empty()).ok_or("no secret")?;
        if !username.chars().all(|c| c.is_ascii_graphic()) {
            return Err("the username must be printable ASCII without spaces".into());
        }
        // libiscsi and tgtd keep both in 255-byte strings; a control character could not
        // round-trip through libvirt's secret or a file line.
        if username.len() > MAX_FIELD || secret.len() > MAX_FIELD {
            return Err(format!(
                "the username and the secret may have at most {MAX_FIELD} bytes"
            ));
        }
        if secret.chars().any(char::is_control) {
            return Err("the secret contains a control character".into());
        }
        Ok(Chap { username, secret })
    }

    /// The CHAP user name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The secret, for tgtadm and libvirt only.
    pub(super) fn secret(&self) -> &str {
        &self.secret
    }
}

/// Refuses a secret's file (a CHAP file, a Ceph keyring) that is not a regular file or that a
/// group or other user may access.
pub(super) fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {mode:04o} lets other users read or change it (chmod 600 {})",
            path.display()
        ));
    }
    Ok(())
}

/// The secret alone in a file, for `qemu-img`/`qemu-io --object secret,id=ID,file=PATH`, so
/// that it is never on a command line (`/proc/PID/cmdline` is readable by every local user):
/// mode 0600 in a new 0700 directory with a random name, both removed on drop.
#[derive(Debug)]
pub struct SecretFile {
    dir: PathBuf,
    file: PathBuf,
}

impl SecretFile {
    /// Writes `chap`'s secret (no newline: QEMU's secret object takes the file's bytes).
    pub fn write(chap: &Chap) -> Result<SecretFile, StorageError> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let name = Alphanumeric.sample_string(&mut rand::thread_rng(), 12);
        let dir = std::env::temp_dir().join(format!("vmbench-chap-{name}"));
        let io = |what: &Path| {
            let context = format!("writing the CHAP secret file {}", what.display());
            move |source| StorageError::Io { context, source }
        };
        // `create` fails on anything already there, a planted symlink included.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        let s = SecretFile {
            file: dir.join("secret"),
            dir,
        };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&s.file)
            .and_then(|mut f| f.write_all(chap.secret().as_bytes()))
            .map_err(io(&s.file))?;
        Ok(s)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.file
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// CHAP for an external target (`--iscsi-chap-file`), read once per run, and the libvirt
/// secret QEMU logs in with (usage `vmbench-iscsi-ext-TAG`, unique per run). Its usage name is
/// kept in `DIR/`[`USAGE_FILE`] for `vmbench cleanup`; dropping it undefines the secret and
/// removes that file.
#[derive(Debug)]
pub struct RunChap {
    chap: Chap,
    secret: LibvirtSecret,
    usage_file: PathBuf,
}

impl RunChap {
    /// Reads `file` and defines the run's libvirt secret; `dir` gets the usage file.
    pub fn define(file: &Path, dir: &Path) -> Result<RunChap, StorageError> {
        let chap = Chap::from_file(file)?;
        let usage = format!("{USAGE_PREFIX}ext-{}", super::cmd::unique_tag());
        let usage_file = dir.join(USAGE_FILE);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&usage_file, &usage))
            .map_err(|source| StorageError::Io {
                context: format!("writing {}", usage_file.display()),
                source,
            })?;
        match LibvirtSecret::define(&usage, &chap) {
            Ok(secret) => Ok(RunChap {
                chap,
                secret,
                usage_file,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&usage_file);
                Err(e)
            }
        }
    }

    /// The credentials, for vmbench's own qemu-img and qemu-io ([`SecretFile`]).
    pub fn chap(&self) -> &Chap {
        &self.chap
    }

    /// How QEMU logs in: the user name and the libvirt secret's usage.
    pub fn auth(&self) -> super::NetAuth {
        super::NetAuth::IscsiChap {
            username: self.chap.username().to_string(),
            secret_usage: self.secret.usage().to_string(),
        }
    }
}

impl Drop for RunChap {
    fn drop(&mut self) {
        // The usage file stays while the secret may still be defined, for `vmbench cleanup`.
        if undefine(self.secret.usage()).is_ok() {
            let _ = std::fs::remove_file(&self.usage_file);
        }
    }
}

/// The usage types of the libvirt secrets vmbench defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretType {
    /// An iSCSI CHAP secret (`<usage type='iscsi'><target>`).
    Iscsi,
    /// A Ceph client's cephx key (`<usage type='ceph'><name>`): its value is the key's bytes,
    /// the base64 that `ceph auth get-key` prints, decoded.
    Ceph,
}

impl SecretType {
    const ALL: [SecretType; 2] = [SecretType::Iscsi, SecretType::Ceph];

    fn libvirt(self) -> i32 {
        match self {
            SecretType::Iscsi => virt::sys::VIR_SECRET_USAGE_TYPE_ISCSI as i32,
            SecretType::Ceph => virt::sys::VIR_SECRET_USAGE_TYPE_CEPH as i32,
        }
    }

    /// The secret's XML; `usage` is a name vmbench made (prefix and tag: no markup).
    fn xml(self, usage: &str) -> String {
        let (kind, element, what) = match self {
            SecretType::Iscsi => ("iscsi", "target", "iSCSI CHAP"),
            SecretType::Ceph => ("ceph", "name", "Ceph cephx key"),
        };
        format!(
            "<secret ephemeral='yes' private='yes'><description>vmbench {what} (one \
             run)</description><usage type='{kind}'><{element}>{usage}</{element}></usage></secret>"
        )
    }
}

/// A libvirt secret of vmbench's (an iSCSI CHAP secret, a cephx key); undefined on drop.
#[derive(Debug)]
pub struct LibvirtSecret {
    usage: String,
}

impl LibvirtSecret {
    /// Defines an ephemeral, private iSCSI secret with usage `usage` holding `chap`'s secret.
    pub fn define(usage: &str, chap: &Chap) -> Result<LibvirtSecret, StorageError> {
        Self::define_value(SecretType::Iscsi, usage, chap.secret().as_bytes())
    }

    /// Defines an ephemeral, private secret of type `kind` with usage `usage` and sets its
    /// value.
    pub fn define_value(
        kind: SecretType,
        usage: &str,
        value: &[u8],
    ) -> Result<LibvirtSecret, StorageError> {
        let conn = connect()?;
        let r = virt::secret::Secret::define_xml(&conn, &kind.xml(usage), 0).and_then(|s| {
            let set = s.set_value(value, 0);
            if set.is_err() {
                let _ = s.undefine();
            }
            set
        });
        close(conn);
        r.map_err(|e| libvirt_error("defining a libvirt secret", e))?;
        Ok(LibvirtSecret {
            usage: usage.to_string(),
        })
    }

    /// Its usage name (what the disk XML references).
    pub fn usage(&self) -> &str {
        &self.usage
    }
}

impl Drop for LibvirtSecret {
    fn drop(&mut self) {
        let _ = undefine(&self.usage);
    }
}

/// Undefines vmbench's secret (of any [`SecretType`]) with usage `usage`; `Ok(false)` when
/// there is none.
pub fn undefine(usage: &str) -> Result<bool, StorageError> {
    let conn = connect()?;
    let found = SecretType::ALL
        .iter()
        .find_map(|t| virt::secret::Secret::lookup_by_usage(&conn, t.libvirt(), usage).ok());
    let r = match found {
        Some(s) => s.undefine().map(|()| true),
        None => Ok(false),
    };
    close(conn);
    r.map_err(|e| libvirt_error("undefining a libvirt secret", e))
}

/// Usage names of every libvirt secret vmbench defined ([`USAGE_PREFIX`]) that still exists.
pub fn defined_usages() -> Result<Vec<String>, StorageError> {
    let conn = connect()?;
    let r = conn.list_all_secrets(0).map(|all| {
        all.iter()
            .filter_map(|s| s.get_usage_id().ok())
            .filter(|u| u.starts_with(USAGE_PREFIX))
            .collect()
    });
    close(conn);
    r.map_err(|e| libvirt_error("listing libvirt secrets", e))
}

fn connect() -> Result<virt::connect::Connect, StorageError> {
    virt::connect::Connect::open(Some(LIBVIRT_URI))
        .map_err(|e| libvirt_error(&format!("connecting to {LIBVIRT_URI}"), e))
}

fn close(mut conn: virt::connect::Connect) {
    let _ = conn.close();
}

fn libvirt_error(what: &str, e: virt::error::Error) -> StorageError {
    StorageError::Command {
        command: format!("libvirt: {what}"),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_accounts_differ_and_debug_hides_the_secret() {
        let a = Chap::random("1-2");
        let b = Chap::random("1-2");
        assert_ne!(a.secret(), b.secret());
        assert_eq!(a.secret().len(), SECRET_LEN);
        assert_eq!(a.username(), "vmbench-1-2");
        let dbg = format!("{a:?}");
        assert!(!dbg.contains(a.secret()), "{dbg}");
        assert!(dbg.contains("<hidden>"), "{dbg}");
    }

    #[test]
    fn chap_files_parse_and_bad_ones_say_why_without_the_secret() {
        // A TempDir, so that a failed assertion leaves nothing behind.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let f = dir.join("chap");
        write_private(&f, "# lab SAN\nusername = bench\nsecret=s3cr3t-Value-123\n");
        let c = Chap::from_file(&f).unwrap();
        assert_eq!((c.username(), c.secret()), ("bench", "s3cr3t-Value-123"));
        let cases = [
            ("secret=hunter22hunter22\n", "no username"),
            ("username=u\n", "no secret"),
            (
                "username=u\nsecret=hunter22hunter22\npassword=x\n",
                "unknown key 'password'",
            ),
            ("username=u\nhunter22hunter22\n", "line 2: no '='"),
        ];
        for (text, want) in cases {
            write_private(&f, text);
            let e = Chap::from_file(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains("hunter22"), "{e}");
        }
        let e = Chap::from_file(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing") && e.contains("expected lines"), "{e}");
    }

    fn write_private(f: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(f, text).unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn chap_files_others_may_read_and_odd_values_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("chap");
        write_private(&f, "username=u\nsecret=hunter22hunter22\n");
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Chap::from_file(&f).unwrap_err().to_string();
            assert!(
                e.contains(&format!("mode {mode:04o}")) && e.contains("chmod 600"),
                "{e}"
            );
            assert!(e.contains(&f.display().to_string()), "{e}");
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(Chap::from_file(&f).unwrap().username(), "u");
        let e = Chap::from_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let g = dir.path().join("long");
        let long = "x".repeat(256);
        for text in [
            format!("username={long}\nsecret=hunter22hunter22\n"),
            format!("username=u\nsecret=hunter22{long}\n"),
        ] {
            write_private(&g, &text);
            let e = Chap::from_file(&g).unwrap_err().to_string();
            assert!(e.contains("at most 255 bytes") && !e.contains(&long), "{e}");
        }
        write_private(&g, "username=u\nsecret=hunter22\thunter22\n");
        let e = Chap::from_file(&g).unwrap_err().to_string();
        assert!(
            e.contains("control character") && !e.contains("hunter22"),
            "{e}"
        );
    }

    #[test]
    fn the_secret_file_is_private_exact_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let c = Chap::random("sf");
        let f = SecretFile::write(&c).unwrap();
        let path = f.path().to_path_buf();
        let dir = path.parent().unwrap().to_path_buf();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(&dir)), (0o600, 0o700));
        // QEMU's secret object takes the file's bytes: no newline.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), c.secret());
        assert!(!path.to_string_lossy().contains(c.secret()));
        let other = SecretFile::write(&c).unwrap();
        assert_ne!(other.path(), path, "each call has its own directory");
        drop(f);
        assert!(!path.exists() && !dir.exists());
    }
}
