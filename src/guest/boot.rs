//! Booting a guest and waiting for its agent: the one sequence the KVM boot probe and matrix
//! cells share. A guest that never says hello (a nested KVM that cannot run a stock kernel, a
//! broken image) ends in an error carrying the console's tail, never in a hang.

use super::channel::Channel;
use super::{Guest, GuestError};
use crate::hypervisor::domain_xml::{self, DomainXmlError};
use crate::hypervisor::libvirt::{Libvirt, LibvirtError, RunningDomain};
use crate::hypervisor::DomainSpec;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// How long QEMU may take to set the agent channel up once the domain started.
const CHANNEL_TIMEOUT: Duration = Duration::from_secs(10);
/// Console lines quoted in a boot failure.
const TAIL_LINES: usize = 10;

/// Why a guest did not come up.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The spec cannot be expressed as domain XML.
    #[error("domain XML: {0}")]
    Xml(#[from] DomainXmlError),
    /// libvirt refused to start the domain.
    #[error("starting the domain: {0}")]
    Start(#[from] LibvirtError),
    /// The guest never said hello in time (or the channel failed).
    #[error("the guest never said hello ({source}); console tail: {console_tail}")]
    NoHello {
        /// The channel or protocol error.
        #[source]
        source: GuestError,
        /// The last console lines, or a note that it is empty.
        console_tail: String,
    },
    /// Cancelled (Ctrl-C) before the guest said hello.
    #[error("interrupted")]
    Cancelled,
}

/// A booted guest: the transient domain (destroyed on drop) and its agent.
pub struct Booted {
    /// The domain; dropping it destroys the domain.
    pub domain: RunningDomain,
    /// The agent, past its hello.
    pub guest: Guest,
}

/// Starts `spec` as a transient domain, connects the agent channel and waits up to
/// `boot_timeout` for the hello; `cancelled` resolving aborts the wait. On any failure the domain
/// is destroyed before returning.
pub async fn boot_and_hello(
    conn: &Libvirt,
    spec: &DomainSpec,
    boot_timeout: Duration,
    cancelled: impl Future<Output = ()>,
) -> Result<Booted, BootError> {
    let xml = domain_xml::render(spec)?;
    let domain = conn.start_transient(&xml)?;
    let hello = async {
        let c = Channel::open(conn, &domain, CHANNEL_TIMEOUT).await?;
        Guest::hello(c, boot_timeout).await
    };
    let r = tokio::select! {
        r = hello => r,
        _ = cancelled => return Err(BootError::Cancelled),
    };
    match r {
        Ok(guest) => Ok(Booted { domain, guest }),
        Err(source) => Err(BootError::NoHello {
            source,
            console_tail: console_tail(&spec.console_log),
        }),
    }
}

/// The console's last lines, or a note that the guest printed nothing.
pub fn console_tail(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    // A console may carry any bytes and grow large: only its end matters.
    let start = bytes.len().saturating_sub(64 * 1024);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    if tail.trim().is_empty() {
        "(empty: the guest printed nothing)".into()
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn console_tail_keeps_the_last_lines_and_names_an_empty_console() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("console.log");
        assert_eq!(
            super::console_tail(&p),
            "(empty: the guest printed nothing)"
        );
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, text).unwrap();
        let t = super::console_tail(&p);
        assert!(t.starts_with("line 21\n") && t.ends_with("line 30"), "{t}");
    }
}
