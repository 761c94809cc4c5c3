// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What to offer when no mechanism can trace a kernel function but syscall
//! sources work: the system call that leads to that function, where its
//! name says which one (`ksys_read`, `__x64_sys_openat`, `do_unlinkat`) or
//! it is one of the VFS entry points a service usually means, and only if
//! this kernel has that syscall's tracepoints. Any other function gets the
//! way to find one, never a guess: `vfs_read`'s `read` offered for
//! `tcp_sendmsg` would trace something else.

/// Kernel functions whose system call their name does not say.
const LED_TO_BY: &[(&str, &str)] = &[
    ("vfs_read", "read"),
    ("vfs_readv", "readv"),
    ("vfs_write", "write"),
    ("vfs_writev", "writev"),
    ("vfs_open", "openat"),
    ("do_filp_open", "openat"),
    ("do_sys_openat2", "openat"),
    ("do_sys_open", "openat"),
    ("vfs_fsync", "fsync"),
    ("vfs_fsync_range", "fsync"),
    ("vfs_fallocate", "fallocate"),
    ("vfs_unlink", "unlinkat"),
    ("vfs_mkdir", "mkdirat"),
    ("vfs_rmdir", "unlinkat"),
    ("vfs_rename", "renameat2"),
    ("vfs_statx", "newfstatat"),
    ("vfs_fstatat", "newfstatat"),
    ("vfs_truncate", "truncate"),
    ("vfs_copy_file_range", "copy_file_range"),
    ("vfs_fadvise", "fadvise64"),
];

/// Prefixes a syscall's own functions carry before the syscall's name, the
/// longest first so `__do_sys_` is not read as `do_`.
const SYSCALL_PREFIXES: &[&str] = &[
    "__x64_sys_",
    "__ia32_sys_",
    "__arm64_sys_",
    "__riscv_sys_",
    "__do_sys_",
    "__se_sys_",
    "__sys_",
    "ksys_",
    "do_sys_",
    "sys_",
    "do_",
];

/// The system calls that lead to `function`, most likely first: the table's
/// answer, then the name less a syscall prefix.
fn candidates(function: &str) -> Vec<&str> {
    let mut found: Vec<&str> = LED_TO_BY
        .iter()
        .filter(|(f, _)| *f == function)
        .map(|(_, syscall)| *syscall)
        .collect();
    found.extend(
        SYSCALL_PREFIXES
            .iter()
            .filter_map(|p| function.strip_prefix(p))
            .filter(|rest| !rest.is_empty()),
    );
    found
}

/// The hint's text, starting with `; `: the syscall that leads to
/// `function` among `syscalls` (this kernel's; `None` where they could not
/// be read, when only the table's answer is offered), else how to find one.
pub(super) fn syscall_instead(function: &str, syscalls: Option<&[String]>) -> String {
    let offered = match syscalls {
        Some(known) => candidates(function)
            .into_iter()
            .find(|c| known.iter().any(|k| k == c)),
        None => LED_TO_BY
            .iter()
            .find(|(f, _)| *f == function)
            .map(|(_, syscall)| *syscall),
    };
    match offered {
        Some(syscall) => format!(
            "; syscall sources work here: trace the system call that leads to `{function}` \
             instead (`#[kernel_span(syscall = \"{syscall}\")]`)"
        ),
        None => format!(
            "; syscall sources work here: if a system call leads to `{function}`, trace it \
             instead (`#[kernel_span(syscall = \"<name>\")]`; `kspan list --syscalls` lists \
             this kernel's)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> Vec<String> {
        [
            "read", "write", "openat", "openat2", "unlinkat", "sendto", "exit",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    #[test]
    fn a_vfs_entry_point_is_offered_its_syscall() {
        let hint = syscall_instead("vfs_read", Some(&kernel()));
        assert!(
            hint.contains("`#[kernel_span(syscall = \"read\")]`"),
            "{hint}"
        );
        let hint = syscall_instead("do_sys_openat2", Some(&kernel()));
        assert!(hint.contains("syscall = \"openat\""), "{hint}");
    }

    #[test]
    fn a_syscall_s_own_function_is_offered_that_syscall() {
        for (function, syscall) in [
            ("ksys_write", "write"),
            ("__x64_sys_openat", "openat"),
            ("__arm64_sys_read", "read"),
            ("do_unlinkat", "unlinkat"),
            ("__sys_sendto", "sendto"),
        ] {
            let hint = syscall_instead(function, Some(&kernel()));
            assert!(
                hint.contains(&format!("syscall = \"{syscall}\"")),
                "{function}: {hint}"
            );
        }
    }

    #[test]
    fn any_other_function_is_told_how_to_find_one_not_offered_read() {
        for function in ["tcp_sendmsg", "filemap_read", "do_page_fault", "do_"] {
            let hint = syscall_instead(function, Some(&kernel()));
            assert!(!hint.contains("syscall = \"read\""), "{function}: {hint}");
            assert!(hint.contains("kspan list --syscalls"), "{function}: {hint}");
        }
    }

    #[test]
    fn a_syscall_this_kernel_lacks_is_not_offered() {
        let hint = syscall_instead("ksys_fadvise64_64", Some(&kernel()));
        assert!(hint.contains("kspan list --syscalls"), "{hint}");
        let hint = syscall_instead("vfs_fadvise", Some(&kernel()));
        assert!(!hint.contains("fadvise64\")"), "{hint}");
    }

    #[test]
    fn unreadable_syscalls_offer_only_the_table_s_answer() {
        assert!(syscall_instead("vfs_write", None).contains("syscall = \"write\""));
        assert!(syscall_instead("ksys_write", None).contains("kspan list --syscalls"));
    }
}
