//! Issue 15 item 2, last part: an external iSCSI target that requires CHAP, with the
//! credentials from `--iscsi-chap-file`. The test's own tgtd (vmbench's `Tgt`, in a network
//! namespace of the test, its files outside the scratch dir) plays the external server, with an
//! account and LUN the test makes; vmbench is only given its URL and the file.
use crate::common;
use common::argv::{ArgvRecorder, ExecLog};
use common::*;
use rand::distributions::{Alphanumeric, DistString};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmbench::results::Outcome;
use vmbench::storage::tgt::Tgt;
use vmbench::storage::NetAuth;

const USER: &str = "ext-bench";
const MIB: u64 = 1024 * 1024;

/// A CHAP file `username=USER` / `secret=SECRET`, mode 0600.
fn chap_file(dir: &Path, name: &str, secret: &str) -> PathBuf {
    let f = dir.join(name);
    write_private(
        &f,
        &format!("# test target\nusername={USER}\nsecret={secret}\n"),
    );
    f
}

fn random_secret() -> String {
    format!(
        "Ext-{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 24)
    )
}

/// The "external" server: a tgtd with one LUN that only `USER` with `secret` may log in to.
struct ExternalTarget {
    /// The LUN file and tgtd's log (removed after `drop` stopped tgtd).
    _dir: tempfile::TempDir,
    tgt: Option<Tgt>,
    url: String,
    secret: String,
}

impl ExternalTarget {
    fn start(tag: &str) -> ExternalTarget {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("vmbench-chap-target-")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let run = format!("chap{}-{tag}", std::process::id());
        let net = vmbench::storage::netns::NetNs::create(&run, vmbench::cell::Link::Loopback)
            .expect("namespace");
        let t = Tgt::start(&dir.path().join("tgt"), Arc::new(net)).expect("tgtd starts");
        let (tid, iqn) = t.next_target();
        let lun = dir.path().join("external.lun");
        std::fs::File::create(&lun)
            .unwrap()
            .set_len(256 * MIB)
            .unwrap();
        t.add_target(tid, &iqn, &lun).unwrap();
        // The target's account is the test's, not the run account Tgt made for itself.
        let Some(NetAuth::IscsiChap { username, .. }) = t.auth() else {
            panic!("the test tgtd has no CHAP account")
        };
        let secret = random_secret();
        let tid = tid.to_string();
        let iscsi = ["--lld", "iscsi"];
        let tgtadm = |args: &[&str]| t.tgtadm(&[&iscsi[..], args].concat()).unwrap();
        tgtadm(&[
            "--op", "unbind", "--mode", "account", "--tid", &tid, "--user", &username,
        ]);
        tgtadm(&[
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            USER,
            "--password",
            &secret,
        ]);
        tgtadm(&[
            "--op", "bind", "--mode", "account", "--tid", &tid, "--user", USER,
        ]);
        let url = t.url_for(&iqn, 1);
        ExternalTarget {
            _dir: dir,
            tgt: Some(t),
            url,
            secret,
        }
    }
}

impl Drop for ExternalTarget {
    fn drop(&mut self) {
        if let Some(t) = self.tgt.take() {
            t.stop();
        }
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The libvirt secrets vmbench defined for external targets.
fn external_secrets() -> Vec<String> {
    virsh(&["secret-list"])
        .lines()
        .filter(|l| l.contains("vmbench-iscsi-ext-"))
        .map(str::to_string)
        .collect()
}

/// Secret-file directories vmbench's qemu-img/qemu-io calls use.
fn secret_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmbench-chap-"))
        })
        .collect()
}

/// No file of the run directory (run.json, config.json, domain.xml, logs) and nothing vmbench
/// printed holds `secret`.
fn assert_secret_nowhere(run: &Path, out: &Output, secret: &str) {
    let files = files_under(run);
    assert!(files.iter().any(|p| p.ends_with("config.json")));
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(
            !contains(&bytes, secret),
            "the secret is in {}",
            f.display()
        );
    }
    assert!(!contains(&out.stdout, secret) && !contains(&out.stderr, secret));
}

fn chap_args<'a>(url: &'a str, file: &'a Path, formats: &'a str) -> Vec<&'a str> {
    vec![
        "--backend",
        "iscsi",
        "--format",
        formats,
        "--iscsi",
        url,
        "--iscsi-chap-file",
        file.to_str().unwrap(),
    ]
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn external_iscsi_with_a_chap_file_passes_raw_and_qcow2_and_keeps_the_secret() {
    let target = ExternalTarget::start("good");
    let files = tempfile::tempdir().unwrap();
    let good = chap_file(files.path(), "chap", &target.secret);
    let (secrets_before, dirs_before) = (external_secrets(), secret_dirs());
    let s = Scratch::new();
    // Every process's argv, polled (QEMU, libvirt's helpers, whatever else runs) ...
    let recorder = ArgvRecorder::start();
    // ... and exactly every call of vmbench's own helpers that take the credentials.
    let exec_log = ExecLog::new(&["qemu-img", "qemu-io"]);
    let mut cmd = s.matrix_cmd(&chap_args(&target.url, &good, "raw,qcow2"));
    cmd.env("PATH", exec_log.path_env());
    let out = show(output_within(&mut cmd, MATRIX_LIMIT));
    let polled = recorder.stop();
    assert_eq!(out.status.code(), Some(0), "both cells must pass");
    let calls = exec_log.calls();
    let leaks: Vec<String> = polled
        .iter()
        .chain(&calls)
        .filter(|a| a.carries(&target.secret))
        .map(|a| format!("{}: {}", a.comm, a.line()))
        .collect();
    assert!(
        leaks.is_empty(),
        "the secret was on a command line: {leaks:?}"
    );
    let (_, rec) = s.run_record();
    // The poll was live for both cells: it saw each cell's QEMU (its argv names the domain).
    for seq in 0..2 {
        let dom = format!("guest=vmbench-{}-{seq:03}", rec.run_id);
        assert!(
            polled
                .iter()
                .any(|a| a.comm.starts_with("qemu-system") && a.carries(&dom)),
            "the argv poll never saw the QEMU of {dom}"
        );
    }
    // vmbench's calls on the external LUN, each logged: `qemu-img info` for each cell, the
    // qcow2 header's `qemu-img convert` onto the LUN and `qemu-io`'s wipe of it. Each logs in
    // by a secret object read from a file, never the secret itself.
    let mut on_lun: Vec<String> = calls
        .iter()
        .filter(|a| a.carries("driver=iscsi"))
        .map(|a| {
            let line = a.line();
            assert!(
                a.carries(&format!("user={USER},password-secret=chap0"))
                    && a.carries("secret,id=chap0,file="),
                "a call on the LUN without the secret object: {line}"
            );
            let words: Vec<&str> = line.split(' ').collect();
            match a.comm.as_str() {
                "qemu-img" => format!("qemu-img {}", words[1]),
                _ => a.comm.clone(),
            }
        })
        .collect();
    on_lun.sort();
    assert_eq!(
        on_lun,
        [
            "qemu-img convert",
            "qemu-img info",
            "qemu-img info",
            "qemu-io"
        ],
        "calls on the LUN: {calls:?}"
    );

    let run = s.run_record().0;
    assert_eq!(rec.cells.len(), 2);
    let mut formats = Vec::new();
    for c in &rec.cells {
        assert_real_randrw(c);
        assert_eq!(c.params["mode"], "external", "{}", c.cell_id);
        assert_eq!(c.params["chap_username"], USER, "{}", c.cell_id);
        formats.push(c.cell.format.as_str());
    }
    formats.sort_unstable();
    assert_eq!(formats, ["qcow2", "raw"]);
    // The domain logged in through the run's libvirt secret, named by usage.
    let xmls: Vec<PathBuf> = files_under(&run)
        .into_iter()
        .filter(|p| p.ends_with("domain.xml"))
        .collect();
    assert_eq!(xmls.len(), 2);
    for x in &xmls {
        let xml = std::fs::read_to_string(x).unwrap();
        assert!(xml.contains(&format!("username=\"{USER}\"")), "{xml}");
        assert!(xml.contains("usage=\"vmbench-iscsi-ext-"), "{xml}");
    }
    // config.json records the path, not the secret.
    let config = std::fs::read_to_string(run.join("config.json")).unwrap();
    assert!(config.contains(good.to_str().unwrap()), "{config}");
    assert_secret_nowhere(&run, &out, &target.secret);
    // The secret is undefined, the secret files are gone, nothing of the run is left.
    assert_eq!(external_secrets(), secrets_before, "libvirt secret left");
    assert_eq!(secret_dirs(), dirs_before, "secret file directory left");
    assert!(!run.join("servers/iscsi-chap/libvirt-secret-usage").exists());
    s.assert_no_leftovers();
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn a_wrong_chap_secret_fails_the_cell_with_an_authentication_reason() {
    let target = ExternalTarget::start("wrong");
    let files = tempfile::tempdir().unwrap();
    let wrong_secret = random_secret();
    let wrong = chap_file(files.path(), "chap", &wrong_secret);
    let secrets_before = external_secrets();
    let s = Scratch::new();
    let t0 = Instant::now();
    let out = s.matrix(&chap_args(&target.url, &wrong, "raw"));
    let took = t0.elapsed();
    // A failed cell: exit 1, not a usage error (the file is well formed) and not a crash.
    assert_eq!(out.status.code(), Some(1));
    assert!(took < Duration::from_secs(180), "took {took:?}");
    let (run, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 1);
    let Outcome::Failed(reason) = &rec.cells[0].outcome else {
        panic!("not failed: {:?}", rec.cells[0].outcome)
    };
    assert!(
        reason.contains("Authentication failure")
            && reason.contains(&format!("CHAP user '{USER}'")),
        "{reason}"
    );
    assert!(!reason.contains(&wrong_secret), "{reason}");
    assert_secret_nowhere(&run, &out, &wrong_secret);
    assert_eq!(external_secrets(), secrets_before, "libvirt secret left");
    s.assert_no_leftovers();
}

/// Pure: the CHAP file is checked before anything exists (no run directory, no work directory,
/// no server, no libvirt secret: the run never starts).
#[test]
fn a_malformed_or_open_chap_file_exits_2_with_nothing_created() {
    use std::os::unix::fs::PermissionsExt;
    let files = tempfile::tempdir().unwrap();
    let url = "iscsi://127.0.0.1/iqn.2026-12.dev.vmbench:chap-test/1";
    let secret = random_secret();
    let malformed = files.path().join("malformed");
    write_private(&malformed, &format!("user={USER}\npassword={secret}\n"));
    let open = chap_file(files.path(), "open", &secret);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = files.path().join("missing");
    let cases = [
        (malformed.clone(), "unknown key 'user'"),
        (open.clone(), "mode 0644"),
        (missing.clone(), "No such file"),
    ];
    for (file, want) in cases {
        let s = Scratch::new();
        let out = s.matrix(&chap_args(url, &file, "raw"));
        assert_eq!(out.status.code(), Some(2), "{}", file.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--iscsi-chap-file")
                && err.contains(&*file.to_string_lossy())
                && err.contains(want),
            "{err}"
        );
        assert!(!contains(&out.stderr, &secret) && !contains(&out.stdout, &secret));
        assert!(
            s.run_ids().is_empty(),
            "a run was created: {:?}",
            s.run_ids()
        );
        assert!(!s.work().exists(), "the work dir was created");
    }
    // `--resume` reads the run's config.json again: a CHAP file gone since is exit 2 too.
    let s = Scratch::new();
    let run = s.runs().join("20261203-000000-0000");
    std::fs::create_dir_all(&run).unwrap();
    let mut cfg = vmbench::matrix::config::MatrixConfig::default();
    cfg.storage.iscsi = Some(url.parse().unwrap());
    cfg.storage.iscsi_chap_file = Some(missing.clone());
    std::fs::write(
        run.join("config.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    std::fs::write(run.join("run.json"), "{}").unwrap();
    let out = show(
        std::process::Command::new(env!("CARGO_BIN_EXE_vmbench"))
            .args(["matrix", "--resume"])
            .arg(&run)
            .output()
            .unwrap(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");
    assert_eq!(
        std::fs::read_dir(&run).unwrap().count(),
        2,
        "the run was touched"
    );

    // The file without --iscsi: the embedded target makes its own account.
    let s = Scratch::new();
    let good = chap_file(files.path(), "good", &secret);
    let out = s.matrix(&[
        "--backend",
        "iscsi",
        "--iscsi-chap-file",
        good.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --iscsi"));
    assert!(s.run_ids().is_empty());
}

/// Waits (bounded) until `vmbench matrix`'s stderr has a line containing `want`.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(want) => return,
            Ok(_) => {}
            Err(e) => panic!("no line with {want:?} within {timeout:?}: {e}"),
        }
    }
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn cleanup_after_kill_9_undefines_the_external_chap_secret() {
    use std::io::BufRead;
    let target = ExternalTarget::start("kill");
    let files = tempfile::tempdir().unwrap();
    let good = chap_file(files.path(), "chap", &target.secret);
    let s = Scratch::new();
    let mut child = s
        .matrix_cmd(&chap_args(&target.url, &good, "raw"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("vmbench: {l}");
            let _ = tx.send(l);
        }
    });
    wait_for_line(&rx, "phase: run", Duration::from_secs(180));
    child.kill().unwrap();
    child.wait().unwrap();

    let (run, _) = s.run_record();
    let usage_file = run.join("servers/iscsi-chap/libvirt-secret-usage");
    let usage = std::fs::read_to_string(&usage_file).unwrap();
    assert!(usage.starts_with("vmbench-iscsi-ext-"), "{usage}");
    assert!(virsh(&["secret-list"]).contains(&usage), "secret {usage}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("cleanup")
        .arg("--runs-dir")
        .arg(s.runs())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("--- cleanup\n{text}");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text.contains(&format!("removed libvirt secret {usage}")),
        "{text}"
    );
    assert!(
        !virsh(&["secret-list"]).contains(&usage),
        "secret {usage} left"
    );
    assert!(!usage_file.exists());
    s.assert_no_leftovers();
}
