// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's OpenTelemetry pipeline with an exporter that drops every span:
//! the SDK's batch processor does all its work (queue, batches, export
//! call), kspan's ledger follows each batch, and nothing leaves the
//! process. Its queue is sized by the caller, so that a bench can make it
//! large enough that the SDK drops nothing, and the exporter counts what it
//! was given, so that the bench can check it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
    TracerProviderBuilder,
};

/// Drops every span, counting them.
#[derive(Debug, Clone, Default)]
pub struct DiscardExporter {
    received: Arc<AtomicU64>,
}

impl DiscardExporter {
    /// Spans given to the exporter so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

impl SpanExporter for DiscardExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.received
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A tracer provider built with kspan's pipeline (`with_kspan`), its
/// batch processor holding up to `queue` spans, exporting to a
/// [`DiscardExporter`].
#[derive(Debug)]
pub struct Discarding {
    /// Handed to kspan.
    pub provider: SdkTracerProvider,
    /// What kspan is given with `.pipeline(..)`.
    pub pipeline: kspan::Pipeline,
    /// The exporter at the end of the pipeline.
    pub exporter: DiscardExporter,
}

/// [`Discarding`]'s provider, pipeline and exporter.
pub fn provider(queue: usize) -> Discarding {
    build(queue, SdkTracerProvider::builder())
}

/// [`provider`], with `first` running before kspan's pipeline (which
/// hands it its own copy of every span).
pub fn provider_with(queue: usize, first: impl SpanProcessor + 'static) -> Discarding {
    build(
        queue,
        SdkTracerProvider::builder().with_span_processor(first),
    )
}

fn build(queue: usize, builder: TracerProviderBuilder) -> Discarding {
    let exporter = DiscardExporter::default();
    let pipeline = kspan::Pipeline::new().with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(queue)
            .build(),
    );
    let provider = builder.with_kspan(&pipeline, exporter.clone()).build();
    Discarding {
        provider,
        pipeline,
        exporter,
    }
}
