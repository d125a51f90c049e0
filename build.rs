//! Records the git commit vmbench is built from, for `vmbench --version` and every run's
//! provenance (`VMBENCH_VERSION`, e.g. `0.1.0 (git 1998511a41f5)`). Only that: man pages and completions are made by
//! `vmbench-pkg` when a package is built, not on every build.
//!
//! The script reruns only when HEAD or the branch it names moves (or `VMBENCH_GIT_REV` is set,
//! e.g. by a build from a release tarball), so an ordinary edit-compile cycle does not pay for it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=VMBENCH_GIT_REV");
    let rev = match std::env::var("VMBENCH_GIT_REV") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => git_rev().unwrap_or_default(),
    };
    // Only VMBENCH_VERSION goes out: nextest hands a build script's rustc-env to the tests it
    // runs, so a VMBENCH_GIT_REV here would reach every cargo a test starts (scripts/build-deb)
    // as the input above, changed, and rebuild vmbench there and again in the next plain build.
    let pkg = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let version = if rev.is_empty() {
        format!("{pkg} (no git commit recorded)")
    } else {
        format!("{pkg} (git {rev})")
    };
    println!("cargo:rustc-env=VMBENCH_VERSION={version}");
}

/// The commit HEAD names (12 hex digits), watching the files that move it: HEAD, the branch's
/// ref and packed-refs (in a worktree HEAD is per worktree, refs are in the common dir).
fn git_rev() -> Option<String> {
    let head = git(&["rev-parse", "--git-path", "HEAD"])?;
    println!("cargo:rerun-if-changed={head}");
    let target = std::fs::read_to_string(&head).ok()?;
    if let Some(branch) = target.trim().strip_prefix("ref: ") {
        for watched in [branch, "packed-refs"] {
            if let Some(p) = git(&["rev-parse", "--git-path", watched]) {
                if PathBuf::from(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}
