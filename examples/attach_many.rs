// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaches every traceable `vfs_*` function, then detaches and exits: the
//! workload of `cargo xtask bench`, timed as a whole process against
//! bpftrace attaching the same functions.
//!
//! `attach_many fexit|kretprobe|fexit-1000|kretprobe-1000[-pair]`. Spans
//! go to kspan's pipeline with an exporter that discards them: only attach
//! and detach are measured. Each attaches through the cheapest attachment the kernel has
//! (fsession.multi, kprobe.session); `-pair` turns session programs off
//! (fentry + fexit per function, a kprobe.multi link per direction). The `-1000` modes attach about a thousand functions
//! (`tcp_*`, `security_*`, `blk_*`, `sock_*`: 1,106 on Debian 12's kernel).
//! It prints how many functions each attachment took and kspan's settled
//! figures on one line, and on stderr each match left out with why.

use std::process::ExitCode;

use kspan_examples::hot::discard;

/// The pipeline's queue: room for the spans of the calls this process
/// makes while attached (the SDK's default).
const QUEUE: usize = 2048;

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

/// The same thousand functions through BPF trampolines.
#[kspan::kernel_span("tcp_*", mode = "fexit")]
fn tcp_fexit() {}

#[kspan::kernel_span("security_*", mode = "fexit")]
fn security_fexit() {}

#[kspan::kernel_span("blk_*", mode = "fexit")]
fn blk_fexit() {}

#[kspan::kernel_span("sock_*", mode = "fexit")]
fn sock_fexit() {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let (set, pair) = match mode.strip_suffix("-pair") {
        Some(set) => (set, true),
        None => (mode.as_str(), false),
    };
    let probes: &[&'static kspan::Probe] = match set {
        "fexit" => &[&vfs_fexit],
        "kretprobe" => &[&vfs_kretprobe],
        "fexit-1000" => &[&tcp_fexit, &security_fexit, &blk_fexit, &sock_fexit],
        "kretprobe-1000" => &[
            &tcp_kretprobe,
            &security_kretprobe,
            &blk_kretprobe,
            &sock_kretprobe,
        ],
        _ => {
            eprintln!(
                "attach_many: mode `{mode}`: expected `fexit`, `kretprobe`, `fexit-1000` or \
                 `kretprobe-1000`, each with or without `-pair`"
            );
            return ExitCode::from(2);
        }
    };
    let discarding = discard::provider(QUEUE);
    let mut builder = kspan::Kspan::builder(&discarding.provider)
        .pipeline(&discarding.pipeline)
        .orphans(kspan::Orphans::NewTrace)
        .probes(probes.iter().copied());
    if pair {
        builder = builder.disable(kspan::Mechanism::Sessions);
    }
    let started = std::time::Instant::now();
    let kspan = match builder.start() {
        Ok(kspan) => kspan,
        Err(e) => {
            eprintln!("attach_many: {e}");
            return ExitCode::FAILURE;
        }
    };
    let attached = kspan.attach_plan().len();
    let mut by: std::collections::BTreeMap<kspan::Attachment, usize> = Default::default();
    for decision in kspan.attach_plan() {
        *by.entry(decision.attachment).or_default() += 1;
    }
    let by: Vec<String> = by.iter().map(|(a, n)| format!("{n} by {a}")).collect();
    // Each match left out, with why, on stderr (the bench reads stdout).
    for (function, why) in kspan.skipped() {
        eprintln!("skipped {function}: {why}");
    }
    let skipped = kspan.skipped().len();
    let start_ms = started.elapsed().as_millis();
    let detaching = std::time::Instant::now();
    let shutdown = kspan.shutdown().await;
    let shutdown_ms = detaching.elapsed().as_millis();
    let shut = discarding.provider.shutdown();
    match shutdown {
        Ok(stats) => {
            let stats = discarding.pipeline.ledger().final_figures(&stats);
            println!(
                "attach_many: {attached} functions attached and detached ({}), {skipped} skipped; \
                 start {start_ms} ms, shutdown {shutdown_ms} ms; kspan: {stats}",
                by.join(", "),
            );
            if let Err(e) = shut {
                eprintln!("attach_many: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("attach_many: {e}");
            ExitCode::FAILURE
        }
    }
}
