//! A cell for tests of the storage backends (unit and integration); not part of the API.

use crate::cell::{Backend, Cell, Format};

/// A QEMU cell on `backend` with `format` and default datapath settings.
pub fn cell(backend: Backend, format: Format) -> Cell {
    Cell {
        backend,
        format,
        ..Cell::default()
    }
}
