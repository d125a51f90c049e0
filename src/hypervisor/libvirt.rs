//! The libvirt connection: connect (with a hint when libvirtd is not running), start a transient
//! domain that is destroyed when its handle drops, read its state, CPU time and QMP answers, and
//! find the domains vmbench left behind (by the metadata marker) for `vmbench cleanup`.

use super::{METADATA_NS, NAME_PREFIX};
use crate::cell::Hypervisor;
use std::path::PathBuf;
use std::time::Duration;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::stream::Stream;
use virt::sys;

/// A libvirt failure, with what vmbench was doing.
#[derive(Debug, thiserror::Error)]
pub enum LibvirtError {
    /// Could not open the connection.
    #[error("cannot connect to libvirt at {uri}: {message}{hint}")]
    Connect {
        /// The URI.
        uri: String,
        /// libvirt's message.
        message: String,
        /// How to fix it, when known.
        hint: String,
    },
    /// A call on a connection or domain failed.
    #[error("libvirt: {action}: {message}")]
    Call {
        /// What was being done.
        action: String,
        /// libvirt's message.
        message: String,
    },
}

fn call_err(action: impl Into<String>) -> impl FnOnce(virt::error::Error) -> LibvirtError {
    let action = action.into();
    move |e| LibvirtError::Call {
        action,
        message: e.message().to_string(),
    }
}

/// An open libvirt connection.
pub struct Libvirt {
    conn: Connect,
    uri: String,
}

/// A domain's run state, as vmbench cares about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainState {
    /// Running.
    Running,
    /// Paused, with libvirt's reason (an I/O error pauses it under werror=stop).
    Paused(PausedReason),
    /// Shut off or gone (transient domains disappear when they stop).
    Gone,
    /// Crashed.
    Crashed,
    /// Anything else, by libvirt's number (`virDomainState`).
    Other(sys::virDomainState),
}

/// Why libvirt says a domain is paused (`virDomainPausedReason`), as far as vmbench acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausedReason {
    /// QEMU stopped the guest on a disk I/O error (werror/rerror=stop): the storage is lost.
    IoError,
    /// Someone paused it (`virsh suspend`).
    User,
    /// The guest crashed and libvirt paused it.
    Crashed,
    /// Any other of libvirt's reasons, by number.
    Other(i32),
}

impl std::fmt::Display for PausedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PausedReason::IoError => f.write_str("I/O error"),
            PausedReason::User => f.write_str("paused by user"),
            PausedReason::Crashed => f.write_str("guest crashed"),
            PausedReason::Other(n) => write!(f, "reason {n}"),
        }
    }
}

/// A domain vmbench created, found through its metadata marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkedDomain {
    /// Domain name.
    pub name: String,
    /// The marker's XML (carries run and cell ids).
    pub marker: String,
}

impl Libvirt {
    /// Opens `uri`. libvirt's default error printer is silenced: errors come back as values.
    pub fn connect(uri: &str) -> Result<Libvirt, LibvirtError> {
        virt::error::clear_error_callback();
        // Before the first connection: the client registers its socket with the loop on open.
        event_loop().map_err(|message| LibvirtError::Connect {
            uri: uri.to_string(),
            message,
            hint: String::new(),
        })?;
        match Connect::open(Some(uri)) {
            Ok(conn) => Ok(Libvirt {
                conn,
                uri: uri.to_string(),
            }),
            Err(e) => Err(LibvirtError::Connect {
                uri: uri.to_string(),
                message: e.message().to_string(),
                hint: connect_hint(uri, &e),
            }),
        }
    }

    /// The URI this connection was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// True when the libvirt host is this machine (the URI names no host): only then do
    /// QEMU's pid and `/proc` figures mean anything here.
    pub fn is_local(&self) -> bool {
        crate::uri::is_local_uri(&self.uri)
    }

    /// True while the connection answers (false after libvirtd restarted).
    pub fn is_alive(&self) -> bool {
        self.conn.is_alive().unwrap_or(false)
    }

    /// The libvirt host's name, as that host reports it.
    pub fn hostname(&self) -> String {
        self.conn.get_hostname().unwrap_or_default()
    }

    /// (libvirt version, hypervisor driver version) as dotted strings.
    pub fn versions(&self) -> (String, String) {
        let lib = self.conn.get_lib_version().map(dotted).unwrap_or_default();
        let hyp = self.conn.get_hyp_version().map(dotted).unwrap_or_default();
        (lib, hyp)
    }

    /// Starts a transient domain; the returned handle destroys it on drop.
    pub fn start_transient(&self, xml: &str) -> Result<RunningDomain, LibvirtError> {
        if xml.contains('\0') {
            return Err(LibvirtError::Call {
                action: "create domain".into(),
                message: "domain XML contains a NUL byte".into(),
            });
        }
        let dom = Domain::create_xml(&self.conn, xml, 0).map_err(call_err("create domain"))?;
        let name = dom.get_name().map_err(call_err("read domain name"))?;
        Ok(RunningDomain {
            dom: std::sync::Mutex::new(Some(dom)),
            channels: std::sync::Mutex::new(Vec::new()),
            name,
            remote: (!self.is_local()).then(|| self.uri.clone()),
        })
    }

    /// Every domain (running or defined) whose metadata carries vmbench's marker, optionally only
    /// those of one run. Names alone are not trusted: another tool's `vmbench-*` domain without
    /// the marker is never touched.
    pub fn marked_domains(&self, run_id: Option<&str>) -> Result<Vec<MarkedDomain>, LibvirtError> {
        let doms = self
            .conn
            .list_all_domains(0)
            .map_err(call_err("list domains"))?;
        let mut out = Vec::new();
        for d in doms {
            let Ok(name) = d.get_name() else { continue };
            if !name.starts_with(NAME_PREFIX) {
                continue;
            }
            let Ok(marker) = d.get_metadata(
                sys::VIR_DOMAIN_METADATA_ELEMENT as i32,
                Some(METADATA_NS),
                0,
            ) else {
                continue;
            };
            if run_id.is_none_or(|r| marker.contains(&format!("run=\"{r}\""))) {
                out.push(MarkedDomain { name, marker });
            }
        }
        Ok(out)
    }

    /// Destroys (and undefines, if persistent) a domain by name. A domain that is gone by the
    /// time it is looked up or destroyed counts as removed: a transient domain of a killed run
    /// goes by itself when its QEMU ends, between `cleanup`'s listing and its destroy.
    pub fn remove_domain(&self, name: &str) -> Result<(), LibvirtError> {
        let gone = |e: &virt::error::Error| e.code() == virt::error::ErrorNumber::NoDomain;
        let d = match Domain::lookup_by_name(&self.conn, name) {
            Ok(d) => d,
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(call_err("look up domain")(e)),
        };
        if d.is_active().unwrap_or(false) {
            match d.destroy() {
                Err(e) if gone(&e) => return Ok(()),
                r => r.map_err(call_err(format!("destroy {name}")))?,
            };
        }
        if d.is_persistent().unwrap_or(false) {
            match d.undefine() {
                Err(e) if gone(&e) => {}
                r => r.map_err(call_err(format!("undefine {name}")))?,
            };
        }
        Ok(())
    }
}

/// A started transient domain. Dropping it destroys the domain (idempotent; a domain that already
/// powered off is fine).
pub struct RunningDomain {
    dom: std::sync::Mutex<Option<Domain>>,
    /// The agent channels opened on it, aborted before it is destroyed: libvirt 9.0's libvirtd
    /// deadlocks when a client aborts a channel stream while the same domain's shutdown frees
    /// its character devices (main loop in `virStreamAbort`, qemu-event thread in
    /// `virChrdevFree`; seen in a CI run, every later call then hung).
    channels: std::sync::Mutex<Vec<std::sync::Weak<StreamSlot>>>,
    name: String,
    /// The URI of the libvirt host when it is not this machine.
    remote: Option<String>,
}

impl RunningDomain {
    /// The domain name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current state; a transient domain that stopped is `Gone`.
    pub fn state(&self) -> DomainState {
        let Some(dom) = self.handle() else {
            return DomainState::Gone;
        };
        match dom.get_state() {
            Err(_) => DomainState::Gone,
            Ok((s, reason)) => match s {
                sys::VIR_DOMAIN_RUNNING => DomainState::Running,
                sys::VIR_DOMAIN_PAUSED => DomainState::Paused(paused_reason(reason)),
                sys::VIR_DOMAIN_SHUTOFF | sys::VIR_DOMAIN_SHUTDOWN => DomainState::Gone,
                sys::VIR_DOMAIN_CRASHED => DomainState::Crashed,
                other => DomainState::Other(other),
            },
        }
    }

    /// libvirt's bulk statistics of this domain (`virDomainListGetStats`: CPU with its
    /// user/system split, each disk's counters with times); `None` once the domain is gone.
    pub fn stats(&self, groups: super::domstats::Groups) -> Option<super::domstats::DomainStats> {
        super::domstats::query(&self.handle()?, groups).ok()
    }

    /// The domain's CPU time from its domain stats, or from `virDomainGetInfo` (total only)
    /// where a driver has no bulk stats.
    pub fn cpu(&self) -> Option<crate::metrics::DomainCpu> {
        use crate::metrics::DomainCpu;
        let stats = self.stats(super::domstats::Groups::Cpu);
        if let Some(total_ns) = stats.as_ref().and_then(|s| {
            s.cpu_time_ns.map(|t| DomainCpu {
                total_ns: t,
                user_ns: s.cpu_user_ns,
                system_ns: s.cpu_system_ns,
            })
        }) {
            return Some(total_ns);
        }
        let info = self.handle()?.get_info().ok()?;
        Some(DomainCpu {
            total_ns: info.cpu_time,
            ..DomainCpu::default()
        })
    }

    /// libvirt's counters for a guest disk (`vda`, `xvda`) from its domain stats: operations,
    /// bytes and, where the driver has them, total times. Only where QMP is not available
    /// (Xen): for QEMU, libvirt's block group can hang on a dead NFS server (see
    /// [`super::domstats::Groups`]).
    pub fn block_stats(&self, dev: &str) -> Option<crate::metrics::qmp::DiskCounters> {
        let stats = self.stats(super::domstats::Groups::CpuAndBlock);
        if let Some(c) = stats.and_then(|s| s.disk(dev).map(|d| d.counters())) {
            return Some(c);
        }
        // Older drivers: the per-disk call, counts only.
        let s = self.handle()?.get_block_stats(dev).ok()?;
        let u = |x: i64| u64::try_from(x).unwrap_or(0);
        Some(crate::metrics::qmp::DiskCounters {
            rd_ops: u(s.rd_req),
            wr_ops: u(s.wr_req),
            rd_bytes: u(s.rd_bytes),
            wr_bytes: u(s.wr_bytes),
            timed: false,
            ..Default::default()
        })
    }

    /// Why `/proc` figures of this domain's QEMU cannot be taken here, when they cannot: QEMU
    /// runs on another libvirt host.
    pub fn not_local(&self) -> Option<String> {
        self.remote
            .as_ref()
            .map(|uri| format!("QEMU runs on the libvirt host {uri}, not here"))
    }

    /// The QEMU process id, from libvirt's pid file (qemu:///system layout); `None` for a remote
    /// host, whose pids mean nothing in this machine's /proc.
    pub fn qemu_pid(&self) -> Option<u32> {
        if self.remote.is_some() {
            return None;
        }
        let p = PathBuf::from("/run/libvirt/qemu").join(format!("{}.pid", self.name));
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    /// Sends one QMP command through libvirt's monitor passthrough; returns QMP's JSON answer.
    pub fn qmp(&self, command_json: &str) -> Result<String, LibvirtError> {
        let dom = self.handle().ok_or_else(|| LibvirtError::Call {
            action: "qmp".into(),
            message: "domain is gone".into(),
        })?;
        dom.qemu_monitor_command(command_json, 0)
            .map_err(call_err("QMP command"))
    }

    /// A QMP command that may not be answered (a guest stuck where QEMU is stuck too): its reply
    /// if one comes within `limit`. The call runs on a detached thread of its own (not tokio's
    /// blocking pool, whose threads the runtime waits for at exit), which a later `destroy`
    /// releases; the async wait keeps the other guests of a boot storm and Ctrl-C going.
    pub async fn qmp_within(&self, command_json: &str, limit: Duration) -> Option<String> {
        let dom = self.handle()?;
        let cmd = command_json.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("vmbench-qmp".into())
            .spawn(move || {
                let _ = tx.send(dom.qemu_monitor_command(&cmd, 0));
            })
            .ok()?;
        tokio::time::timeout(limit, rx).await.ok()?.ok()?.ok()
    }

    /// Destroys the domain now. Safe to call more than once.
    pub fn destroy(&self) {
        let channels =
            std::mem::take(&mut *self.channels.lock().unwrap_or_else(|p| p.into_inner()));
        for slot in channels.iter().filter_map(std::sync::Weak::upgrade) {
            slot.abort();
        }
        let taken = self.lock().take();
        if let Some(dom) = taken {
            if dom.is_active().unwrap_or(false) {
                // A failure here means it stopped on its own in between; either way it is gone.
                let _ = dom.destroy();
            }
        }
    }

    /// A reference of its own to the domain (`virDomainRef`), so that no libvirt call is made
    /// under the mutex: a monitor call that hangs (QEMU stuck on a dead NFS server) must not
    /// block `destroy` or the storage watch's state reads, which would then hang the cell.
    fn handle(&self) -> Option<Domain> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Domain>> {
        // A poisoned lock only means a panic elsewhere; the handle itself is still valid.
        self.dom.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout` for the domain to stop on its own (guest power-off).
    pub fn wait_gone(&self, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < end {
            if self.state() == DomainState::Gone {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for RunningDomain {
    fn drop(&mut self) {
        self.destroy();
    }
}

fn dotted(v: u32) -> String {
    format!("{}.{}.{}", v / 1_000_000, (v / 1000) % 1000, v % 1000)
}

fn paused_reason(r: i32) -> PausedReason {
    match r as u32 {
        sys::VIR_DOMAIN_PAUSED_IOERROR => PausedReason::IoError,
        sys::VIR_DOMAIN_PAUSED_USER => PausedReason::User,
        sys::VIR_DOMAIN_PAUSED_CRASHED => PausedReason::Crashed,
        _ => PausedReason::Other(r),
    }
}

/// What to check when `uri` cannot be opened: the hypervisor's own hint, or, when no daemon
/// answered on its socket (a system error of libvirt's RPC layer), how to start libvirtd.
fn connect_hint(uri: &str, e: &virt::error::Error) -> String {
    let hv = Hypervisor::ALL
        .iter()
        .map(|h| h.desc())
        .find(|d| d.uri_scheme_of(uri));
    if let Some(hint) = hv.and_then(|d| d.connect_hint) {
        return format!(" ({hint})");
    }
    use virt::error::{ErrorDomain, ErrorNumber};
    if e.code() == ErrorNumber::SystemError && e.domain() == ErrorDomain::Rpc {
        return " (is libvirtd running? start it with `virtlogd -d && libvirtd -d`, or run \
                 scripts/setup-host)"
            .into();
    }
    String::new()
}

/// Starts libvirt's client event loop once per process, on its own thread. A non-blocking
/// stream (the agent channel) only receives data while the loop runs, since the loop is what
/// reads the connection's socket between calls.
fn event_loop() -> Result<(), String> {
    static STARTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    STARTED
        .get_or_init(|| {
            virt::event::event_register_default_impl()
                .map_err(|e| format!("registering libvirt's event loop: {}", e.message()))?;
            std::thread::Builder::new()
                .name("libvirt-events".into())
                .spawn(|| loop {
                    if virt::event::event_run_default_impl().is_err() {
                        // Only fails when the loop itself is broken; do not spin on it.
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
                .map(|_| ())
                .map_err(|e| format!("starting libvirt's event loop thread: {e}"))
        })
        .clone()
}

/// A guest channel opened through the connection (`virDomainOpenChannel`), non-blocking: the
/// bytes travel over the libvirt connection, so the channel works for any URI, local or remote.
/// Dropping it aborts the stream.
pub struct AgentStream {
    slot: std::sync::Arc<StreamSlot>,
}

/// The stream of an [`AgentStream`], shared with its domain so that destroying the domain can
/// abort it first (see [`RunningDomain`]'s `channels`).
pub struct StreamSlot(std::sync::Mutex<Option<Stream>>);

impl StreamSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Stream>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Aborts the stream once; later transfers say it is closed.
    fn abort(&self) {
        if let Some(s) = self.lock().take() {
            // Fails only when the stream already ended (guest gone); it is freed either way.
            let _ = s.abort();
        }
    }
}

/// One non-blocking transfer on an [`AgentStream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// This many bytes moved (0 on receive: the guest side closed).
    Bytes(usize),
    /// Nothing can move now; try again later.
    WouldBlock,
}

impl AgentStream {
    fn with_ptr<T>(&self, f: impl FnOnce(sys::virStreamPtr) -> T) -> Result<T, LibvirtError> {
        let guard = self.slot.lock();
        let s = guard.as_ref().ok_or_else(|| LibvirtError::Call {
            action: "agent channel".into(),
            message: "stream already closed".into(),
        })?;
        Ok(f(s.as_ptr()))
    }

    /// Receives what has arrived, up to `buf.len()` bytes, without waiting.
    pub fn try_recv(&self, buf: &mut [u8]) -> Result<Transfer, LibvirtError> {
        // SAFETY: the stream is live while the slot's lock is held (an abort takes it out under
        // the same lock); `buf` is valid for `buf.len()` bytes. The crate's `recv` folds -2
        // (would block) into an error, hence the direct call.
        let n = self.with_ptr(|ptr| unsafe {
            sys::virStreamRecv(ptr, buf.as_mut_ptr().cast(), buf.len())
        })?;
        transfer(n, "receive on the agent channel")
    }

    /// Sends up to `data.len()` bytes without waiting.
    pub fn try_send(&self, data: &[u8]) -> Result<Transfer, LibvirtError> {
        // SAFETY: as in `try_recv`; libvirt only reads `data`.
        let n = self
            .with_ptr(|ptr| unsafe { sys::virStreamSend(ptr, data.as_ptr().cast(), data.len()) })?;
        transfer(n, "send on the agent channel")
    }
}

fn transfer(n: i32, action: &str) -> Result<Transfer, LibvirtError> {
    match n {
        -2 => Ok(Transfer::WouldBlock),
        n if n >= 0 => Ok(Transfer::Bytes(n as usize)),
        _ => Err(LibvirtError::Call {
            action: action.into(),
            message: virt::error::Error::last_error().message().to_string(),
        }),
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        self.slot.abort();
    }
}

impl Libvirt {
    /// Opens the domain's channel `name` as a non-blocking stream over this connection. Fails
    /// while QEMU has not set the channel up yet; the caller retries.
    pub fn open_channel(
        &self,
        dom: &RunningDomain,
        name: &str,
    ) -> Result<AgentStream, LibvirtError> {
        let stream = Stream::new(&self.conn, sys::VIR_STREAM_NONBLOCK)
            .map_err(call_err("create a stream"))?;
        let guard = dom.lock();
        let d = guard.as_ref().ok_or_else(|| LibvirtError::Call {
            action: "open the agent channel".into(),
            message: "domain is gone".into(),
        })?;
        d.open_channel(Some(name), &stream, 0)
            .map_err(call_err(format!("open channel {name}")))?;
        drop(guard);
        let slot = std::sync::Arc::new(StreamSlot(std::sync::Mutex::new(Some(stream))));
        let mut channels = dom.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.retain(|w| w.strong_count() > 0);
        channels.push(std::sync::Arc::downgrade(&slot));
        Ok(AgentStream { slot })
    }

    /// The host capabilities XML.
    pub fn capabilities(&self) -> Result<String, LibvirtError> {
        self.conn
            .get_capabilities()
            .map_err(call_err("read capabilities"))
    }
}
