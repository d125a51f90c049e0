//! Helpers shared by the backends and servers, by concern: running programs ([`run`]),
//! processes ([`process`]), server files ([`files`]), readiness waits ([`ready`]), qemu-img ([`qemu_img`]) and unique
//! names ([`names`]). Everything is re-exported here, so callers write `cmd::run(...)`.

pub mod files;
pub mod names;
pub mod process;
pub mod qemu_img;
pub mod ready;
pub mod run;

pub use files::*;
pub use names::*;
pub use process::*;
pub use qemu_img::*;
pub use ready::*;
pub use run::*;
