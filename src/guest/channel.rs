//! The agent channel on the host: a unix socket QEMU listens on (virtio-serial or Xen PV console
//! behind it). Reads are bounded by [`vmbench_proto::LineDecoder`]; every wait has a timeout.

use super::GuestError;
use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use vmbench_proto::{decode, encode, GuestMsg, HostMsg, LineDecoder};

/// A connected channel.
pub struct Channel {
    stream: UnixStream,
    decoder: LineDecoder,
    pending: VecDeque<Vec<u8>>,
    buf: Box<[u8]>,
}

impl Channel {
    /// Connects to the socket QEMU created, retrying until `deadline` (QEMU creates it a moment
    /// after the domain starts).
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Channel, GuestError> {
        let end = Instant::now() + timeout;
        loop {
            match UnixStream::connect(path).await {
                Ok(stream) => {
                    return Ok(Channel {
                        stream,
                        decoder: LineDecoder::new(),
                        pending: VecDeque::new(),
                        buf: vec![0u8; 64 * 1024].into_boxed_slice(),
                    })
                }
                Err(e) if Instant::now() >= end => {
                    return Err(GuestError::Io {
                        context: format!("connecting to the agent channel {}", path.display()),
                        source: e,
                    })
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The next message, or `Timeout` when nothing complete arrives within `timeout`.
    pub async fn recv(
        &mut self,
        timeout: Duration,
        waiting_for: &str,
    ) -> Result<GuestMsg, GuestError> {
        let end = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return decode::<GuestMsg>(&frame).map_err(GuestError::Frame);
            }
            let n = tokio::time::timeout_at(end, self.stream.read(&mut self.buf))
                .await
                .map_err(|_| GuestError::Timeout {
                    waiting_for: waiting_for.to_string(),
                    secs: timeout.as_secs(),
                })?
                .map_err(|e| GuestError::Io {
                    context: "reading the agent channel".into(),
                    source: e,
                })?;
            if n == 0 {
                self.decoder.finish().map_err(GuestError::Frame)?;
                return Err(GuestError::Closed {
                    waiting_for: waiting_for.to_string(),
                });
            }
            let frames = self
                .decoder
                .push(&self.buf[..n])
                .map_err(GuestError::Frame)?;
            self.pending.extend(frames);
        }
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &HostMsg) -> Result<(), GuestError> {
        let bytes = encode(msg).map_err(GuestError::Frame)?;
        self.stream
            .write_all(&bytes)
            .await
            .map_err(|e| GuestError::Io {
                context: "writing the agent channel".into(),
                source: e,
            })
    }
}
