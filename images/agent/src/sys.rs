//! Thin wrappers over the syscalls the agent needs as init.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in string"))
}

/// Mounts `fstype` from `source` on `target`, creating the target directory. EBUSY (already
/// mounted, e.g. a re-exec) is not an error.
pub fn mount(source: &str, target: &str, fstype: &str, data: Option<&str>) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    let (s, t, f) = (cstr(source)?, cstr(target)?, cstr(fstype)?);
    let d = data.map(cstr).transpose()?;
    let dp = d.as_ref().map_or(std::ptr::null(), |d| d.as_ptr().cast());
    // SAFETY: all pointers are valid NUL-terminated strings (or null for data) for the call.
    let r = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), 0, dp) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EBUSY) {
        return Ok(());
    }
    Err(io::Error::new(
        e.kind(),
        format!("mount {fstype} on {target}: {e}"),
    ))
}

/// Makes a block device node (0600) for `major:minor` at `path`; an existing node is fine.
pub fn mknod_block(path: &str, major: u32, minor: u32) -> io::Result<()> {
    let p = cstr(path)?;
    let dev = libc::makedev(major, minor);
    // SAFETY: p is a valid NUL-terminated path for the call.
    if unsafe { libc::mknod(p.as_ptr(), libc::S_IFBLK | 0o600, dev) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EEXIST) {
        return Ok(());
    }
    Err(e)
}

/// Loads one kernel module file with finit_module; an already loaded module is fine.
pub fn load_module(path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    let empty = cstr("")?;
    // SAFETY: fd is open for the duration of the call; params is a valid empty C string.
    let r = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            f.as_raw_fd(),
            empty.as_ptr(),
            0 as libc::c_int,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EEXIST) {
        return Ok(());
    }
    Err(io::Error::new(
        e.kind(),
        format!("finit_module {}: {e}", path.display()),
    ))
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::from("unknown");
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Milliseconds since boot (CLOCK_BOOTTIME).
pub fn uptime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// Flushes all filesystems.
pub fn sync() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Syncs and powers the machine off. As PID 1 we must never return, so if the call fails we
/// sleep forever and let the host's timeout take over.
pub fn power_off() -> ! {
    sync();
    // SAFETY: reboot with RB_POWER_OFF either powers off or fails with an errno.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
    println!(
        "vmbench-agent: power off failed: {}",
        io::Error::last_os_error()
    );
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// Puts a tty in raw mode (no echo, no line editing, no CR/LF mapping), so frames pass
/// through a hvc console byte for byte.
pub fn make_raw(f: &File) -> io::Result<()> {
    // SAFETY: termios is plain data; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and termios pointer.
    if unsafe { libc::tcgetattr(f.as_raw_fd(), &mut t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: t was initialised by tcgetattr.
    unsafe { libc::cfmakeraw(&mut t) };
    // SAFETY: valid fd and termios pointer.
    if unsafe { libc::tcsetattr(f.as_raw_fd(), libc::TCSANOW, &t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Switches O_NONBLOCK on or off.
pub fn set_nonblocking(f: &File, on: bool) -> io::Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a valid fd.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
