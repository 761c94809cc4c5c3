// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Compiles the BPF C with clang and generates the Rust skeleton.

use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/kspan.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    // Debian keeps <asm/types.h> under the multiarch include directory.
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    let result = SkeletonBuilder::new()
        .source(SRC)
        .obj(out.join("kspan.bpf.o"))
        .clang_args([multiarch.as_str(), "-Wall", "-O2"])
        .build_and_generate(out.join("kspan.skel.rs"));
    if let Err(err) = result {
        panic!(
            "building {SRC} failed: {err:#}\n\
             kspan needs clang and libelf-dev: run `cargo xtask deps`"
        );
    }
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed=src/bpf/kspan.h");
}
