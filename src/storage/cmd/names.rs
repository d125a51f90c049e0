//! Run-unique tags for the names of things other runs must not reuse.

/// A process-unique, run-unique tag (`<pid>-<unix seconds>`) for names that other runs must
/// not reuse (IQNs, LV names).
pub fn run_tag() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{}-{secs}", std::process::id())
}

/// [`run_tag`] plus a process-wide counter: unique across backends and runs, for file and
/// volume names (two backends in the same second must not pick the same name).
pub fn unique_tag() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{}-{n}", run_tag())
}
