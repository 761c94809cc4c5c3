//! The root file system of a guest that cannot run the host's programs (an
//! arm64 guest on this x86-64 machine; see [`crate::arch`]).
//!
//! It is made once, under `<target>/kspan-vm/<arch>-root/<suite>-<hash>/root/`
//! (`<suite>-bpftrace/` with the suite's bpftrace, for `vm --with-bpftrace`): a
//! private apt state for the suite and architecture ([`kernel::private_apt`]),
//! the union of the dependency closures of the arch's root packages from
//! that suite's index ([`packages::closure`]), each package unpacked with
//! `dpkg -x` (nothing installed, no maintainer script run), then busybox's
//! applets linked into `/bin` (the shell, `env`, `cat`, ...), the mount
//! points the guest's `/init` needs, and a minimal `/etc/passwd`. The guest
//! mounts it read-only over 9p, as the x86-64 guest mounts the host's root.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::arch::{ForeignRoot, GuestArch};
use crate::kernel;
use crate::packages::{self, Package};
use crate::util::output;

/// Directories the guest mounts over or enters, which no package makes.
const MOUNT_POINTS: &[&str] = &["proc", "sys", "dev", "tmp", "root", "run", "var/tmp"];

/// The root `arch`'s guest mounts: `/` when it runs the host's programs
/// (whose bpftrace `cargo xtask deps` installs), else its own root (with
/// the suite's bpftrace if `with_bpftrace`), made into `cache` once.
pub fn prepare(arch: GuestArch, with_bpftrace: bool, cache: &Path) -> Result<PathBuf> {
    let Some(mut spec) = arch.foreign_root() else {
        return Ok(PathBuf::from("/"));
    };
    if with_bpftrace {
        spec = spec.with_bpftrace();
    }
    // Named by its package list too: a list changed here makes a new root
    // rather than reusing one made without the new packages.
    let dir = cache.join(format!("{}-root", arch.name())).join(format!(
        "{}-{:08x}",
        spec.dir,
        list_hash(&spec.packages)
    ));
    kernel::fill_once(&dir, |tmp| build(&spec, arch, tmp)).with_context(|| {
        format!(
            "making the {} root of {} packages in {}",
            arch.name(),
            spec.suite,
            dir.display()
        )
    })?;
    Ok(dir.join("root"))
}

/// FNV-1a (32 bits) of the package names, in order.
fn list_hash(packages: &[&str]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in packages.iter().flat_map(|p| p.bytes().chain([0])) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The busybox of a root made by [`prepare`] (busybox-static's).
pub fn busybox(root: &Path) -> PathBuf {
    root.join("bin/busybox")
}

/// The packages to unpack for `roots`: the union of their dependency
/// closures, by name, with versions. Essential packages, which
/// [`packages::closure`] leaves out (a Debian system has them), are taken in
/// with their own closures: this root has nothing but what is unpacked.
fn root_packages(
    index: &BTreeMap<String, Package>,
    roots: &[&str],
) -> Result<BTreeMap<String, String>> {
    let mut chosen = BTreeMap::new();
    let mut pending: Vec<String> = roots.iter().map(|r| r.to_string()).collect();
    while let Some(root) = pending.pop() {
        if chosen.contains_key(&root) {
            continue;
        }
        let c = packages::closure(index, &root)?;
        chosen.extend(c.packages);
        pending.extend(c.essential.into_iter().filter(|e| !chosen.contains_key(e)));
    }
    Ok(chosen)
}

fn build(spec: &ForeignRoot, arch: GuestArch, tmp: &Path) -> Result<()> {
    let apt_opts = kernel::private_apt(spec.suite, arch.debian(), &tmp.join("apt"))?;
    let index = output(Command::new("apt-cache").args(&apt_opts).arg("dumpavail"))?;
    let index = packages::parse_index(&index);
    let chosen = root_packages(&index, &spec.packages)?;
    let pinned: Vec<String> = chosen.iter().map(|(n, v)| format!("{n}={v}")).collect();
    eprintln!(
        "kspan-vm: making the {} root of {}: {}",
        arch.name(),
        spec.suite,
        pinned.join(", ")
    );
    let root = tmp.join("root");
    kernel::download_and_unpack(&apt_opts, &pinned, &tmp.join("dl"), &root)?;
    let _ = fs::remove_dir_all(tmp.join("apt"));
    let bb = busybox(&root);
    if !bb.is_file() {
        bail!("{} is missing after unpacking busybox-static", bb.display());
    }
    for dir in MOUNT_POINTS {
        fs::create_dir_all(root.join(dir))?;
    }
    for applet in applets()? {
        // Links beside busybox; a real program of a package wins.
        let link = root.join("bin").join(&applet);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink("busybox", &link)
                .with_context(|| format!("linking {}", link.display()))?;
        }
    }
    // `#!/usr/bin/env` scripts.
    fs::create_dir_all(root.join("usr/bin"))?;
    let env = root.join("usr/bin/env");
    if env.symlink_metadata().is_err() {
        std::os::unix::fs::symlink("../../bin/busybox", &env)?;
    }
    let etc = root.join("etc");
    fs::create_dir_all(&etc)?;
    fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(etc.join("group"), "root:x:0:\n")?;
    let list: String = chosen.iter().map(|(n, v)| format!("{n} {v}\n")).collect();
    fs::write(tmp.join("packages"), list)?;
    Ok(())
}

/// Busybox's applet names, from the host's busybox: the foreign root's is of
/// another architecture and cannot run here, and both are the same Debian
/// package (busybox-static of one suite), built with the same applets.
pub fn applets() -> Result<Vec<String>> {
    let bb = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("busybox not found: run `cargo xtask deps` (busybox-static)")?;
    let list = output(Command::new(&bb).arg("--list"))?;
    Ok(list
        .split_whitespace()
        .filter(|a| *a != "busybox")
        .map(String::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_of_closures_with_essentials() {
        // Bookworm arm64's index, shortened (2026-12), and an essential
        // dependency, which this root must hold itself.
        let index = packages::parse_index(
            "Package: libc6\nVersion: 2.36-9+deb12u13\nDepends: libgcc-s1\n\n\
             Package: libgcc-s1\nVersion: 12.2.0-14+deb12u1\n\
             Depends: gcc-12-base (= 12.2.0-14+deb12u1), libc6 (>= 2.35)\n\n\
             Package: gcc-12-base\nVersion: 12.2.0-14+deb12u1\n\n\
             Package: libelf1\nVersion: 0.188-2.1\n\
             Depends: libc6 (>= 2.34), zlib1g (>= 1:1.1.4)\n\n\
             Package: zlib1g\nVersion: 1:1.2.13.dfsg-1\nDepends: libc6 (>= 2.14)\n\n\
             Package: busybox-static\nVersion: 1:1.35.0-4+b4\n\n\
             Package: tool\nVersion: 1\nDepends: bash\n\n\
             Package: bash\nVersion: 5.2.15-2+b8\nEssential: yes\nPre-Depends: libtinfo6\n\n\
             Package: libtinfo6\nVersion: 6.4-4\nDepends: libc6 (>= 2.34)\n",
        );
        let got = root_packages(&index, &["libc6", "libelf1", "busybox-static"]).unwrap();
        let names: Vec<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "busybox-static",
                "gcc-12-base",
                "libc6",
                "libelf1",
                "libgcc-s1",
                "zlib1g"
            ]
        );
        assert_eq!(got["zlib1g"], "1:1.2.13.dfsg-1");
        let got = root_packages(&index, &["tool"]).unwrap();
        assert!(
            got.contains_key("bash") && got.contains_key("libtinfo6"),
            "{got:?}"
        );
        let err = root_packages(&index, &["libbpf1"]).unwrap_err().to_string();
        assert!(err.contains("no package `libbpf1`"), "{err}");
    }
}
