//! block storage backend.
