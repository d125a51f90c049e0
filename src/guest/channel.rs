//! The agent channel on the host: the domain's virtio-serial (or Xen PV console) channel opened
//! through the libvirt connection (`virDomainOpenChannel`), so it works the same for a local and
//! a remote libvirt host. Reads are bounded by [`vmbench_proto::LineDecoder`]; every wait has a
//! timeout; the stream is non-blocking, so no call can hang on a silent guest.

use super::GuestError;
use crate::hypervisor::libvirt::{AgentStream, Libvirt, LibvirtError, RunningDomain, Transfer};
use std::collections::VecDeque;
use std::io;
use std::time::Duration;
use tokio::time::Instant;
use vmbench_proto::{decode, encode, GuestMsg, HostMsg, LineDecoder, PORT_NAME};

/// The first wait when nothing has arrived; doubled up to [`MAX_POLL`] while the guest is silent.
const MIN_POLL: Duration = Duration::from_millis(1);
/// The longest wait between two looks at the stream: the latency a message can pick up.
const MAX_POLL: Duration = Duration::from_millis(10);

/// A non-blocking byte pipe to the agent: the libvirt stream, or a unix socket in unit tests
/// that play a hostile agent. `Ok(None)`: nothing can move now.
pub trait Transport: Send {
    /// Receives what has arrived; `Some(0)` is the end of the stream.
    fn try_recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Sends a prefix of `data`.
    fn try_send(&mut self, data: &[u8]) -> io::Result<Option<usize>>;
}

impl Transport for AgentStream {
    fn try_recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        AgentStream::try_recv(self, buf)
            .map(moved)
            .map_err(io::Error::other)
    }
    fn try_send(&mut self, data: &[u8]) -> io::Result<Option<usize>> {
        AgentStream::try_send(self, data)
            .map(moved)
            .map_err(io::Error::other)
    }
}

fn moved(t: Transfer) -> Option<usize> {
    match t {
        Transfer::Bytes(n) => Some(n),
        Transfer::WouldBlock => None,
    }
}

/// A unix socket, set non-blocking by [`Channel::over`]'s caller.
impl Transport for std::os::unix::net::UnixStream {
    fn try_recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        would_block(io::Read::read(self, buf))
    }
    fn try_send(&mut self, data: &[u8]) -> io::Result<Option<usize>> {
        would_block(io::Write::write(self, data))
    }
}

fn would_block(r: io::Result<usize>) -> io::Result<Option<usize>> {
    match r {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// A connected channel.
pub struct Channel {
    stream: Box<dyn Transport>,
    decoder: LineDecoder,
    pending: VecDeque<Vec<u8>>,
    buf: Box<[u8]>,
}

impl Channel {
    /// Opens the agent's channel of `dom`, retrying until `timeout` (QEMU sets the channel up a
    /// moment after the domain starts).
    pub async fn open(
        conn: &Libvirt,
        dom: &RunningDomain,
        timeout: Duration,
    ) -> Result<Channel, GuestError> {
        let end = Instant::now() + timeout;
        loop {
            match conn.open_channel(dom, PORT_NAME) {
                Ok(stream) => return Ok(Channel::over(Box::new(stream))),
                Err(e) if Instant::now() >= end => {
                    return Err(stream_err(
                        format!("opening the agent channel of {}", dom.name()),
                        e,
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// A channel over any transport (a non-blocking one: a blocking read would defeat the
    /// timeouts).
    pub fn over(stream: Box<dyn Transport>) -> Channel {
        Channel {
            stream,
            decoder: LineDecoder::new(),
            pending: VecDeque::new(),
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
        }
    }

    /// The next message, or `Timeout` when nothing complete arrives within `timeout`.
    pub async fn recv(
        &mut self,
        timeout: Duration,
        waiting_for: &str,
    ) -> Result<GuestMsg, GuestError> {
        let end = Instant::now() + timeout;
        let mut poll = MIN_POLL;
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return decode::<GuestMsg>(&frame).map_err(GuestError::Frame);
            }
            let got = self
                .stream
                .try_recv(&mut self.buf)
                .map_err(|source| GuestError::Io {
                    context: "reading the agent channel".into(),
                    source,
                })?;
            match got {
                Some(0) => {
                    self.decoder.finish().map_err(GuestError::Frame)?;
                    return Err(GuestError::Closed {
                        waiting_for: waiting_for.to_string(),
                    });
                }
                Some(n) => {
                    let frames = self
                        .decoder
                        .push(&self.buf[..n])
                        .map_err(GuestError::Frame)?;
                    self.pending.extend(frames);
                    poll = MIN_POLL;
                }
                None => {
                    let now = Instant::now();
                    if now >= end {
                        return Err(GuestError::Timeout {
                            waiting_for: waiting_for.to_string(),
                            secs: timeout.as_secs(),
                        });
                    }
                    tokio::time::sleep(poll.min(end - now)).await;
                    poll = (poll * 2).min(MAX_POLL);
                }
            }
        }
    }

    /// Sends one message. The agent reads its channel all the time, so a send that cannot move
    /// for [`SEND_TIMEOUT`] means the guest is stuck.
    pub async fn send(&mut self, msg: &HostMsg) -> Result<(), GuestError> {
        let bytes = encode(msg).map_err(GuestError::Frame)?;
        let end = Instant::now() + SEND_TIMEOUT;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let sent = self
                .stream
                .try_send(rest)
                .map_err(|source| GuestError::Io {
                    context: "writing the agent channel".into(),
                    source,
                })?;
            match sent {
                Some(n) if n > 0 => rest = &rest[n.min(rest.len())..],
                _ if Instant::now() >= end => {
                    return Err(GuestError::Timeout {
                        waiting_for: "the guest to take a message".into(),
                        secs: SEND_TIMEOUT.as_secs(),
                    })
                }
                _ => tokio::time::sleep(MAX_POLL).await,
            }
        }
        Ok(())
    }
}

/// How long a message may wait to be taken by the guest.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

fn stream_err(context: String, e: LibvirtError) -> GuestError {
    GuestError::Io {
        context,
        source: io::Error::other(e),
    }
}
