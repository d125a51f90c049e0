//! Per-hypervisor capability probe, shared by `vmbench doctor` and the matrix: KVM needs
//! /dev/kvm *and* a guest that really boots (a nested or paravirtual KVM may start a domain whose
//! guest never prints a thing); Xen needs a libxl connection (checked by connecting); QEMU/TCG
//! needs nothing beyond libvirt.

use super::cell_run::{read_tail, Cancel};
use super::config::MatrixConfig;
use crate::cell::{Bus, CacheMode, Format, Hypervisor, IoMode};
use crate::guest::{channel::Channel, Guest};
use crate::hypervisor::libvirt::Libvirt;
use crate::hypervisor::{domain_xml, DiskSpec, DomainSpec, NAME_PREFIX};
use crate::image::ImageInfo;
use crate::storage::DiskSource;
use std::path::Path;
use std::time::Duration;
use vmbench_proto::TEST_DISK_SERIAL;

/// How long a probe boot may take before the hypervisor is declared unable to boot the guest.
pub const PROBE_BOOT_SECS: u64 = 30;

/// Ok when `hv` can run cells here; otherwise the reason.
pub async fn probe(
    hv: Hypervisor,
    conn: &Libvirt,
    cfg: &MatrixConfig,
    image: &ImageInfo,
    work: &Path,
    cancel: &Cancel,
    run_id: &str,
) -> Result<(), String> {
    match hv {
        Hypervisor::Qemu | Hypervisor::Xen => Ok(()),
        Hypervisor::Kvm => {
            if !Path::new("/dev/kvm").exists() {
                return Err(
                    "no /dev/kvm (KVM module not loaded, or no hardware virtualization)".into(),
                );
            }
            if !cfg.probe {
                return Ok(());
            }
            boot_probe(hv, conn, image, &work.join("probe-kvm"), cancel, run_id).await
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
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| format!("probe setup: {e}");
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(io)?;
    let disk = dir.join("probe.raw");
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(16 << 20))
        .map_err(io)?;
    let chan = dir.join("chan");
    std::fs::create_dir_all(&chan).map_err(io)?;
    if let Ok(Some(u)) = nix::unistd::User::from_name("libvirt-qemu") {
        let _ = nix::unistd::chown(&chan, Some(u.uid), Some(u.gid));
    }
    let console = dir.join("console.log");
    let spec = DomainSpec {
        name: format!("{NAME_PREFIX}{run_id}-probe-{hv}"),
        hypervisor: hv,
        xen_mode: None,
        vcpus: 1,
        memory_mib: 256,
        kernel: image.kernel.clone(),
        initrd: image.initrd.clone(),
        cmdline: domain_xml::kernel_cmdline(hv, None),
        console_log: console.clone(),
        channel_socket: chan.join("agent.sock"),
        disk: DiskSpec {
            source: DiskSource::File { path: disk.clone() },
            format: Format::Raw,
            bus: Bus::VirtioBlk,
            cache: CacheMode::Writeback,
            io: IoMode::Threads,
            serial: TEST_DISK_SERIAL.into(),
        },
        run_id: run_id.into(),
        cell_id: format!("probe-{hv}"),
    };
    let xml = domain_xml::render(&spec).map_err(|e| e.to_string())?;
    let dom = conn.start_transient(&xml).map_err(|e| e.to_string())?;
    let hello = async {
        let c = Channel::connect(&spec.channel_socket, Duration::from_secs(10)).await?;
        Guest::hello(c, Duration::from_secs(PROBE_BOOT_SECS)).await
    };
    let r = tokio::select! {
        r = hello => r.map_err(|e| e.to_string()),
        _ = cancel.cancelled() => Err("interrupted".to_string()),
    };
    let r = match r {
        Ok(mut g) => {
            let _ = g.power_off().await;
            Ok(())
        }
        Err(e) => {
            let tail = read_tail(&console, 10);
            let tail = if tail.trim().is_empty() {
                "(empty: the guest printed nothing)".into()
            } else {
                tail
            };
            Err(format!(
                "probe boot failed: the guest never said hello ({e}); console tail: {tail}"
            ))
        }
    };
    drop(dom);
    let _ = std::fs::remove_dir_all(dir);
    r
}
