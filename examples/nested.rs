// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Two traced functions where one calls the other: `ksys_read` (the read
//! system call's body) calls `vfs_read`, so every read is a `ksys_read` span
//! with a `vfs_read` child.
//!
//! `nested [PATH] [TIMES] [--buf BYTES]`, run like the quickstart. It starts
//! kspan with `all_probes()`: every annotated function of the program.

use std::process::ExitCode;

/// The read system call's body.
#[kspan::kernel_span("ksys_read")]
fn ksys_read(fd: u32, count: usize, ret: isize) {}

/// The VFS read it calls.
#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    // Both probes, without naming them: every `#[kernel_span]` of the program.
    kspan_examples::run_reads("nested", kspan_examples::Probes::All).await
}
