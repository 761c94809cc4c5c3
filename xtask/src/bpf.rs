//! `cargo xtask bpf [--check]`: the BPF object kspan-bpf ships.
//!
//! `kspan-bpf/src/bpf/kspan.bpf.o` is compiled from `kspan.bpf.c` by the
//! `kspan-bpf-object` tool (clang through libbpf-cargo) and committed, so
//! that crates depending on kspan build without clang. The build is
//! reproducible, so `--check` (run by `cargo xtask test`) compiles the
//! sources afresh and fails when the committed object differs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::util::{cargo, repo_root, run};

/// The committed object, relative to the repository.
pub const OBJECT: &str = "kspan-bpf/src/bpf/kspan.bpf.o";

/// Compiles the BPF C into `out`.
fn compile(out: &Path) -> Result<()> {
    run(cargo()
        .args(["run", "--quiet", "-p", "kspan-bpf-object", "--"])
        .arg(out))
}

/// `cargo xtask bpf [--check]`.
pub fn command(args: &[String]) -> Result<u8> {
    match args {
        [] => {
            let object = repo_root().join(OBJECT);
            compile(&object)?;
            eprintln!("bpf: wrote {OBJECT}; commit it with its sources");
            Ok(0)
        }
        [flag] if flag == "--check" => check().map(|detail| {
            eprintln!("bpf: {detail}");
            0
        }),
        _ => bail!("usage: cargo xtask bpf [--check]"),
    }
}

/// Fails when the committed object is not what its sources compile to.
pub fn check() -> Result<String> {
    let fresh: PathBuf =
        std::env::temp_dir().join(format!("kspan-bpf-check-{}.o", std::process::id()));
    compile(&fresh)?;
    let compiled = std::fs::read(&fresh).with_context(|| format!("reading {}", fresh.display()));
    let _ = std::fs::remove_file(&fresh);
    let compiled = compiled?;
    let committed = std::fs::read(repo_root().join(OBJECT))
        .with_context(|| format!("reading {OBJECT}: run `cargo xtask bpf` and commit it"))?;
    if compiled != committed {
        bail!(
            "{OBJECT} is stale: kspan.bpf.c or kspan.h compile to a different object \
             ({} bytes, committed {}); run `cargo xtask bpf` and commit the object",
            compiled.len(),
            committed.len()
        );
    }
    Ok(format!(
        "{OBJECT} matches its sources ({} bytes)",
        committed.len()
    ))
}
