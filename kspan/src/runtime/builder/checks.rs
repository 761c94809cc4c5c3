// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The builder's settings checked against each other before anything is
//! loaded: what a feature needs from the tracer provider, and whether it is
//! there. Each error names the setting and the line that fixes it.

use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::sums::KernelSums;

/// What the features asked for need of the pipeline.
pub(super) struct Needs<'a> {
    /// The first probe that sums its calls onto application spans.
    pub summing: Option<&'static str>,
    /// The scheduler's account is on.
    pub scheduler: bool,
    pub pipeline: Option<&'a Pipeline>,
    pub sums: Option<&'a KernelSums>,
}

/// `Ok` when every feature's figures have a way onto the spans.
pub(super) fn pipeline_pieces(needs: &Needs<'_>) -> Result<()> {
    if let Some(pipeline) = needs.pipeline {
        match pipeline.installed() {
            1 => {}
            0 => {
                return Err(invalid(
                    "KspanBuilder::pipeline",
                    "this pipeline is in no tracer provider, so kspan's figures would go \
                     nowhere: build the provider that `Kspan::builder` is given with \
                     `SdkTracerProvider::builder().with_kspan(&pipeline, exporter)` (trait \
                     `kspan::TracerProviderBuilderExt`)"
                        .to_owned(),
                ));
            }
            n => {
                return Err(invalid(
                    "KspanBuilder::pipeline",
                    format!(
                        "this pipeline is in {n} tracer providers, and its ledger would count \
                         their exports together: make a `kspan::Pipeline` per provider, and \
                         give kspan the one of the provider it is built with"
                    ),
                ));
            }
        }
    }
    let feature = match (needs.summing, needs.scheduler) {
        (Some(function), _) => (
            "KspanBuilder::kernel_sums",
            format!("the probe of `{function}` sums its calls onto application spans (`sum`)"),
        ),
        (None, true) => (
            "KspanBuilder::scheduler_account",
            "the scheduler's account goes onto application spans as they end".to_owned(),
        ),
        (None, false) => return Ok(()),
    };
    let (setting, what) = feature;
    match needs.sums {
        None => Err(invalid(
            setting,
            format!(
                "{what}, and nothing puts the figures there: build the tracer provider with \
                 `.with_kspan(&pipeline, exporter)` and pass `.pipeline(&pipeline)` to \
                 `Kspan::builder` (or make a `kspan::KernelSums`, wrap the provider's span \
                 processor with `sums.processor(...)`, and pass `.kernel_sums(sums)`)"
            ),
        )),
        Some(sums) if !sums.has_processor() => Err(invalid(
            setting,
            format!(
                "{what}, and the `KernelSums` kspan was given has no processor in the tracer \
                 provider, so nothing puts the figures there: wrap the provider's span \
                 processor with `sums.processor(...)` (or build the provider with \
                 `.with_kspan(&pipeline, exporter)` and pass `.pipeline(&pipeline)`)"
            ),
        )),
        Some(_) => Ok(()),
    }
}

fn invalid(setting: &'static str, reason: String) -> Error {
    Error::InvalidSetting { setting, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::TracerProviderBuilderExt as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    fn needs<'a>(pipeline: Option<&'a Pipeline>, sums: Option<&'a KernelSums>) -> Needs<'a> {
        Needs {
            summing: None,
            scheduler: true,
            pipeline,
            sums,
        }
    }

    fn reason(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidSetting { reason, .. }) => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pipeline_in_one_provider_serves_every_feature() {
        let pipeline = Pipeline::new();
        let _provider = SdkTracerProvider::builder()
            .with_kspan(&pipeline, InMemorySpanExporter::default())
            .build();
        let sums = pipeline.kernel_sums();
        pipeline_pieces(&needs(Some(&pipeline), Some(&sums))).unwrap();
    }

    #[test]
    fn a_pipeline_in_no_provider_or_two_is_refused() {
        let pipeline = Pipeline::new();
        let sums = pipeline.kernel_sums();
        assert!(
            reason(pipeline_pieces(&needs(Some(&pipeline), Some(&sums))))
                .contains("with_kspan(&pipeline, exporter)")
        );
        for _ in 0..2 {
            let _ = SdkTracerProvider::builder()
                .with_kspan(&pipeline, InMemorySpanExporter::default())
                .build();
        }
        assert!(
            reason(pipeline_pieces(&needs(Some(&pipeline), Some(&sums))))
                .contains("in 2 tracer providers")
        );
    }

    #[test]
    fn sums_without_their_processor_are_refused() {
        let sums = KernelSums::new();
        assert!(reason(pipeline_pieces(&needs(None, Some(&sums)))).contains("no processor"));
        assert!(reason(pipeline_pieces(&needs(None, None))).contains("nothing puts"));
        let _processor = sums.processor(opentelemetry_sdk::trace::SimpleSpanProcessor::new(
            InMemorySpanExporter::default(),
        ));
        pipeline_pieces(&needs(None, Some(&sums))).unwrap();
        let summing = Needs {
            summing: Some("vfs_read"),
            scheduler: false,
            pipeline: None,
            sums: None,
        };
        assert!(reason(pipeline_pieces(&summing)).contains("`vfs_read` sums"));
    }
}
