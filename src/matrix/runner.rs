//! The matrix run: creates the run directory, builds or reuses the guest image, connects to each
//! hypervisor and probes it, starts embedded storage servers on first use, runs every cell in the
//! interleaved order, writes each result durably the moment it exists (run.json, the cell's
//! directory, the SQLite store), and tears everything down on every way out.

use super::cell_error::CellError;
use super::cell_run::{self, Cancel, CellEnv};
use super::config::MatrixConfig;
use super::progress::{Output, Ui};
use super::repeat::{Repeat, Stop, StopRule};
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
pub struct FinishedRun {
    /// The run id.
    pub run_id: String,
    /// The run directory.
    pub dir: PathBuf,
    /// Every result (finished cells only).
    pub record: RunRecord,
    /// True when a signal stopped the run.
    pub interrupted: bool,
}

impl FinishedRun {
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

/// Runs the matrix: open -> plan -> loop -> close. Errors are for things that stop the whole
/// run before any cell (no image, no run directory, no store); cell failures are results.
pub async fn run(
    cfg: MatrixConfig,
    opts: RunOptions,
    ui: Ui,
    cancel: Arc<Cancel>,
) -> anyhow::Result<FinishedRun> {
    let mut ctx = RunCtx::open(cfg, &opts, ui, cancel)?;
    let plan = expand(&ctx.cfg);
    ctx.record_skipped(&plan)?;
    let mut hosts = ctx.prepare(&opts, &plan).await?;
    // Whatever ends the loop (a full disk included), servers, the work directory and the
    // store's run status are settled by `close`.
    let looped = ctx.run_cells(&plan, &mut hosts).await;
    ctx.close(hosts, looped)
}

/// A run between `open` and `close`: its directory, record and store.
struct RunCtx {
    cfg: MatrixConfig,
    ui: Ui,
    cancel: Arc<Cancel>,
    rundir: RunDir,
    record: RunRecord,
    store: Store,
    host: String,
    /// Cells (id, repeat) that already have a result (on `--resume`).
    done: BTreeSet<(String, u32)>,
    _lock: crate::results::rundir::RunLock,
}

/// What the cells run on: the image, the work directory, servers and connections.
struct Hosts {
    shared: Shared,
    servers: Servers,
    conns: BTreeMap<Hypervisor, Result<Libvirt, String>>,
}

/// The parts of [`Hosts`] every cell reads.
struct Shared {
    image: ImageInfo,
    work: PathBuf,
    prov: Provenance,
}

/// One cell run of the loop.
struct Slot<'p> {
    /// Position in this invocation's list, from 1.
    n: u64,
    cell: &'p Cell,
    repeat: u32,
    seq: usize,
    dir: PathBuf,
}

impl RunCtx {
    /// The run directory (new or resumed), its lock, and the store's record of the run.
    fn open(
        cfg: MatrixConfig,
        opts: &RunOptions,
        ui: Ui,
        cancel: Arc<Cancel>,
    ) -> anyhow::Result<RunCtx> {
        let (rundir, record, cfg) = open_rundir(cfg, opts)?;
        let lock = crate::results::rundir::RunLock::acquire(&rundir.path)
            .with_context(|| format!("{} is in use by another vmbench", rundir.path.display()))?;
        let done = record
            .cells
            .iter()
            .map(|c| (c.cell_id.clone(), c.repeat))
            .collect();
        let store = Store::open(&opts.db)
            .with_context(|| format!("opening the results store {}", opts.db.display()))?;
        let host = hostname();
        let (id, started, command) = (&record.run_id, &record.started, &record.command);
        if opts.resume.is_none() {
            store.begin_run(id, started, command, &host)?;
        } else if store.resume_run(id, started, command, &host)? {
            // This store never saw the run (another --db the first time): give it the whole run.
            for c in &record.cells {
                store.record_cell(id, c)?;
            }
        }
        Ok(RunCtx {
            cfg,
            ui,
            cancel,
            rundir,
            record,
            store,
            host,
            done,
            _lock: lock,
        })
    }

    /// A result, durably: the store first (it may live on another disk than the run
    /// directory), then run.json.
    fn persist(&mut self, r: CellResult) -> anyhow::Result<()> {
        self.store.record_cell(&self.record.run_id, &r)?;
        self.record.cells.push(r);
        self.rundir.save(&self.record).context("writing run.json")?;
        Ok(())
    }

    /// `--repeat auto`'s stopping rule; `None` for a fixed count.
    fn stop_rule(&self) -> Option<StopRule> {
        (self.cfg.repeat == Repeat::Auto).then_some(StopRule {
            max_cv_pct: self.cfg.max_cv,
            max_repeats: self.cfg.max_repeats,
        })
    }

    /// The stored repeats of a cell, and `extra` (the one just run).
    fn history<'a>(&'a self, cell_id: &str, extra: Option<&'a CellResult>) -> Vec<&'a CellResult> {
        let stored = self.record.cells.iter().filter(|c| c.cell_id == cell_id);
        stored.chain(extra).collect()
    }

    /// True when `--repeat auto` needs no more repeats of this cell.
    fn settled(&self, cell_id: &str) -> bool {
        self.stop_rule()
            .is_some_and(|r| r.decide(&self.history(cell_id, None)) != Stop::Continue)
    }

    /// `--repeat auto`: when `result` is a cell's last repeat, records on it whether the cell
    /// converged (`converged`, `cv_pct`, `repeats`) and says so in the output.
    fn note_convergence(&self, result: &mut CellResult) {
        let Some(rule) = self.stop_rule() else {
            return;
        };
        let history = self.history(&result.cell_id, Some(result));
        let n = history.len();
        let (converged, cv) = match rule.decide(&history) {
            Stop::Continue | Stop::NotRunnable => return,
            Stop::Converged(cv) => (true, Some(cv)),
            Stop::Exhausted(cv) => (false, cv),
        };
        let cv_text = cv.map_or("n/a".to_string(), |c| format!("{c:.1}"));
        self.ui.line(format!(
            "{}: {} after {n} repeat(s), headline CV {cv_text}% (limit {}%)",
            result.cell.label(),
            if converged {
                "converged"
            } else {
                "did not converge"
            },
            rule.max_cv_pct
        ));
        let p = &mut result.params;
        p.insert("converged".into(), converged.to_string());
        p.insert("cv_pct".into(), cv_text);
        p.insert("repeats".into(), n.to_string());
    }

    /// Cells the plan skipped are results too.
    fn record_skipped(&mut self, plan: &Plan) -> anyhow::Result<()> {
        for (cell, reason) in &plan.skipped {
            if !self.done.contains(&(cell.id(), 0)) {
                self.ui.line(format!("skipped {}: {reason}", cell.label()));
                self.persist(not_run(cell, 0, Outcome::Skipped(reason.clone())))?;
            }
        }
        Ok(())
    }

    /// The image, the work directory, and a connection (or the reason there is none) per
    /// hypervisor.
    async fn prepare(&self, opts: &RunOptions, plan: &Plan) -> anyhow::Result<Hosts> {
        let ui = &self.ui;
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
        let run_id = &self.record.run_id;
        let work = opts.work_root.join(run_id);
        crate::guest::dirs::make_work_dir(&opts.work_root)?;
        crate::guest::dirs::make_work_dir(&work)?;
        // Cleanup finds the work dir of a crashed run through this file.
        std::fs::write(
            self.rundir.path.join("work-dir"),
            work.as_os_str().as_encoded_bytes(),
        )?;
        let servers = Servers::new(self.rundir.path.join("servers"), run_id);
        let conns = connect_all(self, plan, &image, &work).await;
        let prov = Provenance {
            io_limit: self.cfg.io_limit_provenance(),
            ..provenance(&conns, &image, &self.host)
        };
        Ok(Hosts {
            shared: Shared { image, work, prov },
            servers,
            conns,
        })
    }

    /// Every cell not done yet, in the plan's order, until done or interrupted.
    async fn run_cells(&mut self, plan: &Plan, hosts: &mut Hosts) -> anyhow::Result<()> {
        let todo: Vec<(usize, u32)> = plan
            .order
            .iter()
            .copied()
            .filter(|(i, r)| !self.done.contains(&(plan.cells[*i].id(), *r)))
            .collect();
        self.ui.send(Output::Start {
            total: todo.len() as u64,
            est_secs: estimate_secs(&self.cfg),
        });
        // Not record.cells.len(): an interrupted cell left a directory without a result.
        let first_seq = self.rundir.next_seq();
        let mut ran = 0;
        for (idx, repeat) in todo {
            if self.cancel.is_cancelled() {
                break;
            }
            let cell = &plan.cells[idx];
            // `--repeat auto`: a settled cell sits out the remaining rounds.
            if self.settled(&cell.id()) {
                continue;
            }
            let seq = first_seq + ran;
            ran += 1;
            let n = ran as u64;
            self.ui.send(Output::CellStart {
                n,
                label: cell.label(),
            });
            let dir = self
                .rundir
                .cell_dir(seq, &cell.id(), repeat)
                .with_context(|| {
                    format!(
                        "creating the cell directory in {}",
                        self.rundir.path.display()
                    )
                })?;
            let slot = Slot {
                n,
                cell,
                repeat,
                seq,
                dir,
            };
            // An interrupted cell has no result: `--resume` runs it again.
            if !self.run_slot(&slot, hosts).await? {
                break;
            }
        }
        Ok(())
    }

    /// One cell: run it, persist its result, report it. False when a signal stopped it.
    async fn run_slot(&mut self, s: &Slot<'_>, hosts: &mut Hosts) -> anyhow::Result<bool> {
        let hv = s.cell.hypervisor;
        let run_id = &self.record.run_id;
        reconnect_if_dead(&mut hosts.conns, hv, &self.cfg, &self.ui, run_id);
        let result = match hosts.conns.get(&hv) {
            Some(Ok(conn)) => {
                self.run_one(conn, &mut hosts.servers, &hosts.shared, s)
                    .await
            }
            Some(Err(reason)) => Some(not_run(
                s.cell,
                s.repeat,
                Outcome::Unsupported(reason.clone()),
            )),
            None => Some(failed(s.cell, s.repeat, CellError::NoConnection)),
        };
        // A libvirtd restart during the cell left its domain out of reach of the old handle.
        reconnect_if_dead(&mut hosts.conns, hv, &self.cfg, &self.ui, run_id);
        let Some(result) = result else {
            return Ok(false);
        };
        let mut result = result;
        self.note_convergence(&mut result);
        // The cell is reported finished only once it is durable.
        let line = outcome_line(&result.outcome);
        let file = result.clone();
        self.persist(result)?;
        RunDir::save_cell(&s.dir, &file).with_context(|| format!("writing {}", s.dir.display()))?;
        self.ui.send(Output::CellEnd {
            n: s.n,
            label: s.cell.label(),
            outcome: line,
        });
        Ok(true)
    }

    /// Runs one cell on its backend and tears the backend down; `None` when a signal stopped
    /// it.
    async fn run_one(
        &self,
        conn: &Libvirt,
        servers: &mut Servers,
        shared: &Shared,
        s: &Slot<'_>,
    ) -> Option<CellResult> {
        let (cell, repeat) = (s.cell, s.repeat);
        let opened = storage::open(
            &self.cfg.storage,
            cell.backend,
            cell.link,
            servers,
            &shared.work,
        );
        let (mut backend, server) = match opened {
            Ok(o) => (o.backend, o.server),
            Err(OpenError::Unsupported(r)) => {
                return Some(not_run(cell, repeat, Outcome::Unsupported(r)))
            }
            Err(OpenError::Failed(r)) => return Some(failed(cell, repeat, CellError::Backend(r))),
        };
        if let Err(u) = backend.check() {
            return Some(not_run(
                cell,
                repeat,
                Outcome::Unsupported(format!("unsupported on this host: {u}")),
            ));
        }
        let env = CellEnv {
            cfg: &self.cfg,
            conn,
            image: &shared.image,
            run_id: &self.record.run_id,
            work_dir: &shared.work,
            ui: &self.ui,
            cancel: &self.cancel,
            server,
            provenance: &shared.prov,
        };
        let mut result =
            cell_run::run_cell(&env, backend.as_mut(), cell, repeat, s.seq, &s.dir).await;
        let t = std::time::Instant::now();
        if let Err(e) = tokio::task::block_in_place(|| backend.teardown()) {
            self.ui
                .line(format!("warning: teardown of {}: {e}", cell.label()));
            result.params.insert("teardown_error".into(), e.to_string());
        }
        result.timings.teardown_ms += t.elapsed().as_millis() as u64;
        // A cell that passed before the signal (it came during teardown) is kept.
        if self.cancel.is_cancelled() && result.outcome != Outcome::Passed {
            return None;
        }
        Some(result)
    }

    /// Servers stopped, work directory gone, the store's run status set.
    fn close(self, hosts: Hosts, looped: anyhow::Result<()>) -> anyhow::Result<FinishedRun> {
        let Hosts {
            shared, servers, ..
        } = hosts;
        drop(servers);
        let _ = std::fs::remove_dir_all(&shared.work);
        let _ = std::fs::remove_file(self.rundir.path.join("work-dir"));
        let interrupted = self.cancel.is_cancelled();
        let status = match (&looped, interrupted) {
            (Err(_), _) => "failed",
            (Ok(()), true) => "interrupted",
            (Ok(()), false) => "finished",
        };
        let closed = self.store.finish_run(&self.record.run_id, status);
        looped?;
        closed?;
        Ok(FinishedRun {
            run_id: self.record.run_id.clone(),
            dir: self.rundir.path.clone(),
            record: self.record,
            interrupted,
        })
    }
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

/// A cell that failed before it could run.
fn failed(cell: &Cell, repeat: u32, e: CellError) -> CellResult {
    CellResult {
        failure_kind: Some(e.kind()),
        ..not_run(cell, repeat, Outcome::Failed(e.to_string()))
    }
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
        failure_kind: None,
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
    ctx: &RunCtx,
    plan: &Plan,
    image: &ImageInfo,
    work: &Path,
) -> BTreeMap<Hypervisor, Result<Libvirt, String>> {
    let (cfg, cancel, run_id) = (&ctx.cfg, &ctx.cancel, &ctx.record.run_id);
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
            ctx.ui.line(reason.clone());
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
