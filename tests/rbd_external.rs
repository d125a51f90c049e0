//! Issue 30 item 1, its last part: rbd cells on a user's Ceph cluster (`--ceph-conf`) instead of
//! the embedded one. The "user's cluster" is a real one the test starts with the library's
//! `Ceph::start` in a namespace of its own (msgr v2 only, cephx), described the way an operator
//! would hand it over: the conf `ceph config generate-minimal-conf` prints and a keyring
//! `ceph-authtool` writes for `client.vmbench` (capped to RBD on pool `rbd`). vmbench must start
//! no cluster, run the cells there, and leave neither an image nor a libvirt secret behind; a
//! wrong key must fail the run quickly, saying the cluster refused it; what a killed run left
//! there is removed by what `vmbench cleanup` runs. Bad `--ceph-*` input is exit 2 before
//! anything is made (pure).

use crate::common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmbench::storage::ceph::Ceph;
use vmbench::storage::netns::NetNs;

/// How long a run refused by the cluster may take: the monitor answers a wrong key at once,
/// and the client's mount timeout (30 s) bounds it anyway.
const REFUSAL_LIMIT: Duration = Duration::from_secs(60);

/// A keyring holding `key` for client.vmbench, written by ceph-authtool.
fn keyring(dir: &Path, name: &str, key: &str) -> PathBuf {
    let p = dir.join(name);
    let out = output_within(
        Command::new("ceph-authtool")
            .arg("--create-keyring")
            .arg(&p)
            .args(["-n", "client.vmbench", "--add-key", key]),
        TOOL_LIMIT,
    );
    assert!(out.status.success(), "{out:?}");
    p
}

/// The run's images left in the pool (anything named after a run of `s`).
fn images_of(c: &Ceph, s: &Scratch) -> Vec<String> {
    let ids = s.run_ids();
    c.rbd(&["ls", "rbd"])
        .unwrap()
        .lines()
        .filter(|l| ids.iter().any(|id| l.contains(id.as_str())))
        .map(str::to_string)
        .collect()
}

/// A flat and a clone cell on the cluster pass with real I/O and are recorded as on it.
fn cells_pass_on_the_users_cluster(c: &Ceph, conf: &Path, kr: &Path) {
    let s = Scratch::new();
    let (conf, kr) = (conf.to_string_lossy(), kr.to_string_lossy());
    let t = Instant::now();
    let out = s.matrix(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "rbd",
        "--format",
        "raw",
        "--instance-disk",
        "flat,clone",
        "--ceph-conf",
        &conf,
        "--ceph-keyring",
        &kr,
        "--ceph-user",
        "vmbench",
        "--no-probe",
    ]);
    eprintln!(
        "rbd_external: 2 cells in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.status.code(), Some(0));
    let (run_dir, rec) = s.run_record();
    let record = run_dir
        .join("servers")
        .join(vmbench::storage::ceph_external::RECORD_FILE);
    assert!(
        !record.exists(),
        "the run ended cleanly: {}",
        record.display()
    );
    let prefix = format!("rbd/vmbench-{}-", rec.run_id);
    assert_eq!(rec.cells.iter().filter(|c| passed(c)).count(), 2);
    for cell in &rec.cells {
        assert_real_randrw(cell);
        let p = &cell.params;
        assert_eq!(
            (p["mode"].as_str(), p["cephx_client"].as_str()),
            ("external", "vmbench")
        );
        assert!(p["image"].starts_with(&prefix), "{p:?}");
        assert_eq!(p["port"], "3300", "{p:?}");
        assert!(
            p["server_software"].starts_with("ceph (external, "),
            "{p:?}"
        );
        assert!(!p.contains_key("server_pid"), "no process of ours: {p:?}");
        assert_eq!(
            cell.provenance.storage_server, p["server_software"],
            "the provenance names the user's cluster"
        );
        eprintln!(
            "rbd_external: {} read {:.0} IOPS, write {:.0} IOPS",
            cell.cell_id,
            num(cell, "read_iops"),
            num(cell, "write_iops")
        );
    }
    assert!(
        images_of(c, &s).is_empty(),
        "left in the pool: {:?}",
        images_of(c, &s)
    );
    s.assert_no_leftovers();
}

/// A keyring with another key: the run fails within [`REFUSAL_LIMIT`], naming the refusal.
fn a_wrong_key_is_refused_plainly(conf: &Path, dir: &Path) {
    let wrong = keyring(
        dir,
        "wrong.keyring",
        "AQAq0hRrA6z2IhAAWySVH5VaG+WB3BdBO6mQrA==",
    );
    let s = Scratch::new();
    let t = Instant::now();
    let mut cmd = s.matrix_cmd(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "rbd",
        "--format",
        "raw",
        "--ceph-conf",
        &conf.to_string_lossy(),
        "--ceph-keyring",
        &wrong.to_string_lossy(),
        "--ceph-user",
        "vmbench",
        "--no-probe",
    ]);
    let out = show(output_within(&mut cmd, REFUSAL_LIMIT));
    let took = t.elapsed();
    eprintln!(
        "rbd_external: a wrong key failed the run in {:.1} s",
        took.as_secs_f64()
    );
    assert_ne!(out.status.code(), Some(0));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("the cluster refused client.vmbench's key"),
        "{text}"
    );
    assert!(took < REFUSAL_LIMIT);
    s.assert_no_leftovers();
}

/// What a run killed mid-cell leaves on the cluster (a base with its protected snapshot, a
/// clone of it, a flat image, all named after the run) goes with `vmbench cleanup`'s step for
/// the run's servers directory; another run's image stays.
fn a_killed_runs_images_are_cleaned_up(c: &Ceph, conf: &Path, kr: &Path, dir: &Path) {
    use vmbench::storage::ceph_external::{remove_leftovers, CephSpec, ExternalCeph};
    let servers = dir.join("servers");
    let spec = CephSpec::resolve(conf, Some(kr), Some("vmbench"), None).unwrap();
    let ext = ExternalCeph::open(spec, "20261206-000000-dead", &servers).unwrap();
    let p = ext.prefix().to_string();
    let base = format!("rbd/{p}base-8388608");
    for args in [
        vec!["create", "--size", "8", &base],
        vec!["snap", "create", &format!("{base}@base")],
        vec!["snap", "protect", &format!("{base}@base")],
        vec!["clone", &format!("{base}@base"), &format!("rbd/{p}1-x.raw")],
        vec!["create", "--size", "8", &format!("rbd/{p}2-y.raw")],
        vec![
            "create",
            "--size",
            "8",
            "rbd/vmbench-20261206-000000-live-1-z.raw",
        ],
    ] {
        c.rbd(&args).unwrap();
    }
    // kill -9: no Drop, the record stays.
    std::mem::forget(ext);
    let dry = remove_leftovers(&servers, true).unwrap();
    assert_eq!(dry.len(), 3, "{dry:?}");
    assert!(
        dry.last().unwrap().ends_with("base-8388608"),
        "clones first: {dry:?}"
    );
    remove_leftovers(&servers, false).unwrap();
    let left = c.rbd(&["ls", "rbd"]).unwrap();
    assert_eq!(left.trim(), "vmbench-20261206-000000-live-1-z.raw");
    c.rbd(&[
        "rm",
        "--no-progress",
        "rbd/vmbench-20261206-000000-live-1-z.raw",
    ])
    .unwrap();
    assert!(
        remove_leftovers(&servers, false).unwrap().is_empty(),
        "the record is gone"
    );
}

/// Pure: bad `--ceph-*` input is exit 2, naming the problem, before a run exists.
#[test]
fn bad_ceph_options_exit_2_before_anything_is_made() {
    let d = tempfile::tempdir().unwrap();
    let conf = d.path().join("ceph.conf");
    let no_mon = d.path().join("no-mon.conf");
    std::fs::write(&conf, "[global]\n\tmon_host = v2:10.9.8.7:3300/0\n").unwrap();
    std::fs::write(&no_mon, "[global]\n\tfsid = x\n").unwrap();
    let empty = d.path().join("empty.keyring");
    write_private(
        &empty,
        "[client.other]\n\tkey = AQC3vhVruWdUAhAAZgesi4rusus79nLEb272DQ==\n",
    );
    let (conf, no_mon, empty) = (
        conf.to_string_lossy(),
        no_mon.to_string_lossy(),
        empty.to_string_lossy(),
    );
    let missing = d.path().join("missing.conf");
    let missing = missing.to_string_lossy();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--backend", "rbd", "--ceph-user", "x"],
            "--ceph-user needs --ceph-conf",
        ),
        (
            &["--backend", "rbd", "--ceph-conf", &missing],
            "cannot read it",
        ),
        (
            &["--backend", "rbd", "--ceph-conf", &no_mon],
            "no mon_host in it",
        ),
        (
            &[
                "--backend",
                "rbd",
                "--ceph-conf",
                &conf,
                "--ceph-keyring",
                &empty,
            ],
            "no key for client.admin",
        ),
        (
            &["--backend", "local", "--ceph-conf", &conf],
            "the matrix has none",
        ),
        (
            &[
                "--backend",
                "rbd",
                "--ceph-conf",
                &conf,
                "--link",
                "100mbit",
            ],
            "--ceph-conf server",
        ),
    ];
    for (args, want) in cases {
        let s = Scratch::new();
        let out = s.matrix(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            s.run_ids().is_empty() && !s.work().exists(),
            "{args:?}: a run was made"
        );
    }
}

#[test]
#[ignore = "host: root libvirtd qemu ceph"]
fn rbd_cells_run_on_a_users_cluster_and_leave_nothing_there() {
    let before = ceph_secrets();
    let dir = tempfile::Builder::new()
        .prefix("vmbench-extceph-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let name = format!("extceph{}", vmbench::storage::cmd::unique_tag());
    let net = Arc::new(NetNs::create(&name, vmbench::cell::Link::Loopback).unwrap());
    let c = Ceph::start(&dir.path().join("cluster"), net.clone()).unwrap();
    let conf = dir.path().join("ceph.conf");
    let minimal = c.ceph(&["config", "generate-minimal-conf"]).unwrap();
    eprintln!("rbd_external: generate-minimal-conf:\n{minimal}");
    std::fs::write(&conf, &minimal).unwrap();
    let kr = keyring(dir.path(), "client.vmbench.keyring", c.client_key());

    cells_pass_on_the_users_cluster(&c, &conf, &kr);
    assert_eq!(ceph_secrets(), before, "cephx secrets left");
    a_wrong_key_is_refused_plainly(&conf, dir.path());
    assert_eq!(ceph_secrets(), before, "cephx secrets left");
    a_killed_runs_images_are_cleaned_up(&c, &conf, &kr, dir.path());

    c.stop();
    drop(c);
    drop(net);
    assert!(
        !Path::new("/run/netns").join(&name).exists(),
        "{name} is left"
    );
}
