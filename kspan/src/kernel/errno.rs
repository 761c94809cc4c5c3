// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Linux errno names: for spans whose function returned `-errno`, and for
//! the kernel's refusals in kspan's own errors.
//!
//! The numbers are the kernel's (include/uapi/asm-generic/errno-base.h,
//! errno.h, and the kernel-internal ones of include/linux/errno.h), the same on
//! every architecture kspan runs on (x86-64 uses the generic table).

use std::borrow::Cow;

/// Largest value the kernel's `-errno` convention uses (`MAX_ERRNO`).
pub const MAX_ERRNO: i64 = 4095;

const NAMES: [&str; 134] = [
    "",
    "EPERM",
    "ENOENT",
    "ESRCH",
    "EINTR",
    "EIO",
    "ENXIO",
    "E2BIG",
    "ENOEXEC",
    "EBADF",
    "ECHILD",
    "EAGAIN",
    "ENOMEM",
    "EACCES",
    "EFAULT",
    "ENOTBLK",
    "EBUSY",
    "EEXIST",
    "EXDEV",
    "ENODEV",
    "ENOTDIR",
    "EISDIR",
    "EINVAL",
    "ENFILE",
    "EMFILE",
    "ENOTTY",
    "ETXTBSY",
    "EFBIG",
    "ENOSPC",
    "ESPIPE",
    "EROFS",
    "EMLINK",
    "EPIPE",
    "EDOM",
    "ERANGE",
    "EDEADLK",
    "ENAMETOOLONG",
    "ENOLCK",
    "ENOSYS",
    "ENOTEMPTY",
    "ELOOP",
    "",
    "ENOMSG",
    "EIDRM",
    "ECHRNG",
    "EL2NSYNC",
    "EL3HLT",
    "EL3RST",
    "ELNRNG",
    "EUNATCH",
    "ENOCSI",
    "EL2HLT",
    "EBADE",
    "EBADR",
    "EXFULL",
    "ENOANO",
    "EBADRQC",
    "EBADSLT",
    "",
    "EBFONT",
    "ENOSTR",
    "ENODATA",
    "ETIME",
    "ENOSR",
    "ENONET",
    "ENOPKG",
    "EREMOTE",
    "ENOLINK",
    "EADV",
    "ESRMNT",
    "ECOMM",
    "EPROTO",
    "EMULTIHOP",
    "EDOTDOT",
    "EBADMSG",
    "EOVERFLOW",
    "ENOTUNIQ",
    "EBADFD",
    "EREMCHG",
    "ELIBACC",
    "ELIBBAD",
    "ELIBSCN",
    "ELIBMAX",
    "ELIBEXEC",
    "EILSEQ",
    "ERESTART",
    "ESTRPIPE",
    "EUSERS",
    "ENOTSOCK",
    "EDESTADDRREQ",
    "EMSGSIZE",
    "EPROTOTYPE",
    "ENOPROTOOPT",
    "EPROTONOSUPPORT",
    "ESOCKTNOSUPPORT",
    "EOPNOTSUPP",
    "EPFNOSUPPORT",
    "EAFNOSUPPORT",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "ENETDOWN",
    "ENETUNREACH",
    "ENETRESET",
    "ECONNABORTED",
    "ECONNRESET",
    "ENOBUFS",
    "EISCONN",
    "ENOTCONN",
    "ESHUTDOWN",
    "ETOOMANYREFS",
    "ETIMEDOUT",
    "ECONNREFUSED",
    "EHOSTDOWN",
    "EHOSTUNREACH",
    "EALREADY",
    "EINPROGRESS",
    "ESTALE",
    "EUCLEAN",
    "ENOTNAM",
    "ENAVAIL",
    "EISNAM",
    "EREMOTEIO",
    "EDQUOT",
    "ENOMEDIUM",
    "EMEDIUMTYPE",
    "ECANCELED",
    "ENOKEY",
    "EKEYEXPIRED",
    "EKEYREVOKED",
    "EKEYREJECTED",
    "EOWNERDEAD",
    "ENOTRECOVERABLE",
    "ERFKILL",
    "EHWPOISON",
];

/// Kernel-internal errnos (512..=531; 520 is unused), never seen by user space.
const INTERNAL: [&str; 20] = [
    "ERESTARTSYS",
    "ERESTARTNOINTR",
    "ERESTARTNOHAND",
    "ENOIOCTLCMD",
    "ERESTART_RESTARTBLOCK",
    "EPROBE_DEFER",
    "EOPENSTALE",
    "ENOPARAM",
    "",
    "EBADHANDLE",
    "ENOTSYNC",
    "EBADCOOKIE",
    "ENOTSUPP",
    "ETOOSMALL",
    "ESERVERFAULT",
    "EBADTYPE",
    "EJUKEBOX",
    "EIOCBQUEUED",
    "ERECALLCONFLICT",
    "ENOGRACE",
];

/// The symbolic name of errno `n` (positive), or `errno N` for numbers
/// without one. Named errnos are borrowed: no allocation per failed call.
pub fn name(n: i64) -> Cow<'static, str> {
    let named = usize::try_from(n).ok().and_then(|i| match i {
        1..=133 => Some(NAMES[i]),
        512..=531 => Some(INTERNAL[i - 512]),
        _ => None,
    });
    match named {
        Some(s) if !s.is_empty() => Cow::Borrowed(s),
        _ => Cow::Owned(format!("errno {n}")),
    }
}

/// The name of the errno a system call failed with, or "errno unknown".
pub fn name_of(errno: Option<i32>) -> Cow<'static, str> {
    match errno {
        Some(n) => name(i64::from(n)),
        None => Cow::Borrowed("errno unknown"),
    }
}

/// If `ret` follows the `-errno` convention, the errno (positive).
pub fn from_return(ret: i64) -> Option<i64> {
    // `then`, not `then_some`: `-ret` must not be computed for i64::MIN.
    (-MAX_ERRNO..=-1).contains(&ret).then(|| -ret)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `records` fuzz target's find: a return of i64::MIN overflowed
    /// its negation (computed whether or not it was an errno).
    #[test]
    fn returns_outside_the_errno_range_are_none() {
        assert_eq!(from_return(i64::MIN), None);
        assert_eq!(from_return(i64::MAX), None);
        assert_eq!(from_return(-4096), None);
        assert_eq!(from_return(-4095), Some(4095));
        assert_eq!(from_return(-1), Some(1));
        assert_eq!(from_return(0), None);
    }

    #[test]
    fn names() {
        assert_eq!(name(2), "ENOENT");
        assert_eq!(name(1), "EPERM");
        assert_eq!(name(13), "EACCES");
        assert_eq!(name(111), "ECONNREFUSED");
        assert_eq!(name(133), "EHWPOISON");
        assert_eq!(name(524), "ENOTSUPP");
        assert_eq!(name(512), "ERESTARTSYS");
        assert_eq!(name(531), "ENOGRACE");
        assert_eq!(name(520), "errno 520");
        assert_eq!(name(41), "errno 41");
        assert_eq!(name(4000), "errno 4000");
        assert_eq!(from_return(-2), Some(2));
        assert_eq!(from_return(0), None);
        assert_eq!(from_return(-4096), None);
        assert_eq!(from_return(17), None);
        assert_eq!(name_of(Some(1)), "EPERM");
        assert_eq!(name_of(None), "errno unknown");
    }
}
