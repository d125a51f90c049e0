//! libvirt storage pools: every file vmbench puts on a libvirt host (the disk under test of a
//! `local` cell, the guest kernel and initramfs on a remote host) is a volume of a transient
//! `dir` pool, made through the libvirt connection, so the same code serves `qemu:///system`
//! and `qemu+tcp://host2/system` and nothing here touches the host's filesystem directly.
//!
//! Pools are transient (`virStoragePoolCreateXML` with the build flag, which makes the directory
//! with [`DIR_MODE`]): libvirt forgets them when they are destroyed or the host reboots (an
//! active one survives a libvirtd restart), and the files stay where they are. A cell's disk pool is made for the cell and destroyed at
//! its teardown; `vmbench cleanup` destroys the pools of a killed run by their name prefix
//! (`vmbench-<run id>-`, [`pool_prefix`]).
//!
//! On a libvirt host that is not this machine, vmbench's directory there ([`DEFAULT_HOST_DIR`],
//! or `--host-pool-dir NAME=DIR`) holds the content-addressed kernel and initramfs volumes
//! (kept, reused by later runs while unchanged) and one directory per run and host for the
//! disks, removed at the end of the run as a `dir` volume of that images pool.
//!
//! Preallocation goes through libvirt's own mapping (libvirt 9.0, `storage_util.c`, checked
//! with `qemu-img info` in `tests/storage_pools.rs`):
//! - raw: `<allocation>` equal to the capacity makes libvirt `fallocate` the file (zeros written
//!   only where the filesystem has no fallocate); 0 leaves it sparse. libvirt refuses the
//!   metadata flag for raw, so `metadata` on raw is `off` (as with qemu-img).
//! - qcow2: without `VIR_STORAGE_VOL_CREATE_PREALLOC_METADATA` nothing is preallocated; with it,
//!   qemu-img gets `preallocation=metadata` when the allocation is below the capacity and
//!   `preallocation=falloc` when it equals it. libvirt cannot ask for qemu-img's `full`.
//!
//! So raw `full` is made as qemu-img made it: `fallocate`d, then zeros written over it with
//! `virStorageVolWipe` (see [`VolumePlan::zero_fill`]); qcow2 `full` is `falloc` (unwritten
//! extents), the closest libvirt can ask for. The cell's params record what libvirt was asked
//! for ([`VolumePlan::params`]).

use super::local::Prealloc;
use crate::cell::Format;
use quick_xml::se::{QuoteLevel, SeError, Serializer};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use virt::connect::Connect;
use virt::storage_pool::StoragePool;
use virt::storage_vol::StorageVol;
use virt::stream::Stream;
use virt::sys;

/// vmbench's directory on a libvirt host that is not this machine, unless the host's
/// `--host-pool-dir` says otherwise. A subdirectory, not libvirt's `images` directory itself,
/// since libvirt's `default` pool usually has that target and two pools cannot share one.
pub const DEFAULT_HOST_DIR: &str = "/var/lib/libvirt/images/vmbench";

/// Mode of every pool directory vmbench makes: QEMU runs as `libvirt-qemu` and must traverse
/// it; libvirt relabels the volumes, not their directories.
pub const DIR_MODE: &str = "0711";

/// The name prefix of every pool of run `run_id` (what `vmbench cleanup` looks for).
pub fn pool_prefix(run_id: &str) -> String {
    format!("vmbench-{run_id}-")
}

/// Suffix of the pool over a host's vmbench directory (kernel and initramfs volumes): its
/// volumes are a cache and are never deleted by cleanup.
pub const IMAGES_POOL_SUFFIX: &str = "images";

/// A libvirt storage call that failed, or a pool or volume that cannot be described.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A libvirt call failed.
    #[error("libvirt storage on {uri}: {action}: {message}")]
    Libvirt {
        /// The host's URI.
        uri: String,
        /// What was being done.
        action: String,
        /// libvirt's message.
        message: String,
    },
    /// A name or path libvirt's XML cannot carry, or one that must be absolute.
    #[error("{what} {value:?} is invalid: {why}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The serializer failed (a bug: the structs are fixed).
    #[error("serializing the {0} XML")]
    Serialize(&'static str, #[source] SeError),
    /// A local file to upload could not be read.
    #[error("reading {path}: {source}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn call_err(uri: &str, action: impl Into<String>) -> impl FnOnce(virt::error::Error) -> PoolError {
    let (uri, action) = (uri.to_string(), action.into());
    move |e| PoolError::Libvirt {
        uri,
        action,
        message: e.message().to_string(),
    }
}

/// A libvirt host's storage, as vmbench names it: the URI, the directory a pool is made on there
/// (a path on THAT host) and the prefix of the pools' names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlace {
    /// The libvirt URI of the host.
    pub uri: String,
    /// The pool's target directory, on the libvirt host.
    pub dir: PathBuf,
    /// Pool names start with this ([`pool_prefix`]).
    pub prefix: String,
}

// ---- XML -------------------------------------------------------------------------------------

#[derive(Serialize)]
struct PoolXml<'a> {
    #[serde(rename = "@type")]
    kind: &'static str,
    name: &'a str,
    target: PoolTarget<'a>,
}

#[derive(Serialize)]
struct PoolTarget<'a> {
    path: &'a str,
    permissions: Permissions,
}

#[derive(Serialize)]
struct Permissions {
    mode: &'static str,
}

#[derive(Serialize)]
struct VolumeXml<'a> {
    name: &'a str,
    capacity: Bytes,
    allocation: Bytes,
    target: VolumeTarget,
    #[serde(rename = "backingStore", skip_serializing_if = "Option::is_none")]
    backing: Option<BackingXml<'a>>,
}

/// A qcow2 volume's backing file (libvirt runs `qemu-img create -b PATH -F FORMAT`).
#[derive(Serialize)]
struct BackingXml<'a> {
    path: &'a str,
    format: FormatType,
}

#[derive(Serialize)]
struct Bytes {
    #[serde(rename = "@unit")]
    unit: &'static str,
    #[serde(rename = "$text")]
    value: u64,
}

impl Bytes {
    fn new(value: u64) -> Bytes {
        Bytes {
            unit: "bytes",
            value,
        }
    }
}

#[derive(Serialize)]
struct VolumeTarget {
    format: FormatType,
}

#[derive(Serialize)]
struct FormatType {
    #[serde(rename = "@type")]
    kind: &'static str,
}

fn to_xml(root: &'static str, value: &impl Serialize) -> Result<String, PoolError> {
    let mut out = String::new();
    let mut ser =
        Serializer::with_root(&mut out, Some(root)).map_err(|e| PoolError::Serialize(root, e))?;
    ser.indent(' ', 2);
    ser.set_quote_level(QuoteLevel::Full);
    value
        .serialize(ser)
        .map_err(|e| PoolError::Serialize(root, e))?;
    out.push('\n');
    Ok(out)
}

/// A pool or volume name libvirt accepts: non-empty, no `/`, no control characters.
fn check_name(what: &'static str, name: &str) -> Result<(), PoolError> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(PoolError::Invalid {
        what,
        value: name.to_string(),
        why,
    })
}

/// An absolute UTF-8 path without control characters, as libvirt's XML needs it.
fn check_path<'p>(what: &'static str, p: &'p Path) -> Result<&'p str, PoolError> {
    let bad = |why| PoolError::Invalid {
        what,
        value: p.display().to_string(),
        why,
    };
    let s = p.to_str().ok_or_else(|| bad("it is not UTF-8"))?;
    if !p.is_absolute() {
        return Err(bad("it must be absolute"));
    }
    if s.chars().any(char::is_control) {
        return Err(bad("it contains a control character"));
    }
    Ok(s)
}

/// The `<pool type='dir'>` XML of a pool named `name` on directory `dir` (made 0711 by build).
pub fn pool_xml(name: &str, dir: &Path) -> Result<String, PoolError> {
    check_name("pool name", name)?;
    let path = check_path("pool directory", dir)?;
    to_xml(
        "pool",
        &PoolXml {
            kind: "dir",
            name,
            target: PoolTarget {
                path,
                permissions: Permissions { mode: DIR_MODE },
            },
        },
    )
}

/// What libvirt is asked for to make one volume: its XML and its create flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePlan {
    /// The volume (file) name.
    pub name: String,
    /// raw or qcow2.
    pub format: Format,
    /// Size the guest sees, in bytes.
    pub capacity: u64,
    /// libvirt's `<allocation>`, in bytes.
    pub allocation: u64,
    /// Whether `VIR_STORAGE_VOL_CREATE_PREALLOC_METADATA` is passed.
    pub prealloc_flag: bool,
    /// Whether zeros are written over the whole volume after it is made (`virStorageVolWipe`,
    /// zero algorithm): raw `full`. libvirt's `fallocate` leaves unwritten extents, whose first
    /// write converts them (a metadata update per extent), so a benchmark of a `full` image
    /// would measure that conversion; qemu-img's `full`, which vmbench's `full` means, writes
    /// zeros. A qcow2 cannot be wiped (the header would go), so qcow2 `full` stays `falloc`.
    pub zero_fill: bool,
    /// A raw backing file on the libvirt host (a qcow2 overlay on the run's base), or `None`.
    pub backing: Option<PathBuf>,
}

impl VolumePlan {
    /// The volume for `prealloc` (see the module doc for libvirt's mapping).
    pub fn new(name: &str, format: Format, prealloc: Prealloc, capacity: u64) -> VolumePlan {
        let p = prealloc.effective(format);
        VolumePlan {
            name: name.to_string(),
            format,
            capacity,
            allocation: if p == Prealloc::Full { capacity } else { 0 },
            prealloc_flag: format == Format::Qcow2 && p != Prealloc::Off,
            zero_fill: format == Format::Raw && p == Prealloc::Full,
            backing: None,
        }
    }

    /// A sparse qcow2 of `capacity` whose backing file is the raw `base` (Nova's `qcow2`
    /// images type): reads of what the guest has not written fall through to the base.
    pub fn overlay(name: &str, capacity: u64, base: &Path) -> VolumePlan {
        VolumePlan {
            backing: Some(base.to_path_buf()),
            ..VolumePlan::new(name, Format::Qcow2, Prealloc::Off, capacity)
        }
    }

    /// A plain raw volume of `bytes` (an uploaded file).
    pub fn raw_file(name: &str, bytes: u64) -> VolumePlan {
        VolumePlan::new(name, Format::Raw, Prealloc::Off, bytes)
    }

    /// The `<volume>` XML.
    pub fn xml(&self) -> Result<String, PoolError> {
        check_name("volume name", &self.name)?;
        to_xml(
            "volume",
            &VolumeXml {
                name: &self.name,
                capacity: Bytes::new(self.capacity),
                allocation: Bytes::new(self.allocation),
                target: VolumeTarget {
                    format: FormatType {
                        kind: self.format.as_str(),
                    },
                },
                backing: match &self.backing {
                    Some(p) => Some(BackingXml {
                        path: p.to_str().ok_or_else(|| PoolError::Invalid {
                            what: "backing file",
                            value: p.display().to_string(),
                            why: "not UTF-8",
                        })?,
                        format: FormatType { kind: "raw" },
                    }),
                    None => None,
                },
            },
        )
    }

    /// `virStorageVolCreateXML`'s flags.
    pub fn flags(&self) -> u32 {
        if self.prealloc_flag {
            sys::VIR_STORAGE_VOL_CREATE_PREALLOC_METADATA
        } else {
            0
        }
    }

    /// What libvirt does with it: `sparse`, `metadata` (qemu-img preallocation=metadata),
    /// `falloc` (fallocate, or qemu-img preallocation=falloc) or `zeroed` (fallocate, then
    /// zeros written: qemu-img's `full`).
    pub fn method(&self) -> &'static str {
        match (self.allocation > 0, self.prealloc_flag, self.zero_fill) {
            (_, _, true) => "zeroed",
            (false, false, _) => "sparse",
            (false, true, _) => "metadata",
            (true, _, _) => "falloc",
        }
    }

    /// The cell params saying what libvirt was asked for.
    pub fn params(&self) -> [(String, String); 3] {
        [
            ("libvirt_allocation".into(), self.allocation.to_string()),
            (
                "libvirt_prealloc_flag".into(),
                if self.prealloc_flag {
                    "metadata"
                } else {
                    "none"
                }
                .into(),
            ),
            ("preallocation_method".into(), self.method().into()),
        ]
    }
}

// ---- Connection and pools ----------------------------------------------------------------------

/// A connection of its own for storage calls (closed on drop): a cell's disk outlives a
/// reconnect of the runner's connection, and teardown must work whichever one died.
pub struct HostConn {
    conn: Connect,
    uri: String,
}

impl HostConn {
    /// Opens `uri`.
    pub fn open(uri: &str) -> Result<HostConn, PoolError> {
        virt::error::clear_error_callback();
        let conn = Connect::open(Some(uri)).map_err(call_err(uri, "connect"))?;
        Ok(HostConn {
            conn,
            uri: uri.to_string(),
        })
    }

    /// The URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Names of every pool (active or not) whose name starts with `prefix`.
    pub fn pools_named(&self, prefix: &str) -> Result<Vec<String>, PoolError> {
        let all = self
            .conn
            .list_all_storage_pools(0)
            .map_err(call_err(&self.uri, "list storage pools"))?;
        Ok(all
            .iter()
            .filter_map(|p| p.get_name().ok())
            .filter(|n| n.starts_with(prefix))
            .collect())
    }
}

impl Drop for HostConn {
    fn drop(&mut self) {
        let _ = self.conn.close();
    }
}

/// A `dir` pool in use by vmbench. When `owned` (vmbench created it), dropping it destroys it;
/// a borrowed one (another pool already had the directory) is left alone.
pub struct DirPool {
    pool: Option<StoragePool>,
    name: String,
    dir: PathBuf,
    owned: bool,
    conn: HostConn,
}

impl std::fmt::Debug for DirPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirPool")
            .field("uri", &self.conn.uri)
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("owned", &self.owned)
            .finish()
    }
}

impl DirPool {
    /// Creates the transient pool `name` on `dir` of `uri`, building (mkdir, 0711) the
    /// directory and its parents if needed.
    pub fn create(uri: &str, name: &str, dir: &Path) -> Result<DirPool, PoolError> {
        let xml = pool_xml(name, dir)?;
        let conn = HostConn::open(uri)?;
        let pool =
            StoragePool::create_xml(&conn.conn, &xml, sys::VIR_STORAGE_POOL_CREATE_WITH_BUILD)
                .map_err(call_err(
                    uri,
                    format!("create pool {name} on {}", dir.display()),
                ))?;
        Ok(DirPool {
            pool: Some(pool),
            name: name.to_string(),
            dir: dir.to_path_buf(),
            owned: true,
            conn,
        })
    }

    /// The pool `name` through a fresh connection (after the old one died: libvirtd keeps an
    /// active transient pool across its own restart), or, when it is gone (a host reboot),
    /// a new pool of that name on `dir`.
    pub fn reopen(uri: &str, name: &str, dir: &Path) -> Result<DirPool, PoolError> {
        let conn = HostConn::open(uri)?;
        match StoragePool::lookup_by_name(&conn.conn, name) {
            Ok(pool) if pool.is_active().unwrap_or(false) => {
                pool.refresh(0)
                    .map_err(call_err(uri, format!("refresh pool {name}")))?;
                Ok(DirPool {
                    pool: Some(pool),
                    name: name.to_string(),
                    dir: dir.to_path_buf(),
                    owned: true,
                    conn,
                })
            }
            _ => DirPool::create(uri, name, dir),
        }
    }

    /// [`DirPool::create`], or, when an active pool already has `dir` as its target (another
    /// run's, or the host's own), that pool, borrowed and refreshed.
    pub fn create_or_borrow(uri: &str, name: &str, dir: &Path) -> Result<DirPool, PoolError> {
        let created = match DirPool::create(uri, name, dir) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        let conn = HostConn::open(uri)?;
        let path = check_path("pool directory", dir)?;
        let Ok(pool) = StoragePool::lookup_by_target_path(&conn.conn, path) else {
            return Err(created);
        };
        if !pool.is_active().unwrap_or(false) {
            return Err(created);
        }
        pool.refresh(0).map_err(call_err(
            uri,
            format!("refresh the pool on {}", dir.display()),
        ))?;
        Ok(DirPool {
            name: pool.get_name().unwrap_or_default(),
            pool: Some(pool),
            dir: dir.to_path_buf(),
            owned: false,
            conn,
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool's directory (on its libvirt host).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The libvirt host's URI.
    pub fn uri(&self) -> &str {
        &self.conn.uri
    }

    fn pool(&self) -> Result<&StoragePool, PoolError> {
        self.pool.as_ref().ok_or_else(|| PoolError::Libvirt {
            uri: self.conn.uri.clone(),
            action: format!("use pool {}", self.name),
            message: "the pool was already destroyed".into(),
        })
    }

    /// Makes a volume as `plan` says; returns its path on the libvirt host.
    pub fn create_volume(&self, plan: &VolumePlan) -> Result<PathBuf, PoolError> {
        let xml = plan.xml()?;
        let uri = &self.conn.uri;
        let vol = StorageVol::create_xml(self.pool()?, &xml, plan.flags())
            .map_err(call_err(uri, format!("create volume {}", plan.name)))?;
        if plan.zero_fill {
            if let Err(e) = vol.wipe_pattern(sys::VIR_STORAGE_VOL_WIPE_ALG_ZERO, 0) {
                // Not left half-made: the caller only tears down volumes it was given.
                let _ = vol.delete(0);
                return Err(call_err(
                    uri,
                    format!("write zeros over volume {}", plan.name),
                )(e));
            }
        }
        vol.get_path()
            .map(PathBuf::from)
            .map_err(call_err(uri, format!("path of volume {}", plan.name)))
    }

    /// The volume `name` (path and capacity in bytes), if the pool has it.
    pub fn volume(&self, name: &str) -> Result<Option<(PathBuf, u64)>, PoolError> {
        let uri = &self.conn.uri;
        let vol = match StorageVol::lookup_by_name(self.pool()?, name) {
            Ok(v) => v,
            Err(e) if e.code() == virt::error::ErrorNumber::NoStorageVolume => return Ok(None),
            Err(e) => return Err(call_err(uri, format!("look up volume {name}"))(e)),
        };
        let path = vol
            .get_path()
            .map_err(call_err(uri, format!("path of volume {name}")))?;
        let info = vol
            .get_info()
            .map_err(call_err(uri, format!("size of volume {name}")))?;
        Ok(Some((PathBuf::from(path), info.capacity)))
    }

    /// Deletes the volume `name` (a file, or an empty directory); false when there is none.
    pub fn delete_volume(&self, name: &str) -> Result<bool, PoolError> {
        let uri = &self.conn.uri;
        match StorageVol::lookup_by_name(self.pool()?, name) {
            Ok(v) => v
                .delete(0)
                .map(|()| true)
                .map_err(call_err(uri, format!("delete volume {name}"))),
            Err(e) if e.code() == virt::error::ErrorNumber::NoStorageVolume => Ok(false),
            Err(e) => Err(call_err(uri, format!("look up volume {name}"))(e)),
        }
    }

    /// Copies the local file `src` into a new raw volume `name` through a libvirt stream
    /// (`virStorageVolUpload`); returns the volume's path on the libvirt host.
    pub fn upload(&self, name: &str, src: &Path) -> Result<PathBuf, PoolError> {
        let read_err = |source| PoolError::Read {
            path: src.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(src).map_err(read_err)?;
        let len = file.metadata().map_err(read_err)?.len();
        let path = self.create_volume(&VolumePlan::raw_file(name, len))?;
        let sent = self.send_file(name, &mut file, len);
        if sent.is_err() {
            // A half-written volume must not be taken for the file by the next lookup.
            let _ = self.delete_volume(name);
        }
        sent.map(|()| path)
    }

    fn send_file(&self, name: &str, file: &mut std::fs::File, len: u64) -> Result<(), PoolError> {
        let uri = &self.conn.uri;
        let err = |what: &str| call_err(uri, format!("{what} volume {name}"));
        let vol = StorageVol::lookup_by_name(self.pool()?, name).map_err(err("look up"))?;
        let stream = Stream::new(&self.conn.conn, 0).map_err(err("open a stream for"))?;
        vol.upload(&stream, 0, len, 0)
            .map_err(err("start uploading"))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(source) => {
                    let _ = stream.abort();
                    return Err(PoolError::Read {
                        path: PathBuf::from(name),
                        source,
                    });
                }
            };
            let mut off = 0;
            while off < n {
                match stream.send(&buf[off..n]) {
                    Ok(k) => off += k,
                    Err(e) => {
                        let _ = stream.abort();
                        return Err(err("upload")(e));
                    }
                }
            }
        }
        stream.finish().map_err(err("finish uploading"))
    }

    /// Reads the whole volume `name` back through a stream (`virStorageVolDownload`).
    pub fn download(&self, name: &str) -> Result<Vec<u8>, PoolError> {
        let uri = &self.conn.uri;
        let err = |what: &str| call_err(uri, format!("{what} volume {name}"));
        let vol = StorageVol::lookup_by_name(self.pool()?, name).map_err(err("look up"))?;
        let stream = Stream::new(&self.conn.conn, 0).map_err(err("open a stream for"))?;
        vol.download(&stream, 0, 0, 0)
            .map_err(err("start downloading"))?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match stream.recv(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    let _ = stream.abort();
                    return Err(err("download")(e));
                }
            }
        }
        stream.finish().map_err(err("finish downloading"))?;
        Ok(out)
    }

    /// Rereads the directory (volumes made behind the pool's back, like a run directory).
    pub fn refresh(&self) -> Result<(), PoolError> {
        self.pool()?.refresh(0).map(|_| ()).map_err(call_err(
            &self.conn.uri,
            format!("refresh pool {}", self.name),
        ))
    }

    /// Destroys the pool if vmbench created it (the files stay). Safe to call twice.
    pub fn destroy(&mut self) -> Result<(), PoolError> {
        let Some(pool) = self.pool.take() else {
            return Ok(());
        };
        if !self.owned {
            return Ok(());
        }
        match pool.destroy() {
            Ok(()) => Ok(()),
            // Gone already (destroyed by someone else, or the host rebooted).
            Err(e) if e.code() == virt::error::ErrorNumber::NoStoragePool => Ok(()),
            Err(e) => {
                let r = call_err(&self.conn.uri, format!("destroy pool {}", self.name))(e);
                self.pool = Some(pool);
                Err(r)
            }
        }
    }
}

impl Drop for DirPool {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// Destroys the pools on `uri` whose names start with one of `prefixes` (killed runs'): disk
/// pools lose their `vmbench-` volumes first; an images pool ([`IMAGES_POOL_SUFFIX`]) keeps its
/// cache. Returns one line per pool handled.
pub fn remove_leftover_pools(
    uri: &str,
    prefixes: &[String],
    dry: bool,
) -> Result<Vec<String>, PoolError> {
    let conn = HostConn::open(uri)?;
    let mut out = Vec::new();
    let names = conn.pools_named("vmbench-")?;
    let leftover = names
        .into_iter()
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())));
    let mut run_dirs = Vec::new();
    for name in leftover {
        out.push(format!("libvirt storage pool {name} on {uri}"));
        if dry {
            continue;
        }
        let pool = StoragePool::lookup_by_name(&conn.conn, &name)
            .map_err(call_err(uri, format!("look up pool {name}")))?;
        if !name.ends_with(IMAGES_POOL_SUFFIX) {
            let vols = pool.list_all_volumes(0).unwrap_or_default();
            for v in vols {
                if v.get_name().is_ok_and(|n| n.starts_with("vmbench-")) {
                    let _ = until_built(|| v.delete(0));
                }
            }
            run_dirs.extend(target_path(&pool).filter(|d| is_run_dir(d, prefixes)));
        }
        if pool.is_active().unwrap_or(false) {
            until_built(|| pool.destroy())
                .map_err(call_err(uri, format!("destroy pool {name}")))?;
        }
        if pool.is_persistent().unwrap_or(false) {
            let _ = pool.undefine();
        }
    }
    run_dirs.sort();
    run_dirs.dedup();
    for dir in run_dirs {
        out.push(remove_run_dir(uri, &dir, prefixes));
    }
    Ok(out)
}

/// How long cleanup waits for a volume build that a killed run left running in libvirtd.
const BUILD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `op`, retried every 100 ms for up to [`BUILD_WAIT`] while it fails. A run killed during
/// `vol-create` leaves the build running in libvirtd, which refuses to delete that volume or
/// destroy its pool until the build ends by itself (seconds for a sparse disk); the last error
/// is returned if it never succeeds.
fn until_built<T>(
    mut op: impl FnMut() -> Result<T, virt::error::Error>,
) -> Result<T, virt::error::Error> {
    let deadline = std::time::Instant::now() + BUILD_WAIT;
    loop {
        match op() {
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// The directory a pool is over, from its XML (`<target><path>`).
fn target_path(pool: &StoragePool) -> Option<PathBuf> {
    #[derive(serde::Deserialize)]
    struct Desc {
        target: Target,
    }
    #[derive(serde::Deserialize)]
    struct Target {
        path: PathBuf,
    }
    let xml = pool.get_xml_desc(0).ok()?;
    quick_xml::de::from_str::<Desc>(&xml)
        .ok()
        .map(|d| d.target.path)
}

/// Whether `dir` is a run's own disk directory on a libvirt host (named after the run, as
/// `vmbench-<run id>-<host>`), the only pool directories cleanup removes: a local cell's pool
/// is over the work directory or the user's `--local-dir`, which are not libvirt's to remove.
fn is_run_dir(dir: &Path, prefixes: &[String]) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
}

/// Removes a killed run's (now empty) disk directory on `uri`, as a `dir` volume of a transient
/// pool over its parent (libvirt rmdirs it, so this works on any host); says what it did.
fn remove_run_dir(uri: &str, dir: &Path, prefixes: &[String]) -> String {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return format!("kept {} on {uri}: no parent directory", dir.display());
    };
    let pool_name = format!(
        "{}cleanup",
        prefixes.first().map_or("vmbench-", String::as_str)
    );
    let removed =
        DirPool::create_or_borrow(uri, &pool_name, parent).and_then(|p| p.delete_volume(name));
    match removed {
        Ok(true) => format!("run directory {} on {uri}", dir.display()),
        Ok(false) => format!("run directory {} on {uri} (already gone)", dir.display()),
        Err(e) => format!("kept run directory {} on {uri}: {e}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cleanup removes a run's own disk directory on a host, never a directory it did not
    /// name (the work directory's `local`, a user's `--local-dir`).
    #[test]
    fn only_directories_named_after_the_run_are_removed() {
        let p = [pool_prefix("20261203-180415-513e")];
        let yes = Path::new("/var/lib/libvirt/images/vmbench/vmbench-20261203-180415-513e-h2");
        assert!(is_run_dir(yes, &p));
        for no in [
            "/var/tmp/w/20261203-180415-513e/local",
            "/srv/my-images",
            "/var/lib/libvirt/images/vmbench/vmbench-20261203-180415-ffff-h2",
            "/",
        ] {
            assert!(!is_run_dir(Path::new(no), &p), "{no}");
        }
    }

    #[test]
    fn pool_xml_is_a_transient_dir_pool_at_0711() {
        let x = pool_xml(
            "vmbench-r1-a",
            Path::new("/var/lib/libvirt/images/vmbench/r1"),
        )
        .unwrap();
        assert_eq!(
            x,
            "<pool type=\"dir\">\n  <name>vmbench-r1-a</name>\n  <target>\n    \
             <path>/var/lib/libvirt/images/vmbench/r1</path>\n    <permissions>\n      \
             <mode>0711</mode>\n    </permissions>\n  </target>\n</pool>\n"
        );
    }

    #[test]
    fn pool_xml_escapes_and_refuses_what_libvirt_cannot_take() {
        let x = pool_xml("p", Path::new("/srv/a&b<c>'\"")).unwrap();
        assert!(
            x.contains("<path>/srv/a&amp;b&lt;c&gt;&apos;&quot;</path>"),
            "{x}"
        );
        for (name, dir, want) in [
            ("", "/srv", "empty"),
            ("a/b", "/srv", "'/'"),
            ("a\nb", "/srv", "control"),
            ("p", "srv/rel", "absolute"),
            ("p", "/srv/a\tb", "control"),
        ] {
            let e = pool_xml(name, Path::new(dir)).unwrap_err().to_string();
            assert!(e.contains(want), "{name:?} {dir:?}: {e}");
        }
    }

    #[test]
    fn volume_plans_follow_libvirts_preallocation_mapping() {
        let cap = 64 << 20;
        let cases = [
            (Format::Raw, Prealloc::Off, 0, false, "sparse"),
            (Format::Raw, Prealloc::Metadata, 0, false, "sparse"),
            (Format::Raw, Prealloc::Full, cap, false, "zeroed"),
            (Format::Qcow2, Prealloc::Off, 0, false, "sparse"),
            (Format::Qcow2, Prealloc::Metadata, 0, true, "metadata"),
            (Format::Qcow2, Prealloc::Full, cap, true, "falloc"),
        ];
        for (fmt, p, alloc, flag, method) in cases {
            let v = VolumePlan::new("v", fmt, p, cap);
            assert_eq!(
                (v.allocation, v.prealloc_flag, v.method()),
                (alloc, flag, method),
                "{fmt}/{p}"
            );
            assert_eq!(v.flags() != 0, flag);
            assert_eq!(v.zero_fill, method == "zeroed", "{fmt}/{p}");
        }
    }

    #[test]
    fn volume_xml_names_format_capacity_and_allocation_in_bytes() {
        let v = VolumePlan::new("vmbench-x.qcow2", Format::Qcow2, Prealloc::Full, 1024);
        assert_eq!(
            v.xml().unwrap(),
            "<volume>\n  <name>vmbench-x.qcow2</name>\n  \
             <capacity unit=\"bytes\">1024</capacity>\n  \
             <allocation unit=\"bytes\">1024</allocation>\n  <target>\n    \
             <format type=\"qcow2\"/>\n  </target>\n</volume>\n"
        );
        let p: std::collections::BTreeMap<_, _> = v.params().into_iter().collect();
        assert_eq!(p["libvirt_allocation"], "1024");
        assert_eq!(p["libvirt_prealloc_flag"], "metadata");
        assert_eq!(p["preallocation_method"], "falloc");
        let e = VolumePlan::raw_file("../x", 1)
            .xml()
            .unwrap_err()
            .to_string();
        assert!(e.contains("'/'"), "{e}");
    }

    #[test]
    fn pool_names_of_a_run_share_its_prefix() {
        assert_eq!(pool_prefix("20261203-1650-ab"), "vmbench-20261203-1650-ab-");
    }
}
