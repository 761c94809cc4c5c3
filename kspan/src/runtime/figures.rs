// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Where [`Stats`] come from: the kernel's counters, the consumer's and
//! the export ledger's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::bpf::links::Programs;
use crate::bpf::maps::SharedMaps;
use crate::error::Result;
use crate::export::ExportLedger;
use crate::latency::{Counts, HistogramSource, ProbeCounts};
use crate::stats::{ProbeStats, Stats};
use crate::telemetry::FigureSource;

/// Counters kept in user space.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) spans: AtomicU64,
    pub(super) decode_errors: AtomicU64,
    pub(super) unknown_probe: AtomicU64,
    pub(super) handler_panics: AtomicU64,
    pub(super) discarded: AtomicU64,
    pub(super) unresolved: AtomicU64,
    pub(super) waiting: AtomicU64,
}

/// Where the figures come from: the kernel's counters, the consumer's, and
/// the export ledger's; shared with the metrics callbacks, which hold it
/// weakly (they outlive the runtime in the meter provider).
pub(super) struct Figures {
    /// The kernel function of each probe id.
    pub(super) functions: Vec<&'static str>,
    pub(super) maps: SharedMaps,
    /// The probe ids with a latency histogram.
    pub(super) histogram_probes: Vec<u32>,
    pub(super) counters: Arc<Counters>,
    pub(super) ledger: Option<ExportLedger>,
    /// What the application's batch processor holds before its exporter,
    /// where the provider says.
    pub(super) pipeline_capacity: Option<u64>,
    pub(super) programs: Arc<Programs>,
    /// Optional probes left out at start.
    pub(super) probes_not_attached: u64,
    /// With OBI's traces map: the process's count of failed writes when
    /// the runtime started.
    pub(super) obi_failures_before: Option<u64>,
}

impl Figures {
    /// Every figure now.
    pub(super) fn read(&self) -> Result<Stats> {
        let (k, probes) = (self.maps.counters(), self.probe_stats()?);
        let skipped_by_kernel = {
            // A system call a program (bpf_prog_get_info_by_fd): kspan's own.
            let _quiet = crate::context::suppress();
            self.programs.skipped()
        };
        let total = |pick: fn(&ProbeStats) -> u64| probes.iter().map(pick).sum::<u64>();
        let s = &self.counters;
        // The ledger first: a span is counted as handed just after it is
        // handed, and the exporter may see it in between.
        let export = self
            .ledger
            .as_ref()
            .map(ExportLedger::figures)
            .unwrap_or_default();
        // Numbers are given in the order spans are handed: the exporter may
        // hold a span its count here does not have yet.
        let spans_to_pipeline = s.spans.load(Ordering::Acquire).max(export.numbers_seen);
        let (queued, dropped_before_export) = match self.ledger {
            Some(_) => export.queued(spans_to_pipeline, self.pipeline_capacity),
            None => (0, 0),
        };
        Ok(Stats {
            spans_to_pipeline,
            pipeline_accounted: self.ledger.is_some(),
            spans_acknowledged: export.acknowledged,
            spans_export_failed: export.failed,
            spans_export_timed_out: export.timed_out,
            spans_dropped_before_export: dropped_before_export,
            spans_in_pipeline: queued,
            spans_in_export: export.in_export,
            spans_export_unfinished: 0,
            records_emitted: k.emitted,
            dropped_ring_buffer_full: k.ring_buffer_full,
            dropped_stack_depth: k.stack_depth,
            dropped_lost_exit: k.lost_exit,
            unmatched_exits: k.unmatched_exit,
            dropped_no_storage: k.no_storage,
            skipped_by_kernel,
            decode_errors: s.decode_errors.load(Ordering::Relaxed),
            unknown_probe: s.unknown_probe.load(Ordering::Relaxed),
            handler_panics: s.handler_panics.load(Ordering::Relaxed),
            discarded_by_handler: s.discarded.load(Ordering::Relaxed),
            unsampled: k.unsampled,
            orphans_dropped: k.orphans,
            dropped_overload: k.overload,
            descendants_dropped: k.descendant_dropped,
            suppressed: k.suppressed,
            filtered: total(|p| p.filtered),
            rate_limited: total(|p| p.rate_limited),
            summary_only: total(|p| p.summary_only),
            sums_failed: k.sum_failed,
            sched_intervals_missed: k.sched_missed,
            spans_parent_unresolved: s.unresolved.load(Ordering::Relaxed),
            spans_waiting_for_parent: s.waiting.load(Ordering::Relaxed),
            probes_not_attached: self.probes_not_attached,
            obi_map_failures: self
                .obi_failures_before
                .map_or(0, |before| crate::context::obi::failures() - before),
        })
    }

    /// The calls each probe recorded but did not make into spans.
    pub(super) fn probe_stats(&self) -> Result<Vec<ProbeStats>> {
        let counters = self.maps.probe_counters(self.functions.len());
        Ok(self
            .functions
            .iter()
            .zip(counters)
            .map(|(&function, c)| ProbeStats {
                function,
                filtered: c.filtered,
                rate_limited: c.rate_limited,
                summary_only: c.no_spans,
            })
            .collect())
    }
}

impl HistogramSource for Figures {
    fn histograms(&self) -> Option<Vec<(u32, ProbeCounts)>> {
        let rows = self.maps.histograms(&self.histogram_probes);
        let counts = |row: &crate::bpf::maps::HistogramRow| {
            let mut c = Counts::default();
            c.buckets.copy_from_slice(&row[..crate::latency::BUCKETS]);
            c.sum_ns = row[crate::latency::BUCKETS];
            c
        };
        Some(
            self.histogram_probes
                .iter()
                .zip(rows)
                .map(|(&id, h)| {
                    (
                        id,
                        ProbeCounts {
                            succeeded: counts(&h.succeeded),
                            failed: counts(&h.failed),
                            by_errno: h.by_errno.iter().map(|(e, r)| (*e, counts(r))).collect(),
                        },
                    )
                })
                .collect(),
        )
    }
}

impl FigureSource for Figures {
    fn figures(&self) -> Option<Stats> {
        self.read().ok()
    }

    fn probe_figures(&self) -> Option<Vec<ProbeStats>> {
        let _quiet = crate::context::suppress();
        self.probe_stats().ok()
    }
}
