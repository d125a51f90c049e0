//! Why a cell failed, as a type. The pipeline returns these; only the result (`Outcome::Failed`)
//! holds the text, and `CellResult::failure_kind` holds the kind, so reports and comparisons
//! group failures without reading the message.

use super::config::SizeError;
use super::probe::ProbeError;
use crate::cell::{HostName, Hypervisor};
use crate::guest::boot::AtNoHello;
use crate::guest::GuestError;
use crate::hypervisor::domain_xml::DomainXmlError;
use crate::hypervisor::libvirt::{DomainState, LibvirtError};
use crate::hypervisor::pinning::PinError;
use crate::hypervisor::watch::{self, StorageLoss};
use crate::results::FailureKind;
use crate::storage::pool::PoolError;
use crate::storage::StorageError;
use crate::workload::EngineError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The last lines of the guest's console, read when the failure happened.
#[derive(Debug, Clone)]
pub struct ConsoleTail {
    /// The console log.
    pub path: PathBuf,
    /// Its last lines (empty when the guest printed nothing).
    pub tail: String,
}

impl ConsoleTail {
    /// The last `lines` lines of the console log at `path`.
    pub fn read(path: &Path, lines: usize) -> ConsoleTail {
        ConsoleTail {
            path: path.to_path_buf(),
            tail: super::cell_run::read_tail(path, lines),
        }
    }
}

impl fmt::Display for ConsoleTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tail = if self.tail.trim().is_empty() {
            "(console is empty: the guest printed nothing)"
        } else {
            &self.tail
        };
        write!(f, "\n  console tail ({}):", self.path.display())?;
        for l in tail.lines() {
            write!(f, "\n    | {l}")?;
        }
        Ok(())
    }
}

/// What the domain's state adds to a guest error (it is gone, paused, crashed), if anything.
#[derive(Debug, Clone, Default)]
pub struct DomainNote(pub Option<DomainState>);

impl fmt::Display for DomainNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(s) => write!(f, "; {}", watch::describe_state(s)),
            None => Ok(()),
        }
    }
}

/// Why a cell failed.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// `--size` is not a size (checked before the run too; kept for a resumed run's config).
    #[error("{0}")]
    Size(#[source] SizeError),
    /// `--pin on`, and no pinning of the guest's vCPUs fits this host.
    #[error("{0}")]
    Pinning(#[source] PinError),
    /// The workload's engine could not plan the cell (job file, size).
    #[error("{0}")]
    Plan(#[source] EngineError),
    /// The disk could not be provisioned, or its backend made.
    #[error("{0}")]
    Provision(#[source] StorageError),
    /// The backend or its server could not be made (the server registry's error, shared by
    /// every cell that needs that server).
    #[error("{0}")]
    Backend(#[source] Arc<StorageError>),
    /// The guest image could not be put on the cell's libvirt host (the first cell's error,
    /// shared by the host's other cells).
    #[error("guest image on host {host}: {source}")]
    Image {
        /// The host.
        host: HostName,
        /// libvirt's storage error.
        source: Arc<PoolError>,
    },
    /// A host file or directory could not be written.
    #[error("{context}: {source}")]
    HostIo {
        /// What was being written.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The domain definition could not be made.
    #[error("{0}")]
    DomainXml(#[source] DomainXmlError),
    /// libvirt refused the domain.
    #[error("{0}")]
    Hypervisor(#[source] LibvirtError),
    /// No connection to this cell's hypervisor.
    #[error("no connection")]
    NoConnection,
    /// The guest never said hello in time.
    #[error("boot: {source}; {at}{console}")]
    BootTimeout {
        /// The timeout.
        source: GuestError,
        /// The domain's state, CPU time and vCPUs then (boxed: the rarest variant need not
        /// widen every `Result<_, CellError>`).
        at: Box<AtNoHello>,
        /// The console at that moment.
        console: ConsoleTail,
    },
    /// Boot failed otherwise (the guest stopped, or sent garbage instead of its hello).
    #[error("boot: {source}{console}")]
    Boot {
        /// The cause.
        source: GuestError,
        /// The console at that moment.
        console: ConsoleTail,
    },
    /// The guest kernel panicked (its console says so).
    #[error("guest kernel panic: {line}{console}")]
    GuestPanic {
        /// The panic line.
        line: String,
        /// The console.
        console: ConsoleTail,
    },
    /// The guest went silent, or its job outlived its limit.
    #[error("{source}{note}{console}")]
    Stalled {
        /// The timeout.
        source: GuestError,
        /// The domain's state.
        note: DomainNote,
        /// The console.
        console: ConsoleTail,
    },
    /// The agent's channel closed mid-job (QEMU exited or was killed).
    #[error("{source}{note}{console}")]
    GuestStopped {
        /// The closed channel.
        source: GuestError,
        /// The domain's state.
        note: DomainNote,
        /// The console.
        console: ConsoleTail,
    },
    /// The guest broke the protocol: bad, oversized or garbage frames.
    #[error("{source}{note}{console}")]
    HostileGuest {
        /// The violation.
        source: GuestError,
        /// The domain's state.
        note: DomainNote,
        /// The console.
        console: ConsoleTail,
    },
    /// The engine's output from the guest makes no sense (unparsable or impossible figures).
    #[error("{0}")]
    BadOutput(#[source] EngineError),
    /// The agent reported an error, or the channel failed on the host side.
    #[error("{source}{note}{console}")]
    Agent {
        /// The error.
        source: GuestError,
        /// The domain's state.
        note: DomainNote,
        /// The console.
        console: ConsoleTail,
    },
    /// The hypervisor cannot reach the provisioned disk (a Xen datapath libxl lacks).
    #[error("{0}")]
    Datapath(#[source] crate::hypervisor::xen::Skip),
    /// The storage server died, or QEMU paused the domain on an I/O error.
    #[error("{reason}{console}")]
    StorageLost {
        /// Which, and how.
        reason: StorageLoss,
        /// The console.
        console: ConsoleTail,
    },
    /// The progress watchdog: the disk under test completed no I/O and the engine printed no
    /// moving status line for `--stall-timeout` seconds, while the guest's heartbeat went on.
    #[error("no I/O progress for {secs} s (the guest is alive; --stall-timeout){console}")]
    NoIoProgress {
        /// Seconds without progress.
        secs: u64,
        /// The console.
        console: ConsoleTail,
    },
    /// A step failed in the guest with a non-zero exit.
    #[error("{step} failed in the guest (exit {exit_code}): {stderr}")]
    EngineFailed {
        /// The step ("fio", "mkfs" ...).
        step: &'static str,
        /// Its exit code.
        exit_code: i32,
        /// The end of its stderr.
        stderr: String,
    },
    /// A step never reported its end.
    #[error("{step} never finished{console}")]
    StepUnfinished {
        /// The step.
        step: &'static str,
        /// The console.
        console: ConsoleTail,
    },
    /// The job failed without a failed step.
    #[error("job failed")]
    JobFailed,
    /// The libvirt connection died during the cell.
    #[error(
        "libvirt connection lost during the cell (libvirtd restarted?): the agent's channel and \
         the host-side figures go through it, so the cell is incomplete"
    )]
    LibvirtLost,
    /// A signal stopped the cell.
    #[error("interrupted by signal")]
    Interrupted,
    /// A host cell's step (`--hypervisor host`): the engine run on the host failed, was
    /// refused, timed out or was interrupted.
    #[error("on the host: {0}")]
    HostStep(#[source] crate::workload::host::HostStepError),
    /// A host cell's filesystem (loop device, mkfs, mount, or their teardown) failed.
    #[error("host filesystem: {0}")]
    HostFs(#[source] StorageError),
    /// One instance of the boot storm (`--boot-storm`) failed; the storm fails the cell.
    #[error("boot storm, instance {instance} of {k}: {source}")]
    Storm {
        /// Which instance (1-based, start order).
        instance: u32,
        /// Instances in the storm.
        k: u32,
        /// Its failure.
        #[source]
        source: Box<CellError>,
    },
}

fn host_step_kind(e: &crate::workload::host::HostStepError) -> FailureKind {
    use crate::workload::host::HostStepError as H;
    match e {
        H::Failed { .. } => FailureKind::EngineFailed,
        H::Interrupted => FailureKind::Interrupted,
        H::TimedOut { .. } => FailureKind::Stalled,
        H::Io { .. } => FailureKind::HostIo,
        H::NotOnHost(_) | H::Refused(_) | H::NoTarget(_) => FailureKind::Config,
    }
}

/// Why a hypervisor's cells cannot run on a host: they are reported unsupported with this.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// No libvirt connection to it.
    #[error("unsupported on this host: {hypervisor}{on}: {source}")]
    Connect {
        /// The hypervisor.
        hypervisor: Hypervisor,
        /// The host, when it is not the default one.
        on: OnHost,
        /// libvirt's error.
        source: LibvirtError,
    },
    /// Connected, but its probe failed (no /dev/kvm, no booting guest).
    #[error("unsupported on this host: {hypervisor}{on}: {source}")]
    Probe {
        /// The hypervisor.
        hypervisor: Hypervisor,
        /// The host, when it is not the default one.
        on: OnHost,
        /// What the probe found.
        source: ProbeError,
    },
    /// The connection died (libvirtd restarted) and reconnecting failed.
    #[error("{hypervisor}: libvirt connection lost: {source}")]
    Lost {
        /// The hypervisor.
        hypervisor: Hypervisor,
        /// libvirt's error on reconnecting.
        source: LibvirtError,
    },
}

/// A named host and its URI, shown after the hypervisor; nothing for the default host.
#[derive(Debug, Clone)]
pub struct OnHost {
    /// The host.
    pub host: HostName,
    /// Its libvirt URI.
    pub uri: String,
}

impl fmt::Display for OnHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.is_default() {
            true => Ok(()),
            false => write!(f, " on host {} ({})", self.host, self.uri),
        }
    }
}

/// Where a guest error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum During {
    /// Waiting for the hello.
    Boot,
    /// Running a job.
    Job,
}

impl CellError {
    /// The kind recorded with the result.
    pub fn kind(&self) -> FailureKind {
        use CellError as E;
        match self {
            E::Size(_) | E::Pinning(_) | E::Plan(_) => FailureKind::Config,
            E::Provision(_) | E::Backend(_) | E::Image { .. } => FailureKind::Provision,
            E::HostIo { .. } => FailureKind::HostIo,
            E::DomainXml(_) | E::Hypervisor(_) | E::NoConnection => FailureKind::Hypervisor,
            E::BootTimeout { .. } => FailureKind::BootTimeout,
            E::Boot { source, .. } => guest_kind(source),
            E::GuestPanic { .. } => FailureKind::GuestPanic,
            E::Stalled { .. } => FailureKind::Stalled,
            E::GuestStopped { .. } => FailureKind::GuestStopped,
            E::HostileGuest { .. } | E::BadOutput(_) => FailureKind::HostileGuest,
            E::Agent { .. } => FailureKind::AgentError,
            E::StorageLost { .. } => FailureKind::StorageLost,
            E::Datapath(_) => FailureKind::Config,
            E::NoIoProgress { .. } => FailureKind::Stalled,
            E::EngineFailed { .. } | E::StepUnfinished { .. } | E::JobFailed => {
                FailureKind::EngineFailed
            }
            E::LibvirtLost => FailureKind::LibvirtLost,
            E::Interrupted => FailureKind::Interrupted,
            E::Storm { source, .. } => source.kind(),
            E::HostStep(e) => host_step_kind(e),
            E::HostFs(_) => FailureKind::Provision,
        }
    }

    /// A guest error of a running job, with what the domain and console add to it.
    pub fn from_guest(source: GuestError, note: DomainNote, console: ConsoleTail) -> CellError {
        match source {
            GuestError::Timeout { .. } => CellError::Stalled {
                source,
                note,
                console,
            },
            GuestError::Closed { .. } => CellError::GuestStopped {
                source,
                note,
                console,
            },
            GuestError::Frame(_) | GuestError::Protocol(_) => CellError::HostileGuest {
                source,
                note,
                console,
            },
            GuestError::Agent(_) | GuestError::Io { .. } => CellError::Agent {
                source,
                note,
                console,
            },
        }
    }

    /// A failed boot: the hello did not come.
    pub fn from_boot(source: GuestError, at: AtNoHello, console: ConsoleTail) -> CellError {
        match source {
            GuestError::Timeout { .. } => CellError::BootTimeout {
                source,
                at: Box::new(at),
                console,
            },
            source => CellError::Boot { source, console },
        }
    }

    /// A host write that failed, saying what was written.
    pub fn host_io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CellError {
        let context = context.into();
        move |source| CellError::HostIo { context, source }
    }
}

/// The kind of a guest error outside a job's context (at boot).
fn guest_kind(e: &GuestError) -> FailureKind {
    match e {
        GuestError::Timeout { .. } => FailureKind::BootTimeout,
        GuestError::Closed { .. } => FailureKind::GuestStopped,
        GuestError::Frame(_) | GuestError::Protocol(_) => FailureKind::HostileGuest,
        GuestError::Agent(_) | GuestError::Io { .. } => FailureKind::AgentError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::libvirt::PausedReason;

    fn console(tail: &str) -> ConsoleTail {
        ConsoleTail {
            path: "/r/console.log".into(),
            tail: tail.into(),
        }
    }

    #[test]
    fn guest_errors_map_to_kinds_by_type() {
        let timeout = || GuestError::Timeout {
            waiting_for: "a heartbeat".into(),
            secs: 4,
        };
        let e = CellError::from_guest(timeout(), DomainNote::default(), console("x"));
        assert_eq!(e.kind(), FailureKind::Stalled);
        let at = || AtNoHello {
            state: DomainState::Running,
            cpu_s: Some(0.4),
            waited_s: 60.2,
            vcpus: vec![],
        };
        let e = CellError::from_boot(timeout(), at(), console(""));
        assert_eq!(e.kind(), FailureKind::BootTimeout);
        // The boot timeout says what the domain did meanwhile.
        assert!(
            e.to_string().contains(
                "; the domain is running, 0.4 s of host CPU in 60 s since its start\n  console tail"
            ),
            "{e}"
        );
        let closed = GuestError::Closed {
            waiting_for: "a job message".into(),
        };
        let e = CellError::from_guest(closed, DomainNote::default(), console(""));
        assert_eq!(e.kind(), FailureKind::GuestStopped);
        let bad = GuestError::Protocol("artifact 'x' is larger than 1 MiB".into());
        let e = CellError::from_guest(bad, DomainNote::default(), console(""));
        assert_eq!(e.kind(), FailureKind::HostileGuest);
        let bad = GuestError::Protocol("garbage".into());
        assert_eq!(
            CellError::from_boot(bad, at(), console("")).kind(),
            FailureKind::HostileGuest
        );
        let e = CellError::BadOutput(EngineError::BonnieNoCsv);
        assert_eq!(e.kind(), FailureKind::HostileGuest);
    }

    #[test]
    fn text_keeps_the_reason_the_note_and_the_console_tail() {
        let e = CellError::from_guest(
            GuestError::Timeout {
                waiting_for: "a heartbeat".into(),
                secs: 4,
            },
            DomainNote(Some(DomainState::Paused(PausedReason::User))),
            console("[ 1.0] booted\n[ 2.0] fio"),
        );
        assert_eq!(
            e.to_string(),
            "timed out after 4 s waiting for a heartbeat; the domain is paused (paused by user)\n  \
             console tail (/r/console.log):\n    | [ 1.0] booted\n    | [ 2.0] fio"
        );
        let e = CellError::BootTimeout {
            source: GuestError::Timeout {
                waiting_for: "the hello".into(),
                secs: 60,
            },
            at: Box::new(AtNoHello {
                state: DomainState::Gone,
                cpu_s: None,
                waited_s: 60.0,
                vcpus: vec![],
            }),
            console: console(" \n"),
        };
        assert!(
            e.to_string().contains(
                "; the domain is gone: QEMU exited or was killed, its CPU time unknown\n"
            ),
            "{e}"
        );
        assert!(e
            .to_string()
            .ends_with("(console is empty: the guest printed nothing)"));
        assert!(e.to_string().starts_with("boot: timed out after 60 s"));
        let e = CellError::EngineFailed {
            step: "fio",
            exit_code: 1,
            stderr: "fio: io_u error".into(),
        };
        assert_eq!(
            e.to_string(),
            "fio failed in the guest (exit 1): fio: io_u error"
        );
        assert_eq!(e.kind().as_str(), "engine_failed");
    }

    #[test]
    fn every_kind_round_trips_through_its_name() {
        for k in FailureKind::ALL {
            assert_eq!(FailureKind::parse(k.as_str()), Some(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        assert_eq!(FailureKind::parse("nope"), None);
    }
}
