//! Where a guest's vCPUs were when it never said hello, from QEMU's `info registers -a`. An empty
//! console says only that the guest printed nothing; the vCPUs say where it stopped: in the
//! firmware or before paging, in the kernel (with the other vCPUs never started: the nested KVM
//! here that cannot run a stock kernel stops before its console), halted (idle, waiting), or in
//! user space (the agent or a tool it ran).

/// QEMU's register dump of every vCPU, as an HMP command passed through QMP.
pub const INFO_REGISTERS: &str =
    r#"{"execute":"human-monitor-command","arguments":{"command-line":"info registers -a"}}"#;

/// The kernel's half of the x86-64 address space: an instruction pointer at or above it is in
/// the kernel.
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// One vCPU's state as `info registers` printed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VcpuAt {
    /// The vCPU's number (`CPU#N`).
    pub index: u32,
    /// RIP (or EIP in a 32-bit or real-mode state).
    pub ip: u64,
    /// Privilege level: 0 kernel or firmware, 3 user space.
    pub cpl: u8,
    /// Halted (`HLT=1`): idle, or not started yet.
    pub halted: bool,
    /// Paging on (CR0 bit 31): off means the firmware or the kernel's very first instructions.
    pub paging: bool,
}

impl VcpuAt {
    fn place(&self) -> &'static str {
        if !self.paging {
            // SeaBIOS parks the vCPUs the kernel has not started yet, halted with paging off;
            // the first one is never parked: halted there, the firmware or the kernel gave up.
            return match (self.halted, self.index) {
                (true, 0) => "halted before paging (the firmware or the kernel's first steps)",
                (true, _) => "halted in the firmware (not started by the kernel)",
                (false, _) => "in the firmware or the kernel's first steps (paging off)",
            };
        }
        match (self.cpl, self.halted, self.ip >= KERNEL_HALF) {
            (3, _, _) => "in user space",
            (_, true, _) => "halted (idle)",
            (_, false, true) => "running in the kernel",
            _ => "running",
        }
    }
}

impl std::fmt::Display for VcpuAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vCPU {} {} at {:#x}", self.index, self.place(), self.ip)
    }
}

/// The vCPUs in `info registers -a` output (its QMP reply's `return` text). Lines that do not
/// parse are skipped: the dump's format is QEMU's, not ours.
pub fn parse(text: &str) -> Vec<VcpuAt> {
    let mut out = Vec::new();
    let mut cur: Option<VcpuAt> = None;
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("CPU#") {
            out.extend(cur.take());
            cur = n.parse().ok().map(|index| VcpuAt {
                index,
                ..VcpuAt::default()
            });
        } else if let Some(v) = cur.as_mut() {
            read_line(v, line);
        }
    }
    out.extend(cur);
    out
}

fn read_line(v: &mut VcpuAt, line: &str) {
    for field in line.split_whitespace() {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key {
            "RIP" | "EIP" => v.ip = u64::from_str_radix(value, 16).unwrap_or(0),
            "CPL" => v.cpl = value.parse().unwrap_or(0),
            "HLT" => v.halted = value == "1",
            "CR0" => {
                v.paging = u64::from_str_radix(value, 16).is_ok_and(|cr0| cr0 & (1 << 31) != 0)
            }
            _ => {}
        }
    }
}

/// The vCPUs in a QMP reply to [`INFO_REGISTERS`]; none for an error or any other reply, so
/// the caller shows no vCPUs rather than failing the description of the boot.
pub fn parse_reply(json: &str) -> Vec<VcpuAt> {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("return")?.as_str().map(parse))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2's reply on this host 4 s after the start of a `type='kvm'` domain (nested KVM
    /// that cannot run a stock kernel; the guest printed nothing).
    const KVM_STUCK: &str = include_str!("../../tests/fixtures/info-registers-kvm-stuck.json");
    /// The same under TCG, 5 s after the start: the agent waits for the host, both vCPUs idle.
    const TCG_IDLE: &str = include_str!("../../tests/fixtures/info-registers-tcg-idle.json");

    #[test]
    fn a_stuck_kvm_guest_runs_in_the_kernel_with_the_other_vcpu_never_started() {
        let v = parse_reply(KVM_STUCK);
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0],
            VcpuAt {
                index: 0,
                ip: 0xffffffff8307957e,
                cpl: 0,
                halted: false,
                paging: true,
            }
        );
        assert_eq!(
            v[0].to_string(),
            "vCPU 0 running in the kernel at 0xffffffff8307957e"
        );
        assert_eq!(
            v[1].to_string(),
            "vCPU 1 halted in the firmware (not started by the kernel) at 0xfd09a"
        );
    }

    #[test]
    fn an_idle_tcg_guest_has_every_vcpu_halted_in_the_kernel() {
        let v = parse_reply(TCG_IDLE);
        assert_eq!(v.len(), 2);
        assert!(
            v.iter().all(|c| c.halted && c.paging && c.cpl == 0),
            "{v:?}"
        );
        assert_eq!(
            v[1].to_string(),
            "vCPU 1 halted (idle) at 0xffffffff81a592eb"
        );
    }

    #[test]
    fn user_space_and_garbage() {
        let v = parse("CPU#0\nRIP=00000000004012a0 RFL=00000246 CPL=3 II=0 HLT=0\nCR0=80050033\n");
        assert_eq!(v[0].to_string(), "vCPU 0 in user space at 0x4012a0");
        // The first vCPU halted before paging was not parked by the firmware: something gave up.
        let v = parse("CPU#0\nEIP=000fd09a EFL=00000002 CPL=0 II=0 HLT=1\nCR0=00000011\n");
        assert_eq!(
            v[0].to_string(),
            "vCPU 0 halted before paging (the firmware or the kernel's first steps) at 0xfd09a"
        );
        assert!(parse_reply("not json").is_empty());
        assert!(parse_reply(r#"{"return": 5}"#).is_empty());
        // A vCPU header without a number is no vCPU; its lines are skipped.
        assert!(parse("CPU#x\nRIP=1 CPL=0\n").is_empty());
    }
}
