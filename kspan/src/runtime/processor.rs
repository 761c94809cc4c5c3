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

/// Turns records into spans: inside the ring buffer's callback, or on a
/// span worker; the counters are shared by every worker's processor.
pub(super) struct Processor {
    pub(super) plans: Arc<[ProbePlan]>,
    pub(super) factory: SpanFactory<SdkTracer>,
    pub(super) stats: Arc<Counters>,
    /// The scheduler account's records: its wait spans.
    pub(super) waits: WaitSpans,
    /// This processor's share of the shared gauges, as last added.
    pub(super) reported: Reported,
}

/// A processor's part of the gauges the workers share, so that each adds
/// what changed since.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Reported {
    unresolved: u64,
    waiting: u64,
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

    fn count_handed(&mut self, before: u64) {
        let s = &self.stats;
        s.spans
            .fetch_add(self.factory.handed() - before, Ordering::Release);
        // Both only grow (unresolved) or move by the difference (waiting):
        // the sum over the workers' processors.
        let unresolved = self.factory.unresolved();
        if unresolved != self.reported.unresolved {
            s.unresolved
                .fetch_add(unresolved - self.reported.unresolved, Ordering::Relaxed);
            self.reported.unresolved = unresolved;
        }
        let waiting = self.factory.waiting() as u64;
        if waiting > self.reported.waiting {
            s.waiting
                .fetch_add(waiting - self.reported.waiting, Ordering::Relaxed);
        } else if waiting < self.reported.waiting {
            s.waiting
                .fetch_sub(self.reported.waiting - waiting, Ordering::Relaxed);
        }
        self.reported.waiting = waiting;
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
            plans: plans.into(),
            factory,
            stats: Arc::default(),
            waits,
            reported: Reported::default(),
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
