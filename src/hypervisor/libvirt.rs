//! The libvirt connection: connect (with a hint when libvirtd is not running), start a transient
//! domain that is destroyed when its handle drops, read its state, CPU time and QMP answers, and
//! find the domains vmbench left behind (by the metadata marker) for `vmbench cleanup`.

use super::{METADATA_NS, NAME_PREFIX};
use std::path::PathBuf;
use std::time::Duration;
use virt::connect::Connect;
use virt::domain::Domain;
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
    Paused(String),
    /// Shut off or gone (transient domains disappear when they stop).
    Gone,
    /// Crashed.
    Crashed,
    /// Anything else.
    Other(String),
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
        match Connect::open(Some(uri)) {
            Ok(conn) => Ok(Libvirt {
                conn,
                uri: uri.to_string(),
            }),
            Err(e) => Err(LibvirtError::Connect {
                uri: uri.to_string(),
                message: e.message().to_string(),
                hint: connect_hint(uri, e.message()),
            }),
        }
    }

    /// The URI this connection was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// True while the connection answers (false after libvirtd restarted).
    pub fn is_alive(&self) -> bool {
        self.conn.is_alive().unwrap_or(false)
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
            name,
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

    /// Destroys (and undefines, if persistent) a domain by name.
    pub fn remove_domain(&self, name: &str) -> Result<(), LibvirtError> {
        let d = Domain::lookup_by_name(&self.conn, name).map_err(call_err("look up domain"))?;
        if d.is_active().unwrap_or(false) {
            d.destroy().map_err(call_err(format!("destroy {name}")))?;
        }
        if d.is_persistent().unwrap_or(false) {
            d.undefine().map_err(call_err(format!("undefine {name}")))?;
        }
        Ok(())
    }
}

/// A started transient domain. Dropping it destroys the domain (idempotent; a domain that already
/// powered off is fine).
pub struct RunningDomain {
    dom: std::sync::Mutex<Option<Domain>>,
    name: String,
}

impl RunningDomain {
    /// The domain name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current state; a transient domain that stopped is `Gone`.
    pub fn state(&self) -> DomainState {
        let guard = self.lock();
        let Some(dom) = guard.as_ref() else {
            return DomainState::Gone;
        };
        match dom.get_state() {
            Err(_) => DomainState::Gone,
            Ok((s, reason)) => match s {
                sys::VIR_DOMAIN_RUNNING => DomainState::Running,
                sys::VIR_DOMAIN_PAUSED => DomainState::Paused(paused_reason(reason)),
                sys::VIR_DOMAIN_SHUTOFF | sys::VIR_DOMAIN_SHUTDOWN => DomainState::Gone,
                sys::VIR_DOMAIN_CRASHED => DomainState::Crashed,
                other => DomainState::Other(format!("state {other}")),
            },
        }
    }

    /// Guest CPU time in nanoseconds (all vCPUs), from libvirt.
    pub fn cpu_time_ns(&self) -> Option<u64> {
        self.lock().as_ref()?.get_info().ok().map(|i| i.cpu_time)
    }

    /// libvirt's block counters for a guest disk (`vda`, `xvda`): operations and bytes, no
    /// times. Used where QMP is not available (Xen).
    pub fn block_stats(&self, dev: &str) -> Option<crate::metrics::qmp::DiskCounters> {
        let s = self.lock().as_ref()?.get_block_stats(dev).ok()?;
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

    /// The QEMU process id, from libvirt's pid file (qemu:///system layout).
    pub fn qemu_pid(&self) -> Option<u32> {
        let p = PathBuf::from("/run/libvirt/qemu").join(format!("{}.pid", self.name));
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    /// Sends one QMP command through libvirt's monitor passthrough; returns QMP's JSON answer.
    pub fn qmp(&self, command_json: &str) -> Result<String, LibvirtError> {
        let guard = self.lock();
        let dom = guard.as_ref().ok_or_else(|| LibvirtError::Call {
            action: "qmp".into(),
            message: "domain is gone".into(),
        })?;
        dom.qemu_monitor_command(command_json, 0)
            .map_err(call_err("QMP command"))
    }

    /// Destroys the domain now. Safe to call more than once.
    pub fn destroy(&self) {
        if let Some(dom) = self.lock().take() {
            if dom.is_active().unwrap_or(false) {
                // A failure here means it stopped on its own in between; either way it is gone.
                let _ = dom.destroy();
            }
        }
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

fn paused_reason(r: i32) -> String {
    match r as u32 {
        sys::VIR_DOMAIN_PAUSED_IOERROR => "I/O error".into(),
        sys::VIR_DOMAIN_PAUSED_USER => "paused by user".into(),
        sys::VIR_DOMAIN_PAUSED_CRASHED => "guest crashed".into(),
        other => format!("reason {other}"),
    }
}

fn connect_hint(uri: &str, msg: &str) -> String {
    if uri.starts_with("xen") {
        return " (no Xen dom0 with libxl on this host?)".into();
    }
    if msg.contains("No such file") || msg.contains("Connection refused") || msg.contains("socket")
    {
        return " (is libvirtd running? start it with `virtlogd -d && libvirtd -d`, or run \
                 scripts/setup-host)"
            .into();
    }
    String::new()
}

impl Libvirt {
    /// The host capabilities XML.
    pub fn capabilities(&self) -> Result<String, LibvirtError> {
        self.conn
            .get_capabilities()
            .map_err(call_err("read capabilities"))
    }
}
