//! `vmbench cleanup`: removes what a crashed run left behind, found by vmbench's own markers and
//! nothing else: domains carrying the metadata marker (of runs under `--runs-dir`, or the one
//! named by `--run`), embedded servers whose config or log lies in a dead run's `servers/`
//! directory, the run's network namespaces (`vmbench-<run id>-*`, with their veth pairs and
//! qdiscs), the run's libvirt storage pools on `--connect`'s host (`vmbench-<run id>-*`, with
//! the disk volumes in them; an uploaded kernel and initramfs are kept), and the run's work
//! directory (images, LUN backing files, sockets). A run that is
//! still alive holds its lock file, and is never touched.

use crate::hypervisor::libvirt::Libvirt;
use crate::results::rundir::run_is_live;
use crate::storage::chap;
use crate::storage::cmd::cmdline;
use crate::storage::netns;
use crate::storage::pool;
use crate::storage::servers::EmbeddedServer;
use crate::storage::tgt::{Tgt, SOCKET_DIR as TGTD_SOCKETS};
use std::path::{Path, PathBuf};

/// What cleanup found and did.
#[derive(Debug, Default)]
pub struct Report {
    /// Removed (or, with --dry-run, to be removed), one per object.
    pub lines: Vec<String>,
    /// Found but left alone, with the reason.
    pub kept: Vec<String>,
}

/// What `vmbench cleanup` judges and how (the CLI's flags, as plain values).
#[derive(Debug, Clone)]
pub struct CleanupOptions {
    /// libvirt URI whose vmbench domains are examined.
    pub connect: String,
    /// Only this run id (else every dead run under `runs_dir`).
    pub run: Option<String>,
    /// Where run directories live.
    pub runs_dir: std::path::PathBuf,
    /// Say what would be removed, remove nothing.
    pub dry_run: bool,
}

/// Runs cleanup; returns the exit code.
pub fn run(a: &CleanupOptions) -> anyhow::Result<i32> {
    let mut rep = Report::default();
    let runs = list_runs(&a.runs_dir);
    let live: Vec<String> = runs
        .iter()
        .filter(|d| run_is_live(d))
        .filter_map(|d| name(d))
        .collect();
    let known: Vec<String> = runs.iter().filter_map(|d| name(d)).collect();
    match Libvirt::connect(&a.connect) {
        Ok(conn) => {
            clean_domains(&conn, a, &live, &known, &mut rep)?;
            clean_pools(a, &live, &known, &mut rep);
        }
        Err(e) => rep
            .kept
            .push(format!("(libvirt not reachable, domains not checked: {e})")),
    }
    for run in dead_runs(&a.runs_dir, a.run.as_deref()) {
        clean_run_dir(&run, a.dry_run, &mut rep);
    }
    print_report(&rep, a.dry_run);
    Ok(0)
}

fn print_report(rep: &Report, dry: bool) {
    if rep.lines.is_empty() {
        println!("nothing to clean up");
    }
    let verb = if dry { "would remove" } else { "removed" };
    for l in &rep.lines {
        println!("{verb} {l}");
    }
    for l in &rep.kept {
        println!("left alone: {l}");
    }
}

/// The run id in a domain's marker (`run="ID"`).
pub fn marker_run(marker: &str) -> Option<&str> {
    let rest = &marker[marker.find("run=\"")? + 5..];
    rest.split('"').next()
}

/// Removes marked domains of dead runs. Only runs under `--runs-dir` (or named by `--run`) are
/// judged: a domain of a run whose directory is elsewhere may belong to a live vmbench that this
/// cleanup cannot see, and destroying it would wreck that run.
fn clean_domains(
    conn: &Libvirt,
    a: &CleanupOptions,
    live: &[String],
    known: &[String],
    rep: &mut Report,
) -> anyhow::Result<()> {
    for d in conn.marked_domains(a.run.as_deref())? {
        let run = marker_run(&d.marker).unwrap_or("").to_string();
        if live.contains(&run) {
            rep.kept
                .push(format!("domain {} (run {run} is still running)", d.name));
            continue;
        }
        if a.run.is_none() && !known.contains(&run) {
            rep.kept.push(format!(
                "domain {} (run {run} has no directory under {}; `--run {run}` removes it)",
                d.name,
                a.runs_dir.display()
            ));
            continue;
        }
        rep.lines.push(format!("domain {}", d.name));
        if !a.dry_run {
            conn.remove_domain(&d.name)?;
        }
    }
    Ok(())
}

/// Destroys the storage pools of dead runs (name prefix `vmbench-<run id>-`) on the libvirt
/// host, with their disk volumes; after the domains, which may still hold the volumes. Like
/// domains, only runs under `--runs-dir` or named by `--run` are judged.
fn clean_pools(a: &CleanupOptions, live: &[String], known: &[String], rep: &mut Report) {
    let runs: Vec<&str> = match &a.run {
        Some(r) => vec![r.as_str()],
        None => known.iter().map(String::as_str).collect(),
    };
    let prefixes: Vec<String> = runs
        .into_iter()
        .filter(|r| !live.iter().any(|l| l == r))
        .map(pool::pool_prefix)
        .collect();
    if prefixes.is_empty() {
        return;
    }
    match pool::remove_leftover_pools(&a.connect, &prefixes, a.dry_run) {
        Ok(lines) => rep.lines.extend(lines),
        Err(e) => rep.kept.push(format!("storage pools: {e}")),
    }
}

fn list_runs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("run.json").is_file())
                .collect()
        })
        .unwrap_or_default()
}

fn name(p: &Path) -> Option<String> {
    p.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Run directories whose process is gone but whose work dir or servers remain.
fn dead_runs(root: &Path, only: Option<&str>) -> Vec<PathBuf> {
    list_runs(root)
        .into_iter()
        .filter(|d| only.is_none_or(|r| name(d).as_deref() == Some(r)))
        .filter(|d| !run_is_live(d))
        .filter(|d| d.join("work-dir").exists() || d.join("servers").exists())
        .collect()
}

fn clean_run_dir(run: &Path, dry: bool, rep: &mut Report) {
    let servers = run.join("servers");
    for (pid, comm) in server_processes(&servers) {
        rep.lines
            .push(format!("server {comm} (pid {pid}, {})", servers.display()));
        if !dry {
            // Read before the kill: a dead process has no command line left to read.
            let tgtd_port = (comm == <Tgt as EmbeddedServer>::BINARY)
                .then(|| tgtd_control_port(pid))
                .flatten();
            kill_and_wait(pid);
            remove_tgtd_sockets(tgtd_port);
        }
    }
    // One tgt directory per link: `tgt` (loopback) and `tgt-<link>` for shaped ones; and the
    // external iSCSI target's CHAP secret.
    let external_chap = servers.join(crate::storage::servers::ISCSI_CHAP_DIR);
    for dir in server_dirs(&servers, "tgt")
        .into_iter()
        .chain([external_chap])
    {
        clean_chap_secret(&dir, dry, rep);
    }
    clean_ceph_secrets(&servers.join(crate::storage::rbd::SECRETS_DIR), dry, rep);
    clean_ceph_external(&servers, dry, rep);
    if let Some(id) = name(run) {
        clean_namespaces(&id, dry, rep);
    }
    let marker = run.join("work-dir");
    if let Ok(work) = std::fs::read_to_string(&marker) {
        let work = PathBuf::from(work);
        // Only a directory named after this run, so a tampered marker cannot point elsewhere.
        if work.file_name() == run.file_name() && work.exists() {
            clean_host_cells(&work, dry, rep);
            if let Some(id) = name(run) {
                clean_memory_caps(&id, dry, rep);
            }
            rep.lines.push(format!("{}", work.display()));
            if !dry {
                let _ = std::fs::remove_dir_all(&work);
            }
        }
        if !dry {
            let _ = std::fs::remove_file(&marker);
        }
    }
    // Server logs are kept (they explain the crash); their pid files go.
    if !dry {
        for p in pid_files(&servers) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A killed run's host cells (`--hypervisor host`): their mounts and loop devices under the
/// work directory, undone before the directory is removed (removing it first would empty the
/// mounted filesystem and leave the mount and the loop device behind).
fn clean_host_cells(work: &Path, dry: bool, rep: &mut Report) {
    use crate::storage::host_access;
    let (mounts, loops) = host_access::find_leftovers(work);
    for m in &mounts {
        rep.lines.push(format!("host cell mount {}", m.display()));
    }
    for l in &loops {
        rep.lines.push(format!("host cell loop device {l}"));
    }
    if !dry {
        host_access::remove_leftovers(&mounts, &loops);
    }
}

/// A killed run's host cells' memory cgroups (`workload::memcap`).
fn clean_memory_caps(run_id: &str, dry: bool, rep: &mut Report) {
    use crate::workload::memcap;
    let dirs = memcap::leftovers(run_id);
    for d in &dirs {
        rep.lines
            .push(format!("host cell memory cgroup {}", d.display()));
    }
    if !dry {
        memcap::remove_leftovers(&dirs);
    }
}

/// The directories of a run's servers named `name`: `name` itself (loopback) and `name-<link>`.
fn server_dirs(servers: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(servers) else {
        return vec![];
    };
    let shaped = format!("{name}-");
    rd.flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n == name || n.starts_with(&shaped)
        })
        .map(|e| e.path())
        .collect()
}

/// The libvirt secret (iSCSI CHAP) of a dead run, named in its tgt directory by usage.
fn clean_chap_secret(tgt_dir: &Path, dry: bool, rep: &mut Report) {
    let file = tgt_dir.join(chap::USAGE_FILE);
    let Ok(usage) = std::fs::read_to_string(&file) else {
        return;
    };
    if undefine_secret(usage.trim(), chap::USAGE_PREFIX, dry, rep) {
        let _ = std::fs::remove_file(&file);
    }
}

/// Undefines the libvirt secret named `usage` when it is a name vmbench makes (`prefix`), so a
/// tampered or stray file cannot name someone else's secret; reports it. Whether the file that
/// named it may go (not on a dry run, not for a foreign name).
fn undefine_secret(usage: &str, prefix: &str, dry: bool, rep: &mut Report) -> bool {
    if !usage.starts_with(prefix) {
        return false;
    }
    if dry {
        rep.lines
            .push(format!("libvirt secret {usage} (if still defined)"));
        return false;
    }
    match chap::undefine(usage) {
        Ok(true) => rep.lines.push(format!("libvirt secret {usage}")),
        Ok(false) => {}
        Err(e) => rep.kept.push(format!("libvirt secret {usage}: {e}")),
    }
    true
}

/// The libvirt secrets (cephx keys) of a dead run's RBD cells: one file per secret in `dir`,
/// named after its usage.
fn clean_ceph_secrets(dir: &Path, dry: bool, rep: &mut Report) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let usage = e.file_name().to_string_lossy().into_owned();
        if undefine_secret(&usage, crate::storage::rbd::USAGE_PREFIX, dry, rep) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The images and base images a dead run made on a user's Ceph cluster (`--ceph-conf`), found
/// by the run's name prefix on the cluster its servers directory records; like an external NFS
/// or iSCSI server, the cluster itself is not ours and is left alone.
fn clean_ceph_external(servers: &Path, dry: bool, rep: &mut Report) {
    match crate::storage::ceph_external::remove_leftovers(servers, dry) {
        Ok(lines) => rep.lines.extend(lines),
        Err(e) => rep
            .kept
            .push(format!("images on the --ceph-conf cluster: {e}")),
    }
}

/// Removes the network namespaces named after dead run `id`: whatever still runs inside is
/// that run's (only vmbench puts processes there) and is killed first, since a namespace with
/// processes outlives `ip netns del`; then the nftables table named after it, the veth pair
/// and the namespace go, qdiscs with them.
fn clean_namespaces(id: &str, dry: bool, rep: &mut Report) {
    for ns in netns::list(Some(id)) {
        rep.lines.push(format!(
            "network namespace {ns} (its veth pair and socket filter)"
        ));
        if dry {
            continue;
        }
        for pid in netns::ns_pids(&ns) {
            kill_and_wait(pid);
        }
        netns::destroy(&ns);
    }
}

/// Server processes (by name, [`crate::storage::kind::leftover_processes`]: the servers vmbench
/// starts; nothing else is ever signalled) that belong to a run: their command line (the
/// ganesha config) or their stdout/stderr (every server's log, rpcbind's included) lies in the
/// run's `servers/` directory. Found this way rather than by pid file alone, because tgtd and
/// rpcbind write none, and a pid file can name a recycled pid; the process list is what
/// [`crate::storage::leftovers::find`] scans too.
pub fn server_processes(servers_dir: &Path) -> Vec<(u32, String)> {
    let roots: Vec<PathBuf> = [
        std::fs::canonicalize(servers_dir).ok(),
        std::path::absolute(servers_dir).ok(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if roots.is_empty() {
        return vec![];
    }
    let mut out = Vec::new();
    for comm in crate::storage::kind::leftover_processes() {
        for pid in crate::storage::cmd::pids_named(comm) {
            let under = |p: &Path| roots.iter().any(|r| p.starts_with(r));
            let by_args = cmdline(pid).iter().any(|a| under(Path::new(a)));
            let by_fds = (0..3).any(|fd| {
                std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|t| under(&t))
            });
            if by_args || by_fds {
                out.push((pid, comm.to_string()));
            }
        }
    }
    out
}

/// The control port (`-C PORT`) of the running tgtd `pid`: its sockets are
/// `/var/run/tgtd/socket.PORT` and `socket.PORT.lock`. `None` once it has exited.
pub fn tgtd_control_port(pid: u32) -> Option<u16> {
    pid_ctl_port(&cmdline(pid))
}

fn pid_ctl_port(args: &[String]) -> Option<u16> {
    let i = args.iter().position(|a| a == "-C")?;
    args.get(i + 1)?.parse().ok()
}

/// SIGKILL (tgtd ignores SIGTERM, and a dead run's servers have nothing left to flush), then
/// wait until the process is gone or a zombie (an orphan's reaper is not ours to drive).
fn kill_and_wait(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline && crate::storage::cmd::pid_alive(pid) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn remove_tgtd_sockets(port: Option<u16>) {
    if let Some(p) = port {
        let _ = std::fs::remove_file(format!("{TGTD_SOCKETS}/socket.{p}"));
        let _ = std::fs::remove_file(format!("{TGTD_SOCKETS}/socket.{p}.lock"));
    }
}

fn pid_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(it) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in it.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(pid_files(&p));
        } else if p.extension().is_some_and(|x| x == "pid") {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_run_id() {
        let m = r#"<vmbench xmlns="https://vmbench.dev/1" run="20260101-000000-ab12" cell="c"/>"#;
        assert_eq!(marker_run(m), Some("20260101-000000-ab12"));
        assert_eq!(marker_run("<vmbench/>"), None);
    }

    #[test]
    fn tgtd_control_port_from_its_command_line() {
        let args: Vec<String> = [
            "tgtd",
            "-f",
            "-C",
            "1234",
            "--iscsi",
            "portal=127.0.0.1:3260",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(pid_ctl_port(&args), Some(1234));
        assert_eq!(pid_ctl_port(&args[..2]), None);
    }

    #[test]
    fn a_live_lock_is_seen_and_released_on_drop() {
        let d = tempfile::tempdir().unwrap();
        assert!(!run_is_live(d.path()), "no lock file: not live");
        let l = crate::results::rundir::RunLock::acquire(d.path()).unwrap();
        assert!(run_is_live(d.path()));
        assert!(crate::results::rundir::RunLock::acquire(d.path()).is_err());
        drop(l);
        assert!(!run_is_live(d.path()));
    }

    #[test]
    fn no_server_belongs_to_a_fresh_directory() {
        let d = tempfile::tempdir().unwrap();
        assert!(server_processes(&d.path().join("servers")).is_empty());
    }
}
