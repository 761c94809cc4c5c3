// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Whole trees or nothing under overload (run in the VM by `cargo xtask
//! test`): with a ring buffer far too small for the burst, kspan declines
//! new calls before it would lose the exit of a call whose children were
//! exported, so every exported kernel span's parent is exported too, every
//! exported `ksys_read` has its `vfs_read` child (or says it lacks it), and
//! every call is exported or counted.

use std::collections::HashSet;
use std::io::Read;

use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};

#[kspan::kernel_span("ksys_read", mode = "fexit")]
fn ksys_read(fd: u32, count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

/// 1-byte reads of /dev/zero: each is one `ksys_read` around one `vfs_read`.
const READS: u64 = 20_000;

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn an_overloaded_ring_buffer_drops_whole_trees_and_counts_them() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&ksys_read, &vfs_read])
        // Four pages: about a hundred records.
        .ring_buffer_size(16 * 1024)
        .start()
        .expect("trampolines attach");
    let (app, app_trace) = tracer.in_span("burst", |cx| {
        let mut zero = std::fs::File::open("/dev/zero").expect("/dev/zero opens");
        let mut byte = [0u8; 1];
        for _ in 0..READS {
            zero.read_exact(&mut byte).expect("reads /dev/zero");
        }
        let span = cx.span().span_context().clone();
        (span.span_id(), span.trace_id())
    });
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    // The declines, for the record (BENCHMARKS.md).
    eprintln!("vm_overload: {} calls: {stats}", 2 * READS);
    let spans = exporter.get_finished_spans().unwrap();
    let kernel: Vec<_> = spans
        .iter()
        .filter(|s| s.instrumentation_scope.name() == "kspan")
        .collect();
    // Every exported kernel span's parent is exported too, or is the
    // application's span, or it has none (a call outside the burst).
    let mut exported: HashSet<SpanId> = kernel.iter().map(|s| s.span_context.span_id()).collect();
    exported.insert(app);
    let others: Vec<String> = kernel
        .iter()
        .filter(|s| s.span_context.trace_id() != app_trace)
        .map(|s| format!("{} {:?} parent {}", s.name, s.attributes, s.parent_span_id))
        .collect();

    assert!(stats.dropped_overload > 0, "the burst overloads: {stats:?}");
    // One thread: the room kept for exits always suffices.
    assert_eq!(stats.dropped_ring_buffer_full, 0, "{stats:?}");
    for span in &kernel {
        assert!(
            span.parent_span_id == SpanId::INVALID || exported.contains(&span.parent_span_id),
            "{} {:?} names a parent that was not exported ({stats:?})",
            span.name,
            span.span_context
        );
    }
    // And every exported `ksys_read` has its `vfs_read`, or says it lacks it.
    for span in kernel.iter().filter(|s| s.name == "ksys_read") {
        let children = kernel
            .iter()
            .filter(|c| c.parent_span_id == span.span_context.span_id())
            .count() as i64;
        let said = kspan_tests::span_int(span, kspan::attributes::DESCENDANTS_DROPPED).unwrap_or(0);
        assert_eq!(
            children + said,
            1,
            "a ksys_read with {children} children and {said} said dropped ({stats:?})"
        );
    }
    let burst = kernel
        .iter()
        .filter(|s| s.span_context.trace_id() == app_trace)
        .count() as u64;
    assert!(burst > 0, "{stats:?}");
    assert_eq!(kernel.len() as u64, stats.spans_to_pipeline, "{stats:?}");
    // Every call is exported or counted: the burst's, and the few the
    // process makes outside it (orphans, dropped and counted by default).
    let outside = (stats.spans_to_pipeline + stats.lost() + stats.orphans_dropped)
        .checked_sub(2 * READS)
        .unwrap_or_else(|| panic!("fewer calls counted than the burst made: {stats:?}"));
    assert!(
        outside <= 4 && others.is_empty(),
        "every call is exported or counted, the burst's under its span: {stats:?}, \
         outside the burst: {others:#?}"
    );
}
