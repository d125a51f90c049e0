//! `vmbench doctor` against this host's real libvirt: the rows agree with what the matrix does.
use std::process::Command;

fn row<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{out}"))
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn doctor_reports_this_host() {
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(["doctor", "--no-probe"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(row(&out, "hypervisor qemu (TCG)").contains(" ok "), "{out}");
    assert!(
        row(&out, "libvirt (qemu:///system)").contains("libvirt 9."),
        "{out}"
    );
    let xen = row(&out, "hypervisor xen");
    assert!(
        xen.contains("unsupported") && xen.contains("no libxl connection"),
        "{xen}"
    );
    let lvm = row(&out, "backend lvm");
    if std::path::Path::new("/dev/mapper/control").exists() {
        assert!(lvm.contains(" ok "), "{lvm}");
    } else {
        assert!(
            lvm.contains("unsupported") && lvm.contains("no device-mapper"),
            "{lvm}"
        );
    }
    for b in ["backend local", "backend nfs", "backend iscsi"] {
        assert!(row(&out, b).contains(" ok "), "{out}");
    }
    // virtio-fs: the row names virtiofsd's version where it exists, and hostdir agrees.
    let (vfs, hostdir) = (
        row(&out, "virtiofs (virtiofsd"),
        row(&out, "backend hostdir"),
    );
    if std::path::Path::new(vmbench::storage::hostdir::VIRTIOFSD).exists() {
        assert!(
            vfs.contains(" ok ") && vfs.contains("virtiofsd version"),
            "{vfs}"
        );
        assert!(hostdir.contains(" ok "), "{hostdir}");
    } else {
        assert!(
            vfs.contains("missing") && vfs.contains("no /usr/lib/qemu/virtiofsd"),
            "{vfs}"
        );
        assert!(hostdir.contains("unsupported"), "{hostdir}");
    }
}
