// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The raw system calls of the kernel stage: the open-files limit and
//! mounting tracefs. Everything else reads files.

use std::ffi::CString;
use std::path::Path;

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
