// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan reads its figures without BPF map system calls while it records
//! (run in the VM by `cargo xtask test`, on every kernel of the matrix;
//! the case that matters is sid's 7.2, which preempts kernel code and
//! where `auto` takes kprobes). A map system call holds the CPU's guard
//! against kprobe and tracepoint programs (`bpf_prog_active`); preempted
//! inside one, it makes the kernel skip every such program on that CPU
//! until it runs again, and a call whose entry and exit are both skipped
//! leaves nothing to count.
//!
//! Six threads, more than the two vCPUs, each run 80 application spans of
//! five `fsync`s (`__x64_sys_fsync`, a span each, with `noop_fsync` under
//! it summed onto the application span), with the scheduler's account on,
//! while a seventh thread reads `Kspan::stats()` without pause. Every
//! application span must end with its totals (five `noop_fsync` calls, and
//! the scheduler's figures), every call be exported, and the kernel must
//! have skipped no program run.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kspan_tests::span_int;
use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::Context;

#[kspan::kernel_span("__x64_sys_fsync" | "__arm64_sys_fsync")]
fn sys_fsync(ret: i64) {}

/// The system call's entry point on this architecture, which names its span.
const SYS_FSYNC: &str = if cfg!(target_arch = "aarch64") {
    "__arm64_sys_fsync"
} else {
    "__x64_sys_fsync"
};

#[kspan::kernel_span("noop_fsync", spans = false, sum)]
fn noop_fsync(ret: i32) {}

const THREADS: usize = 6;
const SPANS: usize = 80;
const SYNCS: usize = 5;

#[test]
#[ignore = "needs root and BPF; run by `cargo xtask test` in the VM"]
fn reading_the_figures_costs_the_traced_calls_nothing() {
    let dir = std::env::temp_dir().join(format!("kspan-map-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = kspan_tests::in_memory_provider_with_sums(&sums);
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&sys_fsync, &noop_fsync])
        .kernel_sums(sums.clone())
        .scheduler_account(kspan::SchedulerAccount::new())
        .start()
        .expect("the probes attach");
    for d in kspan.attach_plan() {
        eprintln!("{} through {} ({:?})", d.function, d.attachment, d.chosen);
    }
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let apps: Vec<SpanId> = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let _ = kspan.stats().expect("the figures");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (tracer, dir) = (tracer.clone(), dir.clone());
                scope.spawn(move || {
                    let path = dir.join(format!("f{t}"));
                    std::fs::write(&path, b"x").unwrap();
                    let file = File::options().write(true).open(&path).unwrap();
                    (0..SPANS)
                        .map(|s| {
                            let span = tracer.start(format!("t{t} s{s}"));
                            let cx = Context::current_with_span(span);
                            let _attached = cx.clone().attach();
                            for _ in 0..SYNCS {
                                file.sync_all().unwrap();
                            }
                            cx.span().span_context().span_id()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let apps = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        done.store(true, Ordering::Relaxed);
        apps
    });
    let stats = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    let _ = std::fs::remove_dir_all(&dir);
    let spans = exporter.get_finished_spans().unwrap();
    let mut syscalls: HashMap<SpanId, u64> = HashMap::new();
    for s in spans.iter().filter(|s| s.name == SYS_FSYNC) {
        *syscalls.entry(s.parent_span_id).or_default() += 1;
    }
    let (mut short_sums, mut short_spans, mut without_account) = (0, 0, 0);
    for id in &apps {
        let app = spans
            .iter()
            .find(|s| s.span_context.span_id() == *id)
            .expect("every application span is exported");
        if span_int(app, "kernel.noop_fsync.calls") != Some(SYNCS as i64) {
            short_sums += 1;
        }
        if syscalls.get(id).copied().unwrap_or(0) != SYNCS as u64 {
            short_spans += 1;
        }
        if span_int(app, kspan::sched::attributes::CURRENT_NS).is_none() {
            without_account += 1;
        }
    }
    eprintln!(
        "{} application spans; {} reads of the figures; {short_sums} short of their sums, \
         {short_spans} short of their fsync spans, {without_account} without the account; \
         the kernel skipped {} program runs; {stats}",
        apps.len(),
        reads.load(Ordering::Relaxed),
        stats.skipped_by_kernel
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(stats.skipped_by_kernel, 0, "{stats:?}");
    assert_eq!((short_sums, short_spans, without_account), (0, 0, 0));
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.sums_failed, 0, "{stats:?}");
}
