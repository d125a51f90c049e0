//! toy backend, compiled in tests only (issue 25, "proof by extension"): a raw disk as a sparse
//! file in a scratch directory of the run (`<work>/toy`). No server, not networked, no libvirt
//! pool, no qemu-img: it needs nothing from the machine, so the planner, the dry run and this
//! file's own tests run anywhere.
//!
//! It was added by touching only `src/storage/` (this file, `#[cfg(test)] pub mod toy;` in
//! `mod.rs`, one arm in `kind.rs`'s `descriptor`) and the one `#[cfg(test)] Toy => "toy"` line
//! of the `Backend` dimension in `src/cell.rs`; see docs/architecture.md#adding-a-storage-backend.

use super::{cmd, DiskSource, ProvisionedDisk, StorageBackend, StorageError, Unsupported};
use crate::cell::{Backend, Cell, Format};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The scratch directory under the run's work directory.
const DIR: &str = "toy";

/// The scratch directory of a run whose work directory is `work`.
fn scratch(work: &Path) -> PathBuf {
    work.join(DIR)
}

/// Raw sparse files in one directory; `teardown` removes the files it made.
#[derive(Debug)]
pub struct ToyBackend {
    dir: PathBuf,
    /// Files made and not yet removed.
    created: Vec<PathBuf>,
}

impl ToyBackend {
    /// Disks in `dir` (made on first provision).
    pub fn new(dir: PathBuf) -> ToyBackend {
        ToyBackend {
            dir,
            created: Vec::new(),
        }
    }
}

impl StorageBackend for ToyBackend {
    /// Anything that can hold a file will do; only a non-directory in the way refuses.
    fn check(&self) -> Result<(), Unsupported> {
        match self.dir.ancestors().find(|a| a.exists()) {
            Some(a) if !a.is_dir() => Err(Unsupported::Dir(format!(
                "{} is not a directory",
                a.display()
            ))),
            _ => Ok(()),
        }
    }

    fn provision(
        &mut self,
        cell: &Cell,
        size_bytes: u64,
        _work: &Path,
    ) -> Result<ProvisionedDisk, StorageError> {
        self.check()?;
        if cell.format != Format::Raw {
            return Err(Unsupported::FormatRefused {
                backend: "toy",
                only: Format::Raw,
                asked: cell.format,
            }
            .into());
        }
        let io = |what: String| {
            move |source| StorageError::Io {
                context: what,
                source,
            }
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        let path = self.dir.join(super::image_name(&cmd::unique_tag(), cell));
        // Recorded before creating: a half-made file is removed by teardown too.
        self.created.push(path.clone());
        let f =
            std::fs::File::create_new(&path).map_err(io(format!("creating {}", path.display())))?;
        f.set_len(size_bytes)
            .map_err(io(format!("sizing {}", path.display())))?;
        let params = BTreeMap::from([
            ("toy_dir".to_string(), self.dir.display().to_string()),
            ("image".to_string(), path.display().to_string()),
        ]);
        Ok(ProvisionedDisk {
            source: DiskSource::File { path: path.clone() },
            format: Format::Raw,
            size_bytes,
            host_path: Some(path),
            params,
        })
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        while let Some(path) = self.created.last() {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(StorageError::Io {
                        context: format!("removing {}", path.display()),
                        source: e,
                    })
                }
                _ => {
                    self.created.pop();
                }
            }
        }
        Ok(())
    }
}

impl Drop for ToyBackend {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The `toy` backend's descriptor ([`super::BackendKind`]).
pub struct Kind;

/// The one instance [`super::descriptor`] hands out.
pub static KIND: Kind = Kind;

impl super::BackendKind for Kind {
    fn backend(&self) -> Backend {
        Backend::Toy
    }

    /// The file is made with this machine's filesystem calls, so a remote libvirt host would
    /// not see it.
    fn local_only(&self) -> Option<&'static str> {
        Some("toy cells run on this machine only (the file is made here)")
    }

    /// A sparse file is raw.
    fn formats(&self) -> &'static [Format] {
        &[Format::Raw]
    }

    fn plan_source(
        &self,
        _opts: &super::options::StorageConfig,
        cell: &Cell,
        work: &Path,
        _servers: &Path,
    ) -> DiskSource {
        DiskSource::File {
            path: scratch(work).join(super::image_name(super::PLANNED_TAG, cell)),
        }
    }

    fn open(
        &self,
        _opts: &super::options::StorageConfig,
        _cell: &Cell,
        _servers: &mut super::servers::Servers,
        work: &Path,
        _disks: &super::pool::PoolPlace,
    ) -> Result<super::Opened, super::servers::OpenError> {
        Ok(super::Opened::plain(Box::new(ToyBackend::new(scratch(
            work,
        )))))
    }

    fn host_support(&self) -> Result<String, String> {
        Ok("available (tests only: a sparse file in the run's work directory)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::testutil;

    /// The one variant line is the whole of it outside this folder: the dimension spells,
    /// parses and lists it, and the descriptor table answers for it.
    #[test]
    fn the_variant_line_is_all_the_dimension_needs() {
        assert_eq!(Backend::ALL.last(), Some(&Backend::Toy));
        assert_eq!(" toy ".parse::<Backend>().unwrap(), Backend::Toy);
        let e = "toys".parse::<Backend>().unwrap_err().to_string();
        assert!(e.ends_with("lvm, hostdir, rbd, toy)"), "{e}");
        let json = serde_json::to_string(&Backend::Toy).unwrap();
        assert_eq!(json, "\"toy\"");
        assert_eq!(
            serde_json::from_str::<Backend>(&json).unwrap(),
            Backend::Toy
        );
        let d = super::super::descriptor(Backend::Toy);
        assert_eq!(
            (d.name(), d.networked(), d.has_server()),
            ("toy", false, false)
        );
        assert!(!d.in_default_matrix() && d.local_only().is_some());
    }

    /// A raw file of the asked size where the plan said (up to the tag), gone after teardown,
    /// teardown twice is fine, and qcow2 is refused rather than faked.
    #[test]
    fn provisions_a_sparse_raw_file_and_teardown_removes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let cell = testutil::cell(Backend::Toy, Format::Raw);
        let opts = super::super::options::StorageConfig::default();
        let DiskSource::File { path: planned } =
            super::super::plan_source(&opts, &cell, &work, Path::new("/s"))
        else {
            panic!("the toy plans a file")
        };
        let mut b = ToyBackend::new(scratch(&work));
        b.check().unwrap();
        let disk = b.provision(&cell, 3 << 20, &work).unwrap();
        let DiskSource::File { path } = &disk.source else {
            panic!("{:?}", disk.source)
        };
        assert_eq!(path.parent(), planned.parent());
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("vmbench-") && name.ends_with(&format!("-{}.raw", cell.id())),
            "{name}"
        );
        assert_eq!(std::fs::metadata(path).unwrap().len(), 3 << 20);
        assert_eq!(disk.host_path.as_deref(), Some(path.as_path()));
        assert_eq!(disk.params["image"], path.display().to_string());
        b.teardown().unwrap();
        assert!(!path.exists());
        b.teardown().unwrap();
        let qcow2 = testutil::cell(Backend::Toy, Format::Qcow2);
        let e = b.provision(&qcow2, 1 << 20, &work).unwrap_err();
        assert!(matches!(e, StorageError::Unsupported(_)), "{e}");
    }
}
