//! Issue 14, item 5: a real second libvirt host. `scripts/test-host2` runs a second libvirtd (and
//! its own virtlogd) in its own mount, network and UTS namespaces, reachable only over
//! `qemu+tcp` on a veth address, with this machine's image cache, work dirs and libvirt state
//! hidden from it. A matrix over both hosts runs on each; host2's disks and kernel exist only in
//! host2's mount namespace, and killing host2's libvirtd fails only host2's cell.
use crate::common;
use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use vmbench::results::{CellResult, FailureKind, Outcome};

/// The hostname host2's libvirtd reports (its UTS namespace).
const HOST2_HOSTNAME: &str = "vmbench-host2";

/// How long one scripts/test-host2 command may take (start: two daemons and a veth).
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

fn script(args: &[&str]) -> Command {
    let mut c = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test-host2"));
    c.args(args);
    c
}

/// host2 for one test: started here, stopped on drop (so a failing test stops it too).
struct Host2 {
    uri: String,
}

impl Host2 {
    fn start() -> Host2 {
        let out = show(output_within(&mut script(&["start"]), SCRIPT_LIMIT));
        assert!(out.status.success(), "scripts/test-host2 start failed");
        let uri = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(uri.starts_with("qemu+tcp://169.254."), "{uri}");
        Host2 { uri }
    }

    /// A command run inside host2's namespaces.
    fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["exec"];
        all.extend_from_slice(args);
        output_within(&mut script(&all), SCRIPT_LIMIT)
    }

    /// Whether `path` exists in host2's mount namespace.
    fn has(&self, path: &str) -> bool {
        self.exec(&["test", "-e", path]).status.success()
    }

    /// virsh over TCP, from this (the root) namespace, as vmbench reaches host2.
    fn virsh(&self, args: &[&str]) -> String {
        virsh_at(&self.uri, args)
    }

    fn libvirtd_pid(&self) -> i32 {
        let o = self.exec(&["cat", "/run/libvirt/libvirtd.pid"]);
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    }

    /// Asserts host2's libvirtd has no domain and no pool.
    fn assert_empty(&self) {
        let doms = self.virsh(&["list", "--all", "--name"]);
        assert!(doms.trim().is_empty(), "domains left on host2: {doms}");
        let pools = self.virsh(&["pool-list", "--all", "--name"]);
        assert!(pools.trim().is_empty(), "pools left on host2: {pools}");
    }

    /// Files and directories under host2's /var/lib/libvirt named after the run (its disks and
    /// their directories); the uploaded kernel and initramfs are named after their content.
    fn run_files(&self, run_id: &str) -> String {
        let pattern = format!("*{run_id}*");
        let o = self.exec(&["find", "/var/lib/libvirt", "-path", &pattern]);
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Stops host2; the script fails when a process of its namespaces survives.
    fn stop(&self) {
        let out = show(output_within(&mut script(&["stop"]), SCRIPT_LIMIT));
        assert!(out.status.success(), "scripts/test-host2 stop failed");
    }
}

impl Drop for Host2 {
    fn drop(&mut self) {
        match deadline::try_output_within(&mut script(&["stop"]), SCRIPT_LIMIT) {
            Ok(o) if o.status.success() => {}
            o => eprintln!("scripts/test-host2 stop: {o:?}"),
        }
    }
}

/// The files a domain's live XML names: disk sources, kernel, initrd.
fn named_paths(xml: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in xml.lines().map(str::trim) {
        for tag in ["<kernel>", "<initrd>"] {
            if let Some(rest) = line.strip_prefix(tag) {
                out.push(rest.split('<').next().unwrap_or_default().to_string());
            }
        }
        if line.starts_with("<source ") {
            for attr in [" file='", " dev='"] {
                if let Some((_, rest)) = line.split_once(attr) {
                    out.push(rest.split('\'').next().unwrap_or_default().to_string());
                }
            }
        }
    }
    out
}

/// What a watcher saw of host2's running domains: per domain, each file it names and whether
/// that file existed in host2's mount namespace and in this one at that moment.
type Seen = BTreeMap<String, BTreeMap<String, (bool, bool)>>;

/// Looks at host2's running domains until `done`: the files their live XML names.
fn watch_host2(h2: &Host2, done: &AtomicBool) -> Seen {
    let mut seen = Seen::new();
    while !done.load(Ordering::Relaxed) {
        for dom in h2.virsh(&["list", "--name"]).lines().map(str::trim) {
            if dom.is_empty() || seen.contains_key(dom) {
                continue;
            }
            let paths = named_paths(&h2.virsh(&["dumpxml", dom]));
            if paths.is_empty() {
                continue;
            }
            let files = paths
                .into_iter()
                .map(|p| {
                    let there = (h2.has(&p), Path::new(&p).exists());
                    (p, there)
                })
                .collect();
            seen.insert(dom.to_string(), files);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    seen
}

fn on_h2(c: &CellResult) -> bool {
    c.cell.host.to_string() == "h2"
}

/// The provenance host of each cell of the run, as stored (the `provenance.host` column).
fn stored_hosts(db: &Path, run_id: &str) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut q = conn
        .prepare(
            "SELECT c.cell_id, p.host FROM cells c JOIN provenance p ON p.cell_row = c.id
             WHERE c.run_id = ?1 ORDER BY c.cell_id",
        )
        .unwrap();
    let rows = q
        .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn two_hosts_run_local_cells_and_host2s_files_exist_only_on_host2() {
    let h2 = Host2::start();
    assert_eq!(h2.virsh(&["hostname"]).trim(), HOST2_HOSTNAME);
    let s = Scratch::new();
    let host2 = format!("h2={}", h2.uri);
    let done = Arc::new(AtomicBool::new(false));
    let seen = std::thread::scope(|sc| {
        let watcher = sc.spawn(|| watch_host2(&h2, &done));
        let out = s.matrix(&[
            "--hypervisor",
            "qemu",
            "--backend",
            "local",
            "--format",
            "qcow2,raw",
            "--host",
            "local=qemu:///system",
            "--host",
            &host2,
        ]);
        done.store(true, Ordering::Relaxed);
        assert_eq!(out.status.code(), Some(0), "every cell passes");
        watcher.join().unwrap()
    });
    let (dir, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 4, "{:?}", rec.cells);
    for c in &rec.cells {
        assert_real_randrw(c);
    }
    // Each of host2's domains named files that existed on host2 and not here while it ran.
    eprintln!("host2's domains and their files (on host2, here): {seen:#?}");
    assert_eq!(seen.len(), 2, "both of host2's cells were seen running");
    for (dom, files) in &seen {
        assert!(
            files.len() >= 3,
            "{dom}: a disk, a kernel, an initrd: {files:?}"
        );
        for (path, (on_host2, here)) in files {
            assert!(on_host2, "{dom}: {path} does not exist on host2");
            assert!(!here, "{dom}: {path} exists in this mount namespace");
        }
    }
    // The domain XML kept in the run dir names host2's files, not this machine's.
    let cache = vmbench::image::default_cache_dir();
    for c in rec.cells.iter().filter(|c| on_h2(c)) {
        let cell_dir = std::fs::read_dir(dir.join("cells"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains(&format!("-{}-r", c.cell_id)))
            .unwrap();
        let xml = std::fs::read_to_string(cell_dir.join("domain.xml")).unwrap();
        let named = named_paths(&xml);
        assert!(!named.is_empty(), "{xml}");
        for p in named {
            assert!(
                !p.starts_with(&*cache.to_string_lossy()),
                "{p}: the image cache"
            );
            assert!(
                !p.starts_with(&*s.dir.path().to_string_lossy()),
                "{p}: this test's work dir"
            );
            assert!(
                seen.values().any(|f| f.contains_key(&p)),
                "{p} was not a file of host2's running domains"
            );
        }
    }
    // The store has host2's cells with host2's identity.
    let want = format!("h2 ({HOST2_HOSTNAME})");
    let stored = stored_hosts(&s.db(), &rec.run_id);
    assert_eq!(stored.len(), 4, "{stored:?}");
    for (id, host) in &stored {
        if id.ends_with("-on-h2") {
            assert_eq!(host, &want, "{id}");
        } else {
            assert!(!host.contains(HOST2_HOSTNAME), "{id}: {host}");
        }
    }
    s.assert_no_leftovers();
    h2.assert_empty();
    let left = h2.run_files(&rec.run_id);
    assert!(left.is_empty(), "left on host2: {left}");
    h2.stop();
}

#[test]
#[ignore = "host: root libvirtd qemu"]
fn host2_libvirtd_killed_mid_cell_fails_only_host2s_cell() {
    let h2 = Host2::start();
    let s = Scratch::new();
    let host2 = format!("h2={}", h2.uri);
    let mut cmd = s.matrix_cmd(&[
        "--hypervisor",
        "qemu",
        "--backend",
        "local",
        "--format",
        "raw",
        "--runtime",
        "8",
        "--host",
        "local=qemu:///system",
        "--host",
        &host2,
    ]);
    cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    let mut child = spawn_within(&mut cmd, MATRIX_LIMIT);
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Kill host2's libvirtd (SIGKILL: no shutdown of its own) once host2's cell measures.
    let end = Instant::now() + Duration::from_secs(180);
    loop {
        let line = rx
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .expect("host2's cell never reached its run phase");
        if line.contains("h2:phase: run") {
            break;
        }
    }
    let pid = h2.libvirtd_pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    eprintln!("{stderr}");
    assert_eq!(status.code(), Some(1), "a failed cell");
    let (_, rec) = s.run_record();
    assert_eq!(rec.cells.len(), 2, "{:?}", rec.cells);
    for c in &rec.cells {
        if on_h2(c) {
            let Outcome::Failed(r) = &c.outcome else {
                panic!("host2's cell: {:?}", c.outcome)
            };
            assert!(r.contains("libvirt"), "{r}");
            assert_eq!(c.failure_kind, Some(FailureKind::LibvirtLost), "{r}");
        } else {
            assert_real_randrw(c);
        }
    }
    // Nothing of the run on this host.
    s.assert_no_leftovers();
    // host2 back up: vmbench could not reach it to clean up, so its domain may still run there;
    // `vmbench cleanup` against host2 removes what the run left, and then host2 is empty.
    let out = output_within(&mut script(&["start-libvirtd"]), SCRIPT_LIMIT);
    assert!(show(out).status.success(), "host2's libvirtd restarts");
    eprintln!(
        "left on host2 after the kill: domains [{}] pools [{}]",
        h2.virsh(&["list", "--all", "--name"]).trim(),
        h2.virsh(&["pool-list", "--all", "--name"]).trim()
    );
    let out = show(output_within(
        Command::new(env!("CARGO_BIN_EXE_vmbench"))
            .args(["cleanup", "--connect", &h2.uri, "--run", &rec.run_id])
            .arg("--runs-dir")
            .arg(s.runs()),
        TOOL_LIMIT,
    ));
    assert!(out.status.success(), "vmbench cleanup on host2");
    h2.assert_empty();
    let left = h2.run_files(&rec.run_id);
    assert!(
        left.is_empty(),
        "left on host2 after vmbench cleanup: {left}"
    );
    // Stopping host2 leaves no process of its namespaces (the script checks and fails if so).
    h2.stop();
}
