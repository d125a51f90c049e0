//! Issue 15, last gap: the embedded tgtd's CHAP account is created over tgtd's control socket
//! (vmbench::storage::tgt_ipc), never with `tgtadm --password` on a command line. Checked on the
//! real tgtd: the account exists for `tgtadm`, the real initiator (libiscsi's iscsi-inq) logs in
//! with it and not with a wrong secret, tgtd's own refusals come back typed, and while the
//! account is made no process's argv holds the secret.
use crate::common;
use common::argv::ArgvRecorder;
use rand::distributions::{Alphanumeric, DistString};
use std::process::Command;
use std::sync::Arc;
use vmbench::storage::netns::NetNs;
use vmbench::storage::tgt::Tgt;
use vmbench::storage::tgt_ipc::{self, IpcError};
use vmbench::storage::NetAuth;

const USER: &str = "ipc-probe";
const MIB: u64 = 1024 * 1024;

/// `iscsi-inq URL`: `Ok(())` when it logged in, else its stderr.
fn iscsi_inq(url: &str) -> Result<(), String> {
    let o = Command::new("iscsi-inq").arg(url).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("iscsi-inq: {}\n{err}", o.status);
    if o.status.success() {
        Ok(())
    } else {
        Err(err)
    }
}

#[test]
#[ignore = "host: root tgtd libiscsi"]
fn chap_account_made_over_the_control_socket_logs_in_and_stays_off_argv() {
    let dir = tempfile::Builder::new()
        .prefix("vmbench-tgtipc-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let run = format!("tgtipc{}", std::process::id());
    let net = Arc::new(NetNs::create(&run, vmbench::cell::Link::Loopback).expect("namespace"));
    // Tgt::start makes its run account over the socket: starting at all is the first check.
    let t = Tgt::start(&dir.path().join("tgt"), net).expect("tgtd starts");
    let Some(NetAuth::IscsiChap {
        username: run_user, ..
    }) = t.auth()
    else {
        panic!("the tgtd has no CHAP account")
    };
    let socket = tgt_ipc::socket_path(t.control_port());
    let secret = format!(
        "Ipc-{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 24)
    );
    let marker = format!("argv-marker-{}", std::process::id());

    // Returns once it has read every process's argv at least once.
    let rec = ArgvRecorder::start();
    tgt_ipc::new_account(&socket, USER, &secret).expect("account over the control socket");
    // A process whose argv the recorder must see, alive until the recorder made a whole pass
    // after it started: proof that it was watching.
    let mut probe = Command::new("sh")
        .args(["-c", "read -r _; exit 0", &marker])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    rec.wait_sweep();
    // End of its input: the probe exits.
    drop(probe.stdin.take());
    assert!(probe.wait().unwrap().success());
    let seen = rec.stop();
    assert!(
        seen.iter().any(|s| s.carries(&marker)),
        "the argv recorder saw no probe process"
    );
    let leaks: Vec<String> = seen
        .iter()
        .filter(|s| s.carries(&secret))
        .map(|s| format!("{}: {}", s.comm, s.line()))
        .collect();
    assert!(
        leaks.is_empty(),
        "the secret was on a command line: {leaks:?}"
    );

    let iscsi = ["--lld", "iscsi"];
    let tgtadm = |args: &[&str]| t.tgtadm(&[&iscsi[..], args].concat()).unwrap();
    let accounts = tgtadm(&["--op", "show", "--mode", "account"]);
    let listed: Vec<&str> = accounts.lines().skip(1).map(str::trim).collect();
    assert!(listed.contains(&USER), "{accounts}");
    assert!(listed.contains(&run_user.as_str()), "{accounts}");

    // tgtd's own refusal comes back typed, with tgtadm's words and without the secret.
    let again = tgt_ipc::new_account(&socket, USER, &secret).unwrap_err();
    assert!(
        matches!(again, IpcError::Refused { code: 14, .. }),
        "{again:?}"
    );
    assert!(again.to_string().contains("this account already exists"));
    assert!(!format!("{again} {again:?}").contains(&secret));

    // A target that only USER may log in to (the run account unbound).
    let (tid, iqn) = t.next_target();
    let lun = dir.path().join("ipc.lun");
    std::fs::File::create(&lun)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    t.add_target(tid, &iqn, &lun).unwrap();
    let tid = tid.to_string();
    tgtadm(&[
        "--op", "unbind", "--mode", "account", "--tid", &tid, "--user", &run_user,
    ]);
    tgtadm(&[
        "--op", "bind", "--mode", "account", "--tid", &tid, "--user", USER,
    ]);
    let url = t.url_for(&iqn, 1);
    let with = |cred: &str| url.replacen("iscsi://", &format!("iscsi://{cred}@"), 1);
    iscsi_inq(&with(&format!("{USER}%{secret}"))).expect("login with the IPC account");
    // Refused by CHAP itself, not by the network or the ACL.
    for cred in [
        format!("{USER}%wrong-secret-0123"),
        format!("{run_user}%wrong-secret-0123"),
    ] {
        let why = iscsi_inq(&with(&cred)).expect_err("a wrong secret got in");
        assert!(why.contains("Authentication failure"), "{why}");
    }
    let why = iscsi_inq(&url).expect_err("got in without CHAP");
    assert!(why.contains("Authentication failure"), "{why}");
    t.stop();
    assert!(
        !socket.exists(),
        "control socket left: {}",
        socket.display()
    );
}
