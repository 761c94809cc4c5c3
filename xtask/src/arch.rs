//! The guest's architecture, and every fact of `cargo xtask vm` that depends
//! on it: QEMU's binary and machine, the console, Debian's architecture and
//! kernel meta package, and where the guest's userland comes from.
//!
//! An x86-64 guest on this (x86-64) machine runs the host's own root file
//! system over 9p. An arm64 guest cannot run it, so it gets an arm64 root
//! of Debian 12 packages unpacked once ([`crate::rootfs`]): Debian 12,
//! because programs for it are cross-linked against bookworm's
//! `libc6-dev-arm64-cross` (glibc 2.36), which the guest's glibc must match
//! or exceed.

use anyhow::{bail, Result};

/// The architecture a guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestArch {
    /// x86-64 (Debian's `amd64`), on `qemu-system-x86_64`'s default `pc`
    /// machine.
    X86_64,
    /// AArch64 (Debian's `arm64`), on `qemu-system-aarch64`'s `virt`
    /// machine.
    Arm64,
}

/// A root file system made of one suite's packages, for a guest that cannot
/// run the host's.
#[derive(Debug, PartialEq, Eq)]
pub struct ForeignRoot {
    /// The Debian suite the packages come from.
    pub suite: &'static str,
    /// The cache directory's name (the suite, and what was added).
    pub dir: &'static str,
    /// The packages whose dependency closure is unpacked.
    pub packages: Vec<&'static str>,
}

impl ForeignRoot {
    /// The same root with the suite's `bpftrace` (a benchmark baseline),
    /// cached apart: it is some ten times the size of the base root.
    pub fn with_bpftrace(mut self) -> ForeignRoot {
        self.packages.push("bpftrace");
        self.dir = "bookworm-bpftrace";
        self
    }
}

impl GuestArch {
    /// The machine's own architecture, when it is one of ours.
    pub fn host() -> Option<GuestArch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(GuestArch::X86_64),
            "aarch64" => Some(GuestArch::Arm64),
            _ => None,
        }
    }

    /// Parses `x86_64` (or `amd64`, `x86-64`) and `arm64` (or `aarch64`).
    pub fn parse(s: &str) -> Result<GuestArch> {
        Ok(match s {
            "x86_64" | "x86-64" | "amd64" => GuestArch::X86_64,
            "arm64" | "aarch64" => GuestArch::Arm64,
            _ => bail!("unknown arch `{s}`: use x86_64 or arm64"),
        })
    }

    /// The name used in messages and options.
    pub fn name(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "x86_64",
            GuestArch::Arm64 => "arm64",
        }
    }

    /// Debian's name of the architecture (`dpkg --print-architecture`).
    pub fn debian(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "amd64",
            GuestArch::Arm64 => "arm64",
        }
    }

    /// The package whose dependency names the suite's current kernel.
    pub fn kernel_meta_package(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "linux-image-amd64",
            GuestArch::Arm64 => "linux-image-arm64",
        }
    }

    /// The kernel cache directory's name for the kernel labelled `label`:
    /// x86-64's keep the names they had before there were two arches.
    pub fn kernel_dir(self, label: &str) -> String {
        match self {
            GuestArch::X86_64 => label.to_string(),
            GuestArch::Arm64 => format!("{label}-arm64"),
        }
    }

    /// The QEMU system emulator.
    pub fn qemu(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "qemu-system-x86_64",
            GuestArch::Arm64 => "qemu-system-aarch64",
        }
    }

    /// The Debian package holding [`GuestArch::qemu`].
    pub fn qemu_package(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "qemu-system-x86",
            GuestArch::Arm64 => "qemu-system-arm",
        }
    }

    /// QEMU's machine and CPU. On arm64: the `virt` board (PCIe, so the
    /// same virtio-9p-pci devices as on x86-64), GICv3 (any number of
    /// CPUs), and `pauth-impdef`: QEMU's own pointer-authentication hash
    /// instead of the architected QARMA, costly to emulate; Debian's
    /// kernels use pointer authentication, and sid's was ready in 4.8 s
    /// with it against 11 to 13 s without (2026-12-03).
    pub fn machine_args(self) -> &'static [&'static str] {
        match self {
            GuestArch::X86_64 => &["-cpu", "max"],
            GuestArch::Arm64 => &["-M", "virt,gic-version=3", "-cpu", "max,pauth-impdef=on"],
        }
    }

    /// The serial console the kernel writes to.
    pub fn console(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "ttyS0",
            GuestArch::Arm64 => "ttyAMA0",
        }
    }

    /// The modules the 9p shares need (their dependencies are added; the
    /// built-in ones are skipped). Both machines reach virtio over PCI.
    pub fn base_modules(self) -> &'static [&'static str] {
        &["virtio_pci", "9pnet_virtio", "9p"]
    }

    /// Whether the guest can run the host's programs: then it shares the
    /// host's root, and this xtask binary can relay OTLP inside it.
    pub fn runs_host_binaries(self) -> bool {
        GuestArch::host() == Some(self)
    }

    /// The root the guest runs when it cannot run the host's.
    pub fn foreign_root(self) -> Option<ForeignRoot> {
        if self.runs_host_binaries() {
            return None;
        }
        Some(ForeignRoot {
            suite: "bookworm",
            dir: "bookworm",
            // The C runtime and what kspan's binaries link (libelf, zlib,
            // zstd; libstdc++ for C++ programs), busybox for the shell and
            // tools, and libelf's and zlib's headers and link names: the
            // cross build links against this root ([`crate::cross`]).
            packages: vec![
                "libc6",
                "libgcc-s1",
                "libstdc++6",
                "libelf1",
                "zlib1g",
                "libzstd1",
                "busybox-static",
                "libelf-dev",
                "zlib1g-dev",
                // setcap/getcap and setpriv, for the least-privilege tests.
                "libcap2-bin",
                "util-linux",
                // /etc/os-release, which the quickstart and README's service read.
                "base-files",
            ],
        })
    }
}

impl Default for GuestArch {
    /// The host's: x86-64 on a machine of another architecture.
    fn default() -> Self {
        GuestArch::host().unwrap_or(GuestArch::X86_64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for s in ["x86_64", "amd64", "x86-64"] {
            assert_eq!(GuestArch::parse(s).unwrap(), GuestArch::X86_64, "{s}");
        }
        for s in ["arm64", "aarch64"] {
            assert_eq!(GuestArch::parse(s).unwrap(), GuestArch::Arm64, "{s}");
        }
        let err = GuestArch::parse("riscv64").unwrap_err().to_string();
        assert_eq!(err, "unknown arch `riscv64`: use x86_64 or arm64");
        assert_eq!(GuestArch::default(), GuestArch::X86_64);
    }

    #[test]
    fn arm64_facts() {
        let a = GuestArch::Arm64;
        assert_eq!(a.kernel_dir("debian13"), "debian13-arm64");
        assert_eq!(GuestArch::X86_64.kernel_dir("debian13"), "debian13");
        assert_eq!(a.console(), "ttyAMA0");
        assert!(a.machine_args().contains(&"virt,gic-version=3"));
        // This machine is x86-64: the arm64 guest gets its own root.
        assert!(!a.runs_host_binaries());
        let root = a.foreign_root().unwrap();
        assert_eq!(root.suite, "bookworm");
        assert!(root.packages.contains(&"busybox-static"));
        assert_eq!(GuestArch::X86_64.foreign_root(), None);
        let with = root.with_bpftrace();
        assert_eq!(with.dir, "bookworm-bpftrace");
        assert!(with.packages.contains(&"bpftrace") && with.packages.contains(&"libc6"));
    }
}
