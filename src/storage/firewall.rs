//! Only QEMU and vmbench reach the embedded servers: an nftables table per run namespace whose
//! output rule refuses every connection into the namespace's veth from a local socket owned by
//! anyone but root (vmbench, libvirtd, qemu-img) and the user libvirt runs QEMU as.
//!
//! Why a socket-owner filter: NFS with AUTH_SYS lets a client claim any uid, so ganesha cannot
//! tell QEMU from a local user who claims the export's uid; tgtd's CHAP needs the secret, but a
//! local user need not reach the portal at all. The host end of the veth is on this machine,
//! and the kernel knows which user owns every socket that sends through it (`meta skuid`).
//! Packets without a socket (the kernel's own resets and ACKs) do not match and pass.
//!
//! The table is named after the namespace (`vmbench-<run>-<link>`), added in one atomic
//! `nft -j -f -` transaction built with serde_json (never a rule string put together from
//! values), and deleted with the namespace, so `vmbench cleanup` after a `kill -9` finds it by
//! the same name. A refused TCP connection gets a reset and anything else an ICMP
//! "administratively prohibited", so a refused client fails at once instead of retrying.
//! Each rule counts what it refused ([`refused`]).

use super::cmd;
use super::{StorageError, Unsupported};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// Where libvirt's QEMU driver says which user QEMU runs as.
const QEMU_CONF: &str = "/etc/libvirt/qemu.conf";
/// The user QEMU runs as when qemu.conf does not say (Debian's build of libvirt, then Fedora's).
const DEFAULT_QEMU_USERS: [&str; 2] = ["libvirt-qemu", "qemu"];
/// The chain in each table.
const CHAIN: &str = "out";

/// The uids whose sockets may reach the servers: root (vmbench and the tools it runs, libvirtd)
/// and QEMU's user, when it is not root and can be found.
pub fn allowed_uids() -> Vec<u32> {
    let mut uids = vec![0];
    let conf = std::fs::read_to_string(QEMU_CONF).unwrap_or_default();
    if let Some(uid) = qemu_uid(&conf, |name| {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    }) {
        if uid != 0 {
            uids.push(uid);
        }
    }
    uids
}

/// QEMU's uid from qemu.conf's `user = "NAME"` (or `"+N"`), else the first default user that
/// exists; `lookup` maps a user name to its uid.
fn qemu_uid(conf: &str, lookup: impl Fn(&str) -> Option<u32>) -> Option<u32> {
    let configured = conf.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "user").then(|| value.trim().trim_matches('"').to_string())
    });
    match configured {
        Some(v) => match v.strip_prefix('+') {
            Some(n) => n.parse().ok(),
            None => lookup(&v),
        },
        None => DEFAULT_QEMU_USERS.iter().find_map(|u| lookup(u)),
    }
}

/// The nftables JSON that adds table `table` with the owner filter on `host_if`.
pub fn ruleset(table: &str, host_if: &str, uids: &[u32]) -> Value {
    let base = |tail: Vec<Value>| {
        let mut expr = vec![
            json!({"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": host_if}}),
            json!({"match": {"op": "!=", "left": {"meta": {"key": "skuid"}}, "right": {"set": uids}}}),
        ];
        expr.extend(tail);
        json!({"add": {"rule": {"family": "inet", "table": table, "chain": CHAIN, "expr": expr}}})
    };
    json!({"nftables": [
        {"add": {"table": {"family": "inet", "name": table}}},
        {"add": {"chain": {"family": "inet", "table": table, "name": CHAIN, "type": "filter",
                           "hook": "output", "prio": 0, "policy": "accept"}}},
        base(vec![
            json!({"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}),
            json!({"counter": null}),
            json!({"reject": {"type": "tcp reset"}}),
        ]),
        base(vec![
            json!({"counter": null}),
            json!({"reject": {"type": "icmpx", "expr": "admin-prohibited"}}),
        ]),
    ]})
}

/// Adds the filter for namespace `ns` whose host end is `host_if`. A host that cannot (no
/// `nft`, no nf_tables) makes the embedded servers unsupported rather than open.
pub fn install(ns: &str, host_if: &str) -> Result<(), StorageError> {
    let rules = ruleset(ns, host_if, &allowed_uids());
    nft_stdin(&rules.to_string()).map_err(|e| {
        StorageError::Unsupported(Unsupported::NoFirewall {
            detail: e.to_string(),
        })
    })
}

/// Deletes namespace `ns`'s table; true when it existed.
pub fn remove(ns: &str) -> bool {
    cmd::run("nft", &["delete", "table", "inet", ns]).is_ok()
}

/// Packets the filter of namespace `ns` refused so far (None when there is no such table).
pub fn refused(ns: &str) -> Option<u64> {
    let out = cmd::run("nft", &["-j", "list", "table", "inet", ns]).ok()?;
    Some(counted_packets(&serde_json::from_str(&out).ok()?))
}

/// The sum of the rule counters in `nft -j list` output.
fn counted_packets(listing: &Value) -> u64 {
    let rules = listing["nftables"].as_array().into_iter().flatten();
    rules
        .filter_map(|o| o["rule"]["expr"].as_array())
        .flatten()
        .filter_map(|e| e["counter"]["packets"].as_u64())
        .sum()
}

/// Runs `nft -j -f -` with `script` on stdin.
fn nft_stdin(script: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-j", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft (package nftables): {e}"))?;
    let written = child
        .stdin
        .take()
        .map(|mut s| s.write_all(script.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if let Some(Err(e)) = written {
        return Err(format!("writing the ruleset to nft: {e}"));
    }
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "nft -j -f -: {}: {}",
        out.status,
        cmd::tail_text(&String::from_utf8_lossy(&out.stderr), 6)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_user_comes_from_qemu_conf_or_the_defaults() {
        let lookup = |n: &str| match n {
            "libvirt-qemu" => Some(64055),
            "qemu" => Some(107),
            "bench" => Some(2000),
            _ => None,
        };
        assert_eq!(qemu_uid("# user = \"root\"\n", lookup), Some(64055));
        assert_eq!(
            qemu_uid("user = \"bench\"\ngroup = \"kvm\"\n", lookup),
            Some(2000)
        );
        assert_eq!(qemu_uid("user = \"+77\"\n", lookup), Some(77));
        assert_eq!(qemu_uid("user = \"nosuch\"\n", lookup), None);
        assert_eq!(qemu_uid("", |n| (n == "qemu").then_some(107)), Some(107));
    }

    #[test]
    fn the_ruleset_filters_one_interface_by_socket_owner() {
        let r = ruleset("vmbench-r-loopback", "vmb0123abcdh", &[0, 64055]);
        let cmds = r["nftables"].as_array().unwrap();
        assert_eq!(cmds.len(), 4);
        assert_eq!(cmds[0]["add"]["table"]["name"], "vmbench-r-loopback");
        assert_eq!(cmds[1]["add"]["chain"]["hook"], "output");
        assert_eq!(cmds[1]["add"]["chain"]["policy"], "accept");
        for rule in &cmds[2..] {
            let expr = rule["add"]["rule"]["expr"].as_array().unwrap();
            assert_eq!(expr[0]["match"]["right"], "vmb0123abcdh");
            assert_eq!(expr[1]["match"]["op"], "!=");
            assert_eq!(expr[1]["match"]["right"]["set"], json!([0, 64055]));
            assert!(expr.last().unwrap().get("reject").is_some());
        }
    }

    #[test]
    fn refusals_are_the_sum_of_the_counters() {
        // `nft -j list table inet vmbench-test-x` (nft 1.0.6) after one refused TCP connection
        // and two refused UDP datagrams.
        let listing: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/nft-1.0.6-list-table.json"
        ))
        .unwrap();
        assert_eq!(counted_packets(&listing), 3);
        assert_eq!(counted_packets(&json!({})), 0);
    }
}
