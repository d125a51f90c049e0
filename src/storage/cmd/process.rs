//! Processes: finding them in /proc, checking they live, waiting for and stopping children.

use std::process::Child;
use std::time::{Duration, Instant};

/// Live (non-zombie) processes whose command name (`/proc/PID/comm`, 15 chars max) is `comm`.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_comm_state(*pid).is_some_and(|(c, st)| c == comm && st != 'Z'))
        .collect();
    pids.sort_unstable();
    pids
}

/// `(comm, state)` from `/proc/PID/stat`; comm may contain spaces and parens, so split at the
/// last ')'.
fn proc_comm_state(pid: u32) -> Option<(String, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let state = stat.get(close + 1..)?.trim_start().chars().next()?;
    Some((comm, state))
}

/// Whether a process is alive (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    proc_comm_state(pid).is_some_and(|(_, st)| st != 'Z')
}

/// Waits for `child` to exit for up to `timeout`; `true` when it did (and was reaped).
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILLs and reaps. Never leaves the child running.
pub fn terminate(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if !wait_timeout(child, grace) {
        kill_and_reap(child);
    }
}

/// SIGKILL and reap.
pub fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A process's command line as arguments (empty when it is gone or unreadable).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The exit status of a child kept in a mutex, once it has exited (None while it runs, or when
/// it was already taken).
pub fn child_exited(child: &std::sync::Mutex<Option<Child>>) -> Option<String> {
    let mut guard = child.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .as_mut()?
        .try_wait()
        .ok()
        .flatten()
        .map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_our_own_process() {
        let me = std::process::id();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert!(pids_named(comm.trim()).contains(&me));
        assert!(pid_alive(me));
    }

    #[test]
    fn zombies_and_missing_processes_are_dead() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie.
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while pid_alive(pid) && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!pid_alive(pid));
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
