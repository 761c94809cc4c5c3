// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Facts about the running kernel, read without loading anything: its BTF,
//! what tracefs says (syscall formats, traceable functions), the process's
//! privileges, its preemption model, errno names. The first stage after the annotations: it reads
//! only their modes (which mechanisms the probes need privileges for).

// `btf`, `errno`, `ksyms`, `syscall`, `tracefs` and `read_btf` are public
// for kspan's CLI (kspan-cli), its tests and benches only: hidden from the
// documentation, with no stability promise.
pub(crate) mod block;
#[doc(hidden)]
pub mod btf;
#[doc(hidden)]
pub mod errno;
#[doc(hidden)]
pub mod ksyms;
pub mod preemption;
pub(crate) mod privileges;
pub(crate) mod sys;
#[doc(hidden)]
pub mod syscall;
#[doc(hidden)]
pub mod tracefs;

use std::path::{Path, PathBuf};

use btf::Btf;
pub use btf::BtfError;
pub use privileges::{MissingCapability, MissingPrivileges};

/// Where the running kernel publishes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Reads (or maps) and indexes the BTF at `path` (the kernel's is
/// [`KERNEL_BTF`]).
#[doc(hidden)]
pub fn read_btf(path: &Path) -> Result<Btf, KernelError> {
    let no_btf = |source| KernelError::NoKernelBtf {
        path: path.to_owned(),
        source,
    };
    let bad_btf = |source| KernelError::BadKernelBtf {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(no_btf)?;
    // The kernel's own BTF is mapped where the kernel allows it (one
    // system call instead of one a page; sysfs files do not shrink under
    // a mapping), any other file read.
    let mapped = path
        .starts_with("/sys/kernel/btf")
        .then(|| sys::MappedFile::map(&file).ok())
        .flatten();
    if let Some(mapped) = mapped {
        return Btf::from_blob(Box::new(mapped)).map_err(bad_btf);
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut data).map_err(no_btf)?;
    Btf::from_blob(Box::new(data)).map_err(bad_btf)
}

/// The running kernel's BTF, for tests that need a real kernel's types.
#[cfg(test)]
pub(crate) fn host_btf() -> Btf {
    read_btf(Path::new(KERNEL_BTF)).unwrap_or_else(|e| panic!("this test needs {e}"))
}

/// What the kernel or the process lacks for kspan to start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// The kernel's BTF could not be read (it is needed to check every probe).
    #[error(
        "cannot read the kernel's BTF at {}: {source}; kspan needs a kernel built \
         with CONFIG_DEBUG_INFO_BTF=y (or point `KspanBuilder::btf_path` at a BTF file)",
        path.display()
    )]
    NoKernelBtf {
        /// The path tried.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The kernel's BTF was read but is not valid BTF.
    #[error("the kernel's BTF at {} is invalid: {source}", path.display())]
    BadKernelBtf {
        /// The path read.
        path: PathBuf,
        /// What is wrong with it.
        source: BtfError,
    },
    /// tracefs, needed for syscall sources, is not available.
    #[error(
        "syscall sources need tracefs at {}: {reason}; mount it with `mount -t tracefs \
         tracefs {}`",
        path.display(), path.display()
    )]
    Tracefs {
        /// Where it was looked for.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The process lacks capabilities that its probes' mechanisms need: each
    /// is named, with the mechanisms that need it, and the `setcap` line that
    /// gives a binary what it needs.
    #[error("{0}")]
    MissingPrivileges(MissingPrivileges),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_btf_mapped_and_a_copy_read_are_the_same() {
        let path = Path::new(KERNEL_BTF);
        let file = std::fs::File::open(path).expect("the host's kernel BTF");
        // The host kernel (6.18) lets sysfs map it: `read_btf` takes that way.
        assert!(sys::MappedFile::map(&file).is_ok());
        let mapped = read_btf(path).unwrap();
        // A copy elsewhere is read, not mapped.
        let copy = std::env::temp_dir().join(format!("kspan-btf-{}", std::process::id()));
        std::fs::write(&copy, std::fs::read(path).unwrap()).unwrap();
        let read = read_btf(&copy);
        std::fs::remove_file(&copy).unwrap();
        let read = read.unwrap();
        assert!(mapped.function_count() > 10_000);
        assert_eq!(mapped.function_count(), read.function_count());
        assert_eq!(format!("{mapped:?}"), format!("{read:?}"));
        assert_eq!(mapped.function("vfs_read"), read.function("vfs_read"));
        assert!(mapped.function("vfs_read").is_some());
    }

    #[test]
    fn an_empty_file_is_bad_btf_naming_it() {
        let empty = std::env::temp_dir().join(format!("kspan-btf-empty-{}", std::process::id()));
        std::fs::write(&empty, b"").unwrap();
        let e = read_btf(&empty).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(matches!(e, KernelError::BadKernelBtf { .. }), "{e:?}");
        assert!(e.to_string().contains(&*empty.to_string_lossy()), "{e}");
    }
}
