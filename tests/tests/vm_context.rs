// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel spans inside the application's traces (run in the VM by `cargo
//! xtask test`): kspan's context observer publishes the application's active
//! span (OTEP 4947) as tracing-opentelemetry attaches it on enter, with no
//! kspan layer; the BPF programs read it at the outermost traced call, and
//! the kernel spans become its children, in its trace.

use std::io::Read;

use kspan_tests::{gettid, span_attr};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, Sampler, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;

#[kspan::kernel_span("ksys_read", mode = "fexit")]
fn ksys_read(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

const BUF: usize = 256;

/// Reads a 300-byte file with a 256-byte buffer: three reads (256, 44, 0).
fn read_file(name: &str) -> usize {
    let path = std::env::temp_dir().join(name);
    std::fs::write(&path, vec![b'c'; 300]).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = [0u8; BUF];
    let mut calls = 0;
    loop {
        calls += 1;
        if f.read(&mut buf).unwrap() == 0 {
            return calls;
        }
    }
}

struct Traced {
    spans: Vec<SpanData>,
    stats: kspan::Stats,
}

/// Runs `work` on this thread under a subscriber with the OpenTelemetry
/// layer and kspan's thread-context layer, kspan tracing `ksys_read` and
/// `vfs_read` as `builder` says.
async fn traced(
    sampler: Sampler,
    builder: impl FnOnce(kspan::KspanBuilder) -> kspan::KspanBuilder,
    work: impl FnOnce(),
) -> Traced {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(exporter.clone())
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    // No kspan layer: kspan's context observer sees the contexts
    // tracing-opentelemetry attaches on enter.
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
    let kspan = builder(
        kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(&ksys_read)
            .probe(&vfs_read),
    )
    .start()
    .expect("needs a kernel with BPF trampolines");
    tracing::subscriber::with_default(subscriber, work);
    let stats = kspan.shutdown().await.unwrap();
    Traced {
        spans: exporter.get_finished_spans().unwrap(),
        stats,
    }
}

/// The kernel spans of this thread's reads (count = BUF).
fn reads<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    let tid = gettid();
    spans
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| span_attr(s, "kspan.tid") == Some(tid.into()))
        .filter(|s| span_attr(s, "kernel.arg.count") == Some((BUF as i64).into()))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn kernel_spans_are_children_of_the_application_span() {
    let mut calls = 0;
    let t = traced(
        Sampler::AlwaysOn,
        |b| b,
        || {
            let span = tracing::info_span!("read_file");
            let _entered = span.enter();
            calls = read_file("kspan-ctx-tree.txt");
        },
    )
    .await;
    assert_eq!(t.stats.lost(), 0, "{:?}", t.stats);
    let app: Vec<&SpanData> = t.spans.iter().filter(|s| s.name == "read_file").collect();
    assert_eq!(app.len(), 1, "{:#?}", t.spans);
    let app = app[0];
    let (outer, inner) = (reads(&t.spans, "ksys_read"), reads(&t.spans, "vfs_read"));
    assert_eq!((outer.len(), inner.len()), (calls, calls), "{:#?}", t.spans);
    for o in &outer {
        assert_eq!(o.parent_span_id, app.span_context.span_id(), "{o:#?}");
        assert_eq!(o.span_context.trace_id(), app.span_context.trace_id());
        assert!(
            app.start_time <= o.start_time && o.end_time <= app.end_time,
            "inside the application span in time: {app:#?} {o:#?}"
        );
    }
    for i in &inner {
        let parent = outer
            .iter()
            .find(|o| o.span_context.span_id() == i.parent_span_id)
            .unwrap_or_else(|| panic!("vfs_read under a ksys_read: {i:#?}"));
        assert_eq!(i.span_context.trace_id(), app.span_context.trace_id());
        assert!(parent.start_time <= i.start_time && i.end_time <= parent.end_time);
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn calls_under_an_unsampled_span_are_dropped_in_the_kernel() {
    let mut calls = 0;
    let t = traced(
        Sampler::AlwaysOff,
        |b| b,
        || {
            let span = tracing::info_span!("unsampled");
            let _entered = span.enter();
            calls = read_file("kspan-ctx-unsampled.txt");
        },
    )
    .await;
    assert!(reads(&t.spans, "ksys_read").is_empty(), "{:#?}", t.spans);
    assert!(reads(&t.spans, "vfs_read").is_empty(), "{:#?}", t.spans);
    // Each read: ksys_read (outermost, decided) and vfs_read (inherits).
    assert!(
        t.stats.unsampled >= 2 * calls as u64,
        "counted as sampling decisions: {:?}",
        t.stats
    );
    assert_eq!(t.stats.lost(), 0, "not a loss: {:?}", t.stats);
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn orphans_start_traces_of_their_own_with_new_trace() {
    let mut calls = 0;
    let t = traced(
        Sampler::AlwaysOn,
        |b| b.orphans(kspan::Orphans::NewTrace),
        || {
            calls = read_file("kspan-ctx-orphan.txt");
        },
    )
    .await;
    let outer = reads(&t.spans, "ksys_read");
    assert_eq!(outer.len(), calls, "{:#?}", t.spans);
    for o in &outer {
        assert_eq!(o.parent_span_id, SpanId::INVALID, "a root: {o:#?}");
    }
    let traces: std::collections::HashSet<_> =
        outer.iter().map(|o| o.span_context.trace_id()).collect();
    assert_eq!(traces.len(), calls, "a trace per outermost call");
    assert_eq!(t.stats.orphans_dropped, 0);
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn orphans_are_dropped_by_default() {
    let mut calls = 0;
    let t = traced(
        Sampler::AlwaysOn,
        |b| b.orphans(kspan::Orphans::default()),
        || {
            calls = read_file("kspan-ctx-orphan-drop.txt");
            let span = tracing::info_span!("kept");
            let _entered = span.enter();
            read_file("kspan-ctx-orphan-kept.txt");
        },
    )
    .await;
    let outer = reads(&t.spans, "ksys_read");
    let app = t.spans.iter().find(|s| s.name == "kept").unwrap();
    assert!(
        outer
            .iter()
            .all(|o| o.parent_span_id == app.span_context.span_id()),
        "only the calls under the application span: {outer:#?}"
    );
    assert_eq!(outer.len(), calls, "{:#?}", t.spans);
    assert!(t.stats.orphans_dropped >= 2 * calls as u64, "{:?}", t.stats);
    assert_eq!(t.stats.lost(), 0, "{:?}", t.stats);
}
