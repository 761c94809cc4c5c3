// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The consumer's work on each record: decode, build the span, count.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use opentelemetry_sdk::trace::SdkTracer;

use crate::consume::parse_record;
use crate::plan::ProbePlan;
use crate::sched::{is_wait, WaitSpans};
use crate::span::{Outcome, SpanFactory};

use super::figures::Counters;

/// Turns records into spans, inside the ring buffer's callback.
pub(super) struct Processor {
    pub(super) plans: Vec<ProbePlan>,
    pub(super) factory: SpanFactory<SdkTracer>,
    pub(super) stats: Arc<Counters>,
    /// The scheduler account's records: its wait spans.
    pub(super) waits: WaitSpans,
}

impl Processor {
    pub(super) fn process(&mut self, bytes: &[u8]) {
        let view = match parse_record(bytes) {
            Ok(view) => view,
            Err(_) => {
                self.stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        if is_wait(view.header.probe_id, view.header.flags) {
            let handed = self.factory.handed();
            if self.waits.process(&self.factory, bytes) {
                self.count_handed(handed);
            } else {
                self.stats.decode_errors.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let Some(plan) = self.plans.get(view.header.probe_id as usize) else {
            self.stats.unknown_probe.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let handed = self.factory.handed();
        match self.factory.process(plan, &view) {
            Outcome::Exported | Outcome::Reparented => {}
            Outcome::Discarded => {
                self.stats.discarded.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::HandlerPanicked => {
                self.stats.handler_panics.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count_handed(handed);
    }

    /// Hands the spans still waiting for their parents to the tracer.
    pub(super) fn release_waiting(&mut self) {
        let handed = self.factory.handed();
        self.factory.release_waiting();
        self.count_handed(handed);
    }

    fn count_handed(&self, before: u64) {
        let s = &self.stats;
        s.spans
            .fetch_add(self.factory.handed() - before, Ordering::Release);
        s.unresolved
            .store(self.factory.unresolved(), Ordering::Relaxed);
        s.waiting
            .store(self.factory.waiting() as u64, Ordering::Relaxed);
    }
}

/// The consumer's processor, for the fuzz targets: every record goes
/// through [`Processor::process`] as it does under a running kspan.
#[cfg(feature = "fuzzing")]
pub(crate) struct FuzzProcessor(Processor);

#[cfg(feature = "fuzzing")]
impl FuzzProcessor {
    /// A processor of `plans`' records (probe id = index) and of wait
    /// records, spans made by `factory`.
    pub(crate) fn new(
        plans: Vec<ProbePlan>,
        factory: SpanFactory<SdkTracer>,
        waits: WaitSpans,
    ) -> Self {
        FuzzProcessor(Processor {
            plans,
            factory,
            stats: Arc::default(),
            waits,
        })
    }

    /// Processes one ring-buffer record.
    pub(crate) fn process(&mut self, bytes: &[u8]) {
        self.0.process(bytes);
    }

    /// Hands the spans still waiting for their parents on.
    pub(crate) fn release_waiting(&mut self) {
        self.0.release_waiting();
    }
}
