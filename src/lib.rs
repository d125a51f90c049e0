//! vmbench: benchmarks storage as a virtual machine sees it.
//!
//! A matrix of [`cell::Cell`]s (hypervisor x backend x format x bus x cache/io x workload) is
//! expanded (`matrix`), each cell's disk is provisioned (`storage`), a guest is booted through
//! libvirt (`hypervisor`) from the vmbench image (`image`), the agent in it runs the engine
//! (`guest`, `workload`), host-side figures are taken over the same window (`metrics`), and the
//! record is stored (`results`), reported (`report`) and compared (`compare`).

/// What `vmbench --version` and every run's provenance say: the package version and the git
/// commit it was built from (build.rs), e.g. `0.1.0 (git 1998511a41f5)`.
pub const VERSION: &str = env!("VMBENCH_VERSION");

pub mod cell;
pub mod cleanup;
pub mod cli;
pub mod compare;
pub mod doctor;
pub mod error;
pub mod guest;
pub mod hypervisor;
pub mod image;
pub mod matrix;
pub mod metrics;
pub mod report;
pub mod results;
pub mod storage;
pub mod trend;
pub mod uri;
pub mod workload;
