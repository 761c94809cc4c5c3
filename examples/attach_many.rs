// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaches every traceable `vfs_*` function, then detaches and exits: the
//! workload of `cargo xtask bench`, timed as a whole process against
//! bpftrace attaching the same functions.
//!
//! `attach_many fexit|kretprobe|kretprobe-1000`. Spans go to a pipeline
//! without an exporter: only attach and detach are measured.
//! `kretprobe-1000` attaches about a thousand functions (`tcp_*`,
//! `security_*`, `blk_*`, `sock_*`: 1,106 on Debian 12's kernel) with
//! kprobes.

use std::process::ExitCode;

use opentelemetry_sdk::trace::SdkTracerProvider;

/// Every `vfs_*` function through BPF trampolines.
#[kspan::kernel_span("vfs_*", mode = "fexit")]
fn vfs_fexit() {}

/// Every `vfs_*` function through kprobes.
#[kspan::kernel_span("vfs_*", mode = "kretprobe")]
fn vfs_kretprobe() {}

/// About a thousand functions through kprobes, in four patterns.
#[kspan::kernel_span("tcp_*", mode = "kretprobe")]
fn tcp_kretprobe() {}

#[kspan::kernel_span("security_*", mode = "kretprobe")]
fn security_kretprobe() {}

#[kspan::kernel_span("blk_*", mode = "kretprobe")]
fn blk_kretprobe() {}

#[kspan::kernel_span("sock_*", mode = "kretprobe")]
fn sock_kretprobe() {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let probes: &[&'static kspan::Probe] = match std::env::args().nth(1).as_deref() {
        Some("fexit") => &[&vfs_fexit],
        Some("kretprobe") => &[&vfs_kretprobe],
        Some("kretprobe-1000") => &[
            &tcp_kretprobe,
            &security_kretprobe,
            &blk_kretprobe,
            &sock_kretprobe,
        ],
        other => {
            eprintln!(
                "attach_many: mode {other:?}: expected `fexit`, `kretprobe` or `kretprobe-1000`"
            );
            return ExitCode::from(2);
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let kspan = match kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probes(probes.iter().copied())
        .start()
    {
        Ok(kspan) => kspan,
        Err(e) => {
            eprintln!("attach_many: {e}");
            return ExitCode::FAILURE;
        }
    };
    let attached = kspan.attach_plan().len();
    let multi = kspan.attach_plan().iter().filter(|d| d.multi).count();
    let skipped = kspan.skipped().len();
    match kspan.shutdown().await {
        Ok(_) => {
            println!(
                "attach_many: {attached} functions attached and detached ({multi} by kprobe.multi), {skipped} skipped"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("attach_many: {e}");
            ExitCode::FAILURE
        }
    }
}
