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
use std::path::Path;

/// The libvirt connection the secret is defined on (the embedded servers are local; so is QEMU).
pub const LIBVIRT_URI: &str = "qemu:///system";
/// Usage names of vmbench's libvirt secrets start with this.
pub const USAGE_PREFIX: &str = "vmbench-iscsi-";
/// File (in the tgt server directory) holding the usage name of the run's secret, for cleanup.
pub const USAGE_FILE: &str = "libvirt-secret-usage";
/// Length of a generated secret (tgtd accepts up to 255; RFC 3720 wants at least 12 bytes).
const SECRET_LEN: usize = 32;

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
    /// from `path`. Errors name the file and the problem, never the secret.
    pub fn from_file(path: &Path) -> Result<Chap, StorageError> {
        let bad = |why: String| {
            StorageError::Invalid(format!(
                "iSCSI CHAP file {}: {why} (expected lines username=NAME and secret=VALUE)",
                path.display()
            ))
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
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
                    return Err(bad(format!(
                        "line {}: unknown key '{}' (valid: username, secret)",
                        i + 1,
                        k
                    )))
                }
                None => return Err(bad(format!("line {}: no '='", i + 1))),
            }
        }
        let username = username
            .filter(|u| !u.is_empty())
            .ok_or_else(|| bad("no username".into()))?;
        let secret = secret
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("no secret".into()))?;
        if !username.chars().all(|c| c.is_ascii_graphic()) {
            return Err(bad(
                "the username must be printable ASCII without spaces".into()
            ));
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

/// A libvirt secret of usage type iscsi holding a CHAP secret; undefined on drop.
#[derive(Debug)]
pub struct LibvirtSecret {
    usage: String,
}

impl LibvirtSecret {
    /// Defines an ephemeral, private secret with usage `usage` and sets its value.
    pub fn define(usage: &str, chap: &Chap) -> Result<LibvirtSecret, StorageError> {
        let conn = connect()?;
        let xml = format!(
            "<secret ephemeral='yes' private='yes'><description>vmbench iSCSI CHAP \
             (one run)</description><usage type='iscsi'><target>{usage}</target></usage></secret>"
        );
        let r = virt::secret::Secret::define_xml(&conn, &xml, 0).and_then(|s| {
            let set = s.set_value(chap.secret().as_bytes(), 0);
            if set.is_err() {
                let _ = s.undefine();
            }
            set
        });
        close(conn);
        r.map_err(|e| libvirt_error("defining the iSCSI CHAP secret", e))?;
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

/// Undefines the iscsi secret with usage `usage`; `Ok(false)` when there is none.
pub fn undefine(usage: &str) -> Result<bool, StorageError> {
    let conn = connect()?;
    let r = match virt::secret::Secret::lookup_by_usage(
        &conn,
        virt::sys::VIR_SECRET_USAGE_TYPE_ISCSI as i32,
        usage,
    ) {
        Ok(s) => s.undefine().map(|()| true),
        Err(_) => Ok(false),
    };
    close(conn);
    r.map_err(|e| libvirt_error("undefining the iSCSI CHAP secret", e))
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
        let dir = std::env::temp_dir().join(format!("vmbench-chap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("chap");
        std::fs::write(&f, "# lab SAN\nusername = bench\nsecret=s3cr3t-Value-123\n").unwrap();
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
            std::fs::write(&f, text).unwrap();
            let e = Chap::from_file(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains("hunter22"), "{e}");
        }
        let e = Chap::from_file(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing") && e.contains("expected lines"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
