// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel-assigned span ids through the SDK's own extension point, the
//! provider's [`IdGenerator`].
//!
//! The kernel gives every span its id when the call starts, and a child's
//! record reaches user space before its parent's, so a kernel span must be
//! exported under the id its children already name. The SDK (0.32 on) takes
//! ids only from the provider's id generator. [`KernelSpanIds`] is that
//! generator: it wraps the one the application would use otherwise, and
//! hands out a kernel id only while kspan builds a kernel span on the same
//! thread ([`with_kernel_ids`]); every other span of the application gets
//! its ids from the wrapped generator, unchanged.

use std::cell::Cell;
use std::fmt;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

/// What [`KernelSpanIds`]'s `Debug` output starts with: how
/// [`KspanBuilder::start`](crate::KspanBuilder::start) recognises it in the
/// provider's configuration, which the SDK renders through `Debug` and
/// exposes no other way.
pub(crate) const DEBUG_MARK: &str = "kspan::KernelSpanIds";

/// The id generator kspan needs on the application's tracer provider:
/// kernel spans get the ids the kernel gave them, every other span gets its
/// ids from the wrapped generator (by default the SDK's
/// [`RandomIdGenerator`]).
///
/// [`KspanBuilder::start`](crate::KspanBuilder::start) finds it in the
/// provider's `Debug` rendering, the only view the SDK gives of its
/// configuration: a generator of the application's own that wraps this one
/// must show it in its own `Debug` output (a derived `Debug` does).
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// let provider = SdkTracerProvider::builder()
///     .with_id_generator(kspan::KernelSpanIds::default())
///     .build();
/// # drop(provider);
/// ```
#[derive(Clone)]
pub struct KernelSpanIds<G = RandomIdGenerator> {
    inner: G,
}

impl Default for KernelSpanIds {
    /// Wraps the SDK's [`RandomIdGenerator`].
    fn default() -> Self {
        KernelSpanIds::wrap(RandomIdGenerator::default())
    }
}

impl<G: IdGenerator> KernelSpanIds<G> {
    /// Wraps `inner`, the generator the application's own spans keep using.
    pub fn wrap(inner: G) -> Self {
        KernelSpanIds { inner }
    }
}

impl<G: fmt::Debug> fmt::Debug for KernelSpanIds<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DEBUG_MARK} {{ inner: {:?} }}", self.inner)
    }
}

thread_local! {
    /// The kernel's ids of the span being built on this thread; zero (an
    /// invalid id) when no kernel span is being built.
    static PENDING_SPAN: Cell<u64> = const { Cell::new(0) };
    static PENDING_TRACE: Cell<u128> = const { Cell::new(0) };
}

impl<G: IdGenerator> IdGenerator for KernelSpanIds<G> {
    fn new_trace_id(&self) -> TraceId {
        match PENDING_TRACE.with(|t| t.replace(0)) {
            0 => self.inner.new_trace_id(),
            id => TraceId::from(id),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match PENDING_SPAN.with(|s| s.replace(0)) {
            0 => self.inner.new_span_id(),
            id => SpanId::from(id),
        }
    }
}

/// Runs `build`, which starts one span, with `span_id` handed to the first
/// span the provider starts on this thread, and `root_trace_id` (given for
/// a span with no parent only) to the first trace it starts. The SDK asks
/// for a span's id first thing, and for a trace id right after, for roots
/// only: nothing the sampler or a processor starts meanwhile can take
/// either. Whatever is left unused is cleared before this returns.
pub(crate) fn with_kernel_ids<R>(
    root_trace_id: Option<TraceId>,
    span_id: SpanId,
    build: impl FnOnce() -> R,
) -> R {
    /// Clears the offer however `build` ends (a processor may panic).
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            PENDING_TRACE.with(|t| t.set(0));
            PENDING_SPAN.with(|s| s.set(0));
        }
    }
    if let Some(trace_id) = root_trace_id {
        PENDING_TRACE.with(|t| t.set(u128::from_be_bytes(trace_id.to_bytes())));
    }
    PENDING_SPAN.with(|s| s.set(u64::from_be_bytes(span_id.to_bytes())));
    let _clear = Clear;
    build()
}

/// Whether the provider whose `Debug` rendering is `provider_debug` has
/// [`KernelSpanIds`] as its id generator.
pub(crate) fn provider_has_kernel_ids(provider_debug: &str) -> bool {
    provider_debug.contains(DEBUG_MARK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        Span as _, SpanContext, TraceContextExt, TraceFlags, TraceState, Tracer,
        TracerProvider as _,
    };
    use opentelemetry::Context;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// Counts from 1: tells the wrapped generator's ids apart.
    #[derive(Debug, Default)]
    struct Counting(std::sync::atomic::AtomicU64);

    impl IdGenerator for Counting {
        fn new_trace_id(&self) -> TraceId {
            TraceId::from(u128::from(
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            ))
        }
        fn new_span_id(&self) -> SpanId {
            SpanId::from(self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1)
        }
    }

    #[test]
    fn kernel_ids_go_to_one_span_and_the_rest_to_the_wrapped_generator() {
        let ids = KernelSpanIds::wrap(Counting::default());
        let provider = SdkTracerProvider::builder().with_id_generator(ids).build();
        let tracer = provider.tracer("t");
        let root = with_kernel_ids(Some(TraceId::from(0xabc)), SpanId::from(0x11), || {
            tracer.start("kernel root")
        });
        assert_eq!(root.span_context().trace_id(), TraceId::from(0xabc));
        assert_eq!(root.span_context().span_id(), SpanId::from(0x11));
        // A child: the SDK asks for a span id only, and none is offered.
        let parent = Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0xabc),
            SpanId::from(0x11),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ));
        let child = with_kernel_ids(None, SpanId::from(0x22), || {
            tracer.start_with_context("kernel child", &parent)
        });
        assert_eq!(child.span_context().span_id(), SpanId::from(0x22));
        assert_eq!(child.span_context().trace_id(), TraceId::from(0xabc));
        let app = tracer.start("application");
        assert_eq!(app.span_context().span_id(), SpanId::from(1), "wrapped");
        assert_eq!(app.span_context().trace_id(), TraceId::from(2), "wrapped");
    }

    #[test]
    fn the_provider_is_recognised_by_its_configuration() {
        let with = SdkTracerProvider::builder()
            .with_id_generator(KernelSpanIds::default())
            .build();
        assert!(provider_has_kernel_ids(&format!("{with:?}")));
        let without = SdkTracerProvider::builder().build();
        assert!(!provider_has_kernel_ids(&format!("{without:?}")));
        let wrapped = KernelSpanIds::wrap(Counting::default());
        assert_eq!(
            format!("{wrapped:?}"),
            "kspan::KernelSpanIds { inner: Counting(0) }"
        );
    }
}
