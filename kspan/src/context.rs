// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Publishing each thread's active OpenTelemetry span for readers outside the
//! process's own code: kspan's BPF programs, and any OTEP 4947 reader (the
//! OpenTelemetry eBPF profiler).
//!
//! OTEP 4947 defines a thread-local pointer, `otel_thread_ctx_v1`, to a packed
//! record: trace id (16 bytes), span id (8), `valid` (1), trace flags (1),
//! attribute bytes (2, native endian), attributes. kspan writes it the cheap
//! way the OTEP allows: each thread gets one record, the pointer is set once,
//! and an update is `valid = 0`, the ids, `valid = 1`, with compiler fences
//! between (readers observe a stopped or interrupted thread, so CPU ordering
//! does not matter, only the compiler's). No system call, no allocation after
//! a thread's first update, no attributes.
//!
//! What is published is OpenTelemetry's current context of the thread:
//! [`ThreadContextLayer`] republishes it after `tracing` enters or exits a
//! span (tracing-opentelemetry attaches the span's context on enter), and
//! [`attach`] does the same for code that uses the OpenTelemetry context API
//! directly. When that context holds no span, the layer falls back to the
//! OpenTelemetry span of the innermost entered `tracing` span: with
//! tracing-opentelemetry's context activation turned off nothing attaches
//! it, and the span would otherwise be missed.
//!
//! The slot is defined in C (`csrc/thread_ctx.c`) because stable Rust cannot
//! give a thread-local an exported symbol name; it is initial-exec TLS, so it
//! sits at the same offset from the thread pointer on every thread, which is
//! how kspan's BPF reader finds it ([`slot_offset`]). For other readers the
//! symbol must be in the executable's dynamic symbol table: link with
//! `-C link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1` (kspan's
//! examples do, in their build script).

use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, Ordering};

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use tracing::span;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

extern "C" {
    /// The calling thread's `otel_thread_ctx_v1` (csrc/thread_ctx.c).
    fn kspan_otel_thread_ctx_slot() -> *mut *mut ThreadContextRecord;
}

/// The OTEP 4947 thread-local context record, without attributes: 28 bytes,
/// packed as the OTEP lays it out (`repr(C)` adds no padding here: every
/// field falls on its own alignment).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ThreadContextRecord {
    /// W3C trace id bytes; zero when no span is active.
    pub trace_id: [u8; 16],
    /// W3C span id bytes.
    pub span_id: [u8; 8],
    /// 1 when the record may be read; anything else means "ignore it".
    pub valid: u8,
    /// W3C trace flags (bit 0: sampled).
    pub trace_flags: u8,
    /// Bytes of attributes after the record: always 0 here.
    pub attrs_data_size: u16,
}

/// Bytes of the record's fixed part, as readers read it.
pub const RECORD_SIZE: usize = 28;

const _: () = assert!(std::mem::size_of::<ThreadContextRecord>() == RECORD_SIZE);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, valid) == 24);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, attrs_data_size) == 26);

/// The calling thread's record, made and hooked into the slot on first use;
/// unhooked (slot set to NULL) before it is freed at thread exit.
struct ThreadRecord {
    record: NonNull<ThreadContextRecord>,
}

impl ThreadRecord {
    fn new() -> Self {
        let record = NonNull::from(Box::leak(Box::<ThreadContextRecord>::default()));
        // SAFETY: the accessor returns this thread's slot, valid for the
        // thread's life; the record is ours and outlives the hook (see Drop).
        unsafe { *kspan_otel_thread_ctx_slot() = record.as_ptr() };
        ThreadRecord { record }
    }

    /// Writes `span` (or "none" for an invalid span context).
    fn publish(&self, span: &SpanContext) {
        let record = self.record.as_ptr();
        // SAFETY: the record is this thread's own, alive while `self` is;
        // only this thread writes it. Volatile stores and compiler fences
        // keep `valid` around the other stores, as OTEP 4947 asks.
        unsafe {
            std::ptr::write_volatile(&raw mut (*record).valid, 0);
            compiler_fence(Ordering::SeqCst);
            if span.is_valid() {
                (*record).trace_id = span.trace_id().to_bytes();
                (*record).span_id = span.span_id().to_bytes();
                (*record).trace_flags = span.trace_flags().to_u8();
                compiler_fence(Ordering::SeqCst);
                std::ptr::write_volatile(&raw mut (*record).valid, 1);
            }
        }
    }
}

impl Drop for ThreadRecord {
    fn drop(&mut self) {
        // SAFETY: unhook first, so that no reader follows the pointer into
        // freed memory, then free the box leaked in `new`.
        unsafe {
            *kspan_otel_thread_ctx_slot() = std::ptr::null_mut();
            compiler_fence(Ordering::SeqCst);
            drop(Box::from_raw(self.record.as_ptr()));
        }
    }
}

thread_local! {
    static RECORD: ThreadRecord = ThreadRecord::new();
}

/// Publishes OpenTelemetry's current context of the calling thread.
#[inline]
pub fn publish_current() {
    Context::map_current(|cx| publish(&cx.span().span_context().clone()));
}

/// Publishes `span` as the calling thread's active span (an invalid span
/// context marks the record invalid: no active span).
#[inline]
pub fn publish(span: &SpanContext) {
    // `try_with`: during thread teardown the record may be gone already.
    let _ = RECORD.try_with(|r| r.publish(span));
}

/// The calling thread's published record, as a reader would see it (`None`
/// before the thread's first publication).
pub fn current_record() -> Option<ThreadContextRecord> {
    // SAFETY: reads this thread's own slot and, when set, its own record.
    unsafe {
        let slot = *kspan_otel_thread_ctx_slot();
        (!slot.is_null()).then(|| *slot)
    }
}

/// `arch_prctl`'s "get the fs base" code (asm/prctl.h; not in `libc`).
#[cfg(target_arch = "x86_64")]
const ARCH_GET_FS: libc::c_int = 0x1003;

/// Offset of `otel_thread_ctx_v1` from the thread pointer (x86-64: the fs
/// base), the same on every thread: what the BPF reader adds to
/// `task->thread.fsbase`.
#[cfg(target_arch = "x86_64")]
pub fn slot_offset() -> std::io::Result<i64> {
    let mut fs_base: u64 = 0;
    // SAFETY: ARCH_GET_FS writes the thread's fs base to the given address.
    let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_FS, &mut fs_base as *mut u64) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: only the address of the slot is taken.
    let slot = unsafe { kspan_otel_thread_ctx_slot() } as u64;
    Ok(slot.wrapping_sub(fs_base) as i64)
}

/// A `tracing` layer that publishes the active OpenTelemetry span of each
/// thread after every span enter and exit. Add it after (outside) the
/// tracing-opentelemetry layer, whose enter attaches the span's context:
/// `registry().with(tracing_opentelemetry::layer()...).with(ThreadContextLayer)`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadContextLayer;

impl<S> Layer<S> for ThreadContextLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, _id: &span::Id, ctx: LayerContext<'_, S>) {
        publish_current_or_entered(&ctx);
    }

    fn on_exit(&self, _id: &span::Id, ctx: LayerContext<'_, S>) {
        publish_current_or_entered(&ctx);
    }
}

/// Publishes OpenTelemetry's current span; when there is none, the span of
/// the innermost entered `tracing` span (its OpenTelemetry span is started
/// if it was not yet), or "none".
fn publish_current_or_entered<S>(ctx: &LayerContext<'_, S>)
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    // The common case, context activation on: one thread-local read.
    let published = Context::map_current(|cx| {
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| publish(sc)).is_some()
    });
    if published {
        return;
    }
    let entered = ctx.lookup_current().and_then(|span| {
        tracing::dispatcher::get_default(|dispatch| {
            tracing_opentelemetry::get_otel_context(&mut span.extensions_mut(), dispatch)
        })
    });
    match entered {
        Some(cx) => publish(cx.span().span_context()),
        None => publish(&SpanContext::empty_context()),
    }
}

/// Attaches `cx` as the current OpenTelemetry context (as
/// [`Context::attach`]) and publishes its span; dropping the guard restores
/// the previous context and publishes that. For code that uses the
/// OpenTelemetry context API directly rather than `tracing`.
pub fn attach(cx: Context) -> ThreadContextGuard {
    let guard = cx.attach();
    publish_current();
    ThreadContextGuard { guard: Some(guard) }
}

/// Restores the previous context when dropped (see [`attach`]).
#[derive(Debug)]
pub struct ThreadContextGuard {
    guard: Option<opentelemetry::ContextGuard>,
}

impl Drop for ThreadContextGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        publish_current();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn span(trace: u128, span: u64, sampled: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            if sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            false,
            TraceState::NONE,
        )
    }

    #[test]
    fn the_record_is_laid_out_as_otep_4947_says() {
        let r = ThreadContextRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            valid: 1,
            trace_flags: 1,
            attrs_data_size: 0,
        };
        // SAFETY: the record is plain old data of RECORD_SIZE bytes.
        let bytes: [u8; RECORD_SIZE] = unsafe { std::mem::transmute(r) };
        assert_eq!(&bytes[..16], &[1; 16]);
        assert_eq!(&bytes[16..24], &[2; 8]);
        assert_eq!(bytes[24..], [1, 1, 0, 0]);
    }

    #[test]
    fn the_guard_publishes_and_restores() {
        std::thread::spawn(|| {
            assert_eq!(
                current_record(),
                None,
                "nothing before the first publication"
            );
            let outer = Context::new().with_remote_span_context(span(0xabc, 0x11, true));
            let g1 = attach(outer);
            let r = current_record().unwrap();
            assert_eq!(r.valid, 1);
            assert_eq!(
                r.trace_id,
                0xabc_u128.to_be_bytes(),
                "W3C (big-endian) bytes"
            );
            assert_eq!(r.span_id, 0x11_u64.to_be_bytes());
            assert_eq!(r.trace_flags, 1);
            {
                let inner = Context::new().with_remote_span_context(span(0xabc, 0x22, false));
                let _g2 = attach(inner);
                let r = current_record().unwrap();
                assert_eq!((r.span_id, r.trace_flags), (0x22_u64.to_be_bytes(), 0));
            }
            assert_eq!(current_record().unwrap().span_id, 0x11_u64.to_be_bytes());
            drop(g1);
            assert_eq!(current_record().unwrap().valid, 0, "no active span");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_record_is_unhooked_before_it_is_freed() {
        std::thread::spawn(|| {
            let record = ThreadRecord::new();
            record.publish(&span(5, 6, true));
            assert_eq!(current_record().unwrap().span_id, 6u64.to_be_bytes());
            drop(record);
            assert_eq!(current_record(), None, "the slot no longer points at it");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_have_their_own_records_at_one_offset() {
        let here = slot_offset().unwrap();
        let there = std::thread::spawn(|| {
            publish(&span(1, 2, true));
            (slot_offset().unwrap(), current_record().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(
            here, there.0,
            "initial-exec TLS: one offset for every thread"
        );
        assert!(here < 0, "x86-64 static TLS sits below the thread pointer");
        assert_eq!(there.1.span_id, 2u64.to_be_bytes());
        publish(&span(3, 4, false));
        assert_eq!(current_record().unwrap().span_id, 4u64.to_be_bytes());
    }

    /// The layer under tracing-opentelemetry, with context activation on or
    /// off: inside nested spans the record holds the innermost one, and
    /// after the last exit it says "none".
    fn layer_publishes_entered_spans(activation: bool) {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        use tracing_subscriber::layer::SubscriberExt as _;

        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("test"))
                    .with_context_activation(activation),
            )
            .with(ThreadContextLayer);
        std::thread::spawn(move || {
            tracing::subscriber::with_default(subscriber, || {
                let ids = |span: &tracing::Span| {
                    let cx = span.context();
                    let sc = cx.span().span_context().clone();
                    (sc.trace_id().to_bytes(), sc.span_id().to_bytes())
                };
                let published = || {
                    let r = current_record().expect("published");
                    (r.valid, r.trace_id, r.span_id)
                };
                let outer = tracing::info_span!("outer");
                let inner = tracing::info_span!(parent: &outer, "inner");
                {
                    let _o = outer.enter();
                    let (trace, id) = ids(&outer);
                    assert_eq!(published(), (1, trace, id), "outer entered");
                    {
                        let _i = inner.enter();
                        let (inner_trace, inner_id) = ids(&inner);
                        assert_eq!(inner_trace, trace, "one trace");
                        assert_eq!(published(), (1, trace, inner_id), "inner entered");
                    }
                    assert_eq!(published(), (1, trace, id), "back in outer");
                }
                assert_eq!(published().0, 0, "no span entered");
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_layer_publishes_entered_spans_with_context_activation() {
        layer_publishes_entered_spans(true);
    }

    #[test]
    fn the_layer_publishes_entered_spans_without_context_activation() {
        layer_publishes_entered_spans(false);
    }
}
