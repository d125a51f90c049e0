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
        let mut f = self.lock()?;
        f.write_all(&frame)?;
        f.flush()
    }

    /// The port, locked for one whole write.
    pub(crate) fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, File>> {
        self.file
            .lock()
            .map_err(|_| std::io::Error::other("writer lock poisoned"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    fn candidate() -> (Candidate, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let file = File::from(OwnedFd::from(a));
        (
            Candidate {
                path: "/dev/hvc9".into(),
                file,
                decoder: LineDecoder::new(),
            },
            b,
        )
    }

    #[test]
    fn handshake_accepts_only_a_valid_host_frame() {
        let (mut c, mut host) = candidate();
        let mut buf = [0u8; 4096];
        assert!(
            poll_candidate(&mut c, &mut buf).is_none(),
            "nothing sent yet"
        );
        host.write_all(b"login: \r\nnot json\n").unwrap();
        assert!(
            poll_candidate(&mut c, &mut buf).is_none(),
            "console noise is not a host"
        );
        let mut frame = vmbench_proto::encode(&HostMsg::PowerOff).unwrap();
        let tail = frame.split_off(5);
        host.write_all(&frame).unwrap();
        assert!(
            poll_candidate(&mut c, &mut buf).is_none(),
            "half a frame is not enough"
        );
        host.write_all(&tail).unwrap();
        assert_eq!(
            poll_candidate(&mut c, &mut buf),
            Some(vec![HostMsg::PowerOff])
        );
    }

    #[test]
    fn concurrent_writers_never_interleave_frames() {
        let (c, mut host) = candidate();
        sys::set_nonblocking(&c.file, false).unwrap();
        let w = Writer::new(c.file, "test");
        let w2 = w.clone();
        let beats = std::thread::spawn(move || {
            for i in 0..200 {
                w2.send(&GuestMsg::Heartbeat {
                    job: Some(i),
                    uptime_ms: i,
                })
                .unwrap();
            }
        });
        let big = "x".repeat(300_000);
        let bigs = std::thread::spawn(move || {
            for _ in 0..5 {
                w.send(&GuestMsg::Status {
                    job: 1,
                    step: 0,
                    line: big.clone(),
                })
                .unwrap();
            }
        });
        let mut dec = LineDecoder::new();
        let (mut n_beats, mut n_big) = (0, 0);
        let mut buf = vec![0u8; 65536];
        while n_beats + n_big < 205 {
            let n = host.read(&mut buf).unwrap();
            assert!(n > 0, "writer side closed early");
            for f in dec.push(&buf[..n]).unwrap() {
                match vmbench_proto::decode::<GuestMsg>(&f).expect("interleaved or broken frame") {
                    GuestMsg::Heartbeat { .. } => n_beats += 1,
                    GuestMsg::Status { line, .. } => {
                        assert_eq!(line.len(), 300_000);
                        n_big += 1
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        beats.join().unwrap();
        bigs.join().unwrap();
        assert_eq!((n_beats, n_big), (200, 5));
    }
}
