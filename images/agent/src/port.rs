//! Finding and opening the host channel: a named virtio-serial port, or (Xen) a hvc console
//! found by handshake.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vmbench_proto::{GuestMsg, Hello, HostMsg, LineDecoder, PORT_NAME};

use crate::{log, logic, sys};

/// How long the agent waits for the named virtio port when a virtio console device exists
/// (ports are announced by the host after the driver probed, asynchronously).
const VIRTIO_PORT_WAIT: Duration = Duration::from_secs(10);
/// Without any virtio console device, a short wait is enough (the PCI probe is synchronous).
const VIRTIO_PORT_WAIT_NONE: Duration = Duration::from_secs(1);
/// How long the hvc handshake waits for the host's first frame.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(120);

/// The one writer every frame goes through, so frames never interleave.
#[derive(Clone)]
pub struct Writer {
    file: Arc<Mutex<File>>,
    name: Arc<str>,
}

impl Writer {
    fn new(file: File, name: &str) -> Self {
        Self {
            file: Arc::new(Mutex::new(file)),
            name: name.into(),
        }
    }
    /// The device path.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Writes one whole frame.
    pub fn send(&self, msg: &GuestMsg) -> std::io::Result<()> {
        let frame = vmbench_proto::encode(msg)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        let mut f = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("writer lock poisoned"))?;
        f.write_all(&frame)?;
        f.flush()
    }
}

/// An open channel to the host.
pub struct Port {
    /// Read side (a dup of the same file).
    pub reader: File,
    /// Write side.
    pub writer: Writer,
    /// Set when the handshake already sent Hello and received these host messages.
    pub pending: Option<Vec<HostMsg>>,
}

fn open_rw(path: &Path, nonblock: bool) -> std::io::Result<File> {
    let flags = libc::O_NOCTTY | if nonblock { libc::O_NONBLOCK } else { 0 };
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)
}

fn plain(path: &Path) -> Result<Port, String> {
    let f = open_rw(path, false).map_err(|e| format!("opening {}: {e}", path.display()))?;
    // A tty (hvc named on the cmdline) needs raw mode; a virtio port is not a tty.
    let _ = sys::make_raw(&f);
    let reader = f
        .try_clone()
        .map_err(|e| format!("dup {}: {e}", path.display()))?;
    Ok(Port {
        reader,
        writer: Writer::new(f, &path.to_string_lossy()),
        pending: None,
    })
}

/// Finds the host channel: cmdline `vmbench.port=`, then the named virtio port, then a hvc
/// handshake.
pub fn open(hello: &Hello) -> Result<Port, String> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    if let Some(p) = logic::cmdline_value(&cmdline, "vmbench.port") {
        return plain(Path::new(p));
    }
    let sysfs = Path::new("/sys");
    let wait = if logic::has_virtio_console(sysfs) {
        VIRTIO_PORT_WAIT
    } else {
        VIRTIO_PORT_WAIT_NONE
    };
    let start = Instant::now();
    loop {
        if let Some(dev) = logic::find_virtio_port(sysfs, PORT_NAME) {
            let node = Path::new("/dev").join(&dev);
            if node.exists() {
                return plain(&node);
            }
        }
        if start.elapsed() > wait {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    log(&format!(
        "no virtio port named {PORT_NAME}; trying hvc1..hvc7 by handshake"
    ));
    handshake(hello)
}

struct Candidate {
    path: PathBuf,
    file: File,
    decoder: LineDecoder,
}

fn handshake(hello: &Hello) -> Result<Port, String> {
    let frame =
        vmbench_proto::encode(&GuestMsg::Hello(hello.clone())).map_err(|e| e.to_string())?;
    let mut cands: Vec<Candidate> = (1..=7)
        .map(|n| PathBuf::from(format!("/dev/hvc{n}")))
        .filter_map(|path| {
            let mut file = open_rw(&path, true).ok()?;
            sys::make_raw(&file).ok()?;
            // A console nobody listens to may refuse the write (EAGAIN/EIO); it stays a
            // candidate only if the whole hello went out.
            file.write_all(&frame).ok()?;
            Some(Candidate {
                path,
                file,
                decoder: LineDecoder::new(),
            })
        })
        .collect();
    if cands.is_empty() {
        return Err(format!(
            "no host channel: no virtio port {PORT_NAME} and no usable /dev/hvc1..7"
        ));
    }
    log(&format!(
        "hello sent on {} hvc candidate(s), waiting for the host",
        cands.len()
    ));
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < HANDSHAKE_WAIT {
        for i in 0..cands.len() {
            if let Some(msgs) = poll_candidate(&mut cands[i], &mut buf) {
                let c = cands.swap_remove(i);
                sys::set_nonblocking(&c.file, false).map_err(|e| e.to_string())?;
                let reader = c.file.try_clone().map_err(|e| e.to_string())?;
                let writer = Writer::new(c.file, &c.path.to_string_lossy());
                return Ok(Port {
                    reader,
                    writer,
                    pending: Some(msgs),
                });
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "hvc handshake: no host answered within {}s",
        HANDSHAKE_WAIT.as_secs()
    ))
}

/// Reads what is there; returns the host messages once at least one valid frame arrived.
/// Garbage (another program's console) resets that candidate's decoder.
fn poll_candidate(c: &mut Candidate, buf: &mut [u8]) -> Option<Vec<HostMsg>> {
    let n = c.file.read(buf).ok().filter(|&n| n > 0)?;
    let frames = match c.decoder.push(&buf[..n]) {
        Ok(f) => f,
        Err(_) => {
            c.decoder = LineDecoder::new();
            return None;
        }
    };
    let msgs: Vec<HostMsg> = frames
        .iter()
        .filter_map(|f| vmbench_proto::decode::<HostMsg>(f).ok())
        .collect();
    (!msgs.is_empty()).then_some(msgs)
}
