// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A cgroup v2 group whose `io.max` limits reads of one raw disk, for an
//! example to throttle its own reads with (`why_it_waited`'s throttled
//! request): blk-throttle, the kernel's `io.max`, holds the bios over the
//! limit and its kernel worker issues them later.
//!
//! The io controller is a domain controller: the limit applies to a
//! group's processes, not threads, so the whole process moves in
//! ([`IoLimit::enter`]) and back out ([`IoLimit::leave`]). Where no
//! cgroup v2 hierarchy is mounted (a bare VM guest), one is mounted for the
//! group under the temporary directory; the group, the io controller it
//! turned on and that mount are undone when the [`IoLimit`] is dropped.
//! [`IoLimit::new`]'s `Err` says why this machine cannot have the limit.

use std::ffi::{CStr, CString};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// The group: created, its limit set, the process not in it yet.
#[derive(Debug)]
pub struct IoLimit {
    /// The cgroup v2 hierarchy's root (its mount point).
    root: PathBuf,
    /// The group, a child of the root.
    group: PathBuf,
    /// The group the process was in, to go back to.
    home: PathBuf,
    /// The disk's `MAJ:MIN`.
    dev: String,
    /// Whether the root's `subtree_control` had no `io` before.
    turned_on_io: bool,
    /// Whether the hierarchy was mounted for the group.
    mounted: bool,
}

/// What the group's `io.stat` says of its reads of the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStat {
    /// `rbytes`.
    pub bytes: u64,
    /// `rios`: requests completed.
    pub ios: u64,
}

impl IoLimit {
    /// A group `name` limiting reads of `disk` (a raw whole disk) to
    /// `bytes_per_s` (`io.max`'s `rbps`). `Err`: why not here.
    pub fn new(name: &str, disk: &Path, bytes_per_s: u64) -> Result<IoLimit, String> {
        let meta = std::fs::metadata(disk).map_err(|e| format!("{}: {e}", disk.display()))?;
        if !meta.file_type().is_block_device() {
            return Err(format!(
                "{} is not a raw disk (io.max limits a block device: name one with \
                 KSPAN_SLOW_DISK)",
                disk.display()
            ));
        }
        let dev = format!("{}:{}", libc::major(meta.rdev()), libc::minor(meta.rdev()));
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(
                "not root (moving the process between cgroups and writing io.max \
                 need root: run it with sudo)"
                    .to_owned(),
            );
        }
        let (root, mounted) = match cgroup2_mount() {
            Some(root) => (root, false),
            None => {
                let scratch = std::env::temp_dir().join(format!("{name}-cgroup2"));
                std::fs::create_dir_all(&scratch)
                    .map_err(|e| format!("creating {}: {e}", scratch.display()))?;
                if let Err(e) = mount_cgroup2(&scratch) {
                    let _ = std::fs::remove_dir(&scratch);
                    return Err(format!("no cgroup v2 hierarchy mounted, and {e}"));
                }
                (scratch, true)
            }
        };
        let mut limit = IoLimit {
            group: root.join(name),
            home: root.join(own_cgroup().trim_start_matches('/')),
            root,
            dev,
            turned_on_io: false,
            mounted,
        };
        // From here on, Drop undoes what was done.
        let controllers = read(&limit.root.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == "io") {
            return Err(format!(
                "cgroup v2 at {} has no io controller (its controllers: {:?}; cgroup v1's \
                 blkio holds it, or the kernel has no CONFIG_BLK_CGROUP)",
                limit.root.display(),
                controllers.trim()
            ));
        }
        let control = limit.root.join("cgroup.subtree_control");
        if !read(&control)?.split_whitespace().any(|c| c == "io") {
            write(&control, "+io")?;
            limit.turned_on_io = true;
        }
        std::fs::create_dir(&limit.group)
            .map_err(|e| format!("creating the group {}: {e}", limit.group.display()))?;
        write(
            &limit.group.join("io.max"),
            &format!("{} rbps={bytes_per_s}", limit.dev),
        )?;
        Ok(limit)
    }

    /// The group's name.
    pub fn name(&self) -> String {
        self.group
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Moves the whole process (every thread) into the group.
    pub fn enter(&self) -> Result<(), String> {
        write(
            &self.group.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    /// Moves the process back to the group it was in.
    pub fn leave(&self) -> Result<(), String> {
        write(
            &self.home.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    /// The group's reads of the disk so far (0 before its first).
    pub fn read_stat(&self) -> Result<ReadStat, String> {
        let text = read(&self.group.join("io.stat"))?;
        let Some(line) = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(self.dev.as_str()))
        else {
            return Ok(ReadStat::default());
        };
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(ReadStat {
            bytes: field("rbytes"),
            ios: field("rios"),
        })
    }
}

impl Drop for IoLimit {
    fn drop(&mut self) {
        // Each step even if one before failed: what it can undo, it does.
        let _ = self.leave();
        let _ = std::fs::remove_dir(&self.group);
        if self.turned_on_io {
            let _ = std::fs::write(self.root.join("cgroup.subtree_control"), "-io");
        }
        if self.mounted {
            if let Ok(target) = CString::new(self.root.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path; nothing of ours stays open
                // under it (the process was moved back out).
                unsafe { libc::umount(target.as_ptr()) };
            }
            let _ = std::fs::remove_dir(&self.root);
        }
    }
}

/// Where a cgroup v2 hierarchy is mounted (`/proc/self/mounts`), if one is.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
    })
}

/// The process's cgroup v2 group (`/proc/self/cgroup`'s `0::` line), `/`
/// where it has none.
fn own_cgroup() -> String {
    std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        })
        .unwrap_or_else(|| "/".to_owned())
}

fn mount_cgroup2(at: &Path) -> Result<(), String> {
    let target = CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", at.display()))?;
    let fs: &CStr = c"cgroup2";
    // SAFETY: NUL-terminated strings that outlive the call; no data.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mounting cgroup2 at {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {text:?} to {}: {e}", path.display()))
}
