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
    /// `start` was called outside a tokio runtime.
    #[error("kspan must be started from within a tokio runtime (its consumer is a tokio task)")]
    NoTokioRuntime,
    /// The consumer task ended abnormally.
    #[error("the kspan consumer task failed: {0}")]
    Consumer(String),
    /// Flushing the tracer provider failed at shutdown.
    #[error("flushing spans at shutdown failed: {0}")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
}

/// A shorthand for results of kspan.
pub type Result<T, E = Error> = std::result::Result<T, E>;
