//! `cargo xtask bpf [--check]`: the BPF objects kspan-bpf ships, one per
//! target architecture.
//!
//! `kspan-bpf/src/bpf/kspan.<arch>.bpf.o` (`x86`, `arm64`) is compiled from
//! `kspan.bpf.c` by the `kspan-bpf-object` tool (clang through libbpf-cargo,
//! with `-D__TARGET_ARCH_<arch>`) and committed with its stamp
//! (`kspan.<arch>.bpf.o.sources`: the sources' hash, which kspan-bpf's
//! build script checks, and the clang version), so that crates depending on
//! kspan build without clang, for either architecture. The build is
//! reproducible for one clang, so `--check` (run by `cargo xtask test`)
//! compiles the sources afresh and fails when a committed object differs;
//! with another clang than the stamp names, bytes cannot be compared and
//! the sources' hash decides.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::util::{cargo, repo_root, run};

/// The architectures an object is shipped for, by libbpf's
/// `__TARGET_ARCH_` names.
pub const ARCHES: &[&str] = &["x86", "arm64"];

/// The committed object of `arch`, relative to the repository.
pub fn object(arch: &str) -> String {
    format!("kspan-bpf/src/bpf/kspan.{arch}.bpf.o")
}

/// The committed stamp of `arch`'s object.
pub fn stamp(arch: &str) -> String {
    format!("{}.sources", object(arch))
}

/// Compiles the BPF C for `arch` into `out`.
fn compile(out: &Path, arch: &str) -> Result<()> {
    run(cargo()
        .args(["run", "--quiet", "-p", "kspan-bpf-object", "--"])
        .arg(out)
        .arg(arch))
}

/// `cargo xtask bpf [--check]`.
pub fn command(args: &[String]) -> Result<u8> {
    match args {
        [] => {
            for arch in ARCHES {
                compile(&repo_root().join(object(arch)), arch)?;
                eprintln!(
                    "bpf: wrote {} and {}; commit them with the sources",
                    object(arch),
                    stamp(arch)
                );
            }
            Ok(0)
        }
        [flag] if flag == "--check" => check().map(|details| {
            for detail in details {
                eprintln!("bpf: {detail}");
            }
            0
        }),
        _ => bail!("usage: cargo xtask bpf [--check]"),
    }
}

/// Fails when a committed object is not what its sources compile to.
pub fn check() -> Result<Vec<String>> {
    ARCHES.iter().map(|arch| check_one(arch)).collect()
}

fn check_one(arch: &str) -> Result<String> {
    let (object, stamp_path) = (object(arch), stamp(arch));
    let fresh: PathBuf =
        std::env::temp_dir().join(format!("kspan-bpf-check-{}-{arch}.o", std::process::id()));
    let fresh_stamp = PathBuf::from(format!("{}.sources", fresh.display()));
    compile(&fresh, arch)?;
    let read =
        |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let (compiled, new_stamp) = (read(&fresh), read(&fresh_stamp));
    let _ = std::fs::remove_file(&fresh);
    let _ = std::fs::remove_file(&fresh_stamp);
    let (compiled, new_stamp) = (compiled?, String::from_utf8_lossy(&new_stamp?).into_owned());
    let root = repo_root();
    let committed = std::fs::read(root.join(&object))
        .with_context(|| format!("reading {object}: run `cargo xtask bpf` and commit it"))?;
    let stamp = std::fs::read_to_string(root.join(&stamp_path))
        .with_context(|| format!("reading {stamp_path}: run `cargo xtask bpf` and commit it"))?;
    let line = |text: &str, n: usize| text.lines().nth(n).unwrap_or("").to_owned();
    if line(&stamp, 0) != line(&new_stamp, 0) {
        bail!(
            "{object} is stale: kspan.bpf.c or kspan.h changed since it was compiled \
             ({stamp_path}: `{}`, the sources: `{}`); run `cargo xtask bpf` and commit the object \
             and its stamp",
            line(&stamp, 0),
            line(&new_stamp, 0)
        );
    }
    if compiled == committed {
        return Ok(format!(
            "{object} is what its sources compile to ({} bytes, {})",
            committed.len(),
            line(&stamp, 1)
        ));
    }
    if line(&stamp, 1) != line(&new_stamp, 1) {
        eprintln!(
            "bpf: {object} was compiled by {}, this machine has {}: its bytes cannot be \
             compared here; its stamp matches the sources",
            line(&stamp, 1),
            line(&new_stamp, 1)
        );
        return Ok(format!(
            "{object}'s stamp matches its sources (another clang)"
        ));
    }
    bail!(
        "{object} differs from what its sources compile to with the same clang ({} bytes, \
         committed {}), although its stamp matches them: run `cargo xtask bpf` and commit \
         the object",
        compiled.len(),
        committed.len()
    )
}
