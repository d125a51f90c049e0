//! Just enough ELF64 parsing: program headers (is it static?) and one section's bytes (a
//! kernel module's `.modinfo`).

/// Why a file is not a usable ELF64.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("not a little-endian ELF64 file: {0}")]
pub struct BadElf(pub &'static str);

const PT_INTERP: u32 = 3;

fn u16_at(b: &[u8], o: usize) -> Result<u16, BadElf> {
    b.get(o..o + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(BadElf("truncated"))
}
fn u32_at(b: &[u8], o: usize) -> Result<u32, BadElf> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
        .ok_or(BadElf("truncated"))
}
fn u64_at(b: &[u8], o: usize) -> Result<u64, BadElf> {
    b.get(o..o + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
        .ok_or(BadElf("truncated"))
}

fn check_ident(b: &[u8]) -> Result<(), BadElf> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Err(BadElf("no ELF magic"));
    }
    if b[4] != 2 || b[5] != 1 {
        return Err(BadElf("not 64-bit little-endian"));
    }
    Ok(())
}

/// True when the ELF file has a PT_INTERP program header (it needs a dynamic loader).
pub fn has_interp(b: &[u8]) -> Result<bool, BadElf> {
    check_ident(b)?;
    let phoff = u64_at(b, 0x20)? as usize;
    let phentsize = u16_at(b, 0x36)? as usize;
    let phnum = u16_at(b, 0x38)? as usize;
    for i in 0..phnum {
        let off = phoff
            .checked_add(i * phentsize)
            .ok_or(BadElf("bad phoff"))?;
        if u32_at(b, off)? == PT_INTERP {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The bytes of the section called `name`, if any.
pub fn section<'a>(b: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, BadElf> {
    check_ident(b)?;
    let shoff = u64_at(b, 0x28)? as usize;
    let shentsize = u16_at(b, 0x3A)? as usize;
    let shnum = u16_at(b, 0x3C)? as usize;
    let shstrndx = u16_at(b, 0x3E)? as usize;
    let sh = |i: usize| -> Result<(u32, usize, usize), BadElf> {
        let o = shoff + i * shentsize;
        Ok((
            u32_at(b, o)?,
            u64_at(b, o + 24)? as usize,
            u64_at(b, o + 32)? as usize,
        ))
    };
    let (_, stroff, strsize) = sh(shstrndx)?;
    let strtab = b
        .get(stroff..stroff + strsize)
        .ok_or(BadElf("bad shstrtab"))?;
    for i in 0..shnum {
        let (nameoff, off, size) = sh(i)?;
        let n = strtab
            .get(nameoff as usize..)
            .ok_or(BadElf("bad section name"))?;
        let n = &n[..n.iter().position(|&c| c == 0).unwrap_or(n.len())];
        if n == name.as_bytes() {
            return b
                .get(off..off + size)
                .map(Some)
                .ok_or(BadElf("section out of file"));
        }
    }
    Ok(None)
}

/// Xen's ELF note type for a 32-bit physical entry point: a kernel that has it boots through
/// PVH, which QEMU's `-kernel` uses for an ELF file (no firmware real-mode path, no
/// decompression).
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// True when the ELF file's `.notes` section has a Xen PVH entry note.
pub fn has_pvh_entry(b: &[u8]) -> Result<bool, BadElf> {
    let Some(notes) = section(b, ".notes")? else {
        return Ok(false);
    };
    let mut o = 0usize;
    while o + 12 <= notes.len() {
        let namesz = u32_at(notes, o)? as usize;
        let descsz = u32_at(notes, o + 4)? as usize;
        let kind = u32_at(notes, o + 8)?;
        let name_end = o + 12 + namesz;
        let name = notes.get(o + 12..name_end).ok_or(BadElf("bad note"))?;
        if kind == XEN_ELFNOTE_PHYS32_ENTRY && name.starts_with(b"Xen") {
            return Ok(true);
        }
        o = name_end.next_multiple_of(4) + descsz.next_multiple_of(4);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_host_binary_has_interp() {
        let b = std::fs::read("/bin/ls").unwrap();
        assert!(has_interp(&b).unwrap());
    }

    #[test]
    fn static_busybox_has_no_interp() {
        let b = std::fs::read("/bin/busybox").unwrap();
        assert!(!has_interp(&b).unwrap());
    }

    #[test]
    fn garbage_is_refused_not_panicked() {
        assert!(has_interp(b"#!/bin/sh\n").is_err());
        let mut b = std::fs::read("/bin/ls").unwrap();
        b.truncate(80);
        assert!(has_interp(&b).is_err() || section(&b, ".text").is_err());
    }

    #[test]
    fn finds_a_named_section() {
        let b = std::fs::read("/bin/ls").unwrap();
        let interp = section(&b, ".interp").unwrap().unwrap();
        assert!(interp.starts_with(b"/lib64/ld-linux-x86-64.so.2"));
        assert_eq!(section(&b, ".nonexistent").unwrap(), None);
    }
}
