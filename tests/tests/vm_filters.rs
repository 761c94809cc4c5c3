// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Filters and nesting (run in the VM by `cargo xtask test`, on both
//! kernels): `ksys_read` calls `vfs_read`, and each may refuse a call the
//! other keeps. A kept span's parent is always an exported span: its own
//! kernel parent when that was kept, the application span when it was not.
//! Traced with fexit, and with kretprobes (whose exits come by another
//! route).

use std::io::Read;

use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_sdk::trace::SpanData;

/// One kspan runtime at a time: each traces the whole process.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SMALL: usize = 500;
const LARGE: usize = 9;

/// Starts kspan with `outer` (`ksys_read`) and `inner` (`vfs_read`), reads
/// /dev/zero SMALL times by one byte and LARGE times by 64 KiB inside the
/// span `hot_loop`, and returns that span's id and the kernel spans.
async fn run(
    outer: &'static kspan::Probe,
    inner: &'static kspan::Probe,
) -> (SpanId, Vec<SpanData>) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probes([outer, inner])
        .start()
        .expect("probes attach");
    let app = tracer.in_span("hot_loop", |cx| {
        let mut zero = std::fs::File::open("/dev/zero").expect("/dev/zero opens");
        let mut small = [0u8; 1];
        let mut large = vec![0u8; 65536];
        for _ in 0..SMALL {
            zero.read_exact(&mut small).expect("reads");
        }
        for _ in 0..LARGE {
            zero.read_exact(&mut large).expect("reads");
        }
        cx.span().span_context().span_id()
    });
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.spans_parent_unresolved, 0, "{stats:?}");
    assert_eq!(stats.spans_waiting_for_parent, 0, "{stats:?}");
    assert!(stats.filtered >= SMALL as u64, "{stats:?}");
    let kernel = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.instrumentation_scope.name() == "kspan")
        .collect();
    (app, kernel)
}

/// The spans named `name`.
fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn count(span: &SpanData) -> Option<i64> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "kernel.arg.count")
        .and_then(|kv| match kv.value {
            opentelemetry::Value::I64(v) => Some(v),
            _ => None,
        })
}

macro_rules! nesting_tests {
    ($module:ident, $mode:literal) => {
        mod $module {
            use super::*;

            #[kspan::kernel_span("ksys_read", mode = $mode, min_duration = "10s")]
            fn outer_refused(count: usize, ret: isize) {}
            #[kspan::kernel_span("vfs_read", mode = $mode, filter = "count >= 65536")]
            fn inner_large(count: usize, ret: isize) {}

            #[kspan::kernel_span("ksys_read", mode = $mode, filter = "count >= 65536")]
            fn outer_large(count: usize, ret: isize) {}
            #[kspan::kernel_span("vfs_read", mode = $mode, min_duration = "10s")]
            fn inner_refused(count: usize, ret: isize) {}

            #[kspan::kernel_span("vfs_read", mode = $mode, filter = "count >= 65536 && ret > 0")]
            fn inner_large_too(count: usize, ret: isize) {}

            #[tokio::test(flavor = "current_thread")]
            #[ignore = "needs BPF trampolines and kprobes; run by `cargo xtask test` in the VM"]
            async fn a_kept_call_under_a_refused_one_hangs_under_the_application_span() {
                let (app, spans) = run(&outer_refused, &inner_large).await;
                assert!(named(&spans, "ksys_read").is_empty());
                let reads = named(&spans, "vfs_read");
                assert_eq!(reads.len(), LARGE, "{spans:#?}");
                for s in reads {
                    assert_eq!(
                        s.parent_span_id, app,
                        "reparented past the refused ksys_read"
                    );
                    assert_eq!(count(s), Some(65536));
                }
            }

            #[tokio::test(flavor = "current_thread")]
            #[ignore = "needs BPF trampolines and kprobes; run by `cargo xtask test` in the VM"]
            async fn a_refused_call_under_a_kept_one_leaves_its_parent_whole() {
                let (app, spans) = run(&outer_large, &inner_refused).await;
                assert!(named(&spans, "vfs_read").is_empty());
                let reads = named(&spans, "ksys_read");
                assert_eq!(reads.len(), LARGE, "{spans:#?}");
                assert!(reads
                    .iter()
                    .all(|s| s.parent_span_id == app && count(s) == Some(65536)));
            }

            #[tokio::test(flavor = "current_thread")]
            #[ignore = "needs BPF trampolines and kprobes; run by `cargo xtask test` in the VM"]
            async fn kept_calls_under_kept_calls_keep_their_kernel_parent() {
                let (app, spans) = run(&outer_large, &inner_large_too).await;
                let outer = named(&spans, "ksys_read");
                let inner = named(&spans, "vfs_read");
                assert_eq!((outer.len(), inner.len()), (LARGE, LARGE), "{spans:#?}");
                assert!(outer.iter().all(|s| s.parent_span_id == app));
                for s in inner {
                    assert!(
                        outer
                            .iter()
                            .any(|o| o.span_context.span_id() == s.parent_span_id),
                        "vfs_read under its ksys_read"
                    );
                }
            }
        }
    };
}

nesting_tests!(fexit, "fexit");
nesting_tests!(kretprobe, "kretprobe");
