//! The libvirt connection: connect, start a transient domain, destroy, find leftovers.
