//! tgtd's management IPC, spoken directly, for the one request that carries a secret: creating
//! a CHAP account. `tgtadm --op new --mode account --password P` would put the secret in that
//! process's argv (`/proc/PID/cmdline`, readable by every local user); this module sends the
//! same bytes from our own process, so no command line ever holds it.
//!
//! The protocol, from tgt 1.0.85 (Debian 12's `tgt 1:1.0.85-1+deb12u1`; unchanged up to
//! v1.0.97), github.com/fujita/tgt:
//! - `usr/tgtadm.h`: `TGT_IPC_NAMESPACE` is `/var/run/tgtd/socket`; `enum tgtadm_op`,
//!   `enum tgtadm_mode`, `struct tgtadm_req`, `struct tgtadm_rsp { uint32_t err, len; }`.
//! - `usr/tgtadm.c` `ipc_mgmt_connect`: a filesystem (not abstract) `AF_LOCAL` `SOCK_STREAM`
//!   socket at `TGT_IPC_NAMESPACE.N` for `-C N`. `ipc_mgmt_req`: writes the header with
//!   `len = sizeof(req) + params`, then the params built with `concat_printf` as
//!   `user=U,password=P` plus their terminating NUL (`concat_buf_finish` counts it).
//!   `ipc_mgmt_rsp`: reads the 8-byte response; `err != 0` is a `tgtadm_errno`; `len - 8`
//!   bytes of text follow. Defaults in `main`: `tid = -1`, `lun = UINT64_MAX`, the rest 0.
//! - `usr/mgmt.c` `mtask_recv_send_handler`: reads `sizeof(req)` bytes, then `len - sizeof(req)`
//!   (at most `MAX_MGT_BUFSIZE`, 8 KiB); `ipc_perm` accepts only a peer with tgtd's uid and gid.
//!   `account_mgmt`: the user runs from `user=` to the first `,`, the password starts after
//!   `password=` and runs to the NUL, so neither may contain `,` (nor NUL).
//! - `usr/tgtadm_error.h`: the error codes ([`tgtadm_strerror`]).
//!
//! The header is 120 bytes on x86_64 with no padding (the two `uint64_t` fields fall on offset
//! 80, already 8-aligned); `tests/fixtures/tgtadm-1.0.85-account-new.strace` is what the
//! installed tgtadm wrote, and the unit tests compare our bytes with it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `sizeof(struct tgtadm_req)`.
pub const REQ_LEN: usize = 120;
/// `sizeof(struct tgtadm_rsp)`.
const RSP_LEN: usize = 8;
/// `TGT_LLD_NAME_LEN`.
const LLD_NAME_LEN: usize = 64;
/// tgtd refuses a request body larger than this (`MAX_MGT_BUFSIZE` in usr/mgmt.c).
const MAX_PARAMS: usize = 8 * 1024;
/// The most response text we read; tgtd's answer to an account creation has none.
const MAX_RESPONSE: usize = 64 * 1024;
/// How long one request may take, each of connect+send and receive.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// `enum tgtadm_op`: `OP_NEW`.
const OP_NEW: u32 = 0;
/// `enum tgtadm_mode`: `MODE_ACCOUNT`.
const MODE_ACCOUNT: u32 = 7;

/// Why the account could not be created. No variant holds the password.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// The user name or password cannot be sent in tgtd's `key=value,...` parameters.
    #[error("the CHAP {field} {problem}")]
    BadField {
        /// `user name` or `password`.
        field: &'static str,
        /// What is wrong, without the value.
        problem: &'static str,
    },
    /// Connecting to, writing to or reading from the control socket failed (or timed out).
    #[error("{step} tgtd's control socket {}: {source}", path.display())]
    Socket {
        /// `connecting to`, `sending to`, `reading the answer from`.
        step: &'static str,
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// tgtd's answer is not a `tgtadm_rsp` we can take.
    #[error("tgtd's control socket {} gave a malformed answer: {detail}", path.display())]
    Malformed {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// tgtd refused the request.
    #[error("tgtd refused: {message} (tgtadm error {code})")]
    Refused {
        /// The `tgtadm_errno`.
        code: u32,
        /// tgtadm's text for it.
        message: &'static str,
    },
}

/// tgtd's control socket for control port `ctl_port` (`tgtd -C N`, `tgtadm -C N`).
pub fn socket_path(ctl_port: u16) -> PathBuf {
    PathBuf::from(format!("{}/socket.{ctl_port}", super::tgt::SOCKET_DIR))
}

/// Creates the incoming CHAP account `user` with `password` in the tgtd at `socket`, as
/// `tgtadm --lld iscsi --op new --mode account --user U --password P` does, from this process.
pub fn new_account(socket: &Path, user: &str, password: &str) -> Result<(), IpcError> {
    let mut request = encode_new_account(user, password)?;
    let answer = call(socket, &request, TIMEOUT);
    // Do not leave the secret in freed memory longer than needed.
    request.iter_mut().for_each(|b| *b = 0);
    answer.map(drop)
}

/// The bytes tgtadm sends for `--lld iscsi --op new --mode account --user U --password P`:
/// the 120-byte `struct tgtadm_req` (little endian, x86_64) and `user=U,password=P\0`.
pub fn encode_new_account(user: &str, password: &str) -> Result<Vec<u8>, IpcError> {
    check_field("user name", user)?;
    check_field("password", password)?;
    let mut params = format!("user={user},password={password}").into_bytes();
    params.push(0);
    if params.len() > MAX_PARAMS {
        return Err(IpcError::BadField {
            field: "password",
            problem: "is too long for tgtd (8 KiB request limit)",
        });
    }
    let mut out = header(MODE_ACCOUNT, OP_NEW, "iscsi", params.len());
    out.append(&mut params);
    Ok(out)
}

/// `struct tgtadm_req` with tgtadm's defaults for the fields an account request does not set.
fn header(mode: u32, op: u32, lld: &str, params_len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(REQ_LEN + params_len);
    h.extend_from_slice(&mode.to_le_bytes());
    h.extend_from_slice(&op.to_le_bytes());
    let mut name = [0u8; LLD_NAME_LEN];
    name[..lld.len()].copy_from_slice(lld.as_bytes());
    h.extend_from_slice(&name);
    let len = u32::try_from(REQ_LEN + params_len).expect("params are at most MAX_PARAMS");
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&(-1i32).to_le_bytes()); // tid
    h.extend_from_slice(&0u64.to_le_bytes()); // sid
    h.extend_from_slice(&u64::MAX.to_le_bytes()); // lun
    for _ in ["cid", "host_no", "device_type", "ac_dir", "pack", "force"] {
        h.extend_from_slice(&0u32.to_le_bytes());
    }
    debug_assert_eq!(h.len(), REQ_LEN);
    h
}

/// tgtd splits the parameters at `,` and `=` and stops at NUL; an empty value is no account.
fn check_field(field: &'static str, value: &str) -> Result<(), IpcError> {
    let problem = if value.is_empty() {
        "is empty"
    } else if value.contains([',', '=', '\0']) {
        "contains ',', '=' or NUL, which tgtd's request format cannot carry"
    } else {
        return Ok(());
    };
    Err(IpcError::BadField { field, problem })
}

/// Sends one request and reads tgtd's answer: `Ok(text)` for `err == 0`.
fn call(socket: &Path, request: &[u8], timeout: Duration) -> Result<String, IpcError> {
    let io = |step: &'static str| {
        move |source| IpcError::Socket {
            step,
            path: socket.to_path_buf(),
            source,
        }
    };
    let mut s = UnixStream::connect(socket).map_err(io("connecting to"))?;
    s.set_write_timeout(Some(timeout))
        .and_then(|()| s.set_read_timeout(Some(timeout)))
        .map_err(io("setting timeouts on"))?;
    s.write_all(request).map_err(io("sending to"))?;
    let mut rsp = [0u8; RSP_LEN];
    s.read_exact(&mut rsp)
        .map_err(io("reading the answer from"))?;
    let text_len = decode_response(&rsp).map_err(|e| match e {
        RspError::Refused(code) => IpcError::Refused {
            code,
            message: tgtadm_strerror(code),
        },
        RspError::Length(len) => IpcError::Malformed {
            path: socket.to_path_buf(),
            detail: format!("length {len} outside 8..={}", RSP_LEN + MAX_RESPONSE),
        },
    })?;
    let mut text = vec![0u8; text_len];
    s.read_exact(&mut text)
        .map_err(io("reading the answer from"))?;
    Ok(String::from_utf8_lossy(&text)
        .trim_end_matches('\0')
        .to_string())
}

/// What a `struct tgtadm_rsp` says other than "ok, N bytes of text follow".
#[derive(Debug, PartialEq, Eq)]
enum RspError {
    Refused(u32),
    Length(u32),
}

/// The length of the text after a successful `struct tgtadm_rsp { err, len }` (`len` counts
/// the 8-byte header itself, usr/mgmt.c `set_mtask_result`).
fn decode_response(rsp: &[u8; RSP_LEN]) -> Result<usize, RspError> {
    let err = u32::from_le_bytes(rsp[0..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(rsp[4..8].try_into().expect("4 bytes"));
    if err != 0 {
        return Err(RspError::Refused(err));
    }
    match (len as usize).checked_sub(RSP_LEN) {
        Some(n) if n <= MAX_RESPONSE => Ok(n),
        _ => Err(RspError::Length(len)),
    }
}

/// tgtadm's text for a `tgtadm_errno` (usr/tgtadm_error.h order, usr/tgtadm.c
/// `tgtadm_strerror`).
pub fn tgtadm_strerror(code: u32) -> &'static str {
    const TEXT: [&str; 25] = [
        "success",
        "unknown error",
        "out of memory",
        "can't find the driver",
        "can't find the target",
        "can't find the logical unit",
        "can't find the session",
        "can't find the connection",
        "can't find the binding",
        "this target already exists",
        "this logical unit number already exists",
        "this binding already exists",
        "this access control rule already exists",
        "this access control rule does not exist",
        "this account already exists",
        "can't find the account",
        "too many accounts",
        "invalid request",
        "this target already has an outgoing account",
        "this target is still active",
        "this logical unit is still active",
        "this driver is busy",
        "this operation isn't supported",
        "unknown parameter",
        "this device has Prevent Removal set",
    ];
    TEXT.get(code as usize)
        .copied()
        .unwrap_or("(unknown tgtadm_errno)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    const STRACE: &str = include_str!("../../tests/fixtures/tgtadm-1.0.85-account-new.strace");

    /// The bytes of each `write(4, "\x..", N)` line of the captured strace.
    fn captured_writes() -> Vec<Vec<u8>> {
        STRACE
            .lines()
            .filter(|l| l.contains(" write(4, \""))
            .map(|l| {
                let hex = &l[l.find('"').unwrap() + 1..l.rfind('"').unwrap()];
                hex.split("\\x")
                    .skip(1)
                    .map(|b| u8::from_str_radix(b, 16).unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn encodes_what_tgtadm_1_0_85_sends() {
        let writes = captured_writes();
        assert_eq!(writes.len(), 2, "header and params");
        assert_eq!(writes[0].len(), REQ_LEN);
        let ours = encode_new_account("probeuser", "probepass").unwrap();
        assert_eq!(&ours[..REQ_LEN], writes[0].as_slice(), "header");
        assert_eq!(&ours[REQ_LEN..], writes[1].as_slice(), "params");
        assert_eq!(&ours[REQ_LEN..], b"user=probeuser,password=probepass\0");
        // len = 120 + 34 at offset 72, tid -1 at 76, lun u64::MAX at 88.
        assert_eq!(ours[72..76], 154u32.to_le_bytes());
        assert_eq!(ours[76..80], [0xff; 4]);
        assert_eq!(ours[88..96], [0xff; 8]);
    }

    #[test]
    fn refuses_separators_and_empty_fields_without_echoing_them() {
        for (user, password) in [
            ("a,b", "secretsecret"),
            ("a=b", "secretsecret"),
            ("", "secretsecret"),
            ("user", "pa,ss-SECRET"),
            ("user", "pa=ss-SECRET"),
            ("user", "pa\0ss-SECRET"),
            ("user", ""),
        ] {
            let e = encode_new_account(user, password).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, IpcError::BadField { .. }), "{text}");
            assert!(!text.contains("SECRET"), "{text}");
        }
        let long = "x".repeat(MAX_PARAMS);
        assert!(encode_new_account("user", &long).is_err());
    }

    #[test]
    fn decodes_responses_with_bounds() {
        assert_eq!(decode_response(&[0, 0, 0, 0, 8, 0, 0, 0]), Ok(0));
        assert_eq!(decode_response(&[0, 0, 0, 0, 20, 0, 0, 0]), Ok(12));
        assert_eq!(
            decode_response(&[14, 0, 0, 0, 8, 0, 0, 0]),
            Err(RspError::Refused(14))
        );
        assert_eq!(
            decode_response(&[0, 0, 0, 0, 4, 0, 0, 0]),
            Err(RspError::Length(4))
        );
        assert_eq!(
            decode_response(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
            Err(RspError::Length(u32::MAX))
        );
        assert_eq!(tgtadm_strerror(14), "this account already exists");
        assert_eq!(tgtadm_strerror(24), "this device has Prevent Removal set");
        assert_eq!(tgtadm_strerror(99), "(unknown tgtadm_errno)");
    }

    /// A fake tgtd on a socket in a temp dir: reads one request, answers `reply`.
    fn fake_tgtd(reply: Vec<u8>) -> (tempfile::TempDir, PathBuf, std::thread::JoinHandle<Vec<u8>>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket.1");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut req = vec![0u8; REQ_LEN];
            c.read_exact(&mut req).unwrap();
            let len = u32::from_le_bytes(req[72..76].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len - REQ_LEN];
            c.read_exact(&mut body).unwrap();
            c.write_all(&reply).unwrap();
            req.extend(body);
            req
        });
        (dir, path, server)
    }

    #[test]
    fn sends_the_request_and_takes_success() {
        let (_dir, path, server) = fake_tgtd(vec![0, 0, 0, 0, 8, 0, 0, 0]);
        new_account(&path, "vmbench-x", "s3cret").unwrap();
        let got = server.join().unwrap();
        assert_eq!(got, encode_new_account("vmbench-x", "s3cret").unwrap());
    }

    #[test]
    fn a_refusal_names_tgtds_reason_and_not_the_secret() {
        let (_dir, path, server) = fake_tgtd(vec![14, 0, 0, 0, 8, 0, 0, 0]);
        let e = new_account(&path, "vmbench-x", "TOPSECRET").unwrap_err();
        server.join().unwrap();
        assert!(matches!(e, IpcError::Refused { code: 14, .. }), "{e:?}");
        let text = format!("{e} {e:?}");
        assert!(text.contains("this account already exists"), "{text}");
        assert!(!text.contains("TOPSECRET"), "{text}");
    }

    #[test]
    fn a_huge_announced_answer_is_refused_before_reading_it() {
        let (_dir, path, server) = fake_tgtd(vec![0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
        let e = new_account(&path, "vmbench-x", "s3cret").unwrap_err();
        server.join().unwrap();
        assert!(matches!(e, IpcError::Malformed { .. }), "{e}");
    }

    #[test]
    fn a_silent_tgtd_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket.1");
        let _listener = UnixListener::bind(&path).unwrap(); // accepts (backlog), never answers
        let start = std::time::Instant::now();
        let req = encode_new_account("u", "p").unwrap();
        let e = call(&path, &req, Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let IpcError::Socket { step, source, .. } = e else {
            panic!("{e}")
        };
        assert_eq!(step, "reading the answer from");
        assert!(
            matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{source}"
        );
    }

    #[test]
    fn a_closed_connection_and_a_missing_socket_are_socket_errors() {
        // The server closes after the request without answering.
        let (_dir, path, server) = fake_tgtd(Vec::new());
        let e = new_account(&path, "vmbench-x", "s3cret").unwrap_err();
        server.join().unwrap();
        assert!(
            matches!(
                e,
                IpcError::Socket {
                    step: "reading the answer from",
                    ..
                }
            ),
            "{e}"
        );
        let e = new_account(Path::new("/nonexistent/socket.1"), "u", "p").unwrap_err();
        assert!(
            matches!(
                e,
                IpcError::Socket {
                    step: "connecting to",
                    ..
                }
            ),
            "{e}"
        );
    }
}
