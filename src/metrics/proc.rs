//! /proc readers: a process's CPU ticks and resident memory.

/// utime and stime of a process, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// User ticks.
    pub utime: u64,
    /// System ticks.
    pub stime: u64,
}

impl CpuTicks {
    /// (user %, system %) of one CPU over `secs` since `earlier`.
    pub fn since(&self, earlier: &CpuTicks, secs: f64) -> (f64, f64) {
        let hz = ticks_per_second() as f64;
        let pct = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / hz / secs * 100.0;
        (
            pct(self.utime, earlier.utime),
            pct(self.stime, earlier.stime),
        )
    }
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Reads /proc/PID/stat.
pub fn cpu_ticks(pid: u32) -> Option<CpuTicks> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a /proc/PID/stat line. The command name may contain spaces and parentheses, so fields
/// are counted from the last ')'.
pub fn parse_stat(line: &str) -> Option<CpuTicks> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state(0) ppid(1) ... utime is field 14 of the line, index 11 here.
    Some(CpuTicks {
        utime: f.get(11)?.parse().ok()?,
        stime: f.get(12)?.parse().ok()?,
    })
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&s, "VmRSS:")
}

/// A `Key:   N kB` field of /proc/PID/status.
pub fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let line = "1234 (qemu (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(
            parse_stat(line),
            Some(CpuTicks {
                utime: 250,
                stime: 75
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_some());
        assert!(rss_kib(me).unwrap() > 0);
    }

    #[test]
    fn cpu_percent_over_a_window() {
        let a = CpuTicks { utime: 0, stime: 0 };
        let hz = ticks_per_second();
        let b = CpuTicks {
            utime: hz,
            stime: hz / 2,
        };
        let (u, s) = b.since(&a, 2.0);
        assert!(
            (u - 50.0).abs() < 1e-9 && (s - 25.0).abs() < 1e-9,
            "{u} {s}"
        );
    }
}
