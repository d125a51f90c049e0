//! The run history: an embedded SQLite database that holds every run and every cell's record.
//!
//! Durability matters more than speed here: a cell's record is committed in one transaction the
//! moment the cell ends (WAL, `synchronous=FULL`), so a harness killed mid-run leaves a database
//! that opens and holds every finished cell complete, and none half-written.
//!
//! Floats are stored by their IEEE-754 bits (a `REAL` column beside them is for people querying
//! with `sqlite3`), because SQLite turns NaN into NULL and may store integral reals as integers,
//! which loses `-0.0`. Samples are one little-endian `f64` blob per series: a 600-second run has
//! thousands of them and one row each would make `record_cell` slow for nothing.

#![warn(missing_docs)]

use super::{
    Better, CellResult, FailureKind, Outcome, Provenance, RunRecord, SkipKind, Timings, Value,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema version this build writes. Older databases are migrated; newer ones are refused.
pub const SCHEMA_VERSION: i64 = 8;

/// `MIGRATIONS[i]` takes a database from version `i` to `i + 1`; version 0 is an empty file.
const MIGRATIONS: &[&str] = &[
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
];

const SCHEMA_V1: &str = "
CREATE TABLE runs (
    run_id   TEXT PRIMARY KEY,
    started  TEXT NOT NULL,
    command  TEXT NOT NULL,            -- JSON array of arguments
    host     TEXT NOT NULL,
    status   TEXT NOT NULL DEFAULT 'running',
    finished INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE cells (
    id               INTEGER PRIMARY KEY,
    run_id           TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    cell_id          TEXT NOT NULL,
    repeat           INTEGER NOT NULL,
    cell             TEXT NOT NULL,    -- JSON of the Cell
    outcome          TEXT NOT NULL,    -- passed | failed | unsupported | skipped
    reason           TEXT,
    provision_ms     INTEGER NOT NULL,
    boot_to_hello_ms INTEGER NOT NULL,
    run_ms           INTEGER NOT NULL,
    teardown_ms      INTEGER NOT NULL,
    total_ms         INTEGER NOT NULL,
    metric_count     INTEGER NOT NULL,
    UNIQUE (run_id, cell_id, repeat)
);
CREATE INDEX cells_by_run ON cells(run_id, id);
CREATE TABLE metrics (
    cell_row   INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    idx        INTEGER NOT NULL,
    key        TEXT NOT NULL,
    label      TEXT NOT NULL,
    unit       TEXT NOT NULL,
    better     TEXT NOT NULL,          -- higher | lower
    kind       TEXT NOT NULL,          -- number | too_fast | not_available
    value      REAL,                   -- for humans; value_bits is the truth
    value_bits INTEGER,
    note       TEXT,                   -- the reason of not_available
    PRIMARY KEY (cell_row, idx)
);
CREATE INDEX metrics_by_key ON metrics(key);
CREATE TABLE samples (
    cell_row INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    series   TEXT NOT NULL,
    data     BLOB NOT NULL,            -- little-endian f64s
    PRIMARY KEY (cell_row, series)
);
CREATE TABLE params (
    cell_row INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    key      TEXT NOT NULL,
    value    TEXT NOT NULL,
    PRIMARY KEY (cell_row, key)
);
CREATE TABLE provenance (
    cell_row     INTEGER PRIMARY KEY REFERENCES cells(id) ON DELETE CASCADE,
    host         TEXT NOT NULL,
    host_kernel  TEXT NOT NULL,
    cpu_model    TEXT NOT NULL,
    qemu         TEXT NOT NULL,
    libvirt      TEXT NOT NULL,
    guest_kernel TEXT NOT NULL,
    fio          TEXT NOT NULL,
    bonnie       TEXT NOT NULL,
    image        TEXT NOT NULL,
    vmbench      TEXT NOT NULL
);
";

/// Version 2: the kind of a failed cell's failure (NULL for other outcomes and older rows).
const SCHEMA_V2: &str = "ALTER TABLE cells ADD COLUMN failure_kind TEXT;";

/// Version 3: the I/O cap on the disk under test ('' for uncapped and older rows).
const SCHEMA_V3: &str = "ALTER TABLE provenance ADD COLUMN io_limit TEXT NOT NULL DEFAULT '';";

/// Version 4: the storage server's version and the job definitions' hash ('' in older rows).
const SCHEMA_V4: &str = "ALTER TABLE provenance ADD COLUMN storage_server TEXT NOT NULL DEFAULT '';
ALTER TABLE provenance ADD COLUMN jobs TEXT NOT NULL DEFAULT '';";

/// Version 5: the engines' versions as rows (engine key -> version) instead of one column per
/// engine; the old columns' values become rows under their keys.
const SCHEMA_V5: &str = "CREATE TABLE tools (
    cell_row INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    tool     TEXT NOT NULL,
    version  TEXT NOT NULL,
    PRIMARY KEY (cell_row, tool)
);
INSERT INTO tools (cell_row, tool, version) SELECT cell_row, 'fio', fio FROM provenance;
INSERT INTO tools (cell_row, tool, version) SELECT cell_row, 'bonnie', bonnie FROM provenance;
ALTER TABLE provenance DROP COLUMN fio;
ALTER TABLE provenance DROP COLUMN bonnie;";

/// Version 6: why a skipped or unsupported cell did not run (NULL for other outcomes and
/// older rows).
const SCHEMA_V6: &str = "ALTER TABLE cells ADD COLUMN skip_kind TEXT;";

/// Version 7: the prefill's time apart from the measured job's (0 in older rows, whose
/// `run_ms` includes it).
const SCHEMA_V7: &str = "ALTER TABLE cells ADD COLUMN prefill_ms INTEGER NOT NULL DEFAULT 0;";

/// Version 8: libvirt's domain start apart within the boot (0 in older rows).
const SCHEMA_V8: &str = "ALTER TABLE cells ADD COLUMN domain_start_ms INTEGER NOT NULL DEFAULT 0;";

/// Run statuses that mean the run did not cover its matrix, so it cannot be "last-good".
const INCOMPLETE_STATUSES: &[&str] = &["running", "interrupted", "aborted", "failed"];

/// How many run ids a "not found" error lists.
const RECENT_IN_ERRORS: usize = 5;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("results database: {context}")]
    Sqlite {
        /// What we were doing.
        context: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database's directory could not be created.
    #[error("cannot create the results database directory {}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON document (cell, command, export) did not encode or decode.
    #[error("results JSON: {context}")]
    Json {
        /// Which document.
        context: String,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// The database was written by a newer vmbench.
    #[error(
        "results database schema version {found} is newer than this vmbench supports \
         ({supported}); upgrade vmbench or use another --db"
    )]
    SchemaTooNew {
        /// Version in the file.
        found: i64,
        /// Version this build knows.
        supported: i64,
    },
    /// A run spec named no run.
    #[error(
        "no run matches '{spec}'{}; recent runs: {}",
        host_note(host),
        recent_list(recent)
    )]
    NotFound {
        /// What the user asked for.
        spec: String,
        /// The host it was restricted to, if any.
        host: Option<String>,
        /// The most recent run ids, newest first.
        recent: Vec<String>,
    },
    /// `begin_run` or `import_json` with an id that is already stored.
    #[error("run '{0}' is already in the results database; refusing to overwrite it")]
    DuplicateRun(String),
    /// `record_cell` / `finish_run` for a run that was never begun.
    #[error("run '{0}' was never begun in the results database (call begin_run first)")]
    UnknownRun(String),
    /// JSON cannot hold an infinity or NaN; exporting it as `null` would lose it silently.
    #[error("run {run_id} cannot be exported: {what} is {value}, which JSON cannot represent")]
    NotExportable {
        /// The run.
        run_id: String,
        /// Which cell and metric or sample series.
        what: String,
        /// The value.
        value: f64,
    },
    /// A row holds a value this build cannot read.
    #[error("results database is corrupt: {0}")]
    Corrupt(String),
    /// `last-good` or `previous` found no earlier run to compare the candidate with.
    #[error(
        "no baseline for {candidate}: no {what} started before it{} has the same cells \
         (the first night of a matrix has nothing to compare with)",
        host_note(host)
    )]
    NoBaseline {
        /// The candidate run.
        candidate: String,
        /// What was looked for ("finished run", "good run").
        what: &'static str,
        /// The host it was restricted to, if any.
        host: Option<String>,
    },
}

fn host_note(host: &Option<String>) -> String {
    host.as_ref()
        .map(|h| format!(" on host '{h}'"))
        .unwrap_or_default()
}

fn recent_list(recent: &[String]) -> String {
    if recent.is_empty() {
        "none (the database is empty)".into()
    } else {
        recent.join(", ")
    }
}

/// Wraps a rusqlite error with what we were doing.
trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sqlite {
            context: what.to_string(),
            source,
        })
    }
}

/// One line of `vmbench runs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Run id.
    pub run_id: String,
    /// RFC 3339 start time.
    pub started: String,
    /// Host identity the run was made on.
    pub host: String,
    /// Cells (repeats) that passed.
    pub passed: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Cells this host could not run.
    pub unsupported: usize,
    /// Cells never meant to run.
    pub skipped: usize,
    /// `running` until `finish_run` sets the final status.
    pub status: String,
}

/// What `export_json` writes: the run plus what the store knows beyond the `RunRecord`.
#[derive(Debug, Serialize, Deserialize)]
struct Export {
    /// Format marker, so a bare `RunRecord` can be told apart.
    vmbench_export: u32,
    host: String,
    status: String,
    run: RunRecord,
}

/// The results database.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, with its parent directories, and brings
    /// its schema to [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path).ctx(&format!("cannot open {}", path.display()))?;
        // Another vmbench (a report while a run writes) may hold the lock briefly.
        conn.busy_timeout(Duration::from_secs(10))
            .ctx("setting busy timeout")?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .ctx("enabling WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")
            .ctx("setting synchronous=FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .ctx("enabling foreign keys")?;
        let store = Store { conn };
        store.migrate()?;
        Ok(store)
    }

    /// The per-user default location, e.g. `~/.local/share/vmbench/vmbench.db`.
    pub fn default_path() -> PathBuf {
        directories::ProjectDirs::from("", "", "vmbench")
            .map(|d| d.data_dir().join("vmbench.db"))
            .unwrap_or_else(|| PathBuf::from("vmbench.db"))
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .ctx("starting schema check")?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            .ctx("creating schema_version")?;
        let found: Option<i64> = tx
            .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
            .ctx("reading schema version")?;
        let found = found.unwrap_or(0);
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(sql)
                .ctx(&format!("migrating schema to version {}", i + 1))?;
        }
        if found < SCHEMA_VERSION {
            tx.execute("DELETE FROM schema_version", [])
                .ctx("updating schema version")?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                [SCHEMA_VERSION],
            )
            .ctx("updating schema version")?;
        }
        tx.commit().ctx("committing schema")
    }

    /// Records that a run started. Refuses an id that is already stored.
    pub fn begin_run(
        &self,
        run_id: &str,
        started: &str,
        command: &[String],
        host: &str,
    ) -> Result<(), StoreError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .ctx("starting begin_run")?;
        insert_run(&tx, run_id, started, command, host)?;
        tx.commit().ctx("committing begin_run")
    }

    /// Reopens a run for `--resume`: marks it running again, or inserts it when this store has
    /// never seen it (the first attempt used another `--db`). Returns true when it was inserted,
    /// so the caller can add the cells the run already has.
    pub fn resume_run(
        &self,
        run_id: &str,
        started: &str,
        command: &[String],
        host: &str,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE runs SET status = 'running', finished = 0 WHERE run_id = ?1",
                params![run_id],
            )
            .ctx("reopening run")?;
        if n > 0 {
            return Ok(false);
        }
        self.begin_run(run_id, started, command, host)?;
        Ok(true)
    }

    /// Stores one cell's record durably, all of it or nothing.
    pub fn record_cell(&self, run_id: &str, cell: &CellResult) -> Result<(), StoreError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .ctx("starting record_cell")?;
        if !run_exists(&tx, run_id)? {
            return Err(StoreError::UnknownRun(run_id.into()));
        }
        insert_cell(&tx, run_id, cell)?;
        tx.commit()
            .ctx(&format!("committing cell {} of run {run_id}", cell.cell_id))
    }

    /// Marks a run finished with its final status (e.g. `ok`, `failed`, `interrupted`).
    pub fn finish_run(&self, run_id: &str, status: &str) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE runs SET status = ?2, finished = 1 WHERE run_id = ?1",
                params![run_id, status],
            )
            .ctx("finishing run")?;
        if n == 0 {
            return Err(StoreError::UnknownRun(run_id.into()));
        }
        Ok(())
    }

    /// Every run, newest first, with its cell counts.
    pub fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.run_id, r.started, r.host, r.status,
                    COALESCE(SUM(c.outcome = 'passed'), 0),
                    COALESCE(SUM(c.outcome = 'failed'), 0),
                    COALESCE(SUM(c.outcome = 'unsupported'), 0),
                    COALESCE(SUM(c.outcome = 'skipped'), 0)
                 FROM runs r LEFT JOIN cells c ON c.run_id = r.run_id
                 GROUP BY r.run_id ORDER BY r.started DESC, r.rowid DESC",
            )
            .ctx("listing runs")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(RunSummary {
                    run_id: r.get(0)?,
                    started: r.get(1)?,
                    host: r.get(2)?,
                    status: r.get(3)?,
                    passed: r.get::<_, i64>(4)? as usize,
                    failed: r.get::<_, i64>(5)? as usize,
                    unsupported: r.get::<_, i64>(6)? as usize,
                    skipped: r.get::<_, i64>(7)? as usize,
                })
            })
            .ctx("listing runs")?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .ctx("listing runs")
    }

    /// The whole run, cells in the order they were recorded.
    pub fn load_run(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        let head: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT started, command FROM runs WHERE run_id = ?1",
                [run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .ctx("loading run")?;
        let Some((started, command)) = head else {
            return Err(self.not_found(run_id, None));
        };
        let command = serde_json::from_str(&command).map_err(|source| StoreError::Json {
            context: format!("command of {run_id}"),
            source,
        })?;
        let cells = self.load_cells(run_id)?;
        Ok(RunRecord {
            run_id: run_id.into(),
            started,
            command,
            cells,
        })
    }

    /// Turns a run spec into a run id: an id, `last` (the newest run), or `last-good` (the newest
    /// finished run with no failed cell). `host` restricts both keywords to one host identity.
    pub fn resolve(&self, spec: &str, host: Option<&str>) -> Result<String, StoreError> {
        let runs = self.runs()?;
        let on_host = |r: &&RunSummary| host.is_none_or(|h| r.host == h);
        let found = match spec.trim() {
            "last" => runs.iter().find(on_host),
            "last-good" => runs.iter().filter(on_host).find(|r| is_good(r)),
            id => runs.iter().find(|r| r.run_id == id),
        };
        found
            .map(|r| r.run_id.clone())
            .ok_or_else(|| self.not_found(spec, host))
    }

    /// Turns a baseline spec into a run id, relative to `candidate`: a run id, or one of
    /// - `last-good`: the newest good run (finished, covered its matrix, no failed cell),
    /// - `previous`: the newest finished run, whatever its cells' outcomes,
    ///
    /// started before the candidate (stored after it, for runs with the same start) and with the
    /// same cells: the same set of cell ids, or failing that the newest whose cells include all
    /// of the candidate's (the candidate lost cells) or are all among them (it gained cells).
    /// Never the candidate itself. `host` restricts the keywords to one host identity.
    pub fn resolve_baseline(
        &self,
        spec: &str,
        candidate: &RunRecord,
        host: Option<&str>,
    ) -> Result<String, StoreError> {
        let (what, keep): (&'static str, fn(&RunSummary) -> bool) = match spec.trim() {
            "last-good" => ("good run", is_good),
            "previous" => ("finished run", is_finished),
            _ => return self.resolve(spec, host),
        };
        let runs = self.runs()?;
        let earlier: Vec<&RunSummary> = match runs.iter().position(|r| r.run_id == candidate.run_id)
        {
            Some(i) => runs[i + 1..].iter().collect(),
            None => runs
                .iter()
                .filter(|r| r.started.as_str() < candidate.started.as_str())
                .collect(),
        };
        let wanted: BTreeSet<&str> = candidate.cells.iter().map(|c| c.cell_id.as_str()).collect();
        let mut found: [Option<&RunSummary>; 3] = [None; 3];
        for r in earlier
            .into_iter()
            .filter(|r| r.run_id != candidate.run_id)
            .filter(|r| host.is_none_or(|h| r.host == h) && keep(r))
        {
            let ids = self.cell_ids(&r.run_id)?;
            let ids: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
            let tier = if ids == wanted {
                0
            } else if ids.is_superset(&wanted) {
                1
            } else if ids.is_subset(&wanted) && !ids.is_empty() {
                2
            } else {
                continue;
            };
            found[tier].get_or_insert(r);
            if tier == 0 {
                break;
            }
        }
        let best = found.into_iter().flatten().next().map(|r| r.run_id.clone());
        best.ok_or_else(|| StoreError::NoBaseline {
            candidate: candidate.run_id.clone(),
            what,
            host: host.map(Into::into),
        })
    }

    /// The distinct cell ids of a run.
    fn cell_ids(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT cell_id FROM cells WHERE run_id = ?1")
            .ctx("listing cells")?;
        let rows = stmt
            .query_map([run_id], |r| r.get(0))
            .ctx("listing cells")?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .ctx("listing cells")
    }

    /// The run as a JSON document that `import_json` (here or in another database) reads back.
    pub fn export_json(&self, run_id: &str) -> Result<String, StoreError> {
        let run = self.load_run(run_id)?;
        check_finite(&run)?;
        let (host, status): (String, String) = self
            .conn
            .query_row(
                "SELECT host, status FROM runs WHERE run_id = ?1",
                [run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ctx("exporting run")?;
        let doc = Export {
            vmbench_export: 1,
            host,
            status,
            run,
        };
        serde_json::to_string_pretty(&doc).map_err(|source| StoreError::Json {
            context: format!("exporting {run_id}"),
            source,
        })
    }

    /// Stores a run from `export_json` output (or a bare `RunRecord` JSON, whose host is taken
    /// from its first cell's provenance); returns its id. Refuses an id already stored.
    pub fn import_json(&self, json: &str) -> Result<String, StoreError> {
        let doc = parse_import(json)?;
        let tx = self.conn.unchecked_transaction().ctx("starting import")?;
        let run = &doc.run;
        insert_run(&tx, &run.run_id, &run.started, &run.command, &doc.host)?;
        for cell in &run.cells {
            insert_cell(&tx, &run.run_id, cell)?;
        }
        tx.execute(
            "UPDATE runs SET status = ?2, finished = ?3 WHERE run_id = ?1",
            params![run.run_id, doc.status, doc.status != "running"],
        )
        .ctx("importing run status")?;
        tx.commit().ctx("committing import")?;
        Ok(doc.run.run_id)
    }

    fn not_found(&self, spec: &str, host: Option<&str>) -> StoreError {
        let recent = self
            .runs()
            .map(|rs| {
                rs.into_iter()
                    .take(RECENT_IN_ERRORS)
                    .map(|r| r.run_id)
                    .collect()
            })
            .unwrap_or_default();
        StoreError::NotFound {
            spec: spec.into(),
            host: host.map(Into::into),
            recent,
        }
    }

    fn load_cells(&self, run_id: &str) -> Result<Vec<CellResult>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, cell_id, repeat, cell, outcome, reason, provision_ms,
                    boot_to_hello_ms, run_ms, teardown_ms, total_ms, failure_kind, skip_kind,
                    prefill_ms, domain_start_ms
                 FROM cells WHERE run_id = ?1 ORDER BY id",
            )
            .ctx("loading cells")?;
        let rows = stmt
            .query_map([run_id], |r| {
                Ok(CellRow {
                    id: r.get(0)?,
                    cell_id: r.get(1)?,
                    repeat: r.get(2)?,
                    cell: r.get(3)?,
                    outcome: r.get(4)?,
                    reason: r.get(5)?,
                    timings: Timings {
                        provision_ms: r.get::<_, i64>(6)? as u64,
                        boot_to_hello_ms: r.get::<_, i64>(7)? as u64,
                        run_ms: r.get::<_, i64>(8)? as u64,
                        teardown_ms: r.get::<_, i64>(9)? as u64,
                        total_ms: r.get::<_, i64>(10)? as u64,
                        prefill_ms: r.get::<_, i64>(13)? as u64,
                        domain_start_ms: r.get::<_, i64>(14)? as u64,
                    },
                    failure_kind: r.get(11)?,
                    skip_kind: r.get(12)?,
                })
            })
            .ctx("loading cells")?
            .collect::<rusqlite::Result<Vec<_>>>()
            .ctx("loading cells")?;
        rows.into_iter().map(|row| self.load_cell(row)).collect()
    }

    fn load_cell(&self, row: CellRow) -> Result<CellResult, StoreError> {
        let cell = serde_json::from_str(&row.cell).map_err(|source| StoreError::Json {
            context: format!("cell {}", row.cell_id),
            source,
        })?;
        Ok(CellResult {
            cell,
            outcome: outcome_from(&row.outcome, row.reason)?,
            metrics: self.load_metrics(row.id)?,
            params: self.load_params(row.id)?,
            provenance: self.load_provenance(row.id)?,
            timings: row.timings,
            samples: self.load_samples(row.id)?,
            cell_id: row.cell_id,
            repeat: row.repeat,
            // A kind this build does not know (written by a newer one) is left out.
            failure_kind: row.failure_kind.as_deref().and_then(FailureKind::parse),
            skip_kind: row.skip_kind.as_deref().and_then(SkipKind::parse),
        })
    }

    fn load_metrics(&self, cell_row: i64) -> Result<Vec<super::Metric>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT key, label, unit, better, kind, value_bits, note
                 FROM metrics WHERE cell_row = ?1 ORDER BY idx",
            )
            .ctx("loading metrics")?;
        let raw = stmt
            .query_map([cell_row], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .ctx("loading metrics")?
            .collect::<rusqlite::Result<Vec<_>>>()
            .ctx("loading metrics")?;
        raw.into_iter()
            .map(|(key, label, unit, better, kind, bits, note)| {
                Ok(super::Metric {
                    better: better_from(&better)?,
                    value: value_from(&key, &kind, bits, note)?,
                    key,
                    label,
                    unit,
                })
            })
            .collect()
    }

    fn load_params(&self, cell_row: i64) -> Result<BTreeMap<String, String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, value FROM params WHERE cell_row = ?1")
            .ctx("loading params")?;
        let rows = stmt
            .query_map([cell_row], |r| Ok((r.get(0)?, r.get(1)?)))
            .ctx("loading params")?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .ctx("loading params")
    }

    fn load_samples(&self, cell_row: i64) -> Result<BTreeMap<String, Vec<f64>>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT series, data FROM samples WHERE cell_row = ?1")
            .ctx("loading samples")?;
        let rows = stmt
            .query_map([cell_row], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .ctx("loading samples")?
            .collect::<rusqlite::Result<Vec<_>>>()
            .ctx("loading samples")?;
        rows.into_iter()
            .map(|(series, blob)| Ok((series, decode_f64s(&blob)?)))
            .collect()
    }

    fn load_provenance(&self, cell_row: i64) -> Result<Provenance, StoreError> {
        self.conn
            .query_row(
                "SELECT host, host_kernel, cpu_model, qemu, libvirt, guest_kernel,
                    image, vmbench, io_limit, storage_server, jobs
                 FROM provenance WHERE cell_row = ?1",
                [cell_row],
                |r| {
                    Ok(Provenance {
                        host: r.get(0)?,
                        host_kernel: r.get(1)?,
                        cpu_model: r.get(2)?,
                        qemu: r.get(3)?,
                        libvirt: r.get(4)?,
                        guest_kernel: r.get(5)?,
                        image: r.get(6)?,
                        vmbench: r.get(7)?,
                        io_limit: r.get(8)?,
                        storage_server: r.get(9)?,
                        jobs: r.get(10)?,
                        tools: BTreeMap::new(),
                    })
                },
            )
            .ctx("loading provenance")
            .and_then(|p| {
                Ok(Provenance {
                    tools: self.load_tools(cell_row)?,
                    ..p
                })
            })
    }

    fn load_tools(&self, cell_row: i64) -> Result<BTreeMap<String, String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT tool, version FROM tools WHERE cell_row = ?1")
            .ctx("loading tool versions")?;
        let rows = stmt
            .query_map([cell_row], |r| Ok((r.get(0)?, r.get(1)?)))
            .ctx("loading tool versions")?;
        rows.collect::<Result<_, _>>().ctx("loading tool versions")
    }
}

/// The cells-table part of a cell, before its child rows are read.
struct CellRow {
    id: i64,
    cell_id: String,
    repeat: u32,
    cell: String,
    outcome: String,
    reason: Option<String>,
    timings: Timings,
    failure_kind: Option<String>,
    skip_kind: Option<String>,
}

/// Finished and covered its matrix, whatever its cells' outcomes.
fn is_finished(r: &RunSummary) -> bool {
    !INCOMPLETE_STATUSES.contains(&r.status.as_str())
}

/// Finished, covered its matrix, and nothing failed.
fn is_good(r: &RunSummary) -> bool {
    is_finished(r) && r.failed == 0 && r.passed + r.unsupported + r.skipped > 0
}

/// The first non-finite number in a run, as an error.
fn check_finite(run: &RunRecord) -> Result<(), StoreError> {
    for c in &run.cells {
        let metrics = c
            .metrics
            .iter()
            .filter_map(|m| Some((&m.key, m.value.number()?)));
        let samples = c
            .samples
            .iter()
            .flat_map(|(k, v)| v.iter().map(move |x| (k, *x)));
        if let Some((key, value)) = metrics.chain(samples).find(|(_, v)| !v.is_finite()) {
            return Err(StoreError::NotExportable {
                run_id: run.run_id.clone(),
                what: format!("cell {} repeat {} {key}", c.cell_id, c.repeat),
                value,
            });
        }
    }
    Ok(())
}

fn parse_import(json: &str) -> Result<Export, StoreError> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|source| StoreError::Json {
        context: "import is not JSON".into(),
        source,
    })?;
    if v.get("vmbench_export").is_some() {
        return serde_json::from_value(v).map_err(|source| StoreError::Json {
            context: "import is not a vmbench export".into(),
            source,
        });
    }
    let run: RunRecord = serde_json::from_value(v).map_err(|source| StoreError::Json {
        context: "import is neither a vmbench export nor a run record".into(),
        source,
    })?;
    let host = run
        .cells
        .first()
        .map(|c| c.provenance.host.clone())
        .unwrap_or_default();
    Ok(Export {
        vmbench_export: 1,
        host,
        status: "imported".into(),
        run,
    })
}

fn run_exists(tx: &Transaction<'_>, run_id: &str) -> Result<bool, StoreError> {
    tx.query_row("SELECT 1 FROM runs WHERE run_id = ?1", [run_id], |_| Ok(()))
        .optional()
        .ctx("looking up run")
        .map(|o| o.is_some())
}

fn insert_run(
    tx: &Transaction<'_>,
    run_id: &str,
    started: &str,
    command: &[String],
    host: &str,
) -> Result<(), StoreError> {
    if run_exists(tx, run_id)? {
        return Err(StoreError::DuplicateRun(run_id.into()));
    }
    let command = serde_json::to_string(command).map_err(|source| StoreError::Json {
        context: "command".into(),
        source,
    })?;
    tx.execute(
        "INSERT INTO runs (run_id, started, command, host) VALUES (?1, ?2, ?3, ?4)",
        params![run_id, started, command, host],
    )
    .ctx("inserting run")?;
    Ok(())
}

fn insert_cell(tx: &Transaction<'_>, run_id: &str, c: &CellResult) -> Result<(), StoreError> {
    let cell_json = serde_json::to_string(&c.cell).map_err(|source| StoreError::Json {
        context: format!("cell {}", c.cell_id),
        source,
    })?;
    let (outcome, reason) = outcome_parts(&c.outcome);
    let t = &c.timings;
    tx.execute(
        "INSERT INTO cells (run_id, cell_id, repeat, cell, outcome, reason, provision_ms,
            boot_to_hello_ms, run_ms, teardown_ms, total_ms, metric_count, failure_kind,
            skip_kind, prefill_ms, domain_start_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![
            run_id,
            c.cell_id,
            c.repeat,
            cell_json,
            outcome,
            reason,
            t.provision_ms as i64,
            t.boot_to_hello_ms as i64,
            t.run_ms as i64,
            t.teardown_ms as i64,
            t.total_ms as i64,
            c.metrics.len() as i64,
            c.failure_kind.map(FailureKind::as_str),
            c.skip_kind.map(SkipKind::as_str),
            t.prefill_ms as i64,
            t.domain_start_ms as i64,
        ],
    )
    .ctx(&format!("inserting cell {} repeat {}", c.cell_id, c.repeat))?;
    let row = tx.last_insert_rowid();
    insert_metrics(tx, row, c)?;
    insert_children(tx, row, c)
}

fn insert_metrics(tx: &Transaction<'_>, row: i64, c: &CellResult) -> Result<(), StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO metrics (cell_row, idx, key, label, unit, better, kind, value,
                value_bits, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .ctx("inserting metrics")?;
    for (idx, m) in c.metrics.iter().enumerate() {
        let (kind, num, note) = match &m.value {
            Value::Number(v) => ("number", Some(*v), None),
            Value::TooFast => ("too_fast", None, None),
            Value::NotAvailable(why) => ("not_available", None, Some(why.as_str())),
        };
        let better = match m.better {
            Better::Higher => "higher",
            Better::Lower => "lower",
        };
        let bits = num.map(|v| v.to_bits() as i64);
        let shown = num.filter(|v| v.is_finite());
        stmt.execute(params![
            row, idx as i64, m.key, m.label, m.unit, better, kind, shown, bits, note
        ])
        .ctx(&format!("inserting metric {}", m.key))?;
    }
    Ok(())
}

fn insert_children(tx: &Transaction<'_>, row: i64, c: &CellResult) -> Result<(), StoreError> {
    for (series, values) in &c.samples {
        tx.execute(
            "INSERT INTO samples (cell_row, series, data) VALUES (?1, ?2, ?3)",
            params![row, series, encode_f64s(values)],
        )
        .ctx(&format!("inserting samples {series}"))?;
    }
    for (k, v) in &c.params {
        tx.execute(
            "INSERT INTO params (cell_row, key, value) VALUES (?1, ?2, ?3)",
            params![row, k, v],
        )
        .ctx(&format!("inserting param {k}"))?;
    }
    let p = &c.provenance;
    tx.execute(
        "INSERT INTO provenance (cell_row, host, host_kernel, cpu_model, qemu, libvirt,
            guest_kernel, image, vmbench, io_limit, storage_server, jobs)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            row,
            p.host,
            p.host_kernel,
            p.cpu_model,
            p.qemu,
            p.libvirt,
            p.guest_kernel,
            p.image,
            p.vmbench,
            p.io_limit,
            p.storage_server,
            p.jobs
        ],
    )
    .ctx("inserting provenance")?;
    for (tool, version) in &p.tools {
        tx.execute(
            "INSERT INTO tools (cell_row, tool, version) VALUES (?1, ?2, ?3)",
            params![row, tool, version],
        )
        .ctx(&format!("inserting {tool} version"))?;
    }
    Ok(())
}

fn outcome_parts(o: &Outcome) -> (&'static str, Option<&str>) {
    match o {
        Outcome::Passed => ("passed", None),
        Outcome::Failed(r) => ("failed", Some(r)),
        Outcome::Unsupported(r) => ("unsupported", Some(r)),
        Outcome::Skipped(r) => ("skipped", Some(r)),
    }
}

fn outcome_from(s: &str, reason: Option<String>) -> Result<Outcome, StoreError> {
    let reason = reason.unwrap_or_default();
    Ok(match s {
        "passed" => Outcome::Passed,
        "failed" => Outcome::Failed(reason),
        "unsupported" => Outcome::Unsupported(reason),
        "skipped" => Outcome::Skipped(reason),
        other => {
            return Err(StoreError::Corrupt(format!(
                "unknown cell outcome '{other}'"
            )))
        }
    })
}

fn better_from(s: &str) -> Result<Better, StoreError> {
    match s {
        "higher" => Ok(Better::Higher),
        "lower" => Ok(Better::Lower),
        other => Err(StoreError::Corrupt(format!(
            "unknown metric direction '{other}'"
        ))),
    }
}

fn value_from(
    key: &str,
    kind: &str,
    bits: Option<i64>,
    note: Option<String>,
) -> Result<Value, StoreError> {
    match (kind, bits) {
        ("number", Some(b)) => Ok(Value::Number(f64::from_bits(b as u64))),
        ("too_fast", _) => Ok(Value::TooFast),
        ("not_available", _) => Ok(Value::NotAvailable(note.unwrap_or_default())),
        (other, _) => Err(StoreError::Corrupt(format!(
            "metric {key}: bad value kind '{other}'"
        ))),
    }
}

fn encode_f64s(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode_f64s(blob: &[u8]) -> Result<Vec<f64>, StoreError> {
    if !blob.len().is_multiple_of(8) {
        return Err(StoreError::Corrupt(format!(
            "sample blob of {} bytes",
            blob.len()
        )));
    }
    Ok(blob
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("chunks_exact gives 8 bytes")))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell as the matrix writes it; `kind` on a failed one.
    fn cell(repeat: u32, kind: Option<FailureKind>) -> CellResult {
        let cell: crate::cell::Cell = serde_json::from_str(
            r#"{"hypervisor": "qemu", "xen_mode": null, "backend": "local", "format": "qcow2",
                "bus": "virtio-blk", "cache": "none", "io": "native", "layout": "raw",
                "workload": "pg-randrw"}"#,
        )
        .unwrap();
        let outcome = match kind {
            Some(k) => Outcome::Failed(format!("failed: {k}")),
            None => Outcome::Passed,
        };
        CellResult {
            failure_kind: kind,
            ..CellResult::new(cell, repeat, outcome)
        }
    }

    #[test]
    fn a_version_1_database_gains_failure_kind_and_keeps_its_cells() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            // What a build of schema version 1 left behind, with one failed cell.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute_batch(
                "CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version VALUES (1);
                 INSERT INTO runs (run_id, started, command, host) VALUES ('r', 't', '[]', 'h');",
            )
            .unwrap();
            let old = cell(0, None);
            conn.execute(
                "INSERT INTO cells (run_id, cell_id, repeat, cell, outcome, reason, provision_ms,
                    boot_to_hello_ms, run_ms, teardown_ms, total_ms, metric_count)
                 VALUES ('r', ?1, 0, ?2, 'failed', 'job failed', 0, 0, 0, 0, 0, 0)",
                params![old.cell_id, serde_json::to_string(&old.cell).unwrap()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO provenance VALUES (?1, 'h', '', '', '', '', '', '', '', '', '')",
                [conn.last_insert_rowid()],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        store
            .record_cell("r", &cell(1, Some(FailureKind::StorageLost)))
            .unwrap();
        let run = store.load_run("r").unwrap();
        assert_eq!(run.cells[0].failure_kind, None);
        assert_eq!(run.cells[0].outcome, Outcome::Failed("job failed".into()));
        assert_eq!(run.cells[1].failure_kind, Some(FailureKind::StorageLost));
        let v: i64 = store
            .conn
            .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn a_version_4_store_keeps_its_tool_versions_as_rows() {
        // Made by the c66cf58 build (schema 4, fio and bonnie columns) with `vmbench import` of
        // the two fixture runs below; its cells must load as those runs.
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        std::fs::copy(format!("{fixtures}store-v4-c66cf58.db"), &path).unwrap();
        let store = Store::open(&path).unwrap();
        let seed: RunRecord = serde_json::from_str(include_str!(
            "../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json"
        ))
        .unwrap();
        let export: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/export-v1-default-matrix.json"
        ))
        .unwrap();
        let default: RunRecord = serde_json::from_value(export["run"].clone()).unwrap();
        for old in [seed, default] {
            let run = store.load_run(&old.run_id).unwrap();
            assert_eq!(run.cells.len(), old.cells.len());
            for (new, old) in run.cells.iter().zip(&old.cells) {
                assert_eq!(new.provenance, old.provenance);
                assert_eq!(new.provenance.tools["fio"], "fio-3.33");
                assert!(!new.provenance.tools["bonnie"].is_empty());
                assert_eq!(new.skip_kind, None);
            }
        }
        // Version 6's column: an unsupported cell keeps its typed reason.
        let not_run = CellResult {
            skip_kind: Some(SkipKind::RemoteHost),
            ..CellResult::new(cell(1, None).cell, 1, Outcome::Unsupported("on h2".into()))
        };
        store.record_cell("20261203-101122-bb57", &not_run).unwrap();
        let back = store.load_run("20261203-101122-bb57").unwrap();
        assert_eq!(back.cells.last(), Some(&not_run));
        let mut c = cell(0, None);
        c.provenance.tools = [
            ("fio".into(), "fio-3.36".into()),
            ("dd".into(), "9.4".into()),
        ]
        .into();
        store.record_cell("20261203-101122-bb57", &c).unwrap();
        let run = store.load_run("20261203-101122-bb57").unwrap();
        assert_eq!(
            run.cells.last().unwrap().provenance.tools,
            c.provenance.tools
        );
        let v: i64 = store
            .conn
            .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
