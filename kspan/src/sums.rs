// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel time summed onto application spans.
//!
//! A probe with `sum` adds each call it does not make into a span (refused
//! by a filter, over the rate limit, or every call with `spans = false`) to
//! a total the kernel keeps per application span and probe: calls, time,
//! errors. When the application span ends, [`KernelSumsProcessor`] takes
//! those totals out of the kernel and puts them on the span as
//! `kernel.<function>.calls`, `kernel.<function>.duration_ns` and
//! `kernel.<function>.errors`, before the processors it wraps see it.
//!
//! # Why a span processor that wraps the application's
//!
//! The SDK gives a finished span's data to each processor by value: the
//! one place where attributes can still be added is a processor in front
//! of the one that exports, the SDK's documented way to chain processors.
//! The kernel's totals are complete when the span ends: the calls were made
//! on the span's thread while it was current, and each added itself at its
//! exit. The processor is made before kspan starts (the tracer provider
//! comes first), so it and the runtime share a [`KernelSums`] handle that
//! the runtime fills once the kernel's table exists.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::bpf::span_table::SpanTable;
use crate::span::SCOPE_NAME;

/// The link between the runtime and [`KernelSumsProcessor`]: clone it into
/// both ([`KernelSums::processor`] and
/// [`KspanBuilder::kernel_sums`](crate::KspanBuilder::kernel_sums)).
#[derive(Clone, Default)]
pub struct KernelSums {
    table: Arc<OnceLock<SumTable>>,
    /// The scheduler's figures per application span.
    sched: Arc<OnceLock<Box<dyn SpanEndFigures>>>,
    /// Whether a processor was made of it (else nothing takes the totals).
    processor_made: Arc<AtomicBool>,
}

impl fmt::Debug for KernelSums {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelSums")
            .field("connected", &self.table.get().is_some())
            .field("scheduler_account", &self.sched.get().is_some())
            .finish()
    }
}

/// The kernel's table and the probes that sum into it.
struct SumTable {
    table: SpanTable,
    probes: Vec<SummedProbe>,
}

/// What another source puts on each application span as it ends: the
/// scheduler account's figures, handed to
/// [`KernelSums`] at start.
pub(crate) trait SpanEndFigures: Send + Sync {
    /// Adds `span`'s figures to `attributes`, taking them out of the
    /// kernel.
    fn take(&self, span: u64, attributes: &mut Vec<KeyValue>);
}

/// A probe with `sum`: its id and its attribute keys, made once.
struct SummedProbe {
    id: u32,
    calls: &'static str,
    duration: &'static str,
    errors: &'static str,
}

impl KernelSums {
    /// A handle to give to a [`KernelSumsProcessor`] and to the runtime.
    pub fn new() -> Self {
        KernelSums::default()
    }

    /// Wraps the application's processor (say, its batch processor): spans
    /// reach it with their kernel totals.
    pub fn processor<P: SpanProcessor>(&self, inner: P) -> KernelSumsProcessor<P> {
        self.processor_made.store(true, Ordering::Relaxed);
        KernelSumsProcessor {
            inner,
            sums: self.clone(),
        }
    }

    /// Whether [`Self::processor`] was called on it (or a clone).
    pub(crate) fn has_processor(&self) -> bool {
        self.processor_made.load(Ordering::Relaxed)
    }

    /// Connects the handle to the kernel's table (at start; once).
    pub(crate) fn connect(
        &self,
        table: SpanTable,
        probes: impl IntoIterator<Item = (u32, &'static str)>,
    ) -> Result<(), &'static str> {
        let probes = probes
            .into_iter()
            .map(|(id, function)| SummedProbe {
                id,
                calls: leak(format!("kernel.{function}.calls")),
                duration: leak(format!("kernel.{function}.duration_ns")),
                errors: leak(format!("kernel.{function}.errors")),
            })
            .collect();
        self.table
            .set(SumTable { table, probes })
            .map_err(|_| "this KernelSums is connected to another kspan runtime already")
    }

    /// Connects the handle to the scheduler's figures (at start; once).
    pub(crate) fn connect_scheduler(
        &self,
        figures: Box<dyn SpanEndFigures>,
    ) -> Result<(), &'static str> {
        self.sched.set(figures).map_err(|_| {
            "this KernelSums is connected to another kspan runtime's scheduler account already"
        })
    }

    /// Moves the kernel's totals for `span` onto it.
    fn apply(&self, span: &mut SpanData) {
        let (table, sched) = (self.table.get(), self.sched.get());
        if (table.is_none() && sched.is_none()) || span.instrumentation_scope.name() == SCOPE_NAME {
            return;
        }
        let id = u64::from_be_bytes(span.span_context.span_id().to_bytes());
        if let Some(sched) = sched {
            sched.take(id, &mut span.attributes);
        }
        let Some(table) = table else {
            return;
        };
        for probe in &table.probes {
            let Some(sum) = table.table.take(id, u64::from(probe.id) + 1) else {
                continue;
            };
            let word = |i: usize| sum.get(i).copied().unwrap_or(0);
            span.attributes.extend([
                KeyValue::new(probe.calls, word(0) as i64),
                KeyValue::new(probe.duration, word(1) as i64),
                KeyValue::new(probe.errors, word(2) as i64),
            ]);
        }
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// A span processor that puts the kernel's totals on each application span
/// as it ends, then hands the span to the processor it wraps. Made by
/// [`KernelSums::processor`].
pub struct KernelSumsProcessor<P> {
    inner: P,
    sums: KernelSums,
}

impl<P: fmt::Debug> fmt::Debug for KernelSumsProcessor<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelSumsProcessor")
            .field("inner", &self.inner)
            .field("sums", &self.sums)
            .finish()
    }
}

impl<P: SpanProcessor> SpanProcessor for KernelSumsProcessor<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        self.sums.apply(&mut span);
        self.inner.on_end(span);
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
