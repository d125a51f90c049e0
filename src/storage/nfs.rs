//! nfs storage backend.
