//! The "hand" guest of `scripts/bench-fidelity --hand` (scripts/lib/hand-guest) really is one:
//! the image's kernel and static fio under a plain shell /init, no agent, the job's JSON read
//! off the serial console, and its domain gone afterwards.

use std::process::Command;

use crate::common::{output_within, virsh, Scratch, TOOL_LIMIT};

#[test]
#[ignore = "host: root libvirtd qemu cpio"]
fn hand_guest_runs_fio_without_the_agent() {
    let scratch = Scratch::new();
    let out = scratch.dir.path().join("hand");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/lib/hand-guest");
    let mut cmd = Command::new(script);
    cmd.arg(&out)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("VMBENCH", env!("CARGO_BIN_EXE_vmbench"))
        .env("RUNTIME", "2")
        .env("RAMP", "1")
        .env("SIZE", "16M")
        .env("DISK_MIB", "64");
    let o = output_within(&mut cmd, TOOL_LIMIT);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let console = std::fs::read_to_string(out.join("console.log")).unwrap_or_default();
    assert!(
        o.status.success(),
        "hand-guest: {}\n{stdout}\n{}\nconsole:\n{console}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );

    // fio's own JSON, parsed: both sides of the 70/30 mix moved.
    let text = std::fs::read_to_string(out.join("fio.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).expect("fio JSON");
    let job = &v["jobs"][0];
    assert_eq!(job["jobname"], "pg-test");
    let (r, w) = (
        job["read"]["iops"].as_f64().unwrap(),
        job["write"]["iops"].as_f64().unwrap(),
    );
    assert!(r > 0.0 && w > 0.0, "read {r} write {w} IOPS");
    assert!(
        stdout.contains(&format!("iops {:.1}", r + w)),
        "the printed line is fio's figure: {stdout}"
    );
    assert_eq!(v["global options"]["filename"], "/dev/vda");

    // No agent: a shell /init, nothing of the agent on the console, no agent channel.
    let init = std::fs::read_to_string(out.join("init")).unwrap();
    assert!(init.starts_with("#!/bin/busybox sh\n"), "{init}");
    assert!(!console.contains("vmbench-agent"), "{console}");
    let xml = std::fs::read_to_string(out.join("domain.xml")).unwrap();
    assert!(!xml.contains("<channel"), "{xml}");
    assert!(
        xml.contains(&format!("{}/initrd.zst", out.display())),
        "{xml}"
    );

    // The guest powered itself off and its transient domain is gone; so is its disk.
    let name = xml
        .split_once("<name>")
        .and_then(|(_, r)| r.split_once("</name>"))
        .map(|(n, _)| n.to_string())
        .unwrap();
    assert!(console.contains("reboot: Power down"), "{console}");
    let names = virsh(&["list", "--all", "--name"]);
    assert!(!names.lines().any(|l| l.trim() == name), "{names}");
    assert!(!out.join("disk.raw").exists());
}
