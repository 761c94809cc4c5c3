// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Facts about the running kernel, read without loading anything: its BTF,
//! what tracefs says (syscall formats, traceable functions), the process's
//! privileges, errno names. The first stage: it imports no other.

pub mod btf;
pub mod errno;
pub(crate) mod privileges;
pub(crate) mod sys;
pub mod syscall;
pub mod tracefs;

use std::path::{Path, PathBuf};

use btf::{Btf, BtfError};

/// Where the running kernel publishes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Reads and parses the BTF at `path` (the kernel's is [`KERNEL_BTF`]).
pub fn read_btf(path: &Path) -> Result<Btf, KernelError> {
    let data = std::fs::read(path).map_err(|source| KernelError::NoKernelBtf {
        path: path.to_owned(),
        source,
    })?;
    Btf::parse(&data).map_err(|source| KernelError::BadKernelBtf {
        path: path.to_owned(),
        source,
    })
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
    /// The process lacks the capabilities to load BPF programs.
    #[error(
        "missing privileges: loading BPF programs (trampolines, kprobes and syscall \
         tracepoints alike) needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and this \
         process has {have}; run as root or grant them (e.g. `setcap \
         cap_bpf,cap_perfmon+ep <binary>`; syscall sources also read tracefs, which is \
         root's only by default: add cap_dac_read_search)"
    )]
    MissingPrivileges {
        /// The relevant capabilities the process does have, or "none of them".
        have: String,
    },
}
