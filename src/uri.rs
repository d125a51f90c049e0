//! libvirt connection URIs. Both the storage backends (whose pools live on a libvirt host) and
//! the hypervisors (whose domains do) ask whether a URI reaches this machine, so the answer lives
//! below both of them.

/// A URI without a host part (`qemu:///system`, `qemu+unix:///system`) reaches the libvirtd of
/// this machine. Any host, even 127.0.0.1, may be another namespace or machine: not local.
pub fn is_local_uri(uri: &str) -> bool {
    match uri.split_once("://") {
        Some((scheme, rest)) => {
            let transport = scheme.split_once('+').map(|(_, t)| t);
            rest.starts_with('/') && matches!(transport, None | Some("unix"))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_host_less_uris_are_local() {
        for uri in [
            "qemu:///system",
            "qemu:///session",
            "qemu+unix:///system",
            "xen:///system",
        ] {
            assert!(super::is_local_uri(uri), "{uri}");
        }
        for uri in [
            "qemu+ssh://host1/system",
            "qemu+tcp://10.0.0.2/system",
            "qemu+tcp://127.0.0.1/system",
            "qemu://host/system",
            "qemu+ssh:///system",
            "garbage",
        ] {
            assert!(!super::is_local_uri(uri), "{uri}");
        }
    }
}
