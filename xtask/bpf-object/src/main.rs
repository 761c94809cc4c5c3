// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Compiles `kspan-bpf/src/bpf/kspan.bpf.c` twice, as the current object
//! and as the legacy one (`-DKSPAN_LEGACY`, `kspan.<arch>.legacy.bpf.o`:
//! for kernels without `bpf_loop` or atomics that fetch, before 5.17; the
//! same maps, programs and globals, checked by comparing their skeletons)
//! (the one compilation unit: it
//! includes the other files of `src/bpf`, `BPF_SOURCES` of
//! `sources_hash.rs`) for one target architecture (`x86` or `arm64`,
//! libbpf's `__TARGET_ARCH_` names: the kprobe register layout and the UAPI
//! `asm/` headers differ) into a BPF object at the path given, and writes
//! its stamp beside it (`<path>.sources`: the hash of all those sources and
//! the clang that compiled them), and the Rust skeleton generated
//! from it (`kspan.<arch>.skel.rs` for `kspan.<arch>.bpf.o`): what
//! `kspan-bpf` ships, so that crates depending on kspan build without clang
//! and without libbpf-cargo (and its command-line and logging crates).
//! `cargo xtask bpf` runs it (and `cargo xtask test` checks the committed
//! files against fresh ones).
//!
//! The skeleton refers to the object by `include_bytes!` of the path
//! kspan-bpf's build script gives (`KSPAN_BPF_OBJECT`), not by an inline
//! copy of its bytes, and its first line names the object's hash, which the
//! build script checks.
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

use std::path::{Path, PathBuf};
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

/// The UAPI headers (`asm/ptrace.h`, `asm/types.h`) of `arch`, as Debian
/// installs them: the host's under its multiarch directory, arm64's with
/// the cross toolchain (`linux-libc-dev-arm64-cross`).
fn asm_headers(arch: &str) -> Option<&'static str> {
    match arch {
        "x86" => Some("/usr/include/x86_64-linux-gnu"),
        "arm64" => Some("/usr/aarch64-linux-gnu/include"),
        _ => None,
    }
}

/// Where the skeleton of the object at `object` goes: beside it, its name
/// without `.bpf.o` (or `.o`) and with `.skel.rs`.
fn skeleton_path(object: &Path) -> PathBuf {
    let name = object
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".bpf.o")
        .or_else(|| name.strip_suffix(".o"))
        .unwrap_or(&name);
    object.with_file_name(format!("{stem}.skel.rs"))
}

/// Generates the skeleton of the object at `object`, compiled for `arch`:
/// libbpf-cargo's, with its `include_bytes!` of the object's absolute path
/// made the build script's path, under the stamp line.
fn skeleton(object: &Path, arch: &str) -> Result<(), String> {
    let path = skeleton_path(object);
    SkeletonBuilder::new()
        .obj(object)
        .reference_obj(true)
        // No rustfmt: the output depends on libbpf-cargo's version alone.
        .rustfmt("/nonexistent/kspan-no-rustfmt")
        .generate(&path)
        .map_err(|e| format!("generating the skeleton: {e:#}"))?;
    let generated =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = std::fs::read(object).map_err(|e| format!("{}: {e}", object.display()))?;
    let mut text = skeleton_stamp(&format!("kspan.{arch}.bpf.o"), &bytes);
    text.push('\n');
    text.push_str(&opened_from_the_kernel_s_object(&generated, bytes.len())?);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// libbpf-cargo's skeleton `generated` (of an object of `size` bytes)
/// opening the object kspan-bpf picks for the running kernel
/// (`object_for_kernel`: the current one or the legacy one, whose maps,
/// programs and sections are the same) instead of its inline copy.
fn opened_from_the_kernel_s_object(generated: &str, size: usize) -> Result<String, String> {
    let data = format!("static DATA: [u8; {size}] = *include_bytes!(");
    let open = "ObjectSkeletonConfigBuilder::new(&DATA)";
    let (mut data_lines, mut open_lines) = (0, 0);
    let mut lines: Vec<String> = Vec::new();
    for line in generated.lines() {
        if line.trim_start().starts_with(&data) {
            data_lines += 1;
            // Its attributes (`link_section`) go with it.
            while lines
                .last()
                .is_some_and(|l| l.trim_start().starts_with("#["))
            {
                lines.pop();
            }
            lines.push("// The object's bytes: `crate::object_for_kernel()`.".to_owned());
        } else if line.contains(open) {
            open_lines += 1;
            lines.push(line.replace(
                open,
                "ObjectSkeletonConfigBuilder::new(crate::object_for_kernel())",
            ));
        } else {
            lines.push(line.to_owned());
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if (data_lines, open_lines) != (1, 1) {
        return Err(format!(
            "libbpf-cargo's skeleton has {data_lines} lines `{data}...` and {open_lines} \
             `{open}` where one of each was expected: its output changed; update \
             kspan-bpf-object"
        ));
    }
    Ok(text)
}

/// The legacy object's path beside `object`'s (`kspan.x86.bpf.o` ->
/// `kspan.x86.legacy.bpf.o`).
fn legacy_path(object: &Path) -> PathBuf {
    let name = object
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".bpf.o").unwrap_or(&name);
    object.with_file_name(format!("{stem}.legacy.bpf.o"))
}

/// Fails unless the skeleton of the legacy object at `legacy` is the one
/// of the current object (`current_skeleton`) but for the object's size:
/// the same maps, programs and sections, so that one skeleton opens
/// either.
fn same_skeleton(legacy: &Path, current_skeleton: &Path) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kspan-legacy-skel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("kspan.skel.rs");
    let generated = SkeletonBuilder::new()
        .obj(legacy)
        .reference_obj(true)
        .rustfmt("/nonexistent/kspan-no-rustfmt")
        .generate(&path)
        .map_err(|e| format!("generating the legacy object's skeleton: {e:#}"))
        .and_then(|()| std::fs::read_to_string(&path).map_err(|e| e.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    let size = std::fs::metadata(legacy)
        .map_err(|e| format!("{}: {e}", legacy.display()))?
        .len() as usize;
    let legacy_text = opened_from_the_kernel_s_object(&generated?, size)?;
    let current = std::fs::read_to_string(current_skeleton)
        .map_err(|e| format!("{}: {e}", current_skeleton.display()))?;
    // The current skeleton's first line is its stamp.
    let current_text = current.split_once('\n').map_or("", |(_, rest)| rest);
    if legacy_text != current_text {
        let at = legacy_text
            .lines()
            .zip(current_text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "the legacy object's skeleton differs from the current one's at line {} (`{}`): \
             -DKSPAN_LEGACY may change code only, never maps, programs or globals",
            at + 2,
            legacy_text.lines().nth(at).unwrap_or("")
        ));
    }
    Ok(())
}

/// Fails when a C file of `src/bpf` is missing from `BPF_SOURCES`: the
/// stamp would not cover it, and a change to it would not make the object
/// stale.
fn all_sources_stamped() -> Result<(), String> {
    let dir = std::fs::read_dir("src/bpf").map_err(|e| format!("src/bpf: {e}"))?;
    for entry in dir {
        let name = entry.map_err(|e| format!("src/bpf: {e}"))?.file_name();
        let name = name.to_string_lossy();
        let path = format!("src/bpf/{name}");
        if (name.ends_with(".c") || name.ends_with(".h")) && !BPF_SOURCES.contains(&path.as_str()) {
            return Err(format!(
                "{path} is not in BPF_SOURCES (kspan-bpf/sources_hash.rs): add it, so that \
                 the object's stamp covers it, and to kspan-bpf's `include` if it is not there"
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let (Some(out), Some(arch)) = (args.first(), args.get(1).and_then(|a| a.to_str())) else {
        eprintln!("usage: kspan-bpf-object OUTPUT.o x86|arm64");
        return ExitCode::from(2);
    };
    let Some(headers) = asm_headers(arch) else {
        eprintln!("kspan-bpf-object: unknown target architecture `{arch}`: use x86 or arm64");
        return ExitCode::from(2);
    };
    if !std::path::Path::new(headers).join("asm/ptrace.h").is_file() {
        eprintln!(
            "kspan-bpf-object: no {headers}/asm/ptrace.h, the {arch} kernel headers: \
             run `cargo xtask deps`"
        );
        return ExitCode::FAILURE;
    }
    let out = PathBuf::from(out);
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
    if let Err(e) = all_sources_stamped() {
        eprintln!("kspan-bpf-object: {e}");
        return ExitCode::FAILURE;
    }
    let asm = format!("-I{headers}");
    let target = format!("-D__TARGET_ARCH_{arch}");
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
    let compile = |out: &Path, legacy: bool| {
        let mut args = vec![
            target.as_str(),
            asm.as_str(),
            prefix_map.as_str(),
            "-Wall",
            "-O2",
        ];
        if legacy {
            args.push("-DKSPAN_LEGACY");
        }
        SkeletonBuilder::new()
            .source("src/bpf/kspan.bpf.c")
            .clang(CLANG)
            .obj(out)
            .clang_args(args)
            .build()
    };
    let legacy = legacy_path(&out);
    let result = compile(&out, false).and_then(|()| compile(&legacy, true));
    let stamp = |out: &std::path::Path| -> std::io::Result<()> {
        let sources = BPF_SOURCES
            .map(|path| Ok((path, std::fs::read(path)?)))
            .into_iter()
            .collect::<std::io::Result<Vec<_>>>()?;
        let stamp = sources_stamp(&sources);
        let mut path = out.as_os_str().to_owned();
        path.push(".sources");
        std::fs::write(path, format!("{stamp}\nclang {}\n", clang_version()))
    };
    match result
        .map_err(|e| format!("{e:#}"))
        .and_then(|()| stamp(&out).map_err(|e| e.to_string()))
        .and_then(|()| stamp(&legacy).map_err(|e| e.to_string()))
        .and_then(|()| skeleton(&out, arch))
        .and_then(|()| same_skeleton(&legacy, &skeleton_path(&out)))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "kspan-bpf-object: compiling src/bpf/kspan.bpf.c or its skeleton failed: {e:#}\n\
                 it needs {CLANG} and libelf-dev: run `cargo xtask deps`"
            );
            ExitCode::FAILURE
        }
    }
}
