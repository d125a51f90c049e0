//! A hostile guest, for the host's fault tests only: with `vmbench.hostile=KIND` on the kernel
//! command line the agent answers its first measuring job with broken output instead of running
//! it, so the host's defences are tested against a real guest over a real virtio-serial port.
//! Nothing sets the flag outside vmbench's hidden `--inject-fault hostile-KIND` test option.

use crate::port::Writer;
use std::io::Write;
use vmbench_proto::{GuestMsg, Job, MAX_FRAME};

/// The kinds of broken output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One frame larger than the host's limit.
    Oversized,
    /// Bytes that are not UTF-8, then a line that is not JSON.
    Garbage,
    /// A well-formed result for a job the host did not give.
    WrongJob,
    /// A "successful" fio run whose JSON has impossible numbers.
    Impossible,
    /// No answer at all while the heartbeat goes on: a guest alive but stuck (the host's
    /// progress watchdog must fail the cell long before the job's total limit).
    Stuck,
    /// Valid status frames for the job, as fast as the port takes them, until the host gives
    /// up (the host's rate limit must end it within seconds, its memory flat).
    Flood,
}

/// A status line the host parses as live figures, as fio prints it.
const FLOOD_LINE: &str =
    "Jobs: 1 (f=1): [m(1)][50.0%][r=8000KiB/s,w=3000KiB/s][r=2000,w=750 IOPS][eta 00m:05s]";

/// Parses the kernel command line's `vmbench.hostile` value.
pub fn kind(value: &str) -> Option<Kind> {
    match value {
        "oversized" => Some(Kind::Oversized),
        "garbage" => Some(Kind::Garbage),
        "wrong-job" => Some(Kind::WrongJob),
        "impossible" => Some(Kind::Impossible),
        "stuck" => Some(Kind::Stuck),
        "flood" => Some(Kind::Flood),
        _ => None,
    }
}

/// Sends the broken answer to `job`.
pub fn answer(kind: Kind, job: &Job, w: &Writer) -> std::io::Result<()> {
    match kind {
        Kind::Stuck => Ok(()),
        Kind::Flood => loop {
            w.send(&GuestMsg::Status {
                job: job.id,
                step: 0,
                line: FLOOD_LINE.into(),
            })?;
        },
        Kind::Oversized => w.raw(&vec![b'x'; MAX_FRAME + 4096]),
        Kind::Garbage => {
            w.raw(&[0xff, 0xfe, 0xfd, b'\n'])?;
            w.raw(b"{\"type\": \"job_done\", \"job\": \n")
        }
        Kind::WrongJob => w.send(&GuestMsg::JobDone {
            job: job.id + 1000,
            ok: true,
        }),
        Kind::Impossible => {
            let json = r#"{"fio version":"fio-3.33","jobs":[{"jobname":"pg-test","error":0,
"read":{"iops":-5.0,"bw_bytes":1,"io_bytes":1,"total_ios":1,"runtime":1000,
"lat_ns":{"mean":1.0},"clat_ns":{"mean":1.0,"percentile":{"99.000000":1}}},
"write":{"iops":1.0,"bw_bytes":1,"io_bytes":1,"total_ios":1,"runtime":1000,
"lat_ns":{"mean":1.0},"clat_ns":{"mean":1.0,"percentile":{"99.000000":1}}},
"usr_cpu":1.0,"sys_cpu":1.0}]}"#;
            let last = (job.steps.len() as u32).saturating_sub(1);
            for step in 0..=last {
                w.send(&GuestMsg::StepDone {
                    job: job.id,
                    step,
                    exit_code: 0,
                    stderr_tail: String::new(),
                    duration_ms: 1,
                })?;
            }
            w.send(&GuestMsg::Blob {
                job: job.id,
                name: "fio.json".into(),
                seq: 0,
                last: true,
                data: json.into(),
            })?;
            w.send(&GuestMsg::JobDone {
                job: job.id,
                ok: true,
            })
        }
    }
}

impl Writer {
    /// Writes bytes as they are, bypassing framing (hostile mode only).
    pub fn raw(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = self.lock()?;
        f.write_all(bytes)?;
        f.flush()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kinds_parse() {
        assert_eq!(super::kind("oversized"), Some(super::Kind::Oversized));
        assert_eq!(super::kind("nice"), None);
    }
}
