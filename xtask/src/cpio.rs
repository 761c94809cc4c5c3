//! A minimal writer of `newc` cpio archives (the initramfs format).
//!
//! Written here rather than calling `cpio` so that the archive can hold
//! device nodes and root-owned files without privileges on the host.

/// One archive member.
pub enum Entry {
    /// A directory.
    Dir,
    /// A regular file with its permission bits.
    File {
        /// Permission bits, e.g. `0o755`.
        mode: u32,
        /// Contents.
        data: Vec<u8>,
    },
    /// A symbolic link to `target`.
    Symlink(String),
    /// A character device node.
    CharDev {
        /// Device major number.
        major: u32,
        /// Device minor number.
        minor: u32,
    },
}

/// Builds a `newc` archive of `entries` (paths relative, parents first).
pub fn archive(entries: &[(String, Entry)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ino, (path, entry)) in entries.iter().enumerate() {
        let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match entry {
            Entry::Dir => (0o040_755, &[], (0, 0)),
            Entry::File { mode, data } => (0o100_000 | mode, data, (0, 0)),
            Entry::Symlink(target) => (0o120_777, target.as_bytes(), (0, 0)),
            Entry::CharDev { major, minor } => (0o020_600, &[], (*major, *minor)),
        };
        let nlink = if matches!(entry, Entry::Dir) { 2 } else { 1 };
        // `ino` is small; cpio only needs it unique per member.
        let ino = u32::try_from(ino + 1).unwrap_or(u32::MAX);
        member(&mut out, path, ino, mode, nlink, data, rdev);
    }
    member(&mut out, "TRAILER!!!", 0, 0, 1, &[], (0, 0));
    out
}

fn member(
    out: &mut Vec<u8>,
    name: &str,
    ino: u32,
    mode: u32,
    nlink: u32,
    data: &[u8],
    rdev: (u32, u32),
) {
    let size = u32::try_from(data.len()).expect("initramfs member over 4 GiB");
    let namesize = u32::try_from(name.len() + 1).expect("path too long");
    let fields = [
        ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, namesize, 0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let a = archive(&[
            ("bin".into(), Entry::Dir),
            (
                "bin/x".into(),
                Entry::File {
                    mode: 0o755,
                    data: b"hello".to_vec(),
                },
            ),
        ]);
        assert!(a.starts_with(b"070701"));
        assert_eq!(a.len() % 4, 0);
        // Header of the second member starts 4-aligned after the first.
        let first = 116; // header (110) + "bin\0", padded to 4
        assert_eq!(&a[first..first + 6], b"070701");
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains("bin/x\0"));
        assert!(text.contains("hello"));
        assert!(text.contains("TRAILER!!!\0"));
        // mode field of the file: 0o100755 = 0x81ed
        assert!(text.contains("000081ed"));
    }
}
