// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The thread pointer, per architecture: where a thread's static TLS is
//! found from user space, and where the kernel keeps it in `task_struct`
//! for a BPF program to find the same slot. Everything kspan assumes about
//! an architecture's TLS is here.
//!
//! - x86-64: the fs base (`arch_prctl(ARCH_GET_FS)`), kept in
//!   `task->thread.fsbase`; TLS variant II, the executable's block below
//!   the pointer.
//! - AArch64: `tpidr_el0`, kept in `task->thread.uw.tp_value` (saved at
//!   every switch-out; glibc sets it before `main`, so a thread has been
//!   switched out, and the value saved, long before kspan reads it); TLS
//!   variant I, the blocks above the pointer and its 16-byte TCB.

/// The member of `struct task_struct` holding a stopped thread's thread
/// pointer, as a path of member names for the kernel's BTF; `None` where
/// kspan does not know the architecture.
#[cfg(target_arch = "x86_64")]
pub(crate) const TASK_THREAD_POINTER: Option<&[&str]> = Some(&["thread", "fsbase"]);
#[cfg(target_arch = "aarch64")]
pub(crate) const TASK_THREAD_POINTER: Option<&[&str]> = Some(&["thread", "uw", "tp_value"]);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) const TASK_THREAD_POINTER: Option<&[&str]> = None;

/// Whether the executable's static TLS sits below the thread pointer
/// (variant II) rather than above it (variant I).
#[cfg(test)]
pub(crate) const TLS_BELOW_THREAD_POINTER: bool = cfg!(target_arch = "x86_64");

/// `arch_prctl`'s "get the fs base" code (asm/prctl.h; not in `libc`).
#[cfg(target_arch = "x86_64")]
const ARCH_GET_FS: libc::c_int = 0x1003;

/// The calling thread's thread pointer.
#[cfg(target_arch = "x86_64")]
pub(crate) fn current() -> std::io::Result<u64> {
    let mut fs_base: u64 = 0;
    // SAFETY: ARCH_GET_FS writes the thread's fs base to the given address.
    let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_FS, &mut fs_base as *mut u64) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fs_base)
}

/// The calling thread's thread pointer.
#[cfg(target_arch = "aarch64")]
pub(crate) fn current() -> std::io::Result<u64> {
    let tp: u64;
    // SAFETY: reading tpidr_el0, which user space may always read, has no
    // other effect.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags))
    };
    Ok(tp)
}

/// The calling thread's thread pointer: not known on this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn current() -> std::io::Result<u64> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "kspan reads the thread context on x86_64 and aarch64 only",
    ))
}
