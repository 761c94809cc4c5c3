// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every span accounted for, end to end: the application exports over
//! OTLP/gRPC through a batch processor and kspan's `AccountedExporter`, to a
//! receiver that is up, down, late, killed and restarted, or slow; and with
//! a queue too small for the burst. In every case
//! `calls = acknowledged + export failed + timed out + dropped before the
//! exporter + lost in kspan`, and the receiver holds exactly what was
//! acknowledged. Checked on the host with a syscall source.

use std::time::{Duration, Instant};

use kspan::{AccountedExporter, Error, ExportLedger, Kspan, Stats};
use kspan_tests::Receiver;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

/// `n` calls of `getppid`, each one kernel span.
fn calls(n: u64) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

/// Every kspan runtime of this process sees every `getppid` call of the
/// process: the tests take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A receiver on a runtime of its own, so that killing it closes its
/// connections too.
struct Collector {
    runtime: tokio::runtime::Runtime,
    receiver: Receiver,
}

impl Collector {
    fn start(port: u16, delay: Duration) -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the receiver");
        // On a thread of its own: the test's runtime cannot block on another.
        let receiver = std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(Receiver::start_slow(port, delay)))
                .join()
                .expect("the receiver starts")
        })
        .expect("the receiver binds its port");
        Collector { runtime, receiver }
    }

    /// `getppid` spans received so far.
    fn received(&self) -> u64 {
        self.receiver
            .spans()
            .iter()
            .filter(|s| s.name == "getppid")
            .count() as u64
    }

    /// Stops it at once, connections and all; returns what it received.
    fn kill(self) -> u64 {
        let received = self.received();
        drop(self.receiver);
        self.runtime.shutdown_background();
        received
    }
}

impl Collector {
    /// The port it listens on.
    fn port(&self) -> u16 {
        self.receiver
            .endpoint()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the endpoint ends with a port")
    }
}

/// A loopback port nothing listens on (yet).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The application's pipeline: OTLP/gRPC to `port` with a 500 ms export
/// timeout, batches every 100 ms from a queue of `queue` spans, through an
/// accounted exporter; and kspan on it.
fn start(port: u16, queue: usize) -> (SdkTracerProvider, Kspan, ExportLedger) {
    start_with(
        port,
        queue,
        Duration::from_millis(500),
        Duration::from_secs(10),
    )
}

/// [`start`] with the OTLP exporter's own timeout and kspan's shutdown
/// timeout.
fn start_with(
    port: u16,
    queue: usize,
    export_timeout: Duration,
    shutdown_timeout: Duration,
) -> (SdkTracerProvider, Kspan, ExportLedger) {
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_timeout(export_timeout)
        .build()
        .expect("the OTLP exporter builds");
    let exporter = AccountedExporter::new(otlp);
    let ledger = exporter.ledger();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(Duration::from_millis(100))
                .with_max_queue_size(queue)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let kspan = Kspan::builder(&provider)
        .probe(&getppid)
        .orphans(kspan::Orphans::NewTrace)
        .export_ledger(ledger.clone())
        .shutdown_timeout(shutdown_timeout)
        .start()
        .expect("syscall sources start on the host");
    (provider, kspan, ledger)
}

/// Waits (at most 20 s) until the live figures satisfy `done`.
async fn until(kspan: &Kspan, what: &str, done: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = kspan.stats().expect("live figures");
        if done(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "waited 20 s for {what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The final figures, whether the last flush worked or not.
async fn finish(kspan: Kspan, provider: SdkTracerProvider) -> Stats {
    let stats = match kspan.shutdown().await {
        Ok(stats) => stats,
        Err(Error::Shutdown { stats, .. }) => *stats,
        Err(e) => panic!("shutdown: {e}"),
    };
    let _ = provider.shutdown();
    stats
}

/// The invariant: every call is a span the collector acknowledged, or a
/// counted loss; nothing is left unaccounted.
fn assert_accounted(made: u64, s: &Stats) {
    assert!(s.pipeline_accounted, "{s:?}");
    assert_eq!(s.unsettled(), 0, "{s:?}");
    assert_eq!(
        made,
        s.spans_acknowledged + s.lost() + s.discarded_by_handler,
        "calls = acknowledged + each counted loss: {s:?}"
    );
    assert_eq!(
        s.spans_to_pipeline,
        s.spans_acknowledged + s.lost_after_kspan(),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_up_acknowledges_every_span() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let collector = Collector::start(0, Duration::ZERO);
    let port = collector.port();
    let (provider, kspan, _ledger) = start(port, 4096);
    calls(2000);
    let live = until(&kspan, "acknowledgements", |s| s.spans_acknowledged == 2000).await;
    assert_eq!(live.lost(), 0, "{live:?}");
    let stats = finish(kspan, provider).await;
    assert_accounted(2000, &stats);
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(collector.kill(), 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_counts_every_span_as_failed_live() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (provider, kspan, ledger) = start(free_port(), 4096);
    calls(1000);
    let live = until(&kspan, "failed exports", |s| s.lost_after_kspan() == 1000).await;
    assert_eq!(live.spans_acknowledged, 0, "{live:?}");
    let why = ledger.last_error().unwrap_or_default();
    assert!(why.contains("export failed"), "the exporter's words: {why}");
    let stats = finish(kspan, provider).await;
    assert_accounted(1000, &stats);
    assert_eq!(stats.spans_acknowledged, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_late_then_up_is_counted_both_ways() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let port = free_port();
    let (provider, kspan, _ledger) = start(port, 4096);
    calls(500);
    until(&kspan, "failed exports", |s| s.lost_after_kspan() == 500).await;
    let collector = Collector::start(port, Duration::ZERO);
    calls(700);
    let stats_live = until(&kspan, "acknowledgements", |s| s.spans_acknowledged == 700).await;
    assert_eq!(stats_live.lost_after_kspan(), 500, "{stats_live:?}");
    let stats = finish(kspan, provider).await;
    assert_accounted(1200, &stats);
    assert_eq!(collector.kill(), stats.spans_acknowledged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_killed_and_restarted_is_counted() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let port = free_port();
    let collector = Collector::start(port, Duration::ZERO);
    let (provider, kspan, _ledger) = start(port, 4096);
    calls(400);
    until(&kspan, "acknowledgements", |s| s.spans_acknowledged == 400).await;
    let first = collector.kill();
    calls(300);
    until(&kspan, "failed exports", |s| s.lost_after_kspan() == 300).await;
    let collector = Collector::start(port, Duration::ZERO);
    calls(200);
    until(&kspan, "acknowledgements", |s| s.spans_acknowledged == 600).await;
    let stats = finish(kspan, provider).await;
    assert_accounted(900, &stats);
    assert_eq!(first + collector.kill(), stats.spans_acknowledged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_collector_times_exports_out_and_they_are_counted() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let collector = Collector::start(0, Duration::from_secs(2));
    let port = collector.port();
    let (provider, kspan, ledger) = start(port, 4096);
    calls(300);
    let live = until(&kspan, "exports that time out", |s| {
        s.lost_after_kspan() == 300
    })
    .await;
    assert_eq!(live.spans_acknowledged, 0, "{live:?}");
    // The OTLP/gRPC exporter reports its deadline as a failure; the ledger
    // keeps its words.
    let why = ledger.last_error().unwrap_or_default();
    assert!(why.contains("Timeout"), "{why}");
    let stats = finish(kspan, provider).await;
    assert_accounted(300, &stats);
    // A timed-out export may still have arrived: the receiver holds at
    // least what was acknowledged, at most that and what failed.
    let received = collector.kill();
    assert!(
        (stats.spans_acknowledged..=stats.spans_acknowledged + stats.lost_after_kspan())
            .contains(&received),
        "{received} received: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_are_counted_live_and_exactly() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let collector = Collector::start(0, Duration::ZERO);
    let port = collector.port();
    // A queue of 64 against a burst of 20,000 calls made faster than a
    // batch is exported.
    let (provider, kspan, _ledger) = start(port, 64);
    calls(20_000);
    // Drops are known live as soon as a span handed after them is
    // exported: a later call, once the queue has room again. Those dropped
    // after the last exported span are known at the final flush.
    tokio::time::sleep(Duration::from_millis(500)).await;
    calls(10);
    let live = until(&kspan, "drops before the exporter", |s| {
        s.spans_dropped_before_export > 0
    })
    .await;
    assert!(live.spans_acknowledged > 0, "{live:?}");
    let stats = finish(kspan, provider).await;
    assert_accounted(20_010, &stats);
    assert!(stats.spans_dropped_before_export > 0, "{stats:?}");
    assert_eq!(collector.kill(), stats.spans_acknowledged);
}

/// Live, every span handed is acknowledged, lost by reason, or unsettled
/// (queued or in an export), and no more is queued than the pipeline holds.
fn assert_live_accounted(s: &Stats, capacity: u64) {
    assert_eq!(
        s.spans_to_pipeline,
        s.spans_acknowledged + s.lost_after_kspan() + s.unsettled(),
        "{s:?}"
    );
    assert!(s.spans_in_pipeline <= capacity, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_collector_leaves_nothing_uncounted() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // It answers after an hour; the exporter waits as long.
    let collector = Collector::start(0, Duration::from_secs(3600));
    let port = collector.port();
    let hour = Duration::from_secs(3600);
    let (provider, kspan, ledger) = start_with(port, 4096, hour, Duration::from_secs(2));
    calls(1000);
    let live = until(&kspan, "an export in flight", |s| s.spans_in_export > 0).await;
    assert_live_accounted(&live, 4096 + 512);
    calls(500);
    let live = until(&kspan, "the spans handed", |s| s.spans_to_pipeline == 1500).await;
    assert_live_accounted(&live, 4096 + 512);
    let started = Instant::now();
    let stats = match kspan.shutdown().await {
        Err(Error::Shutdown { stats, source }) => {
            assert!(matches!(*source, Error::FlushTimeout(_)), "{source}");
            *stats
        }
        other => panic!("a hanging export cannot flush: {other:?}"),
    };
    // kspan's limit bounds the shutdown, not the SDK's 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // Not known yet, not counted as lost, and not missing.
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.unsettled(), 1500, "{stats:?}");
    assert!(stats.spans_in_export > 0, "{stats:?}");
    let _ = provider.shutdown_with_timeout(Duration::from_millis(500));
    let settled = ledger.final_figures(&stats);
    assert_accounted(1500, &settled);
    assert_eq!(settled.spans_acknowledged, 0, "{settled:?}");
    assert_eq!(
        settled.spans_export_unfinished, stats.spans_in_export,
        "{settled:?}"
    );
    collector.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_the_sdk_cuts_at_5_s_goes_on_to_kspans_limit_and_loses_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Each export takes 6 s: the SDK's batch processor stops waiting for a
    // flush after 5 s while the export goes on.
    let collector = Collector::start(0, Duration::from_secs(6));
    let port = collector.port();
    let (provider, kspan, ledger) =
        start_with(port, 4096, Duration::from_secs(30), Duration::from_secs(30));
    calls(300);
    until(&kspan, "an export in flight", |s| s.spans_in_export > 0).await;
    calls(200);
    let stats = kspan
        .shutdown()
        .await
        .expect("the flush finishes within 30 s");
    assert_accounted(500, &stats);
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.spans_acknowledged, 500, "{stats:?}");
    provider.shutdown().expect("nothing left to export");
    assert_eq!(ledger.final_figures(&stats), stats);
    assert_eq!(collector.kill(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_counts_orphans_as_orphans_and_loses_only_what_it_must() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let collector = Collector::start(0, Duration::ZERO);
    let port = collector.port();
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .build()
        .expect("the OTLP exporter builds");
    let exporter = AccountedExporter::new(otlp);
    let ledger = exporter.ledger();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(
            BatchSpanProcessor::builder(exporter)
                .with_batch_config(
                    BatchConfigBuilder::default()
                        .with_max_queue_size(1 << 16)
                        .build(),
                )
                .build(),
        )
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    // A ring of one page: a burst fills it long before the consumer's next
    // 50 ms round, so the overload policy declines calls.
    let kspan = Kspan::builder(&provider)
        .probe(&getppid)
        .export_ledger(ledger)
        .ring_buffer_size(4096)
        .start()
        .expect("syscall sources start on the host");
    use opentelemetry::trace::{Tracer, TracerProvider as _};
    let tracer = provider.tracer("app");
    let (mut inside, mut outside) = (0, 0);
    for _ in 0..400 {
        tracer.in_span("request", |_| calls(5));
        inside += 5;
        // Orphans, made while the ring is full.
        calls(5);
        outside += 5;
    }
    let stats = finish(kspan, provider).await;
    assert!(stats.dropped_overload > 0, "no overload: {stats:?}");
    // Every call outside a span is an orphan, overloaded or not.
    assert_eq!(stats.orphans_dropped, outside, "{stats:?}");
    assert_accounted(inside, &stats);
    assert_eq!(collector.kill(), stats.spans_acknowledged);
}

#[kspan::kernel_span(syscall = "sendto")]
fn sendto(fd: i32, ret: i64) {}

#[kspan::kernel_span(syscall = "writev")]
fn writev(fd: u64, ret: i64) {}

#[kspan::kernel_span(syscall = "write")]
fn write(fd: u32, ret: i64) {}

#[kspan::kernel_span(syscall = "recvfrom")]
fn recvfrom(fd: i32, ret: i64) {}

/// An idle service tracing the system calls its own OTLP exporter makes,
/// for `idle`; returns the kernel spans the collector got, besides the one
/// of the request, and the final figures.
async fn idle_service(orphans: kspan::Orphans, idle: Duration) -> (u64, Stats) {
    let collector = Collector::start(0, Duration::ZERO);
    let port = collector.port();
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .build()
        .expect("the OTLP exporter builds");
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(otlp)
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let mut builder =
        Kspan::builder(&provider).probes([&getppid, &sendto, &writev, &write, &recvfrom]);
    if orphans != kspan::Orphans::default() {
        builder = builder.orphans(orphans);
    }
    let kspan = builder.start().expect("syscall sources start on the host");
    // One request, with one traced call in it.
    use opentelemetry::trace::{Tracer, TracerProvider as _};
    provider.tracer("app").in_span("request", |_| calls(1));
    tokio::time::sleep(idle).await;
    let stats = finish(kspan, provider).await;
    let received = collector.receiver.spans();
    let others = received
        .iter()
        .filter(|s| s.name != "getppid" && s.name != "request")
        .count() as u64;
    assert_eq!(
        received.iter().filter(|s| s.name == "getppid").count(),
        1,
        "{stats:?}"
    );
    collector.kill();
    (others, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_exporter_s_own_calls_do_not_feed_back_into_kernel_spans() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // The default, for a long-running service: calls with no application
    // span (the exporter's sends on the runtime's threads among them) are
    // counted, not exported.
    let (others, stats) = idle_service(kspan::Orphans::default(), Duration::from_secs(2)).await;
    assert_eq!(others, 0, "{stats:?}");
    assert!(
        stats.orphans_dropped > 0,
        "the exporter's sends were seen: {stats:?}"
    );
    // Kept as traces of their own, each export's sends become spans that
    // the next export sends: a loop that runs while the service idles.
    let (others, stats) = idle_service(kspan::Orphans::NewTrace, Duration::from_secs(2)).await;
    assert!(others > 0, "{stats:?}");
}
