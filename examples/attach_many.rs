// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaches every traceable `vfs_*` function, then detaches and exits: the
//! workload of `cargo xtask bench`, timed as a whole process against
//! bpftrace attaching the same functions.
//!
//! `attach_many fexit|kretprobe`. Spans go to a pipeline without an
//! exporter: only attach and detach are measured.

use std::process::ExitCode;

use opentelemetry_sdk::trace::SdkTracerProvider;

/// Every `vfs_*` function through BPF trampolines.
#[kspan::kernel_span("vfs_*", mode = "fexit")]
fn vfs_fexit() {}

/// Every `vfs_*` function through kprobes.
#[kspan::kernel_span("vfs_*", mode = "kretprobe")]
fn vfs_kretprobe() {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let probe = match std::env::args().nth(1).as_deref() {
        Some("fexit") => &vfs_fexit,
        Some("kretprobe") => &vfs_kretprobe,
        other => {
            eprintln!("attach_many: mode {other:?}: expected `fexit` or `kretprobe`");
            return ExitCode::from(2);
        }
    };
    let provider = SdkTracerProvider::builder().build();
    let kspan = match kspan::Kspan::builder(&provider).probe(probe).start() {
        Ok(kspan) => kspan,
        Err(e) => {
            eprintln!("attach_many: {e}");
            return ExitCode::FAILURE;
        }
    };
    let attached = kspan.attach_plan().len();
    let skipped = kspan.skipped().len();
    match kspan.shutdown().await {
        Ok(_) => {
            println!("attach_many: {attached} functions attached and detached, {skipped} skipped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("attach_many: {e}");
            ExitCode::FAILURE
        }
    }
}
