//! Issue 13 item 1 and issue 15 item 3: the embedded servers run in per-run network namespaces.
//! A shaped `--link` caps what the guest reads at the link's rate (seen on the host-observed
//! counters); an unshaped one is faster; two runs at the same time each get their own servers,
//! and one run's cleanup leaves the other alone (nor do two runs at once share a run id or a
//! domain name). Writes over NFS and iSCSI and iSCSI reads are capped at a shaped link's rate
//! too, and a delayed link's round trip is twice its delay (or, on a kernel without netem, the
//! link is unsupported on this host). Afterwards no namespace, veth or qdisc remains.
use crate::common;
use common::running::{last_phase_is, Running};
use common::*;
use nix::sys::signal::Signal;
use std::process::Command;
use std::time::Duration;
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
        for link in ["loopback", "100mbit", "100mbit+2ms"] {
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
    let out = s.matrix_warm(&[
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

/// Issue 26 item 4: the link is shaped both ways and for both servers. Writes over NFS and over
/// iSCSI (the host end's qdisc) and iSCSI reads (the namespace end's) on a 100 Mbit/s link, each
/// host-observed at or under the rate (fails when a direction is not shaped) and above 70% of
/// it (fails when the shaping or the guest starves it). Runs beside other tests: no comparison
/// with an unshaped cell, so another test's load can only lower it, not pass a missing cap.
#[test]
#[ignore = "host: root libvirtd qemu ganesha tgtd"]
fn a_100mbit_link_caps_writes_and_iscsi_reads() {
    let shaped = |backends: &str, workload: &str, key: &str| {
        let s = Scratch::new();
        let args = [
            "--backend",
            backends,
            "--format",
            "raw",
            "--workload",
            workload,
            "--link",
            "100mbit",
        ];
        assert_eq!(s.matrix_warm(&args).status.code(), Some(0), "{args:?}");
        let (_, rec) = s.run_record();
        s.assert_no_leftovers();
        assert_eq!(net_leftovers(&s), Vec::<String>::new());
        rec.cells
            .iter()
            .map(|c| {
                assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
                assert_eq!(c.params.get("link").map(String::as_str), Some("100mbit"));
                (c.cell_id.clone(), num(c, key))
            })
            .collect::<Vec<_>>()
    };
    let mut seen = shaped("nfs,iscsi", "seq-write-1m", "host_write_bw_mib_s");
    assert_eq!(seen.len(), 2, "an NFS and an iSCSI write cell: {seen:?}");
    seen.extend(shaped("iscsi", "seq-read-1m", "host_read_bw_mib_s"));
    eprintln!("host-observed over 100mbit (limit {MBIT100_MIB_S:.2} MiB/s): {seen:.2?}");
    for (cell, mib_s) in &seen {
        assert!(
            *mib_s <= MBIT100_MIB_S,
            "{cell}: {mib_s:.2} MiB/s, above {MBIT100_MIB_S:.2}"
        );
        assert!(
            *mib_s >= 0.7 * MBIT100_MIB_S,
            "{cell}: {mib_s:.2} MiB/s, under 70% of {MBIT100_MIB_S:.2}"
        );
    }
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

/// The `<name>` of every cell's domain.xml in the run under `s`.
fn domain_names(s: &Scratch) -> std::collections::BTreeSet<String> {
    let cells = s.run_record().0.join("cells");
    std::fs::read_dir(cells)
        .unwrap()
        .map(|e| {
            let xml = std::fs::read_to_string(e.unwrap().path().join("domain.xml")).unwrap();
            let start = xml.find("<name>").unwrap() + 6;
            xml[start..start + xml[start..].find('<').unwrap()].to_string()
        })
        .collect()
}

fn record(s: &Scratch) -> RunRecord {
    s.run_record().1
}

#[test]
#[ignore = "host: root libvirtd qemu ganesha tgtd"]
fn two_runs_at_once_each_with_own_servers_and_cleanup() {
    let (a, b) = (Scratch::new(), Scratch::new());
    // B has twice the cells, so it is still running when A ends.
    let mut run_b = Running::spawn(
        b.matrix_cmd(&["--backend", "nfs,iscsi", "--format", "raw,qcow2"])
            .stdout(std::process::Stdio::null()),
    );
    let out_a = a.matrix(&["--backend", "nfs,iscsi", "--format", "raw"]);
    assert!(
        run_b.is_running(),
        "B ended before A: cannot show a live run left alone"
    );
    // Both cleanups while B is frozen in a measured phase: its domain and servers are live.
    run_b.wait_until("B in a measured phase", Duration::from_secs(300), |l| {
        last_phase_is(l, &["ramp", "run"])
    });
    run_b.signal(Signal::SIGSTOP);
    let cleaned_a = cleanup(&a.runs());
    let cleaned_b = cleanup(&b.runs());
    run_b.signal(Signal::SIGCONT);
    let (code_b, err_b) = run_b.wait(Duration::from_secs(600));
    eprintln!("--- cleanup A\n{cleaned_a}\n--- cleanup B\n{cleaned_b}");
    assert_eq!(out_a.status.code(), Some(0), "run A");
    // A's cleanup saw only A's finished run; B's left the live run alone.
    assert!(!cleaned_a.contains("removed"), "{cleaned_a}");
    assert!(
        !cleaned_b.contains("removed") && cleaned_b.contains("still running"),
        "cleanup touched the live run B: {cleaned_b}"
    );
    assert_eq!(code_b, Some(0), "run B: {err_b}");
    let (ra, rb) = (record(&a), record(&b));
    assert_eq!(ra.cells.len(), 2);
    assert_eq!(rb.cells.len(), 4);
    // Two runs at once never share a run id or a domain name.
    assert_ne!(ra.run_id, rb.run_id);
    let (na, nb) = (domain_names(&a), domain_names(&b));
    assert_eq!((na.len(), nb.len()), (2, 4), "{na:?} {nb:?}");
    assert!(na.is_disjoint(&nb), "shared domain names: {na:?} {nb:?}");
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
    for s in [&a, &b] {
        s.assert_no_leftovers();
        assert_eq!(net_leftovers(s), Vec::<String>::new());
    }
}

/// The delay of the link the delay test makes, one way, in ms.
const DELAY_MS: f64 = 2.0;

/// Issue 26 item 4: a link's delay is netem's, once in each direction, so a round trip from the
/// host end to the servers' namespace takes twice it. Measured as TCP connects (the SYN out, the
/// SYN-ACK back: one round trip) to a listener inside the namespace, the median of 21: on
/// `100mbit+2ms` it must be within [0.95, 1.25] x 4 ms + 0.5 ms, so the test fails when the
/// delay is not applied or applied one way only; on `100mbit` (the same rate without a delay,
/// measured first, on any host: 0.02 ms here) under a tenth of 4 ms. A kernel without netem (this kind of machine) cannot make the link, and
/// vmbench must say so: the namespace refuses it as unsupported, naming the link and tc's own
/// message, leaves nothing behind, and a matrix cell on it ends "unsupported on this host" (the
/// run exits 1: nothing was measured).
#[test]
#[ignore = "host: root"]
fn a_delayed_link_adds_twice_its_delay_to_the_round_trip() {
    use vmbench::storage::{netns::NetNs, StorageError};
    let run = format!("rtt{}", std::process::id());
    let want = 2.0 * DELAY_MS;
    // The same rate without a delay, first: the measurement itself runs on any host.
    let plain = NetNs::create(&format!("{run}p"), "100mbit".parse().unwrap()).unwrap();
    let plain_rtt = median_connect_ms(&plain);
    drop(plain);
    eprintln!("round trip on 100mbit, median of 21 connects: {plain_rtt:.3} ms");
    assert!(
        plain_rtt < want / 10.0,
        "100mbit: round trip {plain_rtt:.3} ms"
    );
    let delayed = format!("100mbit+{DELAY_MS}ms");
    match NetNs::create(&run, delayed.parse().unwrap()) {
        Ok(ns) => {
            let rtt = median_connect_ms(&ns);
            drop(ns);
            eprintln!("round trip on {delayed}, median of 21 connects: {rtt:.3} ms");
            assert!(
                rtt >= 0.95 * want && rtt <= 1.25 * want + 0.5,
                "{delayed}: round trip {rtt:.3} ms, not within [0.95, 1.25] x {want} ms + 0.5 ms"
            );
        }
        Err(StorageError::Unsupported(why)) => {
            let why = why.to_string();
            assert!(
                why.starts_with(&format!("cannot shape link {delayed}: ")) && why.contains("netem"),
                "{why}"
            );
            assert_eq!(netns::list(Some(&run)), Vec::<String>::new(), "after {why}");
            let s = Scratch::new();
            let out = s.matrix(&["--backend", "nfs", "--format", "raw", "--link", &delayed]);
            // Nothing was measured: the run says so and exits 1 (no result to gate on).
            assert_eq!(out.status.code(), Some(1));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("no cell could be measured on this host"),
                "{err}"
            );
            let rec = record(&s);
            let vmbench::results::Outcome::Unsupported(r) = &rec.cells[0].outcome else {
                panic!("{:?}", rec.cells[0].outcome);
            };
            assert!(r.contains(&format!("cannot shape link {delayed}")), "{r}");
            s.assert_no_leftovers();
            assert_eq!(net_leftovers(&s), Vec::<String>::new());
            common::skip(&format!(
                "no round trip to measure: this kernel cannot delay a link ({why})"
            ));
        }
        Err(e) => panic!("{delayed}: {e}"),
    }
}

/// The median time of 21 TCP connects from the host end of `ns`'s link to a listener inside it.
fn median_connect_ms(ns: &vmbench::storage::netns::NetNs) -> f64 {
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    const N: usize = 21;
    let handle = std::fs::File::open(format!("/run/netns/{}", ns.name())).unwrap();
    let server = ns.addrs().server;
    let (tx, rx) = std::sync::mpsc::channel();
    // setns moves only the calling thread: the listener's socket lives in the namespace.
    let listener = std::thread::spawn(move || {
        // SAFETY: a plain system call on an open namespace handle.
        let r = unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        let l = TcpListener::bind((server, 0)).unwrap();
        tx.send(l.local_addr().unwrap().port()).unwrap();
        for _ in 0..N {
            drop(l.accept().unwrap());
        }
    });
    let port = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let addr = SocketAddr::from((server, port));
    let mut ms: Vec<f64> = (0..N)
        .map(|_| {
            let t = std::time::Instant::now();
            let c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            let e = t.elapsed().as_secs_f64() * 1e3;
            drop(c);
            e
        })
        .collect();
    listener.join().unwrap();
    ms.sort_by(f64::total_cmp);
    ms[N / 2]
}
