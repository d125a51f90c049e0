//! Does measuring change what is measured? Issue 28 item 1's design: inside one boot, after one
//! prefill, the same measured job runs alternately with vmbench's instruments on and off
//! (`--fidelity-pairs N`, a hidden benchmarking flag; `scripts/bench-fidelity --in-boot` runs
//! it over several boots and prints the median ratio with its confidence interval). Separate
//! boots differ by about 10% on a TCG host; pairs inside one boot do not pay that spread.
//!
//! The instruments: fio's per-second logs (`time_series`; its latency logs alone,
//! `latency_series`), the guest's streamed status line
//! (`live_status`) and the host's progress watchdog (QMP reads every second, `stall_timeout`).
//! What every variant keeps, because it cannot be taken away: the agent as init, its
//! heartbeat, and the host's QMP block statistics at each end of the measured window.

use serde::Serialize;

/// One way of running the measured job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Every instrument on: the job as a cell runs it.
    Full,
    /// Every instrument off: the job as one would type it.
    Hand,
    /// Only the per-second logs off.
    NoLogs,
    /// Only the per-second latency logs off (bandwidth and IOPS logs kept).
    NoLatLogs,
    /// Only the status stream off.
    NoStatus,
    /// Only the watchdog off.
    NoWatchdog,
    /// Every instrument off but the status stream.
    StatusOnly,
    /// Every instrument off but the watchdog.
    WatchdogOnly,
}

impl Variant {
    /// fio writes per-second logs.
    pub fn time_series(self) -> bool {
        !matches!(
            self,
            Variant::Hand | Variant::NoLogs | Variant::StatusOnly | Variant::WatchdogOnly
        )
    }

    /// With them, its per-second latency logs.
    pub fn latency_series(self) -> bool {
        self.time_series() && self != Variant::NoLatLogs
    }

    /// The guest streams fio's status line.
    pub fn live_status(self) -> bool {
        !matches!(
            self,
            Variant::Hand | Variant::NoStatus | Variant::WatchdogOnly
        )
    }

    /// The host's progress watchdog reads QMP during the job.
    pub fn watchdog(self) -> bool {
        !matches!(
            self,
            Variant::Hand | Variant::NoWatchdog | Variant::StatusOnly
        )
    }
}

/// Which variants a pair holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Variants {
    /// `full` and `hand`.
    #[default]
    Pair,
    /// `full`, `hand` and each instrument off alone.
    All,
    /// `full`, every per-second log off, and the latency logs alone off: the instrument the
    /// earlier `all` runs put the cost on, with more rounds in the same time.
    Logs,
    /// The nightly gate's instruments (every one but the latency logs) and `hand`.
    Gate,
    /// `hand`, and the instruments that wake the guest or QEMU once a second without logs:
    /// the status stream alone, the watchdog alone, both. Which of them makes the gate's set
    /// faster than hand (gate/hand 1.017 [1.005, 1.032], n = 156)?
    Wakeups,
}

impl Variants {
    fn list(self) -> &'static [Variant] {
        match self {
            Variants::Pair => &[Variant::Full, Variant::Hand],
            Variants::All => &[
                Variant::Full,
                Variant::Hand,
                Variant::NoLogs,
                Variant::NoLatLogs,
                Variant::NoStatus,
                Variant::NoWatchdog,
            ],
            Variants::Logs => &[Variant::Full, Variant::NoLogs, Variant::NoLatLogs],
            Variants::Gate => &[Variant::NoLatLogs, Variant::Hand],
            Variants::Wakeups => &[
                Variant::Hand,
                Variant::StatusOnly,
                Variant::WatchdogOnly,
                Variant::NoLogs,
            ],
        }
    }
}

impl std::str::FromStr for Variants {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pair" => Ok(Variants::Pair),
            "all" => Ok(Variants::All),
            "logs" => Ok(Variants::Logs),
            "gate" => Ok(Variants::Gate),
            "wakeups" => Ok(Variants::Wakeups),
            other => Err(format!(
                "unknown variants '{other}' (valid: pair, all, logs, gate, wakeups)"
            )),
        }
    }
}

/// The in-boot comparison a cell runs before its measured job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Rounds; each runs every variant once.
    pub pairs: u32,
    /// Which variants.
    pub variants: Variants,
}

impl Plan {
    /// The jobs in the order they run: round by round, the variants' order reversed every other
    /// round, so neither side always goes first (the guest's page cache and the disk's state
    /// drift over a boot; a fixed order would put that drift into the ratio).
    pub fn order(&self) -> Vec<(u32, Variant)> {
        let list = self.variants.list();
        (0..self.pairs)
            .flat_map(|round| {
                let mut vs: Vec<Variant> = list.to_vec();
                if round % 2 == 1 {
                    vs.reverse();
                }
                vs.into_iter().map(move |v| (round, v))
            })
            .collect()
    }
}

/// One job's figure, as fidelity.json records it.
#[derive(Debug, Clone, Serialize)]
pub struct JobFigure {
    /// Round, from 0.
    pub round: u32,
    /// Which variant.
    pub variant: Variant,
    /// fio's read + write IOPS over the measured window (IOPS, higher is better).
    pub iops: f64,
}

/// What a cell writes to `fidelity.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Rounds run.
    pub pairs: u32,
    /// Every job, in the order it ran.
    pub jobs: Vec<JobFigure>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        let p = Plan {
            pairs: 3,
            variants: Variants::Pair,
        };
        let order: Vec<Variant> = p.order().into_iter().map(|(_, v)| v).collect();
        use Variant::*;
        assert_eq!(order, [Full, Hand, Hand, Full, Full, Hand]);
        let all = Plan {
            pairs: 2,
            variants: Variants::All,
        };
        let o = all.order();
        assert_eq!(o.len(), 12);
        assert_eq!(o[0], (0, Full));
        assert_eq!(o[6], (1, NoWatchdog));
        assert_eq!(o[11], (1, Full));
    }

    #[test]
    fn each_variant_turns_off_what_its_name_says() {
        use Variant::*;
        let on = |v: Variant| {
            (
                v.time_series(),
                v.latency_series(),
                v.live_status(),
                v.watchdog(),
            )
        };
        assert_eq!(on(Full), (true, true, true, true));
        assert_eq!(on(Hand), (false, false, false, false));
        assert_eq!(on(NoLogs), (false, false, true, true));
        assert_eq!(on(NoLatLogs), (true, false, true, true));
        assert_eq!(on(NoStatus), (true, true, false, true));
        assert_eq!(on(NoWatchdog), (true, true, true, false));
        assert_eq!(on(StatusOnly), (false, false, true, false));
        assert_eq!(on(WatchdogOnly), (false, false, false, true));
        assert_eq!("all".parse::<Variants>(), Ok(Variants::All));
        assert_eq!(
            Plan {
                pairs: 2,
                variants: "wakeups".parse().unwrap()
            }
            .order()[3..5],
            [(0, NoLogs), (1, NoLogs)]
        );
        assert_eq!(
            Plan {
                pairs: 1,
                variants: "logs".parse().unwrap()
            }
            .order(),
            [(0, Full), (0, NoLogs), (0, NoLatLogs)]
        );
        assert!("some"
            .parse::<Variants>()
            .unwrap_err()
            .contains("pair, all, logs, gate, wakeups"));
    }
}
