//! The guest image: a Debian kernel plus a zstd initramfs whose `/init` is the static
//! vmbench-agent, with a static fio, bonnie++, mke2fs, mkfs.xfs and busybox.
//!
//! Images are content-addressed: the id hashes every input (recipe, package versions, fio
//! source version and flags, agent binary), so [`ensure`] reuses `cache_dir/<id>` while nothing
//! changed, and downloads (`cache_dir/debs`) and the fio build (`cache_dir/fio`) are cached
//! separately so even a rebuild is cheap.

mod apt_facts;
pub mod cpio;
pub mod elf;
pub mod fio_build;
pub mod kernel;
pub mod libs;
pub mod prune;
pub mod recipe;
pub mod upload;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use cpio::{Entry, Kind};

/// Bumped whenever the builder's own output changes for the same inputs (the skeleton below,
/// the layout): the id must change with it.
const BUILDER_VERSION: &str = "4";
/// zstd level for the initramfs (the kernel decompresses any level equally fast).
const ZSTD_LEVEL: i32 = 19;

/// What to build and where.
#[derive(Debug, Clone)]
pub struct ImageRequest {
    /// Root of the image cache (`<id>/`, `debs/`, `src/`, `fio/`).
    pub cache_dir: PathBuf,
    /// A prebuilt static agent binary; `None` builds it from this workspace.
    pub agent: Option<PathBuf>,
    /// Rebuild and re-download everything, ignoring caches.
    pub force: bool,
}

/// A built image, as written to `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// Short hex content hash of the inputs.
    pub id: String,
    /// The image directory, `cache_dir/<id>`.
    pub dir: PathBuf,
    /// The kernel the domain boots: `vmlinux` (uncompressed, PVH entry) or `vmlinuz`.
    pub kernel: PathBuf,
    /// The zstd initramfs (`initrd.zst`).
    pub initrd: PathBuf,
    /// Size of the initramfs file.
    pub initrd_bytes: u64,
    /// The base initramfs followed by the extra archive (`initrd-full.zst`: bonnie++, xfsprogs,
    /// lvm2, the xfs, device-mapper and virtio-fs modules), for the cells that need them
    /// ([`ImageInfo::initrd_for`]). Manifests older than the split have none: not cached.
    #[serde(default)]
    pub initrd_full: PathBuf,
    /// Size of `initrd_full`.
    #[serde(default)]
    pub initrd_full_bytes: u64,
    /// Versions of everything inside (kernel, fio, bonnie++, e2fsprogs, xfsprogs, busybox,
    /// agent), also in the guest's /etc/vmbench/versions.json.
    pub versions: BTreeMap<String, String>,
}

/// Which initramfs a guest boots with: the base, or the base with the extra archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initrd {
    /// fio, mke2fs, busybox and the agent: raw-device and ext4 fio cells.
    Base,
    /// Also bonnie++, xfsprogs, lvm2 and the xfs, device-mapper and virtio-fs modules.
    Full,
}

impl Initrd {
    /// The initramfs that holds every tool and module `steps` use: the image knows what is in
    /// which archive, the steps say what they run, so no caller decides by backend, layout or
    /// engine. xfs, LVM volumes, bonnie++ and virtio-fs are in the extra archive.
    pub fn for_steps<'a>(steps: impl IntoIterator<Item = &'a vmbench_proto::Step>) -> Initrd {
        use vmbench_proto::{Filesystem, Step};
        let extra = |s: &Step| match s {
            Step::Mkfs { fs, volume } => *fs == Filesystem::Xfs || volume.uses_lvm(),
            Step::Bonnie { .. } | Step::MountVirtiofs { .. } => true,
            Step::DropCaches | Step::Fio { .. } | Step::Sysrq { .. } => false,
        };
        if steps.into_iter().any(extra) {
            Initrd::Full
        } else {
            Initrd::Base
        }
    }
}

impl ImageInfo {
    /// The engine binaries this image's guest runs that the cache keeps as files, by tool name
    /// (`fio`: the static build in `<cache>/fio/<key>/fio`, checked to be the version the image
    /// recorded). A host cell (`--hypervisor host`) runs these, so a host row and a guest row
    /// use the same build. bonnie++ is not here: the image copies the host's Debian binary.
    pub fn engine_binaries(&self) -> BTreeMap<String, PathBuf> {
        let mut out = BTreeMap::new();
        let (Some(cache), Some(source), Ok(recipe)) = (
            self.dir.parent(),
            self.versions.get("fio_source"),
            recipe::Recipe::embedded(),
        ) else {
            return out;
        };
        let key = fio_build::build_key(source, &recipe.fio.configure_flags);
        let path = cache.join("fio").join(key).join("fio");
        let same = fio_build::version_of(&path).ok() == self.versions.get("fio").cloned();
        if path.is_file() && same {
            out.insert("fio".to_string(), path);
        }
        out
    }

    /// The initramfs file for `which`.
    pub fn initrd_for(&self, which: Initrd) -> &Path {
        match which {
            Initrd::Base => &self.initrd,
            Initrd::Full => &self.initrd_full,
        }
    }
}

/// Why an image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A tool could not be started.
    #[error("could not run {cmd}: {source}")]
    Spawn {
        /// The command.
        cmd: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A tool ran and failed.
    #[error("{cmd} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The embedded recipe is invalid.
    #[error("images/recipe.toml: {0}")]
    Recipe(#[from] toml::de::Error),
    /// A binary that must be static has a dynamic loader.
    #[error(
        "{0} is dynamically linked (has PT_INTERP); build it with -C target-feature=+crt-static"
    )]
    NotStatic(PathBuf),
    /// A wanted module is neither in the kernel package nor built in.
    #[error("kernel module {0} is neither in the kernel package nor in modules.builtin")]
    UnknownModule(String),
    /// Tool output or a file was not what was expected.
    #[error("{0}")]
    Parse(String),
}

impl ImageError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        ImageError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

fn command_line(prog: &str, args: &[&str]) -> String {
    std::iter::once(prog)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command to completion and returns its stdout bytes; non-zero exit is an error.
fn run_bytes_in(
    prog: &str,
    args: &[&str],
    cwd: Option<&Path>,
    env: &[(&str, &str)],
) -> Result<Vec<u8>, ImageError> {
    let mut c = Command::new(prog);
    c.args(args).envs(env.iter().copied());
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let out = c.output().map_err(|source| ImageError::Spawn {
        cmd: prog.to_string(),
        source,
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(ImageError::Failed {
            cmd: command_line(prog, args),
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(out.stdout)
}

fn run_bytes(prog: &str, args: &[&str]) -> Result<Vec<u8>, ImageError> {
    run_bytes_in(prog, args, None, &[])
}

fn run(prog: &str, args: &[&str], cwd: Option<&Path>) -> Result<String, ImageError> {
    Ok(String::from_utf8_lossy(&run_bytes_in(prog, args, cwd, &[])?).into_owned())
}

/// The default cache: /var/cache/vmbench/images for root, else the user's XDG cache.
pub fn default_cache_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/cache/vmbench/images");
    }
    directories::BaseDirs::new()
        .map(|b| b.cache_dir().join("vmbench/images"))
        .unwrap_or_else(|| std::env::temp_dir().join("vmbench-images"))
}

/// Everything the image id depends on, resolved without downloading or compiling.
struct Inputs {
    recipe: recipe::Recipe,
    kernel_pkg: String,
    kernel_version: String,
    packages: BTreeMap<String, String>,
    fio_version: String,
    agent: Vec<u8>,
    id: String,
}

fn dpkg_version(pkg: &str) -> Result<String, ImageError> {
    Ok(run("dpkg-query", &["-W", "-f", "${Version}", pkg], None)?
        .trim()
        .to_string())
}

fn resolve(req: &ImageRequest, progress: &dyn Fn(&str)) -> Result<Inputs, ImageError> {
    let recipe = recipe::Recipe::embedded()?;
    let apt_facts::AptFacts {
        kernel_pkg,
        kernel_version,
        packages,
        fio_version,
        ..
    } = apt_facts::facts(&req.cache_dir, &recipe)?;
    let agent_path = match &req.agent {
        Some(p) => p.clone(),
        None => build_agent(progress)?,
    };
    let agent = std::fs::read(&agent_path).map_err(|e| ImageError::io(&agent_path, e))?;
    if elf::has_interp(&agent)
        .map_err(|e| ImageError::Parse(format!("{}: {e}", agent_path.display())))?
    {
        return Err(ImageError::NotStatic(agent_path));
    }
    let mut h = Sha256::new();
    let mut feed = |k: &str, v: &[u8]| {
        h.update(k.as_bytes());
        h.update(b"=");
        h.update(v);
        h.update(b"\n");
    };
    feed("builder", BUILDER_VERSION.as_bytes());
    feed("recipe", recipe::RECIPE_TEXT.as_bytes());
    feed(&kernel_pkg, kernel_version.as_bytes());
    for (k, v) in &packages {
        feed(k, v.as_bytes());
    }
    feed("fio-src", fio_version.as_bytes());
    feed("fio-flags", recipe.fio.configure_flags.join(" ").as_bytes());
    feed("agent", &Sha256::digest(&agent));
    let id = hex::encode(&h.finalize()[..8]);
    Ok(Inputs {
        recipe,
        kernel_pkg,
        kernel_version,
        packages,
        fio_version,
        agent,
        id,
    })
}

/// Builds the agent from this workspace as a static binary and returns its path.
fn build_agent(progress: &dyn Fn(&str)) -> Result<PathBuf, ImageError> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_dir = ws.join("target/agent");
    progress("building vmbench-agent (static)");
    let td = target_dir.to_string_lossy().into_owned();
    run_bytes_in(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "vmbench-agent",
            "--target",
            "x86_64-unknown-linux-gnu",
        ],
        Some(ws),
        &[
            ("RUSTFLAGS", "-C target-feature=+crt-static"),
            ("CARGO_TARGET_DIR", &td),
        ],
    )?;
    Ok(target_dir.join("x86_64-unknown-linux-gnu/release/vmbench-agent"))
}

/// Returns the cached image for the current inputs, building it only when missing (or when
/// `force` is set).
pub fn ensure(req: &ImageRequest, progress: &dyn Fn(&str)) -> Result<ImageInfo, ImageError> {
    let inputs = resolve(req, progress)?;
    if !req.force {
        if let Some(info) = cached(&req.cache_dir, &inputs.id) {
            progress(&format!("image {} is up to date", info.id));
            return Ok(info);
        }
    }
    let _lock = CacheLock::take(&req.cache_dir, progress)?;
    // Another process may have built it while we waited for the lock.
    if !req.force {
        if let Some(info) = cached(&req.cache_dir, &inputs.id) {
            progress(&format!("image {} was built meanwhile", info.id));
            return Ok(info);
        }
    }
    build_from(req, inputs, progress)
}

/// [`ensure`], then the image marked in use by this process (see [`prune::InUse`]), so `vmbench
/// image prune` leaves it alone while the returned guard lives. A prune that removed the image
/// between the two steps is caught by checking again.
pub fn ensure_in_use(
    req: &ImageRequest,
    progress: &dyn Fn(&str),
) -> Result<(ImageInfo, prune::InUse), ImageError> {
    loop {
        let info = ensure(req, progress)?;
        let guard = prune::InUse::take(&info)?;
        if cached(&req.cache_dir, &info.id).is_some() {
            return Ok((info, guard));
        }
    }
}

/// The published image with this id, if complete.
fn cached(cache: &Path, id: &str) -> Option<ImageInfo> {
    let manifest = cache.join(id).join("manifest.json");
    let info: ImageInfo = serde_json::from_slice(&std::fs::read(manifest).ok()?).ok()?;
    let complete = info.kernel.exists() && info.initrd.exists() && info.initrd_full.exists();
    (info.id == id && complete).then_some(info)
}

/// An exclusive flock on `cache_dir/.lock`, so concurrent builders (matrix runner, CLI) never
/// share a staging tree or the fio source tree. Released when dropped (the fd closes).
struct CacheLock(#[allow(dead_code)] std::fs::File);

impl CacheLock {
    fn take(cache: &Path, progress: &dyn Fn(&str)) -> Result<Self, ImageError> {
        use std::os::fd::AsRawFd;
        mkdir(cache)?;
        let p = cache.join(".lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| ImageError::io(&p, e))?;
        // SAFETY: flock on a valid fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            progress("waiting for another image build to finish");
            // SAFETY: as above, blocking this time.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(ImageError::io(&p, std::io::Error::last_os_error()));
            }
        }
        Ok(CacheLock(f))
    }
}

/// Builds the image for the current inputs (reusing downloaded packages and the fio build
/// unless `force`), replacing any image with the same id.
pub fn build(req: &ImageRequest, progress: &dyn Fn(&str)) -> Result<ImageInfo, ImageError> {
    let inputs = resolve(req, progress)?;
    let _lock = CacheLock::take(&req.cache_dir, progress)?;
    build_from(req, inputs, progress)
}

fn build_from(
    req: &ImageRequest,
    inp: Inputs,
    progress: &dyn Fn(&str),
) -> Result<ImageInfo, ImageError> {
    let cache = &req.cache_dir;
    mkdir(cache)?;
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(cache)
        .map_err(|e| ImageError::io(cache, e))?;
    progress(&format!("kernel {} {}", inp.kernel_pkg, inp.kernel_version));
    let deb = kernel::download(
        &inp.kernel_pkg,
        &inp.kernel_version,
        &cache.join("debs"),
        req.force,
    )?;
    let root = staging.path().join("kernel");
    kernel::extract(&deb, &root)?;
    let rel = kernel::release(&root)?;
    let fio = fio_build::ensure_fio(
        cache,
        &inp.recipe.fio.source_package,
        &inp.fio_version,
        &inp.recipe.fio.configure_flags,
        inp.recipe.fio.make_jobs,
        req.force,
        progress,
    )?;
    let versions = component_versions(&inp, &rel, &fio)?;
    progress("assembling initramfs");
    let (base, extra) = assemble(&inp, &root, &rel, &fio, &versions)?;
    let out = staging.path().join("image");
    mkdir(&out)?;
    let initrd = out.join("initrd.zst");
    let initrd_full = out.join("initrd-full.zst");
    write_initrd(&initrd, &[&base.entries])?;
    write_initrd(&initrd_full, &[&base.entries, &extra.entries])?;
    let kernel_file = add_kernel(&root, &rel, &out, staging.path())?;
    let dir = cache.join(&inp.id);
    let size = |p: &Path| -> Result<u64, ImageError> {
        Ok(std::fs::metadata(p)
            .map_err(|e| ImageError::io(p, e))?
            .len())
    };
    let info = ImageInfo {
        id: inp.id.clone(),
        kernel: dir.join(kernel_file),
        initrd: dir.join("initrd.zst"),
        initrd_bytes: size(&initrd)?,
        initrd_full: dir.join("initrd-full.zst"),
        initrd_full_bytes: size(&initrd_full)?,
        dir: dir.clone(),
        versions,
    };
    let manifest =
        serde_json::to_vec_pretty(&info).map_err(|e| ImageError::Parse(e.to_string()))?;
    write_file(&out.join("manifest.json"), &manifest)?;
    publish(&out, &dir)?;
    progress(&format!(
        "image {} ready: initrd {} bytes (with the extra archive: {} bytes)",
        info.id, info.initrd_bytes, info.initrd_full_bytes
    ));
    Ok(info)
}

/// What went into the image, by component: kernel, fio, each packaged binary, busybox and the
/// agent (with its hash, since the version alone does not change on every rebuild).
fn component_versions(
    inp: &Inputs,
    rel: &str,
    fio: &Path,
) -> Result<BTreeMap<String, String>, ImageError> {
    let mut versions = BTreeMap::new();
    versions.insert("kernel".to_string(), inp.kernel_version.clone());
    versions.insert("kernel_release".to_string(), rel.to_string());
    versions.insert("fio".to_string(), fio_build::version_of(fio)?);
    versions.insert("fio_source".to_string(), inp.fio_version.clone());
    for b in &inp.recipe.binaries {
        versions.insert(b.package.clone(), inp.packages[&b.package].clone());
    }
    versions.insert(
        "busybox".to_string(),
        inp.packages[&inp.recipe.busybox.package].clone(),
    );
    versions.insert("agent".to_string(), env!("CARGO_PKG_VERSION").to_string());
    versions.insert(
        "agent_sha256".to_string(),
        hex::encode(Sha256::digest(&inp.agent)),
    );
    Ok(versions)
}

/// The two initramfs archives: the base every cell boots with, and the extra one that the
/// cells needing its tools boot with after the base (the kernel unpacks concatenated archives
/// in order, a later file replacing an earlier one of the same path).
fn assemble(
    inp: &Inputs,
    root: &Path,
    rel: &str,
    fio: &Path,
    versions: &BTreeMap<String, String>,
) -> Result<(Tree, Tree), ImageError> {
    let mut base = Tree::default();
    base.base(&inp.agent);
    let extra_modules = add_modules(&mut base, root, rel, &inp.recipe.kernel)?;
    base.file("usr/bin/fio", 0o755, read(fio)?);
    add_binaries(&mut base, &inp.recipe, false)?;
    let vjson =
        serde_json::to_vec_pretty(versions).map_err(|e| ImageError::Parse(e.to_string()))?;
    base.file("etc/vmbench/versions.json", 0o644, vjson);
    // The extra archive holds only what the base does not: same paths are not repeated.
    let mut extra = base.empty_beside();
    add_binaries(&mut extra, &inp.recipe, true)?;
    extra_modules.add_to(&mut extra);
    Ok((base, extra))
}

/// Puts the kernel into `out`: the uncompressed ELF (`vmlinux`) when it boots through PVH,
/// else the package's bzImage (`vmlinuz`). Returns the file name the domain boots.
fn add_kernel(
    root: &Path,
    rel: &str,
    out: &Path,
    scratch: &Path,
) -> Result<&'static str, ImageError> {
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{rel}"));
    let bz = read(&vmlinuz)?;
    match kernel::pvh_vmlinux(&bz, scratch)? {
        Some(elf) => {
            write_file(&out.join("vmlinux"), &elf)?;
            Ok("vmlinux")
        }
        None => {
            write_file(&out.join("vmlinuz"), &bz)?;
            Ok("vmlinuz")
        }
    }
}

fn mkdir(p: &Path) -> Result<(), ImageError> {
    std::fs::create_dir_all(p).map_err(|e| ImageError::io(p, e))
}

fn read(p: &Path) -> Result<Vec<u8>, ImageError> {
    std::fs::read(p).map_err(|e| ImageError::io(p, e))
}

fn write_file(p: &Path, data: &[u8]) -> Result<(), ImageError> {
    std::fs::write(p, data).map_err(|e| ImageError::io(p, e))
}

/// Makes the image readable by QEMU's user (0755 dir, 0644 files) and moves it into place
/// with a rename, so a crash never leaves a half image under its id.
fn publish(out: &Path, dir: &Path) -> Result<(), ImageError> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(out).map_err(|e| ImageError::io(out, e))? {
        let p = e.map_err(|e| ImageError::io(out, e))?.path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| ImageError::io(&p, e))?;
    }
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| ImageError::io(out, e))?;
    if dir.exists() {
        let old = dir.with_extension(format!("old-{}", std::process::id()));
        std::fs::rename(dir, &old).map_err(|e| ImageError::io(dir, e))?;
        let _ = std::fs::remove_dir_all(&old);
    }
    std::fs::rename(out, dir).map_err(|e| ImageError::io(dir, e))
}

/// Writes each archive as its own zstd-compressed cpio (with its own trailer), one after the
/// other: the layout the kernel's initramfs unpacker reads as concatenated archives.
fn write_initrd(path: &Path, archives: &[&[Entry]]) -> Result<(), ImageError> {
    let mut f = std::fs::File::create(path).map_err(|e| ImageError::io(path, e))?;
    for entries in archives {
        let mut enc =
            zstd::stream::Encoder::new(&mut f, ZSTD_LEVEL).map_err(|e| ImageError::io(path, e))?;
        cpio::write_archive(&mut enc, entries).map_err(|e| ImageError::io(path, e))?;
        enc.finish().map_err(|e| ImageError::io(path, e))?;
    }
    f.flush().map_err(|e| ImageError::io(path, e))
}

/// The initramfs being assembled: entries in order, parents created on demand.
#[derive(Default)]
struct Tree {
    entries: Vec<Entry>,
    seen: std::collections::HashSet<String>,
}

impl Tree {
    fn dir(&mut self, path: &str) {
        if path.is_empty() || self.seen.contains(path) {
            return;
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.seen.insert(path.to_string());
        self.entries.push(Entry {
            path: path.to_string(),
            perm: 0o755,
            kind: Kind::Dir,
        });
    }
    fn add(&mut self, path: &str, perm: u32, kind: Kind) {
        if self.seen.contains(path) {
            return;
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.seen.insert(path.to_string());
        self.entries.push(Entry {
            path: path.to_string(),
            perm,
            kind,
        });
    }
    fn file(&mut self, path: &str, perm: u32, data: Vec<u8>) {
        self.add(path, perm, Kind::File(data));
    }
    /// A tree for an archive unpacked over this one: no entries, and every path of this one
    /// counted as present (not repeated, parents not re-made).
    fn empty_beside(&self) -> Tree {
        Tree {
            entries: Vec::new(),
            seen: self.seen.clone(),
        }
    }
    /// A file that replaces the same path of an earlier archive.
    fn replace(&mut self, path: &str, perm: u32, data: Vec<u8>) {
        self.seen.insert(path.to_string());
        self.entries.push(Entry {
            path: path.to_string(),
            perm,
            kind: Kind::File(data),
        });
    }
    fn symlink(&mut self, path: &str, target: &str) {
        self.add(path, 0o777, Kind::Symlink(target.to_string()));
    }
    /// The skeleton: merged-/usr links, mount points, the console node and /init.
    fn base(&mut self, agent: &[u8]) {
        for d in [
            "usr/bin",
            "usr/sbin",
            "usr/lib",
            "usr/lib64",
            "etc/vmbench",
            "proc",
            "sys",
            "dev",
            "run",
            "tmp",
            "mnt/test",
        ] {
            self.dir(d);
        }
        for l in ["bin", "sbin", "lib", "lib64"] {
            self.symlink(l, &format!("usr/{l}"));
        }
        // The kernel opens /dev/console for init's stdio before devtmpfs is mounted.
        self.add("dev/console", 0o600, Kind::CharDev(5, 1));
        self.file("init", 0o755, agent.to_vec());
        // bonnie++ -u root looks the user up; glibc's built-in files backend reads these.
        self.file(
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
        );
        self.file("etc/group", 0o644, b"root:x:0:\n".to_vec());
        self.dir("root");
    }
}

/// The extra archive's modules: their files and the on-demand list that replaces the base's.
struct ExtraModules {
    files: Vec<(String, Vec<u8>)>,
    ondemand: String,
}

impl ExtraModules {
    fn add_to(self, tree: &mut Tree) {
        for (path, data) in self.files {
            tree.file(&path, 0o644, data);
        }
        tree.replace(
            "etc/vmbench/modules.ondemand",
            0o644,
            self.ondemand.into_bytes(),
        );
    }
}

/// Adds the boot and base on-demand modules (and their lists) to `tree`; returns the extra
/// archive's. modules.dep covers every module of both.
fn add_modules(
    tree: &mut Tree,
    root: &Path,
    rel: &str,
    kernel_recipe: &recipe::KernelRecipe,
) -> Result<ExtraModules, ImageError> {
    let moddir = root.join("lib/modules").join(rel);
    let builtin_path = moddir.join("modules.builtin");
    let builtin = kernel::parse_builtin(
        &std::fs::read_to_string(&builtin_path).map_err(|e| ImageError::io(&builtin_path, e))?,
    );
    let boot = &kernel_recipe.modules;
    let later: Vec<String> = kernel_recipe.on_demand.clone();
    let later_full = kernel_recipe.on_demand_all();
    let scsi = &kernel_recipe.scsi;
    let every: Vec<String> = boot
        .iter()
        .chain(&later_full)
        .chain(scsi)
        .cloned()
        .collect();
    let mods = kernel::collect(&moddir, &every, &builtin)?;
    let (at_boot, on_demand) = kernel::boot_and_on_demand_order(boot, &later, &mods, &builtin)?;
    let (_, scsi_order) = kernel::boot_and_on_demand_order(boot, scsi, &mods, &builtin)?;
    let (_, on_demand_full) = kernel::boot_and_on_demand_order(boot, &later_full, &mods, &builtin)?;
    let module_path = |m: &str| {
        // finit_module needs an uncompressed module here; store every one as plain .ko.
        let plain = m.strip_suffix(".xz").unwrap_or(m).to_string();
        (format!("usr/lib/modules/{rel}/{plain}"), plain)
    };
    for (list, order) in [
        ("modules.order", &at_boot),
        ("modules.scsi", &scsi_order),
        ("modules.ondemand", &on_demand),
    ] {
        let mut order_text = String::new();
        for m in order {
            let (path, plain) = module_path(m);
            tree.file(&path, 0o644, kernel::read_module(&moddir.join(m))?);
            order_text.push_str(&plain);
            order_text.push('\n');
        }
        tree.file(
            &format!("etc/vmbench/{list}"),
            0o644,
            order_text.into_bytes(),
        );
    }
    tree.file(
        &format!("usr/lib/modules/{rel}/modules.dep"),
        0o644,
        kernel::modules_dep_text(&mods).into_bytes(),
    );
    let mut extra = ExtraModules {
        files: Vec::new(),
        ondemand: String::new(),
    };
    for m in &on_demand_full {
        let (path, plain) = module_path(m);
        if !on_demand.contains(m) {
            extra
                .files
                .push((path, kernel::read_module(&moddir.join(m))?));
        }
        extra.ondemand.push_str(&plain);
        extra.ondemand.push('\n');
    }
    Ok(extra)
}

/// Adds the recipe's binaries of one archive (`extra` or the base), with their libraries; the
/// base also gets busybox.
fn add_binaries(tree: &mut Tree, recipe: &recipe::Recipe, extra: bool) -> Result<(), ImageError> {
    for b in recipe.binaries.iter().filter(|b| b.extra == extra) {
        let host = libs::find_binary(&b.name)?;
        tree.file(&libs::image_path(&host), 0o755, read(&host)?);
        for lib in libs::libraries(&host)? {
            tree.file(&libs::image_path(&lib), 0o755, read(&lib)?);
        }
    }
    if extra {
        return Ok(());
    }
    let bb = Path::new(&recipe.busybox.path);
    let bb_data = read(bb)?;
    if elf::has_interp(&bb_data).map_err(|e| ImageError::Parse(e.to_string()))? {
        return Err(ImageError::NotStatic(bb.to_path_buf()));
    }
    tree.file("usr/bin/busybox", 0o755, bb_data);
    for a in &recipe.busybox.applets {
        tree.symlink(&format!("usr/bin/{a}"), "busybox");
    }
    Ok(())
}

#[cfg(test)]
mod initrd_tests {
    use super::Initrd;
    use vmbench_proto::{Filesystem, Step, Volume};

    #[test]
    fn the_steps_decide_which_initramfs_a_cell_boots() {
        let mkfs = |fs, volume| Step::Mkfs { fs, volume };
        let base = [Step::DropCaches, mkfs(Filesystem::Ext4, Volume::Partition)];
        assert_eq!(Initrd::for_steps(&base), Initrd::Base);
        assert_eq!(Initrd::for_steps(&[]), Initrd::Base);
        for s in [
            mkfs(Filesystem::Xfs, Volume::Whole),
            mkfs(Filesystem::Ext4, Volume::Lvm),
            // A split disk has a PV, VG and LV on partition 2 whichever side is measured.
            mkfs(Filesystem::Ext4, Volume::SplitPartition),
            mkfs(Filesystem::Ext4, Volume::SplitLvm),
            Step::MountVirtiofs { tag: "t".into() },
        ] {
            let steps = [Step::DropCaches, s];
            assert_eq!(Initrd::for_steps(&steps), Initrd::Full, "{:?}", steps[1]);
        }
    }
}
