//! A `vmbench matrix` running in the background with its stderr read line by line, so that a
//! test acts when the run reaches a phase (its progress lines say so) instead of after a sleep.
//! Every wait has a deadline and fails with the lines seen so far.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The lines read so far, and whether the pipe reached its end.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    eof: bool,
}

pub struct Running {
    child: Child,
    seen: Arc<(Mutex<Seen>, Condvar)>,
}

impl Running {
    /// Spawns `cmd` with its stderr piped to a reader thread (which echoes each line).
    pub fn spawn(cmd: &mut Command) -> Running {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let err = child.stderr.take().unwrap();
        let seen = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            let (m, cv) = &*s2;
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("vmbench: {l}");
                m.lock().unwrap().lines.push(l);
                cv.notify_all();
            }
            m.lock().unwrap().eof = true;
            cv.notify_all();
        });
        Running { child, seen }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every stderr line so far.
    pub fn lines(&self) -> Vec<String> {
        self.seen.0.lock().unwrap().lines.clone()
    }

    /// Waits until `done` holds for the lines so far (woken by each new line); panics after
    /// `timeout` or at the end of the output, naming `what` and the last lines.
    pub fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.seen;
        let mut s = m.lock().unwrap();
        loop {
            if done(&s.lines) {
                return;
            }
            let now = Instant::now();
            if s.eof || now >= deadline {
                let tail = s.lines[s.lines.len().saturating_sub(20)..].join("\n");
                panic!(
                    "no {what} within {timeout:?} (output ended: {})\n{tail}",
                    s.eof
                );
            }
            s = cv.wait_timeout(s, deadline - now).unwrap().0;
        }
    }

    /// Waits until a line after the one containing `first` contains one of `then`.
    pub fn wait_for(&self, first: &str, then: &[&str], timeout: Duration) {
        self.wait_until(&format!("{then:?} after {first:?}"), timeout, |lines| {
            lines
                .iter()
                .position(|l| l.contains(first))
                .is_some_and(|i| {
                    lines[i..]
                        .iter()
                        .any(|l| then.iter().any(|t| l.contains(t)))
                })
        });
    }

    /// Whether the last phase line so far is one of `phases` ("run", "ramp", ...).
    pub fn in_phase(&self, phases: &[&str]) -> bool {
        last_phase_is(&self.seen.0.lock().unwrap().lines, phases)
    }

    pub fn signal(&self, s: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), s).unwrap();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit (bounded: it kills the run and fails after `timeout`), then for the
    /// end of its stderr (bounded too: an orphaned server may hold the pipe); returns the exit
    /// code and every stderr line.
    pub fn wait(&mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "vmbench did not exit within {timeout:?}\n{}",
                    self.lines().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (m, cv) = &*self.seen;
        let guard = m.lock().unwrap();
        let (s, waited) = cv
            .wait_timeout_while(guard, Duration::from_secs(10), |s| !s.eof)
            .unwrap();
        if waited.timed_out() {
            eprintln!("vmbench exited; its stderr is still held open (by an orphan?)");
        }
        (status.code(), s.lines.join("\n"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the last `phase: P` line of `lines` has P in `phases`.
pub fn last_phase_is(lines: &[String], phases: &[&str]) -> bool {
    lines
        .iter()
        .rev()
        .find_map(|l| l.trim().strip_prefix("phase: "))
        .is_some_and(|p| phases.contains(&p))
}
