// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's consumer is a thread of its own, so the application's runtime
//! can be anything, or gone: checked on the host with a syscall source (the
//! host kernel runs tracepoint programs).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData, SpanExporter};

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

/// `n` calls of `getppid`, each one kernel span.
fn getppid_calls(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

/// Every kspan runtime of this process sees every `getppid` call of the
/// process: the tests take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The spans of this process's `getppid` calls an exporter got.
fn getppids(spans: &[SpanData]) -> usize {
    spans.iter().filter(|s| s.name == "getppid").count()
}

/// Waits until `exporter` holds at least `n` `getppid` spans, or 5 s.
fn wait_for(exporter: &InMemorySpanExporter, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = getppids(&exporter.get_finished_spans().unwrap_or_default());
        if got >= n || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_runtime_without_io_or_timer_drivers_is_enough() {
    let _turn = turn();
    // `Builder::new_current_thread()` without `enable_io`/`enable_time`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let stats = runtime.block_on(async {
        let kspan = kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(&getppid)
            .start()
            .expect("no driver is needed");
        getppid_calls(10);
        kspan.shutdown().await.expect("shutdown without a timer")
    });
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(getppids(&exporter.get_finished_spans().unwrap()), 10);
}

#[test]
fn a_runtime_dropped_before_kspan_leaves_kspan_working_and_drop_detaches() {
    let _turn = turn();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let kspan = runtime.block_on(async {
        kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(&getppid)
            .start()
            .unwrap()
    });
    drop(runtime);
    getppid_calls(7);
    assert_eq!(
        wait_for(&exporter, 7),
        7,
        "spans keep coming without the runtime"
    );
    drop(kspan);
    getppid_calls(5);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        getppids(&exporter.get_finished_spans().unwrap()),
        7,
        "dropping kspan detached its probes"
    );
}

/// An exporter that takes `delay` per export, as a slow collector would.
#[derive(Debug)]
struct SlowExporter {
    delay: Duration,
    exported: Arc<AtomicUsize>,
}

impl SpanExporter for SlowExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::thread::sleep(self.delay);
        self.exported.fetch_add(batch.len(), Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn a_blocking_span_processor_does_not_stall_a_current_thread_runtime() {
    let _turn = turn();
    // A `SimpleSpanProcessor` exports inside `on_end`: each kernel span blocks
    // the thread that ends it for 50 ms. That thread is kspan's, not the
    // runtime's: a timer task on the single-threaded runtime keeps ticking.
    let exported = Arc::new(AtomicUsize::new(0));
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(SlowExporter {
            delay: Duration::from_millis(50),
            exported: exported.clone(),
        })
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kspan = kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(&getppid)
            .start()
            .unwrap();
        getppid_calls(20); // a second of exports for the consumer
        let ticks = Arc::new(AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                let mut interval = tokio::time::interval(Duration::from_millis(10));
                loop {
                    interval.tick().await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ticked = ticks.load(Ordering::Relaxed);
        ticker.abort();
        assert!(
            ticked >= 25,
            "the runtime's own task ticked {ticked} times in 500 ms while kspan exported"
        );
        let stats = kspan.shutdown().await.unwrap();
        assert_eq!(stats.spans_to_pipeline, 20, "{stats:?}");
    });
    assert_eq!(exported.load(Ordering::Relaxed), 20);
}

#[test]
fn shutdown_is_bounded_and_keeps_the_final_figures() {
    let _turn = turn();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // A batch processor whose exporter hangs for 3 s: the flush cannot
        // finish within a 300 ms shutdown timeout.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(SlowExporter {
                delay: Duration::from_secs(3),
                exported: Arc::new(AtomicUsize::new(0)),
            })
            .with_id_generator(kspan::KernelSpanIds::default())
            .build();
        let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
            .probe(&getppid)
            .shutdown_timeout(Duration::from_millis(300))
            .start()
            .unwrap();
        getppid_calls(3);
        let started = Instant::now();
        let err = kspan.shutdown().await.expect_err("the flush hangs");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
        match &err {
            kspan::Error::Shutdown { stats, source } => {
                assert!(
                    matches!(**source, kspan::Error::FlushTimeout(t) if t == Duration::from_millis(300)),
                    "{err}"
                );
                assert_eq!(stats.records_emitted, 3, "{stats:?}");
                assert_eq!(stats.spans_to_pipeline, 3, "{stats:?}");
            }
            other => panic!("expected Error::Shutdown, got {other}"),
        }
        assert!(err.to_string().contains("shutdown_timeout"), "{err}");
    });
}

/// An exporter that refuses every export.
#[derive(Debug)]
struct FailingExporter;

impl SpanExporter for FailingExporter {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure(
            "the collector is down".to_owned(),
        ))
    }
}

#[test]
fn a_failed_flush_still_gives_the_final_figures() {
    let _turn = turn();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(FailingExporter)
            .with_id_generator(kspan::KernelSpanIds::default())
            .build();
        let kspan = kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(&getppid)
            .start()
            .unwrap();
        getppid_calls(4);
        match kspan.shutdown().await {
            Err(kspan::Error::Shutdown { stats, source }) => {
                assert!(matches!(*source, kspan::Error::Flush(_)), "{source}");
                assert_eq!(stats.records_emitted, 4, "{stats:?}");
            }
            other => panic!("expected Error::Shutdown with the figures, got {other:?}"),
        }
    });
}

#[test]
fn the_ring_buffer_is_the_size_the_builder_says() {
    let _turn = turn();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let err = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .ring_buffer_size(3000)
        .start()
        .expect_err("not a power of two")
        .to_string();
    assert!(
        err.contains("KspanBuilder::ring_buffer_size") && err.contains("power of two"),
        "{err}"
    );
    // One page holds a few dozen records: a burst overflows it, and every
    // call is a record or a counted drop. New calls are declined once the
    // ring is half full, so the record of a call already under way always
    // finds room: none is lost to a full ring.
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .ring_buffer_size(4096)
        .start()
        .unwrap();
    getppid_calls(20_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stats = runtime.block_on(kspan.shutdown()).unwrap();
    assert!(stats.dropped_overload > 0, "{stats:?}");
    assert_eq!(stats.dropped_ring_buffer_full, 0, "{stats:?}");
    assert_eq!(
        stats.records_emitted + stats.dropped_overload,
        20_000,
        "{stats:?}"
    );
    assert_eq!(
        getppids(&exporter.get_finished_spans().unwrap()) as u64,
        stats.spans_to_pipeline,
        "{stats:?}"
    );
}
