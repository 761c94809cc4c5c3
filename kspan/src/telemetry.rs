// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's own figures ([`Stats`]) as OpenTelemetry metrics,
//! through the application's meter provider, so that a dashboard shows loss
//! without anyone reading logs.
//!
//! Every instrument is an observable counter (an up-down gauge for the spans
//! in the pipeline), read when the meter provider collects, from the same
//! figures as [`Kspan::stats`](crate::Kspan::stats): nothing is added to
//! the path of a span. The instruments, all under the meter `kspan`:
//!
//! | metric | attributes | what |
//! |---|---|---|
//! | `kspan.records.emitted` | | records the kernel put in the ring buffer |
//! | `kspan.spans.handed` | | spans handed to the application's pipeline |
//! | `kspan.spans.acknowledged` | | spans the collector acknowledged (with an export ledger) |
//! | `kspan.spans.in_pipeline` (gauge) | | spans queued or being exported (with an export ledger) |
//! | `kspan.spans.lost` | `kspan.reason` | spans lost, by reason: `ring_buffer_full`, `overload`, `stack_depth`, `lost_exit`, `no_storage`, `decode_error`, `unknown_probe`, `export_failed`, `export_timed_out`, `dropped_before_export` |
//! | `kspan.calls.skipped` | `kspan.reason` | calls not recorded on purpose: `unsampled`, `orphan`, `suppressed`, `discarded_by_handler`, `unmatched_exit`, `filtered`, `rate_limited`, `summary_only` |
//! | `kspan.probe.calls.skipped` | `kspan.reason`, `code.function.name` | the last three per probe (kernel function) |
//! | `kspan.handler.panics` | | handlers that panicked |
//! | `kspan.programs.skipped` | | runs of kspan's programs the kernel skipped, each a call's entry or exit of some process ([`Stats::skipped_by_kernel`]) |
//! | `kspan.histogram.calls` | | calls counted in the latency histograms, with `histogram` probes only (see [`crate::latency`]) |
//!
//! The callbacks hold the runtime's figures weakly: once the runtime is
//! gone they observe nothing (the meter provider keeps callbacks for its
//! own life).

use std::sync::Weak;

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use crate::stats::{ProbeStats, Stats};

/// Where the instruments read the figures: the runtime.
pub(crate) trait FigureSource: Send + Sync {
    /// The figures now, or `None` when they cannot be read.
    fn figures(&self) -> Option<Stats>;
    /// The per-probe figures now, if they can be read.
    fn probe_figures(&self) -> Option<Vec<ProbeStats>>;
}

/// The kernel function a per-probe figure is about (semantic conventions:
/// `code.function.name`).
pub const FUNCTION: &str = "code.function.name";

type Figures = dyn FigureSource;

/// The attribute naming why a span was lost or a call skipped.
pub const REASON: &str = "kspan.reason";

/// Calls `observe` with the figures now, if the runtime is still there and
/// they can be read (a failed read is skipped: the next collection tries
/// again).
fn with_stats(figures: &Weak<Figures>, observe: impl FnOnce(&Stats)) {
    if let Some(stats) = figures.upgrade().and_then(|f| f.figures()) {
        observe(&stats);
    }
}

/// Registers kspan's instruments on `meter`, reading `figures`.
pub(crate) fn register(meter: &Meter, figures: Weak<Figures>) {
    let counter = |name: &'static str,
                   description: &'static str,
                   unit: &'static str,
                   pick: fn(&Stats) -> u64| {
        let figures = figures.clone();
        meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_unit(unit)
            .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                with_stats(&figures, |s| o.observe(pick(s), &[]));
            })
            .build();
    };
    let single = |name: &'static str, description: &'static str, pick: fn(&Stats) -> u64| {
        counter(name, description, "{span}", pick)
    };
    single(
        "kspan.records.emitted",
        "Records the kernel put in kspan's ring buffer.",
        |s| s.records_emitted,
    );
    single(
        "kspan.spans.handed",
        "Kernel spans handed to the application's pipeline.",
        |s| s.spans_to_pipeline,
    );
    single(
        "kspan.spans.acknowledged",
        "Kernel spans the collector acknowledged (counted with an export ledger).",
        |s| s.spans_acknowledged,
    );
    single(
        "kspan.handler.panics",
        "Handlers of kernel spans that panicked.",
        |s| s.handler_panics,
    );
    counter(
        "kspan.programs.skipped",
        "Runs of kspan's BPF programs the kernel skipped (a call's entry or exit, of any process).",
        "{run}",
        |s| s.skipped_by_kernel,
    );
    let by_reason = |name: &'static str,
                     description: &'static str,
                     reasons: fn(&Stats) -> Vec<(&'static str, u64)>| {
        let figures = figures.clone();
        meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_unit("{span}")
            .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                with_stats(&figures, |s| {
                    for (reason, value) in reasons(s) {
                        o.observe(value, &[KeyValue::new(REASON, reason)]);
                    }
                });
            })
            .build();
    };
    by_reason("kspan.spans.lost", "Kernel spans lost, by reason.", |s| {
        s.losses().to_vec()
    });
    by_reason(
        "kspan.calls.skipped",
        "Traced calls not recorded on purpose, by reason.",
        |s| s.skips().to_vec(),
    );
    let per_probe = figures.clone();
    meter
        .u64_observable_counter("kspan.probe.calls.skipped")
        .with_description(
            "Calls of one kernel function recorded but not made into spans, by reason: \
             filtered, rate_limited, summary_only.",
        )
        .with_unit("{call}")
        .with_callback(move |o: &dyn AsyncInstrument<u64>| {
            let Some(probes) = per_probe.upgrade().and_then(|f| f.probe_figures()) else {
                return;
            };
            for p in probes {
                for (reason, value) in [
                    ("filtered", p.filtered),
                    ("rate_limited", p.rate_limited),
                    ("summary_only", p.summary_only),
                ] {
                    o.observe(
                        value,
                        &[
                            KeyValue::new(REASON, reason),
                            KeyValue::new(FUNCTION, p.function),
                        ],
                    );
                }
            }
        })
        .build();
    let figures_now = figures.clone();
    meter
        .u64_observable_gauge("kspan.spans.in_pipeline")
        .with_description(
            "Kernel spans queued in the application's pipeline or being exported \
             (counted with an export ledger).",
        )
        .with_unit("{span}")
        .with_callback(move |o: &dyn AsyncInstrument<u64>| {
            with_stats(&figures_now, |s| o.observe(s.unsettled(), &[]));
        })
        .build();
}
