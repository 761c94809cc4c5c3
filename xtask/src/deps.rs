//! `cargo xtask deps`: the system packages the build and the VM need.

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::util::{is_root, run, which};

/// Debian packages needed on the host: the BPF toolchain (clang 16, llvm,
/// libelf, zlib, pkg-config), protoc (the embedded Jaeger's OTLP protocol
/// code is generated at build time), the VM (QEMU, busybox-static, cpio, kmod
/// for `modinfo`, xz and zstd for compressed modules and kernel images; for
/// `vm --arch arm64`, QEMU's arm emulators and the arm64 cross compiler of
/// the programs it runs),
/// bpftrace (a benchmark baseline), curl (`cargo xtask jaeger` asks the
/// UI's API with it) and libcap2-bin (`setcap`/`getcap`: the privilege tests
/// give a copy of an example the file capabilities README documents),
/// and g++ (libfuzzer-sys compiles libFuzzer, C++, for `cargo xtask fuzz`).
pub const PACKAGES: &[&str] = &[
    "clang-16",
    "g++",
    "llvm",
    "libelf-dev",
    "zlib1g-dev",
    "pkg-config",
    "protobuf-compiler",
    "qemu-system-x86",
    "qemu-system-arm",
    "gcc-aarch64-linux-gnu",
    // Its glibc to link against (only a Recommends of the compiler, which
    // the install below leaves out) and the arm64 UAPI headers the arm64
    // BPF object is compiled with.
    "libc6-dev-arm64-cross",
    "linux-libc-dev-arm64-cross",
    "busybox-static",
    "cpio",
    "kmod",
    "xz-utils",
    "zstd",
    "bpftrace",
    "curl",
    "libcap2-bin",
];

fn installed(pkg: &str) -> Result<bool> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("cannot run dpkg-query (this needs a Debian-based system)")?;
    Ok(out.status.success()
        && String::from_utf8_lossy(&out.stdout).trim() == "install ok installed")
}

/// Installs the missing [`PACKAGES`], or fails with the command to run.
pub fn ensure() -> Result<()> {
    ensure_packages(PACKAGES)
}

/// Installs those of `packages` that are missing, or fails with the command
/// to run.
pub fn ensure_packages(packages: &[&str]) -> Result<()> {
    let mut missing = Vec::new();
    for pkg in packages {
        if !installed(pkg)? {
            missing.push(*pkg);
        }
    }
    if missing.is_empty() {
        eprintln!("deps: all {} packages present", packages.len());
        return Ok(());
    }
    let list = missing.join(" ");
    if !is_root() || which("apt-get").is_none() {
        bail!(
            "missing packages: {list}\ninstall them with:\n  sudo apt-get update && \
             sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {list}"
        );
    }
    eprintln!("deps: installing {list}");
    run(Command::new("apt-get")
        .arg("update")
        .stdout(std::io::stderr()))?;
    run(Command::new("apt-get")
        .stdout(std::io::stderr())
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing))?;
    let still: Vec<&str> = missing
        .into_iter()
        .filter(|p| !installed(p).unwrap_or(false))
        .collect();
    if !still.is_empty() {
        bail!(
            "packages still missing after apt-get install: {}",
            still.join(" ")
        );
    }
    eprintln!("deps: ok");
    Ok(())
}
