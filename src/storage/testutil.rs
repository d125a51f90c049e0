//! A cell for tests of the storage backends (unit and integration); not part of the API.

use crate::cell::{Backend, Bus, CacheMode, Cell, Format, Hypervisor, IoMode, Layout, WorkloadId};

/// A QEMU cell on `backend` with `format` and default datapath settings.
pub fn cell(backend: Backend, format: Format) -> Cell {
    Cell {
        hypervisor: Hypervisor::Qemu,
        xen_mode: None,
        backend,
        format,
        bus: Bus::VirtioBlk,
        cache: CacheMode::None,
        io: IoMode::Native,
        layout: Layout::Raw,
        workload: WorkloadId::Preset("pg-randrw".into()),
        fio: Default::default(),
        tuning: Default::default(),
        host: Default::default(),
        link: Default::default(),
    }
}
