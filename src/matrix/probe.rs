//! Per-hypervisor capability probe, shared by `vmbench doctor` and the matrix: it runs what the
//! hypervisor's descriptor asks for ([`Probe`]): KVM needs /dev/kvm *and* a guest that really
//! boots (a nested or paravirtual KVM may start a domain whose guest never prints a thing); Xen
//! and QEMU/TCG need nothing beyond their libvirt connection.

use super::cell_run::Cancel;
use super::config::MatrixConfig;
use crate::cell::{Bus, CacheMode, Cell, Format, Hypervisor, IoMode, Layout, WorkloadId};
use crate::guest::boot::{self, BootError};
use crate::guest::dirs;
use crate::hypervisor::libvirt::Libvirt;
use crate::hypervisor::{DomainSpec, GuestFiles, Probe, Sizing, NAME_PREFIX};
use crate::image::ImageInfo;
use crate::storage::DiskSource;
use std::path::Path;
use std::time::Duration;

/// How long a probe boot may take before the hypervisor is declared unable to boot the guest.
pub const PROBE_BOOT_SECS: u64 = 30;

/// How long the probe guest's console may stay empty before the hypervisor is declared unable
/// to boot it. The probe boots with every kernel message on the console, and the kernel's first
/// line ("Linux version ...") is there 0.5 s after start even under TCG; a nested paravirtual
/// KVM that cannot run a stock kernel prints nothing, ever. Waiting the whole
/// [`PROBE_BOOT_SECS`] for such a guest cost every `--hypervisor kvm` run 30 s here.
pub const PROBE_SILENT_SECS: u64 = 5;

/// Why a hypervisor cannot run cells here.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The descriptor's device node is missing (the text says why it would be).
    #[error("{0}")]
    NoDevice(&'static str),
    /// The probe's scratch directory or disk could not be made.
    #[error("probe setup: {0}")]
    Setup(#[source] std::io::Error),
    /// The guest started but never said hello, or the wait was interrupted.
    #[error("probe boot failed: {0}")]
    NoHello(#[source] BootError),
    /// The guest's console stayed empty: its kernel never started, or stopped before its
    /// console.
    #[error(
        "probe boot failed: the guest printed nothing in {secs} s (its kernel prints its first \
         line within a second, even under TCG): the guest never said hello; {at}"
    )]
    Silent {
        /// How long the console was watched.
        secs: u64,
        /// The domain then: its CPU time and where its vCPUs were.
        at: Box<boot::AtNoHello>,
    },
    /// The probe domain could not be defined or started.
    #[error("{0}")]
    Boot(#[source] BootError),
}

/// Ok when `hv` can run cells here; otherwise the reason.
pub async fn probe(
    hv: Hypervisor,
    conn: &Libvirt,
    cfg: &MatrixConfig,
    image: &ImageInfo,
    work: &Path,
    cancel: &Cancel,
    run_id: &str,
) -> Result<(), ProbeError> {
    match hv.desc().probe {
        Probe::Connect => Ok(()),
        // The device and the probe (this machine's image files, a scratch file disk) are about
        // this machine: a remote host's accelerator is tried by its first cell.
        Probe::DeviceAndBoot { .. } if !conn.is_local() => Ok(()),
        Probe::DeviceAndBoot { device, missing } => {
            if !Path::new(device).exists() {
                return Err(ProbeError::NoDevice(missing));
            }
            if !cfg.probe {
                return Ok(());
            }
            let dir = work.join(format!("probe-{hv}"));
            boot_probe(hv, conn, image, &dir, cancel, run_id).await
        }
    }
}

/// Boots the image once with a small scratch disk and waits for the agent's hello.
pub async fn boot_probe(
    hv: Hypervisor,
    conn: &Libvirt,
    image: &ImageInfo,
    dir: &Path,
    cancel: &Cancel,
    run_id: &str,
) -> Result<(), ProbeError> {
    dirs::make_work_dir(dir).map_err(ProbeError::Setup)?;
    let disk = dir.join("probe.raw");
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(16 << 20))
        .map_err(ProbeError::Setup)?;
    // Not a matrix cell: a scratch raw file with the page cache, the gentlest datapath.
    let cell = Cell {
        hypervisor: hv,
        xen_mode: None,
        backend: crate::storage::kind::scratch_backend(),
        format: Format::Raw,
        bus: Bus::VirtioBlk,
        cache: CacheMode::Writeback,
        io: IoMode::Threads,
        layout: Layout::Raw,
        workload: WorkloadId::Preset("probe".into()),
        job: Default::default(),
        tuning: Default::default(),
        host: Default::default(),
        link: Default::default(),
        emulator: Default::default(),
        instance: Default::default(),
    };
    let files = GuestFiles {
        kernel: image.kernel.clone(),
        initrd: image.initrd.clone(),
        console_log: dir.join("console.log"),
    };
    let size = Sizing {
        vcpus: 1,
        memory_mib: 256,
    };
    let name = format!("{NAME_PREFIX}{run_id}-probe-{hv}");
    let mut spec = DomainSpec::for_cell(
        name,
        run_id,
        &cell,
        DiskSource::File { path: disk },
        size,
        files,
    );
    spec.cell_id = format!("probe-{hv}");
    // Every kernel message on the console, so that a kernel that runs shows it at once.
    spec.cmdline.push_str(" ignore_loglevel");
    let boot_timeout = Duration::from_secs(PROBE_BOOT_SECS);
    let stop = async {
        tokio::select! {
            s = cancel.interrupted() => s,
            _ = silent_console(&spec.console_log, Duration::from_secs(PROBE_SILENT_SECS)) => {
                boot::Stop::GaveUp
            }
        }
    };
    let r = match boot::boot_and_hello(conn, &spec, boot_timeout, stop).await {
        Ok(mut b) => {
            let _ = b.guest.power_off().await;
            Ok(())
        }
        Err(BootError::GaveUp { at }) => Err(ProbeError::Silent {
            secs: PROBE_SILENT_SECS,
            at,
        }),
        Err(e @ (BootError::NoHello { .. } | BootError::Cancelled)) => Err(ProbeError::NoHello(e)),
        Err(e) => Err(ProbeError::Boot(e)),
    };
    let _ = std::fs::remove_dir_all(dir);
    r
}

/// Returns once `console` has stayed empty for `limit`; never returns once it has any byte.
async fn silent_console(console: &Path, limit: Duration) {
    let start = tokio::time::Instant::now();
    loop {
        if std::fs::metadata(console).is_ok_and(|m| m.len() > 0) {
            return std::future::pending().await;
        }
        if start.elapsed() >= limit {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::silent_console;
    use std::time::Duration;

    #[tokio::test]
    async fn an_empty_console_is_silent_and_one_with_output_never_is() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        std::fs::write(&log, b"").unwrap();
        let limit = Duration::from_millis(300);
        tokio::time::timeout(Duration::from_secs(5), silent_console(&log, limit))
            .await
            .expect("an empty console is called silent at its limit");
        std::fs::write(&log, b"[    0.000000] Linux version 6.1.0\n").unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(1), silent_console(&log, limit));
        assert!(
            waited.await.is_err(),
            "a console with output was called silent"
        );
    }
}
