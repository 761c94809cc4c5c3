// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A process whose OpenTelemetry context observer is the application's own
//! (a process of its own: the observer is set once per process). kspan says
//! so at start instead of replacing it or missing context switches, leaves
//! it working, and with `context_observer(false)` and `EnteredSpanLayer`
//! still parents kernel spans under `tracing` spans (host: syscall sources).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::context::{ContextObserver, GlobalContextObserver};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Context;
use tracing_subscriber::layer::SubscriberExt as _;

use kspan_tests::{gettid, in_memory_provider, span_attr};

#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, count: usize, ret: i64) {}

/// The application's observer: counts context entries.
#[derive(Default)]
struct Counting(AtomicU64);

impl ContextObserver for Counting {
    fn on_context_enter(&self, _from: &Context, _to: &Context) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn on_context_exit(&self, _from: &Context, _to: &Context) {}
}

#[tokio::test(flavor = "multi_thread")]
async fn another_observer_is_reported_and_kept() {
    let theirs = Arc::new(Counting::default());
    GlobalContextObserver::set(theirs.clone());

    assert_eq!(
        kspan::context::register_observer(),
        Err(kspan::context::ObserverTaken)
    );
    let (provider, exporter) = in_memory_provider();
    let err = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&read)
        .start()
        .expect_err("start must fail")
        .to_string();
    assert!(
        err.contains("another OpenTelemetry context observer is already registered"),
        "{err}"
    );
    assert!(
        err.contains("KspanBuilder::context_observer(false)"),
        "{err}"
    );
    assert!(err.contains("EnteredSpanLayer::new()"), "{err}");
    let before = theirs.0.load(Ordering::Relaxed);
    drop(Context::new().attach());
    assert_eq!(theirs.0.load(Ordering::Relaxed), before + 1, "still theirs");

    // The way out the error names: the layer instead of the observer.
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&read)
        .context_observer(false)
        .start()
        .expect("syscall sources start on the host");
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")))
        .with(kspan::context::EnteredSpanLayer::new());
    let path = std::env::temp_dir().join(format!("kspan-observer-{}", std::process::id()));
    std::fs::write(&path, b"twelve bytes").unwrap();
    tracing::subscriber::with_default(subscriber, || {
        let _app = tracing::info_span!("app").entered();
        std::fs::read(&path).unwrap();
    });
    std::fs::remove_file(&path).unwrap();
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let app = spans
        .iter()
        .find(|s| s.name == "app")
        .expect("the app span");
    let tid = gettid();
    let reads: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "read" && span_attr(s, "kspan.tid") == Some(tid.into()))
        .filter(|s| s.start_time >= app.start_time && s.start_time <= app.end_time)
        .collect();
    assert!(reads.len() >= 2, "{spans:?}");
    for r in reads {
        assert_eq!(r.parent_span_id, app.span_context.span_id(), "{r:?}");
        assert_eq!(r.span_context.trace_id(), app.span_context.trace_id());
    }
}
