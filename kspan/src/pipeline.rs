// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The application's OpenTelemetry pipeline, with everything kspan's
//! features need, in one line.
//!
//! ```no_run
//! use kspan::TracerProviderBuilderExt as _;
//!
//! #[kspan::kernel_span(syscall = "read")]
//! fn read(count: usize, ret: i64) {}
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
//! let pipeline = kspan::Pipeline::new();
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     .with_kspan(&pipeline, exporter) // the application's exporter (OTLP, say)
//!     .build();
//! let kspan = kspan::Kspan::builder(&provider)
//!     .pipeline(&pipeline)
//!     .probe(&read)
//!     .scheduler_account(kspan::SchedulerAccount::new())
//!     .start()?;
//! # Ok(()) }
//! ```
//!
//! # What `with_kspan` adds, and why in this order
//!
//! 1. [`KernelSpanIds`] as the id generator: kernel spans keep the ids the
//!    kernel gave them (a child's record names its parent's id before the
//!    parent is built).
//! 2. A [`ContextPublisher`]: the provider hands it its resource when it is
//!    built, so the OTEP 4719 process context names the service as the
//!    provider does (without it, profilers read the SDK's default
//!    resource, `unknown_service:<exe>`).
//! 3. The [`KernelSums`] processor, then the batch processor: the sums
//!    and the scheduler's account go onto each application span before the
//!    processor that exports it sees it; the SDK hands a finished span to
//!    its processors by value, in the order they were added, so the one
//!    that adds attributes must wrap the one that exports.
//! 4. The batch processor over an [`AccountedExporter`] wrapping the
//!    application's exporter, so [`Stats`](crate::Stats) says what the
//!    collector acknowledged and what was lost after kspan, not only what
//!    kspan handed on. Its settings are the SDK's (`OTEL_BSP_*`), or
//!    [`Pipeline::with_batch_config`]'s.
//!
//! The pieces after the id generator are one processor of the provider
//! (`KspanProcessor`, in that order inside): the SDK hands a finished span
//! to a lone processor by value and clones it for each of several, and a
//! clone and its drop cost about as much as kspan's own work on a kernel
//! span (BENCHMARKS.md, "Span workers").
//!
//! Each piece stays public, for pipelines this one does not fit (a
//! processor of the application's own between the sums and the batch
//! processor, a second exporter): guide page "Accounting and metrics"
//! assembles them by hand. [`KspanBuilder::start`](crate::KspanBuilder::start)
//! warns, once, about each piece a hand-made pipeline leaves out, and
//! [`Kspan::setup`](crate::Kspan::setup) lists them.
//!
//! The OpenTelemetry context observer that publishes each thread's span
//! for the kernel is registered by `start` (or earlier, by
//! [`crate::context::register_observer`], for contexts made before kspan
//! starts); `with_kspan` has no effect outside the provider it builds.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfig, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
    TracerProviderBuilder,
};
use opentelemetry_sdk::Resource;

use crate::context::ContextPublisher;
use crate::export::{AccountedExporter, ExportLedger};
use crate::span::KernelSpanIds;
use crate::sums::KernelSums;

/// The handles that kspan's runtime and the pieces `with_kspan` puts in the
/// tracer provider share: give it to
/// [`TracerProviderBuilderExt::with_kspan`] and to
/// [`KspanBuilder::pipeline`](crate::KspanBuilder::pipeline). Clones share
/// the same handles.
#[derive(Clone, Default)]
pub struct Pipeline {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    ledger: ExportLedger,
    sums: KernelSums,
    batch: Mutex<Option<BatchConfig>>,
    publisher: Mutex<Option<ContextPublisher>>,
    /// How many tracer providers it was put in.
    installed: AtomicU32,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("installed", &self.installed())
            .field("sums", &self.shared.sums)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline with the SDK's batch settings and a [`ContextPublisher`]
    /// of the resource alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// The batch processor's settings (queue size, batch size, delay),
    /// instead of the SDK's defaults and `OTEL_BSP_*`.
    pub fn with_batch_config(self, config: BatchConfig) -> Self {
        *lock(&self.shared.batch) = Some(config);
        self
    }

    /// The process-context publisher to put in the provider, for one that
    /// copies span attributes into thread records
    /// ([`ContextPublisher::record_attributes`]).
    pub fn with_context_publisher(self, publisher: ContextPublisher) -> Self {
        *lock(&self.shared.publisher) = Some(publisher);
        self
    }

    /// The export ledger of the pipeline's exporter.
    pub fn ledger(&self) -> ExportLedger {
        self.shared.ledger.clone()
    }

    /// The handle of the pipeline's sums processor.
    pub fn kernel_sums(&self) -> KernelSums {
        self.shared.sums.clone()
    }

    /// How many tracer providers `with_kspan` put it in.
    pub(crate) fn installed(&self) -> u32 {
        self.shared.installed.load(Ordering::Relaxed)
    }
}

/// kspan's pipeline on the SDK's tracer provider builder.
pub trait TracerProviderBuilderExt {
    /// Adds what kspan's features need, around `exporter` (the
    /// application's: OTLP, say), in the order the module docs give:
    /// [`KernelSpanIds`] as the id generator, a [`ContextPublisher`], and
    /// the [`KernelSums`] processor wrapping a batch processor over an
    /// [`AccountedExporter`] of `exporter`. Use it instead of
    /// `with_batch_exporter`; set the resource, sampler and limits as
    /// usual. A later `with_id_generator` replaces kspan's (keep a
    /// generator of your own with
    /// `with_id_generator(kspan::KernelSpanIds::wrap(yours))` after this
    /// line).
    fn with_kspan<E: SpanExporter + 'static>(self, pipeline: &Pipeline, exporter: E) -> Self;
}

impl TracerProviderBuilderExt for TracerProviderBuilder {
    fn with_kspan<E: SpanExporter + 'static>(self, pipeline: &Pipeline, exporter: E) -> Self {
        let shared = &pipeline.shared;
        shared.installed.fetch_add(1, Ordering::Relaxed);
        let exporter = AccountedExporter::with_ledger(exporter, shared.ledger.clone());
        let batch = match lock(&shared.batch).take() {
            Some(config) => BatchSpanProcessor::builder(exporter).with_batch_config(config),
            None => BatchSpanProcessor::builder(exporter),
        }
        .build();
        let publisher = lock(&shared.publisher).clone().unwrap_or_default();
        self.with_id_generator(KernelSpanIds::default())
            .with_span_processor(KspanProcessor {
                publisher,
                then: shared.sums.processor(batch),
            })
    }
}

/// The [`ContextPublisher`], then the rest of the pipeline, as one
/// processor: what the SDK gives one processor it moves, not clones.
#[derive(Debug)]
struct KspanProcessor<P> {
    publisher: ContextPublisher,
    then: P,
}

impl<P: SpanProcessor> SpanProcessor for KspanProcessor<P> {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.publisher.on_start(span, cx);
        self.then.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.publisher.span_ended(&span);
        self.then.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.then.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let publisher = self.publisher.shutdown_with_timeout(timeout);
        self.then.shutdown_with_timeout(timeout).and(publisher)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.publisher.set_resource(resource);
        self.then.set_resource(resource);
    }
}

fn lock<T>(shared: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    #[test]
    fn the_provider_gets_every_piece_and_exports_through_the_ledger() {
        let exporter = InMemorySpanExporter::default();
        let pipeline = Pipeline::new();
        assert_eq!(pipeline.installed(), 0);
        let provider = SdkTracerProvider::builder()
            .with_kspan(&pipeline, exporter.clone())
            .build();
        assert_eq!(pipeline.installed(), 1);
        let debug = format!("{provider:?}");
        assert!(crate::span::provider_has_kernel_ids(&debug), "{debug}");
        assert!(debug.contains("ContextPublisher"), "{debug}");
        assert!(debug.contains("KernelSumsProcessor"), "{debug}");
        // One processor of the provider: the SDK moves a finished span to a
        // lone processor and clones it for each of several.
        assert_eq!(debug.matches("KspanProcessor").count(), 1, "{debug}");
        assert!(
            debug.find("ContextPublisher") < debug.find("KernelSumsProcessor"),
            "the publisher first: {debug}"
        );
        assert_eq!(
            crate::export::batch_capacity(&debug),
            Some(2048 + 512),
            "one batch processor, the SDK's default settings: {debug}"
        );
        assert!(pipeline.kernel_sums().has_processor());
        provider.tracer("test").in_span("app", |_| {});
        provider.force_flush().unwrap();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
    }

    #[test]
    fn batch_settings_are_the_applications() {
        let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
            .with_max_queue_size(64)
            .with_max_export_batch_size(16)
            .build();
        let pipeline = Pipeline::new().with_batch_config(config);
        let provider = SdkTracerProvider::builder()
            .with_kspan(&pipeline, InMemorySpanExporter::default())
            .build();
        assert_eq!(
            crate::export::batch_capacity(&format!("{provider:?}")),
            Some(64 + 16)
        );
    }
}
