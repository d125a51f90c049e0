//! Records every process's argv (`/proc/PID/cmdline`, what any local user can read) while it
//! runs, so a test can ask afterwards whether a secret learned only later was ever on one.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// At most this many distinct command lines are kept (a run starts a few hundred processes).
const MAX_SEEN: usize = 100_000;

/// One process seen: its `comm` and its raw argv (NUL-separated).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    pub comm: String,
    pub argv: Vec<u8>,
}

impl Seen {
    /// Whether the argv holds `needle`.
    pub fn carries(&self, needle: &str) -> bool {
        self.argv
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    /// The argv with NULs as spaces, for messages.
    pub fn line(&self) -> String {
        String::from_utf8_lossy(&self.argv).replace('\0', " ")
    }
}

/// A background thread polling /proc about every millisecond. Short-lived processes (a tgtadm
/// call lives a few ms) can be missed; callers assert the recorder saw some of them, or keep a
/// probe process alive across [`ArgvRecorder::wait_sweep`].
pub struct ArgvRecorder {
    stop: Arc<AtomicBool>,
    /// Completed passes over /proc, and a condition signalled after each.
    sweeps: Arc<(Mutex<u64>, Condvar)>,
    thread: std::thread::JoinHandle<BTreeSet<Seen>>,
}

impl ArgvRecorder {
    /// Starts the recorder and returns once it has made one whole pass over /proc: a process
    /// started after `start` returns and alive across a later pass is seen.
    pub fn start() -> ArgvRecorder {
        let stop = Arc::new(AtomicBool::new(false));
        let sweeps = Arc::new((Mutex::new(0u64), Condvar::new()));
        let (flag, done) = (stop.clone(), sweeps.clone());
        let thread = std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !flag.load(Ordering::SeqCst) {
                for e in std::fs::read_dir("/proc").unwrap().flatten() {
                    let name = e.file_name();
                    if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                        continue;
                    }
                    let dir = e.path();
                    let Ok(argv) = std::fs::read(dir.join("cmdline")) else {
                        continue;
                    };
                    let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                    if seen.len() < MAX_SEEN {
                        seen.insert(Seen {
                            comm: comm.trim().to_string(),
                            argv,
                        });
                    }
                }
                *done.0.lock().unwrap() += 1;
                done.1.notify_all();
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        let r = ArgvRecorder {
            stop,
            sweeps,
            thread,
        };
        r.wait_sweep();
        r
    }

    /// Waits until a pass over /proc that began after this call has completed (at most 10 s):
    /// every process alive from the call until then has been seen.
    pub fn wait_sweep(&self) {
        let (m, cv) = &*self.sweeps;
        let at_call = *m.lock().unwrap();
        // The pass under way at the call may have read /proc before it; the next one has not.
        let (_guard, waited) = cv
            .wait_timeout_while(m.lock().unwrap(), Duration::from_secs(10), |n| {
                *n < at_call + 2
            })
            .unwrap();
        assert!(
            !waited.timed_out(),
            "the argv recorder made no pass in 10 s"
        );
    }

    /// Stops and returns every distinct (comm, argv) seen.
    pub fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap().into_iter().collect()
    }
}

/// Logs every call of some programs exactly, unlike the polling [`ArgvRecorder`]: a directory of
/// shims, put first on the `PATH` of the process under test, each appending its argv to a log
/// and then exec'ing the real program. vmbench starts its helpers by name through `PATH`.
pub struct ExecLog {
    dir: tempfile::TempDir,
}

impl ExecLog {
    /// Shims for each of `programs` found on `PATH`.
    pub fn new(programs: &[&str]) -> ExecLog {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("vmbench-execlog-")
            .tempdir()
            .unwrap();
        let log = dir.path().join("log");
        for p in programs {
            let out = std::process::Command::new("sh")
                .args(["-c", "command -v \"$1\"", "sh", p])
                .output()
                .unwrap();
            let real = String::from_utf8(out.stdout).unwrap().trim().to_string();
            assert!(!real.is_empty(), "{p} not on PATH");
            let shim = dir.path().join("bin").join(p);
            std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
            std::fs::write(
                &shim,
                format!(
                    "#!/bin/sh\nprintf '%s\\0' {p} \"$@\" >> '{}'\nprintf '\\n' >> '{}'\nexec '{real}' \"$@\"\n",
                    log.display(),
                    log.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        ExecLog { dir }
    }

    /// `PATH` with the shims first.
    pub fn path_env(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Every logged call as a [`Seen`] (comm = the program).
    pub fn calls(&self) -> Vec<Seen> {
        let text = std::fs::read(self.dir.path().join("log")).unwrap_or_default();
        text.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let comm = l.split(|b| *b == 0).next().unwrap_or_default();
                Seen {
                    comm: String::from_utf8_lossy(comm).into_owned(),
                    argv: l.to_vec(),
                }
            })
            .collect()
    }
}
