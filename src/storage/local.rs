//! local storage backend.
