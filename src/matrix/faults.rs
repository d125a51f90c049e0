//! Fault handling of a cell: test-only fault injection (hidden CLI options, never written to
//! config.json), and the watch that fails a cell as soon as its storage server dies or QEMU pauses
//! the domain on an I/O error, instead of letting the guest hang until the job's total timeout.

use crate::hypervisor::libvirt::{DomainState, RunningDomain};
use std::sync::Arc;
use std::time::Duration;
use vmbench_proto::Step;

/// A fault the matrix injects into one cell run, for the fault-injection tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Crash the guest kernel (sysrq `c`) right before the measured engine step.
    Panic,
    /// Boot the agent in a hostile mode (`vmbench.hostile=KIND`): it answers the measuring job
    /// with broken output. KIND is one of [`HOSTILE_KINDS`].
    Hostile(&'static str),
}

/// The agent's hostile modes (images/agent/src/hostile.rs).
pub const HOSTILE_KINDS: &[&str] = &["oversized", "garbage", "wrong-job", "impossible"];

/// One injected fault: what, and which cell run (its sequence number in the run, from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// What to inject.
    pub kind: FaultKind,
    /// The cell run's sequence number.
    pub seq: usize,
}

impl std::str::FromStr for Fault {
    type Err = String;
    /// `KIND[@SEQ]`, e.g. `panic` (the first cell run) or `panic@2`.
    fn from_str(s: &str) -> Result<Fault, String> {
        let (kind, seq) = s.split_once('@').unwrap_or((s, "0"));
        let kind = match kind.trim() {
            "panic" => FaultKind::Panic,
            other => match other
                .strip_prefix("hostile-")
                .and_then(|k| HOSTILE_KINDS.iter().find(|h| **h == k))
            {
                Some(k) => FaultKind::Hostile(k),
                None => {
                    let hostile: Vec<String> = HOSTILE_KINDS
                        .iter()
                        .map(|k| format!("hostile-{k}"))
                        .collect();
                    return Err(format!(
                        "unknown fault '{other}' (valid: panic, {})",
                        hostile.join(", ")
                    ));
                }
            },
        };
        let seq = seq
            .trim()
            .parse()
            .map_err(|_| format!("fault '{s}': '@{seq}' is not a cell number"))?;
        Ok(Fault { kind, seq })
    }
}

/// Test hooks of a matrix run. Not part of the TOML file or config.json: only hidden CLI flags
/// set them, so a production run can never carry them by accident.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestHooks {
    /// Faults to inject.
    pub faults: Vec<Fault>,
    /// Overrides [`crate::guest::JobLimits::heartbeat_timeout`] (a stalled guest is found
    /// faster).
    pub heartbeat_timeout: Option<Duration>,
}

impl TestHooks {
    /// The measured steps with the faults for cell run `seq` applied.
    pub fn apply(&self, seq: usize, mut steps: Vec<Step>) -> Vec<Step> {
        for f in self.faults.iter().filter(|f| f.seq == seq) {
            match f.kind {
                // After the cache drop (so the measurement window starts as usual), before the
                // engine: the crash comes at once instead of after the whole runtime.
                FaultKind::Panic => steps.insert(1.min(steps.len()), Step::Sysrq { key: 'c' }),
                FaultKind::Hostile(_) => {}
            }
        }
        steps
    }

    /// Extra kernel command line for cell run `seq` (the hostile agent modes).
    pub fn cmdline_extra(&self, seq: usize) -> String {
        self.faults
            .iter()
            .filter(|f| f.seq == seq)
            .filter_map(|f| match f.kind {
                FaultKind::Hostile(k) => Some(format!(" vmbench.hostile={k}")),
                FaultKind::Panic => None,
            })
            .collect()
    }
}

/// True while process `pid` exists and is not a zombie (an embedded server is our child: once
/// killed it stays a zombie until reaped, and is dead all the same).
pub fn process_alive(pid: u32) -> bool {
    crate::storage::cmd::pid_alive(pid)
}

/// Resolves with a reason once the cell's storage is lost: the embedded server's process died, or
/// QEMU paused the domain on an I/O error. Never resolves while both are fine.
pub async fn storage_lost(dom: Arc<RunningDomain>, server: Option<(&'static str, u32)>) -> String {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if let Some((name, pid)) = server {
            if !process_alive(pid) {
                return format!(
                    "storage server lost: the embedded {name} (pid {pid}) exited during the job"
                );
            }
        }
        let d = dom.clone();
        let state = tokio::task::spawn_blocking(move || d.state()).await;
        if let Ok(DomainState::Paused(r)) = state {
            if r == "I/O error" {
                return "storage server lost: QEMU paused the domain on an I/O error".into();
            }
        }
    }
}

/// What the domain's state adds to a guest error: a domain that is gone or paused explains a
/// closed channel or a stall better than the channel itself can.
pub fn domain_note(dom: &RunningDomain) -> Option<String> {
    match dom.state() {
        DomainState::Running => None,
        DomainState::Gone => Some("the domain is gone: QEMU exited or was killed".into()),
        DomainState::Crashed => Some("the domain crashed".into()),
        DomainState::Paused(r) => Some(format!("the domain is paused ({r})")),
        DomainState::Other(s) => Some(format!("the domain is in {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(
            "panic".parse::<Fault>(),
            Ok(Fault {
                kind: FaultKind::Panic,
                seq: 0
            })
        );
        assert_eq!("panic@3".parse::<Fault>().map(|f| f.seq), Ok(3));
        assert!("reboot"
            .parse::<Fault>()
            .unwrap_err()
            .contains("valid: panic"));
        assert!("panic@x".parse::<Fault>().is_err());
    }

    #[test]
    fn panic_goes_before_the_engine_of_its_cell_only() {
        let h = TestHooks {
            faults: vec!["panic@1".parse().unwrap()],
            ..TestHooks::default()
        };
        let steps = vec![Step::DropCaches, Step::DropCaches];
        assert_eq!(h.apply(0, steps.clone()).len(), 2);
        let s = h.apply(1, steps);
        assert_eq!(s.len(), 3);
        assert!(matches!(s[1], Step::Sysrq { key: 'c' }));
    }

    #[test]
    fn zombies_and_missing_processes_are_dead() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie.
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while process_alive(pid) && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!process_alive(pid));
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }
}
