//! The `vmbench` binary: parses the command line and dispatches; all work is in the library.

use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vmbench::cli::{self, Cli, Command, ImageAction, ReportFormat};
use vmbench::error::{CliError, EXIT_INTERRUPTED};
use vmbench::matrix::cell_run::Cancel;
use vmbench::matrix::runner::{self, RunOptions};
use vmbench::results::store::Store;
use vmbench::results::RunRecord;
use vmbench::{compare, doctor, image, matrix, report};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                vmbench::error::EXIT_USAGE
            } else {
                0
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vmbench: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if !matches!(cli.command, Command::Matrix(_) | Command::Cleanup(_)) {
        default_sigpipe();
    }
    let code = match rt.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vmbench: {}", chain(&e));
            e.exit_code()
        }
    };
    drop(rt);
    std::process::exit(code);
}

/// Commands that only read and print die quietly when their reader leaves (`| head`), as Unix
/// tools do, instead of panicking in `println!`. `matrix` and `cleanup` keep SIGPIPE ignored:
/// they must finish tearing down and storing whatever becomes of their output.
fn default_sigpipe() {
    // SAFETY: restoring a signal's default disposition at start-up, before any thread that
    // could rely on the ignored disposition writes to a pipe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn chain(e: &CliError) -> String {
    match e {
        CliError::Usage(s) => s.clone(),
        CliError::Other(a) => format!("{a:#}"),
    }
}

async fn dispatch(cmd: Command) -> Result<i32, CliError> {
    match cmd {
        Command::Matrix(a) => cmd_matrix(*a).await,
        Command::Image {
            action: ImageAction::Build(a),
        } => cmd_image(a).await,
        Command::Image {
            action: ImageAction::Prune(a),
        } => cmd_image_prune(&a),
        Command::Doctor(a) => Ok(doctor::run(&doctor_options(&a)).await),
        Command::Cleanup(a) => vmbench::cleanup::run(&cleanup_options(&a)).map_err(CliError::Other),
        Command::Runs(a) => cmd_runs(&a),
        Command::Report(a) => cmd_report(&a),
        Command::Compare(a) => cmd_compare(&a),
        Command::Trend(a) => cmd_trend(&a),
        Command::Recommend(a) => cmd_recommend(&a),
        Command::Export(a) => cmd_export(&a),
        Command::Import(a) => cmd_import(&a),
        Command::Presets => {
            print!("{}", vmbench::matrix::presets::listing());
            Ok(0)
        }
    }
}

fn doctor_options(a: &cli::DoctorArgs) -> doctor::DoctorOptions {
    doctor::DoctorOptions {
        connect: a.connect.clone(),
        xen_connect: a.xen_connect.clone(),
        no_probe: a.no_probe,
        image_cache: image_request(&a.image).cache_dir,
        runs_dir: a.runs_dir.clone(),
    }
}

fn cleanup_options(a: &cli::CleanupArgs) -> vmbench::cleanup::CleanupOptions {
    vmbench::cleanup::CleanupOptions {
        connect: a.connect.clone(),
        run: a.run.clone(),
        runs_dir: a.runs_dir.clone(),
        dry_run: a.dry_run,
    }
}

fn image_request(a: &cli::ImageArgs) -> image::ImageRequest {
    image::ImageRequest {
        cache_dir: a
            .image_cache
            .clone()
            .unwrap_or_else(image::default_cache_dir),
        agent: a.agent.clone(),
        force: a.rebuild,
    }
}

fn db_path(a: &cli::DbArgs) -> PathBuf {
    a.db.clone().unwrap_or_else(Store::default_path)
}

async fn cmd_matrix(a: cli::MatrixArgs) -> Result<i32, CliError> {
    let table = if a.all_metrics {
        report::MetricSet::All
    } else {
        report::MetricSet::Headline
    };
    let cfg = matrix_run_config(&a)?;
    for w in &cfg.workload {
        vmbench::workload::check_job_file(w).map_err(CliError::Usage)?;
    }
    if let Some(p) = &a.preset {
        // Say up front what of the write-up this run cannot reproduce.
        for line in matrix::presets::seed_preset(p)
            .map_err(CliError::Usage)?
            .not_here
        {
            eprintln!("preset {p}: not measured here: {line}");
        }
    }
    if a.dry_run {
        print!("{}", matrix::dry_run::render(&cfg));
        return Ok(0);
    }
    let opts = RunOptions {
        // Absolute: the paths in a run's domain XML, pools and server configs are resolved by
        // libvirtd and the servers, not in our cwd (a relative --work-dir failed every cell).
        runs_root: absolute("--runs-dir", &a.runs_dir)?,
        work_root: absolute("--work-dir", &a.work_dir)?,
        resume: a.resume.clone(),
        image: image_request(&a.image),
        db: db_path(&a.db),
        command: std::env::args().collect(),
    };
    let cancel = Arc::new(Cancel::default());
    spawn_signal_handler(cancel.clone());
    let (ui, ui_thread) = matrix::progress::start();
    let result = runner::run(cfg, opts, ui.clone(), cancel).await;
    drop(ui);
    let _ = ui_thread.join();
    let summary = result.map_err(CliError::Other)?;
    if let Some(p) = a
        .preset
        .as_deref()
        .and_then(|p| matrix::presets::seed_preset(p).ok())
    {
        if !summary.interrupted {
            let next = p.then.replace("RUN", &summary.record.run_id);
            eprintln!("preset {}: next: {next}", p.name);
        }
    }
    Ok(report_finished_run(&summary, table))
}

/// The configuration `vmbench matrix` runs: the flags' own, or with `--resume` the run
/// directory's saved one.
fn matrix_run_config(
    a: &cli::MatrixArgs,
) -> Result<vmbench::matrix::config::MatrixConfig, CliError> {
    if let Some(dir) = &a.resume {
        if !dir.join("run.json").is_file() || !dir.join("config.json").is_file() {
            return Err(CliError::Usage(format!(
                "--resume {}: not a vmbench run directory (needs run.json and config.json)",
                dir.display()
            )));
        }
    }
    Ok(match &a.resume {
        // The run's own config.json decides; a flag that would change the matrix is refused
        // rather than silently ignored.
        Some(dir) => {
            if a.config.is_some()
                || a.preset.is_some()
                || cli::matrix_config(a)? != vmbench::matrix::config::MatrixConfig::default()
            {
                return Err(CliError::Usage(
                    "--resume reruns the run's own config.json: drop --config and the options that shape the matrix".into(),
                ));
            }
            // The CHAP file is read again: it must still be there and private.
            let c = saved_config(dir)?;
            c.storage
                .validate()
                .map_err(|e| CliError::Usage(e.to_string()))?;
            c
        }
        None => cli::matrix_config(a)?,
    })
}

/// Prints a finished run's tables and where it is, and gives the exit code: 1 when a cell
/// failed or none passed, the interrupted code when cut short.
fn report_finished_run(summary: &runner::FinishedRun, table: report::MetricSet) -> i32 {
    // The results are stored by now: a closed stdout or stderr must not turn the exit code
    // into a panic's, so these writes ignore their errors.
    print_tables(&summary.record, table);
    let mut err = std::io::stderr();
    let _ = writeln!(err, "results: {}", summary.dir.display());
    if summary.interrupted {
        let _ = writeln!(
            err,
            "interrupted: finished cells are kept; continue with `vmbench matrix --resume {}`",
            summary.dir.display()
        );
        return EXIT_INTERRUPTED;
    }
    let passed = summary
        .record
        .cells
        .iter()
        .filter(|c| c.outcome == vmbench::results::Outcome::Passed)
        .count();
    if passed == 0 {
        let _ = writeln!(err, "vmbench: no cell could be measured on this host (see the reasons above; `vmbench doctor` checks the host)");
    }
    // A nightly job must not go green when nothing was measured.
    if summary.failed() > 0 || passed == 0 {
        1
    } else {
        0
    }
}

/// `path` made absolute against the cwd, without touching the filesystem.
fn absolute(flag: &str, path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path)
        .map_err(|e| CliError::Usage(format!("{flag} {}: {e}", path.display())))
}

fn saved_config(dir: &Path) -> Result<vmbench::matrix::config::MatrixConfig, CliError> {
    let p = dir.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(|e| {
        CliError::Usage(format!(
            "--resume {}: not a vmbench run directory ({}: {e})",
            dir.display(),
            p.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| CliError::Usage(format!("{}: {e}", p.display())))
}

fn spawn_signal_handler(cancel: Arc<Cancel>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
        // Cancel first: stderr may be a pipe whose reader is gone (a killed parent), and a
        // failed print must not keep the run going.
        cancel.cancel();
        let _ = writeln!(
            std::io::stderr(),
            "\nvmbench: interrupted: stopping the running cell and tearing everything down"
        );
    });
}

fn print_tables(rec: &RunRecord, set: report::MetricSet) {
    let out = report::text(&rec.cells, set);
    if !out.trim().is_empty() {
        let _ = writeln!(std::io::stdout(), "{out}");
    }
}

async fn cmd_image(a: cli::ImageArgs) -> Result<i32, CliError> {
    let req = image_request(&a);
    let info = tokio::task::spawn_blocking(move || {
        image::ensure(&req, &|s: &str| eprintln!("image: {s}"))
    })
    .await
    .map_err(|e| CliError::Other(e.into()))?
    .map_err(|e| CliError::Other(e.into()))?;
    println!("image {}", info.id);
    let initramfs = format!(
        "{} ({:.1} MiB)",
        info.initrd.display(),
        info.initrd_bytes as f64 / 1048576.0
    );
    let rows: Vec<(&str, String)> = [
        ("vmlinuz", info.kernel.display().to_string()),
        ("initramfs", initramfs),
    ]
    .into_iter()
    .chain(info.versions.iter().map(|(k, v)| (k.as_str(), v.clone())))
    .collect();
    // Keys vary in length (`agent_sha256`): pad to the longest so values line up.
    let width = rows.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    for (k, v) in rows {
        println!("  {:<width$} {v}", format!("{k}:"));
    }
    Ok(0)
}

fn cmd_image_prune(a: &cli::PruneArgs) -> Result<i32, CliError> {
    let cache = a
        .image_cache
        .clone()
        .unwrap_or_else(image::default_cache_dir);
    let r = image::prune::prune(&cache, a.keep as usize, a.dry_run)
        .map_err(|e| CliError::Other(e.into()))?;
    let mib = |b: u64| b as f64 / 1048576.0;
    let verb = if a.dry_run { "would remove" } else { "removed" };
    for i in &r.removed {
        println!("{verb} image {} ({:.1} MiB)", i.id, mib(i.bytes));
    }
    for (i, why) in &r.kept {
        println!("kept image {} ({:.1} MiB): {why}", i.id, mib(i.bytes));
    }
    println!(
        "{verb} {} image(s), {:.1} MiB; kept {} in {}",
        r.removed.len(),
        mib(r.freed()),
        r.kept.len(),
        cache.display()
    );
    Ok(0)
}

/// A run by id, `last`, `last-good`, or a run directory.
fn load_run(spec: &str, db: &cli::DbArgs) -> Result<RunRecord, CliError> {
    let p = Path::new(spec);
    if p.join("run.json").is_file() {
        return vmbench::results::rundir::RunDir::open(p)
            .and_then(|d| d.load())
            .map_err(|e| CliError::Usage(e.to_string()));
    }
    let store = Store::open(&db_path(db)).map_err(|e| CliError::Other(e.into()))?;
    let host = runner::hostname();
    let id = store
        .resolve(spec, Some(&host))
        .map_err(|e| CliError::Usage(e.to_string()))?;
    store.load_run(&id).map_err(|e| CliError::Other(e.into()))
}

fn write_out(path: &Option<PathBuf>, text: &str) -> Result<(), CliError> {
    match path {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| CliError::Other(anyhow::anyhow!("{}: {e}", p.display()))),
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| CliError::Other(e.into())),
    }
}

fn cmd_runs(a: &cli::DbArgs) -> Result<i32, CliError> {
    let store = Store::open(&db_path(a)).map_err(|e| CliError::Other(e.into()))?;
    let runs = store.runs().map_err(|e| CliError::Other(e.into()))?;
    if runs.is_empty() {
        println!("no runs in {}", db_path(a).display());
    }
    println!(
        "{:<24} {:<26} {:<16} {:>6} {:>6} {:>11} {:>7}  status",
        "run", "started", "host", "passed", "failed", "unsupported", "skipped"
    );
    for r in runs {
        println!(
            "{:<24} {:<26} {:<16} {:>6} {:>6} {:>11} {:>7}  {}",
            r.run_id, r.started, r.host, r.passed, r.failed, r.unsupported, r.skipped, r.status
        );
    }
    Ok(0)
}

fn cmd_report(a: &cli::ReportArgs) -> Result<i32, CliError> {
    let spec = if a.last { "last" } else { a.run.as_str() };
    let run = load_run(spec, &a.db)?;
    if let Some(seed) = &a.against_seed {
        let text = report::seed::against(
            &run,
            &cli::recorded_matrix_config(&run.command),
            seed,
            a.force,
        )
        .map_err(|e| CliError::Usage(e.to_string()))?;
        write_out(&a.output, &text)?;
        return Ok(0);
    }
    let text = match a.format {
        ReportFormat::Text => report::text(&run.cells, a.metrics),
        ReportFormat::Markdown => report::markdown(&run.cells),
        ReportFormat::Csv => report::csv(&run.cells),
        ReportFormat::Html => report::html(&run),
    };
    write_out(&a.output, &text)?;
    Ok(0)
}

fn cmd_compare(a: &cli::CompareArgs) -> Result<i32, CliError> {
    let correction: compare::Correction = a.correction.parse().map_err(CliError::Usage)?;
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        return Err(CliError::Usage(format!(
            "--alpha {} is not between 0 and 1 (exclusive)",
            a.alpha
        )));
    }
    let (base, cand) = match compare_sides(a)? {
        Some(sides) => sides,
        None => return Ok(EXIT_NO_BASELINE),
    };
    let mut opts = compare::CompareOptions {
        noise_threshold_pct: a.threshold,
        alpha: a.alpha,
        correction,
        extra_verdict_metrics: a.metric.clone(),
        force: a.force,
        allow_missing: a.allow_missing,
        ..Default::default()
    };
    for t in &a.metric_threshold {
        let (k, v) = t
            .split_once('=')
            .and_then(|(k, v)| v.parse::<f64>().ok().map(|v| (k.to_string(), v)))
            .ok_or_else(|| {
                CliError::Usage(format!("--metric-threshold '{t}' is not KEY=PERCENT"))
            })?;
        opts.per_metric_threshold.insert(k, v);
    }
    if a.noise_from_history {
        let history = history_runs(&a.db, &[&base.run_id, &cand.run_id])?;
        opts.history_noise = compare::history_noise(&base, &history);
    }
    let cmp = compare::compare(&base, &cand, &opts);
    let text = match a.format {
        cli::CompareFormat::Text => format!("{}\n", cmp.table()),
        cli::CompareFormat::Html => vmbench::report::compare_html::compare_html(&cmp),
    };
    write_out(&a.output, &text)?;
    if let Some(p) = &a.junit {
        write_out(&Some(p.clone()), &cmp.junit_xml())?;
    }
    if let Some(p) = &a.json {
        let json = serde_json::to_string_pretty(&cmp).map_err(|e| CliError::Other(e.into()))?;
        write_out(&Some(p.clone()), &json)?;
    }
    Ok(cmp.exit_code())
}

/// The two records `compare` judges: two runs, or one run split `--along` a dimension (`None`
/// after saying why when a `last-good`/`previous` baseline found no earlier run).
fn compare_sides(a: &cli::CompareArgs) -> Result<Option<(RunRecord, RunRecord)>, CliError> {
    if let (Some(run), Some(along)) = (&a.within, &a.along) {
        let along: compare::Along = along
            .parse()
            .map_err(|e: compare::AlongError| CliError::Usage(e.to_string()))?;
        let split = along
            .split(&load_run(run, &a.db)?)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if !split.unpaired.is_empty() {
            eprintln!(
                "vmbench: {} cell(s) with no partner along {} left out: {}",
                split.unpaired.len(),
                along.dimension,
                split.unpaired.join(", ")
            );
        }
        return Ok(Some((split.baseline, split.candidate)));
    }
    let (Some(baseline), Some(candidate)) = (&a.baseline, &a.candidate) else {
        return Err(CliError::Usage(
            "compare needs BASELINE CANDIDATE, or --within RUN --along DIM=A,B".into(),
        ));
    };
    let cand = load_run(candidate, &a.db)?;
    let Some(base) = load_baseline(baseline, &cand, &a.db)? else {
        return Ok(None);
    };
    if base.run_id == cand.run_id {
        return Err(CliError::Usage(format!(
            "baseline '{baseline}' and candidate '{candidate}' are the same run {}: a run \
             compared with itself proves nothing (use last-good or previous as the baseline: \
             they resolve to an earlier run than the candidate, or --within RUN --along DIM=A,B \
             for two sides of one run)",
            cand.run_id
        )));
    }
    Ok(Some((base, cand)))
}

/// `compare`'s exit code when `last-good`/`previous` found no earlier run (a first night).
const EXIT_NO_BASELINE: i32 = 4;

/// The baseline run: a run directory, an id, or a keyword resolved relative to `cand`; `None`
/// (after saying why) when a keyword finds no earlier run.
fn load_baseline(
    spec: &str,
    cand: &RunRecord,
    db: &cli::DbArgs,
) -> Result<Option<RunRecord>, CliError> {
    if !matches!(spec.trim(), "last-good" | "previous") {
        return load_run(spec, db).map(Some);
    }
    let store = Store::open(&db_path(db)).map_err(|e| CliError::Other(e.into()))?;
    let host = runner::hostname();
    match store.resolve_baseline(spec, cand, Some(&host)) {
        Ok(id) => store
            .load_run(&id)
            .map(Some)
            .map_err(|e| CliError::Other(e.into())),
        Err(e @ vmbench::results::store::StoreError::NoBaseline { .. }) => {
            eprintln!("vmbench: {e}");
            Ok(None)
        }
        Err(e) => Err(CliError::Usage(e.to_string())),
    }
}

/// The newest finished runs of the store, other than `except`, for `--noise-from-history`.
fn history_runs(db: &cli::DbArgs, except: &[&str]) -> Result<Vec<RunRecord>, CliError> {
    const MAX_HISTORY: usize = 20;
    let store = Store::open(&db_path(db)).map_err(|e| CliError::Other(e.into()))?;
    let runs = store.runs().map_err(|e| CliError::Other(e.into()))?;
    runs.iter()
        .filter(|r| r.status != "running" && !except.contains(&r.run_id.as_str()))
        .take(MAX_HISTORY)
        .map(|r| {
            store
                .load_run(&r.run_id)
                .map_err(|e| CliError::Other(e.into()))
        })
        .collect()
}

/// `vmbench trend [--gate]`: the nights of this host from the store, oldest first.
fn cmd_trend(a: &cli::TrendArgs) -> Result<i32, CliError> {
    let opts = cli::trend_options(a).map_err(CliError::Usage)?;
    let store = Store::open(&db_path(&a.db)).map_err(|e| CliError::Other(e.into()))?;
    let runs = vmbench::trend::nights_from_store(&store, &runner::hostname(), a.nights)
        .map_err(|e| CliError::Other(e.into()))?;
    let (trend, report) = if a.gate {
        vmbench::trend::gate(&runs, &opts)
    } else {
        (vmbench::trend::trend(&runs, &opts), None)
    };
    let json = || {
        serde_json::to_string_pretty(&serde_json::json!({"trend": &trend, "gate": &report}))
            .map_err(|e| CliError::Other(e.into()))
    };
    let text = match a.format {
        cli::TrendFormat::Text => {
            let gate = report.as_ref().map(|g| g.text()).unwrap_or_default();
            format!("{}{gate}", trend.text())
        }
        cli::TrendFormat::Html => trend.html(report.as_ref()),
        cli::TrendFormat::Json => json()?,
    };
    write_out(&a.output, &text)?;
    if let Some(p) = &a.json {
        write_out(&Some(p.clone()), &json()?)?;
    }
    Ok(match &report {
        Some(g) => g.outcome.exit_code(),
        None if a.gate => {
            eprintln!(
                "vmbench: no nights of this host in the store yet: not enough nights (exit 3)"
            );
            3
        }
        None => 0,
    })
}

fn cmd_recommend(a: &cli::RecommendArgs) -> Result<i32, CliError> {
    use compare::recommend::{self, Ask};
    let ask = Ask::parse(
        a.workload.as_deref(),
        a.objective.as_deref(),
        a.profile.as_deref(),
    )
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let run = load_run(&a.run, &a.db)?;
    match recommend::recommend(&run, &ask) {
        Ok(r) => {
            if let Some(p) = &a.json {
                write_out(&Some(p.clone()), &json_text(&r)?)?;
            }
            if let Some(p) = &a.html {
                write_out(&Some(p.clone()), &report::recommend_html::render(&r))?;
            }
            print!("{}", recommend::render_text(&r));
            Ok(0)
        }
        Err(e) if e.exit_code() == recommend::EXIT_NOT_ENOUGH_DATA => {
            if let Some(p) = &a.json {
                let doc = serde_json::json!({
                    "run_id": run.run_id,
                    "ranked": false,
                    "reason": e.to_string(),
                });
                write_out(&Some(p.clone()), &json_text(&doc)?)?;
            }
            eprintln!("vmbench: {e}");
            Ok(recommend::EXIT_NOT_ENOUGH_DATA)
        }
        Err(e) => Err(CliError::Usage(e.to_string())),
    }
}

fn json_text<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| CliError::Other(e.into()))
}

fn cmd_export(a: &cli::ExportArgs) -> Result<i32, CliError> {
    let store = Store::open(&db_path(&a.db)).map_err(|e| CliError::Other(e.into()))?;
    let id = store
        .resolve(&a.run, None)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let text = match a.format {
        cli::ExportFormat::Json => store.export_json(&id),
        cli::ExportFormat::Openmetrics => store
            .load_run(&id)
            .map(|run| report::openmetrics::openmetrics(&run)),
    }
    .map_err(|e| CliError::Other(e.into()))?;
    write_out(&a.output, &text)?;
    Ok(0)
}

fn cmd_import(a: &cli::ImportArgs) -> Result<i32, CliError> {
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| CliError::Usage(format!("{}: {e}", a.file.display())))?;
    let store = Store::open(&db_path(&a.db)).map_err(|e| CliError::Other(e.into()))?;
    let id = store
        .import_json(&text)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    println!("imported run {id}");
    Ok(0)
}
