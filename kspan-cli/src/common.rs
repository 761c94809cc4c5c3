// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What more than one command uses, kept here once: how a command ends
//! ([`Failure`]) and writes, the kernel's BTF and tracefs read as the
//! runtime reads them, the C declarations `list` and `gen` print, and the
//! library's name matching and suggestions, so that a name matches and is
//! suggested as in `Kspan::start`'s own errors.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use kspan::kernel::btf::{Btf, FuncSignature};
use kspan::kernel::tracefs::{self, syscall_events, TRACEFS};

// ---------------------------------------------------------------- outcome

/// Why a command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong: exit 2, with where the help is.
    Usage(String),
    /// No command given: exit 2, with the short usage.
    NoCommand,
    /// The command could not do what was asked: exit 1.
    Failed(String),
    /// Standard output was closed early (`kspan list | head`): stop quietly.
    OutputClosed,
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure::OutputClosed
        } else {
            Failure::Failed(format!("cannot write to standard output: {e}"))
        }
    }
}

/// What a command returns: done, or why not.
pub type Outcome = Result<(), Failure>;

/// Writes `text` to standard output; a closed one is
/// [`Failure::OutputClosed`].
pub fn print(text: &str) -> Outcome {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes to standard error; if even that fails there is no one to tell.
pub fn report(message: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", message.trim_end());
}

// ---------------------------------------------------------------- sources

/// The kernel's BTF at [`kspan::KERNEL_BTF`], as the runtime reads it; an
/// error says why not and what to do.
pub fn read_btf() -> Result<Btf, Failure> {
    let path = kspan::KERNEL_BTF;
    kspan::kernel::read_btf(Path::new(path)).map_err(|e| {
        Failure::Failed(match e {
            kspan::KernelError::NoKernelBtf { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => format!(
                    "cannot read the kernel's BTF at {path}: it does not exist; the kernel must \
                     be built with CONFIG_DEBUG_INFO_BTF=y"
                ),
                io::ErrorKind::PermissionDenied => format!(
                    "cannot read the kernel's BTF at {path}: permission denied; run as root"
                ),
                _ => format!("cannot read the kernel's BTF at {path}: {source}"),
            },
            kspan::KernelError::BadKernelBtf { source, .. } => format!(
                "cannot parse the kernel's BTF at {path}: {source}; kspan cannot use this \
                 kernel's BTF"
            ),
            other => other.to_string(),
        })
    })
}

/// The functions the kernel can trace (`available_filter_functions`), as
/// the runtime reads them; why not when unreadable (on a kernel whose
/// function tracer is locked down, even for root).
pub fn read_traceable() -> Result<HashSet<String>, String> {
    tracefs::traceable_functions().map_err(|e| {
        // `Operation not permitted (os error 1)`: the kind is enough.
        let e = e.to_string();
        let e = e.split(" (os error").next().unwrap_or_default();
        format!(
            "cannot read {} ({e})",
            Path::new(TRACEFS)
                .join("available_filter_functions")
                .display()
        )
    })
}

/// The format file of syscall `name`'s enter tracepoint.
pub fn enter_format_path(name: &str) -> PathBuf {
    syscall_events().join(format!("sys_enter_{name}/format"))
}

/// The system calls that have tracepoints, sorted.
pub fn syscall_names() -> Result<Vec<String>, Failure> {
    let tracefs = TRACEFS;
    let events = syscall_events();
    tracefs::syscall_names().map_err(|e| {
        let mount = format!("mount it with `mount -t tracefs tracefs {tracefs}`");
        Failure::Failed(if e.kind() == io::ErrorKind::PermissionDenied {
            format!(
                "cannot read {}: permission denied; run as root",
                events.display()
            )
        } else if !Path::new(tracefs).is_dir() {
            format!("this kernel has no tracefs ({tracefs} does not exist), so no syscall sources")
        } else if !Path::new(tracefs).join("events").is_dir() {
            format!("tracefs is not mounted at {tracefs}: {mount}")
        } else if e.kind() == io::ErrorKind::NotFound {
            format!(
                "{} does not exist: the kernel has no syscall tracepoints (it needs \
                         CONFIG_FTRACE_SYSCALLS=y)",
                events.display()
            )
        } else {
            format!("cannot read {}: {e}", events.display())
        })
    })
}

// ---------------------------------------------------------------- names

/// Shell-style glob matching of a whole name, and whether a text is a
/// pattern: the library's, so that `kspan list` and
/// `#[kernel_span("vfs_*")]` match the same functions.
pub use kspan::plan::denylist::{glob_match, is_pattern as has_wildcard};

/// Why kspan will not trace a function: the library's, as `Kspan::start`
/// decides.
pub use kspan::plan::denylist::{not_traced, NotTraced};

/// Suggestions by edit distance and by the handler's parameters, and how
/// they are offered: the library's, as in its own errors.
pub use kspan::plan::{closest_functions, closest_names, did_you_mean};

// ---------------------------------------------------------------- C declarations

/// A C declaration of `name` with type `c_type`: `size_t count`,
/// `struct file *file` (no space after a `*`), or the bare type if the name
/// is empty.
pub fn c_declaration(c_type: &str, name: &str) -> String {
    let c_type = c_type.trim_end();
    if name.is_empty() {
        c_type.to_owned()
    } else if c_type.ends_with('*') {
        format!("{c_type}{name}")
    } else {
        format!("{c_type} {name}")
    }
}

/// The C signature of `sig`:
/// `ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)`.
pub fn c_signature(sig: &FuncSignature) -> String {
    let params = if sig.params.is_empty() {
        "void".to_owned()
    } else {
        sig.params
            .iter()
            .map(|(name, t)| c_declaration(&t.c_name, name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{}({params})",
        c_declaration(&sig.ret.c_name, sig.name.as_str())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{int, ptr, sig, ty, vfs_read};
    use kspan::kernel::btf::TypeClass;

    #[test]
    fn glob_without_wildcards_is_exact() {
        assert!(!has_wildcard("vfs_read"));
        assert!(has_wildcard("vfs_*"));
        assert!(has_wildcard("vfs_rea?"));
        assert!(glob_match("vfs_read", "vfs_read"));
        assert!(!glob_match("vfs_read", "vfs_readv"));
        assert!(!glob_match("vfs_read", "xvfs_read"));
        assert!(!glob_match("", "a"));
        assert!(glob_match("", ""));
    }

    #[test]
    fn c_signatures() {
        assert_eq!(
            c_signature(&vfs_read()),
            "ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)"
        );
        assert_eq!(
            c_signature(&sig("get_task", ptr("struct task_struct *"), &[])),
            "struct task_struct *get_task(void)"
        );
        assert_eq!(
            c_signature(&sig(
                "f",
                ty("void", TypeClass::Void),
                &[("", int("int", 4, true))]
            )),
            "void f(int)"
        );
        assert_eq!(
            c_declaration("const char * ", "filename"),
            "const char *filename"
        );
    }

    #[test]
    fn suggestions() {
        let names = ["vfs_read", "vfs_readv", "vfs_write", "ksys_read", "x"];
        assert_eq!(
            closest_names(names.iter().copied(), "vfs_raed", 3),
            ["vfs_read"]
        );
        assert_eq!(
            closest_names(names.iter().copied(), "vfs_reed", 3),
            ["vfs_read", "vfs_readv"]
        );
        assert!(closest_names(names.iter().copied(), "completely_else", 3).is_empty());
        assert_eq!(
            did_you_mean(&["a".to_owned(), "b".to_owned()]),
            "; did you mean `a`, `b`?"
        );
        assert_eq!(did_you_mean(&[]), "");
    }
}
