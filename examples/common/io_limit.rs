// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A cgroup group whose limit holds reads of one raw disk, for an example
//! to throttle its own reads with (`why_it_waited`'s throttled request):
//! blk-throttle holds the bios over the limit and its kernel worker issues
//! them later. cgroup v2's `io.max` where the v2 hierarchy has the io
//! controller; else cgroup v1's `blkio.throttle.read_bps_device`, where
//! v1's blkio holds it (a host booted with v1 controllers, or a machine
//! where something mounted v1's blkio: once mounted, that hierarchy keeps
//! the controller for the rest of the boot).
//!
//! The limit applies to a group's processes, not threads, so the whole
//! process moves in ([`IoLimit::enter`]) and back out
//! ([`IoLimit::leave`]). Where the hierarchy is not mounted (a bare VM
//! guest), it is mounted for the group under the temporary directory; the
//! group, the io controller it turned on and that mount are undone when
//! the [`IoLimit`] is dropped. [`IoLimit::new`]'s `Err` says why this
//! machine cannot have the limit.

use std::ffi::{CStr, CString};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// Which cgroup version's interface holds the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// cgroup v2: `io.max`, `io.stat`.
    V2,
    /// cgroup v1's blkio: `blkio.throttle.read_bps_device`,
    /// `blkio.throttle.io_service_bytes` and `_serviced`.
    V1,
}

/// The group: created, its limit set, the process not in it yet.
#[derive(Debug)]
pub struct IoLimit {
    version: Version,
    /// The hierarchy's root (its mount point).
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
        let v2 = match cgroup2_mount() {
            Some(root) => (root, false),
            None => {
                let scratch = std::env::temp_dir().join(format!("{name}-cgroup2"));
                std::fs::create_dir_all(&scratch)
                    .map_err(|e| format!("creating {}: {e}", scratch.display()))?;
                if let Err(e) = mount(c"cgroup2", None, &scratch) {
                    let _ = std::fs::remove_dir(&scratch);
                    return Err(format!("no cgroup v2 hierarchy mounted, and {e}"));
                }
                (scratch, true)
            }
        };
        let v2_io = read(&v2.0.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "io"));
        let (version, (root, mounted)) = if v2_io {
            (Version::V2, v2)
        } else {
            // v1's blkio holds the controller: its hierarchy, mounted
            // again (the kernel hands back the one it keeps).
            let v2_controllers = read(&v2.0.join("cgroup.controllers")).unwrap_or_default();
            unmount_if(&v2.0, v2.1);
            let scratch = std::env::temp_dir().join(format!("{name}-blkio"));
            std::fs::create_dir_all(&scratch)
                .map_err(|e| format!("creating {}: {e}", scratch.display()))?;
            if let Err(e) = mount(c"cgroup", Some(c"blkio"), &scratch) {
                let _ = std::fs::remove_dir(&scratch);
                return Err(format!(
                    "cgroup v2 has no io controller (its controllers: {:?}), and cgroup v1's \
                     blkio cannot be mounted either ({e}): a kernel without CONFIG_BLK_CGROUP",
                    v2_controllers.trim()
                ));
            }
            (Version::V1, (scratch, true))
        };
        let home = match version {
            Version::V2 => own_cgroup("0::"),
            Version::V1 => own_v1_blkio_cgroup(),
        };
        let mut limit = IoLimit {
            version,
            group: root.join(name),
            home: root.join(home.trim_start_matches('/')),
            root,
            dev,
            turned_on_io: false,
            mounted,
        };
        // From here on, Drop undoes what was done.
        if version == Version::V2 {
            let control = limit.root.join("cgroup.subtree_control");
            if !read(&control)?.split_whitespace().any(|c| c == "io") {
                write(&control, "+io")?;
                limit.turned_on_io = true;
            }
        }
        std::fs::create_dir(&limit.group)
            .map_err(|e| format!("creating the group {}: {e}", limit.group.display()))?;
        match version {
            Version::V2 => write(
                &limit.group.join("io.max"),
                &format!("{} rbps={bytes_per_s}", limit.dev),
            )?,
            Version::V1 => write(
                &limit.group.join("blkio.throttle.read_bps_device"),
                &format!("{} {bytes_per_s}", limit.dev),
            )?,
        }
        Ok(limit)
    }

    /// The interface that holds the limit.
    pub fn version(&self) -> Version {
        self.version
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

    /// The group's reads of the disk so far (0 before its first): v2's
    /// `io.stat`, v1's `blkio.throttle.io_service_bytes` and `_serviced`.
    pub fn read_stat(&self) -> Result<ReadStat, String> {
        match self.version {
            Version::V2 => {
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
            Version::V1 => {
                // Lines of `MAJ:MIN Read N`.
                let reads = |file: &str| -> Result<u64, String> {
                    Ok(read(&self.group.join(file))?
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{} Read ", self.dev)))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0))
                };
                Ok(ReadStat {
                    bytes: reads("blkio.throttle.io_service_bytes")?,
                    ios: reads("blkio.throttle.io_serviced")?,
                })
            }
        }
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
        unmount_if(&self.root, self.mounted);
    }
}

/// Unmounts `root` and removes its directory, when it was `mounted` here.
fn unmount_if(root: &Path, mounted: bool) {
    if mounted {
        if let Ok(target) = CString::new(root.as_os_str().as_encoded_bytes()) {
            // SAFETY: a NUL-terminated path; nothing of ours stays open
            // under it (the process was moved back out).
            unsafe { libc::umount(target.as_ptr()) };
        }
        let _ = std::fs::remove_dir(root);
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

/// The process's group of a hierarchy (`/proc/self/cgroup`'s line that
/// starts with `prefix`: `0::` for v2), `/` where it has none.
fn own_cgroup(prefix: &str) -> String {
    std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
        })
        .unwrap_or_else(|| "/".to_owned())
}

/// The process's group of v1's blkio hierarchy (its line `N:blkio:/path`,
/// or one whose controllers include blkio), `/` where it has none.
fn own_v1_blkio_cgroup() -> String {
    std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut fields = l.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "blkio")
                    .then(|| path.to_owned())
            })
        })
        .unwrap_or_else(|| "/".to_owned())
}

/// Mounts a cgroup file system `fs` (with the options `data`) at `at`.
fn mount(fs: &CStr, data: Option<&CStr>, at: &Path) -> Result<(), String> {
    let target = CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", at.display()))?;
    // SAFETY: NUL-terminated strings that outlive the call; `data` a
    // NUL-terminated option string or null.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            0,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mounting {} at {}: {}",
            fs.to_string_lossy(),
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
