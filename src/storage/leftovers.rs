//! Finding what a killed vmbench run left behind (for `vmbench cleanup`): embedded servers
//! still running and iSCSI targets with our IQN prefix. Only things vmbench itself made are
//! reported: ganesha instances whose config file vmbench wrote, tgtd instances started the way
//! [`super::tgt::Tgt`] starts them.

use super::cmd;
use super::cmd::cmdline;
use super::tgt::{tgt_targets, IQN_PREFIX};
use std::path::PathBuf;

/// Something a run left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// A ganesha.nfsd running on a config vmbench wrote.
    Ganesha {
        /// Its process id.
        pid: u32,
        /// Its config file.
        conf: PathBuf,
    },
    /// A tgtd started by vmbench (foreground, own control port, portal in a run's namespace).
    Tgtd {
        /// Its process id.
        pid: u32,
        /// Its control port (`tgtadm -C`).
        ctl_port: u16,
        /// Targets on it with vmbench's IQN prefix.
        targets: Vec<(u32, String)>,
    },
}

/// Every vmbench server still running on this host.
pub fn find() -> Vec<Leftover> {
    let mut out = Vec::new();
    for pid in cmd::pids_named("ganesha.nfsd") {
        let args = cmdline(pid);
        let conf = flag_value(&args, "-f").map(PathBuf::from);
        if let Some(conf) = conf.filter(|c| written_by_vmbench(c)) {
            out.push(Leftover::Ganesha { pid, conf });
        }
    }
    for pid in cmd::pids_named("tgtd") {
        let args = cmdline(pid);
        // Started by vmbench: a portal in a run's namespace (169.254.x.x), or on loopback
        // (vmbench before namespaces).
        let ours = args
            .iter()
            .any(|a| a.starts_with("portal=169.254.") || a.starts_with("portal=127.0.0.1:"));
        let port = flag_value(&args, "-C").and_then(|p| p.parse::<u16>().ok());
        if let (true, Some(ctl_port)) = (ours, port) {
            let targets = tgt_targets(ctl_port)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, iqn)| iqn.starts_with(IQN_PREFIX))
                .collect();
            out.push(Leftover::Tgtd {
                pid,
                ctl_port,
                targets,
            });
        }
    }
    out
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

fn written_by_vmbench(conf: &std::path::Path) -> bool {
    std::fs::read_to_string(conf).is_ok_and(|t| t.starts_with("# Written by vmbench"))
}
