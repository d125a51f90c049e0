//! The host baseline (`--host-baseline`): the cell's own fio job, run by the host's fio directly
//! on the disk's backing target (the image file, the LUN's backing file, the block device), after
//! the guest is gone and before the disk is torn down. It gives the ceiling the guest is measured
//! against: `read_efficiency_pct` = guest read IOPS / host read IOPS.
//!
//! Only like for like: the host runs the same job on the same bytes only where the guest's disk
//! *is* those bytes (raw format, raw layout) and neither side goes through the host page cache
//! (cache=none, as the host job's O_DIRECT). Everywhere else the baseline is `NotAvailable` with
//! the reason. An efficiency above 100% means the guest beat the bare device: a cache somewhere,
//! flagged in `host_baseline_note`.
//!
//! The job's target is forced: `{disk}` becomes the backing path, and a job whose text names any
//! other target is refused rather than run (user job files are already checked for `filename=`,
//! this is the last guard before the host's fio writes anywhere).

use super::fio;
use crate::cell::{CacheMode, Cell, Format, Layout};
use crate::results::{Better, Metric, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// What the baseline adds to a cell: metrics and parameters (the host's fio version, the target).
#[derive(Debug, Default)]
pub struct Baseline {
    /// `host_baseline_*` figures and the efficiency ratios (or why there are none).
    pub metrics: Vec<Metric>,
    /// `host_fio`, `host_baseline_target`, `host_baseline_note` (efficiency above 100%).
    pub params: BTreeMap<String, String>,
}

/// The guest-side metrics compared with the host's, and the keys of the ratios.
const EFFICIENCY: [(&str, &str, &str); 2] = [
    ("read_iops", "read_efficiency_pct", "Guest/host read IOPS"),
    (
        "write_iops",
        "write_efficiency_pct",
        "Guest/host write IOPS",
    ),
];

/// The host's figures that are kept, with the `host_baseline_` prefix: the job's headline ones.
const KEPT: [&str; 8] = fio::JOB_FIGURES;

/// Runs the baseline. `job` and `prefill` are fio job texts with `{disk}` for the target; `guest`
/// are the cell's guest-side metrics; `work` is a private directory for the job and its output.
/// A baseline that cannot run leaves `NotAvailable` metrics with the reason, never a failed cell:
/// the guest's figures stand on their own.
pub fn run(
    cell: &Cell,
    job: Option<&str>,
    prefill: Option<&str>,
    host_path: Option<&Path>,
    guest: &[Metric],
    work: &Path,
) -> Baseline {
    let mut b = Baseline::default();
    if let Err(why) = like_for_like(cell) {
        b.metrics = not_available(&format!("host baseline: not like for like: {why}"));
        return b;
    }
    let (Some(job), Some(path)) = (job, host_path) else {
        let why = match job {
            None => "host baseline: only fio workloads have one",
            // NFS/iSCSI URLs that QEMU reaches through libnfs/libiscsi have no host path.
            Some(_) => "host baseline: this disk has no host path (a network URL only QEMU opens)",
        };
        b.metrics = not_available(why);
        return b;
    };
    if let Some(v) = host_fio_version() {
        b.params.insert("host_fio".into(), v);
    }
    b.params
        .insert("host_baseline_target".into(), path.display().to_string());
    match measure(job, prefill, path, work) {
        Ok(run) => {
            b.metrics = host_metrics(&run);
            let eff = efficiency(guest, &b.metrics);
            if let Some(note) = cache_effect(&eff) {
                b.params.insert("host_baseline_note".into(), note);
            }
            b.metrics.extend(eff);
        }
        Err(e) => b.metrics = not_available(&format!("host baseline: {e}")),
    }
    b
}

/// Why the host cannot run the same job on the same bytes as the guest, if it cannot.
pub fn like_for_like(cell: &Cell) -> Result<(), String> {
    if cell.format != Format::Raw {
        return Err(format!(
            "a {} image: the host would read the container's bytes, not the guest's disk",
            cell.format
        ));
    }
    if cell.layout != Layout::Raw {
        return Err(format!(
            "layout {}: the guest runs on a file in a filesystem, the host would run on the \
             raw backing target",
            cell.layout
        ));
    }
    if cell.cache != CacheMode::None {
        return Err(format!(
            "cache={}: the guest's I/O goes through the host page cache, the host job's does not",
            cell.cache
        ));
    }
    Ok(())
}

/// A note when the guest beat the host on the same bytes: that is a cache, not a faster path.
pub fn cache_effect(efficiency: &[Metric]) -> Option<String> {
    let over: Vec<String> = efficiency
        .iter()
        .filter_map(|m| Some((m, m.value.number()?)))
        .filter(|(_, v)| *v > 100.0)
        .map(|(m, v)| format!("{} {v:.0}%", m.label))
        .collect();
    (!over.is_empty()).then(|| {
        format!(
            "{} above 100%: the guest outran the bare target, a cache effect (host page cache, \
             device cache), not a faster path",
            over.join(", ")
        )
    })
}

/// Prefill (when asked), then the measured job; the measured run's figures.
fn measure(
    job: &str,
    prefill: Option<&str>,
    path: &Path,
    work: &Path,
) -> Result<fio::FioRun, String> {
    super::drop_host_caches();
    if let Some(p) = prefill {
        run_fio(&point_at(p, path)?, work, "baseline-prefill")?;
    }
    run_fio(&point_at(job, path)?, work, "baseline")
}

/// The job with `{disk}` replaced by `path`; refused when it names any other target.
pub fn point_at(job: &str, path: &Path) -> Result<String, String> {
    let target = fio_filename(path)?;
    let text = job.replace("{disk}", &target);
    let mut named = false;
    for line in text.lines() {
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        let key = key.trim().to_ascii_lowercase();
        if key == "filename" && value.trim() == target {
            named = true;
        } else if ["filename", "directory", "filename_format", "opendir"].contains(&key.as_str())
            || key.contains('$')
        {
            return Err(format!(
                "the job names its own target ('{}'): refused on the host",
                line.trim()
            ));
        }
    }
    if !named {
        return Err("the job has no filename={disk} to point at the backing target".into());
    }
    Ok(text)
}

/// The host's page cache out of the way, as before the guest's run (root only).
/// `path` as a fio `filename` value: fio splits file names on ':', so a colon is escaped.
fn fio_filename(path: &Path) -> Result<String, String> {
    let s = path
        .to_str()
        .ok_or_else(|| format!("backing path {} is not UTF-8", path.display()))?;
    if s.contains(['\n', '\r']) {
        return Err(format!("backing path {s:?} has a line break"));
    }
    Ok(super::fio_escape(s))
}

/// Runs the host's fio on `text` (written to `work/NAME.fio`) and parses its JSON.
fn run_fio(text: &str, work: &Path, name: &str) -> Result<fio::FioRun, String> {
    let job = work.join(format!("{name}.fio"));
    let json = work.join(format!("{name}.json"));
    std::fs::write(&job, text).map_err(|e| format!("writing {}: {e}", job.display()))?;
    let out = std::process::Command::new("fio")
        .arg("--output-format=json")
        .arg(format!("--output={}", json.display()))
        .arg(&job)
        .output()
        .map_err(|e| format!("cannot run the host's fio: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "host fio exited with {}: {}",
            out.status,
            err.trim()
        ));
    }
    let text = std::fs::read_to_string(&json).map_err(|e| format!("host fio output: {e}"))?;
    fio::parse(&text).map_err(|e| format!("host fio output: {e}"))
}

/// `fio --version` of the host (`fio-3.33`).
fn host_fio_version() -> Option<String> {
    let out = std::process::Command::new("fio")
        .arg("--version")
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// The host run's figures as `host_baseline_*` metrics.
pub fn host_metrics(run: &fio::FioRun) -> Vec<Metric> {
    fio::metrics(run)
        .into_iter()
        .filter(|m| KEPT.contains(&m.key.as_str()))
        .map(|m| Metric {
            key: format!("host_baseline_{}", m.key),
            label: format!("Host baseline {}", m.label),
            ..m
        })
        .collect()
}

/// Guest IOPS as a percentage of the host baseline's, per direction.
pub fn efficiency(guest: &[Metric], host: &[Metric]) -> Vec<Metric> {
    let get = |ms: &[Metric], k: &str| {
        ms.iter()
            .find(|m| m.key == k)
            .and_then(|m| m.value.number())
    };
    EFFICIENCY
        .iter()
        .map(|(g, key, label)| {
            let value = match (get(guest, g), get(host, &format!("host_baseline_{g}"))) {
                (Some(a), Some(b)) if b > 0.0 => Value::Number(100.0 * a / b),
                _ => Value::NotAvailable(format!("no {} on both sides", g.replace('_', " "))),
            };
            Metric {
                key: (*key).into(),
                label: (*label).into(),
                unit: "%".into(),
                better: Better::Higher,
                value,
            }
        })
        .collect()
}

/// The baseline's keys and the efficiency ratios, each `NotAvailable` with `why`.
fn not_available(why: &str) -> Vec<Metric> {
    let host = ["read_iops", "write_iops"].iter().map(|k| Metric {
        key: format!("host_baseline_{k}"),
        label: format!("Host baseline {}", k.replace("_iops", " IOPS")),
        unit: "IOPS".into(),
        better: Better::Higher,
        value: Value::NotAvailable(why.into()),
    });
    let ratios = EFFICIENCY.iter().map(|(_, key, label)| Metric {
        key: (*key).into(),
        label: (*label).into(),
        unit: "%".into(),
        better: Better::Higher,
        value: Value::NotAvailable(why.into()),
    });
    host.chain(ratios).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_forced_and_escaped() {
        let job = "[global]\nfilename={disk}\n\n[j]\nrw=read\n";
        let t = point_at(job, Path::new("/w/a:b.img")).unwrap();
        assert!(t.contains("filename=/w/a\\:b.img\n"), "{t}");
        assert!(!t.contains("{disk}"));
    }

    #[test]
    fn any_other_target_is_refused() {
        for job in [
            "[global]\nfilename={disk}\n[j]\nfilename=/etc/passwd\n",
            "[global]\nfilename={disk}\n[j]\ndirectory=/root\n",
            "[global]\nfilename={disk}\n[j]\nFileName = /dev/sda\n",
            "[j]\nrw=read\n",
        ] {
            assert!(point_at(job, Path::new("/w/x.img")).is_err(), "{job}");
        }
        assert!(point_at("[g]\nfilename={disk}\n", Path::new("/w/x\n.img")).is_err());
    }

    #[test]
    fn efficiency_is_guest_over_host() {
        let m = |k: &str, v: f64| Metric::num(k, k, "IOPS", Better::Higher, v);
        let guest = [m("read_iops", 500.0), m("write_iops", 200.0)];
        let host = [
            m("host_baseline_read_iops", 1000.0),
            m("host_baseline_write_iops", 0.0),
        ];
        let e = efficiency(&guest, &host);
        assert_eq!(e[0].value, Value::Number(50.0));
        assert!(matches!(e[1].value, Value::NotAvailable(_)));
    }

    fn cell(format: Format, layout: Layout, cache: CacheMode) -> Cell {
        Cell {
            format,
            cache,
            io: crate::cell::IoMode::Threads,
            layout,
            ..Cell::default()
        }
    }

    fn raw() -> Cell {
        cell(Format::Raw, Layout::Raw, CacheMode::None)
    }

    #[test]
    fn only_raw_raw_uncached_cells_get_a_baseline() {
        assert_eq!(like_for_like(&raw()), Ok(()));
        for (c, why) in [
            (
                cell(Format::Qcow2, Layout::Raw, CacheMode::None),
                "qcow2 image",
            ),
            (
                cell(Format::Raw, Layout::Ext4, CacheMode::None),
                "layout ext4",
            ),
            (
                cell(Format::Raw, Layout::Xfs, CacheMode::None),
                "layout xfs",
            ),
            (
                cell(Format::Raw, Layout::Raw, CacheMode::Writeback),
                "cache=writeback",
            ),
        ] {
            let b = run(
                &c,
                Some("[j]\nfilename={disk}\n"),
                None,
                Some(Path::new("/nonexistent/disk.raw")),
                &[],
                Path::new("/nonexistent"),
            );
            // Nothing ran: no target, no fio version; every figure says why.
            assert!(b.params.is_empty(), "{why}: {:?}", b.params);
            let keys: Vec<&str> = b.metrics.iter().map(|m| m.key.as_str()).collect();
            assert!(keys.contains(&"read_efficiency_pct"), "{keys:?}");
            for m in &b.metrics {
                match &m.value {
                    Value::NotAvailable(r) => {
                        assert!(r.contains("not like for like") && r.contains(why), "{r}")
                    }
                    v => panic!("{why}: {} = {v:?}", m.key),
                }
            }
        }
    }

    #[test]
    fn efficiency_above_100_is_flagged_as_a_cache_effect() {
        let m = |k: &str, v: f64| Metric::num(k, k, "IOPS", Better::Higher, v);
        let guest = [m("read_iops", 1300.0), m("write_iops", 200.0)];
        let host = [
            m("host_baseline_read_iops", 1000.0),
            m("host_baseline_write_iops", 400.0),
        ];
        let note = cache_effect(&efficiency(&guest, &host)).unwrap();
        assert!(
            note.starts_with("Guest/host read IOPS 130% above 100%"),
            "{note}"
        );
        assert!(
            note.contains("cache effect") && !note.contains("write"),
            "{note}"
        );
        let guest = [m("read_iops", 900.0), m("write_iops", 200.0)];
        assert_eq!(cache_effect(&efficiency(&guest, &host)), None);
    }

    #[test]
    fn missing_host_path_is_not_available_with_the_reason() {
        let b = run(
            &raw(),
            Some("x"),
            None,
            None,
            &[],
            Path::new("/nonexistent"),
        );
        match &b.metrics[0].value {
            Value::NotAvailable(r) => assert!(r.contains("no host path"), "{r}"),
            v => panic!("{v:?}"),
        }
    }
}
