//! An embedded, single-host Ceph cluster for RBD disks: one `ceph-mon` and one `ceph-osd`
//! (BlueStore in a sparse file), both in the foreground as our children inside the run's network
//! namespace ([`super::netns`]), bound to the namespace's address. No ceph-mgr: RBD needs only
//! the monitor and the OSD (`ceph -s` warns about the missing manager, nothing else does).
//!
//! Every file the cluster writes stays under its directory: the conf names the run dir, admin
//! sockets, pid files, logs, mon and osd data, keyrings and the crash dir, and turns the mon's
//! cluster log file (by default in /var/log/ceph) off. Nothing in /etc/ceph, /var/lib/ceph or
//! /var/run/ceph is read or written, so a system cluster on the same host is never touched, and
//! two runs never share a fsid, a port or a key.
//!
//! Closed to other local users (docs/security.md): cephx is required everywhere, QEMU gets a
//! per-cluster client key (`client.vmbench`, capped to RBD on pool `rbd`) and the admin key stays
//! in the root-only directory; neither key is ever on a command line. The namespace's socket
//! filter refuses connections from anyone but root and QEMU's user before cephx is even asked.
//!
//! Only msgr v2 is bound (port 3300): librbd picks v2 for a monitor given as `ADDR:3300`, which is
//! what libvirt's `<host name='ADDR' port='3300'/>` becomes.

use super::cmd;
use super::netns::NetNs;
use super::StorageError;
use std::ffi::{OsStr, OsString};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The size of the OSD's BlueStore file (sparse: only written blocks take space).
pub const OSD_BLOCK_BYTES: u64 = 4 << 30;
/// The monitor's msgr v2 port.
pub const MON_PORT: u16 = 3300;
/// The pool every image goes in.
pub const POOL: &str = "rbd";
/// The cephx user QEMU connects as (`client.` + this).
pub const CLIENT_ID: &str = "vmbench";
/// How long each daemon may take to answer (both do within 2 s here).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a daemon may take to exit on SIGTERM before it is killed (the OSD first tells the
/// monitor it goes down, which waits up to `osd_mon_shutdown_timeout`, 5 s).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Placement groups of the pool: one OSD needs few, and without a manager nothing autoscales.
const PG_NUM: &str = "8";
/// The OSD's memory target: enough for BlueStore's caches on a benchmark-sized image, far below
/// the 4 GiB default, since other tests and VMs share the host.
const OSD_MEMORY_TARGET: u64 = 512 << 20;
/// The monitor's id.
const MON_ID: &str = "a";
/// The OSD's id (the first one a fresh cluster hands out).
const OSD_ID: &str = "0";
/// How long a CLI call may wait for the monitor.
const CONNECT_TIMEOUT: &str = "30";

/// A running single-host cluster. Stopped by [`Ceph::stop`] or on drop (mon and osd, our
/// children).
pub struct Ceph {
    files: Files,
    mon_pid: u32,
    osd_pid: u32,
    mon: Mutex<Option<Child>>,
    osd: Mutex<Option<Child>>,
    key: String,
    /// Dropped after the daemons stop (field order): the namespace outlives its processes.
    net: Arc<NetNs>,
}

/// Not derived: the client key must not end up in a debug print.
impl std::fmt::Debug for Ceph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ceph")
            .field("dir", &self.files.dir)
            .field("mon_pid", &self.mon_pid)
            .field("osd_pid", &self.osd_pid)
            .field("net", &self.net.name())
            .finish_non_exhaustive()
    }
}

/// Which daemon a failure is about (whose log it quotes).
#[derive(Debug, Clone, Copy)]
enum Daemon {
    Mon,
    Osd,
}

impl Daemon {
    fn program(self) -> &'static str {
        match self {
            Daemon::Mon => "ceph-mon",
            Daemon::Osd => "ceph-osd",
        }
    }
}

/// Every path of one cluster, all under its directory.
#[derive(Debug, Clone)]
struct Files {
    dir: PathBuf,
    conf: PathBuf,
    admin_keyring: PathBuf,
    /// The keys the monitor is made with (mon., client.admin, osd.0); removed after mkfs.
    seed_keyring: PathBuf,
    monmap: PathBuf,
    mon_data: PathBuf,
    osd_data: PathBuf,
    run: PathBuf,
    crash: PathBuf,
    mon_log: PathBuf,
    osd_log: PathBuf,
}

impl Files {
    fn new(dir: &Path) -> Files {
        Files {
            dir: dir.to_path_buf(),
            conf: dir.join("ceph.conf"),
            admin_keyring: dir.join("admin.keyring"),
            seed_keyring: dir.join("seed.keyring"),
            monmap: dir.join("monmap"),
            mon_data: dir.join("mon"),
            osd_data: dir.join("osd"),
            run: dir.join("run"),
            crash: dir.join("crash"),
            mon_log: dir.join("mon.log"),
            osd_log: dir.join("osd.log"),
        }
    }

    fn osd_keyring(&self) -> PathBuf {
        self.osd_data.join("keyring")
    }

    fn log(&self, d: Daemon) -> &Path {
        match d {
            Daemon::Mon => &self.mon_log,
            Daemon::Osd => &self.osd_log,
        }
    }
}

impl Ceph {
    /// Writes DIR/ceph.conf and keyrings, makes the monitor and the OSD (BlueStore in a sparse
    /// file DIR/osd/block of [`OSD_BLOCK_BYTES`]), starts `ceph-mon` and `ceph-osd` in `net`
    /// (foreground, as our children, logs in DIR/*.log), waits until the OSD is up, creates pool
    /// [`POOL`] (size 1, `rbd pool init`) and the client key of [`CLIENT_ID`]. Fails with a log's
    /// tail if a daemon dies or does not answer in time. A previous cluster's state in DIR (one
    /// that died and is being replaced) is removed first; its logs are appended to.
    pub fn start(dir: &Path, net: Arc<NetNs>) -> Result<Ceph, StorageError> {
        let dir = std::path::absolute(dir).map_err(|source| StorageError::Io {
            context: format!("resolving {}", dir.display()),
            source,
        })?;
        check_conf_safe(&dir)?;
        let files = Files::new(&dir);
        prepare_dirs(&files)?;
        let osd_uuid = uuid::Uuid::new_v4().to_string();
        let fsid = uuid::Uuid::new_v4().to_string();
        let addr = net.addrs().server;
        cmd::write_file(&files.conf, &config_text(&files, &fsid, addr))?;
        make_cluster(&files, &fsid, addr, &osd_uuid)?;
        let mut c = Ceph {
            files,
            mon_pid: 0,
            osd_pid: 0,
            mon: Mutex::new(None),
            osd: Mutex::new(None),
            key: String::new(),
            net,
        };
        // From here on, Drop stops whatever was started.
        c.start_mon()?;
        c.start_osd(&osd_uuid)?;
        c.make_pool_and_client()?;
        Ok(c)
    }

    /// The monitor's address as QEMU/libvirt reach it.
    pub fn mon_host(&self) -> Ipv4Addr {
        self.net.addrs().server
    }

    /// The monitor's port (msgr v2).
    pub fn mon_port(&self) -> u16 {
        MON_PORT
    }

    /// The pool images go in.
    pub fn pool(&self) -> &str {
        POOL
    }

    /// The client's id without the `client.` prefix: libvirt's `<auth username>`.
    pub fn client_id(&self) -> &str {
        CLIENT_ID
    }

    /// The client's cephx key (base64, as `ceph auth get-key` prints it).
    pub fn client_key(&self) -> &str {
        &self.key
    }

    /// Runs `rbd ARGS` from the host as client.admin against this cluster; returns stdout.
    pub fn rbd(&self, args: &[&str]) -> Result<String, StorageError> {
        run_tool("rbd", &self.admin_args(args, &[]))
    }

    /// Runs `ceph ARGS` from the host as client.admin against this cluster; returns stdout.
    pub fn ceph(&self, args: &[&str]) -> Result<String, StorageError> {
        run_tool(
            "ceph",
            &self.admin_args(args, &["--connect-timeout", CONNECT_TIMEOUT]),
        )
    }

    /// The OSD's process id (the data path).
    pub fn pid(&self) -> u32 {
        self.osd_pid
    }

    /// The monitor's process id.
    pub fn mon_pid(&self) -> u32 {
        self.mon_pid
    }

    /// Whether both daemons still run (either one alone serves no image).
    pub fn alive(&self) -> bool {
        running(&self.mon) && running(&self.osd)
    }

    /// The OSD's log.
    pub fn log_path(&self) -> &Path {
        &self.files.osd_log
    }

    /// The monitor's log.
    pub fn mon_log_path(&self) -> &Path {
        &self.files.mon_log
    }

    /// The namespace it runs in.
    pub fn net(&self) -> &NetNs {
        &self.net
    }

    /// Stops the OSD, then the monitor (the OSD says goodbye to the monitor on SIGTERM), each
    /// with SIGTERM and SIGKILL after a grace. Idempotent.
    pub fn stop(&self) {
        for child in [&self.osd, &self.mon] {
            if let Some(mut c) = child.lock().unwrap_or_else(|e| e.into_inner()).take() {
                cmd::terminate(&mut c, STOP_GRACE);
            }
        }
    }

    /// `--conf CONF --keyring ADMIN --id admin EXTRA... ARGS...`.
    fn admin_args(&self, args: &[&str], extra: &[&str]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            "--conf".into(),
            self.files.conf.clone().into(),
            "--keyring".into(),
            self.files.admin_keyring.clone().into(),
            "--id".into(),
            "admin".into(),
        ];
        v.extend(extra.iter().chain(args).map(OsString::from));
        v
    }

    /// Starts `ceph-mon -f` and waits until it listens.
    fn start_mon(&mut self) -> Result<(), StorageError> {
        let child = spawn_daemon(&self.net, Daemon::Mon, MON_ID, &self.files)?;
        self.mon_pid = child.id();
        *self.mon.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let (addr, pid) = (self.mon_host(), self.mon_pid);
        self.wait(Daemon::Mon, Duration::from_millis(50), || {
            if listens(pid, addr, MON_PORT) {
                Ok(())
            } else {
                Err(format!("ceph-mon does not listen on {addr}:{MON_PORT} yet"))
            }
        })
    }

    /// Registers the OSD with the monitor, starts `ceph-osd -f`, and puts it in the CRUSH map
    /// (`osd crush update on start` is off: the host name is not ours to put there).
    fn start_osd(&mut self, osd_uuid: &str) -> Result<(), StorageError> {
        let id = self.during(Daemon::Mon, self.ceph(&["osd", "new", osd_uuid, OSD_ID]))?;
        if id.trim() != OSD_ID {
            return Err(self.failure(
                Daemon::Mon,
                format!("the monitor gave the OSD id '{}', not {OSD_ID}", id.trim()),
            ));
        }
        let child = spawn_daemon(&self.net, Daemon::Osd, OSD_ID, &self.files)?;
        self.osd_pid = child.id();
        *self.osd.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let name = format!("osd.{OSD_ID}");
        let crush = [
            "osd",
            "crush",
            "add",
            &name,
            "1.0",
            "host=localhost",
            "root=default",
        ];
        self.during(Daemon::Mon, self.ceph(&crush))?;
        Ok(())
    }

    /// Creates the pool and the client key (monitor work, done while the OSD boots), waits
    /// until the OSD is up, then initialises the pool for RBD (which writes to it).
    fn make_pool_and_client(&mut self) -> Result<(), StorageError> {
        let pool = ["osd", "pool", "create", POOL, PG_NUM, PG_NUM, "replicated"];
        self.during(Daemon::Mon, self.ceph(&pool))?;
        let auth = client_auth_args();
        let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
        let key = self.during(Daemon::Mon, self.ceph(&auth))?;
        self.key = check_key(&key).ok_or_else(|| {
            self.failure(
                Daemon::Mon,
                "`ceph auth get-or-create-key` printed no key".into(),
            )
        })?;
        self.wait(Daemon::Osd, Duration::from_millis(250), || {
            let out = self.ceph(&["osd", "stat", "--format", "json"]);
            match out.map(|o| osd_up(&o)) {
                Ok(Some(true)) => Ok(()),
                Ok(_) => Err("osd.0 is not up yet".to_string()),
                Err(e) => Err(e.to_string()),
            }
        })?;
        self.during(Daemon::Osd, self.rbd(&["pool", "init", POOL]))?;
        Ok(())
    }

    /// Polls `probe` until it succeeds, either daemon exits, or [`START_TIMEOUT`] passes.
    fn wait(
        &self,
        d: Daemon,
        interval: Duration,
        probe: impl FnMut() -> Result<(), String>,
    ) -> Result<(), StorageError> {
        match cmd::wait_until(START_TIMEOUT, interval, || self.exited(), probe) {
            Ok(()) => Ok(()),
            Err(cmd::Waited::Exited(what)) => Err(self.failure(d, what)),
            Err(cmd::Waited::TimedOut(last)) => Err(self.failure(
                d,
                format!(
                    "{} not ready within {}s (last probe: {last})",
                    d.program(),
                    START_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    /// Which daemon has exited, and how, if one has.
    fn exited(&self) -> Option<String> {
        [(Daemon::Mon, &self.mon), (Daemon::Osd, &self.osd)]
            .into_iter()
            .find_map(|(d, c)| {
                cmd::child_exited(c).map(|s| format!("{} exited ({s})", d.program()))
            })
    }

    /// A failed start step as the daemon's failure, with its log's tail.
    fn during<T>(&self, d: Daemon, r: Result<T, StorageError>) -> Result<T, StorageError> {
        r.map_err(|e| {
            let died = self.exited().map(|x| format!("{x}; ")).unwrap_or_default();
            self.failure(d, format!("{died}{e}"))
        })
    }

    fn failure(&self, d: Daemon, detail: String) -> StorageError {
        failure(&self.files, d, detail)
    }
}

impl Drop for Ceph {
    fn drop(&mut self) {
        self.stop();
    }
}

fn failure(files: &Files, d: Daemon, detail: String) -> StorageError {
    let log = files.log(d).to_path_buf();
    StorageError::Server {
        server: "ceph",
        detail,
        tail: cmd::tail_file(&log),
        log,
    }
}

/// Whether a child kept in a mutex still runs (a stopped one, taken out, does not).
fn running(child: &Mutex<Option<Child>>) -> bool {
    let mut guard = child.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// The cluster's configuration. Daemon-only paths (data, keyrings, sockets, pid files, logs)
/// go in the daemons' sections, so the host-side CLI calls neither write nor read them; the
/// `[client]` timeouts bound every CLI call (the defaults wait 300 s or forever). The admin
/// keyring is also named in the conf although every call passes `--keyring`: the `ceph` CLI
/// opens a first handle before it reads its arguments, which otherwise fills stderr (and so
/// every error message) with "unable to find a keyring on /etc/ceph/...".
///
/// Two settings are for start time (9.8 s -> 2.8 s here): a single monitor still batches every
/// map change for `paxos propose interval` (1 s), and each time the OSD closes its block file
/// (17 times in mkfs and start, once per shard among them) it waits `bdev aio poll ms` (250 ms)
/// for its I/O thread. Neither touches the data path: that poll returns as soon as I/O
/// completes (an idle OSD used 30 ms of CPU in 10 s with it).
fn config_text(f: &Files, fsid: &str, addr: Ipv4Addr) -> String {
    let (run, crash, mon, osd) = (
        f.run.display(),
        f.crash.display(),
        f.mon_data.display(),
        f.osd_data.display(),
    );
    let (mon_log, osd_log) = (f.mon_log.display(), f.osd_log.display());
    let admin = f.admin_keyring.display();
    let quiet = "debug ms = 0/0\ndebug rocksdb = 1/5\ndebug bluestore = 1/5\n\
                 debug bluefs = 1/5\ndebug bdev = 1/5\ndebug paxos = 0/5\n\
                 log to stderr = false\nerr to stderr = false";
    format!(
        r#"# Written by vmbench for one run; do not edit.
[global]
fsid = {fsid}
mon host = v2:{addr}:{MON_PORT}
public network = {addr}/32
public addr = {addr}
cluster addr = {addr}
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = {run}
crash dir = {crash}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0

[mon]
mon data = {mon}
keyring = {mon}/keyring
admin socket = {run}/$cluster-$name.asok
pid file = {run}/$name.pid
log file = {mon_log}
mon cluster log to file = false
paxos propose interval = 0.1
debug mon = 1/5
{quiet}

[osd]
osd data = {osd}
keyring = {osd}/keyring
admin socket = {run}/$cluster-$name.asok
pid file = {run}/$name.pid
log file = {osd_log}
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {OSD_BLOCK_BYTES}
osd memory target = {OSD_MEMORY_TARGET}
osd crush update on start = false
bdev aio poll ms = 50
debug osd = 1/5
{quiet}

[client]
client mount timeout = {CONNECT_TIMEOUT}
rados mon op timeout = 60
rados osd op timeout = 120

[client.admin]
keyring = {admin}
"#
    )
}

/// `ceph auth get-or-create-key client.vmbench ...`: RBD on pool [`POOL`] only (`profile rbd`
/// also lets it blocklist a dead client of its own, which QEMU needs to take over an exclusive
/// lock).
fn client_auth_args() -> Vec<String> {
    [
        "auth",
        "get-or-create-key",
        &format!("client.{CLIENT_ID}"),
        "mon",
        "profile rbd",
        "osd",
        &format!("profile rbd pool={POOL}"),
    ]
    .map(String::from)
    .to_vec()
}

/// The key in `ceph auth get-or-create-key`'s output (one base64 line), if that is what it is.
fn check_key(out: &str) -> Option<String> {
    let k = out.trim();
    let base64 = |c: char| c.is_ascii_alphanumeric() || "+/=".contains(c);
    (k.len() >= 16 && k.chars().all(base64)).then(|| k.to_string())
}

/// Whether process `pid` itself listens on `addr:port`. Not a connect probe: a monitor left in
/// the namespace (a cluster being replaced while its monitor lives on) would answer it, and the
/// CLI calls that follow would fail on its keys instead of on the bind error in our log.
fn listens(pid: u32, addr: Ipv4Addr, port: u16) -> bool {
    let Ok(tcp) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return false;
    };
    let sockets = listening_sockets(&tcp, addr, port);
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .any(|l| sockets.iter().any(|s| l.as_os_str() == s.as_str()))
}

/// The `socket:[INODE]` names of the listeners on `addr:port` in a `/proc/net/tcp` table (whose
/// addresses are the raw network-order words printed in host order).
fn listening_sockets(tcp: &str, addr: Ipv4Addr, port: u16) -> Vec<String> {
    let local = format!("{:08X}:{port:04X}", u32::from_ne_bytes(addr.octets()));
    tcp.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let listening = f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A");
            f.get(9)
                .filter(|_| listening)
                .map(|i| format!("socket:[{i}]"))
        })
        .collect()
}

/// Whether `ceph osd stat --format json` says an OSD is up (None: not that output).
fn osd_up(json: &str) -> Option<bool> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(v.get("num_up_osds")?.as_u64()? >= 1)
}

/// The offline steps: keys, monitor map, `ceph-mon --mkfs` and `ceph-osd --mkfs`. The osd.0
/// and client.admin keys go into the monitor's initial auth database with the monitor's own,
/// so no auth call is needed once it runs; `--no-mon-config` because the OSD's mkfs would
/// otherwise ask a monitor that is not running yet.
fn make_cluster(f: &Files, fsid: &str, addr: Ipv4Addr, osd_uuid: &str) -> Result<(), StorageError> {
    for step in mkfs_plan(f, fsid, addr, osd_uuid) {
        let (program, args) = step.split_first().ok_or_else(|| {
            StorageError::Invalid("internal: empty command in a plan".to_string())
        })?;
        let d = if program == "ceph-osd" {
            Daemon::Osd
        } else {
            Daemon::Mon
        };
        run_tool(program, args).map_err(|e| failure(f, d, e.to_string()))?;
    }
    remove_file(&f.seed_keyring)?;
    remove_file(&f.monmap)
}

/// The argvs of [`make_cluster`], in order (paths are plain ASCII: [`check_conf_safe`]).
fn mkfs_plan(f: &Files, fsid: &str, addr: Ipv4Addr, osd_uuid: &str) -> Vec<Vec<String>> {
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let (seed, admin, osd_kr) = (p(&f.seed_keyring), p(&f.admin_keyring), p(&f.osd_keyring()));
    let (conf, monmap) = (p(&f.conf), p(&f.monmap));
    let key = |kr: &str, name: &str, caps: &[(&str, &str)]| {
        let mut v = argv(&[
            "ceph-authtool",
            "--create-keyring",
            kr,
            "--gen-key",
            "-n",
            name,
        ]);
        for (what, cap) in caps {
            v.extend(argv(&["--cap", what, cap]));
        }
        v
    };
    let osd_name = format!("osd.{OSD_ID}");
    let monmap_addr = format!("[v2:{addr}:{MON_PORT}]");
    vec![
        key(&seed, "mon.", &[("mon", "allow *")]),
        key(
            &admin,
            "client.admin",
            &[("mon", "allow *"), ("osd", "allow *"), ("mgr", "allow *")],
        ),
        key(
            &osd_kr,
            &osd_name,
            &[
                ("mon", "allow profile osd"),
                ("osd", "allow *"),
                ("mgr", "allow profile osd"),
            ],
        ),
        argv(&["ceph-authtool", &seed, "--import-keyring", &admin]),
        argv(&["ceph-authtool", &seed, "--import-keyring", &osd_kr]),
        argv(&[
            "monmaptool",
            "--create",
            "--fsid",
            fsid,
            "--addv",
            MON_ID,
            &monmap_addr,
            &monmap,
        ]),
        argv(&[
            "ceph-mon",
            "--conf",
            &conf,
            "--mkfs",
            "-i",
            MON_ID,
            "--monmap",
            &monmap,
            "--keyring",
            &seed,
        ]),
        argv(&[
            "ceph-osd",
            "--conf",
            &conf,
            "--mkfs",
            "-i",
            OSD_ID,
            "--osd-uuid",
            osd_uuid,
            "--no-mon-config",
        ]),
    ]
}

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Runs a Ceph tool with `args`, without the caller's `CEPH_ARGS` (which every Ceph tool
/// appends to its command line: a `--id` there would change who we are). Errors as
/// [`cmd::run`]'s.
pub(super) fn run_tool<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String, StorageError> {
    let out = Command::new(program)
        .args(args)
        .env_remove("CEPH_ARGS")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StorageError::Io {
            context: format!("cannot run {program} (is ceph-common installed?)"),
            source,
        })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = if stderr.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        stderr
    };
    Err(StorageError::Command {
        command: cmd::describe(program, args),
        detail: format!("{}: {}", out.status, cmd::tail_text(&text, 12)),
    })
}

/// Starts `PROGRAM -f --conf CONF -i ID` in `net`, its stdout and stderr appended to its log
/// (where a daemon says why it could not start, before its own logging is up).
fn spawn_daemon(net: &NetNs, d: Daemon, id: &str, f: &Files) -> Result<Child, StorageError> {
    let program = d.program();
    let log = f.log(d);
    let err = cmd::open_log(log)?;
    let out = err.try_clone().map_err(|source| StorageError::Io {
        context: format!("opening {}", log.display()),
        source,
    })?;
    net.command(program, None)?
        .arg("-f")
        .arg("--conf")
        .arg(&f.conf)
        .args(["-i", id])
        .env_remove("CEPH_ARGS")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|source| StorageError::Io {
            context: format!("starting {program} in {} (is it installed?)", net.name()),
            source,
        })
}

/// The conf and the tools take paths unquoted, and Ceph expands `$name` in conf values, so keep
/// the directory to characters that need no quoting anywhere.
fn check_conf_safe(dir: &Path) -> Result<(), StorageError> {
    let s = dir.to_string_lossy();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        return Ok(());
    }
    Err(StorageError::Invalid(format!(
        "Ceph directory '{s}' may contain only letters, digits, '/', '.', '_' and '-' (it goes \
         into ceph.conf unquoted); choose another work directory"
    )))
}

/// DIR root's and 0700 (it holds the admin key); a previous cluster's state removed (a fresh
/// cluster cannot reuse a monitor store or an OSD made for another fsid); the daemons' dirs
/// made.
fn prepare_dirs(f: &Files) -> Result<(), StorageError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &str, d: &Path| {
        let context = format!("{what} {}", d.display());
        move |source| StorageError::Io { context, source }
    };
    std::fs::create_dir_all(&f.dir).map_err(io("creating", &f.dir))?;
    std::os::unix::fs::chown(&f.dir, Some(0), Some(0)).map_err(io("chown", &f.dir))?;
    std::fs::set_permissions(&f.dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("chmod", &f.dir))?;
    for d in [&f.mon_data, &f.osd_data, &f.run, &f.crash] {
        match std::fs::remove_dir_all(d) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("removing", d)(e));
            }
            _ => {}
        }
        std::fs::create_dir(d).map_err(io("creating", d))?;
    }
    for p in [&f.seed_keyring, &f.admin_keyring, &f.monmap] {
        remove_file(p)?;
    }
    Ok(())
}

/// Removes a file that may not exist.
fn remove_file(p: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StorageError::Io {
            context: format!("removing {}", p.display()),
            source: e,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::servers::EmbeddedServer;

    const ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 7, 2);

    #[test]
    fn the_conf_keeps_every_path_under_the_dir_and_names_the_monitor() {
        let f = Files::new(Path::new("/var/tmp/run-1/ceph"));
        let c = config_text(&f, "0e7d-fsid", ADDR);
        for want in [
            "fsid = 0e7d-fsid\n",
            "mon host = v2:169.254.7.2:3300\n",
            "public addr = 169.254.7.2\n",
            "public network = 169.254.7.2/32\n",
            "ms bind msgr1 = false\n",
            "auth cluster required = cephx\n",
            "auth service required = cephx\n",
            "auth client required = cephx\n",
            "osd pool default size = 1\n",
            "osd pool default min size = 1\n",
            "mon allow pool size one = true\n",
            "osd crush chooseleaf type = 0\n",
            "bluestore block create = true\n",
            "bluestore block size = 4294967296\n",
            "osd memory target = 536870912\n",
            "mon cluster log to file = false\n",
            "mon data = /var/tmp/run-1/ceph/mon\n",
            "osd data = /var/tmp/run-1/ceph/osd\n",
            "log file = /var/tmp/run-1/ceph/osd.log\n",
        ] {
            assert!(c.contains(want), "{want:?} missing in\n{c}");
        }
        for key in [
            "run dir",
            "crash dir",
            "admin socket",
            "log file",
            "keyring",
            "pid file",
        ] {
            let values: Vec<&str> = c
                .lines()
                .filter_map(|l| l.strip_prefix(key)?.strip_prefix(" = "))
                .collect();
            assert!(!values.is_empty(), "{key} missing");
            for v in values {
                assert!(v.starts_with("/var/tmp/run-1/ceph/"), "{key} = {v}");
            }
        }
        assert!(
            !c.contains("/var/lib/ceph") && !c.contains("/etc/ceph"),
            "{c}"
        );
        assert!(!c.contains("/var/log") && !c.contains("/var/run"), "{c}");
    }

    #[test]
    fn daemon_paths_stay_out_of_the_clients_sections() {
        let f = Files::new(Path::new("/d"));
        let c = config_text(&f, "x", ADDR);
        let (global, rest) = c.split_once("[mon]").unwrap();
        let client = rest.split_once("[client]").unwrap().1;
        let (client, admin) = client.split_once("[client.admin]").unwrap();
        assert_eq!(admin.trim(), "keyring = /d/admin.keyring");
        for s in [global, client] {
            for key in [
                "admin socket",
                "log file",
                "keyring",
                "pid file",
                "mon data",
            ] {
                assert!(!s.contains(key), "{key} in a section clients read:\n{s}");
            }
        }
    }

    #[test]
    fn the_version_is_read_from_ceph_osds_output() {
        let out = "ceph version 16.2.15 (618f440892089921c3e944a991122ddc44e60516) pacific \
                   (stable)\n";
        assert_eq!(Ceph::parse_version(out).as_deref(), Some("16.2.15"));
        assert_eq!(Ceph::parse_version("usage: ceph-osd -i <ID>"), None);
    }

    #[test]
    fn the_client_may_use_rbd_on_its_pool_only() {
        assert_eq!(
            client_auth_args(),
            [
                "auth",
                "get-or-create-key",
                "client.vmbench",
                "mon",
                "profile rbd",
                "osd",
                "profile rbd pool=rbd"
            ]
        );
    }

    #[test]
    fn mkfs_makes_keys_with_their_caps_then_the_monitor_then_the_osd() {
        let f = Files::new(Path::new("/d"));
        let plan: Vec<String> = mkfs_plan(&f, "FSID", ADDR, "OSDUUID")
            .iter()
            .map(|v| v.join(" "))
            .collect();
        assert_eq!(
            plan,
            [
                "ceph-authtool --create-keyring /d/seed.keyring --gen-key -n mon. --cap mon allow *",
                "ceph-authtool --create-keyring /d/admin.keyring --gen-key -n client.admin \
                 --cap mon allow * --cap osd allow * --cap mgr allow *",
                "ceph-authtool --create-keyring /d/osd/keyring --gen-key -n osd.0 \
                 --cap mon allow profile osd --cap osd allow * --cap mgr allow profile osd",
                "ceph-authtool /d/seed.keyring --import-keyring /d/admin.keyring",
                "ceph-authtool /d/seed.keyring --import-keyring /d/osd/keyring",
                "monmaptool --create --fsid FSID --addv a [v2:169.254.7.2:3300] /d/monmap",
                "ceph-mon --conf /d/ceph.conf --mkfs -i a --monmap /d/monmap \
                 --keyring /d/seed.keyring",
                "ceph-osd --conf /d/ceph.conf --mkfs -i 0 --osd-uuid OSDUUID --no-mon-config",
            ]
        );
    }

    #[test]
    fn osd_stat_and_keys_are_parsed() {
        let up = r#"{"epoch":6,"num_osds":1,"num_up_osds":1,"num_in_osds":1}"#;
        let down = r#"{"epoch":4,"num_osds":1,"num_up_osds":0,"num_in_osds":1}"#;
        assert_eq!(osd_up(up), Some(true));
        assert_eq!(osd_up(down), Some(false));
        assert_eq!(osd_up("Error EACCES"), None);
        let k = "AQAq0hRrA6z2IhAAWySVH5VaG+WB3BdBO6mQrA==";
        assert_eq!(check_key(&format!("{k}\n")).as_deref(), Some(k));
        assert_eq!(check_key(""), None);
        assert_eq!(check_key("[client.vmbench]\n\tkey = x"), None);
    }

    #[test]
    fn listeners_are_found_in_proc_net_tcp() {
        // Captured from a monitor's namespace (169.254.97.150:3300 listening, one client).
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   \
                   uid  timeout inode\n   \
                   0: 9661FEA9:0CE4 00000000:0000 0A 00000000:00000000 00:00000000 00000000     \
                   0        0 123456 1 0000000000000000 100 0 0 10 0\n   \
                   1: 9661FEA9:0CE4 9561FEA9:A2B4 01 00000000:00000000 00:00000000 00000000     \
                   0        0 123999 1 0000000000000000 20 4 30 10 -1\n";
        let addr = Ipv4Addr::new(169, 254, 97, 150);
        if cfg!(target_endian = "little") {
            assert_eq!(listening_sockets(tcp, addr, 3300), ["socket:[123456]"]);
        }
        assert!(listening_sockets(tcp, addr, 6800).is_empty());
        assert!(!listens(std::process::id(), addr, 3300));
    }

    #[test]
    fn unsafe_dirs_are_refused() {
        assert!(check_conf_safe(Path::new("/var/tmp/a b")).is_err());
        assert!(check_conf_safe(Path::new("/var/tmp/$name")).is_err());
        assert!(check_conf_safe(Path::new("/var/tmp/a;b")).is_err());
        assert!(check_conf_safe(Path::new("/var/tmp/run-1/ceph_x.2")).is_ok());
    }

    /// `rbd ls` as a client that is not the admin: `mon` in libvirt's or the v2 form, the
    /// client's key from `keyring`, no conf file.
    fn client_ls(mon: &str, keyring: &Path) -> std::process::Output {
        Command::new("rbd")
            .args([
                "--conf",
                "/dev/null",
                "-m",
                mon,
                "--id",
                CLIENT_ID,
                "--keyring",
            ])
            .arg(keyring)
            .args(["--client-mount-timeout", "10", "ls", "-p", POOL])
            .env_remove("CEPH_ARGS")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn keyring_with(dir: &Path, name: &str, key: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("[client.{CLIENT_ID}]\n\tkey = {key}\n")).unwrap();
        p
    }

    fn rss_kib(pid: u32) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// What a cluster could leave outside its dir by mistake.
    fn system_ceph_files() -> Vec<PathBuf> {
        [
            "/var/log/ceph",
            "/var/run/ceph",
            "/var/lib/ceph/crash",
            "/etc/ceph",
        ]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .collect()
    }

    /// No key and a wrong key are refused by the monitor; the client's key lists the image,
    /// with the monitor named as `v2:ADDR:3300` and as libvirt names it (`ADDR:3300`).
    fn only_the_client_key_gets_in(c: &Ceph, keys: &Path) {
        let (v2, libvirt_form) = (
            format!("v2:{}:{}", c.mon_host(), c.mon_port()),
            format!("{}:{}", c.mon_host(), c.mon_port()),
        );
        let none = client_ls(&v2, Path::new("/dev/null"));
        assert!(!none.status.success(), "no key: {none:?}");
        let other = "AQAq0hRrA6z2IhAAWySVH5VaG+WB3BdBO6mQrA==";
        let wrong = client_ls(&v2, &keyring_with(keys, "wrong", other));
        assert!(!wrong.status.success(), "a wrong key: {wrong:?}");
        let right = keyring_with(keys, "right", c.client_key());
        for mon_addr in [&v2, &libvirt_form] {
            let ok = client_ls(mon_addr, &right);
            assert!(ok.status.success(), "{mon_addr}: {ok:?}");
            assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "t1");
        }
    }

    /// A second cluster on the same link cannot bind the monitor's port: its start fails with
    /// the monitor's log and leaves no process of its own behind.
    fn a_second_cluster_on_the_link_fails_and_leaves_the_first(
        net: &Arc<NetNs>,
        mon: u32,
        osd: u32,
    ) {
        let dir2 = tempfile::tempdir_in("/var/tmp").unwrap();
        let t = std::time::Instant::now();
        let e = Ceph::start(dir2.path(), net.clone())
            .unwrap_err()
            .to_string();
        eprintln!(
            "ceph: a second cluster failed in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(
            e.contains("ceph-mon exited") && e.contains("mon.log"),
            "{e}"
        );
        let mut left = net.pids();
        left.sort_unstable();
        assert_eq!(left, [mon.min(osd), mon.max(osd)], "{e}");
    }

    #[test]
    #[ignore = "host: root ceph"]
    fn a_cluster_starts_serves_an_image_refuses_without_the_key_and_leaves_nothing() {
        let before = system_ceph_files();
        let dir = tempfile::Builder::new()
            .prefix("vmbench-ceph-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let keys = tempfile::tempdir().unwrap();
        let run = format!("ceph{}", cmd::unique_tag());
        let net = Arc::new(NetNs::create(&run, crate::cell::Link::Loopback).unwrap());
        let ns = net.name().to_string();
        let t = std::time::Instant::now();
        let c = Ceph::start(dir.path(), net.clone()).unwrap();
        eprintln!("ceph: started in {:.1} s", t.elapsed().as_secs_f64());
        assert!(c.alive());

        c.rbd(&["create", "--size", "64", "rbd/t1"]).unwrap();
        let ls = c.rbd(&["ls", POOL]).unwrap();
        assert!(ls.lines().any(|l| l == "t1"), "{ls}");
        for io in ["write", "read"] {
            let bench = [
                "bench",
                "--io-type",
                io,
                "--io-size",
                "4K",
                "--io-total",
                "16M",
            ];
            c.rbd(&[&bench[..], &["--io-pattern", "rand", "rbd/t1"]].concat())
                .unwrap();
        }
        let (mon, osd) = (c.mon_pid(), c.pid());
        eprintln!(
            "ceph: RSS after 16 MiB of 4k writes and reads: mon {} MiB, osd {} MiB",
            rss_kib(mon) / 1024,
            rss_kib(osd) / 1024
        );

        // What the rbd backend reads a disk's own allocation from.
        let du = c.rbd(&["du", "--format", "json", "rbd/t1"]).unwrap();
        eprintln!("ceph: rbd du: {du}");
        let used = super::super::rbd::used_size(&du).expect("used_size in rbd du's JSON");
        assert!((16 << 20..=64 << 20).contains(&used), "{du}");

        only_the_client_key_gets_in(&c, keys.path());

        a_second_cluster_on_the_link_fails_and_leaves_the_first(&net, mon, osd);

        let t = std::time::Instant::now();
        c.stop();
        eprintln!("ceph: stopped in {:.1} s", t.elapsed().as_secs_f64());
        c.stop();
        assert!(!c.alive());
        assert!(!cmd::pid_alive(mon) && !cmd::pid_alive(osd));
        assert!(net.pids().is_empty(), "{:?}", net.pids());
        drop(c);
        drop(net);
        assert!(!Path::new("/run/netns").join(&ns).exists(), "{ns} is left");
        assert_eq!(
            system_ceph_files(),
            before,
            "files outside the cluster's dir"
        );
    }
}
