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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use crate::annotation::attributes::SEQUENCE;
use crate::span::SCOPE_NAME;

/// Counts of what the exporter did with kernel spans; shared by an
/// [`AccountedExporter`] and the kspan runtime given it.
#[derive(Debug, Clone, Default)]
pub struct ExportLedger {
    inner: Arc<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Kernel spans that reached the exporter with a number.
    numbered: AtomicU64,
    /// One more than the highest number seen (0: none yet).
    numbers_seen: AtomicU64,
    acknowledged: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    last_error: Mutex<Option<String>>,
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
}

impl ExportLedger {
    /// A ledger with nothing counted.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn figures(&self) -> ExportFigures {
        let l = &self.inner;
        // The number seen first: a batch counted in between only makes
        // `received` larger, never the drop figure negative.
        let seen = l.numbers_seen.load(Ordering::Acquire);
        let numbered = l.numbered.load(Ordering::Acquire);
        ExportFigures {
            received: numbered,
            dropped_before_export: seen.saturating_sub(numbered),
            acknowledged: l.acknowledged.load(Ordering::Relaxed),
            failed: l.failed.load(Ordering::Relaxed),
            timed_out: l.timed_out.load(Ordering::Relaxed),
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
        let (mut kernel, mut numbered, mut highest) = (0, 0, None::<u64>);
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
                if let opentelemetry::Value::I64(n) = number.value {
                    numbered += 1;
                    highest = highest.max(Some(n as u64));
                }
            }
        }
        let l = &self.inner;
        l.numbered.fetch_add(numbered, Ordering::AcqRel);
        if let Some(h) = highest {
            l.numbers_seen.fetch_max(h + 1, Ordering::AcqRel);
        }
        kernel
    }

    fn settle(&self, kernel: u64, result: &OTelSdkResult) {
        let l = &self.inner;
        let counter = match result {
            Ok(()) => &l.acknowledged,
            Err(OTelSdkError::Timeout(_)) => &l.timed_out,
            Err(_) => &l.failed,
        };
        counter.fetch_add(kernel, Ordering::Relaxed);
        if let Err(e) = result {
            *l.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
    }
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

    /// Polls `f` to completion on this thread (the exporters here never
    /// wait).
    fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
