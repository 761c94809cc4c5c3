// SPDX-License-Identifier: Apache-2.0 OR MIT
//! An OpenTelemetry pipeline whose exporter drops every span: the SDK's
//! batch processor does all its work (queue, batches, export call) and
//! nothing leaves the process. Its queue is sized by the caller, so that a
//! bench can make it large enough that the SDK drops nothing, and the
//! exporter counts what it was given, so that the bench can check it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor, TracerProviderBuilder,
};

/// Drops every span, counting them.
#[derive(Debug, Clone, Default)]
pub struct DiscardExporter {
    exported: Arc<AtomicU64>,
}

impl DiscardExporter {
    /// Spans given to the exporter so far.
    pub fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }
}

impl SpanExporter for DiscardExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.exported
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A tracer provider with kernel span ids whose spans go through a batch
/// processor holding up to `queue` spans to a [`DiscardExporter`], which
/// is returned too.
pub fn provider(queue: usize) -> (SdkTracerProvider, DiscardExporter) {
    build(queue, SdkTracerProvider::builder())
}

/// [`provider`], with `first` running before the batch processor.
pub fn provider_with(
    queue: usize,
    first: impl SpanProcessor + 'static,
) -> (SdkTracerProvider, DiscardExporter) {
    build(
        queue,
        SdkTracerProvider::builder().with_span_processor(first),
    )
}

fn build(queue: usize, builder: TracerProviderBuilder) -> (SdkTracerProvider, DiscardExporter) {
    let exporter = DiscardExporter::default();
    let batch = BatchSpanProcessor::builder(exporter.clone())
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(queue)
                .build(),
        )
        .build();
    let provider = builder
        .with_id_generator(kspan::KernelSpanIds::default())
        .with_span_processor(batch)
        .build();
    (provider, exporter)
}
