//! Shared helpers for the integration tests: they drive the real `vmbench` binary against the
//! real libvirtd, QEMU (TCG), nfs-ganesha and tgt, and check that nothing is left behind.
#![allow(dead_code)]

pub mod argv;
pub mod deadline;

// Not every test file uses each of them.
#[allow(unused_imports)]
pub use deadline::{output_within, spawn_within, Bounded};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use vmbench::results::{CellResult, Outcome, RunRecord};

/// How long one `vmbench matrix` of a test may take before it is killed and the test fails.
/// Below the nextest ci profile's bound for a test (8 minutes), so a hung matrix fails its test
/// with the console tails, not a bare SIGKILL from nextest.
pub const MATRIX_LIMIT: Duration = Duration::from_secs(420);
/// How long a short host command (virsh, qemu-img, a script) may take.
pub const TOOL_LIMIT: Duration = Duration::from_secs(120);

/// The libvirt URI the tests use.
pub const URI: &str = "qemu:///system";

/// A scratch area for one test: runs dir, work dir and database, all removed at the end.
/// Its path is appended to `$VMBENCH_TEST_SCRATCH_LIST` when set (scripts/test: so it can clean
/// up after a test that was killed). Dropped during a panic, it first runs `vmbench cleanup` on its
/// runs, so a failed test leaves nothing for the next one.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for id in self.run_ids() {
            let mut c = Command::new(env!("CARGO_BIN_EXE_vmbench"));
            c.args(["cleanup", "--run", &id, "--runs-dir"])
                .arg(self.runs())
                .env("NO_COLOR", "1");
            // Never a second panic while unwinding: report and go on.
            match deadline::try_output_within(&mut c, TOOL_LIMIT) {
                Ok(o) => eprintln!(
                    "vmbench cleanup --run {id}: {}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                ),
                Err(e) => eprintln!("vmbench cleanup --run {id}: {e}"),
            }
        }
    }
}

impl Scratch {
    pub fn new() -> Scratch {
        use std::os::unix::fs::PermissionsExt;
        // /var/tmp: on disk (cache=none needs O_DIRECT, which tmpfs lacks).
        // Directly in /var/tmp, never deeper: a run's socket paths (virtiofsd's) are close to
        // the 108-byte limit of a unix socket address already.
        let dir = tempfile::Builder::new()
            .prefix("vmbench-test-")
            .tempdir_in("/var/tmp")
            .unwrap();
        if let Some(list) = std::env::var_os("VMBENCH_TEST_SCRATCH_LIST") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&list)
                .unwrap_or_else(|e| panic!("VMBENCH_TEST_SCRATCH_LIST {list:?}: {e}"));
            writeln!(f, "{}", dir.path().display()).unwrap();
        }
        // QEMU runs as libvirt-qemu and must traverse to the disk images.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        Scratch { dir }
    }
    pub fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("db.sqlite")
    }

    /// `vmbench matrix` with this scratch's dirs and short, CI-sized defaults, plus `args`: the
    /// command for a test that acts on a cell mid-job (kill, suspend, SIGSTOP), so its measured
    /// phase keeps the 1 s ramp before the 4 s job. A test that only runs cells to their end
    /// uses [`Self::matrix`], which has no ramp.
    /// (One vCPU was tried: a one-cell matrix's wall time 0.91x, but in a fresh-clone run the
    /// in-run A/B's uncapped side had a 49% CV, too noisy for its verdict.)
    pub fn matrix_cmd(&self, args: &[&str]) -> Command {
        self.sized(&["--ramp", "1"], args)
    }

    fn sized(&self, ramp: &[&str], args: &[&str]) -> Command {
        let sizes = [
            "--runtime",
            "4",
            "--size",
            "32M",
            "--disk-mib",
            "128",
            "--memory",
            "384",
        ];
        let mut c = self.matrix_cmd_unsized(&sizes);
        c.args(ramp).args(args);
        c
    }

    /// `vmbench matrix` with this scratch's dirs only: the caller gives every size.
    pub fn matrix_cmd_unsized(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vmbench"));
        c.arg("matrix")
            .arg("--runs-dir")
            .arg(self.runs())
            .arg("--work-dir")
            .arg(self.work())
            .arg("--db")
            .arg(self.db())
            .args(args)
            .env("NO_COLOR", "1");
        c
    }

    /// [`Self::matrix_cmd_unsized`], run within [`MATRIX_LIMIT`], its output shown.
    pub fn matrix_with(&self, args: &[&str]) -> Output {
        show(output_within(
            &mut self.matrix_cmd_unsized(args),
            MATRIX_LIMIT,
        ))
    }

    /// [`Self::matrix_cmd`]'s sizes without the ramp (the warm-up step costs a cell about 1.5 s:
    /// a second fio start and its second) and with a 2 s job instead of 4 s, run within
    /// [`MATRIX_LIMIT`], its output shown: for a test that runs cells to their end and checks
    /// what they did, not how fast (a 2 s pg-randrw job is still thousands of I/Os at its 70/30
    /// mix). A test that compares throughput uses [`Self::matrix_warm`] (4 s after 1 s of ramp).
    pub fn matrix(&self, args: &[&str]) -> Output {
        show(output_within(
            &mut self.sized(&["--ramp", "0", "--runtime", "2"], args),
            MATRIX_LIMIT,
        ))
    }

    /// [`Self::matrix`] with the 1 s warm-up step before each measured job, as in a user's run:
    /// for a test that compares throughput.
    pub fn matrix_warm(&self, args: &[&str]) -> Output {
        show(output_within(&mut self.matrix_cmd(args), MATRIX_LIMIT))
    }

    /// The only run in this scratch's runs dir.
    pub fn run_record(&self) -> (PathBuf, RunRecord) {
        let dirs: Vec<PathBuf> = std::fs::read_dir(self.runs())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(dirs.len(), 1, "expected one run dir, found {dirs:?}");
        let rec: RunRecord =
            serde_json::from_str(&std::fs::read_to_string(dirs[0].join("run.json")).unwrap())
                .unwrap();
        (dirs[0].clone(), rec)
    }

    /// Run ids created under this scratch.
    pub fn run_ids(&self) -> Vec<String> {
        std::fs::read_dir(self.runs())
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asserts nothing of this scratch's runs is left: no domain named after one of its runs, no
    /// work files, no server started for it. (Other tests' runs on the machine are not counted.)
    pub fn assert_no_leftovers(&self) {
        self.assert_no_leftovers_on(URI)
    }

    /// [`Self::assert_no_leftovers`] against the libvirtd at `uri`: fails, never passes, when
    /// that libvirtd does not answer.
    pub fn assert_no_leftovers_on(&self, uri: &str) {
        let ids = self.run_ids();
        let doms = virsh_at(uri, &["list", "--all", "--name"]);
        let ours: Vec<&str> = doms
            .lines()
            .filter(|l| ids.iter().any(|id| l.contains(id.as_str())))
            .collect();
        assert!(ours.is_empty(), "domains left: {ours:?}");
        let pools = virsh_at(uri, &["pool-list", "--all", "--name"]);
        let ours: Vec<&str> = pools
            .lines()
            .filter(|l| ids.iter().any(|id| l.contains(id.as_str())))
            .collect();
        assert!(ours.is_empty(), "storage pools left: {ours:?}");
        if self.work().exists() {
            let left: Vec<_> = std::fs::read_dir(self.work()).unwrap().collect();
            assert!(left.is_empty(), "work dir not empty: {left:?}");
        }
        let tables = output_within(Command::new("nft").args(["list", "tables"]), TOOL_LIMIT);
        let tables = String::from_utf8_lossy(&tables.stdout).into_owned();
        let ours: Vec<&str> = tables
            .lines()
            .filter(|l| ids.iter().any(|id| l.contains(id.as_str())))
            .collect();
        assert!(ours.is_empty(), "nftables tables left: {ours:?}");
        let ours: Vec<String> = vmbench::storage::netns::list(None)
            .into_iter()
            .filter(|n| ids.iter().any(|id| n.contains(id.as_str())))
            .collect();
        assert!(ours.is_empty(), "network namespaces left: {ours:?}");
        let here = self.dir.path().to_string_lossy().into_owned();
        for comm in ["ganesha.nfsd", "tgtd", "ceph-mon", "ceph-osd"] {
            let ours: Vec<u32> = pids_named(comm)
                .into_iter()
                .filter(|p| opens_under(*p, &here))
                .collect();
            assert!(ours.is_empty(), "{comm} still running: {ours:?}");
        }
    }
}

/// Writes `text` to `path` and makes it private (0600), as a CHAP file or a cephx keyring must
/// be.
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod 0600 {}: {e}", path.display()));
}

/// `vmbench report RUN [--db DB] --against-seed PRESET EXTRA...` within [`TOOL_LIMIT`]: its
/// exit code, stdout and stderr.
pub fn report_against_seed(
    run: impl AsRef<std::ffi::OsStr>,
    db: Option<&Path>,
    preset: &str,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vmbench"));
    c.arg("report").arg(run);
    if let Some(db) = db {
        c.arg("--db").arg(db);
    }
    c.args(["--against-seed", preset])
        .args(extra)
        .env("NO_COLOR", "1");
    let o = output_within(&mut c, TOOL_LIMIT);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Prints a finished command's output (shown when a test fails) and returns it.
pub fn show(out: Output) -> Output {
    eprintln!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// True when the process has a file open (its log, config, a LUN) under `dir`.
fn opens_under(pid: u32, dir: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|t| t.to_string_lossy().starts_with(dir))
            .unwrap_or(false)
    })
}

/// `virsh -c qemu:///system ARGS`' stdout; fails the test when virsh fails or hangs.
pub fn virsh(args: &[&str]) -> String {
    virsh_at(URI, args)
}

/// `virsh -c URI ARGS`' stdout, within [`TOOL_LIMIT`]; fails the test when virsh fails: a
/// leftover check against a dead libvirtd must fail, not find nothing.
pub fn virsh_at(uri: &str, args: &[&str]) -> String {
    let o = output_within(
        Command::new("virsh").arg("-c").arg(uri).args(args),
        TOOL_LIMIT,
    );
    assert!(
        o.status.success(),
        "virsh -c {uri} {}: {}\n{}",
        args.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn pids_named(comm: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A zombie (an orphan whose reaper has not run yet) is not a running server.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = state
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'));
            !zombie
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|c| c.trim() == comm)
                    .unwrap_or(false)
        })
        .collect()
}

pub fn num(c: &CellResult, key: &str) -> f64 {
    c.metric(key)
        .and_then(|m| m.value.number())
        .unwrap_or_else(|| panic!("{}: no metric {key}: {:?}", c.cell_id, c.metrics))
}

pub fn passed(c: &CellResult) -> bool {
    matches!(c.outcome, Outcome::Passed)
}

/// Checks a fio pg-randrw cell's figures are real: both sides of the mix moved, about 70% reads.
pub fn assert_real_randrw(c: &CellResult) {
    assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
    assert!(num(c, "read_iops") > 0.0, "{}", c.cell_id);
    assert!(num(c, "write_iops") > 0.0, "{}", c.cell_id);
    let share = num(c, "read_share_pct");
    assert!(
        (60.0..=80.0).contains(&share),
        "{}: read share {share}%",
        c.cell_id
    );
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// The test file's stem (`faults` for tests/faults.rs): the binary's name without cargo's hash.
pub fn test_binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem.into_owned(),
    }
}

/// A host test that cannot make its assertion on this machine: says `skipped: FILE::TEST: REASON`
/// on stderr and appends that line to the file named by `VMBENCH_SKIP_LOG`, so scripts/test
/// counts the test as skipped although the runner counts its early return as passed (and, under
/// `CI=true`, fails the run unless .ci/expected-skips lists `FILE::TEST`). One process per test
/// (nextest) appends one line each: the file is opened in append mode.
/// Call it as `return common::skip("...")`, or as `common::skip("...")` for a part of a test.
pub fn skip(reason: &str) {
    use std::io::Write;
    let current = std::thread::current();
    // nextest names the test in its environment; libtest names the thread after it.
    let test = std::env::var("NEXTEST_TEST_NAME")
        .ok()
        .or_else(|| current.name().map(str::to_owned))
        .unwrap_or_else(|| "unknown test".into());
    // In the one test binary (tests/suite.rs) the name is already `FILE::TEST`.
    let line = if test.contains("::") {
        format!("skipped: {test}: {reason}")
    } else {
        format!("skipped: {}::{test}: {reason}", test_binary())
    };
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("VMBENCH_SKIP_LOG") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("VMBENCH_SKIP_LOG {log:?}: {e}"));
        writeln!(f, "{line}").unwrap();
    }
}

/// A run in the background, waited on by its progress lines.
pub mod running;

/// A modification time no write can give a file today (2001-09-09 01:46:40.123456789 UTC).
fn untouched_mtime() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 123_456_789)
}

/// Stamps `path` with [`untouched_mtime`] before an operation that must not rewrite it; check
/// with [`is_untouched`] after. Exact to the nanosecond and far in the past, so a rewrite shows
/// even within the same second or clock tick (no sleep needed).
pub fn stamp_untouched(path: &Path) {
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(untouched_mtime()))
        .unwrap_or_else(|e| panic!("stamping {}: {e}", path.display()));
}

/// Whether `path` still carries the stamp of [`stamp_untouched`] (a rewrite, or a new file in
/// its place, has another mtime).
pub fn is_untouched(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        == untouched_mtime()
}

/// vmbench's cephx secrets libvirt holds now (rbd cells define one per cell and undefine it).
pub fn ceph_secrets() -> Vec<String> {
    virsh(&["secret-list"])
        .lines()
        .filter(|l| l.contains(vmbench::storage::rbd::USAGE_PREFIX))
        .map(str::to_string)
        .collect()
}
