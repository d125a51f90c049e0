//! Issue 27: vmbench installed as a Debian tool. scripts/build-deb builds the .deb from the
//! build this test run already made (its cargo profile, `VMBENCH_DEB_PROFILE`); it is installed with dpkg (apt-get -f install if
//! dpkg leaves a dependency unmet), used the way an admin meets it (version, doctor, man pages,
//! tab completion in bash, zsh and fish, the nightly units), linted, and purged without a trace.
use crate::common;

use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn run(program: &str, args: &[&str]) -> Output {
    run_within(program, args, common::TOOL_LIMIT)
}

fn run_within(program: &str, args: &[&str], limit: Duration) -> Output {
    common::show(common::output_within(
        Command::new(program).args(args),
        limit,
    ))
}

fn ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn installed() -> bool {
    run("dpkg-query", &["-W", "-f", "${Status}", "vmbench"])
        .stdout
        .starts_with(b"install ok installed")
}

/// Purges the package however the test ends, so a failed assertion leaves no vmbench installed.
struct Purge;
impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "vmbench"]).output();
    }
}

/// `vmbench`, `vmbench-matrix`, `vmbench-image-build`, ...: the man page of every visible
/// (sub)command, named as clap_mangen names them.
fn man_page_names() -> Vec<String> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        out.push(prefix.to_string());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, &format!("{prefix}-{}", sub.get_name()), out);
        }
    }
    let mut names = Vec::new();
    walk(&vmbench::cli::Cli::command(), "vmbench", &mut names);
    names
}

fn build_deb() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // This test's own build is there already, in its cargo profile: package that one, not a
    // new release build (vmbench-pkg may still need compiling).
    let dir = Path::new(env!("CARGO_BIN_EXE_vmbench")).parent().unwrap();
    let profile = match dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev",
        p => p,
    };
    let out = common::show(common::output_within(
        Command::new(root.join("scripts/build-deb")).env("VMBENCH_DEB_PROFILE", profile),
        common::MATRIX_LIMIT,
    ));
    assert!(out.status.success(), "scripts/build-deb: {:?}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let deb = PathBuf::from(
        stdout
            .lines()
            .last()
            .expect("build-deb prints the .deb's path"),
    );
    assert!(deb.is_file(), "{deb:?}");
    deb
}

#[test]
#[ignore = "host: root libvirtd deb"]
fn deb_installs_works_lints_and_purges() {
    if installed() {
        return common::skip(
            "a vmbench package is installed here; this test installs and purges its own",
        );
    }
    let deb = build_deb();
    let deb_str = deb.to_str().unwrap();
    let _purge = Purge;

    // dpkg -i, then apt-get -f install for whatever Depends this host lacks.
    if !run("dpkg", &["-i", deb_str]).status.success() {
        ok("apt-get", &["-f", "install", "-y", "-q"]);
    }
    assert!(
        installed(),
        "vmbench is not installed after dpkg -i + apt-get -f install"
    );
    let files: Vec<String> = ok("dpkg", &["-L", "vmbench"])
        .lines()
        .map(str::to_string)
        .collect();

    // The binary the package put on PATH is this build.
    let version = ok("/usr/bin/vmbench", &["--version"]);
    assert_eq!(version.trim(), format!("vmbench {}", vmbench::VERSION));
    assert!(
        version.contains("(git ") || version.contains("no git commit"),
        "{version}"
    );

    // doctor, as installed: exit 0 = QEMU/TCG cells can run here.
    let doctor = ok("/usr/bin/vmbench", &["doctor", "--no-probe"]);
    assert!(doctor.contains("hypervisor qemu (TCG)"), "{doctor}");

    // A man page for vmbench and every subcommand, found by man.
    for name in man_page_names() {
        let path = ok("man", &["-w", &name]);
        assert_eq!(
            path.trim(),
            format!("/usr/share/man/man1/{name}.1.gz"),
            "man -w {name}"
        );
    }
    let page = ok("man", &["-P", "cat", "vmbench-matrix"]);
    assert!(page.contains("--backend"), "{page}");

    completions_complete();
    nightly_units(&files);

    // lintian: no error tag (warnings are shown above).
    let lint = run("lintian", &["--tag-display-limit", "0", deb_str]);
    let lint_out = String::from_utf8_lossy(&lint.stdout);
    let errors: Vec<&str> = lint_out.lines().filter(|l| l.starts_with("E: ")).collect();
    assert!(errors.is_empty(), "lintian errors: {errors:#?}");

    // Purge leaves nothing: no file of the package, no /etc/vmbench.
    ok("dpkg", &["--purge", "vmbench"]);
    assert!(!installed());
    let left: Vec<&String> = files
        .iter()
        .filter(|f| {
            let p = Path::new(f.as_str());
            p.exists() && !p.is_dir()
        })
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    assert!(
        !Path::new("/etc/vmbench").exists(),
        "/etc/vmbench left after purge"
    );
}

/// Each shell's completion parses and completes `vmbench mat` to `matrix` and `vmbench matrix
/// --back` to `--backend`.
fn completions_complete() {
    let bash = "/usr/share/bash-completion/completions/vmbench";
    ok("bash", &["-n", bash]);
    let script = format!(
        "source {bash}; COMP_WORDS=(vmbench mat); COMP_CWORD=1; _vmbench vmbench mat vmbench; \
         echo \"${{COMPREPLY[@]}}\"; COMP_WORDS=(vmbench matrix --back); COMP_CWORD=2; \
         _vmbench vmbench --back matrix; echo \"${{COMPREPLY[@]}}\""
    );
    let got = ok("bash", &["-c", &script]);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines.first().map(|l| l.trim()), Some("matrix"), "{got}");
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.split_whitespace().any(|w| w == "--backend")),
        "{got}"
    );

    let zsh = "/usr/share/zsh/vendor-completions/_vmbench";
    ok("zsh", &["-n", zsh]);
    // zsh finds it on its default fpath: compinit loads `_vmbench` for the command vmbench.
    let got = ok(
        "zsh",
        &[
            "-f",
            "-c",
            "autoload -U compinit && compinit -u && print -r -- ${_comps[vmbench]}",
        ],
    );
    assert_eq!(
        got.trim(),
        "_vmbench",
        "zsh does not map vmbench to _vmbench"
    );

    let fish = "/usr/share/fish/vendor_completions.d/vmbench.fish";
    ok("fish", &["--no-execute", fish]);
    let got = ok("fish", &["-c", "complete -C 'vmbench mat'"]);
    assert!(got.lines().any(|l| l.starts_with("matrix")), "{got}");
    let got = ok("fish", &["-c", "complete -C 'vmbench matrix --back'"]);
    assert!(got.lines().any(|l| l.starts_with("--backend")), "{got}");
}

/// The nightly service and timer verify, are installed disabled, and read the conffile in
/// /etc/vmbench.
fn nightly_units(files: &[String]) {
    let units: Vec<&String> = files
        .iter()
        .filter(|f| {
            f.ends_with("/vmbench-nightly.service") || f.ends_with("/vmbench-nightly.timer")
        })
        .collect();
    assert_eq!(units.len(), 2, "{files:?}");
    let args: Vec<&str> = units.iter().map(|s| s.as_str()).collect();
    let verify = run("systemd-analyze", &[&["verify"], args.as_slice()].concat());
    let err = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "systemd-analyze verify: {err}");
    assert!(
        !err.contains("vmbench"),
        "systemd-analyze verify warns: {err}"
    );
    let conffiles = ok("dpkg-query", &["-W", "-f", "${Conffiles}", "vmbench"]);
    assert!(
        conffiles.contains("/etc/vmbench/nightly.conf"),
        "{conffiles}"
    );
    assert!(
        !Path::new("/etc/systemd/system/timers.target.wants/vmbench-nightly.timer").exists(),
        "the nightly timer is enabled by installing the package"
    );
}
