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

use kspan_bpf::consts as c;
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::bpf::counters::MappedCounters;
use crate::bpf::span_table::SpanTable;
use crate::sched::SchedTotals;
use crate::span::SCOPE_NAME;

/// The link between the runtime and [`KernelSumsProcessor`]: clone it into
/// both ([`KernelSums::processor`] and
/// [`KspanBuilder::kernel_sums`](crate::KspanBuilder::kernel_sums)).
#[derive(Clone, Default)]
pub struct KernelSums {
    table: Arc<OnceLock<SumTable>>,
    /// The scheduler's totals per application span (see [`crate::sched`]).
    sched: Arc<OnceLock<SchedTable>>,
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

/// The scheduler's totals, and each thread's open off-CPU interval.
struct SchedTable {
    table: SpanTable,
    open: MappedCounters,
    /// The account's causes are on: their attributes go on the spans.
    causes: bool,
}

impl SchedTable {
    /// An off-CPU interval of `span` on the calling thread whose switch-in
    /// the kernel did not report (the thread runs, yet its interval is
    /// open), claimed so that the kernel counts it in `Stats` only: the
    /// time from its switch-out to now.
    fn missed_here(&self, span: u64) -> Option<u64> {
        const WORDS: usize = std::mem::size_of::<kspan_bpf::types::kspan_sched_open>() / 8;
        let tid = u64::from(crate::context::current_tid());
        let at = (tid as usize & (c::KSPAN_SCHED_OPEN_SLOTS as usize - 1)) * WORDS;
        let out = self.open.word(at + 1);
        if self.open.word(at) != tid
            || self.open.word(at + 2) != span
            || out == 0
            || out & c::KSPAN_SCHED_OPEN_CLAIMED != 0
        {
            return None;
        }
        // Claimed only if it is still that interval (a switch-out since
        // would have written another).
        self.open
            .compare_exchange(at + 1, out, out | c::KSPAN_SCHED_OPEN_CLAIMED)
            .then(|| crate::context::current_time::monotonic_ns().saturating_sub(out))
    }
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

    /// Connects the handle to the scheduler's totals (at start; once).
    pub(crate) fn connect_scheduler(
        &self,
        table: SpanTable,
        open: MappedCounters,
        causes: bool,
    ) -> Result<(), &'static str> {
        self.sched
            .set(SchedTable {
                table,
                open,
                causes,
            })
            .map_err(|_| {
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
            let current = crate::context::current_time::take(id);
            let mut totals = sched
                .table
                .take(id, SCHED_TAG)
                .map(|words| SchedTotals::from_words(&words));
            if let Some(missed_ns) = sched.missed_here(id) {
                let t = totals.get_or_insert_with(SchedTotals::default);
                t.intervals_missed += 1;
                t.missed_ns += missed_ns;
            }
            if current.ns > 0 || totals.is_some() {
                let totals = totals.unwrap_or_default();
                span.attributes
                    .extend(totals.attributes(current.ns, sched.causes));
                if sched.causes {
                    span.attributes.extend(crate::sched::fault_attributes(
                        current.minor_faults,
                        current.major_faults,
                        totals.fault_ns,
                    ));
                }
            }
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

/// The scheduler's tag in its table (`kspan_sched_sum_of`).
const SCHED_TAG: u64 = 1;

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
