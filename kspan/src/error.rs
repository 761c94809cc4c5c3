// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every way starting or running kspan can fail: each stage's error, and
//! the runtime's own.

use crate::attach::AttachError;
use crate::bpf::MapError;
use crate::kernel::KernelError;
use crate::plan::PlanError;

/// An error of kspan. Each names the thing at fault and what would fix it.
#[derive(Debug, thiserror::Error)]
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
    /// Another OpenTelemetry context observer is registered.
    #[error(transparent)]
    ContextObserver(#[from] crate::context::ObserverTaken),
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
    /// Flushing the tracer provider failed at shutdown.
    #[error("flushing spans at shutdown failed: {0}")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
    /// Flushing the tracer provider did not finish within
    /// [`KspanBuilder::shutdown_timeout`](crate::KspanBuilder::shutdown_timeout).
    #[error(
        "flushing spans at shutdown did not finish within {0:?} (the exporter may be stuck; \
         raise `KspanBuilder::shutdown_timeout` to wait longer)"
    )]
    FlushTimeout(std::time::Duration),
    /// [`Kspan::shutdown`](crate::Kspan::shutdown) failed: why, and the
    /// final figures all the same.
    #[error("{source}; kspan's final figures: {stats}")]
    Shutdown {
        /// The final figures.
        stats: Box<crate::stats::Stats>,
        /// What failed.
        source: Box<Error>,
    },
}

/// A shorthand for results of kspan.
pub type Result<T, E = Error> = std::result::Result<T, E>;
