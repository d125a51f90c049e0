//! Test hooks: fault injection for the fault-injection tests (hidden CLI options, never read
//! from TOML nor written to config.json, so a production run cannot carry them). The production
//! watch for lost storage is [`crate::hypervisor::watch`].

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
pub const HOSTILE_KINDS: &[&str] = &[
    "oversized",
    "garbage",
    "wrong-job",
    "impossible",
    "stuck",
    "flood",
];

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
}
