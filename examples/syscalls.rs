// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Syscall sources: the `openat` and `read` system calls of this service as
//! spans, from their enter/exit tracepoints. This works on kernels that
//! allow neither BPF trampolines nor kprobes (such as this project's host
//! kernel).
//!
//! `syscalls [PATH] [TIMES] [--buf BYTES]`, run like the quickstart.

use std::process::ExitCode;

/// Every file this service opens: the name (user memory) and the flags.
#[kspan::kernel_span(syscall = "openat")]
fn openat(#[capture(user)] filename: &str, flags: i32, ret: i64) {}

/// Every read: the descriptor, the size asked for, the bytes read.
#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, count: usize, ret: i64) {}

#[tokio::main]
async fn main() -> ExitCode {
    kspan_examples::run_reads("syscalls", kspan_examples::Probes::List(&[&openat, &read])).await
}
