//! Issue 6 through the CLI on two real runs: the history lists them, `report` renders every
//! format, `compare` gives verdicts and JUnit, a run moves between databases by export/import,
//! and `recommend` refuses to rank cells of one repeat.
use crate::common;
use common::*;
use std::process::Command;

fn vmbench(s: &Scratch, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(args)
        .arg("--db")
        .arg(s.db())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn history_report_compare_export_import_recommend() {
    let s = Scratch::new();
    let out = s.matrix(&["--backend", "local", "--format", "raw", "--runtime", "3"]);
    assert_eq!(out.status.code(), Some(0));
    // The second run names its runs and work dirs relative to its cwd, as a user in their own
    // directory does (a relative --work-dir once failed every cell: libvirtd resolves a pool's
    // path, not our cwd). The later flags win over the scratch's absolute ones; the job is the
    // first run's (no ramp, as `Scratch::matrix` runs it), so the two stay comparable.
    let mut second = s.matrix_cmd(&["--backend", "local", "--format", "raw", "--runtime", "3"]);
    second
        .args(["--ramp", "0", "--runs-dir", "runs", "--work-dir", "work"])
        .current_dir(s.dir.path());
    let out = show(output_within(&mut second, MATRIX_LIMIT));
    assert_eq!(out.status.code(), Some(0));
    let (code, runs, _) = vmbench(&s, &["runs"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        runs.lines().filter(|l| l.contains("finished")).count(),
        2,
        "{runs}"
    );

    let html = s.dir.path().join("r.html");
    let (code, _, err) = vmbench(
        &s,
        &[
            "report",
            "--last",
            "--format",
            "html",
            "-o",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<svg") && page.contains("Read IOPS"),
        "html report"
    );
    for (fmt, want) in [
        ("text", "Read IOPS"),
        ("markdown", "| Read IOPS"),
        ("csv", "read_iops"),
    ] {
        let (code, out, _) = vmbench(&s, &["report", "last", "--format", fmt]);
        assert_eq!(code, Some(0));
        assert!(out.contains(want), "{fmt}: {out}");
    }

    let junit = s.dir.path().join("junit.xml");
    let (code, table, err) = vmbench(
        &s,
        &[
            "compare",
            "last-good",
            "last",
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    // Two runs of one repeat each: a repeat is the unit of evidence, so nothing can be decided
    // (exit 3), never a regression decided on per-second samples.
    assert_eq!(code, Some(3), "{table}{err}");
    assert!(
        table.contains("read_iops") && table.contains("inconclusive: n=1 vs 1 repeats"),
        "{table}"
    );
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.contains("<testsuite") && x.contains("testcase"), "{x}");
    assert_eq!(
        code == Some(1),
        x.contains("<failure"),
        "exit code and JUnit failures agree"
    );

    let export = s.dir.path().join("run.json");
    let (code, _, err) = vmbench(&s, &["export", "last", "-o", export.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let other = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(["import", export.to_str().unwrap(), "--db"])
        .arg(s.dir.path().join("other.sqlite"))
        .output()
        .unwrap();
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let (code, _, err) = vmbench(&s, &["import", export.to_str().unwrap()]);
    assert_eq!(code, Some(2), "a duplicate import is refused: {err}");

    // One repeat per cell: recommend refuses to rank (exit 3, not enough data) and says why.
    let (code, ranked, err) = vmbench(&s, &["recommend", "last", "--objective", "iops=1"]);
    assert_eq!(code, Some(3), "{ranked}{err}");
    assert!(
        ranked.is_empty() && err.contains("cannot rank") && err.contains("has n = 1"),
        "{ranked}{err}"
    );
    let (code, _, err) = vmbench(&s, &["recommend", "last", "--objective", "speed=1"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("iops"), "valid objectives named: {err}");
    s.assert_no_leftovers();
}

/// A reader that leaves (`vmbench presets | head -0`) ends a printing command by SIGPIPE, as
/// Unix tools end, not by a panic's exit code 101 and a backtrace on stderr.
#[test]
fn printing_into_a_closed_pipe_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("presets")
        .stdout(std::process::Stdio::from(write))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        o.status
    );
}

/// Issue 27: `vmbench --version` names the commit it was built from (provenance stores the same
/// `vmbench::VERSION`), not `0.1.0 (unknown)`; outside a git tree it says so.
#[test]
fn version_names_the_git_commit() {
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let expected = match (std::env::var("VMBENCH_GIT_REV"), head) {
        (Ok(rev), _) if !rev.trim().is_empty() => format!("(git {})", rev.trim()),
        (_, Some(rev)) => format!("(git {rev})"),
        (_, None) => "(no git commit recorded)".to_string(),
    };
    assert_eq!(
        out.trim(),
        format!("vmbench {} {expected}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(out.trim(), format!("vmbench {}", vmbench::VERSION));
}
