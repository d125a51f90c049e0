//! The matrix run: creates the run directory, builds or reuses the guest image, connects to each
//! hypervisor and probes it, starts embedded storage servers on first use, runs every cell in the
//! interleaved order, writes each result durably the moment it exists (run.json, the cell's
//! directory, the SQLite store), and tears everything down on every way out.

use super::cell_run::{self, Cancel, CellEnv};
use super::config::MatrixConfig;
use super::progress::{Output, Ui};
use super::{expand, Plan};
use crate::cell::{Cell, Hypervisor};
use crate::hypervisor::libvirt::Libvirt;
use crate::image::{ImageInfo, ImageRequest};
use crate::results::rundir::RunDir;
use crate::results::store::Store;
use crate::results::{CellResult, Outcome, Provenance, RunRecord, Timings};
use crate::storage;
use crate::storage::servers::{OpenError, Servers};
use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to run (beyond the matrix itself).
pub struct RunOptions {
    /// Where run directories are created.
    pub runs_root: PathBuf,
    /// Where each run's work directory (images, sockets, LUN files) is created; QEMU's user must
    /// be able to traverse it.
    pub work_root: PathBuf,
    /// Continue this run directory instead of starting a new one.
    pub resume: Option<PathBuf>,
    /// The image to use (built when missing).
    pub image: ImageRequest,
    /// The history database.
    pub db: PathBuf,
    /// The command line, recorded with the run.
    pub command: Vec<String>,
}

/// The end of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The run id.
    pub run_id: String,
    /// The run directory.
    pub dir: PathBuf,
    /// Every result (finished cells only).
    pub record: RunRecord,
    /// True when a signal stopped the run.
    pub interrupted: bool,
}

impl RunSummary {
    /// Cells that failed.
    pub fn failed(&self) -> usize {
        self.record
            .cells
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
            .count()
    }
}

/// A new, unique run id: time plus randomness, so two runs on one host never collide.
pub fn new_run_id() -> String {
    let t = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    let r: u16 = rand::random();
    format!("{t}-{r:04x}")
}

/// Runs the matrix. Errors are for things that stop the whole run before any cell (no image, no
/// run directory, no store); cell failures are results.
pub async fn run(
    cfg: MatrixConfig,
    opts: RunOptions,
    ui: Ui,
    cancel: Arc<Cancel>,
) -> anyhow::Result<RunSummary> {
    let (rundir, mut record, cfg) = open_rundir(cfg, &opts)?;
    let _lock = crate::cleanup::RunLock::acquire(&rundir.path)
        .with_context(|| format!("{} is in use by another vmbench", rundir.path.display()))?;
    let plan = expand(&cfg);
    let done: BTreeSet<(String, u32)> = record
        .cells
        .iter()
        .map(|c| (c.cell_id.clone(), c.repeat))
        .collect();
    let store = Store::open(&opts.db)
        .with_context(|| format!("opening the results store {}", opts.db.display()))?;
    let host = hostname();
    if opts.resume.is_none() {
        store.begin_run(&record.run_id, &record.started, &record.command, &host)?;
    } else if store.resume_run(&record.run_id, &record.started, &record.command, &host)? {
        // This store never saw the run (another --db the first time): give it the whole run.
        for c in &record.cells {
            store.record_cell(&record.run_id, c)?;
        }
    }
    let persist = |record: &mut RunRecord, r: CellResult| -> anyhow::Result<()> {
        store.record_cell(&record.run_id, &r)?;
        record.cells.push(r);
        rundir.save(record).context("writing run.json")?;
        Ok(())
    };
    for (cell, reason) in &plan.skipped {
        if !done.contains(&(cell.id(), 0)) {
            ui.line(format!("skipped {}: {reason}", cell.label()));
            persist(
                &mut record,
                not_run(cell, 0, Outcome::Skipped(reason.clone())),
            )?;
        }
    }

    ui.line("image: checking the guest image (built on first use)");
    let image_req = opts.image.clone();
    let ui2 = ui.clone();
    let image = tokio::task::spawn_blocking(move || {
        crate::image::ensure(&image_req, &|s: &str| ui2.line(format!("image: {s}")))
    })
    .await??;
    ui.line(format!(
        "image: {} ({} KiB initramfs)",
        image.id,
        image.initrd_bytes / 1024
    ));

    let work = opts.work_root.join(&record.run_id);
    make_private_dir(&opts.work_root)?;
    make_private_dir(&work)?;
    // Cleanup finds the work dir of a crashed run through this file.
    std::fs::write(
        rundir.path.join("work-dir"),
        work.as_os_str().as_encoded_bytes(),
    )?;
    let mut servers = Servers::new(rundir.path.join("servers"));
    let mut conns = connect_all(&cfg, &plan, &image, &work, &ui, &cancel, &record.run_id).await;
    let base_prov = provenance(&conns, &image, &host);

    let todo: Vec<(usize, u32)> = plan
        .order
        .iter()
        .copied()
        .filter(|(i, r)| !done.contains(&(plan.cells[*i].id(), *r)))
        .collect();
    ui.send(Output::Start {
        total: todo.len() as u64,
        est_secs: estimate_secs(&cfg),
    });
    // Not record.cells.len(): an interrupted cell left a directory without a result.
    let first_seq = rundir.next_seq();
    // The loop is a block of its own so that whatever ends it (a full disk included), servers,
    // the work directory and the store's run status are settled below.
    let looped: anyhow::Result<()> = async {
        for (n, (idx, repeat)) in todo.iter().enumerate() {
            if cancel.is_cancelled() {
                break;
            }
            let cell = &plan.cells[*idx];
            let seq = first_seq + n;
            ui.send(Output::CellStart {
                n: n as u64 + 1,
                label: cell.label(),
            });
            let dir = rundir.cell_dir(seq, &cell.id(), *repeat).with_context(|| {
                format!("creating the cell directory in {}", rundir.path.display())
            })?;
            reconnect_if_dead(&mut conns, cell.hypervisor, &cfg, &ui, &record.run_id);
            let result = match conns.get(&cell.hypervisor) {
                Some(Ok(conn)) => {
                    run_one(
                        &cfg,
                        conn,
                        &image,
                        &record.run_id,
                        &work,
                        &ui,
                        &cancel,
                        &mut servers,
                        &base_prov,
                        cell,
                        *repeat,
                        seq,
                        &dir,
                    )
                    .await
                }
                Some(Err(reason)) => {
                    Some(not_run(cell, *repeat, Outcome::Unsupported(reason.clone())))
                }
                None => Some(not_run(
                    cell,
                    *repeat,
                    Outcome::Failed("no connection".into()),
                )),
            };
            // A libvirtd restart during the cell left its domain out of reach of the old handle.
            reconnect_if_dead(&mut conns, cell.hypervisor, &cfg, &ui, &record.run_id);
            // An interrupted cell has no result: `--resume` runs it again.
            let Some(result) = result else { break };
            // The store first: it may live on another disk than the run directory. The cell is
            // reported finished only once it is durable.
            let line = outcome_line(&result.outcome);
            let file = result.clone();
            persist(&mut record, result)?;
            RunDir::save_cell(&dir, &file).with_context(|| format!("writing {}", dir.display()))?;
            ui.send(Output::CellEnd {
                n: n as u64 + 1,
                label: cell.label(),
                outcome: line,
            });
        }
        Ok(())
    }
    .await;
    drop(servers);
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_file(rundir.path.join("work-dir"));
    let interrupted = cancel.is_cancelled();
    let status = match (&looped, interrupted) {
        (Err(_), _) => "failed",
        (Ok(()), true) => "interrupted",
        (Ok(()), false) => "finished",
    };
    let closed = store.finish_run(&record.run_id, status);
    looped?;
    closed?;
    Ok(RunSummary {
        run_id: record.run_id.clone(),
        dir: rundir.path.clone(),
        record,
        interrupted,
    })
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    cfg: &MatrixConfig,
    conn: &Libvirt,
    image: &ImageInfo,
    run_id: &str,
    work: &Path,
    ui: &Ui,
    cancel: &Cancel,
    servers: &mut Servers,
    prov: &Provenance,
    cell: &Cell,
    repeat: u32,
    seq: usize,
    dir: &Path,
) -> Option<CellResult> {
    let (mut backend, server) = match storage::open(&cfg.storage, cell.backend, servers, work) {
        Ok(o) => (o.backend, o.server),
        Err(OpenError::Unsupported(r)) => {
            return Some(not_run(cell, repeat, Outcome::Unsupported(r)))
        }
        Err(OpenError::Failed(r)) => return Some(not_run(cell, repeat, Outcome::Failed(r))),
    };
    if let Err(u) = backend.check() {
        return Some(not_run(
            cell,
            repeat,
            Outcome::Unsupported(format!("unsupported on this host: {u}")),
        ));
    }
    let env = CellEnv {
        cfg,
        conn,
        image,
        run_id,
        work_dir: work,
        ui,
        cancel,
        server,
        provenance: prov,
    };
    let mut result = cell_run::run_cell(&env, backend.as_mut(), cell, repeat, seq, dir).await;
    let t = std::time::Instant::now();
    if let Err(e) = tokio::task::block_in_place(|| backend.teardown()) {
        ui.line(format!("warning: teardown of {}: {e}", cell.label()));
        result.params.insert("teardown_error".into(), e.to_string());
    }
    result.timings.teardown_ms += t.elapsed().as_millis() as u64;
    // A cell that passed before the signal (it came during teardown) is kept.
    if cancel.is_cancelled() && result.outcome != Outcome::Passed {
        return None;
    }
    Some(result)
}

fn open_rundir(
    cfg: MatrixConfig,
    opts: &RunOptions,
) -> anyhow::Result<(RunDir, RunRecord, MatrixConfig)> {
    if let Some(dir) = &opts.resume {
        let rd = RunDir::open(dir)?;
        let record = rd.load()?;
        let text =
            std::fs::read_to_string(rd.path.join("config.json")).context("reading config.json")?;
        let cfg: MatrixConfig = serde_json::from_str(&text).context("parsing config.json")?;
        return Ok((rd, record, cfg));
    }
    let run_id = new_run_id();
    let rd = RunDir::create(&opts.runs_root, &run_id).with_context(|| {
        format!(
            "creating the run directory under {}",
            opts.runs_root.display()
        )
    })?;
    crate::results::rundir::write_atomic(
        &rd.path.join("config.json"),
        &serde_json::to_vec_pretty(&cfg)?,
    )?;
    let record = RunRecord {
        run_id,
        started: chrono::Utc::now().to_rfc3339(),
        command: opts.command.clone(),
        cells: vec![],
    };
    rd.save(&record)?;
    Ok((rd, record, cfg))
}

fn not_run(cell: &Cell, repeat: u32, outcome: Outcome) -> CellResult {
    CellResult {
        cell: cell.clone(),
        cell_id: cell.id(),
        repeat,
        outcome,
        metrics: vec![],
        params: BTreeMap::new(),
        provenance: Provenance::default(),
        timings: Timings::default(),
        samples: BTreeMap::new(),
    }
}

/// One line for progress output.
pub fn outcome_line(o: &Outcome) -> String {
    match o {
        Outcome::Passed => "passed".into(),
        Outcome::Failed(r) => format!("FAILED: {r}"),
        Outcome::Unsupported(r) => r.clone(),
        Outcome::Skipped(r) => format!("skipped: {r}"),
    }
}

fn estimate_secs(cfg: &MatrixConfig) -> u64 {
    // Boot and teardown under TCG take about 15 s; a prefill of the test area about 10 s.
    15 + if cfg.prefill { 10 } else { 0 } + cfg.ramp as u64 + cfg.runtime as u64
}

/// Connections per hypervisor, or the reason its cells cannot run here.
async fn connect_all(
    cfg: &MatrixConfig,
    plan: &Plan,
    image: &ImageInfo,
    work: &Path,
    ui: &Ui,
    cancel: &Cancel,
    run_id: &str,
) -> BTreeMap<Hypervisor, Result<Libvirt, String>> {
    let hvs: BTreeSet<Hypervisor> = plan.cells.iter().map(|c| c.hypervisor).collect();
    let mut out = BTreeMap::new();
    for hv in hvs {
        let r = match Libvirt::connect(&cfg.uri(hv)) {
            Err(e) => Err(format!("unsupported on this host: {hv}: {e}")),
            Ok(conn) => {
                match super::probe::probe(hv, &conn, cfg, image, work, cancel, run_id).await {
                    Ok(()) => Ok(conn),
                    Err(reason) => Err(format!("unsupported on this host: {hv}: {reason}")),
                }
            }
        };
        if let Err(reason) = &r {
            ui.line(reason.clone());
        }
        out.insert(hv, r);
    }
    out
}

/// libvirtd may have restarted (the connection then reports dead): open a new connection so the
/// remaining cells of that hypervisor can run, and destroy this run's domains that the old
/// handles can no longer reach (libvirtd re-adopts running QEMUs after a restart).
fn reconnect_if_dead(
    conns: &mut BTreeMap<Hypervisor, Result<Libvirt, String>>,
    hv: Hypervisor,
    cfg: &MatrixConfig,
    ui: &Ui,
    run_id: &str,
) {
    let Some(Ok(c)) = conns.get(&hv) else { return };
    if c.is_alive() {
        return;
    }
    ui.line(format!(
        "{hv}: libvirt connection lost; reconnecting to {}",
        cfg.uri(hv)
    ));
    let fresh =
        Libvirt::connect(&cfg.uri(hv)).map_err(|e| format!("{hv}: libvirt connection lost: {e}"));
    if let Ok(c) = &fresh {
        for d in c.marked_domains(Some(run_id)).unwrap_or_default() {
            ui.line(format!(
                "{hv}: destroying {} (left running across the libvirtd restart)",
                d.name
            ));
            if let Err(e) = c.remove_domain(&d.name) {
                ui.line(format!("warning: {}: {e}", d.name));
            }
        }
    }
    conns.insert(hv, fresh);
}

fn provenance(
    conns: &BTreeMap<Hypervisor, Result<Libvirt, String>>,
    image: &ImageInfo,
    host: &str,
) -> Provenance {
    let (libvirt, qemu) = conns
        .values()
        .find_map(|c| c.as_ref().ok())
        .map(|c| c.versions())
        .unwrap_or_default();
    Provenance {
        host: host.to_string(),
        host_kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        cpu_model: cpu_model(),
        qemu,
        libvirt,
        image: image.id.clone(),
        vmbench: format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            option_env!("VMBENCH_GIT_REV").unwrap_or("unknown")
        ),
        ..Provenance::default()
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The host's name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The run's work directory: reachable by QEMU's user (o+x) but not listable by others.
fn make_private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o711))
}
