//! Progress: typed events sent over a channel to one UI thread, which draws indicatif bars on a
//! terminal and prints plain lines elsewhere (CI logs), honouring NO_COLOR.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

/// A cell's phase, as shown to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Creating the disk.
    Provision,
    /// Waiting for the agent's hello.
    Boot,
    /// Writing the test area once.
    Prefill,
    /// Warm-up (excluded).
    Ramp,
    /// Measuring.
    Run,
    /// Shipping results back.
    Collect,
    /// Destroying the domain and the disk.
    Teardown,
    /// K more instances from the same base started together (`--boot-storm`).
    Storm,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Provision => "provision",
            Phase::Boot => "boot",
            Phase::Prefill => "prefill",
            Phase::Ramp => "ramp",
            Phase::Run => "run",
            Phase::Collect => "collect",
            Phase::Teardown => "teardown",
            Phase::Storm => "boot storm",
        }
    }
}

/// "about 120 s" below 3 minutes, else whole minutes, rounded up.
fn fmt_duration(secs: u64) -> String {
    if secs < 180 {
        format!("{secs} s")
    } else {
        format!("{} min", secs.div_ceil(60))
    }
}

/// What the engine tells the UI.
#[derive(Debug, Clone)]
pub enum Output {
    /// The matrix starts: how many cell runs, how many of them cannot run here, and how long
    /// the rest should take.
    Start {
        /// Cell runs (cells x repeats).
        total: u64,
        /// Of those, runs on a hypervisor this host cannot run (reported, not run).
        not_run: u64,
        /// Estimated seconds of the runs that will run, together.
        est_secs: u64,
    },
    /// A cell run starts.
    CellStart {
        /// 1-based position.
        n: u64,
        /// Label.
        label: String,
        /// Its estimated seconds (0 when it cannot run here).
        est_secs: u64,
    },
    /// The current cell enters a phase.
    Phase(Phase),
    /// Live figures from the engine's status line.
    Live {
        /// Read IOPS.
        read_iops: u64,
        /// Write IOPS.
        write_iops: u64,
    },
    /// The current cell ended with this one-line outcome.
    CellEnd {
        /// 1-based position.
        n: u64,
        /// Label.
        label: String,
        /// "passed", "failed: ...", "unsupported on this host: ...".
        outcome: String,
    },
    /// A free-form line (plan, notes, warnings).
    Line(String),
}

/// An event and the host whose cell sent it (`None`: the run itself, or the only host).
type Tagged = (Option<std::sync::Arc<str>>, Output);

/// The sending half; cheap to clone.
#[derive(Clone)]
pub struct Ui {
    tx: mpsc::Sender<Tagged>,
    host: Option<std::sync::Arc<str>>,
}

impl Ui {
    /// Sends an event; a UI that already stopped is ignored.
    pub fn send(&self, o: Output) {
        let _ = self.tx.send((self.host.clone(), o));
    }

    /// The same UI, for one host's cells when several hosts run at once: their phases and live
    /// figures get a line (a spinner) of their own.
    pub fn for_host(&self, host: &str) -> Ui {
        Ui {
            tx: self.tx.clone(),
            host: Some(host.into()),
        }
    }

    /// Sends a line.
    pub fn line(&self, s: impl Into<String>) {
        self.send(Output::Line(s.into()));
    }
}

/// Starts the UI thread. Dropping every [`Ui`] ends it; join the handle to flush.
pub fn start() -> (Ui, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let fancy = use_bars(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let handle = std::thread::spawn(move || if fancy { draw_bars(rx) } else { draw_plain(rx) });
    (Ui { tx, host: None }, handle)
}

/// Bars only on a terminal and without NO_COLOR (no-color.org: set and not empty).
fn use_bars(tty: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    tty && no_color.is_none_or(|v| v.is_empty())
}

/// The plain renderer's state: one line per event, live figures at most every 10 s.
#[derive(Default)]
struct Plain {
    total: u64,
    /// The estimate of the runs not started yet.
    left_secs: u64,
    last_live: Option<std::time::Instant>,
}

impl Plain {
    /// The line for a host's `o`: phase and live lines name the host, since hosts interleave.
    fn tagged(&mut self, host: Option<&str>, o: Output, now: std::time::Instant) -> Option<String> {
        let indented = matches!(o, Output::Phase(_) | Output::Live { .. });
        let l = self.line(o, now)?;
        Some(match host {
            Some(h) if indented => format!("  {h}:{}", l.trim_start()),
            _ => l,
        })
    }

    /// The line for `o`, if it gets one.
    fn line(&mut self, o: Output, now: std::time::Instant) -> Option<String> {
        Some(match o {
            Output::Start {
                total,
                not_run,
                est_secs,
            } => {
                self.total = total;
                self.left_secs = est_secs;
                let skipped = match not_run {
                    0 => String::new(),
                    n => format!(" ({n} on a hypervisor this host cannot run: reported, not run)"),
                };
                format!(
                    "matrix: {total} cell run(s), about {}{skipped}",
                    fmt_duration(est_secs)
                )
            }
            Output::CellStart { n, label, est_secs } => {
                self.left_secs = self.left_secs.saturating_sub(est_secs);
                format!("[{n}/{}] {label}: start", self.total)
            }
            Output::Phase(p) => format!("  phase: {}", p.as_str()),
            Output::Live {
                read_iops,
                write_iops,
            } => {
                // CI logs get one live line every 10 s, not one a second.
                if self
                    .last_live
                    .is_some_and(|t| now.duration_since(t) < Duration::from_secs(10))
                {
                    return None;
                }
                self.last_live = Some(now);
                format!("  live: read {read_iops} IOPS, write {write_iops} IOPS")
            }
            Output::CellEnd { n, label, outcome } if n < self.total && self.left_secs > 0 => {
                // On the outcome's first line: a failure's console tail follows it.
                let (first, more) = outcome.split_at(outcome.find('\n').unwrap_or(outcome.len()));
                format!(
                    "[{n}/{}] {label}: {first} (the rest: about {}){more}",
                    self.total,
                    fmt_duration(self.left_secs)
                )
            }
            Output::CellEnd { n, label, outcome } => {
                format!("[{n}/{}] {label}: {outcome}", self.total)
            }
            Output::Line(s) => s,
        })
    }
}

fn draw_plain(rx: mpsc::Receiver<Tagged>) {
    let mut p = Plain::default();
    for (host, o) in rx {
        if let Some(l) = p.tagged(host.as_deref(), o, std::time::Instant::now()) {
            // stderr may be a pipe whose reader left (`2>&1 | head`): the run goes on.
            let _ = writeln!(std::io::stderr(), "{l}");
        }
    }
}

fn draw_bars(rx: mpsc::Receiver<Tagged>) {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let matrix = multi.add(ProgressBar::new(0));
    matrix.set_style(
        ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} cells, ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    matrix.set_prefix("matrix");
    // One spinner line per host (the run's own events use the unnamed one).
    let mut lines: std::collections::BTreeMap<Option<std::sync::Arc<str>>, (ProgressBar, &str)> =
        std::collections::BTreeMap::new();
    for (host, o) in rx {
        let (cell, phase) = lines.entry(host).or_insert_with(|| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            (b, "")
        });
        match o {
            Output::Start { total, .. } => matrix.set_length(total),
            Output::CellStart { label, .. } => {
                cell.set_prefix(label);
                cell.set_message("");
            }
            Output::Phase(p) => {
                *phase = p.as_str();
                cell.set_message(phase.to_string());
            }
            Output::Live {
                read_iops,
                write_iops,
            } => cell.set_message(format!(
                "{phase}: read {read_iops} IOPS, write {write_iops} IOPS"
            )),
            Output::CellEnd { label, outcome, .. } => {
                matrix.inc(1);
                let _ = multi.println(format!("{label}: {outcome}"));
            }
            Output::Line(s) => {
                let _ = multi.println(s);
            }
        }
    }
    for (cell, _) in lines.values() {
        cell.finish_and_clear();
    }
    matrix.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_or_no_terminal_means_plain_lines() {
        use std::ffi::OsStr;
        assert!(use_bars(true, None));
        assert!(!use_bars(false, None));
        assert!(!use_bars(true, Some(OsStr::new("1"))));
        // no-color.org: an empty NO_COLOR does not count.
        assert!(use_bars(true, Some(OsStr::new(""))));
    }

    #[test]
    fn the_plan_line_gives_the_estimate_and_what_cannot_run_here() {
        let start = Output::Start {
            total: 69,
            not_run: 36,
            est_secs: 5_701,
        };
        assert_eq!(
            Plain::default()
                .line(start, std::time::Instant::now())
                .as_deref(),
            Some(
                "matrix: 69 cell run(s), about 96 min (36 on a hypervisor this host cannot run: \
                 reported, not run)"
            )
        );
    }

    #[test]
    fn plain_lines_number_cells_and_throttle_live_figures() {
        let mut p = Plain::default();
        let t0 = std::time::Instant::now();
        let mut l = |o, secs| p.line(o, t0 + Duration::from_secs(secs));
        assert_eq!(
            l(
                Output::Start {
                    total: 4,
                    not_run: 0,
                    est_secs: 120
                },
                0
            )
            .as_deref(),
            Some("matrix: 4 cell run(s), about 120 s")
        );
        let start = Output::CellStart {
            n: 2,
            label: "qemu/local/raw".into(),
            est_secs: 30,
        };
        assert_eq!(l(start, 0).as_deref(), Some("[2/4] qemu/local/raw: start"));
        assert_eq!(
            l(Output::Phase(Phase::Boot), 0).as_deref(),
            Some("  phase: boot")
        );
        let live = |r| Output::Live {
            read_iops: r,
            write_iops: 1,
        };
        assert_eq!(
            l(live(5), 1).as_deref(),
            Some("  live: read 5 IOPS, write 1 IOPS")
        );
        assert_eq!(l(live(6), 5), None, "a second live line within 10 s");
        assert!(l(live(7), 11).is_some());
        let end = |n, label: &str, outcome: &str| Output::CellEnd {
            n,
            label: label.into(),
            outcome: outcome.into(),
        };
        // The runs not started yet: 120 - 30 s; on a failure's first line; none after the last.
        for (o, want) in [
            (
                end(2, "qemu/local/raw", "passed"),
                "[2/4] qemu/local/raw: passed (the rest: about 90 s)",
            ),
            (
                end(
                    3,
                    "qemu/nfs/raw",
                    "FAILED: boot: timed out\n  console: (empty)",
                ),
                "[3/4] qemu/nfs/raw: FAILED: boot: timed out (the rest: about 90 s)\n  console: \
                 (empty)",
            ),
            (
                end(4, "qemu/local/qcow2", "passed"),
                "[4/4] qemu/local/qcow2: passed",
            ),
        ] {
            assert_eq!(l(o, 12).as_deref(), Some(want));
        }
        let plain = l(Output::Line("x".into()), 12).unwrap();
        assert!(!plain.contains('\x1b'), "no escape codes in plain output");
        // Several hosts: a host's phase line names it.
        assert_eq!(
            p.tagged(Some("h2"), Output::Phase(Phase::Run), t0)
                .as_deref(),
            Some("  h2:phase: run")
        );
    }
}
