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
//! a thread's first update. Attributes (`attrs-data`) are those a
//! [`ContextPublisher`] in the tracer provider chose (`http.route`...),
//! encoded once per span when it starts, copied with the ids.
//!
//! Readers other than kspan look for the records only once the process's
//! OTEP 4719 process context (`process`) says the process has them
//! (`threadlocal.schema_version`) and how their attribute indexes read
//! (`threadlocal.attribute_key_map`); it also carries the service's
//! resource. [`register_observer`] and kspan's start publish it, and a
//! [`ContextPublisher`] when the provider is built.
//!
//! What is published is OpenTelemetry's current context of the thread, and
//! the SDK's own hook for this is the context observer
//! (`opentelemetry::context::ContextObserver`, made for OTEP 4947
//! publishers): [`ThreadContextObserver`] sees every context switch, from
//! the OpenTelemetry API (`tracer.in_span`, `Context::attach`) and from
//! tracing-opentelemetry's context activation alike, and its view of each
//! context is the record itself, prepared once when the context is made, so
//! a switch is a 26-byte copy. The process has one observer;
//! [`register_observer`] installs kspan's and reports another one already
//! there instead of losing it.
//!
//! What the observer cannot see are `tracing` spans when
//! tracing-opentelemetry's context activation is off (nothing is attached):
//! [`EnteredSpanLayer`] publishes the OpenTelemetry span of the innermost
//! entered `tracing` span then (and the observer leaves it the record while
//! a span it published is entered and no OpenTelemetry span is attached).
//! For a process whose observer is someone else's, [`EnteredSpanLayer`]
//! publishes after each `tracing` enter and exit (with context activation
//! on or off), and [`attach`] after each `Context::attach`.
//!
//! The slot is defined in C (`csrc/thread_ctx.c`) because stable Rust cannot
//! give a thread-local an exported symbol name. It is compiled with the
//! TLSDESC dialect OTEP 4947 recommends; linked into an executable, the
//! linker relaxes the access to local-exec, so the slot sits at the same
//! offset from the thread pointer on every thread, which is how kspan's BPF
//! reader finds it ([`slot_offset`]), and the code is what initial-exec gave
//! (the observer never touches the slot after a thread's first publication:
//! it writes through the record pointer it keeps). For other readers the
//! symbol must be in the executable's dynamic symbol table, which only the
//! executable's own link can arrange: the service's `build.rs` calls
//! `kspan_build::export_thread_context_symbol()` (README; kspan's examples
//! do).
//!
//! Records live in memory of their own (`arena`), and a registry knows
//! which thread owns which (`registry`), so that a runtime on a kernel
//! that can pin user memory for BPF programs registers each record with
//! the kernel and its programs read it without copying from user memory.
//!
// Without the `tracing` feature the layers are absent: their links lead to
// the crate's feature flags.
#![cfg_attr(
    not(feature = "tracing"),
    doc = "[`EnteredSpanLayer`]: crate#feature-flags"
)]

use std::any::Any;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::Arc;

use opentelemetry::context::{ContextObserver, GlobalContextObserver, ObserverContextView};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;

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
    /// Bytes of attributes after the record (`attrs-data`, at most
    /// [`ATTRS_CAPACITY`]), from a [`ContextPublisher`]'s chosen keys.
    pub attrs_data_size: u16,
}

/// Bytes of the record's fixed part, as readers read it.
pub const RECORD_SIZE: usize = 28;

const _: () = assert!(std::mem::size_of::<ThreadContextRecord>() == RECORD_SIZE);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, valid) == 24);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, attrs_data_size) == 26);

mod arena;
#[cfg(feature = "tracing")]
mod layers;
pub mod obi;
pub(crate) mod process;
#[cfg(test)]
mod properties;
pub(crate) mod publisher;
mod registry;
pub(crate) mod thread_pointer;

pub(crate) use process::has_provider_resource;
pub use process::{ProcessContextError, ATTRIBUTE_KEY_MAP_KEY, SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use publisher::AttrBytes;

#[cfg(feature = "tracing")]
use layers::innermost_entered;
#[cfg(feature = "tracing")]
#[allow(deprecated)] // Kept for the programs that still name it.
pub use layers::{EnteredSpanLayer, ThreadContextLayer};

/// Without the `tracing` feature no layer enters spans.
#[cfg(not(feature = "tracing"))]
#[inline]
fn innermost_entered() -> Option<SpanContext> {
    None
}
pub use publisher::{ContextPublisher, RecordAttributesError, ATTRS_CAPACITY};

pub(crate) use registry::{watch as watch_records, RecordPlace, RecordWatch, RecordWatcher};

/// The calling thread's record, made and hooked into the slot on first use;
/// unhooked (slot set to NULL) before it is freed at thread exit. It lives
/// in [`arena`]'s memory (on the heap if none can be mapped), and the
/// [`registry`] knows it while it lives.
struct ThreadRecord {
    /// The record and the room for its attributes.
    slot: NonNull<arena::Slot>,
    /// Whether the slot is the arena's (else a leaked box).
    in_arena: bool,
    tid: u32,
}

impl ThreadRecord {
    fn new() -> Self {
        let tid = current_tid();
        let arena_slot = arena::alloc(tid);
        let in_arena = arena_slot.is_some();
        let slot = arena_slot.unwrap_or_else(|| NonNull::from(Box::leak(Box::default())));
        // SAFETY: the record is the slot's first field (repr(C)).
        let record = unsafe { &raw mut (*slot.as_ptr()).record };
        // Suppressed while the registry's watchers register it: their
        // system calls are kspan's own.
        // SAFETY: the record is ours and no reader has it yet.
        unsafe { record.write(ThreadContextRecord::SUPPRESSED) };
        registry::made(tid, arena_slot.map(|s| s.as_ptr() as usize), || {
            // SAFETY: the accessor returns this thread's slot, valid for the
            // thread's life; the record is ours and outlives the hook (see
            // Drop).
            unsafe { *kspan_otel_thread_ctx_slot() = record };
        });
        let made = ThreadRecord {
            slot,
            in_arena,
            tid,
        };
        made.publish(&ThreadContextRecord::default(), &AttrBytes::EMPTY);
        made
    }

    /// Writes `prepared` (its `valid` 0 means "no active span") with its
    /// attributes.
    #[inline]
    fn publish(&self, prepared: &ThreadContextRecord, attrs: &AttrBytes) {
        let slot = self.slot.as_ptr();
        // SAFETY: the slot is this thread's own, alive while `self` is;
        // only this thread writes it. Volatile stores and compiler fences
        // keep `valid` around the other stores, as OTEP 4947 asks.
        unsafe {
            let record = &raw mut (*slot).record;
            std::ptr::write_volatile(&raw mut (*record).valid, 0);
            compiler_fence(Ordering::SeqCst);
            if prepared.valid == 1 {
                (*record).trace_id = prepared.trace_id;
                (*record).span_id = prepared.span_id;
                (*record).trace_flags = prepared.trace_flags;
                let data = attrs.as_slice();
                (&raw mut (*slot).attrs)
                    .cast::<u8>()
                    .copy_from_nonoverlapping(data.as_ptr(), data.len());
                (*record).attrs_data_size = data.len() as u16;
                compiler_fence(Ordering::SeqCst);
                std::ptr::write_volatile(&raw mut (*record).valid, 1);
            }
        }
    }
}

impl Drop for ThreadRecord {
    fn drop(&mut self) {
        obi::released(self);
        // Unhook first, so that no reader follows the pointer into reused
        // or freed memory, then give back what `new` took (a released slot
        // has no owner, so its registration reads as no record).
        registry::released(self.tid, || {
            // SAFETY: the accessor returns this thread's slot, valid for
            // the thread's life.
            unsafe { *kspan_otel_thread_ctx_slot() = std::ptr::null_mut() };
            compiler_fence(Ordering::SeqCst);
        });
        // SAFETY: the record is unhooked and ours; `new` took it from the
        // arena or leaked it from a box.
        unsafe {
            if self.in_arena {
                arena::release(self.slot);
            } else {
                drop(Box::from_raw(self.slot.as_ptr()));
            }
        }
    }
}

thread_local! {
    static RECORD: ThreadRecord = ThreadRecord::new();
    /// The calling thread's kernel id, once asked ([`current_tid`]).
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's kernel thread id, asked of the kernel once per
/// thread (span ends ask it for every application span).
pub(crate) fn current_tid() -> u32 {
    TID.with(|tid| {
        if tid.get() == 0 {
            // SAFETY: gettid has no preconditions.
            tid.set(unsafe { libc::gettid() } as u32);
        }
        tid.get()
    })
}

/// Publishes OpenTelemetry's current context of the calling thread.
#[inline]
pub fn publish_current() {
    Context::map_current(|cx| publish(cx.span().span_context()));
}

/// Publishes `span` as the calling thread's active span (an invalid span
/// context marks the record invalid: no active span), with the attributes
/// a [`ContextPublisher`] took from it.
#[inline]
pub fn publish(span: &SpanContext) {
    let record = ThreadContextRecord::of(span);
    publish_record(&record, &publisher::of_span(record.span_key()));
}

/// Publishes a prepared record on the calling thread.
#[inline]
fn publish_record(prepared: &ThreadContextRecord, attrs: &AttrBytes) {
    // `try_with`: during thread teardown the record may be gone already.
    let _ = RECORD.try_with(|r| r.publish(prepared, attrs));
    if let Some(switched) = SWITCHED.get() {
        switched(prepared.span_key());
    }
    obi::published(prepared, attrs);
}

/// Told of every publication: the calling thread's current span is now
/// the one given (its id as a number; 0 for none, or for a thread that
/// suppresses telemetry). The scheduler's account hands its time base
/// here ([`on_switch`]); this module knows nothing of it.
static SWITCHED: std::sync::OnceLock<fn(u64)> = std::sync::OnceLock::new();

/// Hands `hook` every publication from now on, for the life of the
/// process (a hook that is off costs it one load). The first hook stays.
pub(crate) fn on_switch(hook: fn(u64)) {
    let _ = SWITCHED.set(hook);
}

impl ThreadContextRecord {
    /// The record of a thread whose context suppresses telemetry
    /// (`Context::enter_telemetry_suppressed_scope`: an exporter exporting,
    /// kspan's own threads): valid, with the all-zero ids no span has, which
    /// OTEP 4947 readers take as "no span" and kspan's programs as "do not
    /// trace this thread's calls".
    pub const SUPPRESSED: ThreadContextRecord = ThreadContextRecord {
        trace_id: [0; 16],
        span_id: [0; 8],
        valid: 1,
        trace_flags: 0,
        attrs_data_size: 0,
    };

    /// The span id as the kernel's maps key it (big-endian bytes as a
    /// number); 0 for no span, or a thread that suppresses telemetry.
    #[inline]
    pub(crate) fn span_key(&self) -> u64 {
        if self.valid != 1 {
            return 0;
        }
        u64::from_be_bytes(self.span_id)
    }

    /// The record for `cx`: [`Self::SUPPRESSED`] when it suppresses
    /// telemetry, else that of its span.
    pub fn of_context(cx: &Context) -> Self {
        if cx.is_telemetry_suppressed() {
            return ThreadContextRecord::SUPPRESSED;
        }
        ThreadContextRecord::of(cx.span().span_context())
    }

    /// The record for `span`: valid with its ids when the span context is
    /// valid, "no active span" otherwise.
    pub fn of(span: &SpanContext) -> Self {
        if !span.is_valid() {
            return ThreadContextRecord::default();
        }
        ThreadContextRecord {
            trace_id: span.trace_id().to_bytes(),
            span_id: span.span_id().to_bytes(),
            valid: 1,
            trace_flags: span.trace_flags().to_u8(),
            attrs_data_size: 0,
        }
    }
}

/// kspan's [`ContextObserver`]: publishes the context each switch makes
/// current. Its view of a context ([`ObserverContextView`]) is the record,
/// prepared when the context is made; a context made before the observer
/// was registered has none and is read on the spot.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadContextObserver;

/// [`ThreadContextObserver`]'s view of a context: its record and the
/// record's attributes.
#[derive(Debug)]
struct PreparedRecord(ThreadContextRecord, AttrBytes);

impl ObserverContextView for PreparedRecord {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ThreadContextObserver {
    /// Publishes `cx`. Only getters of `cx` are used: the SDK calls
    /// observers while it holds the thread's context stack.
    ///
    /// A context with no span leaves the record to [`EnteredSpanLayer`]
    /// when that layer has a span entered on this thread (context
    /// activation off, where attached contexts are the OpenTelemetry API's
    /// alone).
    #[inline]
    fn publish(cx: &Context) {
        let prepared = cx
            .observer_view()
            .as_ref()
            .and_then(|view| view.as_any().downcast_ref::<PreparedRecord>());
        let read_now;
        let PreparedRecord(record, attrs) = match prepared {
            Some(prepared) => prepared,
            None => {
                let record = ThreadContextRecord::of_context(cx);
                read_now = PreparedRecord(record, publisher::of_span(record.span_key()));
                &read_now
            }
        };
        if record.valid != 1 {
            if let Some(entered) = innermost_entered() {
                publish(&entered);
                return;
            }
        }
        publish_record(record, attrs);
    }
}

impl ContextObserver for ThreadContextObserver {
    fn on_context_enter(&self, _from: &Context, to: &Context) {
        Self::publish(to);
    }

    fn on_context_exit(&self, _from: &Context, to: &Context) {
        Self::publish(to);
    }

    fn make_view(&self, cx: &Context) -> Option<Arc<dyn ObserverContextView>> {
        if UNOBSERVED.with(Cell::get) {
            return None;
        }
        let record = ThreadContextRecord::of_context(cx);
        let attrs = publisher::of_span(record.span_key());
        Some(Arc::new(PreparedRecord(record, attrs)))
    }
}

/// While alive, the calling thread suppresses telemetry: its OpenTelemetry
/// context says so (for the SDK's components) and its record is
/// [`ThreadContextRecord::SUPPRESSED`] (for kspan's programs, whoever the
/// context observer is), so kspan's own work makes no kernel spans.
pub(crate) struct Suppressed {
    previous: Option<ThreadContextRecord>,
    _context: opentelemetry::ContextGuard,
}

/// Suppresses telemetry on the calling thread until the guard is dropped.
pub(crate) fn suppress() -> Suppressed {
    let context = Context::enter_telemetry_suppressed_scope();
    let previous = current_record();
    publish_record(&ThreadContextRecord::SUPPRESSED, &AttrBytes::EMPTY);
    Suppressed {
        previous,
        _context: context,
    }
}

impl Drop for Suppressed {
    fn drop(&mut self) {
        // The context guard, dropped after this, restores the context (and
        // kspan's observer its record); this restores the record for any
        // other observer.
        let previous = self.previous.unwrap_or_default();
        publish_record(&previous, &publisher::of_span(previous.span_key()));
    }
}

thread_local! {
    /// Set while kspan makes contexts that are never attached (the parents
    /// it builds kernel spans under): they need no prepared record.
    static UNOBSERVED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `make`, which makes contexts that will never be attached, without
/// preparing their records.
pub(crate) fn unobserved<R>(make: impl FnOnce() -> R) -> R {
    /// Restores the flag however `make` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNOBSERVED.with(|u| u.set(self.0));
        }
    }
    let _restore = Restore(UNOBSERVED.with(|u| u.replace(true)));
    make()
}

/// The process's context observer is another one than kspan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "another OpenTelemetry context observer is already registered in this process \
     (`opentelemetry::context::GlobalContextObserver::set`, one per process), so kspan's \
     cannot see context switches to publish the thread context; remove that registration, \
     or keep it, call `KspanBuilder::context_observer(false)` and publish yourself: \
     `kspan::context::EnteredSpanLayer::new()` after the tracing-opentelemetry layer for \
     `tracing` spans, `kspan::context::attach(cx)` instead of `cx.attach()` for the \
     OpenTelemetry API"
)]
pub struct ObserverTaken;

/// Whose observer a context made now gets a view from: `Some(true)` kspan's,
/// `Some(false)` another's, `None` no view (no observer, or one without
/// views).
fn current_observer_is_ours() -> Option<bool> {
    /// A value to make a fresh context with (a context made by
    /// `with_value` asks the observer for its view).
    struct Probe;
    let cx = Context::new().with_value(Probe);
    let view = cx.observer_view().as_ref()?;
    Some(view.as_any().is::<PreparedRecord>())
}

/// Registers [`ThreadContextObserver`] as the process's context observer;
/// `Ok` when it is (now or already). Call it early (first thing in `main`)
/// to have contexts prepared from the start;
/// [`KspanBuilder::start`](crate::KspanBuilder::start) calls it too.
pub fn register_observer() -> Result<(), ObserverTaken> {
    match current_observer_is_ours() {
        Some(true) => return Ok(()),
        Some(false) => return Err(ObserverTaken),
        None => GlobalContextObserver::set(Arc::new(ThreadContextObserver)),
    }
    match current_observer_is_ours() {
        Some(true) => {
            // The calling thread may be inside a context already: the
            // observer sees only the switches to come.
            publish_current();
            if let Err(e) = publish_process_context() {
                crate::diagnostics::warn_user!(
                    error = %e,
                    "kspan did not publish the OTEP 4719 process context: OTEP 4947 readers \
                     will not look for the thread records"
                );
            }
            Ok(())
        }
        _ => Err(ObserverTaken),
    }
}

/// Whether the executable exports the thread-context record's symbol,
/// `otel_thread_ctx_v1`, in its dynamic symbol table, where readers other
/// than kspan (the OpenTelemetry eBPF profiler) look for it: the service's
/// `build.rs` calling `kspan_build::export_thread_context_symbol()` puts it
/// there.
pub(crate) fn thread_context_symbol_exported() -> bool {
    // SAFETY: the name is a NUL-terminated string; dlsym only looks it up
    // (for a thread-local symbol, it resolves the calling thread's copy).
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"otel_thread_ctx_v1".as_ptr()) }.is_null()
}

/// Publishes the OTEP 4719 process context (or replaces this process's
/// own): the tracer provider's resource, as a [`ContextPublisher`] in it
/// was given it (else the SDK's default resource), and the `threadlocal.*`
/// attributes OTEP 4947 readers look for before they read any record.
/// [`register_observer`] and [`KspanBuilder::start`](crate::KspanBuilder::start)
/// call it.
pub fn publish_process_context() -> Result<(), ProcessContextError> {
    process::publish_current(&publisher::key_map())
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

/// Offset of `otel_thread_ctx_v1` from the thread pointer, the same on
/// every thread: what the BPF reader adds to the thread pointer the kernel
/// keeps in `task_struct` (module `context::thread_pointer`).
pub fn slot_offset() -> std::io::Result<i64> {
    let tp = thread_pointer::current()?;
    // SAFETY: only the address of the slot is taken.
    let slot = unsafe { kspan_otel_thread_ctx_slot() } as u64;
    Ok(slot.wrapping_sub(tp) as i64)
}

/// Attaches `cx` as the current OpenTelemetry context (as
/// [`Context::attach`]) and publishes its span; dropping the guard restores
/// the previous context and publishes that. Only for a process whose
/// context observer is someone else's ([`ObserverTaken`]): with kspan's,
/// `Context::attach` itself is published.
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
    /// (No observer in this process: `attach` alone publishes.)
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

    /// The calling thread's record's attributes, as `(key index, value)`.
    fn record_attributes() -> Vec<(u8, String)> {
        // SAFETY: reads this thread's own slot and the record's attributes,
        // which follow it in its arena slot.
        let data = unsafe {
            let record = *kspan_otel_thread_ctx_slot();
            let size = usize::from((*record).attrs_data_size);
            std::slice::from_raw_parts(record.cast::<u8>().add(RECORD_SIZE), size).to_vec()
        };
        let mut out = Vec::new();
        let mut at = 0;
        while at + 2 <= data.len() {
            let len = usize::from(data[at + 1]);
            out.push((
                data[at],
                String::from_utf8(data[at + 2..at + 2 + len].to_vec()).unwrap(),
            ));
            at += 2 + len;
        }
        out
    }

    #[test]
    fn chosen_attributes_of_a_span_and_its_ancestors_reach_the_record() {
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};
        use opentelemetry::KeyValue;

        let publisher = ContextPublisher::new()
            .record_attributes(["test.route", "test.method"])
            .unwrap();
        let map = publisher.key_map();
        let route = map.iter().position(|k| k == "test.route").unwrap() as u8;
        let method = map.iter().position(|k| k == "test.method").unwrap() as u8;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(publisher)
            .build();
        let tracer = provider.tracer("test");
        std::thread::spawn(move || {
            let request = tracer
                .span_builder("GET")
                .with_attributes([
                    KeyValue::new("test.route", "/users/:id"),
                    KeyValue::new("test.method", "GET"),
                    KeyValue::new("other", "not chosen"),
                ])
                .start(&tracer);
            let request_cx = Context::new().with_span(request);
            let g = attach(request_cx.clone());
            let mut seen = record_attributes();
            seen.sort();
            assert_eq!(
                seen,
                [(route, "/users/:id".to_owned()), (method, "GET".to_owned())]
            );
            {
                // A child with a route of its own keeps the method.
                let child = tracer
                    .span_builder("inner")
                    .with_attributes([KeyValue::new("test.route", "/inner")])
                    .start_with_context(&tracer, &request_cx);
                let _c = attach(request_cx.with_span(child));
                let mut seen = record_attributes();
                seen.sort();
                assert_eq!(
                    seen,
                    [(route, "/inner".to_owned()), (method, "GET".to_owned())]
                );
            }
            drop(g);
            assert_eq!(current_record().unwrap().valid, 0);
            request_cx.span().end();
            // An ended span's attributes are forgotten.
            let id = u64::from_be_bytes(request_cx.span().span_context().span_id().to_bytes());
            assert_eq!(publisher::of_span(id), AttrBytes::EMPTY);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_process_context_is_published_once_and_replaced() {
        publish_process_context().unwrap();
        let header = process::published_header().expect("published");
        let named = |maps: &str| {
            maps.lines()
                .filter(|l| l.contains("OTEL_CTX"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let before = named(&std::fs::read_to_string("/proc/self/maps").unwrap());
        assert_eq!(before.len(), 1, "{before:?}");
        assert!(
            before[0].starts_with(&format!("{header:x}-")),
            "{before:?} at {header:x}"
        );
        // SAFETY: the header is this process's mapping, 32 bytes.
        let (signature, version, first) = unsafe {
            let h = header as *const u8;
            (
                std::slice::from_raw_parts(h, 8).to_vec(),
                (h.add(8) as *const u32).read(),
                (h.add(16) as *const u64).read(),
            )
        };
        assert_eq!(signature, b"OTEL_CTX");
        assert_eq!(version, 2);
        assert_ne!(first, 0);
        // New keys change the payload: the same header, a later timestamp.
        let _ = ContextPublisher::new().record_attributes(["test.replaced"]);
        publish_process_context().unwrap();
        assert_eq!(process::published_header(), Some(header));
        let after = named(&std::fs::read_to_string("/proc/self/maps").unwrap());
        assert_eq!(after, before, "replaced, not duplicated");
        // SAFETY: as above.
        let second = unsafe { ((header as *const u8).add(16) as *const u64).read() };
        assert!(second > first, "{second} after {first}");
    }

    #[test]
    fn a_record_lives_where_the_kernel_can_always_read_it() {
        publish(&span(7, 7, true));
        // SAFETY: reads this thread's own slot.
        let record = unsafe { *kspan_otel_thread_ctx_slot() } as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // The mapping holding the record, and its flags.
        let mut inside = false;
        let flags = smaps
            .lines()
            .find_map(|line| {
                let range = line.split_whitespace().next().unwrap_or("");
                if let Some((from, to)) = range.split_once('-') {
                    if let (Ok(from), Ok(to)) = (
                        usize::from_str_radix(from, 16),
                        usize::from_str_radix(to, 16),
                    ) {
                        inside = (from..to).contains(&record);
                        return None;
                    }
                }
                line.strip_prefix("VmFlags:").filter(|_| inside)
            })
            .expect("the record's mapping is in smaps");
        let flags: Vec<&str> = flags.split_whitespace().collect();
        assert!(flags.contains(&"nh"), "no huge pages: {flags:?}");
        // Locked where the limit allows; the tests run as root.
        assert!(flags.contains(&"lo"), "locked: {flags:?}");
    }

    #[test]
    fn a_record_is_unhooked_before_it_is_freed() {
        std::thread::spawn(|| {
            let record = ThreadRecord::new();
            record.publish(
                &ThreadContextRecord::of(&span(5, 6, true)),
                &AttrBytes::EMPTY,
            );
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
        assert_eq!(
            here < 0,
            thread_pointer::TLS_BELOW_THREAD_POINTER,
            "static TLS on the side of the thread pointer this architecture puts it"
        );
        assert_eq!(there.1.span_id, 2u64.to_be_bytes());
        publish(&span(3, 4, false));
        assert_eq!(current_record().unwrap().span_id, 4u64.to_be_bytes());
    }
}
