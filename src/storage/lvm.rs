//! lvm storage backend.
