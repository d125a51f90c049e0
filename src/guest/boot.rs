//! Booting a guest and waiting for its agent: the one sequence the KVM boot probe and matrix
//! cells share. A guest that never says hello (a nested KVM that cannot run a stock kernel, a
//! broken image) ends in an error carrying the console's tail, never in a hang.

use super::channel::Channel;
use super::vcpus::{self, VcpuAt};
use super::{Guest, GuestError};
use crate::hypervisor::domain_xml::{self, DomainXmlError};
use crate::hypervisor::libvirt::{DomainState, Libvirt, LibvirtError, RunningDomain};
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
    #[error("the guest never said hello ({source}; {at}); console tail: {console_tail}")]
    NoHello {
        /// The channel or protocol error.
        #[source]
        source: GuestError,
        /// The domain when the wait ended.
        at: AtNoHello,
        /// The last console lines, or a note that it is empty.
        console_tail: String,
    },
    /// Cancelled (Ctrl-C) before the guest said hello.
    #[error("interrupted")]
    Cancelled,
    /// The caller stopped waiting before the boot timeout (the probe's silent console).
    #[error("the host stopped waiting ({at})")]
    GaveUp {
        /// The domain then.
        at: Box<AtNoHello>,
    },
}

/// Why the caller's stop future ended the wait for the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Ctrl-C: the domain goes at once, nothing more is read from it.
    Cancelled,
    /// The caller gave up on the guest: the domain is described first, as after a timeout.
    GaveUp,
}

/// The domain as the wait for its hello ended: whether it ran, and how much CPU it had. An
/// empty console says only that the guest printed nothing; its CPU time says why: a guest that
/// had almost none was blocked (QEMU stuck in its disk's I/O, or starved of the host's CPUs), one
/// that had seconds of it was running and stuck or slow inside. The CPU time comes from the
/// domain's cgroup (`Groups::Cpu`), which answers even when QEMU is stuck; the vCPUs from QEMU's
/// monitor, asked with a time limit for that reason.
#[derive(Debug, Clone, PartialEq)]
pub struct AtNoHello {
    /// The domain's state.
    pub state: DomainState,
    /// CPU time of QEMU and its vCPU threads since the start, seconds (none: not known).
    pub cpu_s: Option<f64>,
    /// How long the host waited, seconds.
    pub waited_s: f64,
    /// Where its vCPUs were (empty: not read, or QEMU did not answer within [`VCPU_READ_LIMIT`]).
    pub vcpus: Vec<VcpuAt>,
}

/// How long a running domain's QEMU may take to dump its vCPUs' registers; one that does not
/// answer is stuck itself, which its CPU time already tells.
const VCPU_READ_LIMIT: Duration = Duration::from_secs(3);

impl AtNoHello {
    async fn of(domain: &RunningDomain, waited: Duration) -> AtNoHello {
        let cpu = domain.stats(crate::hypervisor::domstats::Groups::Cpu);
        let state = domain.state();
        // A stopped domain has no monitor to ask. Under Xen the call fails at once (libxl has
        // no QEMU monitor), and no vCPUs are shown.
        let vcpus = match state {
            DomainState::Running => domain
                .qmp_within(vcpus::INFO_REGISTERS, VCPU_READ_LIMIT)
                .await
                .map(|r| vcpus::parse_reply(&r))
                .unwrap_or_default(),
            _ => vec![],
        };
        AtNoHello {
            state,
            cpu_s: cpu.and_then(|s| s.cpu_time_ns).map(|ns| ns as f64 / 1e9),
            waited_s: waited.as_secs_f64(),
            vcpus,
        }
    }
}

impl std::fmt::Display for AtNoHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}",
            crate::hypervisor::watch::describe_state(&self.state)
        )?;
        match self.cpu_s {
            Some(c) => write!(
                f,
                ", {c:.1} s of host CPU in {:.0} s since its start",
                self.waited_s
            )?,
            None => write!(f, ", its CPU time unknown")?,
        }
        let vcpus: Vec<String> = self.vcpus.iter().map(|v| v.to_string()).collect();
        if !vcpus.is_empty() {
            write!(f, "; {}", vcpus.join(", "))?;
        }
        Ok(())
    }
}

/// A booted guest: the transient domain (destroyed on drop) and its agent.
pub struct Booted {
    /// The domain; dropping it destroys the domain.
    pub domain: RunningDomain,
    /// The agent, past its hello.
    pub guest: Guest,
    /// How long libvirt's domain start call took (part of the boot).
    pub domain_start: Duration,
}

/// Starts `spec` as a transient domain, connects the agent channel and waits up to
/// `boot_timeout` for the hello; `stop` resolving ends the wait (see [`Stop`]). On any failure
/// the domain is destroyed before returning.
pub async fn boot_and_hello(
    conn: &Libvirt,
    spec: &DomainSpec,
    boot_timeout: Duration,
    stop: impl Future<Output = Stop>,
) -> Result<Booted, BootError> {
    let xml = domain_xml::render(spec)?;
    let t_start = std::time::Instant::now();
    let domain = conn.start_transient(&xml)?;
    let domain_start = t_start.elapsed();
    let t0 = std::time::Instant::now();
    let hello = async {
        let c = Channel::open(conn, &domain, CHANNEL_TIMEOUT).await?;
        Guest::hello(c, boot_timeout).await
    };
    let r = tokio::select! {
        r = hello => Ok(r),
        s = stop => Err(s),
    };
    match r {
        Ok(Ok(guest)) => Ok(Booted {
            domain,
            guest,
            domain_start,
        }),
        Ok(Err(source)) => Err(BootError::NoHello {
            source,
            at: AtNoHello::of(&domain, t0.elapsed()).await,
            console_tail: console_tail(&spec.console_log),
        }),
        Err(Stop::Cancelled) => Err(BootError::Cancelled),
        Err(Stop::GaveUp) => Err(BootError::GaveUp {
            at: Box::new(AtNoHello::of(&domain, t0.elapsed()).await),
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
