// SPDX-License-Identifier: Apache-2.0 OR MIT
//! An exporter that shows each span to the example before the batch goes
//! on, for examples that print what reached their exporter: the spans
//! there are final, with the scheduler account's figures on them (the
//! pipeline's `KernelSums` processor runs before the batch processor).

use std::fmt::Debug;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// What an example keeps of the spans its exporter is given.
pub trait NoteSpans: Debug + Send + Sync {
    /// Keeps what it wants of `span`, one of a batch about to be exported.
    fn note(&self, span: &SpanData);
}

/// Notes each span of a batch, then hands the batch on to the exporter.
#[derive(Debug)]
pub struct Noting<E, N> {
    /// The exporter the batches go on to.
    pub inner: E,
    /// What notes each span first.
    pub notes: N,
}

impl<E: SpanExporter, N: NoteSpans> SpanExporter for Noting<E, N> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &batch {
            self.notes.note(span);
        }
        self.inner.export(batch).await
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
