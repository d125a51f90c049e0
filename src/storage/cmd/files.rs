//! Files the embedded servers write: their configuration, and the logs their output goes to.

use crate::storage::StorageError;
use std::path::Path;

/// Writes `text` to `path`, the path named in the error.
pub fn write_file(path: &Path, text: &str) -> Result<(), StorageError> {
    std::fs::write(path, text).map_err(|source| StorageError::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}

/// Opens `log` for appending (created when absent): a server's output goes there and is kept
/// with the run, so a restart appends rather than losing the first one's lines.
pub fn open_log(log: &Path) -> Result<std::fs::File, StorageError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|source| StorageError::Io {
            context: format!("opening {}", log.display()),
            source,
        })
}
