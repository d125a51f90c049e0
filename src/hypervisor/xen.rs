//! Xen: datapath (phy, qdisk) per backend and format, and what Xen cannot do.
// TEMPORARY STUB (replaced by the domain-xml branch).
use crate::cell::{Backend, Format};

/// Datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datapath {
    /// phy
    Phy,
    /// qdisk
    Qdisk,
}

/// Why Xen cannot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Skip(pub String);

/// The datapath.
pub fn datapath(backend: Backend, format: Format, nfs_mounted: bool) -> Result<Datapath, Skip> {
    match (backend, format) {
        (Backend::Nfs, _) if !nfs_mounted => Err(Skip("no libnfs in libxl".into())),
        (Backend::Iscsi | Backend::Block | Backend::Lvm, Format::Raw) => Ok(Datapath::Phy),
        _ => Ok(Datapath::Qdisk),
    }
}
