//! `cargo xtask bpf [--check]`: the BPF object kspan-bpf ships.
//!
//! `kspan-bpf/src/bpf/kspan.bpf.o` is compiled from `kspan.bpf.c` by the
//! `kspan-bpf-object` tool (clang through libbpf-cargo) and committed with
//! its stamp (`kspan.bpf.o.sources`: the sources' hash, which kspan-bpf's
//! build script checks, and the clang version), so that crates depending on
//! kspan build without clang. The build is reproducible for one clang, so
//! `--check` (run by `cargo xtask test`) compiles the sources afresh and
//! fails when the committed object differs; with another clang than the
//! stamp names, bytes cannot be compared and the sources' hash decides.

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
            eprintln!("bpf: wrote {OBJECT} and {STAMP}; commit them with the sources");
            Ok(0)
        }
        [flag] if flag == "--check" => check().map(|detail| {
            eprintln!("bpf: {detail}");
            0
        }),
        _ => bail!("usage: cargo xtask bpf [--check]"),
    }
}

/// The committed stamp.
pub const STAMP: &str = "kspan-bpf/src/bpf/kspan.bpf.o.sources";

/// Fails when the committed object is not what its sources compile to.
pub fn check() -> Result<String> {
    let fresh: PathBuf =
        std::env::temp_dir().join(format!("kspan-bpf-check-{}.o", std::process::id()));
    let fresh_stamp = PathBuf::from(format!("{}.sources", fresh.display()));
    compile(&fresh)?;
    let read =
        |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let (compiled, new_stamp) = (read(&fresh), read(&fresh_stamp));
    let _ = std::fs::remove_file(&fresh);
    let _ = std::fs::remove_file(&fresh_stamp);
    let (compiled, new_stamp) = (compiled?, String::from_utf8_lossy(&new_stamp?).into_owned());
    let root = repo_root();
    let committed = std::fs::read(root.join(OBJECT))
        .with_context(|| format!("reading {OBJECT}: run `cargo xtask bpf` and commit it"))?;
    let stamp = std::fs::read_to_string(root.join(STAMP))
        .with_context(|| format!("reading {STAMP}: run `cargo xtask bpf` and commit it"))?;
    let line = |text: &str, n: usize| text.lines().nth(n).unwrap_or("").to_owned();
    if line(&stamp, 0) != line(&new_stamp, 0) {
        bail!(
            "{OBJECT} is stale: kspan.bpf.c or kspan.h changed since it was compiled \
             ({STAMP}: `{}`, the sources: `{}`); run `cargo xtask bpf` and commit the object \
             and its stamp",
            line(&stamp, 0),
            line(&new_stamp, 0)
        );
    }
    if compiled == committed {
        return Ok(format!(
            "{OBJECT} is what its sources compile to ({} bytes, {})",
            committed.len(),
            line(&stamp, 1)
        ));
    }
    if line(&stamp, 1) != line(&new_stamp, 1) {
        eprintln!(
            "bpf: {OBJECT} was compiled by {}, this machine has {}: its bytes cannot be \
             compared here; its stamp matches the sources",
            line(&stamp, 1),
            line(&new_stamp, 1)
        );
        return Ok(format!(
            "{OBJECT}'s stamp matches its sources (another clang)"
        ));
    }
    bail!(
        "{OBJECT} differs from what its sources compile to with the same clang ({} bytes, \
         committed {}), although its stamp matches them: run `cargo xtask bpf` and commit \
         the object",
        compiled.len(),
        committed.len()
    )
}
