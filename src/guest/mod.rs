//! The guest as the host sees it: a channel to its agent, the hello it sends at boot, and a job
//! run to completion with heartbeats watched and every artifact size-checked. Everything the guest
//! sends is untrusted; any violation is an error for the cell (with a reason), never a panic.

pub mod boot;
pub mod channel;
pub mod dirs;
pub mod vcpus;

use channel::Channel;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vmbench_proto::{FrameError, GuestMsg, Hello, HostMsg, Job, PROTOCOL_VERSION};

/// Why talking to the guest failed.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// Nothing arrived in time.
    #[error("timed out after {secs} s waiting for {waiting_for}")]
    Timeout {
        /// What was expected.
        waiting_for: String,
        /// The limit.
        secs: u64,
    },
    /// The channel closed (QEMU exited: guest powered off, panicked or was killed).
    #[error("agent channel closed while waiting for {waiting_for} (guest stopped)")]
    Closed {
        /// What was expected.
        waiting_for: String,
    },
    /// A frame broke the protocol's framing.
    #[error("invalid frame from guest: {0}")]
    Frame(#[source] FrameError),
    /// A well-formed message that makes no sense here.
    #[error("protocol violation by guest: {0}")]
    Protocol(String),
    /// The agent reported an error.
    #[error("guest agent error: {0}")]
    Agent(String),
    /// Socket I/O.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Limits on what a guest may send for one job.
#[derive(Debug, Clone)]
pub struct JobLimits {
    /// Longest silence (no heartbeat, no message) before the guest is declared stalled.
    pub heartbeat_timeout: Duration,
    /// Longest the whole job may take.
    pub total_timeout: Duration,
    /// Most bytes of artifacts in total.
    pub max_artifact_bytes: usize,
    /// Most artifacts.
    pub max_artifacts: usize,
    /// Most messages of any kind (a flood fails the cell rather than keep it busy).
    pub max_messages: u64,
    /// Most status and heartbeat messages per second, averaged over [`CHATTER_WINDOW`]: fio's
    /// status line and the agent's heartbeat come about once a second each, so a guest far above
    /// it is flooding, and is failed within seconds instead of after `max_messages`.
    pub max_chatter_per_sec: u32,
}

/// The window [`JobLimits::max_chatter_per_sec`] is counted over.
pub const CHATTER_WINDOW: Duration = Duration::from_secs(5);

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            heartbeat_timeout: Duration::from_secs(15),
            total_timeout: Duration::from_secs(3600),
            // An hour of fio's per-second logs is about 1 MiB; what a guest sends is held in
            // memory until the job ends, and vmbench stays under 50 MB whatever it sends.
            max_artifact_bytes: 16 << 20,
            max_artifacts: 64,
            max_messages: 2_000_000,
            max_chatter_per_sec: 200,
        }
    }
}

/// One step's end, as the agent reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEnd {
    /// Exit code of the engine.
    pub exit_code: i32,
    /// Last lines of its stderr.
    pub stderr_tail: String,
    /// Guest-side wall time.
    pub duration_ms: u64,
}

/// What a finished job produced.
#[derive(Debug, Clone, Default)]
pub struct JobOutput {
    /// Artifacts by name (complete ones only).
    pub artifacts: BTreeMap<String, String>,
    /// Step ends, by step index.
    pub steps: BTreeMap<u32, StepEnd>,
    /// True when every step succeeded.
    pub ok: bool,
}

/// Events a running job reports to its caller, for progress and the measurement window.
#[derive(Debug, Clone)]
pub enum JobEvent<'a> {
    /// An engine status line (fio's eta line).
    Status {
        /// Step index.
        step: u32,
        /// The line.
        line: &'a str,
    },
    /// A step ended.
    StepDone {
        /// Step index.
        step: u32,
    },
}

/// A booted guest's agent.
pub struct Guest {
    chan: Channel,
    /// What it said at boot.
    pub hello: Hello,
}

impl Guest {
    /// Waits for the hello; checks the protocol version.
    pub async fn hello(mut chan: Channel, timeout: Duration) -> Result<Guest, GuestError> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let msg = chan
                .recv(left, "the agent's hello")
                .await
                .map_err(|e| match e {
                    // Say the limit the user set, not what was left of it.
                    GuestError::Timeout { waiting_for, .. } => GuestError::Timeout {
                        waiting_for,
                        secs: timeout.as_secs(),
                    },
                    e => e,
                })?;
            match msg {
                GuestMsg::Hello(h) if h.protocol == PROTOCOL_VERSION => {
                    return Ok(Guest { chan, hello: h })
                }
                GuestMsg::Hello(h) => {
                    return Err(GuestError::Protocol(format!(
                    "agent speaks protocol {}, host speaks {PROTOCOL_VERSION}: rebuild the image \
                         (`vmbench image build`)",
                    h.protocol
                )))
                }
                // A heartbeat may race the hello; anything else before hello is a violation.
                GuestMsg::Heartbeat { .. } => continue,
                GuestMsg::Error { message, .. } => return Err(GuestError::Agent(message)),
                other => {
                    return Err(GuestError::Protocol(format!(
                        "expected hello, got {}",
                        kind(&other)
                    )))
                }
            }
        }
    }

    /// Runs a job to its end, calling `on_event` for status lines and step ends.
    pub async fn run(
        &mut self,
        job: Job,
        limits: &JobLimits,
        mut on_event: impl FnMut(JobEvent<'_>),
    ) -> Result<JobOutput, GuestError> {
        let id = job.id;
        let nsteps = job.steps.len() as u32;
        self.chan.send(&HostMsg::Job(job)).await?;
        let mut acc = Accumulator::new(id, nsteps, limits);
        let end = Instant::now() + limits.total_timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GuestError::Timeout {
                    waiting_for: "the job to finish (total job limit)".into(),
                    secs: limits.total_timeout.as_secs(),
                });
            }
            // When the total limit is nearer than the heartbeat limit, a silence that ends the
            // wait is the total limit firing: report that limit and its value, not the time left.
            let total_fires = left < limits.heartbeat_timeout;
            let msg = match self
                .chan
                .recv(
                    left.min(limits.heartbeat_timeout),
                    "a heartbeat or result (guest stalled?)",
                )
                .await
            {
                Err(GuestError::Timeout { .. }) if total_fires => {
                    return Err(GuestError::Timeout {
                        waiting_for: "the job to finish (total job limit)".into(),
                        secs: limits.total_timeout.as_secs(),
                    })
                }
                other => other?,
            };
            if let Some(done) = acc.accept(msg, &mut on_event)? {
                return Ok(done);
            }
        }
    }

    /// Asks the agent to power the guest off. The caller still destroys the domain if it does
    /// not go away by itself.
    pub async fn power_off(&mut self) -> Result<(), GuestError> {
        self.chan.send(&HostMsg::PowerOff).await
    }
}

fn kind(m: &GuestMsg) -> &'static str {
    match m {
        GuestMsg::Hello(_) => "hello",
        GuestMsg::Heartbeat { .. } => "heartbeat",
        GuestMsg::Status { .. } => "status",
        GuestMsg::Blob { .. } => "blob",
        GuestMsg::StepDone { .. } => "step_done",
        GuestMsg::JobDone { .. } => "job_done",
        GuestMsg::Error { .. } => "error",
    }
}

/// Checks and collects one job's messages; pure, so the rules are unit-tested without a guest.
struct Accumulator<'l> {
    id: u64,
    nsteps: u32,
    limits: &'l JobLimits,
    out: JobOutput,
    partial: BTreeMap<String, (u32, String)>,
    bytes: usize,
    messages: u64,
    /// Status and heartbeat messages since the current rate window began, and when it began.
    chatter: (Instant, u64),
}

impl<'l> Accumulator<'l> {
    fn new(id: u64, nsteps: u32, limits: &'l JobLimits) -> Self {
        Accumulator {
            id,
            nsteps,
            limits,
            out: JobOutput::default(),
            partial: BTreeMap::new(),
            bytes: 0,
            messages: 0,
            chatter: (Instant::now(), 0),
        }
    }

    /// Counts one status or heartbeat message at `now` against the rate limit.
    fn chatter(&mut self, now: Instant) -> Result<(), GuestError> {
        let (start, n) = &mut self.chatter;
        if now.saturating_duration_since(*start) >= CHATTER_WINDOW {
            (*start, *n) = (now, 0);
        }
        *n += 1;
        let limit = u64::from(self.limits.max_chatter_per_sec) * CHATTER_WINDOW.as_secs();
        if *n > limit {
            return Err(GuestError::Protocol(format!(
                "message flood: more than {limit} status and heartbeat messages within {} s \
                 (limit {}/s; fio and the agent send about 2/s)",
                CHATTER_WINDOW.as_secs(),
                self.limits.max_chatter_per_sec
            )));
        }
        Ok(())
    }

    fn check_job(&self, job: u64) -> Result<(), GuestError> {
        if job == self.id {
            Ok(())
        } else {
            Err(GuestError::Protocol(format!(
                "message for job {job}, but job {} was given",
                self.id
            )))
        }
    }

    fn check_step(&self, step: u32) -> Result<(), GuestError> {
        if step < self.nsteps {
            Ok(())
        } else {
            Err(GuestError::Protocol(format!(
                "step {step} does not exist (job has {})",
                self.nsteps
            )))
        }
    }

    fn accept(
        &mut self,
        msg: GuestMsg,
        on_event: &mut impl FnMut(JobEvent<'_>),
    ) -> Result<Option<JobOutput>, GuestError> {
        self.accept_at(msg, Instant::now(), on_event)
    }

    /// [`Self::accept`] at time `now` (the rate limit's clock).
    fn accept_at(
        &mut self,
        msg: GuestMsg,
        now: Instant,
        on_event: &mut impl FnMut(JobEvent<'_>),
    ) -> Result<Option<JobOutput>, GuestError> {
        if matches!(msg, GuestMsg::Heartbeat { .. } | GuestMsg::Status { .. }) {
            self.chatter(now)?;
        }
        self.messages += 1;
        if self.messages > self.limits.max_messages {
            return Err(GuestError::Protocol(format!(
                "message flood: more than {} messages for one job",
                self.limits.max_messages
            )));
        }
        match msg {
            GuestMsg::Heartbeat { .. } => {}
            GuestMsg::Status { job, step, line } => {
                self.check_job(job)?;
                self.check_step(step)?;
                on_event(JobEvent::Status { step, line: &line });
            }
            GuestMsg::Blob {
                job,
                name,
                seq,
                last,
                data,
            } => {
                self.check_job(job)?;
                self.blob(name, seq, last, data)?;
            }
            GuestMsg::StepDone {
                job,
                step,
                exit_code,
                stderr_tail,
                duration_ms,
            } => {
                self.check_job(job)?;
                self.check_step(step)?;
                let tail: String = stderr_tail.chars().take(8192).collect();
                self.out.steps.insert(
                    step,
                    StepEnd {
                        exit_code,
                        stderr_tail: tail,
                        duration_ms,
                    },
                );
                on_event(JobEvent::StepDone { step });
            }
            GuestMsg::JobDone { job, ok } => {
                self.check_job(job)?;
                if !self.partial.is_empty() {
                    let names: Vec<_> = self.partial.keys().cloned().collect();
                    return Err(GuestError::Protocol(format!(
                        "job done with unfinished artifacts: {names:?}"
                    )));
                }
                let all_ok = self.out.steps.len() as u32 == self.nsteps
                    && self.out.steps.values().all(|s| s.exit_code == 0);
                self.out.ok = ok && all_ok;
                return Ok(Some(std::mem::take(&mut self.out)));
            }
            GuestMsg::Error { job, message } => {
                if let Some(j) = job {
                    self.check_job(j)?;
                }
                return Err(GuestError::Agent(message.chars().take(4096).collect()));
            }
            GuestMsg::Hello(_) => {
                return Err(GuestError::Protocol(
                    "second hello during a job (guest rebooted?)".into(),
                ))
            }
        }
        Ok(None)
    }

    fn blob(&mut self, name: String, seq: u32, last: bool, data: String) -> Result<(), GuestError> {
        if !valid_artifact_name(&name) {
            return Err(GuestError::Protocol(format!(
                "invalid artifact name {name:?}"
            )));
        }
        if self.out.artifacts.contains_key(&name) {
            return Err(GuestError::Protocol(format!(
                "artifact {name:?} sent twice"
            )));
        }
        self.bytes += data.len();
        if self.bytes > self.limits.max_artifact_bytes {
            return Err(GuestError::Protocol(format!(
                "artifacts exceed {} bytes",
                self.limits.max_artifact_bytes
            )));
        }
        let entry = self
            .partial
            .entry(name.clone())
            .or_insert((0, String::new()));
        if entry.0 != seq {
            return Err(GuestError::Protocol(format!(
                "artifact {name:?}: chunk {seq} out of order (expected {})",
                entry.0
            )));
        }
        entry.0 += 1;
        entry.1.push_str(&data);
        if last {
            let (_, text) = self.partial.remove(&name).unwrap_or_default();
            self.out.artifacts.insert(name, text);
            if self.out.artifacts.len() > self.limits.max_artifacts {
                return Err(GuestError::Protocol(format!(
                    "more than {} artifacts",
                    self.limits.max_artifacts
                )));
            }
        }
        Ok(())
    }
}

/// A plain file name: what the host may write into the cell's directory.
pub fn valid_artifact_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(limits: &JobLimits) -> Accumulator<'_> {
        Accumulator::new(7, 2, limits)
    }

    fn blob(job: u64, name: &str, seq: u32, last: bool, data: &str) -> GuestMsg {
        GuestMsg::Blob {
            job,
            name: name.into(),
            seq,
            last,
            data: data.into(),
        }
    }

    fn done(step: u32, code: i32) -> GuestMsg {
        GuestMsg::StepDone {
            job: 7,
            step,
            exit_code: code,
            stderr_tail: String::new(),
            duration_ms: 1,
        }
    }

    #[test]
    fn collects_chunked_artifacts_and_steps() {
        let l = JobLimits::default();
        let mut a = acc(&l);
        let mut statuses = 0;
        let mut ev = |e: JobEvent<'_>| {
            if matches!(e, JobEvent::Status { .. }) {
                statuses += 1
            }
        };
        for m in [
            GuestMsg::Status {
                job: 7,
                step: 1,
                line: "Jobs: 1".into(),
            },
            blob(7, "fio.json", 0, false, "{\"a\":"),
            blob(7, "fio.json", 1, true, "1}"),
            done(0, 0),
            done(1, 0),
        ] {
            assert!(a.accept(m, &mut ev).unwrap().is_none());
        }
        let out = a
            .accept(GuestMsg::JobDone { job: 7, ok: true }, &mut ev)
            .unwrap()
            .unwrap();
        assert!(out.ok);
        assert_eq!(out.artifacts["fio.json"], "{\"a\":1}");
        assert_eq!(statuses, 1);
    }

    #[test]
    fn a_status_flood_fails_within_the_window_and_steady_chatter_never_does() {
        let l = JobLimits::default();
        let status = || GuestMsg::Status {
            job: 7,
            step: 0,
            line: "Jobs: 1 (f=1): [m(1)][r=2000,w=750 IOPS][eta 00m:05s]".into(),
        };
        let t0 = Instant::now();
        // An hour of the real rate (a status line and a heartbeat a second) passes.
        let mut a = acc(&l);
        let mut ev = |_: JobEvent<'_>| {};
        for sec in 0..3600u64 {
            let now = t0 + Duration::from_secs(sec);
            a.accept_at(status(), now, &mut ev).unwrap();
            a.accept_at(
                GuestMsg::Heartbeat {
                    job: Some(7),
                    uptime_ms: sec * 1000,
                },
                now,
                &mut ev,
            )
            .unwrap();
        }
        // A flood inside one window fails on the first message over the limit, not after
        // max_messages.
        let mut a = acc(&l);
        let limit = u64::from(l.max_chatter_per_sec) * CHATTER_WINDOW.as_secs();
        let mut n = 0u64;
        let err = loop {
            n += 1;
            let now = t0 + Duration::from_micros(n);
            if let Err(e) = a.accept_at(status(), now, &mut ev) {
                break e;
            }
        };
        assert_eq!(n, limit + 1);
        assert!(err.to_string().contains("message flood"), "{err}");
        // Heartbeats count too.
        let mut a = acc(&l);
        let beats = (0..=limit)
            .map(|i| {
                a.accept_at(
                    GuestMsg::Heartbeat {
                        job: Some(7),
                        uptime_ms: i,
                    },
                    t0,
                    &mut ev,
                )
            })
            .filter(Result::is_err)
            .count();
        assert_eq!(beats, 1);
    }

    #[test]
    fn job_done_ok_is_not_trusted_when_a_step_failed() {
        let l = JobLimits::default();
        let mut a = acc(&l);
        let mut ev = |_: JobEvent<'_>| {};
        a.accept(done(0, 0), &mut ev).unwrap();
        a.accept(done(1, 3), &mut ev).unwrap();
        let out = a
            .accept(GuestMsg::JobDone { job: 7, ok: true }, &mut ev)
            .unwrap()
            .unwrap();
        assert!(!out.ok);
    }

    #[test]
    fn violations_are_errors() {
        let l = JobLimits {
            max_artifact_bytes: 10,
            max_messages: 100,
            ..JobLimits::default()
        };
        let mut ev = |_: JobEvent<'_>| {};
        let cases: Vec<(GuestMsg, &str)> = vec![
            (
                GuestMsg::Heartbeat {
                    job: None,
                    uptime_ms: 0,
                },
                "",
            ),
            (blob(8, "x", 0, true, "a"), "job 8"),
            (
                blob(7, "../etc/passwd", 0, true, "a"),
                "invalid artifact name",
            ),
            (blob(7, "x", 1, true, "a"), "out of order"),
            (blob(7, "x", 0, true, "01234567890"), "exceed 10 bytes"),
            (done(5, 0), "step 5 does not exist"),
            (GuestMsg::Hello(hello()), "second hello"),
            (
                GuestMsg::Error {
                    job: Some(7),
                    message: "fio: ENOSPC".into(),
                },
                "ENOSPC",
            ),
        ];
        for (m, want) in cases {
            let mut a = acc(&l);
            let r = a.accept(m, &mut ev);
            if want.is_empty() {
                assert!(r.is_ok());
            } else {
                let e = r.expect_err(want).to_string();
                assert!(e.contains(want), "{e} !~ {want}");
            }
        }
    }

    #[test]
    fn flood_is_bounded() {
        let l = JobLimits {
            max_messages: 5,
            ..JobLimits::default()
        };
        let mut a = acc(&l);
        let mut ev = |_: JobEvent<'_>| {};
        let r: Result<Vec<_>, _> = (0..6)
            .map(|_| {
                a.accept(
                    GuestMsg::Heartbeat {
                        job: Some(7),
                        uptime_ms: 1,
                    },
                    &mut ev,
                )
            })
            .collect();
        assert!(r.unwrap_err().to_string().contains("flood"));
    }

    #[test]
    fn duplicate_artifact_is_refused() {
        let l = JobLimits::default();
        let mut a = acc(&l);
        let mut ev = |_: JobEvent<'_>| {};
        a.accept(blob(7, "x", 0, true, "a"), &mut ev).unwrap();
        assert!(a.accept(blob(7, "x", 0, true, "a"), &mut ev).is_err());
    }

    fn hello() -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            agent_version: "0".into(),
            kernel: "k".into(),
            fio_version: None,
            bonnie_version: None,
            cpus: 1,
            mem_kib: 1,
            block_devices: vec![],
            uptime_ms: 0,
        }
    }

    /// The channel over a non-blocking unix socket, the agent played by the test.
    fn unix_channel(path: &std::path::Path) -> Channel {
        let s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.set_nonblocking(true).unwrap();
        Channel::over(Box::new(s))
    }

    #[tokio::test]
    async fn channel_rejects_garbage_and_times_out() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(&[0xff, 0xfe, b'\n']).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let mut ch = unix_channel(&path);
        let e = ch.recv(Duration::from_secs(1), "x").await.unwrap_err();
        assert!(
            matches!(e, GuestError::Frame(FrameError::NotUtf8(_))),
            "{e}"
        );
        let e = ch
            .recv(Duration::from_millis(200), "the hello")
            .await
            .unwrap_err();
        assert!(matches!(e, GuestError::Timeout { .. }), "{e}");
        server.abort();
    }

    /// An agent that heartbeats but never finishes: the total limit fires and the error names it
    /// with its value (issue 15: it used to say "0 s", the time left).
    #[tokio::test]
    async fn alive_but_stuck_job_reports_the_total_limit() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            loop {
                let hb = GuestMsg::Heartbeat {
                    job: Some(7),
                    uptime_ms: 1,
                };
                s.write_all(&vmbench_proto::encode(&hb).unwrap())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let chan = unix_channel(&path);
        let mut g = Guest {
            chan,
            hello: hello(),
        };
        let limits = JobLimits {
            heartbeat_timeout: Duration::from_secs(5),
            total_timeout: Duration::from_secs(1),
            ..JobLimits::default()
        };
        let job = Job {
            id: 7,
            disk_serial: "x".into(),
            steps: vec![],
        };
        let e = g.run(job, &limits, |_| {}).await.unwrap_err().to_string();
        assert!(
            e.contains("total job limit") && e.contains("after 1 s"),
            "{e}"
        );
        server.abort();
    }
}
