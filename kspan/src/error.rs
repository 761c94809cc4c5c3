// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every way starting or running kspan can fail: each stage's error, and
//! the runtime's own.

use crate::attach::AttachError;
use crate::bpf::MapError;
use crate::kernel::KernelError;
use crate::plan::PlanError;

/// An error of kspan. Each names the thing at fault and what would fix it.
///
/// Its `Debug` form is its message (then any cause the message does not
/// already give), so that `fn main() -> Result<(), kspan::Error>` and
/// `.expect(..)`, which print `Debug`, show the fix too; match on the
/// variants for the structure.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel or the process lacks what kspan needs (BTF, tracefs,
    /// privileges).
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A probe cannot work on this kernel; nothing was loaded.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A function could not be attached.
    #[error(transparent)]
    Attach(#[from] AttachError),
    /// A BPF map operation failed (the ring buffer, the counters).
    #[error(transparent)]
    Map(#[from] MapError),
    /// The scheduler's account could not be loaded or attached.
    #[error(transparent)]
    Account(#[from] crate::sched::AccountError),
    /// The tracer provider given to kspan does not take span ids from
    /// [`KernelSpanIds`](crate::KernelSpanIds), so kernel spans could not
    /// keep the ids their children name.
    #[error(
        "the tracer provider given to `Kspan::builder` has no `kspan::KernelSpanIds` id \
         generator, which kernel spans need to keep the ids the kernel gave them (their \
         children name them as parents); add \
         `.with_id_generator(kspan::KernelSpanIds::default())` to its \
         `SdkTracerProvider::builder()` (or `KernelSpanIds::wrap(your_generator)`)"
    )]
    NoKernelSpanIds,
    /// Another [`Kspan`](crate::Kspan) is running in this process: one
    /// runtime per process (see [`KspanBuilder::start`](crate::KspanBuilder::start)).
    #[error(
        "another kspan runtime is running in this process, started at {first}; a process runs \
         one, since every runtime records every call the process makes (the application span \
         a call is made under does not say whose provider made it) and each would export it \
         again: add these probes to that runtime's builder, or stop it first \
         (`Kspan::shutdown`, or drop it)"
    )]
    RuntimeRunning {
        /// Where the running one was started (the caller of
        /// [`KspanBuilder::start`](crate::KspanBuilder::start)).
        first: &'static std::panic::Location<'static>,
    },
    /// Another OpenTelemetry context observer is registered.
    #[error(transparent)]
    ContextObserver(#[from] crate::context::ObserverTaken),
    /// The OTEP 4719 process context could not be published.
    #[error(transparent)]
    ProcessContext(#[from] crate::context::ProcessContextError),
    /// OBI's shared traces map
    /// ([`KspanBuilder::obi_traces_map`](crate::KspanBuilder::obi_traces_map))
    /// could not be opened or created, or is not as OTEP 4855 specifies it.
    #[error("`KspanBuilder::obi_traces_map`: {0}")]
    ObiTracesMap(#[from] crate::context::obi::ObiMapError),
    /// A builder setting kspan cannot use.
    #[error("`{setting}`: {reason}")]
    InvalidSetting {
        /// The builder call at fault.
        setting: &'static str,
        /// Why, and a value that works.
        reason: String,
    },
    /// The consumer thread could not start, or died.
    #[error("the kspan consumer failed: {0}")]
    Consumer(String),
    /// Flushing the tracer provider failed at shutdown: an export returned
    /// an error. The SDK's error holds the exporter's own words (the
    /// provider's fold of its processors' results, `errs: [Ok(()),
    /// Err(..)]`, is unfolded into them).
    #[error("the exporter failed ({0})")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
    /// Flushing the tracer provider (and, with
    /// [`Kspan::shutdown_with_provider`](crate::Kspan::shutdown_with_provider),
    /// shutting it down) did not finish within
    /// [`KspanBuilder::shutdown_timeout`](crate::KspanBuilder::shutdown_timeout),
    /// the budget given.
    #[error(
        "the exporter did not finish within kspan's shutdown budget of {0:?} (the collector \
         may be unreachable or not answering; `KspanBuilder::shutdown_timeout` sets the \
         budget, which must fit the time the service is given to stop: Kubernetes' \
         `terminationGracePeriodSeconds`, `docker stop`'s timeout)"
    )]
    FlushTimeout(std::time::Duration),
    /// The tracer provider's own shutdown failed, after a flush that
    /// finished ([`Kspan::shutdown_with_provider`](crate::Kspan::shutdown_with_provider)).
    #[error("shutting the tracer provider down failed ({0})")]
    ProviderShutdown(#[source] opentelemetry_sdk::error::OTelSdkError),
    /// [`Kspan::shutdown`](crate::Kspan::shutdown) failed: why, and the
    /// final figures all the same. Its message is the one place kspan says
    /// what was lost at shutdown (no warning repeats it): what went wrong,
    /// where the exporter sends, what to do, and the figures.
    #[error("{}", crate::error::shutdown_message(.source, .stats))]
    Shutdown {
        /// The final figures.
        stats: Box<crate::stats::Stats>,
        /// What failed.
        source: Box<Error>,
    },
}

/// What [`Error::Shutdown`] says (and the shutdown's warning, when the
/// flush finished but exports failed): the troubles the figures show, what
/// failed, where the exporter sends and the fix, then the figures.
pub(crate) fn shutdown_message(source: &Error, stats: &crate::stats::Stats) -> String {
    let troubles = stats.troubles();
    let lead = if troubles.is_empty() {
        "kspan shut down".to_owned()
    } else {
        format!("kspan shut down with {}", troubles.join(", "))
    };
    match source {
        Error::Flush(_) | Error::ProviderShutdown(_) => format!(
            "{lead}: exporting to {}, {source}; check that the collector runs and is reachable \
             there, or point the exporter at one that does; kspan's final figures: {stats}",
            collector()
        ),
        Error::FlushTimeout(_) => format!(
            "{lead}: exporting to {}, {source}; kspan's final figures: {stats}",
            collector()
        ),
        _ => format!("{lead}: {source}; kspan's final figures: {stats}"),
    }
}

/// The collector the application's exporter most likely sends to: kspan
/// sees the exporter only as a `SpanExporter`, which does not say, so this
/// names the OTLP exporter's settings from the environment.
fn collector() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let set = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|name| var(name).map(|value| (name, value)));
    match set {
        Some((name, value)) => format!(
            "the collector at {value} ({name}, unless the exporter was built with an \
             endpoint of its own)"
        ),
        None => "the exporter's collector (OTEL_EXPORTER_OTLP_ENDPOINT is not set: the OTLP \
                 exporter's default is http://localhost:4317 for gRPC, \
                 http://localhost:4318 for HTTP, unless it was built with an endpoint of its \
                 own)"
            .to_owned(),
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = self.to_string();
        f.write_str(&said)?;
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            // Most messages embed their cause already.
            let text = e.to_string();
            if !said.contains(&text) {
                write!(f, "\n  caused by: {text}")?;
                said.push_str(&text);
            }
            cause = e.source();
        }
        Ok(())
    }
}

/// A shorthand for results of kspan.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_says_what_display_says() {
        let e = Error::NoKernelSpanIds;
        assert_eq!(format!("{e:?}"), e.to_string());
        // What `fn main() -> Result<(), kspan::Error>` prints.
        assert!(
            format!("Error: {e:?}").contains("with_id_generator(kspan::KernelSpanIds::default())")
        );
        let e = Error::InvalidSetting {
            setting: "KspanBuilder::ring_buffer_size",
            reason: "3 bytes: a power of two".into(),
        };
        assert_eq!(
            format!("{e:?}"),
            "`KspanBuilder::ring_buffer_size`: 3 bytes: a power of two"
        );
        let e = Error::from(crate::context::ObserverTaken);
        assert_eq!(format!("{e:?}"), e.to_string());
    }

    #[test]
    fn a_failed_shutdown_says_the_loss_once_with_where_and_the_fix() {
        let stats = crate::stats::Stats {
            spans_to_pipeline: 2,
            spans_export_failed: 2,
            pipeline_accounted: true,
            ..Default::default()
        };
        let e = Error::Shutdown {
            stats: Box::new(stats),
            source: Box::new(Error::Flush(
                opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "TonicTracesClient export failed: Connection refused".into(),
                ),
            )),
        };
        let said = e.to_string();
        assert!(
            said.starts_with("kspan shut down with 2 kernel spans lost: exporting to the "),
            "{said}"
        );
        assert!(
            said.contains(
                "the exporter failed (Operation failed: TonicTracesClient export failed: \
                 Connection refused)"
            ),
            "{said}"
        );
        assert!(
            said.contains("check that the collector runs and is reachable there"),
            "{said}"
        );
        assert!(
            said.ends_with(
                "kspan's final figures: 2 kernel spans handed to the pipeline, 0 acknowledged \
                 by the collector; 2 lost (export_failed 2)"
            ),
            "{said}"
        );
        assert_eq!(
            said.matches("lost").count(),
            2,
            "the lead and the figures: {said}"
        );
        // `Error: {e:?}` from `main` adds nothing: every cause is in it.
        assert_eq!(format!("{e:?}"), said);
        let e = Error::Shutdown {
            stats: Box::new(stats),
            source: Box::new(Error::FlushTimeout(std::time::Duration::from_secs(20))),
        };
        let said = e.to_string();
        assert!(
            said.contains("did not finish within kspan's shutdown budget of 20s")
                && said.contains("`KspanBuilder::shutdown_timeout`")
                && said.contains("terminationGracePeriodSeconds"),
            "the budget, how to set it, what it must fit: {said}"
        );
    }

    #[test]
    fn debug_adds_only_causes_the_message_does_not_give() {
        let sdk =
            opentelemetry_sdk::error::OTelSdkError::InternalFailure("the exporter hung up".into());
        let e = Error::Shutdown {
            stats: Box::default(),
            source: Box::new(Error::Flush(sdk)),
        };
        let debug = format!("{e:?}");
        assert!(debug.starts_with(&e.to_string()), "{debug}");
        assert_eq!(debug.matches("the exporter hung up").count(), 1, "{debug}");
        // A cause that the message leaves out is added.
        #[derive(Debug, thiserror::Error)]
        #[error("permission denied")]
        struct Outer(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("the file is on a filesystem kspan cannot read")]
        struct Inner;
        let e = Error::Kernel(KernelError::NoKernelBtf {
            path: "/nowhere".into(),
            source: std::io::Error::other(Outer(Inner)),
        });
        let debug = format!("{e:?}");
        assert_eq!(
            debug,
            format!("{e}\n  caused by: the file is on a filesystem kspan cannot read")
        );
        assert!(debug.contains("CONFIG_DEBUG_INFO_BTF"), "{debug}");
    }
}
