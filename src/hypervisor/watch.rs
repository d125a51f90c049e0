//! The production watch of a running cell: it fails the cell as soon as its storage server dies
//! or QEMU pauses the domain on an I/O error, instead of letting the guest hang until the job's
//! total timeout; and it explains a guest error by the domain's state.

use super::libvirt::{DomainState, RunningDomain};
use std::sync::Arc;
use std::time::Duration;

/// Resolves with a reason once the cell's storage is lost: the embedded server's process died, or
/// QEMU paused the domain on an I/O error. Never resolves while both are fine.
pub async fn storage_lost(dom: Arc<RunningDomain>, server: Option<(&'static str, u32)>) -> String {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if let Some((name, pid)) = server {
            if !crate::storage::cmd::pid_alive(pid) {
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
