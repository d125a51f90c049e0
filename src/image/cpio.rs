//! A small writer for the cpio "newc" format the kernel unpacks as an initramfs.
//!
//! Entries carry mtime 0 and uid/gid 0 so the same inputs give the same bytes.

use std::io::{self, Write};

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file with its contents.
    File(Vec<u8>),
    /// A symbolic link to this target.
    Symlink(String),
    /// A character device node (major, minor).
    CharDev(u32, u32),
}

/// One archive member: path without leading `/`, permission bits, and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, relative (`usr/bin/fio`).
    pub path: String,
    /// Permission bits (0o755, 0o644); the file type bits come from `kind`.
    pub perm: u32,
    /// What it is.
    pub kind: Kind,
}

fn pad4(w: &mut impl Write, len: usize) -> io::Result<()> {
    let pad = (4 - len % 4) % 4;
    w.write_all(&[0u8; 3][..pad])
}

fn header(
    w: &mut impl Write,
    ino: u32,
    mode: u32,
    size: usize,
    rdev: (u32, u32),
    name: &str,
) -> io::Result<()> {
    let namesize = name.len() + 1;
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        size as u32,
        0,
        0,
        rdev.0,
        rdev.1,
        namesize as u32,
        0,
    ];
    let mut h = String::from("070701");
    for f in fields {
        h.push_str(&format!("{f:08x}"));
    }
    w.write_all(h.as_bytes())?;
    w.write_all(name.as_bytes())?;
    w.write_all(&[0])?;
    pad4(w, 110 + namesize)
}

/// Writes all entries then the trailer. Fails on a file larger than 4 GiB (newc's limit).
pub fn write_archive(w: &mut impl Write, entries: &[Entry]) -> io::Result<()> {
    for (i, e) in entries.iter().enumerate() {
        let (ty, data, rdev): (u32, &[u8], (u32, u32)) = match &e.kind {
            Kind::Dir => (0o040000, &[], (0, 0)),
            Kind::File(d) => (0o100000, d, (0, 0)),
            Kind::Symlink(t) => (0o120000, t.as_bytes(), (0, 0)),
            Kind::CharDev(a, b) => (0o020000, &[], (*a, *b)),
        };
        if data.len() > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is over 4 GiB", e.path),
            ));
        }
        header(
            w,
            i as u32 + 1,
            ty | (e.perm & 0o7777),
            data.len(),
            rdev,
            &e.path,
        )?;
        w.write_all(data)?;
        pad4(w, data.len())?;
    }
    header(w, 0, 0, 0, (0, 0), "TRAILER!!!")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn sample() -> Vec<Entry> {
        vec![
            Entry {
                path: "etc".into(),
                perm: 0o755,
                kind: Kind::Dir,
            },
            Entry {
                path: "etc/a.txt".into(),
                perm: 0o644,
                kind: Kind::File(b"hello\n".to_vec()),
            },
            Entry {
                path: "etc/odd".into(),
                perm: 0o600,
                kind: Kind::File(vec![7u8; 4097]),
            },
            Entry {
                path: "etc/empty".into(),
                perm: 0o644,
                kind: Kind::File(vec![]),
            },
            Entry {
                path: "etc/link".into(),
                perm: 0o777,
                kind: Kind::Symlink("a.txt".into()),
            },
        ]
    }

    fn archive() -> Vec<u8> {
        let mut buf = Vec::new();
        write_archive(&mut buf, &sample()).unwrap();
        buf
    }

    fn cpio(args: &[&str], input: &[u8], dir: &std::path::Path) -> String {
        let mut c = Command::new("cpio")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cpio tool");
        c.stdin.take().unwrap().write_all(input).unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "cpio failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    #[ignore = "host: root cpio"]
    fn real_cpio_lists_what_we_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let list = cpio(&["-it", "--quiet"], &archive(), dir.path());
        let names: Vec<&str> = list.lines().collect();
        assert_eq!(
            names,
            ["etc", "etc/a.txt", "etc/odd", "etc/empty", "etc/link"]
        );
    }

    #[test]
    #[ignore = "host: root cpio"]
    fn real_cpio_extracts_same_bytes_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        cpio(&["-idm", "--quiet"], &archive(), dir.path());
        let p = dir.path();
        assert_eq!(std::fs::read(p.join("etc/a.txt")).unwrap(), b"hello\n");
        assert_eq!(std::fs::read(p.join("etc/odd")).unwrap(), vec![7u8; 4097]);
        assert_eq!(std::fs::read(p.join("etc/empty")).unwrap().len(), 0);
        assert_eq!(
            std::fs::read_link(p.join("etc/link")).unwrap().to_str(),
            Some("a.txt")
        );
        let mode = |f: &str| std::fs::metadata(p.join(f)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("etc/odd"), 0o600);
        assert_eq!(mode("etc/a.txt"), 0o644);
        assert_eq!(mode("etc"), 0o755);
    }

    #[test]
    #[ignore = "host: root cpio"]
    fn headers_are_aligned_and_trailer_present() {
        let a = archive();
        assert_eq!(a.len() % 4, 0);
        assert!(a.starts_with(b"070701"));
        let tail = String::from_utf8_lossy(&a[a.len() - 24..]).into_owned();
        assert!(tail.contains("TRAILER!!!"), "{tail}");
    }

    #[test]
    #[ignore = "host: root cpio"]
    fn char_device_listed_by_cpio() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = Vec::new();
        let e = Entry {
            path: "dev/console".into(),
            perm: 0o600,
            kind: Kind::CharDev(5, 1),
        };
        write_archive(&mut buf, &[e]).unwrap();
        let list = cpio(&["-itv", "--quiet"], &buf, dir.path());
        assert!(
            list.starts_with('c') && list.contains("5,") && list.contains("dev/console"),
            "{list}"
        );
    }
}
