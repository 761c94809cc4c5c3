// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The raw system calls of the kernel stage: the open-files limit,
//! mounting tracefs, whether a directory is on a BPF file system, whether
//! this process may open perf events, and a descriptor of one of its
//! threads (to name it to task storage). Everything else reads files.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use libbpf_rs::libbpf_sys;

/// A pidfd of the thread `tid` of this process (`pidfd_open` with
/// `PIDFD_THREAD`, Linux 6.9+): task-storage maps are keyed by one.
pub(crate) fn thread_pidfd(tid: u32) -> std::io::Result<OwnedFd> {
    // PIDFD_THREAD is O_EXCL (include/uapi/linux/pidfd.h).
    let flags = libc::O_EXCL as libc::c_long;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; nothing is read or written through pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::c_long::from(tid as i32), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Raises the limit of open files: each traced function holds a link per
/// direction (and a program copy for trampolines), and a thousand functions
/// pass the usual soft limit of 1,024 (bpftrace raises it too). Best effort:
/// an attach that runs out says so with EMFILE.
pub(crate) fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which is valid.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    // A privileged process may raise the hard limit too; if not, the soft
    // limit goes up to the hard one.
    let wanted = limit.rlim_max.max(1 << 16);
    let raised = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: wanted,
    };
    // SAFETY: setrlimit reads the struct it is given, which is valid.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return;
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            tracing::debug!("kspan could not raise the open-files limit");
        }
    }
}

/// Mounts tracefs at `at`; the error is the kernel's.
pub(crate) fn mount_tracefs(at: &Path) -> Result<(), String> {
    let target = CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| "the path has a NUL byte".to_owned())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call;
    // tracefs takes no mount data.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Whether `path` is on a BPF file system (bpffs), the only one the kernel
/// pins BPF objects in; the error is the kernel's (`NotFound` when nothing
/// is there).
pub(crate) fn is_bpffs(path: &Path) -> std::io::Result<bool> {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path has a NUL byte")
    })?;
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: the path is a NUL-terminated string that outlives the call,
    // and statfs fills the struct it is given.
    if unsafe { libc::statfs(path.as_ptr(), fs.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statfs succeeded, so it filled the struct.
    let fs = unsafe { fs.assume_init() };
    Ok(fs.f_type == libc::BPF_FS_MAGIC)
}

/// Opens and closes a disabled dummy software event on CPU 0 for every
/// process, as kprobes and syscall tracepoints are opened: the kernel runs
/// the same permission checks (`perf_event_paranoid`, CAP_PERFMON, a
/// distribution's own restriction, security modules) and nothing is
/// counted. `Err` is the errno.
pub(crate) fn open_perf_event() -> Result<(), i32> {
    let mut attr = libbpf_sys::perf_event_attr {
        type_: libbpf_sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: u64::from(libbpf_sys::PERF_COUNT_SW_DUMMY),
        ..Default::default()
    };
    attr.set_disabled(1);
    // SAFETY: `attr` is initialised with its size and outlives the call;
    // pid -1 with cpu 0 is a system-wide event, as kspan's attaches open.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
            -1,
            0,
            -1,
            libc::c_ulong::from(1u8 << 3), // PERF_FLAG_FD_CLOEXEC
        )
    };
    match i32::try_from(fd) {
        Ok(fd) if fd >= 0 => {
            // SAFETY: the kernel just returned this descriptor, owned by no
            // one else; dropping it closes the event.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
            Ok(())
        }
        _ => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)),
    }
}

/// A file mapped read-only into memory, unmapped on drop.
pub(crate) struct MappedFile {
    addr: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    /// Maps the whole of `file` (not empty), if the file system lets it be
    /// mapped: sysfs does for `/sys/kernel/btf/vmlinux` since Linux 6.16,
    /// which saves reading it a page per system call.
    pub(crate) fn map(file: &std::fs::File) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;

        let len = usize::try_from(file.metadata()?.len())
            .ok()
            .filter(|&len| len > 0)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a new private read-only mapping of a valid descriptor; no
        // existing memory is touched, and the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { addr, len })
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `addr` is a live mapping of `len` readable bytes until
        // drop, and nothing writes through it.
        unsafe { std::slice::from_raw_parts(self.addr.cast::<u8>(), self.len) }
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

// SAFETY: the mapping is private and read-only, and `MappedFile` gives out
// only shared slices of it: nothing in it changes, whichever thread reads
// or unmaps it.
unsafe impl Send for MappedFile {}
// SAFETY: as for `Send`: `&MappedFile` reads immutable memory only.
unsafe impl Sync for MappedFile {}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no slice from
        // `bytes` outlives `self`.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}
