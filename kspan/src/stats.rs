// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The figures of a kspan runtime: plain data, read by the runtime from the
//! kernel's counters and its own, and carried by errors at shutdown.

/// What kspan did and dropped. Every drop has a counter; none is silent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Kernel spans handed to the application's pipeline (its tracer); the
    /// application's own spans are not counted, here or in any figure.
    pub spans_to_pipeline: u64,
    /// Whether the figures of the pipeline below are kept: the application
    /// exports through an [`AccountedExporter`](crate::AccountedExporter)
    /// whose ledger kspan was given
    /// ([`KspanBuilder::export_ledger`](crate::KspanBuilder::export_ledger));
    /// without one they are 0.
    pub pipeline_accounted: bool,
    /// Spans the collector acknowledged (the export returned success).
    pub spans_acknowledged: u64,
    /// Spans whose export failed (collector down, refused, or the exporter
    /// shut down); [`ExportLedger::last_error`](crate::ExportLedger::last_error)
    /// says why.
    pub spans_export_failed: u64,
    /// Spans whose export timed out: the collector may or may not have
    /// them, counted as lost.
    pub spans_export_timed_out: u64,
    /// Spans handed to the pipeline that never reached the exporter: a batch
    /// processor's queue was full (or the application's sampler or a
    /// processor dropped them). Known once a later span reached the exporter.
    pub spans_dropped_before_export: u64,
    /// Spans handed to the pipeline that have not reached the exporter yet:
    /// queued. Never more than the batch processor can hold (its queue and
    /// the batch it gathers, read from the provider at start when it has
    /// one `BatchSpanProcessor`): past that, spans are known to be dropped
    /// before the exporter. 0 after a flush that finished. Not a loss; see
    /// [`Self::unsettled`].
    pub spans_in_pipeline: u64,
    /// Spans in an export that has not returned yet: the collector may
    /// have them or not. Not a loss; see [`Self::unsettled`].
    pub spans_in_export: u64,
    /// Spans in an export that had not returned when the figures were
    /// made final ([`ExportLedger::final_figures`](crate::ExportLedger::final_figures),
    /// after the provider's own shutdown): counted as lost, since nothing
    /// will wait for them.
    pub spans_export_unfinished: u64,
    /// Records the kernel put in the ring buffer.
    pub records_emitted: u64,
    /// Spans lost because the ring buffer was full.
    pub dropped_ring_buffer_full: u64,
    /// Entries not recorded because a task had too many open kernel spans.
    pub dropped_stack_depth: u64,
    /// Open spans discarded because their exit never came.
    pub dropped_lost_exit: u64,
    /// Exits with no recorded entry: calls already running when kspan
    /// attached, and calls whose entry program was detached before their
    /// exit (kspan detaches every entry first, so that calls in flight still
    /// find their exit); neither is a loss of a recorded span.
    pub unmatched_exits: u64,
    /// Calls not recorded because the ring buffer was running short: a call
    /// (with everything it calls) is recorded only while the ring has room
    /// for its record, the records every open call may still need at its
    /// exit, and a margin (1/32 of the ring), so that an exported span's
    /// parent is exported too (see [`KspanBuilder::ring_buffer_size`](crate::KspanBuilder::ring_buffer_size)).
    /// Only calls that would have been recorded: one its thread's context
    /// refuses anyway is counted under that reason ([`Self::orphans_dropped`],
    /// [`Self::unsampled`], [`Self::suppressed`]).
    pub dropped_overload: u64,
    /// Of the calls lost above (overload, ring buffer full, stack depth,
    /// no storage), those made inside a call whose span was recorded: each
    /// is counted on its nearest recorded ancestor's span, in
    /// [`kspan.descendants_dropped`](crate::attributes::DESCENDANTS_DROPPED),
    /// so that a span missing children says so. Not a loss of its own
    /// (not in [`Self::lost`]).
    pub descendants_dropped: u64,
    /// Entries not recorded because per-task storage could not be allocated.
    pub dropped_no_storage: u64,
    /// Runs of kspan's programs the kernel skipped (their
    /// `recursion_misses`). It runs a program at most once at a time on a
    /// CPU, and skips it while it runs there: nested, or, on a kernel that
    /// preempts kernel code (`full`, `lazy`, `rt`: sid's 7.2), while a task
    /// preempted inside a trampoline program (fentry, fexit, fsession) waits
    /// to run again, so that other tasks' calls on that CPU lose their
    /// entry, their exit or both. Kprobes and tracepoints run their programs
    /// with preemption off, and `auto` takes kprobes on such a kernel
    /// ([`crate::kernel::preemption`]): there this moves only with an
    /// explicit trampoline mode. A skip is a call's entry or exit of any
    /// process (the programs filter after the kernel runs them), so this
    /// bounds the spans lost that way from above; it is not in
    /// [`Self::lost`], whose reasons count spans exactly. A skipped exit
    /// also shows as [`Self::dropped_lost_exit`], a skipped entry as
    /// [`Self::unmatched_exits`]; a call that lost both shows nowhere else.
    pub skipped_by_kernel: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Records naming a probe the runtime does not know.
    pub unknown_probe: u64,
    /// Handlers that panicked (their spans are still exported).
    pub handler_panics: u64,
    /// Spans the handlers discarded on purpose (not a loss).
    pub discarded_by_handler: u64,
    /// Calls not recorded because the application span they were made under
    /// is not sampled: a sampling decision, taken in the kernel (not a loss).
    pub unsampled: u64,
    /// Calls made with no application span active, not recorded because of
    /// [`Orphans::Drop`](crate::Orphans::Drop) (not a loss).
    pub orphans_dropped: u64,
    /// Calls made by kspan's own threads and work, and by threads whose
    /// OpenTelemetry context suppresses telemetry (an exporter exporting):
    /// not recorded, not a loss.
    pub suppressed: u64,
    /// Calls a probe's filters refused (`min_duration`, `errors_only`,
    /// `filter`): not spans, not a loss. Filters run before the thread's
    /// context is read, so a refused call is counted here even when it was
    /// also an orphan, unsampled or kspan's own. Per probe: [`Kspan::probe_stats`](crate::Kspan::probe_stats).
    pub filtered: u64,
    /// Calls over a probe's `rate_limit`: not spans, not a loss.
    pub rate_limited: u64,
    /// Calls of probes that make no spans (`spans = false`), summed only.
    pub summary_only: u64,
    /// Calls a probe's `sum` could not add to their application span's
    /// totals, and off-CPU intervals the scheduler's account could not
    /// add to its span's: the kernel's table of open totals had no free
    /// slot where the span's go (16,384 slots, eight tried a span; the
    /// calls are still counted above; the totals on that span are short
    /// by these).
    pub sums_failed: u64,
    /// Off-CPU intervals of the scheduler's account whose switch-in the
    /// kernel program did not see (found at the thread's next switch-out):
    /// their span's figures count that time as on a CPU, and the switch
    /// is not counted; that span says so when the miss is found before it
    /// ends ([`kspan.sched.intervals_missed`](crate::sched::attributes::INTERVALS_MISSED)).
    /// Not a lost span.
    pub sched_intervals_missed: u64,
    /// Spans whose parent's fate never arrived (its exit was lost, or it
    /// ran longer than kspan waits): handed with that parent, which may not
    /// be exported.
    pub spans_parent_unresolved: u64,
    /// Spans waiting for their parent's fate now (a parent with filters
    /// still running); handed as soon as it ends.
    pub spans_waiting_for_parent: u64,
    /// Optional probes (`optional = true`) left out at start because this
    /// kernel can trace none of their functions; each is in
    /// [`Kspan::attach_plan`](crate::Kspan::attach_plan) with why
    /// ([`AttachDecision::not_attached`](crate::AttachDecision::not_attached)).
    /// Fixed once started; not a loss.
    pub probes_not_attached: u64,
    /// Writes and removals of entries of OBI's shared traces map
    /// ([`KspanBuilder::obi_traces_map`](crate::KspanBuilder::obi_traces_map))
    /// that the kernel refused since the runtime started (0 without the
    /// map): each left its thread's entry as it was until the thread's next
    /// change of span. Not a lost span.
    pub obi_map_failures: u64,
}

/// What became of the calls of one probe (one kernel function) that were
/// recorded but not made into spans; none is a loss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeStats {
    /// The kernel function.
    pub function: &'static str,
    /// Refused by the probe's filters.
    pub filtered: u64,
    /// Over the probe's rate limit.
    pub rate_limited: u64,
    /// Of a probe that makes no spans (`spans = false`).
    pub summary_only: u64,
}

impl Stats {
    /// Spans lost for any reason, in kspan or after it.
    pub fn lost(&self) -> u64 {
        self.losses().iter().map(|(_, n)| n).sum()
    }

    /// Spans lost after kspan handed them to the pipeline (counted with an
    /// export ledger only).
    pub fn lost_after_kspan(&self) -> u64 {
        self.losses()[LOST_IN_KSPAN..].iter().map(|(_, n)| n).sum()
    }

    /// Calls recorded in the kernel, or that would have been, whose spans
    /// were lost before they reached the pipeline.
    pub fn lost_in_kspan(&self) -> u64 {
        self.losses()[..LOST_IN_KSPAN].iter().map(|(_, n)| n).sum()
    }

    /// Every loss by its reason (the names of kspan's `kspan.spans.lost`
    /// metric): first those in kspan, then those after it.
    pub fn losses(&self) -> [(&'static str, u64); 11] {
        [
            ("ring_buffer_full", self.dropped_ring_buffer_full),
            ("overload", self.dropped_overload),
            ("stack_depth", self.dropped_stack_depth),
            ("lost_exit", self.dropped_lost_exit),
            ("no_storage", self.dropped_no_storage),
            ("decode_error", self.decode_errors),
            ("unknown_probe", self.unknown_probe),
            ("export_failed", self.spans_export_failed),
            ("export_timed_out", self.spans_export_timed_out),
            ("dropped_before_export", self.spans_dropped_before_export),
            ("export_unfinished", self.spans_export_unfinished),
        ]
    }

    /// Spans in the pipeline whose fate is not known yet: queued
    /// ([`Self::spans_in_pipeline`]) or in an export that has not returned
    /// ([`Self::spans_in_export`]). At every moment `spans_to_pipeline =
    /// spans_acknowledged + lost_after_kspan() + unsettled()`; after a
    /// flush that finished it is 0.
    pub fn unsettled(&self) -> u64 {
        self.spans_in_pipeline + self.spans_in_export
    }

    /// What is worth a word at shutdown, each as `<count> <what>` (empty
    /// when nothing is): said by [`Kspan::shutdown`](crate::Kspan::shutdown)'s
    /// warning, or by its error's message when it fails.
    pub(crate) fn troubles(&self) -> Vec<String> {
        [
            (self.lost(), "kernel spans lost"),
            (
                self.unsettled(),
                "kernel spans not settled when the flush gave up",
            ),
            (self.skipped_by_kernel, "program runs skipped by the kernel"),
            (self.handler_panics, "handler panics"),
            (self.obi_map_failures, "writes to OBI's traces map refused"),
        ]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect()
    }

    /// Calls not recorded on purpose, by reason (the names of kspan's
    /// `kspan.calls.skipped` metric); none is a loss.
    pub fn skips(&self) -> [(&'static str, u64); 8] {
        [
            ("unsampled", self.unsampled),
            ("orphan", self.orphans_dropped),
            ("suppressed", self.suppressed),
            ("discarded_by_handler", self.discarded_by_handler),
            ("unmatched_exit", self.unmatched_exits),
            ("filtered", self.filtered),
            ("rate_limited", self.rate_limited),
            ("summary_only", self.summary_only),
        ]
    }
}

/// The figures a user reads first: what became of the kernel spans (the
/// application's own spans are not counted), lost by reason (only those
/// that happened), what is not known yet, and the calls dropped as orphans.
impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} kernel spans handed to the pipeline",
            self.spans_to_pipeline
        )?;
        if self.pipeline_accounted {
            write!(
                f,
                ", {} acknowledged by the collector",
                self.spans_acknowledged
            )?;
        } else {
            write!(f, " (not followed past it: no export ledger)")?;
        }
        write!(f, "; {} lost", self.lost())?;
        if !self.pipeline_accounted {
            // Only kspan's own losses are known: an export that failed
            // is not seen without the ledger.
            write!(f, " in kspan, after it unknown")?;
        }
        let mut reasons = self.losses().into_iter().filter(|(_, n)| *n > 0).peekable();
        if reasons.peek().is_some() {
            let named: Vec<String> = reasons.map(|(why, n)| format!("{why} {n}")).collect();
            write!(f, " ({})", named.join(", "))?;
        }
        if self.unsettled() > 0 {
            write!(
                f,
                "; {} not known yet ({} queued, {} in an export that has not returned)",
                self.unsettled(),
                self.spans_in_pipeline,
                self.spans_in_export
            )?;
        }
        if self.orphans_dropped > 0 {
            // Not a loss, but calls the user may have meant to see: kspan
            // warns of them once with the fix, and the figures keep them.
            write!(
                f,
                "; {} calls dropped as orphans (no application span active)",
                self.orphans_dropped
            )?;
        }
        if self.skipped_by_kernel > 0 {
            write!(
                f,
                "; {} program runs skipped by the kernel",
                self.skipped_by_kernel
            )?;
        }
        if self.sched_intervals_missed > 0 {
            write!(
                f,
                "; {} off-CPU intervals of the scheduler's account missed their switch-in",
                self.sched_intervals_missed
            )?;
        }
        if self.obi_map_failures > 0 {
            write!(
                f,
                "; {} writes to OBI's traces map refused by the kernel",
                self.obi_map_failures
            )?;
        }
        Ok(())
    }
}

/// How many of [`Stats::losses`] happen in kspan.
const LOST_IN_KSPAN: usize = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loss_has_a_reason_and_they_add_up() {
        let s = Stats {
            dropped_ring_buffer_full: 1,
            dropped_overload: 2,
            dropped_stack_depth: 4,
            dropped_lost_exit: 8,
            dropped_no_storage: 16,
            decode_errors: 32,
            unknown_probe: 64,
            spans_export_failed: 128,
            spans_export_timed_out: 256,
            spans_dropped_before_export: 512,
            spans_export_unfinished: 1024,
            spans_in_pipeline: 2048,
            spans_in_export: 4096,
            pipeline_accounted: true,
            ..Stats::default()
        };
        assert_eq!(s.lost(), 2047);
        assert_eq!(s.lost_in_kspan(), 127);
        assert_eq!(s.lost_after_kspan(), 1920);
        assert_eq!(s.unsettled(), 6144);
        let said = s.to_string();
        assert!(
            said.contains("2047 lost (ring_buffer_full 1, overload 2,"),
            "{said}"
        );
        assert!(
            said.contains("6144 not known yet (2048 queued, 4096 in an export"),
            "{said}"
        );
        assert!(said.starts_with("0 kernel spans handed"), "{said}");
        assert!(!said.contains("orphans"), "{said}");
        let orphans = Stats {
            orphans_dropped: 100,
            ..s
        }
        .to_string();
        assert!(
            orphans.contains("; 100 calls dropped as orphans (no application span active)"),
            "{orphans}"
        );
        let none = Stats::default().to_string();
        // Without the ledger a loss after kspan is not seen: not 0.
        assert_eq!(
            none,
            "0 kernel spans handed to the pipeline (not followed past it: no export ledger); 0 lost \
             in kspan, after it unknown"
        );
    }
}
