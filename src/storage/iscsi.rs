//! iscsi storage backend.
