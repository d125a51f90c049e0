//! The matrix run: creates the run directory, builds or reuses the guest image, connects to each
//! hypervisor and probes it, starts embedded storage servers on first use, runs every cell in the
//! interleaved order, writes each result durably the moment it exists (run.json, the cell's
//! directory, the SQLite store), and tears everything down on every way out.

use super::cell_error::{CellError, OnHost, Unreachable};
use super::cell_run::{self, Cancel, CellEnv};
use super::config::MatrixConfig;
use super::progress::{Output, Ui};
use super::repeat::{Repeat, Stop, StopRule};
use super::{expand, Plan};
use crate::cell::{Cell, HostName, Hypervisor};
use crate::hypervisor::libvirt::Libvirt;
use crate::image::{ImageInfo, ImageRequest};
use crate::results::rundir::RunDir;
use crate::results::store::Store;
use crate::results::{CellResult, Outcome, Provenance, RunRecord, SkipKind};
use crate::storage;
use crate::storage::servers::{OpenError, Servers};
use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
    let ctx = RunCtx::open(cfg, &opts, ui, cancel)?;
    let plan = expand(&ctx.cfg);
    ctx.record_skipped(&plan)?;
    let mut hosts = ctx.prepare(&opts, &plan).await?;
    // Whatever ends the loop (a full disk included), servers, the work directory and the
    // store's run status are settled by `close`.
    let looped = ctx.run_cells(&plan, &mut hosts).await;
    ctx.close(hosts, looped)
}

/// A run between `open` and `close`: its directory, record and store. Shared by the hosts'
/// loops, which run on their own threads: the record and the store are behind locks.
struct RunCtx {
    cfg: MatrixConfig,
    ui: Ui,
    cancel: Arc<Cancel>,
    rundir: RunDir,
    run_id: String,
    record: Mutex<RunRecord>,
    store: Mutex<Store>,
    host: String,
    /// Cells (id, repeat) that already have a result (on `--resume`).
    done: BTreeSet<(String, u32)>,
    _lock: crate::results::rundir::RunLock,
}

/// What the cells run on: the image, the work directory, servers and connections.
struct Hosts {
    shared: Shared,
    /// Keeps `vmbench image prune` off the image while the run lives.
    _image_in_use: crate::image::prune::InUse,
    /// The embedded servers, on this machine, for the local hosts' cells.
    servers: Mutex<Servers>,
    conns: Conns,
}

/// A connection (or the reason there is none) per host and hypervisor.
type Conns = BTreeMap<(HostName, Hypervisor), Result<Libvirt, Unreachable>>;

/// The parts of [`Hosts`] every cell reads.
struct Shared {
    image: ImageInfo,
    work: PathBuf,
    prov: Provenance,
}

/// What one host's loop works with: its own connections, and what all hosts share.
struct HostRun<'a> {
    /// The UI, tagged with the host when several run.
    ui: Ui,
    plan: &'a Plan,
    conns: BTreeMap<Hypervisor, Result<Libvirt, Unreachable>>,
    shared: &'a Shared,
    servers: &'a Mutex<Servers>,
    counters: &'a Counters,
    /// The image as this host sees it (kernel and initramfs uploaded to a remote host), made
    /// on the host's first cell; the error fails the host's cells.
    image: Option<Result<ImageInfo, Arc<crate::storage::pool::PoolError>>>,
    /// The run's disk directory under the host's vmbench directory, once a cell used it
    /// (removed when the host's cells are done).
    disk_dir: Option<(String, PathBuf, String)>,
}

/// Cell-run numbers handed out across the hosts' loops.
struct Counters {
    /// The next cell directory's sequence number.
    seq: AtomicUsize,
    /// Cell runs started in this invocation.
    n: AtomicU64,
}

/// A lock whose holder panicked still guards consistent data here (each critical section is one
/// push or one write): take it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The connections of each host.
fn split_by_host(
    conns: Conns,
) -> BTreeMap<HostName, BTreeMap<Hypervisor, Result<Libvirt, Unreachable>>> {
    let mut out: BTreeMap<HostName, BTreeMap<_, _>> = BTreeMap::new();
    for ((host, hv), c) in conns {
        out.entry(host).or_default().insert(hv, c);
    }
    out
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
            run_id: record.run_id.clone(),
            record: Mutex::new(record),
            store: Mutex::new(store),
            host,
            done,
            _lock: lock,
        })
    }

    /// A result, durably: the store first (it may live on another disk than the run
    /// directory), then run.json.
    fn persist(&self, r: CellResult) -> anyhow::Result<()> {
        lock(&self.store).record_cell(&self.run_id, &r)?;
        let mut record = lock(&self.record);
        record.cells.push(r);
        self.rundir.save(&record).context("writing run.json")?;
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
    fn history(&self, cell_id: &str, extra: Option<&CellResult>) -> Vec<CellResult> {
        let record = lock(&self.record);
        let stored = record.cells.iter().filter(|c| c.cell_id == cell_id);
        stored.chain(extra).cloned().collect()
    }

    /// True when `--repeat auto` needs no more repeats of this cell.
    fn settled(&self, cell_id: &str) -> bool {
        self.stop_rule().is_some_and(|r| {
            let h = self.history(cell_id, None);
            r.decide(&h.iter().collect::<Vec<_>>()) != Stop::Continue
        })
    }

    /// `--repeat auto`: when `result` is a cell's last repeat, records on it whether the cell
    /// converged (`converged`, `cv_pct`, `repeats`) and says so in the output.
    fn note_convergence(&self, result: &mut CellResult) {
        let Some(rule) = self.stop_rule() else {
            return;
        };
        let history = self.history(&result.cell_id, Some(result));
        let n = history.len();
        let (converged, cv) = match rule.decide(&history.iter().collect::<Vec<_>>()) {
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
    fn record_skipped(&self, plan: &Plan) -> anyhow::Result<()> {
        for (cell, reason) in &plan.skipped {
            if !self.done.contains(&(cell.id(), 0)) {
                self.ui.line(format!("skipped {}: {reason}", cell.label()));
                let outcome = Outcome::Skipped(reason.to_string());
                self.persist(not_run(cell, 0, outcome, reason.kind()))?;
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
        let (image, in_use) = tokio::task::spawn_blocking(move || {
            crate::image::ensure_in_use(&image_req, &|s: &str| ui2.line(format!("image: {s}")))
        })
        .await??;
        ui.line(format!(
            "image: {} ({} KiB initramfs)",
            image.id,
            image.initrd_bytes / 1024
        ));
        let work = opts.work_root.join(&self.run_id);
        crate::guest::dirs::make_work_dir(&opts.work_root)?;
        crate::guest::dirs::make_work_dir(&work)?;
        // Cleanup finds the work dir of a crashed run through this file.
        std::fs::write(
            self.rundir.path.join("work-dir"),
            work.as_os_str().as_encoded_bytes(),
        )?;
        let mut servers = Servers::new(self.rundir.path.join("servers"), &self.run_id);
        if let Some(path) = &self.cfg.storage.base_image {
            // Checked at config time; read again here, as the run starts.
            let image = crate::storage::base::UserImage::open(path).map_err(anyhow::Error::msg)?;
            servers = servers.with_base_image(image);
        }
        let conns = connect_all(self, plan, &image, &work).await;
        let prov = provenance(&conns, &image, &self.host);
        Ok(Hosts {
            shared: Shared { image, work, prov },
            _image_in_use: in_use,
            servers: Mutex::new(servers),
            conns,
        })
    }

    /// The plan line: the runs to do, those on a hypervisor this host cannot run (they end at
    /// once, reported), and the estimate of the rest, host by host (hosts run side by side,
    /// so the longest host's sum).
    fn start_line(&self, plan: &Plan, todo: &[(usize, u32)], conns: &Conns) -> Output {
        let mut not_run = 0;
        let mut per_host: BTreeMap<&HostName, u64> = BTreeMap::new();
        for &(i, _) in todo {
            let c = &plan.cells[i];
            let reachable = !matches!(conns.get(&(c.host.clone(), c.hypervisor)), Some(Err(_)));
            not_run += u64::from(!reachable);
            *per_host.entry(&c.host).or_default() += self.estimate_if(reachable, c);
        }
        Output::Start {
            total: todo.len() as u64,
            not_run,
            est_secs: per_host.into_values().max().unwrap_or(0),
        }
    }

    /// A run's estimate, or 0 when its hypervisor cannot be reached (it ends at once).
    fn estimate_if(&self, reachable: bool, cell: &Cell) -> u64 {
        if reachable {
            self.cfg.estimated_cell_secs(cell)
        } else {
            0
        }
    }

    /// Every cell not done yet, in the plan's order, until done or interrupted. Each host runs
    /// its cells one at a time on its own thread (a host's blocking libvirt or storage call
    /// never holds up another host); the hosts run at the same time.
    async fn run_cells(&self, plan: &Plan, hosts: &mut Hosts) -> anyhow::Result<()> {
        let todo: Vec<(usize, u32)> = plan
            .order
            .iter()
            .copied()
            .filter(|(i, r)| !self.done_has(&plan.cells[*i].id(), *r))
            .collect();
        self.ui.send(self.start_line(plan, &todo, &hosts.conns));
        // The plan's order filtered per host keeps `--repeat`'s interleaving on each host.
        let mut by_host: BTreeMap<HostName, Vec<(usize, u32)>> = BTreeMap::new();
        for (i, r) in todo {
            by_host
                .entry(plan.cells[i].host.clone())
                .or_default()
                .push((i, r));
        }
        let mut conns = split_by_host(std::mem::take(&mut hosts.conns));
        let counters = Counters {
            // Not record.cells.len(): an interrupted cell left a directory without a result.
            seq: AtomicUsize::new(self.rundir.next_seq()),
            n: AtomicU64::new(0),
        };
        let rt = tokio::runtime::Handle::current();
        let several = by_host.len() > 1;
        let (shared, servers) = (&hosts.shared, &hosts.servers);
        let results: Vec<anyhow::Result<()>> = tokio::task::block_in_place(|| {
            std::thread::scope(|s| {
                let loops: Vec<_> = by_host
                    .into_iter()
                    .map(|(host, slots)| {
                        let host_conns = conns.remove(&host).unwrap_or_default();
                        // One host alone keeps the plain progress of a single-host run.
                        let ui = if several {
                            self.ui.for_host(host.as_str())
                        } else {
                            self.ui.clone()
                        };
                        let on = HostRun {
                            ui,
                            plan,
                            conns: host_conns,
                            shared,
                            servers,
                            counters: &counters,
                            image: None,
                            disk_dir: None,
                        };
                        let rt = rt.clone();
                        s.spawn(move || rt.block_on(self.host_loop(on, slots)))
                    })
                    .collect();
                loops
                    .into_iter()
                    .map(|j| {
                        j.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("a host's cell loop panicked")))
                    })
                    .collect()
            })
        });
        results.into_iter().collect()
    }

    fn done_has(&self, cell_id: &str, repeat: u32) -> bool {
        self.done.contains(&(cell_id.to_string(), repeat))
    }

    /// One host's cells, one at a time, until done or interrupted.
    async fn host_loop(&self, mut on: HostRun<'_>, slots: Vec<(usize, u32)>) -> anyhow::Result<()> {
        for (idx, repeat) in slots {
            if self.cancel.is_cancelled() {
                break;
            }
            let cell = &on.plan.cells[idx];
            // `--repeat auto`: a settled cell sits out the remaining rounds.
            if self.settled(&cell.id()) {
                continue;
            }
            let seq = on.counters.seq.fetch_add(1, Ordering::SeqCst);
            let n = on.counters.n.fetch_add(1, Ordering::SeqCst) + 1;
            let reachable = !matches!(on.conns.get(&cell.hypervisor), Some(Err(_)));
            on.ui.send(Output::CellStart {
                n,
                label: cell.label(),
                est_secs: self.estimate_if(reachable, cell),
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
            if !self.run_slot(&slot, &mut on).await? {
                break;
            }
        }
        self.remove_disk_dir(&on);
        Ok(())
    }

    /// The host's side of a cell's storage: where `local` disks go on it, and vmbench's
    /// directory there.
    fn site<'c>(&'c self, cell: &'c Cell, uri: &'c str) -> storage::HostSite<'c> {
        storage::HostSite {
            name: cell.host.as_str(),
            is_default: cell.host.is_default(),
            uri,
            dir: self
                .cfg
                .host_pool_dirs
                .get(&cell.host)
                .map(PathBuf::as_path),
        }
    }

    /// The image for a cell on this host. This machine's libvirtd reads the image cache's
    /// files directly (no copy); another host gets them uploaded once, on its first cell.
    fn host_image(
        &self,
        on: &mut HostRun<'_>,
        cell: &Cell,
        uri: &str,
    ) -> Result<ImageInfo, CellError> {
        let site = self.site(cell, uri);
        let Some(base) = site.base_dir().filter(|_| !site.is_local()) else {
            return Ok(on.shared.image.clone());
        };
        on.image
            .get_or_insert_with(|| {
                on.ui.line(format!(
                    "image: uploading kernel and initramfs to {uri} ({}) unless there",
                    base.display()
                ));
                tokio::task::block_in_place(|| {
                    crate::image::upload::ensure_on_host(uri, &base, &self.run_id, &on.shared.image)
                })
                .map_err(Arc::new)
            })
            .clone()
            .map_err(|source| CellError::Image {
                host: cell.host.clone(),
                source,
            })
    }

    /// Removes the run's disk directory on the host (it is empty once every cell tore down).
    fn remove_disk_dir(&self, on: &HostRun<'_>) {
        let Some((uri, base, name)) = &on.disk_dir else {
            return;
        };
        let r = tokio::task::block_in_place(|| {
            crate::image::upload::remove_run_dir(uri, base, &self.run_id, name)
        });
        if let Err(e) = r {
            on.ui.line(format!(
                "warning: removing {} on {uri}: {e}",
                base.join(name).display()
            ));
        }
    }

    /// One cell: run it, persist its result, report it. False when a signal stopped it.
    async fn run_slot(&self, s: &Slot<'_>, on: &mut HostRun<'_>) -> anyhow::Result<bool> {
        let hv = s.cell.hypervisor;
        let host = &s.cell.host;
        let uri = self.cfg.host_uri(host, hv);
        reconnect_if_dead(&mut on.conns, hv, &uri, &self.ui, &self.run_id);
        // The connection is moved out for the call: `run_one` also updates the host's state.
        let result = match on.conns.remove(&hv) {
            Some(Ok(conn)) => {
                let r = self.run_one(&conn, on, s).await;
                on.conns.insert(hv, Ok(conn));
                r
            }
            Some(Err(reason)) => {
                let outcome = Outcome::Unsupported(reason.to_string());
                let r = not_run(s.cell, s.repeat, outcome, SkipKind::Hypervisor);
                on.conns.insert(hv, Err(reason));
                Some(r)
            }
            None => Some(failed(s.cell, s.repeat, CellError::NoConnection)),
        };
        // A libvirtd restart during the cell left its domain out of reach of the old handle.
        reconnect_if_dead(&mut on.conns, hv, &uri, &self.ui, &self.run_id);
        let Some(result) = result else {
            return Ok(false);
        };
        let mut result = result;
        self.note_convergence(&mut result);
        // The cell is reported finished only once it is durable.
        let line = cell_end_line(&result);
        let file = result.clone();
        self.persist(result)?;
        RunDir::save_cell(&s.dir, &file).with_context(|| format!("writing {}", s.dir.display()))?;
        on.ui.send(Output::CellEnd {
            n: s.n,
            label: s.cell.label(),
            outcome: line,
        });
        Ok(true)
    }

    /// The cell's provenance: the host's, its I/O cap, its emulator build, and the storage
    /// server's version (ours, asked by name) or what the backend named (a user's server).
    fn cell_provenance(
        &self,
        shared: &Shared,
        cell: &Cell,
        conn: &Libvirt,
        server: Option<(&'static str, u32)>,
        named: Option<String>,
    ) -> Provenance {
        let mut prov = host_provenance(&shared.prov, cell, conn);
        prov.io_limit = self.cfg.io_limit_provenance(cell);
        if let Some(path) = self.cfg.emulator_path(&cell.emulator) {
            prov.qemu = emulator_provenance(path, conn.is_local());
        }
        if let Some((name, _)) = server {
            prov.storage_server = crate::storage::servers::version_of(name).unwrap_or_default();
        } else if let Some(named) = named {
            // A user's server (an external Ceph cluster): no process of ours to ask.
            prov.storage_server = named;
        }
        prov
    }

    /// Runs one cell on its backend and tears the backend down; `None` when a signal stopped
    /// it.
    async fn run_one(
        &self,
        conn: &Libvirt,
        on: &mut HostRun<'_>,
        s: &Slot<'_>,
    ) -> Option<CellResult> {
        let (cell, repeat, shared) = (s.cell, s.repeat, on.shared);
        let image = match self.host_image(on, cell, conn.uri()) {
            Ok(i) => i,
            Err(e) => return Some(failed(cell, repeat, e)),
        };
        let site = self.site(cell, conn.uri());
        let disks = storage::disk_place(&self.cfg.storage, &site, &shared.work, &self.run_id);
        let in_place = storage::descriptor(cell.backend).uses_disk_place();
        if let (Some(base), true) = (site.base_dir(), in_place) {
            let name = site.run_dir_name(&self.run_id);
            on.disk_dir
                .get_or_insert((conn.uri().to_string(), base, name));
        }
        let opened = storage::open(
            &self.cfg.storage,
            cell,
            &mut lock(on.servers),
            &shared.work,
            &disks,
        );
        let (mut backend, server, companions, server_named) = match opened {
            Ok(o) => (o.backend, o.server, o.companions, o.provenance),
            Err(OpenError::Failed(source)) => {
                return Some(failed(cell, repeat, CellError::Backend(source)))
            }
            Err(e @ OpenError::LocalOnly(_)) => {
                let outcome = Outcome::Unsupported(e.to_string());
                return Some(not_run(cell, repeat, outcome, SkipKind::RemoteHost));
            }
            Err(e @ OpenError::Unsupported(_)) => {
                let outcome = Outcome::Unsupported(e.to_string());
                return Some(not_run(cell, repeat, outcome, SkipKind::Backend));
            }
        };
        if let Err(u) = backend.check() {
            let outcome = Outcome::Unsupported(format!("unsupported on this host: {u}"));
            return Some(not_run(cell, repeat, outcome, SkipKind::Backend));
        }
        let prov = self.cell_provenance(shared, cell, conn, server, server_named);
        let env = CellEnv {
            cfg: &self.cfg,
            conn,
            image: &image,
            run_id: &self.run_id,
            work_dir: &shared.work,
            ui: &on.ui,
            cancel: &self.cancel,
            server,
            server_companions: &companions,
            provenance: &prov,
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
        let closed = lock(&self.store).finish_run(&self.run_id, status);
        looped?;
        closed?;
        Ok(FinishedRun {
            run_id: self.run_id.clone(),
            dir: self.rundir.path.clone(),
            record: self.record.into_inner().unwrap_or_else(|p| p.into_inner()),
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
        ..CellResult::new(cell.clone(), repeat, Outcome::Failed(e.to_string()))
    }
}

/// A cell that did not run (skipped, or unsupported here), with the kind of reason.
fn not_run(cell: &Cell, repeat: u32, outcome: Outcome, kind: SkipKind) -> CellResult {
    CellResult {
        skip_kind: Some(kind),
        ..CellResult::new(cell.clone(), repeat, outcome)
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

/// A finished cell's line: its outcome, and for a passed cell its throughput facts (the verdict
/// family's higher-is-better metrics, e.g. read and write IOPS), so the first result is on the
/// screen when the first cell ends, not only in the table after the last.
fn cell_end_line(r: &CellResult) -> String {
    let line = outcome_line(&r.outcome);
    if r.outcome != Outcome::Passed {
        return line;
    }
    let figures: Vec<String> = crate::compare::family_keys(&r.cell)
        .iter()
        .filter_map(|k| r.metric(k))
        .filter(|m| m.better == crate::results::Better::Higher)
        .filter_map(|m| match m.value {
            crate::results::Value::Number(v) => Some(format!(
                "{} {}",
                m.label,
                crate::results::fmt::with_unit(v, &m.unit)
            )),
            _ => None,
        })
        .collect();
    if figures.is_empty() {
        line
    } else {
        format!("{line}: {}", figures.join(", "))
    }
}

/// Connections per host and hypervisor, or the reason its cells cannot run. An unreachable
/// host fails only its own cells.
async fn connect_all(ctx: &RunCtx, plan: &Plan, image: &ImageInfo, work: &Path) -> Conns {
    let (cfg, cancel, run_id) = (&ctx.cfg, &ctx.cancel, &ctx.run_id);
    let pairs: BTreeSet<(HostName, Hypervisor)> = plan
        .cells
        .iter()
        .map(|c| (c.host.clone(), c.hypervisor))
        .collect();
    let mut out = BTreeMap::new();
    for (host, hv) in pairs {
        let uri = cfg.host_uri(&host, hv);
        let on = OnHost {
            host: host.clone(),
            uri: uri.clone(),
        };
        let hypervisor = hv;
        let r = match tokio::task::block_in_place(|| Libvirt::connect(&uri)) {
            Err(source) => Err(Unreachable::Connect {
                hypervisor,
                on,
                source,
            }),
            Ok(conn) => {
                match super::probe::probe(hv, &conn, cfg, image, work, cancel, run_id).await {
                    Ok(()) => Ok(conn),
                    Err(source) => Err(Unreachable::Probe {
                        hypervisor,
                        on,
                        source,
                    }),
                }
            }
        };
        if let Err(reason) = &r {
            ctx.ui.line(reason.to_string());
        }
        out.insert((host, hv), r);
    }
    out
}

/// libvirtd may have restarted (the connection then reports dead): open a new connection so the
/// remaining cells of that hypervisor can run, and destroy this run's domains that the old
/// handles can no longer reach (libvirtd re-adopts running QEMUs after a restart).
fn reconnect_if_dead(
    conns: &mut BTreeMap<Hypervisor, Result<Libvirt, Unreachable>>,
    hv: Hypervisor,
    uri: &str,
    ui: &Ui,
    run_id: &str,
) {
    let Some(Ok(c)) = conns.get(&hv) else { return };
    if c.is_alive() {
        return;
    }
    ui.line(format!(
        "{hv}: libvirt connection lost; reconnecting to {uri}"
    ));
    let fresh = Libvirt::connect(uri).map_err(|source| Unreachable::Lost {
        hypervisor: hv,
        source,
    });
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

fn provenance(conns: &Conns, image: &ImageInfo, host: &str) -> Provenance {
    let (libvirt, qemu) = conns
        .values()
        .find_map(|c| c.as_ref().ok())
        .map(|c| c.versions())
        .unwrap_or_default();
    Provenance {
        host: host.to_string(),
        host_kernel: crate::workload::host::host_kernel(),
        cpu_model: cpu_model(),
        qemu,
        libvirt,
        image: image.id.clone(),
        vmbench: crate::VERSION.to_string(),
        ..Provenance::default()
    }
}

/// A cell's provenance names the libvirt host that ran it: for a named host, its name, the
/// hostname it reports and its libvirt and QEMU versions. This machine's kernel and CPU say
/// nothing about a remote host, so they are left empty there.
fn host_provenance(base: &Provenance, cell: &Cell, conn: &Libvirt) -> Provenance {
    if cell.host.is_default() {
        return base.clone();
    }
    let (libvirt, qemu) = conn.versions();
    let local = conn.is_local();
    Provenance {
        host: format!("{} ({})", cell.host, conn.hostname()),
        host_kernel: if local {
            base.host_kernel.clone()
        } else {
            String::new()
        },
        cpu_model: if local {
            base.cpu_model.clone()
        } else {
            String::new()
        },
        libvirt,
        qemu,
        ..base.clone()
    }
}

/// A named QEMU build as provenance: its version (from `PATH --version` on this machine) and
/// its path, so two builds differ in provenance and the same binary twice does not. A remote
/// host's binary cannot be run from here: its path alone.
fn emulator_provenance(path: &Path, local: bool) -> String {
    let version = local
        .then(|| {
            std::process::Command::new(path)
                .arg("--version")
                .output()
                .ok()
        })
        .flatten()
        .and_then(|o| parse_qemu_version(&String::from_utf8_lossy(&o.stdout)));
    match version {
        Some(v) => format!("{v} ({})", path.display()),
        None => path.display().to_string(),
    }
}

/// `QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)` -> `7.2.22`.
fn parse_qemu_version(text: &str) -> Option<String> {
    let rest = text.lines().next()?.split("version ").nth(1)?;
    let v = rest.split_whitespace().next()?;
    v.starts_with(|c: char| c.is_ascii_digit())
        .then(|| v.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_cell_ends_with_its_throughput_and_a_failed_one_with_its_reason() {
        // A real guest's fio output (the seed's pg-randrw job).
        let json = include_str!("../../tests/fixtures/fio-guest-pg-randrw.json");
        let run = crate::workload::fio::parse(json).unwrap();
        let mut r = CellResult::new(Cell::default(), 0, Outcome::Passed);
        r.metrics = crate::workload::fio::metrics(&run);
        let line = cell_end_line(&r);
        let iops = |k: &str| match r.metric(k).unwrap().value {
            crate::results::Value::Number(v) => crate::results::fmt::fmt_number(v, "IOPS"),
            _ => unreachable!(),
        };
        assert_eq!(
            line,
            format!(
                "passed: Read IOPS {} IOPS, Write IOPS {} IOPS",
                iops("read_iops"),
                iops("write_iops")
            )
        );
        r.outcome = Outcome::Failed("boot timeout".into());
        assert_eq!(cell_end_line(&r), "FAILED: boot timeout");
        r.outcome = Outcome::Passed;
        r.metrics.clear();
        assert_eq!(cell_end_line(&r), "passed");
    }

    #[test]
    fn qemu_versions_parse_from_real_output() {
        // Debian 12's qemu-system-x86_64 --version.
        let debian = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)\n\
                      Copyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n";
        assert_eq!(parse_qemu_version(debian).as_deref(), Some("7.2.22"));
        assert_eq!(
            parse_qemu_version("QEMU emulator version 9.1.0\n").as_deref(),
            Some("9.1.0")
        );
        assert_eq!(parse_qemu_version("sh: not qemu\n"), None);
        assert_eq!(parse_qemu_version(""), None);
        // Not a QEMU: the path alone, never a made-up version.
        assert_eq!(
            emulator_provenance(Path::new("/bin/true"), true),
            "/bin/true"
        );
        assert_eq!(
            emulator_provenance(Path::new("/usr/bin/qemu-system-x86_64"), false),
            "/usr/bin/qemu-system-x86_64"
        );
    }
}
