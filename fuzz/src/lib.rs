// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The fuzz targets of kspan's parsers of outside input, in the layout
//! `cargo fuzz` expects (`fuzz_targets/<name>.rs`, one libFuzzer program
//! each), also built and run without cargo-fuzz or a nightly compiler by
//! `cargo xtask fuzz`.
//!
//! # Why it is shaped so
//!
//! * **A workspace of its own.** Each target links libFuzzer (C++, built by
//!   `libfuzzer-sys`) and wants the sanitizer-coverage flags on everything
//!   it links; the repository's workspace must build without either, so
//!   this crate is no member of it, has its own lock file and its own
//!   `target/fuzz` directory.
//! * **The real parsers, not copies.** What is public in kspan is called
//!   as it is; what is private is reached through `kspan::__fuzz` and
//!   `kspan_cli::__fuzz`, thin wrappers behind each crate's non-default
//!   `fuzzing` feature. The `#[kernel_span]` macro is a proc-macro crate,
//!   which nothing can link as a library: its two source files, the
//!   attribute's parser and the expansion, are compiled into this crate
//!   as they are (`#[path]`), so the target runs the code the compiler
//!   runs, on token streams lexed from the input.
//! * **Every target returns on every input.** A panic, a hang or an
//!   allocation out of proportion to the input is a bug in the parser;
//!   each input that found one is kept as a unit test of the crate that
//!   owns the parser.
//! * **Probes for the planner.** The `btf` and `records` targets plan the
//!   probes declared here with the real `#[kernel_span]` macro: a string,
//!   buffers, a field path, filters.

use std::str::FromStr;

#[allow(dead_code, unreachable_pub)]
#[path = "../../kspan-macros/src/attr.rs"]
mod attr;
#[allow(dead_code, unreachable_pub)]
#[path = "../../kspan-macros/src/expand.rs"]
mod expand;

use kspan::{KernelSpan, Probe};

/// The handler the `macro_attr` target expands when its input gives none.
const DEFAULT_ITEM: &str = "fn probe(count: usize, ret: isize) {}";

/// Runs the `#[kernel_span]` macro on `text`: the attribute's arguments,
/// then (after a NUL) the handler it annotates, each lexed as the compiler
/// would lex them. Text that does not lex is no input the macro can see.
pub fn kernel_span_macro(text: &str) {
    let (args, item) = text.split_once('\0').unwrap_or((text, DEFAULT_ITEM));
    let (Ok(args), Ok(item)) = (
        proc_macro2::TokenStream::from_str(args),
        proc_macro2::TokenStream::from_str(item),
    ) else {
        return;
    };
    let _ = syn::parse2::<attr::KernelSpanArgs>(args.clone());
    let _ = syn::parse2::<attr::CaptureArgs>(args.clone());
    let _ = expand::kernel_span(args, item);
}

/// `vfs_read` with its count, 8 bytes of its buffer as a string, and its
/// return value: probe 0 of the `records` target.
#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, #[capture(max = 8)] buf: &str, ret: isize, span: &mut KernelSpan) {
    match ret {
        0 => span.set_name("vfs_read eof"),
        1 => span.discard(),
        _ => span.set_attribute(kspan::KeyValue::new("seen.buf", format!("{buf}{count}"))),
    }
}

/// `ksys_read`, filtered in the kernel: probe 1.
#[kspan::kernel_span("ksys_read", filter = "count > 100 && fd != 0", min_duration = "1us")]
fn ksys_read(fd: u32, count: usize, ret: isize) {
    let _ = (fd, count, ret);
}

/// `vfs_read`'s file name through a field path, and the user buffer read:
/// planned by the `btf` target against each BTF.
#[kspan::kernel_span("vfs_read", mode = "fexit", errno = false)]
fn vfs_read_name(
    #[capture(path = "file->f_path.dentry->d_name.name", max = 32)] name: &str,
    #[capture(user, len = "ret")] buf: &[u8],
    ret: isize,
) {
    let _ = (name, buf, ret);
}

/// A syscall source's shape on a kernel function, and an enum.
#[kspan::kernel_span("kspan_void_fn", mode = "kprobe")]
fn void_fn(flag: bool, kind: u32) {
    let _ = (flag, kind);
}

/// The probes the `records` target's plans are made of (each plans on the
/// unit tests' sample BTF), in probe-id order.
pub const RECORD_PROBES: [&Probe; 2] = [&vfs_read, &ksys_read];

/// The probes the `btf` target plans against each BTF.
pub const BTF_PROBES: [&Probe; 4] = [&vfs_read, &ksys_read, &vfs_read_name, &void_fn];
