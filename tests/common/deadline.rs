//! Deadlines for the processes a test starts. A hung `vmbench matrix` (a guest that never says
//! hello, libvirtd stuck on a dead NFS server) must fail its test with what it was doing, not
//! hold the suite until someone kills it: a watchdog thread sends SIGTERM when the deadline
//! passes (vmbench tears its run down on it), SIGKILL after [`GRACE`], and waiting on the child
//! then fails the test with the output's tail, the console tails of the run's cells and
//! `virsh list --all`.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After SIGTERM, how long the child has to tear its run down before SIGKILL.
const GRACE: Duration = Duration::from_secs(30);
/// After the child exits, how long its pipes may stay open (a server it started and left
/// holds them) before the output read so far is taken as all of it.
const DRAIN: Duration = Duration::from_secs(5);
/// Lines of each output, and of each cell's console, a timeout report shows.
const TAIL_LINES: usize = 40;

#[derive(Default)]
struct Watch {
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    /// The child was reaped (or is being killed by the drop guard): the watchdog stops.
    done: bool,
    /// The deadline passed and the watchdog signalled the child.
    fired: bool,
}

impl Watch {
    /// Waits until `done` or `until`; true when done.
    fn wait_done(&self, until: Instant) -> bool {
        let mut st = self.state.lock().unwrap();
        while !st.done {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            st = self.cv.wait_timeout(st, until - now).unwrap().0;
        }
        true
    }

    fn set_done(&self) {
        self.state.lock().unwrap().done = true;
        self.cv.notify_all();
    }

    fn fired(&self) -> bool {
        self.state.lock().unwrap().fired
    }
}

/// A child process with a deadline. Derefs to the [`Child`] (take its pipes, read its id);
/// [`Bounded::wait`] fails the test when the deadline killed it. Dropped unwaited (the test
/// panicked), it kills the child the same way, so no test leaves a vmbench running.
pub struct Bounded {
    child: Child,
    what: String,
    limit: Duration,
    runs_dir: Option<PathBuf>,
    watch: Arc<Watch>,
    dog: Option<JoinHandle<()>>,
}

/// Spawns `cmd` with a deadline `limit` from now.
pub fn spawn_within(cmd: &mut Command, limit: Duration) -> Bounded {
    let what = describe(cmd);
    let runs_dir = runs_dir_of(cmd);
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let watch = Arc::new(Watch::default());
    let pid = Pid::from_raw(child.id() as i32);
    let w = watch.clone();
    let dog = std::thread::spawn(move || watchdog(pid, limit, &w));
    Bounded {
        child,
        what,
        limit,
        runs_dir,
        watch,
        dog: Some(dog),
    }
}

fn watchdog(pid: Pid, limit: Duration, w: &Watch) {
    if w.wait_done(Instant::now() + limit) {
        return;
    }
    {
        let mut st = w.state.lock().unwrap();
        if st.done {
            return;
        }
        st.fired = true;
    }
    let _ = kill(pid, Signal::SIGTERM);
    if !w.wait_done(Instant::now() + GRACE) {
        let _ = kill(pid, Signal::SIGKILL);
    }
}

impl Bounded {
    /// The child's pid (for a test that kills it on purpose).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child; fails the test (with the report) when its deadline killed it.
    /// Returns a `Result` like [`Child::wait`], so callers keep `.wait().unwrap()`.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait();
        self.stop_watchdog();
        if self.watch.fired() {
            panic!("{}", self.report("", ""));
        }
        status
    }

    /// Like [`Child::wait_with_output`], within the deadline (the pipes the caller did not take
    /// are read here).
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        let out = Drain::start(self.child.stdout.take());
        let err = Drain::start(self.child.stderr.take());
        let status = self.child.wait()?;
        self.stop_watchdog();
        let until = Instant::now() + DRAIN;
        let (stdout, stderr) = (out.take(until), err.take(until));
        if self.watch.fired() {
            panic!("{}", self.report(&stdout, &stderr));
        }
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    fn stop_watchdog(&mut self) {
        self.watch.set_done();
        if let Some(d) = self.dog.take() {
            let _ = d.join();
        }
    }

    /// What a timed-out test prints: the command, its output's tail, each cell's console tail,
    /// and what libvirt still runs.
    fn report(&self, stdout: impl AsRef<[u8]>, stderr: impl AsRef<[u8]>) -> String {
        let mut r = format!(
            "{} did not finish within {} s: killed (SIGTERM, SIGKILL {} s later)\n",
            self.what,
            self.limit.as_secs(),
            GRACE.as_secs()
        );
        for (name, bytes) in [("stdout", stdout.as_ref()), ("stderr", stderr.as_ref())] {
            if !bytes.is_empty() {
                r += &format!("--- {name} (tail)\n{}\n", tail(bytes));
            }
        }
        if let Some(dir) = &self.runs_dir {
            for log in console_logs(dir) {
                let text = std::fs::read(&log).unwrap_or_default();
                r += &format!("--- console tail ({})\n{}\n", log.display(), tail(&text));
            }
        }
        r += &format!("--- virsh list --all\n{}", virsh_list_all());
        r
    }
}

impl Deref for Bounded {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Bounded {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        if self.dog.is_none() {
            return; // waited for
        }
        self.stop_watchdog();
        if matches!(self.child.try_wait(), Ok(None)) {
            terminate(&mut self.child);
        }
    }
}

/// SIGTERM, up to [`GRACE`] to exit, then SIGKILL; reaps the child.
fn terminate(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let end = Instant::now() + GRACE;
    while Instant::now() < end {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `cmd` (stdin null, output captured, like [`Command::output`]) and fails the test when it
/// does not finish within `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let what = describe(cmd);
    spawn_within(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        limit,
    )
    .wait_with_output()
    .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// [`output_within`] that returns the timeout report instead of failing: for drop guards, which
/// must not panic while a test unwinds.
pub fn try_output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut cmd = std::mem::replace(cmd, Command::new("true"));
    std::thread::spawn(move || output_within(&mut cmd, limit))
        .join()
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panicked".into())
        })
}

/// Reads a pipe to its end on a thread; [`Drain::take`] gives up waiting at a given time (the
/// child exited [`DRAIN`] before) and returns what was read (a server the child left may hold the pipe open).
struct Drain {
    buf: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

trait Pipe: Read + Send + 'static {}
impl Pipe for ChildStdout {}
impl Pipe for ChildStderr {}

impl Drain {
    fn start(pipe: Option<impl Pipe>) -> Drain {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = buf.clone();
        let thread = pipe.map(|mut p| {
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                while let Ok(n @ 1..) = p.read(&mut chunk) {
                    b.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            })
        });
        Drain { buf, thread }
    }

    fn take(self, end: Instant) -> Vec<u8> {
        if let Some(t) = self.thread {
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        let out = self.buf.lock().unwrap().clone();
        out
    }
}

/// The program and its arguments, for messages.
fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `--runs-dir` a vmbench command line names: where its cells' consoles are.
fn runs_dir_of(cmd: &Command) -> Option<PathBuf> {
    let args: Vec<_> = cmd.get_args().collect();
    args.windows(2)
        .rev()
        .find(|w| w[0] == "--runs-dir")
        .map(|w| PathBuf::from(w[1]))
}

/// Every `RUN/cells/NNN/console.log` under a runs dir.
fn console_logs(runs: &Path) -> Vec<PathBuf> {
    let mut logs = vec![];
    let dirs = |p: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    for run in dirs(runs) {
        for cell in dirs(&run.join("cells")) {
            let log = cell.join("console.log");
            if log.is_file() {
                logs.push(log);
            }
        }
    }
    logs
}

/// The last [`TAIL_LINES`] lines of `bytes`.
pub fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

/// `virsh list --all`, itself bounded (libvirtd may be what hangs): 20 s, then killed.
fn virsh_list_all() -> String {
    let child = Command::new("virsh")
        .args(["-c", super::URI, "list", "--all"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return format!("virsh: {e}\n"),
    };
    let out = Drain::start(child.stdout.take());
    let err = Drain::start(child.stderr.take());
    let end = Instant::now() + Duration::from_secs(20);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let hung = matches!(child.try_wait(), Ok(None));
    if hung {
        let _ = child.kill();
        let _ = child.wait();
    }
    let until = Instant::now() + DRAIN;
    let mut s = String::from_utf8_lossy(&out.take(until)).into_owned();
    s += &String::from_utf8_lossy(&err.take(until));
    if hung {
        s += "(virsh did not answer within 20 s: libvirtd hangs)\n";
    }
    s
}
