//! `vmbench doctor`: what this host can run, and why not. The matrix uses the same probes
//! ([`crate::matrix::probe`], the backends' `check()`), so a cell doctor calls unsupported is
//! reported unsupported by the matrix, with the same reason.

use crate::cell::Hypervisor;
use crate::hypervisor::libvirt::Libvirt;
use crate::hypervisor::Probe;
use crate::matrix::cell_run::Cancel;
use std::path::Path;
use tabled::settings::Style;

/// One line of the doctor's table.
#[derive(Debug, Clone, tabled::Tabled)]
pub struct Check {
    /// What was checked.
    #[tabled(rename = "check")]
    pub what: String,
    /// ok, unsupported, missing.
    #[tabled(rename = "status")]
    pub status: &'static str,
    /// Version or reason.
    #[tabled(rename = "detail")]
    pub detail: String,
}

fn check(what: &str, r: Result<String, String>, bad: &'static str) -> Check {
    match r {
        Ok(d) => Check {
            what: what.into(),
            status: "ok",
            detail: d,
        },
        Err(d) => Check {
            what: what.into(),
            status: bad,
            detail: d,
        },
    }
}

/// What `vmbench doctor` checks (the CLI's flags, as plain values).
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// libvirt URI for QEMU/KVM.
    pub connect: String,
    /// libvirt URI for Xen.
    pub xen_connect: String,
    /// Skip the KVM boot probe.
    pub no_probe: bool,
    /// The image cache doctor looks in (it never builds).
    pub image_cache: std::path::PathBuf,
    /// The runs directory whose size doctor reports.
    pub runs_dir: std::path::PathBuf,
}

/// Runs every check, prints the table; exit 0 when at least QEMU/TCG cells can run.
pub async fn run(a: &DoctorOptions) -> i32 {
    let checks = checks(a).await;
    let ok = checks
        .iter()
        .any(|c| c.what == "hypervisor qemu (TCG)" && c.status == "ok");
    let checks = wrap_details(checks, terminal_width());
    println!("{}", tabled::Table::new(&checks).with(Style::sharp()));
    if ok {
        0
    } else {
        1
    }
}

/// The checks, in display order.
pub async fn checks(a: &DoctorOptions) -> Vec<Check> {
    let mut out = Vec::new();
    let conn = Libvirt::connect(&a.connect);
    out.push(check(
        &format!("libvirt ({})", a.connect),
        conn.as_ref()
            .map(|c| format!("libvirt {}, QEMU {}", c.versions().0, c.versions().1))
            .map_err(|e| e.to_string()),
        "missing",
    ));
    let image = find_image(a);
    out.push(check(
        "guest image",
        image
            .as_ref()
            .map(|i| format!("{} ({} KiB)", i.id, i.initrd_bytes / 1024))
            .map_err(Clone::clone),
        "missing",
    ));
    let tcg = match &conn {
        Ok(c) => qemu_tcg(c),
        Err(_) => Err("no libvirt connection".into()),
    };
    out.push(check("hypervisor qemu (TCG)", tcg, "unsupported"));
    // The boot probe runs on `--connect`'s libvirtd: the hypervisors it serves.
    for hv in Hypervisor::ALL.iter().filter(|h| h.desc().shares_hosts) {
        if let Probe::DeviceAndBoot { device, .. } = hv.desc().probe {
            let r = accelerated(*hv, device, a, conn.as_ref().ok(), image.as_ref().ok()).await;
            out.push(check(&format!("hypervisor {hv}"), r, "unsupported"));
        }
    }
    out.push(check(
        &format!("hypervisor xen ({})", a.xen_connect),
        Libvirt::connect(&a.xen_connect)
            .map(|c| format!("libxl, Xen {}", c.versions().1))
            .map_err(|e| format!("no libxl connection: {e}")),
        "unsupported",
    ));
    for d in crate::storage::descriptors() {
        out.push(check(
            &format!("backend {}", d.name()),
            d.host_support(),
            "unsupported",
        ));
    }
    out.push(check(
        "virtiofs (virtiofsd, for --backend hostdir)",
        crate::storage::hostdir::version(),
        "missing",
    ));
    out.push(check(
        "embedded server links (netns, nftables, tbf)",
        crate::storage::netns::probe(),
        "unsupported",
    ));
    out.push(check(
        "link delays (netem, for --link RATE+DELAY)",
        crate::storage::netns::probe_delay(),
        "unsupported",
    ));
    out.extend(host_checks(a));
    out
}

/// What the host itself runs: the host baseline's fio, host cells (`--hypervisor host`), and
/// the disk space vmbench uses.
fn host_checks(a: &DoctorOptions) -> Vec<Check> {
    vec![
        check(
            "host fio (for --host-baseline)",
            tool_version("fio", &["--version"]),
            "missing",
        ),
        check(
            "host cells (--hypervisor host)",
            crate::storage::host_access::host_support(),
            "unsupported",
        ),
        check(
            "host cells: page cache cap",
            crate::workload::memcap::available(),
            "uncapped",
        ),
        check("disk: image cache", Ok(cache_usage(&a.image_cache)), ""),
        check("disk: runs directory", Ok(runs_usage(&a.runs_dir)), ""),
    ]
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// What the image cache holds: images (prunable) and build inputs (kept).
fn cache_usage(cache: &Path) -> String {
    use crate::image::prune;
    let images = prune::list(cache);
    let img_bytes: u64 = images.iter().map(|i| i.bytes).sum();
    let total = prune::dir_bytes(cache);
    format!(
        "{} in {}: {} image(s) {} (`vmbench image prune` keeps the 2 newest), build inputs {}",
        mib(total),
        cache.display(),
        images.len(),
        mib(img_bytes),
        mib(total.saturating_sub(img_bytes)),
    )
}

/// What the runs directory holds.
fn runs_usage(runs: &Path) -> String {
    let n = std::fs::read_dir(runs)
        .map(|rd| rd.flatten().filter(|e| e.path().is_dir()).count())
        .unwrap_or(0);
    if !runs.exists() {
        return format!("{} does not exist yet (no runs here)", runs.display());
    }
    format!(
        "{} in {}: {n} run(s)",
        mib(crate::image::prune::dir_bytes(runs)),
        runs.display()
    )
}

fn qemu_tcg(c: &Libvirt) -> Result<String, String> {
    let caps = c.capabilities().map_err(|e| e.to_string())?;
    if caps.contains("<domain type='qemu'") || caps.contains("<domain type=\"qemu\"") {
        Ok("x86_64 guests without acceleration".into())
    } else {
        Err("libvirt reports no TCG (qemu) domain type: is qemu-system-x86 installed?".into())
    }
}

/// A hypervisor whose descriptor asks for a device and a boot probe (KVM: /dev/kvm).
async fn accelerated(
    hv: Hypervisor,
    device: &str,
    a: &DoctorOptions,
    conn: Option<&Libvirt>,
    image: Option<&crate::image::ImageInfo>,
) -> Result<String, String> {
    if !Path::new(device).exists() {
        return Err(format!("no {device}"));
    }
    if a.no_probe {
        return Ok(format!("{device} present (boot probe skipped)"));
    }
    let (Some(conn), Some(image)) = (conn, image) else {
        return Err(format!(
            "{device} present; boot probe needs libvirt and the guest image"
        ));
    };
    // The probe boots a real guest, which takes a while under TCG: say so before waiting.
    eprintln!(
        "probing {hv}: booting the guest once (up to {} s) to see that {} really works ...",
        crate::matrix::probe::PROBE_BOOT_SECS,
        hv.as_str().to_uppercase()
    );
    let dir = std::env::temp_dir().join(format!("vmbench-doctor-{}", std::process::id()));
    let cancel = Cancel::default();
    crate::matrix::probe::boot_probe(hv, conn, image, &dir, &cancel, "doctor")
        .await
        .map(|()| format!("{device} present and a guest boots"))
        .map_err(|e| e.to_string())
}

fn tool_version(prog: &str, args: &[&str]) -> Result<String, String> {
    let o = std::process::Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string())
}

fn find_image(a: &DoctorOptions) -> Result<crate::image::ImageInfo, String> {
    let cache = &a.image_cache;
    newest_image(cache)
        .ok_or_else(|| format!("none in {} (run `vmbench image build`)", cache.display()))
}

/// The most recently built image in the cache (doctor only looks; it never builds).
fn newest_image(cache: &Path) -> Option<crate::image::ImageInfo> {
    let mut found: Vec<(std::time::SystemTime, crate::image::ImageInfo)> = std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let m = e.path().join("manifest.json");
            let t = std::fs::metadata(&m).and_then(|md| md.modified()).ok()?;
            let info: crate::image::ImageInfo =
                serde_json::from_str(&std::fs::read_to_string(&m).ok()?).ok()?;
            info.initrd.is_file().then_some((t, info))
        })
        .collect();
    found.sort_by_key(|(t, _)| *t);
    found.pop().map(|(_, i)| i)
}

/// Width used when stdout is not a terminal (a log, a pipe).
const DEFAULT_WIDTH: usize = 100;

/// The terminal's width: `TIOCGWINSZ` on stdout, else `COLUMNS`, else [`DEFAULT_WIDTH`].
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ only writes a winsize into the struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_col > 0 {
        return ws.ws_col.into();
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// Wraps each detail so the whole table fits in `width` columns.
fn wrap_details(checks: Vec<Check>, width: usize) -> Vec<Check> {
    // Borders and padding of a 3-column sharp table: 4 bars + 2 spaces per column.
    const CHROME: usize = 4 + 6;
    const MIN_DETAIL: usize = 20;
    let what = checks
        .iter()
        .map(|c| c.what.chars().count())
        .max()
        .unwrap_or(5);
    let status = checks
        .iter()
        .map(|c| c.status.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let room = width.saturating_sub(what + status + CHROME).max(MIN_DETAIL);
    checks
        .into_iter()
        .map(|c| Check {
            detail: wrap(&c.detail, room),
            ..c
        })
        .collect()
}

/// Breaks `text` into lines of at most `width` characters, at spaces where possible.
fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = vec![];
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        // A word longer than a line is cut.
        while word.len() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        let need = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if need > width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_lines_within_width_and_words_whole() {
        let w = wrap(
            "unsupported on this host: /dev/kvm present; boot probe needs libvirt",
            20,
        );
        assert!(w.lines().all(|l| l.chars().count() <= 20), "{w}");
        assert_eq!(
            w.replace('\n', " "),
            "unsupported on this host: /dev/kvm present; boot probe needs libvirt"
        );
        assert_eq!(wrap("abcdefghij", 4), "abcd\nefgh\nij");
        assert_eq!(wrap("", 10), "");
    }

    #[test]
    fn table_fits_the_width() {
        let checks = vec![check(
            "hypervisor kvm",
            Err("a long reason ".repeat(20)),
            "unsupported",
        )];
        let checks = wrap_details(checks, 80);
        let t = tabled::Table::new(&checks).with(Style::sharp()).to_string();
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(t.lines().count() > 5, "detail wrapped over lines");
    }
}
