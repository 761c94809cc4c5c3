// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What becomes of kernel spans after kspan hands them to the application's
//! pipeline: acknowledged by the collector, failed in export (and why), or
//! dropped on the way (a batch processor's full queue, a sampler).
//!
//! The SDK's extension point for this is the exporter: [`AccountedExporter`]
//! wraps the application's own, passes every batch through unchanged, and
//! counts the kernel spans in it into an [`ExportLedger`] that
//! [`KspanBuilder::export_ledger`](crate::KspanBuilder::export_ledger) gives
//! to kspan. Spans dropped before the exporter never reach it, so kspan
//! numbers the spans it hands over (an attribute the exporter removes before
//! passing the batch on): the default batch processor exports in the order
//! spans ended, so a number the exporter never saw, below one it saw, is a
//! span dropped on the way, known as soon as a later one arrives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use crate::annotation::attributes::SEQUENCE;
#[cfg(test)]
use crate::span::sequence;
use crate::span::{SCOPE_NAME, STREAM_SHIFT};
use crate::stats::Stats;

/// Counts of what the exporter did with kernel spans; shared by an
/// [`AccountedExporter`] and the kspan runtime given it.
#[derive(Debug, Clone, Default)]
pub struct ExportLedger {
    inner: Arc<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Under one lock, so that a reading is one moment of all of them (the
    /// lock is taken twice a batch and at each reading).
    counts: Mutex<Counts>,
    last_error: Mutex<Option<String>>,
}

/// Streams the ledger follows: a runtime's workers, capped far below.
const MAX_STREAMS: u32 = 1024;

#[derive(Debug, Default, Clone)]
struct Counts {
    /// Kernel spans that reached the exporter with a number.
    numbered: u64,
    /// Per stream, one more than the highest number seen (0: none yet);
    /// summed, how many spans were numbered up to the highest numbers seen.
    seen_per_stream: Vec<u64>,
    /// Kernel spans that reached it without one (settled like the others).
    unnumbered: u64,
    acknowledged: u64,
    failed: u64,
    timed_out: u64,
}

/// The ledger's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ExportFigures {
    /// Spans that reached the exporter.
    pub received: u64,
    /// Spans handed over whose number is below one the exporter saw but
    /// that never reached it.
    pub dropped_before_export: u64,
    /// Spans the collector acknowledged.
    pub acknowledged: u64,
    /// Spans whose export failed with an error.
    pub failed: u64,
    /// Spans whose export timed out.
    pub timed_out: u64,
    /// Spans in an export that has not returned yet.
    pub in_export: u64,
    /// How many spans were numbered up to the highest number the exporter
    /// saw: the rest of those handed are queued, or dropped unseen.
    pub numbers_seen: u64,
}

impl ExportFigures {
    /// The pipeline's figures once `handed` spans were handed to it:
    /// `(queued, dropped before export)`. `capacity`, what the pipeline can
    /// hold before the exporter (its queue and the batch being gathered),
    /// where known: more than that past the last span seen are dropped
    /// already, though not seen to be yet.
    pub(crate) fn queued(&self, handed: u64, capacity: Option<u64>) -> (u64, u64) {
        let unseen = handed.saturating_sub(self.numbers_seen);
        let queued = capacity.map_or(unseen, |c| unseen.min(c));
        (queued, self.dropped_before_export + (unseen - queued))
    }
}

impl ExportLedger {
    /// A ledger with nothing counted.
    pub fn new() -> Self {
        Self::default()
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.inner.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn figures(&self) -> ExportFigures {
        let c = self.counts();
        let settled = c.acknowledged + c.failed + c.timed_out;
        let numbers_seen = c.seen_per_stream.iter().sum::<u64>();
        ExportFigures {
            received: c.numbered,
            dropped_before_export: numbers_seen.saturating_sub(c.numbered),
            acknowledged: c.acknowledged,
            failed: c.failed,
            timed_out: c.timed_out,
            in_export: (c.numbered + c.unnumbered).saturating_sub(settled),
            numbers_seen,
        }
    }

    /// The final figures of a runtime, taken again now: `stats` are those
    /// [`Kspan::shutdown`](crate::Kspan::shutdown) returned (or carried in
    /// [`Error::Shutdown`](crate::Error::Shutdown)). Read them after the
    /// tracer provider's own `shutdown` returned, when the pipeline holds
    /// nothing more: what the collector acknowledged since is counted so,
    /// what never reached the exporter as dropped before it, and an export
    /// that still has not returned as [`Stats::spans_export_unfinished`].
    /// Then `calls = acknowledged + lost()`, whatever the collector did.
    pub fn final_figures(&self, stats: &Stats) -> Stats {
        let export = self.figures();
        let (queued, dropped) = export.queued(stats.spans_to_pipeline, None);
        Stats {
            spans_acknowledged: export.acknowledged,
            spans_export_failed: export.failed,
            spans_export_timed_out: export.timed_out,
            spans_dropped_before_export: dropped + queued,
            spans_export_unfinished: export.in_export,
            spans_in_export: 0,
            spans_in_pipeline: 0,
            ..*stats
        }
    }

    /// The last export error, as the exporter worded it.
    pub fn last_error(&self) -> Option<String> {
        self.inner
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Takes kspan's numbers off the kernel spans of `batch`; returns how
    /// many kernel spans it holds.
    fn receive(&self, batch: &mut [SpanData]) -> u64 {
        let (mut kernel, mut numbered) = (0, 0);
        let mut highest: Vec<(u32, u64)> = Vec::new();
        for span in batch
            .iter_mut()
            .filter(|s| s.instrumentation_scope.name() == SCOPE_NAME)
        {
            kernel += 1;
            // kspan puts the number first.
            let at = span
                .attributes
                .iter()
                .position(|kv| kv.key.as_str() == SEQUENCE);
            if let Some(at) = at {
                let number = span.attributes.remove(at);
                // Another tracer's attribute of that name, not one of
                // kspan's numbers, counts as unnumbered.
                let ours = match number.value {
                    opentelemetry::Value::I64(n) if n >= 0 => Some((
                        (n as u64 >> STREAM_SHIFT) as u32,
                        n as u64 & ((1 << STREAM_SHIFT) - 1),
                    )),
                    _ => None,
                };
                if let Some((stream, n)) = ours.filter(|(stream, _)| *stream < MAX_STREAMS) {
                    numbered += 1;
                    match highest.iter_mut().find(|(s, _)| *s == stream) {
                        Some((_, h)) => *h = (*h).max(n),
                        None => highest.push((stream, n)),
                    }
                }
            }
        }
        let mut c = self.counts();
        c.numbered += numbered;
        c.unnumbered += kernel - numbered;
        for (stream, h) in highest {
            let stream = stream as usize;
            if c.seen_per_stream.len() <= stream {
                c.seen_per_stream.resize(stream + 1, 0);
            }
            let seen = &mut c.seen_per_stream[stream];
            *seen = (*seen).max(h + 1);
        }
        kernel
    }

    fn settle(&self, kernel: u64, result: &OTelSdkResult) {
        {
            let mut c = self.counts();
            match result {
                Ok(()) => c.acknowledged += kernel,
                Err(OTelSdkError::Timeout(_)) => c.timed_out += kernel,
                Err(_) => c.failed += kernel,
            }
        }
        if let Err(e) = result {
            *self
                .inner
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
    }
}

/// What the provider's batch processor holds before its exporter (its
/// queue and the batch it gathers), from the provider's `Debug` (the SDK
/// shows its configuration nowhere else); `None` unless the provider has
/// exactly one `BatchSpanProcessor`, whose exporter is then the ledger's.
pub(crate) fn batch_capacity(provider_debug: &str) -> Option<u64> {
    let mut processors = provider_debug.match_indices("BatchSpanProcessor {");
    let (at, _) = processors.next()?;
    if processors.next().is_some() {
        return None;
    }
    let field = |name: &str| -> Option<u64> {
        let rest = &provider_debug[at..];
        let from = rest.find(name)? + name.len();
        let digits: String = rest[from..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    Some(field("max_queue_size: ")? + field("max_export_batch_size: ")?)
}

/// The application's span exporter, counting what becomes of kernel spans
/// into an [`ExportLedger`]; every span, kernel or not, is exported as the
/// wrapped exporter would.
///
/// ```no_run
/// # fn otlp() -> opentelemetry_sdk::trace::InMemorySpanExporter { Default::default() }
/// let exporter = kspan::AccountedExporter::new(otlp());
/// let ledger = exporter.ledger();
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
///     .with_batch_exporter(exporter)
///     .with_id_generator(kspan::KernelSpanIds::default())
///     .build();
/// let kspan = kspan::Kspan::builder(&provider).export_ledger(ledger);
/// ```
#[derive(Debug)]
pub struct AccountedExporter<E> {
    inner: E,
    ledger: ExportLedger,
}

impl<E: SpanExporter> AccountedExporter<E> {
    /// Wraps `exporter`.
    pub fn new(exporter: E) -> Self {
        AccountedExporter {
            inner: exporter,
            ledger: ExportLedger::new(),
        }
    }

    /// Wraps `exporter`, counting into `ledger` (a [`crate::Pipeline`]'s).
    pub(crate) fn with_ledger(exporter: E, ledger: ExportLedger) -> Self {
        AccountedExporter {
            inner: exporter,
            ledger,
        }
    }

    /// The ledger to give kspan
    /// ([`KspanBuilder::export_ledger`](crate::KspanBuilder::export_ledger)).
    pub fn ledger(&self) -> ExportLedger {
        self.ledger.clone()
    }
}

impl<E: SpanExporter> SpanExporter for AccountedExporter<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        let kernel = self.ledger.receive(&mut batch);
        let result = self.inner.export(batch).await;
        self.ledger.settle(kernel, &result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanKind, Status};
    use opentelemetry::{InstrumentationScope, KeyValue};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanEvents, SpanLinks};
    use std::time::SystemTime;

    fn span(scope: &'static str, number: Option<i64>) -> SpanData {
        let mut attributes = vec![KeyValue::new("kernel.arg.count", 1)];
        if let Some(n) = number {
            attributes.insert(0, KeyValue::new(SEQUENCE, n));
        }
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "vfs_read".into(),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: SystemTime::UNIX_EPOCH,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder(scope).build(),
        }
    }

    /// An exporter that fails every export, timing out or not.
    #[derive(Debug)]
    struct Refusing {
        timeout: bool,
    }

    impl SpanExporter for Refusing {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            Err(if self.timeout {
                OTelSdkError::Timeout(Duration::from_secs(1))
            } else {
                OTelSdkError::InternalFailure("connection refused".into())
            })
        }
    }

    #[test]
    fn gaps_in_the_numbers_are_drops_and_numbers_never_leave() {
        let inner = InMemorySpanExporter::default();
        let exporter = AccountedExporter::new(inner.clone());
        let ledger = exporter.ledger();
        let batch = vec![
            span(SCOPE_NAME, Some(0)),
            span("app", None),
            span(SCOPE_NAME, Some(3)),
        ];
        futures_executor_block_on(exporter.export(batch)).unwrap();
        assert_eq!(
            ledger.figures(),
            ExportFigures {
                received: 2,
                dropped_before_export: 2,
                acknowledged: 2,
                numbers_seen: 4,
                ..ExportFigures::default()
            }
        );
        let exported = inner.get_finished_spans().unwrap();
        assert_eq!(exported.len(), 3);
        assert!(exported
            .iter()
            .all(|s| s.attributes.iter().all(|kv| kv.key.as_str() != SEQUENCE)));
        assert_eq!(exported[0].attributes.len(), 1);
    }

    #[test]
    fn each_worker_s_stream_is_followed_apart_whatever_the_order_between_them() {
        let exporter = AccountedExporter::new(InMemorySpanExporter::default());
        let ledger = exporter.ledger();
        let n = |stream, i| Some(sequence(stream, i) as i64);
        // Stream 1 ends its spans 0..3 before stream 0's 0 and 1 reach the
        // queue: nothing is missing yet.
        let early = vec![
            span(SCOPE_NAME, n(1, 0)),
            span(SCOPE_NAME, n(1, 1)),
            span(SCOPE_NAME, n(1, 2)),
        ];
        futures_executor_block_on(exporter.export(early)).unwrap();
        assert_eq!(ledger.figures().dropped_before_export, 0);
        // Stream 0's 0 and 2 arrive: its 1 was dropped on the way.
        let late = vec![span(SCOPE_NAME, n(0, 0)), span(SCOPE_NAME, n(0, 2))];
        futures_executor_block_on(exporter.export(late)).unwrap();
        let f = ledger.figures();
        assert_eq!(
            (f.received, f.dropped_before_export, f.numbers_seen),
            (5, 1, 6),
            "{f:?}"
        );
        // Not kspan's numbers (negative, or a stream past any runtime's):
        // unnumbered, settled like the others.
        let odd = vec![span(SCOPE_NAME, Some(-3)), span(SCOPE_NAME, Some(i64::MAX))];
        futures_executor_block_on(exporter.export(odd)).unwrap();
        let f = ledger.figures();
        assert_eq!(
            (f.received, f.numbers_seen, f.acknowledged),
            (5, 6, 7),
            "{f:?}"
        );
    }

    #[test]
    fn failures_are_counted_by_reason_with_the_last_error() {
        for timed_out in [true, false] {
            let exporter = AccountedExporter::new(Refusing { timeout: timed_out });
            let ledger = exporter.ledger();
            let batch = vec![span(SCOPE_NAME, Some(0)), span(SCOPE_NAME, Some(1))];
            assert!(futures_executor_block_on(exporter.export(batch)).is_err());
            let f = ledger.figures();
            assert_eq!((f.received, f.acknowledged), (2, 0));
            assert_eq!(
                (f.timed_out, f.failed),
                if timed_out { (2, 0) } else { (0, 2) }
            );
            assert!(ledger.last_error().is_some());
        }
    }

    /// An exporter whose export waits until it is told to go on.
    #[derive(Debug)]
    struct Held(Mutex<std::sync::mpsc::Receiver<()>>);

    impl SpanExporter for Held {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.0.lock().unwrap().recv();
            Ok(())
        }
    }

    #[test]
    fn a_batch_in_an_export_that_has_not_returned_is_in_export() {
        let (go, wait) = std::sync::mpsc::channel();
        let exporter = Arc::new(AccountedExporter::new(Held(Mutex::new(wait))));
        let ledger = exporter.ledger();
        let exporting = {
            let exporter = exporter.clone();
            std::thread::spawn(move || {
                let batch = (0..3).map(|n| span(SCOPE_NAME, Some(n))).collect();
                futures_executor_block_on(exporter.export(batch))
            })
        };
        while ledger.figures().received < 3 {
            std::thread::yield_now();
        }
        let live = ledger.figures();
        assert_eq!((live.in_export, live.acknowledged), (3, 0), "{live:?}");
        // Handed 5: 3 in the export, 2 queued behind it.
        assert_eq!(live.queued(5, None), (2, 0));
        let handed = Stats {
            spans_to_pipeline: 5,
            pipeline_accounted: true,
            ..Stats::default()
        };
        // Final while the export still hangs: nothing is missing.
        let hung = ledger.final_figures(&handed);
        assert_eq!(hung.spans_export_unfinished, 3, "{hung:?}");
        assert_eq!(hung.spans_dropped_before_export, 2, "{hung:?}");
        assert_eq!(hung.spans_acknowledged + hung.lost(), 5, "{hung:?}");
        go.send(()).unwrap();
        exporting.join().unwrap().unwrap();
        let settled = ledger.final_figures(&handed);
        assert_eq!(
            (settled.spans_acknowledged, settled.spans_export_unfinished),
            (3, 0),
            "{settled:?}"
        );
        assert_eq!(settled.unsettled(), 0);
    }

    #[test]
    fn no_more_is_queued_than_the_pipeline_holds() {
        let figures = ExportFigures {
            received: 10,
            numbers_seen: 12,
            dropped_before_export: 2,
            ..ExportFigures::default()
        };
        // 1,000 handed after the last span seen, a pipeline of 100: 900
        // are dropped already.
        assert_eq!(figures.queued(1012, Some(100)), (100, 902));
        assert_eq!(figures.queued(1012, None), (1000, 2));
        assert_eq!(figures.queued(50, Some(100)), (38, 2));
    }

    #[test]
    fn the_capacity_is_that_of_the_providers_one_batch_processor() {
        let processor = |queue| {
            opentelemetry_sdk::trace::BatchSpanProcessor::builder(InMemorySpanExporter::default())
                .with_batch_config(
                    opentelemetry_sdk::trace::BatchConfigBuilder::default()
                        .with_max_queue_size(queue)
                        .with_max_export_batch_size(64)
                        .build(),
                )
                .build()
        };
        let one = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(processor(1000))
            .build();
        assert_eq!(batch_capacity(&format!("{one:?}")), Some(1064));
        let two = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(processor(1000))
            .with_span_processor(processor(10))
            .build();
        assert_eq!(batch_capacity(&format!("{two:?}")), None);
        let simple = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_simple_exporter(InMemorySpanExporter::default())
            .build();
        assert_eq!(batch_capacity(&format!("{simple:?}")), None);
        for p in [one, two, simple] {
            let _ = p.shutdown();
        }
    }

    /// Polls `f` to completion on this thread (the exporters here never
    /// wait).
    fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
