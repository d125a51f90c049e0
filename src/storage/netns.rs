//! A per-run network namespace for the embedded storage servers, joined to the host by a veth
//! pair with a link-local /30, optionally shaped with tc in both directions.
//!
//! Why a namespace even for an unshaped (`loopback`) link: each run gets its own addresses, so
//! two runs on one host never fight over NFS port 2049, rpcbind's port 111 or iSCSI's 3260, and
//! one run's cleanup finds only its own namespace (the name carries the run id).
//!
//! Names: the namespace is `vmbench-<run id>-<link>`; the veth ends are `vmb<8 hex>h` (host) and
//! `vmb<8 hex>n` (namespace), the hex a hash of the namespace name (interface names are limited
//! to 15 bytes). Deleting the namespace deletes its veth end, which deletes the pair and the
//! qdiscs on both ends; the nftables table that closes the link to other local users
//! ([`super::firewall`]) carries the namespace's name, so `vmbench cleanup` needs only that name.
//!
//! Shaping: tbf for the rate; with a delay, netem at the root and tbf as its child. On the host
//! end, the qdisc shapes host -> server (guest writes); on the namespace end, server -> host
//! (guest reads). The delay is one way, so the round trip gains twice it.

use super::cmd;
use super::firewall;
use super::StorageError;
use crate::cell::Link;
use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every namespace vmbench creates starts with this.
pub const PREFIX: &str = "vmbench-";
/// The server address in a dry run's plan (the real one is picked when the namespace is made).
pub const PLANNED_SERVER: &str = "169.254.NET.2";
/// Where `ip netns` keeps its namespace handles.
const NETNS_DIR: &str = "/run/netns";

/// The two ends of the link: the server listens on `server`, QEMU connects from `client`.
/// Every address an embedded server binds or admits, and every address QEMU connects to, is
/// read from here, so access rules follow the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAddrs {
    /// The namespace end (servers listen here).
    pub server: Ipv4Addr,
    /// The host end (QEMU, qemu-img and tgtadm's initiators come from here).
    pub client: Ipv4Addr,
}

/// A namespace we created; destroyed on drop (after the servers in it are stopped).
#[derive(Debug)]
pub struct NetNs {
    name: String,
    host_if: String,
    ns_if: String,
    addrs: LinkAddrs,
    link: Link,
}

impl NetNs {
    /// Creates `vmbench-<run>-<link>` with its veth pair and addresses, shaped as `link` says.
    /// Anything half made is removed again on failure.
    pub fn create(run: &str, link: Link) -> Result<NetNs, StorageError> {
        let name = ns_name(run, link);
        let (host_if, ns_if) = veth_names(&name);
        let addrs = free_subnet(&name, &host_addresses()?)?;
        let ns = NetNs {
            name,
            host_if,
            ns_if,
            addrs,
            link,
        };
        // From here on, Drop removes whatever exists.
        cmd::run_plan(&ns.setup_plan())?;
        firewall::install(&ns.name, &ns.host_if)?;
        // A qdisc this kernel lacks (netem, on some) is the host's limit, not a failed cell.
        cmd::run_plan(&ns.shaping_plan()).map_err(|e| {
            StorageError::Unsupported(super::Unsupported::NoShaping {
                link,
                detail: e.to_string(),
            })
        })?;
        Ok(ns)
    }

    /// The namespace's name (`ip netns exec NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address pair of the link.
    pub fn addrs(&self) -> LinkAddrs {
        self.addrs
    }

    /// The link it carries.
    pub fn link(&self) -> Link {
        self.link
    }

    /// `program` set to run inside the namespace. With `private_run`, it also gets its own
    /// mount namespace with `private_run` mounted on /run: rpcbind keeps its lock and socket
    /// there, and ganesha finds rpcbind through that socket, so a namespaced pair must not see
    /// (or replace) the host's.
    pub fn command(
        &self,
        program: &str,
        private_run: Option<&Path>,
    ) -> Result<Command, StorageError> {
        let handle = Path::new(NETNS_DIR).join(&self.name);
        let fd: OwnedFd = std::fs::File::open(&handle)
            .map_err(|source| StorageError::Io {
                context: format!("opening {}", handle.display()),
                source,
            })?
            .into();
        let run = private_run.map(cstring).transpose()?;
        let mut c = Command::new(program);
        // SAFETY: between fork and exec we only make system calls (setns, unshare, mount) on
        // values prepared before the fork; no allocation, no locks.
        unsafe {
            c.pre_exec(move || enter(&fd, run.as_ref()));
        }
        Ok(c)
    }

    /// Process ids still in the namespace.
    pub fn pids(&self) -> Vec<u32> {
        ns_pids(&self.name)
    }

    fn setup_plan(&self) -> Vec<Vec<String>> {
        let (n, h, i) = (&self.name, &self.host_if, &self.ns_if);
        let host = format!("{}/30", self.addrs.client);
        let server = format!("{}/30", self.addrs.server);
        let mtu = mtu(self.link).to_string();
        let plan = [
            vec!["ip", "netns", "add", n],
            vec!["ip", "link", "add", h, "type", "veth", "peer", "name", i],
            vec!["ip", "link", "set", i, "netns", n],
            vec!["ip", "addr", "add", &host, "dev", h],
            vec!["ip", "link", "set", h, "up"],
            vec!["ip", "-n", n, "addr", "add", &server, "dev", i],
            vec!["ip", "-n", n, "link", "set", i, "up"],
            vec!["ip", "-n", n, "link", "set", "lo", "up"],
            vec!["ip", "link", "set", h, "mtu", &mtu],
            vec!["ip", "-n", n, "link", "set", i, "mtu", &mtu],
        ];
        plan.map(|v| v.into_iter().map(String::from).collect())
            .to_vec()
    }

    fn shaping_plan(&self) -> Vec<Vec<String>> {
        shaping_plan(&self.name, &self.host_if, &self.ns_if, self.link)
    }

    /// Removes the veth pair and the namespace. Idempotent. Servers inside must be stopped
    /// first (a namespace with processes in it outlives `ip netns del`).
    pub fn destroy(&self) {
        destroy(&self.name);
    }
}

/// The tc commands for both ends of the link (none for an unshaped link).
fn shaping_plan(ns: &str, host_if: &str, ns_if: &str, link: Link) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (netns, dev) in [(None, host_if), (Some(ns), ns_if)] {
        for q in qdiscs(link) {
            let mut v: Vec<String> = vec!["tc".into()];
            if let Some(n) = netns {
                v.extend(["-n".into(), n.to_string()]);
            }
            v.extend(["qdisc", "add", "dev"].map(String::from));
            v.push(dev.to_string());
            v.extend(q);
            out.push(v);
        }
    }
    out
}

impl Drop for NetNs {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Whether this host can make a rate-shaped link closed to other local users (for `vmbench
/// doctor`): makes a namespace with a veth pair, the socket filter and tbf on both ends, then
/// removes it. Embedded servers need the namespace and the filter even on `loopback`.
pub fn probe() -> Result<String, String> {
    let a = probe_link("1gbit")?;
    Ok(format!(
        "namespace + veth + nftables owner filter (uids {:?}) + tbf work (e.g. {} <-> {})",
        firewall::allowed_uids(),
        a.client,
        a.server
    ))
}

/// Whether links with a delay (`RATE+DELAY`, netem under tbf) can be made here: some kernels
/// ship tbf without netem.
pub fn probe_delay() -> Result<String, String> {
    probe_link("1gbit+1ms").map(|_| "netem delays work".to_string())
}

fn probe_link(spec: &str) -> Result<LinkAddrs, String> {
    let link: Link = spec
        .parse()
        .map_err(|e: crate::cell::BadLink| e.to_string())?;
    let run = format!("doctor{}", std::process::id());
    let ns = NetNs::create(&run, link).map_err(|e| e.to_string())?;
    Ok(ns.addrs())
}

/// `vmbench-<run>-<link>`, with the link made name-safe.
pub fn ns_name(run: &str, link: Link) -> String {
    let l: String = link
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{PREFIX}{run}-{l}")
}

/// The host and namespace veth names for a namespace (15 bytes at most).
pub fn veth_names(ns: &str) -> (String, String) {
    let h = fnv(ns.as_bytes());
    (format!("vmb{h:08x}h"), format!("vmb{h:08x}n"))
}

/// Removes a namespace, the veth and the socket filter named after it, whether or not they
/// exist. Processes still inside must be stopped first.
pub fn destroy(ns: &str) {
    let (host_if, _) = veth_names(ns);
    firewall::remove(ns);
    let _ = cmd::run("ip", &["link", "del", &host_if]);
    let _ = cmd::run("ip", &["netns", "del", ns]);
}

/// Namespaces of ours (prefix [`PREFIX`]) whose name starts with `vmbench-<run>-`, or all of
/// ours with `run` = None.
pub fn list(run: Option<&str>) -> Vec<String> {
    let want = match run {
        Some(r) => format!("{PREFIX}{r}-"),
        None => PREFIX.to_string(),
    };
    std::fs::read_dir(NETNS_DIR)
        .map(|it| {
            it.flatten()
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .filter(|n| n.starts_with(&want))
                .collect()
        })
        .unwrap_or_default()
}

/// Process ids in namespace `ns` (`ip netns pids`).
pub fn ns_pids(ns: &str) -> Vec<u32> {
    cmd::run("ip", &["netns", "pids", ns])
        .map(|o| {
            o.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The veth MTU: an unshaped link stands in for loopback, so it gets (nearly) lo's 65536 and
/// costs as few packets per byte (veth's maximum is 65535); a shaped link stands in for an
/// Ethernet network and keeps 1500, which also keeps every packet under tbf's bucket.
fn mtu(link: Link) -> u32 {
    if link.is_shaped() {
        1500
    } else {
        65535
    }
}

/// The qdisc arguments (after `dev DEV`) for one end of `link`.
fn qdiscs(link: Link) -> Vec<Vec<String>> {
    let Link::Shaped { rate_bps, delay_us } = link else {
        return vec![];
    };
    // 10 ms worth of bytes (at least two jumbo-ish frames): a smaller bucket than one GSO
    // super-packet makes tbf split or drop it; a much larger one lets bursts exceed the rate.
    let burst = (rate_bps / 8 / 100).max(20_000);
    let tbf = |parent: &[&str]| -> Vec<String> {
        parent
            .iter()
            .map(|s| s.to_string())
            .chain([
                "tbf".into(),
                "rate".into(),
                format!("{rate_bps}bit"),
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                "100ms".into(),
            ])
            .collect()
    };
    if delay_us == 0 {
        return vec![tbf(&["root", "handle", "1:"])];
    }
    let netem = ["root", "handle", "1:", "netem", "delay"]
        .map(String::from)
        .into_iter()
        .chain([format!("{delay_us}us"), "limit".into(), "100000".into()])
        .collect();
    vec![netem, tbf(&["parent", "1:1", "handle", "10:"])]
}

/// The IPv4 addresses already on this host (from `ip -o -4 addr show`).
fn host_addresses() -> Result<Vec<Ipv4Addr>, StorageError> {
    let out = cmd::run("ip", &["-o", "-4", "addr", "show"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            it.position(|w| w == "inet")?;
            it.next()?.split('/').next()?.parse().ok()
        })
        .collect())
}

/// A /30 in 169.254.0.0/16 that no host address lies in, starting at a slot derived from the
/// namespace name (so concurrent runs start far apart) and moving on when taken. Skips
/// 169.254.0.x and 169.254.255.x (reserved by RFC 3927) and 169.254.169.x (cloud metadata).
fn free_subnet(ns: &str, taken: &[Ipv4Addr]) -> Result<LinkAddrs, StorageError> {
    const SLOTS: u32 = 254 * 64;
    let start = fnv(ns.as_bytes()) % SLOTS;
    (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .map(|s| (1 + s / 64, (s % 64) * 4))
        .filter(|(third, _)| *third != 169)
        .map(|(third, base)| {
            let a = |last: u32| Ipv4Addr::new(169, 254, third as u8, (base + last) as u8);
            LinkAddrs {
                client: a(1),
                server: a(2),
            }
        })
        .find(|p| !taken.iter().any(|t| same_30(*t, p.client)))
        .ok_or_else(|| StorageError::Invalid("no free /30 left in 169.254.0.0/16".into()))
}

fn same_30(a: Ipv4Addr, b: Ipv4Addr) -> bool {
    u32::from(a) >> 2 == u32::from(b) >> 2
}

/// FNV-1a: a stable hash for names (std's hasher is randomly seeded per process).
fn fnv(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ x as u32).wrapping_mul(0x0100_0193)
    })
}

fn cstring(p: &Path) -> Result<CString, StorageError> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| StorageError::Invalid(format!("path {} contains a NUL byte", p.display())))
}

/// Runs in the child between fork and exec: joins the network namespace, and with `run`, a
/// fresh mount namespace where `run` is bind-mounted over /run.
fn enter(netns: &OwnedFd, run: Option<&CString>) -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on a valid fd and NUL-terminated strings.
    unsafe {
        check(libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET))?;
        if let Some(run) = run {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // Keep our mounts from propagating back to the host's mount namespace.
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                run.as_ptr(),
                c"/run".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
        }
    }
    Ok(())
}

/// Where a namespaced server's private /run lives under its work dir.
pub fn private_run_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("run")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(s: &str) -> Link {
        s.parse().unwrap()
    }

    #[test]
    fn names_fit_and_carry_the_run() {
        let n = ns_name("20261203-134500-ab12", shaped("1gbit+0.5ms"));
        assert_eq!(n, "vmbench-20261203-134500-ab12-1gbit_500us");
        let (h, i) = veth_names(&n);
        assert!(h.len() <= 15 && i.len() <= 15, "{h} {i}");
        assert_ne!(h, i);
        assert_eq!(veth_names(&n), (h, i), "stable across processes");
    }

    #[test]
    fn subnets_are_link_local_30s_that_avoid_taken_ones() {
        let p = free_subnet("vmbench-a-loopback", &[]).unwrap();
        assert!(p.client.is_link_local() && p.server.is_link_local());
        assert!(same_30(p.client, p.server));
        assert_eq!(u32::from(p.client) & 3, 1);
        assert_ne!(p.client.octets()[2], 169);
        let q = free_subnet("vmbench-a-loopback", &[p.server]).unwrap();
        assert!(!same_30(q.client, p.client), "a taken /30 is skipped");
        let other = free_subnet("vmbench-b-loopback", &[]).unwrap();
        assert_ne!(other, p, "two runs start at different slots");
    }

    #[test]
    fn shaping_is_tbf_and_netem_on_both_ends() {
        let plan: Vec<String> = shaping_plan("vmbench-r-x", "vmbh", "vmbn", shaped("100mbit+2ms"))
            .iter()
            .map(|v| v.join(" "))
            .collect();
        assert_eq!(
            plan,
            [
                "tc qdisc add dev vmbh root handle 1: netem delay 2000us limit 100000",
                "tc qdisc add dev vmbh parent 1:1 handle 10: tbf rate 100000000bit burst 125000 latency 100ms",
                "tc -n vmbench-r-x qdisc add dev vmbn root handle 1: netem delay 2000us limit 100000",
                "tc -n vmbench-r-x qdisc add dev vmbn parent 1:1 handle 10: tbf rate 100000000bit burst 125000 latency 100ms",
            ]
        );
        assert!(shaping_plan("n", "h", "i", Link::Loopback).is_empty());
        let only_rate = qdiscs(shaped("1gbit"));
        assert_eq!(only_rate.len(), 1);
        assert_eq!(only_rate[0][..4], ["root", "handle", "1:", "tbf"]);
    }
}
