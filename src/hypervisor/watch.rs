//! The production watch of a running cell: it fails the cell as soon as its storage server dies
//! or QEMU pauses the domain on an I/O error, instead of letting the guest hang until the job's
//! total timeout; and it explains a guest error by the domain's state.

use super::libvirt::{DomainState, PausedReason, RunningDomain};
use crate::metrics::qmp::DiskCounters;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a cell's storage was lost during its job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageLoss {
    /// The embedded storage server's process exited.
    #[error("storage server lost: the embedded {name} (pid {pid}) exited during the job")]
    ServerExited {
        /// The server ("tgtd", "ganesha" ...).
        name: &'static str,
        /// Its process id.
        pid: u32,
    },
    /// Another process of the server's stack exited (the Ceph monitor beside the OSD): the
    /// cluster stops serving new sessions and maps, so the cell's figures no longer describe it.
    #[error(
        "storage server lost: a process of the embedded {server}'s stack (pid {pid}, beside \
         the server itself: the Ceph monitor) exited during the job"
    )]
    CompanionExited {
        /// The main server's name.
        server: &'static str,
        /// The companion's process id.
        pid: u32,
    },
    /// QEMU stopped the guest on a disk I/O error (libvirt's paused reason
    /// [`PausedReason::IoError`]).
    #[error("storage server lost: QEMU paused the domain on an I/O error")]
    PausedOnIoError,
}

/// Resolves once the cell's storage is lost: the embedded server's process or one of its
/// `companions` died, or QEMU paused the domain on an I/O error. Never resolves while all are
/// fine.
pub async fn storage_lost(
    dom: Arc<RunningDomain>,
    server: Option<(&'static str, u32)>,
    companions: Vec<u32>,
) -> StorageLoss {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if let Some((name, pid)) = server {
            if !crate::storage::cmd::pid_alive(pid) {
                return StorageLoss::ServerExited { name, pid };
            }
            if let Some(&c) = companions
                .iter()
                .find(|c| !crate::storage::cmd::pid_alive(**c))
            {
                return StorageLoss::CompanionExited {
                    server: name,
                    pid: c,
                };
            }
        }
        let d = dom.clone();
        let state = tokio::task::spawn_blocking(move || d.state()).await;
        if let Ok(DomainState::Paused(PausedReason::IoError)) = state {
            return StorageLoss::PausedOnIoError;
        }
    }
}

/// The domain's state when it explains a guest error: a domain that is gone or paused explains a
/// closed channel or a stall better than the channel itself can. `None` while it runs.
pub fn domain_note(dom: &RunningDomain) -> Option<DomainState> {
    Some(dom.state()).filter(|s| *s != DomainState::Running)
}

/// The words a guest error gets for the domain's state ([`domain_note`]).
pub fn describe_state(state: &DomainState) -> String {
    match state {
        DomainState::Running => "the domain is running".into(),
        DomainState::Gone => "the domain is gone: QEMU exited or was killed".into(),
        DomainState::Crashed => "the domain crashed".into(),
        DomainState::Paused(r) => format!("the domain is paused ({r})"),
        DomainState::Other(n) => format!("the domain is in state {n}"),
    }
}

/// When a running job last showed progress: the host saw the disk under test complete an I/O, or
/// the engine printed a status line with a non-zero rate. Shared between the job's event handler
/// and [`io_stalled`].
#[derive(Debug)]
pub struct Progress {
    since: Instant,
    last_ms: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            since: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Progress {
    /// Something moved now.
    pub fn touch(&self) {
        let now = self.since.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Time since the last progress (or since the watch began).
    pub fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last)
    }
}

/// Completed operations (reads + writes) in a counter snapshot.
fn ops(c: &DiskCounters) -> u64 {
    c.rd_ops.saturating_add(c.wr_ops)
}

/// How often the watchdog reads the disk's counters: often enough to fire within a few percent
/// of the limit, rarely enough to cost nothing (one QMP query; see scripts/bench-fidelity).
pub fn poll_interval(stall: Duration) -> Duration {
    (stall / 10).clamp(Duration::from_millis(500), Duration::from_secs(5))
}

/// Resolves with the idle time once neither the disk under test nor the engine has shown
/// progress for `stall`. `counters` reads the host-side counters of the disk under test; when
/// it cannot (`None`), the watchdog cannot tell a stall from a gap in its view and counts the
/// moment as progress, leaving the job's total limit to act.
pub async fn io_stalled<F>(counters: F, stall: Duration, progress: Arc<Progress>) -> Duration
where
    F: Fn() -> Option<DiskCounters> + Send + Sync + Clone + 'static,
{
    let mut tick = tokio::time::interval(poll_interval(stall));
    let mut last: Option<u64> = None;
    loop {
        tick.tick().await;
        let read = counters.clone();
        let now = tokio::task::spawn_blocking(read).await.ok().flatten();
        match now.as_ref().map(ops) {
            Some(n) if last == Some(n) => {}
            Some(n) => {
                last = Some(n);
                progress.touch();
            }
            None => progress.touch(),
        }
        let idle = progress.idle();
        if idle >= stall {
            return idle;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn counters(
        script: Vec<Option<u64>>,
    ) -> impl Fn() -> Option<DiskCounters> + Clone + Send + Sync {
        let s = Arc::new(Mutex::new(script.into_iter()));
        move || {
            let n = s.lock().unwrap().next().unwrap_or(Some(7))?;
            Some(DiskCounters {
                rd_ops: n,
                ..DiskCounters::default()
            })
        }
    }

    #[tokio::test]
    async fn moving_counters_never_fire() {
        let p = Arc::new(Progress::default());
        let script = (0..40).map(Some).collect();
        let r = tokio::time::timeout(
            Duration::from_millis(2500),
            io_stalled(counters(script), Duration::from_secs(1), p),
        )
        .await;
        assert!(r.is_err(), "fired while I/O completed: {r:?}");
    }

    #[tokio::test]
    async fn unreadable_counters_are_not_a_stall() {
        let p = Arc::new(Progress::default());
        let r = tokio::time::timeout(
            Duration::from_millis(2500),
            io_stalled(counters(vec![None; 40]), Duration::from_secs(1), p),
        )
        .await;
        assert!(r.is_err(), "fired without a view of the disk: {r:?}");
    }

    #[tokio::test]
    async fn still_counters_fire_and_say_how_long() {
        let p = Arc::new(Progress::default());
        let idle = tokio::time::timeout(
            Duration::from_secs(5),
            io_stalled(counters(vec![]), Duration::from_secs(1), p),
        )
        .await
        .expect("a stall of 1 s fires well within 5 s");
        assert!(idle >= Duration::from_secs(1), "{idle:?}");
        assert!(idle < Duration::from_millis(2000), "{idle:?}");
    }

    #[test]
    fn status_progress_resets_the_idle_time() {
        let p = Progress::default();
        std::thread::sleep(Duration::from_millis(30));
        assert!(p.idle() >= Duration::from_millis(30));
        p.touch();
        assert!(p.idle() < Duration::from_millis(30));
    }
}
