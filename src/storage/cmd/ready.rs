//! Readiness: loopback port probes and the one polling wait every embedded server uses.

use super::super::StorageError;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Whether a TCP port on 127.0.0.1 is free: nobody answers on it and we could bind it (a
/// listener on 0.0.0.0 also makes the bind fail).
pub fn loopback_port_free(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        return false;
    }
    TcpListener::bind(addr).is_ok()
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn loopback_port_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Whether something accepts TCP connections on `addr:port`.
pub fn port_answers(addr: Ipv4Addr, port: u16) -> bool {
    let addr = SocketAddr::from((addr, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// A port the kernel says is free on 127.0.0.1 right now (bind to port 0 and release it).
pub fn ephemeral_loopback_port() -> Result<u16, StorageError> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| StorageError::Io {
        context: "finding a free port on 127.0.0.1".to_string(),
        source,
    })?;
    let port = l
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| StorageError::Io {
            context: "reading a bound port".to_string(),
            source,
        })?;
    Ok(port)
}

/// How a [`wait_until`] ended without success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The process being waited for exited first (its exit status).
    Exited(String),
    /// The deadline passed; the last probe's error.
    TimedOut(String),
}

/// Polls `probe` every `interval` until it succeeds, `exited` reports the process gone, or
/// `timeout` passes: the readiness wait of every embedded server.
pub fn wait_until(
    timeout: Duration,
    interval: Duration,
    exited: impl Fn() -> Option<String>,
    mut probe: impl FnMut() -> Result<(), String>,
) -> Result<(), Waited> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(status) = exited() {
            return Err(Waited::Exited(status));
        }
        match probe() {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(interval);
    }
    Err(Waited::TimedOut(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_ends_each_way() {
        let ms = Duration::from_millis;
        let mut n = 0;
        let ok = wait_until(
            ms(500),
            ms(1),
            || None,
            || {
                n += 1;
                if n < 3 {
                    Err(format!("try {n}"))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(ok, Ok(()));
        assert_eq!(
            wait_until(ms(500), ms(1), || Some("exit 1".into()), || Ok(())),
            Err(Waited::Exited("exit 1".into()))
        );
        assert_eq!(
            wait_until(ms(20), ms(1), || None, || Err("no".into())),
            Err(Waited::TimedOut("no".into()))
        );
    }
}
