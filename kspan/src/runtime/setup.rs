// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What a hand-assembled pipeline left out, said once at start and kept
//! for [`Kspan::setup`](crate::Kspan::setup).
//!
//! `with_kspan` ([`crate::TracerProviderBuilderExt`]) puts every piece in
//! place; a pipeline made by hand may leave some out, and each omission
//! would otherwise cost silently: figures that end at the pipeline, a
//! process context that names the service wrongly, a record outside
//! readers cannot find. What a feature cannot work without (the sums'
//! processor) fails the start instead.

use std::fmt;

/// A piece of the set-up that is missing, with what it costs and the fix
/// ([`Kspan::setup`](crate::Kspan::setup)); its `Display` says both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SetupGap {
    /// No export ledger: [`Stats`](crate::Stats) says what kspan handed to
    /// the pipeline, not what the collector acknowledged or what was lost
    /// after kspan.
    NoExportLedger,
    /// No [`ContextPublisher`](crate::context::ContextPublisher) in the
    /// provider: the OTEP 4719 process context carries the SDK's default
    /// resource (`unknown_service:<exe>`), not the provider's.
    DefaultProcessContextResource,
    /// The executable does not export `otel_thread_ctx_v1` in its dynamic
    /// symbol table: readers of the thread context other than kspan (the
    /// OpenTelemetry eBPF profiler) cannot find the records.
    ThreadContextSymbolNotExported,
}

impl fmt::Display for SetupGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SetupGap::NoExportLedger => {
                "kspan's figures are not followed past the pipeline: `Stats` counts spans \
                 handed to it, not what the collector acknowledged or what was lost after \
                 kspan; build the provider with `.with_kspan(&pipeline, exporter)` and pass \
                 `.pipeline(&pipeline)` to `Kspan::builder` (or wrap the exporter in \
                 `kspan::AccountedExporter` and pass `.export_ledger(exporter.ledger())`)"
            }
            SetupGap::DefaultProcessContextResource => {
                "the OTEP 4719 process context carries the SDK's default resource, not the \
                 tracer provider's, so profilers may name the service `unknown_service`: \
                 build the provider with `.with_kspan(&pipeline, exporter)` (or add \
                 `.with_span_processor(kspan::context::ContextPublisher::new())`)"
            }
            SetupGap::ThreadContextSymbolNotExported => {
                "the executable does not export `otel_thread_ctx_v1`, so readers of the \
                 thread context other than kspan (the OpenTelemetry eBPF profiler) cannot \
                 find its records (kspan's own spans are not affected): add a `build.rs` \
                 with `fn main() { kspan_build::export_thread_context_symbol(); }` and \
                 `kspan-build` to `[build-dependencies]`"
            }
        })
    }
}

/// What [`find`] looks at.
pub(super) struct SetupFacts {
    pub ledger: bool,
    /// The process context is published (thread context and process
    /// context on).
    pub process_context: bool,
    pub provider_resource: bool,
    pub symbol_exported: bool,
}

/// The gaps `facts` show, in a fixed order.
pub(super) fn find(facts: &SetupFacts) -> Vec<SetupGap> {
    let mut gaps = Vec::new();
    if !facts.ledger {
        gaps.push(SetupGap::NoExportLedger);
    }
    if facts.process_context && !facts.provider_resource {
        gaps.push(SetupGap::DefaultProcessContextResource);
    }
    if facts.process_context && !facts.symbol_exported {
        gaps.push(SetupGap::ThreadContextSymbolNotExported);
    }
    gaps
}

/// Says each gap, once per start.
pub(super) fn warn(gaps: &[SetupGap]) {
    for gap in gaps {
        crate::diagnostics::warn_user!("{gap}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> SetupFacts {
        SetupFacts {
            ledger: true,
            process_context: true,
            provider_resource: true,
            symbol_exported: true,
        }
    }

    #[test]
    fn a_complete_set_up_has_no_gap() {
        assert_eq!(find(&facts()), []);
    }

    #[test]
    fn each_omission_is_a_gap_naming_its_fix() {
        let gaps = find(&SetupFacts {
            ledger: false,
            provider_resource: false,
            symbol_exported: false,
            ..facts()
        });
        assert_eq!(
            gaps,
            [
                SetupGap::NoExportLedger,
                SetupGap::DefaultProcessContextResource,
                SetupGap::ThreadContextSymbolNotExported
            ]
        );
        for (gap, fix) in gaps.iter().zip([
            ".with_kspan(&pipeline, exporter)",
            "ContextPublisher::new()",
            "kspan_build::export_thread_context_symbol()",
        ]) {
            assert!(gap.to_string().contains(fix), "{gap}");
        }
    }

    #[test]
    fn without_a_process_context_its_pieces_are_not_gaps() {
        let gaps = find(&SetupFacts {
            process_context: false,
            provider_resource: false,
            symbol_exported: false,
            ..facts()
        });
        assert_eq!(gaps, []);
    }
}
