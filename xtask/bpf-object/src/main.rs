// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Compiles `kspan-bpf/src/bpf/kspan.bpf.c` into a BPF object at the path
//! given, and writes its stamp beside it (`<path>.sources`: the sources'
//! hash and the clang that compiled them): the object `kspan-bpf` ships, so
//! that crates depending on kspan build without clang. `cargo xtask bpf` runs it (and `cargo xtask test`
//! checks the committed object against a fresh one).
//!
//! It is a crate of its own, not part of `xtask`, because libbpf-cargo
//! builds libbpf, which needs libelf-dev: `xtask` must build on a machine
//! that `cargo xtask deps` has not prepared yet.
//!
//! The output is reproducible: clang runs from `kspan-bpf/` on the relative
//! source path, the checkout's directory is mapped to `kspan-bpf` in the
//! file names it records (BTF line info), and libbpf's linker drops the
//! DWARF, so the same sources and clang give the same bytes wherever the
//! repository is.

use std::path::PathBuf;
use std::process::ExitCode;

use libbpf_cargo::SkeletonBuilder;

include!("../../../kspan-bpf/sources_hash.rs");

/// The clang that compiles the object: a fixed major version, so that the
/// build is reproducible on every machine `cargo xtask deps` prepares, and
/// one new enough for the `btf_type_tag` the sources need (clang 15+;
/// Debian 12's default `clang` is 14).
const CLANG: &str = "clang-16";

/// `clang --version`'s first line.
fn clang_version() -> String {
    std::process::Command::new(CLANG)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: kspan-bpf-object OUTPUT.o");
        return ExitCode::from(2);
    };
    let out = match std::path::absolute(&out) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("kspan-bpf-object: {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../kspan-bpf");
    if let Err(e) = std::env::set_current_dir(&crate_dir) {
        eprintln!("kspan-bpf-object: {}: {e}", crate_dir.display());
        return ExitCode::FAILURE;
    }
    // Debian keeps <asm/types.h> under the multiarch include directory.
    let multiarch = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    // The BTF line info names the source file by its absolute path: make it
    // the same wherever the repository is checked out.
    let here = match std::env::current_dir() {
        Ok(here) => here,
        Err(e) => {
            eprintln!("kspan-bpf-object: the current directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let prefix_map = format!("-ffile-prefix-map={}=kspan-bpf", here.display());
    let result = SkeletonBuilder::new()
        .source("src/bpf/kspan.bpf.c")
        .clang(CLANG)
        .obj(&out)
        .clang_args([multiarch.as_str(), prefix_map.as_str(), "-Wall", "-O2"])
        .build();
    let stamp = |out: &std::path::Path| -> std::io::Result<()> {
        let stamp = sources_stamp(
            &std::fs::read("src/bpf/kspan.bpf.c")?,
            &std::fs::read("src/bpf/kspan.h")?,
        );
        let mut path = out.as_os_str().to_owned();
        path.push(".sources");
        std::fs::write(path, format!("{stamp}\nclang {}\n", clang_version()))
    };
    match result
        .map_err(|e| format!("{e:#}"))
        .and_then(|()| stamp(&out).map_err(|e| e.to_string()))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "kspan-bpf-object: compiling src/bpf/kspan.bpf.c failed: {e:#}\n\
                 it needs {CLANG} and libelf-dev: run `cargo xtask deps`"
            );
            ExitCode::FAILURE
        }
    }
}
