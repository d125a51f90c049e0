//! Issue 13 item 1 and issue 15 item 3: the embedded servers run in per-run network namespaces.
//! A shaped `--link` caps what the guest reads at the link's rate (seen on the host-observed
//! counters); an unshaped one is faster; two runs at the same time each get their own servers,
//! and one run's cleanup leaves the other alone. Afterwards no namespace, veth or qdisc remains.
mod common;
use common::*;
use std::process::Command;
use vmbench::results::RunRecord;
use vmbench::storage::netns;

/// 100 Mbit/s in MiB/s (the unit of `host_read_bw_mib_s`).
const MBIT100_MIB_S: f64 = 100e6 / 8.0 / 1048576.0;

/// The namespaces and veth interfaces of runs under `s`, as `ip` lists them.
fn net_leftovers(s: &Scratch) -> Vec<String> {
    let links = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    let mut out = Vec::new();
    for id in s.run_ids() {
        for ns in netns::list(Some(&id)) {
            out.push(format!("namespace {ns}"));
        }
        for link in ["loopback", "100mbit"] {
            let ns = netns::ns_name(&id, link.parse().unwrap());
            let (host_if, _) = netns::veth_names(&ns);
            if links.contains(&format!(" {host_if}@")) || links.contains(&format!(" {host_if}:")) {
                out.push(format!("veth {host_if} (with its qdiscs)"));
            }
        }
    }
    out
}

#[test]
#[ignore = "host: root libvirtd qemu ganesha"]
fn a_100mbit_link_caps_nfs_reads_and_loopback_is_faster() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--backend",
        "nfs",
        "--format",
        "raw",
        "--workload",
        "seq-read-1m",
        "--link",
        "100mbit,loopback",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2);
    let bw = |shaped: bool| {
        let c = rec
            .cells
            .iter()
            .find(|c| c.cell.link.is_shaped() == shaped)
            .expect("a cell per link");
        assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
        let link = if shaped { "100mbit" } else { "loopback" };
        assert_eq!(c.params.get("link").map(String::as_str), Some(link));
        assert_eq!(c.cell_id.contains("-net100mbit"), shaped, "{}", c.cell_id);
        num(c, "host_read_bw_mib_s")
    };
    let (shaped, plain) = (bw(true), bw(false));
    eprintln!("host-observed reads: 100mbit {shaped:.2} MiB/s, loopback {plain:.2} MiB/s");
    assert!(
        shaped <= MBIT100_MIB_S,
        "100mbit link read {shaped:.2} MiB/s, above {MBIT100_MIB_S:.2}"
    );
    assert!(
        shaped >= 0.8 * MBIT100_MIB_S,
        "100mbit link read {shaped:.2} MiB/s, under 80% of {MBIT100_MIB_S:.2}"
    );
    assert!(
        plain > shaped,
        "loopback {plain:.2} <= 100mbit {shaped:.2} MiB/s"
    );
    s.assert_no_leftovers();
    assert_eq!(net_leftovers(&s), Vec::<String>::new());
}

/// `vmbench cleanup` on `runs`: its stdout.
fn cleanup(runs: &std::path::Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .arg("cleanup")
        .arg("--runs-dir")
        .arg(runs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn record(s: &Scratch) -> RunRecord {
    s.run_record().1
}

#[test]
#[ignore = "host: root libvirtd qemu ganesha tgtd"]
fn two_runs_at_once_each_with_own_servers_and_cleanup() {
    let (a, b) = (Scratch::new(), Scratch::new());
    // B has twice the cells, so it is still running when A ends and A's cleanup runs.
    let mut run_b = b
        .matrix_cmd(&["--backend", "nfs,iscsi", "--format", "raw,qcow2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out_a = a.matrix(&["--backend", "nfs,iscsi", "--format", "raw"]);
    let b_running = matches!(run_b.try_wait(), Ok(None));
    let cleaned_a = cleanup(&a.runs());
    let cleaned_b = cleanup(&b.runs());
    let out_b = run_b.wait_with_output().unwrap();
    eprintln!(
        "--- B stdout\n{}\n--- B stderr\n{}\n--- cleanup A\n{cleaned_a}\n--- cleanup B\n{cleaned_b}",
        String::from_utf8_lossy(&out_b.stdout),
        String::from_utf8_lossy(&out_b.stderr)
    );
    assert_eq!(out_a.status.code(), Some(0), "run A");
    assert_eq!(out_b.status.code(), Some(0), "run B");
    let (ra, rb) = (record(&a), record(&b));
    assert_eq!(ra.cells.len(), 2);
    assert_eq!(rb.cells.len(), 4);
    for c in ra.cells.iter().chain(&rb.cells) {
        assert_real_randrw(c);
    }
    // Each run's cells name their own server processes, at their own addresses.
    let servers = |r: &RunRecord| -> Vec<(String, String)> {
        r.cells
            .iter()
            .map(|c| (c.params["server_pid"].clone(), c.params["server"].clone()))
            .collect()
    };
    let (sa, sb) = (servers(&ra), servers(&rb));
    for (pid, addr) in &sa {
        assert!(addr.starts_with("169.254."), "server address {addr}");
        assert!(!sb.iter().any(|(p, _)| p == pid), "shared server pid {pid}");
        assert!(!sb.iter().any(|(_, a)| a == addr), "shared address {addr}");
    }
    if b_running {
        assert!(
            cleaned_b.contains("nothing to clean up") || cleaned_b.contains("still running"),
            "cleanup touched the live run B: {cleaned_b}"
        );
    } else {
        // Counted (scripts/test: skipped, and a failure under CI unless expected), not just said.
        skip("B ended before A's cleanup: isolation of a live run not shown");
    }
    for s in [&a, &b] {
        s.assert_no_leftovers();
        assert_eq!(net_leftovers(s), Vec::<String>::new());
    }
}
